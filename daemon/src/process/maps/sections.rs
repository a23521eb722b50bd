//! The section headers of an ELF file, read without its symbol tables
//! (which `object::File::parse` reads whole, tens of MiB for a large
//! library): each section's name, addresses and place in the file, and its
//! bytes (decompressed) when asked.
use object::elf::{FileHeader32, FileHeader64, ELFCOMPRESS_ZLIB, ELFCOMPRESS_ZSTD, SHT_NOBITS};
use object::read::elf::{CompressionHeader, FileHeader, SectionHeader};
use object::{CompressedData, CompressionFormat, Endianness, FileKind, ReadRef};
use std::borrow::Cow;
use std::ops::Range;

/// One section of an ELF file.
#[derive(Debug, Clone)]
pub struct Section {
    pub name: String,
    /// Its addresses (svma); 0.. for sections not loaded.
    pub address: u64,
    pub size: u64,
    /// Its bytes as stored in the file (compressed ones with their header
    /// skipped); empty for SHT_NOBITS.
    offset: u64,
    stored: u64,
    format: CompressionFormat,
    /// Its size once decompressed (`stored` when not compressed).
    uncompressed: u64,
}

impl Section {
    /// Its addresses (svma).
    pub fn range(&self) -> Range<u64> {
        self.address..self.address + self.size
    }

    /// Bytes of the file it takes.
    pub fn stored_size(&self) -> u64 {
        self.stored
    }

    /// Its size decompressed.
    pub fn uncompressed_size(&self) -> u64 {
        self.uncompressed
    }

    /// Where its bytes are in the file (offset, length); none for a
    /// section without bytes there.
    pub fn stored_range(&self) -> Option<(u64, u64)> {
        (self.stored > 0).then_some((self.offset, self.stored))
    }

    /// Whether it is stored compressed.
    pub fn compressed(&self) -> bool {
        self.format != CompressionFormat::None
    }

    /// Its bytes, decompressed, from the file in `data`.
    pub fn data<'a, R: ReadRef<'a>>(&self, data: R) -> Option<Cow<'a, [u8]>> {
        let bytes = data.read_bytes_at(self.offset, self.stored).ok()?;
        CompressedData {
            format: self.format,
            data: bytes,
            uncompressed_size: self.uncompressed,
        }
        .decompress()
        .ok()
    }
}

/// The sections of an ELF file.
#[derive(Debug, Clone, Default)]
pub struct Sections(Vec<Section>);

