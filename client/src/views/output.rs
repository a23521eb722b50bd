//! Writing command output to stdout: plain blocks, or redraws in place when
//! stdout is a terminal. Owns the terminal check; knows nothing of content.
use std::io::{self, IsTerminal, Write};

use crate::error::Error;
use crate::views::render::{NameStyle, DEFAULT_NAME_WIDTH};

/// ANSI: cursor home, clear screen.
const CLEAR: &str = "\x1b[H\x1b[2J";

/// Standard output, and whether it is a terminal.
#[derive(Debug, Clone, Copy)]
pub struct Output {
    terminal: bool,
    /// `--full-names` and `--ids`.
    full_names: bool,
    ids: bool,
}

impl Output {
    /// Looks at the process's stdout.
    pub fn stdout() -> Self {
        Output {
            terminal: io::stdout().is_terminal(),
            full_names: false,
            ids: false,
        }
    }

    /// The same output, showing whole function names (`--full-names`)
    /// and function ids (`--ids`) as asked.
    pub fn with_names(self, full_names: bool, ids: bool) -> Self {
        Output {
            full_names,
            ids,
            ..self
        }
    }

    /// How function names are shown: [`Output::name_width`] wide, whole
    /// or with ids as asked.
    pub fn names(&self) -> NameStyle {
        NameStyle {
            width: self.name_width(),
            full: self.full_names,
            ids: self.ids,
        }
    }

    /// Whether stdout is a terminal (redraw) or not (append blocks).
    pub fn is_terminal(&self) -> bool {
        self.terminal
    }

    /// Writes `text` as is and flushes.
    pub fn print(&self, text: &str) -> Result<(), Error> {
        let mut out = io::stdout().lock();
        out.write_all(text.as_bytes())
            .and_then(|()| out.flush())
            .map_err(Error::Output)
    }

    /// Shows one refresh of a live view: redrawn over the previous one on a
    /// terminal, else appended as a block followed by a blank line.
    pub fn refresh(&self, text: &str) -> Result<(), Error> {
        if self.terminal {
            self.print(&format!("{CLEAR}{text}"))
        } else {
            self.print(&format!("{text}\n"))
        }
    }

    /// Shows the last view: replaces the live one on a terminal.
    pub fn finish(&self, text: &str, had_live_view: bool) -> Result<(), Error> {
        if self.terminal && had_live_view {
            self.print(&format!("{CLEAR}{text}"))
        } else {
            self.print(text)
        }
    }

    /// How wide function names may be: fitted to the terminal, or the default.
    pub fn name_width(&self) -> usize {
        if !self.terminal {
            return DEFAULT_NAME_WIDTH;
        }
        match rustix::termios::tcgetwinsize(io::stdout()) {
            // Leave room for the count columns and a short module name.
            Ok(ws) if ws.ws_col > 0 => usize::from(ws.ws_col).saturating_sub(56).clamp(24, 120),
            _ => DEFAULT_NAME_WIDTH,
        }
    }
}
