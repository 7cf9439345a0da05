/*
 * smbio: the small I/O probes of the benchmark harness (tests/bench/run).
 *
 * Each subcommand does one measured piece of I/O and prints its figures as
 * key=value pairs on one line, so the harness can read them with `read`.
 * Times are taken here, around the I/O itself, not around process start.
 *
 *   smbio fill FILE MB                 write MB MiB of incompressible data, fsync
 *   smbio write FILE MB                the same, timed: seconds= (write + fsync)
 *   smbio fsync4k FILE N GAP_MS        N x (4 KiB pwrite + fsync): p50/max ms
 *   smbio randread FILE N BLOCKS BSIZE THREADS
 *                                      N random reads of BLOCKS x BSIZE bytes in
 *                                      total, shared by THREADS: seconds=
 *   smbio latread FILE SIZE N BUDGET_S [direct] [opened] [within=BYTES]
 *                                      up to N random reads of SIZE bytes, one
 *                                      at a time, no block twice, for at most
 *                                      BUDGET_S seconds: p50/p99/max ms;
 *                                      opened: the open is not timed (open_ms=);
 *                                      within: offsets below BYTES only
 *   smbio seqread FILE                 read it all (1 MiB reads): seconds=, mb_s=
 *   smbio evict FILE                   drop the file's pages from the page cache
 *   smbio devread DEV MB               O_DIRECT sequential read of MB MiB from
 *                                      a block device, like hdparm -t: mb_s=
 *
 * latread is the one probe that may meet a read stuck for minutes behind a
 * slow device's write queue: a watchdog prints what it has (the stuck read
 * counted as censored at its current age) and exits when the budget plus a
 * grace period is spent, so the harness never waits on it.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MIB (1024 * 1024)
#define DIRECT_ALIGN 4096
#define LATREAD_GRACE_S 2.0

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void die(const char *what, const char *arg)
{
	fprintf(stderr, "smbio: %s %s: %s\n", what, arg ? arg : "", strerror(errno));
	exit(1);
}

static void *xalloc_aligned(size_t len)
{
	void *p;

	if (posix_memalign(&p, DIRECT_ALIGN, len))
		die("out of memory", NULL);
	return p;
}

/* xorshift: fast, and the data is not compressible or zero-detectable. */
static uint64_t rnd_next(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void fill_random(char *buf, size_t len, uint64_t seed)
{
	uint64_t s = seed | 1;

	for (size_t i = 0; i + 8 <= len; i += 8) {
		uint64_t v = rnd_next(&s);
		memcpy(buf + i, &v, 8);
	}
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double pct(double *v, int n, double p)
{
	int i;

	if (n == 0)
		return 0;
	i = (int)(p * (n - 1) + 0.5);
	return v[i];
}

static int do_write(const char *path, long mb, int timed)
{
	char *buf = xalloc_aligned(MIB);
	double t0 = now_s();
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	if (fd < 0)
		die("open", path);
	for (long i = 0; i < mb; i++) {
		fill_random(buf, MIB, 0x9e3779b97f4a7c15ULL + i);
		if (write(fd, buf, MIB) != MIB)
			die("write", path);
	}
	if (fsync(fd))
		die("fsync", path);
	close(fd);
	if (timed)
		printf("seconds=%.4f mb=%ld\n", now_s() - t0, mb);
	free(buf);
	return 0;
}

static int do_fsync4k(const char *path, int n, int gap_ms)
{
	char *buf = xalloc_aligned(4096);
	double *lat = calloc(n, sizeof(*lat));
	int fd = open(path, O_WRONLY | O_CREAT, 0644);

	if (fd < 0 || !lat)
		die("open", path);
	fill_random(buf, 4096, 42);
	for (int i = 0; i < n; i++) {
		double t0 = now_s();

		if (pwrite(fd, buf, 4096, (off_t)i * 4096) != 4096)
			die("pwrite", path);
		if (fsync(fd))
			die("fsync", path);
		lat[i] = (now_s() - t0) * 1000;
		if (gap_ms)
			usleep(gap_ms * 1000);
	}
	close(fd);
	qsort(lat, n, sizeof(*lat), cmp_double);
	printf("p50_ms=%.3f max_ms=%.3f n=%d\n", pct(lat, n, 0.5), lat[n - 1], n);
	free(lat);
	free(buf);
	return 0;
}

struct rr_job {
	int fd;
	long reads;
	size_t len;
	off_t span; /* number of len-aligned slots in the file */
	uint64_t seed;
};

static void *rr_thread(void *arg)
{
	struct rr_job *j = arg;
	char *buf = xalloc_aligned(j->len);

	for (long i = 0; i < j->reads; i++) {
		off_t off = (off_t)(rnd_next(&j->seed) % j->span) * j->len;

		if (pread(j->fd, buf, j->len, off) < 0)
			die("pread", NULL);
	}
	free(buf);
	return NULL;
}

static int do_randread(const char *path, long n, long blocks, long bsize, int threads)
{
	struct rr_job *jobs = calloc(threads, sizeof(*jobs));
	pthread_t *tid = calloc(threads, sizeof(*tid));
	size_t len = blocks * bsize;
	struct stat st;
	double t0;
	int fd = open(path, O_RDONLY);

	if (fd < 0 || fstat(fd, &st) || !jobs || !tid)
		die("open", path);
	if (st.st_size < (off_t)len)
		die("file too small", path);
	posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
	t0 = now_s();
	for (int t = 0; t < threads; t++) {
		jobs[t] = (struct rr_job){ fd, n / threads + (t < n % threads), len,
					   st.st_size / len, 0x12345678ULL * (t + 1) };
		pthread_create(&tid[t], NULL, rr_thread, &jobs[t]);
	}
	for (int t = 0; t < threads; t++)
		pthread_join(tid[t], NULL);
	printf("seconds=%.4f reads=%ld bytes=%zu threads=%d\n", now_s() - t0, n, len, threads);
	close(fd);
	free(jobs);
	free(tid);
	return 0;
}

/* latread state, shared with the watchdog; under lr_lock. */
static pthread_mutex_t lr_lock = PTHREAD_MUTEX_INITIALIZER;
static double *lr_lat;
static int lr_done;
static double lr_inflight_since; /* 0 when no read is in flight */

static void latread_report(int censored_extra)
{
	int n = lr_done;
	double *v = calloc(n + 1, sizeof(*v));

	memcpy(v, lr_lat, n * sizeof(*v));
	if (censored_extra && lr_inflight_since > 0)
		v[n++] = (now_s() - lr_inflight_since) * 1000;
	qsort(v, n, sizeof(*v), cmp_double);
	printf("p50_ms=%.3f p99_ms=%.3f max_ms=%.3f n=%d censored=%d\n", pct(v, n, 0.5),
	       pct(v, n, 0.99), n ? v[n - 1] : 0.0, n, censored_extra && lr_inflight_since > 0);
	fflush(stdout);
	free(v);
}

static void *latread_watchdog(void *arg)
{
	double deadline = *(double *)arg;

	while (now_s() < deadline)
		usleep(20000);
	pthread_mutex_lock(&lr_lock);
	latread_report(1);
	_exit(0);
}

struct latread_opts {
	int direct;      /* O_DIRECT */
	int opened;      /* open (and stat) untimed: the reads alone are timed */
	off_t within;    /* offsets only below this (0: the whole file) */
};

/* Offsets are drawn without replacement (a shuffled list of the file's
 * SIZE-blocks), so no read can hit a block an earlier one brought into a
 * cache: every read is a read of the medium. */
static int do_latread(const char *path, long size, int n, double budget,
		      const struct latread_opts *o)
{
	char *buf = xalloc_aligned(size);
	double t0 = now_s(), deadline = t0 + budget + LATREAD_GRACE_S;
	uint64_t seed = 0xabcdef12345ULL ^ (uint64_t)getpid();
	off_t span, nblocks, *order;
	pthread_t wd;
	struct stat st;
	int fd = -1;

	lr_lat = calloc(n, sizeof(*lr_lat));
	if (!lr_lat)
		die("out of memory", NULL);
	if (o->opened) {
		double o0 = now_s();

		fd = open(path, O_RDONLY | (o->direct ? O_DIRECT : 0));
		if (fd < 0 || fstat(fd, &st))
			die("open", path);
		printf("open_ms=%.3f ", (now_s() - o0) * 1000);
		t0 = now_s();
		deadline = t0 + budget + LATREAD_GRACE_S;
	}
	/* Otherwise opening may itself wait behind the writes (the inode is
	 * read from the medium): it counts as part of the first read. */
	lr_inflight_since = t0;
	pthread_create(&wd, NULL, latread_watchdog, &deadline);
	if (!o->opened) {
		fd = open(path, O_RDONLY | (o->direct ? O_DIRECT : 0));
		if (fd < 0 || fstat(fd, &st))
			die("open", path);
	}
	span = o->within && o->within < st.st_size ? o->within : st.st_size;
	nblocks = span / size;
	if (nblocks < 1)
		die("file too small", path);
	order = calloc(nblocks, sizeof(*order));
	if (!order)
		die("out of memory", NULL);
	for (off_t b = 0; b < nblocks; b++)
		order[b] = b;
	posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
	for (int i = 0; i < n && now_s() - t0 < budget; i++) {
		off_t k = i % nblocks, j, off;
		double r0 = i ? now_s() : t0;

		/* Fisher-Yates, one step per read; a new round reshuffles. */
		j = k + (off_t)(rnd_next(&seed) % (uint64_t)(nblocks - k));
		off = order[j];
		order[j] = order[k];
		order[k] = off;
		off *= size;
		pthread_mutex_lock(&lr_lock);
		lr_inflight_since = r0;
		pthread_mutex_unlock(&lr_lock);
		if (pread(fd, buf, size, off) < 0)
			die("pread", path);
		pthread_mutex_lock(&lr_lock);
		lr_lat[lr_done++] = (now_s() - r0) * 1000;
		lr_inflight_since = 0;
		pthread_mutex_unlock(&lr_lock);
	}
	pthread_mutex_lock(&lr_lock);
	latread_report(0);
	_exit(0);
}

static int do_seqread(const char *path, int direct)
{
	char *buf = xalloc_aligned(MIB);
	int fd = open(path, O_RDONLY | (direct ? O_DIRECT : 0));
	long long total = 0;
	double t0 = now_s(), dt;
	ssize_t r;

	if (fd < 0)
		die("open", path);
	while ((r = read(fd, buf, MIB)) > 0)
		total += r;
	if (r < 0)
		die("read", path);
	dt = now_s() - t0;
	printf("seconds=%.4f mb_s=%.3f bytes=%lld\n", dt, total / 1e6 / dt, total);
	close(fd);
	free(buf);
	return 0;
}

static int do_devread(const char *dev, long mb)
{
	char *buf = xalloc_aligned(2 * MIB);
	int fd = open(dev, O_RDONLY | O_DIRECT);
	long long total = 0, want = (long long)mb * MIB;
	double t0 = now_s(), dt;
	ssize_t r;

	if (fd < 0)
		die("open", dev);
	while (total < want && (r = read(fd, buf, 2 * MIB)) > 0)
		total += r;
	dt = now_s() - t0;
	printf("seconds=%.4f mb_s=%.3f bytes=%lld\n", dt, total / 1e6 / dt, total);
	close(fd);
	free(buf);
	return 0;
}

/* Drops the file's clean pages from the page cache (its metadata stays). */
static int do_evict(const char *path)
{
	int fd = open(path, O_RDONLY), e;

	if (fd < 0)
		die("open", path);
	/* No fdatasync: it would flush the device's cache, and wait for every
	 * write queued there. The file is not written while probes run. */
	e = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	if (e) {
		errno = e;
		die("posix_fadvise", path);
	}
	close(fd);
	return 0;
}

static void usage(void)
{
	fputs("usage: smbio fill|write FILE MB\n"
	      "       smbio fsync4k FILE N GAP_MS\n"
	      "       smbio randread FILE N BLOCKS BSIZE THREADS\n"
	      "       smbio latread FILE SIZE N BUDGET_S [direct] [opened] [within=BYTES]\n"
	      "       smbio seqread FILE [direct]\n"
	      "       smbio devread DEV MB\n"
	      "       smbio evict FILE\n",
	      stderr);
	exit(2);
}

int main(int argc, char **argv)
{
	const char *cmd = argc > 1 ? argv[1] : "";

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!strcmp(cmd, "evict") && argc == 3)
		return do_evict(argv[2]);
	if (!strcmp(cmd, "fill") && argc == 4)
		return do_write(argv[2], atol(argv[3]), 0);
	if (!strcmp(cmd, "write") && argc == 4)
		return do_write(argv[2], atol(argv[3]), 1);
	if (!strcmp(cmd, "fsync4k") && argc == 5)
		return do_fsync4k(argv[2], atoi(argv[3]), atoi(argv[4]));
	if (!strcmp(cmd, "randread") && argc == 7)
		return do_randread(argv[2], atol(argv[3]), atol(argv[4]), atol(argv[5]),
				   atoi(argv[6]));
	if (!strcmp(cmd, "latread") && argc >= 6) {
		struct latread_opts o = {0};

		for (int i = 6; i < argc; i++) {
			if (!strcmp(argv[i], "direct"))
				o.direct = 1;
			else if (!strcmp(argv[i], "opened"))
				o.opened = 1;
			else if (!strncmp(argv[i], "within=", 7))
				o.within = atoll(argv[i] + 7);
			else {
				usage();
				return 2;
			}
		}
		return do_latread(argv[2], atol(argv[3]), atoi(argv[4]), atof(argv[5]), &o);
	}
	if (!strcmp(cmd, "seqread") && (argc == 3 || argc == 4))
		return do_seqread(argv[2], argc == 4 && !strcmp(argv[3], "direct"));
	if (!strcmp(cmd, "devread") && argc == 4)
		return do_devread(argv[2], atol(argv[3]));
	usage();
	return 2;
}
