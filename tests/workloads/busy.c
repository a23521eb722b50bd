/*
 * busy: CPU time spent in ways that per-task sampling periods undercount,
 * then the CPU time used printed on stderr as `cpu_s X` (getrusage: the
 * process's own user + system time, plus that of its waited-for children,
 * the figures of /proc/PID/stat's utime, stime, cutime and cstime), and
 * the children's part alone as `children_s X`.
 *
 *   busy threads COUNT SECONDS   COUNT threads spin in thread_spin for
 *                                SECONDS, at nice 19 when COUNT > 1 (so
 *                                that a profiler draining its rings is
 *                                not starved by them)
 *   busy forks MS SECONDS        forks one child after another for SECONDS,
 *                                each spinning in child_spin for MS
 *                                milliseconds (less than a sampling period
 *                                at the default 999 Hz when MS < 1)
 */
#include "workload.h"
#include <pthread.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static double deadline;

__attribute__((noinline)) void *thread_spin(void *arg)
{
	(void)arg;
	while (now_s() < deadline)
		SPIN(10000);
	return NULL;
}

__attribute__((noinline)) void child_spin(double seconds)
{
	double end = now_s() + seconds;

	while (now_s() < end)
		SPIN(1000);
}

static double cpu_s(int who)
{
	struct rusage ru;

	getrusage(who, &ru);
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static int threads(int count, double seconds)
{
	pthread_t *t = calloc((size_t)count, sizeof(*t));

	if (count > 1 && setpriority(PRIO_PROCESS, 0, 19)) {
		perror("setpriority");
		return 1;
	}
	deadline = now_s() + seconds;
	for (int i = 0; i < count; i++)
		if (!t || pthread_create(&t[i], NULL, thread_spin, NULL)) {
			fprintf(stderr, "thread %d could not be created\n", i);
			return 1;
		}
	for (int i = 0; i < count; i++)
		pthread_join(t[i], NULL);
	return 0;
}

static int forks(double ms, double seconds)
{
	double end = now_s() + seconds;

	while (now_s() < end) {
		pid_t pid = fork();
		int status;

		if (pid < 0) {
			perror("fork");
			return 1;
		}
		if (pid == 0) {
			child_spin(ms / 1000);
			_exit(0);
		}
		if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status))
			return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	double arg, seconds;
	int status;

	if (argc != 4 || (arg = strtod(argv[2], NULL)) <= 0 || (seconds = strtod(argv[3], NULL)) <= 0) {
		fprintf(stderr, "usage: %s threads COUNT SECONDS | forks MS SECONDS\n", argv[0]);
		return 2;
	}
	if (!strcmp(argv[1], "threads"))
		status = threads((int)arg, seconds);
	else if (!strcmp(argv[1], "forks"))
		status = forks(arg, seconds);
	else {
		fprintf(stderr, "%s: unknown mode %s\n", argv[0], argv[1]);
		return 2;
	}
	fprintf(stderr, "cpu_s %.6f\n", cpu_s(RUSAGE_SELF) + cpu_s(RUSAGE_CHILDREN));
	fprintf(stderr, "children_s %.6f\n", cpu_s(RUSAGE_CHILDREN));
	return status;
}
