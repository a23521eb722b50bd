//! One CPU's sampling ring: attr setup, perf_event_open (for every process,
//! or for one target's threads and what they create, redirected into one
//! ring), enabling, and draining records with the kernel's
//! data_head/data_tail protocol. Record bytes are handed to `record::parse`.
use super::record::{self, Layout, ParseError, Record};
use perf_event_open_sys as sys;
use perf_event_open_sys::bindings as b;
use profd_common::api;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
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

/// The API's name of the event.
impl From<EventKind> for api::Event {
    fn from(kind: EventKind) -> api::Event {
        match kind {
            EventKind::CpuClock => api::Event::CpuClock,
            EventKind::Cycles => api::Event::Cycles,
        }
    }
}

/// The event the API asks for; unspecified is cpu-clock.
impl From<api::Event> for EventKind {
    fn from(event: api::Event) -> EventKind {
        match event {
            api::Event::Unspecified | api::Event::CpuClock => EventKind::CpuClock,
            api::Event::Cycles => EventKind::Cycles,
        }
    }
}

/// What a group's events measure (a session's mode).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Mode {
    /// On-CPU samples of `kind`.
    #[default]
    Cpu,
    /// A sample at each switch out of a target's thread, and the switch
    /// records that time its waits (events of the target alone).
    OffCpu,
    /// Both.
    Wall,
}

impl Mode {
    /// The events include on-CPU samples.
    pub fn on_cpu(self) -> bool {
        self != Mode::OffCpu
    }

    /// The events include switches.
    pub fn switches(self) -> bool {
        self != Mode::Cpu
    }
}

impl From<Mode> for api::Mode {
    fn from(mode: Mode) -> api::Mode {
        match mode {
            Mode::Cpu => api::Mode::Cpu,
            Mode::OffCpu => api::Mode::OffCpu,
            Mode::Wall => api::Mode::Wall,
        }
    }
}

/// The mode the API asks for; unspecified is cpu.
impl From<api::Mode> for Mode {
    fn from(mode: api::Mode) -> Mode {
        match mode {
            api::Mode::Unspecified | api::Mode::Cpu => Mode::Cpu,
            api::Mode::OffCpu => Mode::OffCpu,
            api::Mode::Wall => Mode::Wall,
        }
    }
}

/// How much a flush reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flush {
    /// What the rings hold (a view need not have more).
    Held,
    /// With the losses the kernel has not reported yet, at the cost of an
    /// interrupt of every CPU (a session's end).
    Exact,
}

/// Whether a walk of a ring reads the records' cache lines first.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Touch {
    /// All at once before the walk ([`touch`]).
    LinesFirst,
    /// Each as the walk reaches it.
    AsWalked,
}

/// How a group's samples carry their user stacks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stacks {
    /// A copy of the user stack, with the user registers to unwind it.
    Copied,
    /// The kernel's frame-pointer walk (callchains).
    FramePointers,
}

/// Everything that determines how the per-CPU events are opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EventSpec {
    pub kind: EventKind,
    /// What the events measure.
    pub mode: Mode,
    /// The one session the group serves (modes with switches: a wait is
    /// paired and closed for one session; timelines: their events record
    /// on CLOCK_MONOTONIC); 0 = any sessions of the same settings share it.
    /// Asked of the sampler, nonzero means a group of the session's own.
    pub session: u64,
    pub frequency_hz: u32,
    /// Data pages of each ring (a power of two).
    pub ring_pages: usize,
    /// Bytes of user stack copied with each sample, with the user registers
    /// needed to unwind it (0 = the kernel's frame-pointer walk instead).
    pub stack_bytes: u32,
    /// The process the events sample: its threads, and (inherited) the
    /// threads and processes they create from then on. None = every
    /// process on the CPU (system-wide).
    pub target: Option<Target>,
    /// The target waits to exec the program to profile (`profctl run`):
    /// where it waits then is not the program's, so its threads waiting
    /// when the events open are not counted waiting from there (modes
    /// with switches; see `sampling::Waits::waiting_at_start`).
    pub held: bool,
}

impl EventSpec {
    /// How the samples carry their user stacks: copied when `stack_bytes`
    /// asks for a copy.
    pub fn stacks(&self) -> Stacks {
        if self.stack_bytes > 0 {
            Stacks::Copied
        } else {
            Stacks::FramePointers
        }
    }
}

/// One process, told apart from a later process given the same pid.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Target {
    pub pid: u32,
    /// When it started, in clock ticks after boot (/proc/PID/stat).
    pub started: u64,
}

impl Target {
    /// The process with this pid now; None when there is none.
    pub fn of(pid: u32) -> Option<Target> {
        let stat = procfs::process::Process::new(pid as i32)
            .and_then(|p| p.stat())
            .ok()?;
        Some(Target {
            pid,
            started: stat.starttime,
        })
    }
}

/// Largest user stack copy the kernel accepts (a record's size is a u16).
pub const MAX_STACK_BYTES: u32 = 65528;

/// User registers copied with stack samples: what unwinding starts from.
pub const USER_REGS: u64 =
    (1 << b::PERF_REG_X86_BP) | (1 << b::PERF_REG_X86_SP) | (1 << b::PERF_REG_X86_IP);

/// User registers copied with frame-pointer samples: sp alone, where the
/// stack bytes copied with them start.
pub const FP_USER_REGS: u64 = 1 << b::PERF_REG_X86_SP;

/// User stack bytes copied with frame-pointer samples: enough to read the
/// return address of a Go function without a frame, or a small one not yet
/// set up, which the kernel's frame-pointer walk skips (at sp + frame size).
/// With the register, 96 more bytes a sample in the ring (16 of registers,
/// 80 of stack copy with its two sizes).
pub const FP_STACK_BYTES: u32 = 64;

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

