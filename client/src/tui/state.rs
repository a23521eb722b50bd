//! What the live view shows and how keys change it: the latest profile, the
//! sort order, the name filter, the selected row, and the tree or
//! callers/callees view fetched from the daemon. No I/O: keys in, actions
//! out (the caller performs them).
use std::cmp::Ordering;
use std::collections::HashSet;

use profd_common::api::get_view_request::View;
use profd_common::api::{
    Function, FunctionRef, FunctionsRequest, GetViewResponse, ThreadsRequest, TreeRequest,
};

use crate::views::render::NameStyle;
use ratatui::crossterm::event::{Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use crate::views::ranking::Profile;
use crate::views::ranking::SortArg;

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

impl From<SortArg> for SortKey {
    fn from(s: SortArg) -> Self {
        match s {
            SortArg::Exclusive => SortKey::Exclusive,
            SortArg::Inclusive => SortKey::Inclusive,
            SortArg::Name => SortKey::Name,
        }
    }
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
    /// The threads, to choose one (or its process) to show alone (key `h`).
    Threads,
}

/// What a choice in the threads view shows only: the thread, or its
/// process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Choose {
    Thread,
    Process,
}

/// The samples the table and views are over, when not all of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Only {
    /// One thread: its id and name.
    Thread(u32, String),
    /// One process (of a session that follows children).
    Process(u32),
}

/// A row of the tree as shown (see [`TuiState::tree_rows`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeRow {
    /// Index of the node in the reply.
    pub node: usize,
    /// The node has children (it can be folded).
    pub children: bool,
    /// Its children are hidden.
    pub folded: bool,
    /// Its depth in the tree (0 for a root).
    pub depth: u32,
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
    pub view: Option<Result<GetViewResponse, tonic::Status>>,
    /// First line shown of the callers view; the selected row of the tree.
    pub scroll: usize,
    /// Tree nodes folded (their subtrees hidden), by their path of
    /// function ids from the root, so that they stay folded across updates.
    pub folded: HashSet<Vec<u64>>,
    /// q was pressed: the session is being stopped.
    pub stopping: bool,
    /// Attributed samples (or nanoseconds) per second of the session at
    /// the last update; None before two updates.
    pub rate: Option<f64>,
    /// Percentages and kernel rows in colour (off with `NO_COLOR`).
    pub colour: bool,
    /// Only this thread's or process's samples (the table then comes from
    /// GetView, refreshed at each update).
    pub only: Option<Only>,
    /// How function names are shown (`--full-names`, `--ids`; the width
    /// is the column's).
    pub names: NameStyle,
}

impl TuiState {
    /// The state before any key, showing `profile` by exclusive samples
    /// (`--sort`'s default).
    pub fn new(profile: Profile) -> Self {
        TuiState {
            profile,
            sort: SortKey::Exclusive,
            reverse: false,
            filter: String::new(),
            editing_filter: false,
            selected: None,
            mode: Mode::Table,
            view: None,
            scroll: 0,
            folded: HashSet::new(),
            stopping: false,
            rate: None,
            colour: std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
            only: None,
            names: NameStyle::default(),
        }
    }

    /// A new profile from the Watch stream.
    /// The rate is the attributed samples (or time) between the last two
    /// profiles over the session time between them.
    pub fn set_profile(&mut self, profile: Profile) {
        let (before, now) = (&self.profile.session, &profile.session);
        let seconds = now.duration_s - before.duration_s;
        if before.id == now.id && seconds > 0.0 {
            let added = profile
                .totals()
                .attributed
                .saturating_sub(self.profile.totals().attributed);
            self.rate = Some(added as f64 / seconds);
        }
        self.profile = profile;
    }

    /// A reply to the last [`Action::Fetch`] (or to [`TuiState::refresh_request`]).
    pub fn set_view(&mut self, reply: Result<GetViewResponse, tonic::Status>) {
        if self.mode != Mode::Table || self.only.is_some() {
            self.view = Some(reply);
        }
    }

    /// The thread and process ids of [`TuiState::only`] for GetView (none
    /// in the threads view, which lists every thread).
    pub fn only_ids(&self) -> (Vec<u32>, Vec<u32>) {
        match (&self.only, &self.mode) {
            (_, Mode::Threads) | (None, _) => (Vec::new(), Vec::new()),
            (Some(Only::Thread(tid, _)), _) => (vec![*tid], Vec::new()),
            (Some(Only::Process(pid)), _) => (Vec::new(), vec![*pid]),
        }
    }

    /// The functions of the table: the session's, or with [`TuiState::only`]
    /// those of the last filtered reply (none before it comes), and the
    /// samples they are over.
    pub fn table(&self) -> (&[Function], u64) {
        match (&self.only, &self.view) {
            (None, _) => (&self.profile.functions, self.profile.totals().attributed),
            (Some(_), Some(Ok(reply))) if self.mode == Mode::Table => {
                (&reply.functions, reply.attributed)
            }
            (Some(_), _) => (&[], 0),
        }
    }

