/*
 * DESIGN: the write-behind queue of one mount: per-file state, the wq_* API
 * the op handlers call, backpressure and space. The flusher threads that
 * empty it are in flusher.c, their decisions in policy.c, their syscalls in
 * chunkio.c; the structures and the lock rules in queue_int.h.
 *
 * Data path. wq_write copies the caller's data into the file's extent map
 * (extents.c) and returns; the flushers write it to the lower file in chunks,
 * so the kernel never holds more than about one chunk of the medium's dirty
 * data. A file with queued work is "dirty": it is on q->dirty, holds a dup of
 * the first writer's fd (and an O_DIRECT one), and its owner (the inode) is
 * held; once clean it holds no fd (wqf_clean).
 *
 * Per-file order. A file has at most one chunk in flight. A truncate clips the
 * queued extents at once and is recorded as (trunc_floor = lowest size since the
 * last flush, trunc_size = the last size); the flusher applies it before the
 * file's next chunk. Extents queued before a truncate all lie below it, so
 * applying the truncate first gives the same bytes as applying it in order.
 * Until it is applied, lower data at or beyond trunc_floor reads as zeros, also
 * while the flusher applies it (trunc_flying). A file with a sticky error
 * refuses truncates, as it refuses writes: a truncate that failed is never
 * applied later.
 *
 * Beyond queue=, with a spool. Writes of SPOOL_JOURNAL_MIN or more, and
 * smaller ones once they fill 7/8 of queue= (mem_room), are journaled first
 * and queued as their place in the spool (extmap_write_file: an extent of
 * ~200 bytes, in the last eighth of queue=), so writers wait at spool_max,
 * not at queue=, and memory stays within queue=. Small writes are gathered
 * in memory (an extent per 4 KiB write would cost 5% of its bytes). Reads
 * pread such pieces; the flushers read them back (flusher.c: gather_chunk).
 * A file found unlinked (f->sgone) is not journaled: its writes stay in
 * memory.
 *
 * Backpressure. A write that finds no room (policy_room: queue= is full, or
 * its file holds FILE_SHARE_PCT of it already) is parked: its data is copied,
 * the FUSE worker returns, and one admitter thread queues parked writes in
 * arrival order as room appears and answers them. So writers blocked by
 * backpressure hold none of the worker threads that reads, stats and lookups
 * need. Writes that must reach the medium before they return (O_SYNC on
 * direct_io files) wait in their own thread, as fsync does.
 *
 * Errors are per file. A failed chunk stays queued and the file's error is
 * sticky: its next write, truncate, flush-wait and close return it (a
 * successful retry clears it). Failing files' data counts against others'
 * room only up to FAIL_SHARE_PCT, and a wait for room ends early only on the
 * waiter's own error: a writer never hears another file's error. Writes past
 * the lower's size limit (chunk_max_size) get EFBIG at write() as on the
 * lower, or a short write.
 *
 * Read-your-writes. wq_read reads the lower file without the lock, then lays
 * the queued extents over it under the lock. A chunk completing in between
 * would have left stale lower bytes uncovered, so each completion bumps
 * f->seq and the read retries when it changed. Reads and metadata ops pass
 * the read gate (pacer.c) so the flushers hold back while they run.
 *
 * Space. What the queued data will take on the lower is reserved against its
 * free space: per file, the blocks (of the lower's allocation unit: its block,
 * or the FAT cluster read from the boot sector, as fusefat reports 1 KiB) that
 * its extents touch past the lower file's allocated prefix (one fstat and one
 * FIEMAP when the file gets dirty), plus the indirect blocks of the ranges
 * they touch; on FAT, which has no holes, every cluster from the allocated end
 * to the queued size. The extent map keeps the counts as extents come and go
 * (extmap_*_counted), so a write costs no syscall; a count a plain complete
 * left too high is redone (recount_stale) before anything is refused. When a
 * write does not fit, the queue drains, free space is read again, and a write
 * that still does not fit is written through to the lower file so that ENOSPC
 * (or a short write) reaches the writer: acknowledged data is never lost to a
 * full medium. A write-through or fallocate holds what it may take (passing)
 * until free space is read again after it; a fallocate that does not fit
 * beside the queue gets ENOSPC.
 *
 * Threads. Op handler threads call the wq_* functions; the admitter runs
 * wq_admitter_main; the flushers run flusher_main (flusher.c). Under q->lock
 * no call waits for the medium: the write-through, the flushers' chunks,
 * truncates, statvfs and path lookups, the close and futimens of clean files
 * and log lines all run with it dropped (wq_unlock_and_release does the last
 * three). What is left under it is the fstat, dup and FIEMAP when a file
 * becomes dirty (FIEMAP may read the file's block map from the medium: a
 * known exception). The read gate takes no lock at all.
 * The hooks are called as queue.h says.
 */
#include "queue_int.h"
#include "arb_client.h"
#include "chunkio.h"
#include "log.h"
#include "rescue.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/fiemap.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

char *wq_fd_path(int fd)
{
	char proc[32], path[PATH_MAX];
	ssize_t n;

	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	n = readlink(proc, path, sizeof(path) - 1);
	if (n <= 0)
		return NULL;
	path[n] = '\0';
	return g_strdup(path);
}

const char *wqf_path(const struct wq_file *f, char *buf, size_t size)
{
	g_autofree char *raw = wq_fd_path(f->fd);

	/* A name is anybody's choice: a newline in it must not start a line. */
	return sm_log_escape(raw ? raw : "(unknown path)", buf, size);
}

/* A sample taken unlocked may predate space that a write-through or a
 * fallocate took meanwhile (and already dropped from q->passing): it may
 * lower the figure, never raise it. Freed space is seen at the next
 * wq_refresh_avail, which reserve_space does before it refuses anything. */
void wq_note_statvfs(struct wq *q, const struct statvfs *sv)
{
	uint64_t bs = sv->f_frsize ? sv->f_frsize : sv->f_bsize;

	q->bsize = bs;
	q->avail = MIN(q->avail, (uint64_t)sv->f_bavail * bs);
}

/* Called with the lock held: refresh the free-space figure. */
void wq_refresh_avail(struct wq *q)
{
	struct statvfs sv;

	if (fstatvfs(q->root_fd, &sv) == 0) {
		q->bsize = sv.f_frsize ? sv.f_frsize : sv.f_bsize;
		q->avail = (uint64_t)sv.f_bavail * q->bsize;
	}
}

/* ---- Space: what the queued data will take on the lower ---- */

#define DEFAULT_BLOCK_BYTES 4096
#define BLOCK_PTR_BYTES 4	/* an ext2 indirect-block entry */
#define EXTENT_ENTRY_BYTES 12	/* an ext4 extent-tree entry */
#define FIEMAP_PROBE_EXTENTS 32 /* a file in more pieces counts as allocated up to them */
#define STAT_BLOCK_BYTES 512	/* st_blocks unit */
#define FAT_SECTOR_BYTES 512
#define FAT_CLUSTER_MAX_BYTES (64u << 10)
#ifndef MSDOS_SUPER_MAGIC
#define MSDOS_SUPER_MAGIC 0x4d44
#endif
#ifndef EXFAT_SUPER_MAGIC
#define EXFAT_SUPER_MAGIC 0x2011BAB0
#endif
#ifndef FUSE_SUPER_MAGIC
#define FUSE_SUPER_MAGIC 0x65735546
#endif

