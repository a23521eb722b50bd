//! What the live view shows and how keys change it: the latest profile, the
//! sort order, the name filter, the selected row, and the tree or
//! callers/callees view fetched from the daemon. No I/O: keys in, actions
//! out (the caller performs them).
use std::cmp::Ordering;

use profd_common::api::get_view_request::View;
use profd_common::api::{Function, FunctionRef, GetViewResponse, TreeRequest};

use crate::render::NameStyle;
use ratatui::crossterm::event::{Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use crate::ranking::Profile;

/// Nodes below this share of the samples are left out of the TUI's tree.
pub const TREE_MIN_PCT: f64 = 0.5;

/// Table orders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SortKey {
    /// Inclusive samples, most first (key `i`).
    Inclusive,
    /// Exclusive samples, most first (key `e`).
    Exclusive,
    /// Name, A to Z (key `n`).
    Name,
    /// Inclusive samples in the window, most first (key `w`, with --window).
    Window,
}

/// What the body of the screen shows.
#[derive(Debug, Clone, PartialEq)]
pub enum Mode {
    /// The inclusive/exclusive table.
    Table,
    /// The call tree (key `t`; `b` flips top-down / bottom-up).
    Tree {
        /// From the innermost frames out.
        bottom_up: bool,
    },
    /// Callers and callees of a function (key `c` on a row).
    Callers {
        /// The function.
        function: FunctionRef,
    },
}

/// What the caller should do after a key.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Nothing changed.
    None,
    /// Draw again.
    Redraw,
    /// Stop the session (q, Ctrl-C).
    Quit,
    /// Fetch this view (GetView) and pass the reply to [`TuiState::set_view`].
    Fetch(View),
}

/// The whole state of the live view; drawing is a function of it.
#[derive(Debug, Clone)]
pub struct TuiState {
    /// The profile as of the latest update.
    pub profile: Profile,
    /// Table order.
    pub sort: SortKey,
    /// Reverse the order (pressing the sort key again).
    pub reverse: bool,
    /// Only names containing this (case-insensitive) are listed.
    pub filter: String,
    /// Typing into the filter (after `/`, until Enter or Esc).
    pub editing_filter: bool,
    /// The selected function's id.
    pub selected: Option<u64>,
    /// What the body shows.
    pub mode: Mode,
    /// The latest reply for the tree or callers view, or why it failed.
    pub view: Option<Result<GetViewResponse, String>>,
    /// First line shown of the tree or callers view.
    pub scroll: usize,
    /// q was pressed: the session is being stopped.
    pub stopping: bool,
    /// How function names are shown (`--full-names`, `--ids`; the width
    /// is the column's).
    pub names: NameStyle,
}

impl TuiState {
    /// The state before any key, showing `profile`.
    pub fn new(profile: Profile) -> Self {
        TuiState {
            profile,
            sort: SortKey::Inclusive,
            reverse: false,
            filter: String::new(),
            editing_filter: false,
            selected: None,
            mode: Mode::Table,
            view: None,
            scroll: 0,
            stopping: false,
            names: NameStyle::default(),
        }
    }

    /// A new profile from the Watch stream.
    pub fn set_profile(&mut self, profile: Profile) {
        self.profile = profile;
    }

    /// A reply to the last [`Action::Fetch`] (or to [`TuiState::refresh_request`]).
    pub fn set_view(&mut self, reply: Result<GetViewResponse, String>) {
        if self.mode != Mode::Table {
            self.view = Some(reply);
        }
    }

    /// The rows the table lists: filtered by name, in the chosen order.
    pub fn rows(&self) -> Vec<&Function> {
        let needle = self.filter.to_lowercase();
        let mut rows: Vec<&Function> = self
            .profile
            .functions
            .iter()
            .filter(|f| needle.is_empty() || f.name.to_lowercase().contains(&needle))
            .collect();
        rows.sort_by(|a, b| {
            let primary = match self.sort {
                SortKey::Inclusive => b.inclusive.cmp(&a.inclusive),
                SortKey::Exclusive => b.exclusive.cmp(&a.exclusive),
                SortKey::Name => a.name.cmp(&b.name),
                SortKey::Window => b.window_inclusive.cmp(&a.window_inclusive),
            };
            let primary = if self.reverse {
                primary.reverse()
            } else {
                primary
            };
            primary.then_with(|| crate::ranking::display_order(a, b))
        });
        rows
    }

    /// The selected row's index in [`TuiState::rows`] (the first row when
    /// the selected function is not listed).
    pub fn selected_index(&self, rows: &[&Function]) -> usize {
        self.selected
            .and_then(|id| rows.iter().position(|f| f.id == id))
            .unwrap_or(0)
    }

    /// The GetView request that refreshes the current view, if it has one.
    pub fn refresh_request(&self) -> Option<View> {
        match &self.mode {
            Mode::Table => None,
            Mode::Tree { bottom_up } => Some(View::Tree(TreeRequest {
                bottom_up: *bottom_up,
                min_pct: TREE_MIN_PCT,
                max_depth: 0,
            })),
            Mode::Callers { function } => Some(View::Callers(function.clone())),
        }
    }