/// Fields asked of every sample (all events add user registers and stack
/// bytes: a whole stack copy, or the few bytes of [`FP_STACK_BYTES`]).
pub const SAMPLE_TYPE: u64 = (b::PERF_SAMPLE_IDENTIFIER
    | b::PERF_SAMPLE_IP
    | b::PERF_SAMPLE_TID
    | b::PERF_SAMPLE_TIME
    | b::PERF_SAMPLE_CPU
    | b::PERF_SAMPLE_PERIOD
    | b::PERF_SAMPLE_CALLCHAIN) as u64;

/// An open, mmap'd sampling ring on one CPU: one system-wide event, or the
/// events of one target's threads redirected into it.
#[derive(Debug)]
pub struct PerfEvent {
    /// The event whose ring is mapped (and polled): the system-wide
    /// sampling event, or with a target a dummy event that never samples,
    /// so that the ring outlives any one of the target's threads.
    fd: OwnedFd,
    /// With a target: one sampling event per thread it had when opened,
    /// each inherited by the threads and processes it creates later (the
    /// kernel sends inherited events' records to the parent's ring).
    threads: Vec<OwnedFd>,
    /// With a target in a mode with switches: one switch event per thread
    /// it had when opened (inherited like `threads`), sampling each switch
    /// out and recording switches in and out.
    switches: Vec<OwnedFd>,
    /// The ids samples of those events carry (`PERF_SAMPLE_IDENTIFIER`:
    /// inherited events report their parent's).
    switch_ids: Vec<u64>,
    base: *mut u8,
    map_len: usize,
    data_offset: usize,
    data_size: usize,
    layout: Layout,
    /// Samples carry stacks copies to unwind (not only the few bytes
    /// frame-pointer samples carry).
    stack_copy: bool,
    cpu: u32,
    scratch: Vec<u8>,
    /// The most bytes one record of this ring takes, with the LOST record
    /// the kernel may write before it.
    max_record: u64,
    /// The kernel counts the samples it dropped (PERF_FORMAT_LOST, Linux 6.0+).
    counts_lost: bool,
    /// The kernel's lost count already accounted for.
    lost_accounted: u64,
    /// The target's events' count (for cpu-clock, nanoseconds its tasks
    /// ran on this CPU) already accounted for.
    counted_accounted: u64,
    /// When the kernel's counts were last read.
    lost_read: Option<std::time::Instant>,
    /// Records lost that LOST records read so far reported.
    lost_reported: u64,
    /// At the last read the ring had no room for another record...
    full: bool,
    /// ...or the kernel counted losses no LOST record reported yet.
    owed: bool,
}

/// What the kernel counted on a ring since the last reading (see
/// [`PerfEvent::new_counts`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Samples dropped because the ring was full.
    pub lost: u64,
    /// With a target, its events' count: for cpu-clock, the nanoseconds
    /// its threads and the tasks they created ran on the ring's CPU,
    /// sampled or not. 0 on system-wide rings.
    pub counted: u64,
}

/// read_format bit: `read()` also returns the samples lost (Linux 6.0+).
const PERF_FORMAT_LOST: u64 = 1 << 4;

// SAFETY: the mapping is owned exclusively by this value (only it reads the
// data area and writes data_tail); moving it to another thread is fine.
unsafe impl Send for PerfEvent {}

/// The sampling attr for `spec`: (attr, event name, sample_type, user
/// registers sampled). Disabled until enabled; asks for the lost count.
fn sampling_attr(
    spec: &EventSpec,
    data_size: usize,
) -> (b::perf_event_attr, &'static str, u64, u64) {
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
        // The kernel walks the user stack by frame pointer; the registers
        // and the few bytes at sp let the frames that walk skips be found.
        let stack = (b::PERF_SAMPLE_REGS_USER | b::PERF_SAMPLE_STACK_USER) as u64;
        attr.sample_regs_user = FP_USER_REGS;
        attr.sample_stack_user = FP_STACK_BYTES;
        (SAMPLE_TYPE | stack, FP_USER_REGS)
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
    // Inherited events (a target's) add their children's counts when read,
    // and their children's losses are counted on them: the kernel sends an
    // inherited event's output, and its lost count, to its parent.
    attr.set_inherit(u64::from(spec.target.is_some()));
    attr.read_format = PERF_FORMAT_LOST;
    set_watermark(&mut attr, data_size);
    set_clock(&mut attr);
    (attr, event_name, sample_type, regs)
}

/// A target's switch event, from its sampling `attr`: a sample at every
/// switch out (period 1, with the same fields: the stack the thread leaves
/// the CPU with), and a `PERF_RECORD_SWITCH` at every switch in and out.
/// Without on-CPU samples (off-CPU mode) it also carries the side-band
/// records the sampling event would.
fn switch_attr(sampling: &b::perf_event_attr, mode: Mode) -> b::perf_event_attr {
    let mut attr = *sampling;
    attr.type_ = b::PERF_TYPE_SOFTWARE;
    attr.config = b::PERF_COUNT_SW_CONTEXT_SWITCHES as u64;
    attr.set_freq(0);
    attr.__bindgen_anon_1.sample_period = 1;
    attr.set_context_switch(1);
    if mode.on_cpu() {
        attr.set_mmap(0);
        attr.set_mmap2(0);
        attr.set_comm(0);
        attr.set_comm_exec(0);
        attr.set_task(0);
    }
    attr
}

/// The most bytes a record of profd's events takes with a user stack copy
/// of `stack_user` bytes: a sample's fixed fields, a callchain of the
/// kernel's depth limit with its context markers, the user registers and
/// the copy; and a LOST record before it.
fn max_record(stack_user: u32) -> u64 {
    let max_stack = crate::os::sysctl::kernel_sysctl("perf_event_max_stack")
        .and_then(|n| u64::try_from(n).ok())
        .unwrap_or(127);
    let callchain = 8 * (1 + max_stack + 16);
    let fixed = 8 + 16 * 8;
    let stack = 8 * (1 + 3) + 8 + u64::from(stack_user) + 8;
    let lost = 8 + 16 + 6 * 8;
    (fixed + callchain + stack + lost).min(u64::from(u16::MAX) + lost)
}

