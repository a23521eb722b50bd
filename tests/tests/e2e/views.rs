//! End-to-end tests of views, exports, histograms and the live TUI (issue 4):
//! real kernel, real `profd` and `profctl`, and the outside tools that read
//! the exports (`go tool pprof`, `gprof`, headless Chromium for the SVG,
//! Python's `jsonschema` with speedscope's schema, tmux as the terminal).
//! They need root; without it they fail, never skip.
//!
//! Each test profiles `split` (main → work → {leaf_a 25 %, mid → leaf_b
//! 75 %}) for a few seconds and then reads the ended session, whose figures
//! no longer change, in several ways.

use std::collections::BTreeMap;
use std::time::Duration;

use profd_e2e::terminal::Tmux;
use profd_e2e::views::{self, caller_callee, go_pprof_flat, gprof_flat, rows};
use profd_e2e::{
    bin, build_workload, path_str, unique_dir, Cmd, CmdOutput, Daemon, Harness, Profile, Workload,
    PCT_TOLERANCE,
};

/// Long enough for any test: workloads are killed when the test ends.
const LONG: f64 = 60.0;

fn id(p: &Profile) -> String {
    p.session_id.to_string()
}

/// Runs profctl and fails the test unless it succeeded.
fn ok(daemon: &Daemon, args: &[&str]) -> CmdOutput {
    let out = daemon.profctl(args);
    out.assert_success();
    out
}

/// profd's exclusive counts by function name (rows with one name added up,
/// as pprof shows them), leaving out zeros.
fn assert_near(what: &str, actual: f64, expected: f64, tolerance: f64, context: &str) {
    eprintln!("  {what}: {actual:.2} (expected {expected:.2} ± {tolerance})");
    assert!(
        (actual - expected).abs() <= tolerance,
        "{what} is {actual:.2}, expected {expected:.2} ± {tolerance}:\n{context}"
    );
}

/// One frame of the SVG flame graph as Chromium laid it out.
#[derive(Debug)]
pub(crate) struct SvgFrame {
    /// The function (the title before its figures).
    pub(crate) name: String,
    /// Width of its box, px.
    pub(crate) width: f64,
    /// Displayed (not hidden by a zoom).
    pub(crate) shown: bool,
}

/// Opens the SVG flame graph `svg` in headless Chromium
/// (tests/dashboard/flamegraph.mjs): its frames, the details line with the
/// pointer over `hover`'s frame, and the frames after a click on `zoom`'s.
/// Fails when the page meets any error.
pub(crate) fn svg_in_chromium(svg: &std::path::Path, hover: &str, zoom: &str) -> serde_json::Value {
    let driver = crate::dashboard::dashboard_driver().join("flamegraph.mjs");
    let env = [
        ("PROFD_SVG".to_string(), path_str(svg).to_string()),
        ("PROFD_HOVER".to_string(), hover.to_string()),
        ("PROFD_ZOOM".to_string(), zoom.to_string()),
    ];
    let out = Cmd::spawn_env("node", &[path_str(&driver)], &env).wait(Duration::from_secs(120));
    assert!(
        out.status.success(),
        "Chromium could not show the flame graph:\n{}",
        out.describe()
    );
    let seen: serde_json::Value = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no RESULT line:\n{}", out.describe()));
    assert_eq!(
        seen["problems"],
        serde_json::json!([]),
        "errors in Chromium showing the flame graph"
    );
    seen
}

/// The frames of a `svg_in_chromium` list (`frames`, `zoomed`).
pub(crate) fn svg_frames(frames: &serde_json::Value) -> Vec<SvgFrame> {
    frames
        .as_array()
        .expect("frames")
        .iter()
        .map(|f| SvgFrame {
            name: f["name"].as_str().unwrap_or_default().to_string(),
            width: f["width"].as_f64().unwrap_or(f64::NAN),
            shown: f["shown"] == true,
        })
        .collect()
}

/// The width of `name`'s one frame.
pub(crate) fn svg_width(frames: &[SvgFrame], name: &str) -> f64 {
    let of: Vec<&SvgFrame> = frames.iter().filter(|f| f.name == name).collect();
    assert_eq!(of.len(), 1, "one frame of {name}: {frames:#?}");
    of[0].width
}

