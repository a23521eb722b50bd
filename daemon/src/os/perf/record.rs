//! perf record parser: record body bytes in, a typed [`Record`] out; not the ring, not the attr.
//!
//! `body` is what follows the record's `perf_event_header`; the caller reads the ring and passes
//! the header's type and misc. Pure: no `unsafe`, no I/O, no allocation. Integers are read from
//! byte slices in native endian (a body may have been copied out of the ring, so nothing relies
//! on alignment), and every length taken from the data is bounds-checked: truncated or hostile
//! input gives a [`ParseError`], never a panic. Field layouts follow `man perf_event_open`.

use perf_event_open_sys::bindings as sys;

const IDENTIFIER: u64 = sys::PERF_SAMPLE_IDENTIFIER as u64;
const IP: u64 = sys::PERF_SAMPLE_IP as u64;
const TID: u64 = sys::PERF_SAMPLE_TID as u64;
const TIME: u64 = sys::PERF_SAMPLE_TIME as u64;
const ADDR: u64 = sys::PERF_SAMPLE_ADDR as u64;
const ID: u64 = sys::PERF_SAMPLE_ID as u64;
const STREAM_ID: u64 = sys::PERF_SAMPLE_STREAM_ID as u64;
const CPU: u64 = sys::PERF_SAMPLE_CPU as u64;
const PERIOD: u64 = sys::PERF_SAMPLE_PERIOD as u64;
const CALLCHAIN: u64 = sys::PERF_SAMPLE_CALLCHAIN as u64;
const REGS_USER: u64 = sys::PERF_SAMPLE_REGS_USER as u64;
const STACK_USER: u64 = sys::PERF_SAMPLE_STACK_USER as u64;

/// The `PERF_SAMPLE_*` bits this parser understands; [`Layout::new`] rejects any other.
pub const SUPPORTED_SAMPLE_TYPE: u64 = SCALAR_BITS | CALLCHAIN | REGS_USER | STACK_USER;
const SCALAR_BITS: u64 = IDENTIFIER | IP | TID | TIME | ADDR | ID | STREAM_ID | CPU | PERIOD;

/// The bits that put a field in the `sample_id_all` trailer of non-sample records.
const TRAILER_BITS: u64 = TID | TIME | ID | STREAM_ID | CPU | IDENTIFIER;

/// Largest build-id the kernel puts in an MMAP2 record (`BUILD_ID_SIZE_MAX`).
const BUILD_ID_MAX: usize = 20;

const fn misc_bit(bit: u32) -> u16 {
    assert!(bit <= u16::MAX as u32, "misc bits fit the header's u16");
    bit as u16
}
const MISC_CPUMODE_MASK: u16 = misc_bit(sys::PERF_RECORD_MISC_CPUMODE_MASK);
const MISC_COMM_EXEC: u16 = misc_bit(sys::PERF_RECORD_MISC_COMM_EXEC);
const MISC_MMAP_BUILD_ID: u16 = misc_bit(sys::PERF_RECORD_MISC_MMAP_BUILD_ID);
const MISC_SWITCH_OUT: u16 = misc_bit(sys::PERF_RECORD_MISC_SWITCH_OUT);
const MISC_SWITCH_OUT_PREEMPT: u16 = misc_bit(sys::PERF_RECORD_MISC_SWITCH_OUT_PREEMPT);

/// Callchain marker: the entries that follow are kernel addresses.
pub const CONTEXT_KERNEL: u64 = sys::PERF_CONTEXT_KERNEL;
/// Callchain marker: the entries that follow are user addresses.
pub const CONTEXT_USER: u64 = sys::PERF_CONTEXT_USER;
/// Lowest context-marker value; every callchain entry `>=` it is a marker, not an address.
pub const CONTEXT_MAX: u64 = sys::PERF_CONTEXT_MAX;

/// Whether a raw callchain entry is a `PERF_CONTEXT_*` marker rather than an address.
pub fn is_context_marker(v: u64) -> bool {
    v >= CONTEXT_MAX
}

/// The address space announced by a callchain context marker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CallchainContext {
    Hypervisor,
    Kernel,
    User,
    /// Deferred user callchain (only with `attr.defer_callchain`, which profd does not set).
    UserDeferred,
    Guest,
    GuestKernel,
    GuestUser,
    /// A value in the marker range this build does not know.
    Unknown(u64),
}

