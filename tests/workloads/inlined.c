/*
 * inlined: a function inlined into its caller must still be its own row,
 * marked inlined.
 *
 * Built with -O2 -g. hot_inline is always_inline, so it has no symbol and no
 * frame: only the DWARF inline records (DW_TAG_inlined_subroutine) say which
 * of outer's instructions are hot_inline's. Each round outer runs
 * hot_inline's loop for 3 u iterations and its own for u (u varied around U,
 * a few milliseconds a round), so by construction:
 *   exclusive: hot_inline (inlined) 75 %, outer 25 %
 *   inclusive: hot_inline 75 %, outer 100 %, main 100 %
 *
 * Usage: inlined SECONDS [--ready]
 */
#include "workload.h"

#if defined(__GNUC__) && !defined(__clang__)
#define KEEP __attribute__((noipa, noinline))
#else
#define KEEP __attribute__((noinline))
#endif

#define U 1000000UL

#define LOOP(n)                                                                \
	for (unsigned long i_ = 0; i_ < (n); i_++)                             \
	sink += i_ * 2654435761u

static inline __attribute__((always_inline)) void hot_inline(unsigned long n)
{
	LOOP(n);
}

KEEP void outer(unsigned long inlined_n, unsigned long own_n)
{
	hot_inline(inlined_n);
	LOOP(own_n); /* outer's own share */
	sink++;
}

int main(int argc, char **argv)
{
	double deadline = start(argc, argv);

	while (now_s() < deadline) {
		unsigned long u = vary(U);

		outer(3 * u, u);
	}
	return 0;
}
