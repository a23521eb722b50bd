/*
 * many_stacks: spins through 2^14 = 16384 distinct call paths, so that a
 * profiling session on it collects well over 10 000 unique stacks (the
 * daemon memory scenario of benches/overhead.sh). Built with -DLEVELS=17,
 * through 2^17 = 131072 (the continuous memory scenario of
 * benches/continuous.sh, 100 000 unique stacks in a window).
 *
 * Usage: many_stacks SECONDS [PATHS]
 *
 * Each step picks a path p at random (xorshift) among the first PATHS
 * (default and most 2^LEVELS) and calls down LEVELS levels (default 14):
 * level k calls step<k>_1 when bit k of p is set, else step<k>_0, two
 * distinct functions per level, so every path has its own return addresses
 * (and its own folded stack once named); the leaf fills a 256 KiB buffer
 * in one instruction, 32 times (about 100 µs), so each path is one unique
 * stack for the daemon too.
 * Uniform random paths: n samples cover about P × (1 − e^(−n/P)) of P
 * paths (16384: 10 000 unique stacks take about 15 500 samples; 10240:
 * 95 % of them take 3 P samples, 99.9 % 7 P). Then the set of stacks
 * grows slowly: a sample outside that instruction (in a calling function,
 * in libc's clock_gettime, read every 256 paths, or in the kernel) is
 * mostly a new stack, and there are few of them (0.4 % of the samples,
 * `perf record` on this program).
 *
 * Built with frame pointers (-O1 -fno-omit-frame-pointer
 * -fno-optimize-sibling-calls -fno-ipa-icf): noipa keeps the twin functions
 * apart and every call a real call.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "keep.h"

#ifndef LEVELS
#define LEVELS 14
#endif
#if LEVELS != 14 && LEVELS != 17
#error "LEVELS must be 14 or 17"
#endif

static volatile unsigned long sink;

static unsigned char buf[262144];

/* Times the leaf fills buf: its time against the calls down to it. */
#define FILLS 32

/* Nearly all of a step's time is in one instruction, so a path is one stack
 * (one innermost address), not one per instruction of a loop: on x86-64 a
 * `rep stosb` over 256 KiB, which an interrupt leaves and resumes at the
 * same address, FILLS times (about 100 µs in all). The volatile local gives
 * the leaf a frame of its own, so a frame-pointer walk from it sees its
 * caller. */
KEEP void leaf(unsigned p)
{
	volatile char frame_ = 0;

	(void)frame_;
#if defined(__x86_64__)
	for (int i = 0; i < FILLS; i++) {
		void *dst = buf;
		unsigned long n = sizeof(buf);

		__asm__ volatile("rep stosb" : "+D"(dst), "+c"(n) : "a"(p) : "memory");
	}
#else
	for (unsigned long i = 0; i < 600; i++)
		sink += i * 2654435761u + p;
#endif
	sink++;
}

/* Level K's twins call level N = K + 1, chosen by bit N of the path. */
#define STEP(K, N)                                                             \
	KEEP void step##K##_0(unsigned p)                                      \
	{                                                                      \
		if (p & (1u << N))                                             \
			step##N##_1(p);                                        \
		else                                                           \
			step##N##_0(p);                                        \
		sink++;                                                        \
	}                                                                      \
	KEEP void step##K##_1(unsigned p)                                      \
	{                                                                      \
		if (p & (1u << N))                                             \
			step##N##_1(p);                                        \
		else                                                           \
			step##N##_0(p);                                        \
		sink += 2;                                                     \
	}

/* The deepest level's twins call the leaf. */
#define LAST(K)                                                                \
	KEEP void step##K##_0(unsigned p)                                      \
	{                                                                      \
		leaf(p);                                                       \
		sink++;                                                        \
	}                                                                      \
	KEEP void step##K##_1(unsigned p)                                      \
	{                                                                      \
		leaf(p);                                                       \
		sink += 2;                                                     \
	}

#if LEVELS == 17
LAST(16)
STEP(15, 16)
STEP(14, 15)
STEP(13, 14)
#else
LAST(13)
#endif
STEP(12, 13)
STEP(11, 12)
STEP(10, 11)
STEP(9, 10)
STEP(8, 9)
STEP(7, 8)
STEP(6, 7)
STEP(5, 6)
STEP(4, 5)
STEP(3, 4)
STEP(2, 3)
STEP(1, 2)
STEP(0, 1)

KEEP void walk(unsigned p)
{
	if (p & 1u)
		step0_1(p);
	else
		step0_0(p);
	sink++;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	unsigned long long x = 0x9E3779B97F4A7C15ull ^ (unsigned long long)getpid();
	double seconds, deadline;
	unsigned long paths = 1ul << LEVELS;
	char *end;

	if (argc < 2 || argc > 3 || (seconds = strtod(argv[1], &end)) <= 0 || *end != '\0' ||
	    (argc == 3 && ((paths = strtoul(argv[2], &end, 10)) < 1 || paths > 1ul << LEVELS || *end != '\0'))) {
		fprintf(stderr, "usage: %s SECONDS [PATHS (1-%lu)]\n", argv[0], 1ul << LEVELS);
		return 2;
	}
	deadline = now_s() + seconds;
	do {
		for (int k = 0; k < 256; k++) {
			x ^= x >> 12;
			x ^= x << 25;
			x ^= x >> 27;
			walk((unsigned)(((x * 0x2545F4914F6CDD1Dull) >> 40) % paths));
		}
	} while (now_s() < deadline);
	return 0;
}
