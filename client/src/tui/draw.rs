//! Drawing the live view: a pure function of [`TuiState`] onto a ratatui
//! frame (header, totals, table or view, key help). No I/O.
use profd_common::api::GetViewResponse;
use profd_common::kernel::is_kernel_module;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Cell, Paragraph, Row, Table};
use ratatui::Frame;

use super::state::{Mode, Only, SortKey, TuiState};
use crate::error::status_line;
use crate::views::ranking::percent;
use crate::views::render::{self, INLINED_MARK};
use crate::views::render_views;
use crate::views::units::{count_text, counts_time, incl_excl};

/// Draws the whole screen.
pub fn draw(frame: &mut Frame, state: &TuiState) {
    let header_text = header_lines(state, usize::from(frame.area().width));
    let [header, body, footer] = Layout::vertical([
        Constraint::Length(header_text.len() as u16),
        Constraint::Min(1),
        Constraint::Length(1),
    ])
    .areas(frame.area());
    frame.render_widget(Paragraph::new(header_text), header);
    match state.mode {
        Mode::Table => draw_table(frame, body, state),
        Mode::Threads => draw_threads(frame, body, state),
        _ => draw_view(frame, body, state),
    }
    frame.render_widget(Paragraph::new(footer_line(state)), footer);
}

/// The header: the final table's lines (session, target, measure,
/// unwinding, scope, elapsed time, state; totals; time accounting and
/// processes where the session has them), then the functions, the window
/// and the rate of the last update. Lines wider than `width` are folded
/// at their ` — ` and `; ` breaks, so that nothing (the elapsed time and
/// the state last of all) is cut off on a narrow terminal.
fn header_lines(state: &TuiState, width: usize) -> Vec<Line<'static>> {
    let s = &state.profile.session;
    let header = render::table_header(s);
    let mut lines: Vec<Line<'static>> = Vec::new();
    for (i, line) in header.lines().enumerate() {
        if i == 0 {
            // While q's Stop is on its way, the state says so.
            let title = match line.rsplit_once(" — ") {
                Some((rest, _)) if state.stopping => format!("{rest} — stopping…"),
                _ => line.to_string(),
            };
            for part in fold(&title, width) {
                lines.push(Line::styled(
                    part,
                    Style::new().add_modifier(Modifier::BOLD),
                ));
            }
        } else {
            lines.extend(fold(line, width).into_iter().map(Line::raw));
        }
    }
    let n = |v: u64| count_text(s, v);
    let mut last = match state.profile.window {
        Some(w) => format!(
            "window: last {} s, {} attributed; {} functions",
            w.seconds,
            n(w.attributed),
            state.profile.functions.len()
        ),
        None => format!("{} functions", state.profile.functions.len()),
    };
    if let Some(rate) = state.rate {
        let per_s = if counts_time(s) {
            format!("{} per second", n(rate.round() as u64))
        } else {
            format!("{rate:.0} samples/s")
        };
        last = format!("{last}; {per_s}");
    }
    lines.push(Line::raw(last));
    if let Some(only) = &state.only {
        let who = match only {
            Only::Thread(tid, name) if name.is_empty() => format!("thread {tid}"),
            Only::Thread(tid, name) => format!("thread {tid} ({name})"),
            Only::Process(pid) => format!("process {pid}"),
        };
        let text = format!(
            "only {who}: {} attributed (x shows every thread)",
            n(state.table().1)
        );
        lines.push(Line::styled(
            text,
            Style::new().add_modifier(Modifier::REVERSED),
        ));
    }
    lines
}

/// `line` in pieces at most `width` characters wide where it can be: broken
/// after its ` — `, `; ` and `, ` separators (the later pieces indented by
/// two spaces); a piece with no break in it stays whole.
fn fold(line: &str, width: usize) -> Vec<String> {
    let mut pieces: Vec<String> = Vec::new();
    let mut current = String::new();
    let mut rest = line;
    while !rest.is_empty() {
        let cut = [" — ", "; ", ", "]
            .iter()
            .filter_map(|sep| rest.find(sep).map(|i| i + sep.len()))
            .min()
            .unwrap_or(rest.len());
        let (word, after) = rest.split_at(cut);
        rest = after;
        let fits = current.chars().count() + word.trim_end().chars().count() <= width;
        if !current.is_empty() && !fits {
            pieces.push(current.trim_end().to_string());
            current = "  ".to_string();
        }
        current.push_str(word);
    }
    pieces.push(current.trim_end().to_string());
    pieces
}

/// The colour of a percentage, as perf colours its: red from 5 %, green
/// from 0.5 %; none below, or when colour is off.
fn heat(state: &TuiState, pct: f64) -> Style {
    match pct {
        _ if !state.colour => Style::new(),
        p if p >= 5.0 => Style::new().fg(Color::Red),
        p if p >= 0.5 => Style::new().fg(Color::Green),
        _ => Style::new(),
    }
}

