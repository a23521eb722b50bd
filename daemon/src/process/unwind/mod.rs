//! DWARF unwinding of user stack copies: a framehop unwinder per process,
//! whose modules' unwind tables (eh_frame, eh_frame_hdr, debug_frame; Go
//! code by its `.gopclntab`) are read only when a walk first reaches their
//! code, from the daemon-wide budgeted cache (`cache`), and the walk from
//! the sampled registers to the outermost frame. Frame pointers are used
//! where a module has no CFI, and in JIT code unless its jitdump gave
//! tables (`jit`), but through JIT stubs known by their code (`stubs`) and
//! HotSpot's compiled Java code, by the frame sizes in its code cache
//! (`hotspot`). It also finds the caller a frame-pointer callchain skips
//! below a Go function without a frame.
pub mod cache;
mod elf;
pub mod gopclntab;
mod hotspot;
mod jit;
mod stubs;

use crate::os::perf::MAX_STACK_BYTES;
use crate::process::maps::{Mapping, ModuleFile};
use crate::process::symbolize::jitdump::JitDumpTable;
use crate::process::unwind::gopclntab::{GoTable, Step};
use cache::Held;
use elf::UNWIND_DATA;
use elf::{bias, elf_data, Cfi, Data, ElfUnwindData};
use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{FrameAddress, Module, Unwinder as _};
use hotspot::{CodeCache, Frame};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use stubs::Stubs;

pub use elf::{bytes, counters, epoch, release_pages, set_budget, shed};

/// Most frames followed in one stack.
pub const MAX_FRAMES: usize = 256;

/// Where a user stack can be on x86-64: not in the first page (never mapped,
/// see vm.mmap_min_addr) and not above user space (57-bit addresses with
/// 5-level paging).
const USER_STACKS: Range<u64> = 0x1000..1 << 56;

/// How one stack walk ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Walk {
    /// Reached the outermost frame, reading no stack at or above `reach`
    /// (an address): the thread's other walks, all under the same outermost
    /// frame, need no more of its stack either.
    Complete { reach: u64 },
    /// Stopped where the walk needed stack past the copy's end, within what
    /// the largest copy the kernel makes would have held: a larger
    /// `stack_bytes` may complete it.
    CopyEnded,
    /// Stopped early otherwise: unwind data was missing or wrong, a frame
    /// pointer led out of any copy's reach, or the depth limit was hit.
    Truncated,
}

impl Walk {
    pub fn truncated(self) -> bool {
        !matches!(self, Walk::Complete { .. })
    }
}

/// A Go program mapped in a process: its code's addresses, avma − svma,
/// and its function table.
struct GoModule {
    avma: Range<u64>,
    bias: u64,
    table: Arc<GoTable>,
}

impl GoModule {
    /// The function holding `pc` (an address in the process).
    fn func(&self, pc: u64) -> Option<crate::process::unwind::gopclntab::Func<'_>> {
        if !self.avma.contains(&pc) {
            return None;
        }
        self.table.func(pc.wrapping_sub(self.bias))
    }
}

/// The file a mapping maps, as profd reads it.
enum Source {
    /// Held open by the process's maps.
    File(Arc<ModuleFile>),
    Path(PathBuf),
}

impl Source {
    fn readable(&self) -> &Path {
        match self {
            Source::File(f) => &f.readable,
            Source::Path(p) => p,
        }
    }

    fn name(&self) -> String {
        match self {
            Source::File(f) => crate::process::maps::module_name(&f.path),
            Source::Path(p) => crate::process::maps::module_name(p),
        }
    }
}

/// A mapping's unwind tables.
enum Tables {
    /// Not looked for yet: no walk reached its code (or the cache let go of
    /// them).
    Unread,
    Held(Arc<Held<ElfUnwindData>>),
    /// The file has none (or they exceed the cache's budget): frame
    /// pointers there.
    None,
}

/// What a walk through a mapping needs read of it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Need {
    /// Its Go function table alone (frame-pointer stacks).
    GoTable,
    /// Its unwind tables too (stack copies).
    UnwindTables,
}

/// One executable mapping of a file, known to the unwinder, and what was
/// read for it so far.
struct Slot {
    avma: Range<u64>,
    /// File offset of its start.
    pgoff: u64,
    source: Source,
    tables: Tables,
    /// Whether its Go function table was looked for (a Go program's is then
    /// in `go`).
    go_read: bool,
}

