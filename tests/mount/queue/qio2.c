/*
 * qio2: a second syscall driver for the queue tests (qio.c is the first), for
 * what qio cannot say: open flags (O_DIRECT, O_SYNC, O_DSYNC), writes at any
 * offset, truncates, copy_file_range, and a truncate/read race. A list of steps
 * on one descriptor (plus a copy source), each reported as
 *
 *   STEP rc=ok|ERRNAME bytes=N secs=S
 *
 * A step may carry an expectation, `ftruncate=EIO` or `pwrite=ok`; qio2 exits
 * 1 when one is not met or a check fails (after running every step) and 2 on a
 * usage error. Data is qio's pattern (keyed by seed and file offset), so the
 * two drivers agree on what a range must hold.
 *
 * Steps:
 *   open PATH FLAGS         FLAGS: comma list of rdonly wronly rdwr creat trunc
 *                           excl append direct sync dsync
 *   src PATH                open PATH read-only as the copy source
 *   lower PATH DEV          from now on, each write call must have its bytes on
 *                           the block device DEV (loopN) when it returns: DEV's
 *                           written sectors grew by at least the bytes written
 *                           so far, and an O_DIRECT read of PATH (the lower
 *                           file) gives them back
 *   bs SIZE                 bytes per write call (default 1M)
 *   pwrite OFF LEN SEED     LEN bytes at OFF in calls of bs; stops at the first
 *                           failed or short call (a short call is rc=ok)
 *   ftruncate SIZE | fsync | fdatasync | close | sleep MS
 *   fstat                   bytes = the size
 *   copy OFF_IN OFF_OUT LEN one copy_file_range call, src to fd; bytes = its return
 *   copyall OFF_IN OFF_OUT LEN   calls until LEN bytes, a 0 return or an error;
 *                           if the first is refused (EOPNOTSUPP, ENOSYS, EXDEV),
 *                           read and write instead, as cp does
 *   limit                   bytes = the largest size ftruncate takes on fd
 *                           (binary search; fd is left at size 0)
 *   gen PATH SIZE SEED      create PATH holding the pattern (plain I/O)
 *   verify PATH OFF LEN SEED SRCOFF   PATH's [OFF, OFF+LEN) holds the pattern
 *                           of SEED as at offsets SRCOFF.. (what a copy from
 *                           SRCOFF puts there)
 *   zeros PATH OFF LEN      PATH's [OFF, OFF+LEN) is all zeros
 *   race LOWER SECS SIZE FLOOR   the truncate/read race (see its comment)
 * SIZE, OFF and LEN take K and M (binary) suffixes.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_BS (1024 * 1024)
#define MAX_BS (16 * 1024 * 1024)
#define ALIGN 4096
#define SECTOR 512

struct run {
	int fd, src;
	size_t bs;
	char *buf, *want;
	int failed;
	/* the lower check (step lower) */
	int lower_fd;
	char dev[64];
	uint64_t sect0, lower_bytes;
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

/* qio's pattern, byte for byte. */
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
	uint64_t v = strtoull(s, &end, 0);

	if (*end == 'K' || *end == 'k')
		v <<= 10;
	else if (*end == 'M' || *end == 'm')
		v <<= 20;
	else if (*end) {
		fprintf(stderr, "qio2: bad size '%s'\n", s);
		exit(2);
	}
	return v;
}

static const char *err_name(int e)
{
	const char *n = e ? strerrorname_np(e) : "ok";

	return n ? n : "E?";
}

static void report(struct run *r, const char *step, const char *expect, int err,
		   uint64_t bytes, double t0)
{
	printf("%s rc=%s bytes=%llu secs=%.3f\n", step, err_name(err),
	       (unsigned long long)bytes, now_s() - t0);
	fflush(stdout);
	if (expect && strcmp(expect, err_name(err)) != 0) {
		printf("qio2: %s returned %s, expected %s\n", step, err_name(err),
		       expect);
		r->failed = 1;
	}
}

static void *xalloc(size_t len)
{
	void *p;

	if (posix_memalign(&p, ALIGN, len) != 0) {
		fprintf(stderr, "qio2: out of memory\n");
		exit(2);
	}
	return p;
}

