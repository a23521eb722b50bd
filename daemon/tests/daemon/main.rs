//! The daemon library's integration tests, one module per area: the gRPC API
//! over a fake sample source, the in-process daemon and the sampler against
//! the real kernel. One area runs with `cargo test -p profd --test daemon
//! <area>::`.

mod clickhouse;
mod grpc_fake;
mod history_rpc;
mod kernel_smoke;
mod otlp;
mod pyroscope;
mod sampler_open;
mod sampler_scope;
mod sink_daemons;
mod sink_secrets;
mod support;
