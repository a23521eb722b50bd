//! Reading another process's memory: `/proc/PID/mem` (the caller needs
//! the ptrace access the kernel checks on it), or an image of memory in a
//! test.
use std::os::unix::fs::FileExt;

/// Memory of a process, read at its addresses.
pub trait Memory {
    /// Fill `buf` from `addr`.
    fn read(&self, addr: u64, buf: &mut [u8]) -> std::io::Result<()>;

    fn u32_at(&self, addr: u64) -> std::io::Result<u32> {
        let mut b = [0; 4];
        self.read(addr, &mut b)?;
        Ok(u32::from_le_bytes(b))
    }
}

/// A live process's memory.
pub struct ProcessMemory(std::fs::File);

impl ProcessMemory {
    pub fn open(pid: u32) -> std::io::Result<ProcessMemory> {
        std::fs::File::open(format!("/proc/{pid}/mem")).map(ProcessMemory)
    }
}

impl Memory for ProcessMemory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.0.read_exact_at(buf, addr)
    }
}

/// A memory read through, with every read kept (tests make images of
/// real interpreters with it).
#[cfg(test)]
pub struct Recorder<'m, M> {
    inner: &'m M,
    reads: std::cell::RefCell<std::collections::BTreeMap<u64, Vec<u8>>>,
}

#[cfg(test)]
impl<'m, M: Memory> Recorder<'m, M> {
    pub fn new(inner: &'m M) -> Self {
        Recorder {
            inner,
            reads: Default::default(),
        }
    }

    /// The reads as `Image::parse` takes them: a line `ADDR HEX` each.
    pub fn image(&self) -> String {
        let reads = self.reads.borrow();
        reads
            .iter()
            .map(|(addr, bytes)| {
                let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
                format!("{addr:#x} {hex}\n")
            })
            .collect()
    }
}

#[cfg(test)]
impl<M: Memory> Memory for Recorder<'_, M> {
    fn read(&self, addr: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.inner.read(addr, buf)?;
        let mut reads = self.reads.borrow_mut();
        let kept = reads.entry(addr).or_default();
        if kept.len() < buf.len() {
            *kept = buf.to_vec();
        }
        Ok(())
    }
}

/// Memory made of the reads of a [`Recorder`]; what was not read is not
/// there.
#[cfg(test)]
pub struct Image(std::collections::BTreeMap<u64, Vec<u8>>);

#[cfg(test)]
impl Image {
    /// The lines `ADDR HEX` of `text` (other lines are skipped).
    pub fn parse(text: &str) -> Option<Image> {
        let mut reads = std::collections::BTreeMap::new();
        for line in text.lines() {
            let Some((addr, hex)) = line.split_once(' ') else {
                continue;
            };
            let Some(addr) = addr.strip_prefix("0x") else {
                continue;
            };
            let addr = u64::from_str_radix(addr, 16).ok()?;
            let bytes = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
                .collect::<Option<Vec<u8>>>()?;
            reads.insert(addr, bytes);
        }
        Some(Image(reads))
    }
}

#[cfg(test)]
impl Memory for Image {
    fn read(&self, addr: u64, buf: &mut [u8]) -> std::io::Result<()> {
        let end = addr + buf.len() as u64;
        let found = (self.0.range(..=addr).rev())
            .find(|(start, bytes)| **start + bytes.len() as u64 >= end);
        match found {
            Some((start, bytes)) => {
                let at = (addr - start) as usize;
                buf.copy_from_slice(&bytes[at..at + buf.len()]);
                Ok(())
            }
            None => Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{addr:#x}+{} is not in the image", buf.len()),
            )),
        }
    }
}
