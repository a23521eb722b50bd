//! Whether a JVM's attach mechanism is on, decided as jcmd decides it: from
//! the JVM's hsperfdata file (`/tmp/hsperfdata_<user>/<pid>`, its counter
//! `sun.rt.jvmCapabilities`), else, when it keeps none (-XX:-UsePerfData),
//! from its command line and the options its environment gives it. Nothing
//! here signals or connects to the JVM (that is `attach`).
use crate::process::maps::Target;
use std::os::unix::fs::MetadataExt;

/// What is known of a JVM's attach mechanism.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attachable {
    Yes,
    /// It is on, but the JVM does not handle SIGQUIT (`-Xrs`): SIGQUIT
    /// would end it. Its socket, opened as it started, may be used; it is
    /// never signalled.
    SocketOnly,
    /// It is off (`-XX:+DisableAttachMechanism`): how that is known.
    No(String),
    /// Not known: why. The JVM is not asked.
    Unsure(String),
}

/// The value of the string counter `name` in an hsperfdata file's bytes;
/// None when the file is not one or has no such counter.
pub fn perf_string(data: &[u8], name: &str) -> Option<String> {
    if data.get(..4)? != [0xca, 0xfe, 0xc0, 0xc0] {
        return None;
    }
    let little = match data.get(4)? {
        0 => false,
        1 => true,
        _ => return None,
    };
    let int = |at: usize| -> Option<usize> {
        let b: [u8; 4] = data.get(at..at.checked_add(4)?)?.try_into().ok()?;
        let v = if little {
            i32::from_le_bytes(b)
        } else {
            i32::from_be_bytes(b)
        };
        usize::try_from(v).ok()
    };
    // The prologue: entries start at the offset at 24, and number the count
    // at 28; each entry begins with its length, the offset of its name, the
    // length of its vector, its type, and (at 16) the offset of its data.
    let mut at = int(24)?;
    for _ in 0..int(28)? {
        let len = int(at)?;
        if len == 0 {
            return None;
        }
        let entry_name = data.get(at.checked_add(int(at + 4)?)?..)?;
        let entry_name = &entry_name[..entry_name.iter().position(|&b| b == 0)?];
        if entry_name == name.as_bytes() && data.get(at + 12) == Some(&b'B') {
            let vector = int(at + 8)?;
            let start = at.checked_add(int(at + 16)?)?;
            let bytes = data.get(start..start.checked_add(vector)?)?;
            let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
            return Some(String::from_utf8_lossy(&bytes[..end]).into_owned());
        }
        at = at.checked_add(len)?;
    }
    None
}

/// The decision from the `-XX:` options a JVM was given (command line
/// first, then JAVA_TOOL_OPTIONS and JDK_JAVA_OPTIONS, as found): the last
/// word on DisableAttachMechanism wins; options read from files are not
/// seen, so a JVM given some is not known.
pub fn from_options<'a>(options: impl IntoIterator<Item = &'a str>) -> Attachable {
    let mut state = Attachable::Yes;
    for option in options {
        match option {
            "-XX:+DisableAttachMechanism" => {
                state = Attachable::No(format!("its options say {option}"));
            }
            "-XX:-DisableAttachMechanism" => state = Attachable::Yes,
            o if o.starts_with("-XX:Flags=")
                || o.starts_with("-XX:VMOptionsFile=")
                || o.starts_with('@') =>
            {
                return Attachable::Unsure(format!(
                    "it keeps no hsperfdata and reads options from a file ({o})"
                ));
            }
            _ => {}
        }
    }
    state
}

/// The words of the variable `key` in an environment's bytes.
fn environ_options(environ: &[u8], key: &str) -> Vec<String> {
    environ
        .split(|&b| b == 0)
        .filter_map(|kv| {
            let (k, v) = std::str::from_utf8(kv).ok()?.split_once('=')?;
            (k == key).then(|| v.split_whitespace().map(String::from).collect::<Vec<_>>())
        })
        .flatten()
        .collect()
}

