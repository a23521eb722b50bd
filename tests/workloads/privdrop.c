/*
 * privdrop: a busy process whose credentials make it off limits to an
 * unprivileged caller of profd, although its uid may be the caller's.
 *
 *   privdrop SECONDS nodump          prctl(PR_SET_DUMPABLE, 0): not dumpable
 *   privdrop SECONDS drop UID GID    (started as root) drops every group and
 *                                    sets real, effective and saved ids to
 *                                    UID/GID: the kernel leaves it not
 *                                    dumpable after the credential change
 *   privdrop SECONDS seteuid UID     (started as root) seteuid(UID) only: the
 *                                    real and saved uids stay 0
 *   privdrop SECONDS exec PATH ARG.. spins SECONDS, then execs PATH ARG..
 *                                    (e.g. a set-user-id copy of itself)
 *   privdrop SECONDS thread UID GID  (started as root) starts a second thread
 *                                    that stays root and spins in
 *                                    privdrop_root_spin, then drops the main
 *                                    thread alone (raw syscalls, as glibc's
 *                                    wrappers change every thread) to
 *                                    UID/GID with no groups, and sets
 *                                    PR_SET_DUMPABLE 1 again
 *   privdrop SECONDS keepcaps UID GID (started as root) as drop, but keeps
 *                                    its permitted capabilities
 *                                    (PR_SET_KEEPCAPS) and sets
 *                                    PR_SET_DUMPABLE 1 again
 *   privdrop SECONDS userns UID GID  (started as root) moves into a new user
 *                                    namespace, which root thus creates,
 *                                    mapping 0 and UID (GID) to themselves
 *                                    (written by a helper child left in the
 *                                    parent namespace), then as drop (its
 *                                    capabilities go with uid 0) and sets
 *                                    PR_SET_DUMPABLE 1 again: ids all UID/GID
 *                                    to the outside, no capability
 *
 * Prints "ready" on stdout once its credentials are set, then spins in
 * privdrop_spin until SECONDS have passed.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <grp.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned long sink;

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

__attribute__((noinline)) void privdrop_spin(void)
{
	volatile char frame = 0;

	(void)frame;
	for (unsigned long i = 0; i < 1000000UL; i++)
		sink += i * 2654435761u;
}

__attribute__((noinline)) void privdrop_root_spin(void)
{
	volatile char frame = 0;

	(void)frame;
	for (unsigned long i = 0; i < 1000000UL; i++)
		sink += i * 2654435761u;
}

static double root_deadline;

static void *root_thread(void *arg)
{
	(void)arg;
	while (now_s() < root_deadline)
		privdrop_root_spin();
	return NULL;
}

static void usage(const char *argv0)
{
	fprintf(stderr,
		"usage: %s SECONDS nodump | drop UID GID | seteuid UID | exec PATH ARG... | thread UID GID | keepcaps UID GID | userns UID GID\n",
		argv0);
	exit(2);
}

static unsigned long number(const char *s, const char *argv0)
{
	char *end;
	unsigned long n = strtoul(s, &end, 10);

	if (*s == '\0' || *end != '\0')
		usage(argv0);
	return n;
}

static void die(const char *what)
{
	perror(what);
	exit(1);
}

/* Writes "0 0 1\nID ID 1\n" to /proc/PID/NAME. */
static void write_map(pid_t pid, const char *name, unsigned long id)
{
	char path[64], map[64];
	int fd, len;

	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, name);
	len = snprintf(map, sizeof(map), "0 0 1\n%lu %lu 1\n", id, id);
	fd = open(path, O_WRONLY);
	if (fd < 0 || write(fd, map, len) != len)
		die(path);
	close(fd);
}

/* Moves into a new user namespace whose uid and gid maps a child, still in
 * the parent namespace (where it is root), writes. */
