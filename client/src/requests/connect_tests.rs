//! Unit tests of `connect`.
use super::*;

#[tokio::test]
async fn missing_socket_is_absent() {
    let r = connect(Path::new("/nonexistent/dir/x.sock")).await;
    assert!(matches!(r, Err(ConnectError::Absent)));
}

/// Without the private daemon, profctl as root (or not) says so and
/// names the flags that point at a running profd.
#[cfg(not(feature = "private-daemon"))]
#[tokio::test]
async fn missing_daemon_without_a_private_one_names_the_flags() {
    let socket = PathBuf::from("/nonexistent/dir/profd.sock");
    let e = Connection::open(&Target::Socket(socket))
        .await
        .err()
        .unwrap();
    let line = e.to_string();
    assert!(matches!(e, Error::NoDaemon { .. }), "{line}");
    assert!(line.contains("/nonexistent/dir/profd.sock"), "{line}");
    assert!(line.contains("built without a private daemon"), "{line}");
    assert!(line.contains("--socket PATH"), "{line}");
    assert!(line.contains("--connect https://HOST:PORT"), "{line}");
    assert!(!line.contains("as root"), "{line}");
}

#[tokio::test]
async fn socket_without_listener_is_absent() {
    let dir = dir_with(&[]);
    let path = dir.join("s.sock");
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    let r = connect(&path).await;
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(matches!(r, Err(ConnectError::Absent)));
}

/// A self-signed CA certificate (public part only; its key is gone):
/// parses, but verifies nothing any test server presents.
const CA_PEM: &str = "-----BEGIN CERTIFICATE-----
MIIBeTCCAR+gAwIBAgIUQ0ZVgY2qKNg8xd0w1SCJ765Ac18wCgYIKoZIzj0EAwIw
EjEQMA4GA1UEAwwHdGVzdCBDQTAeFw0yNjExMzAwMTIxMzZaFw0zNjExMjcwMTIx
MzZaMBIxEDAOBgNVBAMMB3Rlc3QgQ0EwWTATBgcqhkjOPQIBBggqhkjOPQMBBwNC
AAS02fBeib5fM8LY4KFn5Oy6i0t+5UpWJA/y9m2A6eMGV+1kkcuimdbqopkJSNcB
6GxQhIN22PznJ+yiTgWzQcpbo1MwUTAdBgNVHQ4EFgQUx8m182xWhfzs21XnP5aK
ogA4rfswHwYDVR0jBBgwFoAUx8m182xWhfzs21XnP5aKogA4rfswDwYDVR0TAQH/
BAUwAwEB/zAKBggqhkjOPQQDAgNIADBFAiAwtb0D1+x9TLzulA3KD80S3EMPdylI
7IVsgr1QEgIZMwIhALqqNyhDyAy7jiOZI8ZDCJUx+4K/izkRi1kFb9qFWht1
-----END CERTIFICATE-----
";

fn authorization(auth: &mut Auth) -> Option<String> {
    let request = auth.call(tonic::Request::new(())).unwrap();
    request
        .metadata()
        .get("authorization")
        .map(|v| v.to_str().unwrap().to_string())
}

#[test]
fn interceptor_adds_the_bearer_token() {
    let mut auth = Auth::bearer("s3cret-token").unwrap();
    assert!(auth.has_token());
    assert_eq!(
        authorization(&mut auth).as_deref(),
        Some("Bearer s3cret-token")
    );
    // Every request, not just the first.
    assert_eq!(
        authorization(&mut auth).as_deref(),
        Some("Bearer s3cret-token")
    );
}

#[test]
fn interceptor_without_token_adds_nothing() {
    let mut auth = Auth::none();
    assert!(!auth.has_token());
    assert_eq!(authorization(&mut auth), None);
}

#[test]
fn auth_never_shows_the_token() {
    let auth = Auth::bearer("s3cret-token").unwrap();
    let shown = format!("{auth:?}");
    assert!(!shown.contains("s3cret"), "{shown}");
    assert!(Auth::bearer("two\nlines").is_err());
}

