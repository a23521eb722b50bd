//! HotSpot's code cache (OpenJDK's JVM), found through the VMStructs tables
//! libjvm.so exports: the frame of the compiled Java method or stub at a pc,
//! by which a stack-copy walk steps through code that keeps no frame
//! pointer (a JVM run without -XX:+PreserveFramePointer). It does not walk:
//! the unwinder does, and it leaves blobs without a frame size (but the
//! interpreter's frames that call) and code outside the code heaps to frame
//! pointers.
use crate::process::memory::{Memory, ProcessMemory};
use object::{Object, ObjectSymbol};
use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// How to step out of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame {
    /// The caller's sp is `sp + size`, the return address is right below
    /// it, and the caller's rbp below that when `saved_bp` (else rbp is left
    /// as it is).
    Sized { size: u64, saved_bp: bool },
    /// An interpreted method's, which a call has left: rbp is its frame
    /// pointer, and the caller's sp is the one saved below it (the sender
    /// sp; a compiled caller's frame ends there, not where rbp's frame does,
    /// since the call extended it by the arguments).
    Interpreted,
}

/// Where the interpreter keeps the sender sp, below rbp
/// (`frame::interpreter_frame_sender_sp_offset`, x86-64).
pub const SENDER_SP: u64 = 8;

/// Frames remembered per process, by pc; past it, forgotten and read again.
const MAX_KNOWN: usize = 1 << 16;
/// How long frames are remembered: HotSpot frees the code of methods no
/// longer used, and its place may then hold other code.
const FORGET_AFTER: Duration = Duration::from_secs(10);
/// The largest frame believed (HotSpot's are far smaller).
const MAX_FRAME: u64 = 1 << 20;
/// The most VMStructs entries read (JDK 17 has about 2 000).
const MAX_ENTRIES: u64 = 1 << 14;
/// The most code heaps read (HotSpot has at most three).
const MAX_HEAPS: u32 = 8;
/// The most segment map bytes followed back to a block's start.
const MAX_HOPS: usize = 1 << 16;
/// The segment map's mark of a segment not in any block.
const FREE_SEGMENT: u8 = 0xff;

/// The code cache of one process, read on first use.
pub struct CodeCache {
    state: State,
    /// Frames by (pc, whether it is the sampled instruction).
    known: HashMap<(u64, bool), Option<Frame>>,
    /// When `known` was last emptied.
    since: Instant,
}

enum State {
    /// Not looked at yet.
    Unread(u32),
    /// Looked at before libjvm.so was mapped: looked at again once it is.
    NoJvm(u32),
    Read(Jvm, Layout),
    /// Not a JVM, or one whose tables did not parse: nothing is known.
    Nothing,
}

/// Where a JVM's memory is read.
enum Jvm {
    /// Its process's, opened at each read: reads are few once its frames
    /// are known, and a file held open per JVM would count against
    /// profd's descriptors.
    Process(u32),
    #[cfg(test)]
    Memory(Box<dyn Memory + Send>),
}

impl Jvm {
    fn frame_at(&self, layout: &Layout, pc: u64, first: bool) -> Option<Frame> {
        match self {
            Jvm::Process(pid) => {
                let mem = ProcessMemory::open(*pid).ok()?;
                layout.frame_at(&mem, pc, first)
            }
            #[cfg(test)]
            Jvm::Memory(mem) => layout.frame_at(mem.as_ref(), pc, first),
        }
    }
}

impl Default for CodeCache {
    fn default() -> Self {
        CodeCache::with(State::Nothing)
    }
}

impl CodeCache {
    /// The code cache of process `pid`, read when first asked.
    pub fn of(pid: u32) -> CodeCache {
        CodeCache::with(State::Unread(pid))
    }

    fn with(state: State) -> CodeCache {
        CodeCache {
            state,
            known: HashMap::new(),
            since: Instant::now(),
        }
    }

    /// libjvm.so was mapped: a process that had none is looked at again.
    pub fn jvm_mapped(&mut self) {
        if let State::NoJvm(pid) = self.state {
            self.state = State::Unread(pid);
        }
    }

