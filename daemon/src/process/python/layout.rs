//! Where CPython keeps what a stack read needs, per version: the offsets
//! of the fields followed from `_PyRuntime` to each thread's frames and
//! from a frame to its code object's names, file and lines, on 64-bit
//! Linux. The figures are those of the interpreter's own headers
//! (`offsetof` of its internal structures).

/// A CPython version, major and minor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    pub major: u8,
    pub minor: u8,
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl Version {
    /// The version `Py_Version` (and `sys.hexversion`) spells:
    /// `0xMMmmppRS`.
    pub fn of_hex(hex: u32) -> Version {
        Version {
            major: (hex >> 24) as u8,
            minor: (hex >> 16) as u8,
        }
    }

    /// The version in a file name such as `python3.11` or
    /// `libpython3.11.so.1.0`.
    pub fn of_file_name(name: &str) -> Option<Version> {
        let rest = name
            .strip_prefix("lib")
            .unwrap_or(name)
            .strip_prefix("python")?;
        let (major, rest) = rest.split_once('.')?;
        let minor: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let after = &rest[minor.len()..];
        if !(after.is_empty()
            || after.starts_with(".so")
            || after.starts_with('d')
            || after.starts_with('m'))
        {
            return None;
        }
        Some(Version {
            major: major.parse().ok()?,
            minor: minor.parse().ok()?,
        })
    }
}

/// Field offsets in bytes.
#[derive(Debug, PartialEq, Eq)]
pub struct Layout {
    /// `_PyRuntimeState.interpreters.head`.
    pub runtime_interpreters: u64,
    /// `PyInterpreterState.next`, `.threads.head`.
    pub interp_next: u64,
    pub interp_threads: u64,
    /// `PyThreadState.next`, `.native_thread_id`.
    pub thread_next: u64,
    pub thread_native_id: u64,
    /// Where the thread's innermost frame is.
    pub current: Current,
    /// `_PyInterpreterFrame.f_code` (3.13: `.f_executable`), `.previous`,
    /// `.prev_instr` (3.13: `.instr_ptr`), `.owner`.
    pub frame_code: u64,
    pub frame_previous: u64,
    pub frame_instr: u64,
    pub frame_owner: u64,
    /// How the first frame a call of the eval loop ran is told.
    pub entry: Entry,
    /// `PyCodeObject.co_firstlineno`, `.co_filename`, `.co_qualname`,
    /// `.co_linetable`, `.co_code_adaptive`.
    pub code_first_line: u64,
    pub code_file: u64,
    pub code_qualname: u64,
    pub code_lines: u64,
    pub code_units: u64,
    /// `PyVarObject.ob_size`, `PyBytesObject.ob_sval`.
    pub var_size: u64,
    pub bytes_data: u64,
    /// `PyASCIIObject.length`, `.state`; where a compact ASCII string's
    /// characters start (`sizeof(PyASCIIObject)`), and another compact
    /// string's (`sizeof(PyCompactUnicodeObject)`).
    pub str_length: u64,
    pub str_state: u64,
    pub str_ascii_data: u64,
    pub str_compact_data: u64,
}

/// Where a thread state holds its innermost frame.
#[derive(Debug, PartialEq, Eq)]
pub enum Current {
    /// Through `PyThreadState.cframe` (3.11, 3.12), at this offset of the
    /// `_PyCFrame` (`current_frame`).
    CFrame { thread_cframe: u64, current: u64 },
    /// In `PyThreadState.current_frame` (3.13).
    Thread(u64),
}

/// How the first frame of a call of the eval loop is told.
#[derive(Debug, PartialEq, Eq)]
pub enum Entry {
    /// Its `is_entry` byte, at this offset (3.11).
    Flag(u64),
    /// It is just older than a frame owned by the C stack (3.12's and
    /// 3.13's entry shims, `owner` 3).
    Shim,
}

/// CPython 3.11 (Debian 12's python3).
const V3_11: Layout = Layout {
    runtime_interpreters: 40,
    interp_next: 0,
    interp_threads: 16,
    thread_next: 8,
    thread_native_id: 160,
    current: Current::CFrame {
        thread_cframe: 56,
        current: 8,
    },
    frame_code: 32,
    frame_previous: 48,
    frame_instr: 56,
    frame_owner: 69,
    entry: Entry::Flag(68),
    code_first_line: 72,
    code_file: 112,
    code_qualname: 128,
    code_lines: 136,
    code_units: 184,
    var_size: 16,
    bytes_data: 32,
    str_length: 16,
    str_state: 32,
    str_ascii_data: 48,
    str_compact_data: 72,
};

/// CPython 3.12.
const V3_12: Layout = Layout {
    runtime_interpreters: 40,
    interp_next: 0,
    interp_threads: 72,
    thread_next: 8,
    thread_native_id: 144,
    current: Current::CFrame {
        thread_cframe: 56,
        current: 0,
    },
    frame_code: 0,
    frame_previous: 8,
    frame_instr: 56,
    frame_owner: 70,
    entry: Entry::Shim,
    code_first_line: 68,
    code_file: 112,
    code_qualname: 128,
    code_lines: 136,
    code_units: 192,
    var_size: 16,
    bytes_data: 32,
    str_length: 16,
    str_state: 32,
    str_ascii_data: 40,
    str_compact_data: 56,
};

/// CPython 3.13.
const V3_13: Layout = Layout {
    runtime_interpreters: 632,
    interp_next: 7264,
    interp_threads: 7344,
    thread_next: 8,
    thread_native_id: 160,
    current: Current::Thread(72),
    frame_code: 0,
    frame_previous: 8,
    frame_instr: 56,
    frame_owner: 70,
    entry: Entry::Shim,
    code_first_line: 68,
    code_file: 112,
    code_qualname: 128,
    code_lines: 136,
    code_units: 200,
    var_size: 16,
    bytes_data: 32,
    str_length: 16,
    str_state: 32,
    str_ascii_data: 40,
    str_compact_data: 56,
};

/// The layout of `version`, if it is one profd reads.
pub fn of(version: Version) -> Option<&'static Layout> {
    match (version.major, version.minor) {
        (3, 11) => Some(&V3_11),
        (3, 12) => Some(&V3_12),
        (3, 13) => Some(&V3_13),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_from_hex_and_file_names() {
        assert_eq!(
            Version::of_hex(0x030b07f0),
            Version {
                major: 3,
                minor: 11
            }
        );
        let v = |n| Version::of_file_name(n);
        assert_eq!(
            v("python3.11"),
            Some(Version {
                major: 3,
                minor: 11
            })
        );
        assert_eq!(
            v("libpython3.9.so.1.0"),
            Some(Version { major: 3, minor: 9 })
        );
        assert_eq!(
            v("python3.12d"),
            Some(Version {
                major: 3,
                minor: 12
            })
        );
        assert_eq!(v("python3"), None);
        assert_eq!(v("python3.11-config"), None);
        assert_eq!(v("pythonista"), None);
    }
}
