//! A command in a real pseudo-terminal: a private tmux server runs it in a
//! detached session; the test types keys and reads the screen.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::command::{Cmd, CmdOutput};
use crate::{path_str, unique_dir};

const TMUX_TIMEOUT: Duration = Duration::from_secs(20);

/// A tmux server on a private socket with one session, killed when dropped.
pub struct Tmux {
    socket: PathBuf,
}

impl Tmux {
    /// Starts `sh -c script` in a `width`×`height` terminal.
    pub fn start(script: &str, width: u16, height: u16) -> Tmux {
        let socket = unique_dir("tmux").join("tmux.sock");
        let tmux = Tmux { socket };
        let (w, h) = (width.to_string(), height.to_string());
        tmux.run(&[
            "new-session",
            "-d",
            "-s",
            "t",
            "-x",
            &w,
            "-y",
            &h,
            "sh",
            "-c",
            script,
        ])
        .assert_success();
        tmux
    }

    fn run(&self, args: &[&str]) -> CmdOutput {
        let mut full = vec!["-u", "-S", path_str(&self.socket)];
        full.extend_from_slice(args);
        let env = [
            ("LC_ALL".to_string(), "C.UTF-8".to_string()),
            ("TERM".to_string(), "xterm-256color".to_string()),
        ];
        Cmd::spawn_env("tmux", &full, &env).wait(TMUX_TIMEOUT)
    }

    /// The screen as text, one line per row.
    pub fn screen(&self) -> String {
        let out = self.run(&["capture-pane", "-p", "-t", "t"]);
        out.assert_success();
        out.stdout
    }

    /// Types keys (tmux key names: `n`, `Enter`, `Escape`, `/`, ...).
    pub fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "t"];
        args.extend_from_slice(keys);
        self.run(&args).assert_success();
    }

    /// Waits until the screen satisfies `ok`; fails the test with the last
    /// screen after `timeout`.
    pub fn wait_for(&self, what: &str, timeout: Duration, ok: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let screen = self.screen();
            if ok(&screen) {
                return screen;
            }
            assert!(
                Instant::now() < deadline,
                "the terminal did not show {what} within {timeout:?}; it shows:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}
