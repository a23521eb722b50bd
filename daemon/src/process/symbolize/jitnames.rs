//! What names a process's JIT code: its perf map and its jitdump, as read
//! at one moment. The jitdump is asked first (it knows which of two loads
//! at an address came later, and the source lines); the perf map names
//! what it does not. Reading the files belongs to `maps`.
use super::frame::Frame;
use super::jitdump::JitDumpTable;
use super::perfmap::PerfMapTable;
use std::sync::Arc;

/// Module name of the JIT code perf maps and jitdumps name.
pub const JIT_MODULE: &str = "[jit]";

/// A process's perf map and jitdump tables (None: not looked for, or the
/// process was let go of with none).
#[derive(Debug, Clone, Default)]
pub struct JitNames {
    pub perf_map: Option<Arc<PerfMapTable>>,
    pub jit_dump: Option<Arc<JitDumpTable>>,
}

fn same<T>(a: &Option<Arc<T>>, b: &Option<Arc<T>>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        (None, None) => true,
        _ => false,
    }
}

impl JitNames {
    /// The frame of JIT code at `addr`, if either table names it.
    pub fn frame(&self, addr: u64) -> Option<Frame> {
        if let Some(code) = self.jit_dump.as_ref().and_then(|t| t.lookup(addr)) {
            let mut frame = Frame::named(code.name.as_ref(), JIT_MODULE);
            if let Some((file, line)) = code.line(addr) {
                frame.file = Some(file.clone());
                frame.line = line;
            }
            return Some(frame);
        }
        let name = self.perf_map.as_ref()?.lookup(addr)?;
        Some(Frame::named(name.as_ref(), JIT_MODULE))
    }

    /// Whether these are the very tables `other` holds (neither file
    /// changed in between).
    pub fn same(&self, other: &JitNames) -> bool {
        same(&self.perf_map, &other.perf_map) && same(&self.jit_dump, &other.jit_dump)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::process::symbolize::jitdump::tests::{header, load, parse};

    /// The jitdump names first, with its lines; the perf map what it does
    /// not name.
    #[test]
    fn the_jitdump_names_first_and_the_perf_map_the_rest() {
        let mut file = header();
        file.extend(load(0x1000, 0x10, 1, "from_dump"));
        let names = JitNames {
            perf_map: Some(Arc::new(PerfMapTable::parse(
                "1000 10 old\n2000 10 from_map\n",
            ))),
            jit_dump: Some(Arc::new(parse(&file).0)),
        };
        let name = |a| {
            names
                .frame(a)
                .map(|f| (f.func.name, f.func.module, f.named))
        };
        assert_eq!(
            name(0x1008),
            Some(("from_dump".into(), "[jit]".into(), true))
        );
        assert_eq!(
            name(0x2008),
            Some(("from_map".into(), "[jit]".into(), true))
        );
        assert_eq!(name(0x3000), None);
        assert!(names.same(&names.clone()));
        assert!(!names.same(&JitNames::default()));
    }
}
