//! The symbolizer thread's work: kernel addresses through kallsyms, user
//! addresses grouped by mapped file and named from its ELF/DWARF data (or a
//! split debug file) by file offset, with inlined functions and source lines
//! (PLT stubs as `symbol@plt`),
//! or from the names found before for any session (`names`), or for Go
//! programs without symbols from their function table (`.gopclntab`);
//! vDSO code from the vDSO image; anonymous code from the target's perf map;
//! the rest as placeholders.
use super::debug::DebugFiles;
use super::fde::FdeTables;
use super::frame::{Frame, FrameName, Origin};
use super::kallsyms::Kallsyms;
use super::kmod::{Modules, Opened};
use super::lru::Lru;
use super::names::{FileKey, Names};
use super::plt::PltTables;
use super::vdso::{Vdso, VDSO_MODULE};
use super::{Budget, Naming, STATS};
use crate::memory::Tidy;
use crate::os::file_version::FileVersion;
use crate::process::maps::{is_jit_candidate, module_name, Backing, ProcessMaps};
use crate::process::unwind::gopclntab::GoTable;
use blazesym::symbolize::evict::{self, Evict};
use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{CodeInfo, Input, Sym, Symbolized, Symbolizer as Blazesym};
use profd_common::model::is_kernel;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long the symbolizer keeps the data of a file (or of kallsyms) that
/// no request used, when within its budget: longer than the gaps between
/// the short sessions of a script, which would otherwise parse them again
/// each time.
pub const IDLE: Duration = Duration::from_secs(60);

/// What the worker holds parsed: a file blazesym parsed (and mapped), by
/// version (blazesym shares one parsed copy between the paths naming the
/// same version), the kernel's functions ([`Kallsyms`]), or a kernel
/// module's debug information, by the module's name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Held {
    File(FileVersion),
    Kernel,
    Module(String),
}

/// Paths remembered per file version held: a path of a file closed since
/// keeps the parsed copy for the next process mapping that version.
const MAX_PATHS: usize = 8;

/// Owns blazesym's symbolizer, the kernel's functions, the debug files
/// found and the names and PLT tables read, for the daemon's life; keeps
/// what it holds parsed within the budget (see [`Budget`]).
pub struct Worker {
    /// Symbolizer of ELF files; it parses (and maps) a file when first
    /// asked about it, until evicted.
    sym: Blazesym,
    /// The kernel's functions, read when a request first names a kernel
    /// address, dropped when [`Held::Kernel`] is evicted.
    kernel: Option<Kallsyms>,
    /// Kernel modules' debug information, read when a request first names
    /// an address of the module.
    modules: Modules,
    /// What `sym`, `kernel` and `modules` hold, with the paths blazesym was
    /// asked with: a file weighed by [`resident_estimate_of`], the kernel's
    /// functions and a module's DWARF by their bytes.
    held: Lru<Held, Vec<PathBuf>>,
    /// The version each of those paths named.
    paths: HashMap<PathBuf, FileVersion>,
    /// The versions held whose debug information weighs more than half
    /// the budget for parsed files: named from their symbols alone.
    symbols_only: HashSet<FileVersion>,
    debug: DebugFiles,
    /// What files' addresses were named, for every session.
    names: Names,
    plt: PltTables,
    /// Function tables of stripped code, from unwind entries.
    fdes: FdeTables,
    budget: Budget,
    /// A budget of its own instead of [`super::budget`]'s (tests).
    fixed: Option<Budget>,
    /// When the pages of the files parsed last left the resident set.
    released: Instant,
    /// A file was read for the request being answered: the pages its
    /// parsing touched leave the resident set before the next file is
    /// read, so one request naming many new files holds the pages of one.
    read_one: bool,
    /// Whether mapped files' code is named here.
    pub naming: Naming,
}

/// How often the pages of the files blazesym maps leave the resident set
/// (reading this process's mappings to find them costs more than a
/// request).
const RELEASE_EVERY: Duration = Duration::from_secs(1);

