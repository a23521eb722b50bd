//! The BPF program that reads interpreter frames at sample time
//! (`python.bpf.c` for CPython, `ruby.bpf.h` for CRuby, `perl.bpf.h` for
//! Perl): loaded once,
//! given to the sampling events of targets that run an interpreter, told
//! each such process's runtime and layout, and its records paired with the
//! samples by thread and time.
use aya::maps::{HashMap as BpfHashMap, MapData, RingBuf};
use aya::programs::PerfEvent;
use aya::{Ebpf, EbpfLoader};
use foldhash::HashMap;
use std::collections::VecDeque;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex, OnceLock};

/// The program, as clang built it (empty when it was not), aligned as the
/// ELF reader needs its headers.
static OBJECT: &Aligned<[u8]> =
    &Aligned(*include_bytes!(concat!(env!("OUT_DIR"), "/python.bpf.o")));

#[repr(C, align(8))]
struct Aligned<T: ?Sized>(T);

/// A record's fields before its frames, and each frame's (`struct frame`).
const HEADER_BYTES: usize = 24;
const FRAME_RECORD_BYTES: usize = 56;
/// How far from its sample's time a record's may be: the program runs in
/// the sample's overflow, microseconds after the kernel timed the sample
/// (and a thread's samples of one event are a period apart).
const PAIRED_WITHIN_NS: u64 = 200_000;
/// Records kept at most this long after the newest: samples are counted
/// within a drain or two of being taken (a sample counted later than this
/// finds no record, and is counted unreadable).
const KEPT_NS: u64 = 3_000_000_000;
/// Bytes of records kept at most, all threads together (the oldest go
/// first).
const MAX_KEPT_BYTES: usize = 4 << 20;

/// Words of `struct config`.
const CONFIG_WORDS: usize = 16;

/// Where CPython keeps what the program follows, for one process: the
/// fields of `struct config` in `python.bpf.c`, in its order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    pub runtime: u64,
    pub interpreters: u64,
    pub interp_next: u64,
    pub interp_threads: u64,
    pub thread_next: u64,
    /// Where a thread state names its thread: by native id, or by
    /// `pthread_t` when `pthread_tid` (where glibc's `struct pthread`
    /// keeps the native id) is given.
    pub thread_id: u64,
    pub pthread_tid: Option<u64>,
    pub thread_current: u64,
    /// None when the thread state holds the frame itself (3.13).
    pub cframe_current: Option<u64>,
    pub frame_previous: u64,
    pub frame_code: u64,
    pub frame_instr: u64,
    /// None when frames have no owner byte (before 3.11).
    pub frame_owner: Option<u64>,
    /// None when no byte says a frame is an entry (3.12 on).
    pub frame_entry: Option<u64>,
    /// `PyCodeObject.co_filename`, where the four pointers that identify a
    /// code object begin.
    pub code_identity: u64,
    /// Bytes of a frame read: every field read lies in them.
    pub frame_bytes: u64,
}

impl Config {
    fn words(&self) -> [u64; CONFIG_WORDS] {
        [
            self.runtime,
            self.interpreters,
            self.interp_next,
            self.interp_threads,
            self.thread_next,
            self.thread_id,
            self.thread_current,
            self.cframe_current.unwrap_or(u64::MAX),
            self.frame_previous,
            self.frame_code,
            self.frame_instr,
            self.frame_owner.unwrap_or(u64::MAX),
            self.frame_entry.unwrap_or(u64::MAX),
            self.code_identity,
            self.pthread_tid.unwrap_or(u64::MAX),
            self.frame_bytes,
        ]
    }
}

/// Words of `struct ruby_config`.
const RUBY_CONFIG_WORDS: usize = 11;

