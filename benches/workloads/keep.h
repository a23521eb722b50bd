/*
 * Shared by the benchmark workloads: KEEP keeps a function a function of
 * its own, on every stack it is called from (not inlined, and with gcc not
 * merged with a twin or specialised by interprocedural analysis either).
 */
#ifndef PROFD_BENCH_KEEP_H
#define PROFD_BENCH_KEEP_H

#if defined(__GNUC__) && !defined(__clang__)
#define KEEP __attribute__((noipa, noinline))
#else
#define KEEP __attribute__((noinline))
#endif

#endif
