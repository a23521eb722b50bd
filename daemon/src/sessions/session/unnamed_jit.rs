//! A session's addresses in JIT code that no perf map or jitdump named yet,
//! or that a jitdump named (a later load may name them otherwise), by
//! address space: each is looked up again once its space's perf map or
//! jitdump has changed (grown, rewritten, or written as the process exited).
use crate::process::symbolize::jitnames::JitNames;
use std::collections::HashMap;

/// The tables an address was looked up in.
type Seen = JitNames;

/// Unnamed JIT addresses (tagged) by space, with the map last looked in.
#[derive(Default)]
pub struct UnnamedJit {
    by_space: HashMap<usize, (Seen, Vec<u64>)>,
}

impl UnnamedJit {
    /// `addr` of `space` was not named from `seen`, the space's tables.
    pub fn wait(&mut self, space: usize, seen: &Seen, addr: u64) {
        let (last, addrs) = self.by_space.entry(space).or_default();
        *last = seen.clone();
        addrs.push(addr);
    }

    /// The spaces with addresses waiting.
    pub fn spaces(&self) -> impl Iterator<Item = usize> + '_ {
        self.by_space.keys().copied()
    }

    /// Every address waiting (tagged).
    pub fn addrs(&self) -> impl Iterator<Item = &u64> + '_ {
        self.by_space.values().flat_map(|(_, addrs)| addrs)
    }

    /// Take the addresses to look up again: those of the spaces whose
    /// tables (`now` of the space) are not the ones they were looked up in.
    pub fn due(&mut self, now: impl Fn(usize) -> Seen) -> Vec<u64> {
        let mut due = Vec::new();
        self.by_space.retain(|&space, (seen, addrs)| {
            if seen.same(&now(space)) {
                return true;
            }
            due.append(addrs);
            false
        });
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_wait_until_their_space_has_another_map() {
        use crate::process::symbolize::jitdump::JitDump;
        use crate::process::symbolize::perfmap::PerfMapTable;
        use std::sync::Arc;
        let map = |text: &str| JitNames {
            perf_map: Some(Arc::new(PerfMapTable::parse(text))),
            jit_dump: None,
        };
        let first = map("1000 10 a\n");
        let second = map("1000 10 a\n2000 10 b\n");
        let none = JitNames::default();
        let mut waiting = UnnamedJit::default();
        waiting.wait(0, &none, 0x3000);
        waiting.wait(1, &first, 0x2000);
        waiting.wait(1, &first, 0x2008);
        // No map changed: nothing to look up again.
        let mut spaces: Vec<usize> = waiting.spaces().collect();
        spaces.sort();
        assert_eq!(spaces, vec![0, 1]);
        let maps = [none.clone(), first.clone()];
        assert!(waiting.due(|s| maps[s].clone()).is_empty());
        // Space 1's map grew (another table): its addresses are due, once.
        let maps = [none.clone(), second.clone()];
        let mut due = waiting.due(|s| maps[s].clone());
        due.sort();
        assert_eq!(due, vec![0x2000, 0x2008]);
        assert!(waiting.due(|s| maps[s].clone()).is_empty());
        // Space 0's map appeared.
        let maps = [first, second.clone()];
        assert_eq!(waiting.due(|s| maps[s].clone()), vec![0x3000]);
        // Space 1's jitdump grew, its perf map the same.
        waiting.wait(1, &second, 0x4000);
        let dump = JitDump::default();
        let grown = JitNames {
            jit_dump: Some(dump.table(|| None)),
            ..second.clone()
        };
        let maps = [none, grown];
        assert_eq!(waiting.due(|s| maps[s].clone()), vec![0x4000]);
    }
}
