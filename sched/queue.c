/*
 * DESIGN: the write-behind queue and the paced flusher pool of one mount.
 *
 * Data path. wq_write copies the caller's data into the file's extent map and
 * returns; the flushers write it to the lower file in chunks, each followed by
 * sync_file_range(WAIT_BEFORE|WRITE|WAIT_AFTER), so the kernel never holds more
 * than about one chunk of the medium's dirty data. Chunk size comes from the
 * pacer (bandwidth x latency=), a rate= token bucket spaces chunks, and the read
 * gate holds flushers back while reads are in flight and for read_grace= after.
 *
 * Per-file order. A file has at most one chunk in flight. A truncate clips the
 * queued extents at once and is recorded as (trunc_floor = lowest size since the
 * last flush, trunc_size = the last size); the flusher applies it before the
 * file's next chunk. Extents queued before a truncate all lie below it, so
 * applying the truncate first gives the same bytes as applying it in order.
 * Until it is applied, lower data at or beyond trunc_floor reads as zeros.
 *
 * Read-your-writes. wq_read reads the lower file without the lock, then lays
 * the queued extents over it under the lock. A chunk completing in between
 * would have left stale lower bytes uncovered, so each completion bumps
 * f->seq and the read retries when it changed.
 *
 * Space. Queued bytes are reserved against the lower free space (rounded to
 * blocks, plus indirect-block overhead). When a write does not fit, the queue
 * drains, free space is read again, and a write that still does not fit is
 * written through to the lower file so that ENOSPC (or a short write) reaches
 * the writer: acknowledged data is never lost to a full medium.
 *
 * Errors. A failed chunk stays queued; the file's error is sticky, returned by
 * its next write, flush-wait and close, and the chunk is retried with backoff.
 * A successful retry clears it. At exit, data that still fails after
 * DRAIN_GIVEUP_FAILURES tries is reported in the log, path and bytes.
 *
 * Metadata. Chunks allocate blocks, so the lower filesystem dirties bitmaps,
 * indirect blocks and inodes; left to the kernel they are written ~30 s later,
 * at any moment, a burst of seeks in front of whatever read comes then. So the
 * flushers write them: first the dirty pages of the medium's block device
 * (where bitmaps and indirect blocks live), slice by slice with
 * sync_file_range, holding back for reads between slices, then a syncfs for
 * what is left (inodes, superblock), which is then short. Never started while
 * reads are in flight.
 *
 * Threads and locks. One mutex, q->lock, guards everything in struct wq and
 * struct wq_file except what is marked immutable. Op handler threads call the
 * wq_* functions; flusher threads run flusher_main. No I/O is done under the
 * lock, except the rare write-through at a full medium and the futimens that
 * restores a clean file's mtime. The hooks are called without the lock.
 */
#include "queue.h"
#include "extents.h"
#include "log.h"
#include "pacer.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define FLUSH_IOV_MAX 64
#define DIRECT_ALIGN 4096
#define DFD_UNTRIED (-2)
#define FD_HEADROOM 2048	 /* fds kept for everything but dirty files */
#define DIRTY_FILES_MIN 16
#define RETRY_MIN_NS (500 * NSEC_PER_MSEC)
#define RETRY_MAX_NS (30 * NSEC_PER_SEC)
/* Metadata (bitmaps, inode tables, indirect blocks) sits elsewhere on the
 * medium: each flush of it costs a few seeks (half a second on a DVD-RAM:
 * group descriptors, bitmaps, inode table and back), and the same blocks are
 * written again each time. So the interval grows with what a flush costs, to
 * keep it at about 1/SYNCFS_SHARE_DIV of the medium's time (at 1/40, a
 * DVD-RAM's writer lost 3% to it), within [MIN, MAX]. Reads do not wait for
 * a whole flush (it goes in slices), so it can be long; ext2
 * dirties a few blocks per second of flushing, so even 30 s stays well under
 * a megabyte, and the kernel would write it at 30 s anyway (dirty_expire). */
#define SYNCFS_INTERVAL_MIN_NS (10 * NSEC_PER_SEC)
#define SYNCFS_INTERVAL_MAX_NS (30 * NSEC_PER_SEC)
#define SYNCFS_SHARE_DIV 100
/* When the queue runs empty, the metadata is flushed once it has stayed
 * empty this long: a writer of many small files empties it again and again. */
#define SYNCFS_IDLE_NS NSEC_PER_SEC
/* The block device is swept in slices of at least this, and at most this many. */
#define SWEEP_SLICE_MIN (64ull << 10)
#define SWEEP_SLICES_MAX 65536
#define IDLE_WAIT_NS NSEC_PER_SEC
#define DRAIN_LOG_INTERVAL_NS (5 * NSEC_PER_SEC)
#define DRAIN_GIVEUP_FAILURES 3
#define READ_RETRIES 4
#define META_BLOCKS_PER_FILE 3 /* inode, bitmap, indirect block */

struct wq_file {
	void *owner;	/* immutable */
	int fd;		/* lower fd while dirty (a dup of the first writer's), else -1 */
	int dfd;	/* O_DIRECT fd while dirty; DFD_UNTRIED, or -1 if refused */
	struct extmap map;
	off_t size;	  /* logical size; valid while dirty */
	bool dirty;	  /* in q->dirty, owner held */
	GList link;	  /* in q->dirty */
	bool has_trunc;
	off_t trunc_floor, trunc_size;
	bool in_flight;
	off_t cursor;	/* where the next chunk starts looking */
	uint64_t seq;	/* bumped when queued data reaches the lower file */
	int error;	/* sticky, -errno */
	unsigned failures;	/* consecutive; reset by a success */
	uint64_t fail_count;	/* all failures ever: lets fsync wait for one retry */
	int64_t retry_at_ns;
	unsigned urgent; /* fsync waiters: flush this file first */
	bool times_set;	 /* restore times once clean */
	struct timespec times[2];
};