static uint64_t div_up(uint64_t x, uint64_t d)
{
	return x / d + (x % d != 0);
}

static bool pow2_in(uint64_t x, uint64_t lo, uint64_t hi)
{
	return x >= lo && x <= hi && (x & (x - 1)) == 0;
}

/* The cluster size of a FAT or exFAT boot sector on the block device, 0 if it
 * holds none. Needed because fusefat's statvfs says 1 KiB blocks whatever the
 * cluster size is, and a cluster is what every file and every gap takes. */
static uint64_t fat_cluster_bytes(int bdev_fd)
{
	unsigned char s[FAT_SECTOR_BYTES];
	uint64_t sector, per;

	if (bdev_fd < 0 || pread(bdev_fd, s, sizeof(s), 0) != (ssize_t)sizeof(s) ||
	    s[510] != 0x55 || s[511] != 0xAA)
		return 0;
	if (memcmp(s + 3, "EXFAT   ", 8) == 0 && s[108] >= 9 && s[108] <= 12 && s[109] <= 25)
		return 1ull << (s[108] + s[109]);
	if (memcmp(s + 54, "FAT", 3) != 0 && memcmp(s + 82, "FAT", 3) != 0)
		return 0;
	sector = s[11] | (unsigned)s[12] << 8;
	per = s[13];
	if (!pow2_in(sector, 512, 4096) || !pow2_in(per, 1, 128))
		return 0;
	return sector * per;
}

/* A FUSE lower's allocation unit, when nothing says it (fusefat reports 1 KiB
 * blocks and hides its device): free and total space are whole clusters, so
 * the largest power of two dividing both is at least the cluster size, and
 * usually it. Capped at the largest FAT cluster. Only ever too large. */
static uint64_t fuse_unit_guess(int root_fd)
{
	struct statvfs sv;
	uint64_t bs, unit = FAT_CLUSTER_MAX_BYTES;

	if (fstatvfs(root_fd, &sv) < 0)
		return 0;
	bs = sv.f_frsize ? sv.f_frsize : sv.f_bsize;
	if (sv.f_bavail)
		unit = MIN(unit, ((uint64_t)sv.f_bavail * bs) & -((uint64_t)sv.f_bavail * bs));
	if (sv.f_blocks)
		unit = MIN(unit, ((uint64_t)sv.f_blocks * bs) & -((uint64_t)sv.f_blocks * bs));
	return unit;
}

/* Called once from wq_new: the allocation unit and how the lower allocates. */
static void space_init(struct wq *q)
{
	uint64_t cluster = fat_cluster_bytes(q->bdev_fd);
	struct statfs sfs;
	long type = fstatfs(q->root_fd, &sfs) == 0 ? (long)sfs.f_type : 0;

	if (!cluster && type == FUSE_SUPER_MAGIC)
		cluster = fuse_unit_guess(q->root_fd);

	q->unit = MAX(q->bsize ? q->bsize : DEFAULT_BLOCK_BYTES, cluster);
	/* FAT has no holes: a write past the end allocates the gap too. A FUSE
	 * lower may be anything (fusefat, say): assumed the same, which only
	 * ever reserves more. */
	q->no_holes = cluster || type == MSDOS_SUPER_MAGIC || type == EXFAT_SUPER_MAGIC ||
		      type == FUSE_SUPER_MAGIC;
	q->levels[0] = q->unit;
	if (!q->no_holes) {
		/* The ranges one indirect and one double-indirect block map. */
		q->levels[1] = q->unit * (q->unit / BLOCK_PTR_BYTES);
		q->levels[2] = q->levels[1] * (q->unit / BLOCK_PTR_BYTES);
	}
	wq_dbg(q, "space: allocation unit %" G_GUINT64_FORMAT " bytes%s", q->unit,
	       q->no_holes ? ", no holes" : "");
}

/* The end of the allocated prefix of a file with holes, from one FIEMAP. */
static off_t fiemap_prefix(int fd)
{
	uint64_t buf[(sizeof(struct fiemap) +
		      FIEMAP_PROBE_EXTENTS * sizeof(struct fiemap_extent)) / sizeof(uint64_t) + 1];
	struct fiemap *fm = (struct fiemap *)buf;
	uint64_t end = 0;

	memset(buf, 0, sizeof(buf));
	fm->fm_length = FIEMAP_MAX_OFFSET;
	fm->fm_extent_count = FIEMAP_PROBE_EXTENTS;
	if (ioctl(fd, FS_IOC_FIEMAP, fm) < 0)
		return 0; /* cannot tell: nothing counts as allocated */
	for (unsigned i = 0; i < fm->fm_mapped_extents; i++) {
		const struct fiemap_extent *fe = &fm->fm_extents[i];
		if (fe->fe_logical > end)
			break; /* a hole */
		end = MAX(end, fe->fe_logical + fe->fe_length);
	}
	return (off_t)MIN(end, (uint64_t)INT64_MAX);
}

/* Bytes from 0 of the lower file that need no new block when written. */
static off_t lower_allocated(const struct wq *q, int fd, const struct stat *st)
{
	/* No block, not even a delayed one (st_blocks counts those): no FIEMAP
	 * for a new file. A file with its data inline counts as none: more is
	 * reserved, never less. */
	if (!q->no_holes)
		return st->st_blocks ? fiemap_prefix(fd) : 0;
	/* No holes on FAT; on an unknown FUSE lower, only if the blocks agree. */
	return (uint64_t)st->st_blocks * STAT_BLOCK_BYTES >= (uint64_t)st->st_size ? st->st_size : 0;
}

/* Called with the lock held: start f's count afresh from the lower file (an
 * fstat and a FIEMAP: only when f gets dirty, and on the slow path); a clean
 * f takes the file's size. Returns the fstat's error, else 0. */
static int file_probe(struct wq *q, struct wq_file *f, int fd)
{
	struct stat st;
	off_t alloc = 0;
	int r = fstat(fd, &st) < 0 ? -errno : 0;

	if (r == 0) {
		alloc = lower_allocated(q, fd, &st);
		if (!f->dirty)
			f->size = st.st_size;
	}
	/* Blocks past a queued truncate are freed before the data lands. */
	if (f->has_trunc)
		alloc = MIN(alloc, f->trunc_floor);
	if (f->trunc_flying)
		alloc = MIN(alloc, f->flying_floor);
	extmap_count_reset(&f->map, q->levels, alloc);
	return r;
}

/* Units a file needs: its count plus add[] more blocks, at logical size size. */
static uint64_t need_of(const struct wq *q, const struct ext_count *c,
			const uint64_t add[EXT_COUNT_LEVELS], off_t size)
{
	uint64_t data, meta;

	if (q->no_holes) {
		uint64_t end = div_up((uint64_t)MAX(size, 0), q->unit);
		data = end > c->first[0] ? end - c->first[0] : 0;
		meta = div_up(data * BLOCK_PTR_BYTES, q->unit);
	} else {
		data = c->blocks[0] + add[0];
		/* Indirect and double-indirect blocks (ext2), or extent-tree
		 * leaves (ext4): whichever the lower uses, both are covered. */
		meta = c->blocks[1] + add[1] + c->blocks[2] + add[2] +
		       div_up(data * EXTENT_ENTRY_BYTES, q->unit);
	}
	return data ? data + meta + META_BLOCKS_PER_FILE : 0;
}

