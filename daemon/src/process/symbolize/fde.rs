//! Functions of code that no symbol names, from the unwind tables a binary
//! keeps even when stripped: each `.eh_frame` entry (FDE) gives a
//! function's start and size. A binary's entries are read once into a
//! table of starts and sizes, kept per file version within a byte budget,
//! least recently used first out.
use super::lru::Lru;
use crate::os::file_version::FileVersion;
use crate::process::maps::{build_id_hex, Sections, Segments};
use gimli::{BaseAddresses, CieOrFde, EhFrame, LittleEndian, UnwindSection};
use object::ReadCache;
use std::fs::File;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

/// A binary's functions by its unwind table, with what else names its
/// code off the host: its build id and load segments.
pub struct Fdes {
    /// Each function's start (as in the ELF file), in order.
    starts: Vec<u64>,
    /// Its size in bytes.
    sizes: Vec<u32>,
    segments: Segments,
    /// The GNU build id, in hex; empty when the binary has none.
    pub build_id: String,
}

impl Fdes {
    /// The functions of the ELF file at `path`; None when it is not an ELF
    /// file with load segments.
    pub fn read(path: &Path) -> Option<Fdes> {
        let cache = ReadCache::new(File::open(path).ok()?);
        let sections = Sections::of(&cache)?;
        let mut functions = Vec::new();
        if let Some(eh) = sections.get(".eh_frame") {
            let data = eh.data(&cache).unwrap_or_default();
            let mut bases = BaseAddresses::default().set_eh_frame(eh.address);
            if let Some(text) = sections.get(".text") {
                bases = bases.set_text(text.address);
            }
            if let Some(hdr) = sections.get(".eh_frame_hdr") {
                bases = bases.set_eh_frame_hdr(hdr.address);
            }
            let eh_frame = EhFrame::new(&data, LittleEndian);
            let mut entries = eh_frame.entries(&bases);
            // A malformed entry ends the reading: those before it stay.
            while let Ok(Some(entry)) = entries.next() {
                let CieOrFde::Fde(partial) = entry else {
                    continue;
                };
                let Ok(fde) = partial.parse(EhFrame::cie_from_offset) else {
                    continue;
                };
                if let Ok(size) = u32::try_from(fde.len()) {
                    if size > 0 {
                        functions.push((fde.initial_address(), size));
                    }
                }
            }
        }
        functions.sort_unstable();
        functions.dedup_by_key(|f| f.0);
        let build_id = sections
            .build_id(&cache)
            .map(|id| build_id_hex(&id))
            .unwrap_or_default();
        Some(Fdes {
            starts: functions.iter().map(|f| f.0).collect(),
            sizes: functions.iter().map(|f| f.1).collect(),
            segments: Segments::of(&cache)?,
            build_id,
        })
    }

    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        (self.starts.capacity() * 8 + self.sizes.capacity() * 4 + self.build_id.capacity() + 128)
            as u64
    }

    /// The address (as in the ELF file) of file offset `off`.
    pub fn vaddr(&self, off: u64) -> Option<u64> {
        self.segments.vaddr(off)
    }

    /// The function holding the code at file offset `off`: its file
    /// offsets and the address (as in the ELF file) it starts at.
    pub fn function(&self, off: u64) -> Option<(Range<u64>, u64)> {
        let vaddr = self.segments.vaddr(off)?;
        let (start, len) = self.covering(vaddr)?;
        let start_off = off.checked_sub(vaddr - start)?;
        Some((start_off..start_off + len, start))
    }

    /// The start and size of the function covering `vaddr`.
    fn covering(&self, vaddr: u64) -> Option<(u64, u64)> {
        let i = self
            .starts
            .partition_point(|&s| s <= vaddr)
            .checked_sub(1)?;
        let (start, size) = (self.starts[i], u64::from(self.sizes[i]));
        (vaddr < start + size).then_some((start, size))
    }
}

/// The function tables of the binaries read, by file version.
#[derive(Default)]
pub struct FdeTables {
    tables: Lru<FileVersion, Option<Arc<Fdes>>>,
}

impl FdeTables {
    /// The table of the file at `path`, read once per file version while
    /// kept; then the tables are shrunk to `budget`.
    pub fn of(&mut self, path: &Path, now: Instant, budget: u64) -> Option<Arc<Fdes>> {
        let Some(version) = FileVersion::at(path) else {
            return Fdes::read(path).map(Arc::new);
        };
        if let Some(table) = self.tables.get(&version, now) {
            return table.clone();
        }
        let table = Fdes::read(path).map(Arc::new);
        let bytes = table.as_ref().map_or(64, |t| t.bytes());
        self.tables.insert(version, table.clone(), bytes, now);
        self.shrink_to(budget);
        table
    }

    /// Let go of the least recently used tables past `budget` bytes.
    pub fn shrink_to(&mut self, budget: u64) {
        self.tables.shrink_to(budget);
    }

    /// Bytes held.
    pub fn bytes(&self) -> u64 {
        self.tables.bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};

