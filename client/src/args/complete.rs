//! Shell completion that asks the daemon: `profctl completions SHELL` prints
//! a script that runs profctl on each Tab (clap_complete's dynamic mode), and
//! the completers here offer the daemon's session ids and a session's or the
//! history's functions (`#ID` and names) for `--callers`, `--callees` and
//! `--lines`.
use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use clap::{CommandFactory, Parser};
use clap_complete::engine::{
    ArgValueCompleter, CompletionCandidate, PathCompleter, ValueCompleter,
};
use clap_complete::env::{CompleteEnv, Shells};
use clap_complete::Shell;
use profd_common::api::{self, GetProfileRequest, ListSessionsRequest};

use crate::args::cli::{Cli, Command, ReportSource};
use crate::commands::Source;
use crate::error::Error;
use crate::files::pprof_file;
use crate::requests::connect::Connection;
use crate::views::render;

/// The environment variable the scripts set when they run profctl to
/// complete a command line.
const VAR: &str = "COMPLETE";

/// How long a Tab may wait for the daemon; a daemon that does not answer
/// in time gives no candidates.
const DAEMON_WAIT: Duration = Duration::from_secs(2);

/// The most functions offered: the ones with the most samples.
const MAX_FUNCTIONS: usize = 200;

/// When profctl runs for a completion script: prints the candidates and
/// exits. Otherwise returns at once.
pub fn complete_if_asked() {
    CompleteEnv::with_factory(command).var(VAR).complete();
}

/// The parser's command with the completers that ask the daemon, by the
/// value an argument takes: a session id (`ID`, `SESSION`), a session or a
/// pprof file (`SESSION|FILE`, `BASE`, `NEW`), a function (`FN`).
pub fn command() -> clap::Command {
    fn with_completers(cmd: clap::Command) -> clap::Command {
        cmd.mut_args(|arg| {
            let value = arg.get_value_names().and_then(|v| v.first());
            let completer = match value.map(|v| v.as_str()) {
                Some("ID" | "SESSION") => ArgValueCompleter::new(sessions),
                Some("SESSION|FILE" | "BASE" | "NEW") => ArgValueCompleter::new(sessions_or_files),
                Some("FN") => ArgValueCompleter::new(functions),
                _ => return arg,
            };
            arg.add(completer)
        })
        .mut_subcommands(with_completers)
    }
    with_completers(Cli::command())
}

/// Writes the completion script for `shell` to `out`: it registers a
/// function that runs `profctl` (found on PATH) for the candidates.
pub fn write_script(shell: Shell, out: &mut dyn Write) -> std::io::Result<()> {
    let name = shell.to_string();
    let shells = Shells::builtins();
    let completer = shells
        .completer(&name)
        .ok_or_else(|| std::io::Error::other(format!("no completion script for {name}")))?;
    completer.write_registration(VAR, "profctl", "profctl", "profctl", out)
}

/// Session ids of the daemon, with the target and state as help.
pub fn sessions(current: &OsStr) -> Vec<CompletionCandidate> {
    let Some(current) = current.to_str() else {
        return Vec::new();
    };
    let cli = parsed_line("0").unwrap_or_else(default_cli);
    let listed = ask(&cli, |mut conn| async move {
        let reply = conn
            .client
            .list_sessions(ListSessionsRequest { all: true })
            .await;
        conn.close().await;
        Ok(reply?.into_inner().sessions)
    });
    listed
        .unwrap_or_default()
        .into_iter()
        .map(|s| (s.id.to_string(), s))
        .filter(|(id, _)| id.starts_with(current))
        .map(|(id, s)| {
            CompletionCandidate::new(id).help(Some(
                format!("pid {} {} ({})", s.pid, s.comm, render::state_text(&s)).into(),
            ))
        })
        .collect()
}

/// Session ids, then files: for the arguments that take either.
pub fn sessions_or_files(current: &OsStr) -> Vec<CompletionCandidate> {
    let mut candidates = sessions(current);
    candidates.extend(PathCompleter::any().complete(current));
    candidates
}

/// The functions of the profile the command line reads (a session, a pprof
/// file, or the continuous history as `query` selects it): `#ID` when the
/// word starts with `#`, else the names that contain the word (`#ID` for a
/// name a shell would split), the most sampled first; the other form as help.
pub fn functions(current: &OsStr) -> Vec<CompletionCandidate> {
    let Some(current) = current.to_str() else {
        return Vec::new();
    };
    let Some(cli) = parsed_line("x") else {
        return Vec::new();
    };
    let Some(mut functions) = profile_functions(&cli) else {
        return Vec::new();
    };
    functions.sort_by(|a, b| b.inclusive.cmp(&a.inclusive).then(a.id.cmp(&b.id)));
    function_candidates(&functions, current)
}