/// Where CRuby keeps what the program follows, for one process: the
/// fields of `struct ruby_config` in `ruby.bpf.h`, in its order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RubyConfig {
    /// Where `ruby_current_vm_ptr` is.
    pub vm_ptr: u64,
    pub vm_main_ractor: u64,
    pub ractor_threads: u64,
    pub thread_tid: u64,
    pub thread_ec: u64,
    pub cfp_bytes: u64,
    pub cfp_pc: u64,
    pub cfp_iseq: u64,
    pub cfp_ep: u64,
    pub iseq_body: u64,
    /// `rb_iseq_constant_body.location.pathobj`, where the three words
    /// that identify an iseq with its body begin.
    pub body_location: u64,
}

impl RubyConfig {
    fn words(&self) -> [u64; RUBY_CONFIG_WORDS] {
        [
            self.vm_ptr,
            self.vm_main_ractor,
            self.ractor_threads,
            self.thread_tid,
            self.thread_ec,
            self.cfp_bytes,
            self.cfp_pc,
            self.cfp_iseq,
            self.cfp_ep,
            self.iseq_body,
            self.body_location,
        ]
    }
}

/// Words of `struct perl_config`.
const PERL_CONFIG_WORDS: usize = 17;

/// Where Perl keeps what the program follows, for one process: the fields
/// of `struct perl_config` in `perl.bpf.h`, in its order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PerlConfig {
    /// Where `PL_curinterp` is.
    pub interp_ptr: u64,
    pub interp_op: u64,
    pub interp_curcop: u64,
    pub interp_stackinfo: u64,
    pub interp_phase: u64,
    pub si_cxstack: u64,
    pub si_prev: u64,
    pub si_cxix: u64,
    pub si_type: u64,
    pub cx_bytes: u64,
    pub cx_oldcop: u64,
    pub cx_retop: u64,
    pub cx_cv: u64,
    /// `XPVCV.xcv_start_u` and `.xcv_gv_u`, which identify a CV with its
    /// body.
    pub cv_start: u64,
    pub cv_gv: u64,
    /// `COP.cop_line`, `.cop_file`.
    pub cop_line: u64,
    pub cop_file: u64,
}

impl PerlConfig {
    fn words(&self) -> [u64; PERL_CONFIG_WORDS] {
        [
            self.interp_ptr,
            self.interp_op,
            self.interp_curcop,
            self.interp_stackinfo,
            self.interp_phase,
            self.si_cxstack,
            self.si_prev,
            self.si_cxix,
            self.si_type,
            self.cx_bytes,
            self.cx_oldcop,
            self.cx_retop,
            self.cx_cv,
            self.cv_start,
            self.cv_gv,
            self.cop_line,
            self.cop_file,
        ]
    }
}

/// How a record's read went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Read,
    /// No thread state has the sampled thread's id.
    NoThread,
    /// A read of the process's memory failed.
    Fault,
    /// The chain was longer than the program follows.
    Truncated,
}

/// One sample's frames, as the program copied them, innermost first.
#[derive(Debug, Clone)]
pub struct Record {
    pub time: u64,
    pub status: Status,
    pub frames: Vec<RawFrame>,
}

/// What the program keeps of a frame (`struct frame`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RawFrame {
    /// Its code object's address, and its last instruction's (Ruby: its
    /// iseq's, and its pc; Perl: its CV's, 0 for a frame with none, and
    /// its line).
    pub code: u64,
    pub instr: u64,
    /// What identifies the code object: its file name's, name's, qualified
    /// name's and line table's addresses (zeros in an entry shim). Ruby:
    /// the iseq's body's, path's, the frame's method entry's and the
    /// iseq's label's. Perl: the CV's body's, its body's start op's and
    /// GV's, and the frame's file name's.
    pub identity: [u64; 4],
    /// Its `owner` byte, and its `is_entry` byte (0 where there is none).
    /// Ruby: 0, and whether the frame has VM_FRAME_FLAG_FINISH. Perl: the
    /// sub's context type (0xfe for a sort or regex block, 0xff for the
    /// main program), and whether a call of the run loop began with the
    /// frame.
    pub owner: u8,
    pub entry: u8,
}

