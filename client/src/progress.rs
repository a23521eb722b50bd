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
        Spinner::start_if(std::io::stderr().is_terminal(), message)
    }

    /// As [`Spinner::start`], drawing only when `enabled`.
    pub fn start_if(enabled: bool, message: impl Into<String>) -> Spinner {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
        bar.set_style(
            ProgressStyle::with_template("{spinner} {msg} ({elapsed})")
                .expect("the spinner template is valid"),
        );
        bar.set_message(message.into());
        // Outside a runtime (no waiting to mark), nothing is shown.
        let show = (enabled && tokio::runtime::Handle::try_current().is_ok()).then(|| {
            let bar = bar.clone();
            tokio::spawn(async move {
                tokio::time::sleep(DELAY).await;
                bar.set_draw_target(ProgressDrawTarget::stderr());
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

    #[tokio::test]
    async fn a_short_wait_shows_nothing_and_a_long_one_shows_the_spinner() {
        let quick = Spinner::start_if(true, "quick");
        assert!(!quick.is_visible());
        drop(quick);

        let slow = Spinner::start_if(true, "slow");
        tokio::time::sleep(DELAY + Duration::from_millis(200)).await;
        // The draw target is stderr now (hidden only if stderr is not a
        // terminal, which indicatif checks itself).
        let visible = slow.is_visible();
        assert_eq!(visible, std::io::stderr().is_terminal());
        drop(slow);
    }

    #[tokio::test]
    async fn disabled_spinner_never_shows() {
        let off = Spinner::start_if(false, "off");
        tokio::time::sleep(DELAY + Duration::from_millis(100)).await;
        assert!(!off.is_visible());
    }

    #[tokio::test]
    async fn waiting_returns_the_output() {
        assert_eq!(waiting("x", async { 7 }).await, 7);
    }
}