/// The pprof export is read by `go tool pprof -top`, whose flat samples are
/// profd's exclusive counts; `profctl report FILE` on it prints the live
/// session's flat table.
#[test]
fn pprof_export_matches_profd_in_go_pprof_and_report() {
    let h = Harness::start();
    let target = Workload::start("split", LONG);
    let p = h.daemon.profile_until(&target, 3000, &[]);
    let file = unique_dir("pprof").join("split.pb.gz");
    ok(
        &h.daemon,
        &[
            "export",
            &id(&p),
            "--format",
            "pprof",
            "-o",
            path_str(&file),
        ],
    );
    let bytes = std::fs::read(&file).expect("read the export");
    assert!(
        bytes.starts_with(&[0x1f, 0x8b]),
        "the pprof export is not gzip'd"
    );

    let (flat, pprof_text) = go_pprof_flat(&file);
    eprintln!("go tool pprof -top:\n{pprof_text}");
    let want = p.exclusive_as_pprof_names();
    assert_eq!(
        flat,
        want,
        "pprof's flat samples differ from profd's exclusive counts\n--- pprof ---\n{pprof_text}\n--- profd ---\n{}",
        p.table()
    );
    assert_eq!(flat.values().sum::<u64>(), p.totals.attributed);

    let live = ok(&h.daemon, &["report", &id(&p), "--top", "0"]);
    let saved = ok(&h.daemon, &["report", path_str(&file), "--top", "0"]);
    let (live_rows, saved_rows) = (views::flat(&live.stdout), views::flat(&saved.stdout));
    eprintln!("report {}:\n{}", file.display(), saved.stdout);
    assert!(!live_rows.is_empty(), "no rows:\n{}", live.stdout);
    assert_eq!(
        live_rows, saved_rows,
        "report FILE differs from the live table\n--- live ---\n{}\n--- file ---\n{}",
        live.stdout, saved.stdout
    );
    // The live table is the JSON profile.
    for f in &p.functions {
        let key = (f.name.clone(), views::module_cell(&f.module), f.inlined);
        assert_eq!(
            live_rows.get(&key),
            Some(&(f.inclusive, f.exclusive)),
            "{key:?} in the table:\n{}",
            live.stdout
        );
    }
}

/// `profctl histogram --binary --gmon` writes a gmon.out whose flat profile
/// in `gprof` agrees with profd's exclusive shares within the module.
#[test]
fn gprof_reads_the_histogram() {
    let h = Harness::start();
    let binary = build_workload("split");
    let target = Workload::start_exe(&binary, LONG);
    let p = h.daemon.profile_until(&target, 3000, &[]);
    let gmon = unique_dir("gmon").join("gmon.out");
    let out = ok(
        &h.daemon,
        &[
            "histogram",
            &id(&p),
            "--binary",
            path_str(&binary),
            "--gmon",
            path_str(&gmon),
        ],
    );
    eprintln!("{}", out.stdout);
    // samples: N in range, M out of range, K outside the module (each 1/999 s)
    let totals = out
        .stdout
        .lines()
        .find(|l| l.starts_with("samples: ") && l.contains("in range"))
        .unwrap_or_else(|| panic!("no totals line:\n{}", out.stdout));
    let numbers: Vec<u64> = profd_e2e::words(totals)
        .iter()
        .filter_map(|w| w.parse().ok())
        .collect();
    let in_range = numbers[0];

    let in_module: BTreeMap<&str, u64> = p
        .functions
        .iter()
        .filter(|f| f.module == "split" && f.exclusive > 0)
        .map(|f| (f.name.as_str(), f.exclusive))
        .collect();
    let module_total: u64 = in_module.values().sum();
    eprintln!("  histogram: {in_range} in range; profd: {module_total} exclusive in split");
    assert!(
        in_range as f64 >= module_total as f64 * 0.95 && in_range <= p.totals.attributed,
        "the histogram counts {in_range} samples, profd {module_total} exclusive in split:\n{}\n{}",
        out.stdout,
        p.table()
    );

    let (gprof, text) = gprof_flat(&binary, &gmon);
    eprintln!("gprof -b -p:\n{text}");
    let context = format!("--- gprof ---\n{text}\n--- profd ---\n{}", p.table());
    for (name, excl) in &in_module {
        let profd_pct = 100.0 * *excl as f64 / module_total as f64;
        let gprof_pct = gprof.get(*name).copied().unwrap_or(0.0);
        assert_near(
            &format!("{name} gprof % time vs profd"),
            gprof_pct,
            profd_pct,
            2.0,
            &context,
        );
    }
    for (name, pct) in &gprof {
        if !in_module.contains_key(name.as_str()) {
            assert!(
                *pct <= 2.0,
                "gprof gives {name} {pct} %, profd nothing:\n{context}"
            );
        }
    }
    assert_near(
        "leaf_a gprof %",
        gprof.get("leaf_a").copied().unwrap_or(0.0),
        25.0,
        PCT_TOLERANCE,
        &context,
    );
    assert_near(
        "leaf_b gprof %",
        gprof.get("leaf_b").copied().unwrap_or(0.0),
        75.0,
        PCT_TOLERANCE,
        &context,
    );
}

