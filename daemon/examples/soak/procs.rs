//! The soak's processes: the busy C workload (compiled once, started many
//! times), the daemon it starts on a temporary socket, and readings of a
//! process's RSS, descriptors and CPU time from /proc.
use crate::ctx::{ms, Reaped};
use crate::hogs;
use anyhow::{bail, Context as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;

const SPIN_C: &str = r#"
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned long sink;

__attribute__((noinline)) static void leaf_a(unsigned n) { for (unsigned i = 0; i < n; i++) sink += i * 7u; }
__attribute__((noinline)) static void leaf_b(unsigned n) { for (unsigned i = 0; i < n; i++) sink ^= i * 13u; }
__attribute__((noinline)) static void mid(unsigned n) { leaf_a(n); leaf_b(3 * n); }
__attribute__((noinline)) static void work(unsigned n) { mid(n); leaf_a(n); }

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

/* Busy in a few functions; every 0.5-2 s forks a child that spins 20 ms and
   exits or execs /bin/true; after 2-10 s re-execs itself (same pid). */
int main(int argc, char **argv) {
    int gen = argc > 1 ? atoi(argv[1]) : 0;
    if (gen == 0 && nice(19) == -1) { /* best effort */ }
    signal(SIGCHLD, SIG_IGN);
    srand((unsigned)getpid() * 2654435761u + (unsigned)gen);
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    self[n > 0 ? n : 0] = 0;
    double t0 = now();
    double next_fork = t0 + 0.2 + (rand() % 1000) / 1000.0;
    double exec_at = t0 + 2.0 + (rand() % 8000) / 1000.0;
    for (;;) {
        work(20000);
        double t = now();
        if (t >= next_fork) {
            next_fork = t + 0.5 + (rand() % 1500) / 1000.0;
            if (fork() == 0) {
                double end = now() + 0.02;
                while (now() < end) work(2000);
                if (rand() % 2) execl("/bin/true", "true", (char *)0);
                _exit(0);
            }
        }
        if (n > 0 && t >= exec_at) {
            char g[16];
            snprintf(g, sizeof g, "%d", gen + 1);
            execl(self, argv[0], g, (char *)0);
            exec_at = t + 5.0;
        }
    }
}
"#;

/// How workloads are started: the compiled spinner, or a shell loop when
/// there is no C compiler.
pub enum Spin {
    C(PathBuf),
    Shell,
}

impl Spin {
    pub fn build(dir: &Path) -> Spin {
        let src = dir.join("soak-spin.c");
        let bin = dir.join("soak-spin");
        let built = std::fs::write(&src, SPIN_C).is_ok()
            && Command::new("cc")
                .args(["-O1", "-g", "-fno-omit-frame-pointer", "-o"])
                .arg(&bin)
                .arg(&src)
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .status()
                .is_ok_and(|s| s.success());
        if built {
            Spin::C(bin)
        } else {
            eprintln!(
                "soak: cannot compile the C workload with cc; using `sh -c 'while :; do :; done'`"
            );
            Spin::Shell
        }
    }

    pub fn start(&self) -> std::io::Result<Reaped> {
        let (mut cmd, comm) = match self {
            Spin::C(bin) => {
                let mut c = Command::new(bin);
                c.arg("0");
                (c, "soak-spin")
            }
            Spin::Shell => {
                let mut c = Command::new("nice");
                c.args(["-n", "19", "sh", "-c", "while :; do :; done"]);
                (c, "sh")
            }
        };
        let child = Reaped(
            cmd.stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()?,
        );
        // Attach once it runs its own program, so the session starts named.
        let path = format!("/proc/{}/comm", child.pid());
        for _ in 0..100 {
            if std::fs::read_to_string(&path).is_ok_and(|c| c.trim_end() == comm) {
                break;
            }
            std::thread::sleep(ms(5));
        }
        Ok(child)
    }
}

// ---------------------------------------------------------------- the daemon

pub struct DaemonProc {
    pub child: Reaped,
    pub pid: u32,
    pub log: PathBuf,
}

pub fn default_profd() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("locating this executable")?;
    // target/<profile>/examples/soak → target/<profile>/profd
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .context("this executable has no target directory")?;
    Ok(dir.join("profd"))
}

pub fn has_flag(help: &str, flag: &str) -> bool {
    help.split(|c: char| c.is_whitespace() || matches!(c, ',' | '=' | '[' | ']'))
        .any(|w| w == flag)
}

