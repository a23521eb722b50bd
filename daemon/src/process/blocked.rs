//! What a process's threads are waiting in when an off-CPU or wall session
//! begins, read from `/proc`: each thread's state, its kernel stack (or
//! its wait channel) and, in a system call, its user stack pointer and
//! instruction pointer, with the bytes of its user stack for unwinding. A
//! thread that waits the whole session never switches, so no record of
//! the session's rings ever names it: this is all there is to say where it
//! waits.
use std::collections::{HashMap, HashSet};
use std::io::BufRead;
use std::os::unix::fs::FileExt;

/// A thread off the CPU when it was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    pub tid: u32,
    /// Runnable but not running (`R`, and not the thread reading); the
    /// others read are asleep, in disk wait or stopped.
    pub preempted: bool,
    /// Its kernel stack, innermost first: (function, offset of the return
    /// address in it); its wait channel alone where the stack is not
    /// readable.
    pub kernel: Vec<(String, u64)>,
    /// In a system call: its user instruction and stack pointers.
    pub user: Option<(u64, u64)>,
}

/// The threads of process `pid` off the CPU now (none if it is gone).
/// Threads running, or that could not be read, are left out: a running
/// thread's next switch names it.
pub fn waiting_threads(pid: u32) -> Vec<Waiting> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let tids = tasks.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok());
    tids.filter_map(|tid| waiting(pid, tid)).collect()
}

fn waiting(pid: u32, tid: u32) -> Option<Waiting> {
    let dir = format!("/proc/{pid}/task/{tid}");
    let stat = std::fs::read_to_string(format!("{dir}/stat")).ok()?;
    let state = state(&stat)?;
    let preempted = match state {
        'S' | 'D' | 'T' | 't' | 'I' | 'P' => false,
        'R' => true,
        _ => return None,
    };
    // A runnable thread that is running has no stack to read; `syscall`
    // says "running" then.
    let syscall = std::fs::read_to_string(format!("{dir}/syscall")).ok()?;
    if syscall.trim() == "running" {
        return None;
    }
    let kernel = match std::fs::read_to_string(format!("{dir}/stack")) {
        Ok(text) => kernel_stack(&text),
        Err(_) => std::fs::read_to_string(format!("{dir}/wchan"))
            .ok()
            .filter(|w| !w.is_empty() && w != "0")
            .map(|w| vec![(w.trim().to_string(), 0)])
            .unwrap_or_default(),
    };
    Some(Waiting {
        tid,
        preempted,
        kernel,
        user: user_pointers(&syscall),
    })
}

/// The state letter of a `stat` line (after the command name, which may
/// hold spaces and parentheses).
fn state(stat: &str) -> Option<char> {
    stat.rsplit_once(") ")?.1.chars().next()
}

/// `[<0>] do_nanosleep+0x67/0x190` lines: (function, offset).
fn kernel_stack(text: &str) -> Vec<(String, u64)> {
    text.lines()
        .filter_map(|line| {
            let at = line.split_once("] ")?.1;
            let (name, rest) = at.split_once('+')?;
            let off = rest.split('/').next()?.strip_prefix("0x")?;
            Some((name.to_string(), u64::from_str_radix(off, 16).ok()?))
        })
        .collect()
}

/// The user instruction and stack pointers of a `syscall` file: `NR ARGS…
/// SP PC` in a system call, `-1 SP PC` blocked outside one.
fn user_pointers(syscall: &str) -> Option<(u64, u64)> {
    let words: Vec<&str> = syscall.split_ascii_whitespace().collect();
    let hex = |w: &str| u64::from_str_radix(w.strip_prefix("0x")?, 16).ok();
    match words.as_slice() {
        [.., sp, pc] if words.len() == 9 || words.len() == 3 => {
            let (sp, pc) = (hex(sp)?, hex(pc)?);
            (pc != 0 && sp != 0).then_some((pc, sp))
        }
        _ => None,
    }
}

