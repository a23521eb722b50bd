/*
 * jit_split: the JavaScript twin of JitSplit.java, for V8's JIT code named
 * by the perf map node writes with --perf-basic-prof.
 *
 * Each round, main calls work(u) with u varied around U:
 *   work → leafA → spin (3 u iterations), then mid → leafB → spin (7 u)
 * Every iteration runs in the one function spin, whatever code V8 compiled
 * it to, so the split holds by construction (two loops of their own were
 * compiled apart, and one now and then into slower code than the other):
 *   inclusive: work 100 %, leafA 30 %, leafB 70 %, mid 70 %, spin 100 %
 *   exclusive: spin 100 %
 * Run it with --no-turbo-inlining so that each function stays a frame of its
 * own. Before it prints "ready" it runs WARMUP_ROUNDS short rounds (many
 * calls, for V8 to optimize every function), then rounds for WARMUP seconds.
 *
 * Usage: node --perf-basic-prof --no-turbo-inlining jit_split.js SECONDS [--ready]
 */
'use strict';

const U = 100000;
const WARMUP = 2.0;
const WARMUP_U = 100;
const WARMUP_ROUNDS = 50000;
let sink = 0;
let x = 88172645463325252n;

/* A round's length drawn from [n/2, 3n/2) (see vary in workload.h). */
function vary(n) {
  x ^= (x << 13n) & 0xffffffffffffffffn;
  x ^= x >> 7n;
  x ^= (x << 17n) & 0xffffffffffffffffn;
  return Math.floor(n / 2) + Number(x % BigInt(n));
}

function spin(n) {
  for (let i = 0; i < n; i++) {
    sink = (sink + i * 31) & 0xfffff;
  }
}

function leafA(n) {
  spin(n);
}

function leafB(n) {
  spin(n);
}

function mid(n) {
  leafB(n);
  sink = (sink + 1) | 0;
}

function work(u) {
  leafA(3 * u);
  mid(7 * u);
  sink = (sink + 1) | 0;
}

function main() {
  const seconds = Number(process.argv[2]);
  const ready = process.argv.includes('--ready');
  const now = () => Number(process.hrtime.bigint()) / 1e9;
  for (let i = 0; i < WARMUP_ROUNDS; i++) {
    work(vary(WARMUP_U));
  }
  const warm = now() + WARMUP;
  while (now() < warm) {
    work(vary(U));
  }
  if (ready) {
    process.stdout.write('ready\n');
  }
  const deadline = now() + seconds;
  while (now() < deadline) {
    work(vary(U));
  }
}

main();
