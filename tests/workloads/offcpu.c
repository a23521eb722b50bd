/*
 * offcpu: threads that wait, for known lengths of time, in known functions.
 *
 *   offcpu split SECONDS [--ready] [--compute] [--sleeper]
 *       Each round the main thread calls sleep_part(), which sleeps 7 ms
 *       (clock_nanosleep), then pipe_part(), which writes a byte to a pipe
 *       and blocks reading the answer of a forked helper process (not a
 *       thread: profiling the target does not follow it), which answers
 *       3 ms after the request was sent. So each round has one switch out in each part
 *       (a count of switches gives 50/50) but 7 ms against 3 ms of waiting
 *       (time gives 70/30). With --compute, compute_part() spins for 5 ms
 *       (CLOCK_MONOTONIC) each round: of the wall-clock time, sleep 7/15,
 *       pipe 3/15, compute 5/15 (47/20/33 %). Each wait also takes the
 *       kernel's wake-up latency (tens of microseconds on an idle machine,
 *       more on a busy one), so the parts' measured times are printed.
 *       With --sleeper, a second thread sleeps in long_sleep() for the
 *       whole run (a wait open whenever a session stops).
 *   offcpu exit SECONDS [--ready]
 *       As split, with a thread sleeping in long_sleep() for far longer
 *       than the run: the main thread returns after SECONDS (exit_group)
 *       while that thread is still asleep.
 *   offcpu mutex SECONDS [--ready] [WAITERS]
 *       The main thread takes a pthread mutex in hold_lock() and sleeps
 *       4 ms holding it, then 1 ms in between_holds() without it; WAITERS
 *       threads (default 2) take it in wait_for_lock() (where they block in
 *       pthread_mutex_lock), release it at once and sleep 1 ms in rest().
 *   offcpu pingpong SECONDS [--ready] [RATE]
 *       Two threads bounce a byte over two pipes, each blocking on its read
 *       once a round trip: two switches out a round trip. RATE is the
 *       target's switches a second (0 or absent: as fast as they go); the
 *       pinging thread sleeps when over 0.2 ms ahead of it (one more
 *       switch, counted in the rate). Both threads run on one CPU.
 *   offcpu gated SECONDS [--ready] [THREADS]
 *       THREADS threads (default 1, the main thread among them) wait,
 *       blocked, for a byte on stdin; then each runs rounds of
 *       sleep_part() (7 ms asleep) and compute_part() (5 ms spinning) for
 *       SECONDS; then each blocks again, the main thread prints `done` on
 *       stdout and waits for another byte (or the end of stdin) before it
 *       exits. So the threads run only between the two bytes: their CPU
 *       time read while they wait before and after is their CPU time over
 *       any session that spans both. Once the second byte comes (so
 *       that nothing it writes runs between those readings), it prints,
 *       per thread, `thread TID
 *       start_s S nap_s N cpu_s C` (when it woke, from the first byte;
 *       its sleep_part time; its CPU time from waking to its last round's
 *       end, CLOCK_THREAD_CPUTIME_ID) and `gated_s` (from the first byte
 *       to the exit, on the main thread's clock).
 *   offcpu kids SECONDS [--ready] [COUNT]
 *       Forks COUNT children at once (default 2), each running rounds of
 *       kid_nap() (7 ms asleep) and compute_part() (5 ms spinning) for
 *       SECONDS, then waits for them in wait_for_kids(). Each child prints
 *       `kid PID lifetime_s L cpu_s C nap_s N` as it exits: its lifetime
 *       from the fork's return, its CPU time (CLOCK_PROCESS_CPUTIME_ID,
 *       the kernel's count from the fork) and its time in kid_nap().
 *
 * On exit (after SECONDS, not when killed) it prints `key value` lines on
 * stderr: for split and exit the measured wall-clock seconds of each part
 * (`sleep_s`, `pipe_s`, `compute_s`, `rounds`, and when a thread sleeps in
 * long_sleep, `sleeper_start_s`: when it began, from the start of main,
 * printed at once); for pingpong `switches_per_s`, `switches`,
 * `round_trips`, `naps` (its pacing sleeps), `preempted` (its threads'
 * involuntary switches, getrusage's ru_nivcsw), `seconds`, `cpu_s` and
 * `cpu_us_per_round_trip` (the process's CPU time over the round trips: a
 * profiler that collects stacks at each switch adds its work there); and
 * for every mode `lifetime_s`
 * (from the start of main) and `cpu_total_s` (the CPU time of all the
 * process's threads, the kernel's count of it, as /proc/PID/schedstat has
 * it per thread).
 *
 * Every function a test looks for is noipa: never inlined, cloned or
 * turned into a tail call, so each is a frame of its own.
 */
#define _GNU_SOURCE
#include "workload.h"
#include <errno.h>
#include <sched.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define KEEP __attribute__((noipa, noinline))