/// A JVM's options in the order it reads them: JAVA_TOOL_OPTIONS,
/// JDK_JAVA_OPTIONS (the launcher puts them before the command line's),
/// the command line, then _JAVA_OPTIONS.
fn options_of(cmdline: &[u8], environ: &[u8]) -> Vec<String> {
    let mut options = environ_options(environ, "JAVA_TOOL_OPTIONS");
    options.extend(environ_options(environ, "JDK_JAVA_OPTIONS"));
    options.extend(
        cmdline
            .split(|&b| b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned()),
    );
    options.extend(environ_options(environ, "_JAVA_OPTIONS"));
    options
}

/// Whether `target`, a JVM, has its attach mechanism on.
pub fn of(target: &Target) -> Attachable {
    let Ok(cmdline) = std::fs::read(target.proc_path("cmdline")) else {
        return Attachable::Unsure("its command line cannot be read".into());
    };
    let Ok(environ) = std::fs::read(target.proc_path("environ")) else {
        return Attachable::Unsure("its environment cannot be read".into());
    };
    let mut options = options_of(&cmdline, &environ);
    let state = match hsperf_data(target) {
        Some(data) => {
            // The options the JVM took, argument files and the environment's
            // read.
            for key in ["java.rt.vmArgs", "java.rt.vmFlags"] {
                let taken = perf_string(&data, key).unwrap_or_default();
                options.extend(taken.split_whitespace().map(String::from));
            }
            match perf_string(&data, "sun.rt.jvmCapabilities")
                .as_deref()
                .and_then(|c| c.bytes().next())
            {
                Some(b'1') => Attachable::Yes,
                Some(_) => Attachable::No(
                    "its hsperfdata says attach is not supported (-XX:+DisableAttachMechanism)"
                        .into(),
                ),
                None => Attachable::Unsure("its hsperfdata has no capabilities".into()),
            }
        }
        None => from_options(options.iter().map(String::as_str)),
    };
    match state {
        Attachable::Yes if ignores_sigquit(options.iter().map(String::as_str)) => {
            Attachable::SocketOnly
        }
        state => state,
    }
}

/// Whether options make the JVM leave SIGQUIT alone (`-Xrs`,
/// `-XX:+ReduceSignalUsage`; the last word wins).
pub fn ignores_sigquit<'a>(options: impl IntoIterator<Item = &'a str>) -> bool {
    options.into_iter().fold(false, |on, o| match o {
        "-Xrs" | "-XX:+ReduceSignalUsage" => true,
        "-XX:-ReduceSignalUsage" => false,
        _ => on,
    })
}

/// `target`'s hsperfdata file: in some `hsperfdata_<user>` directory of
/// its /tmp, named by its pid as it sees it, owned by its effective user,
/// and written since it started (an earlier process's with that pid is not
/// its).
fn hsperf_data(target: &Target) -> Option<Vec<u8>> {
    let tmp = target.proc_path("root/tmp");
    let euid = owner(target)?;
    let started = start_time(target)?;
    for dir in std::fs::read_dir(&tmp).ok()?.flatten() {
        if !dir.file_name().to_string_lossy().starts_with("hsperfdata_") {
            continue;
        }
        let path = dir.path().join(target.ns_pid.to_string());
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if !meta.is_file() || meta.uid() != euid || meta.len() > 1 << 20 {
            continue;
        }
        if meta.mtime() + 1 < started {
            continue;
        }
        return std::fs::read(&path).ok();
    }
    None
}

/// The effective user and group of `target` (from its status).
pub fn credentials(target: &Target) -> Option<(u32, u32)> {
    let status = std::fs::read_to_string(target.proc_path("status")).ok()?;
    let field = |key: &str| -> Option<u32> {
        let line = status.lines().find(|l| l.starts_with(key))?;
        line[key.len()..].split_whitespace().nth(1)?.parse().ok()
    };
    Some((field("Uid:")?, field("Gid:")?))
}

/// When `target` started, in seconds since the epoch.
fn start_time(target: &Target) -> Option<i64> {
    let stat = std::fs::read_to_string(target.proc_path("stat")).ok()?;
    // Field 22, counted after the command name (which may hold spaces).
    let ticks: u64 = stat
        .rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()?;
    let boot = procfs::boot_time_secs().ok()?;
    Some((boot + ticks / procfs::ticks_per_second().max(1)) as i64)
}

