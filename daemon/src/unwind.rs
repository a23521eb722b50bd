//! DWARF unwinding of user stack copies: per-module unwind tables (eh_frame,
//! eh_frame_hdr, debug_frame, read once per binary and shared while used; Go
//! code by its `.gopclntab`), a framehop unwinder per session, and the walk
//! from the sampled registers to the outermost frame. Frame pointers are used
//! where a module has no CFI. It also finds the caller a frame-pointer
//! callchain skips below a Go function without a frame.
use crate::file_version::SharedReads;
use crate::gopclntab::{GoTable, Step};
use crate::maps::{Load, Mapping, Segments};
use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, FrameAddress, Module, Unwinder as _};
use object::{Object, ObjectSection};
use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

/// Most frames followed in one stack.
pub const MAX_FRAMES: usize = 256;

/// Where a user stack can be on x86-64: not in the first page (never mapped,
/// see vm.mmap_min_addr) and not above user space (57-bit addresses with
/// 5-level paging).
const USER_STACKS: Range<u64> = 0x1000..1 << 56;

type Data = Arc<[u8]>;

/// What framehop needs of one ELF file, read once.
#[derive(Debug)]
struct ElfUnwindData {
    text: Option<(Range<u64>, Data)>,
    eh_frame: Option<(Range<u64>, Data)>,
    eh_frame_hdr: Option<(Range<u64>, Data)>,
    debug_frame: Option<Data>,
    /// With both sections, whether .debug_frame covers more code: it is
    /// then the one given to framehop...
    debug_frame_first: bool,
    /// ...and these code ranges (svma), which only .eh_frame covers (the C
    /// runtime's), are unwound with .eh_frame.
    eh_frame_only: Vec<Range<u64>>,
    got: Option<Range<u64>>,
    loads: Segments,
}

impl ElfUnwindData {
    fn read(path: &Path) -> Option<ElfUnwindData> {
        let file = std::fs::File::open(path).ok()?;
        let cache = object::ReadCache::new(file);
        let elf = object::File::parse(&cache).ok()?;
        let section = |name: &str| -> Option<(Range<u64>, Data)> {
            let s = elf.section_by_name(name)?;
            let data = s.uncompressed_data().ok()?;
            Some((s.address()..s.address() + s.size(), Arc::from(&data[..])))
        };
        let loads = Segments::of(&cache)?;
        let text = section(".text");
        let got = elf
            .section_by_name(".got")
            .map(|s| s.address()..s.address() + s.size());
        let eh_frame = section(".eh_frame");
        let eh_frame_hdr = section(".eh_frame_hdr");
        let debug_frame = section(".debug_frame").map(|(_, d)| d);
        // framehop reads one CFI section, .eh_frame where there is one. A
        // program built without asynchronous unwind tables (gcc's
        // -fno-asynchronous-unwind-tables -g) has its functions' CFI only in
        // .debug_frame, and an .eh_frame from the C runtime's objects that
        // covers a few others (_start, whose CFI ends the stack): the code
        // only .eh_frame covers is unwound with it, the rest with
        // .debug_frame when that covers more.
        let (mut debug_frame_first, mut eh_frame_only) = (false, Vec::new());
        if let (Some((range, eh)), Some(debug)) = (&eh_frame, &debug_frame) {
            let bases = gimli::BaseAddresses::default()
                .set_eh_frame(range.start)
                .set_text(text.as_ref().map_or(0, |(r, _)| r.start))
                .set_got(got.as_ref().map_or(0, |r| r.start));
            let endian = gimli::LittleEndian;
            let eh = fde_ranges(&gimli::EhFrame::new(eh, endian), &bases);
            let debug = fde_ranges(&gimli::DebugFrame::new(debug, endian), &bases);
            let size = |r: &[Range<u64>]| r.iter().map(|r| r.end - r.start).sum::<u64>();
            if size(&debug) > size(&eh) {
                debug_frame_first = true;
                eh_frame_only = eh
                    .into_iter()
                    .filter(|r| !debug.iter().any(|d| d.start < r.end && r.start < d.end))
                    .collect();
            }
        }
        Some(ElfUnwindData {
            text,
            eh_frame,
            eh_frame_hdr,
            debug_frame,
            debug_frame_first,
            eh_frame_only,
            got,
            loads,
        })
    }

