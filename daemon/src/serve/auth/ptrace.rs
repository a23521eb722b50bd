//! The kernel's rule for reading another process
//! (`PTRACE_MODE_READ_REALCREDS`), as profd applies it to its callers: the
//! credentials and user namespace of a target's threads read from /proc,
//! and whether a caller (or a grant) may profile them. No caller identity,
//! no tokens.
use super::account::{Account, Grant};
use crate::os::userns::{user_ns_chain, UserNs};
use std::os::unix::fs::MetadataExt;

/// The bit of CAP_SYS_PTRACE in a capability set.
const CAP_SYS_PTRACE: u64 = 1 << 19;

/// A thread's credentials at one moment, from /proc.
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// The user namespace its credentials belong to, then each parent up
    /// to the daemon's own; empty when it could not be read.
    pub user_ns: Vec<UserNs>,
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
        let user_ns = match user_ns_chain(&format!("/proc/{pid}/task/{tid}/ns/user")) {
            Ok(chain) => chain,
            Err(err) if err.raw_os_error() == Some(libc::ENOENT) => return None,
            Err(err) => {
                tracing::warn!(pid, tid, %err, "cannot read a thread's user namespace");
                Vec::new()
            }
        };
        Some(TargetCreds {
            uids: [status.ruid, status.euid, status.suid],
            gids: [status.rgid, status.egid, status.sgid],
            caps: status.capprm,
            dumpable: owner == status.euid,
            user_ns,
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
    Denied(Denied),
}

/// Why a caller may not profile a thread (`who`, as messages name it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    /// Another user's, not granted (`granted`: the users whose processes
    /// the caller's grants let it profile).
    #[error("{who} runs as uid {ruid}; uid {uid} may profile only its own processes{} (root may profile any)", also(.granted))]
    NotOwn {
        who: String,
        ruid: u32,
        uid: u32,
        granted: Vec<String>,
    },
    #[error("{who} has changed identity (uids real {}, effective {}, saved {}); only root may profile it", .uids[0], .uids[1], .uids[2])]
    Identity { who: String, uids: [u32; 3] },
    #[error("{who} runs with gids real {}, effective {}, saved {}; uid {uid} may profile only processes whose gids are all its own group {gid} (being a member of a group is not enough; root may profile any)", .gids[0], .gids[1], .gids[2])]
    Gids {
        who: String,
        gids: [u32; 3],
        uid: u32,
        gid: u32,
    },
    #[error("{who} runs set-group-id (gids real {}, effective {}, saved {}); only root may profile it", .gids[0], .gids[1], .gids[2])]
    SetGid { who: String, gids: [u32; 3] },
    #[error("{who} is not dumpable (it dropped privileges or set PR_SET_DUMPABLE 0); only root may profile it")]
    NotDumpable { who: String },
    #[error("the user namespace of {who} could not be read; only root may profile it")]
    NoNamespace { who: String },
    /// In a user namespace (`ino`, created by `owner`) other than the
    /// caller's (`callers`: None when its process is gone).
    #[error("{who} runs in user namespace {ino} (created by uid {owner}), not in uid {uid}'s ({}), and uid {uid} has no CAP_SYS_PTRACE there: only root, or the user who created that namespace (or one it is nested in) from its own, may profile it", callers.map_or_else(|| "unknown: its process is gone".to_string(), |c| c.to_string()))]
    Namespace {
        who: String,
        ino: u64,
        owner: u32,
        uid: u32,
        callers: Option<u64>,
    },
    #[error("{who} holds capabilities uid {uid} does not (permitted {caps:#x}); only root may profile it")]
    Capabilities { who: String, uid: u32, caps: u64 },
}

