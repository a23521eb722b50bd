//! `profd` command line: parse flags, set up logging, run the daemon until
//! SIGTERM or SIGINT.
use anyhow::Context;
use clap::Parser;
use std::path::PathBuf;
use tokio::signal::unix::{signal, SignalKind};

/// profd: system-wide sampling profiler daemon with a gRPC API.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// Unix socket to serve the profd.v1 gRPC API on.
    #[arg(long, default_value = profd_common::DEFAULT_SOCKET)]
    socket: PathBuf,
    /// Log filter level: error, warn, info, debug or trace.
    #[arg(long, default_value = "info")]
    log_level: tracing::Level,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_max_level(args.log_level)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let daemon = profd::Daemon::bind(profd::Config::new(args.socket)).await?;
        let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
        let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
        daemon
            .serve(async move {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = int.recv() => {}
                }
            })
            .await?;
        anyhow::Ok(())
    })
}
