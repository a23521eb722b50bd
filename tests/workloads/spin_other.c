/*
 * spin_other: a second busy process, not the profiling target. Its samples
 * must be discarded, and other_process_spin must never appear in another
 * process's profile.
 *
 * Usage: spin_other SECONDS [--ready]
 */
#include "workload.h"

#define N 1000000UL

__attribute__((noinline)) void other_process_spin(void)
{
	SPIN(N);
}

int main(int argc, char **argv)
{
	double deadline = start(argc, argv);

	while (now_s() < deadline)
		other_process_spin();
	return 0;
}
