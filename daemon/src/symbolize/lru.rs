//! A least-recently-used map whose entries each weigh some bytes: the
//! symbolizer's caches (names, PLT tables, parsed files) keep their total
//! under a budget by dropping the entries used longest ago first.
use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::time::Instant;

struct Slot<V> {
    value: V,
    bytes: u64,
    /// Order of last use (a counter: two uses at one instant keep order).
    stamp: u64,
    used: Instant,
}

/// Entries by key, with their weight and last use.
pub struct Lru<K, V> {
    map: HashMap<K, Slot<V>>,
    order: BTreeMap<u64, K>,
    next: u64,
    bytes: u64,
}

impl<K, V> Default for Lru<K, V> {
    fn default() -> Self {
        Lru {
            map: HashMap::new(),
            order: BTreeMap::new(),
            next: 0,
            bytes: 0,
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

    /// As [`Lru::shrink_to`], but never dropping `spared`, which still
    /// weighs in: the others make room for it.
    pub fn shrink_sparing(&mut self, budget: u64, spared: &K) -> Vec<(K, V)> {
        let Some(slot) = self.map.remove(spared) else {
            return self.shrink_to(budget);
        };
        self.order.remove(&slot.stamp);
        self.bytes -= slot.bytes;
        let out = self.shrink_to(budget.saturating_sub(slot.bytes));
        self.bytes += slot.bytes;
        self.order.insert(slot.stamp, spared.clone());
        self.map.insert(spared.clone(), slot);
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
    fn a_spared_entry_stays_and_the_others_make_room_for_it() {
        let t = Instant::now();
        let mut lru = Lru::default();
        for k in 0..4u32 {
            lru.insert(k, k, 100, t);
        }
        // 0 is the oldest, but spared: 1 and 2 go to fit 250 with it.
        let gone: Vec<u32> = lru
            .shrink_sparing(250, &0)
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(gone, vec![1, 2]);
        assert_eq!(lru.bytes(), 200);
        // It keeps its place: the oldest still, for idle and shed rules.
        assert_eq!(lru.pop_oldest().map(|(k, _, _)| k), Some(0));
        // Sparing a key not held is shrinking.
        lru.insert(7, 7, 300, t);
        assert_eq!(lru.shrink_sparing(250, &0).len(), 1);
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
