//! The TLS listener: its certificate, key, client CA and tokens loaded at
//! bind time, TLS handshakes offering HTTP/2 and HTTP/1.1 (ALPN), and the
//! routes it serves: the gRPC services as gRPC and grpc-web, the web
//! dashboard's assets, and CORS for the origins configured. Who a caller
//! is stays `auth`'s business; what the dashboard holds, `dashboard`'s.
use crate::config::Remote;
use crate::daemon_error::Error;
use crate::serve::{auth, conns, dashboard};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls::{self, pki_types};
use tokio_rustls::server::TlsStream;
use tokio_stream::wrappers::ReceiverStream;
use tower_http::cors::{AllowOrigin, CorsLayer};

/// Handshakes finished and not yet taken by the server.
const ACCEPT_BACKLOG: usize = 64;
/// How long a browser may cache a CORS preflight answer.
const CORS_MAX_AGE: Duration = Duration::from_secs(600);

/// The TLS listener, bound and with its settings loaded.
pub struct Listener {
    pub tcp: TcpListener,
    pub tls: Arc<rustls::ServerConfig>,
    pub cors: CorsLayer,
}

/// A PEM file of the listener, which the daemon must be able to trust
/// ([`crate::trusted_files::read`]).
fn read_pem(what: &str, path: &Path) -> Result<Vec<u8>, Error> {
    crate::trusted_files::read(path).map_err(|e| Error::Config(format!("{what} {e}")))
}

fn pem_error(what: &str, path: &Path, why: impl std::fmt::Display) -> Error {
    Error::Config(format!("{what} {}: {why}", path.display()))
}

/// The certificates of a PEM file (at least one).
fn certificates(what: &str, path: &Path) -> Result<Vec<pki_types::CertificateDer<'static>>, Error> {
    use pki_types::pem::PemObject;
    let pem = read_pem(what, path)?;
    let certs = pki_types::CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| pem_error(what, path, e))?;
    if certs.is_empty() {
        return Err(pem_error(what, path, "no PEM certificate in it"));
    }
    Ok(certs)
}

