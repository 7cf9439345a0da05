/*
 * DESIGN: the spool manager. With spool=DIR every write the queue accepts is
 * first journaled here, on a fast disk, and acknowledged only once the
 * journal is synced; after a crash the next mount of the same medium replays
 * it. spool_journal.c owns the segment format; this file owns the layout of
 * DIR, which segment is written, which may go, and the replay's rules.
 * spool_dir.c holds the directory side both this file and slowmediactl use
 * (names, medium.info, the lock, listings) and the readers that need no
 * daemon (scan, list, discard).
 *
 * Layout:
 *   DIR/<key>/                 one directory per medium, mode 0700. <key> is
 *                              the medium id with [A-Za-z0-9_-] and '.' (not
 *                              first) kept, every other byte %XX; an encoding
 *                              over SPOOL_KEY_MAX bytes is cut and ends in
 *                              "~<16 hex>", a 64-bit FNV-1a of the whole id.
 *                              The id is in medium.info and in every segment
 *                              header, and both are checked, so a shortened
 *                              key that collides refuses, never mixes.
 *   DIR/<key>/lock             flock(LOCK_EX) by the one process using the
 *                              spool (a daemon, or slowmediactl's recover and
 *                              discard); holds its pid, for messages only.
 *   DIR/<key>/medium.info      key=value lines (values escaped: \\, \xNN for
 *                              control bytes): id, label, source, size,
 *                              first_use, last_use (unix time), next_seq,
 *                              and a held=FROM-TO line per damage (below).
 *                              Written only with spj_replace_file.
 *   DIR/<key>/<16 hex>.spj     segments, named by their first sequence number
 *                              (lowercase hex, so names sort as numbers).
 *   DIR/<key>/<seg>.corrupt-T  a damaged segment moved aside at unix time T:
 *                              kept, never deleted here, reported by list.
 *
 * Sequence numbers start at 1 and go up by one across segments and across
 * runs: spool_open finds the next one from the last segment's last good
 * record (from a bound on what its size can hold when that segment is
 * damaged), and never below medium.info's next_seq (written at open and
 * close) nor a held range's end, so no number is used twice (a record cut
 * off leaves a gap; gaps between segments are fine). Segments from an
 * earlier run are never appended to: the first append of a run begins a new
 * segment, and the active one rotates at the segment limit (one record at
 * least each).
 * A segment that reaches the limit is rotated out at once and synced and
 * closed by the next spool_sync, before the newer one is synced (an append
 * never waits for a sync); spool_rotate and spool_close sync it at once. So
 * a crash that did not interrupt a sync leaves a torn tail only in the last
 * segment; a torn tail anywhere else is damage (power lost in the middle of
 * such a sync reads as damage too: the records after it were not synced
 * either, and stay for recover).
 *
 * Reclaim. The caller names each record's file by an opaque 64-bit key.
 * Every segment keeps a map key -> the highest seq of that key's records in
 * it. spool_file_done(key, low) drops the entries whose seq is <= low.
 * Segments go oldest first: the oldest one is deleted (unlink, then fsync
 * the directory) once it has no entries left and is neither the active one
 * nor waiting to be replayed, then the next, and so on; a segment with
 * nothing left behind one that must stay waits. So what a replay finds is
 * always a whole suffix of the history: everything before it is on the
 * medium, and applying that suffix again in order gives the same bytes even
 * where part of it had landed too. (Deleting a middle segment would not:
 * a file's truncate kept in an older segment, replayed without the writes
 * after it that a deleted segment held, would cut them off.) Replayed
 * records get entries too (SPOOL_REPLAY_KEY, or spool_replay_track's key),
 * so the same rule frees them. Records name files by handle and path as of
 * when they were made, so a replayer should resolve the handle first.
 *
 * Replay and damage. spool_replay_* reads the pending segments in order and
 * hands their records on. The torn tail of the last segment is what a crash
 * leaves (never acknowledged): it is cut. Anything else wrong -- a bad
 * checksum with good records after it, an unsafe path, a bad header, another
 * medium's id, a sequence going backwards, a torn tail before the last
 * segment -- is damage: nothing from the damage on is handed on, the
 * segment is moved aside, and every later segment is held. A held segment is
 * one whose first seq lies in a held=FROM-TO range of medium.info (written
 * before the segment is moved): it stays as it is, is never replayed or
 * deleted here, and is left for `slowmediactl spool recover` or `discard`;
 * new records go to segments above the range. Without medium.info but with
 * segments set aside, every segment is held (nothing can tell which came
 * after the damage). A crash that writes an unsynced tail's pages out of
 * order can leave zeros before good records; that reads as damage too, a
 * false alarm that loses nothing acknowledged.
 *
 * Durability. An append is one pwritev (spj_append), durable after
 * spool_sync: one fdatasync on a second descriptor of the active segment,
 * done outside the lock and shared by every caller waiting meanwhile (group
 * commit). A failed fdatasync breaks the spool for good (the kernel may
 * have dropped the pages): every later append and sync returns that error.
 * A failed append cuts the segment back and begins a new one at the next
 * append (an ENOSPC of the spool's disk is the caller's to report).
 *
 * Threads: every spool_* call on one spool may come from any thread; one
 * mutex (sp->lock) guards all of struct spool and its segments, and I/O other
 * than the group fdatasync is done under it (appends are serial anyway).
 * The rotation waits for a sync in flight (sp->syncing, sp->cond) before it
 * closes the descriptor that sync uses. One replay at a time; it must end
 * before spool_close. spool_list, spool_scan_* and spool_discard take no
 * struct spool and share nothing.
 *
 * Memory: no allocation failure aborts: the containers here (keymap,
 * pathset, arrays) are small open-coded ones over g_try_* because glib's
 * abort on ENOMEM. Every function returns 0 (or a value), -errno, or an
 * enum spool_result; `why` says it in words.
 */

