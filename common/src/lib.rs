//! profd-common: the generated `profd.v1` API and the profile model shared by
//! the daemon and the clients. No I/O, and `forbid(unsafe_code)`.
#![forbid(unsafe_code)]

pub mod codec;
pub mod export;
pub mod kernel;
pub mod model;
pub mod names;
pub mod schedule;
pub mod views;

#[cfg(test)]
mod testdata;

/// Generated gRPC types and stubs for `profd.v1` (kept apart: generated code).
#[allow(clippy::all, missing_docs)]
pub mod api {
    tonic::include_proto!("profd.v1");

    /// Encoded file descriptor set of the API, for server reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        include_bytes!(concat!(env!("OUT_DIR"), "/profd_descriptor.bin"));
}

/// Generated messages of pprof's `profile.proto` (`perftools.profiles`),
/// for the pprof export (kept apart: generated code).
#[allow(clippy::all, missing_docs)]
pub mod pprof_proto {
    include!(concat!(env!("OUT_DIR"), "/perftools.profiles.rs"));
}

/// Time accounting adds up drain by drain and session by session.
impl std::ops::AddAssign for api::TimeTotals {
    fn add_assign(&mut self, t: api::TimeTotals) {
        self.on_cpu_ns += t.on_cpu_ns;
        self.off_cpu_ns += t.off_cpu_ns;
        self.runnable_ns += t.runnable_ns;
        self.waits += t.waits;
        self.unpaired += t.unpaired;
        self.open_at_end += t.open_at_end;
        self.unknown_ns += t.unknown_ns;
    }
}

/// The event's name as perf spells it.
pub fn event_name(event: api::Event) -> &'static str {
    match event {
        api::Event::Cycles => "cycles",
        api::Event::CpuClock | api::Event::Unspecified => "cpu-clock",
    }
}

/// Most characters of a client's text that a message repeats.
pub const QUOTED_CHARS: usize = 64;

/// Text a client sent, quoted for an error message: Rust's `{:?}` form, cut
/// after [`QUOTED_CHARS`] characters with its full length said, so that an
/// answer never grows with what was sent.
pub fn quoted(s: &str) -> String {
    match s.char_indices().nth(QUOTED_CHARS) {
        None => format!("{s:?}"),
        Some((cut, _)) => format!("{:?}… ({} bytes in all)", &s[..cut], s.len()),
    }
}

/// A string as a ClickHouse SQL literal: single-quoted, with its quotes
/// and backslashes escaped.
pub fn clickhouse_literal(s: &str) -> String {
    let mut out = String::from("'");
    for c in s.chars() {
        match c {
            '\'' => out.push_str("\\'"),
            '\\' => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// Default sampling frequency (Hz) when a session asks for none.
pub const DEFAULT_FREQUENCY_HZ: u32 = 999;
/// Default path of the daemon's Unix socket.
pub const DEFAULT_SOCKET: &str = "/run/profd/profd.sock";

#[cfg(test)]
mod tests {
    #[test]
    fn quoted_text_is_cut_after_a_few_characters() {
        assert_eq!(super::quoted("main"), "\"main\"");
        let long = "ü".repeat(3 << 20);
        let q = super::quoted(&long);
        assert!(q.len() < 200, "{q}");
        assert!(
            q.starts_with("\"üü") && q.ends_with("… (6291456 bytes in all)"),
            "{q}"
        );
    }
}