/// When [`Worker::release_pages`] gives the parsed files' pages back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Release {
    /// Now, however recently it last did.
    Now,
    /// Once [`RELEASE_EVERY`] has passed since it last did.
    WhenDue,
}

/// Source file names, shared between the frames of one request.
#[derive(Default)]
struct Files(HashSet<Arc<str>>);

impl Files {
    fn location(&mut self, info: Option<&CodeInfo<'_>>) -> (Option<Arc<str>>, u32) {
        let Some(info) = info else {
            return (None, 0);
        };
        let path = info.to_path();
        let path = path.to_string_lossy();
        let file = match self.0.get(path.as_ref()) {
            Some(f) => f.clone(),
            None => {
                let f: Arc<str> = Arc::from(path.as_ref());
                self.0.insert(f.clone());
                f
            }
        };
        (Some(file), info.line.unwrap_or(0))
    }
}

/// A blazesym symbolizer naming inlined functions and source lines, looking
/// for split debug files in `debug_dirs`.
fn blazesym(debug_dirs: &[PathBuf]) -> Blazesym {
    Blazesym::builder()
        .enable_code_info(true)
        .enable_inlined_fns(true)
        .enable_demangling(true)
        .set_debug_dirs(Some(debug_dirs))
        .build()
}

/// Drop a Rust legacy-mangling hash (`::h0123456789abcdef`) left on a name.
pub fn without_hash(name: &str) -> &str {
    match name.rsplit_once("::h") {
        Some((head, hash)) if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => {
            head
        }
        _ => name,
    }
}

/// The frames of a resolved symbol, innermost (deepest inlined) first.
fn frames_of(sym: &Sym<'_>, module: &str, files: &mut Files) -> Vec<Frame> {
    let mut out = Vec::with_capacity(1 + sym.inlined.len());
    for f in sym.inlined.iter().rev() {
        let (file, line) = files.location(f.code_info.as_ref());
        out.push(Frame {
            func: FrameName {
                name: without_hash(&f.name).to_string(),
                module: module.to_string(),
                inlined: true,
                origin: None,
            },
            file,
            line,
            named: true,
        });
    }
    let (file, line) = files.location(sym.code_info.as_deref());
    out.push(Frame {
        func: FrameName {
            name: without_hash(&sym.name).to_string(),
            module: module.to_string(),
            inlined: false,
            origin: None,
        },
        file,
        line,
        named: true,
    });
    out
}

/// User addresses of one mapped file: (index, file offset).
struct Group {
    path: PathBuf,
    module: String,
    items: Vec<(usize, u64)>,
    /// The file's version, once read.
    version: Option<FileVersion>,
}

impl Worker {
    pub fn new(debug_dirs: Vec<PathBuf>) -> Worker {
        Worker {
            sym: blazesym(&debug_dirs),
            kernel: None,
            modules: Modules::running(),
            held: Lru::default(),
            paths: HashMap::new(),
            symbols_only: HashSet::new(),
            debug: DebugFiles::new(debug_dirs),
            names: Names::default(),
            plt: PltTables::default(),
            budget: Budget::of(super::budget()),
            fixed: None,
            released: Instant::now(),
            read_one: false,
            naming: Naming::OnHost,
            fdes: FdeTables::default(),
        }
    }

    /// Have `fetcher` fetch the debug files not found (see
    /// [`DebugFiles::fetch_with`]).
    pub fn fetch_with(&mut self, fetcher: super::debuginfod::Fetcher) {
        self.debug.fetch_with(fetcher);
    }

    /// The debug files of these build ids arrived: their binaries are
    /// searched again, and the names found without them forgotten.
    pub fn debug_arrived(&mut self, ids: &[Vec<u8>]) {
        for version in self.debug.arrived(ids) {
            self.names.forget_file(version);
        }
        self.modules.arrived(ids);
    }

