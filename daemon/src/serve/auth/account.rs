//! Who a caller or a process's owner is: a user account with its groups,
//! capabilities and user namespace, and the grants letting a group's
//! members profile a user's processes.
use crate::os::userns::{ns_id, NsId};
use std::ffi::CString;

/// Why a user could not be looked up.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    #[error("cannot look up user {user:?}: {source}")]
    Lookup {
        user: String,
        #[source]
        source: nix::Error,
    },
    #[error("no user {0:?} on this machine")]
    NoUser(String),
}

/// A user account: the identity checks are made against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    pub uid: u32,
    /// The primary group: the kernel's ptrace rule compares it (the
    /// caller's real gid) with the target's gids.
    pub gid: u32,
    /// Primary and supplementary groups (for grants).
    pub groups: Vec<u32>,
    /// Permitted capabilities (a target's in the same user namespace must
    /// be among them).
    pub caps: u64,
    /// Effective capabilities: CAP_SYS_PTRACE lets the kernel's rule pass
    /// for the processes of its user namespace and of those below it.
    pub caps_effective: u64,
    /// The user namespace the capabilities hold in (the daemon's own for a
    /// token's or a grant's user); None when it could not be read.
    pub user_ns: Option<NsId>,
    /// The user name (the uid as text when it has none).
    pub name: String,
}

impl Account {
    /// Look a user up by name or number in the user database.
    pub fn lookup(user: &str) -> Result<Account, LookupError> {
        let found = match user.parse::<u32>() {
            Ok(uid) => nix::unistd::User::from_uid(uid.into()),
            Err(_) => nix::unistd::User::from_name(user),
        };
        let u = found
            .map_err(|source| LookupError::Lookup {
                user: user.into(),
                source,
            })?
            .ok_or_else(|| LookupError::NoUser(user.into()))?;
        let groups = CString::new(u.name.clone())
            .ok()
            .and_then(|name| nix::unistd::getgrouplist(&name, u.gid).ok())
            .map(|gs| gs.into_iter().map(|g| g.as_raw()).collect())
            .unwrap_or_else(|| vec![u.gid.as_raw()]);
        Ok(Account {
            uid: u.uid.as_raw(),
            gid: u.gid.as_raw(),
            groups,
            caps: 0,
            caps_effective: 0,
            user_ns: ns_id("/proc/self/ns/user").ok(),
            name: u.name,
        })
    }

    /// The account of a peer process, from its credentials: groups,
    /// capabilities and user namespace from the process itself when it is
    /// still the one that connected.
    pub(super) fn of_peer(uid: u32, gid: u32, pid: Option<i32>) -> Account {
        let (mut groups, mut caps, mut caps_effective, mut user_ns) = (vec![gid], 0, 0, None);
        if let Some((p, status)) =
            pid.and_then(|p| Some((p, procfs::process::Process::new(p).ok()?.status().ok()?)))
        {
            if status.euid == uid {
                groups.extend(status.groups.iter().copied());
                caps = status.capprm;
                caps_effective = status.capeff;
                user_ns = ns_id(&format!("/proc/{p}/ns/user")).ok();
            }
        }
        let name = nix::unistd::User::from_uid(uid.into())
            .ok()
            .flatten()
            .map(|u| u.name)
            .unwrap_or_else(|| uid.to_string());
        Account {
            uid,
            gid,
            groups,
            caps,
            caps_effective,
            user_ns,
            name,
        }
    }

    pub(crate) fn in_group(&self, gid: u32) -> bool {
        self.groups.contains(&gid)
    }
}

/// `--grant GROUP:USER`: members of a group may profile a user's processes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub group: String,
    pub gid: u32,
    pub user: String,
    pub uid: u32,
}

/// Why a grant names no group and user of this machine.
#[derive(Debug, thiserror::Error)]
pub enum GrantError {
    #[error("grant {0:?} is not GROUP:USER")]
    NotGroupUser(String),
    #[error("cannot look up group {group:?}: {source}")]
    GroupLookup {
        group: String,
        #[source]
        source: nix::Error,
    },
    #[error("grant {grant:?}: no group {group:?} on this machine")]
    NoGroup { grant: String, group: String },
    #[error("grant {grant:?}: {source}")]
    User {
        grant: String,
        #[source]
        source: LookupError,
    },
}

impl std::str::FromStr for Grant {
    type Err = GrantError;

    fn from_str(s: &str) -> Result<Grant, GrantError> {
        let (group, user) = s
            .split_once(':')
            .ok_or_else(|| GrantError::NotGroupUser(s.to_string()))?;
        let gid = match group.parse::<u32>() {
            Ok(gid) => gid,
            Err(_) => nix::unistd::Group::from_name(group)
                .map_err(|source| GrantError::GroupLookup {
                    group: group.to_string(),
                    source,
                })?
                .ok_or_else(|| GrantError::NoGroup {
                    grant: s.to_string(),
                    group: group.to_string(),
                })?
                .gid
                .as_raw(),
        };
        let account = Account::lookup(user).map_err(|source| GrantError::User {
            grant: s.to_string(),
            source,
        })?;
        Ok(Grant {
            group: group.to_string(),
            gid,
            user: account.name,
            uid: account.uid,
        })
    }
}