/* Called with the lock held after f's queued state changed. */
static void account(struct wq *q, struct wq_file *f)
{
	static const uint64_t none[EXT_COUNT_LEVELS];

	q->need -= f->need;
	f->need = f->dirty ? need_of(q, &f->map.count, none, f->size) : 0;
	q->need += f->need;
}

/* Called with the lock held: what f would need once [off, off+len) is queued. */
static uint64_t need_with_write(const struct wq *q, const struct wq_file *f, off_t off, size_t len)
{
	uint64_t add[EXT_COUNT_LEVELS];

	extmap_count_need(&f->map, off, len, add);
	return need_of(q, &f->map.count, add, MAX(f->size, off + (off_t)len));
}

/* Called with the lock held: count again what a plain extmap_complete left
 * too high, re-probe those files, then read free space (after the probes:
 * a block allocated in between is counted twice, never not at all). */
static void recount_stale(struct wq *q)
{
	for (GList *l = q->dirty.head; l; l = l->next) {
		struct wq_file *f = l->data;
		if (extmap_count_stale(&f->map)) {
			file_probe(q, f, f->fd);
			account(q, f);
		}
	}
	wq_refresh_avail(q);
}

/* Called with the lock held: whether the queue's need, with f needing mine
 * units instead of what it needs now, fits the free space. */
static bool fits(const struct wq *q, const struct wq_file *f, uint64_t mine, bool alone)
{
	uint64_t others = alone ? 0 : q->need - f->need;

	return (others + mine) * q->unit + q->passing <= q->avail;
}

