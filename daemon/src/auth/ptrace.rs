//! The kernel's rule for reading another process
//! (`PTRACE_MODE_READ_REALCREDS`), as profd applies it to its callers: the
//! credentials of a target's threads read from /proc, and whether a caller
//! (or a grant) may profile them. No caller identity, no tokens.
use super::account::{Account, Grant};
use std::os::unix::fs::MetadataExt;

/// A thread's credentials at one moment, from /proc.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TargetCreds {
    /// Real, effective, saved uid.
    pub uids: [u32; 3],
    /// Real, effective, saved gid.
    pub gids: [u32; 3],
    /// Permitted capabilities.
    pub caps: u64,
    /// Whether the process is dumpable: the kernel gives the files under its
    /// /proc directory (not the directory itself) to root when it is not.
    pub dumpable: bool,
}

impl TargetCreds {
    /// Read the credentials of thread `tid` of process `pid`; None when it
    /// is gone or exiting (a thread without memory runs no more user code,
    /// and its files are root's whether it was dumpable or not).
    pub fn read(pid: u32, tid: u32) -> Option<TargetCreds> {
        use procfs::FromRead;
        let path = format!("/proc/{pid}/task/{tid}/status");
        // The owner first: a thread exiting after it shows as exiting in
        // the status read next, not as undumpable.
        let owner = std::fs::metadata(&path).ok()?.uid();
        let status = procfs::process::Status::from_file(&path).ok()?;
        let exiting = status.state.starts_with(['Z', 'X']) || status.vmsize.is_none();
        if exiting || status.tgid as u32 != pid {
            return None;
        }
        Some(TargetCreds {
            uids: [status.ruid, status.euid, status.suid],
            gids: [status.rgid, status.egid, status.sgid],
            caps: status.capprm,
            dumpable: owner == status.euid,
        })
    }
}

/// Whether a caller may profile a process (every thread of it), as far as
/// /proc tells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Check {
    Allowed,
    /// The process has exited (or is exiting): nothing to check.
    Gone,
    /// Why not.
    Denied(String),
}

/// Check every thread of process `pid` with [`may_profile`]: the kernel
/// checks each thread a perf event is opened on, and samples every thread.
/// Threads created later inherit their creator's credentials, and a thread
/// that passed cannot gain privileges but by an exec (which sessions check
/// again).
pub fn check_process(caller: &Account, grants: &[Grant], pid: u32) -> Check {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Check::Gone;
    };
    let mut alive = false;
    for task in tasks.flatten() {
        let Some(tid) = task.file_name().to_str().and_then(|t| t.parse().ok()) else {
            continue;
        };
        // A thread gone since the listing is sampled no more.
        let Some(creds) = TargetCreds::read(pid, tid) else {
            continue;
        };
        alive = true;
        let who = if tid == pid {
            format!("process {pid}")
        } else {
            format!("thread {tid} of process {pid}")
        };
        if let Err(why) = may_profile(caller, grants, &who, &creds) {
            return Check::Denied(why);
        }
    }
    if alive {
        Check::Allowed
    } else {
        Check::Gone
    }
}