#define SLEEP_NS 7000000L
#define PIPE_NS 3000000L
#define COMPUTE_NS 5000000L
#define HOLD_NS 4000000L
#define GAP_NS 1000000L
#define REST_NS 1000000L

static double deadline;
/* When main began (the lifetime and the sleeper's start are from it). */
static double started_s;
static int to_helper[2], from_helper[2];

static void die(const char *what)
{
	perror(what);
	exit(1);
}

/* Sleeps `ns` nanoseconds on the monotonic clock, through interruptions. */
static void nap(long ns)
{
	struct timespec ts = { ns / 1000000000L, ns % 1000000000L };

	while (clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &ts) == EINTR)
		;
}

static void write_byte(int fd)
{
	char c = 'x';

	if (write(fd, &c, 1) != 1)
		die("write");
}

/* Reads one byte; returns 0 at end of file. */
static int read_byte(int fd)
{
	char c;
	ssize_t n;

	while ((n = read(fd, &c, 1)) < 0 && errno == EINTR)
		;
	if (n < 0)
		die("read");
	return n == 1;
}

static double process_cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- split ---- */

KEEP void sleep_part(void)
{
	nap(SLEEP_NS);
}

KEEP void pipe_part(void)
{
	struct timespec sent;

	clock_gettime(CLOCK_MONOTONIC, &sent);
	if (write(to_helper[1], &sent, sizeof(sent)) != sizeof(sent))
		die("write");
	if (!read_byte(from_helper[0])) {
		fprintf(stderr, "offcpu: the pipe helper is gone\n");
		exit(1);
	}
}

/* Spins for COMPUTE_NS of wall-clock time: on a loaded machine part of it
 * is spent preempted (runnable), which wall mode counts here too, so the
 * part's share of the wall-clock time holds whatever the load. */
KEEP void compute_part(void)
{
	double end = now_s() + COMPUTE_NS / 1e9;

	while (now_s() < end)
		SPIN(2000);
}

/* The forked helper: answers each request PIPE_NS after it was sent (the
 * time it took to wake the helper is not added), until the pipe closes
 * (the target exited or was killed). */
KEEP void helper(void)
{
	struct timespec due;

	while (read(to_helper[0], &due, sizeof(due)) == sizeof(due)) {
		due.tv_nsec += PIPE_NS;
		if (due.tv_nsec >= 1000000000L) {
			due.tv_sec++;
			due.tv_nsec -= 1000000000L;
		}
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &due,
				       NULL) == EINTR)
			;
		write_byte(from_helper[1]);
	}
	_exit(0);
}

static void start_helper(void)
{
	pid_t pid;

	if (pipe(to_helper) || pipe(from_helper))
		die("pipe");
	pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		close(to_helper[1]);
		close(from_helper[0]);
		helper();
	}
	close(to_helper[0]);
	close(from_helper[1]);
}

KEEP void *long_sleep(void *arg)
{
	(void)arg;
	/* On a loaded machine a new thread may wait a while before it first
	 * runs: that is no wait of a switch out. Say when the sleep began. */
	fprintf(stderr, "sleeper_start_s %.6f\n", now_s() - started_s);
	nap(1000 * 1000000000L);
	return NULL;
}

static void start_sleeper(void)
{
	pthread_t t;

	if (pthread_create(&t, NULL, long_sleep, NULL))
		die("pthread_create");
}

/* Rounds until the deadline; prints the parts' wall-clock seconds. */
KEEP void rounds(int compute)
{
	double sleep_s = 0, pipe_s = 0, compute_s = 0, t0, t1;
	long n = 0;

	while ((t0 = now_s()) < deadline) {
		sleep_part();
		t1 = now_s();
		sleep_s += t1 - t0;
		pipe_part();
		t0 = now_s();
		pipe_s += t0 - t1;
		if (compute) {
			compute_part();
			compute_s += now_s() - t0;
		}
		n++;
	}
	fprintf(stderr, "sleep_s %.6f\npipe_s %.6f\ncompute_s %.6f\nrounds %ld\n",
		sleep_s, pipe_s, compute_s, n);
}

/* ---- mutex ---- */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

KEEP void wait_for_lock(void)
{
	pthread_mutex_lock(&lock);
	sink++;
}

KEEP void rest(void)
{
	nap(REST_NS);
}

KEEP void *waiter(void *arg)
{
	(void)arg;
	for (;;) {
		wait_for_lock();
		pthread_mutex_unlock(&lock);
		rest();
	}
	return NULL;
}

KEEP void hold_lock(void)
{
	pthread_mutex_lock(&lock);
	nap(HOLD_NS);
	pthread_mutex_unlock(&lock);
}

KEEP void between_holds(void)
{
	nap(GAP_NS);
}

