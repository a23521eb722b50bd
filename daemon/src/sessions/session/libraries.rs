//! The binaries a session's named addresses are in, and where each was
//! mapped in each address space: what a timeline export names code by
//! (library and library-relative address). Kept only by sessions that keep
//! a timeline; a mapping is read (its file's build id, machine and load
//! segments) once, when an address in it is first named, while its file is
//! still held. Not the names: those are the symbolizer's.
use std::collections::{HashMap, HashSet};
use std::io::Read;
use std::path::Path;

use crate::process::maps::{build_id_hex, Backing, Load, Mapping, Sections, Segments};
use profd_common::model::{LibMapping, Library};

/// The libraries and mappings met so far.
#[derive(Default)]
pub struct Libraries {
    libs: Vec<Library>,
    /// Each library by (path, build id).
    lib_of: HashMap<(String, String), u32>,
    maps: Vec<LibMapping>,
    /// Mappings looked at, by (space, start), with a library or not.
    seen: HashSet<(u32, u64)>,
}

impl Libraries {
    /// Whether the mapping of `space` starting at `start` is new; it is
    /// seen from now on.
    pub fn first_sight(&mut self, space: u32, start: u64) -> bool {
        self.seen.insert((space, start))
    }

    /// Adds a mapping read by [`read_mapping`].
    pub fn add(&mut self, mapping: LibMapping, lib: Library) {
        let next = self.libs.len() as u32;
        let key = (lib.path.clone(), lib.build_id.clone());
        let index = *self.lib_of.entry(key).or_insert(next);
        if index == next {
            self.libs.push(lib);
        }
        self.maps.push(LibMapping {
            lib: index,
            ..mapping
        });
    }

    /// The libraries and their mappings in (space, start) order, as a
    /// timeline holds them.
    pub fn snapshot(&self) -> (Vec<Library>, Vec<LibMapping>) {
        let mut maps = self.maps.clone();
        maps.sort_by_key(|m| (m.space, m.start));
        (self.libs.clone(), maps)
    }
}

/// Mapping `m` of `space` as a library's mapping: None when it is not of a
/// readable ELF file. Reads the file's load segments (held once read),
/// build id and machine.
pub fn read_mapping(space: u32, m: &Mapping) -> Option<(LibMapping, Library)> {
    let Backing::File(path) = &m.backing else {
        return None;
    };
    let file = m.file()?;
    let base = base(m, file.segments()?)?;
    let (build_id, arch) = elf_id(&file.readable);
    let lib = Library {
        name: file.module(),
        path: path.display().to_string(),
        build_id,
        arch,
    };
    let mapping = LibMapping {
        space,
        start: m.start,
        end: m.end,
        lib: 0,
        base,
    };
    Some((mapping, lib))
}

/// The address in `m`'s space of its file's relative address 0 (the ELF
/// virtual address of the first load segment), from the load segment the
/// mapping holds most bytes of (the page at either end may hold bytes of
/// the segments before and after, which are mapped elsewhere).
fn base(m: &Mapping, segments: &Segments) -> Option<u64> {
    let first = segments.0.first()?.vaddr;
    let (from, to) = (m.pgoff, m.pgoff + (m.end - m.start));
    let overlap = |l: &&Load| {
        (l.offset + l.size)
            .min(to)
            .saturating_sub(l.offset.max(from))
    };
    let load = segments
        .0
        .iter()
        .filter(|l| overlap(l) > 0)
        .max_by_key(overlap)?;
    // The segment's first byte is at start + (offset - pgoff), and is
    // relative address vaddr - first.
    let at = m.start.wrapping_add(load.offset).wrapping_sub(m.pgoff);
    Some(at.wrapping_sub(load.vaddr.wrapping_sub(first)))
}

/// The GNU build id (hex, empty when none) and machine (empty when not
/// known) of the ELF file at `path`.
fn elf_id(path: &Path) -> (String, String) {
    let Ok(file) = std::fs::File::open(path) else {
        return Default::default();
    };
    let mut header = [0u8; 20];
    let arch = match (&file).read_exact(&mut header) {
        Ok(()) => machine(&header),
        Err(_) => "",
    };
    let cache = object::ReadCache::new(file);
    let build_id = Sections::of(&cache)
        .and_then(|s| s.build_id(&cache))
        .map(|id| build_id_hex(&id))
        .unwrap_or_default();
    (build_id, arch.to_string())
}

/// The machine an ELF header's `e_machine` names, as Rust names it.
fn machine(header: &[u8; 20]) -> &'static str {
    if header[..4] != *b"\x7fELF" {
        return "";
    }
    let bytes = [header[18], header[19]];
    let e_machine = match header[5] {
        2 => u16::from_be_bytes(bytes),
        _ => u16::from_le_bytes(bytes),
    };
    match e_machine {
        3 => "x86",
        8 => "mips",
        20 => "powerpc",
        21 => "powerpc64",
        22 => "s390x",
        40 => "arm",
        62 => "x86_64",
        183 => "aarch64",
        243 => "riscv64",
        258 => "loongarch64",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::maps::ProcessMaps;

    /// profd's own code: the mapping of a function of this test names the
    /// test binary with its build id and machine, and the function's
    /// relative address is its ELF virtual address less the first load
    /// segment's.
    #[test]
    fn a_function_of_this_binary_has_its_relative_address() {
        let maps = ProcessMaps::read(std::process::id()).unwrap();
        let here = a_function_of_this_binary_has_its_relative_address as fn() as usize as u64;
        let m = maps.find(here).unwrap();
        let (mapping, lib) = read_mapping(3, m).expect("a mapping of an ELF file");
        assert_eq!(mapping.space, 3);
        assert_eq!(lib.arch, std::env::consts::ARCH);
        assert_eq!(lib.build_id.len(), 40, "rustc gives a build id: {lib:?}");
        let exe = std::env::current_exe().unwrap();
        assert_eq!(lib.name, crate::process::maps::module_name(&exe));
        let segments = m.file().unwrap().segments().unwrap();
        let vaddr = segments.vaddr(m.file_offset(here)).unwrap();
        assert_eq!(here - mapping.base, vaddr - segments.0[0].vaddr);
        let mut libs = Libraries::default();
        assert!(libs.first_sight(3, m.start));
        assert!(!libs.first_sight(3, m.start));
        libs.add(mapping, lib.clone());
        libs.add(
            LibMapping {
                space: 1,
                ..mapping
            },
            lib,
        );
        let (libs, maps) = libs.snapshot();
        assert_eq!(libs.len(), 1, "one file, one library");
        assert_eq!(maps.iter().map(|m| m.space).collect::<Vec<_>>(), [1, 3]);
    }

    #[test]
    fn machines_by_name() {
        let mut h = [0u8; 20];
        h[..4].copy_from_slice(b"\x7fELF");
        h[5] = 1;
        h[18] = 62;
        assert_eq!(machine(&h), "x86_64");
        h[18] = 183;
        assert_eq!(machine(&h), "aarch64");
        h[0] = 0;
        assert_eq!(machine(&h), "");
    }
}