/// A fresh directory with `files` written in it.
fn dir_with(files: &[(&str, &str)]) -> PathBuf {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("profctl-connect-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).unwrap();
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    dir
}

fn token_of(auth: Result<Auth, Error>) -> Option<String> {
    authorization(&mut auth.unwrap()).map(|h| h.strip_prefix("Bearer ").unwrap().to_string())
}

#[test]
fn token_sources_in_order() {
    let dir = dir_with(&[("flag", " from-flag\n"), ("env", "from-env-file\n")]);
    let flag = dir.join("flag");
    let env_file = Some(dir.join("env").into_os_string());
    let env_token = Some(OsString::from("from-env"));
    let t = token_of(token_auth(Some(&flag), env_file.clone(), env_token.clone()));
    assert_eq!(t.as_deref(), Some("from-flag"));
    let t = token_of(token_auth(None, env_file, env_token.clone()));
    assert_eq!(t.as_deref(), Some("from-env-file"));
    let t = token_of(token_auth(None, Some(OsString::new()), env_token));
    assert_eq!(t.as_deref(), Some("from-env"));
    let t = token_of(token_auth(None, None, Some(OsString::from(" padded \n"))));
    assert_eq!(t.as_deref(), Some("padded"));
    assert_eq!(
        token_of(token_auth(None, None, Some(OsString::new()))),
        None
    );
    assert_eq!(token_of(token_auth(None, None, None)), None);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn bad_token_files_are_errors() {
    let dir = dir_with(&[("empty", " \n"), ("binary", "a\u{1}b")]);
    let e = token_auth(Some(&dir.join("empty")), None, None).unwrap_err();
    assert!(e.to_string().contains("holds no token"), "{e}");
    let e = token_auth(Some(&dir.join("binary")), None, None).unwrap_err();
    assert!(e.to_string().contains("printable ASCII"), "{e}");
    assert!(!e.to_string().contains("a\u{1}b"));
    let missing = dir.join("missing");
    let e = token_auth(Some(&missing), None, None).unwrap_err();
    assert!(e.to_string().contains("cannot read token file"), "{e}");
    assert!(e.to_string().contains(&*missing.to_string_lossy()), "{e}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn pem_files_are_checked() {
    let dir = dir_with(&[("ca.pem", CA_PEM), ("junk.pem", "not pem\n")]);
    assert!(read_pem(&dir.join("ca.pem"), "--tls-ca", "CERTIFICATE").is_ok());
    let e = read_pem(&dir.join("junk.pem"), "--tls-ca", "CERTIFICATE").unwrap_err();
    assert!(e.to_string().contains("no PEM certificate"), "{e}");
    let e = read_pem(&dir.join("ca.pem"), "--tls-key", "PRIVATE KEY").unwrap_err();
    assert!(e.to_string().contains("--tls-key"), "{e}");
    assert!(e.to_string().contains("no PEM private key"), "{e}");
    std::fs::remove_dir_all(dir).unwrap();
}

fn remote_at(dir: &Path, port: u16) -> Target {
    Target::Remote(Remote {
        url: format!("https://127.0.0.1:{port}"),
        domain: "127.0.0.1".into(),
        ca: dir.join("ca.pem"),
        identity: None,
        token_file: None,
    })
}

#[tokio::test]
async fn refused_remote_names_the_url_and_reason() {
    let dir = dir_with(&[("ca.pem", CA_PEM)]);
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let line = open_error(dir, port).await;
    assert!(line.contains("refused"), "{line}");
    assert!(!line.contains('\n'), "{line}");
}

/// The error line of connecting to 127.0.0.1:`port` with the CA in
/// `dir` (removed afterwards), checked to name the URL and a reason.
async fn open_error(dir: PathBuf, port: u16) -> String {
    let e = Connection::open(&remote_at(&dir, port))
        .await
        .err()
        .unwrap();
    std::fs::remove_dir_all(dir).unwrap();
    let line = e.to_string();
    let head = format!("cannot connect to https://127.0.0.1:{port}: ");
    assert!(line.starts_with(&head) && line.len() > head.len(), "{line}");
    line
}

#[tokio::test]
async fn plaintext_peer_fails_the_handshake() {
    use tokio::io::AsyncWriteExt;
    let dir = dir_with(&[("ca.pem", CA_PEM)]);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        if let Ok((mut stream, _)) = listener.accept().await {
            let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").await;
        }
    });
    // rustls's reason: what came back was not a TLS record.
    let line = open_error(dir, port).await;
    assert!(line.contains("corrupt message"), "{line}");
    assert!(!line.contains("refused") && !line.contains('\n'), "{line}");
}
