/*
 * mutual: two functions that call each other (ping → pong → ping → ...).
 *
 * Each round calls ping(DEPTH), and the chain runs
 *   main → ping(4) → pong(4) → ping(3) → pong(3) → ... → ping(1) → pong(1)
 * pong spins 9u iterations at every level (4 levels: 36u); ping spins 4u at
 * every level but the outermost (3 levels: 12u), so every sample in ping
 * has pong(DEPTH) above it and every sample in pong has ping(DEPTH) above
 * it. By construction, of the process's samples:
 *   exclusive: ping 25 %, pong 75 %
 *   inclusive: ping 100 %, pong 100 %, main 100 %
 * with each of ping and pong up to 4 times on one stack: inclusive counted
 * once per sample, never more than the sample total.
 *
 * Usage: mutual SECONDS [--ready]
 */
#include "workload.h"

#define U 100000UL
#define DEPTH 4

void pong(int depth, unsigned long a, unsigned long b);

/* a and b are passed down whole so that both loops are the same code. */
__attribute__((noinline)) void ping(int depth, unsigned long a, unsigned long b)
{
	if (depth < DEPTH)
		SPIN(a);
	pong(depth, a, b);
	sink++; /* work after the call: never a tail call */
}

__attribute__((noinline)) void pong(int depth, unsigned long a, unsigned long b)
{
	SPIN(b);
	if (depth > 1)
		ping(depth - 1, a, b);
	sink++;
}

int main(int argc, char **argv)
{
	double deadline = start(argc, argv);

	while (now_s() < deadline) {
		unsigned long u = vary(U);

		ping(DEPTH, 4 * u, 9 * u);
	}
	return 0;
}