    /// The rows the table lists: filtered by name, in the chosen order.
    pub fn rows(&self) -> Vec<&Function> {
        let needle = self.filter.to_lowercase();
        let mut rows: Vec<&Function> = self
            .table()
            .0
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
            primary.then_with(|| crate::views::ranking::display_order(a, b))
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
            Mode::Table if self.only.is_some() => Some(View::Functions(FunctionsRequest {})),
            Mode::Table => None,
            Mode::Threads => Some(View::Threads(ThreadsRequest {})),
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
            KeyCode::Char('h') => match self.mode {
                Mode::Threads => self.enter(Mode::Table),
                _ => self.enter(Mode::Threads),
            },
            KeyCode::Enter if self.mode == Mode::Threads => self.choose_thread(Choose::Thread),
            KeyCode::Char('p') if self.mode == Mode::Threads => self.choose_thread(Choose::Process),
            KeyCode::Char('x') if self.only.is_some() => self.show_only(None),
            KeyCode::Char('b') => match self.mode {
                Mode::Tree { bottom_up } => self.enter(Mode::Tree {
                    bottom_up: !bottom_up,
                }),
                _ => Action::None,
            },
            KeyCode::Enter | KeyCode::Char(' ') if self.is_tree() => self.fold(None),
            KeyCode::Right | KeyCode::Char('+') if self.is_tree() => self.fold(Some(false)),
            KeyCode::Left | KeyCode::Char('-') if self.is_tree() => self.fold(Some(true)),
            KeyCode::Char('c') | KeyCode::Enter => self.toggle_callers(),
            KeyCode::Esc => match self.mode {
                Mode::Table if !self.filter.is_empty() => {
                    self.filter.clear();
                    Action::Redraw
                }
                Mode::Table if self.only.is_some() => self.show_only(None),
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

    /// The thread (or its process) selected in the threads view becomes
    /// the only one shown, in the table.
    fn choose_thread(&mut self, choose: Choose) -> Action {
        let Some(Ok(reply)) = &self.view else {
            return Action::None;
        };
        let Some(t) = reply.threads.get(self.scroll) else {
            return Action::None;
        };
        let only = match choose {
            Choose::Process if t.pid == 0 => return Action::None,
            Choose::Process => Only::Process(t.pid),
            Choose::Thread => Only::Thread(t.tid, t.name.clone()),
        };
        self.show_only(Some(only))
    }

    /// Shows `only` those samples (or all) in the table.
    fn show_only(&mut self, only: Option<Only>) -> Action {
        self.only = only;
        self.selected = None;
        self.enter(Mode::Table)
    }

    fn is_tree(&self) -> bool {
        matches!(self.mode, Mode::Tree { .. })
    }

    /// The tree's rows as shown: each node not under a folded one, with
    /// whether it has children and whether it is folded. Empty without a
    /// tree reply.
    pub fn tree_rows(&self) -> Vec<TreeRow> {
        let nodes = match (&self.mode, &self.view) {
            (Mode::Tree { .. }, Some(Ok(reply))) => &reply.nodes,
            _ => return Vec::new(),
        };
        let mut paths: Vec<Vec<u64>> = Vec::with_capacity(nodes.len());
        let mut rows = Vec::new();
        // Nodes deeper than this are under a folded node.
        let mut hide_below: Option<u32> = None;
        for (i, n) in nodes.iter().enumerate() {
            let mut path = usize::try_from(n.parent)
                .ok()
                .and_then(|p| paths.get(p).cloned())
                .unwrap_or_default();
            path.push(n.function_id);
            match hide_below {
                Some(d) if n.depth > d => {
                    paths.push(path);
                    continue;
                }
                _ => hide_below = None,
            }
            let children = nodes.get(i + 1).is_some_and(|c| c.parent == i as i32);
            let folded = children && self.folded.contains(&path);
            if folded {
                hide_below = Some(n.depth);
            }
            rows.push(TreeRow {
                node: i,
                children,
                folded,
                depth: n.depth,
            });
            paths.push(path);
        }
        rows
    }

    /// Folds (`Some(true)`), unfolds (`Some(false)`) or toggles (`None`)
    /// the selected tree node. Folding a node without children, or one
    /// already folded, selects its parent instead.
    fn fold(&mut self, fold: Option<bool>) -> Action {
        let rows = self.tree_rows();
        let Some(row) = rows.get(self.scroll.min(rows.len().saturating_sub(1))) else {
            return Action::None;
        };
        let path = self.tree_path(row.node);
        let fold = fold.unwrap_or(!row.folded);
        if fold && (!row.children || row.folded) {
            if let Some(parent) = rows[..self.scroll.min(rows.len())]
                .iter()
                .rposition(|r| r.depth < row.depth)
            {
                self.scroll = parent;
            }
        } else if fold {
            self.folded.insert(path);
        } else {
            self.folded.remove(&path);
        }
        Action::Redraw
    }

    /// The path of function ids from the root to tree node `i`.
    fn tree_path(&self, i: usize) -> Vec<u64> {
        let Some(Ok(reply)) = &self.view else {
            return Vec::new();
        };
        let mut path = Vec::new();
        let mut at = i as i32;
        while let Some(n) = usize::try_from(at).ok().and_then(|i| reply.nodes.get(i)) {
            path.push(n.function_id);
            at = n.parent;
        }
        path.reverse();
        path
    }

    fn move_by(&mut self, delta: isize) -> Action {
        if self.mode == Mode::Threads {
            let threads = match &self.view {
                Some(Ok(reply)) => reply.threads.len(),
                _ => 0,
            };
            self.scroll = step(self.scroll, delta, threads.saturating_sub(1));
            return Action::Redraw;
        }
        if self.is_tree() {
            let last = self.tree_rows().len().saturating_sub(1);
            self.scroll = step(self.scroll.min(last), delta, last);
            return Action::Redraw;
        }
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