    /// A worker with the kernel's functions and modules given (tests).
    #[cfg(test)]
    pub fn with_kernel(mut self, kallsyms: Kallsyms, modules: Modules) -> Worker {
        let now = Instant::now();
        (self.held).insert(Held::Kernel, Vec::new(), kallsyms.bytes(), now);
        self.kernel = Some(kallsyms);
        self.modules = modules;
        self
    }

    /// A worker keeping to `budget` whatever the daemon's is.
    #[cfg(test)]
    pub fn with_budget(debug_dirs: Vec<PathBuf>, budget: Budget) -> Worker {
        Worker {
            budget,
            fixed: Some(budget),
            ..Worker::new(debug_dirs)
        }
    }

    /// What blazesym holds parsed now, oldest use first, and its weight.
    #[cfg(test)]
    pub fn held(&self) -> (Vec<Held>, u64) {
        (self.held.keys().cloned().collect(), self.held.bytes())
    }

    /// What the names kept weigh.
    #[cfg(test)]
    pub fn names_bytes(&self) -> u64 {
        self.names.bytes()
    }

    /// Apply the budget in force now, drop what was unused for [`IDLE`]
    /// (names: [`super::names::NAMES_IDLE`]) and what now names another
    /// file or nothing; everything but the names with [`Tidy::Shed`]. True
    /// if parsed data was released.
    pub fn tick(&mut self, now: Instant, tidy: Tidy) -> bool {
        let shed = tidy == Tidy::Shed;
        self.budget = self.fixed.unwrap_or_else(|| Budget::of(super::budget()));
        self.names.evict_idle(now);
        let mut released = 0;
        if let Some(before) = now.checked_sub(IDLE) {
            for (held, paths) in self.held.drop_unused_since(before) {
                self.release(&held, paths);
                released += 1;
            }
        }
        if shed {
            while let Some((h, paths, _)) = self.held.pop_oldest() {
                self.release(&h, paths);
                released += 1;
            }
            self.plt.shrink_to(0);
            self.fdes.shrink_to(0);
            self.names.shrink_to(self.names.bytes() / 2);
        }
        self.shrink();
        self.release_pages(if shed { Release::Now } else { Release::WhenDue });
        released > 0
    }

    /// Let blazesym drop `held`'s data (its mapping and descriptor),
    /// asked for through `paths`.
    fn release(&mut self, held: &Held, paths: Vec<PathBuf>) {
        STATS.evictions.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(?held, ?paths, "symbolizer: data let go of");
        match held {
            Held::Kernel => self.kernel = None,
            Held::Module(name) => self.modules.forget(name),
            Held::File(version) => {
                self.symbols_only.remove(version);
                for path in paths {
                    self.forget_path(&path);
                }
            }
        }
    }

    /// Let blazesym drop what it holds for `path`.
    fn forget_path(&mut self, path: &Path) {
        self.paths.remove(path);
        if let Err(err) = self.sym.evict(&Evict::Elf(evict::Elf::new(path))) {
            tracing::debug!(path = %path.display(), %err, "cannot evict a file's symbols");
        }
    }

    /// Keep every cache within its share of the budget, dropping what was
    /// used longest ago first, and publish the figures.
    fn shrink(&mut self) {
        self.names.shrink_to(self.budget.names);
        self.plt.shrink_to(self.budget.plt);
        self.fdes.shrink_to(self.fde_budget());
        for path in self.debug.take_closed() {
            self.drop_path(&path);
        }
        // kallsyms serves nearly every request (kernel frames): the files
        // make room for it; it goes only when idle or shed. Of the files,
        // those used most stay.
        for (h, paths) in self
            .held
            .shrink_by_use(self.budget.parsed, Some(&Held::Kernel))
        {
            self.release(&h, paths);
        }
        self.publish();
    }