/// Records timed on CLOCK_MONOTONIC, the clock `clock_gettime` and BPF
/// programs read: switch events time waits against the session's start
/// and end, timelines put samples beside the target's own clock readings,
/// and interpreter frames read at each sample are paired with it.
fn set_clock(attr: &mut b::perf_event_attr) {
    attr.set_use_clockid(1);
    attr.clockid = libc::CLOCK_MONOTONIC;
}

/// The event's id, as its samples carry it.
fn event_id(fd: &OwnedFd, cpu: u32) -> Result<u64, PerfError> {
    let mut id = 0u64;
    // SAFETY: ID writes one u64 to the pointer, a live local.
    if unsafe { sys::ioctls::ID(fd.as_raw_fd(), &mut id) } < 0 {
        return Err(PerfError::Io {
            what: "reading an event's id",
            cpu,
            source: io::Error::last_os_error(),
        });
    }
    Ok(id)
}

/// Wake the reader when a quarter of the ring is filled, not per record.
/// The ring keeps the watermark of the event it is mapped from.
fn set_watermark(attr: &mut b::perf_event_attr, data_size: usize) {
    attr.set_watermark(1);
    attr.__bindgen_anon_2.wakeup_watermark = (data_size / 4) as u32;
}

/// perf_event_open(attr, pid, cpu), close-on-exec.
fn perf_event_open(attr: &mut b::perf_event_attr, pid: i32, cpu: u32) -> io::Result<OwnedFd> {
    // SAFETY: `attr` is a valid, fully initialised perf_event_attr whose
    // `size` field matches its type; the kernel only reads it (and may
    // write back `size` on E2BIG).
    let fd = unsafe { sys::perf_event_open(attr, pid, cpu as i32, -1, PERF_FLAG_FD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just returned by perf_event_open and is ours alone.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Open `attr` asking for the lost count; before Linux 6.0 (EINVAL) clear
/// PERF_FORMAT_LOST in `attr` and open it without (PERF_RECORD_LOST still
/// reports losses). Whether the count is kept is then in `attr.read_format`.
fn open_counting_lost(attr: &mut b::perf_event_attr, pid: i32, cpu: u32) -> io::Result<OwnedFd> {
    match perf_event_open(attr, pid, cpu) {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) && attr.read_format != 0 => {
            attr.read_format = 0;
            perf_event_open(attr, pid, cpu)
        }
        other => other,
    }
}

/// The error for a refused perf_event_open of `event` on `cpu`.
fn open_error(source: io::Error, event: &'static str, cpu: u32) -> PerfError {
    match source.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EPERM) => PerfError::Permission {
            source,
            paranoid: paranoid_level(),
            needed: 0,
        },
        Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) | Some(libc::ENODEV) => {
            PerfError::Unsupported { event, source }
        }
        _ => PerfError::Io {
            what: "perf_event_open",
            cpu,
            source,
        },
    }
}

/// The ring carrier of a target's events on `cpu`: a software dummy event
/// for all processes that records nothing itself (no sampling, no side-band
/// records), whose ring the threads' events are redirected into.
fn open_carrier(cpu: u32, data_size: usize) -> Result<OwnedFd, PerfError> {
    let mut attr = b::perf_event_attr {
        size: std::mem::size_of::<b::perf_event_attr>() as u32,
        type_: b::PERF_TYPE_SOFTWARE,
        config: b::PERF_COUNT_SW_DUMMY as u64,
        ..Default::default()
    };
    attr.set_disabled(1);
    set_watermark(&mut attr, data_size);
    set_clock(&mut attr);
    perf_event_open(&mut attr, -1, cpu).map_err(|e| open_error(e, "dummy", cpu))
}

/// The thread ids of process `pid`; ESRCH when it has gone.
fn threads_of(pid: u32) -> io::Result<Vec<u32>> {
    let gone = |_| io::Error::from_raw_os_error(libc::ESRCH);
    let tasks = procfs::process::Process::new(pid as i32)
        .and_then(|p| p.tasks())
        .map_err(gone)?;
    Ok(tasks.flatten().map(|t| t.tid as u32).collect())
}

/// Have the sampling event `fd` run `program` at each of its samples (and
/// the events inherited from it). The event samples all the same when the
/// kernel refuses: its interpreter frames are then counted unreadable.
fn give_program(fd: &OwnedFd, program: Option<BorrowedFd<'_>>, cpu: u32) {
    let Some(program) = program else {
        return;
    };
    // SAFETY: SET_BPF takes a perf event fd and a BPF program fd (both live
    // here) and touches no user memory.
    if unsafe { sys::ioctls::SET_BPF(fd.as_raw_fd(), program.as_raw_fd() as u32) } < 0 {
        let err = io::Error::last_os_error();
        tracing::warn!(cpu, %err, "an event refused the program that reads interpreter frames");
    }
}

fn enable(fd: &OwnedFd, cpu: u32) -> Result<(), PerfError> {
    // SAFETY: ENABLE takes an fd and an integer flag.
    if unsafe { sys::ioctls::ENABLE(fd.as_raw_fd(), 0) } < 0 {
        return Err(PerfError::Io {
            what: "enabling the event",
            cpu,
            source: io::Error::last_os_error(),
        });
    }
    Ok(())
}

