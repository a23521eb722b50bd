//! `profctl info` as the tests read it: the CPUs, the ring groups open now
//! and the daemon-wide sample totals.

use crate::Daemon;

/// The figures of one `profctl info`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Info {
    pub cpus: u32,
    /// The groups, as printed: `cpu-clock @ 999 Hz dwarf pid 42 (2 sessions), ...`
    /// or `none`.
    pub groups: String,
    /// Daemon-wide: samples the rings delivered for some session, for none,
    /// and samples lost.
    pub attributed: u64,
    pub discarded: u64,
    pub lost: u64,
}

impl Info {
    /// Runs `profctl info` against `daemon` and reads it; fails the test when
    /// it fails or prints something else.
    pub fn read(daemon: &Daemon) -> Info {
        let out = daemon.profctl(&["info"]);
        out.assert_success();
        Info::parse(&out.stdout)
            .unwrap_or_else(|| panic!("unexpected `profctl info`:\n{}", out.stdout))
    }

    /// Reads the text of `profctl info`.
    pub fn parse(text: &str) -> Option<Info> {
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.trim_start().strip_prefix(name))
                .map(str::trim)
        };
        let samples = field("samples:")?;
        // `2479 attributed, 0 discarded, 0 lost` (maybe more after).
        let count = |what: &str| -> Option<u64> {
            let words: Vec<&str> = samples
                .split(|c: char| c == ',' || c.is_whitespace())
                .filter(|w| !w.is_empty())
                .collect();
            let i = words.iter().position(|w| *w == what)?;
            words.get(i.checked_sub(1)?)?.parse().ok()
        };
        Some(Info {
            cpus: field("cpus:")?.parse().ok()?,
            groups: field("sampler groups:")?.to_string(),
            attributed: count("attributed")?,
            discarded: count("discarded")?,
            lost: count("lost")?,
        })
    }

    /// Every sample the rings delivered: attributed + discarded.
    pub fn delivered(&self) -> u64 {
        self.attributed + self.discarded
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_info_page() {
        let text = "profd daemon\n  version:              0.1.0\n  cpus:                 2\n  \
                    sampler groups:       cpu-clock @ 999 Hz dwarf pid 42 (2 sessions)\n  \
                    samples:              2479 attributed, 17 discarded, 3 lost (throttled 1 times)\n";
        assert_eq!(
            Info::parse(text),
            Some(Info {
                cpus: 2,
                groups: "cpu-clock @ 999 Hz dwarf pid 42 (2 sessions)".into(),
                attributed: 2479,
                discarded: 17,
                lost: 3,
            })
        );
        assert_eq!(Info::parse("nothing"), None);
    }
}
