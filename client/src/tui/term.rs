//! The terminal side of the live view: raw mode and the alternate screen
//! (restored on drop, also on errors and panics), a thread reading terminal
//! events into a channel, and drawing the state.
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::event::{self, Event};
use ratatui::crossterm::terminal::{
    disable_raw_mode, enable_raw_mode, EnterAlternateScreen, LeaveAlternateScreen,
};
use ratatui::crossterm::{cursor, execute};
use ratatui::Terminal;
use tokio::sync::mpsc;

use super::draw::draw;
use super::state::{Action, TuiState};
use crate::views::output::Stream;
use crate::views::ranking::Profile;
use crate::views::ranking::SortArg;
use crate::views::render::NameStyle;

/// How often the event thread checks whether it should end.
const POLL: Duration = Duration::from_millis(100);

/// A running full-screen view.
pub struct Tui {
    terminal: Terminal<CrosstermBackend<Stream>>,
    events: mpsc::Receiver<Event>,
    stop_reader: Arc<AtomicBool>,
    active: bool,
    /// What is shown.
    pub state: TuiState,
}

impl Tui {
    /// Switches the terminal to raw mode and the alternate screen (drawn on
    /// `stream`) and starts reading keys.
    pub fn start(
        profile: Profile,
        sort: SortArg,
        names: NameStyle,
        stream: Stream,
    ) -> io::Result<Tui> {
        enable_raw_mode()?;
        let mut out = stream;
        if let Err(e) = execute!(out, EnterAlternateScreen, cursor::Hide) {
            let _ = disable_raw_mode();
            return Err(e);
        }
        let (tx, events) = mpsc::channel(64);
        let stop_reader = Arc::new(AtomicBool::new(false));
        let stop = stop_reader.clone();
        std::thread::Builder::new()
            .name("profctl-keys".into())
            .spawn(move || read_events(tx, stop))?;
        let mut tui = Tui {
            terminal: Terminal::new(CrosstermBackend::new(out))?,
            events,
            stop_reader,
            active: true,
            state: TuiState {
                names,
                ..TuiState::new(profile)
            },
        };
        tui.state.sort = sort.into();
        tui.terminal.clear()?;
        tui.draw()?;
        Ok(tui)
    }

    /// Draws the current state.
    pub fn draw(&mut self) -> io::Result<()> {
        let state = &self.state;
        self.terminal.draw(|frame| draw(frame, state)).map(|_| ())
    }

    /// Waits for the next terminal event and applies it to the state; never
    /// returns once the event thread has ended.
    pub async fn next_action(&mut self) -> Action {
        loop {
            match self.events.recv().await {
                Some(event) => match self.state.on_event(&event) {
                    Action::None => continue,
                    action => return action,
                },
                None => std::future::pending::<()>().await,
            }
        }
    }

    /// Leaves the alternate screen and raw mode (once).
    pub fn restore(&mut self) {
        if !self.active {
            return;
        }
        self.active = false;
        self.stop_reader.store(true, Ordering::Relaxed);
        let _ = disable_raw_mode();
        let _ = execute!(
            self.terminal.backend_mut(),
            LeaveAlternateScreen,
            cursor::Show
        );
    }
}

impl Drop for Tui {
    fn drop(&mut self) {
        self.restore();
    }
}

/// Forwards terminal events until told to stop or the receiver is gone.
fn read_events(tx: mpsc::Sender<Event>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) && !tx.is_closed() {
        match event::poll(POLL) {
            Ok(true) => match event::read() {
                Ok(ev) => {
                    if tx.blocking_send(ev).is_err() {
                        return;
                    }
                }
                Err(_) => return,
            },
            Ok(false) => {}
            Err(_) => return,
        }
    }
}