/// Folded stacks, the SVG flame graph (in Chromium), speedscope JSON
/// (against speedscope's schema) and the JSON export are read back, and
/// hold the session's figures.
#[test]
fn folded_svg_speedscope_and_json_exports_parse() {
    let h = Harness::start();
    let target = Workload::start("split", LONG);
    let p = h.daemon.profile_until(&target, 3000, &[]);
    let export = |format: &str| {
        ok(
            &h.daemon,
            &["export", &id(&p), "--format", format, "-o", "-"],
        )
    };

    // Folded: `outer;...;inner count`, counts adding up to attributed.
    let folded = export("folded").stdout;
    let mut total = 0;
    let mut by_leaf: BTreeMap<String, u64> = BTreeMap::new();
    for line in folded.lines().filter(|l| !l.is_empty()) {
        let (stack, n) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("folded line without a count: {line:?}"));
        let n: u64 = n
            .parse()
            .unwrap_or_else(|_| panic!("bad count in {line:?}"));
        total += n;
        let leaf = stack.rsplit(';').next().unwrap_or_default().to_string();
        *by_leaf.entry(leaf).or_insert(0) += n;
    }
    assert_eq!(total, p.totals.attributed, "folded counts:\n{folded}");
    assert!(
        folded.lines().any(|l| l.contains("main;work;mid;leaf_b ")),
        "no main;work;mid;leaf_b stack:\n{folded}"
    );
    assert!(
        folded.lines().any(|l| l.contains("main;work;leaf_a ")),
        "{folded}"
    );
    for leaf in ["leaf_a", "leaf_b"] {
        assert_eq!(
            by_leaf.get(leaf).copied(),
            Some(p.function(leaf).exclusive),
            "folded stacks ending in {leaf}:\n{folded}"
        );
    }

    // SVG: in Chromium, one frame per function on the stacks, each as wide
    // as its share of the samples; its script shows a frame's figures under
    // the pointer and zooms into a clicked frame.
    let dir = unique_dir("exports");
    let svg = dir.join("split.svg");
    ok(
        &h.daemon,
        &["export", &id(&p), "--format", "svg", "-o", path_str(&svg)],
    );
    let seen = svg_in_chromium(&svg, "leaf_b", "mid");
    let (shown, width) = (svg_frames, svg_width);
    let frames = shown(&seen["frames"]);
    let all = width(&frames, "all");
    assert!(all > 500.0, "the root frame is {all} px wide: {frames:#?}");
    // Each frame as wide as its inclusive samples, to a fifth of a point.
    for name in ["main", "work", "mid", "leaf_a", "leaf_b"] {
        let share = 100.0 * width(&frames, name) / all;
        let expected = 100.0 * p.function(name).inclusive as f64 / p.totals.attributed as f64;
        assert_near(
            &format!("{name}'s width in Chromium, % of the root's {all:.0} px"),
            share,
            expected,
            0.2,
            &format!("{frames:#?}"),
        );
    }
    assert_near(
        "leaf_a's width, % of the root's",
        100.0 * width(&frames, "leaf_a") / all,
        25.0,
        PCT_TOLERANCE,
        &format!("{frames:#?}"),
    );
    assert_near(
        "leaf_b's width, % of the root's",
        100.0 * width(&frames, "leaf_b") / all,
        75.0,
        PCT_TOLERANCE,
        &format!("{frames:#?}"),
    );
    let leaf_b = p.function("leaf_b").inclusive;
    // `Function: leaf_b (1,413 samples, 75.76%)`
    let details = seen["details"].as_str().unwrap_or_default();
    let count = details
        .strip_prefix("Function: leaf_b (")
        .and_then(|rest| rest.split_once(" samples, "))
        .and_then(|(n, _)| n.replace(',', "").parse::<u64>().ok());
    assert_eq!(
        count,
        Some(leaf_b),
        "the details line over leaf_b ({leaf_b} samples): {details:?}"
    );
    // Zoomed into mid: mid and leaf_b (all of mid's samples) fill the width,
    // main and work stay as its parents, leaf_a is hidden.
    let zoomed = shown(&seen["zoomed"]);
    for name in ["all", "main", "work", "mid", "leaf_b"] {
        let f = zoomed.iter().find(|f| f.name == name).expect(name);
        assert!(
            f.shown && (f.width - all).abs() < 1.0,
            "{name} after zooming into mid: {zoomed:#?}"
        );
    }
    assert!(
        zoomed.iter().any(|f| f.name == "leaf_a" && !f.shown),
        "leaf_a still shown after zooming into mid: {zoomed:#?}"
    );
    assert_eq!(seen["unzoomShown"], true, "no Reset Zoom button");

    // speedscope: valid against speedscope's published schema, frames and
    // sampled profiles whose weights add up.
    let speedscope = export("speedscope").stdout;
    let file = dir.join("split.speedscope.json");
    std::fs::write(&file, &speedscope).expect("write the speedscope file");
    let errors = views::json_schema_errors(&file, "speedscope-file-format-schema.json");
    assert!(
        errors.is_empty(),
        "the speedscope export breaks speedscope's schema:\n{}",
        errors.join("\n")
    );
    let ss: serde_json::Value =
        serde_json::from_str(&speedscope).expect("the speedscope export is JSON");
    let frames = ss["shared"]["frames"].as_array().expect("shared.frames");
    let names: Vec<&str> = frames.iter().filter_map(|f| f["name"].as_str()).collect();
    assert!(
        names.contains(&"leaf_b") && names.contains(&"leaf_a"),
        "{names:?}"
    );
    let profiles = ss["profiles"].as_array().expect("profiles");
    assert!(!profiles.is_empty());
    let mut weight = 0;
    for prof in profiles {
        assert_eq!(prof["type"], "sampled", "{prof}");
        let samples = prof["samples"].as_array().expect("samples");
        let weights = prof["weights"].as_array().expect("weights");
        assert_eq!(samples.len(), weights.len());
        for s in samples {
            for i in s.as_array().expect("a sample is a list of frame indexes") {
                let i = i.as_u64().expect("frame index") as usize;
                assert!(i < frames.len(), "frame index {i} out of range");
            }
        }
        weight += weights.iter().filter_map(|w| w.as_u64()).sum::<u64>();
    }
    // A cpu-clock sample is the period the kernel fixes for the frequency,
    // 1e9 / frequency ns; a session of time (here wall-clock, of the same
    // program) weighs its own nanoseconds. Both are in nanoseconds.
    let period = 1_000_000_000 / u64::from(p.frequency_hz);
    assert_eq!(weight, p.totals.attributed * period, "speedscope weights");
    assert!(
        profiles.iter().all(|p| p["unit"] == "nanoseconds"),
        "{profiles:?}"
    );
    let split = profd_e2e::build_workload("split");
    let run = ["run", "--mode", "wall", "--format", "json", "--"];
    let wall = h
        .daemon
        .profctl(&[&run[..], &[path_str(&split), "0.3"]].concat());
    wall.assert_success();
    let wall = Profile::parse_run(&wall);
    let timed: serde_json::Value = serde_json::from_str(
        &ok(
            &h.daemon,
            &["export", &id(&wall), "--format", "speedscope", "-o", "-"],
        )
        .stdout,
    )
    .expect("the speedscope export is JSON");
    let timed = timed["profiles"].as_array().expect("profiles");
    assert!(
        !timed.is_empty() && timed.iter().all(|p| p["unit"] == "nanoseconds"),
        "{timed:?}"
    );
    let ns: u64 = timed.iter().filter_map(|p| p["endValue"].as_u64()).sum();
    assert_eq!(ns, wall.totals.attributed, "wall nanoseconds");

    // JSON: the contract of docs/guide.md, the same figures as --format json.
    let json = Profile::parse(&export("json"));
    assert_eq!(json.session_id, p.session_id);
    assert_eq!(json.totals.attributed, p.totals.attributed);
    let rows = |p: &Profile| -> Vec<(String, u64, u64)> {
        p.functions
            .iter()
            .map(|f| (f.name.clone(), f.inclusive, f.exclusive))
            .collect()
    };
    assert_eq!(rows(&json), rows(&p), "{}", json.table());
}

