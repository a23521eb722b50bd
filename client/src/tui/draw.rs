//! Drawing the live view: a pure function of [`TuiState`] onto a ratatui
//! frame (header, totals, table or view, key help). No I/O.
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Cell, Paragraph, Row, Table};
use ratatui::Frame;

use super::state::{Mode, SortKey, TuiState};
use crate::ranking::percent;
use crate::render::{state_name, unwind_text, INLINED_MARK};
use crate::render_views;
use crate::units::{
    count_text, counts_time, counts_word, incl_excl, measure_text, time_totals_text,
};

/// Draws the whole screen.
pub fn draw(frame: &mut Frame, state: &TuiState) {
    let [header, body, footer] = Layout::vertical([
        Constraint::Length(3),
        Constraint::Min(1),
        Constraint::Length(1),
    ])
    .areas(frame.area());
    frame.render_widget(Paragraph::new(header_lines(state)), header);
    match state.mode {
        Mode::Table => draw_table(frame, body, state),
        _ => draw_view(frame, body, state),
    }
    frame.render_widget(Paragraph::new(footer_line(state)), footer);
}

fn header_lines(state: &TuiState) -> Vec<Line<'static>> {
    let s = &state.profile.session;
    let t = state.profile.totals();
    let target = if s.comm.is_empty() {
        format!("pid {}", s.pid)
    } else {
        format!("pid {} ({})", s.pid, s.comm)
    };
    let status = if state.stopping {
        "stopping…".to_string()
    } else {
        state_name(s.state()).to_string()
    };
    let title = format!(
        "profd session {} — {target} — {} — {} — {:.1} s — {status}",
        s.id,
        measure_text(s),
        unwind_text(s),
        s.duration_s,
    );
    let n = |v: u64| count_text(s, v);
    let totals = format!(
        "{}: {} attributed, {} discarded, {} lost; stacks: {} truncated, {} unsymbolized",
        counts_word(s, false),
        n(t.attributed),
        t.discarded,
        t.lost,
        t.truncated,
        n(t.unsymbolized)
    );
    let functions = match state.profile.window {
        Some(w) => format!(
            "window: last {} s, {} attributed; {} functions",
            w.seconds,
            n(w.attributed),
            state.profile.functions.len()
        ),
        None => format!("{} functions", state.profile.functions.len()),
    };
    // Off-CPU and wall-clock sessions: the time accounting before it.
    let third = if counts_time(s) {
        format!(
            "{}; {functions}",
            time_totals_text(&t.time.unwrap_or_default())
        )
    } else {
        functions
    };
    vec![
        Line::styled(title, Style::new().add_modifier(Modifier::BOLD)),
        Line::raw(totals),
        Line::raw(third),
    ]
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
    let attributed = state.profile.totals().attributed;
    let window = state.profile.window;
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
    titles.push(title(state, "FUNCTION", SortKey::Name));
    titles.push("MODULE".to_string());
    // The function column takes what the others leave (one space between
    // columns); names are shortened to fit it.
    let others: u16 = widths
        .iter()
        .map(|w| match w {
            Constraint::Length(n) => n + 1,
            _ => 1,
        })
        .sum::<u16>()
        + 20;
    let name_width = usize::from(area.width.saturating_sub(others)).max(20);
    widths.extend([Constraint::Min(20), Constraint::Length(20)]);

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
                Cell::from(format!(
                    "{:>width$}",
                    format!("{:.1}%", percent(count, total))
                ))
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
            cells.push(Cell::from(name));
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

fn draw_view(frame: &mut Frame, area: Rect, state: &TuiState) {
    let text = match (&state.mode, &state.view) {
        (_, None) => "loading…".to_string(),
        (_, Some(Err(e))) => format!("cannot show this view: {e}"),
        (Mode::Tree { bottom_up }, Some(Ok(reply))) => render_views::tree_text(
            reply,
            if *bottom_up {
                "call tree, bottom-up"
            } else {
                "call tree, top-down"
            },
            state.names,
        ),
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
            format!("q quit  sort: i e n{window}  / filter  t tree  c callers/callees  ↑↓ select")
        }
        Mode::Tree { .. } => "q quit  t/Esc table  b bottom-up/top-down  ↑↓ scroll".to_string(),
        Mode::Callers { .. } => "q quit  c/Esc table  ↑↓ scroll".to_string(),
    };
    if state.filter.is_empty() {
        Line::raw(keys)
    } else {
        Line::raw(format!("{keys}  [filter: {}]", state.filter))
    }
}