/// [`functions`]' candidates among `functions` (most sampled first).
fn function_candidates(functions: &[api::Function], current: &str) -> Vec<CompletionCandidate> {
    functions
        .iter()
        .filter_map(|f| {
            let id = format!("#{}", f.id);
            if current.starts_with('#') {
                return id
                    .starts_with(current)
                    .then(|| CompletionCandidate::new(id).help(Some(f.name.clone().into())));
            }
            if !f.name.contains(current) {
                return None;
            }
            Some(match shell_safe(&f.name) {
                true => CompletionCandidate::new(f.name.clone()).help(Some(id.into())),
                false => CompletionCandidate::new(id).help(Some(f.name.clone().into())),
            })
        })
        .take(MAX_FUNCTIONS)
        .collect()
}

/// A name every shell takes as one word, unquoted.
fn shell_safe(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_:.@+-/".contains(c))
}

/// The command line being completed, parsed with the word under the cursor
/// replaced by `placeholder` (so a half-typed value still parses); `None`
/// when it does not parse, with or without the words after the cursor.
fn parsed_line(placeholder: &str) -> Option<Cli> {
    let (line, index) = completed_line(std::env::args_os().collect(), current_index())?;
    let mut line = with_placeholder(line, index, placeholder);
    Cli::try_parse_from(&line).ok().or_else(|| {
        line.truncate(index + 1);
        Cli::try_parse_from(line).ok()
    })
}

/// The index of the word being completed, as the scripts pass it (fish
/// passes none: the last word).
fn current_index() -> Option<usize> {
    std::env::var("_CLAP_COMPLETE_INDEX").ok()?.parse().ok()
}

/// From profctl's own arguments (`profctl -- profctl report 3 --callers le`):
/// the command line and the index of the word being completed.
fn completed_line(args: Vec<OsString>, index: Option<usize>) -> Option<(Vec<OsString>, usize)> {
    let start = args.iter().position(|a| a == "--")? + 1;
    let line: Vec<OsString> = args[start..].to_vec();
    let index = index.unwrap_or(line.len().checked_sub(1)?);
    (index < line.len()).then_some((line, index))
}

/// `line` with word `index` replaced by `placeholder`, keeping an option's
/// `--name=` when the word has one.
fn with_placeholder(mut line: Vec<OsString>, index: usize, placeholder: &str) -> Vec<OsString> {
    let word = line[index].to_string_lossy().into_owned();
    line[index] = match word.split_once('=') {
        Some((option, _)) if option.starts_with("--") => format!("{option}={placeholder}").into(),
        _ => placeholder.into(),
    };
    line
}

/// The options of a bare `profctl info`: the default socket.
fn default_cli() -> Cli {
    Cli::parse_from(["profctl", "info"])
}

/// The functions of the profile `cli`'s command reads; `None` for a command
/// without one or when it cannot be read.
fn profile_functions(cli: &Cli) -> Option<Vec<api::Function>> {
    let source = match &cli.command {
        Command::Report(args) => match args.source() {
            ReportSource::File(path) => return file_functions(&path),
            ReportSource::Session(id) => Source::Session(id),
        },
        Command::Query(args) => Source::Query(args.query(std::time::SystemTime::now()).ok()?),
        _ => return None,
    };
    ask(cli, |mut conn| async move {
        let reply = conn
            .client
            .get_profile(GetProfileRequest {
                session_id: source.session_id(),
                query: source.query(),
                ..Default::default()
            })
            .await;
        conn.close().await;
        Ok(reply?.into_inner().functions)
    })
}

fn file_functions(path: &Path) -> Option<Vec<api::Function>> {
    Some(pprof_file::functions(&pprof_file::load(path).ok()?))
}

/// Runs `question` on a connection to the daemon `cli` names (never a
/// private one), within [`DAEMON_WAIT`]; `None` on any failure.
fn ask<T, F, Fut>(cli: &Cli, question: F) -> Option<T>
where
    F: FnOnce(Connection) -> Fut,
    Fut: std::future::Future<Output = Result<T, Error>>,
{
    let target = cli.target().ok()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    runtime.block_on(async {
        let answer = async {
            let conn = Connection::open_existing(&target).await?;
            question(conn).await
        };
        tokio::time::timeout(DAEMON_WAIT, answer).await.ok()?.ok()
    })
}

#[cfg(test)]
#[path = "complete_tests.rs"]
mod tests;
