//! Where CRuby keeps what profd reads, per version: field offsets of
//! `vm_core.h`'s and `iseq.h`'s structures, as rbspy's bindings give them
//! for 3.1.0 to 3.1.7 (all the same), and 3.1's `internal/class.h` for a
//! class's, checked against Debian's 3.1.2.

/// A CRuby version, as `ruby_version` spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version {
    pub major: u8,
    pub minor: u8,
    pub patch: u8,
}

impl Version {
    /// The version in `bytes`, the C string `ruby_version` ("3.1.2").
    pub fn parse(bytes: &[u8]) -> Option<Version> {
        let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        let text = std::str::from_utf8(&bytes[..end]).ok()?;
        let mut parts = text.split('.').map(|p| p.parse::<u8>().ok());
        let (major, minor, patch) = (parts.next()??, parts.next()??, parts.next()??);
        parts.next().is_none().then_some(Version {
            major,
            minor,
            patch,
        })
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// Offsets in bytes.
#[derive(Debug)]
pub struct Layout {
    /// `rb_vm_t.ractor.main_ractor`.
    pub vm_main_ractor: u64,
    /// `rb_ractor_t.threads.set`: a list of threads by their `lt_node`,
    /// the first field of `rb_thread_t`.
    pub ractor_threads: u64,
    /// `rb_thread_t.tid` (the native thread id, 3.1 on), `.ec`.
    pub thread_tid: u64,
    pub thread_ec: u64,
    /// `rb_control_frame_t`: its size, `.pc`, `.iseq`, `.ep`.
    pub cfp_bytes: u64,
    pub cfp_pc: u64,
    pub cfp_iseq: u64,
    pub cfp_ep: u64,
    /// `rb_iseq_t.body`.
    pub iseq_body: u64,
    /// `rb_iseq_constant_body`: `.iseq_encoded`,
    /// `.location.{pathobj, base_label, label, first_lineno}`,
    /// `.insns_info.{body, positions, size, succ_index_table}`.
    pub body_encoded: u64,
    pub body_pathobj: u64,
    pub body_base_label: u64,
    pub body_label: u64,
    pub body_first_line: u64,
    pub body_insns: u64,
    pub body_positions: u64,
    pub body_insns_size: u64,
    pub body_succ_table: u64,
    /// Bytes up to the last field read of a body.
    pub body_bytes: u64,
    /// `struct iseq_insn_info_entry`'s size (`line_no` first).
    pub insn_info_bytes: u64,
    /// `rb_method_entry_t.owner` (the class or module the method is
    /// defined in); `struct vm_svar.cref_or_me`.
    pub cme_owner: u64,
    pub svar_cref_or_me: u64,
    /// `struct RClass.ptr` (its `rb_classext_t`), and that one's `.iv_tbl`
    /// (an `st_table` of the class's instance variables, its name among
    /// them).
    pub class_ext: u64,
    pub ext_iv_tbl: u64,
    /// `st_table.{entries_start, entries_bound, entries}`; entries are
    /// (hash, key, record) words.
    pub st_start: u64,
    pub st_bound: u64,
    pub st_entries: u64,
}

const V3_1: Layout = Layout {
    vm_main_ractor: 32,
    ractor_threads: 304,
    thread_tid: 88,
    thread_ec: 40,
    cfp_bytes: 64,
    cfp_pc: 0,
    cfp_iseq: 16,
    cfp_ep: 32,
    iseq_body: 16,
    body_encoded: 8,
    body_pathobj: 64,
    body_base_label: 72,
    body_label: 80,
    body_first_line: 88,
    body_insns: 120,
    body_positions: 128,
    body_insns_size: 136,
    body_succ_table: 144,
    body_bytes: 152,
    insn_info_bytes: 12,
    cme_owner: 32,
    svar_cref_or_me: 8,
    class_ext: 24,
    ext_iv_tbl: 8,
    st_start: 32,
    st_bound: 40,
    st_entries: 48,
};

/// The layout of `version`, None for one profd does not read.
pub fn of(version: Version) -> Option<&'static Layout> {
    match (version.major, version.minor) {
        (3, 1) => Some(&V3_1),
        _ => None,
    }
}
