/*
 * slowdev-probe: timed I/O on one file, in one process, so a test measures
 * the drive and not process start-up.
 *
 *   slowdev-probe FILE OP...
 *     r:OFF:LEN   pread LEN bytes at OFF
 *     v:OFF:LEN   pread and verify the pattern w wrote
 *     w:OFF:LEN   pwrite LEN bytes of a pattern that depends on the offset
 *     s           fsync
 *
 * One line per op: "OP OFF LEN RESULT START_NS END_NS", RESULT being the byte
 * count, "bad" (v found other data) or the errno name; times are
 * CLOCK_MONOTONIC, comparable between processes. Exits 0 unless usage is bad.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static unsigned char pattern_at(uint64_t pos)
{
	return (unsigned char)(pos * 7 + pos / 4096);
}

static int run_op(int fd, const char *spec)
{
	unsigned long long off = 0, len = 0;
	char op, result[32];
	unsigned char *buf = NULL;
	uint64_t t0, t1;
	ssize_t n;

	if (strcmp(spec, "s") == 0) {
		op = 's';
	} else if (sscanf(spec, "%c:%llu:%llu", &op, &off, &len) != 3 ||
		   !strchr("rvw", op)) {
		fprintf(stderr, "slowdev-probe: bad op '%s'\n", spec);
		return -1;
	}
	if (op != 's' && !(buf = malloc(len ? len : 1))) {
		perror("slowdev-probe");
		return -1;
	}
	for (uint64_t i = 0; op == 'w' && i < len; i++)
		buf[i] = pattern_at(off + i);

	t0 = now_ns();
	if (op == 's')
		n = fsync(fd);
	else if (op == 'w')
		n = pwrite(fd, buf, len, (off_t)off);
	else
		n = pread(fd, buf, len, (off_t)off);
	t1 = now_ns();

	if (n < 0)
		snprintf(result, sizeof(result), "%s", strerrorname_np(errno));
	else
		snprintf(result, sizeof(result), "%zd", n);
	for (ssize_t i = 0; op == 'v' && i < n; i++) {
		if (buf[i] != pattern_at(off + (uint64_t)i)) {
			snprintf(result, sizeof(result), "bad");
			break;
		}
	}
	printf("%c %llu %llu %s %" PRIu64 " %" PRIu64 "\n", op, off, len, result, t0, t1);
	free(buf);
	return 0;
}

int main(int argc, char *argv[])
{
	int fd;

	if (argc < 3) {
		fprintf(stderr,
			"usage: slowdev-probe FILE r:OFF:LEN|v:OFF:LEN|w:OFF:LEN|s...\n");
		return 2;
	}
	fd = open(argv[1], O_RDWR);
	if (fd < 0) {
		perror(argv[1]);
		return 1;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (int i = 2; i < argc; i++) {
		if (run_op(fd, argv[i]) < 0) {
			close(fd);
			return 2;
		}
	}
	close(fd);
	return 0;
}