struct wq {
	pthread_mutex_t lock;
	pthread_cond_t space; /* signalled when queued bytes drop */
	pthread_cond_t work;  /* signalled when there is something to flush */
	pthread_cond_t done;  /* broadcast when a chunk ends (ok or not) */
	struct sched_opts opts; /* immutable copy (strings not owned) */
	struct wq_hooks hooks;	/* immutable */
	int root_fd;		/* immutable */
	int sync_fd;		/* immutable: a readable fd of the lower root, for syncfs (-1: none) */
	int bdev_fd;		/* immutable: the lower's block device (-1: none) */
	uint64_t bdev_size;	/* immutable */
	GQueue dirty;		/* files with work; the head flushes first */
	uint64_t queued;	/* bytes in all extent maps */
	uint64_t avail;		/* lower free bytes at the last statvfs */
	uint64_t bsize;		/* lower block size */
	struct pacer pacer;
	struct readgate gate;
	unsigned next_flight;
	int64_t last_syncfs_ns;
	int64_t syncfs_interval_ns; /* from the last syncfs's cost */
	bool meta_dirty;	/* the medium was written since the last syncfs */
	/* Where the last chunk left the head: the next one seeks unless it
	 * continues it with nothing (read, syncfs, truncate) in between. */
	const struct wq_file *last_file; /* only compared, never followed */
	off_t last_end;
	int64_t last_flush_end_ns; /* the end of the last chunk or truncate */
	bool head_moved;
	int syncfs_errno;	/* the last syncfs error logged (0: none) */
	bool stopping;
	pthread_t *threads;
	unsigned nthreads;
	GPtrArray *to_release; /* owners to release once the lock is dropped */
	uint64_t flushed_bytes, chunks;
	unsigned max_dirty; /* immutable: each dirty file holds up to two fds */
};

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * NSEC_PER_SEC + ts.tv_nsec;
}

static void deadline_in(struct timespec *ts, int64_t ns)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ns += ts->tv_nsec;
	ts->tv_sec += ns / NSEC_PER_SEC;
	ts->tv_nsec = ns % NSEC_PER_SEC;
}

static void timed_wait(pthread_cond_t *c, pthread_mutex_t *m, int64_t ns)
{
	struct timespec ts;

	deadline_in(&ts, ns);
	pthread_cond_timedwait(c, m, &ts);
}

static void cond_init_monotonic(pthread_cond_t *c)
{
	pthread_condattr_t a;

	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(c, &a);
	pthread_condattr_destroy(&a);
}

static const char *file_path(const struct wq_file *f, char *buf, size_t size)
{
	char proc[32];
	ssize_t n;

	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", f->fd);
	n = readlink(proc, buf, size - 1);
	if (n < 0)
		return "(unknown path)";
	buf[n] = '\0';
	return buf;
}

/* Called with the lock held: refresh the free-space figure. */
static void refresh_avail(struct wq *q)
{
	struct statvfs sv;

	if (fstatvfs(q->root_fd, &sv) == 0) {
		q->bsize = sv.f_frsize ? sv.f_frsize : sv.f_bsize;
		q->avail = (uint64_t)sv.f_bavail * q->bsize;
	}
}

/* Space the queue must keep free on the lower filesystem for `queued` bytes. */
static uint64_t reservation(const struct wq *q, uint64_t queued, unsigned files)
{
	uint64_t bs = q->bsize ? q->bsize : 4096;
	uint64_t data = (queued + bs - 1) / bs * bs;
	/* ext2-style indirect blocks: one pointer (4 bytes) per data block. */
	uint64_t meta = data / bs * 4 + (uint64_t)files * META_BLOCKS_PER_FILE * bs;

	return data + meta;
}

static unsigned max_dirty_files(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
		return 4096;
	if (rl.rlim_cur < FD_HEADROOM + 4 * DIRTY_FILES_MIN)
		return DIRTY_FILES_MIN;
	return (unsigned)(rl.rlim_cur - FD_HEADROOM) / 4;
}

/* /dev/block/M:m where udev made it, else /dev/DEVNAME from sysfs; checked to
 * be that device. -1 when there is none. */
static int open_dev_node(dev_t dev)
{
	char path[PATH_MAX], line[256];
	struct stat st;
	FILE *f;
	int fd;

	snprintf(path, sizeof(path), "/dev/block/%u:%u", major(dev), minor(dev));
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		snprintf(path, sizeof(path), "/sys/dev/block/%u:%u/uevent", major(dev), minor(dev));
		f = fopen(path, "re");
		if (!f)
			return -1;
		path[0] = '\0';
		while (fgets(line, sizeof(line), f))
			if (!strncmp(line, "DEVNAME=", 8)) {
				line[strcspn(line, "\n")] = '\0';
				snprintf(path, sizeof(path), "/dev/%s", line + 8);
			}
		fclose(f);
		fd = path[0] ? open(path, O_RDONLY | O_CLOEXEC) : -1;
	}
	if (fd >= 0 && (fstat(fd, &st) < 0 || !S_ISBLK(st.st_mode) || st.st_rdev != dev)) {
		close(fd);
		fd = -1;
	}
	return fd;
}

/* The block device the lower filesystem lives on, when there is one we may
 * open: its page cache holds the filesystem's dirty metadata. */