    /// The figures of [`super::STATS`] that are gauges.
    fn publish(&self) {
        let vdso = Vdso::get().map_or(0, Vdso::bytes);
        let bytes = self.held.bytes()
            + self.names.bytes()
            + self.plt.bytes()
            + self.fdes.bytes()
            + vdso
            + super::perfmap::tables_bytes()
            + super::jitdump::tables_bytes();
        STATS.bytes.store(bytes, Ordering::Relaxed);
        STATS
            .parsed_bytes
            .store(self.held.bytes(), Ordering::Relaxed);
        STATS
            .parsed
            .store(self.held.len() as u64, Ordering::Relaxed);
        STATS
            .names_bytes
            .store(self.names.bytes(), Ordering::Relaxed);
        STATS
            .names
            .store(self.names.len() as u64, Ordering::Relaxed);
        STATS
            .name_evictions
            .store(self.names.evicted(), Ordering::Relaxed);
        STATS.plt_bytes.store(self.plt.bytes(), Ordering::Relaxed);
        STATS
            .debug_files
            .store(self.debug.held() as u64, Ordering::Relaxed);
    }

    /// `path` no longer names what it named: blazesym forgets it (the
    /// version it named stays held through its other paths).
    fn drop_path(&mut self, path: &Path) {
        let Some(version) = self.paths.get(path).copied() else {
            return;
        };
        if let Some(paths) = self.held.get_mut(&Held::File(version)) {
            paths.retain(|p| p != path);
        }
        self.forget_path(path);
    }

    /// The kernel's functions, marked as used now; read when not held.
    fn used_kernel(&mut self) -> Option<&Kallsyms> {
        let now = Instant::now();
        if self.held.get(&Held::Kernel, now).is_none() {
            STATS.loads.fetch_add(1, Ordering::Relaxed);
            let kallsyms = Kallsyms::read()
                .inspect_err(|err| tracing::debug!(%err, "cannot read /proc/kallsyms"))
                .unwrap_or_default();
            tracing::debug!(
                functions = kallsyms.len(),
                bytes = kallsyms.bytes(),
                "kernel functions read"
            );
            self.held
                .insert(Held::Kernel, Vec::new(), kallsyms.bytes(), now);
            self.kernel = Some(kallsyms);
        }
        self.kernel.as_ref()
    }

    /// Mark the file at `path` as used now, weighed when its version is new
    /// to blazesym. Whether its debug information is read: not when it
    /// weighs more than half the budget for parsed files, as it would
    /// push everything else out (and be parsed anew at each request).
    fn used_file(&mut self, path: &Path) -> bool {
        let now = Instant::now();
        let Some(version) = FileVersion::at(path) else {
            return true;
        };
        match self.paths.get(path) {
            Some(v) if *v == version => {}
            // The descriptor number names another file now.
            Some(_) => self.drop_path(path),
            None => {}
        }
        let key = Held::File(version);
        if self.held.get(&key, now).is_none() {
            STATS.loads.fetch_add(1, Ordering::Relaxed);
            self.read_one = true;
            let weight = resident_estimate_of(path);
            let with_debug = weight.with_debug() <= self.budget.parsed / 2;
            let held = if with_debug {
                weight.with_debug()
            } else {
                STATS.symbols_only.fetch_add(1, Ordering::Relaxed);
                self.symbols_only.insert(version);
                weight.symbols
            };
            tracing::debug!(path = %path.display(), weight = held, with_debug, "symbolizer: a file's data read");
            self.held.insert(key.clone(), Vec::new(), held, now);
        }
        if self.paths.insert(path.to_path_buf(), version).is_none() {
            let mut oldest = None;
            if let Some(paths) = self.held.get_mut(&key) {
                paths.push(path.to_path_buf());
                if paths.len() > MAX_PATHS {
                    oldest = Some(paths.remove(0));
                }
            }
            if let Some(old) = oldest {
                self.forget_path(&old);
            }
        }
        !self.symbols_only.contains(&version)
    }