    /// The frame of the code at `pc`, an address outside every module: the
    /// sampled instruction when `first`, else a return address's call. At
    /// the first call `libjvm` says where libjvm.so is (the file profd reads
    /// and its load bias); a process without it has no code cache.
    pub fn frame_at(
        &mut self,
        pc: u64,
        first: bool,
        libjvm: impl FnOnce() -> Option<(std::path::PathBuf, u64)>,
    ) -> Option<Frame> {
        if let State::Unread(pid) = self.state {
            self.state = match libjvm() {
                Some((path, bias)) => read(pid, &path, bias).unwrap_or(State::Nothing),
                None => State::NoJvm(pid),
            };
        }
        let State::Read(jvm, layout) = &self.state else {
            return None;
        };
        if self.known.len() >= MAX_KNOWN || self.since.elapsed() > FORGET_AFTER {
            self.known.clear();
            self.since = Instant::now();
        }
        if let Some(&known) = self.known.get(&(pc, first)) {
            return known;
        }
        let frame = jvm.frame_at(layout, pc, first);
        self.known.insert((pc, first), frame);
        frame
    }
}

/// The code cache of process `pid`, whose libjvm.so at `path` is loaded
/// with `bias`.
fn read(pid: u32, path: &Path, bias: u64) -> Option<State> {
    let file = std::fs::File::open(path).ok()?;
    let data = object::ReadCache::new(file);
    let elf = object::File::parse(&data).ok()?;
    let mut symbols = HashMap::new();
    for s in elf.dynamic_symbols() {
        if let Ok(name) = s.name() {
            if name.starts_with("gHotSpotVM") {
                symbols.insert(name.to_string(), bias.wrapping_add(s.address()));
            }
        }
    }
    let mem = ProcessMemory::open(pid).ok()?;
    let layout = Layout::read(&mem, |name| symbols.get(name).copied());
    match layout {
        Some(layout) => {
            tracing::debug!(pid, heaps = layout.heaps.len(), "HotSpot code cache found");
            Some(State::Read(Jvm::Process(pid), layout))
        }
        None => {
            tracing::debug!(
                pid,
                "HotSpot's VMStructs did not parse; frame pointers only"
            );
            None
        }
    }
}

/// One code heap: its reserved addresses and its segment map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Heap {
    pub low: u64,
    pub high: u64,
    pub segmap: u64,
    pub log2_segment: u32,
}

impl Heap {
    /// The start of the used block holding `pc`: the segment map holds, per
    /// segment, 0 at a block's first segment and else how many segments to
    /// go back (HotSpot's CodeHeap::find_block_for).
    fn block_of(&self, mem: &dyn Memory, pc: u64) -> Option<u64> {
        let mut at = (pc - self.low) >> self.log2_segment;
        let mut chunk = [0u8; 256];
        let mut hops = 0;
        loop {
            let from = at.saturating_sub(chunk.len() as u64 - 1);
            let bytes = &mut chunk[..(at - from + 1) as usize];
            mem.read(self.segmap.checked_add(from)?, bytes).ok()?;
            while at >= from {
                hops += 1;
                match bytes[(at - from) as usize] {
                    0 => return Some(self.low + (at << self.log2_segment)),
                    FREE_SEGMENT => return None,
                    _ if hops > MAX_HOPS => return None,
                    hop => at = at.checked_sub(u64::from(hop))?,
                }
            }
        }
    }
}

/// Where HotSpot keeps what is read, from its VMStructs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Layout {
    pub heaps: Vec<Heap>,
    /// sizeof(HeapBlock): a blob starts right after its block's header.
    pub heap_block: u64,
    /// HeapBlock::Header::_used in a block.
    pub used: u64,
    /// CodeBlob's fields.
    pub name: u64,
    pub frame_size: u64,
    pub frame_complete: u64,
    pub code_begin: u64,
    pub code_end: u64,
    /// nmethod's field of where its frame starts to be built, after the
    /// inline cache's check.
    pub verified_entry: Option<u64>,
}

