//! The PLT stubs of an x86-64 ELF file, named `symbol@plt` as perf names
//! them: no symbol covers a stub (a symbol look-up would give the function
//! before the PLT, such as `_init`), so each entry of `.plt`, `.plt.sec` and
//! `.plt.got` is named by the relocation of the GOT slot its indirect jump
//! (`jmp *slot(%rip)`) reads. Other architectures' stubs stay unnamed.
//! The tables read are kept by file version within a byte budget
//! ([`PltTables`]).
use super::lru::Lru;
use crate::os::file_version::FileVersion;
use object::elf;
use object::read::elf::{ElfFile64, SectionHeader};
use object::{
    Object, ObjectSection, ObjectSymbol, ObjectSymbolTable, RelocationFlags, RelocationTarget,
};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

/// The stubs of one file: (first file offset, end, symbol), by offset.
#[derive(Debug, Default)]
pub struct Plt {
    stubs: Vec<(u64, u64, String)>,
}

/// The PLT tables read, by file version (a file without stubs too, so it
/// is not read again), within a byte budget: the least recently used go
/// first.
#[derive(Default)]
pub struct PltTables {
    tables: Lru<FileVersion, Option<Arc<Plt>>>,
    /// Tables read (loads) and found kept (hits), and dropped.
    pub loads: u64,
    pub hits: u64,
    pub evicted: u64,
}

/// What a file's entry weighs besides its table.
const ENTRY_BYTES: u64 = 96;

impl PltTables {
    /// The stubs of the file at `path`, read once per file version while
    /// kept; then the tables are shrunk to `budget`.
    pub fn of(&mut self, path: &Path, now: Instant, budget: u64) -> Option<Arc<Plt>> {
        let version = FileVersion::at(path)?;
        if let Some(table) = self.tables.get(&version, now) {
            self.hits += 1;
            return table.clone();
        }
        self.loads += 1;
        let table = Plt::read(path).map(Arc::new);
        let bytes = ENTRY_BYTES + table.as_ref().map_or(0, |t| t.bytes());
        self.tables.insert(version, table.clone(), bytes, now);
        self.shrink_to(budget);
        table
    }

    /// Drop the tables used longest ago until all weigh at most `budget`.
    pub fn shrink_to(&mut self, budget: u64) {
        self.evicted += self.tables.shrink_to(budget).len() as u64;
    }

    /// What the tables weigh now.
    pub fn bytes(&self) -> u64 {
        self.tables.bytes()
    }
}

/// The sections that hold PLT stubs.
const SECTIONS: [&str; 3] = [".plt", ".plt.sec", ".plt.got"];

impl Plt {
    /// The stubs of the ELF file at `path`; `None` when it has none or is
    /// not x86-64 ELF.
    pub fn read(path: &Path) -> Option<Plt> {
        let file = std::fs::File::open(path).ok()?;
        let cache = object::ReadCache::new(file);
        Plt::parse(&cache)
    }

    /// What the table takes in memory.
    pub fn bytes(&self) -> u64 {
        let names: usize = self.stubs.iter().map(|s| s.2.capacity()).sum();
        (names + self.stubs.capacity() * std::mem::size_of::<(u64, u64, String)>()) as u64
    }

    /// The stubs of an ELF image.
    pub fn parse<'data, R: object::ReadRef<'data>>(data: R) -> Option<Plt> {
        let elf = ElfFile64::<object::Endianness, R>::parse(data).ok()?;
        if elf.elf_header().e_machine.get(elf.endian()) != elf::EM_X86_64 {
            return None;
        }
        let slots = slots(&elf);
        let mut stubs = Vec::new();
        for section in elf.sections() {
            if !SECTIONS.contains(&section.name().unwrap_or("")) {
                continue;
            }
            let Some((file_start, _)) = section.file_range() else {
                continue;
            };
            let Ok(bytes) = section.data() else { continue };
            let entry = match section.elf_section_header().sh_entsize(elf.endian()) {
                0 => 16,
                n => n,
            };
            for (k, stub) in bytes.chunks_exact(entry as usize).enumerate() {
                let at = k as u64 * entry;
                let Some(slot) = jump_slot(stub, section.address() + at) else {
                    continue;
                };
                if let Some(name) = slots.get(&slot) {
                    stubs.push((file_start + at, file_start + at + entry, name.clone()));
                }
            }
        }
        stubs.sort();
        (!stubs.is_empty()).then_some(Plt { stubs })
    }

    /// The symbol whose stub holds file offset `off`.
    pub fn name(&self, off: u64) -> Option<&str> {
        let i = self.stubs.partition_point(|s| s.0 <= off).checked_sub(1)?;
        let (start, end, name) = &self.stubs[i];
        (*start..*end).contains(&off).then_some(name.as_str())
    }
}

