/*
 * phases: two phases at known moments, for timelines.
 *
 * phase_a spins for SECONDS, then phase_b for SECONDS; main only calls
 * them. At the switch the workload reads CLOCK_MONOTONIC and, when it
 * ends, prints that reading on stderr as `phases: switch at NS` (after
 * the work, so that printing costs neither phase anything). A round takes
 * well under a millisecond, so the switch is that close to the reading.
 *
 * Usage: phases SECONDS [--ready]
 */
#include "workload.h"

#define N 100000UL

__attribute__((noinline)) void phase_a(unsigned long n)
{
	SPIN(n);
}

__attribute__((noinline)) void phase_b(unsigned long n)
{
	SPIN(n);
}

static unsigned long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	double switch_at = start(argc, argv);
	double seconds = switch_at - now_s();
	unsigned long long switched;
	double end;

	while (now_s() < switch_at)
		phase_a(vary(N));
	switched = now_ns();
	end = now_s() + seconds;
	while (now_s() < end)
		phase_b(vary(N));
	fprintf(stderr, "phases: switch at %llu\n", switched);
	return 0;
}
