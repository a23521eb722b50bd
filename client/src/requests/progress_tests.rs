//! Unit tests of `progress`.
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
