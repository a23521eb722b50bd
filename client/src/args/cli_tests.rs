//! Unit tests of `cli`: parsing and validation of every command.
use super::*;

fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
    Cli::try_parse_from(std::iter::once("profctl").chain(args.iter().copied()))
}

#[test]
fn cli_is_well_formed() {
    use clap::CommandFactory;
    Cli::command().debug_assert();
}

#[test]
fn attach_defaults() {
    let cli = parse(&["attach", "1234"]).unwrap();
    let Command::Attach(a) = cli.command else {
        panic!("not attach")
    };
    assert_eq!(a.pid, 1234);
    let req = a.options.attach_request(a.pid);
    assert_eq!(req.pid, 1234);
    assert_eq!(req.frequency_hz, None);
    assert_eq!(req.duration_ms, 0);
    assert_eq!(req.event, api::Event::CpuClock as i32);
    assert_eq!(req.unwind, api::Unwind::Auto as i32);
    assert_eq!(req.stack_bytes, 0);
    assert_eq!(a.options.interval_ms(), 1000);
    assert_eq!(a.options.row_limit(), Some(DEFAULT_TOP));
}

#[test]
fn attach_options() {
    let cli = parse(&[
        "attach",
        "7",
        "--freq",
        "99",
        "--duration",
        "1.5",
        "--interval",
        "0.25",
        "--top",
        "0",
        "--format",
        "json",
        "--event",
        "cycles",
        "--unwind",
        "dwarf",
        "--stack-bytes",
        "8192",
    ])
    .unwrap();
    let Command::Attach(a) = cli.command else {
        panic!("not attach")
    };
    let req = a.options.attach_request(7);
    assert_eq!(req.frequency_hz, Some(99));
    assert_eq!(req.duration_ms, 1500);
    assert_eq!(req.event, api::Event::Cycles as i32);
    assert_eq!(req.unwind, api::Unwind::Dwarf as i32);
    assert_eq!(req.stack_bytes, 8192);
    assert_eq!(a.options.interval_ms(), 250);
    assert_eq!(a.options.row_limit(), None);
    assert_eq!(a.options.format, Format::Json);
}

#[test]
fn unwind_modes() {
    for (arg, want) in [
        ("auto", api::Unwind::Auto),
        ("fp", api::Unwind::Fp),
        ("dwarf", api::Unwind::Dwarf),
    ] {
        let cli = parse(&["run", "--unwind", arg, "--", "true"]).unwrap();
        let Command::Run(r) = cli.command else {
            panic!("not run")
        };
        assert_eq!(r.options.attach_request(1).unwind, want as i32, "{arg}");
    }
}

#[test]
fn json_shows_all_rows_unless_top_given() {
    let cli = parse(&["attach", "7", "--format", "json"]).unwrap();
    let Command::Attach(a) = cli.command else {
        panic!("not attach")
    };
    assert_eq!(a.options.row_limit(), None);
    let cli = parse(&["attach", "7", "--format", "json", "--top", "5"]).unwrap();
    let Command::Attach(a) = cli.command else {
        panic!("not attach")
    };
    assert_eq!(a.options.row_limit(), Some(5));
}

#[test]
fn bad_values_are_usage_errors() {
    for args in [
        &["attach", "7", "--freq", "abc"][..],
        &["attach", "7", "--duration", "-1"],
        &["attach", "7", "--duration", "nan"],
        &["attach", "7", "--interval", "0.01"],
        &["attach", "7", "--unwind", "lbr"],
        &["attach", "7", "--stack-bytes", "-8"],
        &["attach", "7", "--stack-bytes", "16k"],
        &["attach", "x"],
        &["run"],
        &["stop"],
    ] {
        assert!(parse(args).is_err(), "{args:?} parsed");
    }
}

#[test]
fn run_takes_the_command_after_dashes() {
    let cli = parse(&["run", "--freq", "99", "--", "sh", "-c", "echo hi", "--freq"]).unwrap();
    let Command::Run(r) = cli.command else {
        panic!("not run")
    };
    assert_eq!(r.options.freq, Some(99));
    assert_eq!(r.command, ["sh", "-c", "echo hi", "--freq"]);
}