/// Callers/callees, the call tree (both ways), the hot path, threads and
/// lines of split have the figures of its known call graph.
#[test]
fn caller_callee_tree_and_hot_path_of_split() {
    let h = Harness::start();
    let target = Workload::start("split", LONG);
    let p = h.daemon.profile_until(&target, 3000, &[]);
    let sid = id(&p);

    let text = ok(&h.daemon, &["report", &sid, "--callers", "leaf_b"]).stdout;
    eprintln!("{text}");
    let cc = caller_callee(&text);
    let callers: Vec<&str> = cc.callers.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(callers, ["mid"], "callers of leaf_b:\n{text}");
    assert_near(
        "mid's share of leaf_b",
        cc.callers[0].numbers[2],
        100.0,
        PCT_TOLERANCE,
        &text,
    );
    assert_eq!(
        cc.function.as_ref().map(|f| f.name.as_str()),
        Some("leaf_b")
    );

    let text = ok(
        &h.daemon,
        &["report", &sid, "--callers", "work", "--callees", "work"],
    )
    .stdout;
    eprintln!("{text}");
    let cc = caller_callee(&text);
    let callee = |name: &str| {
        cc.callees
            .iter()
            .find(|r| r.name == name)
            .unwrap_or_else(|| panic!("{name} is not a callee of work:\n{text}"))
    };
    assert_near(
        "leaf_a under work, % of samples",
        callee("leaf_a").numbers[0],
        25.0,
        PCT_TOLERANCE,
        &text,
    );
    assert_near(
        "mid under work, % of samples",
        callee("mid").numbers[0],
        75.0,
        PCT_TOLERANCE,
        &text,
    );
    assert!(
        cc.callees
            .iter()
            .all(|r| r.name == "leaf_a" || r.name == "mid" || r.numbers[0] < 1.0),
        "other callees of work:\n{text}"
    );
    assert!(cc.callers.iter().any(|r| r.name == "main"), "{text}");

    // Top-down: main → work → mid → leaf_b, each the child of the one before.
    let text = ok(&h.daemon, &["report", &sid, "--tree"]).stdout;
    eprintln!("{text}");
    let tree = rows(&text);
    let main = tree
        .iter()
        .position(|r| r.name == "main")
        .unwrap_or_else(|| panic!("no main in the tree:\n{text}"));
    let mut at = main;
    for name in ["work", "mid", "leaf_b"] {
        let depth = tree[at].depth();
        let child = tree[at + 1..]
            .iter()
            .take_while(|r| r.depth() > depth)
            .position(|r| r.depth() == depth + 1 && r.name == name)
            .unwrap_or_else(|| panic!("{name} is not a child of {}:\n{text}", tree[at].name));
        at += 1 + child;
    }
    assert_near(
        "leaf_b node % of samples",
        tree[at].numbers[0],
        75.0,
        PCT_TOLERANCE,
        &text,
    );

    // Bottom-up: leaf_b's callers come below it: mid, then work.
    let text = ok(&h.daemon, &["report", &sid, "--tree", "--bottom-up"]).stdout;
    let tree = rows(&text);
    let leaf_b = tree
        .iter()
        .position(|r| r.name == "leaf_b" && r.depth() == 0)
        .unwrap_or_else(|| panic!("leaf_b is not a root of the bottom-up tree:\n{text}"));
    assert_eq!(tree[leaf_b + 1].name, "mid", "{text}");
    assert_eq!(tree[leaf_b + 1].depth(), 1, "{text}");
    // The roots hold the exclusive samples (leaf_b's all of its own), the
    // callers under them none.
    assert_eq!(tree[leaf_b].numbers[3], tree[leaf_b].numbers[1], "{text}");
    for r in tree.iter().filter(|r| r.depth() > 0) {
        assert_eq!(
            r.numbers[3], 0.0,
            "{} under a root has EXCL:\n{text}",
            r.name
        );
    }

    // The hot path goes through mid and ends at leaf_b, not in the few
    // samples interrupted in the kernel under it: at most a percent or two
    // on a loaded machine (0.6 % with two busy CPUs beside), so the path
    // is asked to end below 5 %.
    let text = ok(&h.daemon, &["report", &sid, "--hot-path", "--min-pct", "5"]).stdout;
    let path: Vec<String> = rows(&text).into_iter().map(|r| r.name).collect();
    let main = path
        .iter()
        .position(|n| n == "main")
        .unwrap_or_else(|| panic!("no main on the hot path:\n{text}"));
    assert_eq!(
        path.get(main..),
        Some(&["main", "work", "mid", "leaf_b"].map(String::from)[..]),
        "hot path:\n{text}"
    );

    // One thread, with every sample.
    let text = ok(&h.daemon, &["report", &sid, "--threads"]).stdout;
    let thread = text
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|w| w.first() == Some(&p.pid.to_string().as_str()))
        .unwrap_or_else(|| panic!("no row for tid {}:\n{text}", p.pid));
    assert_eq!(thread[2], p.totals.attributed.to_string(), "{text}");

    // Lines of leaf_b add up to its exclusive samples.
    let text = ok(&h.daemon, &["report", &sid, "--lines", "leaf_b"]).stdout;
    eprintln!("{text}");
    let mut sum = 0;
    for line in text
        .lines()
        .skip_while(|l| !l.starts_with("FILE:LINE"))
        .skip(1)
    {
        let w: Vec<&str> = line.split_whitespace().collect();
        assert!(
            w[0].contains("split.c:"),
            "a line of leaf_b outside split.c: {line}\n{text}"
        );
        sum += w[1].parse::<u64>().expect("samples");
    }
    assert_eq!(sum, p.function("leaf_b").exclusive, "{text}");
}

