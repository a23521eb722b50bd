//! `profctl run`: start a command, profile it from its first instruction
//! until it exits (or `--duration` elapses, then SIGTERM it), report its exit
//! status. The command is held before its exec until its session is attached.
use std::ffi::OsString;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{ExitCode, ExitStatus};
use std::time::Duration;

use rustix::process::{kill_process, Pid, Signal};
use tokio::process::Command;
use tokio::time::Instant;

use super::attach::{check_saved, follow, start, ChildProcess, SessionDisplay};
use super::export::record;
use crate::args::cli::RunArgs;
use crate::error::Error;
use crate::requests::connect::Client;
use crate::views::output::Output;
use profd_common::api::SessionState;

/// How long a command gets to exit after SIGTERM before SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(5);
/// The longest we wait for the holder to take the command's name.
const NAME_WAIT: Duration = Duration::from_millis(200);
/// Set in the environment of the process that holds `profctl run`'s command:
/// the number of profctl's file descriptor to read the go-ahead from.
const HOLD_ENV: &str = "PROFCTL_RUN_HOLD_FD";

/// Runs `args.command` under a profiling session. The command starts as a
/// copy of profctl that waits for a byte on a pipe (opened through
/// `/proc/PARENT/fd`), so that the session is attached before the command's
/// exec: its samples count from its first instruction, as `perf record`'s.
/// The command gets SIGTERM when the session ends by `--duration` or a stop
/// (Ctrl-C); a session that fails, or an error of profctl or the daemon,
/// leaves it running: profctl reports it and waits. Returns the command's
/// exit status (128 + the signal that killed it), or 0 when profctl ended
/// it. With `-o`, the whole profile is written to the file once the session
/// ends, before the command's status is returned (a file that cannot be
/// written is an error).
pub async fn run(client: &mut Client, args: &RunArgs, out: &Output) -> Result<u8, Error> {
    let recording = args.options.recording()?;
    let (program, _) = args.command.split_first().expect("clap requires a command");
    let name = program.to_string_lossy().into_owned();
    let spawn_error = |source| Error::Spawn {
        command: name.clone(),
        source,
    };
    let (hold, mut go) = std::io::pipe().map_err(spawn_error)?;
    let exe = std::env::current_exe().map_err(spawn_error)?;
    let child = Command::new(exe)
        .args(&args.command)
        .env(HOLD_ENV, hold.as_raw_fd().to_string())
        .spawn()
        .map_err(spawn_error)?;
    let mut child = ChildProcess {
        child,
        status: None,
    };
    let pid = child.child.id().expect("a just-spawned child has a pid");
    wait_for_name(pid).await;

    let mut released = false;
    let result = async {
        // Held before its exec: where it waits now is not the command's.
        let request = profd_common::api::AttachRequest {
            held: true,
            ..args.options.attach_request(pid)
        };
        let session = start(client, request).await?;
        // If the holder is gone (killed, or it could not open the pipe), the
        // session ends with it.
        let _ = go.write_all(b"g");
        released = true;
        let mut view = SessionDisplay::new(&args.options, *out);
        let profile = follow(client, &session, &mut view, Some(&mut child)).await?;
        Ok::<_, Error>((view, profile))
    }
    .await;

    let end_command = match &result {
        Ok((_, profile)) => matches!(
            profile.session.state(),
            SessionState::DurationElapsed | SessionState::Stopped
        ),
        Err(e) => matches!(e, Error::Interrupted),
    };
    if !released {
        // The holder reads the end of the pipe and exits without running
        // the command.
        drop((go, hold));
        let status = child.child.wait().await;
        return Err(result.err().unwrap_or_else(|| match status {
            Ok(status) => Error::Protocol(format!("{name} ended unexpectedly: {status}")),
            Err(e) => Error::io(format!("cannot wait for {name}"), e),
        }));
    }
    let mut failed = None;
    let mut unrecorded = None;
    let mut unsaved = None;
    match result {
        Ok((view, profile)) => {
            view.finish(&profile)?;
            if let Err(e) = record(client, profile.session.id, recording, out).await {
                unrecorded = Some(e);
            }
            unsaved = check_saved(&profile.session).err();
            let s = &profile.session;
            if s.state() == SessionState::Failed {
                failed = Some(format!("session {} failed: {}", s.id, s.error));
            }
        }
        Err(e) if end_command => {
            let _ = terminate(&mut child).await;
            return Err(e);
        }
        Err(e) => failed = Some(e.to_string()),
    }
    // The pipe stays open until the command exits: the holder may open it
    // late.
    let (status, ended_here) = match child.status {
        Some(status) => {
            if let Some(why) = &failed {
                eprintln!("profctl: {why}");
            }
            (Ok(status), false)
        }
        None if end_command => match child.child.try_wait() {
            Ok(Some(status)) => (Ok(status), false),
            _ => (terminate(&mut child).await, true),
        },
        None => {
            if let Some(why) = &failed {
                eprintln!("profctl: {why}; {name} runs on, waiting for it to exit");
            }
            (child.child.wait().await, false)
        }
    };
    drop((go, hold));
    let status = status.map_err(|e| Error::io(format!("cannot wait for {name}"), e))?;
    eprintln!("profctl: {}", describe_exit(&name, status));
    if let Some(e) = unrecorded.or(unsaved) {
        return Err(e);
    }
    Ok(if ended_here { 0 } else { exit_code(status) })
}

