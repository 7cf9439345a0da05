/*
 * DESIGN: the flusher threads of one mount, the medium's metadata flush and
 * the drain at exit. Their decisions are in policy.c (pure), their syscalls
 * in chunkio.c; here they are put together under q->lock, which is dropped
 * around every chunk, truncate, sweep slice and syncfs.
 *
 * Chunks. A flusher picks the first dirty file not in flight and not waiting
 * out a retry (the head of q->dirty: fsync waiters are moved there, others
 * go round robin), takes a run of its extents sized by the pacer (bandwidth
 * x latency=, less a learnt seek when the chunk does not continue the last
 * one: policy_chunk_seeks) and writes it with chunk_write, which waits until
 * it is written. Scattered small writes make runs of a page or two; written
 * one waited run at a time, a disk gets them at a queue depth of one. So a
 * chunk may gather further runs of the same file, after the first in offset
 * order (never wrapping), as many as the pacer says fit (pacer_runs_max: each
 * costs what it learnt a run costs, together at most half of latency=, so a
 * seeking head gets one): chunk_write_runs writes them buffered and waits for
 * all of them at once. A rate= token bucket spaces chunks. A file's pending
 * truncate goes before its next chunk.
 *
 * Reads first. Before each chunk the read gate is asked (policy_gate_hold):
 * no chunk starts while reads are in flight, nor within read_grace= of one
 * that went to the medium; a chunk somebody waits on skips the grace; and
 * while writers wait, reads hold the flushers back at most
 * GATE_HOLD_MAX_LATENCIES x latency= in a row. Flushers waiting only for reads
 * are woken when the last one ends.
 *
 * Metadata. Chunks allocate blocks, so the lower filesystem dirties bitmaps,
 * indirect blocks and inodes; left to the kernel they are written ~30 s later,
 * at any moment, a burst of seeks in front of whatever read comes then. So the
 * flushers write them when policy_meta_due says: first the dirty pages of the
 * medium's block device (where bitmaps and indirect blocks live), slice by
 * slice, holding back for reads between slices, then a syncfs for what is left
 * (inodes, superblock), which is then short. Never started while reads are in
 * flight. A chunk that fails triggers one at once: if it fails too, the medium
 * is gone rather than one sector bad, and the files whose names, sizes or
 * blocks may be missing on it are named in the log (risk.c), then and at exit.
 *
 * Errors. A failed chunk or truncate stays queued, the file's error is set,
 * and the step is retried after policy_retry_at. At exit the drain retries
 * failing files without their backoff; a file that keeps failing
 * (policy_gave_up) is reported with its path and bytes, never silently.
 *
 * Exit. wq_drain waits until the queue and the parked writes are empty (or
 * everything left has given up), stops the admitter, flushes the metadata
 * and reports what is at risk; wq_free then stops the flushers.
 */#include "queue_int.h"
#include "rescue.h"
#include "arb_client.h"
#include "chunkio.h"
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

/* Called with the lock held: the next file to work on, or NULL with *wait_ns
 * set to how long nothing can happen. */