impl PerfEvent {
    /// Open `spec` on `cpu`, map its ring and enable it: for all processes
    /// (pid = -1), or with `spec.target` for that process's threads (and,
    /// inherited, whatever they create later), all into one ring.
    pub fn open(cpu: u32, spec: &EventSpec) -> Result<PerfEvent, PerfError> {
        let page = rustix::param::page_size();
        let data_size = spec.ring_pages * page;
        let (mut attr, event_name, sample_type, regs) = sampling_attr(spec, data_size);
        // Interpreter frames are read at each sample, where the program
        // could be loaded (see crate::os::bpf).
        let program = crate::os::bpf::PythonProbe::get().ok().map(|p| p.program());
        let fd = match spec.target {
            None => {
                let fd = open_counting_lost(&mut attr, -1, cpu)
                    .map_err(|e| open_error(e, event_name, cpu))?;
                if spec.mode.on_cpu() {
                    give_program(&fd, program, cpu);
                }
                fd
            }
            Some(_) => open_carrier(cpu, data_size)?,
        };
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
            threads: Vec::new(),
            switches: Vec::new(),
            switch_ids: Vec::new(),
            base: base.cast(),
            map_len,
            data_offset: page,
            data_size,
            layout,
            stack_copy: spec.stack_bytes > 0,
            cpu,
            scratch: Vec::new(),
            max_record: max_record(attr.sample_stack_user),
            counts_lost: attr.read_format != 0,
            lost_accounted: 0,
            counted_accounted: 0,
            lost_read: None,
            lost_reported: 0,
            full: false,
            owed: false,
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
        match spec.target {
            None => enable(&event.fd, cpu)?,
            Some(target) => {
                event.attach_threads(target, spec.mode, &mut attr, event_name, program)?
            }
        }
        Ok(event)
    }

    /// Open an inherited event on each thread of `target`, redirect it
    /// into this ring and enable it. Threads the target creates afterwards
    /// inherit their creator's event, as `perf record -p` relies on; a
    /// thread created in the instant between the listing and the opening
    /// of its creator's event is not sampled on this CPU. Fails with ESRCH
    /// when the process has gone (or its pid is another process's now).
    /// `program`: a BPF program each event runs at its samples.
    fn attach_threads(
        &mut self,
        target: Target,
        mode: Mode,
        attr: &mut b::perf_event_attr,
        event_name: &'static str,
        program: Option<BorrowedFd<'_>>,
    ) -> Result<(), PerfError> {
        let cpu = self.cpu;
        let gone = |source| PerfError::Io {
            what: "opening the target's events",
            cpu,
            source,
        };
        let threads = threads_of(target.pid).map_err(gone)?;
        if Target::of(target.pid) != Some(target) {
            return Err(gone(io::Error::from_raw_os_error(libc::ESRCH)));
        }
        let mut switch = switch_attr(attr, mode);
        for tid in threads {
            if mode.on_cpu() {
                let Some(fd) = self.open_redirected(attr, tid, event_name, program)? else {
                    continue;
                };
                self.threads.push(fd);
            }
            if mode.switches() {
                let Some(fd) =
                    self.open_redirected(&mut switch, tid, "context-switches", program)?
                else {
                    continue;
                };
                self.switch_ids.push(event_id(&fd, cpu)?);
                self.switches.push(fd);
            }
        }
        self.counts_lost = attr.read_format != 0 && switch.read_format != 0;
        if self.threads.is_empty() && self.switches.is_empty() {
            return Err(gone(io::Error::from_raw_os_error(libc::ESRCH)));
        }
        Ok(())
    }

    /// Open `attr` on thread `tid`, redirect it into this ring, give it
    /// `program` to run at each sample (inherited with the event) and
    /// enable it; None when the thread exited since it was listed.
    fn open_redirected(
        &mut self,
        attr: &mut b::perf_event_attr,
        tid: u32,
        event_name: &'static str,
        program: Option<BorrowedFd<'_>>,
    ) -> Result<Option<OwnedFd>, PerfError> {
        let cpu = self.cpu;
        let fd = match open_counting_lost(attr, tid as i32, cpu) {
            Ok(fd) => fd,
            // The thread exited since the listing.
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Ok(None),
            Err(e) => return Err(open_error(e, event_name, cpu)),
        };
        // SAFETY: SET_OUTPUT takes two perf event fds and touches no
        // user memory: `fd` (never mapped) then writes into the ring of
        // `self.fd` (same CPU, same clock), which the kernel keeps
        // alive for as long as any event writes to it.
        if unsafe { sys::ioctls::SET_OUTPUT(fd.as_raw_fd(), self.fd.as_raw_fd()) } < 0 {
            return Err(PerfError::Io {
                what: "redirecting a thread's event into the ring",
                cpu,
                source: io::Error::last_os_error(),
            });
        }
        give_program(&fd, program, cpu);
        enable(&fd, cpu)?;
        Ok(Some(fd))
    }

    /// The ring's event samples every process on its CPU (no target).
    fn system_wide(&self) -> bool {
        self.threads.is_empty() && self.switches.is_empty()
    }

