//! The `profctl` binary's integration tests, one module per area: its command
//! line, its answers from a fake daemon and `profctl report FILE`. One area
//! runs with `cargo test -p profctl --test client <area>::`.

mod cli;
mod fake_daemon;
mod report_file;