/// Up to `len` bytes of process `pid`'s memory from `sp` (its stack, up to
/// the end of the mapping where that comes first).
pub fn stack_bytes(pid: u32, sp: u64, len: usize) -> Vec<u8> {
    let Ok(mem) = std::fs::File::open(format!("/proc/{pid}/mem")) else {
        return Vec::new();
    };
    let mut out = vec![0; len];
    let mut got = 0;
    // Page by page: the read stops where the stack's mapping ends.
    while got < len {
        let want = (len - got).min(4096 - ((sp as usize + got) % 4096));
        match mem.read_at(&mut out[got..got + want], sp + got as u64) {
            Ok(0) | Err(_) => break,
            Ok(n) => got += n,
        }
    }
    out.truncate(got);
    out
}

/// The start addresses of the kernel functions `names`, from
/// `/proc/kallsyms` (none where the kernel hides them).
pub fn kernel_starts(names: &HashSet<&str>) -> HashMap<String, u64> {
    let mut out = HashMap::new();
    let Ok(file) = std::fs::File::open("/proc/kallsyms") else {
        return out;
    };
    for line in std::io::BufReader::new(file).lines().map_while(Result::ok) {
        let mut words = line.split_ascii_whitespace();
        let (Some(addr), Some(kind), Some(name)) = (words.next(), words.next(), words.next())
        else {
            continue;
        };
        if matches!(kind, "t" | "T" | "w" | "W") && names.contains(name) {
            if let Ok(addr) = u64::from_str_radix(addr, 16) {
                if addr != 0 {
                    out.entry(name.to_string()).or_insert(addr);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_files_parse() {
        assert_eq!(state("12 (a) b) S 1 2"), Some('S'));
        assert_eq!(
            kernel_stack("[<0>] do_nanosleep+0x67/0x190\n[<0>] hrtimer_nanosleep+0xbd/0x1a0\n"),
            [
                ("do_nanosleep".to_string(), 0x67),
                ("hrtimer_nanosleep".to_string(), 0xbd)
            ]
        );
        let in_call = "0 0x3 0x7ffd 0x1 0x0 0x0 0x0 0x7ffc9a1b2c40 0x7f3a12345678";
        assert_eq!(
            user_pointers(in_call),
            Some((0x7f3a12345678, 0x7ffc9a1b2c40))
        );
        assert_eq!(
            user_pointers("-1 0x7ffc9a1b2c40 0x7f3a12345678"),
            Some((0x7f3a12345678, 0x7ffc9a1b2c40))
        );
        assert_eq!(user_pointers("running"), None);
    }

    /// A thread of this test blocked in read(2) on a pipe is read as
    /// waiting, in a system call, with a kernel stack where root may read
    /// it; its stack's bytes are this process's own.
    #[test]
    fn a_thread_blocked_in_a_read_is_waiting() {
        let (rx, tx) = std::io::pipe().unwrap();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            ready_tx
                .send(rustix::thread::gettid().as_raw_nonzero().get() as u32)
                .unwrap();
            let mut byte = [0u8; 1];
            std::io::Read::read(&mut &rx, &mut byte).unwrap();
        });
        let tid = ready_rx.recv().unwrap();
        let pid = std::process::id();
        // It blocks in the read a moment after it said its tid.
        let found = loop {
            if let Some(w) = waiting_threads(pid).into_iter().find(|w| w.tid == tid) {
                if w.user.is_some() {
                    break w;
                }
            }
            std::thread::yield_now();
        };
        assert!(!found.preempted, "{found:?}");
        let (_, sp) = found.user.unwrap();
        assert_eq!(stack_bytes(pid, sp, 64).len(), 64);
        if rustix::process::geteuid().is_root() {
            assert!(!found.kernel.is_empty(), "{found:?}");
            let names: HashSet<&str> = found.kernel.iter().map(|(n, _)| n.as_str()).collect();
            assert!(!kernel_starts(&names).is_empty());
        }
        std::io::Write::write_all(&mut &tx, b"x").unwrap();
        reader.join().unwrap();
    }
}
