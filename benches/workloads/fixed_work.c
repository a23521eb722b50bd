/*
 * fixed_work: a fixed amount of CPU work on two threads, through real call
 * stacks, for measuring what a profiler costs the program it samples
 * (benches/overhead.sh).
 *
 * Usage: fixed_work [-o FILE] [-p PID] ROUNDS      each thread does ROUNDS rounds
 *        fixed_work [-o FILE] [-p PID] -t SECONDS  each thread works until SECONDS pass
 *
 * At exit it writes one line to FILE (default stdout):
 *   rounds R wall_s W cpu_s C [profiler_cpu_s P]
 * R: rounds done by both threads; W: seconds from main's start to the end of
 * the work; C: CPU seconds of the whole process (user + system, getrusage),
 * which includes the time the kernel spends taking samples in it; P (with
 * -p): the CPU seconds process PID (the profiler) used over the same span,
 * from the scheduler's nanosecond counts of its threads.
 *
 * A round walks a call chain 10 to 14 frames deep, chosen by the round
 * number: round → level1 → level2a|level2b → level3 → rec × 5..8 →
 * leaf_hash|leaf_scan, every function spinning a little on the way (so
 * samples land at every depth, and a few dozen distinct stacks occur).
 * Built with frame pointers in every function (-fno-omit-frame-pointer
 * -mno-omit-leaf-frame-pointer; SPIN keeps a stack slot so that gcc gives
 * leaves a frame too), so a frame-pointer walk sees every caller.
 */
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "keep.h"

/* Per thread: the two threads never share a cache line. */
static __thread volatile unsigned long sink;

#define SPIN(n)                                                                \
	do {                                                                   \
		volatile char frame_ = 0;                                      \
		(void)frame_;                                                  \
		for (unsigned long i_ = 0; i_ < (n); i_++)                     \
			sink += i_ * 2654435761u;                              \
	} while (0)

KEEP void leaf_hash(unsigned long n)
{
	SPIN(n);
}

KEEP void leaf_scan(unsigned long n)
{
	SPIN(n);
}

KEEP void rec(int depth, unsigned r)
{
	SPIN(200);
	if (depth > 0)
		rec(depth - 1, r);
	else if (r & 1)
		leaf_hash(4000);
	else
		leaf_scan(3000);
	sink++; /* work after every call: never a tail call */
}

KEEP void level3(unsigned r)
{
	SPIN(500);
	rec(4 + (int)(r % 4), r >> 2);
	sink++;
}

KEEP void level2a(unsigned r)
{
	SPIN(500);
	level3(r);
	sink++;
}

KEEP void level2b(unsigned r)
{
	SPIN(800);
	level3(r >> 1);
	sink++;
}

KEEP void level1(unsigned r)
{
	SPIN(500);
	if (r & 0x10)
		level2a(r);
	else
		level2b(r);
	sink++;
}

KEEP void one_round(unsigned r)
{
	level1(r);
	sink++;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

struct job {
	unsigned long rounds; /* fixed rounds, or 0 for a deadline */
	double deadline;
	unsigned long done;
};

static void *worker(void *arg)
{
	struct job *job = arg;
	unsigned long r = 0;

	if (job->rounds) {
		for (; r < job->rounds; r++)
			one_round((unsigned)(r * 2654435761u >> 7));
	} else {
		do {
			for (unsigned long k = 0; k < 256; k++, r++)
				one_round((unsigned)(r * 2654435761u >> 7));
		} while (now_s() < job->deadline);
	}
	job->done = r;
	return NULL;
}

/* CPU seconds the threads of process `pid` have run, from
 * /proc/PID/task/TID/schedstat (a thread that ends in between takes its time
 * with it); -1 if the process is gone. */
static double process_cpu_s(const char *pid)
{
	char path[300];
	unsigned long long ns, total = 0;
	struct dirent *e;
	DIR *dir;
	FILE *f;

	snprintf(path, sizeof path, "/proc/%s/task", pid);
	if (!(dir = opendir(path)))
		return -1;
	while ((e = readdir(dir))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof path, "/proc/%s/task/%s/schedstat", pid, e->d_name);
		if ((f = fopen(path, "r"))) {
			if (fscanf(f, "%llu", &ns) == 1)
				total += ns;
			fclose(f);
		}
	}
	closedir(dir);
	return (double)total / 1e9;
}

static void usage(const char *argv0)
{
	fprintf(stderr, "usage: %s [-o FILE] [-p PID] (ROUNDS | -t SECONDS)\n", argv0);
	exit(2);
}

int main(int argc, char **argv)
{
	double t0 = now_s(), seconds = 0, t1, p0 = 0, p1 = 0;
	unsigned long rounds = 0;
	const char *path = NULL, *profiler = NULL;
	struct job jobs[2];
	pthread_t threads[2];
	struct rusage ru;
	FILE *out = stdout;
	char *end;
	int opt;

	while ((opt = getopt(argc, argv, "o:p:t:")) != -1) {
		switch (opt) {
		case 'o':
			path = optarg;
			break;
		case 'p':
			profiler = optarg;
			break;
		case 't':
			seconds = strtod(optarg, &end);
			if (*end != '\0' || seconds <= 0)
				usage(argv[0]);
			break;
		default:
			usage(argv[0]);
		}
	}
	if (seconds == 0) {
		if (optind != argc - 1)
			usage(argv[0]);
		rounds = strtoul(argv[optind], &end, 10);
		if (*end != '\0' || rounds == 0)
			usage(argv[0]);
	} else if (optind != argc) {
		usage(argv[0]);
	}

	if (profiler && (p0 = process_cpu_s(profiler)) < 0) {
		fprintf(stderr, "no process %s\n", profiler);
		return 1;
	}
	for (int i = 0; i < 2; i++) {
		jobs[i] = (struct job){ rounds, t0 + seconds, 0 };
		if (pthread_create(&threads[i], NULL, worker, &jobs[i])) {
			perror("pthread_create");
			return 1;
		}
	}
	for (int i = 0; i < 2; i++)
		pthread_join(threads[i], NULL);
	t1 = now_s();
	if (profiler && (p1 = process_cpu_s(profiler)) < 0) {
		fprintf(stderr, "process %s ended during the work\n", profiler);
		return 1;
	}
	getrusage(RUSAGE_SELF, &ru);

	if (path && !(out = fopen(path, "w"))) {
		perror(path);
		return 1;
	}
	fprintf(out, "rounds %lu wall_s %.4f cpu_s %.4f", jobs[0].done + jobs[1].done,
		t1 - t0,
		(double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
			(double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6);
	if (profiler)
		fprintf(out, " profiler_cpu_s %.6f", p1 - p0);
	fputc('\n', out);
	return fclose(out) ? 1 : 0;
}