static int open_flags(const char *list)
{
	static const struct {
		const char *name;
		int flag;
	} names[] = {
	    {"rdonly", O_RDONLY}, {"wronly", O_WRONLY}, {"rdwr", O_RDWR},
	    {"creat", O_CREAT},	  {"trunc", O_TRUNC},	{"excl", O_EXCL},
	    {"append", O_APPEND}, {"direct", O_DIRECT}, {"sync", O_SYNC},
	    {"dsync", O_DSYNC},
	};
	char *copy = strdup(list), *save = NULL;
	int flags = 0;

	for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		size_t k;
		for (k = 0; k < sizeof(names) / sizeof(names[0]); k++)
			if (!strcmp(t, names[k].name))
				break;
		if (k == sizeof(names) / sizeof(names[0])) {
			fprintf(stderr, "qio2: unknown open flag '%s'\n", t);
			exit(2);
		}
		flags |= names[k].flag;
	}
	free(copy);
	return flags;
}

static uint64_t sectors_written(const char *dev)
{
	char path[128];
	unsigned long long f[7] = {0};
	FILE *st;

	snprintf(path, sizeof(path), "/sys/block/%s/stat", dev);
	st = fopen(path, "r");
	if (!st)
		return 0;
	if (fscanf(st, "%llu %llu %llu %llu %llu %llu %llu", &f[0], &f[1], &f[2], &f[3],
		   &f[4], &f[5], &f[6]) != 7)
		f[6] = 0;
	fclose(st);
	return f[6];
}

/* After a write call of n bytes at off returned: are they on the device? The
 * counter first (an O_DIRECT read would write back dirty pages itself). */
static void lower_check(struct run *r, off_t off, size_t n)
{
	uint64_t grew = (sectors_written(r->dev) - r->sect0) * SECTOR;
	ssize_t got;

	r->lower_bytes += n;
	if (grew < r->lower_bytes) {
		printf(
		    "qio2: write at %lld returned with %s written %llu bytes of the %llu "
		    "written so far\n",
		    (long long)off, r->dev, (unsigned long long)grew,
		    (unsigned long long)r->lower_bytes);
		r->failed = 1;
	}
	got = pread(r->lower_fd, r->want, n, off);
	if (got != (ssize_t)n || memcmp(r->want, r->buf, n) != 0) {
		printf("qio2: write at %lld returned before the lower file held it "
		       "(O_DIRECT read gave %zd bytes%s)\n",
		       (long long)off, got, got == (ssize_t)n ? ", other content" : "");
		r->failed = 1;
	}
}

/* LEN bytes at OFF in calls of r->bs; *err is the errno of a failed call. */
static uint64_t do_pwrite(struct run *r, off_t off, uint64_t len, uint64_t seed, int *err)
{
	uint64_t done = 0;

	*err = 0;
	while (done < len) {
		size_t n = len - done < r->bs ? (size_t)(len - done) : r->bs;
		off_t at = off + (off_t)done;
		ssize_t w;

		pattern(r->buf, n, at, seed);
		w = pwrite(r->fd, r->buf, n, at);
		if (w < 0) {
			*err = errno;
			break;
		}
		if (r->lower_fd >= 0)
			lower_check(r, at, (size_t)w);
		done += (uint64_t)w;
		if ((size_t)w < n)
			break;
	}
	return done;
}

/* What cp does when copy_file_range is refused: read and write. */
static int copy_rw(struct run *r, loff_t in, loff_t out, uint64_t len, uint64_t *bytes)
{
	while (*bytes < len) {
		size_t want = len - *bytes < r->bs ? (size_t)(len - *bytes) : r->bs;
		ssize_t n = pread(r->src, r->buf, want, in), w;

		if (n <= 0)
			return n < 0 ? errno : 0;
		w = pwrite(r->fd, r->buf, (size_t)n, out);
		if (w < 0)
			return errno;
		*bytes += (uint64_t)w;
		in += w;
		out += w;
	}
	return 0;
}

/* copy_file_range from src to fd; all: until len, a 0 return or an error.
 * copyall falls back to read and write where the first call is refused, as
 * cp does: the mount may answer so that the caller copies by itself. */
