/*
 * qio: the queue tests' syscall driver. The shell cannot tell a write's errno
 * from a close's, nor keep one descriptor across steps, so the tests run their
 * file I/O through this: a list of steps on one descriptor, each reported as
 *
 *   STEP rc=ok|ERRNAME bytes=N secs=S
 *
 * A step may carry an expectation, `fsync=EIO` or `close=ok`; qio exits 1 when
 * one is not met (after running every step) and 2 on a usage error.
 *
 * Data is a pattern keyed by seed and file offset, so `gen` and `verify` know
 * what any range of a file must hold without keeping a copy.
 *
 * Steps:
 *   create PATH | open PATH | append PATH   O_TRUNC|O_CREAT, O_RDWR, O_APPEND
 *   bs SIZE                 bytes per write() call (default 64K)
 *   write SIZE SEED         write SIZE bytes at the current offset; stops at
 *                           the first failed or short write
 *   fill SEED               write until a write fails or is short
 *   fsync | fdatasync | close
 *   sleep MS
 *   gen PATH SIZE SEED      create PATH holding the pattern (plain I/O)
 *   verify PATH SIZE SEED   PATH's first SIZE bytes hold the pattern
 *   stat PATH               stat(2); bytes= is the size
 *   readdir DIR             opendir and read every entry; bytes= is the count
 *   pin PATH                map PATH and mlock it: its pages stay in the page
 *                           cache until qio exits (whatever drops caches)
 *   truncate SIZE           ftruncate the descriptor
 *   hole OFF | data OFF     lseek SEEK_HOLE / SEEK_DATA from OFF; bytes= is
 *                           the offset found
 * SIZE takes K and M (binary) suffixes.
 */
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_BS (64 * 1024)
#define MAX_BS (16 * 1024 * 1024)

struct run {
	int fd;
	size_t bs;
	char *buf;
	int failed;
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t mix(uint64_t x)
{
	x += 0x9E3779B97F4A7C15ull;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
	return x ^ (x >> 31);
}

static void pattern(char *buf, size_t len, off_t off, uint64_t seed)
{
	for (size_t i = 0; i < len; i++) {
		uint64_t o = (uint64_t)off + i;
		buf[i] = (char)(mix(seed * 0x100000001B3ull ^ (o >> 3)) >> (8 * (o & 7)));
	}
}

static uint64_t parse_size(const char *s)
{
	char *end;
	uint64_t v = strtoull(s, &end, 10);

	if (*end == 'K' || *end == 'k')
		v <<= 10;
	else if (*end == 'M' || *end == 'm')
		v <<= 20;
	else if (*end) {
		fprintf(stderr, "qio: bad size '%s'\n", s);
		exit(2);
	}
	return v;
}

static const char *err_name(int e)
{
	const char *n = e ? strerrorname_np(e) : "ok";

	return n ? n : "E?";
}

/* Print a step's result and check it against "step=EXPECT". */
static void report(struct run *r, const char *step, const char *expect, int err,
		   uint64_t bytes, double t0)
{
	printf("%s rc=%s bytes=%llu secs=%.3f\n", step, err_name(err),
	       (unsigned long long)bytes, now_s() - t0);
	fflush(stdout);
	if (expect && strcmp(expect, err_name(err)) != 0) {
		printf("qio: %s returned %s, expected %s\n", step, err_name(err), expect);
		r->failed = 1;
	}
}

/* Write up to len bytes (len 0: no limit); *err gets the errno of the stop,
 * or ENOSPC for a short write (that is what a short write means here). */
static uint64_t do_write(struct run *r, uint64_t len, uint64_t seed, int *err)
{
	off_t pos = lseek(r->fd, 0, SEEK_CUR);
	uint64_t done = 0;
	struct stat st;

	*err = 0;
	/* Appends land at the end, whatever the offset says. */
	if ((fcntl(r->fd, F_GETFL) & O_APPEND) && fstat(r->fd, &st) == 0)
		pos = st.st_size;
	if (pos < 0)
		pos = 0;
	while (!len || done < len) {
		size_t n = r->bs;
		ssize_t w;

		if (len && len - done < n)
			n = (size_t)(len - done);
		pattern(r->buf, n, pos, seed);
		w = write(r->fd, r->buf, n);
		if (w < 0) {
			*err = errno;
			break;
		}
		done += (uint64_t)w;
		pos += w;
		if ((size_t)w < n) {
			*err = ENOSPC;
			break;
		}
	}
	return done;
}

static int do_gen(struct run *r, const char *path, uint64_t len, uint64_t seed)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	int err = 0, saved = r->fd;

