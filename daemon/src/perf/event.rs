//! One perf sampling event on one CPU and its mmap'd ring: attr setup,
//! perf_event_open, enabling, and draining records with the kernel's
//! data_head/data_tail protocol. Record bytes are handed to `record::parse`.
use super::record::{self, Layout, ParseError, Record};
use perf_event_open_sys as sys;
use perf_event_open_sys::bindings as b;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};

const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;

/// The event that triggers samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// Software hrtimer event: works everywhere.
    CpuClock,
    /// Hardware cycle counter: needs a PMU.
    Cycles,
}

/// Everything that determines how the per-CPU events are opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EventSpec {
    pub kind: EventKind,
    pub frequency_hz: u32,
    /// Data pages of each ring (a power of two).
    pub ring_pages: usize,
    /// Bytes of user stack copied with each sample, with the user registers
    /// needed to unwind it (0 = the kernel's frame-pointer walk instead).
    pub stack_bytes: u32,
}

/// Largest user stack copy the kernel accepts (a record's size is a u16).
pub const MAX_STACK_BYTES: u32 = 65528;

/// User registers copied with stack samples: what unwinding starts from.
pub const USER_REGS: u64 =
    (1 << b::PERF_REG_X86_BP) | (1 << b::PERF_REG_X86_SP) | (1 << b::PERF_REG_X86_IP);

/// Why an event could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum PerfError {
    #[error("perf_event_open was refused ({source}): profd needs root or CAP_PERFMON, or kernel.perf_event_paranoid at most {needed} (it is {paranoid})")]
    Permission {
        source: io::Error,
        paranoid: i32,
        needed: i32,
    },
    #[error("the {event} event is not supported on this machine ({source})")]
    Unsupported {
        event: &'static str,
        source: io::Error,
    },
    #[error("{what} failed on CPU {cpu}: {source}")]
    Io {
        what: &'static str,
        cpu: u32,
        source: io::Error,
    },
}

fn paranoid_level() -> i32 {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(2)
}

/// Online CPUs, from /sys/devices/system/cpu/online (e.g. `0-3,6`).
pub fn online_cpus() -> io::Result<Vec<u32>> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online")?;
    parse_cpu_list(text.trim())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, format!("bad CPU list {text:?}")))
}

fn parse_cpu_list(text: &str) -> Option<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in text.split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => cpus.extend(a.parse::<u32>().ok()?..=b.parse::<u32>().ok()?),
            None => cpus.push(part.parse().ok()?),
        }
    }
    Some(cpus)
}

/// Fields asked of every sample (stack-copy events add the user registers
/// and stack).
pub const SAMPLE_TYPE: u64 = (b::PERF_SAMPLE_IDENTIFIER
    | b::PERF_SAMPLE_IP
    | b::PERF_SAMPLE_TID
    | b::PERF_SAMPLE_TIME
    | b::PERF_SAMPLE_CPU
    | b::PERF_SAMPLE_PERIOD
    | b::PERF_SAMPLE_CALLCHAIN) as u64;

fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).unwrap_or(4096)
}

/// An open, mmap'd sampling event on one CPU.
#[derive(Debug)]
pub struct PerfEvent {
    fd: OwnedFd,
    base: *mut u8,
    map_len: usize,
    data_offset: usize,
    data_size: usize,
    layout: Layout,
    cpu: u32,
    scratch: Vec<u8>,
    /// The kernel counts the samples it dropped (PERF_FORMAT_LOST, Linux 6.0+).
    counts_lost: bool,
    /// The kernel's lost count already accounted for.
    lost_accounted: u64,
}

/// read_format bit: `read()` also returns the samples lost (Linux 6.0+).
const PERF_FORMAT_LOST: u64 = 1 << 4;

// SAFETY: the mapping is owned exclusively by this value (only it reads the
// data area and writes data_tail); moving it to another thread is fine.
unsafe impl Send for PerfEvent {}

