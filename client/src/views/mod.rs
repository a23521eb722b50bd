//! Turning profiles into what a person reads: ranking functions, counts in
//! their units, the text and JSON of every view, and writing it to stdout.
pub mod output;
pub mod ranking;
pub mod render;
pub mod render_saved;
pub mod render_views;
pub mod units;