static int do_copy(struct run *r, uint64_t off_in, uint64_t off_out, uint64_t len,
		   bool all, uint64_t *bytes)
{
	loff_t in = (loff_t)off_in, out = (loff_t)off_out;

	*bytes = 0;
	do {
		ssize_t n =
		    copy_file_range(r->src, &in, r->fd, &out, (size_t)(len - *bytes), 0);
		if (n < 0 && all && *bytes == 0 &&
		    (errno == EOPNOTSUPP || errno == ENOSYS || errno == EXDEV)) {
			printf("qio2: copy_file_range: %s; copying with read and write\n",
			       err_name(errno));
			return copy_rw(r, in, out, len, bytes);
		}
		if (n < 0)
			return errno;
		if (n == 0)
			break;
		*bytes += (uint64_t)n;
	} while (all && *bytes < len);
	return 0;
}

static int do_limit(struct run *r, uint64_t *limit)
{
	uint64_t lo = 0, hi = (uint64_t)INT64_MAX; /* lo is taken; is hi? */

	if (ftruncate(r->fd, (off_t)hi) == 0) {
		lo = hi;
	} else {
		while (hi - lo > 1) {
			uint64_t mid = lo + (hi - lo) / 2;
			if (ftruncate(r->fd, (off_t)mid) == 0)
				lo = mid;
			else if (errno == EFBIG || errno == EINVAL)
				hi = mid;
			else
				return errno;
		}
	}
	*limit = lo;
	return ftruncate(r->fd, 0) < 0 ? errno : 0;
}

static int do_gen(struct run *r, const char *path, uint64_t len, uint64_t seed)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	int err = 0, saved = r->fd, saved_lower = r->lower_fd;
	uint64_t n;

	if (fd < 0)
		return errno;
	r->fd = fd;
	r->lower_fd = -1;
	n = do_pwrite(r, 0, len, seed, &err);
	if (n != len && !err)
		err = EIO;
	r->fd = saved;
	r->lower_fd = saved_lower;
	if (close(fd) < 0 && !err)
		err = errno;
	return err;
}

/* PATH's [off, off + len) against the pattern of seed at srcoff (seed -1: zeros). */
static int do_verify(struct run *r, const char *path, uint64_t off, uint64_t len,
		     int64_t seed, uint64_t srcoff)
{
	int fd = open(path, O_RDONLY);
	uint64_t done = 0;
	int err = 0;

	if (fd < 0)
		return errno;
	while (done < len) {
		size_t n = len - done < r->bs ? (size_t)(len - done) : r->bs;
		ssize_t got = pread(fd, r->buf, n, (off_t)(off + done));

		if (got <= 0) {
			printf("qio2: %s: short at %llu\n", path,
			       (unsigned long long)(off + done));
			err = got < 0 ? errno : ENODATA;
			break;
		}
		if (seed < 0)
			memset(r->want, 0, (size_t)got);
		else
			pattern(r->want, (size_t)got, (off_t)(srcoff + done),
				(uint64_t)seed);
		if (memcmp(r->want, r->buf, (size_t)got) != 0) {
			size_t i = 0;
			while (r->want[i] == r->buf[i])
				i++;
			printf("qio2: %s differs at %llu (in [%llu, %llu))\n", path,
			       (unsigned long long)(off + done + i),
			       (unsigned long long)off, (unsigned long long)(off + len));
			err = EILSEQ;
			break;
		}
		done += (uint64_t)got;
	}
	close(fd);
	return err;
}

/*
 * The truncate/read race. The file (fd, through the mount) holds old data on
 * the lower; then, through the mount, a 4K write at 0 makes it dirty, and
 * ftruncate(FLOOR) and ftruncate(SIZE) are queued. While the flusher applies
 * them, a reader thread reads [0, SIZE) through an O_DIRECT descriptor of the
 * mount, over and over: it must see the write's head below FLOOR and zeros
 * from there. Every second round uses FLOOR 0 instead.
 *
 * To widen the window, a second thread keeps an O_DIRECT read of the lower
 * file in flight meanwhile (ext2 holds the inode lock shared across a direct
 * read, and the medium is slow): the flusher's lower ftruncate waits for it
 * before it cuts the size, while the old bytes stay readable through the
 * page cache. Runs for SECS seconds.
 */
