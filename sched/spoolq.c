/*
 * DESIGN: the queue's side of the spool (spool=DIR). spool.c keeps segments
 * and knows nothing of files; this file decides what is journaled, when a
 * record may go, and how a crashed run's records are put back.
 *
 * Journaling. Every change the queue acknowledges before the medium has it
 * is appended under q->lock, right after the queue took it, so records are
 * in the order the queue applies them: a WRITE per queued write, a TRUNCATE
 * per queued truncate, a TIMES per explicit utimens of a dirty file. Changes
 * applied to the lower at once but ordered after queued data of the same
 * file are journaled too, so that a replay of older writes cannot undo them:
 * FALLOCATE (after its own flush of the file), RENAME of a name that a dirty
 * file (or a directory above one) had, and UNLINK when a dirty file's data
 * is dropped (its last name gone and closed). Each record names its file by
 * the lower file handle (name_to_handle_at, once per dirty spell) and by
 * its path below the lower root at the time of the record.
 *
 * Durability. A record is in the spool file's page cache when the write is
 * answered: a kill -9 of the daemon loses nothing. A syncer thread
 * fdatasyncs the journal every spool_sync= ms when something was appended
 * (group commit), so power loss takes at most that much of acknowledged
 * writes; spool_sync=0 makes every write wait for the fdatasync before its
 * answer. An fsync by the application is still answered only once the data
 * is on the medium (the queue's own rule).
 *
 * Reclaim. Each dirty file pairs every record with the queue generation it
 * was made at (extents.h: extmap gens). A record is on the lower once every
 * generation up to its own has left the file: nothing older is queued or in
 * flight (extmap_oldest_gen), no truncate older is pending, and explicit
 * times were restored. That seq is put in sq->done (key -> seq); the
 * metadata flush (flusher.c sync_medium) takes the table before its syncfs
 * and hands it to spool_file_done only if the syncfs succeeded: only then
 * are the data and the allocation that holds it on the medium. A failed
 * syncfs (the medium gone) puts them back, so a yanked medium's records stay
 * in the spool for its next mount.
 *
 * Replay, at mount, before the FUSE session exists (nothing can write
 * meanwhile; the mount command waits, and a replay that cannot complete
 * mounts nothing). A first pass over the records collects the renames and
 * unlinks; each WRITE, TRUNCATE, FALLOCATE, TIMES is then applied to the
 * lower file found by its handle, else by its path carried forward through
 * the later renames (skipped when a later unlink removed it), opened beneath
 * the lower root without following any symbolic link (openat2
 * RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS). A stale handle is a file deleted,
 * or one whose inode never reached the medium (a yank): its path tells. A
 * path that names another file than the record's handle (the moves of a
 * hard link are not all journaled) is not written: like a record whose path
 * walks through a symbolic link, its bytes go to the rescue directory
 * (rescue.c) and the log says so. A file missing altogether (its create
 * never reached the medium) is created, mode 0600, its directories 0700,
 * and named in the log. A RENAME_EXCHANGE is journaled as three moves
 * through a name that never exists, so a path follows it. Data is written
 * with fdatasync every REPLAY_SYNC_BYTES, so the kernel never piles up the
 * medium's dirty pages; a syncfs ends the replay and only then are the
 * records released. Since segments go oldest first (spool.c), what is
 * replayed is a whole suffix of the history, applied again in order even
 * where part of it had landed. Damage (spool.c) ends the replay early: the
 * log says which segment was set aside and the mount comes up.
 *
 * Paths alone. A lower without file handles (fusefat), or
 * SLOWMEDIA_SPOOL_NO_HANDLES=1 (for the tests of that mode on any
 * filesystem), journals paths only; hard links cannot be followed then
 * (FAT has none).
 */
#include "queue_int.h"
#include "fdio.h"
#include "medium.h"
#include "spool.h"
#include "rescue.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/falloc.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#define REPLAY_SYNC_BYTES (8u << 20)
#define REPLAY_LOG_INTERVAL_NS (5 * NSEC_PER_SEC)
/* The path of a record whose file is known by its handle alone: a hard link
 * whose own name was removed, written through an fd of that name. */
#define SQ_NO_NAME ".slowmedia-no-name"
/* The key of RENAME and UNLINK records (file keys count up from 1). */
#define SQ_MOVES_KEY (UINT64_MAX - 1)

struct sgen {
	uint64_t gen, seq;
};

struct spoolq {
	struct spool *sp;
	char *dir;
	uint64_t max_bytes; /* spool_max */
	unsigned sync_ms;
	GHashTable *done;  /* key -> seq (as pointers): on the lower, not yet synced */
	GHashTable *paths; /* paths journaled (a set), for renames and unlinks */
	bool moves;	   /* RENAME or UNLINK records were made (SQ_MOVES_KEY) */
	uint64_t next_key;
	int err;	   /* the append error last logged */
	bool appended;	   /* since the syncer's last spool_sync */
	bool stop;
	pthread_t syncer;
	bool syncer_started;
	pthread_cond_t kick;
	/* For status: */
	uint64_t replayed_records, replayed_bytes;
};

/* ---- the spool directory ---- */

