/*
 * stacks: complete stacks through frameless leaf functions, and recursion.
 * Built twice by the tests: with frame pointers (-O2 -fno-omit-frame-pointer)
 * as `stacks_fp` and without (-O2 -fomit-frame-pointer) as `stacks_nofp`.
 *
 * Each round, main calls work() and then rec(DEPTH), with u varied around U:
 *   work → leaf_a (3 u iterations), then mid → leaf_b (9 u)
 *   rec(4) → rec_leaf (2 u), then rec(3) → rec_leaf (2 u), ... down to rec(1)
 * 20 u per round, every iteration the same loop body, so by construction:
 *   exclusive: leaf_a 15 %, leaf_b 45 %, rec_leaf 40 % (10 % per level)
 *   inclusive: main 100 %, work 60 %, mid 45 %, leaf_b 45 %, leaf_a 15 %,
 *              rec 40 % (counted once per sample, whatever the depth),
 *              rec_leaf 40 %
 *
 * The leaves are frameless even in the frame-pointer build: gcc 12 gives no
 * frame to a leaf that needs no stack slot (they loop on a volatile global,
 * with no locals), so a frame-pointer walk from a leaf skips its caller. With
 * `--unwind fp` the fp build therefore shows leaf_a under main (work lost),
 * leaf_b under work (mid lost) and the outermost rec lost: work 45 %, mid 0 %,
 * rec 30 %. DWARF (CFI) unwinding gets the figures above in both builds.
 *
 * The asserted functions are noipa (no inlining, cloning or constprop
 * renames), calls are never tail calls (work after each call), and main only
 * loops.
 *
 * Usage: stacks SECONDS [--ready]
 */
#include "workload.h"

#if defined(__GNUC__) && !defined(__clang__)
#define KEEP __attribute__((noipa, noinline))
#else
#define KEEP __attribute__((noinline))
#endif

#define U 100000UL
#define DEPTH 4

/* No locals, no calls: the loop counter lives in a register, so the function
 * needs no stack frame. */
#define LEAF_LOOP(n)                                                           \
	for (unsigned long i_ = 0; i_ < (n); i_++)                             \
	sink += i_ * 2654435761u

KEEP void leaf_a(unsigned long n)
{
	LEAF_LOOP(n);
}

KEEP void leaf_b(unsigned long n)
{
	LEAF_LOOP(n);
}

KEEP void rec_leaf(unsigned long n)
{
	LEAF_LOOP(n);
}

KEEP void mid(unsigned long n)
{
	leaf_b(n);
	sink++; /* work after the call: never a tail call */
}

KEEP void work(unsigned long u)
{
	leaf_a(3 * u);
	mid(9 * u);
	sink++;
}

KEEP void rec(int depth, unsigned long u)
{
	rec_leaf(2 * u);
	if (depth > 1)
		rec(depth - 1, u);
	sink++;
}

int main(int argc, char **argv)
{
	double deadline = start(argc, argv);

	while (now_s() < deadline) {
		unsigned long u = vary(U);

		work(u);
		rec(DEPTH, u);
	}
	return 0;
}
