//! The spinner on stderr while profctl waits on the daemon: shown only when
//! stderr is a terminal and the wait outlasts [`DELAY`], and cleared before
//! anything else is printed. Knows nothing of what is waited for.
use std::future::Future;
use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio::task::JoinHandle;

/// How long a wait goes unmarked.
pub const DELAY: Duration = Duration::from_millis(300);
/// Time between spinner frames.
const TICK: Duration = Duration::from_millis(100);

/// A spinner that appears on stderr after [`DELAY`], if stderr is a
/// terminal, and is cleared when dropped.
pub struct Spinner {
    bar: ProgressBar,
    show: Option<JoinHandle<()>>,
}

impl Spinner {
    /// Starts the delay; `message` says what profctl waits for.
    pub fn start(message: impl Into<String>) -> Spinner {
        let stderr = std::io::stderr()
            .is_terminal()
            .then(ProgressDrawTarget::stderr);
        Spinner::start_on(stderr, message)
    }

    /// As [`Spinner::start`], drawing on `target` (never when None).
    pub fn start_on(target: Option<ProgressDrawTarget>, message: impl Into<String>) -> Spinner {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
        bar.set_style(
            ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
                .expect("the spinner template is valid"),
        );
        bar.set_message(message.into());
        // Outside a runtime (no waiting to mark), nothing is shown.
        let target = target.filter(|_| tokio::runtime::Handle::try_current().is_ok());
        let show = target.map(|target| {
            let bar = bar.clone();
            tokio::spawn(async move {
                tokio::time::sleep(DELAY).await;
                bar.set_draw_target(target);
                bar.enable_steady_tick(TICK);
            })
        });
        Spinner { bar, show }
    }

    /// Changes what the spinner says.
    pub fn set_message(&self, message: impl Into<String>) {
        self.bar.set_message(message.into());
    }

    /// Runs `f` (which prints) with the spinner off the screen.
    pub fn suspend<R>(&self, f: impl FnOnce() -> R) -> R {
        self.bar.suspend(f)
    }

    /// Whether the spinner is on the screen now.
    pub fn is_visible(&self) -> bool {
        !self.bar.is_hidden()
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        if let Some(show) = self.show.take() {
            show.abort();
        }
        self.bar.finish_and_clear();
    }
}

/// Awaits `future` with a spinner saying `message` while it takes longer
/// than [`DELAY`].
pub async fn waiting<F: Future>(message: &str, future: F) -> F::Output {
    let spinner = Spinner::start(message);
    let output = future.await;
    drop(spinner);
    output
}

#[cfg(test)]
mod tests {
    use super::*;
    use indicatif::TermLike;
    use std::sync::{Arc, Mutex};
    use std::time::Instant;

    /// A terminal that keeps what is drawn on it: every text written, and
    /// `<clear>` for each line cleared.
    #[derive(Debug, Clone, Default)]
    struct Screen(Arc<Mutex<Vec<String>>>);

    impl Screen {
        fn target(&self) -> Option<ProgressDrawTarget> {
            Some(ProgressDrawTarget::term_like(Box::new(self.clone())))
        }

        fn ops(&self) -> Vec<String> {
            self.0.lock().unwrap().clone()
        }

        fn push(&self, op: String) -> std::io::Result<()> {
            self.0.lock().unwrap().push(op);
            Ok(())
        }
    }

    impl TermLike for Screen {
        fn width(&self) -> u16 {
            80
        }
        fn move_cursor_up(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_down(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_right(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_left(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn write_line(&self, s: &str) -> std::io::Result<()> {
            self.push(s.to_string())
        }
        fn write_str(&self, s: &str) -> std::io::Result<()> {
            self.push(s.to_string())
        }
        fn clear_line(&self) -> std::io::Result<()> {
            self.push("<clear>".into())
        }
        fn flush(&self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn a_short_wait_shows_nothing_and_a_long_one_shows_the_spinner() {
        let screen = Screen::default();
        let quick = Spinner::start_on(screen.target(), "quick");
        assert!(!quick.is_visible());
        drop(quick);
        tokio::time::sleep(DELAY + Duration::from_millis(100)).await;
        assert!(screen.ops().is_empty(), "{:?}", screen.ops());

        let started = Instant::now();
        let slow = Spinner::start_on(screen.target(), "slow");
        // The spinner is drawn once the delay is over (by indicatif's
        // ticker thread): wait for it, long enough for a loaded machine.
        let drawn = loop {
            if screen.ops().iter().any(|op| op.contains("slow")) {
                break started.elapsed();
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "never drawn: {:?}",
                screen.ops()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        assert!(drawn >= DELAY, "drawn after {drawn:?}");
        assert!(slow.is_visible());
        drop(slow);
        let ops = screen.ops();
        assert_eq!(ops.last().map(String::as_str), Some("<clear>"), "{ops:?}");
    }

    #[tokio::test]
    async fn disabled_spinner_never_shows() {
        let off = Spinner::start_on(None, "off");
        tokio::time::sleep(DELAY + Duration::from_millis(100)).await;
        assert!(!off.is_visible());
    }

    #[tokio::test]
    async fn waiting_returns_the_output() {
        assert_eq!(waiting("x", async { 7 }).await, 7);
    }
}
