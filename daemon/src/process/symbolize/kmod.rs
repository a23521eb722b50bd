//! Kernel modules' own debug information: a loaded module's `.ko` with
//! DWARF (a distribution's kernel debug package, a kernel built in place,
//! or a file fetched by build id), its DWARF relocated to where the running
//! kernel put the module's sections (`/sys/module/NAME/sections`), names
//! the module's code with its inlined functions and source lines. Without
//! one, a module's functions are named from kallsyms alone.
use super::frame::Frame;
use crate::process::maps::{build_id_hex, gnu_build_id};
use gimli::{EndianArcSlice, RelocateReader, RunTimeEndian};
use object::{
    Object, ObjectKind, ObjectSection, ObjectSymbol, RelocationKind, RelocationTarget,
    SymbolSection,
};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where the running kernel put a module's sections: name → address.
pub type Bases = HashMap<String, u64>;

/// Why a module's debug file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum Unusable {
    #[error("not an ELF file: {0}")]
    NotElf(#[from] object::Error),
    #[error("not a relocatable object (a .ko)")]
    NotRelocatable,
    #[error("it has no DWARF")]
    NoDwarf,
    #[error("its DWARF is {bytes} bytes, more than the {limit} the symbolizer may hold")]
    TooBig { bytes: u64, limit: u64 },
    #[error("its DWARF cannot be read: {0}")]
    Dwarf(#[from] gimli::Error),
}

/// Values to put in place of what a debug section holds at an offset: a
/// relocation's result, and whether the section's own value is added to
/// it (REL, as opposed to RELA).
#[derive(Debug, Clone, Default)]
struct Relocations(Arc<HashMap<usize, (u64, bool)>>);

impl gimli::Relocate<usize> for Relocations {
    fn relocate_address(&self, offset: usize, value: u64) -> gimli::Result<u64> {
        Ok(match self.0.get(&offset) {
            Some(&(to, true)) => value.wrapping_add(to),
            Some(&(to, false)) => to,
            None => value,
        })
    }

    fn relocate_offset(&self, offset: usize, value: usize) -> gimli::Result<usize> {
        let to = self.relocate_address(offset, value as u64)?;
        <usize as gimli::ReaderOffset>::from_u64(to)
    }
}

type Reader = RelocateReader<EndianArcSlice<RunTimeEndian>, Relocations>;

/// One module's DWARF, at the addresses the running kernel loaded it at.
pub struct ModuleDebug {
    context: addr2line::Context<Reader>,
    bytes: u64,
}

impl ModuleDebug {
    /// The DWARF of the module file in `data` (an ELF relocatable object)
    /// with its sections at `bases`; refused when its debug sections weigh
    /// more than `limit` bytes.
    pub fn parse(data: &[u8], bases: &Bases, limit: u64) -> Result<ModuleDebug, Unusable> {
        let file = object::File::parse(data)?;
        if file.kind() != ObjectKind::Relocatable {
            return Err(Unusable::NotRelocatable);
        }
        if file.section_by_name(".debug_info").is_none() {
            return Err(Unusable::NoDwarf);
        }
        let is_debug =
            |s: &object::Section<'_, '_>| s.name().is_ok_and(|n| n.starts_with(".debug"));
        let bytes: u64 = (file.sections()).filter(is_debug).map(|s| s.size()).sum();
        if bytes > limit {
            return Err(Unusable::TooBig { bytes, limit });
        }
        let endian = match file.is_little_endian() {
            true => RunTimeEndian::Little,
            false => RunTimeEndian::Big,
        };
        // A section's place: its loaded address, or 0 for what is not
        // loaded (debug sections, whose references are offsets, and code
        // the kernel freed, which no sample can be in).
        let base = |index| {
            file.section_by_index(index)
                .ok()
                .filter(|s| !is_debug(s))
                .and_then(|s| bases.get(s.name().ok()?).copied())
                .unwrap_or(0)
        };
        let mut held = 0u64;
        let load = |id: gimli::SectionId| -> Result<Reader, Unusable> {
            let Some(section) = file.section_by_name(id.name()) else {
                let empty = EndianArcSlice::new(Arc::from(&[][..]), endian);
                return Ok(RelocateReader::new(empty, Relocations::default()));
            };
            let mut map = HashMap::new();
            for (offset, relocation) in section.relocations() {
                if relocation.kind() != RelocationKind::Absolute {
                    continue;
                }
                let target = match relocation.target() {
                    RelocationTarget::Symbol(index) => match file.symbol_by_index(index) {
                        Ok(symbol) => match symbol.section() {
                            SymbolSection::Section(s) => base(s).wrapping_add(symbol.address()),
                            _ => symbol.address(),
                        },
                        Err(_) => continue,
                    },
                    RelocationTarget::Section(s) => base(s),
                    _ => continue,
                };
                let to = target.wrapping_add(relocation.addend() as u64);
                map.insert(offset as usize, (to, relocation.has_implicit_addend()));
            }
            let data = section.uncompressed_data()?;
            held += data.len() as u64 + map.len() as u64 * 24;
            let slice = EndianArcSlice::new(Arc::from(&*data), endian);
            Ok(RelocateReader::new(slice, Relocations(Arc::new(map))))
        };
        let dwarf = gimli::Dwarf::load(load)?;
        let context = addr2line::Context::from_dwarf(dwarf)?;
        Ok(ModuleDebug {
            context,
            bytes: held,
        })
    }

    /// Bytes held: the debug sections and their relocations.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The frames of the code at `addr`, innermost first (functions
    /// inlined there, then the function holding it), in `module`; None
    /// when the DWARF does not cover it.
    pub fn frames(&self, addr: u64, module: &str) -> Option<Vec<Frame>> {
        let mut found = self.context.find_frames(addr).skip_all_loads().ok()?;
        let mut frames = Vec::new();
        while let Ok(Some(f)) = found.next() {
            let Some(name) = f.function.as_ref().and_then(|n| n.raw_name().ok()) else {
                continue;
            };
            let mut frame = Frame::named(name, module);
            if let Some(at) = f.location {
                frame.file = at.file.map(Arc::from);
                frame.line = at.line.unwrap_or(0);
            }
            frame.func.inlined = true;
            frames.push(frame);
        }
        let outer = frames.last_mut()?;
        outer.func.inlined = false;
        Some(frames)
    }
}

/// The loaded modules' debug information found so far, and the modules
/// known to have none.
pub struct Modules {
    /// Where sysfs is (`/sys`).
    sysfs: PathBuf,
    /// The running kernel's release, as `lib/modules/RELEASE` names it.
    release: String,
    parsed: HashMap<String, ModuleDebug>,
    /// Modules without usable debug information, with their build id when
    /// the kernel gives it.
    absent: HashMap<String, Option<Vec<u8>>>,
}

/// What [`Modules::open`] found.
pub enum Opened<'a> {
    /// Parsed before.
    Held(&'a ModuleDebug),
    /// Parsed now (see [`ModuleDebug::bytes`] for its weight).
    New(&'a ModuleDebug),
    /// None usable; with the module's build id when it has one and the
    /// file was looked for now (so that it can be fetched).
    Absent(Option<Vec<u8>>),
}

impl Modules {
    /// The running kernel's modules.
    pub fn running() -> Modules {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        Modules::new(PathBuf::from("/sys"), release.trim().to_string())
    }

    pub fn new(sysfs: PathBuf, release: String) -> Modules {
        Modules {
            sysfs,
            release,
            parsed: HashMap::new(),
            absent: HashMap::new(),
        }
    }

    /// The debug information of module `name`, parsed when first asked
    /// for: found by the module's build id in `dirs`, else by its name
    /// under `DIR/lib/modules/RELEASE` and `/lib/modules/RELEASE`; refused
    /// when it weighs more than `limit`.
    pub fn open(&mut self, name: &str, dirs: &[PathBuf], limit: u64) -> Opened<'_> {
        if self.parsed.contains_key(name) {
            return Opened::Held(&self.parsed[name]);
        }
        if self.absent.contains_key(name) {
            return Opened::Absent(None);
        }
        let module = self.sysfs.join("module").join(name);
        let id = std::fs::read(module.join("notes/.note.gnu.build-id"))
            .ok()
            .and_then(|note| gnu_build_id(&note));
        match self.find(name, &module, id.as_deref(), dirs, limit) {
            Some(debug) => {
                self.parsed.insert(name.to_string(), debug);
                Opened::New(&self.parsed[name])
            }
            None => {
                self.absent.insert(name.to_string(), id.clone());
                Opened::Absent(id)
            }
        }
    }

    fn find(
        &self,
        name: &str,
        module: &Path,
        id: Option<&[u8]>,
        dirs: &[PathBuf],
        limit: u64,
    ) -> Option<ModuleDebug> {
        let bases = bases(&module.join("sections"));
        if bases.values().all(|&a| a == 0) {
            tracing::debug!(
                module = name,
                "its section addresses are not known (hidden or none)"
            );
            return None;
        }
        let mut places = Vec::new();
        if let Some(hex) = id.filter(|id| id.len() >= 2).map(build_id_hex) {
            for dir in dirs {
                let at = dir.join(".build-id").join(&hex[..2]);
                places.push(at.join(format!("{}.debug", &hex[2..])));
                places.push(at.join(&hex[2..]));
            }
        }
        let mut roots: Vec<PathBuf> = dirs.iter().map(|d| d.join("lib/modules")).collect();
        roots.push(PathBuf::from("/lib/modules"));
        places.extend(named(&roots, &self.release, name));
        for place in places {
            let Ok(data) = std::fs::read(&place) else {
                continue;
            };
            if let Some(want) = id {
                let has = object::File::parse(&*data)
                    .ok()
                    .and_then(|f| f.build_id().ok()?.map(<[u8]>::to_vec));
                if has.as_deref() != Some(want) {
                    continue; // Another build of the module.
                }
            }
            match ModuleDebug::parse(&data, &bases, limit) {
                Ok(debug) => {
                    tracing::debug!(module = name, file = %place.display(), "using a module's debug information");
                    return Some(debug);
                }
                Err(err) => {
                    tracing::debug!(module = name, file = %place.display(), %err, "module file not used")
                }
            }
        }
        None
    }

    /// Let go of module `name`'s parsed debug information (it is parsed
    /// again when next asked for).
    pub fn forget(&mut self, name: &str) {
        self.parsed.remove(name);
    }

    /// The debug files of these build ids arrived: the modules that have
    /// them are looked for again.
    pub fn arrived(&mut self, ids: &[Vec<u8>]) {
        (self.absent).retain(|_, id| !id.as_ref().is_some_and(|id| ids.contains(id)));
    }
}

/// The addresses in a module's `sections` directory of sysfs.
fn bases(dir: &Path) -> Bases {
    let mut out = Bases::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let Ok(text) = std::fs::read_to_string(entry.path()) else {
            continue;
        };
        let hex = text.trim().trim_start_matches("0x");
        if let Ok(addr) = u64::from_str_radix(hex, 16) {
            out.insert(entry.file_name().to_string_lossy().into_owned(), addr);
        }
    }
    out
}

