//! A session's address spaces: the target's, a new one at each exec, one per
//! child it forks. Each has its mappings (for names) and unwinder (for stack
//! copies); user addresses of stacks are tagged with their space so that the
//! same address in two programs never means the same code.
use crate::maps::{Mapping, ProcessMaps};
use crate::sampler::BAD_USER_FRAME;
use crate::symbolize::is_kernel;
use crate::unwind::Unwinder;
use std::collections::HashMap;

/// User addresses are below 2^47; the space is kept in bits 48 to 62.
const TAG_SHIFT: u32 = 48;
const ADDR_MASK: u64 = (1 << TAG_SHIFT) - 1;
/// Spaces beyond this many share the last one's tag (their names may then
/// be those of another program).
const MAX_SPACES: usize = 0x7fff;

/// One address space.
pub struct Space {
    pub maps: ProcessMaps,
    pub unwinder: Unwinder,
}

/// The spaces of a session; space 0 is the target's at attach.
pub struct Spaces {
    pub list: Vec<Space>,
    /// The current space of each process of the session (kept after it
    /// exits: its last samples may come in after the exit).
    by_pid: HashMap<u32, usize>,
    stack_copy: bool,
    /// The session's target: its last space is kept when the session ends.
    target: u32,
}

/// Tag user address `addr` with space `space` (space 0 and kernel addresses
/// are left as they are).
pub fn tag(space: usize, addr: u64) -> u64 {
    if space == 0 || addr == BAD_USER_FRAME || is_kernel(addr) {
        addr
    } else {
        (addr & ADDR_MASK) | ((space.min(MAX_SPACES) as u64) << TAG_SHIFT)
    }
}

/// The space and plain address of a (possibly tagged) address.
pub fn untag(addr: u64) -> (usize, u64) {
    if is_kernel(addr) {
        (0, addr)
    } else {
        ((addr >> TAG_SHIFT) as usize, addr & ADDR_MASK)
    }
}

impl Spaces {
    /// The target's space from its current mappings.
    pub fn new(pid: u32, maps: ProcessMaps, stack_copy: bool) -> Spaces {
        let mut spaces = Spaces {
            list: Vec::new(),
            by_pid: HashMap::new(),
            stack_copy,
            target: pid,
        };
        spaces.add(pid, maps);
        spaces
    }

    fn add(&mut self, pid: u32, maps: ProcessMaps) -> usize {
        let mut unwinder = Unwinder::default();
        if self.stack_copy {
            for m in maps.iter() {
                unwinder.add_mapping(m);
            }
        }
        if self.list.len() >= MAX_SPACES {
            let last = self.list.len() - 1;
            self.by_pid.insert(pid, last);
            return last;
        }
        self.list.push(Space { maps, unwinder });
        let index = self.list.len() - 1;
        self.by_pid.insert(pid, index);
        index
    }

    /// The current space of `pid` (the target's first space if unknown).
    pub fn of(&self, pid: u32) -> usize {
        self.by_pid.get(&pid).copied().unwrap_or(0)
    }

    /// `child` was forked by `parent`: it starts with a copy of its space.
    pub fn fork(&mut self, child: u32, parent: u32) {
        let maps = self.list[self.of(parent)].maps.forked();
        self.add(child, maps);
    }

    /// `pid` exec'd: a new space from its mappings now (later ones arrive as
    /// MMAP2 records). The old space stays for the stacks sampled in it.
    pub fn exec(&mut self, pid: u32) {
        let maps = ProcessMaps::read(pid).unwrap_or_default();
        self.add(pid, maps);
    }

    /// The session has ended and its addresses are named: close everything
    /// but the files of the target's current space (histograms read them).
    pub fn release(&mut self) {
        let keep = self.of(self.target);
        for (i, space) in self.list.iter_mut().enumerate() {
            space.unwinder = Unwinder::default();
            if i == keep {
                space.maps.release_process();
            } else {
                space.maps = ProcessMaps::default();
            }
        }
        self.by_pid.retain(|&pid, _| pid == self.target);
    }

    /// New mappings of `pid`, files opened and added to its unwinder.
    pub fn insert(&mut self, pid: u32, mappings: impl Iterator<Item = Mapping>) {
        let space = self.of(pid);
        let s = &mut self.list[space];
        let mut starts = Vec::new();
        for m in mappings {
            starts.push(m.start);
            s.maps.insert(m);
        }
        // Opens new mappings' files, and a perf map once JIT code appears.
        s.maps.resolve_new(pid);
        if self.stack_copy {
            for start in starts {
                if let Some(m) = s.maps.find(start) {
                    s.unwinder.add_mapping(m);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_keep_kernel_and_space_zero_addresses() {
        assert_eq!(tag(0, 0x401000), 0x401000);
        assert_eq!(tag(3, 0xffff_ffff_8100_0000), 0xffff_ffff_8100_0000);
        assert_eq!(tag(3, BAD_USER_FRAME), BAD_USER_FRAME);
        let t = tag(3, 0x7fff_1234_5678);
        assert_ne!(t, 0x7fff_1234_5678);
        assert!(!is_kernel(t));
        assert_eq!(untag(t), (3, 0x7fff_1234_5678));
        assert_eq!(untag(0x401000), (0, 0x401000));
        assert_eq!(untag(0xffff_ffff_8100_0000), (0, 0xffff_ffff_8100_0000));
    }
}