/// One process's modules and unwinding state.
pub struct Unwinder {
    inner: UnwinderX86_64<Data>,
    /// The modules unwound by .debug_frame with their .eh_frame instead,
    /// for the code only that covers (`eh_frame_only`, here as avma).
    eh_frame: UnwinderX86_64<Data>,
    eh_frame_only: Vec<Range<u64>>,
    /// framehop's rule cache (about 16 KB), made at the first walk: the
    /// spaces of processes never sampled, or gone, do without.
    cache: Option<CacheX86_64>,
    /// The file mappings known, by address (not overlapping), each read
    /// when a walk first reaches it.
    slots: Vec<Slot>,
    /// The Go programs among them, unwound by their function tables.
    go: Vec<GoModule>,
    /// JIT code unwound with the tables of its jitdump.
    jit: jit::JitModules,
    /// The JIT stubs of its process, known by their code.
    stubs: Stubs,
    /// Its JVM's code cache, if it runs HotSpot.
    hotspot: CodeCache,
    /// The cache's eviction epoch when this one last dropped the tables
    /// evicted.
    epoch: u64,
}

impl Default for Unwinder {
    fn default() -> Self {
        Unwinder {
            inner: UnwinderX86_64::new(),
            eh_frame: UnwinderX86_64::new(),
            eh_frame_only: Vec::new(),
            cache: None,
            slots: Vec::new(),
            go: Vec::new(),
            jit: jit::JitModules::default(),
            stubs: Stubs::default(),
            hotspot: CodeCache::default(),
            epoch: UNWIND_DATA.epoch(),
        }
    }
}

impl Unwinder {
    /// The unwinder of process `pid`, whose JIT stubs are recognised by
    /// reading its code.
    pub fn of_process(pid: u32) -> Unwinder {
        Unwinder {
            stubs: Stubs::of(pid),
            hotspot: CodeCache::of(pid),
            ..Unwinder::default()
        }
    }