impl PerfEvent {
    /// Open `spec` on `cpu` for all processes (pid = -1), map its ring and
    /// enable it.
    pub fn open(cpu: u32, spec: &EventSpec) -> Result<PerfEvent, PerfError> {
        let mut attr = b::perf_event_attr {
            size: std::mem::size_of::<b::perf_event_attr>() as u32,
            ..Default::default()
        };
        let (event_name, type_, config) = match spec.kind {
            EventKind::CpuClock => (
                "cpu-clock",
                b::PERF_TYPE_SOFTWARE,
                b::PERF_COUNT_SW_CPU_CLOCK as u64,
            ),
            EventKind::Cycles => (
                "cycles",
                b::PERF_TYPE_HARDWARE,
                b::PERF_COUNT_HW_CPU_CYCLES as u64,
            ),
        };
        attr.type_ = type_;
        attr.config = config;
        attr.__bindgen_anon_1.sample_freq = u64::from(spec.frequency_hz);
        let (sample_type, regs) = if spec.stack_bytes > 0 {
            let stack = (b::PERF_SAMPLE_REGS_USER | b::PERF_SAMPLE_STACK_USER) as u64;
            attr.sample_regs_user = USER_REGS;
            attr.sample_stack_user = spec.stack_bytes.min(MAX_STACK_BYTES) & !7;
            // The user part comes from unwinding the copy.
            attr.set_exclude_callchain_user(1);
            (SAMPLE_TYPE | stack, USER_REGS)
        } else {
            (SAMPLE_TYPE, 0)
        };
        attr.sample_type = sample_type;
        attr.set_freq(1);
        attr.set_disabled(1);
        attr.set_mmap(1);
        attr.set_mmap2(1);
        attr.set_comm(1);
        attr.set_comm_exec(1);
        attr.set_task(1);
        attr.set_sample_id_all(1);
        attr.set_exclude_guest(1);
        attr.read_format = PERF_FORMAT_LOST;
        let page = page_size();
        let data_size = spec.ring_pages * page;
        attr.set_watermark(1);
        attr.__bindgen_anon_2.wakeup_watermark = (data_size / 4) as u32;

        // SAFETY: `attr` is a valid, fully initialised perf_event_attr whose
        // `size` field matches its type; the kernel only reads it (and may
        // write back `size` on E2BIG).
        let mut fd =
            unsafe { sys::perf_event_open(&mut attr, -1, cpu as i32, -1, PERF_FLAG_FD_CLOEXEC) };
        let counts_lost =
            fd >= 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL);
        if !counts_lost {
            // Before Linux 6.0: no lost count; PERF_RECORD_LOST still reports it.
            attr.read_format = 0;
            // SAFETY: as above.
            fd = unsafe {
                sys::perf_event_open(&mut attr, -1, cpu as i32, -1, PERF_FLAG_FD_CLOEXEC)
            };
        }
        if fd < 0 {
            let source = io::Error::last_os_error();
            return Err(match source.raw_os_error() {
                Some(libc::EACCES) | Some(libc::EPERM) => PerfError::Permission {
                    source,
                    paranoid: paranoid_level(),
                    needed: 0,
                },
                Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) | Some(libc::ENODEV) => {
                    PerfError::Unsupported {
                        event: event_name,
                        source,
                    }
                }
                _ => PerfError::Io {
                    what: "perf_event_open",
                    cpu,
                    source,
                },
            });
        }
        // SAFETY: `fd` was just returned by perf_event_open and is ours alone.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };

        let map_len = page + data_size;
        // SAFETY: mapping a perf fd with length 1 + 2^n pages, shared and
        // read-write, is the documented way to get its ring; we check for
        // MAP_FAILED below and unmap in Drop.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            let source = io::Error::last_os_error();
            return Err(PerfError::Io {
                what: "mmap of the sample ring",
                cpu,
                source,
            });
        }
        let layout =
            Layout::new(sample_type, true, regs).expect("profd's own sample layout is supported");
        let mut event = PerfEvent {
            fd,
            base: base.cast(),
            map_len,
            data_offset: page,
            data_size,
            layout,
            cpu,
            scratch: Vec::new(),
            counts_lost,
            lost_accounted: 0,
        };
        let page_hdr = event.header();
        // SAFETY: `page_hdr` points at the kernel-initialised metadata page
        // of a live mapping; data_offset/data_size are written before mmap
        // returns (kernel >= 4.1) and never change afterwards.
        let (off, size) = unsafe {
            (
                (*page_hdr).data_offset as usize,
                (*page_hdr).data_size as usize,
            )
        };
        if size != 0 {
            event.data_offset = off;
            event.data_size = size;
        }
        // SAFETY: ENABLE takes an fd and an integer flag.
        if unsafe { sys::ioctls::ENABLE(event.fd.as_raw_fd(), 0) } < 0 {
            let source = io::Error::last_os_error();
            return Err(PerfError::Io {
                what: "enabling the event",
                cpu,
                source,
            });
        }
        Ok(event)
    }

    /// Register the ring's fd with tokio's reactor (readable on watermark).
    pub fn into_async(self) -> io::Result<tokio::io::unix::AsyncFd<PerfEvent>> {
        // SAFETY: PerfEvent owns its fd (an OwnedFd closed only on drop) and
        // `as_raw_fd` always returns that same fd.
        unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(self, tokio::io::Interest::READABLE)
        }
        .map_err(io::Error::from)
    }

    /// Whether samples carry user registers and a stack copy.
    pub fn stack_copy(&self) -> bool {
        self.layout.regs_user_count > 0
    }

    /// Samples the kernel dropped on this ring since it was opened (the
    /// ring was full), when the kernel counts them (Linux 6.0+).
    pub fn kernel_lost(&self) -> Option<u64> {
        if !self.counts_lost {
            return None;
        }
        let mut values = [0u64; 2];
        // SAFETY: read() writes at most size_of_val(&values) bytes into the
        // local array; with read_format = PERF_FORMAT_LOST the kernel writes
        // { value, lost }.
        let n = unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                values.as_mut_ptr().cast(),
                std::mem::size_of_val(&values),
            )
        };
        (n == 16).then_some(values[1])
    }

    /// Samples lost since the last call: from the kernel's own count when it
    /// keeps one (exact, including losses not yet reported by a
    /// PERF_RECORD_LOST), else `from_records` (the records just read).
    pub fn new_lost(&mut self, from_records: u64) -> u64 {
        match self.kernel_lost() {
            Some(total) => {
                let new = total.saturating_sub(self.lost_accounted);
                self.lost_accounted = self.lost_accounted.max(total);
                new
            }
            None => from_records,
        }
    }

    /// The CPU this event samples.
    pub fn cpu(&self) -> u32 {
        self.cpu
    }

    fn header(&self) -> *mut b::perf_event_mmap_page {
        self.base.cast()
    }

    /// Hand every complete record in the ring to `f`, then release the space
    /// to the kernel (one data_tail store per call). Returns the bytes read.
    pub fn drain(&mut self, mut f: impl FnMut(Result<Record<'_>, ParseError>)) -> u64 {
        let hdr = self.header();
        // SAFETY: data_head/data_tail are naturally aligned u64 fields of the
        // live metadata page; the kernel writes data_head, we write
        // data_tail. Viewing them as AtomicU64 gives the required ordering.
        let (head_atomic, tail_atomic) = unsafe {
            (
                AtomicU64::from_ptr(std::ptr::addr_of_mut!((*hdr).data_head)),
                AtomicU64::from_ptr(std::ptr::addr_of_mut!((*hdr).data_tail)),
            )
        };
        let head = head_atomic.load(Ordering::Acquire);
        let start = tail_atomic.load(Ordering::Relaxed);
        // SAFETY: the data area [data_offset, data_offset + data_size) lies
        // inside our mapping. Bytes in [tail, head) are complete records the
        // kernel will not touch until we advance data_tail (after this call).
        let data =
            unsafe { std::slice::from_raw_parts(self.base.add(self.data_offset), self.data_size) };
        let tail = walk_ring(data, start, head, &mut self.scratch, |kind, misc, body| {
            f(record::parse(&self.layout, kind, misc, body))
        });
        tail_atomic.store(tail, Ordering::Release);
        tail.wrapping_sub(start)
    }
}

