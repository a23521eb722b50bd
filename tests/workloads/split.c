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

__attribute__((noinline)) void work(unsigned long n)
{
	leaf_a(n);
	mid(3 * n);
	sink++;
}

int main(int argc, char **argv)
{
	double deadline = start(argc, argv);

	while (now_s() < deadline)
		work(vary(N));
	return 0;
}
