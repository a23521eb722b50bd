//! Where Perl keeps what profd reads, per version: offsets of `intrpvar.h`'s
//! interpreter, `cop.h`'s stack info, context and cop, `sv.h`'s, `cv.h`'s,
//! `gv.h`'s and `hv.h`'s bodies, and `op.h`'s op, for a threaded build
//! (MULTIPLICITY, as Debian's), taken with `offsetof` from Perl 5.36's own
//! headers (`/usr/lib/x86_64-linux-gnu/perl/5.36/CORE`, from Debian 12's
//! libperl5.36, 5.36.0) on x86-64: a C program printing
//! `offsetof(struct interpreter, Icurcop)`, `offsetof(PERL_CONTEXT,
//! cx_u.cx_blk.blk_u.blku_sub.cv)`, `sizeof(PERL_CONTEXT)` and the rest,
//! built with the flags `perl -MExtUtils::Embed -e ccopts` gives.

/// A Perl version, as `PL_revision`, `PL_version` and `PL_subversion` give
/// it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version {
    pub revision: u8,
    pub version: u8,
    pub subversion: u8,
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.revision, self.version, self.subversion)
    }
}

/// Offsets in bytes.
#[derive(Debug)]
pub struct Layout {
    /// `struct interpreter`: `Iop`, `Icurcop`, `Icurstackinfo`, `Iphase`.
    pub interp_op: u64,
    pub interp_curcop: u64,
    pub interp_stackinfo: u64,
    pub interp_phase: u64,
    /// `PERL_SI`: `si_cxstack`, `si_prev`, `si_cxix`, `si_type`.
    pub si_cxstack: u64,
    pub si_prev: u64,
    pub si_cxix: u64,
    pub si_type: u64,
    /// `PERL_CONTEXT`: its size, `blk_oldcop`, `blk_sub.retop`,
    /// `blk_sub.cv` (`cx_type` is its first byte).
    pub cx_bytes: u64,
    pub cx_oldcop: u64,
    pub cx_retop: u64,
    pub cx_cv: u64,
    /// `COP`: `cop_line` (a u32), `cop_file` (a C string, in a threaded
    /// build); `OP`'s word whose low 9 bits are `op_type`.
    pub cop_line: u64,
    pub cop_file: u64,
    pub op_type: u64,
    /// `SV`: `sv_flags` (the type in its low 5 bits); `sv_any` is first.
    pub sv_flags: u64,
    /// `XPVCV`: `xcv_stash`, `xcv_start_u`, `xcv_gv_u` (a GV, or a HEK
    /// with CVf_NAMED), `xcv_file` (a C string), `xcv_flags`.
    pub cv_stash: u64,
    pub cv_start: u64,
    pub cv_gv: u64,
    pub cv_file: u64,
    pub cv_flags: u64,
    /// `XPVGV`: `xiv_u.xivu_namehek`, `xnv_u.xgv_stash`.
    pub gv_name: u64,
    pub gv_stash: u64,
    /// `struct xpvhv_with_aux.xhv_aux`, and in it `xhv_name_u` and
    /// `xhv_name_count`.
    pub hv_aux: u64,
    pub aux_name: u64,
    pub aux_name_count: u64,
    /// `HEK`: `hek_len`, `hek_key`.
    pub hek_len: u64,
    pub hek_key: u64,
    /// `OP_NEXTSTATE` and `OP_DBSTATE` (`opnames.h`).
    pub op_nextstate: u16,
    pub op_dbstate: u16,
}

const V5_36: Layout = Layout {
    interp_op: 8,
    interp_curcop: 208,
    interp_stackinfo: 224,
    interp_phase: 2512,
    si_cxstack: 8,
    si_prev: 16,
    si_cxix: 32,
    si_type: 44,
    cx_bytes: 104,
    cx_oldcop: 16,
    cx_retop: 48,
    cx_cv: 72,
    cop_line: 36,
    cop_file: 48,
    op_type: 32,
    sv_flags: 12,
    cv_stash: 32,
    cv_start: 40,
    cv_gv: 56,
    cv_file: 64,
    cv_flags: 92,
    gv_name: 32,
    gv_stash: 40,
    hv_aux: 32,
    aux_name: 0,
    aux_name_count: 28,
    hek_len: 4,
    hek_key: 8,
    op_nextstate: 195,
    op_dbstate: 196,
};

/// The layout of `version`, None for one profd does not read.
pub fn of(version: Version) -> Option<&'static Layout> {
    match (version.revision, version.version) {
        (5, 36) => Some(&V5_36),
        _ => None,
    }
}