#[test]
fn run_without_dashes() {
    let cli = parse(&["run", "--duration", "2", "sleep", "1"]).unwrap();
    let Command::Run(r) = cli.command else {
        panic!("not run")
    };
    assert_eq!(r.options.duration, Some(Duration::from_secs(2)));
    assert_eq!(r.command, ["sleep", "1"]);
}

#[test]
fn window_and_no_tui() {
    let cli = parse(&["attach", "7", "--window", "5", "--no-tui"]).unwrap();
    let Command::Attach(a) = cli.command else {
        panic!("not attach")
    };
    assert_eq!(a.options.window_s(), 5);
    assert!(a.options.no_tui);
    let cli = parse(&["attach", "7"]).unwrap();
    let Command::Attach(a) = cli.command else {
        panic!("not attach")
    };
    assert_eq!(a.options.window_s(), 0);
    assert!(!a.options.no_tui);
    for bad in ["0", "601", "x"] {
        assert!(parse(&["attach", "7", "--window", bad]).is_err(), "{bad}");
    }
}

fn report_view(args: &[&str]) -> Result<ReportView, String> {
    let mut full = vec!["report", "12"];
    full.extend_from_slice(args);
    let Command::Report(r) = parse(&full).unwrap().command else {
        panic!("not report")
    };
    assert_eq!(r.source(), ReportSource::Session(12));
    r.view().map_err(|e| e.to_string())
}

#[test]
fn report_views() {
    assert_eq!(
        report_view(&[]),
        Ok(ReportView::Flat {
            limit: Some(20),
            sort: SortArg::Exclusive
        })
    );
    assert_eq!(
        report_view(&["--top", "0"]),
        Ok(ReportView::Flat {
            limit: None,
            sort: SortArg::Exclusive
        })
    );
    assert_eq!(
        report_view(&["--tree", "--bottom-up", "--min-pct", "2", "--depth", "3"]),
        Ok(ReportView::Tree(api::TreeRequest {
            bottom_up: true,
            min_pct: 2.0,
            max_depth: 3
        }))
    );
    assert!(matches!(report_view(&["--hot-path"]), Ok(ReportView::HotPath(t)) if !t.bottom_up));
    assert_eq!(report_view(&["--threads"]), Ok(ReportView::Threads));
    assert_eq!(
        report_view(&["--lines", "#4"]),
        Ok(ReportView::Lines(api::FunctionRef {
            id: 4,
            name: String::new()
        }))
    );
    let leaf = api::FunctionRef {
        id: 0,
        name: "leaf_b".into(),
    };
    assert_eq!(
        report_view(&["--callers", "leaf_b"]),
        Ok(ReportView::CallerCallee {
            function: leaf.clone(),
            callers: true,
            callees: false
        })
    );
    assert_eq!(
        report_view(&["--callers", "leaf_b", "--callees", "leaf_b"]),
        Ok(ReportView::CallerCallee {
            function: leaf,
            callers: true,
            callees: true
        })
    );
    assert!(report_view(&["--callers", "a", "--callees", "b"]).is_err());
    assert!(report_view(&["--bottom-up"]).is_err());
    for conflict in [
        &["report", "1", "--tree", "--threads"][..],
        &["report", "1", "--hot-path", "--callers", "f"],
        &["report", "1", "--lines", "f", "--callees", "f"],
        &["report", "1", "--min-pct", "101"],
    ] {
        assert!(parse(conflict).is_err(), "{conflict:?}");
    }
}