impl Layout {
    /// Read the tables through the exported symbols (`symbol` gives their
    /// addresses in the process), then the code heaps.
    pub fn read(mem: &dyn Memory, symbol: impl Fn(&str) -> Option<u64>) -> Option<Layout> {
        let var = |name: &str| u64_at(mem, symbol(name)?);
        let fields = Tables {
            array: var("gHotSpotVMStructs")?,
            stride: var("gHotSpotVMStructEntryArrayStride")?,
            name: var("gHotSpotVMStructEntryTypeNameOffset")?,
            field: var("gHotSpotVMStructEntryFieldNameOffset")?,
            value: var("gHotSpotVMStructEntryOffsetOffset")?,
            address: var("gHotSpotVMStructEntryAddressOffset")?,
        }
        .read(mem, FIELDS)?;
        // All but the last are needed.
        let needed = &fields[..FIELDS.len() - 1];
        let needed: Vec<(u64, u64)> = needed.iter().copied().collect::<Option<_>>()?;
        let types = Tables {
            array: var("gHotSpotVMTypes")?,
            stride: var("gHotSpotVMTypeEntryArrayStride")?,
            name: var("gHotSpotVMTypeEntryTypeNameOffset")?,
            field: var("gHotSpotVMTypeEntryTypeNameOffset")?,
            value: var("gHotSpotVMTypeEntrySizeOffset")?,
            address: var("gHotSpotVMTypeEntrySizeOffset")?,
        }
        .read(mem, TYPES)?;
        let heap_block = types[0]?.0;
        let f = |i: usize| needed[i].0;
        let heaps_at = needed[0].1;
        let (len, data) = (f(1), f(2));
        let (memory, segmap, log2) = (f(3), f(4), f(5));
        let (low, high) = (f(6), f(7));
        let heaps_array = u64_at(mem, heaps_at)?;
        let count = u32_at(mem, heaps_array + len)?;
        let data = u64_at(mem, heaps_array + data)?;
        let mut heaps = Vec::new();
        for i in 0..count.min(MAX_HEAPS) {
            let heap = u64_at(mem, data + 8 * u64::from(i))?;
            let log2_segment = u32_at(mem, heap + log2)?;
            if !(4..=16).contains(&log2_segment) {
                return None;
            }
            heaps.push(Heap {
                low: u64_at(mem, heap + memory + low)?,
                high: u64_at(mem, heap + memory + high)?,
                segmap: u64_at(mem, heap + segmap + low)?,
                log2_segment,
            });
        }
        Some(Layout {
            heaps,
            heap_block,
            used: f(8) + f(9),
            name: f(14),
            verified_entry: fields[15].map(|(offset, _)| offset),
            frame_size: f(10),
            frame_complete: f(11),
            code_begin: f(12),
            code_end: f(13),
        })
    }

    /// The frame of the blob at `pc`, when it is in a code heap, in a blob's
    /// code, and the blob has a frame size (compiled methods and runtime
    /// stubs) or is the interpreter (whose frames are known by rbp once
    /// they call). As the sampled instruction (`first`), the part of the
    /// frame built or left by the instruction at `pc` (see `prologue` and
    /// `epilogue`).
    pub fn frame_at(&self, mem: &dyn Memory, pc: u64, first: bool) -> Option<Frame> {
        let heap = self.heaps.iter().find(|h| h.low <= pc && pc < h.high)?;
        let block = heap.block_of(mem, pc)?;
        let mut header = [0u8; 256];
        let fields = [
            self.name,
            self.frame_size,
            self.frame_complete,
            self.code_begin,
            self.code_end,
        ];
        let len = self.heap_block + fields.iter().max()? + 8;
        let header = header.get_mut(..usize::try_from(len).ok()?)?;
        mem.read(block, header).ok()?;
        if header.get(usize::try_from(self.used).ok()?) != Some(&1) {
            return None;
        }
        let at = |field: u64| (self.heap_block + field) as usize;
        let i32_of =
            |field| i32::from_le_bytes(header[at(field)..at(field) + 4].try_into().unwrap());
        let u64_of =
            |field| u64::from_le_bytes(header[at(field)..at(field) + 8].try_into().unwrap());
        let code = u64_of(self.code_begin)..u64_of(self.code_end);
        if !code.contains(&pc) {
            return None;
        }
        let size = u64::try_from(i32_of(self.frame_size)).ok()? * 8;
        if size == 0 && !first && is_named(mem, u64_of(self.name), b"Interpreter\0") {
            return Some(Frame::Interpreted);
        }
        if size == 0 || size > MAX_FRAME {
            return None;
        }
        let frame = Frame::Sized {
            size,
            saved_bp: true,
        };
        if !first {
            return Some(frame);
        }
        // The instructions around pc: 8 bytes before it, 8 from it.
        let mut near = [0u8; 16];
        let from = pc.saturating_sub(8).max(code.start);
        let to = (pc + 8).min(code.end);
        let at = (8 - (pc - from)) as usize;
        mem.read(from, &mut near[at..at + (to - from) as usize])
            .ok()?;
        let (before, op) = near.split_at(8);
        // -1: never complete.
        let complete = u64::try_from(i32_of(self.frame_complete)).ok()?;
        if pc >= code.start + complete {
            return Some(epilogue(before, op).unwrap_or(frame));
        }
        let named_nmethod = || is_named(mem, u64_of(self.name), b"nmethod\0");
        let entry = match self.verified_entry {
            Some(field) if named_nmethod() => u64_at(mem, block + self.heap_block + field)?,
            _ => code.start,
        };
        prologue(pc, entry, before, op, size)
    }
}

