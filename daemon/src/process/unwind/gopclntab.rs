//! Go's function table (`.gopclntab`, kept by stripped Go binaries too): the
//! functions' ranges, names and flags, and their stack-pointer deltas per pc,
//! for naming and unwinding Go code. Layouts of Go 1.16 to 1.2x on 64-bit
//! little-endian targets (`runtime/symtab.go`, `runtime/runtime2.go`).
use crate::os::file_version::SharedReads;
use crate::process::maps::{Sections, Segments};
use std::path::Path;
use std::sync::Arc;

/// The table's layout, told by its magic number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Version {
    /// Go 1.16 and 1.17: 0xfffffffa; absolute entry pcs.
    Go116,
    /// Go 1.18 and 1.19: 0xfffffff0; entries relative to `textStart`.
    Go118,
    /// Go 1.20 and later: 0xfffffff1; `_func` gained `startLine`.
    Go120,
}

/// `_func.flag`: the function marks the outermost frame of a stack.
const FLAG_TOPFRAME: u8 = 1;
/// `_func.flag`: the function writes SP in ways pcsp cannot describe
/// (stack switches); Go's own traceback stops there.
const FLAG_SPWRITE: u8 = 2;

/// The outermost functions of Go stacks, for the tables (Go 1.16) whose
/// `_func` has no flags.
const TOP_FUNCS: [&str; 3] = ["runtime.goexit", "runtime.mstart", "runtime.rt0_go"];

/// A parsed `.gopclntab` with the load segments of its file.
#[derive(Debug)]
pub struct GoTable {
    data: Vec<u8>,
    version: Version,
    nfunc: usize,
    /// Where entry offsets count from (Go 1.18+).
    text_start: u64,
    funcnames: usize,
    pctab: usize,
    functab: usize,
    /// Where the file's bytes are loaded (file offsets to addresses).
    pub loads: Segments,
}

/// One function of a table.
#[derive(Debug, Clone, Copy)]
pub struct Func<'a> {
    table: &'a GoTable,
    /// Its code's address range.
    pub entry: u64,
    pub end: u64,
    /// Where its `_func` starts in the table.
    at: usize,
}

/// How a function's frame is unwound at one pc.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The frame's size above sp (the return address is at sp + delta).
    Delta(u64),
    /// The outermost frame of its stack, or a stack switch Go's traceback
    /// does not follow: the walk ends here.
    Top,
}

