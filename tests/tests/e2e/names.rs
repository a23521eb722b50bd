//! End-to-end tests of function names as people read and type them: C++
//! template names shortened in tables and kept whole on request, functions
//! named by a part of their name, a regular expression or `#ID`, and the
//! ids shown in tables and JSON; PLT stubs and vDSO code, which no symbol
//! of the program covers; the threads of children forked without exec.
//! Real kernel, real `profd` and `profctl`, and
//! `names.cpp` built with the machine's g++.

use profd_e2e::views::{self, caller_callee};
use profd_e2e::{
    build_workload, path_str, unique_dir, CmdOutput, Daemon, Harness, Profile, Workload, NAMES_CPP,
    SYMEDGES,
};

/// Long enough for any test: workloads are killed when the test ends.
const LONG: f64 = 60.0;

/// Runs profctl and fails the test unless it succeeded.
fn ok(daemon: &Daemon, args: &[&str]) -> CmdOutput {
    let out = daemon.profctl(args);
    out.assert_success();
    out
}

/// The JSON row of the one function whose name has `part` (fails unless
/// exactly one has).
fn only<'a>(p: &'a Profile, part: &str) -> &'a profd_e2e::FunctionRow {
    let found: Vec<_> = p
        .functions
        .iter()
        .filter(|f| f.name.contains(part))
        .collect();
    assert_eq!(found.len(), 1, "functions with {part:?}:\n{}", p.table());
    found[0]
}

/// `names_cpp`'s two methods of `app::Table<…>` have names of hundreds of
/// characters that differ only after the template arguments. The table
/// shows them short and distinct (`app::Table<…>::lookup(…) const`), whole
/// with `--full-names`, and with their JSON ids under `--ids`. A part of a
/// name (`lookup`), a regular expression and `#ID` select a function for
/// `--callers`; a part that two names share is refused with both listed,
/// ids included.
#[test]
fn cpp_names_are_short_in_tables_and_found_by_part_regex_or_id() {
    let h = Harness::start();
    let target = Workload::start_build(&NAMES_CPP, LONG);
    let p = h.daemon.profile_until(&target, 3000, &[]);
    let id = p.session_id.to_string();
    let lookup = only(&p, "::lookup(");
    let update = only(&p, "::update(");
    for f in [lookup, update] {
        assert!(
            f.name.starts_with("app::Table<std::") && f.name.len() > 200,
            "not the long demangled name: {}",
            f.name
        );
        assert!(f.exclusive > 0, "{} has no samples:\n{}", f.name, p.table());
    }
    let (lookup_id, update_id) = (lookup.id.expect("JSON id"), update.id.expect("JSON id"));
    assert_ne!(lookup_id, update_id);

    // Short and distinct by default.
    let short_lookup = "app::Table<…>::lookup(…) const";
    let short_update = "app::Table<…>::update(…)";
    let table = ok(&h.daemon, &["report", &id, "--top", "0"]);
    eprintln!("{}", table.stdout);
    // Most exclusive samples first, as run's and attach's tables (by
    // inclusive, main and its callers would lead with none).
    let exclusive: Vec<u64> = views::rows(&table.stdout)
        .iter()
        .map(|r| r.count(2))
        .collect();
    assert!(
        exclusive.windows(2).all(|p| p[0] >= p[1]),
        "not by exclusive samples:\n{}",
        table.stdout
    );
    let names: Vec<String> = views::rows(&table.stdout)
        .into_iter()
        .map(|r| r.name)
        .collect();
    for short in [short_lookup, short_update] {
        assert!(
            names.iter().any(|n| n == short),
            "no row {short}:\n{}",
            table.stdout
        );
    }
    assert!(
        !table.stdout.contains("std::__cxx11::basic_string"),
        "a template argument in the default table:\n{}",
        table.stdout
    );
    // Whole with --full-names, as in the JSON.
    let full = ok(&h.daemon, &["report", &id, "--top", "0", "--full-names"]);
    let names: Vec<String> = views::rows(&full.stdout)
        .into_iter()
        .map(|r| r.name)
        .collect();
    for f in [lookup, update] {
        assert!(
            names.contains(&f.name),
            "no row {}:\n{}",
            f.name,
            full.stdout
        );
    }
    // The JSON ids, shown by --ids.
    let with_ids = ok(&h.daemon, &["report", &id, "--top", "0", "--ids"]);
    eprintln!("{}", with_ids.stdout);
    let names: Vec<String> = views::rows(&with_ids.stdout)
        .into_iter()
        .map(|r| r.name)
        .collect();
    for (fid, short) in [(lookup_id, short_lookup), (update_id, short_update)] {
        let want = format!("#{fid} {short}");
        assert!(names.contains(&want), "no row {want}:\n{}", with_ids.stdout);
    }

    // The callers of lookup, named by a part of its name, a regular
    // expression and its id: map_work<unsigned long> every time.
    let callers_of = |name: &str| {
        let out = ok(&h.daemon, &["report", &id, "--callers", name]);
        let cc = caller_callee(&out.stdout);
        let function = cc
            .function
            .clone()
            .unwrap_or_else(|| panic!("{}", out.stdout));
        let callers: Vec<String> = cc.callers.iter().map(|r| r.name.clone()).collect();
        (function.name, callers, out.stdout)
    };
    for name in [
        "lookup".to_string(),
        "^app::Table<.*>::look".to_string(),
        format!("#{lookup_id}"),
    ] {
        let (function, callers, text) = callers_of(&name);
        eprintln!("--callers {name}:\n{text}");
        assert_eq!(function, short_lookup, "--callers {name}:\n{text}");
        assert_eq!(
            callers,
            ["void map_work<…>(…)"],
            "--callers {name}:\n{text}"
        );
    }
    let (function, _, text) = callers_of("::update(");
    assert_eq!(function, short_update, "{text}");

    // Two names have `> > >::` (the end of Table's arguments): refused,
    // both listed with their ids.
    let out = h.daemon.profctl(&["report", &id, "--callers", "> > >::"]);
    eprintln!("{}", out.stderr);
    assert!(
        !out.status.success(),
        "an ambiguous name was taken:\n{}",
        out.describe()
    );
    for (fid, short) in [(lookup_id, short_lookup), (update_id, short_update)] {
        let want = format!("#{fid} {short}");
        assert!(
            out.stderr.contains(&want),
            "{want} not listed:\n{}",
            out.describe()
        );
    }
    assert!(
        out.stderr.contains("matches 2 functions"),
        "{}",
        out.describe()
    );
}

