//! What a session's addresses were named: each address's frames, every
//! distinct list of frames held once.
//!
//! A session that follows children meets the same code in many processes,
//! each at its own address (a compiler started once per file), so the
//! addresses are many and their frame lists few: an address costs a key
//! and an index, not a list of its own.

use indexmap::IndexSet;

/// An address's frames, innermost first (inlined callees, then the function).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct AddrFrames {
    pub frames: Box<[FrameLoc]>,
    /// Some frame is a placeholder (`module+0x..`, `[unknown] 0x..`).
    pub unnamed: bool,
}

/// One frame of an address: function id, and source position for per-line views.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FrameLoc {
    pub func: u32,
    pub line: u32,
}

/// Named addresses (tagged with their address space).
#[derive(Default)]
pub struct NamedAddrs {
    at: foldhash::HashMap<u64, u32>,
    lists: IndexSet<AddrFrames, foldhash::fast::RandomState>,
}

impl NamedAddrs {
    /// Name `addr`; the previous name's `unnamed`, if it had one.
    pub fn insert(&mut self, addr: u64, frames: AddrFrames) -> Option<bool> {
        let (list, _) = self.lists.insert_full(frames);
        let before = self.at.insert(addr, list as u32)?;
        Some(self.lists[before as usize].unnamed)
    }

    /// The frames `addr` was named, if it was.
    pub fn get(&self, addr: u64) -> Option<&AddrFrames> {
        self.at.get(&addr).map(|&list| &self.lists[list as usize])
    }

    pub fn contains(&self, addr: u64) -> bool {
        self.at.contains_key(&addr)
    }

    /// Addresses named.
    pub fn len(&self) -> usize {
        self.at.len()
    }

    /// Keep the addresses `keep` says to (the lists stay, for addresses
    /// named alike later).
    pub fn retain(&mut self, mut keep: impl FnMut(u64, &AddrFrames) -> bool) {
        let lists = &self.lists;
        self.at
            .retain(|&addr, list| keep(addr, &lists[*list as usize]));
    }

    /// Forget every address and list.
    pub fn clear(&mut self) {
        self.at = Default::default();
        self.lists = Default::default();
    }
}

impl std::ops::Index<u64> for NamedAddrs {
    type Output = AddrFrames;

    fn index(&self, addr: u64) -> &AddrFrames {
        self.get(addr).expect("address named")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(funcs: &[u32], unnamed: bool) -> AddrFrames {
        AddrFrames {
            frames: funcs
                .iter()
                .map(|&func| FrameLoc { func, line: 1 })
                .collect(),
            unnamed,
        }
    }

    #[test]
    fn addresses_named_alike_share_one_list() {
        let mut named = NamedAddrs::default();
        for a in 0..1000u64 {
            assert_eq!(named.insert(a << 20, frames(&[1, 2], false)), None);
        }
        named.insert(7, frames(&[3], true));
        assert_eq!((named.len(), named.lists.len()), (1001, 2));
        assert_eq!(named[5 << 20].frames.len(), 2);
        assert!(named[7].unnamed);
        // Named again: the previous name's `unnamed` comes back.
        assert_eq!(named.insert(7, frames(&[4], false)), Some(true));
        assert!(!named[7].unnamed && named.contains(7) && !named.contains(8));
        named.retain(|a, at| a < 500 << 20 && at.frames.len() == 2);
        assert_eq!(named.len(), 500);
        assert!(named.get(7).is_none());
        named.clear();
        assert_eq!((named.len(), named.lists.len()), (0, 0));
    }
}