/// The users a caller's grants let it profile, as [`Denied::NotOwn`] adds
/// them.
fn also(granted: &[String]) -> String {
    match granted.is_empty() {
        true => String::new(),
        false => format!(" or of {} (granted)", granted.join(", ")),
    }
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

/// Whether `caller` holds CAP_SYS_PTRACE over the user namespace
/// `chain[0]` (the rest of `chain` are its parents), as the kernel's
/// `cap_capable` decides: in its own namespace by its effective
/// capabilities; in a namespace below its own when its uid created that
/// namespace or one of its parents below the caller's (the creator holds
/// every capability there).
fn ptrace_capable(caller: &Account, chain: &[UserNs]) -> bool {
    let Some(own) = caller.user_ns else {
        return false;
    };
    for (i, ns) in chain.iter().enumerate() {
        if ns.id == own {
            return caller.caps_effective & CAP_SYS_PTRACE != 0;
        }
        if chain.get(i + 1).is_some_and(|p| p.id == own) && ns.owner == caller.uid {
            return true;
        }
    }
    false
}

/// Whether `caller` may profile a thread (`who`, for messages) with
/// credentials `target`: the kernel's PTRACE_MODE_READ_REALCREDS rule (see
/// docs/operations.md, "Who may profile what"), or a grant. Err says why not.
///
/// The kernel (`__ptrace_may_access`, then `cap_ptrace_access_check`) lets
/// a caller in when (1) the target's ids are all the caller's, or the caller
/// holds CAP_SYS_PTRACE over the target's user namespace; (2) the target is
/// dumpable, or the caller holds CAP_SYS_PTRACE over the namespace its
/// memory was made in; (3) the target is in the caller's user namespace with
/// no capability the caller lacks, or the caller holds CAP_SYS_PTRACE over
/// the target's namespace. /proc does not show the namespace of (2): a
/// target not dumpable passes only for a caller holding CAP_SYS_PTRACE over
/// every namespace the daemon sees.
pub fn may_profile(
    caller: &Account,
    grants: &[Grant],
    who: &str,
    target: &TargetCreds,
) -> Result<(), Denied> {
    if caller.uid == 0 {
        return Ok(());
    }
    let [ruid, euid, suid] = target.uids;
    let [rgid, egid, sgid] = target.gids;
    let capable = ptrace_capable(caller, &target.user_ns);
    let own = ruid == caller.uid;
    let granted = grants
        .iter()
        .any(|g| g.uid == ruid && caller.in_group(g.gid));
    if !capable {
        if !own && !granted {
            let granted = grants
                .iter()
                .filter(|g| caller.in_group(g.gid))
                .map(|g| g.user.clone())
                .collect();
            return Err(Denied::NotOwn {
                who: who.into(),
                ruid,
                uid: caller.uid,
                granted,
            });
        }
        if euid != ruid || suid != ruid {
            return Err(Denied::Identity {
                who: who.into(),
                uids: target.uids,
            });
        }
        if own && target.gids != [caller.gid; 3] {
            // The kernel compares the caller's real gid with all three.
            return Err(Denied::Gids {
                who: who.into(),
                gids: target.gids,
                uid: caller.uid,
                gid: caller.gid,
            });
        }
        if !own && (egid != rgid || sgid != rgid) {
            return Err(Denied::SetGid {
                who: who.into(),
                gids: target.gids,
            });
        }
    }
    // Over the outermost namespace, over all below it.
    let over_all = target
        .user_ns
        .last()
        .is_some_and(|top| ptrace_capable(caller, std::slice::from_ref(top)));
    if !target.dumpable && ruid != 0 && !over_all {
        return Err(Denied::NotDumpable { who: who.into() });
    }
    if capable {
        return Ok(());
    }
    let Some(ns) = target.user_ns.first() else {
        return Err(Denied::NoNamespace { who: who.into() });
    };
    if caller.user_ns != Some(ns.id) {
        return Err(Denied::Namespace {
            who: who.into(),
            ino: ns.id.ino,
            owner: ns.owner,
            uid: caller.uid,
            callers: caller.user_ns.map(|c| c.ino),
        });
    }
    let extra = target.caps & !caller.caps;
    if extra != 0 {
        return Err(Denied::Capabilities {
            who: who.into(),
            uid: caller.uid,
            caps: target.caps,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::os::userns::NsId;

    /// A user namespace `ino` created by `owner`.
    fn ns(ino: u64, owner: u32) -> UserNs {
        UserNs {
            id: NsId { dev: 4, ino },
            owner,
        }
    }

    /// The daemon's (and the callers') namespace.
    const HOST: UserNs = UserNs {
        id: NsId { dev: 4, ino: 1 },
        owner: 0,
    };

    fn account(uid: u32, groups: &[u32], name: &str) -> Account {
        Account {
            uid,
            gid: groups[0],
            groups: groups.to_vec(),
            caps: 0,
            caps_effective: 0,
            user_ns: Some(HOST.id),
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
            user_ns: vec![HOST],
        }
    }

    /// `creds` of a thread in the namespaces `chain` (innermost first).
    fn creds_in(uid: u32, caps: u64, chain: &[UserNs]) -> TargetCreds {
        TargetCreds {
            caps,
            user_ns: chain.to_vec(),
            ..creds(uid, uid)
        }
    }

    /// A target in another user namespace than the caller's passes only when
    /// the caller holds CAP_SYS_PTRACE over it: when its uid created that
    /// namespace or one it is nested in (from the caller's own), or holds
    /// the capability in its own namespace.
    #[test]
    fn user_namespaces_as_the_kernel_sees_them() {
        let a = alice();
        let p = "process 7";
        let all = 0x1ff_ffff_ffff;
        let roots = ns(10, 0);
        let alices = ns(11, 1000);
        // Made inside root's namespace by a process running as uid 1000.
        let in_roots = ns(12, 1000);
        let in_alices = ns(13, 1000);

        let err = may_profile(&a, &[], p, &creds_in(1000, 0, &[roots, HOST]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("process 7 runs in user namespace 10 (created by uid 0)")
                && err.contains("not in uid 1000's (1)"),
            "{err}"
        );
        let nested = [in_roots, roots, HOST];
        assert!(may_profile(&a, &[], p, &creds_in(1000, 0, &nested)).is_err());
        // Her own: whatever capabilities it holds there, nested or not,
        // and whichever uids.
        for chain in [&[alices, HOST][..], &[in_alices, alices, HOST]] {
            assert_eq!(may_profile(&a, &[], p, &creds_in(1000, all, chain)), Ok(()));
            assert_eq!(
                may_profile(&a, &[], p, &creds_in(100_000, 0, chain)),
                Ok(())
            );
        }
        // A caller inside her namespace, with every capability there.
        let inside = Account {
            caps: all,
            caps_effective: all,
            user_ns: Some(alices.id),
            ..alice()
        };
        let err = may_profile(&inside, &[], p, &creds(1000, 1000))
            .unwrap_err()
            .to_string();
        assert!(err.contains("runs in user namespace 1 "), "{err}");
        let there = [alices, HOST];
        assert_eq!(
            may_profile(&inside, &[], p, &creds_in(1000, all, &there)),
            Ok(())
        );
        let below = [in_alices, alices, HOST];
        assert_eq!(
            may_profile(&inside, &[], p, &creds_in(5, 0, &below)),
            Ok(())
        );
        // Without CAP_SYS_PTRACE in effect there: ids and capabilities count.
        let bare = Account {
            caps_effective: 0,
            ..inside.clone()
        };
        assert!(may_profile(&bare, &[], p, &creds_in(5, 0, &there)).is_err());
        assert_eq!(
            may_profile(&bare, &[], p, &creds_in(1000, 0, &there)),
            Ok(())
        );
        // CAP_SYS_PTRACE in the daemon's namespace: any process.
        let tracer = Account {
            caps_effective: CAP_SYS_PTRACE,
            ..alice()
        };
        let mut c = creds_in(0, all, &nested);
        c.dumpable = false;
        assert_eq!(may_profile(&tracer, &[], p, &c), Ok(()));
        // Unknown namespaces: refused, saying which.
        let gone = Account {
            user_ns: None,
            ..alice()
        };
        let err = may_profile(&gone, &[], p, &creds(1000, 1000))
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown"), "{err}");
        let err = may_profile(&a, &[], p, &creds_in(1000, 0, &[]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("could not be read"), "{err}");
    }

    #[test]
    fn own_dumpable_processes_only() {
        let a = alice();
        let p = "process 7";
        assert!(may_profile(&a, &[], p, &creds(1000, 1000)).is_ok());
        let err = may_profile(&a, &[], p, &creds(1001, 1001))
            .unwrap_err()
            .to_string();
        assert!(err.contains("process 7 runs as uid 1001"), "{err}");
        assert!(may_profile(&a, &[], p, &creds(0, 0)).is_err());
        let mut c = creds(1000, 1000);
        c.uids[1] = 0;
        assert!(may_profile(&a, &[], p, &c)
            .unwrap_err()
            .to_string()
            .contains("identity"));
        let mut c = creds(1000, 1000);
        c.uids[2] = 0;
        assert!(may_profile(&a, &[], p, &c).is_err());
        let mut c = creds(1000, 1000);
        c.dumpable = false;
        assert!(may_profile(&a, &[], p, &c)
            .unwrap_err()
            .to_string()
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
        let err = may_profile(&a, &[], "process 7", &creds(1000, 50))
            .unwrap_err()
            .to_string();
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
        let err = may_profile(&a, &[], "thread 8 of process 7", &c)
            .unwrap_err()
            .to_string();
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
        let err = may_profile(&a, grants, p, &creds(991, 991))
            .unwrap_err()
            .to_string();
        assert!(err.contains("svc (granted)"), "{err}");
        let mut c = creds(990, 990);
        c.gids[1] = 42;
        let err = may_profile(&a, grants, p, &c).unwrap_err().to_string();
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
            why.to_string()
                .contains(&format!("process {pid} runs as uid 0")),
            "{why}"
        );
    }
}
