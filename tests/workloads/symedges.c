/*
 * symedges: code no symbol covers, in a hot loop. plt_work() calls libc's
 * memcmp through the program's PLT (built with -fno-builtin, so that gcc
 * keeps the call): part of its samples land in the stub, `memcmp@plt`.
 * vdso_work() reads the clock, which libc does in the vDSO
 * (`__vdso_clock_gettime`) without entering the kernel. Each round makes
 * 16 times as many memcmp calls as clock reads, which cost more.
 *
 * Usage: symedges SECONDS [--ready]
 */
#include "workload.h"

#define N 20000UL

static char a[16] = "profd", b[16] = "profd";
static volatile size_t len = 1;

__attribute__((noinline)) void plt_work(unsigned long n)
{
	for (unsigned long i = 0; i < n; i++)
		sink += memcmp(a, b, len);
}

__attribute__((noinline)) void vdso_work(unsigned long n)
{
	struct timespec ts;

	for (unsigned long i = 0; i < n; i++) {
		clock_gettime(CLOCK_MONOTONIC, &ts);
		sink += ts.tv_nsec;
	}
}

int main(int argc, char **argv)
{
	double deadline = start(argc, argv);

	while (now_s() < deadline) {
		unsigned long n = vary(N);

		plt_work(16 * n);
		vdso_work(n);
	}
	return 0;
}
