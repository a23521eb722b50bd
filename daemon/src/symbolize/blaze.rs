//! The symbolizer thread's work: kernel addresses through kallsyms, user
//! addresses grouped by mapped file and named from its ELF/DWARF data (or a
//! split debug file) by file offset, with inlined functions and source lines
//! (PLT stubs as `symbol@plt`),
//! or from the names found before for any session (`names`), or for Go
//! programs without symbols from their function table (`.gopclntab`);
//! vDSO code from the vDSO image; anonymous code from the target's perf map;
//! the rest as placeholders.
use super::debug::DebugFiles;
use super::frame::{Frame, FrameName};
use super::names::{FileKey, Names};
use super::plt::Plt;
use super::vdso::{Vdso, VDSO_MODULE};
use crate::file_version::FileVersion;
use crate::gopclntab::GoTable;
use crate::maps::{is_jit_candidate, module_name, Backing, ProcessMaps};
use blazesym::symbolize::evict::{self, Evict};
use blazesym::symbolize::source::{Elf, Kernel, Source};
use blazesym::symbolize::{CodeInfo, Input, Sym, Symbolized, Symbolizer as Blazesym};
use blazesym::MaybeDefault;
use profd_common::model::is_kernel;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Module name of functions found in perf maps.
pub const JIT_MODULE: &str = "[jit]";

/// How long the symbolizer keeps the data of a file (or of kallsyms) that
/// no request used: longer than the gaps between the short sessions of a
/// script, which would otherwise parse them again each time.
pub const IDLE: Duration = Duration::from_secs(60);