/// `--window` adds the last seconds' figures to the live table, which
/// only a terminal gets: read in tmux, with `--no-tui`'s redrawn tables.
#[test]
fn window_columns_in_the_live_table() {
    let h = Harness::start();
    let target = Workload::start("split", LONG);
    let script = format!(
        "'{}' --socket '{}' attach {} --duration 30 --interval 0.5 --window 1 --top 0 --no-tui; \
         sleep 60",
        path_str(&bin("profctl")),
        path_str(h.daemon.socket()),
        target.pid()
    );
    let term = Tmux::start(&script, 160, 40);
    // A table two seconds in: its window holds a whole second.
    let screen = term.wait_for("a live table with a window", Duration::from_secs(30), |s| {
        s.contains("window: last 1 s")
            && s.contains("leaf_b")
            && s.lines().any(|l| {
                l.split(" — ")
                    .find_map(|w| w.strip_suffix(" s"))
                    .and_then(|w| w.parse::<f64>().ok())
                    .is_some_and(|t| t >= 2.0)
            })
    });
    let live = screen.as_str();
    assert!(
        live.contains("W.INCL%") && live.contains("W.EXCL%"),
        "{live}"
    );
    let rows = rows(live);
    let leaf_b = rows
        .iter()
        .find(|r| r.name == "leaf_b")
        .unwrap_or_else(|| panic!("no leaf_b:\n{live}"));
    assert_eq!(leaf_b.numbers.len(), 6, "{live}");
    assert_near("leaf_b W.EXCL%", leaf_b.numbers[5], 75.0, 6.0, live);
    let main = rows.iter().find(|r| r.name == "main").expect("main");
    assert_near("main W.INCL%", main.numbers[4], 100.0, 2.0, live);
    // The window holds a second of samples (at most 0.1 s more), at the
    // session's own rate: the samples so far over its seconds so far.
    let number_before = |text: &str, end: &str| -> f64 {
        let head = &text[..text
            .find(end)
            .unwrap_or_else(|| panic!("no {end:?}:\n{text}"))];
        let word = head.split_whitespace().last().unwrap_or_default();
        word.parse()
            .unwrap_or_else(|_| panic!("{word:?} before {end:?}"))
    };
    let samples_line = live
        .lines()
        .find(|l| l.starts_with("samples:"))
        .expect("samples line");
    let rate = number_before(samples_line, " attributed") / number_before(live, " s — running");
    let window_line = live
        .lines()
        .find(|l| l.starts_with("window:"))
        .expect("window line");
    let in_window = number_before(window_line, " attributed (");
    let ratio = in_window / rate;
    assert!(
        (0.75..=1.3).contains(&ratio),
        "the window holds {ratio:.2} s of samples at the session's rate:\n{live}"
    );
}

