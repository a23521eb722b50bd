//! Functions of code that no symbol names, from the unwind tables a binary
//! keeps even when stripped: the `.eh_frame` entry (FDE) covering an address
//! gives its function's start and size, found through `.eh_frame_hdr`'s
//! sorted index when there is one, else by reading the entries in turn.
use crate::process::maps::{Sections, Segments};
use gimli::{BaseAddresses, EhFrame, EhFrameHdr, LittleEndian, ParsedEhFrameHdr, UnwindSection};
use object::ReadCache;
use std::fs::File;
use std::ops::Range;
use std::path::Path;

/// A binary's unwind tables, read for naming, with what else names its
/// code off the host: its build id and load segments.
pub struct Fdes {
    /// `.eh_frame`'s bytes; empty when the binary has none.
    eh_frame: Vec<u8>,
    /// `.eh_frame_hdr`'s bytes, when the binary has one.
    hdr: Option<Vec<u8>>,
    bases: BaseAddresses,
    segments: Segments,
    /// The GNU build id, in hex; empty when the binary has none.
    pub build_id: String,
}

impl Fdes {
    /// The unwind tables of the ELF file at `path`; None when it is not an
    /// ELF file with load segments.
    pub fn read(path: &Path) -> Option<Fdes> {
        let cache = ReadCache::new(File::open(path).ok()?);
        let sections = Sections::of(&cache)?;
        let mut bases = BaseAddresses::default();
        let mut eh_frame = Vec::new();
        if let Some(eh) = sections.get(".eh_frame") {
            bases = bases.set_eh_frame(eh.address);
            eh_frame = eh.data(&cache).map(|d| d.into_owned()).unwrap_or_default();
        }
        if let Some(text) = sections.get(".text") {
            bases = bases.set_text(text.address);
        }
        let hdr = sections.get(".eh_frame_hdr").and_then(|h| {
            bases = bases.clone().set_eh_frame_hdr(h.address);
            h.data(&cache).map(|d| d.into_owned())
        });
        let build_id = sections
            .build_id(&cache)
            .map(|id| id.iter().map(|b| format!("{b:02x}")).collect())
            .unwrap_or_default();
        Some(Fdes {
            eh_frame,
            hdr,
            bases,
            segments: Segments::of(&cache)?,
            build_id,
        })
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

    /// The start and length of the FDE covering `vaddr`.
    fn covering(&self, vaddr: u64) -> Option<(u64, u64)> {
        if self.eh_frame.is_empty() {
            return None;
        }
        let eh_frame = EhFrame::new(&self.eh_frame, LittleEndian);
        let indexed = self.hdr.as_ref().and_then(|hdr| {
            let parsed: ParsedEhFrameHdr<_> = EhFrameHdr::new(hdr, LittleEndian)
                .parse(&self.bases, 8)
                .ok()?;
            let fde = parsed.table()?.fde_for_address(
                &eh_frame,
                &self.bases,
                vaddr,
                EhFrame::cie_from_offset,
            );
            Some(fde.ok().map(|f| (f.initial_address(), f.len())))
        });
        let fde = match indexed {
            Some(found) => found,
            None => eh_frame
                .fde_for_address(&self.bases, vaddr, EhFrame::cie_from_offset)
                .ok()
                .map(|f| (f.initial_address(), f.len())),
        };
        fde.filter(|&(_, len)| len > 0)
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
        assert!(
            fdes.hdr.is_some(),
            "{} has an .eh_frame_hdr",
            path.display()
        );
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

    /// Without `.eh_frame_hdr` the entries are read in turn, to the same
    /// answer.
    #[test]
    fn without_the_index_entries_are_read_in_turn() {
        let path = stripped_system_library();
        let mut fdes = Fdes::read(&path).unwrap();
        let data = std::fs::read(&path).unwrap();
        let file = object::File::parse(&*data).unwrap();
        let text = file.section_by_name(".text").unwrap();
        let (_, text_off) = text.file_range().unwrap();
        let offs: Vec<u64> = (0..50).map(|i| text_off + i * 97).collect();
        let indexed: Vec<_> = offs.iter().map(|&o| fdes.function(o)).collect();
        fdes.hdr = None;
        let scanned: Vec<_> = offs.iter().map(|&o| fdes.function(o)).collect();
        assert_eq!(indexed, scanned);
        assert!(indexed.iter().filter(|f| f.is_some()).count() > 25);
    }
}
