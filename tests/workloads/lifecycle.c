/*
 * lifecycle: a target whose process tree changes while it is profiled.
 *
 *   lifecycle fork N SECONDS   spins in parent_spin for 1 s, then forks N
 *                              children that spin in child_spin for SECONDS
 *                              while the parent keeps spinning until they
 *                              have exited
 *   lifecycle exec PATH SECONDS
 *                              spins in before_exec for 1.5 s, then execs
 *                              `PATH SECONDS` (with stdout on /dev/null)
 *   lifecycle rename NAME SECONDS
 *                              spins in before_exec for 1 s, then names
 *                              itself NAME (prctl PR_SET_NAME) and spins
 *                              on for SECONDS
 *
 * Prints "ready" on stdout before it starts spinning.
 */
#include "workload.h"
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define N 200000UL

__attribute__((noinline)) void parent_spin(void)
{
	SPIN(N);
}

__attribute__((noinline)) void child_spin(void)
{
	SPIN(N);
}

__attribute__((noinline)) void before_exec(void)
{
	SPIN(N);
}

static void spin_for(void (*f)(void), double seconds)
{
	double deadline = now_s() + seconds;

	while (now_s() < deadline)
		f();
}

static void usage(void)
{
	fprintf(stderr, "usage: lifecycle fork N SECONDS | exec PATH SECONDS | rename NAME SECONDS\n");
	exit(2);
}

int main(int argc, char **argv)
{
	if (argc != 4)
		usage();
	printf("ready\n");
	fflush(stdout);
	if (!strcmp(argv[1], "fork")) {
		int n = atoi(argv[2]);
		double seconds = strtod(argv[3], NULL);

		spin_for(parent_spin, 1.0);
		for (int i = 0; i < n; i++) {
			pid_t pid = fork();

			if (pid < 0) {
				perror("fork");
				return 1;
			}
			if (pid == 0) {
				spin_for(child_spin, seconds);
				_exit(0);
			}
		}
		while (waitpid(-1, NULL, WNOHANG) >= 0)
			parent_spin();
		return 0;
	}
	if (!strcmp(argv[1], "exec")) {
		spin_for(before_exec, 1.5);
		if (!freopen("/dev/null", "w", stdout))
			return 1;
		execl(argv[2], argv[2], argv[3], (char *)NULL);
		perror("execl");
		return 1;
	}
	if (!strcmp(argv[1], "rename")) {
		spin_for(before_exec, 1.0);
		if (prctl(PR_SET_NAME, argv[2], 0, 0, 0)) {
			perror("prctl(PR_SET_NAME)");
			return 1;
		}
		spin_for(before_exec, strtod(argv[3], NULL));
		return 0;
	}
	usage();
	return 2;
}
