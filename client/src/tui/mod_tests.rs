//! The live view through ratatui's test backend: rows shown, keys that sort,
//! filter, select and switch views, and what they ask the daemon for.
use profd_common::api::get_view_request::View;
use profd_common::api::{
    CallerCallee, Edge, Function, FunctionRef, GetViewResponse, Session, SessionState, Totals,
    TreeNode,
};
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{Event, KeyCode, KeyEvent, KeyModifiers};
use ratatui::Terminal;

use super::*;
use crate::views::ranking::{Profile, Window};

fn func(id: u64, name: &str, inclusive: u64, exclusive: u64) -> Function {
    Function {
        id,
        name: name.into(),
        module: "split".into(),
        inclusive,
        exclusive,
        ..Default::default()
    }
}

fn session() -> Session {
    Session {
        id: 7,
        pid: 4242,
        comm: "split".into(),
        frequency_hz: 999,
        state: SessionState::Running as i32,
        duration_s: 2.5,
        totals: Some(Totals {
            attributed: 1000,
            discarded: 55,
            lost: 3,
            truncated: 2,
            unsymbolized: 1,
            overflowed: 0,
            throttled: 0,
            unchecked: 0,
            unsampled: 0,
            time: None,
            python_unreadable: 0,
            ruby_unreadable: 0,
            perl_unreadable: 0,
            truncated_copy_ended: 0,
        }),
        ..Default::default()
    }
}

fn profile() -> Profile {
    Profile::new(
        session(),
        vec![
            func(1, "main", 1000, 0),
            func(2, "work", 1000, 0),
            func(3, "mid", 750, 0),
            func(4, "leaf_b", 750, 750),
            func(5, "leaf_a", 240, 240),
            func(6, "zeta_helper", 10, 10),
        ],
    )
}

fn key(c: char) -> KeyEvent {
    KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE)
}

fn code(c: KeyCode) -> KeyEvent {
    KeyEvent::new(c, KeyModifiers::NONE)
}

/// The screen as lines of text.
fn screen(state: &TuiState, width: u16, height: u16) -> Vec<String> {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    terminal.draw(|f| draw(f, state)).unwrap();
    let buffer = terminal.backend().buffer().clone();
    (0..height)
        .map(|y| {
            (0..width)
                .map(|x| buffer[(x, y)].symbol().to_string())
                .collect::<String>()
                .trim_end()
                .to_string()
        })
        .collect()
}

/// The function names of the table rows, top to bottom.
fn listed(lines: &[String]) -> Vec<String> {
    let names = ["main", "work", "mid", "leaf_b", "leaf_a", "zeta_helper"];
    lines
        .iter()
        .filter_map(|l| {
            l.split_whitespace()
                .find(|w| names.contains(w))
                .map(str::to_string)
        })
        .collect()
}

#[test]
fn shows_header_totals_and_rows() {
    let state = TuiState::new(profile());
    let lines = screen(&state, 110, 16);
    let text = lines.join("\n");
    assert!(
        lines[0].starts_with("profd session 7 — pid 4242 (split) — cpu-clock @ 999 Hz"),
        "{text}"
    );
    assert!(lines[0].contains("running"), "{text}");
    assert!(
        lines[1]
            .contains("1000 attributed, 55 discarded, 3 lost; stacks: 2 truncated, 1 unsymbolized"),
        "{text}"
    );
    // By self time first (--sort's default), callers without any last.
    assert!(text.contains("EXCL%▼"), "sort marker on exclusive:\n{text}");
    assert_eq!(
        listed(&lines),
        ["leaf_b", "leaf_a", "zeta_helper", "main", "work", "mid"],
        "{text}"
    );
    // perf top's marks: user code [.], kernel code [k].
    let leaf_b = lines.iter().find(|l| l.contains("leaf_b")).unwrap();
    assert!(leaf_b.contains(" [.] leaf_b"), "{leaf_b}");
    assert!(
        leaf_b.contains("75.0%") && leaf_b.contains("750"),
        "{leaf_b}"
    );
    assert!(text.contains("q quit"), "key help:\n{text}");
}