pub async fn start_daemon(profd: &Path, dir: &Path) -> anyhow::Result<(DaemonProc, Vec<String>)> {
    let help = Command::new(profd)
        .arg("--help")
        .output()
        .with_context(|| {
            format!(
                "running {} --help (build it first: cargo build --release -p profd, or give --profd)",
                profd.display()
            )
        })?;
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    let socket = dir.join("profd.sock");
    let mut args: Vec<String> = vec![
        "--socket".into(),
        socket.display().to_string(),
        "--log-level".into(),
        "info".into(),
    ];
    let max_connections = hogs::MAX_CONNECTIONS.to_string();
    for (flag, value) in [
        ("--max-sessions", "4096"),
        ("--max-sessions-per-caller", "4096"),
        ("--max-connections", &max_connections),
    ] {
        if has_flag(&help, flag) {
            args.extend([flag.to_string(), value.to_string()]);
        }
    }
    if has_flag(&help, "--state-dir") {
        let state = dir.join("state");
        std::fs::create_dir_all(&state)?;
        args.extend(["--state-dir".to_string(), state.display().to_string()]);
    } else if has_flag(&help, "--no-persist") {
        args.push("--no-persist".into());
    }
    let log = dir.join("profd.log");
    let file = std::fs::File::create(&log)?;
    let child = Command::new(profd)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file)
        .spawn()
        .with_context(|| format!("starting {}", profd.display()))?;
    let mut d = DaemonProc {
        pid: child.id(),
        child: Reaped(child),
        log,
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = d.child.0.try_wait()? {
            bail!(
                "profd exited ({status}) before serving:\n{}",
                std::fs::read_to_string(&d.log).unwrap_or_default()
            );
        }
        if std::os::unix::net::UnixStream::connect(&socket).is_ok() {
            return Ok((d, args));
        }
        if Instant::now() > deadline {
            d.child.kill();
            bail!(
                "profd did not accept connections on {} within 10 s:\n{}",
                socket.display(),
                std::fs::read_to_string(&d.log).unwrap_or_default()
            );
        }
        tokio::time::sleep(ms(50)).await;
    }
}

/// One reading of the daemon's /proc entries.
#[derive(Debug, Clone, Copy)]
pub struct ProcSample {
    pub at_s: f64,
    pub rss_kib: u64,
    /// The anonymous part of it (heap), without mapped files.
    pub anon_kib: u64,
    pub fds: usize,
    /// utime + stime in clock ticks.
    pub cpu_ticks: u64,
}

pub fn read_proc(pid: u32, at_s: f64) -> Option<ProcSample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib = |field: &str| -> Option<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    let (rss_kib, anon_kib) = (kib("VmRSS:")?, kib("RssAnon:").unwrap_or(0));
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // After the comm: state is field 3, utime 14, stime 15.
    let cpu_ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(ProcSample {
        at_s,
        rss_kib,
        anon_kib,
        fds,
        cpu_ticks,
    })
}

pub fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// The daemon's /proc figures, read every second until stopped.
pub struct Sampler {
    samples: Arc<Mutex<Vec<ProcSample>>>,
    sampling: Arc<AtomicBool>,
    task: JoinHandle<()>,
}

impl Sampler {
    /// Starts reading `pid` every second; `at_s` counts from `start`.
    pub fn start(pid: u32, start: Instant) -> Sampler {
        let samples: Arc<Mutex<Vec<ProcSample>>> = Arc::default();
        let sampling = Arc::new(AtomicBool::new(true));
        let task = {
            let (samples, sampling) = (samples.clone(), sampling.clone());
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_secs(1));
                while sampling.load(Relaxed) {
                    tick.tick().await;
                    if let Some(s) = read_proc(pid, start.elapsed().as_secs_f64()) {
                        samples.lock().unwrap().push(s);
                    }
                }
            })
        };
        Sampler {
            samples,
            sampling,
            task,
        }
    }

    /// The latest reading.
    pub fn last(&self) -> Option<ProcSample> {
        self.samples.lock().unwrap().last().copied()
    }

    /// Stops the readings and waits for the reading task to end.
    pub async fn stop(&mut self) {
        self.sampling.store(false, Relaxed);
        let _ = (&mut self.task).await;
    }

    /// Every reading so far.
    pub fn samples(&self) -> Vec<ProcSample> {
        self.samples.lock().unwrap().clone()
    }
}
