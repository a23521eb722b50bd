/*
 * syscalls: a process that spends nearly all its time in the kernel. Each
 * round pull_zeros reads /dev/zero 64 KiB at a time (the kernel clears the
 * buffer for it), until SECONDS have passed. Its samples are mostly kernel
 * frames on top of pull_zeros main.
 *
 * Usage: syscalls SECONDS [--ready]
 */
#include "workload.h"
#include <fcntl.h>
#include <unistd.h>

static char buf[65536];

__attribute__((noinline)) void pull_zeros(int fd)
{
	for (int i = 0; i < 64; i++)
		if (read(fd, buf, sizeof buf) != (ssize_t)sizeof buf)
			exit(1);
}

int main(int argc, char **argv)
{
	double deadline = start(argc, argv);
	int fd = open("/dev/zero", O_RDONLY);

	if (fd < 0)
		return 1;
	while (now_s() < deadline)
		pull_zeros(fd);
	return 0;
}