	if (fd < 0)
		return errno;
	r->fd = fd;
	if (do_write(r, len, seed, &err) != len && !err)
		err = EIO;
	r->fd = saved;
	if (close(fd) < 0 && !err)
		err = errno;
	return err;
}

static int do_verify(struct run *r, const char *path, uint64_t len, uint64_t seed)
{
	int fd = open(path, O_RDONLY);
	char *want = malloc(r->bs);
	uint64_t done = 0;
	int err = 0;

	if (fd < 0 || !want) {
		free(want);
		return errno;
	}
	while (done < len) {
		size_t n = len - done < r->bs ? (size_t)(len - done) : r->bs;
		ssize_t got = pread(fd, r->buf, n, (off_t)done);

		if (got <= 0) {
			printf("qio: %s: short at %llu\n", path,
			       (unsigned long long)done);
			err = got < 0 ? errno : ENODATA;
			break;
		}
		pattern(want, (size_t)got, (off_t)done, seed);
		if (memcmp(want, r->buf, (size_t)got) != 0) {
			printf("qio: %s differs in [%llu, %llu)\n", path,
			       (unsigned long long)done,
			       (unsigned long long)done + (unsigned long long)got);
			err = EILSEQ;
			break;
		}
		done += (uint64_t)got;
	}
	free(want);
	close(fd);
	return err;
}

static int do_stat(const char *path, uint64_t *bytes)
{
	struct stat st;

	if (stat(path, &st) < 0)
		return errno;
	*bytes = (uint64_t)st.st_size;
	return 0;
}

static int do_readdir(const char *path, uint64_t *bytes)
{
	DIR *d = opendir(path);
	int err;

	if (!d)
		return errno;
	errno = 0;
	while (readdir(d))
		(*bytes)++;
	err = errno;
	closedir(d);
	return err;
}

static int open_step(struct run *r, const char *step, const char *path)
{
	int flags = strcmp(step, "create") == 0	  ? O_WRONLY | O_CREAT | O_TRUNC
		    : strcmp(step, "append") == 0 ? O_WRONLY | O_APPEND
						  : O_RDWR;

	if (r->fd >= 0)
		close(r->fd);
	r->fd = open(path, flags, 0644);
	return r->fd < 0 ? errno : 0;
}

static void need(int argc, int i, int n, const char *step)
{
	if (i + n >= argc) {
		fprintf(stderr, "qio: %s needs %d argument(s)\n", step, n);
		exit(2);
	}
}

/* Map and lock the whole file (left mapped until exit); bytes is its size. */
static int do_pin(const char *path, uint64_t *bytes)
{
	int fd = open(path, O_RDONLY), err = 0;
	struct stat st;
	void *p;

	if (fd < 0)
		return errno;
	if (fstat(fd, &st) < 0 || st.st_size == 0) {
		err = st.st_size ? errno : EINVAL;
	} else if ((p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0)) ==
		   MAP_FAILED) {
		err = errno;
	} else if (mlock(p, (size_t)st.st_size) < 0) {
		err = errno;
	}
	*bytes = (uint64_t)st.st_size;
	close(fd);
	return err;
}

