//! `profctl man` and `profctl completions`: the manual pages (roff),
//! generated from the clap definitions in `cli`, and the completion scripts
//! (see `complete`); no daemon involved.
use std::io::Write;
use std::path::Path;

use clap::CommandFactory;

use crate::args::cli::{Cli, CompletionsArgs, ManArgs};
use crate::error::Error;
use crate::views::output::Output;

/// `profctl man`: profctl(1) on stdout, or every page into `--dir` (the
/// files written are listed on stderr).
pub fn man(args: &ManArgs, out: &Output) -> Result<(), Error> {
    match &args.dir {
        None => {
            let mut roff = Vec::new();
            write_man(&mut roff)?;
            out.print(&String::from_utf8_lossy(&roff))
        }
        Some(dir) => {
            for path in write_man_dir(dir)? {
                eprintln!("profctl: wrote {}", path.display());
            }
            Ok(())
        }
    }
}

/// `profctl completions SHELL`: the script on stdout.
pub fn completions(args: &CompletionsArgs, out: &Output) -> Result<(), Error> {
    let mut script = Vec::new();
    crate::args::complete::write_script(args.shell, &mut script).map_err(Error::Output)?;
    out.print(&String::from_utf8_lossy(&script))
}

fn command() -> clap::Command {
    Cli::command()
}

/// Writes profctl(1) as roff to `out`.
pub fn write_man(out: &mut dyn Write) -> Result<(), Error> {
    let mut cmd = command();
    cmd.build();
    out.write_all(&page(&cmd)?).map_err(Error::Output)
}

/// The roff page of `cmd` (built): clap_mangen's, with a SYNOPSIS that
/// keeps each option's value placeholder (`[--callers FN]`, where
/// clap_mangen writes `[--callers]`).
fn page(cmd: &clap::Command) -> Result<Vec<u8>, Error> {
    let mut roff = Vec::new();
    clap_mangen::Man::new(cmd.clone())
        .section("1")
        .manual("profd")
        .render(&mut roff)
        .map_err(Error::Output)?;
    let roff = String::from_utf8_lossy(&roff).into_owned();
    const HEAD: &str = ".SH SYNOPSIS\n";
    let Some(start) = roff.find(HEAD).map(|i| i + HEAD.len()) else {
        return Ok(roff.into_bytes());
    };
    let end = roff[start..]
        .find("\n.SH ")
        .map_or(roff.len(), |i| start + i + 1);
    Ok(format!("{}{}\n{}", &roff[..start], synopsis(cmd), &roff[end..]).into_bytes())
}

/// `s` as roff text: backslashes and hyphens escaped.
fn roff_text(s: &str) -> String {
    s.replace('\\', "\\e").replace('-', "\\-")
}

/// The SYNOPSIS line of `cmd` in roff: its name in bold, then each visible
/// option (`[--name VALUE]`, `<...>` when required), the positionals in
/// italics and the subcommand placeholder.
fn synopsis(cmd: &clap::Command) -> String {
    let bold = |s: &str| format!("\\fB{}\\fR", roff_text(s));
    let italic = |s: &str| format!("\\fI{}\\fR", roff_text(s));
    let marks = |a: &clap::Arg| {
        if a.is_required_set() {
            ("<", ">")
        } else {
            ("[", "]")
        }
    };
    let value = |a: &clap::Arg| {
        a.get_value_names()
            .map(|v| v.join(" "))
            .unwrap_or_else(|| a.get_id().as_str().to_uppercase())
    };
    let mut line = vec![bold(cmd.get_bin_name().unwrap_or_else(|| cmd.get_name()))];
    let mut options: Vec<&clap::Arg> = cmd
        .get_arguments()
        .filter(|a| !a.is_hide_set() && !a.is_positional())
        .collect();
    options.sort_by_key(|a| (a.get_long().is_none(), a.get_long(), a.get_short()));
    for a in options {
        let flag = match (a.get_short(), a.get_long()) {
            (Some(s), Some(l)) => format!("{}|{}", bold(&format!("-{s}")), bold(&format!("--{l}"))),
            (Some(s), None) => bold(&format!("-{s}")),
            (None, Some(l)) => bold(&format!("--{l}")),
            (None, None) => continue,
        };
        let takes = a.get_num_args().is_some_and(|n| n.takes_values())
            && !matches!(
                a.get_action(),
                clap::ArgAction::SetTrue | clap::ArgAction::SetFalse | clap::ArgAction::Count
            );
        let (l, r) = marks(a);
        line.push(if takes {
            format!("{l}{flag} {}{r}", italic(&value(a)))
        } else {
            format!("{l}{flag}{r}")
        });
    }
    for a in cmd.get_positionals().filter(|a| !a.is_hide_set()) {
        let (l, r) = marks(a);
        line.push(format!("{l}{}{r}", italic(&value(a))));
    }
    if cmd.has_subcommands() {
        let name = cmd.get_subcommand_value_name().unwrap_or("COMMAND");
        line.push(format!(
            "{}{}{}",
            if cmd.is_subcommand_required_set() {
                "<"
            } else {
                "["
            },
            italic(&name.to_lowercase()),
            if cmd.is_subcommand_required_set() {
                ">"
            } else {
                "]"
            },
        ));
    }
    line.join(" ")
}

/// Writes profctl.1 and one page per subcommand (`profctl-attach.1`, ...)
/// into `dir`, created if it does not exist (with its parents, as
/// `mkdir -p`); returns the files written.
pub fn write_man_dir(dir: &Path) -> Result<Vec<std::path::PathBuf>, Error> {
    crate::files::out_file::create_dir_all(dir)
        .map_err(|e| Error::io(format!("--dir {}: cannot create it", dir.display()), e))?;
    let mut cmd = command().disable_help_subcommand(true);
    cmd.build();
    let mut written = Vec::new();
    write_pages(&cmd, dir, &mut written)?;
    Ok(written)
}

fn write_pages(
    cmd: &clap::Command,
    dir: &Path,
    written: &mut Vec<std::path::PathBuf>,
) -> Result<(), Error> {
    let path = dir.join(clap_mangen::Man::new(cmd.clone()).get_filename());
    crate::files::out_file::write_file(&path, &page(cmd)?)
        .map_err(|e| Error::io(format!("cannot write {}", path.display()), e))?;
    written.push(path);
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub, dir, written)?;
    }
    Ok(())
}

#[cfg(test)]
#[path = "generated_docs_tests.rs"]
mod tests;
