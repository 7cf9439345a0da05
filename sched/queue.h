/*
 * The write-behind queue of one mount and its paced flusher pool.
 * See the DESIGN comment in queue.c.
 */
#pragma once
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>

#include "sched_opts.h"

struct wq;
struct wq_file;

struct wq_hooks {
	void *ctx;
	/* The file got queued work: keep its owner alive. Must only take a
	 * reference: it is called under the queue's lock. */
	void (*hold)(void *ctx, void *owner);
	/* The file is clean again (or dropped). May free the owner, which then
	 * calls wq_file_free. Called under no lock. */
	void (*release)(void *ctx, void *owner);
};

/* max_dirty: files that may have queued work at once (each holds two fds). */
struct wq *wq_new(const struct sched_opts *opts, int root_fd, const struct wq_hooks *hooks,
		  unsigned max_dirty);
int wq_start(struct wq *q);
/* Wait until everything is on the medium, or until the medium took nothing
 * for drain_timeout= (or wq_abandon): then what is left stays in the spool,
 * or is saved in the rescue directory; logs progress and where. */
void wq_drain(struct wq *q);
/* A second SIGTERM during wq_drain: it ends now, and what is left is saved
 * (spool, else rescue directory). Async-signal-safe. */
void wq_abandon(struct wq *q);
/* Stop the flushers (after wq_drain) and free the queue. */
void wq_free(struct wq *q);

/* The queue state of one lower file; *slot is set once, under the queue's lock. */
struct wq_file *wq_file_attach(struct wq *q, struct wq_file **slot, void *owner);
void wq_file_free(struct wq_file *f);

/* wq_write's answer when the write waits for room in the admitter thread. */
#define WQ_PARKED (-EINPROGRESS)
/* Called without the queue's lock, from the admitter thread: len or -errno. */
typedef void (*wq_write_done_fn)(void *ctx, ssize_t result);
/*
 * Queue a write. fd is the writer's lower fd (duplicated for the flushers
 * while the file has queued work); it must stay open until the answer. Returns
 * the bytes queued (short only where the lower file's size limit cuts the
 * write, EFBIG at or past it, as the lower's own write) or -errno. When the
 * queue is full: with done, returns WQ_PARKED at once (data copied) and calls
 * done(ctx, result) once the write is queued, so the caller's thread is free
 * meanwhile; without done, blocks until there is room.
 */
ssize_t wq_write(struct wq *q, struct wq_file *f, int fd, const void *data, size_t len,
		 off_t off, wq_write_done_fn done, void *ctx);
/* SEEK_DATA or SEEK_HOLE over the file as the queue will leave it (queued
 * data counts as data), without waiting for it to reach the medium. Returns 0
 * with *pos, -errno (ENXIO past the end), or 1 when nothing is queued: the
 * caller asks the lower file. */
int wq_lseek(struct wq *q, struct wq_file *f, int fd, off_t off, int whence, off_t *pos);
/* Read [off, off+len) through fd with the queued data laid over it. */
ssize_t wq_read(struct wq *q, struct wq_file *f, int fd, char *buf, size_t len, off_t off);
/* Read gate for reads that bypass wq_read (files with nothing queued): pass
 * wq_read_begin's value to wq_read_end. */
int64_t wq_read_begin(struct wq *q);
void wq_read_end(struct wq *q, int64_t began_ns);
/* Around metadata ops that may read the medium (lookup, stat, readdir, open):
 * flushers hold back while they run. After reads and metadata ops alike, they
 * hold back for read_grace= only when the op took long enough to have gone to
 * the medium. Pass wq_meta_begin's value to wq_meta_end. */
int64_t wq_meta_begin(struct wq *q);
void wq_meta_end(struct wq *q, int64_t began_ns);
/* Queue a truncate (fd: a lower fd of the file, O_PATH is fine, for the
 * spool's record when nothing is queued). Returns 1 when nothing of the file is queued: the caller
 * truncates the lower file itself, now; 0 when queued; -errno (the file's
 * sticky error) when refused: then it is not applied, now or later. */
int wq_truncate(struct wq *q, struct wq_file *f, int fd, off_t size);
/* Times to set once the file's data is on the medium; 1 as for wq_truncate. */
int wq_set_times(struct wq *q, struct wq_file *f, int fd, const struct timespec tv[2]);
/* Wait until the file's queued work is on the medium; returns its sticky error. */
int wq_flush_file(struct wq *q, struct wq_file *f);
/* wq_flush_file, then fsync/fdatasync of the lower file through fd. */
int wq_fsync(struct wq *q, struct wq_file *f, int fd, bool datasync);
/* The sticky deferred error of the file (0 if none). */
int wq_error(struct wq *q, struct wq_file *f);
/* The file is no longer open: if it has no name left either, throw its
 * queued data away (temp files never touch the medium). */