#[test]
fn report_source_is_a_file_when_one_exists() {
    let Command::Report(r) = parse(&["report", "/tmp/x.pb.gz"]).unwrap().command else {
        panic!("not report")
    };
    assert_eq!(r.source(), ReportSource::File("/tmp/x.pb.gz".into()));
    // A number that names an existing file is that file.
    let dir = std::env::temp_dir().join(format!("profctl-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("42"), b"").unwrap();
    let Command::Report(r) = parse(&["report", dir.join("42").to_str().unwrap()])
        .unwrap()
        .command
    else {
        panic!("not report")
    };
    assert!(matches!(r.source(), ReportSource::File(_)));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn export_and_histogram_args() {
    let Command::Export(e) = parse(&["export", "3", "--format", "svg", "-o", "f.svg"])
        .unwrap()
        .command
    else {
        panic!("not export")
    };
    assert_eq!(
        (e.source(), e.format),
        (ReportSource::Session(3), ExportFormatArg::Svg)
    );
    assert_eq!(e.output, PathBuf::from("f.svg"));
    assert_eq!(api::ExportFormat::from(e.format), api::ExportFormat::Svg);
    let Command::Export(e) = parse(&["export", "3", "--format", "pprof"])
        .unwrap()
        .command
    else {
        panic!("not export")
    };
    assert_eq!(e.output, PathBuf::from("-"));
    assert!(parse(&["export", "3"]).is_err(), "--format is required");

    let Command::Histogram(h) = parse(&[
        "histogram",
        "3",
        "--module",
        "libc.so.6",
        "--offset",
        "0x1040",
        "--scale",
        "16384",
        "--buckets",
        "100",
    ])
    .unwrap()
    .command
    else {
        panic!("not histogram")
    };
    assert_eq!(h.offset, Some(0x1040));
    assert_eq!((h.scale, h.buckets), (Some(16384), Some(100)));
    assert_eq!(h.module.as_deref(), Some("libc.so.6"));
    let Command::Histogram(h) = parse(&["histogram", "3", "--offset", "4160"])
        .unwrap()
        .command
    else {
        panic!("not histogram")
    };
    assert_eq!(h.offset, Some(4160));
    for bad in [
        &["histogram", "3", "--offset", "0xzz"][..],
        &["histogram", "3", "--scale", "0"],
        &["histogram", "3", "--buckets", "0"],
    ] {
        assert!(parse(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn sessions_all_lists_earlier_runs_too() {
    for (args, all) in [
        (&["sessions"][..], false),
        (&["sessions", "--all"][..], true),
    ] {
        let Command::Sessions(s) = parse(args).unwrap().command else {
            panic!("not sessions")
        };
        assert_eq!(s.all, all, "{args:?}");
    }
}

#[test]
fn socket_option_is_global() {
    let cli = parse(&["sessions", "--socket", "/tmp/x.sock"]).unwrap();
    assert_eq!(cli.socket, PathBuf::from("/tmp/x.sock"));
    let cli = parse(&["--socket", "/tmp/y.sock", "info"]).unwrap();
    assert_eq!(cli.socket, PathBuf::from("/tmp/y.sock"));
}

fn target(args: &[&str]) -> Result<Target, String> {
    parse(args).unwrap().target().map_err(|e| e.to_string())
}

fn remote(args: &[&str]) -> Remote {
    match target(args) {
        Ok(Target::Remote(r)) => r,
        other => panic!("not remote: {other:?}"),
    }
}

#[test]
fn no_connect_is_the_socket() {
    let t = target(&["--socket", "/tmp/p.sock", "sessions"]).unwrap();
    assert_eq!(t, Target::Socket("/tmp/p.sock".into()));
}

#[test]
fn connect_https() {
    let r = remote(&[
        "--connect",
        "https://prof.example:7443/",
        "--tls-ca",
        "ca.pem",
        "--token-file",
        "tok",
        "sessions",
    ]);
    assert_eq!(r.url, "https://prof.example:7443");
    assert_eq!(r.domain, "prof.example");
    assert_eq!(r.ca, PathBuf::from("ca.pem"));
    assert_eq!(r.identity, None);
    assert_eq!(r.token_file, Some(PathBuf::from("tok")));
}

#[test]
fn connect_options_are_global() {
    let r = remote(&[
        "info",
        "--connect",
        "https://[::1]:7443",
        "--tls-ca",
        "ca.pem",
        "--tls-cert",
        "me.pem",
        "--tls-key",
        "me.key",
    ]);
    assert_eq!(r.url, "https://[::1]:7443");
    assert_eq!(r.domain, "::1");
    assert_eq!(
        r.identity,
        Some((PathBuf::from("me.pem"), PathBuf::from("me.key")))
    );
}

#[test]
fn tls_domain_overrides_the_host() {
    let r = remote(&[
        "--connect",
        "https://10.0.0.7:7443",
        "--tls-ca",
        "ca.pem",
        "--tls-domain",
        "prof.example",
        "sessions",
    ]);
    assert_eq!(r.url, "https://10.0.0.7:7443");
    assert_eq!(r.domain, "prof.example");
}

#[test]
fn plaintext_connect_is_refused() {
    for url in [
        "http://127.0.0.1:7443",
        "HTTP://h:1",
        "grpc://h:1",
        "unix:///run/x",
    ] {
        let e = target(&["--connect", url, "--tls-ca", "ca.pem", "sessions"]).unwrap_err();
        assert_eq!(e, PLAINTEXT_REFUSED, "{url}");
    }
    assert_eq!(
        PLAINTEXT_REFUSED,
        "plaintext connections are refused: use https://HOST:PORT \
         (profd's TCP listener speaks only TLS)"
    );
}

#[test]
fn malformed_connect_urls_are_refused() {
    for (url, wanted) in [
        ("prof.example:7443", "use https://prof.example:7443"),
        ("https://prof.example:7443/profd", "a path has no meaning"),
        ("https://me@prof.example:7443", "a user name has no meaning"),
        ("https://exa mple", "is not a URL"),
    ] {
        let e = target(&["--connect", url, "--tls-ca", "ca.pem", "sessions"]).unwrap_err();
        assert!(e.contains(wanted), "{url}: {e}");
    }
}

#[test]
fn connect_needs_tls_ca() {
    let e = target(&["--connect", "https://h:7443", "sessions"]).unwrap_err();
    assert!(e.contains("--tls-ca"), "{e}");
}

#[test]
fn tls_cert_and_key_go_together() {
    let base = ["--connect", "https://h:7443", "--tls-ca", "ca.pem"];
    let with = |extra: &[&str]| {
        let mut args = base.to_vec();
        args.extend_from_slice(extra);
        args.push("sessions");
        target(&args)
    };
    let e = with(&["--tls-cert", "me.pem"]).unwrap_err();
    assert!(e.contains("--tls-cert needs --tls-key"), "{e}");
    let e = with(&["--tls-key", "me.key"]).unwrap_err();
    assert!(e.contains("--tls-key needs --tls-cert"), "{e}");
}

#[test]
fn run_with_connect_is_refused() {
    let e = target(&[
        "--connect",
        "https://h:7443",
        "--tls-ca",
        "ca.pem",
        "run",
        "--",
        "sleep",
        "1",
    ])
    .unwrap_err();
    assert_eq!(
        e,
        "profctl run starts COMMAND on this machine; with --connect, start it on the \
         daemon's machine and use profctl attach PID"
    );
}

#[test]
fn remote_options_need_connect() {
    let e = target(&["--token-file", "tok", "sessions"]).unwrap_err();
    assert!(
        e.starts_with("--token-file applies only with --connect"),
        "{e}"
    );
    for flag in ["--tls-ca", "--tls-cert", "--tls-key", "--tls-domain"] {
        let e = target(&[flag, "x", "sessions"]).unwrap_err();
        assert_eq!(e, format!("{flag} applies only with --connect"));
    }
}

fn query_args(args: &[&str]) -> Result<QueryArgs, clap::Error> {
    let full: Vec<&str> = std::iter::once("query")
        .chain(args.iter().copied())
        .collect();
    match parse(&full)?.command {
        Command::Query(q) => Ok(q),
        other => panic!("not query: {other:?}"),
    }
}

#[test]
fn query_selects_services_processes_and_a_range() {
    let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
    let q = query_args(&[
        "--service",
        "nginx.service",
        "--service",
        "db",
        "--pid",
        "42",
        "--since",
        "15m",
        "--by",
        "process",
        "--namespace",
        "shop",
        "--pod",
        "web-1",
        "--pod",
        "shop/db-0",
    ])
    .unwrap();
    let query = q.query(now).unwrap();
    assert_eq!(query.services, ["nginx.service", "db"]);
    assert_eq!(query.pids, [42]);
    assert_eq!(query.namespaces, ["shop"]);
    assert_eq!(query.pods, ["web-1", "shop/db-0"]);
    assert_eq!(query.from_unix_ms, (1_000_000 - 900) * 1000);
    assert_eq!(query.to_unix_ms, 0, "up to now");
    assert_eq!(query.by, api::GroupBy::Process as i32);
    assert_eq!(
        q.action(),
        Ok(QueryAction::View(ReportView::Flat {
            limit: Some(20),
            sort: SortArg::Exclusive
        }))
    );

    for (since, secs) in [("30s", 30), ("2h", 7200), ("1d", 86_400)] {
        let q = query_args(&["--since", since]).unwrap();
        assert_eq!(
            q.query(now).unwrap().from_unix_ms,
            (1_000_000 - secs) * 1000,
            "{since}"
        );
    }
    let q = query_args(&[]).unwrap();
    let all = q.query(now).unwrap();
    assert_eq!((all.from_unix_ms, all.to_unix_ms, all.by), (0, 0, 0));
    assert!(all.services.is_empty() && all.pids.is_empty());
}

#[test]
fn query_times_are_rfc3339_or_unix_seconds() {
    let q = query_args(&["--from", "2026-12-02T09:00:00Z", "--to", "1796205600"]).unwrap();
    let query = q.query(SystemTime::now()).unwrap();
    assert_eq!(query.from_unix_ms, 1_796_202_000_000);
    assert_eq!(query.to_unix_ms, 1_796_205_600_000);
    let q = query_args(&["--from", "1700000000", "--to", "1700000600"]).unwrap();
    let query = q.query(SystemTime::now()).unwrap();
    assert_eq!(
        (query.from_unix_ms, query.to_unix_ms),
        (1_700_000_000_000, 1_700_000_600_000)
    );
    let q = query_args(&["--from", "1700000600", "--to", "1700000000"]).unwrap();
    let err = q.query(SystemTime::now()).unwrap_err().to_string();
    assert!(err.contains("--to") && err.contains("--from"), "{err}");
    for bad in [
        &["--since", "15"][..],
        &["--since", "0s"],
        &["--since", "soon"],
        &["--from", "yesterday"],
        &["--to", "2026-13-01T00:00:00Z"],
        &["--since", "1h", "--from", "1700000000"],
        &["--by", "thread"],
    ] {
        assert!(query_args(bad).is_err(), "{bad:?}");
    }
}

/// Times ago, counted back from now: `now`, `now-6m`, or a duration alone.
#[test]
fn query_times_may_be_relative_to_now() {
    let now = UNIX_EPOCH + Duration::from_secs(1_000_000);
    for (text, ago) in [
        ("now", 0),
        ("now-6m", 360),
        ("now - 2h", 7200),
        ("6m", 360),
        ("1h30m", 5400),
        (" 90s ", 90),
    ] {
        assert_eq!(
            parse_time_at(text, now).unwrap(),
            now - Duration::from_secs(ago),
            "{text}"
        );
    }
    assert_eq!(
        parse_time_at("1000", now).unwrap(),
        UNIX_EPOCH + Duration::from_secs(1000)
    );
    for bad in ["now+6m", "nowish", "now-", "now-soon", "6 furlongs"] {
        let err = parse_time_at(bad, now).unwrap_err().to_string();
        assert!(err.contains(bad.trim()), "{bad}: {err}");
    }
    let err = parse_time_at("yesterday", now).unwrap_err().to_string();
    assert!(err.contains("now-6m"), "{err}");
    // On the command line, against the clock: --from 6m is six minutes ago.
    let before = SystemTime::now();
    let q = query_args(&["--from", "6m", "--to", "now"]).unwrap();
    let query = q.query(SystemTime::now()).unwrap();
    let six_ago = unix_ms(before - Duration::from_secs(360));
    assert!(
        (six_ago..six_ago + 5_000).contains(&query.from_unix_ms),
        "{query:?}"
    );
    assert!(query.to_unix_ms >= unix_ms(before), "{query:?}");
}

#[test]
fn query_takes_report_views_exports_and_list() {
    let q = query_args(&["--since", "1h", "--tree", "--min-pct", "2"]).unwrap();
    assert!(matches!(q.action(), Ok(QueryAction::View(ReportView::Tree(t))) if t.min_pct == 2.0));
    let q = query_args(&["--callers", "malloc"]).unwrap();
    assert!(matches!(
        q.action(),
        Ok(QueryAction::View(ReportView::CallerCallee {
            callers: true,
            ..
        }))
    ));
    let q = query_args(&["--threads"]).unwrap();
    assert_eq!(q.action(), Ok(QueryAction::View(ReportView::Threads)));
    let q = query_args(&["--format", "svg", "-o", "f.svg"]).unwrap();
    assert_eq!(q.action(), Ok(QueryAction::Export(ExportFormatArg::Svg)));
    assert_eq!(q.output, PathBuf::from("f.svg"));
    let q = query_args(&["--list", "--since", "1h"]).unwrap();
    assert_eq!(q.action(), Ok(QueryAction::List));

    let err = query_args(&["--format", "svg", "--tree"])
        .unwrap()
        .action()
        .unwrap_err()
        .to_string();
    assert!(err.contains("--format"), "{err}");
    let err = query_args(&["-o", "x.txt"])
        .unwrap()
        .action()
        .unwrap_err()
        .to_string();
    assert!(err.contains("--format"), "{err}");
    let err = query_args(&["--list", "--hot-path"])
        .unwrap()
        .action()
        .unwrap_err()
        .to_string();
    assert!(err.contains("--list"), "{err}");
    assert!(query_args(&["--list", "--service", "db"]).is_err());
    assert!(query_args(&["--tree", "--threads"]).is_err(), "one view");
}

/// The encoding of `run -o FILE` / `attach -o FILE`: given, or from the name.
fn recording(args: &[&str]) -> Result<Option<(PathBuf, ExportFormatArg)>, String> {
    let Command::Run(r) = parse(args).unwrap().command else {
        panic!("not run")
    };
    r.options.recording().map_err(|e| e.to_string())
}

#[test]
fn run_output_file_and_its_encoding() {
    assert_eq!(recording(&["run", "true"]), Ok(None));
    for (name, format) in [
        ("p.pb.gz", ExportFormatArg::Pprof),
        ("dir/P.PPROF", ExportFormatArg::Pprof),
        ("x.folded", ExportFormatArg::Folded),
        ("x.svg", ExportFormatArg::Svg),
        ("x.speedscope.json", ExportFormatArg::Speedscope),
        ("x.json", ExportFormatArg::Json),
    ] {
        assert_eq!(
            recording(&["run", "-o", name, "--", "true"]),
            Ok(Some((PathBuf::from(name), format))),
            "{name}"
        );
    }
    // --output-format wins over the name, and is the only way for others.
    assert_eq!(
        recording(&[
            "run",
            "-o",
            "x.json",
            "--output-format",
            "speedscope",
            "true"
        ]),
        Ok(Some((PathBuf::from("x.json"), ExportFormatArg::Speedscope)))
    );
    assert_eq!(
        recording(&["run", "-o", "profile", "--output-format", "folded", "true"]),
        Ok(Some((PathBuf::from("profile"), ExportFormatArg::Folded)))
    );
    let unknown = recording(&["run", "-o", "profile.out", "true"]).unwrap_err();
    assert!(unknown.contains("--output-format"), "{unknown}");
    let stdout = recording(&["run", "-o", "-", "true"]).unwrap_err();
    assert!(stdout.contains("file name"), "{stdout}");
    // --format stays the terminal's; --output-format needs -o.
    assert!(parse(&["run", "--output-format", "pprof", "true"]).is_err());
    let Command::Attach(a) = parse(&["attach", "9", "--format", "json", "-o", "a.folded"])
        .unwrap()
        .command
    else {
        panic!("not attach")
    };
    assert_eq!(a.options.format, Format::Json);
    assert_eq!(
        a.options.recording(),
        Ok(Some((PathBuf::from("a.folded"), ExportFormatArg::Folded)))
    );
}
