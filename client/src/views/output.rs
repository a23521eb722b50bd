//! Writing command output to stdout, or to stderr for `run` (whose command
//! keeps stdout): redraws in place when that stream is a terminal, else only
//! the final block. Owns the terminal check; knows nothing of content.
use std::io::{self, IsTerminal, Write};

use crate::error::Error;
use crate::views::render::{NameStyle, DEFAULT_NAME_WIDTH};

/// ANSI: cursor home, clear screen.
const CLEAR: &str = "\x1b[H\x1b[2J";

/// The stream profctl's own output goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Standard output: every command's but `run`'s.
    Stdout,
    /// Standard error: `run`'s, whose command keeps stdout.
    Stderr,
}

impl std::io::Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Stdout => io::stdout().write(buf),
            Stream::Stderr => io::stderr().write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Stream::Stdout => io::stdout().flush(),
            Stream::Stderr => io::stderr().flush(),
        }
    }
}

/// Where output goes (stdout or stderr), and whether it is a terminal.
#[derive(Debug, Clone, Copy)]
pub struct Output {
    stream: Stream,
    terminal: bool,
    /// `--full-names` and `--ids`.
    full_names: bool,
    ids: bool,
}

impl Output {
    /// Looks at the process's stdout.
    pub fn stdout() -> Self {
        Output {
            stream: Stream::Stdout,
            terminal: io::stdout().is_terminal(),
            full_names: false,
            ids: false,
        }
    }

    /// Looks at the process's stderr: `run`'s output, as its command keeps
    /// stdout.
    pub fn stderr() -> Self {
        Output {
            stream: Stream::Stderr,
            terminal: io::stderr().is_terminal(),
            ..Output::stdout()
        }
    }

    /// The stream written to.
    pub fn stream(&self) -> Stream {
        self.stream
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

    /// Whether the stream is a terminal (live views) or not (final only).
    pub fn is_terminal(&self) -> bool {
        self.terminal
    }

    /// Writes `text` as is and flushes.
    pub fn print(&self, text: &str) -> Result<(), Error> {
        let mut out = self.stream;
        out.write_all(text.as_bytes())
            .and_then(|()| out.flush())
            .map_err(Error::Output)
    }

    /// Shows one refresh of a live view: redrawn over the previous one on a
    /// terminal; nothing elsewhere (a file or a pipe gets the final view
    /// alone), but a pipe whose reader has gone (`| head` that ended) fails
    /// as a write to it would, so that the session ends then.
    pub fn refresh(&self, text: &str) -> Result<(), Error> {
        match self.terminal {
            true => self.print(&format!("{CLEAR}{text}")),
            false if self.reader_gone() => Err(Error::Output(io::ErrorKind::BrokenPipe.into())),
            false => Ok(()),
        }
    }

    /// Whether the stream is a pipe whose reader closed it: poll(2) says
    /// POLLERR for it without anything written.
    fn reader_gone(&self) -> bool {
        use rustix::event::{poll, PollFd, PollFlags, Timespec};
        let (stdout, stderr) = (io::stdout(), io::stderr());
        let mut fds = [match self.stream {
            Stream::Stdout => PollFd::new(&stdout, PollFlags::empty()),
            Stream::Stderr => PollFd::new(&stderr, PollFlags::empty()),
        }];
        let now = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        poll(&mut fds, Some(&now)).is_ok_and(|n| n > 0) && fds[0].revents().contains(PollFlags::ERR)
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
        let size = match self.stream {
            Stream::Stdout => rustix::termios::tcgetwinsize(io::stdout()),
            Stream::Stderr => rustix::termios::tcgetwinsize(io::stderr()),
        };
        match size {
            // Leave room for the count columns and a short module name.
            Ok(ws) if ws.ws_col > 0 => usize::from(ws.ws_col).saturating_sub(56).clamp(24, 120),
            _ => DEFAULT_NAME_WIDTH,
        }
    }
}
