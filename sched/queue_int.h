/*
 * The write queue's internals, shared by queue.c (per-file state and the wq_*
 * API, backpressure, the admitter) and flusher.c (the flusher threads, the
 * metadata flush, the drain). Nothing outside sched/ includes this.
 *
 * Locks. One mutex, q->lock, guards everything in struct wq and struct
 * wq_file except what is marked immutable. Lock order: q->lock before the
 * inode table's ino_lock (fusefs/inode.c), which the hold hook takes under
 * q->lock; nothing takes q->lock while holding ino_lock. The release hook is
 * called without q->lock (wq_unlock_and_release), since it may free.
 */
#pragma once
#include "queue.h"
#include "extents.h"
#include "pacer.h"
#include "policy.h"
#include "risk.h"
#include "log.h"
#include "spool_journal.h"
#include "medium.h"

#include <glib.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>

#define DIRTY_FILES_MIN 16
/* The block device is swept in slices of at least this, and at most this many. */
#define SWEEP_SLICE_MIN (64ull << 10)
#define SWEEP_SLICES_MAX 65536
#define IDLE_WAIT_NS NSEC_PER_SEC
#define DRAIN_LOG_INTERVAL_NS (5 * NSEC_PER_SEC)
#define READ_RETRIES 4
/* What a metadata sweep asks the arbiter for (its size is not known). */
#define SWEEP_GRANT_BYTES (64ull << 10)
/* How long a drain waits for a grant for its metadata flush. */
#define SYNC_GRANT_WAIT_NS (5 * NSEC_PER_SEC)
#define META_BLOCKS_PER_FILE 3 /* inode, bitmap, indirect block */

struct wq_file {
	void *owner;	/* immutable */
	int fd;		/* lower fd while dirty (a dup of the first writer's), else -1 */
	int dfd;	/* O_DIRECT fd while dirty; CHUNK_DFD_UNTRIED, or -1 if refused */
	struct extmap map;
	off_t size;	  /* logical size; valid while dirty */
	bool dirty;	  /* in q->dirty, owner held */
	GList link;	  /* in q->dirty */
	bool has_trunc;
	off_t trunc_floor, trunc_size;
	uint64_t trunc_gen; /* the oldest pending truncate's place among the writes */
	bool trunc_flying; /* a truncate to flying_floor is being applied */
	off_t flying_floor;
	uint64_t flying_gen;
	bool in_flight;
	off_t cursor;	/* where the next chunk starts looking */
	/* Bumped (wqf_landed) when queued data reaches the lower file; written
	 * under q->lock, read without it by wq_read and wq_seq. */
	uint64_t seq;
	int error;	/* sticky, -errno */
	unsigned failures;	/* consecutive; reset by a success */
	uint64_t fail_count;	/* all failures ever: lets fsync wait for one retry */
	int64_t retry_at_ns;
	unsigned urgent; /* fsync waiters: flush this file first */
	unsigned read_pins; /* readers that hold this file's chunks back (wq_read) */
	bool times_set;	 /* restore times once clean */
	struct timespec times[2];
	off_t max_size;	 /* the lower's size limit for this file; 0: not probed yet */
	uint64_t need;	 /* lower blocks (of q->unit) its queued work needs: its part of q->need */
	/* Clean, but the times of its writes are still being put back on the
	 * lower (wqf_clean to close_clean): a stat or a new utimens waits. */
	bool restoring;
	/* The spool's (spoolq.c): the file's key there (0: nothing journaled
	 * yet), its records' (gen, seq) pairs not known on the lower yet, the
	 * last seq, the generation of the oldest explicit times not restored
	 * yet (0: none), the path as last journaled and the file handle. */
	uint64_t skey;
	GArray *sgen;
	uint64_t shi;
	uint64_t stimes_gen;
	char *spath;
	bool shandle_tried;
	bool sgone;	/* found unlinked: not journaled, its data kept in memory */
	uint32_t shandle_len;
	int32_t shandle_type;
	unsigned char shandle[128];
	/* A write-through was refused for lack of space and logged; the next
	 * such refusal is not (atomic: set and read without q->lock). */
	bool full_logged;
};

