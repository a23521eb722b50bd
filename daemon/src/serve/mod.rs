//! Serving: the gRPC API (`rpc`), who is calling and what they may see
//! (`auth`, `kernel_view`), the connections each listener admits (`conns`),
//! the TLS listener (`tls_listener`) with the web dashboard (`dashboard`),
//! and the Prometheus endpoint (`metrics`).
pub mod auth;
pub mod conns;
pub mod dashboard;
pub mod kernel_view;
pub mod metrics;
pub mod rpc;
pub mod tls_listener;
