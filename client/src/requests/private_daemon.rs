//! The private daemon: a profd served from a task of this process, on a
//! socket in a fresh 0700 directory, for a command run as root when no
//! daemon answers on the socket. It keeps nothing on disk. Only in builds
//! with the `private-daemon` feature.
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::error::Error;

/// How long to wait for the private daemon to shut down before abandoning it.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Whether the effective user is root (who may run a private daemon).
pub(crate) fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// A profd daemon served from a task of this process, on a socket in a fresh
/// private directory.
pub(crate) struct PrivateDaemon {
    dir: PathBuf,
    socket: PathBuf,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), profd::Error>>>,
}

impl PrivateDaemon {
    /// Creates the directory (mode 0700), binds the daemon and starts serving.
    pub(crate) async fn start() -> Result<PrivateDaemon, Error> {
        let dir = make_private_dir()?;
        let socket = dir.join("profd.sock");
        let mut private = PrivateDaemon {
            dir,
            socket: socket.clone(),
            stop: None,
            task: None,
        };
        let mut config = profd::Config::new(socket);
        // A daemon for one command keeps nothing on disk (and never touches
        // the system daemon's state directory).
        config.persist = None;
        let daemon = profd::Daemon::bind(config).await?;
        let (stop, stopped) = oneshot::channel::<()>();
        let shutdown = async move {
            // A dropped sender also means "shut down".
            let _ = stopped.await;
        };
        private.stop = Some(stop);
        private.task = Some(tokio::spawn(daemon.serve(shutdown)));
        Ok(private)
    }

    /// The socket the daemon listens on.
    pub(crate) fn socket(&self) -> &Path {
        &self.socket
    }

    /// Signals shutdown, waits for the daemon task (reporting its error, if
    /// any, on stderr) and removes the directory.
    pub(crate) async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let abort = task.abort_handle();
            match tokio::time::timeout(SHUTDOWN_GRACE, task).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(e))) => eprintln!("profctl: private daemon: {e}"),
                Ok(Err(e)) if e.is_panic() => eprintln!("profctl: private daemon panicked"),
                Ok(Err(_)) => {}
                Err(_) => {
                    eprintln!("profctl: private daemon did not shut down in time");
                    abort.abort();
                }
            }
        }
        // Drop removes the directory.
    }
}

impl Drop for PrivateDaemon {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `$TMPDIR/profctl-<pid>-<random>`, created with mode 0700 (fails rather
/// than reuse an existing path).
fn make_private_dir() -> Result<PathBuf, Error> {
    let base = std::env::temp_dir();
    let mut last = None;
    for _ in 0..8 {
        let dir = base.join(format!("profctl-{}-{:016x}", std::process::id(), random()));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(Error::io(format!("cannot create {}", dir.display()), e)),
        }
    }
    Err(Error::io(
        format!("cannot create a private directory in {}", base.display()),
        last.unwrap_or_else(|| io::Error::from(io::ErrorKind::AlreadyExists)),
    ))
}

/// A random-enough number for a directory name (std's per-process hash seed
/// mixed with the clock).
fn random() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    if let Ok(t) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(t.as_nanos());
    }
    h.finish()
}

#[cfg(test)]
#[path = "private_daemon_tests.rs"]
mod tests;