/// `symedges` holds a thread in its PLT stub for memcmp and reads the
/// clock in the vDSO: the stub is `memcmp@plt` in the program (as perf
/// names it), not the function before the PLT (`_init`), unwound to its
/// caller, and the clock's code is `__vdso_clock_gettime` in `[vdso]`, not
/// an offset.
#[test]
fn plt_stubs_and_vdso_code_are_named() {
    let h = Harness::start();
    let target = Workload::start_build(&SYMEDGES, LONG);
    let p = h.daemon.profile_until(&target, 3000, &[]);
    let share = |name: &str, module: &str| {
        let rows: Vec<_> = p
            .functions
            .iter()
            .filter(|f| f.name == name && f.module == module)
            .collect();
        assert_eq!(rows.len(), 1, "no {name} [{module}]:\n{}", p.table());
        100.0 * rows[0].exclusive as f64 / p.totals.attributed as f64
    };
    // One thread of two is in the stub throughout, the other reads the
    // clock: perf gives the stub 50 % and the vDSO 46 % here.
    let stub = share("memcmp@plt", "symedges");
    assert!(stub >= 20.0, "memcmp@plt has {stub:.2} %:\n{}", p.table());
    let in_stub = p.function("memcmp@plt").exclusive;
    assert!(
        p.function("plt_work").inclusive >= in_stub,
        "the stub's {in_stub} samples are not all unwound to plt_work, its caller:\n{}",
        p.table()
    );
    let vdso = share("__vdso_clock_gettime", "[vdso]");
    assert!(
        vdso >= 5.0,
        "__vdso_clock_gettime has {vdso:.2} %:\n{}",
        p.table()
    );
    for f in &p.functions {
        assert!(
            f.name != "_init" && !f.name.starts_with("[vdso]+"),
            "{} [{}] has {} samples:\n{}",
            f.name,
            f.module,
            f.inclusive,
            p.table()
        );
    }
}

