//! JIT code unwound with the tables its jitdump carries: each code load
//! with unwind info becomes a framehop module of its code range, its
//! .eh_frame and .eh_frame_hdr placed where perf's jitdump convention puts
//! them (after the code, see `symbolize::jitdump::Code::eh_frame_address`).
//! JIT code without them stays unwound by frame pointer. Reading the
//! jitdump belongs to `symbolize::jitdump`.
use super::elf::Data;
use crate::process::symbolize::jitdump::{Code, JitDumpTable};
use framehop::x86_64::UnwinderX86_64;
use framehop::{ExplicitModuleSectionInfo, Module, Unwinder as _};
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often a process's jitdump is looked at for new code.
const REFRESH: Duration = Duration::from_millis(100);

/// The JIT code of one process known to its unwinder.
#[derive(Default)]
pub(super) struct JitModules {
    /// The code ranges added as modules, by start (not overlapping).
    ranges: Vec<Range<u64>>,
    /// The table last added from, and the last load taken from it.
    table: Option<Arc<JitDumpTable>>,
    seq: u64,
    asked: Option<Instant>,
}

impl JitModules {
    /// Whether the jitdump is due to be looked at again.
    pub(super) fn due(&mut self) -> bool {
        let now = Instant::now();
        if self.asked.is_some_and(|t| now.duration_since(t) < REFRESH) {
            return false;
        }
        self.asked = Some(now);
        true
    }

    /// Whether no JIT code was added.
    pub(super) fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Add the code of `table` loaded since the last call that carries
    /// unwind tables to `unwinder` (the newest load where two overlap),
    /// unless `taken` (file mappings) holds its start.
    pub(super) fn add(
        &mut self,
        unwinder: &mut UnwinderX86_64<Data>,
        table: Arc<JitDumpTable>,
        taken: impl Fn(u64) -> bool,
    ) {
        if self.table.as_ref().is_some_and(|t| Arc::ptr_eq(t, &table)) {
            return;
        }
        let mut new: Vec<&Code> = (table.code().iter())
            .filter(|c| c.seq() > self.seq && c.unwind.is_some())
            .collect();
        new.sort_by_key(|c| c.seq());
        for code in new {
            if taken(code.start) {
                continue;
            }
            self.add_code(unwinder, code);
        }
        self.seq = (table.code().iter())
            .map(Code::seq)
            .max()
            .unwrap_or(0)
            .max(self.seq);
        self.table = Some(table);
    }

    fn add_code(&mut self, unwinder: &mut UnwinderX86_64<Data>, code: &Code) {
        let Some(unwind) = &code.unwind else {
            return;
        };
        let range = code.start..code.end;
        // New code replaces what it overlaps.
        let at = self.ranges.partition_point(|r| r.end <= range.start);
        while self.ranges.get(at).is_some_and(|r| r.start < range.end) {
            let gone = self.ranges.remove(at);
            unwinder.remove_module(gone.start);
        }
        let eh_frame = code.eh_frame_address();
        let eh_frame_end = eh_frame + unwind.eh_frame.len() as u64;
        let hdr_end = eh_frame_end + unwind.eh_frame_hdr.len() as u64;
        let hdr = (!unwind.eh_frame_hdr.is_empty()).then_some(eh_frame_end..hdr_end);
        let info = ExplicitModuleSectionInfo {
            base_svma: code.start,
            text_svma: Some(range.clone()),
            eh_frame_svma: Some(eh_frame..eh_frame_end),
            eh_frame: Some(Data::Owned(unwind.eh_frame.clone())),
            eh_frame_hdr: hdr
                .as_ref()
                .map(|_| Data::Owned(unwind.eh_frame_hdr.clone())),
            eh_frame_hdr_svma: hdr,
            ..Default::default()
        };
        let module = Module::new(code.name.to_string(), range.clone(), code.start, info);
        unwinder.add_module(module);
        self.ranges.insert(at, range);
    }
}

#[cfg(test)]
mod tests {
    use super::super::Unwinder;
    use crate::process::symbolize::jitdump::tests::{
        header, hex, load, parse, unwinding, CPYTHON_UNWIND,
    };

    /// A CPython 3.13 trampoline (`sub $8,%rsp; call *%rcx; add $8,%rsp;
    /// ret`, no frame pointer) is unwound with the tables its jitdump
    /// gave: in its call, the return address is at rsp + 8. Without them,
    /// the walk follows rbp.
    #[test]
    fn jit_code_is_unwound_with_the_tables_of_its_jitdump() {
        let start = 0x7f00_0000_1000u64;
        let mut file = header();
        file.extend(unwinding(&hex(CPYTHON_UNWIND), 20));
        file.extend(load(start, 0xb, 1, "py::outer:x.py"));
        let (table, _) = parse(&file);
        let table = std::sync::Arc::new(table);
        let (ip, ra, sp) = (start + 4, 0x7f00_0000_9005u64, 0x7ffc_0000_1000u64);
        let mut stack = vec![0u8; 0x40];
        let mut put = |at: usize, v: u64| stack[at..at + 8].copy_from_slice(&v.to_ne_bytes());
        put(8, ra);
        put(0x18, 0x7f00_0000_7777); // what rbp + 8 holds
        let bp = sp + 0x10;
        let mut without = Unwinder::default();
        let mut out = Vec::new();
        without.unwind(ip, sp, bp, &stack, &mut out);
        assert_eq!(out[..2], [ip, 0x7f00_0000_7776], "by frame pointer");
        let mut with = Unwinder::default();
        with.add_jit_code(table.clone());
        assert!(!with.is_empty());
        let mut out = Vec::new();
        with.unwind(ip, sp, bp, &stack, &mut out);
        assert_eq!(out[..2], [ip, ra - 1], "by the jitdump's tables");
        // The same table again adds nothing; the walk is the same.
        with.add_jit_code(table);
        let mut again = Vec::new();
        with.unwind(ip, sp, bp, &stack, &mut again);
        assert_eq!(again, out);
    }
}