    /// The frames of each of `addrs`, in `maps`.
    pub fn symbolize(&mut self, maps: &ProcessMaps, addrs: &[u64]) -> Vec<Vec<Frame>> {
        let mut out: Vec<Option<Vec<Frame>>> = vec![None; addrs.len()];
        let mut files = Files::default();
        self.kernel(addrs, &mut out);

        // User addresses, grouped by the file that backs them; anonymous code
        // (and code no file names) is looked up in the perf map, with a
        // placeholder ready if that fails too.
        let mut groups: HashMap<PathBuf, Group> = HashMap::new();
        let mut jit: Vec<(usize, Frame)> = Vec::new();
        for (i, &addr) in addrs.iter().enumerate() {
            if is_kernel(addr) {
                continue;
            }
            let Some(m) = maps.find(addr) else {
                jit.push((i, Frame::unknown(addr)));
                continue;
            };
            match &m.backing {
                Backing::File(path) => {
                    let readable = m
                        .file()
                        .map_or_else(|| path.to_path_buf(), |f| f.readable.clone());
                    groups
                        .entry(readable.clone())
                        .or_insert_with(|| Group {
                            path: path.to_path_buf(),
                            module: module_name(path),
                            items: Vec::new(),
                            version: None,
                        })
                        .items
                        .push((i, m.file_offset(addr)));
                }
                Backing::Special(name) if &**name == VDSO_MODULE => {
                    let offset = addr - m.start;
                    out[i] = Some(vec![match Vdso::get().and_then(|v| v.name(offset)) {
                        Some(function) => Frame::named(function, VDSO_MODULE),
                        None => Frame::unnamed(format!("{name}+{offset:#x}"), VDSO_MODULE),
                    }]);
                }
                Backing::Special(name) => {
                    let placeholder =
                        Frame::unnamed(format!("{name}+{:#x}", addr - m.start), &**name);
                    if is_jit_candidate(&m.backing) {
                        jit.push((i, placeholder));
                    } else {
                        out[i] = Some(vec![placeholder]);
                    }
                }
            }
        }
        for (readable, group) in groups {
            self.file(maps, &readable, group, &mut out, &mut jit, &mut files);
            // What this file needed stays parsed only within the budget.
            self.shrink();
            if std::mem::take(&mut self.read_one) {
                self.release_pages(Release::Now);
            }
        }
        if !jit.is_empty() {
            let names = maps.jit_names();
            for (i, placeholder) in jit {
                out[i] = Some(vec![names.frame(addrs[i]).unwrap_or(placeholder)]);
            }
        }
        out.into_iter()
            .zip(addrs)
            .map(|(frames, &addr)| frames.unwrap_or_else(|| vec![Frame::unknown(addr)]))
            .collect()
    }

    /// The pages of the files blazesym maps (symbol tables, DWARF) leave
    /// the resident set (at each [`Worker::tick`], which follows every
    /// request): they stay in the page cache, and the next request faults
    /// in the few it reads. What stays resident is what
    /// [`resident_estimate_of`] weighs. At most every [`RELEASE_EVERY`],
    /// unless [`Release::Now`].
    fn release_pages(&mut self, when: Release) {
        let now = Instant::now();
        if when == Release::WhenDue && now.duration_since(self.released) < RELEASE_EVERY {
            return;
        }
        self.released = now;
        let mut files: HashSet<(u64, u64)> = self.debug.inodes().collect();
        for held in self.held.keys() {
            if let Held::File(version) = held {
                files.insert(version.inode());
            }
        }
        crate::os::release_file_pages(&files);
    }

    fn kernel(&mut self, addrs: &[u64], out: &mut [Option<Vec<Frame>>]) {
        let kernel: Vec<usize> = (0..addrs.len()).filter(|&i| is_kernel(addrs[i])).collect();
        if kernel.is_empty() {
            return;
        }
        let found: Vec<(usize, Frame, Option<String>)> = match self.used_kernel() {
            Some(kallsyms) => (kernel.into_iter())
                .map(|i| match kallsyms.find(addrs[i]) {
                    Some((name, _, None)) => (i, Frame::named(name, "[kernel]"), None),
                    Some((name, _, Some(module))) => {
                        let frame = Frame::named(name, profd_common::kernel::module_of(module));
                        (i, frame, Some(module.to_string()))
                    }
                    None => {
                        let name = format!("[kernel] {:#x}", addrs[i]);
                        (i, Frame::unnamed(name, "[kernel]"), None)
                    }
                })
                .collect(),
            None => Vec::new(),
        };
        for (i, frame, module) in found {
            let inlined = module.and_then(|m| self.module_frames(&m, addrs[i], &frame.func.module));
            out[i] = Some(inlined.unwrap_or_else(|| vec![frame]));
        }
        self.shrink();
    }