    /// The sections framehop unwinds the module with: .eh_frame (and its
    /// header) or, with `debug_frame`, .debug_frame alone.
    fn section_info(&self, debug_frame: bool) -> ExplicitModuleSectionInfo<Data> {
        let eh = |x: &Option<(Range<u64>, Data)>| x.clone().filter(|_| !debug_frame);
        let (eh_frame, eh_frame_hdr) = (eh(&self.eh_frame), eh(&self.eh_frame_hdr));
        ExplicitModuleSectionInfo {
            base_svma: 0,
            text_svma: self.text.as_ref().map(|(r, _)| r.clone()),
            text: self.text.as_ref().map(|(_, d)| d.clone()),
            got_svma: self.got.clone(),
            eh_frame_svma: eh_frame.as_ref().map(|(r, _)| r.clone()),
            eh_frame: eh_frame.map(|(_, d)| d),
            eh_frame_hdr_svma: eh_frame_hdr.as_ref().map(|(r, _)| r.clone()),
            eh_frame_hdr: eh_frame_hdr.map(|(_, d)| d),
            debug_frame: self.debug_frame.clone().filter(|_| debug_frame),
            ..Default::default()
        }
    }
}

/// The code ranges (svma) the FDEs of a CFI section describe.
fn fde_ranges<'a, S>(section: &S, bases: &gimli::BaseAddresses) -> Vec<Range<u64>>
where
    S: gimli::UnwindSection<gimli::EndianSlice<'a, gimli::LittleEndian>>,
{
    let mut entries = section.entries(bases);
    let mut ranges = Vec::new();
    while let Ok(Some(entry)) = entries.next() {
        if let gimli::CieOrFde::Fde(partial) = entry {
            if let Ok(fde) = partial.parse(S::cie_from_offset) {
                let start = fde.initial_address();
                ranges.push(start..start.saturating_add(fde.len()));
            }
        }
    }
    ranges
}

/// avma − svma for an executable mapping of file offset `pgoff` at `start`
/// of a file loaded as `loads`. The mapping starts at the page holding the
/// executable segment's first byte, which linkers such as lld let share a
/// page with the segment before it: match the executable segment first.
fn bias(loads: &Segments, start: u64, pgoff: u64) -> Option<u64> {
    let holds = |l: &&Load| l.offset & !0xfff <= pgoff && pgoff < l.offset + l.size;
    let load = loads
        .0
        .iter()
        .filter(|l| l.exec)
        .find(holds)
        .or_else(|| loads.0.iter().find(holds))?;
    // avma = start + (off − pgoff) and svma = vaddr + (off − offset).
    Some(
        start
            .wrapping_sub(pgoff)
            .wrapping_add(load.offset)
            .wrapping_sub(load.vaddr),
    )
}

/// Unwind data of the binaries some unwinder uses, by file version (a
/// binary rewritten in place is read again): read once, shared by all
/// sessions, dropped when the last unwinder using it goes.
fn elf_data(path: &Path) -> Option<Arc<ElfUnwindData>> {
    static DATA: SharedReads<ElfUnwindData> = SharedReads::new();
    DATA.get(path, ElfUnwindData::read)
}

/// How one stack walk ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Walk {
    /// Reached the outermost frame, reading no stack at or above `reach`
    /// (an address): the thread's other walks, all under the same outermost
    /// frame, need no more of its stack either.
    Complete { reach: u64 },
    /// Stopped early: the copy ended, unwind data was missing or wrong, or
    /// the depth limit was hit.
    Truncated,
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
    fn func(&self, pc: u64) -> Option<crate::gopclntab::Func<'_>> {
        if !self.avma.contains(&pc) {
            return None;
        }
        self.table.func(pc.wrapping_sub(self.bias))
    }
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
    /// The modules added, by start address (so each is added once), with
    /// the unwind data they use (kept while they do).
    modules: HashMap<u64, (Range<u64>, Arc<ElfUnwindData>)>,
    /// The Go programs among them, unwound by their function tables.
    go: Vec<GoModule>,
}