/// A build id (or any bytes) in lowercase hex, as debug directories,
/// debuginfod and profd's windows spell it.
pub fn build_id_hex(id: &[u8]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

/// The id of a GNU build-id note (`.note.gnu.build-id`, or a kernel
/// module's `/sys/module/NAME/notes/.note.gnu.build-id`), little-endian.
pub fn gnu_build_id(note: &[u8]) -> Option<Vec<u8>> {
    // namesz, descsz, type (NT_GNU_BUILD_ID = 3), "GNU\0", the id.
    let word = |at: usize| -> Option<usize> {
        let b = note.get(at..at + 4)?;
        Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
    };
    let (namesz, descsz, kind) = (word(0)?, word(4)?, word(8)?);
    let desc = 12 + namesz.div_ceil(4) * 4;
    (kind == 3 && note.get(12..12 + namesz)? == b"GNU\0")
        .then(|| note.get(desc..desc + descsz).map(<[u8]>::to_vec))
        .flatten()
}

impl Sections {
    /// The build id (if any) of an ELF file with symbols or DWARF (a debug
    /// file); None for anything else.
    pub fn debug_elf(file: &std::fs::File) -> Option<Option<Vec<u8>>> {
        let cache = object::ReadCache::new(file.try_clone().ok()?);
        let sections = Sections::of(&cache)?;
        let has_debug = sections.get(".debug_info").is_some() || sections.get(".symtab").is_some();
        has_debug.then(|| sections.build_id(&cache))
    }

    /// The sections of the ELF file in `data`: its section headers and
    /// their names are all that is read.
    pub fn of<'a, R: ReadRef<'a>>(data: R) -> Option<Sections> {
        match FileKind::parse(data).ok()? {
            FileKind::Elf64 => headers::<FileHeader64<Endianness>, R>(data),
            FileKind::Elf32 => headers::<FileHeader32<Endianness>, R>(data),
            _ => None,
        }
    }

    /// The section named `name`, if any.
    pub fn get(&self, name: &str) -> Option<&Section> {
        self.0.iter().find(|s| s.name == name)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Section> {
        self.0.iter()
    }

    /// The GNU build id (of `.note.gnu.build-id`) of the file in `data`.
    pub fn build_id<'a, R: ReadRef<'a>>(&self, data: R) -> Option<Vec<u8>> {
        gnu_build_id(&self.get(".note.gnu.build-id")?.data(data)?)
    }

    /// The file name `.gnu_debuglink` gives, if any.
    pub fn debuglink<'a, R: ReadRef<'a>>(&self, data: R) -> Option<Vec<u8>> {
        let link = self.get(".gnu_debuglink")?.data(data)?;
        let end = link.iter().position(|&b| b == 0)?;
        Some(link[..end].to_vec())
    }
}

fn headers<'a, Elf: FileHeader<Endian = Endianness>, R: ReadRef<'a>>(data: R) -> Option<Sections> {
    let header = Elf::parse(data).ok()?;
    let endian = header.endian().ok()?;
    let table = header.sections(endian, data).ok()?;
    let mut out = Vec::with_capacity(table.len());
    for (_, s) in table.enumerate().skip(1) {
        let Ok(name) = table.section_name(endian, s) else {
            continue;
        };
        let name = String::from_utf8_lossy(name).into_owned();
        let address: u64 = s.sh_addr(endian).into();
        let size: u64 = s.sh_size(endian).into();
        let (mut offset, mut stored, mut format) = match s.file_range(endian) {
            Some((offset, stored)) if s.sh_type(endian) != SHT_NOBITS => {
                (offset, stored, CompressionFormat::None)
            }
            _ => (0, 0, CompressionFormat::None),
        };
        let mut uncompressed = stored;
        if let Ok(Some((ch, at, len))) = s.compression(endian, data) {
            format = match ch.ch_type(endian) {
                ELFCOMPRESS_ZLIB => CompressionFormat::Zlib,
                ELFCOMPRESS_ZSTD => CompressionFormat::Zstandard,
                _ => CompressionFormat::Unknown,
            };
            (offset, stored, uncompressed) = (at, len, ch.ch_size(endian).into());
        } else if name.starts_with(".zdebug_") && stored >= 12 {
            // GNU's older form: "ZLIB", the size (big-endian), the stream.
            if let Ok(head) = data.read_bytes_at(offset, 12) {
                if &head[..4] == b"ZLIB" {
                    let mut be = [0u8; 8];
                    be.copy_from_slice(&head[4..12]);
                    format = CompressionFormat::Zlib;
                    uncompressed = u64::from_be_bytes(be);
                    (offset, stored) = (offset + 12, stored - 12);
                }
            }
        }
        out.push(Section {
            name,
            address,
            size,
            offset,
            stored,
            format,
            uncompressed,
        });
    }
    Some(Sections(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use object::{Object, ObjectSection};

    /// Every section of real programs, as object's full parse gives it.
    #[test]
    fn sections_match_objects_full_parse() {
        let mut checked = 0;
        for path in ["/proc/self/exe", "/bin/sh", "/usr/bin/gzip"] {
            let Ok(bytes) = std::fs::read(path) else {
                continue;
            };
            let ours = Sections::of(&*bytes).expect("an ELF file");
            let elf = object::File::parse(&*bytes).unwrap();
            for s in elf.sections() {
                let name = s.name().unwrap();
                if name.is_empty() {
                    continue;
                }
                let mine = ours.get(name).unwrap_or_else(|| panic!("{path}: {name}"));
                assert_eq!(mine.range(), s.address()..s.address() + s.size(), "{name}");
                let range = s.compressed_file_range().unwrap();
                assert_eq!(mine.stored_size(), range.compressed_size, "{name}");
                assert_eq!(mine.uncompressed_size(), range.uncompressed_size, "{name}");
                if s.kind() != object::SectionKind::UninitializedData {
                    let data = mine.data(&*bytes).unwrap();
                    assert_eq!(&*data, &*s.uncompressed_data().unwrap(), "{name}");
                }
                checked += 1;
            }
        }
        assert!(checked > 40, "only {checked} sections compared");
        let bytes = std::fs::read("/proc/self/exe").unwrap();
        let elf = object::File::parse(&*bytes).unwrap();
        let ours = Sections::of(&*bytes).unwrap();
        let id = elf.build_id().unwrap().expect("rustc gives a build id");
        assert_eq!(ours.build_id(&*bytes).as_deref(), Some(id));
        let sh = std::fs::read("/bin/sh").unwrap();
        let elf = object::File::parse(&*sh).unwrap();
        let link = elf.gnu_debuglink().unwrap().map(|(name, _)| name.to_vec());
        assert_eq!(Sections::of(&*sh).unwrap().debuglink(&*sh), link);
    }
}