static struct wq_file *pick_file(struct wq *q, int64_t now, int64_t *wait_ns)
{
	*wait_ns = IDLE_WAIT_NS;
	for (GList *l = q->dirty.head; l; l = l->next) {
		struct wq_file *f = l->data;
		if (f->in_flight || f->read_pins)
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

/* Called with the lock held: the file at path changed on the lower. */
static void risk_add_path(struct wq *q, const char *path)
{
	if (path)
		risk_add(&q->risk, path);
}

/* Called with the lock held: log the files at risk (see risk.h). */
static void report_risk(struct wq *q, const char *why, bool all)
{
	g_autofree char *names = risk_report(&q->risk, all);

	if (names)
		wq_err(q, "%s: %s", why, names);
}

/* Called with the lock held after a failed step. */
static void note_failure(struct wq *q, struct wq_file *f, int err, const char *what,
			 const char *path)
{
	char esc[512];

	f->failures++;
	f->fail_count++;
	f->retry_at_ns = policy_retry_at(f->failures, now_ns());
	if (f->error != err || f->failures == 1)
		wq_err(q, "%s of %s failed: %s (%" G_GUINT64_FORMAT " bytes stay queued)", what,
		       sm_log_escape(path ? path : "(unknown path)", esc, sizeof(esc)),
		       g_strerror(-err), f->map.bytes);
	f->error = err;
	/* A bad sector, or the medium gone? A metadata flush tells: if it fails
	 * too, whatever changed since the last good one is named at once. */
	risk_add_path(q, path);
	q->check_medium = true;
	pthread_cond_broadcast(&q->space);
}

static void note_success(struct wq *q, struct wq_file *f, const char *path)
{
	char esc[512];

	if (f->error)
		wq_info(q, "%s: writes succeed again",
			sm_log_escape(path ? path : "(unknown path)", esc, sizeof(esc)));
	f->error = 0;
	f->failures = 0;
}

/* Called with the lock held: a chunk or truncate ended at end_ns; the lower
 * filesystem's metadata is dirty from it. */
static void medium_written(struct wq *q, int64_t end_ns)
{
	policy_meta_written(&q->meta, end_ns);
}

/* Called with the lock held; drops and retakes it around the I/O. */
static void flush_truncate(struct wq *q, struct wq_file *f)
{
	off_t floor = f->trunc_floor, size = f->trunc_size;
	g_autofree char *path = NULL;
	int r;

	f->has_trunc = false;
	f->in_flight = true;
	/* Until the lower file is cut, its old bytes at and past floor must still
	 * read as zeros (overlay), though the truncate is no longer pending. */
	f->trunc_flying = true;
	f->flying_floor = floor;
	f->flying_gen = f->trunc_gen;
	pthread_mutex_unlock(&q->lock);
	r = chunk_truncate(f->fd, floor, size);
	path = wq_fd_path(f->fd); /* unlocked, like the I/O */
	pthread_mutex_lock(&q->lock);
	f->in_flight = false;
	f->trunc_flying = false;
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
		f->trunc_gen = f->has_trunc ? MIN(f->trunc_gen, f->flying_gen) : f->flying_gen;
		note_failure(q, f, r, "truncate", path);
	} else {
		note_success(q, f, path);
		risk_add_path(q, path);
		wqf_landed(f);
		sq_progress(q, f);
	}
}

/* A flusher's buffer for chunks read back from the spool, kept from one
 * chunk to the next (fresh memory costs a page fault per page). */
struct bounce {
	char *buf;
	size_t cap;
};

/* Unlocked: a chunk with pieces kept in the spool's journal is read back
 * into the flusher's aligned buffer b; each run's iovecs are then one piece
 * of it. 0, or -errno of the read. */
static int gather_chunk(struct iovec *iov, const struct ext_src *src, int *niov,
			struct chunk_run *runs, int nruns, size_t len, struct bounce *b)
{
	size_t at = 0;
	int i;

	for (i = 0; i < *niov && !src[i].file; i++)
		;
	if (i == *niov)
		return 0;
	if (b->cap < len) {
		free(b->buf);
		b->cap = 0;
		if (posix_memalign((void **)&b->buf, EXT_BUF_ALIGN, len) != 0) {
			b->buf = NULL;
			return -ENOMEM;
		}
		b->cap = len;
	}
	for (i = 0; i < *niov; i++) {
		int r = 0;

		if (src[i].file)
			r = ext_file_read(src[i].file, src[i].off, b->buf + at, iov[i].iov_len);
		else
			memcpy(b->buf + at, iov[i].iov_base, iov[i].iov_len);
		if (r < 0)
			return r;
		at += iov[i].iov_len;
	}
	at = 0;
	for (i = 0; i < nruns; i++) {
		iov[i] = (struct iovec){.iov_base = b->buf + at, .iov_len = runs[i].len};
		runs[i].iov0 = i;
		runs[i].niov = 1;
		at += runs[i].len;
	}
	*niov = nruns;
	return 0;
}

/* Called with the lock held: take the chunk's runs from f, from its cursor
 * on, in offset order, at most max bytes and runs_max runs. Returns the
 * bytes taken; runs[0 .. *nruns) say where. */
static size_t take_runs(struct wq_file *f, unsigned id, size_t max, unsigned runs_max,
			struct iovec *iov, struct ext_src *src, int *niov,
			struct chunk_run *runs, int *nruns)
{
	size_t len = 0;

	off_t from = f->cursor;