impl CallchainContext {
    /// The context a raw callchain entry announces, or `None` when the entry is an address.
    pub fn from_entry(v: u64) -> Option<CallchainContext> {
        if !is_context_marker(v) {
            return None;
        }
        Some(match v {
            sys::PERF_CONTEXT_HV => CallchainContext::Hypervisor,
            sys::PERF_CONTEXT_KERNEL => CallchainContext::Kernel,
            sys::PERF_CONTEXT_USER => CallchainContext::User,
            sys::PERF_CONTEXT_USER_DEFERRED => CallchainContext::UserDeferred,
            sys::PERF_CONTEXT_GUEST => CallchainContext::Guest,
            sys::PERF_CONTEXT_GUEST_KERNEL => CallchainContext::GuestKernel,
            sys::PERF_CONTEXT_GUEST_USER => CallchainContext::GuestUser,
            v => CallchainContext::Unknown(v),
        })
    }
}

type Res<T> = Result<T, ParseError>;

/// Why a record body could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("sample_type bits {bits:#x} are not supported by the record parser")]
    Unsupported { bits: u64 },
    #[error("sample_type {sample_type:#x} lacks PERF_SAMPLE_TID: samples would have no process")]
    MissingTid { sample_type: u64 },
    #[error("record type {kind}: body length {len} is not a multiple of 8")]
    Misaligned { kind: u32, len: usize },
    #[error(
        "record type {kind}: {field} at offset {offset} needs {needed} bytes, has {available}"
    )]
    Truncated {
        kind: u32,
        field: &'static str,
        offset: usize,
        needed: u64,
        available: usize,
    },
    #[error("record type {kind}: {extra} bytes left after the last field (layout mismatch?)")]
    TrailingBytes { kind: u32, extra: usize },
    #[error("sample stack copy: dyn_size {dyn_size} exceeds its size {size}")]
    StackDynSize { dyn_size: u64, size: u64 },
    #[error("mmap2 build-id size {size} exceeds {BUILD_ID_MAX} bytes")]
    BuildIdSize { size: u8 },
    #[error("record type {kind}: {field} is not NUL-terminated")]
    Unterminated { kind: u32, field: &'static str },
}

/// What the event's attr asked the kernel to put in each record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// `PERF_SAMPLE_*` bits.
    pub sample_type: u64,
    /// Non-sample records carry a `sample_id` trailer.
    pub sample_id_all: bool,
    /// `popcount(sample_regs_user)` when `PERF_SAMPLE_REGS_USER` is set, else 0.
    pub regs_user_count: usize,
}

impl Layout {
    /// The layout for an attr; rejects `sample_type` bits outside [`SUPPORTED_SAMPLE_TYPE`]
    /// and a `sample_type` without `PERF_SAMPLE_TID` (samples must name their process).
    pub fn new(
        sample_type: u64,
        sample_id_all: bool,
        sample_regs_user: u64,
    ) -> Result<Layout, ParseError> {
        check_sample_type(sample_type)?;
        let regs = if sample_type & REGS_USER != 0 {
            sample_regs_user
        } else {
            0
        };
        let regs_user_count = regs.count_ones() as usize;
        Ok(Layout {
            sample_type,
            sample_id_all,
            regs_user_count,
        })
    }

    /// Bytes of the `sample_id` trailer at the end of every non-sample record.
    fn trailer_len(&self) -> usize {
        if self.sample_id_all {
            (self.sample_type & TRAILER_BITS).count_ones() as usize * 8
        } else {
            0
        }
    }
}

fn check_sample_type(sample_type: u64) -> Res<()> {
    let bits = sample_type & !SUPPORTED_SAMPLE_TYPE;
    if bits != 0 {
        return Err(ParseError::Unsupported { bits });
    }
    if sample_type & TID == 0 {
        return Err(ParseError::MissingTid { sample_type });
    }
    Ok(())
}

/// Whether records of type `kind` fork, end or rename a task (fork, exit,
/// comm): what a drain reads from every ring before routing any record.
pub fn is_task(kind: u32) -> bool {
    matches!(
        kind,
        sys::PERF_RECORD_FORK | sys::PERF_RECORD_EXIT | sys::PERF_RECORD_COMM
    )
}

