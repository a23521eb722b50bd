//! Fuzz target for the user-stack unwinder (`profd::internals::unwind::Unwinder::unwind`): arbitrary
//! registers and stack copies, walked with this process's own executable mappings (the fuzz
//! binary, libc, ...) added as profd adds a target's, so framehop's CFI paths run on real
//! eh_frame data; never a panic, never more than `MAX_FRAMES` frames.
//!
//! Input: byte 0 is flags, bytes 1..25 are `ip`, `sp`, `bp` (u64 LE, missing bytes 0), the
//! rest is the stack.
//! - `REAL` (bit 0): start from a real stack captured once at start-up (registers and up to
//!   16 KiB of the stack from `sp`, in this process, so its return addresses are in the added
//!   modules); `ip`, `sp` and `bp` are XORed onto the captured ones, and the rest is a u16
//!   length to keep (0 = all) then 10-byte patches (u16 offset, u64 value) written into it.
//!   Without `REAL` the rest is the stack copy itself.
//! - `IP_IN_CODE` (bit 1): `ip` is replaced by an address inside an executable file mapping:
//!   a top byte below 128 picks the fuzz binary's text, a higher one the mapping of that index
//!   modulo their number (the fuzz binary first, then by module name); the low 56 bits pick
//!   the offset.
//! - `BP_NEAR_SP` (bit 2): `bp` becomes `sp + (bp % (len + 64))`.
//! - `RELOCATE` (bit 3): stack words (and patch values) whose top nibble is 0xc become code
//!   addresses as for `IP_IN_CODE` (bits 52..60 pick the mapping, the low 52 bits the offset),
//!   and those whose top nibble is 0xd become `sp + low 16 bits`,
//!   so seeds and crashes hold real frames whatever the address-space layout.
#![no_main]

use libfuzzer_sys::fuzz_target;
use profd::internals::maps::ProcessMaps;
use profd::internals::unwind::{Unwinder, MAX_FRAMES};
use std::ops::Range;
use std::sync::{Mutex, OnceLock};

const REAL: u8 = 1;
const IP_IN_CODE: u8 = 2;
const BP_NEAR_SP: u8 = 4;
const RELOCATE: u8 = 8;

/// Bytes of the real stack captured at start-up.
const CAPTURE_BYTES: usize = 16 * 1024;

struct Captured {
    ip: u64,
    sp: u64,
    bp: u64,
    stack: Vec<u8>,
}

struct State {
    unwinder: Mutex<Unwinder>,
    /// Executable file mappings, the fuzz binary's text first.
    code: Vec<Range<u64>>,
    real: Captured,
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    let src = bytes.get(at..).unwrap_or_default();
    let n = src.len().min(8);
    w[..n].copy_from_slice(&src[..n]);
    u64::from_le_bytes(w)
}

/// The registers at a point in `own_stack` and the stack above them.
fn capture() -> Captured {
    let ([ip, sp, bp], stack) = profd::internals::sys::own_stack(CAPTURE_BYTES);
    Captured { ip, sp, bp, stack }
}

fn state() -> &'static State {
    static STATE: OnceLock<State> = OnceLock::new();
    STATE.get_or_init(|| {
        let maps = ProcessMaps::read(std::process::id()).expect("own /proc/self/maps");
        let mut unwinder = Unwinder::default();
        let own = state as fn() -> &'static State as usize as u64;
        let mut code = Vec::new();
        for m in maps.iter() {
            unwinder.add_mapping(m);
            if m.file().is_some() {
                code.push((!(m.start..m.end).contains(&own), m.module(), m.start, m.end));
            }
        }
        // The fuzz binary first, then by name: an input picks the same module in every run,
        // whatever the address-space layout.
        code.sort();
        let code: Vec<Range<u64>> = code.into_iter().map(|(_, _, s, e)| s..e).collect();
        assert!(
            code.first().is_some_and(|r| r.contains(&own)),
            "the fuzz binary's text is an executable file mapping"
        );
        let real = capture();
        // The harness is only worth running if the real stack unwinds through CFI.
        let mut frames = Vec::new();
        let walk = unwinder.unwind(real.ip, real.sp, real.bp, &real.stack, &mut frames);
        eprintln!(
            "unwind target: {} code mappings, real stack {} bytes, {} frames ({walk:?})",
            code.len(),
            real.stack.len(),
            frames.len()
        );
        assert!(frames.len() >= 4, "the captured stack unwinds: {frames:x?}");
        State {
            unwinder: Mutex::new(unwinder),
            code,
            real,
        }
    })
}

/// An address inside a code mapping: the top byte picks the mapping, the rest the offset.
fn in_code(code: &[Range<u64>], raw: u64) -> u64 {
    // Half of all values land in the fuzz binary's own text.
    let pick = (raw >> 56) as usize;
    let r = if pick < 128 {
        &code[0]
    } else {
        &code[pick % code.len()]
    };
    r.start + (raw & 0x00ff_ffff_ffff_ffff) % (r.end - r.start)
}

fn relocate(code: &[Range<u64>], sp: u64, w: u64) -> u64 {
    match w >> 60 {
        0xc => in_code(code, (((w >> 52) & 0xff) << 56) | (w & ((1 << 52) - 1))),
        0xd => sp.wrapping_add(w & 0xffff),
        _ => w,
    }
}

fuzz_target!(|data: &[u8]| {
    let st = state();
    let Some(&flags) = data.first() else {
        return;
    };
    let (raw_ip, raw_sp, raw_bp) = (u64_at(data, 1), u64_at(data, 9), u64_at(data, 17));
    let rest = data.get(25..).unwrap_or_default();
    let (mut ip, sp, mut bp, mut stack);
    if flags & REAL != 0 {
        ip = st.real.ip ^ raw_ip;
        sp = st.real.sp ^ raw_sp;
        bp = st.real.bp ^ raw_bp;
        stack = st.real.stack.clone();
        let keep = usize::from(u16::from_le_bytes([
            rest.first().copied().unwrap_or(0),
            rest.get(1).copied().unwrap_or(0),
        ]));
        if keep != 0 {
            stack.truncate(keep);
        }
        let patches = rest.get(2..).unwrap_or_default();
        for p in patches.chunks_exact(10) {
            let off = usize::from(u16::from_le_bytes([p[0], p[1]]));
            let mut v = u64_at(p, 2);
            if flags & RELOCATE != 0 {
                v = relocate(&st.code, sp, v);
            }
            if let Some(slot) = stack.get_mut(off..off.saturating_add(8)) {
                slot.copy_from_slice(&v.to_ne_bytes());
            }
        }
    } else {
        ip = raw_ip;
        sp = raw_sp;
        bp = raw_bp;
        stack = rest.to_vec();
        if flags & RELOCATE != 0 {
            for w in stack.chunks_exact_mut(8) {
                let v = u64::from_le_bytes(w.try_into().expect("8 bytes"));
                w.copy_from_slice(&relocate(&st.code, sp, v).to_ne_bytes());
            }
        }
    }
    if flags & IP_IN_CODE != 0 {
        ip = in_code(&st.code, raw_ip);
    }
    if flags & BP_NEAR_SP != 0 {
        bp = sp.wrapping_add(raw_bp % (stack.len() as u64 + 64));
    }
    let mut out = Vec::new();
    st.unwinder
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .unwind(ip, sp, bp, &stack, &mut out);
    assert!(out.len() <= MAX_FRAMES, "{} frames", out.len());
});
