//! Where an ELF file's bytes are loaded: its PT_LOAD segments, read from the
//! program headers alone, to turn file offsets into the addresses the file
//! (and its split debug file) uses.
use object::elf::{FileHeader32, FileHeader64, PF_X, PT_LOAD};
use object::read::elf::{FileHeader, ProgramHeader};
use object::{Endianness, FileKind, ReadRef};
use std::path::Path;

/// A PT_LOAD segment that holds bytes of the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Load {
    pub offset: u64,
    pub size: u64,
    pub vaddr: u64,
    pub exec: bool,
}

/// The PT_LOAD segments of an ELF file (64- or 32-bit) with file bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Segments(pub Vec<Load>);

impl Segments {
    /// The segments of the ELF file at `path`.
    pub fn read(path: &Path) -> Option<Segments> {
        let file = std::fs::File::open(path).ok()?;
        Segments::of(&object::ReadCache::new(file))
    }

    /// The segments of the ELF file in `data`.
    pub fn of<'a, R: ReadRef<'a>>(data: R) -> Option<Segments> {
        match FileKind::parse(data).ok()? {
            FileKind::Elf64 => loads::<FileHeader64<Endianness>, R>(data),
            FileKind::Elf32 => loads::<FileHeader32<Endianness>, R>(data),
            _ => None,
        }
    }

    /// The ELF virtual address of file offset `offset`.
    pub fn vaddr(&self, offset: u64) -> Option<u64> {
        let load = self
            .0
            .iter()
            .find(|l| l.offset <= offset && offset < l.offset + l.size)?;
        Some(load.vaddr + (offset - load.offset))
    }
}

fn loads<'a, Elf: FileHeader<Endian = Endianness>, R: ReadRef<'a>>(data: R) -> Option<Segments> {
    let header = Elf::parse(data).ok()?;
    let endian = header.endian().ok()?;
    let headers = header.program_headers(endian, data).ok()?;
    let loads = headers
        .iter()
        .filter(|p| p.p_type(endian) == PT_LOAD)
        .map(|p| Load {
            offset: p.p_offset(endian).into(),
            size: p.p_filesz(endian).into(),
            vaddr: p.p_vaddr(endian).into(),
            exec: p.p_flags(endian) & PF_X != 0,
        })
        .filter(|l| l.size > 0)
        .collect();
    Some(Segments(loads))
}
