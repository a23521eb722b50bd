//! The `profctl` binary: parse arguments (clap exits 2 on usage errors), run
//! the command, print any error as one `profctl: ...` line and exit 1 (`run`
//! exits with its command's status).
use std::process::ExitCode;

use clap::Parser;
use profctl::args::cli::Cli;

fn main() -> ExitCode {
    // The command of a `profctl run`, waiting for its session.
    if let Some(code) = profctl::commands::held_exec() {
        return code;
    }
    // A completion script asking for candidates.
    profctl::args::complete::complete_if_asked();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("profctl: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(profctl::run(cli)) {
        Ok(code) => ExitCode::from(code),
        Err(e) if e.is_broken_pipe() => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("profctl: {e}");
            ExitCode::FAILURE
        }
    }
}