/// The loaded program and its maps.
pub struct PythonProbe {
    program: OwnedFd,
    inner: Mutex<Inner>,
}

struct Inner {
    /// Holds the program loaded.
    _ebpf: Ebpf,
    procs: BpfHashMap<MapData, u32, [u64; CONFIG_WORDS]>,
    ruby_procs: BpfHashMap<MapData, u32, [u64; RUBY_CONFIG_WORDS]>,
    perl_procs: BpfHashMap<MapData, u32, [u64; PERL_CONFIG_WORDS]>,
    records: RingBuf<MapData>,
    /// Records read out of the ring, by thread, oldest first: each sample
    /// may be counted by several sessions, so a record stays until it is
    /// too old.
    kept: HashMap<u32, VecDeque<Arc<Record>>>,
    /// Bytes the kept records hold.
    kept_bytes: usize,
    /// Sessions that asked for each process.
    users: HashMap<u32, usize>,
}

static PROBE: OnceLock<Result<PythonProbe, String>> = OnceLock::new();

impl PythonProbe {
    /// The program, loaded at the first call; why not, when it cannot be.
    pub fn get() -> Result<&'static PythonProbe, &'static str> {
        let loaded = PROBE.get_or_init(|| {
            let probe = PythonProbe::load();
            match &probe {
                Ok(_) => {
                    tracing::info!("loaded the BPF program that reads Python, Ruby and Perl frames")
                }
                Err(err) => {
                    tracing::warn!(%err, "Python, Ruby and Perl frames cannot be read")
                }
            }
            probe
        });
        loaded.as_ref().map_err(String::as_str)
    }

    fn load() -> Result<PythonProbe, String> {
        if OBJECT.0.is_empty() {
            return Err("profd was built without clang, so without its BPF frame reader".into());
        }
        // The program reads no kernel structure: it needs none of the
        // kernel's type information (BTF), which is megabytes to parse.
        let mut ebpf = (EbpfLoader::new().btf(None))
            .load(&OBJECT.0)
            .map_err(|e| match e {
                aya::EbpfError::ParseError(_) => {
                    format!("its BPF object does not parse: {}", chain(&e))
                }
                _ => format!("the kernel refused the BPF program's maps: {}", chain(&e)),
            })?;
        let program: &mut PerfEvent = (ebpf.program_mut("python_frames"))
            .ok_or("the BPF object has no program python_frames")?
            .try_into()
            .map_err(|e| format!("python_frames: {e}"))?;
        program
            .load()
            .map_err(|e| format!("the kernel refused the BPF program: {}", chain(&e)))?;
        let fd = (program.fd().map_err(|e| e.to_string())?.as_fd())
            .try_clone_to_owned()
            .map_err(|e| e.to_string())?;
        let mut map = |name: &str| ebpf.take_map(name).ok_or(format!("no map {name}"));
        let procs = BpfHashMap::try_from(map("procs")?).map_err(|e| e.to_string())?;
        let ruby_procs = BpfHashMap::try_from(map("ruby_procs")?).map_err(|e| e.to_string())?;
        let perl_procs = BpfHashMap::try_from(map("perl_procs")?).map_err(|e| e.to_string())?;
        let records = RingBuf::try_from(map("out")?).map_err(|e| e.to_string())?;
        Ok(PythonProbe {
            program: fd,
            inner: Mutex::new(Inner {
                _ebpf: ebpf,
                procs,
                ruby_procs,
                perl_procs,
                records,
                kept: HashMap::default(),
                kept_bytes: 0,
                users: HashMap::default(),
            }),
        })
    }