/// One parsed record; slices borrow from the body passed to [`parse`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Record<'a> {
    Sample(Sample<'a>),
    Mmap2(Mmap2<'a>),
    Comm(Comm<'a>),
    Fork(Task),
    Exit(Task),
    Lost(Lost),
    Throttle(Throttle),
    Unthrottle(Throttle),
    Switch(Switch),
    /// Any other record type; the caller skips it.
    Other {
        kind: u32,
    },
}

/// The `sample_id_all` trailer of a non-sample record; fields are `Some` when their
/// `PERF_SAMPLE_*` bit is set (all `None` without `sample_id_all`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SampleId {
    pub pid: Option<u32>,
    pub tid: Option<u32>,
    pub time: Option<u64>,
    /// From `PERF_SAMPLE_ID`, else `PERF_SAMPLE_IDENTIFIER` (the kernel writes the same value).
    pub id: Option<u64>,
    pub stream_id: Option<u64>,
    pub cpu: Option<u32>,
}

/// A `PERF_RECORD_SAMPLE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample<'a> {
    /// Header `misc`: cpumode (`PERF_RECORD_MISC_USER`, `..._KERNEL`, ...) and flags.
    pub misc: u16,
    pub identifier: Option<u64>,
    pub ip: Option<u64>,
    pub pid: u32,
    pub tid: u32,
    pub time: Option<u64>,
    pub addr: Option<u64>,
    pub id: Option<u64>,
    pub stream_id: Option<u64>,
    pub cpu: Option<u32>,
    pub period: Option<u64>,
    /// Raw native-endian u64 entries, markers included.
    callchain: &'a [u8],
    /// `PERF_SAMPLE_REGS_ABI_*`; 0 (none) when no user registers were captured.
    pub regs_user_abi: u64,
    /// Raw native-endian u64 registers, in ascending bit order of `sample_regs_user`.
    regs_user: &'a [u8],
    /// The valid (`dyn_size`) bytes of the user stack copy; empty when none was taken.
    pub stack_user: &'a [u8],
}

impl<'a> Sample<'a> {
    /// Raw callchain entries, innermost first, including `PERF_CONTEXT_*`
    /// markers: native-endian words, read where they lie.
    pub fn callchain(&self) -> &'a [[u8; 8]] {
        self.callchain.as_chunks::<8>().0
    }

    /// User registers (empty when `regs_user_abi` is 0 or REGS_USER was not requested).
    pub fn regs_user(&self) -> impl ExactSizeIterator<Item = u64> + 'a {
        words(self.regs_user)
    }

    /// The cpumode part of `misc` (`PERF_RECORD_MISC_KERNEL`, `..._USER`, ...).
    pub fn cpumode(&self) -> u16 {
        self.misc & MISC_CPUMODE_MASK
    }
}

#[cfg(test)]
impl Sample<'static> {
    /// A sample of `pid` at perf time `time` with an ip and no stacks, for
    /// the tests of what consumes samples.
    pub fn at(pid: u32, time: u64, ip: u64) -> Sample<'static> {
        Sample {
            misc: 0,
            identifier: None,
            ip: Some(ip),
            pid,
            tid: pid,
            time: Some(time),
            addr: None,
            id: None,
            stream_id: None,
            cpu: None,
            period: None,
            callchain: &[],
            regs_user_abi: 0,
            regs_user: &[],
            stack_user: &[],
        }
    }

    /// This sample taken on thread `tid` with user registers bp = 0, `sp`,
    /// ip = the sample's ip, and the stack copy `stack`.
    pub fn copied(self, tid: u32, sp: u64, stack: &'static [u8]) -> Sample<'static> {
        let regs = [0, sp, self.ip.unwrap_or(0)];
        let regs: Vec<u8> = regs.iter().flat_map(|r| r.to_ne_bytes()).collect();
        Sample {
            tid,
            regs_user_abi: 2,
            regs_user: Vec::leak(regs),
            stack_user: stack,
            ..self
        }
    }
}

fn words(bytes: &[u8]) -> impl ExactSizeIterator<Item = u64> + '_ {
    let (words, _) = bytes.as_chunks::<8>();
    words.iter().map(|w| u64::from_ne_bytes(*w))
}

/// Which file an MMAP2 record maps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileId<'a> {
    Inode {
        maj: u32,
        min: u32,
        ino: u64,
        ino_generation: u64,
    },
    /// With `PERF_RECORD_MISC_MMAP_BUILD_ID` (attr `build_id`): the file's build-id.
    BuildId(&'a [u8]),
}

