//! Perf callchains as batches hold them: the frames of a sample innermost
//! first, context markers dropped, return addresses moved into their call
//! instruction.
use crate::os::perf::record::{is_context_marker, CONTEXT_USER};
use crate::process::symbolize::is_kernel;

/// A user-context entry in the kernel half of the address space is not a
/// return address (a frame-pointer walk read garbage); it is kept as a frame
/// with this value, which no symbolizer resolves.
pub const BAD_USER_FRAME: u64 = 0;

/// Append the frames of a perf callchain (native-endian words as the ring
/// holds them; context markers dropped, return addresses minus one so they
/// fall inside the call instruction) to `out`; falls back to `ip` when the
/// chain is empty. Returns the frames added.
pub fn push_stack(out: &mut Vec<u64>, chain: &[[u8; 8]], ip: Option<u64>) -> usize {
    let before = out.len();
    out.reserve(chain.len());
    // Markers start each context's run of addresses: the first of a run is
    // where the sample was taken in it, the others are return addresses.
    let mut user = false;
    let mut rest = chain;
    loop {
        let n = first_marker(rest);
        let (run, after) = rest.split_at(n);
        if let Some((first, callers)) = run.split_first() {
            // Two loops without a branch inside, which the compiler turns
            // into vector code.
            if user {
                let keep = |a: u64| if is_kernel(a) { BAD_USER_FRAME } else { a };
                out.push(keep(word(first)));
                out.extend(callers.iter().map(|v| keep(word(v).wrapping_sub(1))));
            } else {
                out.push(word(first));
                out.extend(callers.iter().map(|v| word(v).wrapping_sub(1)));
            }
        }
        match after.split_first() {
            Some((marker, tail)) => {
                user = word(marker) == CONTEXT_USER;
                rest = tail;
            }
            None => break,
        }
    }
    if out.len() == before {
        if let Some(ip) = ip {
            out.push(ip);
        }
    }
    out.len() - before
}

/// Where the first context marker of `chain` is (its length if none).
/// Markers are one or two a chain, so whole blocks of addresses are tested
/// at once, without a branch per entry.
fn first_marker(chain: &[[u8; 8]]) -> usize {
    const BLOCK: usize = 8;
    let marker = |w: &[u8; 8]| is_context_marker(word(w));
    let (blocks, _) = chain.as_chunks::<BLOCK>();
    let clear = blocks
        .iter()
        .position(|b| b.iter().fold(false, |any, w| any | marker(w)))
        .unwrap_or(blocks.len());
    let start = clear * BLOCK;
    start
        + chain[start..]
            .iter()
            .position(marker)
            .unwrap_or(chain.len() - start)
}

/// A callchain entry as the ring holds it.
fn word(w: &[u8; 8]) -> u64 {
    u64::from_ne_bytes(*w)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KERNEL: u64 = (-128i64) as u64;
    const USER: u64 = (-512i64) as u64;

    /// `push_stack` over a chain as the ring holds it.
    fn push(out: &mut Vec<u64>, chain: &[u64], ip: Option<u64>) -> usize {
        let words: Vec<[u8; 8]> = chain.iter().map(|v| v.to_ne_bytes()).collect();
        push_stack(out, &words, ip)
    }

    #[test]
    fn callchains_drop_markers_and_adjust_return_addresses() {
        let mut out = Vec::new();
        let chain = [
            KERNEL,
            0xffff_ffff_8100_0010,
            0xffff_ffff_8100_0020,
            USER,
            0x401000,
            0x402000,
        ];
        assert_eq!(push(&mut out, &chain, Some(1)), 4);
        assert_eq!(
            out,
            vec![
                0xffff_ffff_8100_0010,
                0xffff_ffff_8100_001f,
                0x401000,
                0x401fff
            ]
        );
    }

    #[test]
    fn markers_are_found_wherever_they_are_in_long_chains() {
        for kernel in [0, 1, 7, 8, 9, 16, 23] {
            let k = |i: u64| 0xffff_ffff_8100_0000 + i * 0x10;
            let u = |i: u64| 0x40_0000 + i * 0x10;
            let mut chain = vec![KERNEL];
            chain.extend((0..kernel).map(k));
            chain.push(USER);
            chain.extend((0..20).map(u));
            chain[kernel as usize + 12] = k(99);
            let mut expected: Vec<u64> = (0..kernel).map(|i| k(i) - u64::from(i > 0)).collect();
            expected.extend((0..20).map(|i| u(i) - u64::from(i > 0)));
            expected[kernel as usize + 10] = BAD_USER_FRAME;
            let mut out = vec![7];
            assert_eq!(push(&mut out, &chain, None), expected.len());
            assert_eq!(out[1..], expected, "{kernel} kernel frames");
        }
    }

    #[test]
    fn kernel_addresses_in_the_user_chain_are_not_kernel_frames() {
        let mut out = Vec::new();
        push(&mut out, &[USER, 0x401000, 0xffff_ffff_8100_0010], None);
        assert_eq!(out, vec![0x401000, BAD_USER_FRAME]);
    }

    #[test]
    fn empty_callchain_uses_ip() {
        let mut out = vec![7];
        assert_eq!(push(&mut out, &[USER], Some(0x1234)), 1);
        assert_eq!(out, vec![7, 0x1234]);
    }
}
