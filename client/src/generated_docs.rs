//! `profctl man` and `profctl completions`: the manual pages (roff) and shell
//! completion scripts, generated from the clap definitions in `cli`; no
//! daemon involved.
use std::io::Write;
use std::path::Path;

use clap::CommandFactory;
use clap_complete::Shell;

use crate::cli::{Cli, CompletionsArgs, ManArgs};
use crate::error::Error;
use crate::output::Output;

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
    write_completions(args.shell, &mut script);
    out.print(&String::from_utf8_lossy(&script))
}

fn command() -> clap::Command {
    Cli::command()
}

/// Writes profctl(1) as roff to `out`.
pub fn write_man(out: &mut dyn Write) -> Result<(), Error> {
    clap_mangen::Man::new(command())
        .section("1")
        .manual("profd")
        .render(out)
        .map_err(Error::Output)
}

/// Writes profctl.1 and one page per subcommand (`profctl-attach.1`, ...)
/// into `dir`, created if it does not exist (with its parents, as
/// `mkdir -p`); returns the files written.
pub fn write_man_dir(dir: &Path) -> Result<Vec<std::path::PathBuf>, Error> {
    std::fs::create_dir_all(dir)
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
    let page = clap_mangen::Man::new(cmd.clone())
        .section("1")
        .manual("profd");
    let path = dir.join(page.get_filename());
    let mut roff = Vec::new();
    page.render(&mut roff).map_err(Error::Output)?;
    std::fs::write(&path, roff)
        .map_err(|e| Error::io(format!("cannot write {}", path.display()), e))?;
    written.push(path);
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(sub, dir, written)?;
    }
    Ok(())
}

/// Writes the completion script for `shell` to `out`.
pub fn write_completions(shell: Shell, out: &mut dyn Write) {
    clap_complete::generate(shell, &mut command(), "profctl", out);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn man_page_names_every_subcommand_and_has_examples() {
        let mut roff = Vec::new();
        write_man(&mut roff).unwrap();
        let roff = String::from_utf8(roff).unwrap();
        assert!(roff.contains(".TH profctl 1"), "{roff}");
        for sub in ["attach", "run", "sessions", "report", "export", "health"] {
            assert!(
                roff.contains(&format!("profctl\\-{sub}(1)")),
                "{sub}: {roff}"
            );
        }
        assert!(roff.contains("Examples:"), "{roff}");
    }

    #[test]
    fn man_dir_has_a_page_per_subcommand() {
        let dir = std::env::temp_dir().join(format!("profctl-man-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let written = write_man_dir(&dir).unwrap();
        let names: Vec<String> = written
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        for name in ["profctl.1", "profctl-attach.1", "profctl-completions.1"] {
            assert!(names.iter().any(|n| n == name), "{name} in {names:?}");
        }
        assert!(!names.iter().any(|n| n == "profctl-help.1"), "{names:?}");
        let attach = std::fs::read_to_string(dir.join("profctl-attach.1")).unwrap();
        assert!(attach.contains("\\-\\-duration"), "{attach}");
        // A directory that is not there is made.
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            write_man_dir(&dir.join("man1")).unwrap().len(),
            written.len()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn completions_cover_subcommands_for_every_shell() {
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let mut script = Vec::new();
            write_completions(shell, &mut script);
            let script = String::from_utf8(script).unwrap();
            assert!(script.contains("attach"), "{shell}: {script}");
            assert!(script.contains("histogram"), "{shell}");
        }
    }
}
