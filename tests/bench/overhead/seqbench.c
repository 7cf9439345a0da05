/*
 * seqbench write FILE MIB | seqbench read FILE: sequential throughput.
 *
 * write: creates (or truncates) FILE and writes MIB MiB in 1 MiB write()s,
 * then fsync()s and closes it; the time covers open to close, fsync included,
 * so data merely parked in a page cache or a write-behind queue is not counted
 * as written.
 * read: writes 3 to /proc/sys/vm/drop_caches (after sync) so the data comes
 * from the lower filesystem, then reads FILE to its end in 1 MiB read()s.
 *
 * Prints "write|read VALUE MB/s" (MB = 10^6 bytes). Exit status 0 on success,
 * 1 on a failed syscall (named on stderr), 2 on bad usage.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BLOCK_BYTES (1024 * 1024)
#define BLOCK_ALIGN 4096
#define DROP_CACHES_PATH "/proc/sys/vm/drop_caches"

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int fail(const char *what, const char *path)
{
	fprintf(stderr, "seqbench: %s %s: %s\n", what, path, strerror(errno));
	return 1;
}

/* Not a constant pattern, so nothing along the way can shortcut zeroes. */
static void fill(unsigned char *buf, size_t len)
{
	uint32_t x = 2463534242u;

	for (size_t i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		buf[i] = (unsigned char)x;
	}
}

static int write_all(int fd, const unsigned char *buf, size_t len)
{
	while (len) {
		ssize_t n = write(fd, buf, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

static int bench_write(const char *path, long mib, unsigned char *buf)
{
	double t0, secs;
	int fd;

	fill(buf, BLOCK_BYTES);
	t0 = now_s();
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return fail("open", path);
	for (long i = 0; i < mib; i++) {
		if (write_all(fd, buf, BLOCK_BYTES) < 0) {
			close(fd);
			return fail("write", path);
		}
	}
	if (fsync(fd) < 0) {
		close(fd);
		return fail("fsync", path);
	}
	if (close(fd) < 0)
		return fail("close", path);
	secs = now_s() - t0;
	printf("write %.1f MB/s\n", (double)mib * BLOCK_BYTES / 1e6 / secs);
	return 0;
}

static int drop_caches(void)
{
	int fd;

	sync();
	fd = open(DROP_CACHES_PATH, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return fail("open", DROP_CACHES_PATH);
	if (write(fd, "3\n", 2) != 2) {
		close(fd);
		return fail("write", DROP_CACHES_PATH);
	}
	close(fd);
	return 0;
}

static int bench_read(const char *path, unsigned char *buf)
{
	double t0, secs;
	uint64_t total = 0;
	ssize_t n;
	int fd;

	if (drop_caches() != 0)
		return 1;
	t0 = now_s();
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return fail("open", path);
	while ((n = read(fd, buf, BLOCK_BYTES)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			close(fd);
			return fail("read", path);
		}
		total += (uint64_t)n;
	}
	close(fd);
	secs = now_s() - t0;
	if (total == 0) {
		fprintf(stderr, "seqbench: %s is empty\n", path);
		return 1;
	}
	printf("read %.1f MB/s\n", (double)total / 1e6 / secs);
	return 0;
}

static int usage(void)
{
	fprintf(stderr, "usage: seqbench write FILE MIB\n       seqbench read FILE\n");
	return 2;
}

int main(int argc, char *argv[])
{
	unsigned char *buf;
	char *end;
	long mib = 0;
	int r;

	if (argc == 4 && strcmp(argv[1], "write") == 0) {
		mib = strtol(argv[3], &end, 10);
		if (*end || mib <= 0)
			return usage();
	} else if (!(argc == 3 && strcmp(argv[1], "read") == 0)) {
		return usage();
	}
	if (posix_memalign((void **)&buf, BLOCK_ALIGN, BLOCK_BYTES) != 0) {
		fprintf(stderr, "seqbench: out of memory\n");
		return 1;
	}
	r = mib ? bench_write(argv[2], mib, buf) : bench_read(argv[2], buf);
	free(buf);
	return r;
}
