//! Sessions: one profiling session as an actor (`session`), the registry
//! that starts them and finds them for their owners (`registry`), and the
//! state directory that keeps the ended ones across restarts (`store`).
pub mod registry;
pub mod session;
pub mod store;