impl Default for Unwinder {
    fn default() -> Self {
        Unwinder {
            inner: UnwinderX86_64::new(),
            eh_frame: UnwinderX86_64::new(),
            eh_frame_only: Vec::new(),
            cache: None,
            modules: HashMap::new(),
            go: Vec::new(),
        }
    }
}

impl Unwinder {
    /// Whether it holds nothing: no modules, no rule cache.
    pub fn is_empty(&self) -> bool {
        self.modules.is_empty() && self.cache.is_none() && self.go.is_empty()
    }

    /// Whether it holds a rule cache (made at its first walk).
    pub fn has_cache(&self) -> bool {
        self.cache.is_some()
    }

    /// Let go of the rule cache; the next walk makes a new one.
    pub fn drop_cache(&mut self) {
        self.cache = None;
    }

    /// Whether Go code is mapped.
    pub fn has_go(&self) -> bool {
        !self.go.is_empty()
    }

    /// Make the executable mapping `start..end` of file offset `pgoff` of the
    /// ELF file at `path` (readable by profd) known to the unwinder.
    pub fn add_module(&mut self, name: &str, path: &Path, start: u64, end: u64, pgoff: u64) {
        if self.modules.get(&start).map(|(r, _)| r) == Some(&(start..end)) {
            return;
        }
        let Some(data) = elf_data(path) else {
            tracing::debug!(path = %path.display(), "no unwind data; frame pointers only there");
            return;
        };
        let Some(bias) = bias(&data.loads, start, pgoff) else {
            return;
        };
        if let Some((old, _)) = self.modules.remove(&start) {
            self.inner.remove_module(start);
            self.eh_frame.remove_module(start);
            self.eh_frame_only
                .retain(|r| !(old.start <= r.start && r.end <= old.end));
        }
        if data.debug_frame_first {
            let info = data.section_info(false);
            let module = Module::new(name.to_string(), start..end, bias, info);
            self.eh_frame.add_module(module);
            let avma = |r: &Range<u64>| r.start.wrapping_add(bias)..r.end.wrapping_add(bias);
            self.eh_frame_only
                .extend(data.eh_frame_only.iter().map(avma));
        }
        let info = data.section_info(data.debug_frame_first);
        self.modules.insert(start, (start..end, data));
        self.inner
            .add_module(Module::new(name.to_string(), start..end, bias, info));
        self.add_go(path, start, end, pgoff);
    }

    /// Make the mapping `start..end` of file offset `pgoff` known as Go
    /// code if the file at `path` is a Go program.
    fn add_go(&mut self, path: &Path, start: u64, end: u64, pgoff: u64) {
        self.go
            .retain(|m| m.avma.end <= start || end <= m.avma.start);
        let Some(table) = GoTable::of(path) else {
            return;
        };
        let Some(bias) = bias(&table.loads, start, pgoff) else {
            return;
        };
        self.go.push(GoModule {
            avma: start..end,
            bias,
            table,
        });
    }

    /// Make an executable mapping of the target known (file-backed ones;
    /// others are unwound with frame pointers).
    pub fn add_mapping(&mut self, m: &Mapping) {
        if let Some(file) = m.file() {
            self.add_module(&m.module(), &file.readable, m.start, m.end, m.pgoff);
        }
    }

    /// Walk the user stack from the sampled registers over the copied stack
    /// bytes (which start at `sp`), appending frames innermost first (return
    /// addresses minus one) to `out`.
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
        let mut reach = sp;
        let mut read_stack = |addr: u64| -> Result<u64, ()> {
            let off = usize::try_from(addr.checked_sub(sp).ok_or(())?).map_err(|_| ())?;
            let bytes = stack.get(off..off.checked_add(8).ok_or(())?).ok_or(())?;
            reach = reach.max(addr + 8);
            Ok(u64::from_ne_bytes(bytes.try_into().map_err(|_| ())?))
        };
        let cache = self.cache.get_or_insert_with(Default::default);
        let mut regs = UnwindRegsX86_64::new(ip, sp, bp);
        let mut address = FrameAddress::from_instruction_pointer(ip);
        out.push(ip);
        let mut frames = 1;
        loop {
            let caller = match go_step(&self.go, address, &mut regs, &mut read_stack) {
                Some(step) => step,
                None => {
                    let pc = address.address_for_lookup();
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
                Err(()) => return Walk::Truncated,
            }
        }
    }

