//! Split debug files for binaries without DWARF of their own: found by build
//! id (`<dir>/.build-id/xx/rest.debug`), by `.gnu_debuglink` name, or by path
//! (`<dir>/<path>.debug`), in profd's debug directories and in the target's
//! root; opened once and held, with the binary's load segments to turn file
//! offsets into the addresses the debug file uses. blazesym follows debug
//! links on its own too; this adds the cases it does not cover. What was
//! found is kept for the [`MAX_BINARIES`] binaries used most recently.
//! With a debuginfod [`Fetcher`], a binary with a build id and no debug
//! file has it asked for, and its cache is one of the directories.
use super::debuginfod::Fetcher;
use super::lru::Lru;
use crate::os::file_version::FileVersion;
use crate::process::maps::{build_id_hex, Sections, Segments, Target};
use object::ReadCache;
use std::collections::HashMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// A debug file held open, and how to address it.
#[derive(Debug)]
pub struct DebugFile {
    /// `/proc/self/fd/N` of the held file.
    pub path: PathBuf,
    _file: File,
    /// Its device and inode numbers.
    pub inode: (u64, u64),
    /// The binary's load segments.
    segments: Segments,
}

impl DebugFile {
    /// The address (as in the ELF files) of a file offset of the binary.
    pub fn vaddr(&self, offset: u64) -> Option<u64> {
        self.segments.vaddr(offset)
    }
}

/// Binaries whose debug file (or its absence) is remembered at most; past
/// it the least recently used are forgotten, and their debug files closed.
pub const MAX_BINARIES: usize = 1024;

/// Debug files found so far, by binary.
pub struct DebugFiles {
    dirs: Vec<PathBuf>,
    found: Lru<FileVersion, Option<Rc<DebugFile>>>,
    /// Debug files let go of, whose paths the symbolizer must forget.
    closed: Vec<PathBuf>,
    fetcher: Option<Fetcher>,
    /// The build ids of the binaries found without a debug file, while
    /// there is a fetcher.
    missing: HashMap<FileVersion, Vec<u8>>,
}

/// What a binary says about its debug information.
struct Needs {
    build_id: Option<Vec<u8>>,
    link: Option<Vec<u8>>,
    segments: Segments,
}

fn inspect(file: File) -> Option<Needs> {
    let cache = ReadCache::new(file);
    let sections = Sections::of(&cache)?;
    if sections.get(".debug_info").is_some() {
        return None; // It has its own.
    }
    let segments = Segments::of(&cache)?;
    Some(Needs {
        build_id: sections.build_id(&cache),
        link: sections.debuglink(&cache),
        segments,
    })
}

fn link_name(needs: &Needs) -> Option<&Path> {
    let link = std::str::from_utf8(needs.link.as_deref()?).ok()?;
    (!link.is_empty() && !link.contains('/')).then_some(Path::new(link))
}

/// Where a debug file for `path` may be, relative to a debug directory.
fn candidates(path: &Path, needs: &Needs) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(id) = needs.build_id.as_deref().filter(|id| id.len() >= 2) {
        let hex = build_id_hex(id);
        out.push(PathBuf::from(format!(
            ".build-id/{}/{}.debug",
            &hex[..2],
            &hex[2..]
        )));
    }
    let rel = path.strip_prefix("/").unwrap_or(path);
    let mut with_ext = rel.as_os_str().to_os_string();
    with_ext.push(".debug");
    out.push(PathBuf::from(with_ext));
    if let Some(link) = link_name(needs) {
        if let Some(dir) = rel.parent() {
            out.push(dir.join(link));
        }
    }
    out
}

impl DebugFiles {
    pub fn new(dirs: Vec<PathBuf>) -> DebugFiles {
        DebugFiles {
            dirs,
            found: Lru::default(),
            closed: Vec::new(),
            fetcher: None,
            missing: HashMap::new(),
        }
    }

    /// Also look in `fetcher`'s cache, and have it fetch the debug files
    /// of binaries that have a build id and none found.
    pub fn fetch_with(&mut self, fetcher: Fetcher) {
        self.dirs.push(fetcher.cache_dir().to_path_buf());
        self.fetcher = Some(fetcher);
    }

    /// The debug files of these build ids arrived: forget that their
    /// binaries had none. The versions of those binaries.
    pub fn arrived(&mut self, ids: &[Vec<u8>]) -> Vec<FileVersion> {
        let versions: Vec<FileVersion> = self
            .missing
            .iter()
            .filter(|(_, id)| ids.contains(id))
            .map(|(v, _)| *v)
            .collect();
        for v in &versions {
            self.missing.remove(v);
            self.found.remove(v);
        }
        versions
    }

