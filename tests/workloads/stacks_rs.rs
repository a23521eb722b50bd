//! stacks_rs: the `stacks.c` workload in Rust (see there for the time
//! split). Built by the tests with `rustc -C opt-level=2 -g`, twice:
//! `-C force-frame-pointers=yes` as `stacks_rs_fp` and `=no` as
//! `stacks_rs_nofp`. Its functions must come out demangled without a hash,
//! e.g. `stacks_rs::leaf_a`.
//!
//! Each round, main calls work() and then rec(DEPTH), with u varied around U
//! as `stacks.c` does:
//!   work → leaf_a (3 u iterations), then mid → leaf_b (9 u)
//!   rec(4) → rec_leaf (2 u), then rec(3) → rec_leaf (2 u), ... down to rec(1)
//! so by construction:
//!   exclusive: leaf_a 15 %, leaf_b 45 %, rec_leaf 40 %
//!   inclusive: main 100 %, work 60 %, mid 45 %, leaf_b 45 %, leaf_a 15 %,
//!              rec 40 % (once per sample), rec_leaf 40 %
//!
//! The asserted functions are `#[inline(never)]`, `black_box` keeps the loops
//! and the calls' results alive, and every call has work after it (never a
//! tail call).
//!
//! Usage: stacks_rs SECONDS [--ready]

use std::hint::black_box;
use std::io::Write;
use std::time::{Duration, Instant};

const U: u64 = 100_000;
const DEPTH: u32 = 4;

/// The loop every leaf runs, written out in the leaf itself: its cost is
/// proportional to `n` (a dependency chain of shift, xor, multiply and add,
/// so the speed does not hang on code alignment). It is a macro, not a
/// function, and uses only built-in operators: any `#[inline]` function in
/// the loop (`Range::next`, `black_box`, `wrapping_add`) would be an inlined
/// frame of its own, taking the leaf's exclusive samples. `black_box` on the
/// count and the result keeps LLVM from computing the loop away, and the
/// xor of the shifted accumulator makes each step nonlinear, so that LLVM
/// cannot fold several iterations into one (it does for a plain
/// multiply-add: eight steps as one multiply). Each leaf uses its own
/// constant so that their code differs: LLVM would otherwise merge
/// identical functions into one symbol.
macro_rules! spin {
    ($n:expr, $k:expr) => {{
        let n: u64 = black_box($n);
        let mut acc: u64 = 1;
        let mut i: u64 = 0;
        while i < n {
            acc = (acc ^ (acc >> 31)) * $k + i;
            i += 1;
        }
        black_box(acc)
    }};
}

#[inline(never)]
fn leaf_a(n: u64) -> u64 {
    spin!(n, 2_654_435_761)
}

#[inline(never)]
fn leaf_b(n: u64) -> u64 {
    spin!(n, 2_246_822_519)
}

#[inline(never)]
fn rec_leaf(n: u64) -> u64 {
    spin!(n, 3_266_489_917)
}

#[inline(never)]
fn mid(n: u64) -> u64 {
    let r = leaf_b(black_box(n));
    black_box(r).wrapping_add(1)
}

#[inline(never)]
fn work(u: u64) -> u64 {
    let a = leaf_a(black_box(3 * u));
    let b = mid(black_box(9 * u));
    black_box(a ^ b).wrapping_add(1)
}

#[inline(never)]
fn rec(depth: u32, u: u64) -> u64 {
    let mut r = rec_leaf(black_box(2 * u));
    if depth > 1 {
        r ^= rec(black_box(depth - 1), u);
    }
    black_box(r).wrapping_add(1)
}

/// `SECONDS [--ready]`, as the C workloads take it.
fn parse_args() -> Duration {
    let args: Vec<String> = std::env::args().collect();
    let usage = || -> ! {
        eprintln!("usage: {} SECONDS [--ready]", args[0]);
        std::process::exit(2)
    };
    if args.len() < 2 || args.len() > 3 || (args.len() == 3 && args[2] != "--ready") {
        usage();
    }
    let seconds: f64 = args[1].parse().unwrap_or_else(|_| usage());
    if !(seconds >= 0.0 && seconds.is_finite()) {
        usage();
    }
    if args.len() == 3 {
        let mut out = std::io::stdout();
        writeln!(out, "ready")
            .and_then(|()| out.flush())
            .expect("stdout");
    }
    Duration::from_secs_f64(seconds)
}

#[inline(never)]
fn main() {
    let runtime = parse_args();
    let started = Instant::now();
    let mut sink = 0u64;
    let mut x = 88_172_645_463_325_252u64;
    while started.elapsed() < runtime {
        // xorshift: a round's length in [U/2, 3U/2), as `vary` in workload.h.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let u = U / 2 + x % U;
        sink ^= work(u);
        sink ^= rec(black_box(DEPTH), u);
    }
    black_box(sink);
}