struct racer {
	pthread_mutex_t lock;
	bool armed, stop; /* under lock */
	int fd, lower_dfd;
	off_t size;
	char *buf, *expect, *dbuf;
	unsigned long reads, stale, lower_reads; /* under lock */
	off_t stale_at;
	unsigned char stale_byte;
};

static bool race_armed(struct racer *x, bool *stop)
{
	bool on;

	pthread_mutex_lock(&x->lock);
	on = x->armed;
	*stop = x->stop;
	pthread_mutex_unlock(&x->lock);
	return on;
}

static void *race_reader(void *arg)
{
	struct racer *x = arg;

	for (;;) {
		pthread_mutex_lock(&x->lock);
		if (x->stop) {
			pthread_mutex_unlock(&x->lock);
			return NULL;
		}
		if (x->armed) {
			ssize_t n = pread(x->fd, x->buf, (size_t)x->size, 0);
			x->reads++;
			for (ssize_t i = 0; i < n; i++) {
				if (x->buf[i] != x->expect[i]) {
					if (!x->stale++) {
						x->stale_at = i;
						x->stale_byte = (unsigned char)x->buf[i];
					}
					break;
				}
			}
		}
		pthread_mutex_unlock(&x->lock);
		/* A gap, so the flusher (read_grace=0) gets to start its truncate. */
		usleep(500);
	}
}

static void *race_blocker(void *arg)
{
	struct racer *x = arg;
	bool stop = false;

	while (!stop) {
		if (!race_armed(x, &stop)) {
			usleep(200);
			continue;
		}
		if (pread(x->lower_dfd, x->dbuf, 64 * 1024, 0) >= 0) {
			pthread_mutex_lock(&x->lock);
			x->lower_reads++;
			pthread_mutex_unlock(&x->lock);
		}
	}
	return NULL;
}

static void race_arm(struct racer *x, bool on)
{
	pthread_mutex_lock(&x->lock); /* waits out a read in progress */
	x->armed = on;
	pthread_mutex_unlock(&x->lock);
}

static off_t fd_size(int fd)
{
	struct stat st;

	return fstat(fd, &st) == 0 ? st.st_size : -1;
}

/* One round; returns an errno for a failed syscall, EILSEQ for wrong bytes
 * after it. *queued: the truncates waited in the queue (the lower still had
 * the old size after them). */
static int race_round(struct run *r, struct racer *x, int lfd, off_t floor, bool *queued,
		      unsigned long *stale)
{
	off_t size = x->size, old = size + 64 * 1024;
	off_t head = floor < ALIGN ? floor : ALIGN;
	double t0;
	int err = 0;
	uint64_t n;

	r->bs = DEFAULT_BS;
	n = do_pwrite(r, 0, (uint64_t)old, 7, &err);
	if (err || n != (uint64_t)old)
		return err ? err : EIO;
	if (fsync(r->fd) < 0)
		return errno;
	if (pread(lfd, r->want, (size_t)old, 0) < 0) /* the old bytes cached */
		return errno;
	memset(x->expect, 0, (size_t)size);
	pattern(x->expect, (size_t)head, 0, 8);
	pattern(r->buf, ALIGN, 0, 8);
	if (pwrite(r->fd, r->buf, ALIGN, 0) != ALIGN)
		return errno ? errno : EIO;
	if (ftruncate(r->fd, floor) < 0 || ftruncate(r->fd, size) < 0)
		return errno;
	*queued = fd_size(lfd) == old;
	pthread_mutex_lock(&x->lock);
	x->stale = 0;
	pthread_mutex_unlock(&x->lock);
	race_arm(x, true);
	t0 = now_s();
	while (fd_size(lfd) != size && now_s() - t0 < 3)
		usleep(200);
	usleep(20 * 1000);
	race_arm(x, false);
	if (fsync(r->fd) < 0)
		return errno;
	*stale = x->stale;
	if (x->stale)
		printf("qio2: race: floor %lld: read 0x%02x at %lld, not 0x%02x\n",
		       (long long)floor, x->stale_byte, (long long)x->stale_at,
		       (unsigned char)x->expect[x->stale_at]);
	/* What the round leaves: the write's head below the floor, zeros above. */
	if (pread(x->fd, x->buf, (size_t)size, 0) != size ||
	    memcmp(x->buf, x->expect, (size_t)size) != 0) {
		printf("qio2: race: floor %lld: the file is wrong after the round\n",
		       (long long)floor);
		return EILSEQ;
	}
	return 0;
}

