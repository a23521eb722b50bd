/*
 * kids: forks COUNT children one after the other, each two threads busy for
 * SECONDS, then prints the CPU time its children used (getrusage
 * RUSAGE_CHILDREN, user + system) on stderr as `children_cpu_s X`. A child
 * runs on both CPUs and lives less than a drain period: its fork record is
 * in one CPU's ring, its samples in both.
 *
 * Usage: kids COUNT SECONDS
 */
#include "workload.h"
#include <pthread.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static double deadline;

__attribute__((noinline)) void *kid_spin(void *arg)
{
	(void)arg;
	while (now_s() < deadline)
		SPIN(100000);
	return NULL;
}

static void kid(double seconds)
{
	pthread_t other;

	deadline = now_s() + seconds;
	if (pthread_create(&other, NULL, kid_spin, NULL))
		_exit(1);
	kid_spin(NULL);
	pthread_join(other, NULL);
	_exit(0);
}

int main(int argc, char **argv)
{
	struct rusage ru;
	double seconds;
	int count;

	if (argc != 3 || (count = atoi(argv[1])) <= 0 || (seconds = strtod(argv[2], NULL)) <= 0) {
		fprintf(stderr, "usage: %s COUNT SECONDS\n", argv[0]);
		return 2;
	}
	for (int i = 0; i < count; i++) {
		pid_t pid = fork();
		int status;

		if (pid < 0) {
			perror("fork");
			return 1;
		}
		if (pid == 0)
			kid(seconds);
		if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status)) {
			fprintf(stderr, "child %d failed\n", i);
			return 1;
		}
	}
	getrusage(RUSAGE_CHILDREN, &ru);
	fprintf(stderr, "children_cpu_s %.6f\n",
		(double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
			(double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6);
	return 0;
}
