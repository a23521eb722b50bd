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
 * Usage: jit SECONDS [--ready]
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

#define N 20000000UL

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
	memcpy(mem, code, sizeof(code));
	if (mprotect(mem, page, PROT_READ | PROT_EXEC)) {
		perror("mprotect");
		return 1;
	}
	snprintf(map_path, sizeof(map_path), "/tmp/perf-%d.map", (int)getpid());
	map = fopen(map_path, "w");
	if (!map) {
		perror(map_path);
		return 1;
	}
	fprintf(map, "%lx %zx jit_spin\n", (unsigned long)mem, sizeof(code));
	fclose(map);
	jit_spin = (void (*)(unsigned long))mem;

	deadline = start(argc, argv);
	while (now_s() < deadline)
		jit_spin(N);
	unlink(map_path);
	return 0;
}