/// A column title with ▼ (or ▲ when reversed) on the sort column.
fn title(state: &TuiState, text: &str, key: SortKey) -> String {
    if state.sort != key {
        text.to_string()
    } else if state.reverse {
        format!("{text}▲")
    } else {
        format!("{text}▼")
    }
}

fn draw_table(frame: &mut Frame, area: Rect, state: &TuiState) {
    let rows = state.rows();
    let attributed = state.table().1;
    // A filtered table comes without windowed figures.
    let window = state.profile.window.filter(|_| state.only.is_none());
    let session = &state.profile.session;
    let (incl, excl) = incl_excl(session);
    // Count columns: 8 wide, 9 for times (`INCL TIME`, `999.5 ms`).
    let cw = if counts_time(session) { 9 } else { 8 };
    // Number columns: titles and cells right-aligned to the column width.
    let mut titles = vec![
        format!("{:>7}", title(state, "INCL%", SortKey::Inclusive)),
        format!("{incl:>cw$}"),
        format!("{:>7}", title(state, "EXCL%", SortKey::Exclusive)),
        format!("{excl:>cw$}"),
    ];
    let mut widths = vec![
        Constraint::Length(7),
        Constraint::Length(cw as u16),
        Constraint::Length(7),
        Constraint::Length(cw as u16),
    ];
    if window.is_some() {
        titles.push(format!("{:>8}", title(state, "W.INCL%", SortKey::Window)));
        titles.push(format!("{:>8}", "W.EXCL%"));
        widths.extend([Constraint::Length(8), Constraint::Length(8)]);
    }
    // perf top's marks: [k] kernel code, [.] user code.
    titles.push(String::new());
    titles.push(title(state, "FUNCTION", SortKey::Name));
    titles.push("MODULE".to_string());
    // The function column takes what the others leave (one space between
    // columns, and the user/kernel mark's); names are shortened to fit it.
    let others: u16 = widths
        .iter()
        .map(|w| match w {
            Constraint::Length(n) => n + 1,
            _ => 1,
        })
        .sum::<u16>()
        + 4
        + 20;
    let name_width = usize::from(area.width.saturating_sub(others)).max(20);
    widths.extend([
        Constraint::Length(3),
        Constraint::Min(20),
        Constraint::Length(20),
    ]);

    // Rows that fit under the column header; scroll to keep the selection shown.
    let height = usize::from(area.height.saturating_sub(1)).max(1);
    let selected = state.selected_index(&rows);
    let first = (selected + 1).saturating_sub(height);
    let body: Vec<Row> = rows
        .iter()
        .enumerate()
        .skip(first)
        .take(height)
        .map(|(i, f)| {
            let pct = |count, total, width: usize| {
                let p = percent(count, total);
                Cell::from(format!("{:>width$}", format!("{p:.1}%"))).style(heat(state, p))
            };
            let mut cells = vec![
                pct(f.inclusive, attributed, 7),
                Cell::from(format!("{:>cw$}", count_text(session, f.inclusive))),
                pct(f.exclusive, attributed, 7),
                Cell::from(format!("{:>cw$}", count_text(session, f.exclusive))),
            ];
            if let Some(w) = window {
                cells.push(pct(f.window_inclusive, w.attributed, 8));
                cells.push(pct(f.window_exclusive, w.attributed, 8));
            }
            let name = if f.inlined {
                let names = state
                    .names
                    .at_most(name_width.saturating_sub(INLINED_MARK.len()));
                format!("{}{INLINED_MARK}", names.name(f.id, &f.name))
            } else {
                state.names.at_most(name_width).name(f.id, &f.name)
            };
            let kernel = is_kernel_module(&f.module);
            cells.push(Cell::from(if kernel { "[k]" } else { "[.]" }));
            let name = Cell::from(name);
            cells.push(if kernel && state.colour {
                name.style(Style::new().fg(Color::Cyan))
            } else {
                name
            });
            cells.push(Cell::from(f.module.clone()));
            let row = Row::new(cells);
            if i == selected {
                row.style(Style::new().add_modifier(Modifier::REVERSED))
            } else {
                row
            }
        })
        .collect();
    let empty = body.is_empty();
    let table = Table::new(body, widths)
        .header(Row::new(titles).style(Style::new().add_modifier(Modifier::BOLD)))
        .column_spacing(1);
    frame.render_widget(table, area);
    if empty {
        let note = if state.filter.is_empty() {
            "(no samples yet)".to_string()
        } else {
            format!("(no function matches \"{}\")", state.filter)
        };
        let [_, below] = Layout::vertical([Constraint::Length(1), Constraint::Min(0)]).areas(area);
        frame.render_widget(Paragraph::new(note), below);
    }
}

