/*
 * jit_split: the JavaScript twin of JitSplit.java, for V8's JIT code named
 * by the perf map node writes with --perf-basic-prof.
 *
 * Each round, main calls work(u) with u varied around U:
 *   work → leafA (3 u iterations), then mid → leafB (7 u)
 * every iteration the same loop body, so by construction (its values stay
 * small integers, so V8 compiles both leaves alike whatever it saw first):
 *   exclusive: leafA 30 %, leafB 70 %
 *   inclusive: work 100 %, mid 70 %
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

function leafA(n) {
  for (let i = 0; i < n; i++) {
    sink = (sink + i * 31) & 0xfffff;
  }
}

function leafB(n) {
  for (let i = 0; i < n; i++) {
    sink = (sink + i * 31) & 0xfffff;
  }
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