/// The frame part of the way out of a compiled method, the instruction at
/// pc being `op`, those before it ending in `before`: the caller's rbp
/// popped or being popped (`add $N,%rsp; pop %rbp; cmp 0x..(%r15),%rsp;
/// ja ...; ret`). None when the frame is whole.
fn epilogue(before: &[u8], op: &[u8]) -> Option<Frame> {
    let popped = Frame::Sized {
        size: 8,
        saved_bp: false,
    };
    // cmp 0x..(%r15),%rsp with a 32- or 8-bit displacement: the return's
    // safepoint poll.
    let poll = |b: &[u8]| b.starts_with(&[0x49, 0x3b, 0xa7]) || b.starts_with(&[0x49, 0x3b, 0x67]);
    Some(match op {
        // pop %rbp: the caller's rbp and the return address are left.
        [0x5d, ..] => Frame::Sized {
            size: 16,
            saved_bp: true,
        },
        [0xc3, ..] => popped,
        _ if poll(op) => popped,
        // ja after the poll.
        [0x0f, 0x87, ..] if poll(&before[1..]) || poll(&before[4..]) => popped,
        _ => return None,
    })
}

/// The frame part of the way into a compiled method, before its frame is
/// complete: at its `entry`, nothing of it; then `push %rbp; sub $N,%rsp`
/// (after a stack bang, `mov %eax,-0x..(%rsp)`), or `sub $N,%rsp; mov
/// %rbp,N-8(%rsp)`; `push %rbp; mov %rsp,%rbp` in stubs. None where it is
/// not known.
fn prologue(pc: u64, entry: u64, before: &[u8], op: &[u8], size: u64) -> Option<Frame> {
    let caller = Frame::Sized {
        size: 8,
        saved_bp: false,
    };
    let pushed = Frame::Sized {
        size: 16,
        saved_bp: true,
    };
    if pc <= entry {
        return Some(caller);
    }
    let after_push = before[7] == 0x55;
    Some(match op {
        [0x55, ..] | [0x89, 0x84, 0x24, ..] => caller,
        [0x48, 0x81 | 0x83, 0xec, ..] if after_push => pushed,
        [0x48, 0x81 | 0x83, 0xec, ..] => caller,
        [0x48, 0x89, 0xe5, ..] if after_push => pushed,
        // mov %rbp,N-8(%rsp): the frame is allocated, rbp not yet saved.
        [0x48, 0x89, 0x6c | 0xac, 0x24, ..] => Frame::Sized {
            size,
            saved_bp: false,
        },
        _ => return None,
    })
}