/* A write waiting for room without holding the caller's thread: the admitter
 * queues it once there is room, then calls done. */
struct parked_write {
	struct wq_file *f;
	int fd; /* the writer's; valid until done (its write call is in progress) */
	char *data;
	size_t len;
	off_t off;
	wq_write_done_fn done;
	void *ctx;
};

/* The flushers' side of the arbiter client (arb_client.c); under q->lock
 * except peers (atomic). */
struct arb_link {
	struct arbc *client;	/* NULL: arbiter=off */
	bool connected;		/* registered: chunks need grants */
	int id;
	unsigned peers;		/* other mounts in the group; atomic */
	bool want;		/* a flusher waits for a grant */
	bool want_urgent;
	unsigned want_hold_ms;	/* reads may hold it this long (0: unbounded) */
	uint64_t want_bytes;
	bool asked;		/* that request was sent */
	bool granted;		/* a grant came and is not used yet */
	bool holding;		/* a flusher writes under the grant */
	bool lease;		/* alone in the group: chunks need no grant each */
	bool lease_ending;	/* revoked: done once lease_flying is 0 */
	unsigned lease_flying;	/* chunks (and metadata flushes) under the lease */
	uint64_t lease_bytes;	/* written under the lease so far */
	unsigned sync_waiters;	/* in arb_acquire for a metadata flush or drain */
	unsigned done_pending;	/* done messages to send */
	uint64_t done_bytes;
	bool paused;		/* the arbiter paused this mount */
	bool resume;		/* ask it to resume (the final drain) */
	bool rate_told;		/* rate= changed here: tell the arbiter */
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
	/* Memory all extent maps hold (their m->mem, kept by them through
	 * extmap_init's total): what queue= bounds. */
	uint64_t mem;
	uint64_t avail;		/* lower free bytes at the last statvfs */
	uint64_t bsize;		/* lower block size */
	/* Space (queue.c, "Space"). unit, levels and no_holes are immutable. */
	uint64_t unit;		/* the lower's allocation unit: block or cluster, bytes */
	uint64_t levels[EXT_COUNT_LEVELS]; /* what the extent maps count (ext_count.unit) */
	bool no_holes;		/* FAT-like (or unknown FUSE) lower: a write past EOF fills the gap */
	uint64_t need;		/* sum of the dirty files' need, in units */
	uint64_t passing;	/* bytes a write-through or fallocate is taking right now */
	struct pacer pacer;
	struct readgate gate;
	unsigned next_flight;
	struct meta_clock meta;	/* when the medium's metadata is flushed */
	/* Where the last chunk left the head: the next one seeks unless it
	 * continues it with nothing (read, syncfs, truncate) in between. */
	const struct wq_file *last_file; /* only compared, never followed */
	off_t last_end;
	bool head_moved;
	int syncfs_errno;	/* the last syncfs error logged (0: none) */
	bool stopping;
	bool paused;		/* wq_pause: the flushers take no chunk */
	struct arb_link arb;
	bool closing;		/* drained: parked writes are refused */
	pthread_t *threads;
	unsigned nthreads;
	GPtrArray *to_release; /* owners to release once the lock is dropped */
	GArray *to_close;      /* struct closing: fds of files gone clean, closed unlocked */
	GPtrArray *to_log;     /* log lines (prio, then text) written once unlocked */
	GQueue parked;		/* struct parked_write, oldest first */
	pthread_cond_t admit;	/* signalled when a write is parked */
	pthread_t admitter;
	bool admitter_started;
	bool admitting;		/* the admitter holds a parked write */
	unsigned room_waiters;	/* threads in wait_for_room */
	/* The last metadata flush left the spool at spool_max= with nothing it
	 * could still free (a failed syncfs, records it must keep); cleared when
	 * a chunk lands. Until then a write with nothing queued goes on rather
	 * than wait for a flush that frees nothing. */
	bool sq_full_synced;
	unsigned nurgent;	/* fsync (and lseek...) waiters on any file */
	unsigned gate_waiters;	/* flushers waiting for reads to end */
	unsigned idle_flushers;	/* flushers waiting for a file to flush */
	struct gate_hold held;	/* how long reads have held the flushers back */
	/* Lower paths whose metadata may not be on the medium (risk.c). */
	struct risk risk;
	bool check_medium;	   /* a chunk failed: flush the metadata to see */
	uint64_t flushed_bytes, chunks, gathered_chunks;
	unsigned max_dirty; /* immutable: each dirty file holds up to two fds */
	struct spoolq *sq;  /* spool=DIR (set before wq_start), else NULL */
	struct medium medium; /* wq_spool_open's: the spool's key, a rescue's */
	char *root_path;      /* the lower root's absolute path (wq_spool_open) */
	bool abandon;	    /* atomic: a second signal during the final drain */
	off_t max_size_hint; /* the lower's file size limit found last (0: none yet) */
};
/* What the rescue copies per step (flusher.c). */
#define RESCUE_STEP (1u << 20)


