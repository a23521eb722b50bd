//! The fleet's sampling schedule: which hosts profile in which time slot,
//! decided by each host alone from its name and the slot's number, so that
//! about a chosen fraction of a fleet profiles at any moment, a different
//! set each slot, with no coordinator.
//!
//! Time is cut into slots of `period` seconds from the Unix epoch (slot
//! `n` is [n × period, (n + 1) × period)). A host is on in slot `n` when
//! `draw(host, n) < fraction`, where `draw` is, exactly (so that every
//! release and any other tool computes the same):
//!
//! 1. `h` = the 64-bit FNV-1a hash of the host name's UTF-8 bytes (offset
//!    basis 0xcbf29ce484222325, prime 0x100000001b3);
//! 2. `x` = splitmix64's finalizer of `h XOR (n × 0x9e3779b97f4a7c15)`
//!    (wrapping): `x ^= x >> 30; x *= 0xbf58476d1ce4e5b9; x ^= x >> 27;
//!    x *= 0x94d049bb133111eb; x ^= x >> 31`;
//! 3. `draw` = the top 53 bits of `x` divided by 2^53, in [0, 1).
//!
//! Each host's draws are independent from slot to slot, so the set that is
//! on rotates; over many slots every host is on for about `fraction` of
//! them.

/// Where `host` falls in slot `slot`, uniform in [0, 1) over hosts and
/// slots (see the module's definition).
pub fn draw(host: &str, slot: u64) -> f64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in host.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let mut x = h ^ slot.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 31;
    (x >> 11) as f64 / (1u64 << 53) as f64
}

/// Whether `host` profiles in slot `slot` when `fraction` of hosts do.
pub fn is_on(host: &str, slot: u64, fraction: f64) -> bool {
    fraction >= 1.0 || draw(host, slot) < fraction
}

/// The slot a Unix time in seconds lies in, for slots of `period_s`
/// seconds.
pub fn slot_of(unix_s: u64, period_s: u64) -> u64 {
    unix_s / period_s.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("web-{i}.dc1.example")).collect()
    }

    /// 1 000 hosts over 500 slots at 10 %: each slot within four standard
    /// deviations of 100 hosts on (binomial: 9.5), all slots together
    /// within 1 % of 10 %, and every host on for 10 % of the slots within
    /// five standard deviations (6.7 of 500).
    #[test]
    fn about_the_fraction_is_on_in_every_slot_and_for_every_host() {
        let hosts = hosts(1000);
        let (slots, fraction) = (500u64, 0.1);
        let mut per_host = vec![0u32; hosts.len()];
        let mut all = 0u64;
        for slot in 1_000_000..1_000_000 + slots {
            let on = hosts
                .iter()
                .enumerate()
                .filter(|(_, h)| is_on(h, slot, fraction))
                .inspect(|(i, _)| per_host[*i] += 1)
                .count();
            assert!((62..=138).contains(&on), "slot {slot}: {on} of 1000 on");
            all += on as u64;
        }
        let share = all as f64 / (slots as f64 * hosts.len() as f64);
        assert!((share - fraction).abs() < 0.001, "share {share}");
        for (h, n) in hosts.iter().zip(&per_host) {
            assert!((17..=84).contains(n), "{h}: on in {n} of {slots} slots");
        }
    }

    /// The set that is on changes from slot to slot: two consecutive slots
    /// share about fraction² of the hosts, not fraction.
    #[test]
    fn the_set_rotates() {
        let hosts = hosts(1000);
        let on = |slot| -> Vec<bool> { hosts.iter().map(|h| is_on(h, slot, 0.5)).collect() };
        let (a, b) = (on(7), on(8));
        let both = a.iter().zip(&b).filter(|(x, y)| **x && **y).count();
        assert!((190..=310).contains(&both), "{both} hosts on in both");
    }

    /// The definition written in the module's documentation, computed by
    /// hand for one host and slot.
    #[test]
    fn draw_is_the_documented_function() {
        // FNV-1a of "a": (basis ^ 0x61) * prime.
        let h = (0xcbf2_9ce4_8422_2325u64 ^ 0x61).wrapping_mul(0x100_0000_01b3);
        assert_eq!(h, 0xaf63_dc4c_8601_ec8c);
        let mut x = h ^ 3u64.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^= x >> 31;
        assert_eq!(draw("a", 3), (x >> 11) as f64 / 9_007_199_254_740_992.0);
        assert!(is_on("a", 3, 1.0));
        assert_eq!(slot_of(1_700_000_123, 600), 2_833_333);
    }
}