/// The tree as rows to fold and unfold: ▸ before a folded node, ▾ before
/// an open one with children; the selected row reversed.
fn draw_tree(
    frame: &mut Frame,
    area: Rect,
    state: &TuiState,
    reply: &GetViewResponse,
    title: &str,
) {
    let shown = state.tree_rows();
    let mut marks = vec!["  "; reply.nodes.len()];
    for r in &shown {
        marks[r.node] = match r {
            r if r.folded => "▸ ",
            r if r.children => "▾ ",
            _ => "  ",
        };
    }
    let (header, rows) = render_views::tree_lines(reply, title, state.names, |i| marks[i]);
    let mut lines: Vec<Line> = header
        .into_iter()
        .map(|l| Line::styled(l, Style::new().add_modifier(Modifier::BOLD)))
        .collect();
    if shown.is_empty() {
        lines.push(Line::raw("(no samples)"));
    }
    let height = usize::from(area.height).saturating_sub(lines.len()).max(1);
    let selected = state.scroll.min(shown.len().saturating_sub(1));
    let first = (selected + 1).saturating_sub(height);
    for (at, r) in shown.iter().enumerate().skip(first).take(height) {
        let line = Line::raw(rows[r.node].clone());
        lines.push(if at == selected {
            line.style(Style::new().add_modifier(Modifier::REVERSED))
        } else {
            line
        });
    }
    frame.render_widget(Paragraph::new(lines), area);
}

/// The threads, most samples first, the selected one reversed.
fn draw_threads(frame: &mut Frame, area: Rect, state: &TuiState) {
    let text = match &state.view {
        None => "loading…".to_string(),
        Some(Err(e)) => format!("cannot show this view: {}", status_line(e)),
        Some(Ok(reply)) => render_views::threads_text(reply, state.names),
    };
    let all: Vec<&str> = text.lines().collect();
    let Some((header, rows)) = all.split_first() else {
        return;
    };
    let mut lines = vec![Line::styled(
        header.to_string(),
        Style::new().add_modifier(Modifier::BOLD),
    )];
    let height = usize::from(area.height).saturating_sub(1).max(1);
    let selected = state.scroll.min(rows.len().saturating_sub(1));
    let first = (selected + 1).saturating_sub(height);
    for (i, row) in rows.iter().enumerate().skip(first).take(height) {
        let line = Line::raw(row.to_string());
        lines.push(if i == selected && matches!(&state.view, Some(Ok(_))) {
            line.style(Style::new().add_modifier(Modifier::REVERSED))
        } else {
            line
        });
    }
    frame.render_widget(Paragraph::new(lines), area);
}

fn draw_view(frame: &mut Frame, area: Rect, state: &TuiState) {
    let text = match (&state.mode, &state.view) {
        (_, None) => "loading…".to_string(),
        (_, Some(Err(e))) => format!("cannot show this view: {}", status_line(e)),
        (Mode::Tree { bottom_up }, Some(Ok(reply))) => {
            let title = if *bottom_up {
                "call tree, bottom-up"
            } else {
                "call tree, top-down"
            };
            return draw_tree(frame, area, state, reply, title);
        }
        (_, Some(Ok(reply))) => render_views::caller_callee_text(reply, true, true, state.names),
    };
    let lines: Vec<Line> = text.lines().map(|l| Line::raw(l.to_string())).collect();
    let height = usize::from(area.height).max(1);
    let scroll = state.scroll.min(lines.len().saturating_sub(height));
    let shown: Vec<Line> = lines.into_iter().skip(scroll).take(height).collect();
    frame.render_widget(Paragraph::new(shown), area);
}

fn footer_line(state: &TuiState) -> Line<'static> {
    if state.editing_filter {
        return Line::styled(
            format!("filter: {}▏  (Enter: keep, Esc: clear)", state.filter),
            Style::new().add_modifier(Modifier::REVERSED),
        );
    }
    let keys = match state.mode {
        Mode::Table => {
            let window = if state.profile.window.is_some() {
                " w"
            } else {
                ""
            };
            let only = if state.only.is_some() { "  x all" } else { "" };
            format!(
                "q quit  sort: i e n{window}  / filter  t tree  c callers/callees  h threads{only}  ↑↓ select"
            )
        }
        Mode::Tree { .. } => {
            "q quit  t/Esc table  b bottom-up/top-down  ↑↓ select  Enter/←/→ fold".to_string()
        }
        Mode::Callers { .. } => "q quit  c/Esc table  ↑↓ scroll".to_string(),
        Mode::Threads => {
            "q quit  h/Esc table  ↑↓ select  Enter this thread only  p its process only".to_string()
        }
    };
    if state.filter.is_empty() {
        Line::raw(keys)
    } else {
        Line::raw(format!("{keys}  [filter: {}]", state.filter))
    }
}
