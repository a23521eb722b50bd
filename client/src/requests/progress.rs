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
#[path = "progress_tests.rs"]
mod tests;
