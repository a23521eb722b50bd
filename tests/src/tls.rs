//! TLS material for the remote tests, made with rcgen: a test CA, a server
//! certificate for `localhost` and `127.0.0.1` and a client certificate
//! signed by it, and a second ("rogue") CA with a client certificate of its
//! own that the daemon must not accept, written as PEM files; bearer tokens
//! made with `profd token`, and a free loopback port for a listener.

use std::io::Write;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use crate::daemon::run_profd;
use crate::path_str;
use crate::users::chmod;

/// The PEM files of one set of test TLS material.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The CA that signed the server and client certificates.
    pub ca: PathBuf,
    /// Server certificate for DNS `localhost` and IP `127.0.0.1`.
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    /// Client certificate signed by [`TlsFiles::ca`].
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    /// A CA unrelated to the daemon's.
    pub rogue_ca: PathBuf,
    /// A client certificate signed by [`TlsFiles::rogue_ca`].
    pub rogue_client_cert: PathBuf,
    pub rogue_client_key: PathBuf,
}

fn new_ca(common_name: &str) -> (String, Issuer<'static, KeyPair>) {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
    ];
    let key = KeyPair::generate().expect("generate the CA key");
    let cert = params.self_signed(&key).expect("self-sign the CA");
    (cert.pem(), Issuer::new(params, key))
}

/// A leaf certificate for `names` signed by `issuer`: (certificate PEM, key PEM).
fn new_leaf(
    common_name: &str,
    names: &[&str],
    usage: ExtendedKeyUsagePurpose,
    issuer: &Issuer<'_, KeyPair>,
) -> (String, String) {
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let mut params = CertificateParams::new(names).expect("leaf params");
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.use_authority_key_identifier_extension = true;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![usage];
    let key = KeyPair::generate().expect("generate a leaf key");
    let cert = params.signed_by(&key, issuer).expect("sign a leaf");
    (cert.pem(), key.serialize_pem())
}

fn write(dir: &Path, name: &str, contents: &str, mode: u32) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, contents)
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    chmod(&path, mode);
    path
}

/// Makes fresh TLS material and writes it into `dir` (keys mode 0600).
pub fn make_tls(dir: &Path) -> TlsFiles {
    let (ca_pem, ca) = new_ca("profd-e2e test CA");
    let (server_pem, server_key) = new_leaf(
        "localhost",
        &["localhost", "127.0.0.1"],
        ExtendedKeyUsagePurpose::ServerAuth,
        &ca,
    );
    let (client_pem, client_key) = new_leaf(
        "profd-e2e client",
        &["profd-e2e-client"],
        ExtendedKeyUsagePurpose::ClientAuth,
        &ca,
    );
    let (rogue_ca_pem, rogue_ca) = new_ca("profd-e2e rogue CA");
    let (rogue_pem, rogue_key) = new_leaf(
        "profd-e2e rogue client",
        &["profd-e2e-client"],
        ExtendedKeyUsagePurpose::ClientAuth,
        &rogue_ca,
    );
    TlsFiles {
        ca: write(dir, "ca.pem", &ca_pem, 0o644),
        server_cert: write(dir, "server.pem", &server_pem, 0o644),
        server_key: write(dir, "server.key", &server_key, 0o600),
        client_cert: write(dir, "client.pem", &client_pem, 0o644),
        client_key: write(dir, "client.key", &client_key, 0o600),
        rogue_ca: write(dir, "rogue-ca.pem", &rogue_ca_pem, 0o644),
        rogue_client_cert: write(dir, "rogue-client.pem", &rogue_pem, 0o644),
        rogue_client_key: write(dir, "rogue-client.key", &rogue_key, 0o600),
    }
}

/// A port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind 127.0.0.1:0")
        .port()
}

/// The lowercase hex SHA-256 of `text`, from `sha256sum`.
pub fn sha256_hex(text: &str) -> String {
    let mut child = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run sha256sum");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write to sha256sum");
    let out = child.wait_with_output().expect("sha256sum");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .expect("a digest")
        .to_string()
}

/// `profd token --tokens FILE --name NAME --role ROLE --user USER`: returns
/// the token it printed, after checking that the file holds its hash and
/// not the token, and is mode 0600.
pub fn new_token(tokens: &Path, name: &str, role: &str, user: &str) -> String {
    let out = run_profd(&[
        "token",
        "--tokens",
        path_str(tokens),
        "--name",
        name,
        "--role",
        role,
        "--user",
        user,
    ]);
    out.assert_success();
    let token = out.stdout.trim().to_string();
    assert!(
        !token.is_empty() && !token.contains(char::is_whitespace),
        "`profd token` did not print one token:\n{}",
        out.describe()
    );
    let text = std::fs::read_to_string(tokens).expect("read the tokens file");
    let want = format!("sha256:{} {name} {role} {user}", sha256_hex(&token));
    assert!(
        text.lines().any(|l| l.trim() == want),
        "the tokens file has no line {want:?}:\n{text}"
    );
    assert!(
        !text.contains(&token),
        "the tokens file holds the token itself:\n{text}"
    );
    let mode = std::fs::metadata(tokens)
        .expect("stat")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600, "mode of the tokens file profd made");
    token
}

/// Writes a token into a 0600 file, with a newline as `profd token > FILE` would.
pub fn token_file(dir: &Path, name: &str, token: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("{token}\n")).expect("write a token file");
    chmod(&path, 0o600);
    path
}

/// The flags of a TLS listener on `addr` with this material and tokens file:
/// `--listen ADDR --tls-cert .. --tls-key .. --tokens ..`.
pub fn listen_args<'a>(addr: &'a str, tls: &'a TlsFiles, tokens: &'a Path) -> Vec<&'a str> {
    vec![
        "--listen",
        addr,
        "--tls-cert",
        path_str(&tls.server_cert),
        "--tls-key",
        path_str(&tls.server_key),
        "--tokens",
        path_str(tokens),
    ]
}
