//! The profiled processes as the daemon reads them: their executable
//! mappings and the files behind them (`maps`), the walk of their stacks
//! (`unwind`, Go code by its function table), the names of the addresses
//! found there (`symbolize`), and the Python frames of interpreters
//! (`python`), read from their memory, with where glibc keeps a thread's
//! kernel id (`pthread`).
pub mod maps;
pub mod pthread;
pub mod python;
pub mod symbolize;
pub mod unwind;
