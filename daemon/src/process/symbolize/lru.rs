//! A least-recently-used map whose entries each weigh some bytes: the
//! symbolizer's caches (names, PLT tables, parsed files) keep their total
//! under a budget by dropping the entries used longest ago first, or (the
//! parsed files) those used least, aged by what went before.
use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::time::Instant;

struct Slot<V> {
    value: V,
    bytes: u64,
    /// Order of last use (a counter: two uses at one instant keep order).
    stamp: u64,
    used: Instant,
    /// Its rank for [`Lru::shrink_by_use`]: the floor when last used plus
    /// its uses since it came in.
    rank: u64,
    uses: u64,
}

/// Entries by key, with their weight and last use.
pub struct Lru<K, V> {
    map: HashMap<K, Slot<V>>,
    order: BTreeMap<u64, K>,
    next: u64,
    bytes: u64,
    /// The rank of the last entry [`Lru::shrink_by_use`] dropped.
    floor: u64,
}

impl<K, V> Default for Lru<K, V> {
    fn default() -> Self {
        Lru {
            map: HashMap::new(),
            order: BTreeMap::new(),
            next: 0,
            bytes: 0,
            floor: 0,
        }
    }
}

impl<K: Hash + Eq + Clone, V> Lru<K, V> {
    /// The value of `key`, marked used at `now`.
    pub fn get(&mut self, key: &K, now: Instant) -> Option<&V> {
        let slot = self.map.get_mut(key)?;
        self.order.remove(&slot.stamp);
        slot.stamp = self.next;
        slot.used = now;
        slot.uses += 1;
        slot.rank = self.floor + slot.uses;
        self.next += 1;
        self.order.insert(slot.stamp, key.clone());
        Some(&slot.value)
    }

