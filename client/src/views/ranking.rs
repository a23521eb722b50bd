//! A session's profile ready for display: functions with percentages
//! recomputed from their counts and sorted, the orders they sort by and
//! how many rows a table shows; no I/O, no rendering.
use std::cmp::Ordering;

use clap::ValueEnum;
use profd_common::api::{Function, Session, Totals};

/// Rows shown in tables when `--top` is not given.
pub const DEFAULT_TOP: usize = 20;

/// Orders of the function table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SortArg {
    /// Exclusive (self) samples or time, most first.
    Exclusive,
    /// Inclusive samples or time, most first.
    Inclusive,
    /// Function name, A to Z.
    Name,
}

/// A session and its functions, sorted by inclusive samples (descending),
/// then exclusive (descending), then name; percentages are over the session's
/// attributed samples.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    /// The session as of this profile.
    pub session: Session,
    /// Sorted functions with recomputed percentages.
    pub functions: Vec<Function>,
    /// With a Watch window: its length and the samples in it (the functions'
    /// `window_inclusive` / `window_exclusive` are over these).
    pub window: Option<Window>,
}

/// The last `seconds` seconds of a session, as a Watch window reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// The window's length.
    pub seconds: u32,
    /// Attributed samples in the window.
    pub attributed: u64,
}

impl Profile {
    /// Sorts `functions` and recomputes their percentages from the counts and
    /// `session.totals.attributed`.
    pub fn new(session: Session, mut functions: Vec<Function>) -> Self {
        let attributed = totals(&session).attributed;
        for f in &mut functions {
            f.inclusive_pct = percent(f.inclusive, attributed);
            f.exclusive_pct = percent(f.exclusive, attributed);
        }
        functions.sort_by(display_order);
        Profile {
            session,
            functions,
            window: None,
        }
    }

    /// The same profile in the order `by`: most exclusive first, or most
    /// inclusive first (as [`Profile::new`] sorts), or by name; ties as
    /// [`display_order`].
    pub fn sorted(mut self, by: SortArg) -> Self {
        match by {
            SortArg::Inclusive => self.functions.sort_by(display_order),
            SortArg::Exclusive => self.functions.sort_by(|a, b| {
                b.exclusive
                    .cmp(&a.exclusive)
                    .then_with(|| display_order(a, b))
            }),
            SortArg::Name => self
                .functions
                .sort_by(|a, b| a.name.cmp(&b.name).then_with(|| display_order(a, b))),
        }
        self
    }

    /// The same profile with windowed figures.
    pub fn with_window(mut self, window: Option<Window>) -> Self {
        self.window = window;
        self
    }

    /// The session's totals (zero when the daemon sent none).
    pub fn totals(&self) -> Totals {
        totals(&self.session)
    }
}

/// A session's totals, zero when absent.
pub fn totals(session: &Session) -> Totals {
    session.totals.unwrap_or_default()
}

/// `count` over `total` in percent, clamped to 0..=100 (0 when `total` is 0).
pub fn percent(count: u64, total: u64) -> f64 {
    if total == 0 {
        return 0.0;
    }
    (count as f64 * 100.0 / total as f64).clamp(0.0, 100.0)
}

/// Inclusive descending, exclusive descending, name, module, id.
pub fn display_order(a: &Function, b: &Function) -> Ordering {
    b.inclusive
        .cmp(&a.inclusive)
        .then_with(|| b.exclusive.cmp(&a.exclusive))
        .then_with(|| a.name.cmp(&b.name))
        .then_with(|| a.module.cmp(&b.module))
        .then_with(|| a.id.cmp(&b.id))
}

#[cfg(test)]
#[path = "ranking_tests.rs"]
mod tests;
