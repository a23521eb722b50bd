//! Unit tests of `error`.
use super::*;

#[test]
fn status_renders_code_and_message() {
    let e = Error::from(tonic::Status::not_found("no process with pid 99999"));
    assert_eq!(e.to_string(), "not found: no process with pid 99999");
    let e = Error::from(tonic::Status::unavailable(""));
    assert_eq!(e.to_string(), "unavailable");
}

#[test]
fn auth_statuses_render() {
    let e = Error::from(tonic::Status::unauthenticated("no bearer token"));
    assert_eq!(e.to_string(), "unauthenticated: no bearer token");
    let e = Error::from(tonic::Status::permission_denied("read-only token"));
    assert_eq!(e.to_string(), "permission denied: read-only token");
}

#[derive(Debug)]
struct Chained(&'static str, Option<Box<Chained>>);

impl std::fmt::Display for Chained {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for Chained {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.1.as_deref().map(|e| e as _)
    }
}

fn chain(messages: &[&'static str]) -> Chained {
    messages
        .iter()
        .rev()
        .fold(None, |source, m| Some(Chained(m, source.map(Box::new))))
        .unwrap()
}

#[test]
fn error_chain_keeps_the_useful_parts() {
    let e = chain(&[
        "transport error",
        "error trying to connect",
        "invalid peer certificate: UnknownIssuer",
    ]);
    assert_eq!(
        error_chain(&e),
        "error trying to connect: invalid peer certificate: UnknownIssuer"
    );
    let e = chain(&["tcp connect error: refused", "refused"]);
    assert_eq!(error_chain(&e), "tcp connect error: refused");
    assert_eq!(error_chain(&chain(&["transport error"])), "transport error");
}

#[test]
fn local_transport_status_gets_its_reason() {
    let source = chain(&[
        "connection error",
        "received fatal alert: CertificateRequired",
    ]);
    let mut status = tonic::Status::unknown("transport error");
    status.set_source(std::sync::Arc::new(source));
    assert_eq!(
        status_line(&status),
        "unknown error: connection error: received fatal alert: CertificateRequired"
    );
}

#[test]
fn remote_errors_name_the_url() {
    let e = Error::Remote {
        url: "https://127.0.0.1:7443".into(),
        reason: "invalid peer certificate: UnknownIssuer".into(),
    };
    assert_eq!(
        e.to_string(),
        "cannot connect to https://127.0.0.1:7443: invalid peer certificate: UnknownIssuer"
    );
}

#[test]
fn broken_pipe_is_recognised() {
    let e = Error::Output(io::Error::from(io::ErrorKind::BrokenPipe));
    assert!(e.is_broken_pipe());
    let e = Error::Output(io::Error::from(io::ErrorKind::Other));
    assert!(!e.is_broken_pipe());
}

/// The no-daemon line names the socket and the service, and says why no
/// private daemon stood in, with what would start one.
#[test]
fn no_daemon_names_the_fix() {
    let line = |why| {
        Error::NoDaemon {
            path: "/run/profd/profd.sock".into(),
            why,
        }
        .to_string()
    };
    for why in [
        NoPrivate::NotProfiling,
        NoPrivate::NotRoot,
        NoPrivate::NotBuilt,
    ] {
        let s = line(why);
        assert!(
            s.starts_with("no daemon is running at /run/profd/profd.sock; start the service"),
            "{s}"
        );
        assert!(s.contains("systemctl start profd"), "{s}");
    }
    let s = line(NoPrivate::NotProfiling);
    assert!(s.contains("only the commands that profile"), "{s}");
    assert!(!s.contains("as root"), "{s}");
    assert!(line(NoPrivate::NotRoot).contains("run profctl as root"));
    let s = line(NoPrivate::NotBuilt);
    assert!(s.contains("built without a private daemon"), "{s}");
    assert!(s.contains("--socket PATH"), "{s}");
}