#include "spool_int.h"
#include "fdio.h"
#include "extents.h"

#include <errno.h>
#include <fcntl.h>
#include <glib.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define KEYMAP_MIN 8

/* ---- a map of file keys to the highest seq (0: empty slot) ---- */

struct kslot {
	uint64_t key, seq;
};

struct keymap {
	struct kslot *slot;
	size_t cap, n; /* cap: a power of two, or 0 */
};

static size_t kslot_home(const struct keymap *m, uint64_t key)
{
	return (size_t)((key * 0x9e3779b97f4a7c15ull) >> 17) & (m->cap - 1);
}

static struct kslot *keymap_find(const struct keymap *m, uint64_t key)
{
	if (!m->cap)
		return NULL;
	for (size_t i = kslot_home(m, key);; i = (i + 1) & (m->cap - 1)) {
		if (!m->slot[i].seq)
			return NULL;
		if (m->slot[i].key == key)
			return &m->slot[i];
	}
}

static void keymap_insert_new(struct keymap *m, uint64_t key, uint64_t seq)
{
	size_t i = kslot_home(m, key);

	while (m->slot[i].seq)
		i = (i + 1) & (m->cap - 1);
	m->slot[i] = (struct kslot){key, seq};
	m->n++;
}

/* Room for `more` new keys (load at most 1/2): 0 or -ENOMEM. */
static int keymap_reserve(struct keymap *m, size_t more)
{
	struct kslot *old = m->slot;
	size_t oldcap = m->cap, cap = m->cap ? m->cap : KEYMAP_MIN;

	while ((m->n + more) * 2 > cap)
		cap *= 2;
	if (cap == m->cap)
		return 0;
	m->slot = g_try_new0(struct kslot, cap);
	if (!m->slot) {
		m->slot = old;
		return -ENOMEM;
	}
	m->cap = cap;
	m->n = 0;
	for (size_t i = 0; i < oldcap; i++)
		if (old[i].seq)
			keymap_insert_new(m, old[i].key, old[i].seq);
	g_free(old);
	return 0;
}

/* key's entry raised to seq; the room reserved before. */
static void keymap_put_max(struct keymap *m, uint64_t key, uint64_t seq)
{
	struct kslot *s = keymap_find(m, key);

	if (s)
		s->seq = MAX(s->seq, seq);
	else
		keymap_insert_new(m, key, seq);
}

/* Remove the slot at s, shifting back the run after it (no tombstones). */
static void keymap_remove(struct keymap *m, struct kslot *s)
{
	size_t i = (size_t)(s - m->slot), j = i;

	m->slot[i].seq = 0;
	m->n--;
	for (;;) {
		size_t home;

		j = (j + 1) & (m->cap - 1);
		if (!m->slot[j].seq)
			return;
		home = kslot_home(m, m->slot[j].key);
		/* Move j back to i unless its home lies cyclically in (i, j]. */
		if ((j > i && (home <= i || home > j)) ||
		    (j < i && home <= i && home > j)) {
			m->slot[i] = m->slot[j];
			m->slot[j].seq = 0;
			i = j;
		}
	}
}

static void keymap_free(struct keymap *m)
{
	g_free(m->slot);
	*m = (struct keymap){0};
}

/* ---- the spool ---- */

enum seg_state {
	SEG_PENDING, /* left by an earlier run, not replayed yet */
	SEG_LIVE,    /* replayed, or written by this run */
};

struct seg {
	char name[SPD_SEG_NAME_MAX];
	uint64_t first_seq;
	uint64_t size;
	enum seg_state state;
	struct keymap keys;
	struct spj_writer *w; /* the active segment's; else NULL */
	int sync_fd;	      /* the active segment's second descriptor; else -1 */
	struct ext_file *rd;  /* the active segment read back (spool_append_at); or NULL */
	uint64_t nrec;	      /* records appended by this run */
	bool had_keys;	      /* some record of it was handed out or appended */
	bool retiring;	      /* rotated out, its sync and close still due */
};

struct spool {
	pthread_mutex_t lock; /* guards everything below, and the segments */
	pthread_cond_t cond;  /* a sync ended */
	int dirfd, mdfd, lockfd;
	char *where; /* DIR/<key>, for messages */
	char medium_id[SPJ_MEDIUM_ID_MAX + 1];
	struct spd_info info;
	struct seg **segs; /* by first_seq; the active one, if any, is the last */
	size_t nsegs, cap;
	struct seg *active;
	uint64_t next_seq;
	uint64_t synced; /* every record below this seq is on the disk */
	uint64_t bytes;	 /* of segs */
	unsigned held, set_aside;
	uint64_t held_bytes;
	uint64_t seg_max;
	bool replay_due, syncing;
	struct spool_replay *replay;
	int err; /* sticky: a failed sync */
};