void wq_drop_if_unlinked(struct wq *q, struct wq_file *f);
/* A counter that moves whenever queued data reaches the lower file: read it
 * before a lower stat, and hand it to wq_fix_stat. */
uint64_t wq_seq(struct wq *q, struct wq_file *f);
/* Lay size and mtime as the queue will leave them over a lower stat taken
 * after wq_seq returned seq. False when data landed in between: stat again. */
bool wq_fix_stat(struct wq *q, struct wq_file *f, struct stat *st, uint64_t seq);
/* A name (lower path) was made, renamed or removed: until the medium's
 * metadata is flushed it is at risk, and named in the loss report. */
void wq_note_entry(struct wq *q, const char *path);
/* Free space minus what the queue has reserved. */
void wq_fix_statvfs(struct wq *q, struct statvfs *sv);
/* fallocate(2) on the lower fd, once the space it may take is free beside
 * what the queue has reserved (draining first if need be): -ENOSPC rather
 * than taking space that acknowledged writes are waiting for. */
int wq_fallocate(struct wq *q, struct wq_file *f, int fd, int mode, off_t off, off_t len);
/* wq_flush_file, but until nothing of the file is queued at all (for the
 * ops that move the lower file's bytes: fallocate's collapse and insert). */
int wq_settle_file(struct wq *q, struct wq_file *f);

/* What the control socket shows (wq_get_stats: one snapshot under the lock). */
struct wq_stats {
	uint64_t queued_bytes;	 /* data bytes in the extent maps */
	unsigned queued_files;	 /* files with work (data, truncates, times) */
	unsigned parked_writes;	 /* writes waiting for room */
	unsigned failing_files;	 /* files whose last attempt failed */
	uint64_t flushed_bytes, chunks;
	uint64_t gathered_chunks; /* chunks of several runs (flush_chunk) */
	uint64_t bw_bps;	 /* measured flush bandwidth (0: not yet) */
	uint64_t rate_bps;	 /* rate= cap now (0: none) */
	int64_t latency_ns;
	bool paused;
	bool arbiter_paused;	 /* paused through the arbiter */
	bool meta_dirty;	 /* the medium was written since its last syncfs began */
};
void wq_get_stats(struct wq *q, struct wq_stats *s);
/* The spool's figures (on: spool= given). */
struct wq_spool_stats {
	bool on;
	uint64_t bytes, max_bytes;
	unsigned segments, held, set_aside;
	int err;
	uint64_t replayed_records, replayed_bytes;
	uint64_t journal_only; /* queued bytes kept in the journal alone, not in memory */
	char medium[257];
	char dir[4096];
};
void wq_spool_stats(struct wq *q, struct wq_spool_stats *s);
/* Open spool=DIR (if given) and replay it: call before wq_start. 0, or
 * -errno with why filled (nothing may be mounted then). */
int wq_spool_open(struct wq *q, char *why, size_t why_n);
/* A name on the lower moved (absolute lower paths): files with journaled
 * data below it follow it in the spool. */
void wq_note_rename(struct wq *q, const char *from, const char *to);
/* Whether spool= is on (wq_note_rename has work). */
bool wq_spooling(const struct wq *q);
/* The files failing now: one struct wq_failing per file (path resolved from
 * its fd, g_free'd with the array). */
struct wq_failing {
	char *path;
	int error; /* -errno */
	uint64_t bytes;
};
GArray *wq_failing_files(struct wq *q);
void wq_clear_failing(GArray *a);
/* Runtime changes: flushing stops after the chunk in flight / goes on; the
 * rate cap (0: none) and the latency target. */
void wq_pause(struct wq *q, bool paused);
/* The mount was detached (umount -l) while data is queued: nobody can use
 * it any more, so its final drain begins now (pauses, here or at the
 * arbiter, are lifted), as at exit. */
void wq_detached(struct wq *q);
void wq_set_rate(struct wq *q, uint64_t rate_bps);
void wq_set_latency(struct wq *q, unsigned latency_ms);
/* Whether anything is queued (data, truncates, times, parked writes). */
bool wq_busy(struct wq *q);
/* Whether files are queued and every one of them failed too often to go on
 * hoping (what the final drain gives up on and reports as lost). */
bool wq_gave_up(struct wq *q);
/*
 * Wait until nothing is queued and the lower filesystem was synced after the
 * last write: 0; or the error every file left is failing with; -EAGAIN while
 * paused; -ETIMEDOUT after timeout_ns (< 0: none). Writes keep being
 * accepted meanwhile (a drain is not a freeze).
 */
int wq_sync_all(struct wq *q, int64_t timeout_ns);