/// The TUI in a real terminal (tmux): it shows the live rows, sorts by
/// name, filters, switches to the tree, and on `q` stops the session and
/// prints the final table on the normal screen.
#[test]
fn tui_in_a_terminal() {
    let h = Harness::start();
    let target = Workload::start("split", LONG);
    let script = format!(
        "'{}' --socket '{}' attach {} --interval 0.2 --duration 30; echo PROFCTL-EXIT=$?; sleep 60",
        path_str(&bin("profctl")),
        path_str(h.daemon.socket()),
        target.pid()
    );
    let term = Tmux::start(&script, 160, 40);
    let wait = Duration::from_secs(15);
    let screen = term.wait_for("live rows", wait, |s| {
        s.contains("profd session") && s.contains("leaf_b") && s.contains("leaf_a")
    });
    eprintln!("TUI:\n{screen}");
    assert!(screen.contains("q quit"), "{screen}");
    assert!(screen.contains("— target rings —"), "{screen}");

    // INCL% INCL EXCL% EXCL [.] NAME MODULE: the names listed, with their
    // user/kernel marks and modules.
    let marked = |s: &str| -> Vec<(String, String, String)> {
        s.lines()
            .skip_while(|l| !l.contains("FUNCTION"))
            .skip(1)
            .filter_map(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                (w.len() >= 7 && w[0].ends_with('%')).then(|| {
                    let module = w[w.len() - 1].to_string();
                    (w[4].to_string(), w[5].to_string(), module)
                })
            })
            .collect()
    };
    let listed = |s: &str| -> Vec<String> { marked(s).into_iter().map(|(_, n, _)| n).collect() };
    // By self time first: leaf_b (75 %), then leaf_a (25 %); a rate once
    // two updates came.
    let screen = term.wait_for("a rate", wait, |s| s.contains("samples/s"));
    assert_eq!(
        listed(&screen).get(..2),
        Some(&["leaf_b", "leaf_a"].map(String::from)[..]),
        "{screen}"
    );
    for (mark, name, module) in marked(&screen) {
        let kernel = module == "[kernel]";
        assert_eq!(
            mark,
            if kernel { "[k]" } else { "[.]" },
            "{name}:\n{screen}"
        );
    }
    term.keys(&["n"]);
    let screen = term.wait_for("rows sorted by name", wait, |s| {
        let names = listed(s);
        names.len() >= 3 && names.windows(2).all(|w| w[0] <= w[1])
    });
    eprintln!("sorted by name:\n{screen}");

    // Filter: only leaf_a stays.
    term.keys(&["/", "l", "e", "a", "f", "_", "a", "Enter"]);
    let screen = term.wait_for("only leaf_a", wait, |s| listed(s) == ["leaf_a"]);
    eprintln!("filtered:\n{screen}");
    term.keys(&["Escape"]);
    term.wait_for("every row again", wait, |s| listed(s).len() >= 4);

    // The call tree, fetched with GetView.
    term.keys(&["t"]);
    let screen = term.wait_for("the call tree", wait, |s| {
        s.contains("call tree, top-down") && s.contains("mid")
    });
    eprintln!("tree:\n{screen}");
    // The root selected, ← folds it: only it is left, marked ▸; → opens it.
    term.keys(&["Left"]);
    let screen = term.wait_for("the root folded", wait, |s| {
        s.contains("▸ ") && !s.contains(" mid ")
    });
    eprintln!("folded:\n{screen}");
    term.keys(&["Right"]);
    term.wait_for("the root open", wait, |s| {
        s.contains(" mid ") && !s.contains("▸ ")
    });
    term.keys(&["t"]);

    // q stops the session; the final table is printed after the full screen.
    term.keys(&["q"]);
    let screen = term.wait_for("profctl's exit", Duration::from_secs(30), |s| {
        s.contains("PROFCTL-EXIT=")
    });
    eprintln!("after q:\n{screen}");
    assert!(screen.contains("PROFCTL-EXIT=0"), "{screen}");
    assert!(
        screen.contains("— stopped"),
        "final table of a stopped session:\n{screen}"
    );
    assert!(
        screen.contains("INCL%") && screen.contains("leaf_b"),
        "{screen}"
    );
    assert!(
        !screen.contains("q quit"),
        "the full screen was not left:\n{screen}"
    );
}