/// A `PERF_RECORD_MMAP2`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mmap2<'a> {
    pub pid: u32,
    pub tid: u32,
    pub addr: u64,
    pub len: u64,
    pub pgoff: u64,
    pub file: FileId<'a>,
    pub prot: u32,
    pub flags: u32,
    /// The path, without its NUL padding.
    pub filename: &'a [u8],
    pub sample_id: SampleId,
}

/// A `PERF_RECORD_COMM`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Comm<'a> {
    pub pid: u32,
    pub tid: u32,
    /// The new command name, without its NUL padding.
    pub comm: &'a [u8],
    /// The name changed because of an exec (`PERF_RECORD_MISC_COMM_EXEC`).
    pub exec: bool,
    pub sample_id: SampleId,
}

/// A `PERF_RECORD_FORK` or `PERF_RECORD_EXIT`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Task {
    pub pid: u32,
    pub ppid: u32,
    pub tid: u32,
    pub ptid: u32,
    pub time: u64,
    pub sample_id: SampleId,
}

/// A `PERF_RECORD_LOST`: `lost` records were dropped because the ring was full.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lost {
    pub id: u64,
    pub lost: u64,
    pub sample_id: SampleId,
}

/// A `PERF_RECORD_SWITCH` of a task's event (attr `context_switch`): the
/// thread in `sample_id` left the CPU (`out`) or came back to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Switch {
    pub out: bool,
    /// A switch out of a preempted thread, still runnable (Linux 4.17+;
    /// false before).
    pub preempted: bool,
    pub sample_id: SampleId,
}

/// A `PERF_RECORD_THROTTLE` or `PERF_RECORD_UNTHROTTLE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Throttle {
    pub time: u64,
    pub id: u64,
    pub stream_id: u64,
    pub sample_id: SampleId,
}

/// Parse one record. `kind` and `misc` come from the record's `perf_event_header`; `body` is
/// the `size - 8` bytes after it. Record types profd does not use give [`Record::Other`].
pub fn parse<'a>(
    layout: &Layout,
    kind: u32,
    misc: u16,
    body: &'a [u8],
) -> Result<Record<'a>, ParseError> {
    let known = matches!(
        kind,
        sys::PERF_RECORD_SAMPLE
            | sys::PERF_RECORD_MMAP2
            | sys::PERF_RECORD_COMM
            | sys::PERF_RECORD_FORK
            | sys::PERF_RECORD_EXIT
            | sys::PERF_RECORD_LOST
            | sys::PERF_RECORD_THROTTLE
            | sys::PERF_RECORD_UNTHROTTLE
            | sys::PERF_RECORD_SWITCH
    );
    if !known {
        return Ok(Record::Other { kind });
    }
    // The kernel sizes every record in whole u64s.
    if !body.len().is_multiple_of(8) {
        let len = body.len();
        return Err(ParseError::Misaligned { kind, len });
    }
    if kind == sys::PERF_RECORD_SAMPLE {
        return parse_sample(layout, misc, body).map(Record::Sample);
    }
    let (mut r, sample_id) = split_trailer(layout, kind, body)?;
    Ok(match kind {
        sys::PERF_RECORD_MMAP2 => Record::Mmap2(parse_mmap2(&mut r, misc, sample_id)?),
        sys::PERF_RECORD_COMM => Record::Comm(Comm {
            pid: r.u32("pid")?,
            tid: r.u32("tid")?,
            comm: r.c_string("comm")?,
            exec: misc & MISC_COMM_EXEC != 0,
            sample_id,
        }),
        sys::PERF_RECORD_FORK => Record::Fork(parse_task(&mut r, sample_id)?),
        sys::PERF_RECORD_EXIT => Record::Exit(parse_task(&mut r, sample_id)?),
        sys::PERF_RECORD_LOST => Record::Lost(Lost {
            id: r.u64("id")?,
            lost: r.u64("lost")?,
            sample_id,
        }),
        sys::PERF_RECORD_THROTTLE => Record::Throttle(parse_throttle(&mut r, sample_id)?),
        sys::PERF_RECORD_UNTHROTTLE => Record::Unthrottle(parse_throttle(&mut r, sample_id)?),
        sys::PERF_RECORD_SWITCH => Record::Switch(Switch {
            out: misc & MISC_SWITCH_OUT != 0,
            preempted: misc & MISC_SWITCH_OUT_PREEMPT != 0,
            sample_id,
        }),
        _ => Record::Other { kind },
    })
}