#[test]
fn the_header_has_the_final_tables_facts_and_the_rate() {
    let mut s = session();
    s.set_scope(profd_common::api::Scope::Target);
    s.children = true;
    s.processes = vec![profd_common::api::ProcessSamples {
        pid: 4243,
        comm: "child".into(),
        samples: 250,
        exited: true,
        ..Default::default()
    }];
    s.totals.as_mut().unwrap().unsampled = 9;
    let mut state = TuiState::new(Profile::new(s.clone(), profile().functions));
    let text = screen(&state, 140, 20).join("\n");
    let first = crate::views::render::table_header(&s);
    for line in first.lines() {
        assert!(text.contains(line), "{line:?} missing:\n{text}");
    }
    assert!(text.contains("— target rings —"), "{text}");
    assert!(text.contains("9 unsampled"), "{text}");
    assert!(
        text.contains("processes: 4243 child 250 (exited)"),
        "{text}"
    );
    assert!(
        !text.contains("samples/s"),
        "no rate before two updates:\n{text}"
    );
    // One second and 999 samples later: 999 samples/s.
    s.duration_s += 1.0;
    s.totals.as_mut().unwrap().attributed += 999;
    state.set_profile(Profile::new(s, profile().functions));
    let text = screen(&state, 140, 20).join("\n");
    assert!(text.contains("6 functions; 999 samples/s"), "{text}");
    // q: the state says the session is being stopped.
    state.on_key(key('q'));
    let lines = screen(&state, 140, 20);
    assert!(lines[0].ends_with("— stopping…"), "{}", lines[0]);
}

#[test]
fn sort_keys_reorder_the_rows() {
    let mut state = TuiState::new(profile());
    assert_eq!(state.on_key(key('n')), Action::Redraw);
    let lines = screen(&state, 110, 16);
    assert_eq!(
        listed(&lines),
        ["leaf_a", "leaf_b", "main", "mid", "work", "zeta_helper"]
    );
    assert!(lines.join("\n").contains("FUNCTION▼"));

    state.on_key(key('e'));
    let lines = screen(&state, 110, 16);
    assert_eq!(&listed(&lines)[..3], ["leaf_b", "leaf_a", "zeta_helper"]);
    assert!(lines.join("\n").contains("EXCL%▼"));

    // The same key again reverses the order.
    state.on_key(key('e'));
    let lines = screen(&state, 110, 16);
    assert_eq!(listed(&lines).last().unwrap(), "leaf_b");
    assert!(lines.join("\n").contains("EXCL%▲"));

    state.on_key(key('i'));
    assert_eq!(listed(&screen(&state, 110, 16))[0], "main");
}

#[test]
fn filter_keeps_matching_names() {
    let mut state = TuiState::new(profile());
    assert_eq!(state.on_key(key('/')), Action::Redraw);
    assert!(state.editing_filter);
    for c in "LEAF".chars() {
        state.on_key(key(c));
    }
    let lines = screen(&state, 110, 16);
    assert_eq!(listed(&lines), ["leaf_b", "leaf_a"]);
    assert!(lines.last().unwrap().contains("filter: LEAF"), "{lines:?}");
    // Keys typed into the filter do not sort or quit.
    state.on_key(key('q'));
    assert!(!state.stopping);
    state.on_key(code(KeyCode::Backspace));
    assert_eq!(state.filter, "LEAF");
    state.on_key(code(KeyCode::Enter));
    assert!(!state.editing_filter);
    assert_eq!(listed(&screen(&state, 110, 16)), ["leaf_b", "leaf_a"]);
    // Esc in the table clears the filter.
    state.on_key(code(KeyCode::Esc));
    assert_eq!(listed(&screen(&state, 110, 16)).len(), 6);

    state.on_key(key('/'));
    state.on_key(key('x'));
    state.on_key(key('y'));
    let text = screen(&state, 110, 16).join("\n");
    assert!(text.contains("no function matches \"xy\""), "{text}");
    state.on_key(code(KeyCode::Esc));
    assert!(state.filter.is_empty() && !state.editing_filter);
}