static int check_dir(const char *dir, int root_fd, char *why, size_t n)
{
	struct stat st, rst;
	int r;

	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		snprintf(why, n, "spool=%s: cannot create it: %s", dir, g_strerror(errno));
		return -errno;
	}
	r = fd_check_private_dir("spool", dir,
				 "anybody could plant records that this mount would write to the "
				 "medium",
				 &st, why, n);
	if (r < 0)
		return r;
	if (fstat(root_fd, &rst) == 0 && rst.st_dev == st.st_dev) {
		snprintf(why, n,
			 "spool=%s: on the medium itself; it belongs on a fast disk that stays in "
			 "the machine",
			 dir);
		return -EINVAL;
	}
	return 0;
}

/* spool_max as asked, lowered (with a warning) to what the disk has free. */
static uint64_t fit_max(const char *dir, uint64_t want)
{
	struct statvfs sv;
	uint64_t avail;

	if (statvfs(dir, &sv) < 0)
		return want;
	avail = (uint64_t)sv.f_bavail * (sv.f_frsize ? sv.f_frsize : sv.f_bsize);
	if (avail >= want)
		return want;
	avail = MAX(avail / 2, SCHED_QUEUE_MIN_BYTES);
	sm_warn("spool=%s: only %" PRIu64 " MiB free for spool_max=%" PRIu64
		" MiB: using spool_max=%" PRIu64 " MiB",
		dir, (uint64_t)sv.f_bavail * (sv.f_frsize ? sv.f_frsize : sv.f_bsize) >> 20,
		want >> 20, avail >> 20);
	return avail;
}

/* ---- replay ---- */

struct path_event {
	uint64_t seq;
	enum spj_type type;
	char *from, *to; /* to: RENAME's */
};

static void event_free(gpointer p)
{
	struct path_event *e = p;

	g_free(e->from);
	g_free(e->to);
	g_free(e);
}

/* Renames and unlinks of every pending record, in order. */
static GPtrArray *collect_events(struct spoolq *sq, const char *key)
{
	GPtrArray *ev = g_ptr_array_new_with_free_func(event_free);
	struct spool_scan *sc;
	struct spj_record rec;
	const void *payload;

	if (spool_scan_open(sq->dir, key, 0, &sc, NULL) < 0)
		return ev;
	while (spool_scan_next(sc, &rec, &payload) == SPOOL_REC) {
		struct path_event *e;

		if (rec.type != SPJ_RENAME && rec.type != SPJ_UNLINK)
			continue;
		e = g_new0(struct path_event, 1);
		e->seq = rec.seq;
		e->type = rec.type;
		e->from = g_strdup(rec.path);
		if (rec.type == SPJ_RENAME)
			e->to = g_strndup(payload, rec.payload_len);
		g_ptr_array_add(ev, e);
	}
	spool_scan_close(sc);
	return ev;
}

/* Where the file a record named at seq is now: NULL when a later unlink
 * removed it. */
static char *path_now(const GPtrArray *ev, const char *path, uint64_t seq)
{
	char *p = g_strdup(path);

	for (guint i = 0; i < ev->len && p; i++) {
		const struct path_event *e = ev->pdata[i];
		size_t n = strlen(e->from);

		if (e->seq <= seq)
			continue;
		if (e->type == SPJ_UNLINK && strcmp(p, e->from) == 0) {
			g_clear_pointer(&p, g_free);
		} else if (e->type == SPJ_RENAME && strncmp(p, e->from, n) == 0 &&
			   (p[n] == '\0' || p[n] == '/')) {
			char *moved = g_strconcat(e->to, p + n, NULL);
			g_free(p);
			p = moved;
		}
	}
	return p;
}

static int open_beneath(int root_fd, const char *path, int flags, mode_t mode)
{
	struct open_how how = {.flags = (uint64_t)flags | O_CLOEXEC | O_NOFOLLOW,
			       .mode = (flags & O_CREAT) ? mode : 0,
			       .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
					  RESOLVE_NO_MAGICLINKS};
	long fd = syscall(SYS_openat2, root_fd, path, &how, sizeof(how));

	return fd < 0 ? -errno : (int)fd;
}

/* The directories above path (below the root), made 0700 where missing:
 * their creation did not reach the medium either. Never through a link: each
 * is opened beneath the root as the file is. */
static void make_parents(int root_fd, const char *path)
{
	g_autofree char *dirs = g_strdup(path);
	char *slash = dirs;
	char esc[512];

	while ((slash = strchr(slash, '/'))) {
		*slash = '\0';
		int fd = open_beneath(root_fd, dirs, O_RDONLY | O_DIRECTORY, 0);
		if (fd == -ENOENT) {
			int pfd;
			g_autofree char *parent = g_path_get_dirname(dirs);
			g_autofree char *base = g_path_get_basename(dirs);

			pfd = strcmp(parent, ".") == 0
				      ? fcntl(root_fd, F_DUPFD_CLOEXEC, 0)
				      : open_beneath(root_fd, parent, O_RDONLY | O_DIRECTORY, 0);
			if (pfd >= 0 && mkdirat(pfd, base, 0700) == 0)
				sm_warn("spool replay: directory %s was missing on the medium: "
					"created it, mode 0700",
					sm_log_escape(dirs, esc, sizeof(esc)));
			if (pfd >= 0)
				close(pfd);
		} else if (fd >= 0) {
			close(fd);
		}
		*slash++ = '/';
	}
}