/// The rustls settings of the listener: its identity, client certificates
/// when `client_ca` is set, and ALPN offering HTTP/2 and HTTP/1.1 (browsers
/// and grpc-web clients behind HTTP/1.1-only proxies).
fn server_config(files: &auth::TlsFiles) -> Result<rustls::ServerConfig, Error> {
    use pki_types::pem::PemObject;
    let certs = certificates("--tls-cert", &files.cert)?;
    let key = pki_types::PrivateKeyDer::from_pem_slice(&read_pem("--tls-key", &files.key)?)
        .map_err(|e| pem_error("--tls-key", &files.key, e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Config(format!("TLS settings: {e}")))?;
    let builder = match &files.client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in certificates("--tls-client-ca", ca)? {
                roots
                    .add(cert)
                    .map_err(|e| pem_error("--tls-client-ca", ca, e))?;
            }
            let verifier =
                rustls::server::WebPkiClientVerifier::builder_with_provider(roots.into(), provider)
                    .build()
                    .map_err(|e| pem_error("--tls-client-ca", ca, e))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_single_cert(certs, key).map_err(|e| {
        Error::Config(format!(
            "--tls-cert {} and --tls-key {}: {e}",
            files.cert.display(),
            files.key.display()
        ))
    })?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

/// CORS for grpc-web callers from other origins: those listed may send the
/// headers grpc-web uses and read the gRPC status; with none listed only
/// pages of the listener's own origin (the dashboard) may call.
fn cors(origins: &[String]) -> Result<CorsLayer, Error> {
    let origins = origins
        .iter()
        .map(|o| {
            HeaderValue::from_str(o)
                .map_err(|_| Error::Config(format!("CORS origin {o:?} is not a header value")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let header = HeaderName::from_static;
    Ok(CorsLayer::new()
        .allow_origin(AllowOrigin::list(origins))
        .allow_methods([Method::POST, Method::GET])
        .allow_headers([
            header::AUTHORIZATION,
            header::CONTENT_TYPE,
            header("x-grpc-web"),
            header("x-user-agent"),
            header("grpc-timeout"),
        ])
        .expose_headers([
            header("grpc-status"),
            header("grpc-message"),
            header("grpc-status-details-bin"),
        ])
        .max_age(CORS_MAX_AGE))
}

/// Load the listener's files and tokens, and bind it.
pub async fn bind(remote: &Remote, policy: &mut auth::Policy) -> Result<Listener, Error> {
    let tls = server_config(&remote.tls)?;
    let cors = cors(&remote.cors_origins)?;
    policy.tokens = auth::Tokens::load(&remote.tokens).map_err(|e| Error::Config(e.to_string()))?;
    if policy.tokens.is_empty() {
        tracing::warn!(tokens = %remote.tokens.display(), "no tokens: every remote call will be refused");
    }
    let tcp = TcpListener::bind(remote.listen)
        .await
        .map_err(|e| Error::Listen {
            addr: remote.listen,
            reason: e.to_string(),
        })?;
    tracing::info!(
        addr = %remote.listen,
        mtls = remote.tls.client_ca.is_some(),
        tokens = policy.tokens.len(),
        cors_origins = ?remote.cors_origins,
        "listening (TLS; gRPC, grpc-web and the dashboard at https://{}/)",
        remote.listen
    );
    Ok(Listener {
        tcp,
        tls: Arc::new(tls),
        cors,
    })
}

/// The connections of `tcp` once their TLS handshake is done, admitted and
/// guarded by `gate` (a connection over a cap, its address's or the
/// listener's, is closed at once; its handshake and preface, then its first
/// call with a valid token, must come in time). Handshakes run on tasks of
/// their own, so that a slow client does not hold the others up; accepting
/// stops when the stream is dropped.
pub fn incoming(
    tcp: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    gate: conns::Gate,
) -> ReceiverStream<std::io::Result<conns::Guarded<TlsStream<TcpStream>>>> {
    let (tx, rx) = tokio::sync::mpsc::channel(ACCEPT_BACKLOG);
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    tokio::spawn(async move {
        loop {
            let (stream, peer) = tokio::select! {
                _ = tx.closed() => return,
                accepted = tcp.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(err) => {
                        tracing::debug!(%err, "accept failed");
                        // Out of file descriptors, say: do not spin.
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            let slot = match gate.admit(conns::Peer::of_addr(peer)) {
                Ok(slot) => slot,
                Err(why) => {
                    tracing::debug!(%peer, %why, "TLS connection closed");
                    continue;
                }
            };
            if let Err(err) = gate.keep_alive(&stream) {
                tracing::debug!(%peer, %err, "cannot set TCP keepalive: connection closed");
                continue;
            }
            let (acceptor, tx, gate) = (acceptor.clone(), tx.clone(), gate.clone());
            tokio::spawn(async move {
                let deadline = gate.handshake_deadline(&slot);
                match tokio::time::timeout_at(deadline, acceptor.accept(stream)).await {
                    Ok(Ok(tls)) => {
                        let _ = tx.send(Ok(gate.guard(tls, slot))).await;
                    }
                    Ok(Err(err)) => tracing::debug!(%peer, %err, "TLS handshake failed"),
                    Err(_) => {
                        gate.handshake_timed_out();
                        tracing::debug!(%peer, "TLS handshake timed out");
                    }
                }
            });
        }
    });
    ReceiverStream::new(rx)
}

/// What the listener serves: `grpc` (every gRPC service, each also as
/// grpc-web) and the dashboard at `/`; other paths are UNIMPLEMENTED to gRPC
/// callers and 404 to the rest.
pub fn routes(grpc: tonic::service::Routes) -> tonic::service::Routes {
    grpc.into_axum_router()
        .merge(dashboard::router())
        .fallback(not_found)
        .into()
}

async fn not_found(uri: Uri, headers: HeaderMap) -> Response {
    let grpc = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"));
    if grpc {
        let status = tonic::Status::unimplemented(format!(
            "{} is not a method of this daemon (profd.v1.Profiler, grpc.health.v1.Health, server reflection)",
            uri.path()
        ));
        status.into_http::<axum::body::Body>()
    } else {
        (StatusCode::NOT_FOUND, "not found: the dashboard is at /\n").into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn files(dir: &Path, cert: &str, key: &str) -> auth::TlsFiles {
        std::fs::write(dir.join("cert.pem"), cert).unwrap();
        std::fs::write(dir.join("key.pem"), key).unwrap();
        auth::TlsFiles {
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
            client_ca: None,
        }
    }

    #[test]
    fn bad_tls_files_are_named() {
        let dir = std::env::temp_dir().join(format!("profd-remote-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let err = |f: &auth::TlsFiles| server_config(f).unwrap_err().to_string();
        let e = err(&files(&dir, "not a certificate\n", ""));
        assert!(
            e.starts_with("--tls-cert ") && e.contains("no PEM certificate"),
            "{e}"
        );
        let missing = auth::TlsFiles {
            cert: PathBuf::from("/nonexistent/cert.pem"),
            key: PathBuf::from("/nonexistent/key.pem"),
            client_ca: None,
        };
        assert!(err(&missing).contains("--tls-cert /nonexistent/cert.pem"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn cors_origins_must_be_header_values() {
        assert!(cors(&["https://a.example".into()]).is_ok());
        assert!(cors(&[]).is_ok());
        let e = cors(&["https://a.example\n".into()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a header value"), "{e}");
    }
}
