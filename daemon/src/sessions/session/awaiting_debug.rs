//! A session's addresses in mapped files left unnamed while debug files
//! may still arrive (fetched from debuginfod): each is looked up again once
//! the symbolizer has named with a debug file that arrived after it was
//! looked up (its debug generation is higher).
use std::collections::HashMap;

/// Unnamed addresses (tagged), by the debug generation they were looked
/// up at.
#[derive(Default)]
pub struct AwaitingDebug {
    by_generation: HashMap<u64, Vec<u64>>,
}

impl AwaitingDebug {
    /// `addr` was not named at debug generation `generation`.
    pub fn wait(&mut self, generation: u64, addr: u64) {
        self.by_generation.entry(generation).or_default().push(addr);
    }

    /// Take the addresses to look up again: those looked up before the
    /// debug generation `now`.
    pub fn due(&mut self, now: u64) -> Vec<u64> {
        let mut due = Vec::new();
        self.by_generation.retain(|&generation, addrs| {
            if generation >= now {
                return true;
            }
            due.append(addrs);
            false
        });
        due
    }

    /// Keep the addresses `keep` says to.
    pub fn retain(&mut self, mut keep: impl FnMut(u64) -> bool) {
        self.by_generation.retain(|_, addrs| {
            addrs.retain(|&a| keep(a));
            !addrs.is_empty()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_wait_until_a_later_generation() {
        let mut waiting = AwaitingDebug::default();
        waiting.wait(0, 0x10);
        waiting.wait(0, 0x20);
        waiting.wait(1, 0x30);
        // Nothing arrived since: nothing to look up again.
        assert!(waiting.due(0).is_empty());
        // One arrival: those looked up at 0, once.
        let mut due = waiting.due(1);
        due.sort();
        assert_eq!(due, vec![0x10, 0x20]);
        assert!(waiting.due(1).is_empty());
        waiting.wait(1, 0x40);
        waiting.retain(|a| a != 0x30);
        assert_eq!(waiting.due(5), vec![0x40]);
        assert!(waiting.due(6).is_empty());
    }
}
