//! Where a group's rings may be missing records: per ring, up to when its
//! records are known complete, and whether records after that may be
//! missing with no LOST record yet to say so. It gives the spans to count
//! as gaps and how far switch events can be paired; it holds no events
//! and no threads (see `waits.rs`).

/// The longest events wait to be paired for a ring that may be missing
/// records to say so (see [`Reads::ring_read`]).
pub const HOLD_NS: u64 = 1_000_000_000;

#[derive(Debug, Default, Clone, Copy)]
struct Ring {
    /// No record of the ring is missing up to this time: a loss it reports
    /// next began after it.
    safe: u64,
    /// At its last read records after `safe` may have been missing, with
    /// no LOST record yet to say so.
    missing: bool,
}

/// The rings of a group as their records are read (by index).
#[derive(Debug)]
pub struct Reads {
    rings: Vec<Ring>,
}

impl Reads {
    pub fn new(rings: usize) -> Reads {
        Reads {
            rings: vec![Ring::default(); rings],
        }
    }

    /// A record of `ring` of this time was read: the ring is complete up
    /// to it.
    pub fn read(&mut self, ring: usize, time: u64) {
        if let Some(r) = self.rings.get_mut(ring) {
            r.safe = r.safe.max(time);
        }
    }

    /// `ring` was read up to its head; `missing`: records after the last
    /// one read may be missing (it had no room left for another, or the
    /// kernel counted losses no LOST record said). Records older than
    /// `upto` were written before the head was read (`MARGIN_NS`), so
    /// otherwise none of them was lost.
    ///
    /// A ring missing records for over [`HOLD_NS`] gets no LOST record
    /// soon (nothing of the target writes there now): the span it may
    /// miss, not before `done` (where events are paired up to), is
    /// returned to count as a gap, and the ring holds nothing back.
    pub fn ring_read(
        &mut self,
        ring: usize,
        missing: bool,
        upto: u64,
        done: u64,
    ) -> Option<(u64, u64)> {
        let r = self.rings.get_mut(ring)?;
        r.missing = missing;
        if !missing {
            r.safe = r.safe.max(upto);
            return None;
        }
        if upto.saturating_sub(r.safe) <= HOLD_NS {
            return None;
        }
        let start = r.safe.max(done);
        r.missing = false;
        r.safe = upto.max(start);
        Some((start, r.safe))
    }

    /// The kernel lost records of `ring` before its LOST record at `time`:
    /// the gap, from where the ring was last known complete (not before
    /// `done`).
    pub fn lost(&self, ring: usize, time: u64, done: u64) -> Option<(u64, u64)> {
        let start = self.rings.get(ring)?.safe.max(done);
        Some((start, time.max(start)))
    }

    /// How far events can be paired: up to `upto`, but not past the last
    /// record of a ring whose records after it may be missing (a loss is
    /// reported only at a later read), nor back before `done`.
    pub fn horizon(&self, upto: u64, done: u64) -> u64 {
        self.rings
            .iter()
            .filter(|r| r.missing)
            .map(|r| r.safe)
            .fold(upto, u64::min)
            .max(done)
    }

    /// The rings that may be missing records, and from when (not before
    /// `done`).
    pub fn missing(&self, done: u64) -> impl Iterator<Item = (usize, u64)> + '_ {
        self.rings
            .iter()
            .enumerate()
            .filter(|(_, r)| r.missing)
            .map(move |(ring, r)| (ring, r.safe.max(done)))
    }
}