    /// A stripped library of the system (no `.symtab`), with exported
    /// functions in `.dynsym`.
    fn stripped_system_library() -> std::path::PathBuf {
        let candidates = [
            "/lib/x86_64-linux-gnu/liblzma.so.5",
            "/usr/lib/x86_64-linux-gnu/liblzma.so.5",
            "/lib/x86_64-linux-gnu/libz.so.1",
            "/usr/lib/x86_64-linux-gnu/libz.so.1",
        ];
        let path = candidates
            .iter()
            .map(std::path::PathBuf::from)
            .find(|p| p.exists())
            .expect("liblzma.so.5 or libz.so.1 in /lib/x86_64-linux-gnu (xz-utils, zlib1g)");
        let data = std::fs::read(&path).unwrap();
        let file = object::File::parse(&*data).unwrap();
        assert!(
            file.section_by_name(".symtab").is_none(),
            "{} is not stripped",
            path.display()
        );
        path
    }

    /// In a real stripped library, the FDE found for an address inside an
    /// exported function (by its `.dynsym` entry, which the lookup does not
    /// read) starts where the function starts and is no longer than it;
    /// addresses outside any code have none.
    #[test]
    fn fdes_of_a_stripped_system_library_start_at_its_exported_functions() {
        let path = stripped_system_library();
        let data = std::fs::read(&path).unwrap();
        let file = object::File::parse(&*data).unwrap();
        let text = file.section_by_name(".text").unwrap();
        let (text_addr, text_off) = (text.address(), text.file_range().unwrap().0);
        let fdes = Fdes::read(&path).expect("unwind tables");
        assert!(fdes.starts.len() > 100, "{} functions", fdes.starts.len());
        let mut checked = 0;
        for sym in file.dynamic_symbols() {
            if sym.kind() != SymbolKind::Text || sym.size() < 16 || !sym.is_definition() {
                continue;
            }
            let (start, size) = (sym.address(), sym.size());
            // File offset of an address inside the function, a third in.
            let inside = start + size / 3;
            let off = inside - text_addr + text_off;
            let (range, found) = fdes
                .function(off)
                .unwrap_or_else(|| panic!("no FDE for {} at {inside:#x}", sym.name().unwrap()));
            assert_eq!(found, start, "{}", sym.name().unwrap());
            assert_eq!(range.start, start - text_addr + text_off);
            assert!(
                range.end - range.start <= size,
                "{}: FDE of {} bytes, function of {size}",
                sym.name().unwrap(),
                range.end - range.start
            );
            checked += 1;
        }
        assert!(checked >= 10, "only {checked} exported functions checked");
        // The ELF header is no function's code.
        assert_eq!(fdes.function(0), None);
    }

    /// The table answers as `.eh_frame_hdr`'s own index does (gimli's
    /// look-up through it), for addresses across `.text`.
    #[test]
    fn the_table_answers_as_the_binarys_own_index() {
        use gimli::{EhFrameHdr, ParsedEhFrameHdr};
        let path = stripped_system_library();
        let fdes = Fdes::read(&path).unwrap();
        let data = std::fs::read(&path).unwrap();
        let file = object::File::parse(&*data).unwrap();
        let section = |name| file.section_by_name(name).unwrap();
        let (eh, hdr, text) = (
            section(".eh_frame"),
            section(".eh_frame_hdr"),
            section(".text"),
        );
        let bases = BaseAddresses::default()
            .set_eh_frame(eh.address())
            .set_eh_frame_hdr(hdr.address())
            .set_text(text.address());
        let eh_data = eh.data().unwrap();
        let hdr_data = hdr.data().unwrap();
        let eh_frame = EhFrame::new(eh_data, LittleEndian);
        let parsed: ParsedEhFrameHdr<_> = EhFrameHdr::new(hdr_data, LittleEndian)
            .parse(&bases, 8)
            .unwrap();
        let index = parsed.table().unwrap();
        let mut found = 0;
        for k in 0..500u64 {
            let vaddr = text.address() + text.size() * k / 500;
            let by_index = index
                .fde_for_address(&eh_frame, &bases, vaddr, EhFrame::cie_from_offset)
                .ok()
                .map(|f| (f.initial_address(), f.len()));
            assert_eq!(fdes.covering(vaddr), by_index, "at {vaddr:#x}");
            found += usize::from(by_index.is_some());
        }
        assert!(found > 400, "{found} of 500 covered");
    }

    /// A binary's table is read once while kept, and goes past the budget.
    #[test]
    fn tables_are_read_once_and_kept_within_their_budget() {
        let path = stripped_system_library();
        let mut tables = FdeTables::default();
        let now = Instant::now();
        let first = tables.of(&path, now, 1 << 30).unwrap();
        let again = tables.of(&path, now, 1 << 30).unwrap();
        assert!(Arc::ptr_eq(&first, &again), "read again");
        assert_eq!(tables.bytes(), first.bytes());
        tables.shrink_to(first.bytes() - 1);
        assert_eq!(tables.bytes(), 0);
        let third = tables.of(&path, now, 1 << 30).unwrap();
        assert!(!Arc::ptr_eq(&first, &third), "kept past its budget");
    }
}
