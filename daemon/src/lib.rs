//! profd: the sampling profiler daemon (library; `main.rs` is a thin wrapper).
//! [`Daemon::bind`] probes the kernel, reloads the sessions kept in the state
//! directory and binds the Unix socket, the TLS listener and the metrics
//! listener when configured; [`Daemon::serve`] runs the gRPC API until
//! shutdown. The public surface is what `profd` and profctl's private daemon
//! use; [`internals`] is for benches, fuzz targets and tests only.
#![deny(unsafe_code)]

mod config;
mod continuous;
mod daemon;
mod daemon_error;
#[doc(hidden)]
pub mod internals;
mod memory;
#[allow(unsafe_code)]
mod os;
mod process;
mod request_error;
mod sampling;
mod serve;
mod sessions;
mod stats;
mod trusted_files;

pub use config::sink_files::Layout as ClickHouseLayout;
pub use config::sinks::Settings as SinkSettings;
pub use config::DEFAULT_PATH as DEFAULT_SETTINGS_PATH;
pub use config::{read as read_settings_file, settings, Config, Flags, Settings};
pub use continuous::sinks::clickhouse::migration_script as clickhouse_migration;
pub use continuous::sinks::clickhouse::schema_script as clickhouse_schema;
pub use continuous::sinks::clickhouse::upgrade_script as clickhouse_upgrade;
pub use continuous::sinks::deliver::probe as probe_sinks;
pub use daemon::{check_socket_group, Daemon};
pub use daemon_error::Error;
pub use os::tune_allocator;
pub use serve::auth::new_token;