fn parse_sample<'a>(layout: &Layout, misc: u16, body: &'a [u8]) -> Res<Sample<'a>> {
    // The fields are public, so a Layout may not have come from Layout::new.
    let st = layout.sample_type;
    check_sample_type(st)?;
    let mut r = Reader::new(sys::PERF_RECORD_SAMPLE, body);
    // Fields are evaluated in the order written, which is the kernel's order.
    let mut sample = Sample {
        misc,
        identifier: r.opt_u64(st, IDENTIFIER, "identifier")?,
        ip: r.opt_u64(st, IP, "ip")?,
        pid: r.u32("pid")?,
        tid: r.u32("tid")?,
        time: r.opt_u64(st, TIME, "time")?,
        addr: r.opt_u64(st, ADDR, "addr")?,
        id: r.opt_u64(st, ID, "id")?,
        stream_id: r.opt_u64(st, STREAM_ID, "stream_id")?,
        cpu: r.opt_cpu(st)?,
        period: r.opt_u64(st, PERIOD, "period")?,
        callchain: &[],
        regs_user_abi: 0,
        regs_user: &[],
        stack_user: &[],
    };
    if st & CALLCHAIN != 0 {
        let nr = r.u64("callchain nr")?;
        sample.callchain = r.words("callchain", nr)?;
    }
    if st & REGS_USER != 0 {
        sample.regs_user_abi = r.u64("regs_user abi")?;
        if sample.regs_user_abi != 0 {
            let count = u64::try_from(layout.regs_user_count).unwrap_or(u64::MAX);
            sample.regs_user = r.words("regs_user", count)?;
        }
    }
    if st & STACK_USER != 0 {
        sample.stack_user = r.stack_user()?;
    }
    r.finish()?;
    Ok(sample)
}

/// Split a non-sample body into a reader over its own fields and its parsed trailer, whose
/// position is fixed by the end of the body.
fn split_trailer<'a>(layout: &Layout, kind: u32, body: &'a [u8]) -> Res<(Reader<'a>, SampleId)> {
    let trailer_len = layout.trailer_len();
    let Some((fields, trailer)) = body
        .len()
        .checked_sub(trailer_len)
        .and_then(|at| body.split_at_checked(at))
    else {
        return Err(Reader::new(kind, body).truncated("sample_id", trailer_len as u64));
    };
    let st = layout.sample_type;
    let mut sample_id = SampleId::default();
    if layout.sample_id_all {
        let mut t = Reader::new(kind, trailer);
        t.offset = fields.len();
        if st & TID != 0 {
            sample_id.pid = Some(t.u32("sample_id pid")?);
            sample_id.tid = Some(t.u32("sample_id tid")?);
        }
        sample_id.time = t.opt_u64(st, TIME, "sample_id time")?;
        sample_id.id = t.opt_u64(st, ID, "sample_id id")?;
        sample_id.stream_id = t.opt_u64(st, STREAM_ID, "sample_id stream_id")?;
        sample_id.cpu = t.opt_cpu(st)?;
        let identifier = t.opt_u64(st, IDENTIFIER, "sample_id identifier")?;
        sample_id.id = sample_id.id.or(identifier);
    }
    Ok((Reader::new(kind, fields), sample_id))
}

fn parse_mmap2<'a>(r: &mut Reader<'a>, misc: u16, sample_id: SampleId) -> Res<Mmap2<'a>> {
    let pid = r.u32("pid")?;
    let tid = r.u32("tid")?;
    let addr = r.u64("addr")?;
    let len = r.u64("len")?;
    let pgoff = r.u64("pgoff")?;
    let file = if misc & MISC_MMAP_BUILD_ID != 0 {
        // u8 build_id_size, u8 + u16 reserved, u8 build_id[20]
        let [size, ..] = r.array::<4>("build_id size")?;
        let ids = r.bytes("build_id", BUILD_ID_MAX as u64)?;
        let Some(id) = ids.get(..usize::from(size)) else {
            return Err(ParseError::BuildIdSize { size });
        };
        FileId::BuildId(id)
    } else {
        FileId::Inode {
            maj: r.u32("maj")?,
            min: r.u32("min")?,
            ino: r.u64("ino")?,
            ino_generation: r.u64("ino_generation")?,
        }
    };
    Ok(Mmap2 {
        pid,
        tid,
        addr,
        len,
        pgoff,
        file,
        prot: r.u32("prot")?,
        flags: r.u32("flags")?,
        filename: r.c_string("filename")?,
        sample_id,
    })
}