fn u32_at(data: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(data.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(data: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(data.get(at..at + 8)?.try_into().ok()?))
}

fn uvarint(data: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *data.get(*at)?;
        *at += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

impl GoTable {
    /// The table in `data` (the section's bytes), whose functions' pcs count
    /// from `text` (the `.text` address) where the header does not say.
    pub fn parse(data: Vec<u8>, text: u64, loads: Segments) -> Option<GoTable> {
        let version = match u32_at(&data, 0)? {
            0xffff_fffa => Version::Go116,
            0xffff_fff0 => Version::Go118,
            0xffff_fff1 => Version::Go120,
            _ => return None,
        };
        // pad1, pad2, minLC (the pc quantum: 1 on x86), ptrSize.
        if data.get(4..8)? != [0, 0, 1, 8] {
            return None;
        }
        let word = |i: usize| u64_at(&data, 8 + 8 * i).and_then(|v| usize::try_from(v).ok());
        let nfunc = word(0)?;
        // After nfunc and nfiles: textStart (1.18+), then the offsets of
        // funcnametab, cutab, filetab, pctab and the function table.
        let (text_start, first) = match version {
            Version::Go116 => (0, 2),
            _ => (u64_at(&data, 24)?, 3),
        };
        let table = GoTable {
            version,
            nfunc,
            text_start: if text_start == 0 { text } else { text_start },
            funcnames: word(first)?,
            pctab: word(first + 3)?,
            functab: word(first + 4)?,
            loads,
            data,
        };
        // The function table holds nfunc + 1 entries (the last one ends the
        // text).
        table.entry(nfunc)?;
        Some(table)
    }

    /// The table of the ELF file at `path`, if it is a Go program.
    fn read(path: &Path) -> Option<GoTable> {
        let file = std::fs::File::open(path).ok()?;
        let cache = object::ReadCache::new(file);
        let sections = Sections::of(&cache)?;
        let text = sections.get(".text").map_or(0, |s| s.address);
        let loads = Segments::of(&cache)?;
        // Go's linker names the table's section (inside .data.rel.ro in
        // position-independent programs); the system linker (cgo, external
        // linking) merges it into .data.rel.ro of those, where its header
        // finds it. A Go program always has .go.buildinfo.
        let named = [".gopclntab", ".data.rel.ro.gopclntab"]
            .iter()
            .find_map(|name| sections.get(name));
        if let Some(section) = named {
            return GoTable::parse(section.data(&cache)?.to_vec(), text, loads);
        }
        sections.get(".go.buildinfo")?;
        let data = sections.get(".data.rel.ro")?.data(&cache)?;
        // The table is aligned; its header starts with a magic and 0, 0, 1, 8.
        (0..data.len().saturating_sub(8))
            .step_by(8)
            .filter(|&at| {
                matches!(
                    u32_at(&data, at),
                    Some(0xffff_fffa | 0xffff_fff0 | 0xffff_fff1)
                ) && data[at + 4..at + 8] == [0, 0, 1, 8]
            })
            .find_map(|at| GoTable::parse(data[at..].to_vec(), text, loads.clone()))
    }

    /// The table of the Go program at `path`, read once per file version and
    /// shared while used (by unwinders and the symbolizer).
    pub fn of(path: &Path) -> Option<Arc<GoTable>> {
        static TABLES: SharedReads<GoTable> = SharedReads::new();
        TABLES.get(path, GoTable::read)
    }

    /// Entry `i` of the function table: (entry pc, `_func` offset).
    fn entry(&self, i: usize) -> Option<(u64, usize)> {
        let (pc, off) = match self.version {
            Version::Go116 => {
                let at = self.functab.checked_add(i.checked_mul(16)?)?;
                (u64_at(&self.data, at)?, u64_at(&self.data, at + 8)?)
            }
            _ => {
                let at = self.functab.checked_add(i.checked_mul(8)?)?;
                let pc = u64::from(u32_at(&self.data, at)?);
                let off = u64::from(u32_at(&self.data, at + 4)?);
                (self.text_start.checked_add(pc)?, off)
            }
        };
        Some((pc, usize::try_from(off).ok()?))
    }

    /// The addresses the table's functions cover.
    pub fn text(&self) -> Option<std::ops::Range<u64>> {
        Some(self.entry(0)?.0..self.entry(self.nfunc)?.0)
    }

    /// The function holding `pc` (an ELF virtual address).
    pub fn func(&self, pc: u64) -> Option<Func<'_>> {
        let text = self.text()?;
        if !text.contains(&pc) {
            return None;
        }
        // The last entry whose pc is at most `pc`.
        let (mut lo, mut hi) = (0, self.nfunc);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if self.entry(mid)?.0 <= pc {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        let (entry, off) = self.entry(lo)?;
        let (end, _) = self.entry(lo + 1)?;
        Some(Func {
            table: self,
            entry,
            end,
            at: self.functab.checked_add(off)?,
        })
    }

    /// Every function, in address order.
    #[cfg(test)]
    pub fn funcs(&self) -> impl Iterator<Item = Func<'_>> {
        (0..self.nfunc).filter_map(|i| {
            let (entry, off) = self.entry(i)?;
            Some(Func {
                table: self,
                entry,
                end: self.entry(i + 1)?.0,
                at: self.functab.checked_add(off)?,
            })
        })
    }
}

impl<'a> Func<'a> {
    /// A 32-bit field of the `_func`, by its index after the entry pc.
    fn field(&self, i: usize) -> Option<u32> {
        let entry = match self.table.version {
            Version::Go116 => 8,
            _ => 4,
        };
        u32_at(&self.table.data, self.at + entry + 4 * i)
    }

    /// The flags byte (0 where Go 1.16 had padding).
    fn flag(&self) -> u8 {
        // After nameoff, args, deferreturn, pcsp, pcfile, pcln, npcdata,
        // cuOffset (and startLine from 1.20) come funcID and flag.
        let fields = match self.table.version {
            Version::Go120 => 9,
            _ => 8,
        };
        let entry = match self.table.version {
            Version::Go116 => 8,
            _ => 4,
        };
        let at = self.at + entry + 4 * fields + 1;
        self.table.data.get(at).copied().unwrap_or(0)
    }

    /// The name as Go prints it (`main.(*T).Method`, `pkg.Func.func1`).
    pub fn name(&self) -> Option<&'a str> {
        let off = usize::try_from(self.field(0)?).ok()?;
        let names = self
            .table
            .data
            .get(self.table.funcnames.checked_add(off)?..)?;
        let len = names.iter().position(|&b| b == 0)?;
        std::str::from_utf8(&names[..len]).ok()
    }

    /// Whether it is the outermost frame of every stack it is on
    /// (`runtime.goexit` for goroutines, `runtime.mstart` for threads).
    pub fn outermost(&self) -> bool {
        self.flag() & FLAG_TOPFRAME != 0
            || (self.table.version == Version::Go116
                && self.name().is_some_and(|n| TOP_FUNCS.contains(&n)))
    }

    /// How its frame is unwound at `pc` (in the function; for a caller's
    /// frame, the call instruction's address).
    pub fn step(&self, pc: u64) -> Option<Step> {
        if self.outermost() || self.flag() & FLAG_SPWRITE != 0 {
            return Some(Step::Top);
        }
        let delta = self.sp_delta(pc)?;
        Some(Step::Delta(u64::try_from(delta).ok()?))
    }

    /// The pcsp table's value at `pc`: the bytes between sp and the
    /// return address.
    pub fn sp_delta(&self, pc: u64) -> Option<i64> {
        if !(self.entry..self.end).contains(&pc) {
            return None;
        }
        let t = self.table;
        let pcsp = usize::try_from(self.field(3)?).ok()?;
        if pcsp == 0 {
            return None;
        }
        let mut at = t.pctab.checked_add(pcsp)?;
        let (mut value, mut at_pc) = (-1i64, self.entry);
        let mut first = true;
        loop {
            let delta = uvarint(&t.data, &mut at)?;
            if delta == 0 && !first {
                return None;
            }
            first = false;
            // Zig-zag: the low bit is the sign.
            let delta = if delta & 1 != 0 {
                !(delta >> 1) as i64
            } else {
                (delta >> 1) as i64
            };
            value = value.checked_add(delta)?;
            at_pc = at_pc.checked_add(uvarint(&t.data, &mut at)?)?;
            if pc < at_pc {
                return Some(value);
            }
        }
    }
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use object::{Object, ObjectSection};
    use std::path::PathBuf;
    use std::process::Command;

    /// `tests/workloads/gostacks.go` built with `go build` and `flags` into
    /// a directory of its own (fails when `go` is missing: install
    /// golang-go).
    pub fn build(name: &str, flags: &[&str]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("profd-gopclntab-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/workloads/gostacks.go");
        let out = dir.join(name);
        let status = Command::new("go")
            .arg("build")
            .args(flags)
            .arg("-o")
            .arg(&out)
            .arg(&source)
            .env("GOCACHE", dir.join("cache"))
            .env("GOPATH", dir.join("path"))
            .env("GO111MODULE", "off")
            .status()
            .expect("running go (install golang-go)");
        assert!(status.success(), "go build failed");
        out
    }

    /// `go tool objdump -s REGEX` of `exe`: (address, instruction text).
    pub fn objdump(exe: &Path, regex: &str) -> Vec<(u64, String)> {
        let out = Command::new("go")
            .args(["tool", "objdump", "-s", regex])
            .arg(exe)
            .output()
            .expect("running go tool objdump");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| {
                // file:line, address, encoding, instruction.
                let f: Vec<&str> = l
                    .split('\t')
                    .map(str::trim)
                    .filter(|f| !f.is_empty())
                    .collect();
                let addr = u64::from_str_radix(f.get(1)?.strip_prefix("0x")?, 16).ok()?;
                Some((addr, f.get(3)?.to_string()))
            })
            .collect()
    }

    #[test]
    fn functions_names_and_frames_are_those_go_reports() {
        let exe = build("gostacks", &[]);
        let table = GoTable::of(&exe).expect("a Go table");
        // Every function of the symbol table at its address, named as Go
        // names it, and the table covers them in order.
        let nm = Command::new("go")
            .args(["tool", "nm", "-size", "-sort", "address"])
            .arg(&exe)
            .output()
            .unwrap();
        let mut checked = 0;
        for line in String::from_utf8_lossy(&nm.stdout).lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() != 4 || f[2] != "T" || !f[3].starts_with("main.") {
                continue;
            }
            let addr = u64::from_str_radix(f[0], 16).unwrap();
            let func = table
                .func(addr)
                .unwrap_or_else(|| panic!("{} not found", f[3]));
            assert_eq!((func.entry, func.name()), (addr, Some(f[3])));
            checked += 1;
        }
        assert!(checked >= 8, "only {checked} main functions");
        let funcs: Vec<Func<'_>> = table.funcs().collect();
        assert!(funcs.windows(2).all(|w| w[0].end == w[1].entry));
        assert!(funcs.iter().any(|f| f.name() == Some("main.makeMid.func1")));
        assert!(funcs
            .iter()
            .any(|f| f.name() == Some("main.(*Worker).Work")));

        // A frameless leaf: no frame anywhere.
        for (pc, _) in objdump(&exe, r"^main\.leafA$") {
            let f = table.func(pc).unwrap();
            assert_eq!(f.step(pc), Some(Step::Delta(0)), "leafA at {pc:#x}");
        }
        // Work: no frame at its entry, its frame size (SUBQ $n, SP) at the
        // call of leafA.
        let work = objdump(&exe, r"^main\.\(\*Worker\)\.Work$");
        let size = work
            .iter()
            .find_map(|(_, i)| i.strip_prefix("SUBQ $0x")?.strip_suffix(", SP"))
            .map(|n| u64::from_str_radix(n, 16).unwrap())
            .expect("Work allocates a frame");
        let call = work
            .iter()
            .find(|(_, i)| i.starts_with("CALL main.leafA"))
            .unwrap()
            .0;
        let f = table.func(call).unwrap();
        assert_eq!(f.step(f.entry), Some(Step::Delta(0)));
        assert_eq!(f.step(call), Some(Step::Delta(size)));
        // Goroutines' outermost frame ends the walk.
        let goexit = funcs
            .iter()
            .find(|f| f.name() == Some("runtime.goexit"))
            .unwrap();
        assert_eq!(goexit.step(goexit.entry + 1), Some(Step::Top));
        assert!(table.func(funcs[0].entry - 1).is_none());
        assert!(table.func(funcs.last().unwrap().end).is_none());
    }

    #[test]
    fn a_program_linked_without_symbols_keeps_its_table() {
        let full = build("gostacks", &[]);
        let stripped = build("gostacks_strip", &["-ldflags=-s -w"]);
        let bytes = std::fs::read(&stripped).unwrap();
        let elf = object::File::parse(&*bytes).unwrap();
        assert!(elf.section_by_name(".symtab").is_none());
        assert!(elf.section_by_name(".debug_frame").is_none());
        let (a, b) = (GoTable::of(&full).unwrap(), GoTable::of(&stripped).unwrap());
        let names = |t: &GoTable| -> Vec<(u64, String)> {
            t.funcs()
                .map(|f| (f.entry, f.name().unwrap().to_string()))
                .collect()
        };
        assert_eq!(names(&a), names(&b));
        // Not a Go program.
        assert!(GoTable::of(&std::env::current_exe().unwrap()).is_none());
    }

    #[test]
    fn a_position_independent_program_linked_externally_has_its_table_found() {
        // No .gopclntab section: the system linker put the table inside
        // .data.rel.ro.
        let pie = build(
            "gostacks_extpie",
            &["-buildmode=pie", "-ldflags=-linkmode=external -s -w"],
        );
        let bytes = std::fs::read(&pie).unwrap();
        let elf = object::File::parse(&*bytes).unwrap();
        assert!(elf.section_by_name(".gopclntab").is_none());
        let table = GoTable::of(&pie).expect("the table in .data.rel.ro");
        let funcs: Vec<Func<'_>> = table.funcs().collect();
        let work = funcs
            .iter()
            .find(|f| f.name() == Some("main.(*Worker).Work"))
            .expect("main.(*Worker).Work");
        assert_eq!(table.func(work.entry + 1).unwrap().entry, work.entry);
        // Its functions are in the executable segment.
        let text = elf.section_by_name(".text").unwrap();
        assert!(text.address() <= funcs[0].entry);
        assert!(funcs.last().unwrap().end <= text.address() + text.size());
    }
}