struct replay_file {
	int fd;
	char *path;	   /* as opened (for messages) */
	uint64_t unsynced; /* bytes written since the last fdatasync */
	const void *handle;
	uint32_t handle_len;
	int32_t handle_type;
	char handle_copy[SPJ_HANDLE_MAX];
};

static void replay_file_close(struct replay_file *rf)
{
	if (rf->fd >= 0) {
		if (rf->unsynced)
			fdatasync(rf->fd);
		close(rf->fd);
	}
	g_free(rf->path);
	*rf = (struct replay_file){.fd = -1};
}

#define REPLAY_ELSEWHERE 2

/* Whether fd is the file rec's handle names. */
static bool same_handle(int fd, const struct spj_record *rec)
{
	struct {
		struct file_handle fh;
		unsigned char h[SPJ_HANDLE_MAX];
	} buf;
	int mount_id;

	buf.fh.handle_bytes = SPJ_HANDLE_MAX;
	if (name_to_handle_at(fd, "", &buf.fh, &mount_id, AT_EMPTY_PATH) < 0)
		return true; /* no handles here: the path is all there is */
	return buf.fh.handle_type == rec->handle_type && buf.fh.handle_bytes == rec->handle_len &&
	       memcmp(buf.fh.f_handle, rec->handle, rec->handle_len) == 0;
}

/* The lower file of rec: 0 with rf->fd, 1 when it is gone (skip),
 * REPLAY_ELSEWHERE when its path names another file now, -errno.
 * rf keeps the last file open: the next record of the same handle, or of
 * the same path as resolved, uses it again. */
static int replay_open(struct wq *q, struct replay_file *rf, const struct spj_record *rec,
		       const GPtrArray *ev)
{
	g_autofree char *path = NULL;
	char esc[512];
	int fd = -1;

	if (rf->fd >= 0 && rec->handle_len && rec->handle_len == rf->handle_len &&
	    rec->handle_type == rf->handle_type &&
	    memcmp(rec->handle, rf->handle_copy, rec->handle_len) == 0)
		return 0;
	if (!rec->handle_len) {
		path = path_now(ev, rec->path, rec->seq);
		if (!path)
			return 1;
		if (rf->fd >= 0 && !rf->handle_len && strcmp(rf->path, path) == 0)
			return 0;
	}
	replay_file_close(rf);
	if (rec->handle_len) {
		struct {
			struct file_handle fh;
			unsigned char h[SPJ_HANDLE_MAX];
		} buf;

		buf.fh.handle_bytes = rec->handle_len;
		buf.fh.handle_type = rec->handle_type;
		memcpy(buf.fh.f_handle, rec->handle, rec->handle_len);
		/* A real directory fd: an O_PATH one gets EBADF here. */
		fd = open_by_handle_at(q->sync_fd >= 0 ? q->sync_fd : q->root_fd, &buf.fh,
				       O_RDWR | O_CLOEXEC | O_NOFOLLOW);
		/* ESTALE: gone, or never on the medium (a yank before its inode
		 * was written): its path, carried through the later renames and
		 * unlinks, tells which. */
		if (fd < 0 && strcmp(rec->path, SQ_NO_NAME) == 0) {
			sm_err("spool replay: record %" PRIu64 " names its file by a handle "
			       "alone, which does not open here (%s): not applied",
			       rec->seq, g_strerror(errno));
			return 1;
		}
		if (fd < 0) {
			path = path_now(ev, rec->path, rec->seq);
			if (!path)
				return 1;
		}
	}
	if (fd < 0) {
		fd = open_beneath(q->root_fd, path, O_RDWR, 0);
		/* The file of a handle that does not open, found by its path:
		 * the same file (no right to open handles), or another one that
		 * has its name now (the path's moves were not all journaled: a
		 * hard link's) whose bytes must not be overwritten. */
		if (fd >= 0 && rec->handle_len && !same_handle(fd, rec)) {
			close(fd);
			return REPLAY_ELSEWHERE;
		}
		if (fd == -ENOENT && rec->type != SPJ_TIMES) {
			make_parents(q->root_fd, path);
			fd = open_beneath(q->root_fd, path, O_RDWR | O_CREAT | O_EXCL, 0600);
			if (fd >= 0)
				sm_warn("spool replay: %s was missing on the medium (its creation "
					"never reached it): created it, mode 0600",
					sm_log_escape(path, esc, sizeof(esc)));
		}
		if (fd == -ENOENT)
			return 1;
		if (fd < 0)
			return fd;
	}
	rf->fd = fd;
	rf->path = g_strdup(path ? path : rec->path);
	rf->handle_len = path ? 0 : rec->handle_len;
	rf->handle_type = rec->handle_type;
	if (rf->handle_len)
		memcpy(rf->handle_copy, rec->handle, rec->handle_len);
	return 0;
}