/// `kids` forks children without exec, each with a second thread, that
/// live less than a drain period: gone before the daemon could read their
/// names in /proc. Every thread is still named `kids`, the command name it
/// inherits, in `--threads` and in the speedscope export.
#[test]
fn threads_of_forked_children_have_the_command_name() {
    let h = Harness::start();
    let kids = build_workload("kids");
    let out = ok(
        &h.daemon,
        &[
            "run",
            "--children",
            "--format",
            "json",
            "--",
            path_str(&kids),
            "6",
            "0.15",
        ],
    );
    let p = Profile::parse_run(&out);
    assert_eq!(p.processes.len(), 7, "{:?}", p.processes);
    let id = p.session_id.to_string();
    let threads = ok(&h.daemon, &["report", &id, "--threads"]).stdout;
    eprintln!("{threads}");
    let mut lines = threads.lines().skip_while(|l| !l.contains("TOP FUNCTION"));
    // TID PID NAME ... (a --children session's threads have their process).
    let header: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    let name = header
        .iter()
        .position(|&c| c == "NAME")
        .expect("a NAME column");
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split_whitespace().collect()).collect();
    // Two threads in each of six children (and the target, when a sample
    // found it: it only forks and waits).
    assert!(rows.len() >= 12, "threads:\n{threads}");
    for row in &rows {
        assert_eq!(
            row.get(name),
            Some(&"kids"),
            "a thread without its name:\n{threads}"
        );
    }
    let file = unique_dir("speedscope").join("kids.speedscope.json");
    ok(
        &h.daemon,
        &[
            "export",
            &id,
            "--format",
            "speedscope",
            "-o",
            path_str(&file),
        ],
    );
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&file).expect("read the export")).unwrap();
    let names: Vec<&str> = doc["profiles"]
        .as_array()
        .expect("profiles")
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert_eq!(names.len(), rows.len(), "{names:?}");
    for name in &names {
        assert!(
            name.starts_with("kids (tid "),
            "speedscope thread {name:?}: {names:?}"
        );
    }
}

/// Completion asks the daemon: in bash, with the script `profctl
/// completions bash` prints, Tab after `report` offers the session's id,
/// after `--callers lookup` the `#ID` of the C++ method (a name a shell
/// would split), after `--callers #` every function's id; fish's lines
/// pair each `#ID` with the name the JSON gives that id, and a completed id
/// names its function in `--callers`.
#[test]
fn completions_offer_sessions_and_function_ids_from_the_daemon() {
    let h = Harness::start();
    let target = Workload::start_build(&NAMES_CPP, LONG);
    let p = h.daemon.profile_until(&target, 3000, &[]);
    let id = p.session_id.to_string();
    let socket = path_str(h.daemon.socket());
    let profctl = profd_e2e::bin("profctl");
    let path = format!(
        "{}:{}",
        path_str(profctl.parent().expect("profctl's directory")),
        std::env::var("PATH").unwrap_or_default()
    );
    let script = unique_dir("completions").join("profctl.bash");
    std::fs::write(&script, ok(&h.daemon, &["completions", "bash"]).stdout).unwrap();
    // COMPREPLY for the words, the last one under the cursor.
    let bash = |words: &[&str]| -> Vec<String> {
        let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
        let line = format!(
            "source '{}'; COMP_WORDS=({}); COMP_CWORD={}; COMP_TYPE=9; \
             _clap_complete_profctl profctl '{}' '{}'; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            path_str(&script),
            quoted.join(" "),
            words.len() - 1,
            words[words.len() - 1],
            words[words.len() - 2],
        );
        let out = std::process::Command::new("bash")
            .args(["-c", &line])
            .env("PATH", &path)
            .output()
            .expect("run bash");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect()
    };
    let base = ["profctl", "--socket", socket];
    let with = |rest: &[&str]| -> Vec<String> { bash(&[&base[..], rest].concat()) };

    let sessions = with(&["report", ""]);
    assert!(
        sessions.contains(&id),
        "session {id} not offered: {sessions:?}"
    );

    let lookup = only(&p, "::lookup(");
    let lookup_id = format!("#{}", lookup.id.expect("JSON id"));
    assert_eq!(
        with(&["report", &id, "--callers", "lookup"]),
        std::slice::from_ref(&lookup_id)
    );

    let ids = with(&["report", &id, "--callers", "#"]);
    let want: std::collections::BTreeSet<String> = p
        .functions
        .iter()
        .map(|f| format!("#{}", f.id.expect("JSON id")))
        .collect();
    assert_eq!(
        ids.iter()
            .cloned()
            .collect::<std::collections::BTreeSet<_>>(),
        want,
        "{ids:?}\n{}",
        p.table()
    );

    // fish shows each candidate with its help: the id's name.
    let fish = std::process::Command::new(&profctl)
        .args([
            "--", "profctl", "--socket", socket, "report", &id, "--lines", "#",
        ])
        .env("COMPLETE", "fish")
        .output()
        .expect("run profctl");
    let fish = String::from_utf8_lossy(&fish.stdout);
    for f in &p.functions {
        let line = format!("#{}\t{}", f.id.expect("JSON id"), f.name);
        assert!(fish.lines().any(|l| l == line), "no {line:?} in:\n{fish}");
    }

    let callers = ok(&h.daemon, &["report", &id, "--callers", &lookup_id]);
    assert!(
        callers.stdout.contains("::lookup(…) const"),
        "{}",
        callers.stdout
    );
}