    /// Whether it holds nothing: no modules, no rule cache.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty() && self.cache.is_none() && self.go.is_empty() && self.jit.is_empty()
    }

    /// Whether it holds a rule cache (made at its first walk).
    pub fn has_cache(&self) -> bool {
        self.cache.is_some()
    }

    /// Let go of the rule cache; the next walk makes a new one.
    pub fn drop_cache(&mut self) {
        self.cache = None;
    }

    /// The mappings whose unwind tables it holds now.
    pub fn tables_held(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| matches!(s.tables, Tables::Held(_)))
            .count()
    }

    /// Make the executable mapping `start..end` of file offset `pgoff` of the
    /// ELF file at `path` (readable by profd) known to the unwinder; nothing
    /// is read until a walk reaches it.
    pub fn add_module(&mut self, path: &Path, start: u64, end: u64, pgoff: u64) {
        self.add(start..end, pgoff, Source::Path(path.to_path_buf()));
    }

    /// Make an executable mapping of the target known (file-backed ones;
    /// others are unwound with frame pointers); nothing is read until a
    /// walk (or a frame-pointer stack's Go frame) reaches it.
    pub fn add_mapping(&mut self, m: &Mapping) {
        if let Some(file) = m.file() {
            self.add(m.start..m.end, m.pgoff, Source::File(file.clone()));
        }
    }

    /// Whether the process's jitdump is due to be looked at for new code
    /// (at most every 100 ms).
    pub fn jit_due(&mut self) -> bool {
        self.jit.due()
    }

    /// Make the JIT code of `table` (the process's jitdump) that carries
    /// unwind tables known, from the loads added since the last call: it is
    /// unwound with them from the next walk on.
    pub fn add_jit_code(&mut self, table: Arc<JitDumpTable>) {
        let slots = &self.slots;
        let taken = |pc: u64| slots.iter().any(|s| s.avma.contains(&pc));
        self.jit.add(&mut self.inner, table, taken);
    }

    fn add(&mut self, avma: Range<u64>, pgoff: u64, source: Source) {
        if avma.end <= avma.start {
            return;
        }
        let at = self.slots.partition_point(|s| s.avma.end <= avma.start);
        if let Some(s) = self.slots.get(at) {
            if s.avma == avma && s.pgoff == pgoff && s.source.readable() == source.readable() {
                return;
            }
        }
        // A new mapping replaces what it overlaps, as mmap does.
        let mut end = at;
        while self.slots.get(end).is_some_and(|s| s.avma.start < avma.end) {
            end += 1;
        }
        let gone: Vec<Slot> = self.slots.drain(at..end).collect();
        for slot in &gone {
            self.unload(slot);
        }
        if source.name() == "libjvm.so" {
            self.hotspot.jvm_mapped();
        }
        self.slots.insert(
            at,
            Slot {
                avma,
                pgoff,
                source,
                tables: Tables::Unread,
                go_read: false,
            },
        );
    }

    /// Take what `slot` added out of the framehop unwinders and Go list.
    fn unload(&mut self, slot: &Slot) {
        let r = &slot.avma;
        if matches!(slot.tables, Tables::Held(_)) {
            self.inner.remove_module(r.start);
            self.eh_frame.remove_module(r.start);
            self.eh_frame_only
                .retain(|o| !(r.start <= o.start && o.end <= r.end));
        }
        if slot.go_read {
            self.go
                .retain(|m| m.avma.end <= r.start || r.end <= m.avma.start);
        }
    }

    /// The slot holding `pc`.
    fn slot_of(&self, pc: u64) -> Option<usize> {
        let at = self.slots.partition_point(|s| s.avma.end <= pc);
        self.slots
            .get(at)
            .is_some_and(|s| s.avma.start <= pc)
            .then_some(at)
    }

    /// Read what a walk through `pc` needs of its mapping, unless read
    /// before: the tables `need` names.
    fn reach(&mut self, pc: u64, need: Need) {
        let Some(i) = self.slot_of(pc) else {
            return;
        };
        if !self.slots[i].go_read {
            self.load_go(i);
        }
        if need == Need::GoTable {
            return;
        }
        match &self.slots[i].tables {
            Tables::Held(h) => UNWIND_DATA.touch(h),
            Tables::None => {}
            Tables::Unread => self.load_tables(i),
        }
    }

    /// Read slot `i`'s unwind tables (from the cache) and add its module.
    fn load_tables(&mut self, i: usize) {
        let slot = &self.slots[i];
        let (start, end) = (slot.avma.start, slot.avma.end);
        let Some(data) = elf_data(slot.source.readable()) else {
            tracing::debug!(path = %slot.source.readable().display(), "no unwind data; frame pointers only there");
            self.slots[i].tables = Tables::None;
            return;
        };
        let Some(bias) = bias(&data.loads, start, slot.pgoff) else {
            self.slots[i].tables = Tables::None;
            return;
        };
        let name = slot.source.name();
        if data.debug_frame_first {
            let info = data.section_info(Cfi::EhFrame);
            let module = Module::new(name.clone(), start..end, bias, info);
            self.eh_frame.add_module(module);
            let avma = |r: &Range<u64>| r.start.wrapping_add(bias)..r.end.wrapping_add(bias);
            self.eh_frame_only
                .extend(data.eh_frame_only.iter().map(avma));
        }
        let cfi = match data.debug_frame_first {
            true => Cfi::DebugFrame,
            false => Cfi::EhFrame,
        };
        let info = data.section_info(cfi);
        self.inner
            .add_module(Module::new(name, start..end, bias, info));
        self.slots[i].tables = Tables::Held(data);
    }

    /// Look for slot `i`'s Go function table.
    fn load_go(&mut self, i: usize) {
        let slot = &mut self.slots[i];
        slot.go_read = true;
        let Some(table) = GoTable::of(slot.source.readable()) else {
            return;
        };
        let Some(bias) = bias(&table.loads, slot.avma.start, slot.pgoff) else {
            return;
        };
        self.go.push(GoModule {
            avma: slot.avma.clone(),
            bias,
            table,
        });
    }

    /// Let go of the unwind tables the cache evicted (read again when a
    /// walk needs them); cheap when it evicted none in use.
    pub fn drop_evicted(&mut self) {
        let epoch = UNWIND_DATA.epoch();
        if epoch == self.epoch {
            return;
        }
        self.epoch = epoch;
        for i in 0..self.slots.len() {
            if matches!(&self.slots[i].tables, Tables::Held(h) if h.evicted()) {
                let r = self.slots[i].avma.clone();
                self.inner.remove_module(r.start);
                self.eh_frame.remove_module(r.start);
                self.eh_frame_only
                    .retain(|o| !(r.start <= o.start && o.end <= r.end));
                self.slots[i].tables = Tables::Unread;
            }
        }
    }

    /// Walk the user stack from the sampled registers over the copied stack
    /// bytes (which start at `sp`), appending frames innermost first (return
    /// addresses minus one) to `out`. The modules the walk reaches are read
    /// then, if not before.
    pub fn unwind(&mut self, ip: u64, sp: u64, bp: u64, stack: &[u8], out: &mut Vec<u64>) -> Walk {
        // A process may set rsp to anything. Outside user space there is no
        // stack to walk, and there a CFA such as a PLT stub's `rsp + 8` (near
        // u64::MAX) or libgcc's `rsp + 0` (sp < 8) is below 8, from which
        // framehop subtracts 8 unchecked. From a plausible sp, real CFI keeps
        // every later CFA above the first page.
        if !USER_STACKS.contains(&sp) {
            out.push(ip);
            return Walk::Truncated;
        }
        self.drop_evicted();
        let mut cache = self.cache.take().unwrap_or_default();
        let walk = self.walk(&mut cache, ip, sp, bp, stack, out);
        self.cache = Some(cache);
        walk
    }

    fn walk(
        &mut self,
        cache: &mut CacheX86_64,
        ip: u64,
        sp: u64,
        bp: u64,
        stack: &[u8],
        out: &mut Vec<u64>,
    ) -> Walk {
        let mut reach = sp;
        let mut past_copy = false;
        let mut read_stack = |addr: u64| -> Result<u64, ()> {
            let off = usize::try_from(addr.checked_sub(sp).ok_or(())?).map_err(|_| ())?;
            let Some(bytes) = stack.get(off..off.checked_add(8).ok_or(())?) else {
                past_copy = off + 8 <= MAX_STACK_BYTES as usize;
                return Err(());
            };
            reach = reach.max(addr + 8);
            Ok(u64::from_ne_bytes(bytes.try_into().map_err(|_| ())?))
        };
        let mut regs = UnwindRegsX86_64::new(ip, sp, bp);
        let mut address = FrameAddress::from_instruction_pointer(ip);
        out.push(ip);
        let mut frames = 1;
        loop {
            let pc = address.address_for_lookup();
            self.reach(pc, Need::UnwindTables);
            let outside = self.slot_of(pc).is_none();
            let stub = match address {
                FrameAddress::ReturnAddress(ra) if outside => self
                    .stubs
                    .frame_returning_to(ra.get())
                    .map(|size| Frame::Sized {
                        size,
                        saved_bp: false,
                    }),
                _ => None,
            };
            let jit = stub.or_else(|| {
                let first = !address.is_return_address();
                let slots = &self.slots;
                outside
                    .then(|| self.hotspot.frame_at(pc, first, || libjvm(slots)))
                    .flatten()
            });
            let step = match jit {
                Some(frame) => Some(jit_step(frame, &mut regs, &mut read_stack)),
                None => go_step(&self.go, address, &mut regs, &mut read_stack),
            };
            let caller = match step {
                Some(step) => step,
                None => {
                    let unwinder = match self.eh_frame_only.iter().any(|r| r.contains(&pc)) {
                        true => &self.eh_frame,
                        false => &self.inner,
                    };
                    unwinder
                        .unwind_frame(address, &mut regs, cache, &mut read_stack)
                        .map_err(drop)
                }
            };
            match caller {
                Ok(Some(ra)) => match FrameAddress::from_return_address(ra) {
                    Some(next) if frames < MAX_FRAMES => {
                        frames += 1;
                        out.push(next.address_for_lookup());
                        address = next;
                    }
                    _ => return Walk::Truncated,
                },
                Ok(None) => return Walk::Complete { reach },
                Err(()) if past_copy => return Walk::CopyEnded,
                Err(()) => return Walk::Truncated,
            }
        }
    }

    /// Whether Go code is among `frames` (reading the Go function tables of
    /// the mappings they are in, if not before): frame-pointer stacks need
    /// [`Unwinder::go_stack_len`] and [`Unwinder::go_return_address`] then.
    pub fn knows_go(&mut self, frames: &[u64]) -> bool {
        for &pc in frames {
            self.reach(pc, Need::GoTable);
        }
        !self.go.is_empty()
    }

    /// The return address a frame-pointer callchain skips when the sample
    /// is in a Go function that has no frame, or has not set it up yet
    /// (rbp still is its caller's): the one at sp plus the function's frame
    /// size, read from the `stack` bytes copied from sp. None when `ip` is
    /// not in Go code or the copy is too short.
    pub fn go_return_address(&mut self, ip: u64, stack: &[u8]) -> Option<u64> {
        self.reach(ip, Need::GoTable);
        let m = self.go.iter().find(|m| m.avma.contains(&ip))?;
        let Step::Delta(delta) = m.func(ip)?.step(ip.wrapping_sub(m.bias))? else {
            return None;
        };
        let at = usize::try_from(delta).ok()?;
        let bytes = stack.get(at..at.checked_add(8)?)?;
        Some(u64::from_ne_bytes(bytes.try_into().ok()?)).filter(|&ra| ra != 0)
    }

    /// How many of a frame-pointer stack's `frames` (innermost first) to
    /// keep: up to its outermost Go frame (`runtime.goexit`), above which the
    /// kernel's walk follows whatever rbp held when the goroutine started.
    /// None to keep them all.
    pub fn go_stack_len(&mut self, frames: &[u64]) -> Option<usize> {
        if !self.knows_go(frames) {
            return None;
        }
        let outermost = |pc: u64| {
            self.go
                .iter()
                .find_map(|m| m.func(pc))
                .is_some_and(|f| f.outermost())
        };
        let at = frames.iter().position(|&pc| outermost(pc))?;
        (at + 1 < frames.len()).then_some(at + 1)
    }
}

