//! Running out of file descriptors: telling EMFILE and ENFILE from other
//! failures, checking that a session leaves descriptors to spare, and the
//! message that says which limit to raise. Sessions fail with it rather than
//! run on unsymbolized.
use std::io;

/// Descriptors a session must leave free once it is set up: for the
/// symbolizer to open its files, for requests, and for other sessions' work.
pub const SPARE: usize = 16;

/// Whether `err` says no descriptor could be had (the daemon's
/// RLIMIT_NOFILE, or the system's fs.file-max).
pub fn exhausted(err: &io::Error) -> bool {
    matches!(err.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

/// What to tell the caller when `what` failed for want of descriptors.
pub fn message(what: &str, err: &io::Error) -> String {
    if err.raw_os_error() == Some(libc::ENFILE) {
        return format!(
            "{what}: the system is out of file descriptors ({err}): raise fs.file-max or close files elsewhere, then retry"
        );
    }
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .map_or_else(|| "unlimited".to_string(), |n| n.to_string());
    format!(
        "{what}: profd is out of file descriptors ({err}; its limit RLIMIT_NOFILE is {limit}): \
         stop sessions, or raise the limit (LimitNOFILE= in profd.service, `ulimit -n` before \
         starting profd), then retry"
    )
}

/// `doing` failed for want of file descriptors; it says (with
/// [`message`]) which limit to raise.
#[derive(Debug, thiserror::Error)]
#[error("{}", message(.doing, .source))]
pub struct OutOfFds {
    pub doing: String,
    #[source]
    pub source: io::Error,
}

/// Err unless `n` more descriptors can be opened now.
pub fn spare(what: &str, n: usize) -> Result<(), OutOfFds> {
    let mut held = Vec::with_capacity(n);
    for _ in 0..n {
        match std::fs::File::open("/dev/null") {
            Ok(f) => held.push(f),
            Err(source) if exhausted(&source) => {
                return Err(OutOfFds {
                    doing: format!("{what} would leave fewer than {n} descriptors free"),
                    source,
                })
            }
            Err(_) => break,
        }
    }
    Ok(())
}

/// The error of a /proc read that ran out of descriptors, if it did.
pub fn of_proc(err: &procfs::ProcError) -> Option<&io::Error> {
    match err {
        procfs::ProcError::Io(e, _) if exhausted(e) => Some(e),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_emfile_and_enfile_are_exhaustion() {
        assert!(exhausted(&io::Error::from_raw_os_error(libc::EMFILE)));
        assert!(exhausted(&io::Error::from_raw_os_error(libc::ENFILE)));
        assert!(!exhausted(&io::Error::from_raw_os_error(libc::ESRCH)));
        let m = message("opening x", &io::Error::from_raw_os_error(libc::EMFILE));
        assert!(
            m.contains("RLIMIT_NOFILE") && m.contains("LimitNOFILE"),
            "{m}"
        );
        assert!(spare("a test", 4).is_ok());
    }
}