/// The addresses (as in the ELF file) of the functions `nm` lists in
/// `exe`, by name.
pub(crate) fn function_addresses(exe: &std::path::Path) -> std::collections::HashMap<String, u64> {
    let out = std::process::Command::new("nm")
        .arg(exe)
        .output()
        .expect("run nm (install binutils)");
    assert!(out.status.success(), "nm {}", exe.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (addr, kind, name) = (f.next()?, f.next()?, f.next()?);
            matches!(kind, "T" | "t")
                .then(|| Some((name.to_string(), u64::from_str_radix(addr, 16).ok()?)))?
        })
        .collect()
}

/// A stripped build of `split` (no symbol table, no DWARF, no debug file
/// anywhere, as distributions ship programs): each of its functions is
/// one row, named `split_strip!0xSTART` from the unwind entry covering its
/// code (START as `nm` gives it for the unstripped build), and the rows
/// carry the workload's own split: exclusive leaf_a 25 %, leaf_b 75 %;
/// inclusive mid 75 %. No row is a single instruction address.
#[test]
fn stripped_code_is_grouped_by_function() {
    let h = Harness::start();
    let built = build_workload("split");
    let starts = function_addresses(&built);
    // Its debug information goes elsewhere, where profd never looks.
    let (exe, _) = profd_e2e::debug_files::stripped_split("split_strip");
    assert!(
        function_addresses(&exe).is_empty(),
        "strip left symbols in {}",
        exe.display()
    );
    let w = Workload::start_exe(&exe, LONG);
    let p = h.daemon.profile_until(&w, 3000, &[]);
    let row = |f: &str| format!("split_strip!{:#x}", starts[f]);
    use profd_e2e::Measure::{Exclusive, Inclusive};
    p.assert_pct_within(&row("leaf_a"), Exclusive, 25.0, 2.0);
    p.assert_pct_within(&row("leaf_b"), Exclusive, 75.0, 2.0);
    p.assert_pct_within(&row("mid"), Inclusive, 75.0, 2.0);
    p.assert_pct_within(&row("work"), Inclusive, 100.0, 2.0);
    let per_address: Vec<_> = p
        .functions
        .iter()
        .filter(|f| f.name.starts_with("split_strip+"))
        .collect();
    assert!(
        per_address.is_empty(),
        "single addresses of split_strip:\n{}",
        p.table()
    );
}