static const struct {
	const char *name;
	int nargs;
} steps[] = {
    {"create", 1},    {"open", 1},  {"append", 1}, {"bs", 1},
    {"sleep", 1},     {"write", 2}, {"fill", 1},   {"fsync", 0},
    {"fdatasync", 0}, {"close", 0}, {"gen", 3},	   {"verify", 3},
    {"stat", 1},      {"readdir", 1}, {"pin", 1}, {"truncate", 1},
    {"hole", 1},      {"data", 1},
};

/* Run the step at argv[*i] (advancing *i past its arguments); false for a
 * step that reports nothing. */
static bool run_step(struct run *r, const char *step, char **argv, int argc, int *i,
		     int *err, uint64_t *bytes)
{
	int n = -1;

	for (size_t k = 0; k < sizeof(steps) / sizeof(steps[0]); k++)
		if (!strcmp(step, steps[k].name))
			n = steps[k].nargs;
	if (n < 0) {
		fprintf(stderr, "qio: unknown step '%s'\n", step);
		exit(2);
	}
	need(argc, *i, n, step);
	argv += *i + 1;
	*i += n;
	if (!strcmp(step, "create") || !strcmp(step, "open") || !strcmp(step, "append")) {
		*err = open_step(r, step, argv[0]);
	} else if (!strcmp(step, "bs")) {
		r->bs = parse_size(argv[0]);
		if (!r->bs || r->bs > MAX_BS)
			r->bs = DEFAULT_BS;
		return false;
	} else if (!strcmp(step, "sleep")) {
		usleep((useconds_t)strtoul(argv[0], NULL, 10) * 1000);
		return false;
	} else if (!strcmp(step, "write")) {
		*bytes =
		    do_write(r, parse_size(argv[0]), strtoull(argv[1], NULL, 0), err);
	} else if (!strcmp(step, "fill")) {
		*bytes = do_write(r, 0, strtoull(argv[0], NULL, 0), err);
	} else if (!strcmp(step, "fsync")) {
		*err = fsync(r->fd) < 0 ? errno : 0;
	} else if (!strcmp(step, "fdatasync")) {
		*err = fdatasync(r->fd) < 0 ? errno : 0;
	} else if (!strcmp(step, "close")) {
		*err = close(r->fd) < 0 ? errno : 0;
		r->fd = -1;
	} else if (!strcmp(step, "stat")) {
		*err = do_stat(argv[0], bytes);
	} else if (!strcmp(step, "readdir")) {
		*err = do_readdir(argv[0], bytes);
	} else if (!strcmp(step, "pin")) {
		*err = do_pin(argv[0], bytes);
	} else if (!strcmp(step, "truncate")) {
		*err = ftruncate(r->fd, (off_t)parse_size(argv[0])) < 0 ? errno : 0;
	} else if (!strcmp(step, "hole") || !strcmp(step, "data")) {
		off_t at = lseek(r->fd, (off_t)parse_size(argv[0]),
				 step[0] == 'h' ? SEEK_HOLE : SEEK_DATA);

		*err = at < 0 ? errno : 0;
		*bytes = at < 0 ? 0 : (uint64_t)at;
	} else { /* gen, verify */
		*bytes = parse_size(argv[1]);
		*err = (step[0] == 'g' ? do_gen : do_verify)(r, argv[0], *bytes,
							     strtoull(argv[2], NULL, 0));
	}
	return true;
}

int main(int argc, char *argv[])
{
	struct run r = {.fd = -1, .bs = DEFAULT_BS, .buf = malloc(MAX_BS)};

	if (!r.buf)
		return 2;
	for (int i = 1; i < argc; i++) {
		char step[64];
		const char *expect = strchr(argv[i], '=');
		size_t len = expect ? (size_t)(expect - argv[i]) : strlen(argv[i]);
		double t0 = now_s();
		uint64_t bytes = 0;
		int err = 0;

		snprintf(step, sizeof(step), "%.*s", (int)len, argv[i]);
		if (expect)
			expect++;
		if (run_step(&r, step, argv, argc, &i, &err, &bytes))
			report(&r, step, expect, err, bytes, t0);
	}
	free(r.buf);
	return r.failed;
}