static int replay_apply(struct replay_file *rf, const struct spj_record *rec,
			const void *payload)
{
	int64_t at, mt;
	struct timespec ts[2];
	ssize_t n;

	switch (rec->type) {
	case SPJ_WRITE:
		for (uint64_t done = 0; done < rec->length; done += (uint64_t)n) {
			n = pwrite(rf->fd, (const char *)payload + done, rec->length - done,
				   (off_t)(rec->offset + done));
			if (n < 0 && errno == EINTR)
				n = 0;
			else if (n <= 0)
				return n < 0 ? -errno : -EIO;
		}
		rf->unsynced += rec->length;
		if (rf->unsynced >= REPLAY_SYNC_BYTES) {
			if (fdatasync(rf->fd) < 0)
				return -errno;
			rf->unsynced = 0;
		}
		return 0;
	case SPJ_TRUNCATE:
		return ftruncate(rf->fd, (off_t)rec->offset) < 0 ? -errno : 0;
	case SPJ_FALLOCATE:
		return fallocate(rf->fd, (int)rec->mode, (off_t)rec->offset, (off_t)rec->length) < 0
			       ? -errno
			       : 0;
	case SPJ_TIMES:
		spj_times_unpack(payload, &at, &mt);
		ts[0] = at == SPJ_TIME_OMIT ? (struct timespec){.tv_nsec = UTIME_OMIT}
					    : (struct timespec){at / NSEC_PER_SEC, at % NSEC_PER_SEC};
		ts[1] = mt == SPJ_TIME_OMIT ? (struct timespec){.tv_nsec = UTIME_OMIT}
					    : (struct timespec){mt / NSEC_PER_SEC, mt % NSEC_PER_SEC};
		return futimens(rf->fd, ts) < 0 ? -errno : 0;
	default:
		return 0; /* renames and unlinks were applied when they were made */
	}
}

/* A record the replay must not apply: its data saved in a rescue (opened at
 * the first), and the refusal logged. */
static void refuse_record(struct wq *q, struct rescue **rs, const struct spj_record *rec,
			  const void *payload, const char *reason)
{
	char esc[512], why[512];

	sm_err("spool replay: record %" PRIu64 " of %s refused: %s", rec->seq,
	       sm_log_escape(rec->path, esc, sizeof(esc)), reason);
	if (!*rs && rescue_open(q->opts.rescue_dir, q->medium.id, rs, why, sizeof(why)) < 0) {
		sm_err("spool replay: %s: record %" PRIu64 " is lost", why, rec->seq);
		return;
	}
	if (rec->type == SPJ_WRITE)
		rescue_write(*rs, rec->path, rec->offset, payload, rec->length);
	else if (rec->type == SPJ_TRUNCATE)
		rescue_note(*rs, rec->path, "truncate %" PRIu64 " %" PRIu64, rec->offset,
			    rec->offset);
	rescue_note(*rs, rec->path, "refused %s", reason);
}

