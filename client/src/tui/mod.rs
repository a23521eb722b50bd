//! The live full-screen view of `profctl attach` / `run` on a terminal:
//! [`state`] holds what is shown and handles keys, [`draw`] renders it (a
//! pure function, tested with ratatui's test backend), [`term`] owns the
//! terminal.
pub mod draw;
pub mod state;
pub mod term;

pub use draw::draw;
pub use state::{Action, Mode, Only, SortKey, TuiState};
pub use term::Tui;

#[cfg(test)]
#[path = "mod_tests.rs"]
mod tests;
