//! profctl: the command-line client of the profd profiler daemon (library;
//! `main.rs` only parses arguments, runs [`run`] and maps errors to exit codes).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod args;
pub mod commands;
pub mod error;
pub mod files;
pub mod requests;
pub mod tui;
pub mod views;

pub use error::Error;

use args::cli::{self, Cli, Command, ReportSource};
use args::generated_docs;
use files::out_file;
use requests::connect::{Connection, Target};
use requests::progress::waiting;
use views::output::Output;

/// Runs one parsed command line: connects (to the Unix socket, starting a
/// private daemon when needed and allowed, or to `--connect`'s remote
/// daemon), runs the command, and closes the connection. Returns the exit
/// status: 0, or for `run` its command's.
pub async fn run(cli: Cli) -> Result<u8, Error> {
    // `run`'s command keeps stdout; profctl's own output goes to stderr.
    let out = match cli.command {
        Command::Run(_) => Output::stderr(),
        _ => Output::stdout(),
    }
    .with_names(cli.full_names, cli.ids);
    // Manual pages, completions and reports on saved files need no daemon.
    match &cli.command {
        Command::Report(args) => {
            if let ReportSource::File(path) = args.source() {
                return commands::report_file(&path, args, &out).await.map(|()| 0);
            }
        }
        Command::Export(args) => {
            if let ReportSource::File(_) = args.source() {
                return commands::export_file(args, &out).await.map(|()| 0);
            }
        }
        Command::Diff(args) if commands::diff_needs_no_daemon(args) => {
            return commands::diff(None, args, &out).await.map(|()| 0)
        }
        Command::Man(args) => return generated_docs::man(args, &out).map(|()| 0),
        Command::Fleet(args) => return commands::fleet(args, &out).await.map(|()| 0),
        Command::Retention(args) => return commands::retention(args, &out).await.map(|()| 0),
        Command::Completions(args) => return generated_docs::completions(args, &out).map(|()| 0),
        // A file `-o` cannot be written in any encoding is refused before
        // anything starts.
        Command::Attach(cli::AttachArgs { options, .. })
        | Command::Run(cli::RunArgs { options, .. }) => {
            if let Some((path, _)) = options.recording()? {
                out_file::check_file(&path)
                    .map_err(|e| Error::io(format!("cannot write {}", path.display()), e))?;
            }
        }
        Command::Health(args) => {
            let target = cli.target()?;
            let conn = waiting("connecting to profd", Connection::open_existing(&target)).await?;
            let result = commands::health(&conn, args, &out).await;
            conn.close().await;
            return result.map(|()| 0);
        }
        _ => {}
    }
    // A command that cannot run gets no daemon and no session.
    if let Command::Run(args) = &cli.command {
        if let Err(code) = commands::check_command(args) {
            return Ok(code);
        }
    }
    let target = cli.target()?;
    // Only the commands that profile start a private daemon when none
    // answers: the others need the one that holds sessions and history.
    let profiles = matches!(
        cli.command,
        Command::Attach(_) | Command::Run(_) | Command::Histogram(_)
    );
    let mut conn = waiting("connecting to profd", async {
        match profiles {
            true => Connection::open(&target).await,
            false => Connection::open_existing(&target).await,
        }
    })
    .await?;
    if let (true, Target::Socket(socket)) = (conn.is_private(), &target) {
        eprintln!(
            "profctl: no profd at {}; started a private one for this command",
            socket.display()
        );
    }
    let client = &mut conn.client;
    let mut code = 0;
    let result = match &cli.command {
        Command::Attach(args) => commands::attach(client, args, &out).await,
        Command::Run(args) => commands::run(client, args, &out).await.map(|c| code = c),
        Command::Sessions(args) => commands::sessions(client, args, &out).await,
        Command::Stop(args) => commands::stop(client, args.id, &out).await,
        Command::Info => commands::info(client, &out).await,
        Command::Export(args) => commands::export(client, args, &out).await,
        Command::Query(args) => commands::query(client, args, &out).await,
        Command::Diff(args) => commands::diff(Some(client), args, &out).await,
        Command::Histogram(args) => commands::histogram(client, args, &out).await,
        Command::Report(args) => match args.source() {
            ReportSource::Session(id) => commands::report_session(client, id, args, &out).await,
            ReportSource::File(path) => commands::report_file(&path, args, &out).await,
        },
        Command::Man(_)
        | Command::Completions(_)
        | Command::Health(_)
        | Command::Fleet(_)
        | Command::Retention(_) => {
            unreachable!("handled without a connection above")
        }
    };
    conn.close().await;
    result.map(|()| code)
}
