//! HotSpot's attach mechanism from the client's side, for one jcmd
//! command: the `.java_pid<pid>` socket in the JVM's /tmp (reached through
//! /proc/PID/root, its pid as it sees it), started when missing by a
//! `.attach_pid<pid>` file and SIGQUIT, and the request and answer of
//! protocol version 1. Whether the JVM may be signalled is `attachable`'s.
use crate::os::PidFd;
use crate::process::maps::Target;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How long the JVM has to open its socket after SIGQUIT, and to answer.
pub const WAIT: Duration = Duration::from_secs(5);
/// The most of an answer read.
const MAX_ANSWER: u64 = 1 << 20;

/// How an attach ended, short of an answer.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    /// The socket did not appear, or the JVM did not answer, in time.
    #[error("{0}")]
    Timeout(String),
    /// The JVM closed the connection without an answer: it takes
    /// requests only from its own user or root (a root outside its user
    /// namespace is neither).
    #[error(
        "the JVM closed the connection without answering (it answers only its own user or root)"
    )]
    Closed,
    /// It has no socket, and may not be signalled to open one.
    #[error("{0}")]
    NotSignalled(String),
    #[error("{0}")]
    Failed(String),
}

/// The request bytes of protocol 1: the version, the command `jcmd` and
/// three arguments (the jcmd line, then two empty).
pub fn request(jcmd_line: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for part in ["1", "jcmd", jcmd_line, "", ""] {
        out.extend_from_slice(part.as_bytes());
        out.push(0);
    }
    out
}

/// An answer: the return code on the first line (0: done), then the
/// command's output. None when there is no code line.
pub fn parse_answer(bytes: &[u8]) -> Option<(i32, String)> {
    let text = String::from_utf8_lossy(bytes);
    let (code, rest) = text.split_once('\n')?;
    Some((code.trim().parse().ok()?, rest.trim_end().to_string()))
}

/// The socket's path, if the JVM has one (a socket owned by its effective
/// user, as jcmd requires).
fn socket(target: &Target, euid: u32) -> Option<PathBuf> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let path = target.proc_path(&format!("root/tmp/.java_pid{}", target.ns_pid));
    let meta = std::fs::symlink_metadata(&path).ok()?;
    (meta.file_type().is_socket() && meta.uid() == euid).then_some(path)
}

/// Removes the trigger file profd made, when dropped.
struct Trigger(Option<PathBuf>);

impl Drop for Trigger {
    fn drop(&mut self) {
        if let Some(path) = &self.0 {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Make the trigger file in the JVM's working directory, else its /tmp
/// (HotSpot takes one owned by its user or by root). None if one was there
/// already (another client's: it is left for it to remove).
fn trigger(target: &Target) -> Result<Trigger, AttachError> {
    let name = format!(".attach_pid{}", target.ns_pid);
    let mut last = None;
    for dir in ["cwd", "root/tmp"] {
        let path = target.proc_path(dir).join(&name);
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(_) => return Ok(Trigger(Some(path))),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(Trigger(None)),
            Err(e) => last = Some(e),
        }
    }
    Err(AttachError::Failed(format!(
        "cannot make {name} in its working directory or /tmp: {}",
        last.map_or_else(String::new, |e| e.to_string())
    )))
}

/// Run `jcmd_line` in the JVM `target` (its attach mechanism known to be
/// on; `creds` its effective user and group): the return code and output.
/// Without a socket, the JVM's listener is started (SIGQUIT) only if
/// `may_signal`. Blocks for at most about twice [`WAIT`].
pub fn jcmd(
    target: &Target,
    creds: (u32, u32),
    may_signal: bool,
    jcmd_line: &str,
) -> Result<(i32, String), AttachError> {
    let path = match socket(target, creds.0) {
        Some(path) => path,
        None if may_signal => start_listener(target, creds)?,
        None => {
            return Err(AttachError::NotSignalled(format!(
                "no .java_pid{}, and SIGQUIT would end it (-Xrs)",
                target.ns_pid
            )))
        }
    };
    let mut stream = UnixStream::connect(&path).map_err(|e| {
        AttachError::Failed(format!("connecting to .java_pid{}: {e}", target.ns_pid))
    })?;
    let io = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            AttachError::Timeout(format!("no answer within {} s", WAIT.as_secs()))
        }
        _ => AttachError::Failed(format!("talking to the JVM: {e}")),
    };
    stream.set_read_timeout(Some(WAIT)).map_err(io)?;
    stream.set_write_timeout(Some(WAIT)).map_err(io)?;
    stream.write_all(&request(jcmd_line)).map_err(io)?;
    let mut answer = Vec::new();
    (&mut stream)
        .take(MAX_ANSWER)
        .read_to_end(&mut answer)
        .map_err(io)?;
    if answer.is_empty() {
        return Err(AttachError::Closed);
    }
    parse_answer(&answer).ok_or_else(|| {
        AttachError::Failed(format!(
            "an answer without a return code: {:?}",
            String::from_utf8_lossy(&answer[..answer.len().min(80)])
        ))
    })
}

/// Start the JVM's attach listener: the trigger file, SIGQUIT (through a
/// pidfd, to this very process), then wait for the socket.
fn start_listener(target: &Target, creds: (u32, u32)) -> Result<PathBuf, AttachError> {
    let pidfd = PidFd::open(target.pid)
        .map_err(|e| AttachError::Failed(format!("opening a pidfd: {e}")))?;
    // Opened before the check that the process `target` holds is alive: the
    // pidfd is of that process, not of one that reused its pid.
    if std::fs::metadata(target.proc_path("status")).is_err() {
        return Err(AttachError::Failed("the JVM has exited".into()));
    }
    let _trigger = trigger(target)?;
    pidfd
        .quit()
        .map_err(|e| AttachError::Failed(format!("sending SIGQUIT: {e}")))?;
    let deadline = Instant::now() + WAIT;
    let mut pause = Duration::from_millis(10);
    loop {
        if let Some(path) = socket(target, creds.0) {
            return Ok(path);
        }
        if pidfd.exited() {
            return Err(AttachError::Failed("the JVM exited".into()));
        }
        if Instant::now() >= deadline {
            return Err(AttachError::Timeout(format!(
                "no .java_pid{} within {} s of SIGQUIT",
                target.ns_pid,
                WAIT.as_secs()
            )));
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(100));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_five_strings_each_ended_by_nul() {
        assert_eq!(
            request("Compiler.perfmap"),
            b"1\0jcmd\0Compiler.perfmap\0\0\0".to_vec()
        );
    }

    #[test]
    fn an_answer_is_its_code_line_then_output() {
        assert_eq!(parse_answer(b"0\n"), Some((0, String::new())));
        assert_eq!(
            parse_answer(b"0\nsome output\nmore\n"),
            Some((0, "some output\nmore".into()))
        );
        assert_eq!(
            parse_answer(b"-1\nUnknown command\n"),
            Some((-1, "Unknown command".into()))
        );
        assert_eq!(parse_answer(b"garbage"), None);
        assert_eq!(parse_answer(b"x\n"), None);
    }
}