    /// The program, for the sampling events (`PERF_EVENT_IOC_SET_BPF`).
    pub fn program(&self) -> BorrowedFd<'_> {
        self.program.as_fd()
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Read the frames of process `tgid`'s threads at their samples, as
    /// `config` says; for one more session when it is read already.
    pub fn register(&self, tgid: u32, config: &Config) -> Result<(), String> {
        let mut inner = self.inner();
        inner
            .procs
            .insert(tgid, config.words(), 0)
            .map_err(|e| format!("registering process {tgid}: {e}"))?;
        *inner.users.entry(tgid).or_default() += 1;
        Ok(())
    }

    /// Read the Ruby frames of process `tgid`'s threads at their samples,
    /// as `config` says; for one more session when it is read already.
    pub fn register_ruby(&self, tgid: u32, config: &RubyConfig) -> Result<(), String> {
        let mut inner = self.inner();
        inner
            .ruby_procs
            .insert(tgid, config.words(), 0)
            .map_err(|e| format!("registering process {tgid}: {e}"))?;
        *inner.users.entry(tgid).or_default() += 1;
        Ok(())
    }

    /// Read the Perl frames of process `tgid`'s main thread at its samples,
    /// as `config` says; for one more session when it is read already.
    pub fn register_perl(&self, tgid: u32, config: &PerlConfig) -> Result<(), String> {
        let mut inner = self.inner();
        inner
            .perl_procs
            .insert(tgid, config.words(), 0)
            .map_err(|e| format!("registering process {tgid}: {e}"))?;
        *inner.users.entry(tgid).or_default() += 1;
        Ok(())
    }

    /// One session less reads process `tgid`; the last one stops the reads.
    pub fn unregister(&self, tgid: u32) {
        let mut inner = self.inner();
        let Some(users) = inner.users.get_mut(&tgid) else {
            return;
        };
        *users -= 1;
        if *users == 0 {
            inner.users.remove(&tgid);
            let _ = inner.procs.remove(&tgid);
            let _ = inner.ruby_procs.remove(&tgid);
            let _ = inner.perl_procs.remove(&tgid);
        }
    }

    /// Move the records written so far out of the ring, whose room is
    /// then free for more (the sampling rings' drains call it; records the
    /// ring has no room for are lost, and their samples unreadable).
    pub fn read_out(&self) {
        self.inner().read_out();
    }

    /// The record of thread `tid`'s sample taken at `time`
    /// (CLOCK_MONOTONIC), if the program made one.
    pub fn record(&self, tid: u32, time: u64) -> Option<Arc<Record>> {
        let mut inner = self.inner();
        // The drain that read the sample moved its record out of the ring
        // (see `sampling::drain`); one not there yet is looked for again.
        if let Some(record) = inner.paired(tid, time) {
            return Some(record);
        }
        inner.read_out();
        inner.paired(tid, time)
    }
}

impl Inner {
    /// The kept record nearest thread `tid`'s sample at `time`, when it is
    /// close enough to be that sample's.
    fn paired(&self, tid: u32, time: u64) -> Option<Arc<Record>> {
        let queue = self.kept.get(&tid)?;
        // The record nearest the sample, close enough to it.
        let after = queue.partition_point(|r| r.time < time);
        let near = |i: usize| queue.get(i).map(|r| (r.time.abs_diff(time), r));
        let (gap, record) = match (after.checked_sub(1).and_then(near), near(after)) {
            (Some(a), Some(b)) => std::cmp::min_by_key(a, b, |&(gap, _)| gap),
            (a, b) => a.or(b)?,
        };
        (gap <= PAIRED_WITHIN_NS).then(|| record.clone())
    }

