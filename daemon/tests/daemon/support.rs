//! Shared by the daemon's integration tests: serve a daemon in-process on a
//! temporary Unix socket, connect to it, and read Watch streams.

use profd_common::api::{self, profiler_client::ProfilerClient};
use std::future::Future;
use std::path::PathBuf;
use tonic::transport::Channel;

/// A daemon served in this process, and a client connected to it.
pub struct Running {
    pub client: ProfilerClient<Channel>,
    stop: tokio::sync::oneshot::Sender<()>,
    server: tokio::task::JoinHandle<Result<(), profd::Error>>,
    pub dir: PathBuf,
}

/// Bind a daemon with `bind(socket)` in a fresh temp dir, serve it, connect.
pub async fn serve<F>(name: &str, bind: impl FnOnce(PathBuf) -> F) -> Running
where
    F: Future<Output = Result<profd::Daemon, profd::Error>>,
{
    let dir = std::env::temp_dir().join(format!("profd-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("profd.sock");
    let daemon = bind(socket.clone())
        .await
        .expect("the daemon binds (needs root)");
    let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(daemon.serve(async move {
        let _ = stop_rx.await;
    }));
    let channel = profctl::requests::connect::unix_channel(&socket, None)
        .await
        .expect("connect to the daemon");
    Running {
        client: ProfilerClient::new(channel),
        stop,
        server,
        dir,
    }
}

impl Running {
    /// Shut the daemon down cleanly and remove its directory.
    pub async fn finish(self) {
        self.stop.send(()).unwrap();
        self.server.await.unwrap().unwrap();
        let _ = std::fs::remove_dir_all(self.dir);
    }

    /// The whole current profile of `session_id`.
    pub async fn profile(&mut self, session_id: u64) -> api::GetProfileResponse {
        let req = api::GetProfileRequest {
            session_id,
            ..Default::default()
        };
        self.client.get_profile(req).await.unwrap().into_inner()
    }

    /// The whole current profile of `session_id`, also encoded as `format`.
    pub async fn export(
        &mut self,
        session_id: u64,
        format: api::ExportFormat,
    ) -> api::GetProfileResponse {
        let req = api::GetProfileRequest {
            session_id,
            format: format as i32,
            query: None,
        };
        self.client.get_profile(req).await.unwrap().into_inner()
    }

    /// The daemon's facts and totals.
    pub async fn info(&mut self) -> api::InfoResponse {
        self.client
            .info(api::InfoRequest {})
            .await
            .unwrap()
            .into_inner()
    }

    /// A Watch stream of `session_id`.
    pub async fn watch(
        &mut self,
        session_id: u64,
        interval_ms: u32,
    ) -> tonic::Streaming<api::WatchResponse> {
        self.client
            .watch(api::WatchRequest {
                session_id,
                interval_ms,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
    }
}

/// Read a Watch stream up to its final update and check that it ends there.
pub async fn until_final(stream: &mut tonic::Streaming<api::WatchResponse>) -> api::WatchResponse {
    loop {
        let m = stream
            .message()
            .await
            .unwrap()
            .expect("a final update before the end");
        if m.r#final {
            assert!(
                stream.message().await.unwrap().is_none(),
                "the stream ends after the final update"
            );
            return m;
        }
    }
}

/// A child process killed and reaped when dropped, so a failing test
/// leaves nothing running.
pub struct Reaped(pub std::process::Child);

impl Reaped {
    pub fn id(&self) -> u32 {
        self.0.id()
    }

    /// Kill the process now and wait for it.
    pub fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Start `cmd` as a `Reaped` child.
pub fn spawn(mut cmd: std::process::Command) -> Reaped {
    Reaped(cmd.spawn().unwrap_or_else(|e| panic!("{cmd:?}: {e}")))
}

/// A process that sleeps for a minute (returned once it has exec'd: its
/// name is `sleep`).
pub fn sleeper() -> Reaped {
    let mut cmd = std::process::Command::new("sleep");
    cmd.arg("60");
    let child = spawn(cmd);
    let comm = format!("/proc/{}/comm", child.id());
    for _ in 0..200 {
        if std::fs::read_to_string(&comm).is_ok_and(|c| c.trim_end() == "sleep") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    child
}