/// The GOT slot that `jmp *disp32(%rip)` (`ff 25`, maybe after a `bnd`
/// prefix) in `stub`, at virtual address `addr`, jumps through.
fn jump_slot(stub: &[u8], addr: u64) -> Option<u64> {
    let at = stub.windows(2).position(|w| w == [0xff, 0x25])?;
    let disp = i32::from_le_bytes(stub.get(at + 2..at + 6)?.try_into().ok()?);
    let next = addr.checked_add(at as u64 + 6)?;
    Some(next.wrapping_add_signed(i64::from(disp)))
}

/// GOT slot address → the symbol its dynamic relocation binds: the symbol
/// of a `JUMP_SLOT` or `GLOB_DAT`, or for an `IRELATIVE` (an ifunc of the
/// file itself) the function whose resolver the addend is.
fn slots<'data, R: object::ReadRef<'data>>(
    elf: &ElfFile64<'data, object::Endianness, R>,
) -> HashMap<u64, String> {
    let mut out = HashMap::new();
    let Some(relocations) = elf.dynamic_relocations() else {
        return out;
    };
    let mut resolvers: Option<HashMap<u64, String>> = None;
    for (slot, r) in relocations {
        let RelocationFlags::Elf { r_type } = r.flags() else {
            continue;
        };
        let name = match (r_type, r.target()) {
            (elf::R_X86_64_JUMP_SLOT | elf::R_X86_64_GLOB_DAT, RelocationTarget::Symbol(i)) => elf
                .dynamic_symbol_table()
                .and_then(|t| t.symbol_by_index(i).ok())
                .and_then(|s| s.name().ok().map(str::to_string)),
            (elf::R_X86_64_IRELATIVE, _) => {
                let by_address = resolvers.get_or_insert_with(|| {
                    elf.dynamic_symbols()
                        .filter(|s| s.address() != 0)
                        .filter_map(|s| Some((s.address(), s.name().ok()?.to_string())))
                        .collect()
                });
                u64::try_from(r.addend())
                    .ok()
                    .and_then(|a| by_address.get(&a).cloned())
            }
            _ => None,
        };
        if let Some(name) = name.filter(|n| !n.is_empty()) {
            out.insert(slot, name);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jumps_through_rip_relative_slots() {
        // endbr64; bnd jmp *0x2fe2(%rip); nop: at 0x1030 the jump ends at
        // 0x103b, so the slot is 0x401d.
        let stub = [
            0xf3, 0x0f, 0x1e, 0xfa, 0xf2, 0xff, 0x25, 0xe2, 0x2f, 0x00, 0x00, 0x0f, 0x1f, 0x44,
            0x00, 0x00,
        ];
        assert_eq!(jump_slot(&stub, 0x1030), Some(0x1030 + 11 + 0x2fe2));
        // PLT0 pushes and jumps through the resolver's slot; a lazy entry
        // without a jmp has none.
        assert_eq!(jump_slot(&[0x68, 0, 0, 0, 0, 0xe9, 0, 0, 0, 0], 0), None);
    }

    /// libc's own stubs (to its ifuncs, such as memcpy) and ls's (to libc)
    /// are named; an offset outside them is not.
    #[test]
    fn libc_and_ls_have_named_stubs() {
        for path in ["/bin/ls", "/lib/x86_64-linux-gnu/libc.so.6"] {
            let plt = Plt::read(Path::new(path)).unwrap_or_else(|| panic!("no PLT in {path}"));
            assert!(plt.stubs.len() > 5, "{path}: {:?}", plt.stubs);
            let (start, end, name) = &plt.stubs[plt.stubs.len() / 2];
            assert_eq!(plt.name(*start), Some(name.as_str()));
            assert_eq!(plt.name(end - 1), Some(name.as_str()));
            assert_eq!(plt.name(0), None);
            eprintln!("{path}: {} stubs, e.g. {name}@plt", plt.stubs.len());
        }
    }

    /// Tables are kept by file version under their budget, the least
    /// recently used dropped first; a dropped table read again names the
    /// same stubs.
    #[test]
    fn tables_stay_under_their_budget() {
        let (ls, libc) = (
            Path::new("/bin/ls"),
            Path::new("/lib/x86_64-linux-gnu/libc.so.6"),
        );
        let now = Instant::now();
        let mut tables = PltTables::default();
        let first = tables.of(ls, now, u64::MAX).unwrap();
        let ls_bytes = tables.bytes();
        assert!(tables.of(ls, now, u64::MAX).is_some());
        assert_eq!((tables.loads, tables.hits), (1, 1));
        // Room for one table only: libc's pushes ls's out.
        let budget = ls_bytes.max(
            tables
                .of(libc, now, u64::MAX)
                .map_or(0, |t| t.bytes() + ENTRY_BYTES),
        );
        tables.shrink_to(budget);
        assert!(tables.bytes() <= budget);
        assert_eq!(tables.evicted, 1);
        let again = tables.of(ls, now, budget).unwrap();
        assert!(tables.bytes() <= budget);
        assert_eq!(tables.loads, 3, "ls read again");
        assert_eq!(first.stubs, again.stubs);
    }
}
