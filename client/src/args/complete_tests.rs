//! Unit tests of `complete`.
use super::*;

fn function(id: u64, name: &str, inclusive: u64) -> api::Function {
    api::Function {
        id,
        name: name.into(),
        inclusive,
        ..Default::default()
    }
}

fn shown(c: &[CompletionCandidate]) -> Vec<(String, String)> {
    c.iter()
        .map(|c| {
            let help = c.get_help().map(|h| h.to_string()).unwrap_or_default();
            (c.get_value().to_string_lossy().into_owned(), help)
        })
        .collect()
}

#[test]
fn functions_are_offered_by_part_or_by_id() {
    let fns = [
        function(3, "leaf_b", 75),
        function(2, "leaf_a", 25),
        function(7, "std::map<int, int>::operator[](int const&)", 5),
        function(12, "main", 100),
    ];
    let pair = |v: &str, h: &str| (v.to_string(), h.to_string());
    assert_eq!(
        shown(&function_candidates(&fns, "leaf")),
        [pair("leaf_b", "#3"), pair("leaf_a", "#2")]
    );
    // A name with spaces and brackets is offered as its id.
    assert_eq!(
        shown(&function_candidates(&fns, "map")),
        [pair("#7", "std::map<int, int>::operator[](int const&)")]
    );
    assert_eq!(
        shown(&function_candidates(&fns, "#1")),
        [pair("#12", "main")]
    );
    assert_eq!(function_candidates(&fns, "").len(), 4);
}

#[test]
fn the_word_under_the_cursor_is_replaced_to_parse_the_line() {
    let args = |s: &str| -> Vec<OsString> { s.split(' ').map(OsString::from).collect() };
    let (line, index) =
        completed_line(args("profctl -- profctl report 3 --callers le"), Some(4)).unwrap();
    assert_eq!(index, 4);
    let cli = Cli::try_parse_from(with_placeholder(line, index, "x")).unwrap();
    let Command::Report(report) = cli.command else {
        panic!("not a report: {cli:?}")
    };
    assert_eq!(report.options.callers.as_deref(), Some("x"));
    // fish passes no index: the last word is completed.
    let (line, index) = completed_line(args("profctl -- profctl stop 1"), None).unwrap();
    assert_eq!((line.len(), index), (3, 2));
    let line = with_placeholder(args("profctl report 3 --lines=co"), 3, "x");
    assert_eq!(line[3], "--lines=x");
    assert!(completed_line(args("profctl report"), None).is_none());
}

#[test]
fn scripts_run_profctl_for_every_shell() {
    for shell in [
        Shell::Bash,
        Shell::Zsh,
        Shell::Fish,
        Shell::Elvish,
        Shell::PowerShell,
    ] {
        let mut script = Vec::new();
        write_script(shell, &mut script).unwrap();
        let script = String::from_utf8(script).unwrap();
        assert!(
            script.contains("COMPLETE") && script.contains("profctl"),
            "{shell}: {script}"
        );
    }
}

/// The arguments that take a session, a session or file, or a
/// function ask the daemon; no other does.
#[test]
fn the_daemon_is_asked_for_sessions_and_functions_only() {
    fn asking(cmd: &clap::Command, path: &str, out: &mut Vec<String>) {
        for arg in cmd.get_arguments() {
            if arg.get::<ArgValueCompleter>().is_some() {
                out.push(format!("{path} {}", arg.get_id()));
            }
        }
        for sub in cmd.get_subcommands() {
            asking(sub, &format!("{path} {}", sub.get_name()), out);
        }
    }
    let mut found = Vec::new();
    asking(&command(), "profctl", &mut found);
    found.sort();
    assert_eq!(
        found,
        [
            "profctl diff base",
            "profctl diff new",
            "profctl export source",
            "profctl fleet callees",
            "profctl fleet callers",
            "profctl fleet lines",
            "profctl histogram session",
            "profctl query callees",
            "profctl query callers",
            "profctl query lines",
            "profctl report callees",
            "profctl report callers",
            "profctl report lines",
            "profctl report source",
            "profctl stop id",
        ]
    );
}

#[test]
fn subcommands_and_options_complete_without_a_daemon() {
    let complete = |words: &[&str]| -> Vec<String> {
        let mut cmd = command();
        let args: Vec<OsString> = words.iter().map(OsString::from).collect();
        clap_complete::engine::complete(&mut cmd, args, words.len() - 1, None)
            .unwrap()
            .iter()
            .map(|c| c.get_value().to_string_lossy().into_owned())
            .collect()
    };
    assert_eq!(complete(&["profctl", "att"]), ["attach"]);
    assert!(complete(&["profctl", "report", "3", "--cal"]).contains(&"--callers".to_string()));
    assert!(complete(&["profctl", "attach", "1", "--sort", ""]).contains(&"inclusive".to_string()));
}
