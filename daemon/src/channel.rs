//! A gRPC channel to profd's Unix socket: the one connector that profctl,
//! the examples and the tests use.
use hyper_util::rt::TokioIo;
use std::path::Path;
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Error, Uri};

/// A channel to the daemon listening on the Unix socket `path`. `first`,
/// when given, is the stream of its first connection (already dialled by a
/// caller that tells a missing daemon apart); reconnections dial `path`.
pub async fn unix_channel(path: &Path, first: Option<UnixStream>) -> Result<Channel, Error> {
    let first = std::sync::Mutex::new(first);
    let path = path.to_path_buf();
    // The URI is a placeholder: the connector ignores it and dials the socket.
    Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let first = first.lock().map(|mut f| f.take()).unwrap_or(None);
            let path = path.clone();
            async move {
                let stream = match first {
                    Some(stream) => stream,
                    None => UnixStream::connect(path).await?,
                };
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }
        }))
        .await
}