#[test]
fn selection_moves_and_scrolls() {
    let mut state = TuiState::new(profile());
    state.sort = SortKey::Inclusive;
    // 3 header lines + column header + 2 rows + footer.
    let lines = screen(&state, 110, 7);
    assert_eq!(listed(&lines), ["main", "work"]);
    state.on_key(code(KeyCode::Down));
    state.on_key(code(KeyCode::Down));
    state.on_key(key('j'));
    assert_eq!(state.selected, Some(3), "mid selected");
    let lines = screen(&state, 110, 7);
    assert_eq!(
        listed(&lines),
        ["leaf_b", "mid"],
        "scrolled to the selection"
    );
    state.on_key(code(KeyCode::End));
    assert_eq!(state.selected, Some(6));
    state.on_key(code(KeyCode::Home));
    assert_eq!(state.selected, Some(1));
    state.on_key(code(KeyCode::Up));
    assert_eq!(state.selected, Some(1));
}

#[test]
fn quit_keys_stop() {
    let mut state = TuiState::new(profile());
    assert_eq!(state.on_key(key('q')), Action::Quit);
    assert!(state.stopping);
    assert!(screen(&state, 110, 16)[0].contains("stopping…"));
    let mut state = TuiState::new(profile());
    let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
    assert_eq!(state.on_event(&Event::Key(ctrl_c)), Action::Quit);
    assert_eq!(state.on_event(&Event::Resize(80, 20)), Action::Redraw);
}

fn tree_reply() -> GetViewResponse {
    let node = |parent, depth, function_id, inclusive, exclusive| TreeNode {
        parent,
        depth,
        function_id,
        inclusive,
        exclusive,
    };
    GetViewResponse {
        session: Some(session()),
        functions: profile().functions,
        nodes: vec![
            node(-1, 0, 1, 1000, 0),
            node(0, 1, 2, 1000, 0),
            node(1, 2, 3, 750, 0),
            node(2, 3, 4, 750, 750),
            node(1, 2, 5, 240, 240),
        ],
        ..Default::default()
    }
}

#[test]
fn t_fetches_and_shows_the_tree() {
    let mut state = TuiState::new(profile());
    let action = state.on_key(key('t'));
    let Action::Fetch(View::Tree(req)) = action else {
        panic!("t asks for the tree: {action:?}")
    };
    assert!(!req.bottom_up);
    assert!(screen(&state, 110, 16).join("\n").contains("loading…"));
    state.set_view(Ok(tree_reply()));
    let lines = screen(&state, 110, 16);
    let text = lines.join("\n");
    assert!(text.contains("call tree, top-down: 1000 samples"), "{text}");
    // The column of each name: two more per level (after ▾ or ▸ marks).
    let indent = |name: &str| {
        let l = lines
            .iter()
            .find(|l| l.contains(&format!(" {name}  [split]")))
            .unwrap_or_else(|| panic!("{name} not shown:\n{text}"));
        l[..l.find(name).unwrap()].chars().count()
    };
    assert_eq!(indent("work"), indent("main") + 2, "{text}");
    assert_eq!(indent("leaf_b"), indent("main") + 6, "{text}");
    // b flips to bottom-up; t goes back to the table.
    let Action::Fetch(View::Tree(req)) = state.on_key(key('b')) else {
        panic!("b refetches")
    };
    assert!(req.bottom_up);
    assert_eq!(state.refresh_request(), Some(View::Tree(req)));
    assert_eq!(state.on_key(key('t')), Action::Redraw);
    assert_eq!(state.mode, Mode::Table);
    assert_eq!(state.refresh_request(), None);
}