/// A module's name as kallsyms and sysfs give it: file names may use `-`
/// where the name has `_`.
fn key_of(name: &str) -> String {
    name.replace('-', "_")
}

/// How deep module files are looked for under `lib/modules/RELEASE`.
const MAX_DEPTH: usize = 8;

/// The files of module `name` (`NAME.ko`, `NAME.ko.debug`) under each
/// root's `RELEASE` directory. A module is looked for once while it has a
/// file or is known to have none, so nothing of the walk is kept.
fn named(roots: &[PathBuf], release: &str, name: &str) -> Vec<PathBuf> {
    let key = key_of(name);
    let mut out = Vec::new();
    let mut stack: Vec<(PathBuf, usize)> = roots.iter().map(|r| (r.join(release), 0)).collect();
    while let Some((dir, depth)) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let path = entry.path();
            if kind.is_dir() && depth < MAX_DEPTH {
                stack.push((path, depth + 1));
                continue;
            }
            let file = entry.file_name();
            let file = file.to_string_lossy();
            let stem = file
                .strip_suffix(".ko")
                .or_else(|| file.strip_suffix(".ko.debug"));
            if stem.is_some_and(|s| key_of(s) == key) && kind.is_file() {
                out.push(path);
            }
        }
    }
    out
}

#[cfg(test)]
#[path = "kmod_tests.rs"]
mod tests;
