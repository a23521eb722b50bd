//! `clickhouse-server`s (Debian's package, 18.16) started by a test on
//! loopback ports of their own, each in a cluster `shards` of one shard per
//! server; a current ClickHouse engine (chdb's) behind the same HTTP
//! interface (`tests/chdb_front.py`); and a plain HTTP/1.1 client for
//! both.
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `clickhouse-server` of a test, stopped (and its data removed) when
/// dropped.
pub struct Server {
    child: Child,
    dir: PathBuf,
    http: u16,
}

/// A user of every test server that needs a password: [`KEYED_PASSWORD`].
pub const KEYED_USER: &str = "profd_keyed";
/// [`KEYED_USER`]'s password.
pub const KEYED_PASSWORD: &str = "k3y-0f-the-keyed-user";

/// A port free on loopback now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Server {
    /// The HTTP and native ports of `n` servers to be.
    pub fn ports(n: usize) -> Vec<(u16, u16)> {
        (0..n).map(|_| (free_port(), free_port())).collect()
    }

    /// Start a server on `ports`, in a cluster `shards` of one shard on
    /// each of `all`.
    pub fn start(name: &str, (http, tcp): (u16, u16), all: &[(u16, u16)]) -> Server {
        let dir = std::env::temp_dir().join(format!("profd-ch-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let shards: String = all
            .iter()
            .map(|(_, tcp)| {
                format!(
                    "<shard><replica><host>127.0.0.1</host><port>{tcp}</port></replica></shard>"
                )
            })
            .collect();
        let d = dir.display();
        let config = format!(
            "<yandex>
  <logger><level>warning</level><console>1</console></logger>
  <http_port>{http}</http_port>
  <tcp_port>{tcp}</tcp_port>
  <listen_host>127.0.0.1</listen_host>
  <path>{d}/data/</path>
  <tmp_path>{d}/tmp/</tmp_path>
  <user_files_path>{d}/user_files/</user_files_path>
  <format_schema_path>{d}/format_schemas/</format_schema_path>
  <users_config>users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <mark_cache_size>5368709</mark_cache_size>
  <remote_servers><shards>{shards}</shards></remote_servers>
</yandex>
"
        );
        std::fs::write(dir.join("config.xml"), config).unwrap();
        std::fs::write(
            dir.join("users.xml"),
            format!(
                "<yandex>
  <profiles><default></default></profiles>
  <users><default><password></password><networks><ip>127.0.0.1</ip></networks>
    <profile>default</profile><quota>default</quota></default>
    <{KEYED_USER}><password>{KEYED_PASSWORD}</password><networks><ip>127.0.0.1</ip></networks>
    <profile>default</profile><quota>default</quota></{KEYED_USER}></users>
  <quotas><default></default></quotas>
</yandex>
"
            ),
        )
        .unwrap();
        let child = Server::spawn(&dir);
        let mut s = Server { child, dir, http };
        s.wait_ready();
        s
    }

    fn spawn(dir: &std::path::Path) -> Child {
        Command::new("clickhouse-server")
            .arg(format!(
                "--config-file={}",
                dir.join("config.xml").display()
            ))
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(
                std::fs::File::options()
                    .create(true)
                    .append(true)
                    .open(dir.join("stderr"))
                    .unwrap(),
            )
            .spawn()
            .expect("clickhouse-server runs (apt-get install clickhouse-server; .ci/run does)")
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok((200, body)) = self.http("GET", "/ping", b"") {
                assert_eq!(body, "Ok.\n");
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "clickhouse-server exited ({status}): {}",
                    std::fs::read_to_string(self.dir.join("stderr")).unwrap_or_default()
                );
            }
            assert!(
                Instant::now() < deadline,
                "clickhouse-server did not answer /ping in 60 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Stop the server (SIGKILL), keeping its data for [`Server::resume`].
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Start a stopped server again on its ports and data.
    pub fn resume(&mut self) {
        self.child = Server::spawn(&self.dir);
        self.wait_ready();
    }

    /// Its HTTP interface: `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.http)
    }

    /// One HTTP/1.1 request: the status and the body.
    pub fn http(&self, method: &str, target: &str, body: &[u8]) -> std::io::Result<(u16, String)> {
        http(self.http, method, target, body)
    }

    /// Run `sql` (with `body` after it, for an INSERT), which must succeed:
    /// its answer.
    pub fn query(&self, sql: &str, body: &[u8]) -> String {
        self.query_with(sql, "", body)
    }

    /// As [`Server::query`], with settings as URL parameters.
    pub fn query_with(&self, sql: &str, settings: &str, body: &[u8]) -> String {
        query(self.http, sql, settings, body)
    }

    pub fn number(&self, sql: &str) -> u64 {
        number(self.http, sql)
    }
}

/// A current ClickHouse engine: chdb's, in a `python3 tests/chdb_front.py`
/// that answers on a loopback port as a server's HTTP interface does.
/// Stopped (and its data removed) when dropped.
pub struct Chdb {
    child: Child,
    dir: PathBuf,
    http: u16,
}

impl Chdb {
    /// Start the front, its data in a directory of its own.
    pub fn start(name: &str) -> Chdb {
        let dir = std::env::temp_dir().join(format!("profd-chdb-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("chdb_front.py");
        let stderr = std::fs::File::create(dir.join("stderr")).unwrap();
        let mut child = Command::new("python3")
            .arg(&script)
            .arg(dir.join("data"))
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("python3 runs");
        let mut line = String::new();
        let read = BufReader::new(child.stdout.take().unwrap()).read_line(&mut line);
        let Some(http) = read.ok().and_then(|_| line.trim().parse().ok()) else {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{} did not start (pip install chdb; .ci/run does): {}",
                script.display(),
                std::fs::read_to_string(dir.join("stderr")).unwrap_or_default()
            );
        };
        Chdb { child, dir, http }
    }

    /// Its HTTP interface: `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.http)
    }

    /// Run `sql` (with `body` after it, for an INSERT), which must succeed:
    /// its answer.
    pub fn query(&self, sql: &str, body: &[u8]) -> String {
        query(self.http, sql, "", body)
    }

    pub fn number(&self, sql: &str) -> u64 {
        number(self.http, sql)
    }
}

impl Drop for Chdb {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One HTTP/1.1 request to loopback `port`: the status and the body.
fn http(port: u16, method: &str, target: &str, body: &[u8]) -> std::io::Result<(u16, String)> {
    let mut c = TcpStream::connect(("127.0.0.1", port))?;
    c.set_read_timeout(Some(Duration::from_secs(60)))?;
    write!(
        c,
        "{method} {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )?;
    c.write_all(body)?;
    let mut answer = Vec::new();
    c.read_to_end(&mut answer)?;
    let text = String::from_utf8_lossy(&answer);
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    Ok((
        status,
        if chunked {
            unchunk(rest)
        } else {
            rest.to_string()
        },
    ))
}

/// `sql` (then `body`) run by the server on `port`, which must succeed:
/// its answer.
fn query(port: u16, sql: &str, settings: &str, body: &[u8]) -> String {
    let target = format!("/?query={}{settings}", escape(sql));
    let (status, answer) = http(port, "POST", &target, body).unwrap();
    assert_eq!(status, 200, "{sql}\n→ {answer}");
    answer
}

fn number(port: u16, sql: &str) -> u64 {
    let a = query(port, sql, "", b"");
    a.trim().parse().unwrap_or_else(|_| panic!("{sql} → {a:?}"))
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn unchunk(s: &str) -> String {
    let (mut out, mut rest) = (String::new(), s);
    while let Some((size, after)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || after.len() < n {
            break;
        }
        out.push_str(&after[..n]);
        rest = after[n..].trim_start_matches("\r\n");
    }
    out
}

/// Percent-encoding of a URL query value.
fn escape(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
