/*
 * metabench DIR N: metadata throughput of one directory.
 *
 * Creates N empty files in DIR (open O_CREAT|O_EXCL, close), then stats each
 * by path, then unlinks each, timing the three phases separately. Prints one
 * "name value unit" line per phase and the combined files/s (N over the time
 * of all three phases), so run-overhead.sh can parse it with awk.
 *
 * Exit status: 0 on success, 1 on a failed syscall (named on stderr), 2 on
 * bad usage. Files already created are left behind on failure: the harness
 * runs each pass in a fresh directory.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define NAME_LEN 32

enum phase { PHASE_CREATE, PHASE_STAT, PHASE_UNLINK, PHASE_COUNT };

static const char *const phase_names[PHASE_COUNT] = {"create", "stat", "unlink"};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int do_create(int dirfd, const char *name)
{
	int fd = openat(dirfd, name, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);

	if (fd < 0)
		return -1;
	return close(fd);
}

static int do_stat(int dirfd, const char *name)
{
	struct stat st;

	return fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW);
}

static int do_unlink(int dirfd, const char *name)
{
	return unlinkat(dirfd, name, 0);
}

static int (*const phase_fn[PHASE_COUNT])(int, const char *) = {do_create, do_stat,
								do_unlink};

/* Runs one phase over all N names; returns its duration, or -1 on failure. */
static double run_phase(int dirfd, enum phase p, long n)
{
	char name[NAME_LEN];
	double t0 = now_s();

	for (long i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "f%07ld", i);
		if (phase_fn[p](dirfd, name) < 0) {
			fprintf(stderr, "metabench: %s %s: %s\n", phase_names[p], name,
				strerror(errno));
			return -1;
		}
	}
	return now_s() - t0;
}

int main(int argc, char *argv[])
{
	double secs[PHASE_COUNT], total = 0;
	char *end;
	long n;
	int dirfd;

	if (argc != 3) {
		fprintf(stderr, "usage: metabench DIR N\n");
		return 2;
	}
	n = strtol(argv[2], &end, 10);
	if (*end || n <= 0) {
		fprintf(stderr, "metabench: N must be a positive number: %s\n", argv[2]);
		return 2;
	}
	dirfd = open(argv[1], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dirfd < 0) {
		fprintf(stderr, "metabench: %s: %s\n", argv[1], strerror(errno));
		return 1;
	}
	for (int p = 0; p < PHASE_COUNT; p++) {
		secs[p] = run_phase(dirfd, (enum phase)p, n);
		if (secs[p] < 0) {
			close(dirfd);
			return 1;
		}
		total += secs[p];
	}
	close(dirfd);
	for (int p = 0; p < PHASE_COUNT; p++)
		printf("%s %.1f ops/s\n", phase_names[p], (double)n / secs[p]);
	printf("files %.1f files/s\n", (double)n / total);
	return 0;
}
