/*
 * idlers: many live processes, each mostly asleep and busy now and then, so
 * that a continuous profiler sees (and samples) every one of them without
 * the lot taking much CPU (the continuous memory scenario of
 * benches/continuous.sh: 500 live processes).
 *
 * Usage: idlers PROCESSES SECONDS [BUSY_US [PERIOD_MS]]
 *
 * The first process forks PROCESSES - 1 others; each one, at a random phase,
 * spins BUSY_US microseconds (default 500) through a few calls every
 * PERIOD_MS milliseconds (default 1000) and sleeps the rest, until SECONDS
 * pass. 500 processes at the defaults take a quarter of one CPU; at 4999 Hz
 * each gets about 2.5 samples a second. The children die with the first
 * process (PR_SET_PDEATHSIG), which stops them all on SIGTERM or SIGINT.
 *
 * Built without frame pointers (-O2 -fomit-frame-pointer), like a
 * distribution binary: its stacks are unwound from its .eh_frame.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "keep.h"

static volatile unsigned long sink;
static volatile sig_atomic_t stopping;

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

KEEP void spin_inner(double until)
{
	while (now_s() < until)
		for (unsigned long i = 0; i < 200; i++)
			sink += i * 2654435761u;
}

KEEP void spin_outer(double until)
{
	spin_inner(until);
	sink++;
}

static void sleep_s(double s)
{
	struct timespec ts;

	if (s <= 0)
		return;
	ts.tv_sec = (time_t)s;
	ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
	nanosleep(&ts, NULL);
}

static void live(double deadline, double busy_s, double period_s, unsigned seed)
{
	double next;

	srand(seed);
	next = now_s() + period_s * (double)rand() / RAND_MAX;
	while (!stopping && next < deadline) {
		sleep_s(next - now_s());
		spin_outer(now_s() + busy_s);
		next += period_s;
	}
}

static void stop(int sig)
{
	(void)sig;
	stopping = 1;
}

int main(int argc, char **argv)
{
	long processes, busy_us = 500, period_ms = 1000;
	double seconds, deadline;
	pid_t parent = getpid();
	char *end;

	if (argc < 3 || argc > 5 || (processes = strtol(argv[1], &end, 10)) < 1 || processes > 100000 ||
	    *end != '\0' || (seconds = strtod(argv[2], &end)) <= 0 || *end != '\0' ||
	    (argc > 3 && ((busy_us = strtol(argv[3], &end, 10)) < 1 || *end != '\0')) ||
	    (argc > 4 && ((period_ms = strtol(argv[4], &end, 10)) < 1 || *end != '\0')) ||
	    busy_us > period_ms * 1000) {
		fprintf(stderr, "usage: %s PROCESSES SECONDS [BUSY_US [PERIOD_MS]] (BUSY_US ≤ PERIOD_MS × 1000)\n",
			argv[0]);
		return 2;
	}
	deadline = now_s() + seconds;
	/* No SA_RESTART: a signal ends the first process's wait() too. */
	struct sigaction sa = { .sa_handler = stop };
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	for (long i = 1; i < processes; i++) {
		pid_t pid = fork();

		if (pid < 0) {
			perror("idlers: fork");
			return 1;
		}
		if (pid == 0) {
			prctl(PR_SET_PDEATHSIG, SIGTERM);
			if (getppid() != parent)
				return 0;
			live(deadline, busy_us / 1e6, period_ms / 1e3, (unsigned)getpid());
			return 0;
		}
	}
	live(deadline, busy_us / 1e6, period_ms / 1e3, (unsigned)getpid());
	/* Children still running are stopped with this process (PDEATHSIG). */
	while (!stopping && wait(NULL) > 0)
		;
	return 0;
}