static int race_step(struct run *r, char **argv, uint64_t *bytes)
{
	const char *lower = argv[0];
	double secs = strtod(argv[1], NULL), t0 = now_s();
	off_t floor = (off_t)parse_size(argv[3]);
	struct racer x = {.lock = PTHREAD_MUTEX_INITIALIZER, .fd = -1, .lower_dfd = -1};
	unsigned long rounds[2] = {0}, queued[2] = {0}, bad[2] = {0};
	char path[64];
	pthread_t th[2];
	int lfd, err = 0, nth = 0;

	x.size = (off_t)parse_size(argv[2]);
	if (floor <= 0 || floor >= ALIGN || x.size <= ALIGN ||
	    x.size + 64 * 1024 > MAX_BS) {
		fprintf(stderr, "qio2: race needs 0 < FLOOR < 4K < SIZE < 16M - 64K\n");
		exit(2);
	}
	lfd = open(lower, O_RDONLY);
	x.lower_dfd = open(lower, O_RDONLY | O_DIRECT);
	snprintf(path, sizeof(path), "/proc/self/fd/%d", r->fd);
	x.fd = open(path, O_RDONLY | O_DIRECT);
	if (lfd < 0 || x.fd < 0 || x.lower_dfd < 0) {
		err = errno;
		goto out;
	}
	x.buf = xalloc((size_t)x.size);
	x.expect = xalloc((size_t)x.size);
	x.dbuf = xalloc(64 * 1024);
	if (pthread_create(&th[nth], NULL, race_reader, &x) == 0)
		nth++;
	if (pthread_create(&th[nth], NULL, race_blocker, &x) == 0)
		nth++;
	for (unsigned i = 0; nth == 2 && now_s() - t0 < secs && !err; i++) {
		unsigned k = i & 1;
		bool q = false;
		unsigned long stale = 0;

		err = race_round(r, &x, lfd, k ? 0 : floor, &q, &stale);
		rounds[k]++;
		queued[k] += q;
		bad[k] += stale != 0;
	}
	pthread_mutex_lock(&x.lock);
	x.stop = true;
	pthread_mutex_unlock(&x.lock);
	for (int i = 0; i < nth; i++)
		pthread_join(th[i], NULL);
	if (nth < 2 && !err)
		err = EAGAIN;
	printf(
	    "race: floor %lld: %lu rounds, %lu with the truncate queued, %lu with stale "
	    "reads; floor 0: %lu rounds, %lu queued, %lu stale; %lu reads, %lu of the "
	    "lower\n",
	    (long long)floor, rounds[0], queued[0], bad[0], rounds[1], queued[1], bad[1],
	    x.reads, x.lower_reads);
	if (!err && (bad[0] || bad[1]))
		err = EILSEQ;
	*bytes = rounds[0] + rounds[1];
out:
	free(x.buf);
	free(x.expect);
	free(x.dbuf);
	if (x.fd >= 0)
		close(x.fd);
	if (x.lower_dfd >= 0)
		close(x.lower_dfd);
	if (lfd >= 0)
		close(lfd);
	return err;
}

static int do_lower(struct run *r, const char *path, const char *dev)
{
	const char *base = strrchr(dev, '/');

	snprintf(r->dev, sizeof(r->dev), "%s", base ? base + 1 : dev);
	if (r->lower_fd >= 0)
		close(r->lower_fd);
	r->lower_fd = open(path, O_RDONLY | O_DIRECT);
	if (r->lower_fd < 0)
		return errno;
	r->sect0 = sectors_written(r->dev);
	r->lower_bytes = 0;
	return r->sect0 ? 0 : ENODEV;
}

