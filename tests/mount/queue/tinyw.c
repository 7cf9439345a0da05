/*
 * tinyw: many tiny writes at scattered offsets, the worst case for the queue's
 * memory (each write is an extent of its own: a tree node, an extent, a
 * buffer). Used by memory.sh and tests/bench/queue-memory.sh.
 *
 *   tinyw PATH COUNT SPAN SEED
 *
 * Opens PATH (O_WRONLY|O_CREAT), makes COUNT pwrite calls of 1 to 16 bytes at
 * random offsets in [0, SPAN) (SPAN takes K, M, G suffixes), then closes it.
 * Prints "tinyw writes=N bytes=B secs=S"; exits 1 on the first failed or
 * short write (naming its errno), 2 on a usage error.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TINY_MAX_BYTES 16

static uint64_t parse_size(const char *s)
{
	char *end;
	uint64_t v = strtoull(s, &end, 10);

	switch (*end) {
	case 'K': case 'k': return v << 10;
	case 'M': case 'm': return v << 20;
	case 'G': case 'g': return v << 30;
	default: return v;
	}
}

/* splitmix64: reproducible from the seed, no libc state. */
static uint64_t next(uint64_t *s)
{
	uint64_t x = (*s += 0x9E3779B97F4A7C15ull);

	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
	return x ^ (x >> 31);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	uint64_t count, span, seed, bytes = 0, i;
	char buf[TINY_MAX_BYTES];
	double t0;
	int fd;

	if (argc != 5) {
		fprintf(stderr, "usage: tinyw PATH COUNT SPAN SEED\n");
		return 2;
	}
	count = strtoull(argv[2], NULL, 10);
	span = parse_size(argv[3]);
	seed = strtoull(argv[4], NULL, 10);
	if (span <= TINY_MAX_BYTES) {
		fprintf(stderr, "tinyw: SPAN must exceed %d bytes\n", TINY_MAX_BYTES);
		return 2;
	}
	fd = open(argv[1], O_WRONLY | O_CREAT, 0644);
	if (fd < 0) {
		fprintf(stderr, "tinyw: open %s: %s\n", argv[1], strerror(errno));
		return 1;
	}
	t0 = now_s();
	for (i = 0; i < count; i++) {
		uint64_t r = next(&seed);
		size_t len = 1 + (size_t)(r % TINY_MAX_BYTES);
		off_t off = (off_t)((r >> 8) % (span - TINY_MAX_BYTES));
		ssize_t n;

		memset(buf, (int)(r >> 56), len);
		n = pwrite(fd, buf, len, off);
		if (n != (ssize_t)len) {
			fprintf(stderr, "tinyw: write %llu of %zu bytes at %lld: %s\n",
				(unsigned long long)i, len, (long long)off,
				n < 0 ? strerror(errno) : "short write");
			close(fd);
			return 1;
		}
		bytes += len;
	}
	if (close(fd) < 0) {
		fprintf(stderr, "tinyw: close: %s\n", strerror(errno));
		return 1;
	}
	printf("tinyw writes=%llu bytes=%llu secs=%.3f\n", (unsigned long long)count,
	       (unsigned long long)bytes, now_s() - t0);
	return 0;
}