    /// The directories searched (the fetcher's cache among them).
    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    /// Have the fetcher, if any, fetch the debug file of build id `id`.
    pub fn fetch_id(&self, id: &[u8]) {
        if let Some(fetcher) = &self.fetcher {
            fetcher.want(id);
        }
    }

    /// Have the fetcher fetch the debug file of `binary` when it is known
    /// to lack one.
    fn want(&self, binary: &FileVersion) {
        if let Some(id) = self.missing.get(binary) {
            self.fetch_id(id);
        }
    }

    /// The paths (`/proc/self/fd/N`) of debug files let go of since the
    /// last call: the descriptor number may name another file next.
    pub fn take_closed(&mut self) -> Vec<PathBuf> {
        std::mem::take(&mut self.closed)
    }

    /// The device and inode numbers of the debug files held open.
    pub fn inodes(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.found
            .keys()
            .filter_map(|k| self.found.peek(k).and_then(|f| f.as_ref()).map(|f| f.inode))
    }

    /// Debug files held open now.
    pub fn held(&self) -> usize {
        self.found
            .keys()
            .filter(|k| matches!(self.found.peek(k), Some(Some(_))))
            .count()
    }

    fn remember(&mut self, key: FileVersion, found: Option<Rc<DebugFile>>) {
        self.found.insert(key, found, 1, std::time::Instant::now());
        for (binary, gone) in self.found.shrink_to(MAX_BINARIES as u64) {
            self.missing.remove(&binary);
            if let Some(f) = gone {
                self.closed.push(f.path.clone());
            }
        }
    }

    /// The debug file for the binary readable at `readable` (mapped from
    /// `path` in `target`), if it lacks DWARF and one is installed.
    /// `version`: the binary's, when the caller has it (a binary seen
    /// before is then not opened again).
    pub fn find(
        &mut self,
        readable: &Path,
        path: &Path,
        target: Option<&Target>,
        version: Option<&FileVersion>,
    ) -> Option<Rc<DebugFile>> {
        let now = std::time::Instant::now();
        if let Some(v) = version {
            if let Some(known) = self.found.get(v, now) {
                let known = known.clone();
                self.want(v);
                return known;
            }
        }
        let file = File::open(readable).ok()?;
        let key = FileVersion::of(&file.metadata().ok()?);
        if let Some(known) = self.found.get(&key, now) {
            let known = known.clone();
            self.want(&key);
            return known;
        }
        let needs = inspect(file);
        let build_id = needs.as_ref().and_then(|n| n.build_id.clone());
        let found = needs.and_then(|needs| self.search(path, needs, target));
        if let Some(f) = &found {
            tracing::debug!(binary = %path.display(), debug = ?f.path, "using a split debug file");
        }
        self.remember(key, found.clone());
        if let (None, Some(id), true) = (&found, build_id, self.fetcher.is_some()) {
            self.missing.insert(key, id);
            self.want(&key);
        }
        found
    }

    fn search(&self, path: &Path, needs: Needs, target: Option<&Target>) -> Option<Rc<DebugFile>> {
        let rels = candidates(path, &needs);
        let mut roots = vec![PathBuf::from("/")];
        if let Some(t) = target.filter(|t| !t.same_mounts) {
            roots.push(t.in_root(Path::new("/")));
        }
        let mut places = Vec::new();
        for root in &roots {
            for dir in &self.dirs {
                let dir = root.join(dir.strip_prefix("/").unwrap_or(dir));
                places.extend(rels.iter().map(|rel| dir.join(rel)));
            }
            // Next to the binary, as gdb looks for debug links.
            if let (Some(link), Some(parent)) = (link_name(&needs), path.parent()) {
                let parent = root.join(parent.strip_prefix("/").unwrap_or(parent));
                places.push(parent.join(link));
                places.push(parent.join(".debug").join(link));
            }
        }
        for place in places {
            let Ok(file) = File::open(&place) else {
                continue;
            };
            let Some(id) = Sections::debug_elf(&file) else {
                continue; // Not an ELF file with symbols.
            };
            if let (Some(want), Some(id)) = (&needs.build_id, &id) {
                if want != id {
                    continue;
                }
            }
            let Some(meta) = file.metadata().ok().filter(|m| m.is_file()) else {
                continue;
            };
            if let Some(fetcher) = &self.fetcher {
                fetcher.used(&place);
            }
            return Some(Rc::new(DebugFile {
                path: PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd())),
                _file: file,
                inode: FileVersion::of(&meta).inode(),
                segments: needs.segments,
            }));
        }
        None
    }
}