/// Whether `run`'s command can run, checked before anything starts (a
/// private daemon, a session): Err holds the exit status of a shell for one
/// that cannot, 127 (not found) or 126 (not executable), after the reason
/// is printed.
pub fn check_command(args: &RunArgs) -> Result<(), u8> {
    let (program, _) = args.command.split_first().expect("clap requires a command");
    let Err(source) = find_program(program) else {
        return Ok(());
    };
    let code = if source.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    };
    eprintln!(
        "profctl: {}",
        Error::Spawn {
            command: program.to_string_lossy().into_owned(),
            source
        }
    );
    Err(code)
}

/// The file `program` runs, found as execvp(3) finds it: a name with a
/// slash is that path, else the first file of that name in PATH that may be
/// executed. Errors are the kernel's: ENOENT, EACCES.
fn find_program(program: &std::ffi::OsStr) -> std::io::Result<std::path::PathBuf> {
    use rustix::fs::{access, Access};
    use rustix::io::Errno;
    let path = std::path::Path::new(program);
    let runnable = |p: &std::path::Path| -> std::io::Result<()> {
        access(p, Access::EXEC_OK)?;
        match p.is_file() {
            true => Ok(()),
            false => Err(Errno::ACCESS.into()),
        }
    };
    if program.as_encoded_bytes().contains(&b'/') {
        return runnable(path).map(|()| path.to_path_buf());
    }
    let dirs = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&dirs)
        .map(|dir| dir.join(path))
        .find(|candidate| runnable(candidate).is_ok())
        .ok_or_else(|| Errno::NOENT.into())
}

/// A shell's exit status for a command's: its code, or 128 + the signal.
fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(signal)) => 128u8.wrapping_add(signal as u8),
        (None, None) => 1,
    }
}

/// Waits briefly until the holder has taken the command's name, which the
/// daemon records at Attach.
async fn wait_for_name(pid: u32) {
    let comm = |path: &str| std::fs::read_to_string(path).map(|c| c.trim_end().to_string());
    let Ok(own) = comm("/proc/self/comm") else {
        return;
    };
    let deadline = Instant::now() + NAME_WAIT;
    while comm(&format!("/proc/{pid}/comm")).is_ok_and(|c| c == own) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// In the process started by [`run`] (profctl's environment holds
/// [`HOLD_ENV`]): wait for the go-ahead, then exec the command given as
/// arguments. Returns only on failure, with the exit code (127, as a shell's
/// for a command that cannot run); None outside such a process.
pub fn held_exec() -> Option<ExitCode> {
    let fd = std::env::var_os(HOLD_ENV)?;
    let fd = fd.to_string_lossy();
    let mut command: Vec<OsString> = std::env::args_os().skip(1).collect();
    if command.is_empty() {
        return Some(ExitCode::from(127));
    }
    // Take the command's name at once: the session records it at Attach.
    let base = std::path::Path::new(&command[0])
        .file_name()
        .unwrap_or(&command[0]);
    if let Ok(name) = std::ffi::CString::new(base.as_encoded_bytes()) {
        let _ = rustix::thread::set_name(&name);
    }
    let pipe = format!("/proc/{}/fd/{fd}", std::os::unix::process::parent_id());
    let mut byte = [0u8; 1];
    match std::fs::File::open(&pipe).and_then(|mut f| f.read(&mut byte)) {
        Ok(1) => {}
        // profctl gave up (the attach failed) or is gone: do not run.
        _ => return Some(ExitCode::from(127)),
    }
    let program = command.remove(0);
    let err = std::process::Command::new(&program)
        .args(command)
        .env_remove(HOLD_ENV)
        .exec();
    eprintln!("profctl: cannot run {}: {err}", program.to_string_lossy());
    Some(ExitCode::from(127))
}

/// Reaps the child if it already exited, else sends SIGTERM, waits, and
/// falls back to SIGKILL.
async fn terminate(child: &mut ChildProcess) -> std::io::Result<ExitStatus> {
    if let Some(status) = child.child.try_wait()? {
        return Ok(status);
    }
    // `id()` is `None` once reaped, so this never signals a recycled pid.
    if let Some(pid) = child.child.id().and_then(|p| Pid::from_raw(p as i32)) {
        let _ = kill_process(pid, Signal::TERM);
    }
    match tokio::time::timeout(TERM_GRACE, child.child.wait()).await {
        Ok(status) => status,
        Err(_) => {
            child.child.kill().await?;
            child.child.wait().await
        }
    }
}

/// `sh exited with status 0`, `sh was killed by signal 15 (SIGTERM)`.
pub fn describe_exit(name: &str, status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("{name} exited with status {code}");
    }
    match status.signal() {
        Some(sig) => {
            let signame = match sig {
                1 => " (SIGHUP)",
                2 => " (SIGINT)",
                3 => " (SIGQUIT)",
                6 => " (SIGABRT)",
                9 => " (SIGKILL)",
                11 => " (SIGSEGV)",
                13 => " (SIGPIPE)",
                15 => " (SIGTERM)",
                _ => "",
            };
            let core = if status.core_dumped() {
                ", core dumped"
            } else {
                ""
            };
            format!("{name} was killed by signal {sig}{signame}{core}")
        }
        None => format!("{name} ended: {status}"),
    }
}

#[cfg(test)]
#[path = "run_tests.rs"]
mod tests;