/// Whether the string at `at` is `name` (its bytes with the ending NUL).
fn is_named(mem: &dyn Memory, at: u64, name: &[u8]) -> bool {
    let mut b = [0u8; 16];
    let Some(b) = b.get_mut(..name.len()) else {
        return false;
    };
    mem.read(at, b).is_ok() && b == name
}

/// The fields read, as (type, field): an entry's offset, or a static's
/// address. Their order is what `Layout::read` takes them by.
const FIELDS: &[(&str, &str)] = &[
    ("CodeCache", "_heaps"),
    ("GrowableArrayBase", "_len"),
    ("GrowableArray<int>", "_data"),
    ("CodeHeap", "_memory"),
    ("CodeHeap", "_segmap"),
    ("CodeHeap", "_log2_segment_size"),
    ("VirtualSpace", "_low"),
    ("VirtualSpace", "_high_boundary"),
    ("HeapBlock", "_header"),
    ("HeapBlock::Header", "_used"),
    ("CodeBlob", "_frame_size"),
    ("CodeBlob", "_frame_complete_offset"),
    ("CodeBlob", "_code_begin"),
    ("CodeBlob", "_code_end"),
    ("CodeBlob", "_name"),
    // Wanted, not needed: the prologue is then known from the verified
    // entry only.
    ("nmethod", "_verified_entry_point"),
];

/// The types whose size is read (type names twice: a type entry has no
/// field).
const TYPES: &[(&str, &str)] = &[("HeapBlock", "HeapBlock")];

/// One of the VMStructs tables in memory, by its exported layout.
struct Tables {
    array: u64,
    stride: u64,
    name: u64,
    field: u64,
    /// The entry's offset (fields) or size (types).
    value: u64,
    /// A static field's address.
    address: u64,
}

impl Tables {
    /// The (value, address) of each of `wanted` found; None when the table
    /// does not read.
    fn read(&self, mem: &dyn Memory, wanted: &[(&str, &str)]) -> Option<Vec<Option<(u64, u64)>>> {
        if self.stride == 0 || self.stride > 1024 {
            return None;
        }
        let mut found = vec![None; wanted.len()];
        let mut strings = Strings::new(mem);
        for i in 0..MAX_ENTRIES {
            let entry = self.array + i * self.stride;
            let name = u64_at(mem, entry + self.name)?;
            if name == 0 {
                break;
            }
            let field = u64_at(mem, entry + self.field)?;
            for (at, (t, f)) in wanted.iter().enumerate() {
                if found[at].is_none() && strings.is(name, t) && strings.is(field, f) {
                    let value = u64_at(mem, entry + self.value)?;
                    let address = u64_at(mem, entry + self.address)?;
                    found[at] = Some((value, address));
                }
            }
        }
        Some(found)
    }
}

/// C strings read from memory a page at a time, each page once.
struct Strings<'m> {
    mem: &'m dyn Memory,
    pages: HashMap<u64, Option<Box<[u8; 4096]>>>,
}

impl<'m> Strings<'m> {
    fn new(mem: &'m dyn Memory) -> Self {
        Strings {
            mem,
            pages: HashMap::new(),
        }
    }

    fn byte(&mut self, addr: u64) -> Option<u8> {
        let page = addr & !0xfff;
        let mem = self.mem;
        let bytes = self.pages.entry(page).or_insert_with(|| {
            let mut b = Box::new([0u8; 4096]);
            mem.read(page, &mut b[..]).ok().map(|()| b)
        });
        bytes.as_ref().map(|b| b[(addr - page) as usize])
    }

    /// Whether the string at `addr` is `s`.
    fn is(&mut self, addr: u64, s: &str) -> bool {
        (s.bytes().chain([0]).enumerate()).all(|(i, c)| self.byte(addr + i as u64) == Some(c))
    }
}

fn u64_at(mem: &dyn Memory, addr: u64) -> Option<u64> {
    let mut b = [0; 8];
    mem.read(addr, &mut b).ok()?;
    Some(u64::from_le_bytes(b))
}

fn u32_at(mem: &dyn Memory, addr: u64) -> Option<u32> {
    mem.u32_at(addr).ok()
}

#[cfg(test)]
#[path = "hotspot_tests.rs"]
mod tests;
