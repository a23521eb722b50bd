//! The kernel's functions as `/proc/kallsyms` lists them, held compactly:
//! their start addresses in order, their names in one text, and the
//! loadable modules they belong to as runs of consecutive functions.
use std::io::BufRead;

/// The kernel's text symbols (`t`, `T`, `w`, `W`), sorted by address: the
/// function an address belongs to is the last one starting at or below it.
#[derive(Debug, Default)]
pub struct Kallsyms {
    starts: Vec<u64>,
    /// Where each name ends in `names`; it starts where the one before ends.
    ends: Vec<u32>,
    names: String,
    /// Runs of functions of one module: (index of the run's first
    /// function, its module: an index into `modules`, or None for the
    /// kernel image), in order.
    runs: Vec<(u32, Option<u16>)>,
    /// Names of the loadable modules.
    modules: Vec<Box<str>>,
}

impl Kallsyms {
    /// The symbols of the running kernel; none where the kernel hides
    /// their addresses (`kernel.kptr_restrict`).
    pub fn read() -> std::io::Result<Kallsyms> {
        let file = std::fs::File::open("/proc/kallsyms")?;
        Kallsyms::parse(std::io::BufReader::with_capacity(1 << 16, file))
    }

    /// Parse lines `address type name [module]`; other lines are skipped.
    pub fn parse(mut text: impl BufRead) -> std::io::Result<Kallsyms> {
        let mut found: Vec<(u64, u32, u32, Option<u16>)> = Vec::new();
        let mut names = String::new();
        let mut modules: Vec<Box<str>> = Vec::new();
        let mut line = String::new();
        loop {
            line.clear();
            if text.read_line(&mut line)? == 0 {
                break;
            }
            let mut words = line.split_ascii_whitespace();
            let (Some(addr), Some(kind), Some(name)) = (words.next(), words.next(), words.next())
            else {
                continue;
            };
            if !matches!(kind, "t" | "T" | "w" | "W") {
                continue;
            }
            let Ok(addr) = u64::from_str_radix(addr, 16) else {
                continue;
            };
            if addr == 0 || names.len() + name.len() > u32::MAX as usize {
                continue;
            }
            // A loadable module's function: `[name]` after it.
            let module = words
                .next()
                .and_then(|w| w.strip_prefix('[')?.strip_suffix(']'))
                .and_then(|m| match modules.iter().position(|k| &**k == m) {
                    Some(i) => u16::try_from(i).ok(),
                    None => {
                        modules.push(m.into());
                        u16::try_from(modules.len() - 1).ok()
                    }
                });
            let start = names.len() as u32;
            names.push_str(name);
            found.push((addr, start, names.len() as u32, module));
        }
        // Stable: of names sharing an address, the first listed is kept.
        found.sort_by_key(|&(addr, ..)| addr);
        found.dedup_by_key(|&mut (addr, ..)| addr);
        let mut kept = String::with_capacity(names.len());
        let mut starts = Vec::with_capacity(found.len());
        let mut ends = Vec::with_capacity(found.len());
        let mut runs: Vec<(u32, Option<u16>)> = Vec::new();
        for (i, (addr, from, to, module)) in found.into_iter().enumerate() {
            kept.push_str(&names[from as usize..to as usize]);
            starts.push(addr);
            ends.push(kept.len() as u32);
            if runs.last().is_none_or(|&(_, m)| m != module) {
                runs.push((i as u32, module));
            }
        }
        kept.shrink_to_fit();
        runs.shrink_to_fit();
        Ok(Kallsyms {
            starts,
            ends,
            names: kept,
            runs,
            modules,
        })
    }

    /// The loadable module function `i` belongs to; None for the kernel
    /// image's.
    fn module_of(&self, i: usize) -> Option<&str> {
        let run = self
            .runs
            .partition_point(|&(first, _)| first as usize <= i)
            .checked_sub(1)?;
        let m = self.runs[run].1?;
        self.modules.get(m as usize).map(|m| &**m)
    }

    /// The function `addr` is in: its name, start and loadable module (None
    /// for the kernel image's); None below the first.
    pub fn find(&self, addr: u64) -> Option<(&str, u64, Option<&str>)> {
        let i = self
            .starts
            .partition_point(|&start| start <= addr)
            .checked_sub(1)?;
        let from = i.checked_sub(1).map_or(0, |j| self.ends[j] as usize);
        let name = &self.names[from..self.ends[i] as usize];
        Some((name, self.starts[i], self.module_of(i)))
    }