/// Whether `caller` may profile a thread (`who`, for messages) with
/// credentials `target`: the kernel's PTRACE_MODE_READ_REALCREDS rule (see
/// docs/operations.md, "Who may profile what"), or a grant. Err says why not.
pub fn may_profile(
    caller: &Account,
    grants: &[Grant],
    who: &str,
    target: &TargetCreds,
) -> Result<(), String> {
    if caller.uid == 0 {
        return Ok(());
    }
    let [ruid, euid, suid] = target.uids;
    let [rgid, egid, sgid] = target.gids;
    let own = ruid == caller.uid;
    let granted = grants
        .iter()
        .any(|g| g.uid == ruid && caller.in_group(g.gid));
    if !own && !granted {
        let via = grants
            .iter()
            .filter(|g| caller.in_group(g.gid))
            .map(|g| g.user.as_str())
            .collect::<Vec<_>>();
        let also = if via.is_empty() {
            String::new()
        } else {
            format!(" or of {} (granted)", via.join(", "))
        };
        return Err(format!(
            "{who} runs as uid {ruid}; uid {} may profile only its own processes{also} (root may profile any)",
            caller.uid
        ));
    }
    if euid != ruid || suid != ruid {
        return Err(format!(
            "{who} has changed identity (uids real {ruid}, effective {euid}, saved {suid}); only root may profile it"
        ));
    }
    if own && target.gids != [caller.gid; 3] {
        // The kernel compares the caller's real gid with all three.
        return Err(format!(
            "{who} runs with gids real {rgid}, effective {egid}, saved {sgid}; uid {} may profile only processes whose gids are all its own group {} (being a member of a group is not enough; root may profile any)",
            caller.uid, caller.gid
        ));
    }
    if !own && (egid != rgid || sgid != rgid) {
        return Err(format!(
            "{who} runs set-group-id (gids real {rgid}, effective {egid}, saved {sgid}); only root may profile it"
        ));
    }
    let extra = target.caps & !caller.caps;
    if extra != 0 {
        return Err(format!(
            "{who} holds capabilities uid {} does not (permitted {:#x}); only root may profile it",
            caller.uid, target.caps
        ));
    }
    if !target.dumpable && ruid != 0 {
        return Err(format!(
            "{who} is not dumpable (it dropped privileges or set PR_SET_DUMPABLE 0); only root may profile it"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn account(uid: u32, groups: &[u32], name: &str) -> Account {
        Account {
            uid,
            gid: groups[0],
            groups: groups.to_vec(),
            caps: 0,
            name: name.into(),
        }
    }

    fn alice() -> Account {
        account(1000, &[1000, 50], "alice")
    }

    fn creds(uid: u32, gid: u32) -> TargetCreds {
        TargetCreds {
            uids: [uid; 3],
            gids: [gid; 3],
            caps: 0,
            dumpable: true,
        }
    }

    #[test]
    fn own_dumpable_processes_only() {
        let a = alice();
        let p = "process 7";
        assert!(may_profile(&a, &[], p, &creds(1000, 1000)).is_ok());
        let err = may_profile(&a, &[], p, &creds(1001, 1001)).unwrap_err();
        assert!(err.contains("process 7 runs as uid 1001"), "{err}");
        assert!(may_profile(&a, &[], p, &creds(0, 0)).is_err());
        let mut c = creds(1000, 1000);
        c.uids[1] = 0;
        assert!(may_profile(&a, &[], p, &c)
            .unwrap_err()
            .contains("identity"));
        let mut c = creds(1000, 1000);
        c.uids[2] = 0;
        assert!(may_profile(&a, &[], p, &c).is_err());
        let mut c = creds(1000, 1000);
        c.dumpable = false;
        assert!(may_profile(&a, &[], p, &c)
            .unwrap_err()
            .contains("dumpable"));
        let root = account(0, &[0], "root");
        assert!(may_profile(&root, &[], p, &c).is_ok());
    }

    /// The kernel compares the caller's real gid with the target's three:
    /// a group the caller is only a member of is not enough, nor is a
    /// set-group-id program of its own group.
    #[test]
    fn gids_must_all_be_the_callers_group() {
        let a = alice();
        let err = may_profile(&a, &[], "process 7", &creds(1000, 50)).unwrap_err();
        assert!(err.contains("its own group 1000"), "{err}");
        let mut c = creds(1000, 1000);
        c.gids[1] = 42;
        assert!(may_profile(&a, &[], "process 7", &c).is_err());
        let mut c = creds(1000, 1000);
        c.gids[2] = 42;
        assert!(may_profile(&a, &[], "process 7", &c).is_err());
    }

    /// The kernel refuses a target holding capabilities the caller lacks
    /// (such a thread could take its privileges back).
    #[test]
    fn capabilities_beyond_the_callers_are_refused() {
        let mut a = alice();
        let mut c = creds(1000, 1000);
        c.caps = 1 << 7; // CAP_SETUID
        let err = may_profile(&a, &[], "thread 8 of process 7", &c).unwrap_err();
        assert!(
            err.contains("thread 8 of process 7 holds capabilities"),
            "{err}"
        );
        a.caps = (1 << 7) | 1;
        assert!(may_profile(&a, &[], "process 7", &c).is_ok());
    }

    #[test]
    fn grants_extend_to_a_group() {
        let g = Grant {
            group: "ops".into(),
            gid: 50,
            user: "svc".into(),
            uid: 990,
        };
        let a = alice();
        let p = "process 7";
        let grants = std::slice::from_ref(&g);
        assert!(may_profile(&a, grants, p, &creds(990, 990)).is_ok());
        let err = may_profile(&a, grants, p, &creds(991, 991)).unwrap_err();
        assert!(err.contains("svc (granted)"), "{err}");
        let mut c = creds(990, 990);
        c.gids[1] = 42;
        let err = may_profile(&a, grants, p, &c).unwrap_err();
        assert!(err.contains("set-group-id"), "{err}");
        let bob = account(1001, &[1001], "bob");
        assert!(may_profile(&bob, &[g], p, &creds(990, 990)).is_err());
    }

    #[test]
    fn own_process_credentials_are_read() {
        let pid = std::process::id();
        let me = TargetCreds::read(pid, pid).unwrap();
        assert!(me.dumpable);
        assert_eq!(me.uids[0], rustix::process::getuid().as_raw());
        assert!(TargetCreds::read(u32::MAX - 1, u32::MAX - 1).is_none());
        let me = Account::lookup(&me.uids[0].to_string()).unwrap();
        assert_eq!(check_process(&me, &[], pid), Check::Allowed);
        assert_eq!(check_process(&me, &[], u32::MAX - 1), Check::Gone);
        if me.uid != 0 {
            return;
        }
        let Check::Denied(why) = check_process(&alice(), &[], pid) else {
            panic!("alice may profile root's process");
        };
        assert!(
            why.contains(&format!("process {pid} runs as uid 0")),
            "{why}"
        );
    }
}