/// Owns blazesym's symbolizers and the debug files found, for the daemon's
/// life, and when each source of symbols was last used.
pub struct Worker {
    /// Symbolizer of ELF files; each file's parsed data is evicted after
    /// [`IDLE`] unused.
    sym: Blazesym,
    /// Symbolizer of kernel addresses (blazesym cannot evict its kallsyms
    /// alone), dropped after [`IDLE`] unused.
    kernel: Option<(Blazesym, Instant)>,
    /// Files whose data `sym` holds, with their last use.
    files: HashMap<PathBuf, Instant>,
    debug: DebugFiles,
    debug_dirs: Vec<PathBuf>,
    /// What files' addresses were named, for every session.
    names: Names,
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
            files: HashMap::new(),
            debug: DebugFiles::new(debug_dirs.clone()),
            debug_dirs,
            names: Names::default(),
        }
    }

    /// Release the data of files and kernel symbols not used for [`IDLE`]
    /// (tens of MiB with decompressed debug sections and kallsyms); true if
    /// any was released. What is needed again is parsed again.
    pub fn evict_idle(&mut self, now: Instant) -> bool {
        self.names.evict_idle(now);
        let idle = |used: &Instant| now.saturating_duration_since(*used) >= IDLE;
        let mut evicted = false;
        if self.kernel.as_ref().is_some_and(|(_, used)| idle(used)) {
            self.kernel = None;
            evicted = true;
        }
        let sym = &mut self.sym;
        self.files.retain(|path, used| {
            if !idle(used) {
                return true;
            }
            if let Err(err) = sym.evict(&Evict::Elf(evict::Elf::new(path.as_path()))) {
                tracing::debug!(path = %path.display(), %err, "cannot evict a file's symbols");
            }
            evicted = true;
            false
        });
        evicted
    }

    /// Mark `path`'s data as used now.
    fn used(&mut self, path: &Path) {
        match self.files.get_mut(path) {
            Some(at) => *at = Instant::now(),
            None => {
                self.files.insert(path.to_path_buf(), Instant::now());
            }
        }
    }

    pub fn symbolize(&mut self, maps: &ProcessMaps, addrs: &[u64]) -> Vec<Vec<Frame>> {
        let mut out: Vec<Option<Vec<Frame>>> = vec![None; addrs.len()];
        let mut files = Files::default();
        self.kernel(addrs, &mut out, &mut files);

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
        }
        if !jit.is_empty() {
            let table = maps.perf_map();
            for (i, placeholder) in jit {
                let named = table
                    .as_ref()
                    .and_then(|t| t.lookup(addrs[i]))
                    .map(|name| Frame::named(name.as_ref(), JIT_MODULE));
                out[i] = Some(vec![named.unwrap_or(placeholder)]);
            }
        }
        out.into_iter()
            .zip(addrs)
            .map(|(frames, &addr)| frames.unwrap_or_else(|| vec![Frame::unknown(addr)]))
            .collect()
    }

    fn kernel(&mut self, addrs: &[u64], out: &mut [Option<Vec<Frame>>], files: &mut Files) {
        let kernel: Vec<usize> = (0..addrs.len()).filter(|&i| is_kernel(addrs[i])).collect();
        if kernel.is_empty() {
            return;
        }
        let src = Source::Kernel(Kernel {
            kallsyms: MaybeDefault::Default,
            vmlinux: MaybeDefault::None,
            ..Default::default()
        });
        let input: Vec<u64> = kernel.iter().map(|&i| addrs[i]).collect();
        let (sym, used) = self
            .kernel
            .get_or_insert_with(|| (blazesym(&self.debug_dirs), Instant::now()));
        *used = Instant::now();
        match sym.symbolize(&src, Input::AbsAddr(&input)) {
            Ok(results) => {
                for (&i, r) in kernel.iter().zip(results) {
                    out[i] = Some(match r {
                        Symbolized::Sym(s) => frames_of(&s, "[kernel]", files),
                        Symbolized::Unknown(_) => vec![Frame::unnamed(
                            format!("[kernel] {:#x}", addrs[i]),
                            "[kernel]",
                        )],
                    });
                }
            }
            Err(err) => tracing::debug!(%err, "kernel symbolization failed"),
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
            return self.parse(maps, readable, group, out, jit, files);
        };
        group
            .items
            .retain(|&(i, off)| match self.names.get(&key, off, now) {
                Some(frames) => {
                    out[i] = Some(frames.clone());
                    false
                }
                None => true,
            });
        if group.items.is_empty() {
            return;
        }
        let new = group.items.clone();
        group.version = Some(key.version());
        self.parse(maps, readable, group, out, jit, files);
        for (i, off) in new {
            if let Some(frames) = &out[i] {
                self.names.insert(&key, off, frames.clone(), now);
            }
        }
    }

    /// Name the addresses of one mapped file: from its split debug file if
    /// it has one, else (and for what that misses) from the file itself;
    /// what stays unnamed goes to the perf-map look-up.
    fn parse(
        &mut self,
        maps: &ProcessMaps,
        readable: &Path,
        group: Group,
        out: &mut [Option<Vec<Frame>>],
        jit: &mut Vec<(usize, Frame)>,
        files: &mut Files,
    ) {
        let Group {
            path,
            module,
            items,
            version,
        } = group;
        let mut left = items;
        // PLT stubs: no symbol covers them.
        if let Some(plt) = Plt::of(readable) {
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
            self.used(&split.path);
            let src = Source::Elf(Elf::new(split.path.as_path()));
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
            return;
        }
        let offsets: Vec<u64> = left.iter().map(|&(_, off)| off).collect();
        self.used(readable);
        let src = Source::Elf(Elf::new(readable));
        let mut unnamed = Vec::new();
        match self.sym.symbolize(&src, Input::FileOffset(&offsets)) {
            Ok(results) => {
                for (&(i, off), r) in left.iter().zip(results) {
                    match r {
                        Symbolized::Sym(s) => out[i] = Some(frames_of(&s, &module, files)),
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
            return;
        }
        // Go programs without symbols (linked with -s) still have their
        // function table.
        let go = GoTable::of(readable);
        for (i, off) in unnamed {
            let name = go.as_ref().and_then(|t| {
                let func = t.func(t.loads.vaddr(off)?)?;
                func.name()
            });
            match name {
                Some(name) => out[i] = Some(vec![Frame::named(name, &*module)]),
                None => jit.push((i, Frame::unnamed(format!("{module}+{off:#x}"), &module))),
            }
        }
    }
}