static inline int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * NSEC_PER_SEC + ts.tv_nsec;
}

static inline void deadline_in(struct timespec *ts, int64_t ns)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ns += ts->tv_nsec;
	ts->tv_sec += ns / NSEC_PER_SEC;
	ts->tv_nsec = ns % NSEC_PER_SEC;
}

static inline void timed_wait(pthread_cond_t *c, pthread_mutex_t *m, int64_t ns)
{
	struct timespec ts;

	deadline_in(&ts, ns);
	pthread_cond_timedwait(c, m, &ts);
}

static inline void cond_init_monotonic(pthread_cond_t *c)
{
	pthread_condattr_t a;

	pthread_condattr_init(&a);
	pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	pthread_cond_init(c, &a);
	pthread_condattr_destroy(&a);
}

/* Called with the lock held: f's lower file changed under queued data (a
 * chunk or truncate landed, times restored): lockless readers see it. */
static inline void wqf_landed(struct wq_file *f)
{
	__atomic_add_fetch(&f->seq, 1, __ATOMIC_RELEASE);
}

/* A clean file's fds, and the times to restore through them, once unlocked. */
struct closing {
	struct wq_file *f; /* its restoring is cleared once done (times_set) */
	int fd, dfd;
	bool times_set;
	struct timespec times[2];
};

/* queue.c */
/* Called with the lock held: a log line, written at the next
 * wq_unlock_and_release (a log write may block: a full disk, a slow syslog). */
