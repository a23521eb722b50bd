/*
 * Shared by the end-to-end workloads: the busy loop, the wall clock and the
 * command line (`<workload> SECONDS [--ready]`).
 *
 * Every workload function spins with the same loop body, so its cost is
 * proportional to its iteration count and the time split between functions
 * is known by construction. SPIN is a macro so that the loop runs in the
 * frame of the function that expands it (that function is the leaf).
 *
 * Stacks are walked by frame pointer, so every function must keep one.
 * gcc 12 ignores -mno-omit-leaf-frame-pointer in a leaf that needs no stack
 * slot, so SPIN touches one volatile local: that gives the leaf a frame
 * (push %rbp; mov %rsp,%rbp) at the cost of one store per call.
 */
#ifndef PROFD_WORKLOAD_H
#define PROFD_WORKLOAD_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static volatile unsigned long sink;

#define SPIN(n)                                                                \
	do {                                                                   \
		volatile char frame_ = 0;                                      \
		(void)frame_;                                                  \
		for (unsigned long i_ = 0; i_ < (n); i_++)                     \
			sink += i_ * 2654435761u;                              \
	} while (0)

/* A round's length drawn from [n/2, 3n/2): the sampling timer ticks at a
 * fixed period, and rounds of a fixed length can lock onto it so that the
 * samples keep landing on the same points of the round. With the length
 * varied, the samples spread evenly over the round and each function's
 * share by construction holds on average. */
static __attribute__((unused)) unsigned long vary(unsigned long n)
{
	static unsigned long x = 88172645463325252UL;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return n / 2 + x % n;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Parses argv: the runtime in seconds, and `--ready` to print one line on
 * stdout once the workload is about to start spinning. Returns the deadline. */
static __attribute__((unused)) double start(int argc, char **argv)
{
	double seconds;
	char *end;

	if (argc < 2 || argc > 3 || (argc == 3 && strcmp(argv[2], "--ready"))) {
		fprintf(stderr, "usage: %s SECONDS [--ready]\n", argv[0]);
		exit(2);
	}
	seconds = strtod(argv[1], &end);
	if (*end != '\0' || seconds < 0) {
		fprintf(stderr, "%s: bad runtime '%s'\n", argv[0], argv[1]);
		exit(2);
	}
	if (argc == 3) {
		printf("ready\n");
		fflush(stdout);
	}
	return now_s() + seconds;
}

#endif