struct wq *wq_new(const struct sched_opts *opts, int root_fd, const struct wq_hooks *hooks,
		  unsigned max_dirty)
{
	struct wq *q = g_new0(struct wq, 1);

	pthread_mutex_init(&q->lock, NULL);
	cond_init_monotonic(&q->space);
	cond_init_monotonic(&q->work);
	cond_init_monotonic(&q->done);
	pthread_cond_init(&q->admit, NULL);
	q->opts = *opts;
	q->hooks = *hooks;
	q->root_fd = root_fd;
	policy_meta_init(&q->meta);
	/* syncfs needs a real open file: an O_PATH fd gets EBADF. */
	q->sync_fd = openat(root_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (q->sync_fd < 0)
		sm_err("cannot open the lower root for syncfs (%s): the medium's metadata "
		       "is left to the kernel's writeback", g_strerror(errno));
	q->bdev_fd = chunk_open_bdev(root_fd, &q->bdev_size);
	g_queue_init(&q->dirty);
	pacer_init(&q->pacer, opts->rate_bps, opts->latency_ms);
	readgate_init(&q->gate, opts->read_grace_ms);
	q->to_release = g_ptr_array_new();
	q->to_close = g_array_new(FALSE, FALSE, sizeof(struct closing));
	q->to_log = g_ptr_array_new();
	g_queue_init(&q->parked);
	risk_init(&q->risk);
	q->max_dirty = MAX(max_dirty, DIRTY_FILES_MIN);
	wq_refresh_avail(q);
	space_init(q);
	return q;
}

/* Called with the lock held when f has nothing left to do. */
void wqf_clean(struct wq *q, struct wq_file *f)
{
	if (!f->dirty || f->in_flight || f->has_trunc || !extmap_empty(&f->map))
		return;
	struct closing c = {.f = f, .fd = f->fd, .dfd = f->dfd, .times_set = f->times_set};

	/* Writes reached the medium later than they were made: their times are
	 * restored, through the fd, before it is closed (both unlocked). Until
	 * then the lower shows the writes' times: restoring makes a stat or a
	 * utimens wait (the owner, held until after, keeps f alive). */
	if (f->times_set) {
		memcpy(c.times, f->times, sizeof(c.times));
		__atomic_store_n(&f->restoring, true, __ATOMIC_RELEASE);
	}
	f->times_set = false;
	sq_progress(q, f);
	g_queue_unlink(&q->dirty, &f->link);
	f->link.data = NULL;
	__atomic_store_n(&f->dirty, false, __ATOMIC_RELEASE);
	account(q, f);
	/* A clean file holds no fds: a burst of small files must not exhaust them. */
	g_array_append_val(q->to_close, c);
	f->fd = -1;
	f->dfd = CHUNK_DFD_UNTRIED;
	g_ptr_array_add(q->to_release, f->owner);
	pthread_cond_broadcast(&q->space);
}

static bool restored_any(const GArray *fds)
{
	for (guint i = 0; i < fds->len; i++)
		if (g_array_index(fds, struct closing, i).times_set)
			return true;
	return false;
}

/* Called with the lock held: wait while f's times are being put back. */
static void wait_restored(struct wq *q, const struct wq_file *f)
{
	while (f->restoring)
		timed_wait(&q->done, &q->lock, IDLE_WAIT_NS);
}

/* Restore a clean file's times and close its fds (unlocked). */
static void close_clean(const struct closing *c)
{
	if (c->times_set && futimens(c->fd, c->times) < 0) {
		int saved = errno;
		g_autofree char *path = wq_fd_path(c->fd);
		char esc[512];

		sm_warn("cannot restore times of %s: %s",
			sm_log_escape(path ? path : "(unknown path)", esc, sizeof(esc)),
			g_strerror(saved));
	}
	if (c->dfd >= 0)
		close(c->dfd);
	close(c->fd);
}

void wq_log(struct wq *q, int prio, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	g_ptr_array_add(q->to_log, GINT_TO_POINTER(prio));
	g_ptr_array_add(q->to_log, g_strdup_vprintf(fmt, ap));
	va_end(ap);
}

void wq_unlock_and_release(struct wq *q)
{
	g_autoptr(GPtrArray) owners = NULL;
	g_autoptr(GPtrArray) lines = NULL;
	g_autoptr(GArray) fds = NULL;

	if (q->to_release->len) {
		owners = q->to_release;
		q->to_release = g_ptr_array_new();
	}
	if (q->to_close->len) {
		fds = q->to_close;
		q->to_close = g_array_new(FALSE, FALSE, sizeof(struct closing));
	}
	if (q->to_log->len) {
		lines = q->to_log;
		q->to_log = g_ptr_array_new();
	}
	pthread_mutex_unlock(&q->lock);
	for (guint i = 0; fds && i < fds->len; i++)
		close_clean(&g_array_index(fds, struct closing, i));
	if (fds && restored_any(fds)) {
		pthread_mutex_lock(&q->lock);
		for (guint i = 0; i < fds->len; i++) {
			struct closing *c = &g_array_index(fds, struct closing, i);
			if (c->times_set) {
				wqf_landed(c->f); /* a stat taken before sees it changed */
				__atomic_store_n(&c->f->restoring, false, __ATOMIC_RELEASE);
				c->f->stimes_gen = 0;
				sq_progress(q, c->f);
			}
		}
		pthread_cond_broadcast(&q->done);
		pthread_mutex_unlock(&q->lock);
	}
	for (guint i = 0; lines && i + 1 < lines->len; i += 2) {
		sm_log(GPOINTER_TO_INT(lines->pdata[i]), "%s", (char *)lines->pdata[i + 1]);
		g_free(lines->pdata[i + 1]);
	}
	/* Last: a release may free the owner, and with it the wq_file. */
	for (guint i = 0; owners && i < owners->len; i++)
		q->hooks.release(q->hooks.ctx, owners->pdata[i]);
}

/* Called with the lock held: f gets work. hooks.hold only takes a reference, so
 * it is safe under the lock (release, which may free, is not). */
static int file_make_dirty(struct wq *q, struct wq_file *f, int fd)
{
	if (f->dirty)
		return 0;
	/* f->size: file_probe's, under this hold of the lock. */
	f->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (f->fd < 0)
		return -errno;
	__atomic_store_n(&f->dirty, true, __ATOMIC_RELEASE);
	f->link.data = f;
	g_queue_push_tail_link(&q->dirty, &f->link);
	q->hooks.hold(q->hooks.ctx, f->owner);
	return 0;
}

struct wq_file *wq_file_attach(struct wq *q, struct wq_file **slot, void *owner)
{
	/* Set once, never cleared while the owner lives: only the first
	 * write of a file takes the lock here. */
	struct wq_file *f = __atomic_load_n(slot, __ATOMIC_ACQUIRE);

	if (f)
		return f;
	pthread_mutex_lock(&q->lock);
	f = *slot;
	if (!f) {
		f = g_new0(struct wq_file, 1);
		f->owner = owner;
		f->fd = -1;
		f->dfd = CHUNK_DFD_UNTRIED;
		extmap_init(&f->map, &q->mem);
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
	sq_file_free(f);
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
int wq_wait_all_flushed(struct wq *q)
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
 * must be written through (the medium is nearly full), or -errno: f's own
 * error only, never another file's. fd is the writer's. */
static int reserve_space(struct wq *q, struct wq_file *f, int fd, off_t off, size_t len)
{
	uint64_t mine = need_with_write(q, f, off, len);

	/* A write over blocks already counted (or allocated) takes nothing more. */
	if (mine <= f->need || fits(q, f, mine, false))
		return 0;
	recount_stale(q);
	mine = need_with_write(q, f, off, len);
	if (fits(q, f, mine, false))
		return 0;
	wq_dbg(q, "free space low: draining before queuing %zu bytes", len);
	wq_wait_all_flushed(q); /* other files failing does not fail this one */
	if (f->error)
		return f->error;
	if (!f->dirty)
		file_probe(q, f, fd); /* it was flushed meanwhile */
	recount_stale(q);
	return fits(q, f, need_with_write(q, f, off, len), true) ? 0 : 1;
}

/* Called with the lock held: memory held by files whose data fails. */
static uint64_t failing_bytes(const struct wq *q)
{
	uint64_t failing = 0;

	for (GList *l = q->dirty.head; l; l = l->next) {
		const struct wq_file *g = l->data;
		if (g->error)
			failing += g->map.mem;
	}
	return failing;
}

/* Called with the lock held: whether f's writes are kept in the spool's
 * journal once memory is full (spool=, and f still has a name there). */
static bool spooled(const struct wq *q, const struct wq_file *f)
{
	return q->sq && !f->sgone;
}

/* Called with the lock held: whether len more bytes of f fit in memory.
 * queue= bounds memory, not data bytes (extents.h: extmap_write_cost); with
 * a spool, data takes at most (SPOOL_NODE_SHARE - 1) / SPOOL_NODE_SHARE of
 * it, and the rest is for the extents of writes kept only in the journal.
 * Only a full queue needs the walk over the files. */
static bool mem_room(const struct wq *q, const struct wq_file *f, size_t len)
{
	uint64_t cap = q->opts.queue_bytes;
	size_t cost = extmap_write_cost(len);

	if (spooled(q, f))
		cap -= cap / SPOOL_NODE_SHARE;
	return policy_room(cap, q->mem, q->mem + cost > cap ? failing_bytes(q) : 0,
			   f->map.mem, cost);
}

/* Called with the lock held: whether a write of len bytes to f is queued
 * as its place in the spool's journal, not copied into memory: with a
 * spool, a write of SPOOL_JOURNAL_MIN bytes or more (the journal has its
 * bytes anyway: a copy would only cost the writer time, page faults on
 * fresh memory), or one that memory has no room for. */
static bool journal_only(const struct wq *q, const struct wq_file *f, size_t len)
{
	return spooled(q, f) && (len >= SPOOL_JOURNAL_MIN || !mem_room(q, f, len));
}

/* Called with the lock held: whether len more bytes of f fit in the queue now. */
static bool room_for(const struct wq *q, const struct wq_file *f, size_t len)
{
	if (!f->dirty && q->dirty.length >= q->max_dirty)
		return false;
	/* The spool holds spool_max: room comes as chunks land, or (nothing
	 * queued) with the metadata flush that frees their records. */
	if (q->sq && sq_full(q) && (q->dirty.length || !q->sq_full_synced))
		return false;
	/* Kept in the journal alone, a write costs its extent here. */
	if (journal_only(q, f, len))
		return q->mem + EXT_FILE_WRITE_COST <= q->opts.queue_bytes;
	return mem_room(q, f, len);
}

/* Called with the lock held: block while the queue is full (backpressure).
 * Only f's own error ends the wait early. */
static int wait_for_room(struct wq *q, struct wq_file *f, size_t len)
{
	q->room_waiters++;
	while (!f->error && !q->closing && !room_for(q, f, len)) {
		bool spool = q->sq && !q->dirty.length; /* waiting for a metadata flush */

		if (spool)
			pthread_cond_signal(&q->work);
		timed_wait(&q->space, &q->lock, spool ? SPOOL_ROOM_POLL_NS : IDLE_WAIT_NS);
	}
	q->room_waiters--;
	if (q->closing && !f->error && !room_for(q, f, len))
		return -EIO;
	return f->error;
}

/* Called with the lock held: refuse or shorten a write the lower file could
 * never take, as the lower's own write() would: EFBIG at or past its limit, a
 * short write across it. */
static int clip_to_max_size(struct wq *q, struct wq_file *f, int fd, off_t off, size_t *len)
{
	/* Files of one filesystem mostly share their limit (on ext4 all but
	 * block-mapped ones): the last one found is checked first. */
	if (!f->max_size)
		f->max_size = q->max_size_hint = chunk_max_size(fd, q->max_size_hint);
	if (off >= f->max_size)
		return -EFBIG;
	if ((uint64_t)*len > (uint64_t)(f->max_size - off))
		*len = (size_t)(f->max_size - off);
	return 0;
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

/* Called without the lock (a log line may block): a write-through (made
 * because the medium is nearly full) that the medium refused is logged, once
 * until one succeeds again; the writer hears the error (ENOSPC; EPERM from
 * fusefat) or the short count from the write itself. */
static void note_full(struct wq *q, struct wq_file *f, int fd, ssize_t r, size_t len)
{
	g_autofree char *path = NULL;
	char esc[512];

	if (r == (ssize_t)len) {
		__atomic_store_n(&f->full_logged, false, __ATOMIC_RELAXED);
		return;
	}
	if (__atomic_exchange_n(&f->full_logged, true, __ATOMIC_RELAXED))
		return;
	path = wq_fd_path(fd);
	wq_err(q, "write to %s refused: the medium is (nearly) full (%s; %zd of %zu bytes written)",
	       sm_log_escape(path ? path : "(unknown path)", esc, sizeof(esc)),
	       r < 0 ? g_strerror((int)-r) : "short write", r < 0 ? 0 : r, len);
}

/* Called with the lock held: put the write in f's extent map, and in the
 * spool's journal. In memory, or (journal_only) journaled first and queued
 * as the place it has there, read back to be flushed. 0, or -errno (nothing
 * queued). *jerr: 0, or the spool's error for a write it refused after the
 * queue took it (the data lands all the same, and the writer hears it: the
 * spool's disk is full or failing). */
static int queue_data(struct wq *q, struct wq_file *f, int fd, const void *data, size_t len,
		      off_t off, int *jerr)
{
	struct ext_file *file = NULL;
	off_t foff = 0;
	int r;

	if (!journal_only(q, f, len)) {
		r = extmap_write_counted(&f->map, off, data, len, CHUNK_MAX_BYTES);
		if (r < 0)
			return r;
		*jerr = sq_append(q, f, fd, SPJ_WRITE, (uint64_t)off, len, 0, data, len,
				  extmap_gen(&f->map));
		return 0;
	}
	r = sq_append_at(q, f, fd, SPJ_WRITE, (uint64_t)off, len, 0, data, len,
			 extmap_gen(&f->map) + 1, &file, &foff);
	if (r < 0)
		return r;
	/* Unlinked meanwhile (not journaled), or its segment cannot be read
	 * back: memory it is, once. */
	if (!file)
		return extmap_write_counted(&f->map, off, data, len, CHUNK_MAX_BYTES);
	r = extmap_write_file_counted(&f->map, off, len, file, foff);
	ext_file_unref(file);
	return r;
}

/* Called with the lock held: queue the write, waiting for room if need be. */
static ssize_t queue_write(struct wq *q, struct wq_file *f, int fd, const void *data,
			   size_t len, off_t off)
{
	ssize_t r = wait_for_room(q, f, len);
	uint64_t take;
	int jerr = 0;

	if (r < 0)
		return r;
	if (!f->dirty) {
		r = file_probe(q, f, fd);
		if (r < 0)
			return r;
	}
	r = reserve_space(q, f, fd, off, len);
	if (r < 0)
		return r;
	if (r == 1 && !f->dirty) {
		/* Nearly full medium, file clean: the writer gets the medium's answer.
		 * Not under the lock: it may take as long as the medium wants; what
		 * it may take stays reserved (passing) until free space is read again. */
		take = need_with_write(q, f, off, len) * q->unit;
		q->passing += take;
		pthread_mutex_unlock(&q->lock);
		r = pwrite(fd, data, len, off);
		r = r < 0 ? -errno : r;
		note_full(q, f, fd, r, len);
		pthread_mutex_lock(&q->lock);
		wq_refresh_avail(q);
		q->passing -= take;
		return r;
	}
	r = file_make_dirty(q, f, fd);
	if (r < 0)
		return r;
	q->queued -= f->map.bytes;
	r = queue_data(q, f, fd, data, len, off, &jerr);
	q->queued += f->map.bytes;
	if (r < 0) {
		wqf_clean(q, f); /* no memory, no journal: made dirty for nothing, if it was */
		return r;
	}
	if (off + (off_t)len > f->size)
		f->size = off + (off_t)len;
	account(q, f);
	touch_mtime(f);
	/* Only a flusher without a file needs to hear of it: one waiting for
	 * reads, the pacer or a grant decides the same with more queued. A
	 * wake-up per write costs the writers the lock (it takes it at once). */
	if (q->idle_flushers)
		pthread_cond_signal(&q->work);
	return jerr < 0 ? jerr : (ssize_t)len;
}

/* Called with the lock held: hand the write to the admitter (data copied). */
static void park_write(struct wq *q, struct wq_file *f, int fd, const void *data, size_t len,
		       off_t off, wq_write_done_fn done, void *ctx)
{
	struct parked_write *p = g_new(struct parked_write, 1);

	*p = (struct parked_write){.f = f, .fd = fd, .data = g_memdup2(data, len), .len = len,
				   .off = off, .done = done, .ctx = ctx};
	g_queue_push_tail(&q->parked, p);
	pthread_cond_signal(&q->admit);
}

ssize_t wq_write(struct wq *q, struct wq_file *f, int fd, const void *data, size_t len,
		 off_t off, wq_write_done_fn done, void *ctx)
{
	ssize_t r;

	pthread_mutex_lock(&q->lock);
	r = f->error;
	if (r < 0)
		goto out;
	r = clip_to_max_size(q, f, fd, off, &len);
	if (r < 0)
		goto out;
	/* Behind writes already waiting, or without room: wait in the admitter,
	 * not in this thread, which reads and lookups may need. */
	if (done && (!g_queue_is_empty(&q->parked) || !room_for(q, f, len))) {
		park_write(q, f, fd, data, len, off, done, ctx);
		r = WQ_PARKED;
		goto out;
	}
	r = queue_write(q, f, fd, data, len, off);
out:
	pthread_mutex_unlock(&q->lock);
	if (r > 0) {
		int d = sq_durable(q); /* spool_sync=0: on the spool's disk first */
		if (d < 0)
			r = d;
	}
	return r;
}

/* One thread waits for room on behalf of every parked write, oldest first,
 * so writers blocked by backpressure hold none of the FUSE worker threads. */
void *wq_admitter_main(void *arg)
{
	struct wq *q = arg;
	sigset_t all;

	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	pthread_mutex_lock(&q->lock);
	for (;;) {
		struct parked_write *p = g_queue_pop_head(&q->parked);
		ssize_t r;

		if (!p) {
			if (q->closing)
				break;
			pthread_cond_wait(&q->admit, &q->lock);
			continue;
		}
		q->admitting = true;
		if (q->closing)
			r = -EIO; /* the mount is gone: nobody hears it */
		else if (p->f->error)
			r = p->f->error;
		else
			r = queue_write(q, p->f, p->fd, p->data, p->len, p->off);
		pthread_mutex_unlock(&q->lock);
		if (r > 0) {
			int d = sq_durable(q);
			if (d < 0)
				r = d;
		}
		p->done(p->ctx, r);
		g_free(p->data);
		g_free(p);
		pthread_mutex_lock(&q->lock);
		q->admitting = false;
		pthread_cond_broadcast(&q->done);
	}
	pthread_mutex_unlock(&q->lock);
	return NULL;
}

/* A read ended: wake a flusher that waits only for reads to end, when no
 * grace follows. Without the lock in the common case (nobody waits). */
static void gate_left(struct wq *q, int64_t now)
{
	if (!__atomic_load_n(&q->gate_waiters, __ATOMIC_SEQ_CST) || readgate_wait_ns(&q->gate, now))
		return;
	pthread_mutex_lock(&q->lock);
	pthread_cond_broadcast(&q->work);
	pthread_mutex_unlock(&q->lock);
}

int64_t wq_read_begin(struct wq *q)
{
	if (readgate_enter(&q->gate))
		arb_reads_changed(q);
	return now_ns();
}

void wq_read_end(struct wq *q, int64_t began_ns)
{
	int64_t now = now_ns();

	if (readgate_leave_timed(&q->gate, began_ns, now))
		arb_reads_changed(q);
	gate_left(q, now);
}

int64_t wq_meta_begin(struct wq *q)
{
	return wq_read_begin(q);
}

void wq_meta_end(struct wq *q, int64_t began_ns)
{
	wq_read_end(q, began_ns);
}

/* Called with the lock held: lay f's queued state over n bytes read from lower. */
static ssize_t overlay(struct wq_file *f, char *buf, size_t len, off_t off, ssize_t n)
{
	size_t want;

	if (off >= f->size)
		return 0;
	want = MIN(len, (size_t)(f->size - off));
	/* Lower bytes past a truncate that is pending or being applied are gone. */
	if (f->has_trunc && off + n > f->trunc_floor)
		n = MAX(0, f->trunc_floor - off);
	if (f->trunc_flying && off + n > f->flying_floor)
		n = MAX(0, f->flying_floor - off);
	if ((size_t)n < want)
		memset(buf + n, 0, want - (size_t)n);
	n = extmap_overlay(&f->map, off, buf, want); /* pieces kept in the spool: pread */
	return n < 0 ? n : (ssize_t)want;
}

/* Called with the lock held: hold f's chunks back until one read is done,
 * once none is in flight (chunks kept landing under the reader). */
static void pin_for_read(struct wq *q, struct wq_file *f)
{
	f->read_pins++;
	while (f->in_flight)
		timed_wait(&q->done, &q->lock, IDLE_WAIT_NS);
}

/*
 * The lower is read without the lock; f->dirty and f->seq are sampled
 * before it atomically (both are stored under the lock with release). The
 * lock is taken once, after the read, to lay the queued extents over it,
 * and not at all for a file with nothing queued whose seq did not move.
 */
ssize_t wq_read(struct wq *q, struct wq_file *f, int fd, char *buf, size_t len, off_t off)
{
	int64_t began = now_ns(), now;
	bool pinned = false;
	ssize_t n = 0;

	if (readgate_enter(&q->gate))
		arb_reads_changed(q);
	for (int tries = 0;; tries++) {
		bool dirty;
		uint64_t seq;

		if (f && tries == READ_RETRIES) {
			pthread_mutex_lock(&q->lock);
			pin_for_read(q, f); /* the read may be slow: not under the lock */
			pinned = true;
			pthread_mutex_unlock(&q->lock);
		}
		dirty = f && __atomic_load_n(&f->dirty, __ATOMIC_ACQUIRE);
		seq = f ? __atomic_load_n(&f->seq, __ATOMIC_ACQUIRE) : 0;
		n = pread(fd, buf, len, off);
		n = n < 0 ? -errno : n;
		if (n < 0 || !f)
			break;
		if (!dirty && !__atomic_load_n(&f->dirty, __ATOMIC_ACQUIRE) &&
		    __atomic_load_n(&f->seq, __ATOMIC_ACQUIRE) == seq)
			break;
		pthread_mutex_lock(&q->lock);
		if (f->seq != seq && !pinned) {
			pthread_mutex_unlock(&q->lock);
			continue; /* a chunk landed while we read: read again */
		}
		if (dirty || f->dirty)
			n = overlay(f, buf, len, off, n);
		pthread_mutex_unlock(&q->lock);
		break;
	}
	if (pinned) {
		pthread_mutex_lock(&q->lock);
		if (--f->read_pins == 0)
			pthread_cond_broadcast(&q->work);
		pthread_mutex_unlock(&q->lock);
	}
	now = now_ns();
	if (readgate_leave_timed(&q->gate, began, now))
		arb_reads_changed(q);
	gate_left(q, now);
	return n;
}

int wq_truncate(struct wq *q, struct wq_file *f, int fd, off_t size)
{
	int r;

	pthread_mutex_lock(&q->lock);
	/* Times being put back on a file that just went clean would land after
	 * the caller's truncate and undo the mtime it sets. */
	wait_restored(q, f);
	if (!f->dirty) {
		/* Nothing queued: order is trivially kept, the caller truncates now;
		 * the spool must not replay older writes of it past the new end. */
		r = f->skey ? sq_append(q, f, fd, SPJ_TRUNCATE, (uint64_t)size, 0, 0, NULL, 0,
					extmap_next_gen(&f->map))
			    : 0;
		sq_progress(q, f);
		pthread_mutex_unlock(&q->lock);
		return r < 0 ? r : 1;
	}
	if (f->error) {
		/* Refused, like a write: a truncate reported failed must not be
		 * applied later, when the file's data does land. */
		r = f->error;
		pthread_mutex_unlock(&q->lock);
		return r;
	}
	q->queued -= f->map.bytes;
	extmap_truncate_counted(&f->map, size);
	q->queued += f->map.bytes;
	if (!f->has_trunc || size < f->trunc_floor)
		f->trunc_floor = MIN(size, f->size);
	uint64_t gen = f->has_trunc ? extmap_next_gen(&f->map) : 0;
	if (!f->has_trunc)
		gen = f->trunc_gen = extmap_next_gen(&f->map);
	f->has_trunc = true;
	f->trunc_size = size;
	f->size = size;
	account(q, f);
	wqf_landed(f);
	touch_mtime(f);
	r = sq_append(q, f, fd, SPJ_TRUNCATE, (uint64_t)size, 0, 0, NULL, 0, gen);
	pthread_cond_signal(&q->work);
	pthread_cond_broadcast(&q->space);
	pthread_mutex_unlock(&q->lock);
	return r < 0 ? r : 0;
}

/* Called with the lock held: journal f's explicit times (set or pending). */
static int journal_times(struct wq *q, struct wq_file *f, int fd, const struct timespec tv[2])
{
	uint8_t pl[SPJ_TIMES_SIZE];
	int64_t ns[2];
	uint64_t gen;

	if (!q->sq)
		return 0;
	for (int i = 0; i < 2; i++)
		ns[i] = tv[i].tv_nsec == UTIME_OMIT
				? SPJ_TIME_OMIT
				: (int64_t)tv[i].tv_sec * NSEC_PER_SEC + tv[i].tv_nsec;
	spj_times_pack(pl, ns[0], ns[1]);
	gen = extmap_next_gen(&f->map);
	if (f->dirty && !f->stimes_gen)
		f->stimes_gen = gen;
	return sq_append(q, f, fd, SPJ_TIMES, 0, 0, 0, pl, sizeof(pl), gen);
}

int wq_set_times(struct wq *q, struct wq_file *f, int fd, const struct timespec tv[2])
{
	pthread_mutex_lock(&q->lock);
	wait_restored(q, f); /* else the restore would undo these */
	if (!f->dirty) {
		/* Set now by the caller; a replay must not put older ones back. */
		int r = 0;
		if (f->skey) {
			struct timespec now[2];
			for (int i = 0; i < 2; i++) {
				now[i] = tv[i];
				if (tv[i].tv_nsec == UTIME_NOW)
					now_realtime(&now[i]);
			}
			r = journal_times(q, f, fd, now);
			sq_progress(q, f);
		}
		pthread_mutex_unlock(&q->lock);
		return r < 0 ? r : 1;
	}
	for (int i = 0; i < 2; i++) {
		if (tv[i].tv_nsec == UTIME_NOW)
			now_realtime(&f->times[i]);
		else if (tv[i].tv_nsec != UTIME_OMIT || !f->times_set)
			f->times[i] = tv[i];
	}
	f->times_set = true;
	int r = journal_times(q, f, fd, f->times);
	pthread_mutex_unlock(&q->lock);
	return r < 0 ? r : 0;
}

/* Called with the lock held: whether writes or truncates of f up to
 * generation gen are not all on the medium yet. */
static bool pending_upto(const struct wq_file *f, uint64_t gen)
{
	return (f->has_trunc && f->trunc_gen <= gen) ||
	       (f->trunc_flying && f->flying_gen <= gen) || extmap_oldest_gen(&f->map) <= gen;
}

static int flush_upto(struct wq *q, struct wq_file *f, bool all)
{
	int r;

	pthread_mutex_lock(&q->lock);
	if (f->dirty && pending_upto(f, all ? UINT64_MAX : extmap_gen(&f->map))) {
		/* Only what was queued before the call: later writes (a second
		 * writer, an appender) must not stretch this wait. */
		uint64_t gen = all ? UINT64_MAX : extmap_gen(&f->map), fails = f->fail_count;
		/* Jump the queue: whoever waits on this file goes first; a failing
		 * file is retried now rather than after its backoff. */
		f->urgent++;
		q->nurgent++;
		g_queue_unlink(&q->dirty, &f->link);
		g_queue_push_head_link(&q->dirty, &f->link);
		f->retry_at_ns = 0;
		pthread_cond_broadcast(&q->work);
		while (f->dirty && f->fail_count == fails && pending_upto(f, gen))
			timed_wait(&q->done, &q->lock, IDLE_WAIT_NS);
		f->urgent--;
		q->nurgent--;
	}
	r = f->error;
	pthread_mutex_unlock(&q->lock);
	return r;
}

int wq_flush_file(struct wq *q, struct wq_file *f)
{
	return flush_upto(q, f, false);
}

int wq_settle_file(struct wq *q, struct wq_file *f)
{
	return flush_upto(q, f, true);
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
		wq_dbg(q, "an unlinked, closed file: dropping %" G_GUINT64_FORMAT " queued bytes",
		       f->map.bytes);
		q->queued -= f->map.bytes;
		extmap_truncate_counted(&f->map, 0);
		f->has_trunc = false;
		f->times_set = false;
		f->error = 0;
		sq_forget(q, f);
		pthread_cond_broadcast(&q->space);
		pthread_cond_broadcast(&q->done);
		wqf_clean(q, f); /* now, or when the chunk in flight ends */
	}
	wq_unlock_and_release(q);
}

uint64_t wq_seq(struct wq *q, struct wq_file *f)
{
	(void)q; /* stored under its lock with release: no lock to read it */
	return __atomic_load_n(&f->seq, __ATOMIC_ACQUIRE);
}

bool wq_fix_stat(struct wq *q, struct wq_file *f, struct stat *st, uint64_t seq)
{
	/* As wq_read: a file clean through the stat (nothing landed, no times
	 * being restored) needs no lock; most stats are of such files. */
	if (!__atomic_load_n(&f->dirty, __ATOMIC_ACQUIRE) &&
	    !__atomic_load_n(&f->restoring, __ATOMIC_ACQUIRE) &&
	    __atomic_load_n(&f->seq, __ATOMIC_ACQUIRE) == seq)
		return true;
	pthread_mutex_lock(&q->lock);
	wait_restored(q, f);
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

	if (!bs)
		return; /* a lower (FUSE, say) that reports no block size: nothing to scale by */
	pthread_mutex_lock(&q->lock);
	if (q->need)
		recount_stale(q); /* df must not show flushed data twice */
	blocks = div_up(q->need * q->unit + q->passing, bs);
	pthread_mutex_unlock(&q->lock);
	sv->f_bfree = sv->f_bfree > blocks ? sv->f_bfree - blocks : 0;
	sv->f_bavail = sv->f_bavail > blocks ? sv->f_bavail - blocks : 0;
}

/* Units a fallocate of [off, off+len) may allocate on the lower file st. */
static uint64_t falloc_need(const struct wq *q, const struct stat *st, int mode, off_t off,
			    off_t len)
{
	uint64_t end = (uint64_t)off + (uint64_t)len, n = 0;

	if (mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_COLLAPSE_RANGE))
		return 0; /* these free space */
	if (q->no_holes) {
		/* FAT fills up to the end; below the file's size all is taken. */
		uint64_t have = div_up((uint64_t)st->st_size, q->unit);
		n = div_up(end, q->unit) > have ? div_up(end, q->unit) - have : 0;
		return n ? n + div_up(n * BLOCK_PTR_BYTES, q->unit) + META_BLOCKS_PER_FILE : 0;
	}
	/* Counted as if none of the range were allocated yet (cheap and safe:
	 * when that does not fit, the drained queue lets the lower answer). */
	for (int l = 0; l < EXT_COUNT_LEVELS; l++)
		if (q->levels[l])
			n += div_up(end, q->levels[l]) - (uint64_t)off / q->levels[l];
	return n ? n + div_up(n * EXTENT_ENTRY_BYTES, q->unit) + META_BLOCKS_PER_FILE : 0;
}

/* Called with the lock held: 0 when take more bytes fit beside the queue's
 * need, after a drain if need be; -ENOSPC when the data still queued (of
 * failing files) would not fit beside them. */
static int reserve_bytes(struct wq *q, uint64_t take)
{
	wq_refresh_avail(q); /* fallocate is rare: read free space afresh */
	if (q->need * q->unit + q->passing + take <= q->avail)
		return 0;
	recount_stale(q);
	if (q->need * q->unit + q->passing + take <= q->avail)
		return 0;
	wq_dbg(q, "free space low: draining before a fallocate of up to %" G_GUINT64_FORMAT
	       " bytes", take);
	wq_wait_all_flushed(q);
	recount_stale(q);
	if (q->need * q->unit + q->passing + take <= q->avail)
		return 0;
	/* Nothing of ours is waiting for space: the lower's own answer is right. */
	return q->need || q->passing ? -ENOSPC : 0;
}

int wq_fallocate(struct wq *q, struct wq_file *f, int fd, int mode, off_t off, off_t len)
{
	struct stat st;
	uint64_t take;
	int r;

	if (fstat(fd, &st) < 0)
		return -errno;
	pthread_mutex_lock(&q->lock);
	take = falloc_need(q, &st, mode, off, len) * q->unit;
	r = take ? reserve_bytes(q, take) : 0;
	if (r < 0) {
		wq_unlock_and_release(q);
		return r;
	}
	/* Held while the lower allocates, so no write is queued into that space. */
	q->passing += take;
	pthread_mutex_unlock(&q->lock);
	r = fallocate(fd, mode, off, len) < 0 ? -errno : 0;
	pthread_mutex_lock(&q->lock);
	if (r == 0 && f && f->dirty) {
		/* The size the queue lays over stat grows with the lower's. */
		if (!(mode & FALLOC_FL_KEEP_SIZE) && off + len > f->size)
			f->size = off + len;
		wqf_landed(f);
	}
	/* Applied now, after the file's earlier writes: a replay of those must
	 * not undo it (a punched hole filled again). */
	if (r == 0 && f && f->skey) {
		r = sq_append(q, f, fd, SPJ_FALLOCATE, (uint64_t)off, (uint64_t)len, (uint32_t)mode,
			      NULL, 0, extmap_next_gen(&f->map));
		sq_progress(q, f);
	}
	if (take)
		wq_refresh_avail(q); /* now what it took is counted as used */
	q->passing -= take;
	wq_unlock_and_release(q);
	return r;
}

/* Queued runs count as data in whole pages, as filesystems answer SEEK_DATA. */
#define SEEK_GRAIN 4096

/* Called with the lock held: lower bytes at or past this are gone (a truncate
 * pending or being applied); INT64_MAX when none is. */
static off_t lower_floor(const struct wq_file *f)
{
	off_t floor = INT64_MAX;

	if (f->has_trunc)
		floor = f->trunc_floor;
	if (f->trunc_flying)
		floor = MIN(floor, f->flying_floor);
	return floor;
}

/* x rounded up to whole SEEK_GRAINs (INT64_MAX stays). */
static off_t round_grain(off_t x)
{
	return x < INT64_MAX - SEEK_GRAIN ? x + (SEEK_GRAIN - x % SEEK_GRAIN) % SEEK_GRAIN : x;
}

/* The lower file's SEEK_DATA or SEEK_HOLE at pos, below floor: what it
 * answers, or INT64_MAX (no data) / pos (a hole) past its end. */
static off_t lower_seek(int fd, off_t pos, int whence, off_t floor)
{
	struct stat st;
	off_t r, tail;

	/* Whole blocks, as a filesystem answers: a truncate to the middle of
	 * one leaves zeros up to its end, which may count as data. An
	 * unaligned hole made readers that round down to blocks read the
	 * block before it twice (parity's content digest did, under load). */
	floor = round_grain(floor);
	if (pos >= floor)
		return whence == SEEK_DATA ? INT64_MAX : pos;
	r = lseek(fd, pos, whence);
	if (r < 0 && errno != ENXIO)
		return -errno;
	if (r < 0)
		r = whence == SEEK_DATA ? INT64_MAX : pos;
	/* The lower file may end short of the file's size (a truncate that
	 * grows it is pending, or half applied): when its last byte is data,
	 * its last block is data up to the grain, as once the file has its
	 * size. (Not when it ends in a hole: a truncate grew it before.) */
	tail = fstat(fd, &st) == 0 && st.st_size % SEEK_GRAIN ? round_grain(st.st_size) : 0;
	if (pos < tail && r >= st.st_size) {
		bool last_data = (whence == SEEK_HOLE && r > pos) ||
				 lseek(fd, st.st_size - 1, SEEK_DATA) == st.st_size - 1;

		if (last_data && whence == SEEK_HOLE)
			r = tail;
		else if (last_data && pos >= tail - SEEK_GRAIN)
			r = pos; /* SEEK_DATA in the last block */
	}
	if (whence == SEEK_DATA && r >= floor)
		return INT64_MAX;
	return whence == SEEK_HOLE ? MIN(r, MAX(pos, floor)) : r;
}

/* The queued run containing or after pos, widened to whole pages. */
static bool queued_run(struct wq *q, struct wq_file *f, off_t pos, off_t *s, off_t *e)
{
	bool r;

	pthread_mutex_lock(&q->lock);
	r = extmap_run_from(&f->map, pos, s, e);
	pthread_mutex_unlock(&q->lock);
	/* Whole blocks, as the lower will answer once the data is there. */
	*s -= *s % SEEK_GRAIN;
	*e = round_grain(*e);
	return r;
}

int wq_lseek(struct wq *q, struct wq_file *f, int fd, off_t off, int whence, off_t *pos)
{
	off_t size, floor, s, e, l;

	pthread_mutex_lock(&q->lock);
	if (!f->dirty) {
		pthread_mutex_unlock(&q->lock);
		return 1;
	}
	size = f->size;
	floor = lower_floor(f);
	pthread_mutex_unlock(&q->lock);
	if (off < 0 || off >= size)
		return -ENXIO;
	if (whence == SEEK_DATA) {
		l = lower_seek(fd, off, SEEK_DATA, floor);
		if (l < 0)
			return (int)l;
		if (queued_run(q, f, off, &s, &e))
			l = MIN(l, MAX(s, off));
		if (l >= size)
			return -ENXIO;
		*pos = l;
		return 0;
	}
	/* SEEK_HOLE: step over queued runs and lower data until neither is there. */
	for (off_t p = off;;) {
		if (p >= size) {
			*pos = size;
			return 0;
		}
		if (queued_run(q, f, p, &s, &e) && s <= p) {
			p = e;
			continue;
		}
		l = lower_seek(fd, p, SEEK_HOLE, floor);
		if (l < 0)
			return (int)l;
		if (l == p) {
			*pos = p;
			return 0;
		}
		p = l;
	}
}

void wq_note_entry(struct wq *q, const char *path)
{
	pthread_mutex_lock(&q->lock);
	risk_add(&q->risk, path);
	pthread_mutex_unlock(&q->lock);
}


int wq_spool_open(struct wq *q, char *why, size_t why_n)
{
	int r;

	q->root_path = wq_fd_path(q->root_fd);
	r = medium_identify(q->root_fd, &q->medium);
	if (r < 0 && q->opts.spool_dir) {
		snprintf(why, why_n, "spool: cannot identify the medium: %s", g_strerror(-r));
		return r;
	}
	if (r < 0)
		g_strlcpy(q->medium.id, "unknown", sizeof(q->medium.id));
	/* Refused now rather than found wanting at exit, with data to save. */
	r = rescue_check_base(q->opts.rescue_dir, why, why_n);
	if (r < 0)
		return r;
	return sq_open(q, &q->opts, why, why_n);
}

void wq_spool_stats(struct wq *q, struct wq_spool_stats *s)
{
	sq_get_stats(q, s);
	pthread_mutex_lock(&q->lock);
	for (GList *l = q->dirty.head; l; l = l->next)
		s->journal_only += ((const struct wq_file *)l->data)->map.file_bytes;
	pthread_mutex_unlock(&q->lock);
}

void wq_note_rename(struct wq *q, const char *from, const char *to)
{
	sq_note_rename(q, from, to);
}

bool wq_spooling(const struct wq *q)
{
	return q->sq != NULL;
}
