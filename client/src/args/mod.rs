//! The command line: its syntax and validation ([`cli`]), shell completion
//! that asks the daemon ([`complete`]), and the manual pages and completion
//! scripts generated from it ([`generated_docs`]).
pub mod cli;
pub mod complete;
pub mod generated_docs;