static void mutex_main(int waiters)
{
	pthread_t t;
	long holds = 0;

	for (int i = 0; i < waiters; i++)
		if (pthread_create(&t, NULL, waiter, NULL))
			die("pthread_create");
	while (now_s() < deadline) {
		hold_lock();
		between_holds();
		holds++;
	}
	fprintf(stderr, "holds %ld\n", holds);
}

/* ---- gated ---- */

#define MAX_THREADS 16

static pthread_barrier_t gate;
/* When the main thread read the first byte. */
static double go_s;

struct worker {
	pid_t tid;
	double start_s, nap_s, cpu_s;
};

static struct worker workers[MAX_THREADS];

static double thread_cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Rounds of sleep_part and compute_part until the deadline. */
KEEP void gated_rounds(struct worker *w)
{
	double cpu0 = thread_cpu_s(), t0;

	w->tid = gettid();
	w->start_s = now_s() - go_s;
	while ((t0 = now_s()) < deadline) {
		sleep_part();
		w->nap_s += now_s() - t0;
		compute_part();
	}
	w->cpu_s = thread_cpu_s() - cpu0;
}

KEEP void *gated_worker(void *arg)
{
	pthread_barrier_wait(&gate);
	gated_rounds(arg);
	pthread_barrier_wait(&gate);
	/* Blocked until the process exits. */
	nap(1000 * 1000000000L);
	return NULL;
}

static void gated_main(double seconds, int threads)
{
	pthread_t t;

	if (pthread_barrier_init(&gate, NULL, threads))
		die("pthread_barrier_init");
	for (int i = 1; i < threads; i++)
		if (pthread_create(&t, NULL, gated_worker, &workers[i]))
			die("pthread_create");
	if (!read_byte(0)) {
		fprintf(stderr, "offcpu: stdin ended before the start\n");
		exit(1);
	}
	go_s = now_s();
	deadline = go_s + seconds;
	pthread_barrier_wait(&gate);
	gated_rounds(&workers[0]);
	pthread_barrier_wait(&gate);
	printf("done\n");
	fflush(stdout);
	read_byte(0);
	for (int i = 0; i < threads; i++)
		fprintf(stderr, "thread %d start_s %.6f nap_s %.6f cpu_s %.6f\n",
			(int)workers[i].tid, workers[i].start_s, workers[i].nap_s,
			workers[i].cpu_s);
	fprintf(stderr, "gated_s %.6f\n", now_s() - go_s);
}

/* ---- kids ---- */

KEEP void kid_nap(void)
{
	nap(SLEEP_NS);
}

KEEP void kid(double seconds)
{
	double begin = now_s(), nap_s = 0, t0;

	while ((t0 = now_s()) < begin + seconds) {
		kid_nap();
		nap_s += now_s() - t0;
		compute_part();
	}
	fprintf(stderr, "kid %d lifetime_s %.6f cpu_s %.6f nap_s %.6f\n",
		(int)getpid(), now_s() - begin, process_cpu_s(), nap_s);
	_exit(0);
}

KEEP void wait_for_kids(int count)
{
	int status;

	for (int i = 0; i < count; i++)
		if (wait(&status) < 0 || !WIFEXITED(status) ||
		    WEXITSTATUS(status))
			die("wait");
}

static void kids_main(double seconds, int count)
{
	for (int i = 0; i < count; i++) {
		pid_t pid = fork();

		if (pid < 0)
			die("fork");
		if (pid == 0)
			kid(seconds);
	}
	wait_for_kids(count);
}

/* ---- pingpong ---- */

static int ping[2], pong[2];

/* Answers every byte on `ping` on `pong` until `ping` closes. */
KEEP void *ponger(void *arg)
{
	(void)arg;
	while (read_byte(ping[0]))
		write_byte(pong[1]);
	return NULL;
}

/* Both threads on one CPU (the first this process may use): each switch
 * is then straight from one thread to the other. On two CPUs every wake-up
 * crosses to an idle CPU, and the rate swings tenfold (45 000 to 400 000
 * switches a second here) with where the scheduler puts the threads. */
static void pin_to_one_cpu(void)
{
	cpu_set_t set;

	if (sched_getaffinity(0, sizeof(set), &set))
		die("sched_getaffinity");
	for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
		if (CPU_ISSET(cpu, &set)) {
			CPU_ZERO(&set);
			CPU_SET(cpu, &set);
			if (sched_setaffinity(0, sizeof(set), &set))
				die("sched_setaffinity");
			return;
		}
	}
}