    /// The frames of `addr` in kernel module `name` (functions inlined
    /// there, source lines) from the module's debug information, when the
    /// host names code and it has one; its build id is asked of debuginfod
    /// when it has none.
    fn module_frames(&mut self, name: &str, addr: u64, module: &str) -> Option<Vec<Frame>> {
        if self.naming == Naming::OffHost {
            return None;
        }
        let now = Instant::now();
        let key = Held::Module(name.to_string());
        match (self.modules).open(name, self.debug.dirs(), self.budget.parsed / 2) {
            Opened::Held(debug) => {
                self.held.get(&key, now);
                debug.frames(addr, module)
            }
            Opened::New(debug) => {
                STATS.loads.fetch_add(1, Ordering::Relaxed);
                self.held.insert(key, Vec::new(), debug.bytes(), now);
                debug.frames(addr, module)
            }
            Opened::Absent(id) => {
                if let Some(id) = id {
                    self.debug.fetch_id(&id);
                }
                None
            }
        }
    }

    /// Name the addresses of one mapped file: those named before (for any
    /// session) from the shared names, the others from the file's data.
    fn file(
        &mut self,
        maps: &ProcessMaps,
        readable: &Path,
        mut group: Group,
        out: &mut [Option<Vec<Frame>>],
        jit: &mut Vec<(usize, Frame)>,
        files: &mut Files,
    ) {
        let now = Instant::now();
        let Some(key) = FileKey::of(readable, &group.module) else {
            self.parse(maps, readable, group, out, jit, files);
            return;
        };
        group
            .items
            .retain(|&(i, off)| match self.names.get(&key, off, now) {
                Some(frames) => {
                    out[i] = Some(frames.clone());
                    STATS.hits.fetch_add(1, Ordering::Relaxed);
                    false
                }
                None => true,
            });
        if group.items.is_empty() {
            return;
        }
        let new = group.items.clone();
        group.version = Some(key.version());
        let functions: HashMap<usize, std::ops::Range<u64>> = self
            .parse(maps, readable, group, out, jit, files)
            .into_iter()
            .collect();
        for (i, off) in new {
            let Some(frames) = &out[i] else { continue };
            let frames = frames.clone();
            match functions.get(&i).cloned() {
                Some(range) => {
                    self.names
                        .insert_function(&key, range, frames, now, self.budget.names)
                }
                None => self.names.insert(&key, off, frames, now, self.budget.names),
            }
        }
    }

