//! The vDSO's functions. Every 64-bit process maps the same vDSO image, the
//! running kernel's, so the daemon reads its own once (from `/proc/self/mem`
//! at its `[vdso]` mapping) and names a target's `[vdso]` addresses by their
//! offset in that mapping, from the image's dynamic symbols.
use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};
use std::io::{Read, Seek, SeekFrom};
use std::sync::OnceLock;

/// Module name of vDSO frames.
pub const VDSO_MODULE: &str = "[vdso]";

/// The functions of the vDSO image: (start, end, name) as offsets from the
/// image's start, by start.
#[derive(Debug)]
pub struct Vdso {
    functions: Vec<(u64, u64, String)>,
}

impl Vdso {
    /// The daemon's vDSO, read once; `None` when it cannot be read.
    pub fn get() -> Option<&'static Vdso> {
        static VDSO: OnceLock<Option<Vdso>> = OnceLock::new();
        VDSO.get_or_init(|| {
            let vdso = Vdso::parse(&own_image()?);
            if vdso.is_none() {
                tracing::debug!("the vDSO image holds no functions");
            }
            vdso
        })
        .as_ref()
    }

    /// What the table takes in memory.
    pub fn bytes(&self) -> u64 {
        let names: usize = self.functions.iter().map(|f| f.2.capacity()).sum();
        (names + self.functions.capacity() * std::mem::size_of::<(u64, u64, String)>()) as u64
    }

    /// The functions of a vDSO image. Of several names for one function
    /// (`clock_gettime` and `__vdso_clock_gettime`) the `__vdso_` one, as
    /// perf shows it.
    pub fn parse(image: &[u8]) -> Option<Vdso> {
        let elf = object::File::parse(image).ok()?;
        let base = elf.segments().map(|s| s.address()).min()?;
        let mut functions: Vec<(u64, u64, String)> = elf
            .dynamic_symbols()
            .filter(|s| s.kind() == SymbolKind::Text && s.size() > 0)
            .filter_map(|s| {
                let start = s.address().checked_sub(base)?;
                Some((start, start + s.size(), s.name().ok()?.to_string()))
            })
            .collect();
        functions.sort_by(|a, b| {
            (a.0, !a.2.starts_with("__vdso_"), &a.2).cmp(&(b.0, !b.2.starts_with("__vdso_"), &b.2))
        });
        functions.dedup_by_key(|f| f.0);
        (!functions.is_empty()).then_some(Vdso { functions })
    }

    /// The function at `offset` from the start of the `[vdso]` mapping.
    pub fn name(&self, offset: u64) -> Option<&str> {
        let i = self
            .functions
            .partition_point(|f| f.0 <= offset)
            .checked_sub(1)?;
        let (start, end, name) = &self.functions[i];
        (*start..*end).contains(&offset).then_some(name.as_str())
    }
}

/// The bytes of this process's `[vdso]` mapping.
fn own_image() -> Option<Vec<u8>> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let line = maps.lines().find(|l| l.ends_with("[vdso]"))?;
    let range = line.split_whitespace().next()?;
    let (start, end) = range.split_once('-')?;
    let start = u64::from_str_radix(start, 16).ok()?;
    let end = u64::from_str_radix(end, 16).ok()?;
    let mut image = vec![0; usize::try_from(end.checked_sub(start)?).ok()?];
    let mut mem = std::fs::File::open("/proc/self/mem").ok()?;
    mem.seek(SeekFrom::Start(start)).ok()?;
    match mem.read_exact(&mut image) {
        Ok(()) => Some(image),
        Err(err) => {
            tracing::debug!(%err, "cannot read the vDSO");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The running kernel's vDSO has clock_gettime, named as perf names it,
    /// over its whole length and not past it.
    #[test]
    fn the_vdso_names_clock_gettime() {
        let vdso = Vdso::get().expect("the daemon's vDSO");
        let (start, end, name) = vdso
            .functions
            .iter()
            .find(|f| f.2.contains("clock_gettime"))
            .unwrap_or_else(|| panic!("no clock_gettime: {:?}", vdso.functions));
        assert_eq!(name, "__vdso_clock_gettime");
        assert_eq!(vdso.name(*start), Some("__vdso_clock_gettime"));
        assert_eq!(vdso.name(end - 1), Some("__vdso_clock_gettime"));
        assert_ne!(vdso.name(*end), Some("__vdso_clock_gettime"));
        eprintln!("vDSO functions: {:?}", vdso.functions);
    }
}
