//! Talking to the daemons: the connection to profd (Unix socket, TLS, or a
//! private daemon in this process), the spinner while waiting on it, the
//! profile rebuilt from a Watch stream, and the fleet's ClickHouse source.
pub mod connect;
pub mod fleet;
#[cfg(feature = "private-daemon")]
mod private_daemon;
pub mod progress;
pub mod retention;
pub mod watch;
