/*
 * symedges: code no symbol covers, where samples are certain to land.
 *
 * plt_work() runs in a thread of its own, inside the program's PLT stub for
 * memcmp, `memcmp@plt`: it points the stub's GOT slot back at the stub, so
 * its `jmp *slot` jumps to itself for as long as the process lives (how
 * many timer samples real calls leave in a one-instruction stub depends on
 * the CPU, and on some it is none). The stub is found from its slot:
 * with lazy binding (-Wl,-z,lazy) the slot holds the stub's second
 * instruction until the first call, libc's memcmp after it.
 * vdso_work() reads the clock in the main thread, which libc does in the
 * vDSO (`__vdso_clock_gettime`) without entering the kernel.
 *
 * Usage: symedges SECONDS [--ready]
 */
#include "workload.h"

#include <link.h>
#include <pthread.h>

/* The first slot of a function in .got.plt: 0 is _DYNAMIC, 1 and 2 the
 * dynamic linker's. */
#define FIRST_SLOT 3
#define MAX_SLOTS 64

extern void *_GLOBAL_OFFSET_TABLE_[];
extern ElfW(Dyn) _DYNAMIC[];

/* The number of .got.plt slots: one per PLT relocation. */
static int slots(void)
{
	for (ElfW(Dyn) *d = _DYNAMIC; d->d_tag != DT_NULL; d++)
		if (d->d_tag == DT_PLTRELSZ)
			return FIRST_SLOT + (int)(d->d_un.d_val / sizeof(ElfW(Rela)));
	return FIRST_SLOT;
}

static char a[16] = "profd", b[16] = "profd";
static volatile size_t len = 1;

/* Calls memcmp once and points the one slot that call bound back at the
 * stub. The program never takes memcmp's address: that would make the
 * linker bind the call through .got at start, with no lazy slot. */
static void trap_memcmp_in_its_stub(void)
{
	void **got = _GLOBAL_OFFSET_TABLE_;
	void *before[MAX_SLOTS];
	int n = slots(), found = -1, changed = 0;

	if (n > MAX_SLOTS)
		n = MAX_SLOTS;
	for (int i = FIRST_SLOT; i < n; i++)
		before[i] = got[i];
	sink += memcmp(a, b, len);
	for (int i = FIRST_SLOT; i < n; i++) {
		if (got[i] != before[i]) {
			found = i;
			changed++;
		}
	}
	if (changed != 1) {
		fprintf(stderr, "symedges: no GOT slot bound by one memcmp call "
				"(link with -Wl,-z,lazy)\n");
		exit(2);
	}
	/* jmp *slot is 6 bytes; the slot held the push after it. */
	got[found] = (char *)before[found] - 6;
}

__attribute__((noinline)) void plt_work(void)
{
	sink += memcmp(a, b, len); /* never returns: the stub loops */
}

static void *plt_thread(void *unused)
{
	(void)unused;
	plt_work();
	return NULL;
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
	pthread_t t;

	trap_memcmp_in_its_stub();
	if (pthread_create(&t, NULL, plt_thread, NULL)) {
		perror("symedges: pthread_create");
		return 1;
	}
	while (now_s() < deadline)
		vdso_work(vary(20000));
	return 0;
}