/// With `--no-host-symbols` the daemon names none of `split`'s code,
/// though its symbols are there: each function is one row
/// `split!0xSTART`. Its pprof export keeps the build id, and `profctl
/// report FILE --symbols DIR` names the rows from the debug file in DIR,
/// with the workload's split; `profctl export FILE --symbols DIR` writes
/// the named profile.
#[test]
fn code_named_off_the_host_is_named_from_the_saved_file() {
    let daemon = profd_e2e::Daemon::start_with(&["--no-host-symbols"]);
    let built = build_workload("split");
    let starts = function_addresses(&built);
    // The debug file of `split`'s build: a stripped copy has its build id.
    let (_, split) = profd_e2e::debug_files::stripped_split("split");
    let debug = split.dir;
    let w = Workload::start_exe(&built, LONG);
    let p = daemon.profile_until(&w, 3000, &[]);
    use profd_e2e::Measure::Exclusive;
    let row = |f: &str| format!("split!{:#x}", starts[f]);
    p.assert_pct_within(&row("leaf_a"), Exclusive, 25.0, 2.0);
    p.assert_pct_within(&row("leaf_b"), Exclusive, 75.0, 2.0);
    assert!(p.rows("leaf_a").is_empty(), "{}", p.table());
    let file = unique_dir("offhost").join("split.pb.gz");
    ok(
        &daemon,
        &[
            "export",
            &p.session_id.to_string(),
            "--format",
            "pprof",
            "-o",
            path_str(&file),
        ],
    );
    // `profctl report FILE`'s table: exclusive and inclusive % by name.
    let report = |extra: &[&str]| {
        let mut args = vec!["report", path_str(&file), "--top", "0"];
        args.extend_from_slice(extra);
        let out = daemon.profctl(&args);
        out.assert_success();
        let rows: std::collections::HashMap<String, (f64, f64)> = out
            .stdout
            .lines()
            .filter_map(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                let pct = |s: &str| s.strip_suffix('%')?.parse::<f64>().ok();
                (w.len() >= 5).then_some(())?;
                Some((w[4].to_string(), (pct(w[2])?, pct(w[0])?)))
            })
            .collect();
        (rows, out.stdout)
    };
    let (unnamed, text) = report(&[]);
    assert!(unnamed.contains_key(&row("leaf_a")), "{text}");
    assert!(!unnamed.contains_key("leaf_a"), "{text}");
    let (named, text) = report(&["--symbols", path_str(&debug)]);
    eprintln!("{text}");
    let near = |name: &str, (excl, incl): (f64, f64)| {
        let got = named
            .get(name)
            .copied()
            .unwrap_or_else(|| panic!("{name}:\n{text}"));
        assert!(
            (got.0 - excl).abs() <= 2.0 && (got.1 - incl).abs() <= 2.0,
            "{name}: {got:?}, expected {excl} % exclusive, {incl} % inclusive:\n{text}"
        );
    };
    near("leaf_a", (25.0, 25.0));
    near("leaf_b", (75.0, 75.0));
    near("mid", (0.0, 75.0));
    assert!(!named.contains_key(&row("leaf_a")), "{text}");
    // `profctl export FILE --symbols` writes the named profile, as
    // `go tool pprof` reads it: the same flat counts under the names.
    let out_file = file.with_file_name("named.pb.gz");
    ok(
        &daemon,
        &[
            "export",
            path_str(&file),
            "--symbols",
            path_str(&debug),
            "--format",
            "pprof",
            "-o",
            path_str(&out_file),
        ],
    );
    // A session's functions are its daemon's to name.
    let refused = daemon.profctl(&[
        "report",
        &p.session_id.to_string(),
        "--symbols",
        path_str(&debug),
    ]);
    assert!(
        !refused.status.success() && refused.stderr.contains("named by its daemon"),
        "{}",
        refused.stderr
    );
    let (flat, text) = profd_e2e::views::go_pprof_flat(&out_file);
    let (before, _) = profd_e2e::views::go_pprof_flat(&file);
    for f in ["leaf_a", "leaf_b"] {
        assert_eq!(flat.get(f), before.get(&row(f)), "{f}:\n{text}");
    }
}
