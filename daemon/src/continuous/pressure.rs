//! How continuous profiling gives way as the daemon's memory ceiling nears
//! (the levels are [`crate::memory`]'s): its names shed at the next cut,
//! its windows' unique stacks capped, its frequency lowered, its stack
//! copies given up for frame-pointer call chains; each window says what
//! applied to it, and all is restored once the pressure is gone for
//! [`crate::memory::HOLD`] readings.
use crate::memory::{Governor, Level, CAPPED_STACKS};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Bytes one name held from window to window takes, about: a function's
/// name, module and file, or an address and the frames it resolves to.
const NAME_BYTES: u64 = 160;

/// Continuous profiling's side of the governor.
pub struct Pressure {
    governor: Arc<Governor>,
    configured_hz: u32,
    /// The unique stacks a window keeps without pressure.
    max_stacks: usize,
    /// The bytes the names held at the last cut, about.
    held: Arc<AtomicU64>,
    /// The governor asked for the names to go.
    shed: Arc<AtomicBool>,
    /// The level applied to the window being counted.
    pub applied: Level,
}

impl Pressure {
    /// Register continuous profiling's names with `governor` as a cache.
    pub fn new(governor: Arc<Governor>, configured_hz: u32, max_stacks: usize) -> Pressure {
        let held = Arc::new(AtomicU64::new(0));
        let shed = Arc::new(AtomicBool::new(false));
        let (h1, h2, s) = (held.clone(), held.clone(), shed.clone());
        governor.register(
            "continuous names",
            10,
            move || h1.load(Ordering::Relaxed),
            // The names go at the next cut (they belong to the profiler's
            // task): what they hold then is what is given back.
            move || {
                s.store(true, Ordering::Relaxed);
                h2.load(Ordering::Relaxed)
            },
            |_| {},
        );
        Pressure {
            governor,
            configured_hz,
            max_stacks,
            held,
            shed,
            applied: Level::Normal,
        }
    }

    /// The names were counted at a cut: `names` of them held.
    pub fn names_held(&self, names: usize) {
        self.held
            .store(names as u64 * NAME_BYTES, Ordering::Relaxed);
    }

    /// Whether the names are to go at this cut (asked once).
    pub fn take_shed(&self) -> bool {
        self.shed.swap(false, Ordering::Relaxed)
    }

    /// The level held now, and what the next window keeps and samples at
    /// from it: (level, unique stacks, frequency, stack copies), the
    /// frequency halved at each window while the pressure stays, to a
    /// quarter of the setting at least, and the setting again once it is
    /// gone.
    pub fn next(&mut self, now_hz: u32) -> (Level, usize, u32, bool) {
        let level = self.governor.held();
        let stacks = if level >= Level::CapStacks {
            CAPPED_STACKS.min(self.max_stacks)
        } else {
            self.max_stacks
        };
        let hz = if level >= Level::LowerFrequency {
            (now_hz / 2).max(self.floor_hz())
        } else {
            self.configured_hz
        };
        (level, stacks, hz, level < Level::FramePointers)
    }

    /// Rings with stack copies (`stack_bytes`) are to give way to
    /// frame-pointer ones now.
    pub fn wants_frame_pointers(&self, stack_bytes: u32) -> bool {
        stack_bytes > 0 && self.governor.held() >= Level::FramePointers
    }

    /// The lowest frequency pressure takes sampling down to.
    pub fn floor_hz(&self) -> u32 {
        (self.configured_hz / 4).max(crate::memory::MIN_FREQUENCY_HZ)
    }

    /// A window was cut with `level` applied at `hz`: counted.
    pub fn count_window(&self, level: Level, hz: u32) {
        let c = &self.governor.counts;
        if level >= Level::CapStacks {
            c.windows_capped.fetch_add(1, Ordering::Relaxed);
        }
        if hz < self.configured_hz {
            c.windows_lowered.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn configured_hz(&self) -> u32 {
        self.configured_hz
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::Usage;

    fn at(governor: &Governor, mib: u64) {
        governor.step(Usage {
            resident: mib << 20,
            peak: mib << 20,
            cgroup: None,
        });
    }

    #[test]
    fn pressure_caps_stacks_then_halves_the_frequency_and_goes_back() {
        let g = Arc::new(Governor::default());
        g.set_limit(100 << 20);
        let mut p = Pressure::new(g.clone(), 19, 500_000);
        assert_eq!(p.next(19), (Level::Normal, 500_000, 19, true));
        p.names_held(1000);
        at(&g, 75);
        assert!(p.take_shed(), "the names are asked for");
        assert!(!p.take_shed(), "once");
        assert_eq!(g.counts.shed_bytes.load(Ordering::Relaxed), 160_000);
        at(&g, 85);
        assert_eq!(p.next(19), (Level::CapStacks, CAPPED_STACKS, 19, true));
        at(&g, 92);
        assert_eq!(p.next(19), (Level::LowerFrequency, CAPPED_STACKS, 9, true));
        assert_eq!(p.next(9).2, 4);
        assert_eq!(p.next(4).2, 4, "a quarter of the setting at least");
        at(&g, 97);
        assert_eq!(p.next(4), (Level::FramePointers, CAPPED_STACKS, 4, false));
        for _ in 0..5 {
            at(&g, 10);
        }
        assert_eq!(p.next(4).0, Level::FramePointers, "held a while");
        for _ in 0..crate::memory::HOLD {
            at(&g, 10);
        }
        assert_eq!(p.next(4), (Level::Normal, 500_000, 19, true), "restored");
        p.count_window(Level::LowerFrequency, 4);
        assert_eq!(g.counts.windows_lowered.load(Ordering::Relaxed), 1);
        assert_eq!(g.counts.windows_capped.load(Ordering::Relaxed), 1);
    }
}
