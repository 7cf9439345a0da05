/*
 * The write-behind queue of one mount and its paced flusher pool.
 * See the DESIGN comment in queue.c.
 */
#pragma once
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

struct wq *wq_new(const struct sched_opts *opts, int root_fd, const struct wq_hooks *hooks);
int wq_start(struct wq *q);
/* Wait until everything is on the medium (or has failed for good); logs progress. */
void wq_drain(struct wq *q);
/* Stop the flushers (after wq_drain) and free the queue. */
void wq_free(struct wq *q);

/* The queue state of one lower file; *slot is set once, under the queue's lock. */
struct wq_file *wq_file_attach(struct wq *q, struct wq_file **slot, void *owner);
void wq_file_free(struct wq_file *f);

/* Queue a write; blocks while the queue is full. fd is the writer's lower fd
 * (duplicated for the flushers while the file has queued work). Returns len
 * or -errno. */
ssize_t wq_write(struct wq *q, struct wq_file *f, int fd, const void *data, size_t len,
		 off_t off);
/* Read [off, off+len) through fd with the queued data laid over it. */
ssize_t wq_read(struct wq *q, struct wq_file *f, int fd, char *buf, size_t len, off_t off);
/* Read gate for reads that bypass wq_read (files with nothing queued). */
void wq_read_begin(struct wq *q);
void wq_read_end(struct wq *q);
/* Around metadata ops that may read the medium (lookup, stat, readdir, open):
 * flushers hold back while they run, and for read_grace= after the ones that
 * took long enough to have read the medium. Pass wq_meta_begin's value to
 * wq_meta_end. */
int64_t wq_meta_begin(struct wq *q);
void wq_meta_end(struct wq *q, int64_t began_ns);
/* Queue a truncate. Returns 1 when nothing of the file is queued: the caller
 * truncates the lower file itself, now. */
int wq_truncate(struct wq *q, struct wq_file *f, off_t size);
/* Times to set once the file's data is on the medium; 1 as for wq_truncate. */
int wq_set_times(struct wq *q, struct wq_file *f, const struct timespec tv[2]);
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
/* Free space minus what the queue has reserved. */
void wq_fix_statvfs(struct wq *q, struct statvfs *sv);
