//! Connecting to profd over its Unix socket, and the in-process private
//! daemon started when nothing answers and the user is root. Owns the temp
//! dir and the daemon task; knows nothing about commands.
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use profd_common::api::profiler_client::ProfilerClient;
use tokio::net::UnixStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::{Channel, Endpoint, Uri};

use crate::error::Error;

/// How long to wait for the private daemon to shut down before abandoning it.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// A gRPC client of profd, and the private daemon behind it if we started one.
pub struct Connection {
    /// The API client.
    pub client: ProfilerClient<Channel>,
    private: Option<PrivateDaemon>,
}

impl Connection {
    /// Connects to the daemon at `socket`. When nothing answers there and we
    /// run as root, starts a private daemon in this process instead (and says
    /// so on stderr); otherwise fails with [`Error::NoDaemon`].
    pub async fn open(socket: &Path) -> Result<Connection, Error> {
        match connect(socket).await {
            Ok(client) => Ok(Connection {
                client,
                private: None,
            }),
            Err(ConnectError::Absent) if is_root() => {
                let private = PrivateDaemon::start().await?;
                let client = match connect(&private.socket).await {
                    Ok(client) => client,
                    Err(e) => {
                        let path = private.socket.clone();
                        private.shutdown().await;
                        return Err(e.into_error(path));
                    }
                };
                eprintln!(
                    "profctl: no profd at {}; started a private one for this command",
                    socket.display()
                );
                Ok(Connection {
                    client,
                    private: Some(private),
                })
            }
            Err(e) => Err(e.into_error(socket.to_path_buf())),
        }
    }

    /// Whether this connection is to a daemon running inside this process.
    pub fn is_private(&self) -> bool {
        self.private.is_some()
    }

    /// Drops the client and, for a private daemon, shuts it down and removes
    /// its socket directory.
    pub async fn close(self) {
        let Connection { client, private } = self;
        drop(client);
        if let Some(private) = private {
            private.shutdown().await;
        }
    }
}

/// Why connecting failed.
enum ConnectError {
    /// No socket file, or nobody listening on it.
    Absent,
    /// Any other socket error (e.g. permission denied).
    Io(io::Error),
    /// The socket connected but the gRPC channel failed.
    Transport(tonic::transport::Error),
}

impl ConnectError {
    fn into_error(self, path: PathBuf) -> Error {
        match self {
            ConnectError::Absent => Error::NoDaemon { path },
            ConnectError::Io(source) => Error::Connect { path, source },
            ConnectError::Transport(source) => Error::Transport { path, source },
        }
    }
}

/// Connects a gRPC channel over the Unix socket at `path`. The first socket
/// is opened here so that "nobody listens" can be told from other failures;
/// reconnects open new sockets.
async fn connect(path: &Path) -> Result<ProfilerClient<Channel>, ConnectError> {
    let first = UnixStream::connect(path)
        .await
        .map_err(|e| match e.kind() {
            io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused => ConnectError::Absent,
            _ => ConnectError::Io(e),
        })?;
    let first = Arc::new(Mutex::new(Some(first)));
    let path = path.to_path_buf();
    // The URI is a placeholder: the connector ignores it and dials the socket.
    let endpoint = Endpoint::from_static("http://localhost");
    let channel = endpoint
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let first = first.lock().map(|mut f| f.take()).unwrap_or(None);
            let path = path.clone();
            async move {
                let stream = match first {
                    Some(stream) => stream,
                    None => UnixStream::connect(path).await?,
                };
                Ok::<_, io::Error>(TokioIo::new(stream))
            }
        }))
        .await
        .map_err(ConnectError::Transport)?;
    Ok(ProfilerClient::new(channel))
}

/// Whether the effective user is root (who may run a private daemon).
fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// A profd daemon served from a task of this process, on a socket in a fresh
/// private directory.
struct PrivateDaemon {
    dir: PathBuf,
    socket: PathBuf,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), profd::Error>>>,
}

impl PrivateDaemon {
    /// Creates the directory (mode 0700), binds the daemon and starts serving.
    async fn start() -> Result<PrivateDaemon, Error> {
        let dir = make_private_dir()?;
        let socket = dir.join("profd.sock");
        let mut private = PrivateDaemon {
            dir,
            socket: socket.clone(),
            stop: None,
            task: None,
        };
        let daemon = profd::Daemon::bind(profd::Config::new(socket)).await?;
        let (stop, stopped) = oneshot::channel::<()>();
        let shutdown = async move {
            // A dropped sender also means "shut down".
            let _ = stopped.await;
        };
        private.stop = Some(stop);
        private.task = Some(tokio::spawn(daemon.serve(shutdown)));
        Ok(private)
    }

    /// Signals shutdown, waits for the daemon task (reporting its error, if
    /// any, on stderr) and removes the directory.
    async fn shutdown(mut self) {
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
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[tokio::test]
    async fn missing_socket_is_absent() {
        let r = connect(Path::new("/nonexistent/dir/x.sock")).await;
        assert!(matches!(r, Err(ConnectError::Absent)));
    }

    #[tokio::test]
    async fn socket_without_listener_is_absent() {
        let dir = make_private_dir().unwrap();
        let path = dir.join("s.sock");
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        let r = connect(&path).await;
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(matches!(r, Err(ConnectError::Absent)));
    }

    #[test]
    fn private_dir_is_0700_and_unique() {
        let a = make_private_dir().unwrap();
        let b = make_private_dir().unwrap();
        assert_ne!(a, b);
        let mode = std::fs::metadata(&a).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        std::fs::remove_dir_all(a).unwrap();
        std::fs::remove_dir_all(b).unwrap();
    }
}