static void seg_free(struct seg *s)
{
	if (!s)
		return;
	spj_close(s->w);
	if (s->sync_fd >= 0)
		close(s->sync_fd);
	ext_file_unref(s->rd);
	keymap_free(&s->keys);
	g_free(s);
}

static struct seg *seg_new(const char *name, uint64_t first_seq, uint64_t size,
			   enum seg_state state)
{
	struct seg *s = g_try_new0(struct seg, 1);

	if (!s)
		return NULL;
	snprintf(s->name, sizeof(s->name), "%s", name);
	s->first_seq = first_seq;
	s->size = size;
	s->state = state;
	s->sync_fd = -1;
	return s;
}

static int segs_push(struct spool *sp, struct seg *s)
{
	if (sp->nsegs == sp->cap) {
		size_t cap = sp->cap ? sp->cap * 2 : 16;
		struct seg **nv = g_try_renew(struct seg *, sp->segs, cap);
		if (!nv)
			return -ENOMEM;
		sp->segs = nv;
		sp->cap = cap;
	}
	sp->segs[sp->nsegs++] = s;
	sp->bytes += s->size;
	return 0;
}

static void segs_remove(struct spool *sp, struct seg *s)
{
	for (size_t i = 0; i < sp->nsegs; i++) {
		if (sp->segs[i] != s)
			continue;
		memmove(sp->segs + i, sp->segs + i + 1,
			(sp->nsegs - i - 1) * sizeof(*sp->segs));
		sp->nsegs--;
		sp->bytes -= s->size;
		return;
	}
}

/* The last good record's seq + 1 of the spool's last segment, or a bound
 * when it is damaged: 0 and *next, or -errno (a read error). */
static int last_segment_next(int mdfd, const struct spd_segfile *f, uint64_t *next)
{
	struct spj_reader *rd;
	struct spj_record rec;
	const void *payload;
	uint64_t last = 0;
	int r = spj_reader_open(mdfd, f->name, &rd);

	if (r < 0 && r > -4096)
		return r;
	if (r) { /* not readable as a segment (SPJ_E*): the bound */
		*next = spd_seq_bound(f->first_seq, f->size);
		return 0;
	}
	while ((r = spj_next(rd, &rec, &payload)) == SPJ_OK)
		last = rec.seq;
	spj_reader_close(rd);
	if (r < 0)
		return r;
	if (r == SPJ_END || r == SPJ_TORN)
		*next = last ? last + 1 : f->first_seq + 1;
	else
		*next = spd_seq_bound(f->first_seq, f->size);
	return 0;
}

/* The segments found at open: pending, held, set aside; next_seq. */
static int load_segments(struct spool *sp, bool have_info, char *why)
{
	struct spd_seglist l;
	uint64_t next = 1;
	int err = spd_list_segments(sp->mdfd, &l);

	if (err) {
		spd_say(why, "%s: %s", sp->where, g_strerror(-err));
		return err;
	}
	for (size_t i = 0; i < l.n; i++)
		if (l.v[i].aside)
			next = MAX(next, spd_seq_bound(l.v[i].first_seq, l.v[i].size));
	for (size_t i = 0; i < l.n; i++)
		if (!l.v[i].aside)
			next = MAX(next, l.v[i].first_seq + 1);
	for (size_t i = l.n; i-- > 0;) {
		if (l.v[i].aside)
			continue;
		err = last_segment_next(sp->mdfd, &l.v[i], &next);
		if (err)
			spd_say(why, "%s/%s: %s", sp->where, l.v[i].name,
				g_strerror(-err));
		break;
	}
	for (unsigned k = 0; k < sp->info.nheld; k++)
		next = MAX(next, sp->info.held[k].to);
	next = MAX(next, sp->info.next_seq);
	if (!err) {
		bool set_aside = false;
		for (size_t i = 0; i < l.n; i++)
			set_aside |= l.v[i].aside;
		/* Damage, and nothing to spd_say what came after it: hold it all. */
		if (set_aside && !have_info && l.n)
			spd_add_held(&sp->info, 1, next);
	}
	for (size_t i = 0; !err && i < l.n; i++) {
		const struct spd_segfile *f = &l.v[i];
		struct seg *s;

		if (f->aside) {
			sp->set_aside++;
		} else if (spd_is_held(&sp->info, f->first_seq)) {
			sp->held++;
			sp->held_bytes += f->size;
		} else if (!(s = seg_new(f->name, f->first_seq, f->size, SEG_PENDING))) {
			err = -ENOMEM;
		} else if ((err = segs_push(sp, s))) {
			seg_free(s);
		} else {
			sp->replay_due = true;
		}
	}
	if (err == -ENOMEM)
		spd_say(why, "%s: out of memory", sp->where);
	sp->next_seq = next;
	sp->synced = next;
	sp->info.next_seq = next;
	g_free(l.v);
	return err;
}

