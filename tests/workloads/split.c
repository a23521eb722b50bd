/*
 * split: a known time split between functions.
 *
 * Each round, work() runs leaf_a for n iterations and mid() for 3n (n varied
 * around N), and mid() only calls leaf_b. By construction, of the process's samples:
 *   exclusive: leaf_a 25 %, leaf_b 75 %
 *   inclusive: leaf_a 25 %, mid 75 %, leaf_b 75 %, work 100 %, main 100 %
 * A round takes a few milliseconds, so checking the clock between rounds
 * costs nothing measurable.
 *
 * Usage: split SECONDS [--ready]
 *
 * With SPLIT_MID=K in the environment, mid() runs K n iterations instead of
 * 3n: exclusive leaf_a 1/(K+1), leaf_b K/(K+1) (K=1: 50 % each), for a
 * known change between two runs.
 */
#include "workload.h"

#define N 1000000UL

__attribute__((noinline)) void leaf_a(unsigned long n)
{
	SPIN(n);
}

__attribute__((noinline)) void leaf_b(unsigned long n)
{
	SPIN(n);
}

__attribute__((noinline)) void mid(unsigned long n)
{
	leaf_b(n);
	sink++; /* work after the call: never a tail call */
}

static unsigned long mid_share = 3;

__attribute__((noinline)) void work(unsigned long n)
{
	leaf_a(n);
	mid(mid_share * n);
	sink++;
}

int main(int argc, char **argv)
{
	double deadline = start(argc, argv);
	const char *k = getenv("SPLIT_MID");

	if (k)
		mid_share = strtoul(k, NULL, 10);

	while (now_s() < deadline)
		work(vary(N));
	return 0;
}
