//! Where glibc keeps a thread's kernel id in its `struct pthread`, as
//! libthread_db (and so gdb) reads it: a `pthread_t` is that struct's
//! address, so an interpreter that records its threads by `pthread_t`
//! (CPython before 3.11, Ruby) has their native ids at this offset.
use super::maps::{module_name, Backing, ProcessMaps};
use object::{Object, ObjectSection, ObjectSymbol};
use std::path::Path;

/// The offset of `tid` in the `struct pthread` of the glibc process `pid`
/// (executable mappings `maps`) runs, read from the descriptor
/// `_thread_db_pthread_tid` glibc exports for libthread_db: three 32-bit
/// words, the field's bits, its count and its offset.
pub fn tid_offset(pid: u32, maps: &ProcessMaps) -> Result<u64, String> {
    let path = (maps.iter())
        .find_map(|m| match &m.backing {
            Backing::File(path) if module_name(path).starts_with("libc.so") => Some(path),
            _ => None,
        })
        .ok_or("the process maps no glibc (libc.so)")?;
    let readable = Path::new("/proc")
        .join(pid.to_string())
        .join("root")
        .join(path.strip_prefix("/").unwrap_or(path));
    let file = std::fs::File::open(&readable)
        .map_err(|e| format!("cannot read {}: {e}", readable.display()))?;
    let data = object::ReadCache::new(file);
    let elf = object::File::parse(&data)
        .map_err(|e| format!("{} is not an ELF file: {e}", readable.display()))?;
    let symbol = (elf.dynamic_symbols())
        .find(|s| s.name() == Ok("_thread_db_pthread_tid"))
        .ok_or_else(|| {
            format!(
                "{} exports no _thread_db_pthread_tid (not glibc?)",
                path.display()
            )
        })?;
    let words = (symbol.section_index())
        .and_then(|i| elf.section_by_index(i).ok())
        .and_then(|s| s.data_range(symbol.address(), 12).ok().flatten())
        .ok_or("cannot read _thread_db_pthread_tid's words")?;
    descriptor_offset(words)
}

/// The offset a libthread_db descriptor gives, for a 32-bit field.
fn descriptor_offset(words: &[u8]) -> Result<u64, String> {
    let word = |i: usize| u32::from_le_bytes(words[4 * i..4 * i + 4].try_into().expect("4"));
    match (word(0), word(1)) {
        (32, 1) => Ok(u64::from(word(2))),
        (bits, count) => Err(format!(
            "_thread_db_pthread_tid describes {count} field(s) of {bits} bits, not one of 32"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread of this process, read through the offset found in its
    /// glibc, gives its kernel id.
    #[test]
    fn the_offset_gives_a_threads_kernel_id() {
        use crate::process::memory::{Memory, ProcessMemory};
        use std::os::unix::thread::JoinHandleExt;
        let pid = std::process::id();
        let maps = ProcessMaps::read(pid).expect("own maps");
        let offset = tid_offset(pid, &maps).expect("glibc's descriptor");
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let me = std::fs::read_link("/proc/thread-self").expect("thread-self");
            let tid: u32 = (me.file_name().and_then(|n| n.to_str()))
                .and_then(|n| n.parse().ok())
                .expect("a thread id");
            tx.send(tid).expect("sent");
            let _ = done_rx.recv();
        });
        let tid = rx.recv().expect("received");
        let mem = ProcessMemory::open(pid).expect("own memory");
        let read = mem.u32_at(thread.as_pthread_t() as u64 + offset);
        done_tx.send(()).expect("sent");
        thread.join().expect("joined");
        assert_eq!(read.expect("readable"), tid);
    }

    #[test]
    fn a_descriptor_of_another_shape_is_refused() {
        let words: Vec<u8> = [32u32, 1, 720]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        assert_eq!(descriptor_offset(&words), Ok(720));
        let words: Vec<u8> = [64u32, 1, 720]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        assert!(descriptor_offset(&words).is_err());
    }
}