static int open_bdev(int root_fd, uint64_t *size)
{
	struct stat st;
	off_t end;
	int fd;

	if (fstat(root_fd, &st) < 0 || major(st.st_dev) == 0)
		return -1; /* tmpfs, FUSE, NFS...: no block device */
	fd = open_dev_node(st.st_dev);
	if (fd < 0) {
		sm_dbg("no block device node for %u:%u: metadata is flushed by syncfs alone",
		       major(st.st_dev), minor(st.st_dev));
		return -1;
	}
	end = lseek(fd, 0, SEEK_END);
	if (end <= 0) {
		close(fd);
		return -1;
	}
	*size = (uint64_t)end;
	return fd;
}

struct wq *wq_new(const struct sched_opts *opts, int root_fd, const struct wq_hooks *hooks)
{
	struct wq *q = g_new0(struct wq, 1);

	pthread_mutex_init(&q->lock, NULL);
	cond_init_monotonic(&q->space);
	cond_init_monotonic(&q->work);
	cond_init_monotonic(&q->done);
	q->opts = *opts;
	q->hooks = *hooks;
	q->root_fd = root_fd;
	q->syncfs_interval_ns = SYNCFS_INTERVAL_MIN_NS;
	/* syncfs needs a real open file: an O_PATH fd gets EBADF. */
	q->sync_fd = openat(root_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (q->sync_fd < 0)
		sm_err("cannot open the lower root for syncfs (%s): the medium's metadata "
		       "is left to the kernel's writeback", g_strerror(errno));
	q->bdev_fd = open_bdev(root_fd, &q->bdev_size);
	g_queue_init(&q->dirty);
	pacer_init(&q->pacer, opts->rate_bps, opts->latency_ms);
	readgate_init(&q->gate, opts->read_grace_ms);
	q->to_release = g_ptr_array_new();
	q->max_dirty = max_dirty_files();
	refresh_avail(q);
	return q;
}

/* Called with the lock held when f has nothing left to do. */
static void file_clean(struct wq *q, struct wq_file *f)
{
	if (!f->dirty || f->in_flight || f->has_trunc || !extmap_empty(&f->map))
		return;
	if (f->times_set) {
		/* Writes reached the medium later than they were made: keep their times. */
		if (futimens(f->fd, f->times) < 0)
			sm_warn("cannot restore times of %s: %s",
				file_path(f, (char[256]){0}, 256), g_strerror(errno));
		f->times_set = false;
	}
	g_queue_unlink(&q->dirty, &f->link);
	f->link.data = NULL;
	f->dirty = false;
	/* A clean file holds no fds: a burst of small files must not exhaust them. */
	if (f->dfd >= 0)
		close(f->dfd);
	close(f->fd);
	f->fd = -1;
	f->dfd = DFD_UNTRIED;
	g_ptr_array_add(q->to_release, f->owner);
	pthread_cond_broadcast(&q->space);
}

/* Drop the lock and run the release hooks it collected. */
static void unlock_and_release(struct wq *q)
{
	g_autoptr(GPtrArray) owners = NULL;

	if (q->to_release->len) {
		owners = q->to_release;
		q->to_release = g_ptr_array_new();
	}
	pthread_mutex_unlock(&q->lock);
	for (guint i = 0; owners && i < owners->len; i++)
		q->hooks.release(q->hooks.ctx, owners->pdata[i]);
}

/* Called with the lock held: f gets work. hooks.hold only takes a reference, so
 * it is safe under the lock (release, which may free, is not). */
static int file_make_dirty(struct wq *q, struct wq_file *f, int fd)
{
	struct stat st;

	if (f->dirty)
		return 0;
	if (fstat(fd, &st) < 0)
		return -errno;
	f->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (f->fd < 0)
		return -errno;
	f->size = st.st_size;
	f->dirty = true;
	f->link.data = f;
	g_queue_push_tail_link(&q->dirty, &f->link);
	q->hooks.hold(q->hooks.ctx, f->owner);
	return 0;
}

/*
 * A second, O_DIRECT open of the file: the aligned middle of each chunk goes
 * through it, so no page cache pages of the medium are dirty or under
 * writeback for long. A global sync(2) waits on every page under writeback of
 * a filesystem and would chase a buffered flusher to the end of its file.
 */
static int open_direct(int fd)
{
	char proc[32];

	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	return open(proc, O_WRONLY | O_DIRECT | O_CLOEXEC);
}

struct wq_file *wq_file_attach(struct wq *q, struct wq_file **slot, void *owner)
{
	struct wq_file *f;

