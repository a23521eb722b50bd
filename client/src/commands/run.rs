//! `profctl run`: start a command, profile it from its first moments until it
//! exits (or `--duration` elapses, then SIGTERM it), report its exit status.
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use rustix::process::{kill_process, Pid, Signal};
use tokio::process::Command;
use tokio::time::Instant;

use super::profile::{follow, start, ChildProcess, View};
use crate::cli::RunArgs;
use crate::connect::Client;
use crate::error::Error;
use crate::output::Output;

/// How long a command gets to exit after SIGTERM before SIGKILL.
const TERM_GRACE: Duration = Duration::from_secs(5);
/// The longest we wait for a started command to take its own name.
const EXEC_WAIT: Duration = Duration::from_millis(200);

/// Runs `args.command` under a profiling session.
pub async fn run(client: &mut Client, args: &RunArgs, out: &Output) -> Result<(), Error> {
    let (program, rest) = args.command.split_first().expect("clap requires a command");
    let name = program.to_string_lossy().into_owned();
    let child = Command::new(program)
        .args(rest)
        .spawn()
        .map_err(|source| Error::Spawn {
            command: name.clone(),
            source,
        })?;
    let mut child = ChildProcess {
        child,
        status: None,
    };
    let pid = child.child.id().expect("a just-spawned child has a pid");
    wait_for_exec(pid).await;

    let result = async {
        let session = start(client, args.options.attach_request(pid)).await?;
        let mut view = View::new(&args.options, *out);
        let profile = follow(client, &session, &mut view, Some(&mut child)).await?;
        Ok::<_, Error>((view, profile))
    }
    .await;

    // Whatever happened, the command does not outlive us.
    let status = match child.status {
        Some(status) => Ok(status),
        None => terminate(&mut child).await,
    };
    let (view, profile) = match result {
        Ok(done) => done,
        Err(e) => {
            if let Ok(status) = status {
                eprintln!("profctl: {}", describe_exit(&name, status));
            }
            return Err(e);
        }
    };
    view.finish(&profile)?;
    let status = status.map_err(|e| Error::io(format!("cannot wait for {name}"), e))?;
    eprintln!("profctl: {}", describe_exit(&name, status));
    Ok(())
}

/// Waits briefly until the child no longer has our command name. Spawning
/// returns once the child's exec has begun, a moment before the kernel
/// renames it, and the daemon records the name at Attach.
async fn wait_for_exec(pid: u32) {
    let comm = |path: &str| std::fs::read_to_string(path).map(|c| c.trim_end().to_string());
    let Ok(own) = comm("/proc/self/comm") else {
        return;
    };
    let deadline = Instant::now() + EXEC_WAIT;
    while comm(&format!("/proc/{pid}/comm")).is_ok_and(|c| c == own) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
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
mod tests {
    use super::*;

    #[test]
    fn exit_descriptions() {
        assert_eq!(
            describe_exit("sh", ExitStatus::from_raw(0)),
            "sh exited with status 0"
        );
        assert_eq!(
            describe_exit("sh", ExitStatus::from_raw(3 << 8)),
            "sh exited with status 3"
        );
        assert_eq!(
            describe_exit("sh", ExitStatus::from_raw(15)),
            "sh was killed by signal 15 (SIGTERM)"
        );
    }
}