    /// Functions held.
    pub fn len(&self) -> usize {
        self.starts.len()
    }

    /// Bytes held on the heap.
    pub fn bytes(&self) -> u64 {
        let modules: usize = self.modules.iter().map(|m| m.len() + 16).sum();
        (self.starts.capacity() * 8
            + self.ends.capacity() * 4
            + self.names.capacity()
            + self.runs.capacity() * 8
            + modules) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::Kallsyms;

    const TEXT: &str = "\
ffffffff81000000 T _stext
ffffffff81000000 T _text
ffffffff81001000 t do_one_initcall
ffffffff81002000 D some_data
ffffffff81003000 W weak_fn
0000000000000000 A fixed_percpu_data
ffffffffc0001000 t ext4_read\t[ext4]
ffffffff81002800 T vfs_read
not a line
";

    #[test]
    fn an_address_is_in_the_last_function_starting_at_or_below_it() {
        let k = Kallsyms::parse(TEXT.as_bytes()).unwrap();
        assert_eq!(k.len(), 5, "text symbols, one per address");
        assert_eq!(k.find(0xffffffff80ffffff), None);
        assert_eq!(
            k.find(0xffffffff81000010),
            Some(("_stext", 0xffffffff81000000, None))
        );
        assert_eq!(
            k.find(0xffffffff81001fff),
            Some(("do_one_initcall", 0xffffffff81001000, None))
        );
        // Data symbols are not functions: vfs_read runs on to weak_fn.
        assert_eq!(
            k.find(0xffffffff81002fff),
            Some(("vfs_read", 0xffffffff81002800, None))
        );
        assert_eq!(
            k.find(0xffffffff81003004),
            Some(("weak_fn", 0xffffffff81003000, None))
        );
        assert_eq!(
            k.find(0xffffffffc0001234),
            Some(("ext4_read", 0xffffffffc0001000, Some("ext4")))
        );
    }

    /// Functions of loadable modules (`[name]` after them) are found with
    /// their module; the kernel image's with none.
    #[test]
    fn module_functions_are_found_with_their_module() {
        let text = "\
ffffffff81002800 T vfs_read
ffffffffc0001000 t ext4_read\t[ext4]
ffffffffc0001800 T ext4_write\t[ext4]
ffffffffc0100000 t xfs_buf_read\t[xfs]
ffffffffc0200000 t jbd2_commit\t[jbd2]
ffffffffc0200400 t ext4_late\t[ext4]
";
        let k = Kallsyms::parse(text.as_bytes()).unwrap();
        let at = |a: u64| k.find(a).map(|(n, _, m)| (n, m));
        assert_eq!(at(0xffffffff81002900), Some(("vfs_read", None)));
        assert_eq!(at(0xffffffffc0001004), Some(("ext4_read", Some("ext4"))));
        assert_eq!(at(0xffffffffc0001900), Some(("ext4_write", Some("ext4"))));
        assert_eq!(at(0xffffffffc0100010), Some(("xfs_buf_read", Some("xfs"))));
        assert_eq!(at(0xffffffffc0200010), Some(("jbd2_commit", Some("jbd2"))));
        assert_eq!(at(0xffffffffc0200404), Some(("ext4_late", Some("ext4"))));
        assert_eq!(k.runs.len(), 5, "{:?}", k.runs);
    }

    #[test]
    fn hidden_addresses_give_no_functions() {
        let hidden = "0000000000000000 T _stext\n0000000000000000 t vfs_read\n";
        let k = Kallsyms::parse(hidden.as_bytes()).unwrap();
        assert_eq!((k.len(), k.find(u64::MAX)), (0, None));
    }

    /// The running kernel's: each function found by its own address, held
    /// in fewer bytes than the text lists them.
    #[test]
    fn the_running_kernels_functions_are_found_by_their_addresses() {
        let text = std::fs::read_to_string("/proc/kallsyms").unwrap();
        let k = Kallsyms::read().unwrap();
        assert!(
            k.len() > 1000,
            "kallsyms readable (run as root): {}",
            k.len()
        );
        let vfs_read = text
            .lines()
            .find_map(|l| l.strip_suffix(" T vfs_read"))
            .and_then(|a| u64::from_str_radix(a, 16).ok())
            .expect("vfs_read listed");
        assert_eq!(k.find(vfs_read + 1), Some(("vfs_read", vfs_read, None)));
        assert!(
            k.bytes() * 10 < text.len() as u64 * 9,
            "{} of {}",
            k.bytes(),
            text.len()
        );
    }
}