	pthread_mutex_lock(&q->lock);
	f = *slot;
	if (!f) {
		f = g_new0(struct wq_file, 1);
		f->owner = owner;
		f->fd = -1;
		f->dfd = DFD_UNTRIED;
		extmap_init(&f->map);
		__atomic_store_n(slot, f, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&q->lock);
	return f;
}

void wq_file_free(struct wq_file *f)
{
	if (!f)
		return;
	extmap_clear(&f->map);
	if (f->dfd >= 0)
		close(f->dfd);
	if (f->fd >= 0)
		close(f->fd);
	g_free(f);
}

/* Called with the lock held: the error every file with work is failing with
 * (medium full or gone), or 0 while some file still makes progress. */
static int queue_stuck(const struct wq *q)
{
	int err = 0;

	for (GList *l = q->dirty.head; l; l = l->next) {
		const struct wq_file *f = l->data;
		if (!f->error)
			return 0;
		err = f->error;
	}
	return err;
}

/* Called with the lock held: wait until nothing is queued (0) or everything
 * left is failing (that error). */
static int wait_all_flushed(struct wq *q)
{
	while (!g_queue_is_empty(&q->dirty)) {
		int err = queue_stuck(q);
		if (err)
			return err;
		pthread_cond_broadcast(&q->work);
		timed_wait(&q->done, &q->lock, IDLE_WAIT_NS);
	}
	return 0;
}

/* Called with the lock held. Returns 0 when the write may be queued, 1 when it
 * must be written through (the medium is nearly full), or -errno. */
static int reserve_space(struct wq *q, struct wq_file *f, size_t len)
{
	unsigned files = q->dirty.length + (f->dirty ? 0 : 1);
	int r;

	if (reservation(q, q->queued + len, files) <= q->avail)
		return 0;
	refresh_avail(q);
	if (reservation(q, q->queued + len, files) <= q->avail)
		return 0;
	sm_dbg("free space low: draining before queuing %zu bytes", len);
	r = wait_all_flushed(q);
	refresh_avail(q);
	if (r < 0)
		return f->error ? f->error : r;
	if (reservation(q, len, 1) <= q->avail)
		return 0;
	return 1;
}

/* Called with the lock held: block while the queue is full (backpressure). */
static int wait_for_room(struct wq *q, struct wq_file *f, size_t len)
{
	while ((q->queued && q->queued + len > q->opts.queue_bytes) ||
	       (!f->dirty && q->dirty.length >= q->max_dirty)) {
		int err = f->error ? f->error : queue_stuck(q);
		if (err)
			return err;
		timed_wait(&q->space, &q->lock, IDLE_WAIT_NS);
	}
	return f->error;
}

static void now_realtime(struct timespec *ts)
{
	clock_gettime(CLOCK_REALTIME, ts);
}

/* Called with the lock held: the file changed now (an atime set explicitly
 * before stays pending). */
static void touch_mtime(struct wq_file *f)
{
	if (!f->times_set)
		f->times[0].tv_nsec = UTIME_OMIT;
	now_realtime(&f->times[1]);
	f->times_set = true;
}

ssize_t wq_write(struct wq *q, struct wq_file *f, int fd, const void *data, size_t len,
		 off_t off)
{
	ssize_t r;

	pthread_mutex_lock(&q->lock);
	r = f->error;
	if (r < 0)
		goto out;
	r = wait_for_room(q, f, len);
	if (r < 0)
		goto out;
	r = reserve_space(q, f, len);
	if (r < 0)
		goto out;
	if (r == 1 && !f->dirty) {
		/* Nearly full medium, file clean: the writer gets the medium's answer. */
		r = pwrite(fd, data, len, off);
		r = r < 0 ? -errno : r;
		goto out;
	}
	r = file_make_dirty(q, f, fd);
	if (r < 0)
		goto out;
	q->queued -= f->map.bytes;
	extmap_write(&f->map, off, data, len, CHUNK_MAX_BYTES);
	q->queued += f->map.bytes;
	if (off + (off_t)len > f->size)
		f->size = off + (off_t)len;
	touch_mtime(f);
	pthread_cond_signal(&q->work);
	r = (ssize_t)len;
out:
	pthread_mutex_unlock(&q->lock);
	return r;
}

void wq_read_begin(struct wq *q)
{
	pthread_mutex_lock(&q->lock);
	readgate_enter(&q->gate);
	pthread_mutex_unlock(&q->lock);
}

int64_t wq_meta_begin(struct wq *q)
{
	wq_read_begin(q);
	return now_ns();
}

void wq_meta_end(struct wq *q, int64_t began_ns)
{
	int64_t now = now_ns();

	pthread_mutex_lock(&q->lock);
	readgate_leave_meta(&q->gate, began_ns, now);
	pthread_mutex_unlock(&q->lock);
}

void wq_read_end(struct wq *q)
{
	pthread_mutex_lock(&q->lock);
	readgate_leave(&q->gate, now_ns());
	pthread_mutex_unlock(&q->lock);
	/* A flusher waiting for the gate re-checks on its own timer. */
}

/* Called with the lock held: lay f's queued state over n bytes read from lower. */
static ssize_t overlay(struct wq_file *f, char *buf, size_t len, off_t off, ssize_t n)
{
	size_t want;

	if (off >= f->size)
		return 0;
	want = MIN(len, (size_t)(f->size - off));
	if (f->has_trunc && off + n > f->trunc_floor)
		n = MAX(0, f->trunc_floor - off); /* lower bytes past a pending truncate are gone */
	if ((size_t)n < want)
		memset(buf + n, 0, want - (size_t)n);
	extmap_overlay(&f->map, off, buf, want);
	return (ssize_t)want;
}

ssize_t wq_read(struct wq *q, struct wq_file *f, int fd, char *buf, size_t len, off_t off)
{
	ssize_t n = 0;
	uint64_t seq;

	pthread_mutex_lock(&q->lock);
	readgate_enter(&q->gate);
	for (int tries = 0;; tries++) {
		bool dirty = f && f->dirty;
		seq = f ? f->seq : 0;
		if (tries < READ_RETRIES)
			pthread_mutex_unlock(&q->lock);
		n = pread(fd, buf, len, off);
		n = n < 0 ? -errno : n;
		if (tries < READ_RETRIES)
			pthread_mutex_lock(&q->lock);
		if (n < 0)
			break;
		if (f && f->seq != seq)
			continue; /* a chunk landed while we read: read again */
		if (dirty || (f && f->dirty))
			n = overlay(f, buf, len, off, n);
		break;
	}
	readgate_leave(&q->gate, now_ns());
	pthread_mutex_unlock(&q->lock);
	return n;
}

int wq_truncate(struct wq *q, struct wq_file *f, off_t size)
{
	int r;

	pthread_mutex_lock(&q->lock);
	if (!f->dirty) {
		/* Nothing queued: order is trivially kept, the caller truncates now. */
		pthread_mutex_unlock(&q->lock);
		return 1;
	}
	q->queued -= f->map.bytes;
	extmap_truncate(&f->map, size);
	q->queued += f->map.bytes;
	if (!f->has_trunc || size < f->trunc_floor)
		f->trunc_floor = MIN(size, f->size);
	f->has_trunc = true;
	f->trunc_size = size;
	f->size = size;
	f->seq++;
	touch_mtime(f);
	pthread_cond_signal(&q->work);
	pthread_cond_broadcast(&q->space);
	r = f->error;
	pthread_mutex_unlock(&q->lock);
	return r;
}

int wq_set_times(struct wq *q, struct wq_file *f, const struct timespec tv[2])
{
	pthread_mutex_lock(&q->lock);
	if (!f->dirty) {
		pthread_mutex_unlock(&q->lock);
		return 1;
	}
	for (int i = 0; i < 2; i++) {
		if (tv[i].tv_nsec == UTIME_NOW)
			now_realtime(&f->times[i]);
		else if (tv[i].tv_nsec != UTIME_OMIT || !f->times_set)
			f->times[i] = tv[i];
	}
	f->times_set = true;
	pthread_mutex_unlock(&q->lock);
	return 0;
}

int wq_flush_file(struct wq *q, struct wq_file *f)
{
	int r;

	pthread_mutex_lock(&q->lock);
	if (f->dirty) {
		uint64_t fails = f->fail_count;
		/* Jump the queue: whoever waits on this file goes first; a failing
		 * file is retried now rather than after its backoff. */
		f->urgent++;
		g_queue_unlink(&q->dirty, &f->link);
		g_queue_push_head_link(&q->dirty, &f->link);
		f->retry_at_ns = 0;
		pthread_cond_broadcast(&q->work);
		while (f->dirty && f->fail_count == fails)
			timed_wait(&q->done, &q->lock, IDLE_WAIT_NS);
		f->urgent--;
	}
	r = f->error;
	pthread_mutex_unlock(&q->lock);
	return r;
}

int wq_fsync(struct wq *q, struct wq_file *f, int fd, bool datasync)
{
	int r = wq_flush_file(q, f);

	if (r < 0)
		return r;
	r = datasync ? fdatasync(fd) : fsync(fd);
	return r < 0 ? -errno : 0;
}

int wq_error(struct wq *q, struct wq_file *f)
{
	int r;

	pthread_mutex_lock(&q->lock);
	r = f->error;
	pthread_mutex_unlock(&q->lock);
	return r;
}

void wq_drop_if_unlinked(struct wq *q, struct wq_file *f)
{
	struct stat st;

	pthread_mutex_lock(&q->lock);
	if (f->dirty && fstat(f->fd, &st) == 0 && st.st_nlink == 0) {
		sm_dbg("an unlinked, closed file: dropping %" G_GUINT64_FORMAT " queued bytes",
		       f->map.bytes);
		q->queued -= f->map.bytes;
		extmap_truncate(&f->map, 0);
		f->has_trunc = false;
		f->times_set = false;
		f->error = 0;
		pthread_cond_broadcast(&q->space);
		pthread_cond_broadcast(&q->done);
		file_clean(q, f); /* now, or when the chunk in flight ends */
	}
	unlock_and_release(q);
}

uint64_t wq_seq(struct wq *q, struct wq_file *f)
{
	uint64_t seq;

	pthread_mutex_lock(&q->lock);
	seq = f->seq;
	pthread_mutex_unlock(&q->lock);
	return seq;
}

bool wq_fix_stat(struct wq *q, struct wq_file *f, struct stat *st, uint64_t seq)
{
	pthread_mutex_lock(&q->lock);
	if (f->seq != seq) {
		pthread_mutex_unlock(&q->lock);
		return false;
	}
	if (f->dirty) {
		st->st_size = f->size;
		if (f->times_set && f->times[1].tv_nsec != UTIME_OMIT)
			st->st_mtim = f->times[1];
		if (f->times_set && f->times[0].tv_nsec != UTIME_OMIT)
			st->st_atim = f->times[0];
	}
	pthread_mutex_unlock(&q->lock);
	return true;
}

void wq_fix_statvfs(struct wq *q, struct statvfs *sv)
{
	uint64_t bs = sv->f_frsize ? sv->f_frsize : sv->f_bsize;
	uint64_t blocks;

	pthread_mutex_lock(&q->lock);
	blocks = q->queued ? reservation(q, q->queued, q->dirty.length) / bs : 0;
	pthread_mutex_unlock(&q->lock);
	sv->f_bfree = sv->f_bfree > blocks ? sv->f_bfree - blocks : 0;
	sv->f_bavail = sv->f_bavail > blocks ? sv->f_bavail - blocks : 0;
}

/* ---- flushers ---- */

/* Called with the lock held: the next file to work on, or NULL with *wait_ns
 * set to how long nothing can happen. */
static struct wq_file *pick_file(struct wq *q, int64_t now, int64_t *wait_ns)
{
	*wait_ns = IDLE_WAIT_NS;
	for (GList *l = q->dirty.head; l; l = l->next) {
		struct wq_file *f = l->data;
		if (f->in_flight)
			continue;
		if (f->error && f->retry_at_ns > now) {
			*wait_ns = MIN(*wait_ns, f->retry_at_ns - now);
			continue;
		}
		if (f->has_trunc || !extmap_empty(&f->map))
			return f;
	}
	return NULL;
}

static int write_all(int fd, struct iovec *iov, int niov, off_t off)
{
	while (niov > 0) {
		ssize_t n = pwritev(fd, iov, niov, off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EIO;
		off += n;
		while (niov > 0 && (size_t)n >= iov->iov_len) {
			n -= (ssize_t)iov->iov_len;
			iov++;
			niov--;
		}
		if (niov > 0) {
			iov->iov_base = (char *)iov->iov_base + n;
			iov->iov_len -= (size_t)n;
		}
	}
	return 0;
}

static int write_buffered(int fd, struct iovec *iov, int niov, off_t off, size_t len)
{
	int r = write_all(fd, iov, niov, off);

	if (r == 0 && len && sync_file_range(fd, off, (off_t)len,
					     SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
						     SYNC_FILE_RANGE_WAIT_AFTER) < 0)
		r = -errno;
	return r;
}

/* Whether the chunk's aligned middle can go out from the queue's own buffers:
 * it starts aligned and every piece is aligned in memory and length (the last
 * piece's length excepted). Sequential writes coalesce into such chunks. */
static bool direct_ready(const struct iovec *iov, int niov, off_t off)
{
	if (off % DIRECT_ALIGN)
		return false;
	for (int i = 0; i < niov; i++)
		if ((uintptr_t)iov[i].iov_base % DIRECT_ALIGN ||
		    (i < niov - 1 && iov[i].iov_len % DIRECT_ALIGN))
			return false;
	return true;
}

/* Aligned chunk: the middle straight from the queue's buffers, the tail buffered. */
static int write_chunk_aligned(struct wq_file *f, struct iovec *iov, int niov, off_t off,
			       size_t len)
{
	size_t mid = len / DIRECT_ALIGN * DIRECT_ALIGN, tail = len - mid;
	struct iovec last = iov[niov - 1];
	int r;

	iov[niov - 1].iov_len -= tail;
	r = write_all(f->dfd, iov, iov[niov - 1].iov_len ? niov : niov - 1, off);
	if (r == 0 && tail)
		r = write_buffered(f->fd,
				   &(struct iovec){(char *)last.iov_base + last.iov_len - tail, tail},
				   1, off + (off_t)mid, tail);
	return r;
}

/* The aligned middle of a chunk through the O_DIRECT fd, the ragged ends
 * buffered and waited for; everything buffered when there is no middle. */
static int write_chunk(struct wq_file *f, struct iovec *iov, int niov, off_t off,
		       size_t len)
{
	off_t end = off + (off_t)len;
	off_t a0 = (off + DIRECT_ALIGN - 1) / DIRECT_ALIGN * DIRECT_ALIGN;
	off_t a1 = end / DIRECT_ALIGN * DIRECT_ALIGN;
	char *bounce;
	size_t pos = 0;
	int r = 0;

	if (a1 - a0 >= DIRECT_ALIGN && f->dfd == DFD_UNTRIED)
		f->dfd = open_direct(f->fd);
	if (f->dfd < 0 || a1 - a0 < DIRECT_ALIGN)
		return write_buffered(f->fd, iov, niov, off, len);
	if (direct_ready(iov, niov, off)) {
		/* write_all advances the iovecs it is given: work on a copy */
		struct iovec copy[FLUSH_IOV_MAX];
		memcpy(copy, iov, sizeof(*iov) * (size_t)niov);
		r = write_chunk_aligned(f, copy, niov, off, len);
		if (r != -EINVAL)
			return r;
	}
	if (posix_memalign((void **)&bounce, DIRECT_ALIGN, len) != 0)
		return write_buffered(f->fd, iov, niov, off, len);
	for (int i = 0; i < niov; i++) {
		memcpy(bounce + pos, iov[i].iov_base, iov[i].iov_len);
		pos += iov[i].iov_len;
	}
	if (a0 > off)
		r = write_buffered(f->fd, &(struct iovec){bounce, (size_t)(a0 - off)}, 1, off,
				   (size_t)(a0 - off));
	if (r == 0)
		r = write_all(f->dfd, &(struct iovec){bounce + (a0 - off), (size_t)(a1 - a0)}, 1,
			      a0);
	if (r == -EINVAL) /* the lower filesystem refuses this direct write */
		r = write_buffered(f->fd, &(struct iovec){bounce + (a0 - off), (size_t)(a1 - a0)},
				   1, a0, (size_t)(a1 - a0));
	if (r == 0 && end > a1)
		r = write_buffered(f->fd, &(struct iovec){bounce + (a1 - off), (size_t)(end - a1)},
				   1, a1, (size_t)(end - a1));
	free(bounce);
	return r;
}

static int apply_truncate(int fd, off_t floor, off_t size)
{
	if (ftruncate(fd, floor) < 0)
		return -errno;
	if (size != floor && ftruncate(fd, size) < 0)
		return -errno;
	return 0;
}

/* Called with the lock held after a failed step. */
static void note_failure(struct wq *q, struct wq_file *f, int err, const char *what)
{
	char path[256];
	int64_t backoff = RETRY_MIN_NS << MIN(f->failures, 10u);

	f->failures++;
	f->fail_count++;
	f->retry_at_ns = now_ns() + MIN(backoff, RETRY_MAX_NS);
	if (f->error != err || f->failures == 1)
		sm_err("%s of %s failed: %s (%" G_GUINT64_FORMAT " bytes stay queued)", what,
		       file_path(f, path, sizeof(path)), g_strerror(-err), f->map.bytes);
	f->error = err;
	pthread_cond_broadcast(&q->space);
}

static void note_success(struct wq_file *f)
{
	char path[256];

	if (f->error)
		sm_info("%s: writes succeed again", file_path(f, path, sizeof(path)));
	f->error = 0;
	f->failures = 0;
}

/* Called with the lock held: a chunk or truncate ended at end_ns; the lower
 * filesystem's metadata is dirty from it. The metadata interval runs from the
 * first write after the medium was clean: a sweep right after a burst's first
 * chunk would find little. */
static void medium_written(struct wq *q, int64_t end_ns)
{
	q->last_flush_end_ns = end_ns;
	if (!q->meta_dirty)
		q->last_syncfs_ns = end_ns;
	q->meta_dirty = true;
}

/* Called with the lock held; drops and retakes it around the I/O. */
static void flush_truncate(struct wq *q, struct wq_file *f)
{
	off_t floor = f->trunc_floor, size = f->trunc_size;
	int r;

	f->has_trunc = false;
	f->in_flight = true;
	pthread_mutex_unlock(&q->lock);
	r = apply_truncate(f->fd, floor, size);
	pthread_mutex_lock(&q->lock);
	f->in_flight = false;
	q->head_moved = true;
	medium_written(q, now_ns());
	if (r < 0) {
		if (!f->has_trunc) {
			f->has_trunc = true;
			f->trunc_floor = floor;
			f->trunc_size = size;
		} else {
			f->trunc_floor = MIN(f->trunc_floor, floor);
		}
		note_failure(q, f, r, "truncate");
	} else {
		note_success(f);
		f->seq++;
	}
}

/* Called with the lock held; drops and retakes it around the I/O. */
static void flush_chunk(struct wq *q, struct wq_file *f)
{
	struct iovec iov[FLUSH_IOV_MAX];
	unsigned id = ++q->next_flight ? q->next_flight : ++q->next_flight;
	bool seeks;
	int niov, r;
	off_t off;
	size_t len;
	int64_t t0, t1;

	seeks = q->head_moved || f != q->last_file || f->cursor != q->last_end ||
		q->gate.last_end_ns > q->last_flush_end_ns;
	len = extmap_take(&f->map, f->cursor, pacer_chunk_bytes(&q->pacer, seeks), id, iov,
			  FLUSH_IOV_MAX, &niov, &off);
	if (!len)
		return;
	seeks = seeks || off != q->last_end;
	f->in_flight = true;
	/* Round robin between files, unless someone waits on this one. */
	if (!f->urgent) {
		g_queue_unlink(&q->dirty, &f->link);
		g_queue_push_tail_link(&q->dirty, &f->link);
	}
	pthread_mutex_unlock(&q->lock);
	t0 = now_ns();
	r = write_chunk(f, iov, niov, off, len);
	t1 = now_ns();
	sm_dbg("chunk of %zu bytes at %jd%s: %lld ms", len, (intmax_t)off, seeks ? " (seeks)" : "",
	       (long long)((t1 - t0) / NSEC_PER_MSEC));
	pthread_mutex_lock(&q->lock);
	f->in_flight = false;
	q->last_file = f;
	q->last_end = off + (off_t)len;
	q->head_moved = false;
	medium_written(q, t1);
	if (r < 0) {
		q->head_moved = true;
		extmap_abort(&f->map, id, off, len);
		note_failure(q, f, r, "write");
		return;
	}
	note_success(f);
	q->queued -= extmap_complete(&f->map, id, off, len);
	f->cursor = off + (off_t)len;
	f->seq++;
	q->flushed_bytes += len;
	q->chunks++;
	pacer_done(&q->pacer, len, t0, t1, seeks);
	refresh_avail(q); /* the flushed bytes left the reservation: count them as used */
	pthread_cond_broadcast(&q->space);
}

/* Called with the lock held: write the block device's dirty pages slice by
 * slice, each waited for, pausing while reads are in flight, so a read waits
 * at most for one slice's few blocks. Errors are left to the syncfs after.
 * Returns the time spent writing (not holding back). */
static int64_t sweep_bdev(struct wq *q)
{
	uint64_t slice = MAX(SWEEP_SLICE_MIN, q->bdev_size / SWEEP_SLICES_MAX);
	uint64_t off = 0;
	int64_t busy = 0;

	while (off < q->bdev_size) {
		int64_t hold = readgate_wait_ns(&q->gate, now_ns());

		if (hold > 0) {
			timed_wait(&q->work, &q->lock, hold);
			continue;
		}
		pthread_mutex_unlock(&q->lock);
		hold = now_ns();
		sync_file_range(q->bdev_fd, (off64_t)off, (off64_t)MIN(slice, q->bdev_size - off),
				SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
					SYNC_FILE_RANGE_WAIT_AFTER);
		busy += now_ns() - hold;
		pthread_mutex_lock(&q->lock);
		off += slice;
	}
	return busy;
}

/* Called with the lock held (dropped around the I/O): the sweep, then syncfs of
 * the medium; errors logged once each. */
static void sync_medium(struct wq *q)
{
	int64_t t0 = now_ns(), t1, t2, swept = 0, took;
	bool streaming = q->dirty.length > 0;
	int r, err;

	if (q->sync_fd < 0)
		return;
	q->meta_dirty = false;
	q->last_syncfs_ns = t0;
	if (q->bdev_fd >= 0)
		swept = sweep_bdev(q);
	t1 = now_ns();
	pthread_mutex_unlock(&q->lock);
	r = syncfs(q->sync_fd);
	err = r < 0 ? errno : 0;
	t2 = now_ns();
	took = swept + (t2 - t1);
	sm_dbg("metadata of the medium: sweep %lld ms (writing %lld), syncfs %lld ms",
	       (long long)((t1 - t0) / NSEC_PER_MSEC), (long long)(swept / NSEC_PER_MSEC),
	       (long long)((t2 - t1) / NSEC_PER_MSEC));
	pthread_mutex_lock(&q->lock);
	q->head_moved = true;
	/* Only a flush in the middle of a stream prices the next one: the one
	 * after the queue ran empty finds what a single file left (next to
	 * nothing), and the next stream's first flush would come at the floor. */
	if (streaming)
		q->syncfs_interval_ns = MIN(MAX(took * SYNCFS_SHARE_DIV, SYNCFS_INTERVAL_MIN_NS),
					    SYNCFS_INTERVAL_MAX_NS);
	if (err && err != q->syncfs_errno)
		sm_err("syncfs of the medium: %s (its metadata may not be written)",
		       g_strerror(err));
	q->syncfs_errno = err;
	refresh_avail(q);
}

/* Called with the lock held: keep the lower filesystem's metadata (bitmaps,
 * inodes, indirect blocks the chunks allocated) flushed too, every
 * syncfs_interval_ns while flushing and once more when the queue has been
 * empty for SYNCFS_IDLE_NS, so the kernel's own writeback never has old
 * metadata to write in the middle of a read. Its seeks would stand between a
 * read and the medium: not while reading. */
static void maybe_syncfs(struct wq *q, int64_t now)
{
	if (!q->meta_dirty || readgate_wait_ns(&q->gate, now))
		return;
	if (q->dirty.length ? now - q->last_syncfs_ns < q->syncfs_interval_ns
			    : now - q->last_flush_end_ns < SYNCFS_IDLE_NS)
		return;
	sync_medium(q);
}

static void *flusher_main(void *arg)
{
	struct wq *q = arg;
	sigset_t all;

	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	pthread_mutex_lock(&q->lock);
	while (!q->stopping) {
		int64_t now = now_ns(), wait_ns, hold_ns;
		struct wq_file *f = pick_file(q, now, &wait_ns);

		if (!f) {
			maybe_syncfs(q, now);
			timed_wait(&q->work, &q->lock, wait_ns);
			continue;
		}
		hold_ns = MAX(readgate_wait_ns(&q->gate, now), pacer_delay_ns(&q->pacer, now));
		if (hold_ns > 0) {
			timed_wait(&q->work, &q->lock, hold_ns);
			continue;
		}
		if (f->has_trunc)
			flush_truncate(q, f);
		else
			flush_chunk(q, f);
		file_clean(q, f);
		pthread_cond_broadcast(&q->done);
		maybe_syncfs(q, now_ns());
		unlock_and_release(q);
		pthread_mutex_lock(&q->lock);
	}
	pthread_mutex_unlock(&q->lock);
	return NULL;
}

int wq_start(struct wq *q)
{
	q->nthreads = q->opts.flushers;
	q->threads = g_new0(pthread_t, q->nthreads);
	for (unsigned i = 0; i < q->nthreads; i++) {
		char name[16];
		int r = pthread_create(&q->threads[i], NULL, flusher_main, q);
		if (r != 0) {
			q->nthreads = i;
			return -r;
		}
		snprintf(name, sizeof(name), "sm-flush-%u", i % 100);
		pthread_setname_np(q->threads[i], name);
	}
	return 0;
}

/* Called with the lock held: log what could not be written. */
static void report_lost(struct wq *q)
{
	char path[256];

	for (GList *l = q->dirty.head; l; l = l->next) {
		struct wq_file *f = l->data;
		sm_err("%s: %" G_GUINT64_FORMAT " bytes could not be written (%s); they are lost",
		       file_path(f, path, sizeof(path)), f->map.bytes, g_strerror(-f->error));
	}
}

static bool all_gave_up(const struct wq *q)
{
	for (GList *l = q->dirty.head; l; l = l->next) {
		const struct wq_file *f = l->data;
		if (!f->error || f->failures < DRAIN_GIVEUP_FAILURES)
			return false;
	}
	return true;
}

void wq_drain(struct wq *q)
{
	int64_t last_log = now_ns();

	pthread_mutex_lock(&q->lock);
	if (q->queued)
		sm_dbg("draining %" G_GUINT64_FORMAT " queued bytes to the medium", q->queued);
	while (!g_queue_is_empty(&q->dirty)) {
		if (all_gave_up(q)) {
			report_lost(q);
			break;
		}
		if (now_ns() - last_log >= DRAIN_LOG_INTERVAL_NS) {
			last_log = now_ns();
			sm_info("draining: %" G_GUINT64_FORMAT " bytes left in %u files",
				q->queued, q->dirty.length);
		}
		/* Exit must not wait out a long retry backoff. */
		for (GList *l = q->dirty.head; l; l = l->next)
			((struct wq_file *)l->data)->retry_at_ns =
				MIN(((struct wq_file *)l->data)->retry_at_ns, now_ns() + RETRY_MIN_NS);
		pthread_cond_broadcast(&q->work);
		timed_wait(&q->done, &q->lock, RETRY_MIN_NS);
	}
	if (q->meta_dirty)
		sync_medium(q);
	pthread_mutex_unlock(&q->lock);
}

void wq_free(struct wq *q)
{
	pthread_mutex_lock(&q->lock);
	q->stopping = true;
	pthread_cond_broadcast(&q->work);
	pthread_mutex_unlock(&q->lock);
	for (unsigned i = 0; i < q->nthreads; i++)
		pthread_join(q->threads[i], NULL);
	g_free(q->threads);
	g_ptr_array_free(q->to_release, TRUE);
	if (q->sync_fd >= 0)
		close(q->sync_fd);
	if (q->bdev_fd >= 0)
		close(q->bdev_fd);
	pthread_mutex_destroy(&q->lock);
	pthread_cond_destroy(&q->space);
	pthread_cond_destroy(&q->work);
	pthread_cond_destroy(&q->done);
	g_free(q);
}