void wq_log(struct wq *q, int prio, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
#define wq_err(q, ...) wq_log(q, LOG_ERR, __VA_ARGS__)
#define wq_info(q, ...) wq_log(q, LOG_INFO, __VA_ARGS__)
#define wq_dbg(q, ...)                                                               \
	do {                                                                         \
		if (sm_log_debug_enabled())                                          \
			wq_log(q, LOG_DEBUG, __VA_ARGS__);                           \
	} while (0)
/* The lower path behind fd (g_free it), or NULL; readlink of /proc/self/fd. */
char *wq_fd_path(int fd);
/* The lower path of a dirty file, escaped for a log line. */
const char *wqf_path(const struct wq_file *f, char *buf, size_t size);
/* Called with the lock held: refresh the free-space figure. */
void wq_refresh_avail(struct wq *q);
/* Called with the lock held: the free-space figure from a statvfs taken unlocked. */
struct statvfs;
void wq_note_statvfs(struct wq *q, const struct statvfs *sv);
/* Called with the lock held when f may have nothing left to do: it leaves the
 * dirty list, closes its fds, and its owner is released at the next
 * wq_unlock_and_release. */
void wqf_clean(struct wq *q, struct wq_file *f);
/* Drop the lock, then close the fds, write the log lines and run the release
 * hooks it collected. */
void wq_unlock_and_release(struct wq *q);
/* Called with the lock held: somebody waits for the queue to move (room,
 * fsync, parked writes). */
bool wq_writers_waiting(const struct wq *q);
/* The admitter thread (see queue.c). */
void *wq_admitter_main(void *arg);
/* Called with the lock held: wait until nothing is queued (0) or everything
 * left is failing (that error). */
int wq_wait_all_flushed(struct wq *q);

/* spoolq.c: the queue's side of the spool (see its DESIGN comment). The
 * sq_* calls that take no lock say so; the others are called with it held,
 * and do nothing without a spool. */
#include "spool_journal.h"
#define SPOOL_MAX_DEFAULT (4ull << 30)
#define SPOOL_SEGMENTS_PER_MAX 4 /* a journal segment is at most spool_max / this */
#define SPOOL_ROOM_POLL_NS (20 * NSEC_PER_MSEC) /* writers at spool_max, nothing queued */
/* With a spool, 1/SPOOL_NODE_SHARE of queue= is kept for the extents of
 * writes held in the journal alone (EXT_FILE_WRITE_COST each): queue=64M
 * leaves 8 MiB, some 40,000 writes, 40 GiB of them at 1 MiB. */
#define SPOOL_NODE_SHARE 8
/* With a spool, writes of this many bytes or more are queued as their place
 * in the journal at once (queue.c: journal_only). */
#define SPOOL_JOURNAL_MIN (64u << 10)
/* Unlocked, before wq_start: check DIR, identify the medium, open its spool
 * and replay what an earlier run left. -errno with why (nothing mounted). */
int sq_open(struct wq *q, const struct sched_opts *o, char *why, size_t why_n);
int sq_start(struct wq *q);  /* unlocked: the syncer thread */
void sq_close(struct wq *q); /* unlocked, after the drain */
/* Journal a change of f made at queue generation gen; fd: a lower fd of
 * the file (O_PATH is fine) when f holds none, else -1. 0, or -errno for
 * the writer (logged once). */
int sq_append(struct wq *q, struct wq_file *f, int fd, enum spj_type type, uint64_t off,
	      uint64_t len, uint32_t mode, const void *payload, size_t payload_len, uint64_t gen);
/* sq_append, and where the payload is in the spool: *file (a reference for
 * the caller; NULL when it cannot be read back) and *foff. 0 when
 * journaled, 1 when not (no spool; f unlinked: f->sgone), -errno. */
int sq_append_at(struct wq *q, struct wq_file *f, int fd, enum spj_type type, uint64_t off,
		 uint64_t len, uint32_t mode, const void *payload, size_t payload_len,
		 uint64_t gen, struct ext_file **file, off_t *foff);
/* Unlocked: a lower name moved (to NULL: removed): files journaled below it
 * get a RENAME or UNLINK record. */
void sq_note_rename(struct wq *q, const char *from_abs, const char *to_abs);
/* Unlocked, before answering a write journaled: durable now (spool_sync=0). */
int sq_durable(struct wq *q);
/* f's records that are all on the lower wait for the next good syncfs. */
void sq_progress(struct wq *q, struct wq_file *f);
/* f's data was dropped (unlinked, closed): its records may go. */
void sq_forget(struct wq *q, struct wq_file *f);
void sq_file_free(struct wq_file *f); /* no lock: f is being freed */
/* Around a syncfs: what it covers, and whether it succeeded. */
GHashTable *sq_take_done(struct wq *q);
void sq_done_synced(struct wq *q, GHashTable *t, bool ok);
/* The spool holds spool_max: writers wait. */
bool sq_full(const struct wq *q);
/* Full, with no segment left to settle: a metadata flush freed what it could. */
bool sq_full_for_good(const struct wq *q);
void sq_get_stats(struct wq *q, struct wq_spool_stats *s);
/* f's path below the lower root (its last journaled one, or from its fd),
 * escaped nowhere: a record's path; NULL when not known. */
const char *sq_rel_path(struct wq *q, struct wq_file *f, char *buf, size_t size);