fn owner(target: &Target) -> Option<u32> {
    credentials(target).map(|(uid, _)| uid)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An hsperfdata file's bytes with these string counters.
    fn hsperf(little: bool, counters: &[(&str, &str)]) -> Vec<u8> {
        let int = |v: usize| {
            let v = v as i32;
            if little {
                v.to_le_bytes()
            } else {
                v.to_be_bytes()
            }
        };
        let mut out = vec![0xca, 0xfe, 0xc0, 0xc0, little as u8, 2, 0, 1];
        out.resize(32, 0);
        out[24..28].copy_from_slice(&int(32));
        out[28..32].copy_from_slice(&int(counters.len()));
        for (name, value) in counters {
            let name_at = 20;
            let data_at = name_at + name.len() + 1;
            let len = (data_at + value.len() + 1).next_multiple_of(8);
            let mut entry = vec![0u8; len];
            entry[0..4].copy_from_slice(&int(len));
            entry[4..8].copy_from_slice(&int(name_at));
            entry[8..12].copy_from_slice(&int(value.len() + 1));
            entry[12] = b'B';
            entry[16..20].copy_from_slice(&int(data_at));
            entry[name_at..name_at + name.len()].copy_from_slice(name.as_bytes());
            entry[data_at..data_at + value.len()].copy_from_slice(value.as_bytes());
            out.extend(entry);
        }
        out
    }

    #[test]
    fn capabilities_are_read_in_either_byte_order() {
        for little in [true, false] {
            let data = hsperf(
                little,
                &[
                    ("java.property.x", "y"),
                    ("sun.rt.jvmCapabilities", "10000"),
                ],
            );
            assert_eq!(
                perf_string(&data, "sun.rt.jvmCapabilities").as_deref(),
                Some("10000")
            );
            assert_eq!(perf_string(&data, "java.property.x").as_deref(), Some("y"));
            assert_eq!(perf_string(&data, "sun.rt.other"), None);
        }
    }

    #[test]
    fn damaged_hsperfdata_gives_nothing() {
        let data = hsperf(true, &[("sun.rt.jvmCapabilities", "10000")]);
        for cut in 0..data.len() {
            let _ = perf_string(&data[..cut], "sun.rt.jvmCapabilities");
        }
        assert_eq!(perf_string(&data[..40], "sun.rt.jvmCapabilities"), None);
        let mut bad = data.clone();
        bad[0] = 0;
        assert_eq!(perf_string(&bad, "sun.rt.jvmCapabilities"), None);
        let mut zero = data;
        zero[32..36].copy_from_slice(&[0; 4]);
        assert_eq!(perf_string(&zero, "sun.rt.jvmCapabilities"), None);
    }

    #[test]
    fn the_last_option_on_attach_wins_and_option_files_are_not_known() {
        assert_eq!(from_options(["java", "-Xmx1g", "Main"]), Attachable::Yes);
        assert!(matches!(
            from_options(["java", "-XX:+DisableAttachMechanism", "Main"]),
            Attachable::No(_)
        ));
        assert_eq!(
            from_options([
                "java",
                "-XX:+DisableAttachMechanism",
                "-XX:-DisableAttachMechanism"
            ]),
            Attachable::Yes
        );
        assert!(matches!(
            from_options(["java", "-XX:Flags=/etc/jvm.flags"]),
            Attachable::Unsure(_)
        ));
        assert!(matches!(
            from_options(["java", "@args.txt"]),
            Attachable::Unsure(_)
        ));
    }

    #[test]
    fn reduced_signal_usage_is_seen_last_word_winning() {
        assert!(!ignores_sigquit(["java", "-Xmx1g", "Main"]));
        assert!(ignores_sigquit([
            "-Dfoo=1",
            "-Xrs",
            "-XX:+PreserveFramePointer"
        ]));
        assert!(ignores_sigquit(["-XX:+ReduceSignalUsage"]));
        assert!(!ignores_sigquit(["-Xrs", "-XX:-ReduceSignalUsage"]));
    }

    #[test]
    fn java_options_in_the_environment_are_read() {
        let env = b"PATH=/bin\0JAVA_TOOL_OPTIONS=-Xss1m -XX:+DisableAttachMechanism\0HOME=/\0";
        let options = options_of(b"java\0Main\0", env);
        assert_eq!(
            options,
            ["-Xss1m", "-XX:+DisableAttachMechanism", "java", "Main"]
        );
        assert!(matches!(
            from_options(options.iter().map(String::as_str)),
            Attachable::No(_)
        ));
    }
}