/// Step out of a JIT frame known by its stub or code cache.
fn jit_step(
    frame: Frame,
    regs: &mut UnwindRegsX86_64,
    read_stack: &mut impl FnMut(u64) -> Result<u64, ()>,
) -> Result<Option<u64>, ()> {
    let (cfa, ra) = match frame {
        // The return address at the frame's top, and, when it saved it, the
        // caller's rbp below that.
        Frame::Sized { size, saved_bp } => {
            let cfa = regs.sp().checked_add(size).ok_or(())?;
            let ra = read_stack(cfa - 8)?;
            if saved_bp {
                regs.set_bp(read_stack(cfa - 16)?);
            }
            (cfa, ra)
        }
        // rbp's frame, but the caller's sp from below rbp: above rbp's
        // frame (an interpreted caller's, or the call stub's), or its end.
        Frame::Interpreted => {
            let bp = regs.bp();
            let ra = read_stack(bp.checked_add(8).ok_or(())?)?;
            let sender = read_stack(bp.checked_sub(hotspot::SENDER_SP).ok_or(())?)?;
            let cfa = sender.max(bp + 16);
            if cfa - bp > MAX_STACK_BYTES as u64 {
                return Err(());
            }
            regs.set_bp(read_stack(bp)?);
            (cfa, ra)
        }
    };
    if cfa <= regs.sp() {
        return Err(());
    }
    regs.set_sp(cfa);
    regs.set_ip(ra);
    Ok(Some(ra))
}

