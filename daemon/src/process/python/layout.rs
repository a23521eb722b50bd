//! Where CPython keeps what a stack read needs, per version: the offsets
//! of the fields followed from `_PyRuntime` to each thread's frames and
//! from a frame to its code object's names, file and lines, on 64-bit
//! Linux. The figures are those of the interpreter's own headers
//! (`offsetof` of its internal structures, compiled against each
//! version's installed headers with `Py_BUILD_CORE`).

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
    /// `PyThreadState.next`.
    pub thread_next: u64,
    /// How a thread state names its thread.
    pub thread_id: ThreadId,
    /// Where the thread's innermost frame is.
    pub current: Current,
    /// `_PyInterpreterFrame.f_code` (3.13: `.f_executable`; before 3.11,
    /// `PyFrameObject.f_code`), `.previous` (`.f_back`), the last
    /// instruction (see [`Instr`]) and `.owner` (none before 3.11).
    pub frame_code: u64,
    pub frame_previous: u64,
    pub frame_instr: u64,
    pub frame_owner: Option<u64>,
    /// How the last instruction is kept.
    pub instr: Instr,
    /// How the first frame a call of the eval loop ran is told.
    pub entry: Entry,
    /// `PyCodeObject.co_firstlineno`, `.co_filename`, `.co_qualname`
    /// (before 3.11, `.co_name`), and its line table (`.co_linetable`;
    /// 3.8 and 3.9: `.co_lnotab`), in the format `lines`.
    pub code_first_line: u64,
    pub code_file: u64,
    pub code_qualname: u64,
    pub code_lines: u64,
    pub lines: Lines,
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

/// How a thread state names its thread.
#[derive(Debug, PartialEq, Eq)]
pub enum ThreadId {
    /// By its native id, `PyThreadState.native_thread_id` (3.11 on).
    Native(u64),
    /// By its `pthread_t`, `PyThreadState.thread_id`: the native id is in
    /// glibc's `struct pthread` there (see [`crate::process::pthread`]).
    Pthread(u64),
}

/// Where a thread state holds its innermost frame.
#[derive(Debug, PartialEq, Eq)]
pub enum Current {
    /// Through `PyThreadState.cframe` (3.11, 3.12), at this offset of the
    /// `_PyCFrame` (`current_frame`).
    CFrame { thread_cframe: u64, current: u64 },
    /// In `PyThreadState.current_frame` (3.13; `.frame` before 3.11).
    Thread(u64),
}

/// How a frame keeps its last instruction.
#[derive(Debug, PartialEq, Eq)]
pub enum Instr {
    /// A pointer to it, in the code object's 2-byte units that start at
    /// this offset (`co_code_adaptive`; 3.11 on).
    Pointer { code_units: u64 },
    /// `f_lasti`, a 32-bit index counted in bytes (3.8, 3.9) or in 2-byte
    /// units (3.10); -1 before the first.
    Index { unit_bytes: u64 },
}

/// The format of a code object's line table.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum Lines {
    /// `co_lnotab` (3.8, 3.9).
    Lnotab,
    /// 3.10's `co_linetable`.
    Linetable,
    /// The location table of 3.11 on.
    Locations,
}

/// How the first frame of a call of the eval loop is told.
#[derive(Debug, PartialEq, Eq)]
pub enum Entry {
    /// Its `is_entry` byte, at this offset (3.11).
    Flag(u64),
    /// It is just older than a frame owned by the C stack (3.12's and
    /// 3.13's entry shims, `owner` 3).
    Shim,
    /// Every frame is: each Python call is a call of the eval loop
    /// (before 3.11).
    Every,
}

impl Layout {
    /// Bytes of a frame that hold every field read of it.
    pub fn frame_bytes(&self) -> u64 {
        let owner = self.frame_owner.map_or(0, |o| o + 1);
        let entry = match self.entry {
            Entry::Flag(at) => at + 1,
            _ => 0,
        };
        (self
            .frame_code
            .max(self.frame_previous)
            .max(self.frame_instr)
            + 8)
        .max(owner)
        .max(entry)
    }

    /// Bytes of a code object's head that hold every field read of it.
    pub fn code_bytes(&self) -> u64 {
        let fields = (self.code_file.max(self.code_qualname).max(self.code_lines) + 8)
            .max(self.code_first_line + 4);
        match self.instr {
            Instr::Pointer { code_units } => fields.max(code_units),
            Instr::Index { .. } => fields,
        }
    }
}

/// CPython 3.8 and 3.9 (`PyFrameObject` chains, `co_lnotab`).
const V3_8: Layout = Layout {
    runtime_interpreters: 32,
    interp_next: 0,
    interp_threads: 8,
    thread_next: 8,
    thread_id: ThreadId::Pthread(176),
    current: Current::Thread(24),
    frame_code: 32,
    frame_previous: 24,
    frame_instr: 104,
    frame_owner: None,
    instr: Instr::Index { unit_bytes: 1 },
    entry: Entry::Every,
    code_first_line: 40,
    code_file: 104,
    code_qualname: 112,
    code_lines: 120,
    lines: Lines::Lnotab,
    var_size: 16,
    bytes_data: 32,
    str_length: 16,
    str_state: 32,
    str_ascii_data: 48,
    str_compact_data: 72,
};

/// CPython 3.10: as 3.9 but for `f_lasti`'s place and unit and the line
/// table's format.
const V3_10: Layout = Layout {
    frame_instr: 96,
    instr: Instr::Index { unit_bytes: 2 },
    lines: Lines::Linetable,
    ..V3_8
};

/// CPython 3.11 (Debian 12's python3).
const V3_11: Layout = Layout {
    runtime_interpreters: 40,
    interp_next: 0,
    interp_threads: 16,
    thread_next: 8,
    thread_id: ThreadId::Native(160),
    current: Current::CFrame {
        thread_cframe: 56,
        current: 8,
    },
    frame_code: 32,
    frame_previous: 48,
    frame_instr: 56,
    frame_owner: Some(69),
    instr: Instr::Pointer { code_units: 184 },
    entry: Entry::Flag(68),
    code_first_line: 72,
    code_file: 112,
    code_qualname: 128,
    code_lines: 136,
    lines: Lines::Locations,
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
    thread_id: ThreadId::Native(144),
    current: Current::CFrame {
        thread_cframe: 56,
        current: 0,
    },
    frame_code: 0,
    frame_previous: 8,
    frame_instr: 56,
    frame_owner: Some(70),
    instr: Instr::Pointer { code_units: 192 },
    entry: Entry::Shim,
    code_first_line: 68,
    code_file: 112,
    code_qualname: 128,
    code_lines: 136,
    lines: Lines::Locations,
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
    thread_id: ThreadId::Native(160),
    current: Current::Thread(72),
    frame_code: 0,
    frame_previous: 8,
    frame_instr: 56,
    frame_owner: Some(70),
    instr: Instr::Pointer { code_units: 200 },
    entry: Entry::Shim,
    code_first_line: 68,
    code_file: 112,
    code_qualname: 128,
    code_lines: 136,
    lines: Lines::Locations,
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
        (3, 8 | 9) => Some(&V3_8),
        (3, 10) => Some(&V3_10),
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
