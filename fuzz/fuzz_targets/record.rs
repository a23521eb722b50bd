//! Fuzz target for the perf record parser (`profd::internals::perf::record::parse`) and the ring walk
//! (`profd::internals::perf::walk_ring`): arbitrary bytes as one record or as a whole ring, never a panic.
//!
//! Input: byte 0 picks the mode, the rest is the data.
//! - bits 0-1, the layout: 0 = profd's frame-pointer event (`SAMPLE_TYPE | REGS_USER | STACK_USER`,
//!   `FP_USER_REGS`),
//!   1 = profd's stack-copy event (`SAMPLE_TYPE | REGS_USER | STACK_USER`, `USER_REGS`),
//!   2 = `Layout::new` from the next 17 bytes (sample_type, regs mask, sample_id_all; inputs it
//!   refuses are still parsed with profd's layout), 3 = a `Layout` built field by field from
//!   those bytes (the fields are public, so `parse` must cope with any of them).
//! - bit 2: `sample_id_all` off for the profd layouts (profd always sets it).
//! - bit 3: ring mode, else one record.
//!
//! One record: an 8-byte `perf_event_header` (type u32, misc u16, size u16) and the body, cut
//! to `size - 8` bytes when the header's size fits the data.
//! Ring mode: `tail` u64, `head - tail` u64, then the ring: the largest power of two (>= 8) of
//! the bytes left. `tail` is rounded down to 8 (the daemon only ever advances it by record
//! sizes from 0) and `head - tail` is taken modulo `2 * ring + 17`, so heads past a full ring
//! are tried too. Every record the walk frames is parsed with the layout.
#![no_main]

use libfuzzer_sys::fuzz_target;
use perf_event_open_sys::bindings as sys;
use profd::internals::perf::record::{self, CallchainContext, Layout, Record};
use profd::internals::perf::{walk_ring, FP_USER_REGS, SAMPLE_TYPE, USER_REGS};

const STACK_BITS: u64 = (sys::PERF_SAMPLE_REGS_USER | sys::PERF_SAMPLE_STACK_USER) as u64;

/// Little-endian u64 from up to 8 bytes (missing bytes are 0).
fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    let src = bytes.get(at..).unwrap_or_default();
    let n = src.len().min(8);
    w[..n].copy_from_slice(&src[..n]);
    u64::from_le_bytes(w)
}

/// The layout byte 0 asks for, and the data that follows it.
fn layout(mode: u8, rest: &[u8]) -> (Layout, &[u8]) {
    let sample_id_all = mode & 4 == 0;
    let profd = |stack_copy: bool| {
        let regs = if stack_copy { USER_REGS } else { FP_USER_REGS };
        let sample_type = SAMPLE_TYPE | STACK_BITS;
        Layout::new(sample_type, sample_id_all, regs).expect("profd's layouts are supported")
    };
    match mode & 3 {
        0 => (profd(false), rest),
        1 => (profd(true), rest),
        n => {
            let sample_type = u64_at(rest, 0);
            let regs = u64_at(rest, 8);
            let id_all = rest.get(16).is_some_and(|b| b & 1 != 0);
            let rest = rest.get(17..).unwrap_or_default();
            let layout = if n == 2 {
                Layout::new(sample_type, id_all, regs).unwrap_or_else(|_| profd(true))
            } else {
                Layout {
                    sample_type,
                    sample_id_all: id_all,
                    // Small counts mostly, and now and then a huge one.
                    regs_user_count: if regs >> 63 != 0 {
                        regs as usize
                    } else {
                        (regs % 72) as usize
                    },
                }
            };
            (layout, rest)
        }
    }
}

/// Parse one body and touch everything the result exposes.
fn parse_and_check(layout: &Layout, kind: u32, misc: u16, body: &[u8]) {
    match record::parse(layout, kind, misc, body) {
        Ok(Record::Sample(s)) => {
            let mut bytes = s.callchain().len() * 8 + s.stack_user.len();
            for v in s.callchain().iter().map(|w| u64::from_ne_bytes(*w)) {
                let _ = CallchainContext::from_entry(v);
                assert_eq!(record::is_context_marker(v), v >= record::CONTEXT_MAX);
            }
            let regs = s.regs_user().count();
            if s.regs_user_abi != 0 {
                assert_eq!(regs, layout.regs_user_count);
            } else {
                assert_eq!(regs, 0);
            }
            bytes += regs * 8;
            assert!(bytes <= body.len(), "a sample's slices come from its body");
            let _ = s.cpumode();
        }
        Ok(Record::Mmap2(m)) => assert!(m.filename.len() < body.len()),
        Ok(Record::Comm(c)) => assert!(c.comm.len() < body.len()),
        Ok(Record::Other { kind: k }) => assert_eq!(k, kind),
        Ok(_) => {}
        Err(e) => {
            let _ = e.to_string();
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let (layout, rest) = layout(mode, rest);
    if mode & 8 == 0 {
        let Some((header, body)) = rest.split_first_chunk::<8>() else {
            return;
        };
        let kind = u32::from_ne_bytes([header[0], header[1], header[2], header[3]]);
        let misc = u16::from_ne_bytes([header[4], header[5]]);
        let size = usize::from(u16::from_ne_bytes([header[6], header[7]]));
        let body = match size.checked_sub(8) {
            Some(n) if n <= body.len() => &body[..n],
            _ => body,
        };
        parse_and_check(&layout, kind, misc, body);
        return;
    }
    let tail = u64_at(rest, 0) & !7;
    let delta = u64_at(rest, 8);
    let ring = rest.get(16..).unwrap_or_default();
    if ring.len() < 8 {
        return;
    }
    let size = 1usize << ring.len().ilog2();
    let ring = &ring[..size];
    let head = tail.wrapping_add(delta % (2 * size as u64 + 17));
    let mut scratch = Vec::new();
    let mut framed = 0u64;
    let new_tail = walk_ring(ring, tail, head, &mut scratch, |kind, misc, body| {
        framed += 8 + body.len() as u64;
        parse_and_check(&layout, kind, misc, body);
    });
    // The walk consumes exactly the records it framed, or gives up at head.
    let consumed = new_tail.wrapping_sub(tail);
    assert!(consumed == framed || new_tail == head);
    assert!(consumed <= head.wrapping_sub(tail));
});