/* DIR (its last component made if missing), DIR/<key>, the lock. */
static int open_dirs(struct spool *sp, const char *dir, const char *key, char *why)
{
	int err;

	sp->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (sp->dirfd < 0 && errno == ENOENT &&
	    (mkdir(dir, 0700) == 0 || errno == EEXIST))
		sp->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (sp->dirfd < 0) {
		err = -errno;
		spd_say(why, "spool %s: %s", dir, g_strerror(-err));
		return err;
	}
	if (mkdirat(sp->dirfd, key, 0700) == 0) {
		err = fd_fsync_dir(sp->dirfd);
		if (err) {
			spd_say(why, "%s: %s", sp->where, g_strerror(-err));
			return err;
		}
	} else if (errno != EEXIST) {
		err = -errno;
		spd_say(why, "%s: %s", sp->where, g_strerror(-err));
		return err;
	}
	sp->mdfd =
	    openat(sp->dirfd, key, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (sp->mdfd < 0) {
		err = -errno;
		spd_say(why, "%s: %s", sp->where, g_strerror(-err));
		return err;
	}
	sp->lockfd = spd_take_lock(sp->mdfd, sp->where, why);
	return sp->lockfd < 0 ? sp->lockfd : 0;
}

/* medium.info read and checked against this medium, or begun. */
static int load_info(struct spool *sp, const struct spool_medium_desc *desc,
		     bool *have_info, char *why)
{
	int err = spd_read_info(sp->mdfd, &sp->info);

	*have_info = !err;
	if (!err && strcmp(sp->info.id, sp->medium_id)) {
		spd_say(why, "%s holds the spool of another medium (%s)", sp->where,
			sp->info.id);
		return -EEXIST;
	}
	if (err && err != -ENOENT && err != -EUCLEAN) {
		spd_say(why, "%s/" SPOOL_INFO_NAME ": %s", sp->where, g_strerror(-err));
		return err;
	}
	if (err) {
		sp->info = (struct spd_info){0};
		snprintf(sp->info.id, sizeof(sp->info.id), "%s", sp->medium_id);
		sp->info.first_use = time(NULL);
	}
	if (desc) {
		spd_copy_str(sp->info.label, SPOOL_LABEL_MAX, desc->label);
		spd_copy_str(sp->info.source, SPOOL_SOURCE_MAX, desc->source);
		sp->info.size = desc->size;
	}
	sp->info.last_use = time(NULL);
	return 0;
}

static void spool_free(struct spool *sp)
{
	for (size_t i = 0; i < sp->nsegs; i++)
		seg_free(sp->segs[i]);
	g_free(sp->segs);
	if (sp->lockfd >= 0)
		close(sp->lockfd);
	if (sp->mdfd >= 0)
		close(sp->mdfd);
	if (sp->dirfd >= 0)
		close(sp->dirfd);
	g_free(sp->where);
	pthread_mutex_destroy(&sp->lock);
	pthread_cond_destroy(&sp->cond);
	g_free(sp);
}

int spool_open(const char *dir, const char *medium_id,
	       const struct spool_medium_desc *desc, struct spool **out, char *why)
{
	char key[SPOOL_KEY_MAX + 1];
	struct spool *sp;
	bool have_info;
	int err;

	*out = NULL;
	if (!dir || !*dir) {
		spd_say(why, "no spool directory given");
		return -EINVAL;
	}
	err = spool_medium_key(medium_id, key);
	if (err) {
		spd_say(why, "medium id: %s", err == -EINVAL ? "empty" : "too long");
		return err;
	}
	sp = g_try_new0(struct spool, 1);
	if (!sp || !(sp->where = g_try_malloc(strlen(dir) + strlen(key) + 2))) {
		g_free(sp);
		spd_say(why, "spool %s: out of memory", dir);
		return -ENOMEM;
	}
	pthread_mutex_init(&sp->lock, NULL);
	pthread_cond_init(&sp->cond, NULL);
	sp->dirfd = sp->mdfd = sp->lockfd = -1;
	sp->seg_max = SPOOL_SEGMENT_MAX;
	sprintf(sp->where, "%s/%s", dir, key);
	snprintf(sp->medium_id, sizeof(sp->medium_id), "%s", medium_id);
	err = open_dirs(sp, dir, key, why);
	if (!err)
		err = load_info(sp, desc, &have_info, why);
	if (!err)
		err = load_segments(sp, have_info, why);
	if (!err) {
		err = spd_write_info(sp->mdfd, &sp->info);
		if (err)
			spd_say(why, "%s/" SPOOL_INFO_NAME ": %s", sp->where,
				g_strerror(-err));
	}
	if (err) {
		spool_free(sp);
		return err;
	}
	*out = sp;
	return 0;
}

void spool_set_segment_max(struct spool *sp, uint64_t bytes)
{
	pthread_mutex_lock(&sp->lock);
	sp->seg_max = bytes ? bytes : 1;
	pthread_mutex_unlock(&sp->lock);
}

/* Delete the segments with nothing the medium lacks (not the active one,
 * not a pending one); the first error, the others tried too. */
static int sweep_locked(struct spool *sp)
{
	bool gone = false, blocked = false;
	int err = 0;

	for (size_t i = 0; i < sp->nsegs;) {
		struct seg *s = sp->segs[i];

		/* Oldest first, and none with records behind one that must stay
		 * (see Reclaim in the DESIGN comment); one that never held a
		 * record (a torn header cut away) goes anyway. */
		if (s == sp->active || s->retiring || s->state != SEG_LIVE || s->keys.n ||
		    (blocked && s->had_keys)) {
			blocked = true;
			i++;
			continue;
		}
		if (unlinkat(sp->mdfd, s->name, 0) < 0 && errno != ENOENT) {
			if (!err)
				err = -errno;
			blocked = true;
			i++;
			continue;
		}
		segs_remove(sp, s);
		seg_free(s);
		gone = true;
	}
	if (gone) {
		int e = fd_fsync_dir(sp->mdfd);
		if (!err)
			err = e;
	}
	return err;
}

/* Close the active segment, synced first (so only the last segment of a
 * spool is ever torn). */
/* The oldest segment rotated out whose sync is still due, or NULL. */
static struct seg *retiring_locked(const struct spool *sp)
{
	for (size_t i = 0; i < sp->nsegs; i++)
		if (sp->segs[i]->retiring)
			return sp->segs[i];
	return NULL;
}

/* fdatasync of fd with the lock dropped (sp->syncing: one at a time); a
 * failure breaks the spool. */
static int sync_unlocked(struct spool *sp, int fd)
{
	int r;

	sp->syncing = true;
	pthread_mutex_unlock(&sp->lock);
	r = fdatasync(fd) < 0 ? -errno : 0;
	pthread_mutex_lock(&sp->lock);
	sp->syncing = false;
	pthread_cond_broadcast(&sp->cond);
	if (r && !sp->err)
		sp->err = r;
	return r;
}

/* A segment's writer and sync descriptor closed: it takes no more records. */
static void seg_close_writer(struct seg *s)
{
	spj_close(s->w);
	s->w = NULL;
	close(s->sync_fd);
	s->sync_fd = -1;
	ext_file_unref(s->rd); /* the queue's extents keep what they read */
	s->rd = NULL;
}

/* Sync and close segment s, rotated out (the sweep leaves it alone while
 * the lock is dropped: it is still retiring). */
static int settle_locked(struct spool *sp, struct seg *s)
{
	int r = sync_unlocked(sp, s->sync_fd);

	seg_close_writer(s);
	s->retiring = false;
	return r;
}

/* The active segment is closed without waiting: the next spool_sync syncs
 * and closes it before anything newer (or spool_close does). An append that
 * passes the segment limit thus never waits for a sync under the lock its
 * caller holds. */
static void retire_locked(struct spool *sp)
{
	struct seg *s = sp->active;

	if (!s)
		return;
	s->retiring = true;
	s->state = SEG_LIVE;
	sp->active = NULL;
}

/* Close the active segment, synced first, and every one rotated out before
 * it (so only the last segment of a spool can be torn by a crash that the
 * caller waited for). */
static int rotate_locked(struct spool *sp)
{
	struct seg *s = sp->active;
	struct seg *old;
	int err;

	while (sp->syncing || (old = retiring_locked(sp))) {
		if (sp->syncing)
			pthread_cond_wait(&sp->cond, &sp->lock);
		else
			settle_locked(sp, old);
	}
	if (!s || sp->active != s)
		return sp->err; /* none, or another thread closed it while we waited */
	err = sp->err ? sp->err : spj_sync(s->w);
	if (!err)
		sp->synced = sp->next_seq;
	else if (!sp->err)
		sp->err = err;
	seg_close_writer(s);
	s->state = SEG_LIVE;
	sp->active = NULL;
	if (err)
		return err;
	return sweep_locked(sp);
}

static int begin_segment_locked(struct spool *sp)
{
	char name[SPD_SEG_NAME_MAX];
	struct seg *s;
	int err;

	spd_seg_name(name, sp->next_seq);
	s = seg_new(name, sp->next_seq, 0, SEG_LIVE);
	if (!s)
		return -ENOMEM;
	err = spj_writer_open(sp->mdfd, name, sp->medium_id, sp->next_seq, &s->w);
	if (err) {
		seg_free(s);
		return err;
	}
	s->sync_fd = openat(sp->mdfd, name, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	if (s->sync_fd < 0)
		err = -errno;
	else
		err = segs_push(sp, s);
	if (err) {
		seg_free(s);
		unlinkat(sp->mdfd, name, 0);
		return err;
	}
	s->size = spj_writer_size(s->w);
	sp->bytes += s->size;
	sp->active = s;
	return 0;
}

static bool record_error(int err)
{
	return err == -EINVAL || err == -EFBIG || err == -ENAMETOOLONG ||
	       err == -EOVERFLOW;
}

static int append_locked(struct spool *sp, uint64_t key, const struct spj_record *r,
			 const void *payload, uint64_t *seq_out)
{
	uint64_t need = SPJ_REC_HDR_SIZE + (uint64_t)r->handle_len + r->payload_len +
			(r->path ? strnlen(r->path, SPJ_PATH_MAX + 1) : 0);
	struct seg *s;
	uint64_t before;
	int err;

	if (sp->err)
		return sp->err;
	if (sp->replay_due)
		return -EAGAIN;
	if (sp->active && sp->active->nrec && sp->active->size + need > sp->seg_max)
		retire_locked(sp);
	if (!sp->active && (err = begin_segment_locked(sp)))
		return err;
	s = sp->active;
	err = keymap_reserve(&s->keys, 1);
	if (err)
		return err;
	before = s->size;
	err = spj_append(s->w, r, payload);
	if (err) {
		if (!record_error(err)) { /* a new segment for the next append */
			if (ftruncate(s->sync_fd, (off_t)before) < 0 && !sp->err)
				sp->err = -errno;
			rotate_locked(sp);
		}
		return err;
	}
	s->size = spj_writer_size(s->w);
	sp->bytes += s->size - before;
	s->nrec++;
	keymap_put_max(&s->keys, key, sp->next_seq);
	s->had_keys = true;
	if (seq_out)
		*seq_out = sp->next_seq;
	sp->next_seq++;
	return 0;
}

int spool_append(struct spool *sp, uint64_t key, const struct spj_record *r,
		 const void *payload, uint64_t *seq_out)
{
	return spool_append_at(sp, key, r, payload, seq_out, NULL, NULL);
}

int spool_append_at(struct spool *sp, uint64_t key, const struct spj_record *r,
		    const void *payload, uint64_t *seq_out, struct ext_file **file,
		    off_t *payload_off)
{
	struct seg *s;
	int fd, err;

	if (key == SPOOL_REPLAY_KEY || !r)
		return -EINVAL;
	pthread_mutex_lock(&sp->lock);
	err = append_locked(sp, key, r, payload, seq_out);
	if (err || !file)
		goto out;
	/* The record is the last of the active segment: its payload ends it. */
	s = sp->active;
	if (!s->rd) {
		fd = openat(sp->mdfd, s->name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		s->rd = fd < 0 ? NULL : ext_file_new(fd);
		if (fd >= 0 && !s->rd)
			close(fd);
	}
	if (!s->rd) {
		/* Journaled all the same: the caller keeps the data in memory. */
		*file = NULL;
		goto out;
	}
	*file = ext_file_ref(s->rd);
	*payload_off = (off_t)(s->size - r->payload_len);
out:
	pthread_mutex_unlock(&sp->lock);
	return err;
}

int spool_sync(struct spool *sp)
{
	uint64_t target;
	int err;

	pthread_mutex_lock(&sp->lock);
	target = sp->next_seq;
	while (!sp->err && sp->synced < target) {
		uint64_t upto = sp->next_seq;
		int fd, r;

		struct seg *old;

		if (sp->syncing) {
			pthread_cond_wait(&sp->cond, &sp->lock);
			continue;
		}
		/* Segments rotated out first: their records are older. Settled,
		 * one whose records are all on the medium goes now (a writer may
		 * wait at spool_max= for it); an unlink error is the next sweep's. */
		if ((old = retiring_locked(sp))) {
			settle_locked(sp, old);
			sweep_locked(sp);
			continue;
		}
		if (!sp->active) { /* closed segments were synced when closed */
			sp->synced = upto;
			break;
		}
		fd = sp->active->sync_fd;
		r = sync_unlocked(sp, fd);
		if (!r && upto > sp->synced)
			sp->synced = upto;
	}
	err = sp->synced >= target ? 0 : sp->err;
	pthread_mutex_unlock(&sp->lock);
	return err;
}

int spool_rotate(struct spool *sp)
{
	int err;

	pthread_mutex_lock(&sp->lock);
	err = rotate_locked(sp);
	pthread_mutex_unlock(&sp->lock);
	return err;
}

int spool_file_done(struct spool *sp, uint64_t key, uint64_t low_water_seq)
{
	int err;

	pthread_mutex_lock(&sp->lock);
	for (size_t i = 0; i < sp->nsegs; i++) {
		struct kslot *k = keymap_find(&sp->segs[i]->keys, key);
		if (k && k->seq <= low_water_seq)
			keymap_remove(&sp->segs[i]->keys, k);
	}
	err = sweep_locked(sp);
	pthread_mutex_unlock(&sp->lock);
	return err;
}

int spool_forget_file(struct spool *sp, uint64_t key)
{
	return spool_file_done(sp, key, UINT64_MAX);
}

bool spool_settling(struct spool *sp)
{
	bool r;

	pthread_mutex_lock(&sp->lock);
	r = retiring_locked(sp) != NULL;
	pthread_mutex_unlock(&sp->lock);
	return r;
}

uint64_t spool_bytes(struct spool *sp)
{
	uint64_t b;

	pthread_mutex_lock(&sp->lock);
	b = sp->bytes;
	pthread_mutex_unlock(&sp->lock);
	return b;
}

void spool_get_stats(struct spool *sp, struct spool_stats *st)
{
	pthread_mutex_lock(&sp->lock);
	*st = (struct spool_stats){
	    .bytes = sp->bytes,
	    .next_seq = sp->next_seq,
	    .segments = (unsigned)sp->nsegs,
	    .held = sp->held,
	    .held_bytes = sp->held_bytes,
	    .set_aside = sp->set_aside,
	    .replay_due = sp->replay_due,
	    .err = sp->err,
	};
	for (size_t i = 0; i < sp->nsegs; i++)
		st->pending += sp->segs[i]->state == SEG_PENDING;
	pthread_mutex_unlock(&sp->lock);
}

int spool_close(struct spool *sp)
{
	int err, e;

	if (!sp)
		return 0;
	pthread_mutex_lock(&sp->lock);
	err = rotate_locked(sp);
	e = sweep_locked(sp);
	if (!err)
		err = e;
	sp->info.last_use = time(NULL);
	sp->info.next_seq = sp->next_seq;
	e = spd_write_info(sp->mdfd, &sp->info);
	if (!err)
		err = e;
	pthread_mutex_unlock(&sp->lock);
	spool_free(sp);
	return err;
}

/* ---- replay ---- */

struct spool_replay {
	struct spool *sp;
	struct seg *cur; /* the pending segment being read; NULL between */
	struct spj_reader *rd;
	uint64_t prev_last; /* the last seq handed on (0: none yet) */
	uint64_t last_seq;  /* the record just returned; 0: none */
	bool untracked;	    /* it has no entry yet */
	int final;	    /* 0, SPOOL_DONE, SPOOL_DAMAGED, or a -errno that ends it */
	struct spool_damage dmg;
};

int spool_replay_begin(struct spool *sp, struct spool_replay **out)
{
	struct spool_replay *it;

	*out = NULL;
	it = g_try_new0(struct spool_replay, 1);
	if (!it)
		return -ENOMEM;
	pthread_mutex_lock(&sp->lock);
	if (sp->replay) {
		pthread_mutex_unlock(&sp->lock);
		g_free(it);
		return -EBUSY;
	}
	sp->replay = it;
	pthread_mutex_unlock(&sp->lock);
	it->sp = sp;
	*out = it;
	return 0;
}

/* The record just returned gets its default entry unless it was tracked. */
static void settle_last_locked(struct spool_replay *it)
{
	if (it->untracked && it->cur) {
		keymap_put_max(&it->cur->keys, SPOOL_REPLAY_KEY, it->last_seq);
		it->cur->had_keys = true;
	}
	it->untracked = false;
	it->last_seq = 0;
}

/* The replay has nothing more to hand on: appends may begin. */
static int finish_locked(struct spool_replay *it, int res)
{
	it->final = res;
	it->sp->replay_due = false;
	return res;
}

/* A segment read to its end: it becomes a live one (deleted at once if it
 * held no record). */
static void end_segment_locked(struct spool_replay *it)
{
	spj_reader_close(it->rd);
	it->rd = NULL;
	it->cur->state = SEG_LIVE;
	it->cur = NULL;
	sweep_locked(it->sp); /* a failed delete is tried again later */
}

/*
 * Damage in the current segment: hold every later pending one (and the
 * damaged one) in medium.info first, so a crash before the move still never
 * replays them; then move the segment aside.
 */
G_GNUC_PRINTF(3, 4)
static int damage_locked(struct spool_replay *it, uint64_t offset, const char *fmt, ...)
{
	struct spool *sp = it->sp;
	struct seg *s = it->cur;
	struct spd_info saved = sp->info;
	char aside[96];
	char why[SPOOL_WHY_MAX];
	unsigned held = 0;
	va_list ap;
	int err;

	va_start(ap, fmt); /* before the reader goes: the arguments may be its */
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	spj_reader_close(it->rd);
	it->rd = NULL;
	spd_add_held(&sp->info, s->first_seq, sp->next_seq);
	err = spd_write_info(sp->mdfd, &sp->info);
	if (err) {
		sp->info = saved;
		it->final = err; /* nothing moved: a new replay meets it again */
		return err;
	}
	snprintf(aside, sizeof(aside), "%s" SPOOL_ASIDE_INFIX "%lld", s->name,
		 (long long)time(NULL));
	if (renameat(sp->mdfd, s->name, sp->mdfd, aside) == 0)
		fd_fsync_dir(sp->mdfd);
	else
		aside[0] = '\0'; /* held all the same */
	memset(&it->dmg, 0, sizeof(it->dmg));
	snprintf(it->dmg.segment, sizeof(it->dmg.segment), "%s", s->name);
	snprintf(it->dmg.moved_to, sizeof(it->dmg.moved_to), "%s", aside);
	it->dmg.offset = offset;
	snprintf(it->dmg.why, sizeof(it->dmg.why), "%s", why);
	if (aside[0])
		sp->set_aside++;
	else {
		sp->held++;
		sp->held_bytes += s->size;
	}
	segs_remove(sp, s);
	seg_free(s);
	it->cur = NULL;
	for (size_t i = 0; i < sp->nsegs;) {
		struct seg *h = sp->segs[i];
		if (h->state != SEG_PENDING) {
			i++;
			continue;
		}
		sp->held++;
		sp->held_bytes += h->size;
		held++;
		segs_remove(sp, h);
		seg_free(h);
	}
	it->dmg.held = held;
	return finish_locked(it, SPOOL_DAMAGED);
}

static struct seg *first_pending_locked(struct spool *sp, bool *is_last)
{
	for (size_t i = 0; i < sp->nsegs; i++) {
		if (sp->segs[i]->state != SEG_PENDING)
			continue;
		*is_last = i + 1 == sp->nsegs;
		return sp->segs[i];
	}
	return NULL;
}

/* Open the next pending segment: 0 (it->rd set), SPOOL_DONE, SPOOL_DAMAGED,
 * -errno. */
static int next_segment_locked(struct spool_replay *it)
{
	struct spool *sp = it->sp;
	const struct spj_segment_info *si;
	bool last = false;
	int r;

	it->cur = first_pending_locked(sp, &last);
	if (!it->cur)
		return finish_locked(it, SPOOL_DONE);
	r = spj_reader_open(sp->mdfd, it->cur->name, &it->rd);
	if (r == SPJ_EHDRSHORT && last) {
		/* A crash while the segment was begun: it never held a record. */
		it->cur->state = SEG_LIVE;
		it->cur = NULL;
		sweep_locked(sp);
		return 0;
	}
	if (r < -4095)
		return damage_locked(it, 0, "%s/%s: %s", sp->where, it->cur->name,
				     spj_strerror(r));
	if (r < 0) {
		it->cur = NULL;
		return r;
	}
	si = spj_reader_info(it->rd);
	if (strcmp(si->medium_id, sp->medium_id))
		return damage_locked(it, 0, "%s/%s: a segment of another medium (%s)",
				     sp->where, it->cur->name, si->medium_id);
	if (si->first_seq != it->cur->first_seq)
		return damage_locked(it, 0,
				     "%s/%s: its header says first record %" PRIu64,
				     sp->where, it->cur->name, si->first_seq);
	if (it->prev_last && si->first_seq <= it->prev_last)
		return damage_locked(it, 0,
				     "%s/%s: begins at record %" PRIu64
				     ", not after %" PRIu64 " (out of order)",
				     sp->where, it->cur->name, si->first_seq,
				     it->prev_last);
	return 0;
}

/* The end result r (not SPJ_OK) of the current segment. */
static int segment_result_locked(struct spool_replay *it, int r)
{
	struct spool *sp = it->sp;
	uint64_t at = spj_reader_offset(it->rd);
	bool last = false;
	int err;

	first_pending_locked(sp, &last); /* it->cur is the first pending */
	if (r == SPJ_END) {
		end_segment_locked(it);
		return 0;
	}
	if (r == SPJ_TORN && last) {
		err = spj_cut(sp->mdfd, it->cur->name, at);
		if (err) {
			it->final = err;
			return err;
		}
		sp->bytes -= it->cur->size - at;
		it->cur->size = at;
		end_segment_locked(it);
		return 0;
	}
	return damage_locked(it, at, "%s/%s: %s%s", sp->where, it->cur->name,
			     spj_reader_why(it->rd),
			     r == SPJ_TORN ? " (and it is not the last segment)" : "");
}

int spool_replay_next(struct spool_replay *it, struct spj_record *rec,
		      const void **payload)
{
	struct spool *sp = it->sp;
	int r = 0;

	pthread_mutex_lock(&sp->lock);
	settle_last_locked(it);
	while (!it->final) {
		if (!it->rd) {
			r = next_segment_locked(it);
			if (r)
				break;
			continue; /* it->rd, or a segment skipped */
		}
		/* Room for the record's entry first: once read it must be kept. */
		r = keymap_reserve(&it->cur->keys, 1);
		if (r)
			break;
		r = spj_next(it->rd, rec, payload);
		if (r == SPJ_OK) {
			it->last_seq = it->prev_last = rec->seq;
			it->untracked = true;
			break;
		}
		if (r < 0)
			break;
		r = segment_result_locked(it, r);
		if (r)
			break;
	}
	if (it->final)
		r = it->final;
	pthread_mutex_unlock(&sp->lock);
	return r;
}

int spool_replay_track(struct spool_replay *it, uint64_t key)
{
	int err;

	if (key == SPOOL_REPLAY_KEY || !it->last_seq || !it->cur)
		return -EINVAL;
	pthread_mutex_lock(&it->sp->lock);
	err = it->untracked ? 0 : keymap_reserve(&it->cur->keys, 1);
	if (!err) {
		keymap_put_max(&it->cur->keys, key, it->last_seq);
		it->cur->had_keys = true;
		it->untracked = false;
	}
	pthread_mutex_unlock(&it->sp->lock);
	return err;
}

const struct spool_damage *spool_replay_damage(const struct spool_replay *it)
{
	return &it->dmg;
}

void spool_replay_end(struct spool_replay *it)
{
	if (!it)
		return;
	pthread_mutex_lock(&it->sp->lock);
	settle_last_locked(it);
	spj_reader_close(it->rd);
	it->sp->replay = NULL;
	pthread_mutex_unlock(&it->sp->lock);
	g_free(it);
}