    /// Move the ring's records to the kept ones, dropping the oldest past
    /// the bounds.
    fn read_out(&mut self) {
        let mut newest = None;
        while let Some(item) = self.records.next() {
            let Some((tid, record)) = parse(&item) else {
                continue;
            };
            newest = newest.max(Some(record.time));
            self.kept_bytes += record.bytes();
            self.kept
                .entry(tid)
                .or_default()
                .push_back(Arc::new(record));
        }
        let Some(newest) = newest else { return };
        let cutoff = newest.saturating_sub(KEPT_NS);
        let mut bytes = self.kept_bytes;
        self.kept.retain(|_, queue| {
            while queue.front().is_some_and(|r| r.time < cutoff) {
                bytes -= queue.pop_front().map_or(0, |r| r.bytes());
            }
            !queue.is_empty()
        });
        // Over the bytes: the oldest records of all threads go first.
        while bytes > MAX_KEPT_BYTES {
            let Some((&tid, _)) = (self.kept.iter())
                .filter_map(|(tid, q)| Some((tid, q.front()?.time)))
                .min_by_key(|&(_, time)| time)
            else {
                break;
            };
            let queue = self.kept.get_mut(&tid).expect("listed");
            bytes -= queue.pop_front().map_or(0, |r| r.bytes());
            if queue.is_empty() {
                self.kept.remove(&tid);
            }
        }
        self.kept_bytes = bytes;
    }
}

impl Record {
    /// Bytes it holds.
    fn bytes(&self) -> usize {
        HEADER_BYTES + self.frames.len() * FRAME_RECORD_BYTES
    }
}

/// An error and its sources, as one line (aya keeps the system's error as
/// a source).
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text = format!("{text}: {s}");
        source = s.source();
    }
    text
}

/// A record as the program wrote it, and its thread.
fn parse(bytes: &[u8]) -> Option<(u32, Record)> {
    let u32_at = |at: usize| Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?));
    let time = u64::from_le_bytes(bytes.get(..8)?.try_into().ok()?);
    let tid = u32_at(8)?;
    let n = u32_at(12)? as usize;
    let status = match u32_at(16)? {
        0 => Status::Read,
        1 => Status::NoThread,
        2 => Status::Fault,
        _ => Status::Truncated,
    };
    let word = |f: &[u8], at: usize| u64::from_le_bytes(f[at..at + 8].try_into().expect("8"));
    let frames = bytes
        .get(HEADER_BYTES..HEADER_BYTES + n * FRAME_RECORD_BYTES)?
        .chunks_exact(FRAME_RECORD_BYTES)
        .map(|f| RawFrame {
            code: word(f, 0),
            instr: word(f, 8),
            identity: [word(f, 16), word(f, 24), word(f, 32), word(f, 40)],
            owner: f[48],
            entry: f[49],
        })
        .collect();
    Some((
        tid,
        Record {
            time,
            status,
            frames,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_parse_as_the_program_writes_them() {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&123u64.to_le_bytes());
        bytes.extend_from_slice(&7u32.to_le_bytes());
        bytes.extend_from_slice(&2u32.to_le_bytes());
        bytes.extend_from_slice(&3u32.to_le_bytes());
        bytes.extend_from_slice(&0u32.to_le_bytes());
        for (code, owner) in [(0x10u64, 0u8), (0x20, 3)] {
            bytes.extend_from_slice(&code.to_le_bytes());
            bytes.extend_from_slice(&(code + 8).to_le_bytes());
            for i in 1..=4u64 {
                bytes.extend_from_slice(&(code * 100 + i).to_le_bytes());
            }
            bytes.extend_from_slice(&[owner, 1, 0, 0, 0, 0, 0, 0]);
        }
        let (tid, r) = parse(&bytes).expect("parses");
        assert_eq!(tid, 7);
        assert_eq!(
            (r.time, r.status, r.frames.len()),
            (123, Status::Truncated, 2)
        );
        let second = RawFrame {
            code: 0x20,
            instr: 0x28,
            identity: [3201, 3202, 3203, 3204],
            owner: 3,
            entry: 1,
        };
        assert_eq!(r.frames[1], second);
        // A record shorter than its count says is not taken.
        assert!(parse(&bytes[..bytes.len() - 1]).is_none());
    }
}