fn parse_task(r: &mut Reader<'_>, sample_id: SampleId) -> Res<Task> {
    Ok(Task {
        pid: r.u32("pid")?,
        ppid: r.u32("ppid")?,
        tid: r.u32("tid")?,
        ptid: r.u32("ptid")?,
        time: r.u64("time")?,
        sample_id,
    })
}

fn parse_throttle(r: &mut Reader<'_>, sample_id: SampleId) -> Res<Throttle> {
    Ok(Throttle {
        time: r.u64("time")?,
        id: r.u64("id")?,
        stream_id: r.u64("stream_id")?,
        sample_id,
    })
}

/// A forward cursor over a body that only hands out bounds-checked pieces.
struct Reader<'a> {
    kind: u32,
    rest: &'a [u8],
    /// Offset of `rest` in the body, for error messages.
    offset: usize,
}

impl<'a> Reader<'a> {
    fn new(kind: u32, body: &'a [u8]) -> Self {
        Reader {
            kind,
            rest: body,
            offset: 0,
        }
    }

    fn truncated(&self, field: &'static str, needed: u64) -> ParseError {
        ParseError::Truncated {
            kind: self.kind,
            field,
            offset: self.offset,
            needed,
            available: self.rest.len(),
        }
    }

    fn bytes(&mut self, field: &'static str, n: u64) -> Res<&'a [u8]> {
        let split = usize::try_from(n)
            .ok()
            .and_then(|n| self.rest.split_at_checked(n));
        let Some((head, tail)) = split else {
            return Err(self.truncated(field, n));
        };
        self.rest = tail;
        self.offset += head.len();
        Ok(head)
    }

    /// `nr` u64 words, as raw bytes.
    fn words(&mut self, field: &'static str, nr: u64) -> Res<&'a [u8]> {
        self.bytes(field, nr.saturating_mul(8))
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Res<[u8; N]> {
        let Some((head, tail)) = self.rest.split_first_chunk::<N>() else {
            return Err(self.truncated(field, N as u64));
        };
        self.rest = tail;
        self.offset += N;
        Ok(*head)
    }

    fn u64(&mut self, field: &'static str) -> Res<u64> {
        self.array(field).map(u64::from_ne_bytes)
    }

    fn u32(&mut self, field: &'static str) -> Res<u32> {
        self.array(field).map(u32::from_ne_bytes)
    }

    fn opt_u64(&mut self, st: u64, bit: u64, field: &'static str) -> Res<Option<u64>> {
        if st & bit == 0 {
            return Ok(None);
        }
        self.u64(field).map(Some)
    }

    /// `{ u32 cpu, res; }` when `PERF_SAMPLE_CPU` is set.
    fn opt_cpu(&mut self, st: u64) -> Res<Option<u32>> {
        if st & CPU == 0 {
            return Ok(None);
        }
        let cpu = self.u32("cpu")?;
        self.u32("cpu res")?;
        Ok(Some(cpu))
    }

    /// `u64 size; char data[size]; u64 dyn_size` (no `dyn_size` when `size` is 0): the valid
    /// `dyn_size` bytes of the stack copy.
    fn stack_user(&mut self) -> Res<&'a [u8]> {
        let size = self.u64("stack_user size")?;
        if size == 0 {
            return Ok(&[]);
        }
        let data = self.bytes("stack_user data", size)?;
        let dyn_size = self.u64("stack_user dyn_size")?;
        usize::try_from(dyn_size)
            .ok()
            .and_then(|n| data.get(..n))
            .ok_or(ParseError::StackDynSize { dyn_size, size })
    }

    /// The rest of the fields: a NUL-padded string, returned without its padding.
    fn c_string(&mut self, field: &'static str) -> Res<&'a [u8]> {
        let Some(nul) = self.rest.iter().position(|&b| b == 0) else {
            let kind = self.kind;
            return Err(ParseError::Unterminated { kind, field });
        };
        let s = self.rest.get(..nul).unwrap_or_default();
        self.offset += self.rest.len();
        self.rest = &[];
        Ok(s)
    }

    fn finish(&self) -> Res<()> {
        let (kind, extra) = (self.kind, self.rest.len());
        match extra {
            0 => Ok(()),
            _ => Err(ParseError::TrailingBytes { kind, extra }),
        }
    }
}

#[cfg(test)]
#[path = "record_tests.rs"]
mod tests;