static void need(int argc, int i, int n, const char *step)
{
	if (i + n >= argc) {
		fprintf(stderr, "qio2: %s needs %d argument(s)\n", step, n);
		exit(2);
	}
}

static const struct {
	const char *name;
	int nargs;
} steps[] = {
    {"open", 2},      {"src", 1},   {"lower", 2},     {"bs", 1},    {"pwrite", 3},
    {"ftruncate", 1}, {"fsync", 0}, {"fdatasync", 0}, {"close", 0}, {"sleep", 1},
    {"fstat", 0},     {"copy", 3},  {"copyall", 3},   {"limit", 0}, {"gen", 3},
    {"verify", 5},    {"zeros", 3}, {"race", 4},
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
		fprintf(stderr, "qio2: unknown step '%s'\n", step);
		exit(2);
	}
	need(argc, *i, n, step);
	argv += *i + 1;
	*i += n;
	if (!strcmp(step, "open")) {
		if (r->fd >= 0)
			close(r->fd);
		r->fd = open(argv[0], open_flags(argv[1]), 0644);
		*err = r->fd < 0 ? errno : 0;
	} else if (!strcmp(step, "src")) {
		if (r->src >= 0)
			close(r->src);
		r->src = open(argv[0], O_RDONLY);
		*err = r->src < 0 ? errno : 0;
	} else if (!strcmp(step, "lower")) {
		*err = do_lower(r, argv[0], argv[1]);
	} else if (!strcmp(step, "bs")) {
		r->bs = parse_size(argv[0]);
		if (!r->bs || r->bs > MAX_BS)
			r->bs = DEFAULT_BS;
		return false;
	} else if (!strcmp(step, "sleep")) {
		usleep((useconds_t)strtoul(argv[0], NULL, 10) * 1000);
		return false;
	} else if (!strcmp(step, "pwrite")) {
		*bytes = do_pwrite(r, (off_t)parse_size(argv[0]), parse_size(argv[1]),
				   strtoull(argv[2], NULL, 0), err);
	} else if (!strcmp(step, "ftruncate")) {
		*err = ftruncate(r->fd, (off_t)parse_size(argv[0])) < 0 ? errno : 0;
	} else if (!strcmp(step, "fsync")) {
		*err = fsync(r->fd) < 0 ? errno : 0;
	} else if (!strcmp(step, "fdatasync")) {
		*err = fdatasync(r->fd) < 0 ? errno : 0;
	} else if (!strcmp(step, "close")) {
		*err = close(r->fd) < 0 ? errno : 0;
		r->fd = -1;
	} else if (!strcmp(step, "fstat")) {
		off_t s = fd_size(r->fd);
		*err = s < 0 ? errno : 0;
		*bytes = s < 0 ? 0 : (uint64_t)s;
	} else if (!strcmp(step, "copy") || !strcmp(step, "copyall")) {
		*err = do_copy(r, parse_size(argv[0]), parse_size(argv[1]),
			       parse_size(argv[2]), step[4] == 'a', bytes);
	} else if (!strcmp(step, "limit")) {
		*err = do_limit(r, bytes);
	} else if (!strcmp(step, "gen")) {
		*bytes = parse_size(argv[1]);
		*err = do_gen(r, argv[0], *bytes, strtoull(argv[2], NULL, 0));
	} else if (!strcmp(step, "verify")) {
		*bytes = parse_size(argv[2]);
		*err =
		    do_verify(r, argv[0], parse_size(argv[1]), *bytes,
			      (int64_t)strtoull(argv[3], NULL, 0), parse_size(argv[4]));
	} else if (!strcmp(step, "zeros")) {
		*bytes = parse_size(argv[2]);
		*err = do_verify(r, argv[0], parse_size(argv[1]), *bytes, -1, 0);
	} else {
		*err = race_step(r, argv, bytes);
	}
	return true;
}

int main(int argc, char *argv[])
{
	struct run r = {.fd = -1, .src = -1, .lower_fd = -1, .bs = DEFAULT_BS};

	r.buf = xalloc(MAX_BS);
	r.want = xalloc(MAX_BS);
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
	free(r.want);
	return r.failed;
}