#[test]
fn tree_nodes_fold_and_stay_folded_across_updates() {
    let mut state = TuiState::new(profile());
    state.on_key(key('t'));
    state.set_view(Ok(tree_reply()));
    let shown = |state: &TuiState| listed(&screen(state, 110, 16));
    assert_eq!(shown(&state), ["main", "work", "mid", "leaf_b", "leaf_a"]);
    // work: ← folds it, its subtree hidden, marked ▸.
    state.on_key(code(KeyCode::Down));
    assert_eq!(state.on_key(code(KeyCode::Left)), Action::Redraw);
    assert_eq!(shown(&state), ["main", "work"]);
    let text = screen(&state, 110, 16).join("\n");
    assert!(text.contains("▸ work") && text.contains("▾ main"), "{text}");
    // A new reply (the next update) keeps it folded.
    state.set_view(Ok(tree_reply()));
    assert_eq!(shown(&state), ["main", "work"]);
    // → unfolds; Enter toggles.
    state.on_key(code(KeyCode::Right));
    assert_eq!(shown(&state), ["main", "work", "mid", "leaf_b", "leaf_a"]);
    state.on_key(code(KeyCode::Enter));
    assert_eq!(shown(&state), ["main", "work"]);
    state.on_key(code(KeyCode::Enter));
    // ← on a leaf (leaf_b) selects its parent, mid; ← again folds mid.
    state.on_key(code(KeyCode::Down));
    state.on_key(code(KeyCode::Down));
    state.on_key(code(KeyCode::Left));
    assert_eq!(state.scroll, 2, "mid selected");
    state.on_key(code(KeyCode::Left));
    assert_eq!(shown(&state), ["main", "work", "mid", "leaf_a"]);
    // The selection cannot go past the last row shown.
    state.on_key(code(KeyCode::End));
    assert_eq!(state.scroll, 3);
}

#[test]
fn a_thread_or_its_process_can_be_shown_alone() {
    use profd_common::api::ThreadRow;
    let mut state = TuiState::new(profile());
    assert_eq!(state.only_ids(), (vec![], vec![]));
    let Action::Fetch(View::Threads(_)) = state.on_key(key('h')) else {
        panic!("h asks for the threads")
    };
    let thread = |tid, pid, name: &str, samples| ThreadRow {
        tid,
        pid,
        name: name.into(),
        samples,
        pct: samples as f64 / 10.0,
        top_function_id: 4,
        unknown_ns: 0,
    };
    let mut s = session();
    s.children = true;
    state.set_view(Ok(GetViewResponse {
        session: Some(s),
        functions: profile().functions,
        threads: vec![
            thread(11, 4242, "split", 700),
            thread(12, 4243, "worker", 300),
        ],
        ..Default::default()
    }));
    let text = screen(&state, 110, 16).join("\n");
    assert!(
        text.contains("PID") && text.contains("   4243  worker"),
        "{text}"
    );
    // The second thread, alone: the table is fetched for it.
    state.on_key(code(KeyCode::Down));
    let action = state.on_key(code(KeyCode::Enter));
    assert_eq!(action, Action::Fetch(View::Functions(Default::default())));
    assert_eq!(state.only, Some(Only::Thread(12, "worker".into())));
    assert_eq!(state.only_ids(), (vec![12], vec![]));
    assert!(
        listed(&screen(&state, 110, 16)).is_empty(),
        "nothing before the reply"
    );
    state.set_view(Ok(GetViewResponse {
        session: Some(session()),
        functions: vec![func(1, "main", 300, 0), func(5, "leaf_a", 300, 300)],
        attributed: 300,
        ..Default::default()
    }));
    let lines = screen(&state, 110, 16);
    let text = lines.join("\n");
    assert_eq!(listed(&lines), ["leaf_a", "main"], "{text}");
    assert!(
        text.contains("only thread 12 (worker): 300 attributed"),
        "{text}"
    );
    let leaf_a = lines.iter().find(|l| l.contains("leaf_a")).unwrap();
    assert!(
        leaf_a.contains("100.0%"),
        "over the thread's samples: {leaf_a}"
    );
    // The tree is the thread's too.
    state.on_key(key('t'));
    assert_eq!(state.only_ids(), (vec![12], vec![]));
    state.on_key(key('t'));
    // x shows every thread again.
    assert_eq!(state.on_key(key('x')), Action::Redraw);
    assert_eq!(state.only, None);
    assert_eq!(listed(&screen(&state, 110, 16)).len(), 6);
    // p in the threads view: the thread's process.
    state.on_key(key('h'));
    state.set_view(Ok(GetViewResponse {
        threads: vec![thread(11, 4242, "split", 700)],
        ..Default::default()
    }));
    state.on_key(key('p'));
    assert_eq!(state.only_ids(), (vec![], vec![4242]));
    assert_eq!(state.on_key(code(KeyCode::Esc)), Action::Redraw);
    assert_eq!(state.only, None);
}