KEEP void pingpong_main(double rate)
{
	pthread_t t;
	struct rusage usage;
	long trips = 0, naps = 0;
	double start_s, cpu0, elapsed;

	if (pipe(ping) || pipe(pong))
		die("pipe");
	pin_to_one_cpu();
	if (pthread_create(&t, NULL, ponger, NULL))
		die("pthread_create");
	cpu0 = process_cpu_s();
	start_s = now_s();
	for (;;) {
		write_byte(ping[1]);
		read_byte(pong[0]);
		trips++;
		double t = now_s();
		if (t >= deadline)
			break;
		if (rate > 0) {
			/* Two switches a round trip and one a nap: where the
			 * schedule says we should be. A lead of over 0.2 ms is
			 * slept off, so the round trips come in bursts of at
			 * most about 0.3 ms (the sleep's own lateness), not all
			 * at once. */
			double due = start_s + (double)(trips * 2 + naps) / rate;
			if (due - t > 0.0002) {
				nap((long)((due - t) * 1e9));
				naps++;
			}
		}
	}
	elapsed = now_s() - start_s;
	close(ping[1]);
	pthread_join(t, NULL);
	if (getrusage(RUSAGE_SELF, &usage))
		die("getrusage");
	fprintf(stderr,
		"switches_per_s %.0f\nswitches %ld\nround_trips %ld\nnaps %ld\n"
		"preempted %ld\nseconds %.3f\ncpu_s %.6f\n"
		"cpu_us_per_round_trip %.3f\n",
		(double)(trips * 2 + naps) / elapsed, trips * 2 + naps, trips,
		naps, usage.ru_nivcsw, elapsed, process_cpu_s() - cpu0,
		(process_cpu_s() - cpu0) * 1e6 / (double)trips);
}

static void usage(const char *argv0)
{
	fprintf(stderr,
		"usage: %s split SECONDS [--ready] [--compute] [--sleeper]\n"
		"       %s exit SECONDS [--ready]\n"
		"       %s mutex SECONDS [--ready] [WAITERS]\n"
		"       %s pingpong SECONDS [--ready] [RATE]\n"
		"       %s gated SECONDS [--ready] [THREADS]\n"
		"       %s kids SECONDS [--ready] [COUNT]\n",
		argv0, argv0, argv0, argv0, argv0, argv0);
	exit(2);
}

int main(int argc, char **argv)
{
	const char *mode;
	double seconds, start_s;
	char *end;
	int i = 3, compute = 0, sleeper = 0, waiters = 2, threads = 1, kids = 2;
	double rate = 0;

	if (argc < 3)
		usage(argv[0]);
	mode = argv[1];
	seconds = strtod(argv[2], &end);
	if (*end != '\0' || seconds < 0) {
		fprintf(stderr, "%s: bad runtime '%s'\n", argv[0], argv[2]);
		exit(2);
	}
	int ready = i < argc && !strcmp(argv[i], "--ready");
	if (ready)
		i++;
	for (; i < argc; i++) {
		if (!strcmp(mode, "split") && !strcmp(argv[i], "--compute"))
			compute = 1;
		else if (!strcmp(mode, "split") && !strcmp(argv[i], "--sleeper"))
			sleeper = 1;
		else if (!strcmp(mode, "mutex") && i == argc - 1 &&
			 (waiters = atoi(argv[i])) > 0)
			;
		else if (!strcmp(mode, "gated") && i == argc - 1 &&
			 (threads = atoi(argv[i])) > 0 && threads <= MAX_THREADS)
			;
		else if (!strcmp(mode, "kids") && i == argc - 1 &&
			 (kids = atoi(argv[i])) > 0)
			;
		else if (!strcmp(mode, "pingpong") && i == argc - 1 &&
			 ((rate = strtod(argv[i], &end)) >= 0 && *end == '\0'))
			;
		else
			usage(argv[0]);
	}
	/* A helper blocked in write to a closed pipe must end, not stop us. */
	signal(SIGPIPE, SIG_IGN);
	start_s = now_s();
	started_s = start_s;
	deadline = start_s + seconds;
	if (!strcmp(mode, "split") || !strcmp(mode, "exit")) {
		start_helper();
		if (sleeper || !strcmp(mode, "exit"))
			start_sleeper();
	} else if (strcmp(mode, "mutex") && strcmp(mode, "pingpong") &&
		   strcmp(mode, "gated") && strcmp(mode, "kids")) {
		usage(argv[0]);
	}
	if (ready) {
		printf("ready\n");
		fflush(stdout);
	}
	if (!strcmp(mode, "mutex"))
		mutex_main(waiters);
	else if (!strcmp(mode, "pingpong"))
		pingpong_main(rate);
	else if (!strcmp(mode, "gated"))
		gated_main(seconds, threads);
	else if (!strcmp(mode, "kids"))
		kids_main(seconds, kids);
	else
		rounds(compute);
	fprintf(stderr, "lifetime_s %.6f\ncpu_total_s %.6f\n", now_s() - start_s,
		process_cpu_s());
	/* exit_group, with the sleeper (if any) still asleep. */
	exit(0);
}