static int replay(struct wq *q, struct spoolq *sq, char *why, size_t why_n)
{
	char key[SPOOL_KEY_MAX + 1], esc[512];
	g_autoptr(GPtrArray) ev = NULL;
	struct replay_file rf = {.fd = -1};
	struct spool_replay *it;
	struct spj_record rec;
	const void *payload;
	uint64_t last = 0, bytes = 0, records = 0, skipped = 0, refused = 0;
	int64_t t0 = now_ns(), logged = t0;
	struct rescue *rs = NULL;
	int r;

	if (spool_medium_key(q->medium.id, key) < 0)
		return -EINVAL;
	r = spool_replay_begin(sq->sp, &it);
	if (r < 0) {
		snprintf(why, why_n, "spool: cannot begin the replay: %s", g_strerror(-r));
		return r;
	}
	ev = collect_events(sq, key);
	while ((r = spool_replay_next(it, &rec, &payload)) == SPOOL_REC) {
		last = rec.seq;
		if (rec.type == SPJ_RENAME || rec.type == SPJ_UNLINK)
			continue; /* made on the lower when they happened (collect_events) */
		r = replay_open(q, &rf, &rec, ev);
		sm_dbg("spool replay: record %" PRIu64 " type %d of %s at %" PRIu64 "+%" PRIu64
		       ": %s", rec.seq, rec.type, sm_log_escape(rec.path, esc, sizeof(esc)),
		       rec.offset, rec.length, r == 1 ? "skipped" : r == 0 ? rf.path : "error");
		if (r == 1) {
			skipped++;
			continue;
		}
		if (r == -ELOOP || r == -EXDEV) {
			/* A symbolic link on the way (planted, or made since): never
			 * followed. The bytes go to the rescue directory. */
			refused++;
			refuse_record(q, &rs, &rec, payload, "a symbolic link on its path (not followed)");
			continue;
		}
		if (r == REPLAY_ELSEWHERE) {
			refused++;
			refuse_record(q, &rs, &rec, payload,
				      "its file is not on the medium and its path names another "
				      "file now");
			continue;
		}
		if (r == 0)
			r = replay_apply(&rf, &rec, payload);
		if (r < 0) {
			snprintf(why, why_n,
				 "spool replay: record %" PRIu64 " (%s of %s) cannot be applied: %s; "
				 "nothing is mounted and the data stays in %s",
				 rec.seq, rec.type == SPJ_WRITE ? "write" : "change",
				 sm_log_escape(rec.path, esc, sizeof(esc)), g_strerror(-r), sq->dir);
			replay_file_close(&rf);
			spool_replay_end(it);
			return r;
		}
		records++;
		if (rec.type == SPJ_WRITE)
			bytes += rec.length;
		if (now_ns() - logged >= REPLAY_LOG_INTERVAL_NS) {
			logged = now_ns();
			sm_info("spool replay: %" PRIu64 " records, %" PRIu64 " bytes so far", records,
				bytes);
		}
	}
	replay_file_close(&rf);
	if (rs) {
		uint64_t rb = rescue_bytes(rs);
		g_autofree char *rdir = g_strdup(rescue_dir(rs));
		int e = rescue_close(rs);
		sm_err("spool replay: %" PRIu64 " record%s refused (see above); their %" PRIu64
		       " bytes were %s %s",
		       refused, refused == 1 ? "" : "s", rb, e < 0 ? "not all saved in" : "saved in",
		       rdir);
	}
	if (r == SPOOL_DAMAGED) {
		const struct spool_damage *d = spool_replay_damage(it);
		sm_err("spool replay stopped at damage in segment %s at offset %" PRIu64
		       " (%s): it was moved aside as %s and %u later segment(s) are held; "
		       "nothing from the damage on was applied. See: slowmediactl spool list %s",
		       d->segment, d->offset, d->why, d->moved_to, d->held, sq->dir);
	} else if (r < 0) {
		snprintf(why, why_n, "spool replay: cannot read the journal: %s", g_strerror(-r));
		spool_replay_end(it);
		return r;
	}
	spool_replay_end(it);
	if (last) {
		/* Released only once the medium has all of it. */
		if (q->sync_fd >= 0 && syncfs(q->sync_fd) < 0) {
			r = -errno;
			snprintf(why, why_n,
				 "spool replay: syncfs of the medium failed: %s; the data stays in %s",
				 g_strerror(-r), sq->dir);
			return r;
		}
		spool_file_done(sq->sp, SPOOL_REPLAY_KEY, last);
		sm_info("spool replay: %" PRIu64 " records (%" PRIu64 " bytes of writes) put on the "
			"medium in %.1f s, %" PRIu64 " skipped (their files are gone)",
			records, bytes, (double)(now_ns() - t0) / NSEC_PER_SEC, skipped);
	}
	sq->replayed_records = records;
	sq->replayed_bytes = bytes;
	return 0;
}

/* ---- the syncer ---- */

static void *syncer_main(void *arg)
{
	struct wq *q = arg;
	struct spoolq *sq = q->sq;
	sigset_t all;

	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	pthread_mutex_lock(&q->lock);
	while (!sq->stop) {
		if (!sq->appended) {
			pthread_cond_wait(&sq->kick, &q->lock);
			continue;
		}
		sq->appended = false;
		pthread_mutex_unlock(&q->lock);
		int r = spool_sync(sq->sp);
		pthread_mutex_lock(&q->lock);
		if (r < 0 && r != sq->err) {
			sq->err = r;
			wq_err(q, "spool=%s: cannot sync the journal: %s (writes fail from now on)",
			       sq->dir, g_strerror(-r));
		}
		wq_unlock_and_release(q);
		usleep(sq->sync_ms * 1000u);
		pthread_mutex_lock(&q->lock);
	}
	pthread_mutex_unlock(&q->lock);
	return NULL;
}

/* ---- the API (queue_int.h) ---- */

static void journal_move(struct wq *q, const char *path, const char *to);

int sq_open(struct wq *q, const struct sched_opts *o, char *why, size_t why_n)
{
	struct spoolq *sq;
	struct spool_medium_desc desc;
	char swhy[SPOOL_WHY_MAX];
	const char *root = q->root_path;
	int r;

	why[0] = '\0';
	if (!o->spool_dir)
		return 0;
	if (!root) {
		snprintf(why, why_n, "spool: cannot tell where the lower root is");
		return -EINVAL;
	}
	r = check_dir(o->spool_dir, q->root_fd, why, why_n);
	if (r < 0)
		return r;
	sq = g_new0(struct spoolq, 1);
	sq->dir = g_strdup(o->spool_dir);
	sq->sync_ms = o->spool_sync_ms;
	sq->max_bytes = fit_max(sq->dir, o->spool_max_bytes ? o->spool_max_bytes
							    : SPOOL_MAX_DEFAULT);
	sq->done = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, NULL);
	sq->paths = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
	pthread_cond_init(&sq->kick, NULL);
	desc = (struct spool_medium_desc){.label = q->medium.label,
					  .source = q->medium.source[0] ? q->medium.source : NULL,
					  .size = q->medium.size};
	r = spool_open(sq->dir, q->medium.id, &desc, &sq->sp, swhy);
	if (r < 0) {
		snprintf(why, why_n, "spool=%s: %s", sq->dir, swhy);
		goto fail;
	}
	/* Segments of a quarter of spool_max at most: only whole segments go,
	 * and the one being written never, so a 64 MiB segment would hold a
	 * small spool over its bound. */
	spool_set_segment_max(sq->sp, MIN((uint64_t)SPOOL_SEGMENT_MAX,
					  MAX(sq->max_bytes / SPOOL_SEGMENTS_PER_MAX, 1)));
	q->sq = sq;
	sm_info("spool=%s: medium %s%s, spool_max %" PRIu64 " MiB, synced every %u ms", sq->dir,
		q->medium.id, q->medium.weak ? " (no UUID: identified by fsid, size and label)" : "",
		sq->max_bytes >> 20, sq->sync_ms);
	r = replay(q, sq, why, why_n);
	if (r < 0) {
		q->sq = NULL;
		spool_close(sq->sp);
		goto fail;
	}
	return 0;
