//! Window files on disk, as the history and the sinks' spools keep them:
//! their names (start, end and id of the window each holds; new ids and
//! the clock windows are timed by), the checks a
//! name must pass before its file is trusted, the check of a file's window
//! against its name, and the one file kept of a window found under several
//! names. No index, no retention.
use super::decode::{decode_head, mismatch};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// The ending of a window file's name.
const SUFFIX: &str = ".window.gz";
/// How far in the future a window may end (the clock may have been set
/// back a little since it was written).
pub const MAX_FUTURE_NS: u64 = 5 * 60 * 1_000_000_000;

/// Now, in nanoseconds since the Unix epoch, as window times are.
pub(crate) fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// An id fit for a file name: 1 to 64 ASCII letters and digits.
pub(crate) fn valid_id(id: &str) -> bool {
    (1..=64).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// A new random window id (32 hex digits).
pub(crate) fn random_id() -> String {
    let mut b = [0u8; 16];
    if rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty()).is_err() {
        // No getrandom(2): the clock makes an id unique enough for a name.
        b[..8].copy_from_slice(&now_ns().to_le_bytes());
    }
    b.iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn file_name(start_ns: u64, end_ns: u64, id: &str) -> String {
    format!("{start_ns:020}-{end_ns:020}-{id}{SUFFIX}")
}

/// Start, end and id of a window file's name.
pub(crate) fn parse_name(name: &str) -> Option<(u64, u64, String)> {
    let stem = name.strip_suffix(SUFFIX)?;
    let mut parts = stem.splitn(3, '-');
    let start = parts.next()?.parse().ok()?;
    let end = parts.next()?.parse().ok()?;
    let id = parts.next()?;
    valid_id(id).then(|| (start, end, id.to_string()))
}

/// A window file found in a directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Found {
    pub name: String,
    pub start: u64,
    pub end: u64,
    pub id: String,
    pub bytes: u64,
}

/// The window files of `dir`; half-written ones (`.tmp`) are removed, and
/// `other` is told of every other name.
pub(crate) fn window_files(
    dir: &Path,
    mut other: impl FnMut(&str, &Path),
) -> Result<Vec<Found>, DirError> {
    let listing = |source| DirError {
        dir: dir.to_path_buf(),
        source,
    };
    let entries = std::fs::read_dir(dir).map_err(listing)?;
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry.map_err(listing)?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            continue;
        };
        if name.ends_with(".tmp") {
            let _ = std::fs::remove_file(entry.path());
            continue;
        }
        let Some((start, end, id)) = parse_name(name) else {
            other(name, &entry.path());
            continue;
        };
        if let Ok(m) = entry.metadata() {
            if m.is_file() {
                found.push(Found {
                    name: name.to_string(),
                    start,
                    end,
                    id,
                    bytes: m.len(),
                });
            }
        }
    }
    Ok(found)
}

/// Why the name of window file `f` cannot be one profd wrote by `now_ns`:
/// not in the form profd gives, ending before it starts, or ending in the
/// future.
pub(crate) fn bad_name(f: &Found, now_ns: u64) -> Option<String> {
    if f.name != file_name(f.start, f.end, &f.id) {
        return Some(format!(
            "not a name profd gives (it would be {})",
            file_name(f.start, f.end, &f.id)
        ));
    }
    if f.start > f.end {
        return Some(format!(
            "its window ends ({} ns) before it starts ({} ns)",
            f.end, f.start
        ));
    }
    if f.end > now_ns.saturating_add(MAX_FUTURE_NS) {
        return Some(format!(
            "its window ends at {} ns, {} s in the future",
            f.end,
            (f.end - now_ns) / 1_000_000_000
        ));
    }
    None
}

/// A directory of window files could not be listed.
#[derive(Debug, thiserror::Error)]
#[error("{}: {source}", dir.display())]
pub struct DirError {
    dir: PathBuf,
    #[source]
    source: std::io::Error,
}

/// Sort the window files `found` in `dir` by `now_ns` into those to trust
/// and those to put aside, each with why: names that fail [`bad_name`], and
/// of a window found under several names, every file but the one holding
/// the window its name says (its head alone is read).
pub(crate) fn sort_out(
    dir: &Path,
    found: Vec<Found>,
    now_ns: u64,
) -> (Vec<Found>, Vec<(Found, String)>) {
    let mut aside = Vec::new();
    let mut by_id: HashMap<String, Vec<Found>> = HashMap::new();
    for f in found {
        match bad_name(&f, now_ns) {
            Some(why) => aside.push((f, why)),
            None => by_id.entry(f.id.clone()).or_default().push(f),
        }
    }
    let mut keep = Vec::new();
    for (_, mut files) in by_id {
        if files.len() == 1 {
            keep.append(&mut files);
            continue;
        }
        // Oldest name first, so that the choice does not depend on the
        // directory's order.
        files.sort_by(|a, b| a.name.cmp(&b.name));
        let n = files.len();
        let right = files.iter().position(|f| {
            std::fs::File::open(dir.join(&f.name))
                .ok()
                .and_then(|f| decode_head(f).ok())
                .is_some_and(|w| mismatch(f.start, f.end, &f.id, &w).is_ok())
        });
        let kept = right.map(|at| files.remove(at));
        for f in files {
            let why = match &kept {
                Some(k) => format!("a copy of window {} under another name ({})", f.id, k.name),
                None => format!(
                    "one of {n} files of window {}, none of which holds the window its name says",
                    f.id
                ),
            };
            aside.push((f, why));
        }
        keep.extend(kept);
    }
    keep.sort_by(|a, b| (a.start, &a.id).cmp(&(b.start, &b.id)));
    (keep, aside)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(start: u64, end: u64, id: &str) -> Found {
        Found {
            name: file_name(start, end, id),
            start,
            end,
            id: id.into(),
            bytes: 1,
        }
    }

    #[test]
    fn names_are_checked_before_their_files_are_trusted() {
        let now = 1_000 * 1_000_000_000;
        assert_eq!(bad_name(&found(5, 10, "ab"), now), None);
        assert_eq!(bad_name(&found(10, 10, "ab"), now), None);
        let why = bad_name(&found(10, 5, "ab"), now).unwrap();
        assert!(
            why.contains("ends (5 ns) before it starts (10 ns)"),
            "{why}"
        );
        // Within the skew allowed, and past it.
        assert_eq!(bad_name(&found(now, now + MAX_FUTURE_NS, "ab"), now), None);
        let why = bad_name(&found(now, now + MAX_FUTURE_NS + 1, "ab"), now).unwrap();
        assert!(why.contains("in the future"), "{why}");
        let year_2100 = 4_102_444_800 * 1_000_000_000;
        assert!(bad_name(&found(year_2100, year_2100 + 10, "ab"), now).is_some());
        let mut short = found(5, 10, "ab");
        short.name = "5-10-ab.window.gz".into();
        let why = bad_name(&short, now).unwrap();
        assert!(why.contains("not a name profd gives"), "{why}");
    }
}