/// Walk the records in `data[tail..head)` (positions modulo the ring size),
/// calling `f(type, misc, body)` for each; bodies that wrap the ring end are
/// copied into `scratch` first. Returns the new tail. A header claiming an
/// impossible size ends the walk at `head` (the rest cannot be framed).
/// Public for the fuzz targets (`fuzz/`); the daemon calls it from `drain`.
pub fn walk_ring(
    data: &[u8],
    mut tail: u64,
    head: u64,
    scratch: &mut Vec<u8>,
    mut f: impl FnMut(u32, u16, &[u8]),
) -> u64 {
    let size = data.len() as u64;
    while head.wrapping_sub(tail) >= 8 {
        let off = (tail % size) as usize;
        // Headers are 8-byte aligned and the ring size is a multiple of 8,
        // so a header never wraps.
        let kind = u32::from_ne_bytes(data[off..off + 4].try_into().expect("4 bytes"));
        let misc = u16::from_ne_bytes(data[off + 4..off + 6].try_into().expect("2 bytes"));
        let len = u64::from(u16::from_ne_bytes(
            data[off + 6..off + 8].try_into().expect("2 bytes"),
        ));
        // The kernel sizes records in whole u64s and never beyond the ring;
        // another size would misalign the next header or overrun the ring.
        if len < 8 || !len.is_multiple_of(8) || len > size || len > head.wrapping_sub(tail) {
            tracing::warn!(
                len,
                "corrupt perf record header; skipping the rest of the ring"
            );
            return head;
        }
        let body_start = (off + 8) % data.len();
        let body_len = (len - 8) as usize;
        if body_start + body_len <= data.len() {
            f(kind, misc, &data[body_start..body_start + body_len]);
        } else {
            let first = data.len() - body_start;
            scratch.clear();
            scratch.extend_from_slice(&data[body_start..]);
            scratch.extend_from_slice(&data[..body_len - first]);
            f(kind, misc, scratch);
        }
        tail = tail.wrapping_add(len);
    }
    tail
}