fail:
	g_hash_table_destroy(sq->done);
	g_hash_table_destroy(sq->paths);
	g_free(sq->dir);
	g_free(sq);
	return r < 0 ? r : -EINVAL;
}

int sq_start(struct wq *q)
{
	if (!q->sq)
		return 0;
	if (pthread_create(&q->sq->syncer, NULL, syncer_main, q) != 0)
		return -EAGAIN;
	pthread_setname_np(q->sq->syncer, "sm-spool");
	q->sq->syncer_started = true;
	return 0;
}

void sq_close(struct wq *q)
{
	struct spoolq *sq = q->sq;

	if (!sq)
		return;
	pthread_mutex_lock(&q->lock);
	sq->stop = true;
	pthread_cond_broadcast(&sq->kick);
	pthread_mutex_unlock(&q->lock);
	if (sq->syncer_started)
		pthread_join(sq->syncer, NULL);
	spool_close(sq->sp);
	pthread_cond_destroy(&sq->kick);
	g_hash_table_destroy(sq->done);
	g_hash_table_destroy(sq->paths);
	g_free(sq->dir);
	g_free(sq);
	q->sq = NULL;
}

/* The part of an absolute lower path below the lower root (no leading
 * '/'), or NULL when it is not below it ("/lowerX/f" is not below "/lower"). */
static const char *below_root(const struct wq *q, const char *abs)
{
	const char *root = q->root_path;
	size_t n;

	if (!root || !abs)
		return NULL;
	n = strcmp(root, "/") == 0 ? 0 : strlen(root);
	if (strncmp(abs, root, n) != 0 || abs[n] != '/' || !abs[n + 1])
		return NULL;
	return abs + n + 1;
}

/* Called with the lock held: the path of f below the lower root, refreshed
 * (the last one journaled when its fd is closed). *gone: no name is left. */
static const char *file_path(struct wq *q, struct wq_file *f, int fd, bool *gone)
{
	g_autofree char *abs = NULL;
	const char *rel;
	struct stat st;

	*gone = false;
	if (f->fd >= 0)
		fd = f->fd;
	abs = fd >= 0 ? wq_fd_path(fd) : NULL;
	if (abs && g_str_has_suffix(abs, " (deleted)")) {
		/* No name left (its data need not reach the medium), or only
		 * another hard link's, which the fd does not tell: the last
		 * path journaled stands (with a handle, a replay needs none). */
		*gone = fstat(fd, &st) == 0 && st.st_nlink == 0;
		return *gone ? NULL : f->spath;
	}
	if ((rel = below_root(q, abs))) {
		g_free(f->spath);
		f->spath = g_strdup(rel);
	}
	return f->spath;
}

const char *sq_rel_path(struct wq *q, struct wq_file *f, char *buf, size_t size)
{
	g_autofree char *abs = f->fd >= 0 ? wq_fd_path(f->fd) : NULL;
	const char *rel = below_root(q, abs);

	if (rel && !g_str_has_suffix(abs, " (deleted)")) {
		g_strlcpy(buf, rel, size);
		return buf;
	}
	if (f->spath && strcmp(f->spath, SQ_NO_NAME) != 0) {
		g_strlcpy(buf, f->spath, size);
		return buf;
	}
	return NULL;
}

/* SLOWMEDIA_SPOOL_NO_HANDLES=1 journals paths alone, as on a lower without
 * file handles (fusefat): for the tests of that mode on any filesystem. */
static bool q_no_handles(void)
{
	static int v = -1;

	if (v < 0)
		v = g_strcmp0(getenv("SLOWMEDIA_SPOOL_NO_HANDLES"), "1") == 0;
	return v;
}

static void file_handle_of(struct wq_file *f, int fd)
{
	struct {
		struct file_handle fh;
		unsigned char h[SPJ_HANDLE_MAX];
	} buf;
	int mount_id;

	if (f->shandle_tried)
		return;
	f->shandle_tried = true;
	if (q_no_handles())
		return;
	buf.fh.handle_bytes = SPJ_HANDLE_MAX;
	if (f->fd >= 0)
		fd = f->fd;
	if (fd < 0) {
		f->shandle_tried = false; /* with an fd next time */
		return;
	}
	if (name_to_handle_at(fd, "", &buf.fh, &mount_id, AT_EMPTY_PATH) == 0 &&
	    buf.fh.handle_bytes <= SPJ_HANDLE_MAX) {
		f->shandle_len = buf.fh.handle_bytes;
		f->shandle_type = buf.fh.handle_type;
		memcpy(f->shandle, buf.fh.f_handle, buf.fh.handle_bytes);
	}
}