    /// The ids the samples of switch events carry (none without them).
    pub fn switch_ids(&self) -> &[u64] {
        &self.switch_ids
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

    /// Whether samples carry stack copies to unwind.
    pub fn stack_copy(&self) -> bool {
        self.stack_copy
    }

    /// What the events writing into this ring counted since it was
    /// opened: (their count, the samples the kernel dropped because the
    /// ring was full, when it counts them: Linux 6.0+). A target's
    /// threads' events include their inherited events' counts and losses,
    /// those of exited tasks too.
    fn kernel_counts(&self) -> Option<(u64, Option<u64>)> {
        let sampling = if self.system_wide() {
            std::slice::from_ref(&self.fd)
        } else {
            &self.threads[..]
        };
        let want = if self.counts_lost { 16 } else { 8 };
        let (mut value, mut lost) = (0u64, 0u64);
        // Switch events count switches, not time: only their losses count.
        let switches = self.switches.iter().map(|fd| (fd, false));
        for (fd, counts) in sampling.iter().map(|fd| (fd, true)).chain(switches) {
            let mut values = [0u64; 2];
            // SAFETY: read() writes at most size_of_val(&values) bytes into
            // the local array; the kernel writes { value } or, with
            // read_format = PERF_FORMAT_LOST, { value, lost }.
            let n = unsafe {
                libc::read(
                    fd.as_raw_fd(),
                    values.as_mut_ptr().cast(),
                    std::mem::size_of_val(&values),
                )
            };
            if n != want {
                return None;
            }
            if counts {
                value = value.wrapping_add(values[0]);
            }
            lost += values[1];
        }
        Some((value, self.counts_lost.then_some(lost)))
    }

    /// Samples the kernel dropped on this ring since it was opened, when
    /// it counts them (Linux 6.0+).
    #[cfg(test)]
    pub fn kernel_lost(&self) -> Option<u64> {
        self.kernel_counts().and_then(|(_, lost)| lost)
    }

    /// What the kernel counted since the last call: the samples lost, from
    /// its own count when it keeps one (exact, including losses not yet
    /// reported by a PERF_RECORD_LOST), else `from_records` (the records
    /// just read); and on a target's rings its events' count.
    ///
    /// Reading the kernel's counts costs an interrupt of the event's CPU
    /// per event, which with a drain every 100 ms was half of the daemon's
    /// CPU; so they are read only when losses are likely (LOST records
    /// came, or the drain read `bytes_read` of at least half the ring: it
    /// may have filled), with [`Flush::Exact`] (a session's start or end),
    /// and otherwise at most once a second. What is found later is counted
    /// later, never twice.
    pub fn new_counts(&mut self, from_records: u64, bytes_read: u64, flush: Flush) -> Counts {
        let records = Counts {
            lost: from_records,
            counted: 0,
        };
        self.lost_reported += from_records;
        let was_missing = self.may_be_missing();
        // A ring with no room left may have lost records after the last one
        // read. Without the kernel's count, it is not known not to have
        // until its next record (a LOST record or not) is read.
        self.full =
            self.no_room_after(bytes_read) || (!self.counts_lost && was_missing && bytes_read == 0);
        if !self.counts_lost && self.system_wide() {
            return records;
        }
        let due = flush == Flush::Exact
            || from_records > 0
            || was_missing
            || bytes_read >= self.data_size as u64 / 2
            || self
                .lost_read
                .is_none_or(|at| at.elapsed() >= std::time::Duration::from_secs(1));
        if !due {
            return Counts {
                lost: if self.counts_lost { 0 } else { from_records },
                counted: 0,
            };
        }
        self.lost_read = Some(std::time::Instant::now());
        let Some((value, lost)) = self.kernel_counts() else {
            return records;
        };
        let counted = if self.system_wide() {
            0
        } else {
            let new = value.saturating_sub(self.counted_accounted);
            self.counted_accounted = self.counted_accounted.max(value);
            new
        };
        let lost = match lost {
            Some(total) => {
                let new = total.saturating_sub(self.lost_accounted);
                self.lost_accounted = self.lost_accounted.max(total);
                // Lost, and not said by a LOST record: it comes with the
                // ring's next record, or never if nothing writes there again.
                self.owed = total > self.lost_reported;
                new
            }
            None => from_records,
        };
        Counts { lost, counted }
    }

    /// Records of this ring after the last one read may be missing, and no
    /// LOST record said so yet: at its last read it had no room for another
    /// record, or the kernel counted more losses than LOST records
    /// reported (see [`PerfEvent::new_counts`], which tells).
    pub fn may_be_missing(&self) -> bool {
        self.full || self.owed
    }

    /// Whether a ring that held `bytes` when read (from its tail to its
    /// head) had no room for another record then: the kernel may have
    /// dropped records after the last one read, and says so only once the
    /// ring has room again.
    fn no_room_after(&self, bytes: u64) -> bool {
        (self.data_size as u64).saturating_sub(bytes) < self.max_record
    }

    /// The CPU this event samples.
    pub fn cpu(&self) -> u32 {
        self.cpu
    }

    fn header(&self) -> *mut b::perf_event_mmap_page {
        self.base.cast()
    }

    /// The ring's data_head and data_tail, as atomics.
    fn positions(&self) -> (&AtomicU64, &AtomicU64) {
        let hdr = self.header();
        // SAFETY: data_head/data_tail are naturally aligned u64 fields of the
        // live metadata page, mapped as long as `self`; the kernel writes
        // data_head, we write data_tail. Viewing them as AtomicU64 gives the
        // required ordering.
        unsafe {
            (
                AtomicU64::from_ptr(std::ptr::addr_of_mut!((*hdr).data_head)),
                AtomicU64::from_ptr(std::ptr::addr_of_mut!((*hdr).data_tail)),
            )
        }
    }

    /// Where the kernel has written up to: records before it are complete.
    pub fn head(&self) -> u64 {
        self.positions().0.load(Ordering::Acquire)
    }

    /// Walk the complete records up to `head` (from [`head`](Self::head)),
    /// calling `f(type, misc, body)`, reading their cache lines as `touch`
    /// says; returns the tail at the start and the tail after them. The
    /// space is not released.
    fn walk(&mut self, head: u64, touch: Touch, f: impl FnMut(u32, u16, &[u8])) -> (u64, u64) {
        let start = self.positions().1.load(Ordering::Relaxed);
        // SAFETY: the data area [data_offset, data_offset + data_size) lies
        // inside our mapping. Bytes in [tail, head) are complete records the
        // kernel will not touch until we advance data_tail.
        let data =
            unsafe { std::slice::from_raw_parts(self.base.add(self.data_offset), self.data_size) };
        if touch == Touch::LinesFirst {
            self::touch(data, start, head);
        }
        (start, walk_ring(data, start, head, &mut self.scratch, f))
    }

    /// Hand every complete record up to `head` to `f`, then release the
    /// space to the kernel (one data_tail store per call). Returns the bytes
    /// read.
    pub fn drain_to(
        &mut self,
        head: u64,
        mut f: impl FnMut(Result<Record<'_>, ParseError>),
    ) -> u64 {
        let layout = self.layout;
        let (start, tail) = self.walk(head, Touch::AsWalked, |kind, misc, body| {
            f(record::parse(&layout, kind, misc, body))
        });
        self.positions().1.store(tail, Ordering::Release);
        tail.wrapping_sub(start)
    }

    /// [`drain_to`](Self::drain_to) the current head.
    #[cfg(test)]
    pub fn drain(&mut self, f: impl FnMut(Result<Record<'_>, ParseError>)) -> u64 {
        let head = self.head();
        self.drain_to(head, f)
    }

    /// Hand the fork, exit and comm records up to `head` to `f`, leaving
    /// every record in the ring (a drain reads them again).
    pub fn scan_tasks(&mut self, head: u64, mut f: impl FnMut(Result<Record<'_>, ParseError>)) {
        let layout = self.layout;
        // This first walk of a frame-pointer ring reads the records' lines
        // first, all at once ([`touch`]); a stack-copy ring's headers are
        // whole copies apart.
        let touch = match self.stack_copy() {
            true => Touch::AsWalked,
            false => Touch::LinesFirst,
        };
        self.walk(head, touch, |kind, misc, body| {
            if record::is_task(kind) {
                f(record::parse(&layout, kind, misc, body));
            }
        });
    }
}

/// Read a byte of every cache line of `data[tail..head)` (positions modulo
/// the ring size). The kernel wrote them on other CPUs; these loads do not
/// wait on each other, while a walk reads each header before it knows where
/// the next one is, so it would wait for one line after another.
fn touch(data: &[u8], tail: u64, head: u64) {
    const LINE: usize = 64;
    let len = head.wrapping_sub(tail).min(data.len() as u64) as usize;
    let start = (tail % data.len() as u64) as usize;
    let (first, wrapped) = match (start + len).checked_sub(data.len()) {
        Some(over) => (&data[start..], &data[..over]),
        None => (&data[start..start + len], &data[..0]),
    };
    let lines = first
        .iter()
        .step_by(LINE)
        .chain(wrapped.iter().step_by(LINE));
    std::hint::black_box(lines.fold(0u8, |acc, &b| acc ^ b));
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
    // Where `tail` is in the ring, kept without a division per record.
    let mut off = if head.wrapping_sub(tail) >= 8 {
        (tail % size) as usize
    } else {
        0
    };
    while head.wrapping_sub(tail) >= 8 {
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
        // off < size and 8 <= len <= size: one subtraction wraps either.
        let mut body_start = off + 8;
        if body_start >= data.len() {
            body_start -= data.len();
        }
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
        off += len as usize;
        if off >= data.len() {
            off -= data.len();
        }
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

/// Whether a hardware cycle counter can be opened (a PMU is present):
/// probed once, the daemon's facts and its sampler asking alike.
pub fn pmu_available() -> bool {
    static PMU: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PMU.get_or_init(probe_pmu)
}

fn probe_pmu() -> bool {
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
    use std::collections::HashMap;

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
    fn touching_any_span_of_the_ring_stays_inside_it() {
        let ring = vec![1u8; 4096];
        let spans = [
            (0, 0),
            (0, 4096),
            (100, 100 + 4096),
            (4000, 4200),
            (3 * 4096 + 10, 4 * 4096 + 9),
            (5, 70),
            (4095, 4096),
        ];
        for (tail, head) in spans {
            touch(&ring, tail, head);
        }
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

    /// `sh -c SCRIPT`, killed (with its process group) when dropped.
    struct Shell(std::process::Child);

    impl Shell {
        fn start(script: &str) -> Shell {
            use std::os::unix::process::CommandExt;
            let child = std::process::Command::new("sh")
                .args(["-c", script])
                .process_group(0)
                .spawn()
                .expect("sh runs");
            Shell(child)
        }
    }

    impl Drop for Shell {
        fn drop(&mut self) {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", self.0.id())])
                .status();
            let _ = self.0.wait();
        }
    }

    /// Needs root (or CAP_PERFMON): fails without, as the daemon would.
    #[test]
    fn target_rings_sample_the_target_and_what_it_forks_only() {
        let cpus = online_cpus().expect("online CPUs");
        let other = Shell::start("while :; do :; done");
        // Spins, and after 0.3 s forks a child that spins too.
        let target = Shell::start("sleep 0.3; (while :; do :; done) & while :; do :; done");
        let pid = target.0.id();
        let spec = EventSpec {
            held: false,
            mode: Default::default(),
            session: 0,
            kind: EventKind::CpuClock,
            frequency_hz: 499,
            ring_pages: 512,
            stack_bytes: 4096,
            target: Target::of(pid),
        };
        let mut rings: Vec<PerfEvent> = cpus
            .iter()
            .map(|&cpu| PerfEvent::open(cpu, &spec).expect("per-target events (needs root)"))
            .collect();
        let (mut samples, mut forks) = (HashMap::new(), Vec::new());
        let started = std::time::Instant::now();
        while started.elapsed() < std::time::Duration::from_millis(1500) {
            std::thread::sleep(std::time::Duration::from_millis(50));
            for ring in &mut rings {
                ring.drain(|r| match r {
                    Ok(Record::Sample(s)) => {
                        *samples.entry(s.pid).or_insert(0u64) += 1;
                        assert!(!s.stack_user.is_empty(), "a stack copy with each sample");
                    }
                    Ok(Record::Fork(t)) if t.pid != t.ppid => forks.push((t.pid, t.ppid)),
                    _ => {}
                });
            }
        }
        let children: Vec<u32> = forks
            .iter()
            .filter(|&&(_, ppid)| ppid == pid)
            .map(|&(child, _)| child)
            .collect();
        assert!(
            samples.contains_key(&pid),
            "the target was not sampled: {samples:?}"
        );
        assert!(
            !samples.contains_key(&other.0.id()),
            "the other process was sampled: {samples:?}"
        );
        assert!(
            children.iter().any(|c| samples.contains_key(c)),
            "the forked child was not sampled: {samples:?}, forks {forks:?}"
        );
        for sampled in samples.keys() {
            assert!(
                *sampled == pid || forks.iter().any(|&(child, _)| child == *sampled),
                "pid {sampled} is neither the target nor its descendant: {samples:?}, forks {forks:?}"
            );
        }
        eprintln!(
            "samples {samples:?} forks {forks:?} counts_lost {}",
            rings[0].counts_lost
        );
        // read() of the lost count works on inherited events.
        for ring in &rings {
            if ring.counts_lost {
                assert!(ring.kernel_lost().is_some());
            }
        }
    }

    /// Frame-pointer samples carry sp and the 64 bytes above it: 96 bytes
    /// more a sample than the callchain alone.
    #[test]
    fn frame_pointer_samples_carry_sp_and_a_few_stack_bytes() {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let spinning = stop.clone();
        let spinner = std::thread::spawn(move || {
            let mut x = 0u64;
            while !spinning.load(Ordering::Relaxed) {
                x = std::hint::black_box(x.wrapping_add(1));
            }
        });
        let pid = std::process::id();
        let spec = EventSpec {
            held: false,
            mode: Default::default(),
            session: 0,
            kind: EventKind::CpuClock,
            frequency_hz: 499,
            ring_pages: 64,
            stack_bytes: 0,
            target: Target::of(pid),
        };
        let mut rings: Vec<PerfEvent> = online_cpus()
            .expect("online CPUs")
            .iter()
            .map(|&cpu| PerfEvent::open(cpu, &spec).expect("per-target events (needs root)"))
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(300));
        stop.store(true, Ordering::Relaxed);
        spinner.join().unwrap();
        let mut extra = Vec::new();
        for ring in &mut rings {
            assert!(!ring.stack_copy());
            let (layout, head) = (ring.layout, ring.head());
            ring.walk(head, Touch::AsWalked, |kind, misc, body| {
                if let Ok(Record::Sample(s)) = record::parse(&layout, kind, misc, body) {
                    if s.pid == pid && !s.stack_user.is_empty() {
                        assert_eq!(s.regs_user().len(), 1);
                        assert_eq!(s.stack_user.len(), FP_STACK_BYTES as usize);
                        // identifier, ip, pid+tid, time, cpu, period, the
                        // callchain's length and entries.
                        let chain = 8 * (7 + s.callchain().len());
                        extra.push(body.len() - chain);
                    }
                }
            });
        }
        assert!(!extra.is_empty(), "no user samples");
        assert!(extra.iter().all(|&e| e == 96), "{extra:?}");
    }

    /// A thread that existed before the events were opened is sampled too
    /// (perf_event_open(pid) alone would follow only the thread `pid`).
    #[test]
    fn target_rings_sample_every_thread_the_target_had() {
        let (tx, rx) = std::sync::mpsc::channel();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let spinning = stop.clone();
        let spinner = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tx.send(unsafe { libc::gettid() } as u32).unwrap();
            let mut x = 0u64;
            while !spinning.load(Ordering::Relaxed) {
                x = std::hint::black_box(x.wrapping_add(1));
            }
        });
        let spinner_tid = rx.recv().unwrap();
        let pid = std::process::id();
        let spec = EventSpec {
            held: false,
            mode: Default::default(),
            session: 0,
            kind: EventKind::CpuClock,
            frequency_hz: 499,
            ring_pages: 64,
            stack_bytes: 0,
            target: Target::of(pid),
        };
        let mut rings: Vec<PerfEvent> = online_cpus()
            .expect("online CPUs")
            .iter()
            .map(|&cpu| PerfEvent::open(cpu, &spec).expect("per-target events (needs root)"))
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(500));
        stop.store(true, Ordering::Relaxed);
        spinner.join().unwrap();
        let mut tids = HashMap::new();
        for ring in &mut rings {
            ring.drain(|r| {
                // Processes other tests fork from this one inherit the
                // events too; only this process's threads are counted.
                if let Ok(Record::Sample(s)) = r {
                    if s.pid == pid {
                        *tids.entry(s.tid).or_insert(0u64) += 1;
                    }
                }
            });
        }
        assert!(
            tids.contains_key(&spinner_tid),
            "the spinning thread {spinner_tid} was not sampled: {tids:?}"
        );
    }

    /// The processes `pid` forked that are still there.
    fn children_of(pid: u32) -> Vec<u32> {
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect()
    }

    /// Sends `signal` (`STOP`, `CONT`) to the process group of `shell`
    /// and waits until `pids` are stopped (`STOP`) or running again.
    fn signal_group(shell: &Shell, pids: &[u32], signal: &str) {
        let status = std::process::Command::new("kill")
            .args([&format!("-{signal}"), "--", &format!("-{}", shell.0.id())])
            .status()
            .expect("kill runs");
        assert!(status.success());
        let stopped = |pid: &u32| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            stat.rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('T'))
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while pids.iter().all(stopped) != (signal == "STOP") {
            assert!(
                std::time::Instant::now() < deadline,
                "SIG{signal} not taken"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// Drains `ring`: the samples its LOST records report, and the bytes
    /// read.
    fn drain_lost(ring: &mut PerfEvent) -> (u64, u64) {
        let mut lost = 0;
        let bytes = ring.drain(|r| {
            if let Ok(Record::Lost(l)) = r {
                lost += l.lost;
            }
        });
        (lost, bytes)
    }

    /// Rings far too small for their target (4 pages, 4 KiB stack copies
    /// at 1999 Hz, one pinned spinner per CPU) overflow. `new_counts`
    /// reports the kernel's own count (PERF_FORMAT_LOST), with the losses
    /// no LOST record has reported yet, and each loss once: the LOST
    /// records written later for the same losses add nothing. Those
    /// records, the kernel's other figure, report the same losses.
    #[test]
    fn new_counts_reports_each_loss_the_kernel_counted_once() {
        use std::io::Write;
        use std::os::unix::process::CommandExt;
        let cpus = online_cpus().expect("online CPUs");
        let spinners: String = cpus
            .iter()
            .map(|cpu| format!("taskset -c {cpu} sh -c 'while :; do :; done' & "))
            .collect();
        let mut child = std::process::Command::new("sh")
            .args(["-c", &format!("read go; {spinners} wait")])
            .stdin(std::process::Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("sh runs");
        let mut go = child.stdin.take().expect("stdin");
        let shell = Shell(child);
        let spec = EventSpec {
            held: false,
            mode: Default::default(),
            session: 0,
            kind: EventKind::CpuClock,
            frequency_hz: 1999,
            ring_pages: 4,
            stack_bytes: 4096,
            target: Target::of(shell.0.id()),
        };
        let mut rings: Vec<PerfEvent> = cpus
            .iter()
            .map(|&cpu| PerfEvent::open(cpu, &spec).expect("per-target events (needs root)"))
            .collect();
        assert!(
            rings.iter().all(|r| r.counts_lost),
            "the kernel counts no lost samples (PERF_FORMAT_LOST needs Linux 6.0)"
        );
        writeln!(go, "go").expect("start the spinners");
        // Nothing is drained until every ring has lost samples.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !rings.iter().all(|r| r.kernel_lost().unwrap() >= 100) {
            assert!(std::time::Instant::now() < deadline, "no ring overflowed");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let pids: Vec<u32> = children_of(shell.0.id());
        assert_eq!(pids.len(), cpus.len(), "one spinner per CPU");
        signal_group(&shell, &pids, "STOP");

        let mut reported = Vec::new();
        let mut counted = Vec::new();
        for ring in &mut rings {
            let (records, bytes) = drain_lost(ring);
            let kernel = ring.kernel_lost().unwrap();
            let first = ring.new_counts(records, bytes, Flush::Exact);
            eprintln!(
                "cpu {}: the kernel lost {kernel}, LOST records said {records}",
                ring.cpu
            );
            assert!(
                records <= kernel,
                "LOST records {records} > kernel {kernel}"
            );
            assert_eq!(
                first.lost, kernel,
                "the kernel's count, whatever the records"
            );
            assert_eq!(ring.new_counts(0, 0, Flush::Exact).lost, 0, "counted twice");
            assert_eq!(ring.new_counts(0, 0, Flush::Held).lost, 0, "counted twice");
            reported.push(records);
            counted.push(kernel);
        }

        // The spinners run again: the next record on each ring comes
        // after a LOST record of what was lost before.
        signal_group(&shell, &pids, "CONT");
        let mut later = vec![0u64; rings.len()];
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while (0..rings.len()).any(|i| reported[i] + later[i] < counted[i]) {
            assert!(
                std::time::Instant::now() < deadline,
                "LOST records {reported:?} + {later:?} never reached {counted:?}"
            );
            for (i, ring) in rings.iter_mut().enumerate() {
                later[i] += drain_lost(ring).0;
            }
        }
        signal_group(&shell, &pids, "STOP");
        for (i, ring) in rings.iter_mut().enumerate() {
            let (records, bytes) = drain_lost(ring);
            later[i] += records;
            let kernel = ring.kernel_lost().unwrap();
            let reported = reported[i] + later[i];
            eprintln!(
                "cpu {}: the kernel lost {kernel} in all, LOST records said {reported}",
                ring.cpu
            );
            assert!(
                (counted[i]..=kernel).contains(&reported),
                "cpu {}: LOST records {reported}, the kernel's count {} then {kernel}",
                ring.cpu,
                counted[i]
            );
            assert_eq!(
                ring.new_counts(records, bytes, Flush::Exact).lost,
                kernel - counted[i],
                "only what was lost since the last reading"
            );
        }
        // Without the kernel's count, the LOST records are what is known.
        rings[0].counts_lost = false;
        assert_eq!(rings[0].new_counts(7, 0, Flush::Exact).lost, 7);
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0-1"), Some(vec![0, 1]));
        assert_eq!(parse_cpu_list("0,2-4,7"), Some(vec![0, 2, 3, 4, 7]));
        assert_eq!(parse_cpu_list("x"), None);
    }

    /// The perf_event_attr each event asks for: `cycles` the hardware CPU
    /// cycle counter, `cpu-clock` the software CPU timer; both sampled at
    /// the requested frequency, with the lost count.
    #[test]
    fn each_event_asks_for_its_counter() {
        for (kind, name, type_, config) in [
            (
                EventKind::Cycles,
                "cycles",
                b::PERF_TYPE_HARDWARE,
                b::PERF_COUNT_HW_CPU_CYCLES as u64,
            ),
            (
                EventKind::CpuClock,
                "cpu-clock",
                b::PERF_TYPE_SOFTWARE,
                b::PERF_COUNT_SW_CPU_CLOCK as u64,
            ),
        ] {
            let spec = EventSpec {
                held: false,
                kind,
                mode: Default::default(),
                session: 0,
                frequency_hz: 499,
                ring_pages: 8,
                stack_bytes: 0,
                target: None,
            };
            let (attr, event_name, _, _) = sampling_attr(&spec, 8 * 4096);
            assert_eq!(event_name, name);
            assert_eq!((attr.type_, attr.config), (type_, config), "{name}");
            assert_eq!(attr.freq(), 1, "{name}: a frequency, not a period");
            // SAFETY: with `freq` set, the union holds sample_freq (both
            // members are plain u64s, so either read is defined).
            assert_eq!(unsafe { attr.__bindgen_anon_1.sample_freq }, 499, "{name}");
            assert_eq!(attr.read_format, PERF_FORMAT_LOST, "{name}");
        }
    }
}