/// Errors of the new commands are one line and exit 1.
#[test]
fn view_errors_are_one_line() {
    let h = Harness::start();
    let target = Workload::start("split", LONG);
    let out = ok(
        &h.daemon,
        &[
            "attach",
            &target.pid_arg(),
            "--duration",
            "0.5",
            "--format",
            "json",
        ],
    );
    let p = Profile::parse(&out);
    for args in [
        vec![
            "report".to_string(),
            id(&p),
            "--callers".into(),
            "no_such_function".into(),
        ],
        vec!["report".to_string(), "999999".into()],
        vec![
            "histogram".to_string(),
            id(&p),
            "--module".into(),
            "no_such_module.so".into(),
            "--offset".into(),
            "0".into(),
            "--scale".into(),
            "65536".into(),
            "--buckets".into(),
            "16".into(),
        ],
        vec![
            "export".to_string(),
            "999999".into(),
            "--format".into(),
            "folded".into(),
        ],
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = h.daemon.profctl(&args);
        assert_eq!(out.status.code(), Some(1), "{}", out.describe());
        let err = out.stderr.trim_end();
        assert!(
            err.starts_with("profctl: ") && !err.contains('\n'),
            "not one line:\n{}",
            out.describe()
        );
    }
}

/// GetView over the samples of one thread or one process: a `--children`
/// session of `kids` (two children one after the other, two busy threads
/// each). Each thread alone has exactly its row's samples, each process
/// exactly its samples in the session's process list, and its threads add
/// up to it; an id without samples selects none.
#[test]
fn views_of_one_thread_or_one_process_are_exact() {
    use profd_common::api::{self, get_view_request::View, profiler_client::ProfilerClient};

    let h = Harness::start();
    let out = ok(
        &h.daemon,
        &[
            "run",
            "--children",
            "--format",
            "json",
            "--",
            path_str(&build_workload("kids")),
            "2",
            "1",
        ],
    );
    let p = Profile::parse_run(&out);
    eprintln!("{}\nprocesses {:?}", p.table(), p.processes);
    let children: Vec<_> = p.processes.iter().filter(|c| c.pid != p.pid).collect();
    assert_eq!(children.len(), 2, "{:?}", p.processes);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let view = |view: View, tids: Vec<u32>, pids: Vec<u32>| {
        rt.block_on(async {
            let channel = profctl::requests::connect::unix_channel(h.daemon.socket(), None)
                .await
                .expect("connect to profd");
            ProfilerClient::new(channel)
                .get_view(api::GetViewRequest {
                    session_id: p.session_id,
                    view: Some(view),
                    tids,
                    pids,
                    ..Default::default()
                })
                .await
                .expect("GetView")
                .into_inner()
        })
    };
    let functions = || View::Functions(api::FunctionsRequest {});
    let all = view(View::Threads(api::ThreadsRequest {}), vec![], vec![]);
    assert_eq!(all.attributed, p.totals.attributed);
    for t in &all.threads {
        let one = view(functions(), vec![t.tid], vec![]);
        assert_eq!(one.attributed, t.samples, "thread {t:?}");
        let top = one.functions.iter().map(|f| f.inclusive).max().unwrap_or(0);
        assert!(top <= t.samples, "thread {t:?}: {:?}", one.functions);
    }
    for c in &children {
        let threads: Vec<_> = all.threads.iter().filter(|t| t.pid == c.pid).collect();
        assert_eq!(threads.len(), 2, "two threads of {c:?}: {:?}", all.threads);
        let one = view(functions(), vec![], vec![c.pid]);
        assert_eq!(one.attributed, c.samples, "process {c:?}");
        assert_eq!(threads.iter().map(|t| t.samples).sum::<u64>(), c.samples);
        let spin = one.functions.iter().find(|f| f.name == "kid_spin");
        assert!(
            spin.is_some_and(|f| f.inclusive * 10 >= c.samples * 9),
            "kid_spin holds process {}'s samples: {:?}",
            c.pid,
            one.functions
        );
        // The tree of the process is over its samples alone.
        let tree = view(View::Tree(api::TreeRequest::default()), vec![], vec![c.pid]);
        let roots: u64 = tree
            .nodes
            .iter()
            .filter(|n| n.parent < 0)
            .map(|n| n.inclusive)
            .sum();
        assert_eq!(roots, c.samples);
    }
    let none = view(functions(), vec![u32::MAX], vec![]);
    assert_eq!((none.attributed, none.functions.len()), (0, 0));
}