int sq_append(struct wq *q, struct wq_file *f, int fd, enum spj_type type, uint64_t off,
	      uint64_t len, uint32_t mode, const void *payload, size_t payload_len, uint64_t gen)
{
	int r = sq_append_at(q, f, fd, type, off, len, mode, payload, payload_len, gen, NULL, NULL);

	return r < 0 ? r : 0;
}

int sq_append_at(struct wq *q, struct wq_file *f, int fd, enum spj_type type, uint64_t off,
		 uint64_t len, uint32_t mode, const void *payload, size_t payload_len,
		 uint64_t gen, struct ext_file **file, off_t *foff)
{
	struct spoolq *sq = q->sq;
	struct spj_record rec;
	struct sgen sg;
	const char *path;
	uint64_t seq;
	int r;

	if (file)
		*file = NULL;
	if (!sq)
		return 1;
	bool gone = false;

	path = file_path(q, f, fd, &gone);
	if (gone) {
		f->sgone = true; /* its data need not reach the medium: kept in memory */
		return 1;
	}
	file_handle_of(f, fd);
	if (!path && f->shandle_len)
		path = SQ_NO_NAME; /* known by its handle alone (see replay_open) */
	if (!path) {
		if (sq->err != -ENOENT)
			wq_err(q, "spool: a file whose name is not known (outside the lower root, or "
				  "a hard link whose name was removed) cannot be journaled");
		sq->err = -ENOENT;
		return -EIO;
	}
	if (!f->skey) {
		f->skey = ++sq->next_key;
		f->sgen = g_array_new(FALSE, FALSE, sizeof(struct sgen));
	}
	rec = (struct spj_record){.type = type, .handle_type = f->shandle_type,
				  .handle_len = f->shandle_len, .handle = f->shandle,
				  .path = path, .offset = off, .length = len, .mode = mode,
				  .payload_len = payload_len};
	r = spool_append_at(sq->sp, f->skey, &rec, payload, &seq, file, foff);
	if (r < 0) {
		if (r != sq->err)
			wq_err(q, "spool=%s: cannot journal a %s: %s (the writer gets the error)",
			       sq->dir, type == SPJ_WRITE ? "write" : "change", g_strerror(-r));
		sq->err = r;
		return r;
	}
	sq->err = 0;
	if (strcmp(path, SQ_NO_NAME) != 0 && !g_hash_table_contains(sq->paths, path))
		g_hash_table_add(sq->paths, g_strdup(path));
	sg = (struct sgen){.gen = gen, .seq = seq};
	g_array_append_val(f->sgen, sg);
	f->shi = seq;
	sq->appended = true;
	if (sq->sync_ms)
		pthread_cond_signal(&sq->kick);
	return 0;
}

int sq_durable(struct wq *q)
{
	if (!q->sq || q->sq->sync_ms)
		return 0;
	return spool_sync(q->sq->sp);
}

/* Called with the lock held: the generations of f that are all on the lower. */
static uint64_t lower_gen(const struct wq_file *f)
{
	uint64_t g = extmap_oldest_gen(&f->map);

	if (f->has_trunc)
		g = MIN(g, f->trunc_gen);
	if (f->trunc_flying)
		g = MIN(g, f->flying_gen);
	if (f->times_set && f->stimes_gen)
		g = MIN(g, f->stimes_gen);
	if (f->restoring && f->stimes_gen)
		g = MIN(g, f->stimes_gen);
	return g;
}

void sq_progress(struct wq *q, struct wq_file *f)
{
	uint64_t g, seq = 0;
	guint i;

	if (!q->sq || !f->sgen || !f->sgen->len)
		return;
	g = lower_gen(f);
	for (i = 0; i < f->sgen->len; i++) {
		const struct sgen *s = &g_array_index(f->sgen, struct sgen, i);
		if (s->gen >= g)
			break;
		seq = s->seq;
	}
	if (!i)
		return;
	g_array_remove_range(f->sgen, 0, i);
	gpointer k = g_memdup2(&f->skey, sizeof(f->skey));
	g_hash_table_replace(q->sq->done, k, GSIZE_TO_POINTER((gsize)seq));
}

void sq_forget(struct wq *q, struct wq_file *f)
{
	if (!q->sq || !f->skey)
		return;
	/* Its last name went through sq_note_rename, which journaled the
	 * UNLINK then (f->spath may name another file by now). */
	g_hash_table_remove(q->sq->done, &f->skey);
	spool_forget_file(q->sq->sp, f->skey);
	if (f->sgen)
		g_array_set_size(f->sgen, 0);
}

void sq_file_free(struct wq_file *f)
{
	if (f->sgen)
		g_array_free(f->sgen, TRUE);
	g_free(f->spath);
}

