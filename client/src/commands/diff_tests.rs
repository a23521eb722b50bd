//! Unit tests of `diff`.
use super::*;

fn f(name: &str, inclusive: u64, exclusive: u64) -> Function {
    Function {
        name: name.into(),
        module: "split".into(),
        inclusive,
        exclusive,
        ..Default::default()
    }
}

fn side(label: &str, attributed: u64, functions: Vec<Function>) -> Side {
    Side {
        label: label.into(),
        session: Session {
            pid: 7,
            comm: "split".into(),
            totals: Some(api::Totals {
                attributed,
                ..Default::default()
            }),
            ..Default::default()
        },
        functions,
        pprof: None,
    }
}

#[test]
fn shares_are_over_each_sides_total_and_biggest_changes_lead() {
    // 25/75 over 1000 samples, then 50/50 over 4000 (and a new function).
    let base = side(
        "session 1",
        1000,
        vec![
            f("main", 1000, 0),
            f("leaf_a", 250, 250),
            f("leaf_b", 750, 750),
        ],
    );
    let new = side(
        "session 2",
        4000,
        vec![
            f("main", 4000, 0),
            f("leaf_a", 1800, 1800),
            f("leaf_b", 2000, 2000),
            f("extra", 200, 200),
        ],
    );
    let text = diff_table(&base, &new, None, 80);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "base  session 1 — pid 7 (split) — 1000 attributed"
    );
    assert_eq!(
        lines[1],
        "new   session 2 — pid 7 (split) — 4000 attributed"
    );
    assert!(lines[2].ends_with("FUNCTION  [MODULE]"), "{text}");
    let row = |name: &str| -> Vec<String> {
        let l = lines
            .iter()
            .find(|l| l.contains(&format!(" {name}  [split]")))
            .unwrap_or_else(|| panic!("no {name}:\n{text}"));
        l.split_whitespace().map(str::to_string).collect()
    };
    assert_eq!(
        row("leaf_b")[..6],
        ["75.0%", "50.0%", "-25.0", "75.0%", "50.0%", "-25.0"]
    );
    assert_eq!(
        row("leaf_a")[..6],
        ["25.0%", "45.0%", "+20.0", "25.0%", "45.0%", "+20.0"]
    );
    assert_eq!(row("extra")[..3], ["0.0%", "5.0%", "+5.0"]);
    assert_eq!(
        row("main")[..6],
        ["0.0%", "0.0%", "+0.0", "100.0%", "100.0%", "+0.0"]
    );
    // Biggest self change first.
    let order: Vec<&str> = lines[3..]
        .iter()
        .map(|l| l.split_whitespace().nth(6).unwrap())
        .collect();
    assert_eq!(order, ["leaf_b", "leaf_a", "extra", "main"]);
    // A limit keeps the biggest and says how many more there are.
    let text = diff_table(&base, &new, Some(2), 80);
    assert!(
        text.ends_with("(2 more functions changed less; --top 0 shows all)\n"),
        "{text}"
    );
}
