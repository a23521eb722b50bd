//! A `profd` started on a private socket for one test, stopped (SIGTERM, then
//! SIGKILL) when dropped; and running `profctl` against it.

use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::command::{signal, Cmd, CmdOutput};
use crate::{bin, path_str, unique_dir};

/// How long a `profctl` command may take beyond the profiling it was asked for.
pub const PROFCTL_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the daemon may take to create and accept on its socket.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// A running `profd --socket <temp>/profd.sock`, logging to a file.
pub struct Daemon {
    child: Child,
    socket: PathBuf,
    log: PathBuf,
}

impl Daemon {
    /// Starts the daemon and waits until its socket accepts a connection.
    pub fn start() -> Daemon {
        let dir = unique_dir("daemon");
        let socket = dir.join("profd.sock");
        let log = dir.join("profd.log");
        let profd = bin("profd");
        let log_file = std::fs::File::create(&log).expect("create daemon log");
        let child = Command::new(&profd)
            .arg("--socket")
            .arg(&socket)
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("dup daemon log"))
            .stderr(log_file)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", profd.display()));
        let mut daemon = Daemon { child, socket, log };
        daemon.wait_ready();
        daemon
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                panic!(
                    "profd exited ({status}) before serving {}:\n{}",
                    self.socket.display(),
                    self.log()
                );
            }
            if self.socket.exists() && UnixStream::connect(&self.socket).is_ok() {
                return;
            }
            if Instant::now() >= deadline {
                panic!(
                    "profd did not accept connections on {} within {START_TIMEOUT:?}:\n{}",
                    self.socket.display(),
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything the daemon has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_else(|e| format!("<no log: {e}>"))
    }

    /// Starts `profctl --socket <ours> args...` without waiting for it.
    pub fn spawn_profctl(&self, args: &[&str]) -> Cmd {
        let profctl = bin("profctl");
        let mut full = vec!["--socket", path_str(&self.socket)];
        full.extend_from_slice(args);
        Cmd::spawn(path_str(&profctl), &full)
    }

    /// Runs `profctl --socket <ours> args...` to completion.
    pub fn profctl(&self, args: &[&str]) -> CmdOutput {
        self.spawn_profctl(args).wait(PROFCTL_TIMEOUT)
    }

    /// Fails the test unless the daemon process is alive and `profctl info`
    /// still succeeds against it.
    pub fn assert_alive(&mut self) {
        if let Some(status) = self.child.try_wait().expect("try_wait") {
            panic!("profd exited ({status}):\n{}", self.log());
        }
        let info = self.profctl(&["info"]);
        assert!(
            info.status.success(),
            "profd no longer answers `profctl info`:\n{}\n--- profd log ---\n{}",
            info.describe(),
            self.log()
        );
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            signal(self.child.id(), "TERM");
            let deadline = Instant::now() + Duration::from_secs(5);
            while self.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if std::thread::panicking() {
            eprintln!("--- profd log ({}) ---\n{}", self.log.display(), self.log());
        }
    }
}