    /// The return address a frame-pointer callchain skips when the sample
    /// is in a Go function that has no frame, or has not set it up yet
    /// (rbp still is its caller's): the one at sp plus the function's frame
    /// size, read from the `stack` bytes copied from sp. None when `ip` is
    /// not in Go code or the copy is too short.
    pub fn go_return_address(&self, ip: u64, stack: &[u8]) -> Option<u64> {
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
    pub fn go_stack_len(&self, frames: &[u64]) -> Option<usize> {
        let outermost = |pc: u64| {
            self.go
                .iter()
                .find_map(|m| m.func(pc))
                .is_some_and(|f| f.outermost())
        };
        let at = frames.iter().position(|&pc| outermost(pc))?;
        (at + 1 < frames.len()).then_some(at + 1)
    }

    /// Make the executable mapping `m` known as Go code if it maps a Go
    /// program (for frame-pointer sessions, which unwind nothing else).
    pub fn add_go_mapping(&mut self, m: &Mapping) {
        if let Some(file) = m.file() {
            self.add_go(&file.readable, m.start, m.end, m.pgoff);
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_code_is_unwound_by_its_function_table() {
        use crate::gopclntab::tests::{build, objdump};
        let exe = build("gostacks", &[]);
        let table = GoTable::of(&exe).unwrap();
        let entry = |name: &str| {
            table
                .funcs()
                .find(|f| f.name() == Some(name))
                .unwrap_or_else(|| panic!("{name}"))
                .entry
        };
        let text = *table.loads.0.iter().find(|l| l.exec).unwrap();
        let mut u = Unwinder::default();
        let (start, pgoff) = (text.vaddr & !0xfff, text.offset & !0xfff);
        u.add_module("gostacks", &exe, start, text.vaddr + text.size, pgoff);
        // leafA (no frame) called by Work (a 0x18-byte frame), as if Work
        // had been called by runtime.goexit, the outermost frame.
        let call = objdump(&exe, r"^main\.\(\*Worker\)\.Work$")
            .into_iter()
            .find(|(_, i)| i.starts_with("CALL main.leafA"))
            .unwrap()
            .0;
        let (ip, ra1, ra2) = (
            entry("main.leafA") + 4,
            call + 5,
            entry("runtime.goexit") + 1,
        );
        let sp = 0x7ffc_0000_1000u64;
        let mut stack = vec![0u8; 0x40];
        let mut put = |at: usize, v: u64| stack[at..at + 8].copy_from_slice(&v.to_ne_bytes());
        put(0, ra1);
        put(0x18, 0x7ffc_0000_0bbb); // Work's caller's rbp
        put(0x20, ra2);
        put(0x28, 0x5555); // not a frame: above the outermost one
        let mut out = Vec::new();
        let walk = u.unwind(ip, sp, 0x1234, &stack, &mut out);
        assert_eq!(out, vec![ip, ra1 - 1, ra2 - 1]);
        assert_eq!(walk, Walk::Complete { reach: sp + 0x28 });
        // The frame-pointer helpers: the return address a frameless leaf
        // leaves at sp, and where a chain ends.
        assert_eq!(u.go_return_address(ip, &stack), Some(ra1));
        assert_eq!(u.go_return_address(ra1 - 1, &stack[8..]), Some(ra2));
        assert_eq!(u.go_return_address(0x1234, &stack), None);
        let chain = [ip, ra1 - 1, ra2 - 1, 0x5554];
        assert_eq!(u.go_stack_len(&chain), Some(3));
        assert_eq!(u.go_stack_len(&chain[..3]), None);
    }

    #[test]
    fn a_program_with_cfi_only_in_debug_frame_is_unwound_with_it() {
        // stacks.c without asynchronous unwind tables: its functions' CFI
        // is in .debug_frame, _start's in .eh_frame.
        let dir = std::env::temp_dir().join(format!("profd-debug-frame-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/workloads/stacks.c");
        let build = |name: &str, extra: &[&str]| {
            let exe = dir.join(name);
            let status = std::process::Command::new("cc")
                .args(["-O2", "-g", "-fomit-frame-pointer"])
                .arg("-fno-asynchronous-unwind-tables")
                .args(extra)
                .arg("-o")
                .arg(&exe)
                .arg(&source)
                .status()
                .expect("running cc");
            assert!(status.success());
            exe
        };
        // Debug sections compressed with zlib (SHF_COMPRESSED) read the same.
        let compressed = build("stacks-gz", &["-gz"]);
        let flags = std::process::Command::new("readelf")
            .args(["-S", "-W"])
            .arg(&compressed)
            .output()
            .expect("running readelf");
        let flags = String::from_utf8_lossy(&flags.stdout);
        let line = flags.lines().find(|l| l.contains(".debug_frame")).unwrap();
        assert!(line.split_whitespace().any(|w| w.contains('C')), "{line}");
        let gz = elf_data(&compressed).unwrap();
        assert!(gz.debug_frame_first, "{gz:?}");
        let exe = build("stacks", &[]);
        let data = elf_data(&exe).unwrap();
        assert!(data.debug_frame_first, "{data:?}");
        assert_eq!(
            gz.debug_frame.as_deref(),
            data.debug_frame.as_deref(),
            "the same .debug_frame once uncompressed"
        );
        let bytes = std::fs::read(&exe).unwrap();
        let elf = object::File::parse(&*bytes).unwrap();
        let symbol = |name: &str| {
            use object::ObjectSymbol;
            elf.symbols()
                .find(|s| s.name() == Ok(name))
                .unwrap()
                .address()
        };
        let only = |a: u64| data.eh_frame_only.iter().any(|r| r.contains(&a));
        assert!(only(symbol("_start")));
        assert!(!only(symbol("main")));
        // A binary built as usual keeps .eh_frame.
        assert!(
            !elf_data(&std::env::current_exe().unwrap())
                .unwrap()
                .debug_frame_first
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_binary_rewritten_in_place_is_read_again() {
        let path = std::env::temp_dir().join(format!("profd-rewritten-{}", std::process::id()));
        let exe = std::env::current_exe().unwrap();
        std::fs::copy("/bin/true", &path).unwrap();
        let before = elf_data(&path).expect("/bin/true's unwind data");
        let inode = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&path).unwrap());
        // Same inode, other contents.
        std::fs::write(&path, std::fs::read(&exe).unwrap()).unwrap();
        assert_eq!(
            std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&path).unwrap()),
            inode
        );
        let after = elf_data(&path).expect("the new contents' unwind data");
        let own = elf_data(&exe).unwrap();
        let range = |d: &ElfUnwindData| d.text.as_ref().map(|(r, _)| r.clone());
        assert_ne!(range(&before), range(&after));
        assert_eq!(range(&after), range(&own));
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn unwind_data_goes_with_the_last_unwinder_using_it() {
        let path = std::env::temp_dir().join(format!("profd-unwinders-{}", std::process::id()));
        std::fs::copy("/bin/true", &path).unwrap();
        let data = elf_data(&path).expect("/bin/true's unwind data");
        let exec = *data
            .loads
            .0
            .iter()
            .find(|l| l.exec)
            .expect("a text segment");
        let (start, pgoff) = (0x5555_0000_0000, exec.offset & !0xfff);
        let end = start + exec.size + 0x1000;
        let used = Arc::downgrade(&data);
        let mut units = [Unwinder::default(), Unwinder::default()];
        for u in &mut units {
            u.add_module("true", &path, start, end, pgoff);
        }
        drop(data);
        let again = elf_data(&path).unwrap();
        assert!(Arc::ptr_eq(&again, &used.upgrade().unwrap()), "read once");
        drop(again);
        let [first, second] = units;
        drop(first);
        assert!(used.upgrade().is_some(), "the second unwinder uses it");
        drop(second);
        assert!(used.upgrade().is_none(), "gone with the last unwinder");
        // The segments alone, from the program headers.
        let segments = Segments::read(&path).unwrap();
        assert_eq!(segments.vaddr(exec.offset + 5), Some(exec.vaddr + 5));
        assert_eq!(segments.vaddr(u64::MAX), None);
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn reads_own_unwind_tables_and_maps_the_text_mapping() {
        let maps = crate::maps::ProcessMaps::read(std::process::id()).unwrap();
        let here = reads_own_unwind_tables_and_maps_the_text_mapping as fn() as usize as u64;
        let m = maps.find(here).unwrap();
        let exe = std::env::current_exe().unwrap();
        let data = elf_data(&exe).expect("own ELF");
        assert!(data.eh_frame.is_some() && data.eh_frame_hdr.is_some());
        let bias = bias(&data.loads, m.start, m.pgoff).expect("text mapping is in a PT_LOAD");
        // The symbol table's address of a function plus the bias is where it runs.
        assert!(m.start <= here && here < m.end);
        assert!(bias <= here);
    }

    #[test]
    fn bias_matches_the_executable_segment_sharing_a_page() {
        // rust-lld: R at offset 0 (0x17548 bytes), R E at offset 0x17550
        // mapped at vaddr 0x18550; the r-x mapping starts at pgoff 0x17000.
        let data = ElfUnwindData {
            text: None,
            eh_frame: None,
            eh_frame_hdr: None,
            debug_frame: None,
            debug_frame_first: false,
            eh_frame_only: Vec::new(),
            got: None,
            loads: Segments(vec![
                Load {
                    offset: 0,
                    size: 0x17548,
                    vaddr: 0,
                    exec: false,
                },
                Load {
                    offset: 0x17550,
                    size: 0x1000,
                    vaddr: 0x18550,
                    exec: true,
                },
            ]),
        };
        let start = 0x5555_5556_c000;
        let shift = bias(&data.loads, start, 0x17000).unwrap();
        // The segment's first byte (file 0x17550) is at start + 0x550.
        assert_eq!(0x18550 + shift, start + 0x550);
        // A classic layout: text at offset 0x1000, vaddr 0x1000.
        let classic = ElfUnwindData {
            loads: Segments(vec![Load {
                offset: 0x1000,
                size: 0x2000,
                vaddr: 0x1000,
                exec: true,
            }]),
            ..data
        };
        assert_eq!(bias(&classic.loads, 0x7000_1000, 0x1000), Some(0x7000_0000));
    }

    #[test]
    fn frame_pointer_chain_leaving_the_copy_is_truncated() {
        // No module known: frame pointers. sp = 0x1000; the frame at bp =
        // 0x1008 holds the caller's bp (0x2000, outside the copy) and a
        // return address.
        let mut stack = vec![0u8; 32];
        stack[8..16].copy_from_slice(&0x2000u64.to_ne_bytes());
        stack[16..24].copy_from_slice(&0x5555u64.to_ne_bytes());
        let mut u = Unwinder::default();
        let mut out = Vec::new();
        let walk = u.unwind(0x4444, 0x1000, 0x1008, &stack, &mut out);
        assert_eq!(out, vec![0x4444, 0x5554]);
        assert_eq!(walk, Walk::Truncated);
    }

    /// An unwinder knowing this process's libc, and the address of the first
    /// stub of libc's .plt (its CFA is the DWARF expression rsp + 8 (+ 8)).
    fn libc_plt_stub() -> (Unwinder, u64) {
        let maps = crate::maps::ProcessMaps::read(std::process::id()).unwrap();
        let libc = maps
            .iter()
            .find(|m| m.module().starts_with("libc.so"))
            .expect("libc is mapped");
        let path = &libc.file().expect("libc was opened").readable;
        let bytes = std::fs::read(path).unwrap();
        let elf = object::File::parse(&*bytes).unwrap();
        let plt = elf.section_by_name(".plt").expect("libc has a .plt");
        let bias = bias(&elf_data(path).unwrap().loads, libc.start, libc.pgoff).unwrap();
        // The first stub after the PLT header.
        let ip = plt.address() + 16 + bias;
        assert!(libc.start <= ip && ip < libc.end);
        let mut u = Unwinder::default();
        u.add_mapping(libc);
        (u, ip)
    }

    #[test]
    fn a_stack_pointer_outside_user_space_is_not_walked() {
        // Found by fuzz/fuzz_targets/unwind.rs: in a PLT stub, whose CFA is
        // the DWARF expression rsp + 8 (+ 8), sp = u64::MAX - 1 wrapped the
        // CFA to 6 and framehop's `cfa - 8` overflowed (a panic wherever
        // overflow checks are on, as in this test). libc's .plt has such CFI.
        // (Also found: sp = 0 where libgcc's CFA is rsp + 0, the same panic.)
        let (mut u, ip) = libc_plt_stub();
        for sp in [u64::MAX - 1, 1 << 56, 0xfff, 0] {
            let mut out = Vec::new();
            let walk = u.unwind(ip, sp, 0, &[0u8; 16], &mut out);
            assert_eq!((walk, out), (Walk::Truncated, vec![ip]), "sp {sp:#x}");
        }
        // From a stack pointer in user space the stub is walked as before.
        let mut out = Vec::new();
        let ret = 0x5555_5555_1234u64;
        u.unwind(ip, 0x7ffc_0000_1000, 0, &ret.to_ne_bytes(), &mut out);
        assert_eq!(out, vec![ip, ret - 1]);
    }

    #[test]
    fn jit_frames_are_walked_by_frame_pointer_then_native_ones_by_cfi() {
        // JIT code lies in no module: its frame is stepped by frame pointer,
        // and the unwinder goes on with the tables of the native code it
        // returns to (here a PLT stub of libc, whose CFA is rsp + 8).
        let (mut u, stub) = libc_plt_stub();
        // sp = 0x7ffc_0000_1000; the JIT frame's bp = sp + 0x10 holds the
        // caller's bp (0: the outermost frame uses none) and the return
        // address into the stub; above it, the stub's return address.
        let (sp, jit_ip, outer) = (
            0x7ffc_0000_1000u64,
            0x7f00_dead_0040u64,
            0x7f00_dead_1234u64,
        );
        let mut stack = vec![0u8; 0x28];
        stack[0x18..0x20].copy_from_slice(&(stub + 1).to_ne_bytes());
        stack[0x20..0x28].copy_from_slice(&outer.to_ne_bytes());
        let mut out = Vec::new();
        let walk = u.unwind(jit_ip, sp, sp + 0x10, &stack, &mut out);
        assert_eq!(out, vec![jit_ip, stub, outer - 1]);
        assert_eq!(walk, Walk::Complete { reach: sp + 0x28 });
    }

    #[test]
    fn a_zero_frame_pointer_ends_the_stack() {
        let mut u = Unwinder::default();
        let mut out = Vec::new();
        assert_eq!(
            u.unwind(0x4444, 0x1000, 0, &[0u8; 16], &mut out),
            Walk::Complete { reach: 0x1000 }
        );
        assert_eq!(out, vec![0x4444]);
    }

    #[test]
    fn a_complete_walk_tells_how_far_up_the_stack_it_read() {
        // The frame at bp = 0x1008 holds a zero caller bp and a return
        // address at 0x1010..0x1018; the copy goes on to 0x1040.
        let mut stack = vec![0xffu8; 64];
        stack[8..16].copy_from_slice(&0u64.to_ne_bytes());
        stack[16..24].copy_from_slice(&0x5555u64.to_ne_bytes());
        let mut u = Unwinder::default();
        let mut out = Vec::new();
        let walk = u.unwind(0x4444, 0x1000, 0x1008, &stack, &mut out);
        assert_eq!(out, vec![0x4444, 0x5554]);
        assert_eq!(walk, Walk::Complete { reach: 0x1018 });
        // The same walk over the copy cut at its reach is the same.
        out.clear();
        assert_eq!(
            u.unwind(0x4444, 0x1000, 0x1008, &stack[..0x18], &mut out),
            walk
        );
        assert_eq!(out, vec![0x4444, 0x5554]);
        // Cut below it, the walk stops short.
        out.clear();
        let short = u.unwind(0x4444, 0x1000, 0x1008, &stack[..0x17], &mut out);
        assert_eq!(short, Walk::Truncated);
    }
}