static void new_user_ns(unsigned long uid, unsigned long gid)
{
	int go[2];
	pid_t self = getpid(), helper;
	int status;
	char c;

	if (pipe(go))
		die("pipe");
	helper = fork();
	if (helper < 0)
		die("fork");
	if (helper == 0) {
		close(go[1]);
		if (read(go[0], &c, 1) != 1)
			_exit(1);
		write_map(self, "uid_map", uid);
		write_map(self, "gid_map", gid);
		_exit(0);
	}
	close(go[0]);
	if (unshare(CLONE_NEWUSER))
		die("unshare(CLONE_NEWUSER)");
	if (write(go[1], "x", 1) != 1)
		die("write");
	close(go[1]);
	if (waitpid(helper, &status, 0) != helper || !WIFEXITED(status) ||
	    WEXITSTATUS(status) != 0) {
		fprintf(stderr, "the helper could not write the id maps\n");
		exit(1);
	}
}

int main(int argc, char **argv)
{
	double deadline;
	char *end;

	if (argc < 3)
		usage(argv[0]);
	deadline = strtod(argv[1], &end);
	if (*end != '\0' || deadline < 0)
		usage(argv[0]);
	if (!strcmp(argv[2], "nodump") && argc == 3) {
		if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0))
			die("prctl(PR_SET_DUMPABLE, 0)");
	} else if (!strcmp(argv[2], "drop") && argc == 5) {
		uid_t uid = (uid_t)number(argv[3], argv[0]);
		gid_t gid = (gid_t)number(argv[4], argv[0]);

		if (setgroups(0, NULL))
			die("setgroups");
		if (setresgid(gid, gid, gid))
			die("setresgid");
		if (setresuid(uid, uid, uid))
			die("setresuid");
	} else if (!strcmp(argv[2], "thread") && argc == 5) {
		uid_t uid = (uid_t)number(argv[3], argv[0]);
		gid_t gid = (gid_t)number(argv[4], argv[0]);
		pthread_t other;

		root_deadline = now_s() + deadline + 1;
		if (pthread_create(&other, NULL, root_thread, NULL))
			die("pthread_create");
		if (syscall(SYS_setgroups, 0, NULL))
			die("setgroups");
		if (syscall(SYS_setresgid, gid, gid, gid))
			die("setresgid");
		if (syscall(SYS_setresuid, uid, uid, uid))
			die("setresuid");
		if (prctl(PR_SET_DUMPABLE, 1, 0, 0, 0))
			die("prctl(PR_SET_DUMPABLE, 1)");
	} else if (!strcmp(argv[2], "keepcaps") && argc == 5) {
		uid_t uid = (uid_t)number(argv[3], argv[0]);
		gid_t gid = (gid_t)number(argv[4], argv[0]);

		if (prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0))
			die("prctl(PR_SET_KEEPCAPS, 1)");
		if (setgroups(0, NULL))
			die("setgroups");
		if (setresgid(gid, gid, gid))
			die("setresgid");
		if (setresuid(uid, uid, uid))
			die("setresuid");
		if (prctl(PR_SET_DUMPABLE, 1, 0, 0, 0))
			die("prctl(PR_SET_DUMPABLE, 1)");
	} else if (!strcmp(argv[2], "userns") && argc == 5) {
		uid_t uid = (uid_t)number(argv[3], argv[0]);
		gid_t gid = (gid_t)number(argv[4], argv[0]);

		new_user_ns(uid, gid);
		if (setgroups(0, NULL))
			die("setgroups");
		if (setresgid(gid, gid, gid))
			die("setresgid");
		if (setresuid(uid, uid, uid))
			die("setresuid");
		if (prctl(PR_SET_DUMPABLE, 1, 0, 0, 0))
			die("prctl(PR_SET_DUMPABLE, 1)");
	} else if (!strcmp(argv[2], "seteuid") && argc == 4) {
		if (seteuid((uid_t)number(argv[3], argv[0])))
			die("seteuid");
	} else if (!strcmp(argv[2], "exec") && argc >= 4) {
		printf("ready\n");
		fflush(stdout);
		deadline += now_s();
		while (now_s() < deadline)
			privdrop_spin();
		/* Nobody reads the new program's output. */
		if (!freopen("/dev/null", "w", stdout))
			die("freopen");
		execv(argv[3], argv + 3);
		die("execv");
	} else {
		usage(argv[0]);
	}
	printf("ready\n");
	fflush(stdout);
	deadline += now_s();
	while (now_s() < deadline)
		privdrop_spin();
	return 0;
}