    /// Handles one terminal event.
    pub fn on_event(&mut self, event: &Event) -> Action {
        match event {
            Event::Key(key) if key.kind != KeyEventKind::Release => self.on_key(*key),
            Event::Resize(..) => Action::Redraw,
            _ => Action::None,
        }
    }

    /// Handles one key press.
    pub fn on_key(&mut self, key: KeyEvent) -> Action {
        let ctrl_c = key.modifiers.contains(KeyModifiers::CONTROL)
            && matches!(key.code, KeyCode::Char('c') | KeyCode::Char('C'));
        if ctrl_c {
            self.stopping = true;
            return Action::Quit;
        }
        if self.editing_filter {
            return self.on_filter_key(key);
        }
        match key.code {
            KeyCode::Char('q') | KeyCode::Char('Q') => {
                self.stopping = true;
                Action::Quit
            }
            KeyCode::Char('i') => self.sort_by(SortKey::Inclusive),
            KeyCode::Char('e') => self.sort_by(SortKey::Exclusive),
            KeyCode::Char('n') => self.sort_by(SortKey::Name),
            KeyCode::Char('w') if self.profile.window.is_some() => self.sort_by(SortKey::Window),
            KeyCode::Char('/') if self.mode == Mode::Table => {
                self.editing_filter = true;
                Action::Redraw
            }
            KeyCode::Char('t') => self.toggle_tree(),
            KeyCode::Char('b') => match self.mode {
                Mode::Tree { bottom_up } => self.enter(Mode::Tree {
                    bottom_up: !bottom_up,
                }),
                _ => Action::None,
            },
            KeyCode::Char('c') | KeyCode::Enter => self.toggle_callers(),
            KeyCode::Esc => match self.mode {
                Mode::Table if !self.filter.is_empty() => {
                    self.filter.clear();
                    Action::Redraw
                }
                Mode::Table => Action::None,
                _ => self.enter(Mode::Table),
            },
            KeyCode::Up | KeyCode::Char('k') => self.move_by(-1),
            KeyCode::Down | KeyCode::Char('j') => self.move_by(1),
            KeyCode::PageUp => self.move_by(-20),
            KeyCode::PageDown => self.move_by(20),
            KeyCode::Home | KeyCode::Char('g') => self.move_by(isize::MIN / 2),
            KeyCode::End | KeyCode::Char('G') => self.move_by(isize::MAX / 2),
            _ => Action::None,
        }
    }

    fn on_filter_key(&mut self, key: KeyEvent) -> Action {
        match key.code {
            KeyCode::Enter => self.editing_filter = false,
            KeyCode::Esc => {
                self.editing_filter = false;
                self.filter.clear();
            }
            KeyCode::Backspace => {
                self.filter.pop();
            }
            KeyCode::Char(c) => self.filter.push(c),
            _ => return Action::None,
        }
        Action::Redraw
    }

    fn sort_by(&mut self, key: SortKey) -> Action {
        if self.sort == key {
            self.reverse = !self.reverse;
        } else {
            self.sort = key;
            self.reverse = false;
        }
        Action::Redraw
    }

    fn toggle_tree(&mut self) -> Action {
        match self.mode {
            Mode::Tree { .. } => self.enter(Mode::Table),
            _ => self.enter(Mode::Tree { bottom_up: false }),
        }
    }

    fn toggle_callers(&mut self) -> Action {
        if let Mode::Callers { .. } = self.mode {
            return self.enter(Mode::Table);
        }
        if self.mode != Mode::Table {
            return Action::None;
        }
        let rows = self.rows();
        let Some(f) = rows.get(self.selected_index(&rows)) else {
            return Action::None;
        };
        // By id alone: names are not unique (an inlined copy, two modules).
        let function = FunctionRef {
            id: f.id,
            name: String::new(),
        };
        self.enter(Mode::Callers { function })
    }

    /// Switches the body; a tree or callers view is fetched afresh.
    fn enter(&mut self, mode: Mode) -> Action {
        self.mode = mode;
        self.view = None;
        self.scroll = 0;
        match self.refresh_request() {
            Some(request) => Action::Fetch(request),
            None => Action::Redraw,
        }
    }

    fn move_by(&mut self, delta: isize) -> Action {
        if self.mode != Mode::Table {
            let lines = match &self.view {
                Some(Ok(_)) => usize::MAX / 2,
                _ => 0,
            };
            self.scroll = step(self.scroll, delta, lines);
            return Action::Redraw;
        }
        let rows = self.rows();
        if rows.is_empty() {
            return Action::None;
        }
        let at = step(self.selected_index(&rows), delta, rows.len() - 1);
        self.selected = Some(rows[at].id);
        Action::Redraw
    }
}

/// `at + delta`, kept within `0..=max`.
fn step(at: usize, delta: isize, max: usize) -> usize {
    let moved = match delta.cmp(&0) {
        Ordering::Less => at.saturating_sub(delta.unsigned_abs()),
        _ => at.saturating_add(delta as usize),
    };
    moved.min(max)
}