	*niov = *nruns = 0;
	while (*nruns < (int)runs_max && len < max && *niov < CHUNK_IOV_MAX) {
		struct chunk_run *run = &runs[*nruns];
		int n;

		run->len = (*nruns ? extmap_take_after : extmap_take_src)(
			&f->map, from, max - len, id, iov + *niov, src + *niov, CHUNK_IOV_MAX - *niov,
			&n, &run->off);
		if (!run->len)
			break;
		run->iov0 = *niov;
		run->niov = n;
		*niov += n;
		len += run->len;
		from = run->off + (off_t)run->len;
		(*nruns)++;
	}
	return len;
}

/* Called with the lock held; drops and retakes it around the I/O. Returns
 * the bytes written (0: none, or it failed). A chunk is one run of f's
 * queued extents or, where the pacer finds separate runs cheap (scattered
 * small writes on a disk that does not seek), several, written together. */
static size_t flush_chunk(struct wq *q, struct wq_file *f, struct bounce *bounce)
{
	struct iovec iov[CHUNK_IOV_MAX];
	struct ext_src src[CHUNK_IOV_MAX];
	struct chunk_run runs[CHUNK_RUNS_MAX];
	bool spool_err;
	unsigned id = ++q->next_flight ? q->next_flight : ++q->next_flight;
	bool seeks;
	int niov, nruns, r;
	g_autofree char *path = NULL;
	struct statvfs sv;
	off_t off, end;
	size_t len;
	int64_t t0, t1;
	int svr;

	/* Someone waits on this file: its oldest data first. The cursor goes
	 * round the file by offset, and a writer appending ahead of it would
	 * keep older data behind it waiting. */
	if (f->urgent)
		f->cursor = extmap_oldest_off(&f->map);
	seeks = policy_chunk_seeks(q->head_moved, f == q->last_file && f->cursor == q->last_end,
				   readgate_last_end_ns(&q->gate), q->meta.last_write_end_ns);
	len = take_runs(f, id, pacer_chunk_bytes(&q->pacer, seeks), pacer_runs_max(&q->pacer), iov,
			src, &niov, runs, &nruns);
	if (!len)
		return 0;
	off = runs[0].off;
	end = runs[nruns - 1].off + (off_t)runs[nruns - 1].len;
	seeks = seeks || off != q->last_end;
	f->in_flight = true;
	/* Round robin between files, unless someone waits on this one. */
	if (!f->urgent) {
		g_queue_unlink(&q->dirty, &f->link);
		g_queue_push_tail_link(&q->dirty, &f->link);
	}
	pthread_mutex_unlock(&q->lock);
	/* The spool's disk is fast: read back before the chunk's time starts. */
	r = gather_chunk(iov, src, &niov, runs, nruns, len, bounce);
	spool_err = r < 0;
	t0 = now_ns();
	if (r == 0)
		r = nruns > 1 ? chunk_write_runs(f->fd, iov, runs, nruns)
			      : chunk_write(f->fd, &f->dfd, iov, niov, off, len);
	t1 = now_ns();
	/* Unlocked, these: a FUSE or network lower answers them over the wire. */
	path = wq_fd_path(f->fd); /* unlocked, like the I/O */
	svr = fstatvfs(q->root_fd, &sv);
	sm_dbg("chunk of %zu bytes in %d run%s at %jd%s: %lld ms", len, nruns, nruns > 1 ? "s" : "",
	       (intmax_t)off, seeks ? " (seeks)" : "", (long long)((t1 - t0) / NSEC_PER_MSEC));
	pthread_mutex_lock(&q->lock);
	f->in_flight = false;
	q->last_file = f;
	q->last_end = end;
	q->head_moved = false;
	medium_written(q, t1);
	if (r < 0) {
		q->head_moved = true;
		extmap_abort(&f->map, id, off, (size_t)(end - off));
		note_failure(q, f, r, spool_err ? "reading back from the spool for the write" : "write",
			     path);
		return 0;
	}
	note_success(q, f, path);
	risk_add_path(q, path);
	q->queued -= extmap_complete_counted(&f->map, id, off, (size_t)(end - off));
	f->cursor = end;
	wqf_landed(f);
	sq_progress(q, f);
	q->flushed_bytes += len;
	q->sq_full_synced = false; /* its records: freed by the next metadata flush */
	q->chunks++;
	q->gathered_chunks += nruns > 1;
	pacer_done_runs(&q->pacer, len, t0, t1, seeks, (unsigned)nruns);
	if (svr == 0) /* the flushed bytes left the reservation: count them as used */
		wq_note_statvfs(q, &sv);
	pthread_cond_broadcast(&q->space);
	return len;
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
		chunk_sync_bdev_range(q->bdev_fd, off, MIN(slice, q->bdev_size - off));
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
	GHashTable *spooled;
	int r, err;

	if (q->sync_fd < 0) {
		q->sq_full_synced = true; /* no flush frees the spool's records */
		return;
	}
	/* Spool records whose data is on the lower now: released if this syncfs
	 * puts it on the medium. */
	spooled = sq_take_done(q);
	policy_meta_begin(&q->meta, t0);
	/* What changes from now on is not covered by this flush. */
	risk_flush_begin(&q->risk);
	if (q->bdev_fd >= 0)
		swept = sweep_bdev(q);
	t1 = now_ns();
	pthread_mutex_unlock(&q->lock);
	r = syncfs(q->sync_fd);
	err = r < 0 ? errno : 0;
	t2 = now_ns();
	if (spooled && !err)
		sq_done_synced(q, spooled, true); /* unlinks segments: not under the lock */
	took = swept + (t2 - t1);
	sm_dbg("metadata of the medium: sweep %lld ms (writing %lld), syncfs %lld ms",
	       (long long)((t1 - t0) / NSEC_PER_MSEC), (long long)(swept / NSEC_PER_MSEC),
	       (long long)((t2 - t1) / NSEC_PER_MSEC));
	pthread_mutex_lock(&q->lock);
	if (spooled && err)
		sq_done_synced(q, spooled, false); /* kept for the next flush */
	else if (spooled)
		pthread_cond_broadcast(&q->space); /* the spool shrank */
	q->head_moved = true;
	/* Only a flush in the middle of a stream prices the next one: the one
	 * after the queue ran empty finds what a single file left (next to
	 * nothing), and the next stream's first flush would come at the floor. */
	policy_meta_priced(&q->meta, took, streaming);
	risk_flush_end(&q->risk, err);
	if (err && err != q->syncfs_errno)
		wq_err(q, "syncfs of the medium: %s (its metadata may not be written)",
		       g_strerror(err));
	report_risk(q, "the medium's metadata could not be written", false);
	q->syncfs_errno = err;
	q->sq_full_synced = sq_full_for_good(q);
	wq_refresh_avail(q);
}

/* Called with the lock held: how long the queue takes to drain at the
 * medium's pace (INT64_MAX: not known yet). */
static int64_t drain_left_ns(const struct wq *q)
{
	uint64_t bw = q->pacer.bw_bps;

	if (q->pacer.rate_bps && (!bw || q->pacer.rate_bps < bw))
		bw = q->pacer.rate_bps;
	if (!bw)
		return INT64_MAX;
	return (int64_t)MIN((unsigned __int128)q->queued * NSEC_PER_SEC / bw,
			    (unsigned __int128)INT64_MAX);
}

/* Called with the lock held: keep the lower filesystem's metadata (bitmaps,
 * inodes, indirect blocks the chunks allocated) flushed too, every
 * syncfs_interval_ns while flushing and once more when the queue has been
 * empty for SYNCFS_IDLE_NS, so the kernel's own writeback never has old
 * metadata to write in the middle of a read. Its seeks would stand between a
 * read and the medium: not while reading. */
static void maybe_syncfs(struct wq *q, int64_t now)
{
	/* Writers wait at spool_max= with nothing queued: only this flush frees
	 * the records of what has landed. */
	bool spool_waits = q->sq && q->room_waiters && !q->paused && !q->dirty.length &&
			   !q->sq_full_synced && sq_full(q);

	if (readgate_wait_ns(&q->gate, now))
		return;
	if (!spool_waits &&
	    !policy_meta_due(&q->meta, q->dirty.length, drain_left_ns(q), now))
		return;
	/* The sweep and syncfs write the medium too: under a grant. */
	if (!arb_acquire(q, SWEEP_GRANT_BYTES, false, true))
		return;
	sync_medium(q);
	arb_release(q, 0);
}

/* Called with the lock held: the metadata flush of a drain, under a grant as
 * the flushers' (waiting at most SYNC_GRANT_WAIT_NS for it: a drain does not
 * hang on an arbiter that stopped granting; it then writes without). */
static void sync_medium_granted(struct wq *q)
{
	int64_t until = now_ns() + SYNC_GRANT_WAIT_NS;
	bool granted;

	while (!(granted = arb_acquire(q, SWEEP_GRANT_BYTES, false, true)) && now_ns() < until)
		;
	if (!granted)
		wq_dbg(q, "no grant for the drain's metadata flush within %d s: flushing without",
		       (int)(SYNC_GRANT_WAIT_NS / NSEC_PER_SEC));
	sync_medium(q);
	if (granted) /* a lease counts what it let through */
		arb_release(q, 0);
}

/* Called with the lock held: somebody waits for the queue to move. */
bool wq_writers_waiting(const struct wq *q)
{
	return q->room_waiters || q->admitting || q->nurgent || q->parked.length;
}

/* Called with the lock held: how long reads still hold f's next chunk back. */
static int64_t gate_hold_ns(struct wq *q, const struct wq_file *f, int64_t now)
{
	/* A chunk somebody waits on waits for reads in flight, but not when
	 * it would delay them by less than a cached read takes (a small one on
	 * a fast disk): fsync would wait behind every stat of a busy tree
	 * (dbench's Flush took 3x passthrough_ll's). */
	bool reads = readgate_active(&q->gate);

	if (reads && f->urgent) {
		int64_t est = pacer_chunk_ns(&q->pacer, MIN(f->map.bytes,
							    pacer_chunk_bytes(&q->pacer, true)));
		reads = est < 0 || est >= META_MEDIUM_NS;
	}

	return policy_gate_hold(&q->held, readgate_wait_ns(&q->gate, now), reads, f->urgent,
				wq_writers_waiting(q), q->pacer.latency_ns, now);
}

static void *flusher_main(void *arg)
{
	struct wq *q = arg;
	struct bounce bounce = {0};
	sigset_t all;

	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	pthread_mutex_lock(&q->lock);
	while (!q->stopping) {
		int64_t now = now_ns(), wait_ns, hold_ns;
		struct wq_file *f = q->paused ? NULL : pick_file(q, now, &wait_ns);

		if (q->paused)
			wait_ns = IDLE_WAIT_NS;
		if (!f) {
			maybe_syncfs(q, now);
			arb_idle(q);
			q->idle_flushers++;
			timed_wait(&q->work, &q->lock, wait_ns);
			q->idle_flushers--;
			continue;
		}
		hold_ns = gate_hold_ns(q, f, now);
		if (hold_ns > 0) {
			__atomic_add_fetch(&q->gate_waiters, 1, __ATOMIC_SEQ_CST);
			timed_wait(&q->work, &q->lock, hold_ns);
			__atomic_sub_fetch(&q->gate_waiters, 1, __ATOMIC_SEQ_CST);
			continue;
		}
		hold_ns = pacer_delay_ns(&q->pacer, now);
		if (hold_ns > 0) {
			timed_wait(&q->work, &q->lock, hold_ns);
			continue;
		}
		/* Tokens first, then the grant: a grant is never held while
		 * waiting for rate= (arbiter.c). */
		if (!arb_acquire(q, pacer_chunk_bytes(&q->pacer, true), f->urgent, false))
			continue;
		if (f->has_trunc) {
			flush_truncate(q, f);
			arb_release(q, 0);
		} else {
			arb_release(q, flush_chunk(q, f, &bounce));
		}
		wqf_clean(q, f);
		pthread_cond_broadcast(&q->done);
		/* Release first: it restores the times of a file gone clean and
		 * clears its restoring. A readdirplus holds the read gate while it
		 * stats such a file, waiting for that; the sweep below waits for
		 * the read gate: in that order they would wait for each other for
		 * ever (found by the soak benchmark). */
		wq_unlock_and_release(q);
		pthread_mutex_lock(&q->lock);
		if (q->stopping)
			break;
		maybe_syncfs(q, now_ns());
		if (q->check_medium && !readgate_wait_ns(&q->gate, now_ns())) {
			q->check_medium = false;
			sync_medium(q);
		}
		wq_unlock_and_release(q);
		pthread_mutex_lock(&q->lock);
	}
	pthread_mutex_unlock(&q->lock);
	free(bounce.buf);
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
	if (pthread_create(&q->admitter, NULL, wq_admitter_main, q) != 0)
		return -EAGAIN;
	if (sq_start(q) < 0)
		return -EAGAIN;
	q->admitter_started = true;
	pthread_setname_np(q->admitter, "sm-admit");
	return 0;
}

/* Called with the lock held: log what could not be written. */
static void report_lost(struct wq *q)
{
	char path[256];

	for (GList *l = q->dirty.head; l; l = l->next) {
		struct wq_file *f = l->data;
		if (q->sq)
			wq_err(q, "%s: %" G_GUINT64_FORMAT " bytes could not be written (%s); they "
			       "stay in the spool and are written at the next mount of this medium",
			       wqf_path(f, path, sizeof(path)), f->map.bytes, g_strerror(-f->error));
		else
			wq_err(q, "%s: %" G_GUINT64_FORMAT " bytes could not be written (%s); they are lost",
			       wqf_path(f, path, sizeof(path)), f->map.bytes, g_strerror(-f->error));
	}
}

/* Called with the lock held, at the end of the drain: no more parked writes
 * (their writers hear an error), then the admitter ends. */
static void stop_admitter(struct wq *q)
{
	if (!q->admitter_started)
		return;
	q->closing = true;
	pthread_cond_broadcast(&q->admit);
	pthread_cond_broadcast(&q->space);
	pthread_mutex_unlock(&q->lock);
	pthread_join(q->admitter, NULL);
	pthread_mutex_lock(&q->lock);
	q->admitter_started = false;
}

static bool all_gave_up(const struct wq *q)
{
	for (GList *l = q->dirty.head; l; l = l->next) {
		const struct wq_file *f = l->data;
		if (!policy_gave_up(f->error, f->failures))
			return false;
	}
	return true;
}

/* Called with the lock held: nobody can use the mount any more (it is
 * unmounted, or detached): a pause here or at the arbiter is lifted. */
static void final_drain_begins(struct wq *q)
{
	if (q->paused && !g_queue_is_empty(&q->dirty))
		wq_info(q, "flushing resumed for the final drain (it was paused)");
	q->paused = false;
	arb_resume(q, "for the final drain");
	pthread_cond_broadcast(&q->work);
}

void wq_detached(struct wq *q)
{
	pthread_mutex_lock(&q->lock);
	final_drain_begins(q);
	wq_unlock_and_release(q);
}

void wq_abandon(struct wq *q)
{
	__atomic_store_n(&q->abandon, true, __ATOMIC_RELEASE);
}

/* Called with the lock held, the flushers stopped: every byte still queued
 * goes to the rescue directory (no spool: nowhere else keeps it). */
static void rescue_all(struct wq *q, const char *why)
{
	char path[SPJ_PATH_MAX + 1], rwhy[512];
	struct rescue *r;
	int err;

	err = rescue_open(q->opts.rescue_dir, q->medium.id, &r, rwhy, sizeof(rwhy));
	if (err < 0) {
		wq_err(q, "%s; and no rescue directory: %s", why, rwhy);
		report_lost(q);
		return;
	}
	for (GList *l = q->dirty.head; l; l = l->next) {
		struct wq_file *f = l->data;
		const char *rel = sq_rel_path(q, f, path, sizeof(path));
		off_t pos = 0, s, e;
		char esc[512];
		int werr = 0;

		if (!rel) {
			wq_err(q, "%s: %" G_GUINT64_FORMAT " bytes could not be written and its "
			       "name is not known: they are lost",
			       wqf_path(f, esc, sizeof(esc)), f->map.bytes);
			continue;
		}
		while (!werr && extmap_run_from(&f->map, pos, &s, &e) && s >= pos) {
			g_autofree char *buf = g_malloc(MIN((size_t)(e - s), (size_t)RESCUE_STEP));
			for (off_t o = s; o < e && !werr; o += RESCUE_STEP) {
				size_t n = (size_t)MIN((off_t)RESCUE_STEP, e - o);
				memset(buf, 0, n);
				werr = extmap_overlay(&f->map, o, buf, n);
				if (!werr)
					werr = rescue_write(r, rel, (uint64_t)o, buf, n);
			}
			pos = e;
		}
		/* For recover (spool_cmd.c reads these): the medium's bytes from
		 * FLOOR on were cut, then the size set to SIZE, before these writes;
		 * the file ends at its size. */
		if (f->has_trunc)
			rescue_note(r, rel, "truncate %jd %jd", (intmax_t)f->trunc_floor,
				    (intmax_t)f->trunc_size);
		rescue_note(r, rel, "size %jd", (intmax_t)f->size);
		rescue_note(r, rel, "error %s", g_strerror(f->error ? -f->error : EIO));
		if (werr)
			wq_err(q, "%s: %" G_GUINT64_FORMAT " bytes could not be written (%s), nor "
			       "saved in %s (%s): they are lost",
			       wqf_path(f, esc, sizeof(esc)), f->map.bytes,
			       g_strerror(f->error ? -f->error : EIO), rescue_dir(r), g_strerror(-werr));
		else
			wq_err(q, "%s: %" G_GUINT64_FORMAT " bytes are not on the medium (%s): "
			       "saved in %s",
			       wqf_path(f, esc, sizeof(esc)), f->map.bytes,
			       g_strerror(f->error ? -f->error : EIO), rescue_dir(r));
	}
	{
		uint64_t bytes = rescue_bytes(r);
		unsigned files = rescue_files(r);
		g_autofree char *dir = g_strdup(rescue_dir(r));
		g_autofree char *base = q->opts.rescue_dir ? g_strdup(q->opts.rescue_dir)
							   : rescue_default_base();
		err = rescue_close(r);
		if (err < 0)
			wq_err(q, "%s; saving them in %s failed: %s", why, dir, g_strerror(-err));
		else
			wq_err(q, "%s: %" G_GUINT64_FORMAT " bytes of %u file%s saved in %s "
			       "(paths as on the medium; see its MANIFEST, or: slowmediactl "
			       "spool list %s)",
			       why, bytes, files, files == 1 ? "" : "s", dir, base);
	}
}

void wq_drain(struct wq *q)
{
	int64_t last_log = now_ns(), last_move = now_ns();
	int64_t timeout = (int64_t)q->opts.drain_timeout_s * NSEC_PER_SEC;
	uint64_t flushed = q->flushed_bytes;
	unsigned ndirty = q->dirty.length;
	const char *why = NULL;

	pthread_mutex_lock(&q->lock);
	final_drain_begins(q);
	if (q->queued)
		wq_dbg(q, "draining %" G_GUINT64_FORMAT " queued bytes to the medium", q->queued);
	while (!g_queue_is_empty(&q->dirty) || !g_queue_is_empty(&q->parked) || q->admitting) {
		/* Going on while the medium takes anything: it may come back. */
		if (q->flushed_bytes != flushed || q->dirty.length < ndirty)
			last_move = now_ns();
		flushed = q->flushed_bytes;
		ndirty = q->dirty.length;
		if (__atomic_load_n(&q->abandon, __ATOMIC_ACQUIRE)) {
			why = "a second signal ended the drain";
			break;
		}
		if (!g_queue_is_empty(&q->dirty) && now_ns() - last_move >= timeout) {
			why = "the medium took nothing for drain_timeout";
			break;
		}
		if (now_ns() - last_log >= DRAIN_LOG_INTERVAL_NS) {
			last_log = now_ns();
			wq_info(q, "draining: %" G_GUINT64_FORMAT " bytes left in %u files%s",
				q->queued, q->dirty.length,
				all_gave_up(q) ? " (failing: retried until drain_timeout, or a "
						 "second SIGTERM)"
					       : "");
			wq_unlock_and_release(q); /* the line now, not at the end */
			pthread_mutex_lock(&q->lock);
		}
		/* Exit must not wait out a long retry backoff. */
		for (GList *l = q->dirty.head; l; l = l->next)
			((struct wq_file *)l->data)->retry_at_ns =
				MIN(((struct wq_file *)l->data)->retry_at_ns, now_ns() + RETRY_MIN_NS);
		pthread_cond_broadcast(&q->work);
		timed_wait(&q->done, &q->lock, RETRY_MIN_NS);
	}
	stop_admitter(q);
	if (why) {
		/* The flushers stop taking chunks; the one in flight ends first. */
		q->paused = true;
		for (GList *l = q->dirty.head; l;) {
			struct wq_file *f = l->data;
			if (f->in_flight) {
				timed_wait(&q->done, &q->lock, RETRY_MIN_NS);
				l = q->dirty.head;
				continue;
			}
			l = l->next;
		}
		if (q->sq)
			report_lost(q);
		else if (!g_queue_is_empty(&q->dirty))
			rescue_all(q, why);
	}
	if (q->meta.dirty)
		sync_medium_granted(q);
	report_risk(q, "at exit", true); /* the last word names them all again */
	wq_unlock_and_release(q);
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
	sq_close(q);
	g_ptr_array_free(q->to_release, TRUE);
	g_array_free(q->to_close, TRUE);
	g_ptr_array_free(q->to_log, TRUE);
	risk_free(&q->risk);
	if (q->sync_fd >= 0)
		close(q->sync_fd);
	if (q->bdev_fd >= 0)
		close(q->bdev_fd);
	g_free(q->root_path);
	pthread_mutex_destroy(&q->lock);
	pthread_cond_destroy(&q->space);
	pthread_cond_destroy(&q->work);
	pthread_cond_destroy(&q->done);
	pthread_cond_destroy(&q->admit);
	g_free(q);
}

/* Called with the lock held: whether anything waits to reach the medium. */
static bool queue_busy(struct wq *q)
{
	return !g_queue_is_empty(&q->dirty) || !g_queue_is_empty(&q->parked) || q->admitting;
}

bool wq_busy(struct wq *q)
{
	bool busy;

	pthread_mutex_lock(&q->lock);
	busy = queue_busy(q);
	pthread_mutex_unlock(&q->lock);
	return busy;
}

bool wq_gave_up(struct wq *q)
{
	bool r;

	pthread_mutex_lock(&q->lock);
	r = !g_queue_is_empty(&q->dirty) && all_gave_up(q);
	pthread_mutex_unlock(&q->lock);
	return r;
}

int wq_sync_all(struct wq *q, int64_t timeout_ns)
{
	int64_t deadline = timeout_ns < 0 ? INT64_MAX : now_ns() + timeout_ns;
	int r = 0;

	pthread_mutex_lock(&q->lock);
	for (;;) {
		while (queue_busy(q)) {
			if (q->paused || q->arb.paused) {
				r = -EAGAIN;
				goto out;
			}
			if (!g_queue_is_empty(&q->dirty) && all_gave_up(q)) {
				r = ((struct wq_file *)q->dirty.head->data)->error;
				goto out;
			}
			if (now_ns() >= deadline) {
				r = -ETIMEDOUT;
				goto out;
			}
			/* Somebody is waiting: no long retry backoff. */
			for (GList *l = q->dirty.head; l; l = l->next) {
				struct wq_file *f = l->data;
				f->retry_at_ns = MIN(f->retry_at_ns, now_ns() + RETRY_MIN_NS);
			}
			pthread_cond_broadcast(&q->work);
			timed_wait(&q->done, &q->lock, MIN(RETRY_MIN_NS, deadline - now_ns()));
		}
		if (!q->meta.dirty)
			break;
		sync_medium_granted(q); /* drops the lock around the syncfs */
		if (q->syncfs_errno) {
			r = -q->syncfs_errno;
			break;
		}
	}
out:
	wq_unlock_and_release(q);
	return r;
}

void wq_get_stats(struct wq *q, struct wq_stats *s)
{
	pthread_mutex_lock(&q->lock);
	*s = (struct wq_stats){
	    .queued_bytes = q->queued,
	    .queued_files = q->dirty.length,
	    .parked_writes = q->parked.length + (q->admitting ? 1 : 0),
	    .flushed_bytes = q->flushed_bytes,
	    .chunks = q->chunks,
	    .gathered_chunks = q->gathered_chunks,
	    .bw_bps = q->pacer.bw_bps,
	    .rate_bps = q->pacer.rate_bps,
	    .latency_ns = q->pacer.latency_ns,
	    .paused = q->paused,
	    .arbiter_paused = q->arb.paused,
	    .meta_dirty = q->meta.dirty,
	};
	for (GList *l = q->dirty.head; l; l = l->next)
		if (((struct wq_file *)l->data)->error)
			s->failing_files++;
	pthread_mutex_unlock(&q->lock);
}

GArray *wq_failing_files(struct wq *q)
{
	GArray *a = g_array_new(FALSE, TRUE, sizeof(struct wq_failing));
	g_autoptr(GArray) fds = g_array_new(FALSE, FALSE, sizeof(int));

	pthread_mutex_lock(&q->lock);
	for (GList *l = q->dirty.head; l; l = l->next) {
		struct wq_file *f = l->data;
		struct wq_failing e = {.error = f->error, .bytes = f->map.bytes};
		int fd;

		if (!f->error)
			continue;
		fd = fcntl(f->fd, F_DUPFD_CLOEXEC, 0);
		g_array_append_val(a, e);
		g_array_append_val(fds, fd);
	}
	pthread_mutex_unlock(&q->lock);
	/* Paths unlocked: the readlink may ask a FUSE or network lower. */
	for (guint i = 0; i < a->len; i++) {
		int fd = g_array_index(fds, int, i);
		g_array_index(a, struct wq_failing, i).path = fd >= 0 ? wq_fd_path(fd) : NULL;
		if (fd >= 0)
			close(fd);
	}
	return a;
}

void wq_clear_failing(GArray *a)
{
	for (guint i = 0; a && i < a->len; i++)
		g_free(g_array_index(a, struct wq_failing, i).path);
	if (a)
		g_array_free(a, TRUE);
}

void wq_pause(struct wq *q, bool paused)
{
	pthread_mutex_lock(&q->lock);
	if (q->paused != paused)
		wq_info(q, "flushing %s", paused ? "paused" : "resumed");
	q->paused = paused;
	if (!paused)
		arb_resume(q, "with this mount's own resume");
	pthread_cond_broadcast(&q->work);
	pthread_cond_broadcast(&q->done);
	wq_unlock_and_release(q);
}

void wq_set_rate(struct wq *q, uint64_t rate_bps)
{
	pthread_mutex_lock(&q->lock);
	q->pacer.rate_bps = rate_bps;
	if (!rate_bps)
		q->pacer.next_ok_ns = 0;
	arb_rate_changed(q);
	pthread_cond_broadcast(&q->work);
	pthread_mutex_unlock(&q->lock);
}

void wq_set_latency(struct wq *q, unsigned latency_ms)
{
	pthread_mutex_lock(&q->lock);
	q->pacer.latency_ns = (int64_t)latency_ms * NSEC_PER_MSEC;
	pthread_mutex_unlock(&q->lock);
}
