//! The profiled processes as the daemon reads them: their executable
//! mappings and the files behind them (`maps`), the walk of their stacks
//! (`unwind`, Go code by its function table), and the names of the
//! addresses found there (`symbolize`).
pub mod maps;
pub mod symbolize;
pub mod unwind;
