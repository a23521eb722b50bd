/*
 * perfopen: the kernel's own answer to "may I sample this process?", asked
 * with the credentials it runs with.
 *
 *   perfopen PID
 *
 * Opens a cpu-clock sampling event (user space only, as
 * perf_event_paranoid 2 allows) on every thread of PID, the way
 * `perf record -p PID` does, and prints one line per thread:
 * "TID ok" or "TID refused ERRNO-NAME". Exits 0 when every thread was
 * opened, 3 when the kernel refused one, 1 when the process has no thread
 * left or on any other error.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <linux/perf_event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	char path[64];
	DIR *dir;
	struct dirent *entry;
	int opened = 0, refused = 0;

	if (argc != 2) {
		fprintf(stderr, "usage: %s PID\n", argv[0]);
		return 2;
	}
	snprintf(path, sizeof(path), "/proc/%s/task", argv[1]);
	dir = opendir(path);
	if (!dir) {
		perror(path);
		return 1;
	}
	while ((entry = readdir(dir))) {
		struct perf_event_attr attr;
		long tid;
		int fd;

		if (entry->d_name[0] < '0' || entry->d_name[0] > '9')
			continue;
		tid = strtol(entry->d_name, NULL, 10);
		memset(&attr, 0, sizeof(attr));
		attr.size = sizeof(attr);
		attr.type = PERF_TYPE_SOFTWARE;
		attr.config = PERF_COUNT_SW_CPU_CLOCK;
		attr.sample_period = 1000000;
		attr.sample_type = PERF_SAMPLE_IP | PERF_SAMPLE_TID;
		attr.disabled = 1;
		attr.exclude_kernel = 1;
		attr.exclude_hv = 1;
		fd = syscall(SYS_perf_event_open, &attr, (pid_t)tid, -1, -1, 0);
		if (fd >= 0) {
			printf("%ld ok\n", tid);
			close(fd);
			opened++;
		} else if (errno == ESRCH) {
			continue; /* exited since the listing */
		} else if (errno == EACCES || errno == EPERM) {
			printf("%ld refused %s\n", tid, strerrorname_np(errno));
			refused++;
		} else {
			fprintf(stderr, "perf_event_open(%ld): %s\n", tid, strerror(errno));
			return 1;
		}
	}
	closedir(dir);
	if (refused)
		return 3;
	return opened ? 0 : 1;
}