/// One frame of Go code unwound with its function table: the caller's
/// return address (None at the outermost frame), with `regs` set to the
/// caller's. None when `address` is not in Go code.
fn go_step(
    go: &[GoModule],
    address: FrameAddress,
    regs: &mut UnwindRegsX86_64,
    read_stack: &mut impl FnMut(u64) -> Result<u64, ()>,
) -> Option<Result<Option<u64>, ()>> {
    // A return address is looked up in its call instruction.
    let pc = address.address_for_lookup();
    let m = go.iter().find(|m| m.avma.contains(&pc))?;
    let func = m.func(pc)?;
    let mut step = || -> Result<Option<u64>, ()> {
        let delta = match func.step(pc.wrapping_sub(m.bias)).ok_or(())? {
            Step::Top => return Ok(None),
            Step::Delta(delta) => delta,
        };
        // The return address is above the frame; Go keeps the caller's rbp
        // right below it in every function with a frame (only the one
        // instruction after the frame's allocation has not stored it yet).
        let cfa = regs
            .sp()
            .checked_add(delta)
            .ok_or(())?
            .checked_add(8)
            .ok_or(())?;
        let ra = read_stack(cfa - 8)?;
        if delta > 0 {
            if let Ok(bp) = read_stack(cfa - 16) {
                regs.set_bp(bp);
            }
        }
        regs.set_sp(cfa);
        regs.set_ip(ra);
        Ok(Some(ra))
    };
    Some(step())
}

/// Where libjvm.so is among `slots`: the file profd reads and its load
/// bias.
fn libjvm(slots: &[Slot]) -> Option<(PathBuf, u64)> {
    let slot = slots.iter().find(|s| s.source.name() == "libjvm.so")?;
    let path = slot.source.readable().to_path_buf();
    let loads = crate::process::maps::Segments::read(&path)?;
    Some((path, bias(&loads, slot.avma.start, slot.pgoff)?))
}

#[cfg(test)]
#[path = "mod_tests.rs"]
mod tests;