    /// Name the addresses of one mapped file: from its split debug file if
    /// it has one, else (and for what that misses) from the file itself;
    /// what stays unnamed goes to the perf-map look-up. The functions named
    /// by their symbol alone (no line, nothing inlined): the index of an
    /// address in each, and the function's range of file offsets.
    fn parse(
        &mut self,
        maps: &ProcessMaps,
        readable: &Path,
        group: Group,
        out: &mut [Option<Vec<Frame>>],
        jit: &mut Vec<(usize, Frame)>,
        files: &mut Files,
    ) -> Vec<(usize, std::ops::Range<u64>)> {
        let mut functions = Vec::new();
        let Group {
            path,
            module,
            items,
            version,
        } = group;
        if self.naming == Naming::OffHost {
            return self.group(readable, &module, items, out, jit);
        }
        let mut left = items;
        // PLT stubs: no symbol covers them.
        if let Some(plt) = self.plt.of(readable, Instant::now(), self.budget.plt) {
            left.retain(|&(i, off)| match plt.name(off) {
                Some(name) => {
                    out[i] = Some(vec![Frame::named(format!("{name}@plt"), &*module)]);
                    false
                }
                None => true,
            });
        }
        let target = maps.target().map(|t| &**t);
        if let Some(split) = self.debug.find(readable, &path, target, version.as_ref()) {
            let (mapped, unmapped): (Vec<_>, Vec<_>) = left
                .into_iter()
                .map(|(i, off)| (i, off, split.vaddr(off)))
                .partition(|x| x.2.is_some());
            left = unmapped.into_iter().map(|(i, off, _)| (i, off)).collect();
            let vaddrs: Vec<u64> = mapped.iter().filter_map(|x| x.2).collect();
            let src = Source::Elf(Elf {
                debug_syms: self.used_file(&split.path),
                ..Elf::new(split.path.as_path())
            });
            match self.sym.symbolize(&src, Input::VirtOffset(&vaddrs)) {
                Ok(results) => {
                    for (&(i, off, _), r) in mapped.iter().zip(results) {
                        match r {
                            Symbolized::Sym(s) => out[i] = Some(frames_of(&s, &module, files)),
                            Symbolized::Unknown(_) => left.push((i, off)),
                        }
                    }
                }
                Err(err) => {
                    tracing::debug!(debug_file = %split.path.display(), %err, "cannot read a debug file");
                    left.extend(mapped.iter().map(|&(i, off, _)| (i, off)));
                }
            }
        }
        if left.is_empty() {
            return functions;
        }
        let offsets: Vec<u64> = left.iter().map(|&(_, off)| off).collect();
        let src = Source::Elf(Elf {
            debug_syms: self.used_file(readable),
            ..Elf::new(readable)
        });
        let mut unnamed = Vec::new();
        match self.sym.symbolize(&src, Input::FileOffset(&offsets)) {
            Ok(results) => {
                for (&(i, off), r) in left.iter().zip(results) {
                    match r {
                        Symbolized::Sym(s) => {
                            if let Some(range) = function_range(&s, off) {
                                functions.push((i, range));
                            }
                            out[i] = Some(frames_of(&s, &module, files));
                        }
                        Symbolized::Unknown(_) => unnamed.push((i, off)),
                    }
                }
            }
            Err(err) => {
                tracing::debug!(path = %path.display(), %err, "cannot read symbols");
                unnamed = left;
            }
        }
        if unnamed.is_empty() {
            return functions;
        }
        // Go programs without symbols (linked with -s) still have their
        // function table.
        let go = GoTable::of(readable);
        unnamed.retain(|&(i, off)| {
            let name = go.as_ref().and_then(|t| {
                let func = t.func(t.loads.vaddr(off)?)?;
                func.name()
            });
            let Some(name) = name else { return true };
            out[i] = Some(vec![Frame::named(name, &*module)]);
            false
        });
        functions.extend(self.group(readable, &module, unnamed, out, jit));
        functions
    }

    /// The function tables' share of the budget. Off the host no file is
    /// parsed: they have the room the kernel's functions leave of the
    /// parsed files' share too.
    fn fde_budget(&self) -> u64 {
        match self.naming {
            Naming::OnHost => self.budget.fdes,
            Naming::OffHost => {
                self.budget.fdes + self.budget.parsed.saturating_sub(self.held.bytes())
            }
        }
    }

