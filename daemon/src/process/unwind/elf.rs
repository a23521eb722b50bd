//! What framehop needs of one ELF file to unwind its code: the CFI sections
//! (.eh_frame and its header, .debug_frame), the addresses of .text and
//! .got they are relative to (not their bytes), and the load segments that
//! place a mapping; read from the file once per version and held in the
//! daemon's cache of them (`UNWIND_DATA`, see `cache`).
use super::cache::{Cache, Counters, Held, Weigh, DEFAULT_BUDGET};
use crate::process::maps::{Load, Section, Sections, Segments};
use framehop::ExplicitModuleSectionInfo;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

/// A section's bytes: mapped from the file (their pages resident only
/// while read lately, see [`ElfUnwindData::release_pages`]), or decompressed.
#[derive(Debug, Clone)]
pub enum Data {
    Mapped(Arc<crate::os::Mapped>),
    Owned(Arc<[u8]>),
}

impl Default for Data {
    fn default() -> Data {
        Data::Owned(Arc::from(&[][..]))
    }
}

impl std::ops::Deref for Data {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Data::Mapped(m) => m,
            Data::Owned(o) => o,
        }
    }
}

impl Data {
    /// The section `s` of `file` (read through `cache`).
    fn of(
        s: &Section,
        file: &std::fs::File,
        cache: &object::ReadCache<std::fs::File>,
    ) -> Option<Data> {
        if !s.compressed() {
            if let Some((offset, len)) = s.stored_range() {
                if let Ok(m) = crate::os::Mapped::file(file, offset, len as usize) {
                    return Some(Data::Mapped(Arc::new(m)));
                }
            }
        }
        Some(Data::Owned(Arc::from(&s.data(cache)?[..])))
    }

    /// What it keeps resident: decompressed bytes, and an eighth of mapped
    /// ones (the pages the lookups between two releases touch).
    fn weight(&self) -> u64 {
        match self {
            Data::Mapped(m) => m.len() as u64 / 8,
            Data::Owned(o) => o.len() as u64,
        }
    }

    fn release(&self) {
        if let Data::Mapped(m) = self {
            m.release();
        }
    }
}

/// The section of call frame information a module is unwound with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Cfi {
    /// .eh_frame, with its header.
    EhFrame,
    /// .debug_frame.
    DebugFrame,
}

/// What framehop needs of one ELF file, read once.
#[derive(Debug)]
pub struct ElfUnwindData {
    /// The addresses (svma) of .text: framehop reads no code bytes of an
    /// ELF file (its instruction analysis is for Mach-O and PE), only this
    /// range, as a base of CFI pointer encodings.
    pub(super) text: Option<Range<u64>>,
    pub(super) eh_frame: Option<(Range<u64>, Data)>,
    pub(super) eh_frame_hdr: Option<(Range<u64>, Data)>,
    pub(super) debug_frame: Option<Data>,
    /// With both sections, whether .debug_frame covers more code: it is
    /// then the one given to framehop...
    pub(super) debug_frame_first: bool,
    /// ...and these code ranges (svma), which only .eh_frame covers (the C
    /// runtime's), are unwound with .eh_frame.
    pub(super) eh_frame_only: Vec<Range<u64>>,
    pub(super) got: Option<Range<u64>>,
    pub(super) loads: Segments,
}

impl Weigh for ElfUnwindData {
    fn weight(&self) -> u64 {
        let len = |d: Option<&Data>| d.map_or(0, Data::weight);
        len(self.eh_frame.as_ref().map(|(_, d)| d))
            + len(self.eh_frame_hdr.as_ref().map(|(_, d)| d))
            + len(self.debug_frame.as_ref())
            + (self.eh_frame_only.len() * std::mem::size_of::<Range<u64>>()) as u64
            + std::mem::size_of::<Self>() as u64
    }
}

impl ElfUnwindData {
    pub(super) fn read(path: &Path) -> Option<ElfUnwindData> {
        let file = std::fs::File::open(path).ok()?;
        let cache = object::ReadCache::new(file.try_clone().ok()?);
        let sections = Sections::of(&cache)?;
        let section = |name: &str| -> Option<(Range<u64>, Data)> {
            let s = sections.get(name)?;
            Some((s.range(), Data::of(s, &file, &cache)?))
        };
        let loads = Segments::of(&cache)?;
        let text = sections.get(".text").map(|s| s.range());
        let got = sections.get(".got").map(|s| s.range());
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
                .set_text(text.as_ref().map_or(0, |r| r.start))
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

    /// Drop the resident pages of its mapped sections.
    pub(super) fn release_pages(&self) {
        let sections = [
            self.eh_frame.as_ref().map(|(_, d)| d),
            self.eh_frame_hdr.as_ref().map(|(_, d)| d),
            self.debug_frame.as_ref(),
        ];
        sections.into_iter().flatten().for_each(Data::release);
    }

    /// The sections framehop unwinds the module with: .eh_frame (and its
    /// header) or .debug_frame alone, as `cfi` says.
    pub(super) fn section_info(&self, cfi: Cfi) -> ExplicitModuleSectionInfo<Data> {
        let debug_frame = cfi == Cfi::DebugFrame;
        let eh = |x: &Option<(Range<u64>, Data)>| x.clone().filter(|_| !debug_frame);
        let (eh_frame, eh_frame_hdr) = (eh(&self.eh_frame), eh(&self.eh_frame_hdr));
        ExplicitModuleSectionInfo {
            base_svma: 0,
            text_svma: self.text.clone(),
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
pub(super) fn bias(loads: &Segments, start: u64, pgoff: u64) -> Option<u64> {
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

/// The unwind data of the file at `path`, from the daemon's cache (read
/// once per file version, held within the cache's budget).
pub(super) fn elf_data(path: &Path) -> Option<Arc<Held<ElfUnwindData>>> {
    UNWIND_DATA.get(path, ElfUnwindData::read)
}

/// The daemon's cache of unwind tables. The free functions below are for
/// the memory governor and the metrics.
pub(super) static UNWIND_DATA: Cache<ElfUnwindData> = Cache::new(DEFAULT_BUDGET);

/// Hold at most `bytes` of unwind tables from now on.
pub fn set_budget(bytes: u64) {
    UNWIND_DATA.set_budget(bytes);
}

/// Bytes of unwind tables held now.
pub fn bytes() -> u64 {
    UNWIND_DATA.counters().bytes
}

/// Drop the resident pages of the unwind tables mapped from their files.
pub fn release_pages() {
    UNWIND_DATA.for_each(ElfUnwindData::release_pages);
}

/// Drop the unwind tables no unwinder uses now; the bytes freed.
pub fn shed() -> u64 {
    UNWIND_DATA.shed()
}

/// Rises whenever unwind tables some unwinder uses are evicted.
pub fn epoch() -> u64 {
    UNWIND_DATA.epoch()
}

/// The unwind tables' counters.
pub fn counters() -> Counters {
    UNWIND_DATA.counters()
}
