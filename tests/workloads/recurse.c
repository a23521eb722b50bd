/*
 * recurse: one function on the stack several times.
 *
 * Each round calls rec(5); every level spins N iterations and then recurses,
 * so rec is 5 frames deep at the bottom. By construction rec has ~100 % of
 * the samples exclusive (all levels are the same function) and ~100 %
 * inclusive: counted once per sample, never more than the sample total.
 *
 * Usage: recurse SECONDS [--ready]
 */
#include "workload.h"

#define N 300000UL
#define DEPTH 5

__attribute__((noinline)) void rec(int depth)
{
	SPIN(N);
	if (depth > 1)
		rec(depth - 1);
	sink++; /* work after the call: never a tail call */
}

int main(int argc, char **argv)
{
	double deadline = start(argc, argv);

	while (now_s() < deadline)
		rec(DEPTH);
	return 0;
}