GHashTable *sq_take_done(struct wq *q)
{
	struct spoolq *sq = q->sq;
	GHashTable *t;

	if (!sq)
		return NULL;
	if (sq->moves) {
		/* Renames and unlinks older than every record still waiting (in a
		 * dirty file, or for this syncfs) are needed by no replay. */
		struct spool_stats st;
		uint64_t low;

		spool_get_stats(sq->sp, &st);
		low = st.next_seq;
		for (GList *l = q->dirty.head; l; l = l->next) {
			const struct wq_file *f = l->data;
			if (f->sgen && f->sgen->len)
				low = MIN(low, g_array_index(f->sgen, struct sgen, 0).seq);
		}
		if (low > 1) {
			uint64_t key = SQ_MOVES_KEY;
			g_hash_table_replace(sq->done, g_memdup2(&key, sizeof(key)),
					     GSIZE_TO_POINTER((gsize)(low - 1)));
		}
	}
	if (!g_hash_table_size(sq->done))
		return NULL;
	t = q->sq->done;
	q->sq->done = g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, NULL);
	return t;
}

void sq_done_synced(struct wq *q, GHashTable *t, bool ok)
{
	GHashTableIter it;
	gpointer k, v;

	if (!t)
		return;
	g_hash_table_iter_init(&it, t);
	while (g_hash_table_iter_next(&it, &k, &v)) {
		uint64_t key = *(uint64_t *)k, seq = GPOINTER_TO_SIZE(v);
		if (ok) {
			spool_file_done(q->sq->sp, key, seq);
		} else if (!g_hash_table_contains(q->sq->done, &key)) {
			g_hash_table_insert(q->sq->done, g_memdup2(&key, sizeof(key)), v);
		}
	}
	g_hash_table_destroy(t);
}

bool sq_full(const struct wq *q)
{
	return q->sq && spool_bytes(q->sq->sp) >= q->sq->max_bytes;
}

bool sq_full_for_good(const struct wq *q)
{
	return sq_full(q) && !spool_settling(q->sq->sp);
}

/* Called with the lock held: journal that the file journaled as `path` was
 * renamed to `to` (NULL: unlinked). Such a record stays until every record
 * made before it, of any file, is on the medium (sq_take_done): a replay
 * needs it for all of them. */
static void journal_move(struct wq *q, const char *path, const char *to)
{
	struct spoolq *sq = q->sq;
	struct spj_record rec = {.type = to ? SPJ_RENAME : SPJ_UNLINK, .path = path,
				 .payload_len = to ? strlen(to) : 0};
	int r;

	r = spool_append(sq->sp, SQ_MOVES_KEY, &rec, to, NULL);
	if (r < 0) {
		wq_err(q, "spool=%s: cannot journal a %s: %s", sq->dir, to ? "rename" : "removal",
		       g_strerror(-r));
		return;
	}
	sq->appended = true;
	sq->moves = true;
	for (GList *l = q->dirty.head; l; l = l->next) {
		struct wq_file *f = l->data;
		if (f->spath && strcmp(f->spath, path) == 0) {
			g_free(f->spath);
			f->spath = g_strdup(to ? to : path);
		}
	}
}

void sq_note_rename(struct wq *q, const char *from_abs, const char *to_abs)
{
	struct spoolq *sq = q->sq;
	g_autoptr(GPtrArray) hit = NULL;
	GHashTableIter it;
	gpointer k, v;
	size_t n;

	if (!sq || !(from_abs = below_root(q, from_abs)) ||
	    (to_abs && !(to_abs = below_root(q, to_abs))))
		return;
	n = strlen(from_abs);
	hit = g_ptr_array_new_with_free_func(g_free);
	pthread_mutex_lock(&q->lock);
	g_hash_table_iter_init(&it, sq->paths);
	while (g_hash_table_iter_next(&it, &k, &v)) {
		const char *p = k;
		if (strncmp(p, from_abs, n) == 0 && (p[n] == '\0' || p[n] == '/'))
			g_ptr_array_add(hit, g_strdup(p));
	}
	for (guint i = 0; i < hit->len; i++) {
		const char *p = hit->pdata[i];
		g_autofree char *to = to_abs ? g_strconcat(to_abs, p + n, NULL) : NULL;

		/* Journaled under the old name: a replay carries the earlier
		 * records to the new one, or drops them. */
		journal_move(q, p, to);
		g_hash_table_remove(sq->paths, p);
		if (to)
			g_hash_table_add(sq->paths, g_strdup(to));
	}
	if (hit->len)
		pthread_cond_signal(&sq->kick);
	wq_unlock_and_release(q);
}

void sq_get_stats(struct wq *q, struct wq_spool_stats *s)
{
	struct spool_stats st;

	memset(s, 0, sizeof(*s));
	if (!q->sq)
		return;
	spool_get_stats(q->sq->sp, &st);
	s->on = true;
	s->bytes = st.bytes;
	s->max_bytes = q->sq->max_bytes;
	s->segments = st.segments;
	s->held = st.held;
	s->set_aside = st.set_aside;
	s->err = st.err ? st.err : q->sq->err;
	s->replayed_records = q->sq->replayed_records;
	s->replayed_bytes = q->sq->replayed_bytes;
	g_strlcpy(s->medium, q->medium.id, sizeof(s->medium));
	g_strlcpy(s->dir, q->sq->dir, sizeof(s->dir));
}