    /// The value of `key` to change, not marking it used (its weight
    /// stays).
    pub fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        self.map.get_mut(key).map(|s| &mut s.value)
    }

    /// The value of `key`, not marking it used.
    pub fn peek(&self, key: &K) -> Option<&V> {
        self.map.get(key).map(|s| &s.value)
    }

    /// Keep `value` under `key`, weighing `bytes`, used at `now` (replacing
    /// what `key` held).
    pub fn insert(&mut self, key: K, value: V, bytes: u64, now: Instant) {
        self.remove(&key);
        let stamp = self.next;
        self.next += 1;
        self.order.insert(stamp, key.clone());
        self.bytes += bytes;
        self.map.insert(
            key,
            Slot {
                value,
                bytes,
                stamp,
                used: now,
                rank: self.floor + 1,
                uses: 1,
            },
        );
    }

    /// Drop `key`'s entry; its value.
    pub fn remove(&mut self, key: &K) -> Option<V> {
        let slot = self.map.remove(key)?;
        self.order.remove(&slot.stamp);
        self.bytes -= slot.bytes;
        Some(slot.value)
    }

    /// Drop the entry used longest ago: its key, value and when it was used.
    pub fn pop_oldest(&mut self) -> Option<(K, V, Instant)> {
        let (_, key) = self.order.pop_first()?;
        let slot = self.map.remove(&key)?;
        self.bytes -= slot.bytes;
        Some((key, slot.value, slot.used))
    }

    /// When the entry used longest ago was used.
    pub fn oldest_use(&self) -> Option<Instant> {
        let (_, key) = self.order.first_key_value()?;
        self.map.get(key).map(|s| s.used)
    }

    /// Drop entries until they weigh at most `budget`: first the newest if
    /// it alone weighs more (it would push out everything else and go
    /// anyway), then the oldest.
    pub fn shrink_to(&mut self, budget: u64) -> Vec<(K, V)> {
        let mut out = Vec::new();
        if self.bytes > budget {
            let newest = self.order.last_key_value().map(|(_, k)| k.clone());
            if let Some(k) = newest.filter(|k| self.map.get(k).is_some_and(|s| s.bytes > budget)) {
                if let Some(v) = self.remove(&k) {
                    out.push((k, v));
                }
            }
        }
        while self.bytes > budget {
            match self.pop_oldest() {
                Some((k, v, _)) => out.push((k, v)),
                None => break,
            }
        }
        out
    }

    /// Drop entries until they weigh at most `budget`, never `spared`
    /// (which still weighs in): first the newest if it alone weighs more,
    /// then those of the lowest rank (Greedy-Dual-Size-Frequency with the
    /// cost of an entry taken as its weight: the files of a cycle of
    /// requests larger than the budget do not push each other out in turn,
    /// as they would least recently used first; the ones used most stay,
    /// and what was used often long ago ages out as the floor rises).
    pub fn shrink_by_use(&mut self, budget: u64, spared: Option<&K>) -> Vec<(K, V)> {
        let mut out = Vec::new();
        let spared_bytes = spared.and_then(|k| self.map.get(k)).map_or(0, |s| s.bytes);
        let budget = budget.saturating_sub(spared_bytes);
        let over = |lru: &Self| lru.bytes - spared_bytes > budget;
        if over(self) {
            let newest = self.order.last_key_value().map(|(_, k)| k.clone());
            if let Some(k) = newest
                .filter(|k| Some(k) != spared && self.map.get(k).is_some_and(|s| s.bytes > budget))
            {
                if let Some(v) = self.remove(&k) {
                    out.push((k, v));
                }
            }
        }
        while over(self) {
            let victim = self
                .map
                .iter()
                .filter(|(k, _)| Some(*k) != spared)
                // Of equal ranks the newest: it came in last, the others
                // earned theirs.
                .min_by_key(|(_, s)| (s.rank, std::cmp::Reverse(s.stamp)))
                .map(|(k, s)| (k.clone(), s.rank));
            let Some((k, rank)) = victim else { break };
            self.floor = self.floor.max(rank);
            if let Some(v) = self.remove(&k) {
                out.push((k, v));
            }
        }
        out
    }

    /// Drop entries not used since `before`.
    pub fn drop_unused_since(&mut self, before: Instant) -> Vec<(K, V)> {
        let mut out = Vec::new();
        while self.oldest_use().is_some_and(|u| u < before) {
            match self.pop_oldest() {
                Some((k, v, _)) => out.push((k, v)),
                None => break,
            }
        }
        out
    }

    /// What the entries weigh together.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// The keys, oldest use first.
    pub fn keys(&self) -> impl Iterator<Item = &K> {
        self.order.values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_recently_used_go_first_and_bytes_stay_under_the_budget() {
        let t = Instant::now();
        let mut lru = Lru::default();
        for k in 0..5u32 {
            lru.insert(k, k * 10, 100, t);
        }
        assert_eq!(lru.bytes(), 500);
        // 0 and 2 are used again: 1, 3, 4 are now the oldest.
        assert_eq!(lru.get(&0, t), Some(&0));
        assert_eq!(lru.get(&2, t), Some(&20));
        let gone: Vec<u32> = lru.shrink_to(250).into_iter().map(|(k, _)| k).collect();
        assert_eq!(gone, vec![1, 3, 4]);
        assert!(lru.bytes() <= 250);
        assert_eq!(lru.keys().copied().collect::<Vec<_>>(), vec![0, 2]);
        // One heavier than the budget goes alone.
        lru.insert(9, 90, 300, t);
        let gone: Vec<u32> = lru.shrink_to(250).into_iter().map(|(k, _)| k).collect();
        assert_eq!(gone, vec![9]);
        // Replacing an entry re-weighs it.
        lru.insert(0, 1, 30, t);
        assert_eq!(lru.bytes(), 130);
        assert_eq!(lru.remove(&2), Some(20));
        assert_eq!((lru.bytes(), lru.len()), (30, 1));
    }

    #[test]
    fn files_used_most_stay_when_a_cycle_outgrows_the_budget() {
        let t = Instant::now();
        let mut lru = Lru::default();
        // Requests cycle over five files of 100 bytes with room for three:
        // least recently used first, every use would be a miss.
        let mut misses = 0;
        for round in 0..20 {
            for k in 0..5u32 {
                if lru.get(&k, t).is_none() {
                    misses += 1;
                    lru.insert(k, (), 100, t);
                }
                lru.shrink_by_use(300, None);
                assert!(lru.bytes() <= 300, "round {round}");
            }
        }
        // Two of them stay for good; the third place turns over.
        assert!(misses <= 5 + 3 * 20, "{misses} misses of 100 uses");
        // What was used often long ago ages out for what is used now.
        let mut lru = Lru::default();
        lru.insert("old", (), 100, t);
        for _ in 0..50 {
            lru.get(&"old", t);
        }
        let mut kept_new = false;
        for i in 0..200u32 {
            let k: &'static str = ["a", "b", "c"][i as usize % 3];
            if lru.get(&k, t).is_none() {
                lru.insert(k, (), 100, t);
            }
            lru.shrink_by_use(300, None);
            kept_new |= lru.peek(&"old").is_none();
        }
        assert!(kept_new, "the old favourite went");
        assert!(["a", "b", "c"].iter().all(|k| lru.peek(k).is_some()));
        // The spared one stays, weighing in; one heavier than all goes alone.
        let mut lru = Lru::default();
        lru.insert(0u32, (), 100, t);
        lru.insert(1, (), 100, t);
        lru.insert(2, (), 100, t);
        let shrink = |lru: &mut Lru<u32, ()>, budget| -> Vec<u32> {
            let gone = lru.shrink_by_use(budget, Some(&0));
            gone.into_iter().map(|(k, _)| k).collect()
        };
        assert_eq!(
            (shrink(&mut lru, 150).len(), lru.peek(&0).is_some()),
            (2, true)
        );
        lru.insert(9, (), 500, t);
        assert_eq!(shrink(&mut lru, 300), vec![9]);
    }

    #[test]
    fn entries_unused_since_a_time_go() {
        let t = Instant::now();
        let later = t + std::time::Duration::from_secs(5);
        let mut lru = Lru::default();
        lru.insert("old", (), 1, t);
        lru.insert("new", (), 1, later);
        let gone = lru.drop_unused_since(t + std::time::Duration::from_secs(1));
        assert_eq!(gone.len(), 1);
        assert_eq!(gone[0].0, "old");
        assert!(lru.peek(&"new").is_some());
    }
}
