//! The profiled processes as the daemon reads them: their executable
//! mappings and the files behind them (`maps`), the walk of their stacks
//! (`unwind`, Go code by its function table), the names of the addresses
//! found there (`symbolize`), and the frames of interpreters (`python`,
//! `ruby`, `perl`, and what they share, `interpreted`), read from their
//! memory (`memory`), with where glibc keeps a thread's kernel id
//! (`pthread`), JVMs asked for their perf maps (`jvm`), and where threads
//! wait when a session begins (`blocked`).
pub mod blocked;
pub mod interpreted;
pub mod jvm;
pub mod maps;
pub mod memory;
pub mod perl;
pub mod pthread;
pub mod python;
pub mod ruby;
pub mod symbolize;
pub mod unwind;
