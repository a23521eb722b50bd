//! grpc-web and plain HTTP on the TLS listener with curl: a request's
//! headers and body to files, the reply parsed back; grpc-web framing (a
//! flag byte, a 4-byte length, the message; trailers in a 0x80 frame or in
//! the headers of a trailers-only reply) and percent-encoded grpc-message.

use std::path::Path;
use std::process::Command;

use profd_e2e::{path_str, unique_dir};
use prost::Message;

/// One HTTP exchange: the protocol curl used, the status, the headers
/// (names in lowercase) and the body.
pub struct Reply {
    pub version: String,
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub what: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn describe(&self) -> String {
        format!(
            "{}\nHTTP/{} {}\n{}\n{} body bytes: {}",
            self.what,
            self.version,
            self.status,
            self.headers
                .iter()
                .map(|(n, v)| format!("{n}: {v}"))
                .collect::<Vec<_>>()
                .join("\n"),
            self.body.len(),
            String::from_utf8_lossy(&self.body[..self.body.len().min(400)])
        )
    }
}

/// `curl HTTP_VERSION args... BASE/PATH`, trusting only the CA `ca`; fails
/// the test unless curl got a reply.
pub fn curl(base: &str, ca: &Path, http: &str, path: &str, args: &[&str]) -> Reply {
    let dir = unique_dir("curl");
    let (headers, body) = (dir.join("headers"), dir.join("body"));
    let url = format!("{base}{path}");
    let mut full = vec![
        "-sS",
        http,
        "--cacert",
        path_str(ca),
        "--max-time",
        "30",
        "-D",
        path_str(&headers),
        "-o",
        path_str(&body),
        "-w",
        "%{http_version}",
    ];
    full.extend_from_slice(args);
    full.push(&url);
    let out = Command::new("curl")
        .args(&full)
        .output()
        .unwrap_or_else(|e| panic!("cannot run curl (install Debian's curl): {e}"));
    let what = format!("curl {}", full.join(" "));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&headers).expect("read curl's headers");
    // The last block is the final response.
    let block = text
        .split("\r\n\r\n")
        .filter(|b| !b.trim().is_empty())
        .last()
        .unwrap_or_else(|| panic!("{what}: no response headers"));
    let mut lines = block.lines();
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{what}: status line {status_line:?}"));
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Reply {
        version: String::from_utf8_lossy(&out.stdout).trim().to_string(),
        status,
        headers,
        body: std::fs::read(&body).unwrap_or_default(),
        what,
    }
}

/// A grpc-web call: one framed message POSTed as
/// `application/grpc-web+proto`, with a bearer token when given.
pub fn grpc_web(
    base: &str,
    ca: &Path,
    http: &str,
    method: &str,
    token: Option<&str>,
    message: &[u8],
    extra: &[&str],
) -> Reply {
    let mut framed = vec![0u8];
    framed.extend_from_slice(&(message.len() as u32).to_be_bytes());
    framed.extend_from_slice(message);
    let request = unique_dir("grpc-web").join("request");
    std::fs::write(&request, framed).expect("write the request body");
    let data = format!("@{}", path_str(&request));
    let auth = token.map(|t| format!("authorization: Bearer {t}"));
    let mut args = vec![
        "-X",
        "POST",
        "-H",
        "content-type: application/grpc-web+proto",
        "-H",
        "x-grpc-web: 1",
        "--data-binary",
        &data,
    ];
    if let Some(auth) = &auth {
        args.extend(["-H", auth.as_str()]);
    }
    args.extend_from_slice(extra);
    curl(base, ca, http, &format!("/{method}"), &args)
}

/// The grpc-web frames of a reply body: (flags, payload).
pub fn frames(reply: &Reply) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    let mut rest = &reply.body[..];
    while !rest.is_empty() {
        assert!(rest.len() >= 5, "a cut frame header:\n{}", reply.describe());
        let len = u32::from_be_bytes(rest[1..5].try_into().unwrap()) as usize;
        assert!(rest.len() >= 5 + len, "a cut frame:\n{}", reply.describe());
        out.push((rest[0], rest[5..5 + len].to_vec()));
        rest = &rest[5 + len..];
    }
    out
}

/// A reply's gRPC status and message: from its headers (a trailers-only
/// reply) or from its trailer frame (flag 0x80).
pub fn grpc_status(reply: &Reply) -> (u32, String) {
    let fields: Vec<(String, String)> = match reply.header("grpc-status") {
        Some(_) => reply.headers.clone(),
        None => {
            let trailer = frames(reply)
                .into_iter()
                .find(|(flags, _)| flags & 0x80 != 0)
                .unwrap_or_else(|| panic!("no gRPC status:\n{}", reply.describe()));
            String::from_utf8_lossy(&trailer.1)
                .lines()
                .filter_map(|l| l.split_once(':'))
                .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
                .collect()
        }
    };
    let get = |name: &str| {
        fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    let code = get("grpc-status")
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("a bad grpc-status:\n{}", reply.describe()));
    (
        code,
        percent_decode(&get("grpc-message").unwrap_or_default()),
    )
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The messages of an OK grpc-web reply.
pub fn messages<M: Message + Default>(reply: &Reply) -> Vec<M> {
    assert_eq!(reply.status, 200, "{}", reply.describe());
    assert_eq!(
        reply.header("content-type"),
        Some("application/grpc-web+proto"),
        "{}",
        reply.describe()
    );
    let (code, message) = grpc_status(reply);
    assert_eq!(
        code,
        0,
        "gRPC status {code}: {message}\n{}",
        reply.describe()
    );
    frames(reply)
        .into_iter()
        .filter(|(flags, _)| flags & 0x80 == 0)
        .map(|(_, data)| M::decode(&data[..]).expect("a message of the API"))
        .collect()
}