/// `profctl diff` of two runs of `split`, 25/75 then (SPLIT_MID=1) 50/50,
/// 3 s each: each function's samples in both and the change, exactly as
/// the sessions counted them and as `go tool pprof -diff_base` finds them
/// in the pprof pair it writes; leaf_a's self share grows by 25 points and
/// leaf_b's shrinks by 25, the biggest changes first. A shorter run at
/// another frequency is compared per second, with a warning. Two saved
/// files diff without a daemon as the sessions do.
#[test]
fn diff_of_two_runs_shows_the_change_and_a_pprof_pair() {
    let h = Harness::start();
    let split = build_workload("split");
    let run = |extra: &[&str], env: &[&str]| {
        let mut args = vec!["run", "--format", "json"];
        args.extend_from_slice(extra);
        args.extend(["--", "env"]);
        args.extend_from_slice(env);
        args.extend([path_str(&split), "30"]);
        Profile::parse_run(&ok(&h.daemon, &args))
    };
    let (before, after) = (
        run(&["--duration", "3"], &[]),
        run(&["--duration", "3"], &["SPLIT_MID=1"]),
    );
    let dir = unique_dir("diff");
    let out = ok(
        &h.daemon,
        &["diff", &id(&before), &id(&after), "--pprof", path_str(&dir)],
    );
    let text = out.stdout.clone();
    eprintln!("{text}");
    assert!(!text.contains("per second"), "{text}");
    assert!(!out.stderr.contains("warning"), "{}", out.describe());
    let table = rows(&text);
    let row = |name: &str| {
        table
            .iter()
            .find(|r| r.name == name)
            .unwrap_or_else(|| panic!("no {name}:\n{text}"))
            .clone()
    };
    // BASE EXCL, NEW EXCL, CHANGE, BASE INCL, NEW INCL, CHANGE, EXCL% CHG:
    // the sessions' own counts.
    for name in ["leaf_a", "leaf_b", "mid"] {
        let (b, n) = (before.function(name), after.function(name));
        let (be, ne, bi, ni) = (
            b.exclusive as f64,
            n.exclusive as f64,
            b.inclusive as f64,
            n.inclusive as f64,
        );
        assert_eq!(
            row(name).numbers[..6],
            [be, ne, ne - be, bi, ni, ni - bi],
            "{name}:\n{text}"
        );
    }
    let (a, b) = (row("leaf_a"), row("leaf_b"));
    assert_near(
        "leaf_a share change",
        a.numbers[6],
        25.0,
        2.0 * PCT_TOLERANCE,
        &text,
    );
    assert_near(
        "leaf_b share change",
        b.numbers[6],
        -25.0,
        2.0 * PCT_TOLERANCE,
        &text,
    );
    let first: Vec<&str> = table[..2].iter().map(|r| r.name.as_str()).collect();
    assert!(
        first.contains(&"leaf_a") && first.contains(&"leaf_b"),
        "{text}"
    );
    assert!(text.contains("go tool pprof -diff_base"), "{text}");

    // go tool pprof: the same changes, sample for sample.
    let (base, new) = (dir.join("base.pb.gz"), dir.join("new.pb.gz"));
    let (flat, pprof) = views::go_pprof_diff(&base, &new);
    eprintln!("{pprof}");
    for (name, ours) in [("leaf_a", a.numbers[2]), ("leaf_b", b.numbers[2])] {
        let theirs = flat.get(name).copied().unwrap_or(0.0);
        assert_eq!(
            theirs, ours,
            "{name}: go tool pprof -diff_base\n{pprof}\n{text}"
        );
    }

    // Half as long at half the frequency: per second, and said to differ.
    let short = run(&["--duration", "1.5", "--freq", "499"], &[]);
    let out = ok(&h.daemon, &["diff", &id(&before), &id(&short)]);
    eprintln!("{}", out.describe());
    assert!(
        out.stdout
            .contains("samples per second: the profiles' durations differ"),
        "{}",
        out.describe()
    );
    assert!(
        out.stderr
            .lines()
            .any(|l| l.starts_with("profctl: warning: ")
                && l.contains("at 999 Hz and")
                && l.contains("at 499 Hz")),
        "{}",
        out.describe()
    );
    let leaf_b = rows(&out.stdout)
        .into_iter()
        .find(|r| r.name == "leaf_b")
        .expect("leaf_b");
    let rate = |p: &Profile| p.function("leaf_b").exclusive as f64 / p.duration_s;
    assert_near(
        "leaf_b per second, base",
        leaf_b.numbers[0],
        rate(&before),
        0.051,
        &out.stdout,
    );
    assert_near(
        "leaf_b per second, new",
        leaf_b.numbers[1],
        rate(&short),
        0.051,
        &out.stdout,
    );

    // The two files, without a daemon: the same table.
    let cmd = profd_e2e::run_profctl(&["diff", path_str(&base), path_str(&new)], &[]);
    cmd.assert_success();
    let from_files = rows(&cmd.stdout);
    for name in ["leaf_a", "leaf_b"] {
        let f = from_files.iter().find(|r| r.name == name).unwrap();
        assert_eq!(f.numbers, row(name).numbers, "{}", cmd.stdout);
    }

    // A session that does not exist is an error, not an empty side.
    let err = h.daemon.profctl(&["diff", &id(&before), "999"]);
    assert!(!err.status.success(), "{}", err.describe());
}