impl AsRawFd for PerfEvent {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl Drop for PerfEvent {
    fn drop(&mut self) {
        // SAFETY: `base`/`map_len` are exactly what mmap returned; nothing
        // borrows the mapping once we are being dropped.
        unsafe {
            libc::munmap(self.base.cast(), self.map_len);
        }
    }
}

/// Whether a hardware cycle counter can be opened (a PMU is present).
pub fn pmu_available() -> bool {
    let mut attr = b::perf_event_attr {
        size: std::mem::size_of::<b::perf_event_attr>() as u32,
        type_: b::PERF_TYPE_HARDWARE,
        config: b::PERF_COUNT_HW_CPU_CYCLES as u64,
        ..Default::default()
    };
    attr.set_disabled(1);
    attr.set_exclude_kernel(1);
    // SAFETY: a valid counting attr for the calling thread on any CPU.
    let fd = unsafe { sys::perf_event_open(&mut attr, 0, -1, -1, PERF_FLAG_FD_CLOEXEC) };
    if fd < 0 {
        return false;
    }
    // SAFETY: `fd` is a fresh fd returned above; dropping the OwnedFd closes it.
    drop(unsafe { OwnedFd::from_raw_fd(fd) });
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put_record(ring: &mut [u8], pos: u64, kind: u32, body: &[u8]) -> u64 {
        let mut rec = Vec::new();
        rec.extend_from_slice(&kind.to_ne_bytes());
        rec.extend_from_slice(&0u16.to_ne_bytes());
        rec.extend_from_slice(&((8 + body.len()) as u16).to_ne_bytes());
        rec.extend_from_slice(body);
        for (i, byte) in rec.iter().enumerate() {
            let n = ring.len() as u64;
            ring[((pos + i as u64) % n) as usize] = *byte;
        }
        pos + rec.len() as u64
    }

    #[test]
    fn records_wrapping_the_ring_end_are_copied_whole() {
        let mut ring = vec![0u8; 64];
        let body_a: Vec<u8> = (1..=16).collect();
        let body_b: Vec<u8> = (100..124).collect();
        // Start near the end so the second record's body wraps.
        let start = 1000 * 64 + 24;
        let mid = put_record(&mut ring, start, 7, &body_a);
        let head = put_record(&mut ring, mid, 9, &body_b);
        let mut seen = Vec::new();
        let mut scratch = Vec::new();
        let tail = walk_ring(&ring, start, head, &mut scratch, |k, _, body| {
            seen.push((k, body.to_vec()))
        });
        assert_eq!(tail, head);
        assert_eq!(seen, vec![(7, body_a), (9, body_b)]);
    }

    #[test]
    fn partial_and_corrupt_headers_stop_the_walk() {
        let mut ring = vec![0u8; 64];
        let head = put_record(&mut ring, 0, 7, &[0u8; 8]);
        let mut scratch = Vec::new();
        // Fewer than 8 bytes available: nothing read.
        assert_eq!(
            walk_ring(&ring, 0, 4, &mut scratch, |_, _, _| panic!("no record")),
            0
        );
        // A size larger than what the kernel wrote: skip to head, no call.
        ring[6..8].copy_from_slice(&200u16.to_ne_bytes());
        assert_eq!(
            walk_ring(&ring, 0, head, &mut scratch, |_, _, _| panic!("no record")),
            head
        );
    }

    #[test]
    fn sizes_that_cannot_be_framed_stop_the_walk() {
        // Found by fuzz/fuzz_targets/record.rs: both used to panic.
        let mut scratch = Vec::new();
        let mut calls = 0;
        // A size that is not a multiple of 8: the next header would have
        // started 4 bytes before the ring's end and been read past it.
        let mut ring = vec![0u8; 32];
        ring[14..16].copy_from_slice(&20u16.to_ne_bytes());
        let tail = walk_ring(&ring, 8, 40, &mut scratch, |_, _, _| calls += 1);
        assert_eq!((tail, calls), (40, 0));
        // A record larger than the ring (with a head more than a ring ahead,
        // which the kernel never reports): its wrapped copy overran the ring.
        let mut ring = vec![0u8; 64];
        ring[6..8].copy_from_slice(&200u16.to_ne_bytes());
        let tail = walk_ring(&ring, 0, 256, &mut scratch, |_, _, _| calls += 1);
        assert_eq!((tail, calls), (256, 0));
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-1"), Some(vec![0, 1]));
        assert_eq!(parse_cpu_list("0,2-4,7"), Some(vec![0, 2, 3, 4, 7]));
        assert_eq!(parse_cpu_list("x"), None);
    }
}