#[test]
fn c_shows_callers_and_callees_of_the_selected_row() {
    let mut state = TuiState::new(profile());
    state.sort = SortKey::Inclusive;
    state.on_key(code(KeyCode::Down)); // work
    let action = state.on_key(key('c'));
    assert_eq!(
        action,
        Action::Fetch(View::Callers(FunctionRef {
            id: 2,
            name: String::new()
        }))
    );
    let edge = |function_id, inclusive, exclusive| Edge {
        function_id,
        inclusive,
        exclusive,
        inclusive_pct: inclusive as f64 / 10.0,
    };
    state.set_view(Ok(GetViewResponse {
        session: Some(session()),
        functions: profile().functions,
        caller_callee: Some(CallerCallee {
            function: Some(func(2, "work", 1000, 0)),
            callers: vec![edge(1, 1000, 0)],
            callees: vec![edge(5, 240, 240), edge(3, 750, 0)],
        }),
        ..Default::default()
    }));
    let lines = screen(&state, 110, 20);
    let text = lines.join("\n");
    let at = |needle: &str| {
        lines
            .iter()
            .position(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("{needle:?} not shown:\n{text}"))
    };
    assert!(at("calling functions:") < at(" main  [split]"), "{text}");
    assert!(at(" main  [split]") < at("current function:"), "{text}");
    assert!(at("current function:") < at(" work  [split]"), "{text}");
    assert!(at("called functions:") < at(" mid  [split]"), "{text}");
    assert!(
        at(" mid  [split]") < at(" leaf_a  [split]"),
        "callees by samples:\n{text}"
    );
    assert!(lines[at(" leaf_a  [split]")].contains("24.0%"), "{text}");
    // An error from the daemon is shown, not fatal.
    state.set_view(Err(tonic::Status::unimplemented("")));
    assert!(screen(&state, 110, 20)
        .join("\n")
        .contains("cannot show this view: unimplemented"));
    assert_eq!(state.on_key(code(KeyCode::Esc)), Action::Redraw);
    assert_eq!(state.mode, Mode::Table);
}

#[test]
fn window_columns_and_sort() {
    let mut p = profile();
    for f in &mut p.functions {
        if f.name == "leaf_a" {
            f.window_inclusive = 80;
            f.window_exclusive = 80;
        }
        if f.name == "main" {
            f.window_inclusive = 100;
        }
    }
    let p = p.with_window(Some(Window {
        seconds: 5,
        attributed: 100,
    }));
    let mut state = TuiState::new(p);
    let lines = screen(&state, 120, 16);
    let text = lines.join("\n");
    assert!(
        text.contains("W.INCL%") && text.contains("W.EXCL%"),
        "{text}"
    );
    assert!(text.contains("window: last 5 s, 100 attributed"), "{text}");
    let leaf_a = lines.iter().find(|l| l.contains("leaf_a")).unwrap();
    assert!(leaf_a.contains("80.0%"), "{leaf_a}");
    state.on_key(key('w'));
    assert_eq!(&listed(&screen(&state, 120, 16))[..2], ["main", "leaf_a"]);
    // Without a window, w does nothing.
    let mut plain = TuiState::new(profile());
    assert_eq!(plain.on_key(key('w')), Action::None);
}