    /// Stripped code no symbol names, grouped by the unwind table's entry
    /// (FDE) that covers it: one frame a function, `module!0xSTART`, with
    /// its origin (build id and address) for naming it off the host.
    /// What no entry covers goes to the perf-map look-up, as
    /// `module!0xADDRESS` (the instruction's address) when the binary's
    /// segments give it, so that it is named off the host the same way.
    /// The index of an address in each function, and the function's file
    /// offsets.
    fn group(
        &mut self,
        readable: &Path,
        module: &str,
        items: Vec<(usize, u64)>,
        out: &mut [Option<Vec<Frame>>],
        jit: &mut Vec<(usize, Frame)>,
    ) -> Vec<(usize, std::ops::Range<u64>)> {
        let mut functions = Vec::new();
        if items.is_empty() {
            return functions;
        }
        let budget = self.fde_budget();
        let fdes = self.fdes.of(readable, Instant::now(), budget);
        for (i, off) in items {
            let Some(fdes) = fdes.as_ref() else {
                jit.push((i, Frame::unnamed(format!("{module}+{off:#x}"), module)));
                continue;
            };
            let origin = |address| Origin {
                build_id: fdes.build_id.clone(),
                address,
            };
            match fdes.function(off) {
                Some((range, start)) => {
                    let name = format!("{module}!{start:#x}");
                    out[i] = Some(vec![Frame::unnamed_in(name, module, origin(start))]);
                    functions.push((i, range));
                }
                None => {
                    let frame = match fdes.vaddr(off) {
                        Some(address) => {
                            let name = format!("{module}!{address:#x}");
                            Frame::unnamed_in(name, module, origin(address))
                        }
                        None => Frame::unnamed(format!("{module}+{off:#x}"), module),
                    };
                    jit.push((i, frame));
                }
            }
        }
        functions
    }
}

/// The file offsets of the function `sym` names, when its name is all that
/// names an address in it (no line, nothing inlined: every address in it
/// is named the same); `off` is the offset asked about.
fn function_range(sym: &Sym<'_>, off: u64) -> Option<std::ops::Range<u64>> {
    if sym.code_info.is_some() || !sym.inlined.is_empty() {
        return None;
    }
    let size = sym.size? as u64;
    let start = off.checked_sub(sym.offset as u64)?;
    (size > 0 && (sym.offset as u64) < size).then(|| start..start + size)
}

/// What blazesym keeps resident of a file: from its symbols, and more
/// from its debug information.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Weight {
    pub symbols: u64,
    pub debug: u64,
}

impl Weight {
    pub fn with_debug(self) -> u64 {
        self.symbols + self.debug
    }
}

/// What blazesym keeps resident of the ELF file at `path` once it named
/// addresses in it: its index of the symbols (8 bytes for a symbol's 24),
/// compressed sections decompressed, and about a quarter of the size of
/// DWARF in the units and line tables it builds. The file's sections are
/// mapped, and their pages released after each request
/// (`Worker::release_pages`): they weigh a sixteenth, for what a request
/// reads. The file's size (as symbols) when it cannot be parsed.
pub fn resident_estimate_of(path: &Path) -> Weight {
    const BASE: u64 = 64 << 10;
    let symbols_only = |bytes| Weight {
        symbols: bytes,
        debug: 0,
    };
    let Ok(file) = std::fs::File::open(path) else {
        return symbols_only(BASE);
    };
    let size = file.metadata().map_or(0, |m| m.len());
    let cache = object::ReadCache::new(file);
    let Some(sections) = crate::process::maps::Sections::of(&cache) else {
        return symbols_only(BASE + size);
    };
    let mut w = symbols_only(BASE);
    for section in sections.iter() {
        let name = section.name.as_str();
        let debug = name.starts_with(".debug_") || name.starts_with(".zdebug_");
        let symbols = matches!(
            name,
            ".symtab" | ".strtab" | ".dynsym" | ".dynstr" | ".gopclntab" | ".gnu_debugdata"
        );
        if !debug && !symbols {
            continue;
        }
        let mut bytes = section.stored_size() / 16;
        if section.compressed() {
            bytes += section.uncompressed_size();
        } else if debug {
            bytes += section.stored_size() / 4;
        }
        if matches!(name, ".symtab" | ".dynsym") {
            // blazesym's index of them by address: a word a symbol.
            bytes += section.uncompressed_size() / 3;
        }
        if debug {
            w.debug += bytes;
        } else {
            w.symbols += bytes;
        }
    }
    let most = BASE + 2 * size;
    w.symbols = w.symbols.min(most);
    w.debug = w.debug.min(most - w.symbols);
    w
}
