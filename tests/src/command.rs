//! Running a command with its output captured in files and a deadline, so a
//! hung daemon or client fails the test instead of hanging it.

use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::{path_str, unique_dir};

/// A running command whose stdout and stderr go to files.
pub struct Cmd {
    child: Option<Child>,
    what: String,
    stdout: PathBuf,
    stderr: PathBuf,
}

/// What a finished command printed.
#[derive(Debug)]
pub struct CmdOutput {
    /// The command line, for messages.
    pub what: String,
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Cmd {
    /// Starts `program args...` with stdin closed.
    pub fn spawn(program: &str, args: &[&str]) -> Cmd {
        Cmd::spawn_env(program, args, &[])
    }

    /// Starts `program args...` with stdin closed and `env` added to the
    /// environment.
    pub fn spawn_env(program: &str, args: &[&str], env: &[(String, String)]) -> Cmd {
        let dir = unique_dir("cmd");
        let stdout = dir.join("stdout");
        let stderr = dir.join("stderr");
        let what = std::iter::once(program)
            .chain(args.iter().copied())
            .collect::<Vec<_>>()
            .join(" ");
        let child = Command::new(program)
            .args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&stdout).expect("create stdout file"))
            .stderr(std::fs::File::create(&stderr).expect("create stderr file"))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start `{what}`: {e}"));
        Cmd {
            child: Some(child),
            what,
            stdout,
            stderr,
        }
    }

    /// Runs a command to completion (at most `timeout`).
    pub fn run(program: &str, args: &[&str], timeout: Duration) -> CmdOutput {
        Cmd::spawn(program, args).wait(timeout)
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Sends SIGKILL: the command dies at once, mid-stream.
    pub fn kill(&self) {
        signal(self.pid(), "KILL");
    }

    /// Sends SIGINT, as Ctrl-C in a terminal would.
    pub fn interrupt(&self) {
        signal(self.pid(), "INT");
    }

    /// Whether the command is still running.
    pub fn running(&mut self) -> bool {
        let child = self.child.as_mut().expect("running");
        child.try_wait().expect("try_wait").is_none()
    }

    /// What the command has printed so far.
    pub fn output_so_far(&self) -> (String, String) {
        (read_lossy(&self.stdout), read_lossy(&self.stderr))
    }

    /// Waits for the command to end; on timeout kills it and fails the test.
    pub fn wait(mut self, timeout: Duration) -> CmdOutput {
        let mut child = self.child.take().expect("running");
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                break status;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                let (stdout, stderr) = self.output_so_far();
                panic!(
                    "`{}` did not finish within {timeout:?}; killed it.\n\
                     --- stdout ---\n{stdout}\n--- stderr ---\n{stderr}",
                    self.what
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let (stdout, stderr) = self.output_so_far();
        CmdOutput {
            what: self.what.clone(),
            status,
            stdout,
            stderr,
        }
    }
}

impl Drop for Cmd {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl CmdOutput {
    /// The command line, exit status and both outputs, for failure messages.
    pub fn describe(&self) -> String {
        format!(
            "$ {}\nexit: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.what,
            self.status,
            self.stdout.trim_end(),
            self.stderr.trim_end()
        )
    }

    /// The number on the stderr line that starts with `name` and a space
    /// (`cpu_s 1.503` as the workloads print their CPU time); fails the test
    /// without one.
    pub fn stderr_figure(&self, name: &str) -> f64 {
        self.stderr
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no `{name} NUMBER` line on stderr:\n{}", self.describe()))
    }

    /// Fails the test unless the command exited 0.
    pub fn assert_success(&self) -> &Self {
        assert!(
            self.status.success(),
            "command failed:\n{}",
            self.describe()
        );
        self
    }
}

/// Sends a signal by name (`TERM`, `INT`) through the shell's `kill` builtin,
/// which exists even where procps is not installed.
pub fn signal(pid: u32, name: &str) {
    let pid = pid.to_string();
    let _ = Command::new("sh")
        .args(["-c", "kill -s \"$1\" \"$2\"", "sh", name, &pid])
        .status();
}

fn read_lossy(path: &PathBuf) -> String {
    match std::fs::read(path) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) => format!("<cannot read {}: {e}>", path_str(path)),
    }
}

/// profctl failed with exactly one `profctl: ...` line on stderr containing
/// every `needles` (case-insensitive).
pub fn assert_one_line_error(out: &CmdOutput, needles: &[&str]) {
    assert!(
        !out.status.success(),
        "expected failure:\n{}",
        out.describe()
    );
    let lines: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| !l.trim().is_empty())
        .collect();
    assert!(
        lines.len() == 1 && lines[0].starts_with("profctl: "),
        "expected one `profctl: ...` line on stderr:\n{}",
        out.describe()
    );
    let line = lines[0].to_lowercase();
    for needle in needles {
        assert!(
            line.contains(&needle.to_lowercase()),
            "error line does not mention {needle:?}:\n{}",
            out.describe()
        );
    }
    eprintln!("  {}", lines[0]);
}
