//! Sink credentials never reach the log or the state directory: a running
//! `profd --continuous` at debug log level with sinks of every kind that
//! fail over their credentials (a real ClickHouse refusing the password,
//! the in-test Pyroscope and OTLP receivers answering 401 and
//! `UNAUTHENTICATED`) or over TLS (a certificate the daemon does not
//! trust), each attempt seen to fail; then everything it wrote is searched
//! for every secret. Root needed.

use super::otlp::{certificates, Answer, Collector};
use super::pyroscope::Receiver;
use super::sink_daemons::{info, workload, STEP};
use base64::Engine;
use profd_common::api;
use profd_e2e::cgroups::Cgroup;
use profd_e2e::clickhouse::Server;
use profd_e2e::metrics::scrape;
use profd_e2e::{path_str, require_root_and_perf, serial, unique_dir, Daemon};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::runtime::Runtime;

/// A secret no other text of the run holds by chance.
fn secret(what: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("{what}-S3cr3t-{}-{nanos:09}", std::process::id())
}

/// Every file under `dir`, recursively.
fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if entry.file_type().unwrap().is_dir() {
            files(&path, out);
        } else {
            out.push(path);
        }
    }
}

/// The texts to search: the log, and every file of the state directory
/// (a gzip'd one also unpacked), by name.
fn written(d: &Daemon) -> Vec<(String, Vec<u8>)> {
    let mut out = vec![("the log".to_string(), d.log().into_bytes())];
    let mut paths = Vec::new();
    files(d.state_dir().expect("a state directory"), &mut paths);
    for path in paths {
        let bytes = std::fs::read(&path).unwrap();
        if bytes.starts_with(&[0x1f, 0x8b]) {
            let mut unpacked = Vec::new();
            if flate2::read::MultiGzDecoder::new(&bytes[..])
                .read_to_end(&mut unpacked)
                .is_ok()
            {
                out.push((format!("{} (unpacked)", path.display()), unpacked));
            }
        }
        out.push((path.display().to_string(), bytes));
    }
    out
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// Every sink kind fails over its credentials or over TLS, at debug log
/// level; once each has tried and failed, none of the secrets (nor the
/// base64 of a basic pair) is in the log, the state directory (the spool
/// included), `Info` or `/metrics`.
#[test]
fn no_secret_is_logged_or_kept_when_sinks_fail() {
    let _serial = serial();
    require_root_and_perf();
    let rt = Runtime::new().unwrap();
    let ports = Server::ports(1);
    let clickhouse = Server::start("secrets", ports[0], &ports);
    let pyroscope = rt.block_on(Receiver::start());
    pyroscope.answer(&[401; 100_000]);
    let otlp = rt.block_on(Collector::start(Answer::Fail(tonic::Code::Unauthenticated)));
    let (_, cert, key) = certificates();
    let untrusted = rt.block_on(Collector::serve(Answer::Ok(0), Some((cert, key))));
    let tls_url = untrusted.url.clone();
    assert!(tls_url.starts_with("https://localhost:"), "{tls_url}");

    let dir = unique_dir("sink-secrets");
    let file = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, format!("{text}\n")).unwrap();
        path_str(&path).to_string()
    };
    let ch_password = secret("chpw");
    let pyro_token = secret("pyrotok");
    let (pyro_user, pyro_password) = ("pyro-user", secret("pyropw"));
    let otlp_token = secret("otlptok");
    let otlp_header = secret("otlphdr");
    let tls_password = secret("tlspw");
    let tls_token = secret("tlstok");
    let tls_ch_password = secret("tlschpw");
    let basic = |user: &str, password: &str| {
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
    };
    let mut secrets = vec![
        ch_password.clone(),
        pyro_token.clone(),
        pyro_password.clone(),
        basic(pyro_user, &pyro_password),
        otlp_token.clone(),
        otlp_header.clone(),
        tls_password.clone(),
        basic(pyro_user, &tls_password),
        tls_token.clone(),
        tls_ch_password.clone(),
    ];
    // The form X-ClickHouse-Key carries is the password itself; a
    // secret's base64 without its pair is searched for too.
    let alone: Vec<String> = secrets
        .iter()
        .map(|s| base64::engine::general_purpose::STANDARD.encode(s))
        .collect();
    secrets.extend(alone);

    let cg = Cgroup::new(&format!("profd-secrets-{}", std::process::id()));
    let sinks = [
        format!(
            "kind = \"clickhouse\"\nname = \"ch\"\nurl = \"{}\"\nuser = \"default\"\npassword_file = \"{}\"\n",
            clickhouse.url(),
            file("ch.key", &ch_password)
        ),
        format!(
            "kind = \"pyroscope\"\nname = \"pyro-bearer\"\nurl = \"{}\"\ntoken_file = \"{}\"\n",
            pyroscope.url(),
            file("pyro.token", &pyro_token)
        ),
        format!(
            "kind = \"pyroscope\"\nname = \"pyro-basic\"\nurl = \"{}\"\nuser = \"{pyro_user}\"\npassword_file = \"{}\"\n",
            pyroscope.url(),
            file("pyro.key", &pyro_password)
        ),
        format!(
            "kind = \"otlp\"\nname = \"otlp\"\nurl = \"{}\"\ntoken_file = \"{}\"\nheaders = {{ \"X-Api-Key\" = \"{otlp_header}\" }}\n",
            otlp.url,
            file("otlp.token", &otlp_token)
        ),
        format!(
            "kind = \"pyroscope\"\nname = \"tls-pyro\"\nurl = \"{tls_url}\"\nuser = \"{pyro_user}\"\npassword_file = \"{}\"\n",
            file("tls.key", &tls_password)
        ),
        format!(
            "kind = \"otlp\"\nname = \"tls-otlp\"\nurl = \"{tls_url}\"\ntoken_file = \"{}\"\n",
            file("tls.token", &tls_token)
        ),
        format!(
            "kind = \"clickhouse\"\nname = \"tls-ch\"\nurl = \"{tls_url}\"\nuser = \"default\"\npassword_file = \"{}\"\n",
            file("tls-ch.key", &tls_ch_password)
        ),
    ];
    let config = dir.join("profd.toml");
    let mut text = format!(
        "log_level = \"debug\"\n\n[continuous]\nenabled = true\nfrequency = 99\nwindow = 1\nselect = [\"cgroup:{}\"]\n",
        cg.path()
    );
    for s in &sinks {
        text.push_str("\n[[sink]]\n");
        text.push_str(s);
    }
    std::fs::write(&config, text).unwrap();
    let metrics = format!("127.0.0.1:{}", Server::ports(1)[0].0);
    let mut d = Daemon::start_with(&["--config", path_str(&config), "--metrics", &metrics]);
    let _w = workload(&cg);

    // Each sink tried a window and failed as it should.
    let failed = |s: &api::SinkStatus| {
        let dropped = |reason: &str| s.drops.iter().any(|d| d.reason == reason);
        match s.name.as_str() {
            "ch" => (s.retries >= 1 || !s.drops.is_empty()) && s.last_error.contains("password"),
            "pyro-bearer" | "pyro-basic" => dropped("http_401"),
            "otlp" => dropped("grpc_unauthenticated"),
            _ => s.retries >= 1 && s.last_error.contains("certificate"),
        }
    };
    let deadline = Instant::now() + STEP;
    let shown = loop {
        let i = info(&rt, &d);
        assert_eq!(i.sinks.len(), sinks.len());
        if i.sinks.iter().all(failed) {
            break i;
        }
        assert!(
            Instant::now() < deadline,
            "not every sink tried and failed within {STEP:?}: {:#?}\n{}",
            i.sinks,
            d.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(shown.sinks.iter().all(|s| s.windows_sent == 0), "{shown:?}");
    // The secrets were sent: the receivers saw them.
    let got = pyroscope.take();
    let authorization = |want: &str| {
        got.iter()
            .any(|g| g.headers.get("authorization").is_some_and(|v| v == want))
    };
    assert!(authorization(&format!("Bearer {pyro_token}")));
    assert!(authorization(&format!(
        "Basic {}",
        basic(pyro_user, &pyro_password)
    )));
    assert!(otlp.got.lock().unwrap().iter().any(|g| {
        g.metadata
            .get("authorization")
            .is_some_and(|v| v == format!("Bearer {otlp_token}").as_str())
            && g.metadata
                .get("x-api-key")
                .is_some_and(|v| v == otlp_header.as_str())
    }));
    let scraped = scrape(&metrics);
    let status = format!("{shown:?}");
    // Stopped, so that everything it writes on the way out is there too.
    assert!(d.terminate().success(), "{}", d.log());
    let mut texts = written(&d);
    texts.push(("Info".into(), status.into_bytes()));
    texts.push(("/metrics".into(), scraped.into_bytes()));
    let spooled = texts
        .iter()
        .filter(|(name, _)| name.contains("/spool/") && name.ends_with(".window.gz"))
        .count();
    assert!(spooled >= 1, "windows wait in the spools");
    let log = d.log();
    assert!(
        log.contains("DEBUG") && log.contains("cannot deliver"),
        "a debug log of the failures:\n{log}"
    );
    for (name, bytes) in &texts {
        for s in &secrets {
            assert!(!contains(bytes, s), "{name} holds the secret {s:?}");
        }
    }
    eprintln!(
        "{} secrets searched for in {} texts ({} bytes of log, {spooled} spooled windows)",
        secrets.len(),
        texts.len(),
        log.len()
    );
}
