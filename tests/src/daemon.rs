//! A `profd` started on a private socket for one test, stopped (SIGTERM, then
//! SIGKILL) when dropped; and running `profctl` against it, as root or as
//! another user. Unless a test says otherwise, each daemon keeps its
//! sessions in a state directory of its own (never `/var/lib/profd`), so
//! that persistence is exercised by every test; `restart` stops it with
//! SIGTERM (`kill_and_restart` with SIGKILL) and starts it again on the same
//! socket and state directory.

use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::command::{signal, Cmd, CmdOutput};
use crate::users::{public_copy, public_dir, User};
use crate::{bin, path_str, unique_dir};

/// How long a `profctl` command may take beyond the profiling it was asked for.
pub const PROFCTL_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the daemon may take to create and accept on its socket.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// How long `profd` may take to refuse to start, or to run `profd token`.
const REFUSE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long `profd` may take to stop on SIGTERM (ending and saving its
/// sessions) in [`Daemon::terminate`].
const TERMINATE_TIMEOUT: Duration = Duration::from_secs(30);

/// A running `profd --socket <temp>/profd.sock`, logging to a file.
pub struct Daemon {
    child: Child,
    socket: PathBuf,
    log: PathBuf,
    /// `--listen ADDR:PORT`, when given.
    listen: Option<String>,
    /// Every argument after `--socket <socket>`, for restarts.
    args: Vec<String>,
    /// `--state-dir`, unless `--no-persist` was given.
    state_dir: Option<PathBuf>,
    /// The open-files limit (soft and hard) the daemon runs under, if set.
    nofile: Option<u64>,
}

impl Daemon {
    /// Starts the daemon and waits until its socket accepts a connection.
    pub fn start() -> Daemon {
        let dir = unique_dir("daemon");
        Daemon::launch(dir.join("profd.sock"), dir.join("profd.log"), &[])
    }

    /// Starts `profd --socket <dir>/profd.sock args...`, the directory being
    /// one that every user can traverse (mode 0755), and waits until the
    /// socket (and the `--listen` address, if any) accepts connections.
    pub fn start_with(args: &[&str]) -> Daemon {
        let dir = public_dir("daemon");
        Daemon::launch(dir.join("profd.sock"), dir.join("profd.log"), args)
    }

    /// Starts as [`Daemon::start_with`] does, the daemon's open-files limit
    /// (soft and hard: profd raises the soft one to the hard one) set to
    /// `nofile` with `prlimit`.
    pub fn start_with_nofile(args: &[&str], nofile: u64) -> Daemon {
        let dir = public_dir("daemon");
        Daemon::launch_limited(
            dir.join("profd.sock"),
            dir.join("profd.log"),
            args,
            Some(nofile),
        )
    }

    /// Starts `profd --socket <socket> args...` (the socket's directory need
    /// not exist) and waits as [`Daemon::start_with`] does.
    pub fn start_at(socket: &Path, args: &[&str]) -> Daemon {
        let log = unique_dir("daemon-log").join("profd.log");
        Daemon::launch(socket.to_path_buf(), log, args)
    }

    /// Starts profd; without `--state-dir` or `--no-persist` in `args`, with
    /// `--state-dir` a fresh directory (that profd creates).
    fn launch(socket: PathBuf, log: PathBuf, args: &[&str]) -> Daemon {
        Daemon::launch_limited(socket, log, args, None)
    }

    fn launch_limited(socket: PathBuf, log: PathBuf, args: &[&str], nofile: Option<u64>) -> Daemon {
        let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let flag_value = |args: &[String], flag: &str| {
            args.iter()
                .position(|a| a == flag)
                .and_then(|i| args.get(i + 1))
                .cloned()
        };
        if !args
            .iter()
            .any(|a| a == "--state-dir" || a == "--no-persist")
        {
            let dir = unique_dir("state").join("profd");
            args.extend(["--state-dir".to_string(), path_str(&dir).to_string()]);
        }
        // Tests measure profiles without memory pressure unless they test
        // the ceiling: the dev build on a shared machine holds more than
        // the default.
        if !args
            .iter()
            .any(|a| a == "--memory-limit" || a == "--config")
        {
            args.extend(["--memory-limit".to_string(), "4G".to_string()]);
        }
        let state_dir = flag_value(&args, "--state-dir").map(PathBuf::from);
        let listen = flag_value(&args, "--listen");
        let child = Daemon::spawn_child(&socket, &log, &args, nofile);
        let mut daemon = Daemon {
            child,
            socket,
            log,
            listen,
            args,
            state_dir,
            nofile,
        };
        daemon.wait_ready();
        daemon
    }

    /// `profd --socket <socket> args...`, logging to `log` (appended to),
    /// under `prlimit --nofile` when `nofile` is set (prlimit execs profd).
    fn spawn_child(socket: &Path, log: &Path, args: &[String], nofile: Option<u64>) -> Child {
        let profd = bin("profd");
        let log_file = std::fs::File::options()
            .create(true)
            .append(true)
            .open(log)
            .expect("open daemon log");
        let mut command = match nofile {
            Some(n) => {
                let mut c = Command::new("prlimit");
                c.arg(format!("--nofile={n}:{n}")).arg("--").arg(&profd);
                c
            }
            None => Command::new(&profd),
        };
        // debuginfod only when a test asks for it (Debian's profile sets
        // DEBUGINFOD_URLS in login shells).
        command
            .env_remove("DEBUGINFOD_URLS")
            .arg("--socket")
            .arg(socket)
            .args(args)
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("dup daemon log"))
            .stderr(log_file)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", profd.display()))
    }

    /// The daemon's state directory (`--state-dir`), unless it keeps nothing.
    pub fn state_dir(&self) -> Option<&Path> {
        self.state_dir.as_deref()
    }

    /// Sends SIGTERM and waits until the daemon has exited (it ends and saves
    /// its sessions first); fails the test when it takes longer than 30 s.
    pub fn terminate(&mut self) -> ExitStatus {
        if let Some(status) = self.child.try_wait().expect("try_wait") {
            return status;
        }
        signal(self.child.id(), "TERM");
        let deadline = Instant::now() + TERMINATE_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "profd did not exit within {TERMINATE_TIMEOUT:?} of SIGTERM:\n{}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Stops the daemon with SIGTERM (it must exit successfully) and starts
    /// it again with the same socket, arguments (so the same state
    /// directory) and log.
    pub fn restart(&mut self) {
        let status = self.terminate();
        assert!(
            status.success(),
            "profd exited with {status} on SIGTERM:\n{}",
            self.log()
        );
        self.child = Daemon::spawn_child(&self.socket, &self.log, &self.args, self.nofile);
        self.wait_ready();
    }

    /// Kills the daemon with SIGKILL (it saves nothing on the way out) and
    /// starts it again with the same socket, arguments and log.
    pub fn kill_and_restart(&mut self) {
        let _ = self.child.kill();
        let status = self.child.wait().expect("wait for the killed profd");
        eprintln!("profd killed: {status}");
        self.child = Daemon::spawn_child(&self.socket, &self.log, &self.args, self.nofile);
        self.wait_ready();
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
            let socket_ready = self.socket.exists() && UnixStream::connect(&self.socket).is_ok();
            let tcp_ready = self
                .listen
                .as_ref()
                .is_none_or(|addr| TcpStream::connect(addr.as_str()).is_ok());
            if socket_ready && tcp_ready {
                return;
            }
            if Instant::now() >= deadline {
                panic!(
                    "profd did not accept connections on {} (and --listen {:?}) within \
                     {START_TIMEOUT:?}:\n{}",
                    self.socket.display(),
                    self.listen,
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

    /// The running session of `pid` in `profctl sessions`: its id and
    /// attributed samples so far.
    pub fn running_session(&self, pid: u32) -> Option<(u64, u64)> {
        let out = self.profctl(&["sessions"]);
        out.assert_success();
        out.stdout.lines().find_map(|line| {
            let w: Vec<&str> = line.split_whitespace().collect();
            if w.len() < 4 || w[1] != pid.to_string() || !w.contains(&"running") {
                return None;
            }
            let attributed = w.last()?.split('/').next()?.parse().ok()?;
            Some((w[0].parse().ok()?, attributed))
        })
    }

    /// Waits until a running session of `pid` has `samples` attributed
    /// samples; returns its id.
    pub fn wait_for_samples(&self, pid: u32, samples: u64) -> u64 {
        crate::wait_until(
            &format!("a session of pid {pid} with {samples} samples"),
            Duration::from_secs(120),
            || {
                self.running_session(pid)
                    .and_then(|(id, n)| (n >= samples).then_some(id))
            },
        )
    }

    /// Profiles `target` (`attach --format json`, `extra` added) until the
    /// session has `samples` attributed samples, then stops it: however
    /// busy the machine, the shares are over enough samples. Returns the
    /// stopped session's profile, printed.
    pub fn profile_until(
        &self,
        target: &crate::Workload,
        samples: u64,
        extra: &[&str],
    ) -> crate::Profile {
        let pid = target.pid_arg();
        let mut args = vec!["attach", &pid, "--duration", "600", "--format", "json"];
        args.extend_from_slice(extra);
        let attach = self.spawn_profctl(&args);
        let id = self.wait_for_samples(target.pid(), samples);
        self.profctl(&["stop", &id.to_string()]).assert_success();
        let p = crate::Profile::parse(&attach.wait(PROFCTL_TIMEOUT));
        eprintln!("{}", p.table());
        assert_eq!(p.state, "stopped", "{}", p.table());
        p
    }

    /// Starts `profctl --socket <ours> args...` as `user` (through `setpriv`,
    /// from a copy every user can run) without waiting for it.
    pub fn spawn_profctl_as(&self, user: &User, args: &[&str]) -> Cmd {
        let profctl = public_copy(&bin("profctl"));
        let mut full = user.setpriv_args();
        full.extend([
            path_str(&profctl).to_string(),
            "--socket".to_string(),
            path_str(&self.socket).to_string(),
        ]);
        full.extend(args.iter().map(|a| a.to_string()));
        let full: Vec<&str> = full.iter().map(String::as_str).collect();
        Cmd::spawn("setpriv", &full)
    }

    /// Runs `profctl --socket <ours> args...` as `user` to completion.
    pub fn profctl_as(&self, user: &User, args: &[&str]) -> CmdOutput {
        self.spawn_profctl_as(user, args).wait(PROFCTL_TIMEOUT)
    }

    /// Whether the daemon process is still running.
    pub fn running(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_none()
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

/// Runs `profd args...` (no `--socket` added) and returns what it printed
/// once it exited: for startup checks that must make it refuse to run, and
/// for `profd token`. Fails the test when profd is still running after
/// 10 s (it started although it should have refused).
pub fn run_profd(args: &[&str]) -> CmdOutput {
    let profd = bin("profd");
    let mut cmd = Cmd::spawn(path_str(&profd), args);
    let deadline = Instant::now() + REFUSE_TIMEOUT;
    while cmd.running() {
        if Instant::now() >= deadline {
            let (stdout, stderr) = cmd.output_so_far();
            drop(cmd); // kills it
            panic!(
                "`profd {}` was still running after {REFUSE_TIMEOUT:?}; it should have \
                 exited (refused to start):\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}",
                args.join(" ")
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cmd.wait(Duration::from_secs(1))
}

/// Runs `profctl args...` as root without a `--socket` of ours (e.g. with
/// `--connect`), `env` added to its environment.
pub fn run_profctl(args: &[&str], env: &[(String, String)]) -> CmdOutput {
    let profctl = bin("profctl");
    Cmd::spawn_env(path_str(&profctl), args, env).wait(PROFCTL_TIMEOUT)
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
