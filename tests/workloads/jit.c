/*
 * jit: machine code generated at run time, named only by a perf map file.
 *
 * Copies a tiny x86_64 function into an anonymous page (mapped writable,
 * then made executable), writes `/tmp/perf-<pid>.map` with one line
 * "<start hex> <size hex> jit_spin" as JIT runtimes do, and calls it until
 * the deadline. jit_spin keeps a frame pointer, as the frames of most JITs
 * do, and has no unwind information (no CFI): nothing but the perf map
 * names it. By construction nearly all samples are jit_spin exclusive.
 * The map file is removed on a normal exit.
 *
 * With JIT_TRAMPOLINE=1 in the environment it copies CPython 3.12's perf
 * trampoline instead (`python3.12 -X perf`: sub $8,%rsp; call *%rcx;
 * add $8,%rsp; ret), names it "py::trampoline", and main calls
 * via_trampoline(), which calls the C function spin_c through it: a stub
 * with neither a frame pointer nor unwind information between two native
 * frames. By construction spin_c is nearly 100 % exclusive, and
 * via_trampoline and the trampoline are 100 % inclusive, via_trampoline
 * the trampoline's only caller.
 *
 * Usage: [JIT_TRAMPOLINE=1] [JIT_NO_MAP=1] jit SECONDS [--ready]
 *
 * With JIT_NO_MAP set, no map is written: the code has no name anywhere.
 */
#include "workload.h"

#include <sys/mman.h>
#include <unistd.h>

#if !defined(__x86_64__)
#error "the jit workload carries x86_64 machine code"
#endif

/* void jit_spin(unsigned long n): loops n times. */
static const unsigned char code[] = {
	0x55,             /* push %rbp          */
	0x48, 0x89, 0xe5, /* mov  %rsp,%rbp     */
	0x48, 0xff, 0xcf, /* 1: dec %rdi        */
	0x75, 0xfb,       /* jnz 1b             */
	0x5d,             /* pop  %rbp          */
	0xc3,             /* ret                */
};

/* CPython 3.12's trampoline: calls its fourth argument (%rcx) with the
 * first three. */
static const unsigned char trampoline[] = {
	0x48, 0x83, 0xec, 0x08, /* sub  $8,%rsp       */
	0xff, 0xd1,             /* call *%rcx         */
	0x48, 0x83, 0xc4, 0x08, /* add  $8,%rsp       */
	0xc3,                   /* ret                */
};

typedef long (*leaf_fn)(long, long, long);
typedef long (*trampoline_fn)(long, long, long, leaf_fn);

#define N 20000000UL

static trampoline_fn through;

static __attribute__((noipa)) long spin_c(long n, long b, long c)
{
	while (n-- > 0)
		sink += (unsigned long)(b + c);
	return 0;
}

static __attribute__((noipa)) void via_trampoline(void)
{
	through((long)N, 0, 0, spin_c);
	sink++;
}

static char map_path[64];

int main(int argc, char **argv)
{
	double deadline;
	void (*jit_spin)(unsigned long);
	long page = sysconf(_SC_PAGESIZE);
	unsigned char *mem;
	FILE *map;

	mem = mmap(NULL, page, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	int use_trampoline = getenv("JIT_TRAMPOLINE") != NULL;
	const unsigned char *copy = use_trampoline ? trampoline : code;
	size_t size = use_trampoline ? sizeof(trampoline) : sizeof(code);

	memcpy(mem, copy, size);
	if (mprotect(mem, page, PROT_READ | PROT_EXEC)) {
		perror("mprotect");
		return 1;
	}
	snprintf(map_path, sizeof(map_path), "/tmp/perf-%d.map", (int)getpid());
	if (!getenv("JIT_NO_MAP")) {
		map = fopen(map_path, "w");
		if (!map) {
			perror(map_path);
			return 1;
		}
		fprintf(map, "%lx %zx %s\n", (unsigned long)mem, size,
			use_trampoline ? "py::trampoline" : "jit_spin");
		fclose(map);
	}
	jit_spin = (void (*)(unsigned long))mem;
	through = (trampoline_fn)mem;

	deadline = start(argc, argv);
	while (now_s() < deadline) {
		if (use_trampoline)
			via_trampoline();
		else
			jit_spin(N);
	}
	unlink(map_path);
	return 0;
}