#[test]
fn off_cpu_sessions_show_times() {
    let mut s = session();
    s.set_mode(profd_common::api::Mode::OffCpu);
    let ms = 1_000_000;
    s.totals = Some(Totals {
        attributed: 1000 * ms,
        unsymbolized: ms,
        time: Some(profd_common::api::TimeTotals {
            on_cpu_ns: 20 * ms,
            off_cpu_ns: 1000 * ms,
            runnable_ns: 3 * ms,
            waits: 40,
            unpaired: 1,
            open_at_end: 0,
            ..Default::default()
        }),
        ..Default::default()
    });
    let functions = profile()
        .functions
        .into_iter()
        .map(|f| func(f.id, &f.name, f.inclusive * ms, f.exclusive * ms))
        .collect();
    let state = TuiState::new(Profile::new(s, functions));
    let lines = screen(&state, 120, 16);
    let text = lines.join("\n");
    assert!(
        lines[0].starts_with("profd session 7 — pid 4242 (split) — off-cpu — "),
        "{text}"
    );
    assert!(
        lines[1].starts_with("time: 1.00 s attributed, 0 discarded, 0 lost; stacks: 0 truncated, 1.00 ms unsymbolized"),
        "{text}"
    );
    assert!(
        lines[2].starts_with("time: on-CPU 20.0 ms, off-CPU 1.00 s (runnable 3.00 ms); 40 waits, 1 unpaired, 0 open at end"),
        "{text}"
    );
    assert_eq!(lines[3], "6 functions", "{text}");
    assert!(text.contains("INCL TIME"), "{text}");
    assert!(text.contains("EXCL TIME"), "{text}");
    let leaf_b = lines.iter().find(|l| l.contains("leaf_b")).unwrap();
    assert!(
        leaf_b.starts_with("  75.0%    750 ms   75.0%    750 ms [.] leaf_b"),
        "{text}"
    );
}

/// C++ names are shortened to fit the function column (their method's
/// name kept), shown whole with `--full-names` and after their id with
/// `--ids`.
#[test]
fn long_names_fit_the_function_column() {
    let long = "app::Table<std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >, long>::lookup(std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > const&) const";
    let p = Profile::new(session(), vec![func(7, long, 100, 100)]);
    let row = |names: crate::views::render::NameStyle| {
        let state = TuiState {
            names,
            ..TuiState::new(p.clone())
        };
        screen(&state, 100, 12)
            .into_iter()
            .find(|l| l.contains("app::"))
            .unwrap_or_default()
    };
    let short = row(Default::default());
    assert!(short.contains("app::Table<…>::lookup(…) const"), "{short}");
    let full = row(crate::views::render::NameStyle {
        full: true,
        ..Default::default()
    });
    assert!(
        full.contains("app::Table<std::__cxx11::basic_str"),
        "{full}"
    );
    let ids = row(crate::views::render::NameStyle {
        ids: true,
        ..Default::default()
    });
    assert!(ids.contains("#7 app::Table<…>::lookup(…) const"), "{ids}");
}

/// At 80 columns the header folds at its separators: the elapsed time,
/// the state and every total stay on the screen.
#[test]
fn a_narrow_terminal_folds_the_header_and_cuts_nothing() {
    let mut s = session();
    s.totals.as_mut().unwrap().unsymbolized = 4088;
    s.duration_s = 12.5;
    let state = TuiState::new(Profile::new(s.clone(), profile().functions));
    let lines = screen(&state, 80, 24);
    let text = lines.join("\n");
    assert!(lines.iter().all(|l| l.chars().count() <= 80), "{text}");
    assert!(text.contains("12.50 s — running"), "{text}");
    assert!(text.contains("4088 unsymbolized"), "{text}");
    assert!(lines[0].starts_with("profd session 7 — "), "{text}");
    assert_eq!(
        listed(&lines).first().map(String::as_str),
        Some("leaf_b"),
        "{text}"
    );
}
