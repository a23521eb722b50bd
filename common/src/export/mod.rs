//! Encodings of a whole resolved profile for other tools: pprof (and back),
//! folded stacks, an SVG flame graph, speedscope JSON, the Firefox
//! Profiler's processed profile (a timeline), and profctl's JSON report. Pure: bytes and strings out, no files (writing is the caller's).
mod drawn;
mod firefox;
mod folded;
mod json;
mod pieces;
mod pprof;
mod speedscope;

pub use drawn::{svg, svg_pieces, svg_text};
pub use firefox::{firefox, firefox_pieces};
pub use folded::{folded, folded_pieces};
pub use json::{json, scope_name, state_name, unwind_name};
pub use pprof::{
    cpu_profile, pprof, pprof_decode, pprof_pieces, time_sample_type, PprofEncoder, Strings,
};
pub use speedscope::{speedscope, speedscope_pieces};

/// Why an export could not be made or read.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// Bytes that are not a (gzip'd) pprof profile.
    #[error("not a pprof profile: {0}")]
    Decode(#[from] prost::DecodeError),
    /// A gzip stream that does not inflate.
    #[error("bad gzip data in pprof profile: {0}")]
    Gzip(#[source] std::io::Error),
    /// A pprof profile whose parts do not fit together.
    #[error("invalid pprof profile: {0}")]
    Invalid(String),
    /// The flame graph renderer failed.
    #[error("flame graph: {0}")]
    FlameGraph(#[source] std::io::Error),
}

/// A frame's name in folded stacks and viewers: `name`, or
/// `name [inlined]` for an inlined function.
pub(crate) fn frame_name(f: &crate::model::FunctionInfo) -> String {
    if f.inlined {
        format!("{} [inlined]", f.name)
    } else {
        f.name.clone()
    }
}
