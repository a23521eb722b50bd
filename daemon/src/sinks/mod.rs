//! Where continuous windows go besides the local history: the backends
//! fleets already run, and the form each takes them in.
pub mod clickhouse;
