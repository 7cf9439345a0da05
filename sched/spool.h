/*
 * The spool: one medium's queued operations journaled in a directory on a
 * fast disk (spool=DIR), so that they survive a crash and are replayed on the
 * next mount of that medium. Built on spool_journal's segments; the layout,
 * the rules and who may call what are in the DESIGN comment of spool.c.
 *
 * Results: 0 (or a value), -errno, or one of enum spool_result. Functions
 * that take `char *why` fill it (SPOOL_WHY_MAX bytes; NULL is fine) with one
 * line for the user when they fail or stop at damage.
 */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "spool_journal.h"

#define SPOOL_SEGMENT_MAX (64u << 20) /* bytes: the active segment rotates here */
#define SPOOL_KEY_MAX 200	      /* bytes of a medium directory's name */
#define SPOOL_WHY_MAX 512	      /* bytes of a `why` buffer, NUL included */
#define SPOOL_LABEL_MAX 255	      /* bytes of a label kept in medium.info */
#define SPOOL_SOURCE_MAX 4095	      /* bytes of a source kept in medium.info */
#define SPOOL_INFO_NAME "medium.info"
#define SPOOL_LOCK_NAME "lock"
#define SPOOL_SEG_SUFFIX ".spj"
#define SPOOL_ASIDE_INFIX ".corrupt-" /* <segment>.corrupt-<unix time> */
/* The file key under which replayed records are kept until the caller says
 * where they belong (spool_replay_track) or that they are on the medium. */
#define SPOOL_REPLAY_KEY UINT64_MAX

enum spool_result {
	SPOOL_REC = 0,	   /* a record */
	SPOOL_DONE = 1,	   /* no more records */
	SPOOL_DAMAGED = 2, /* a damaged segment: see spool_damage */
};

/* What medium.info says of a medium beside its id (strings may be NULL). */
struct spool_medium_desc {
	const char *label;  /* the filesystem label */
	const char *source; /* where it was mounted from (the lower, a device) */
	uint64_t size;	    /* bytes of the filesystem */
};

/* ---- names ---- */

/* The medium's identity as the spool keys it: "uuid:UUID" when the
 * filesystem has a UUID (uuid not NULL or empty), else
 * "fsid:<16 hex>:size:<bytes>:label:<label>" (the label cut to fit).
 * -EINVAL for a UUID that does not fit. */
int spool_medium_id(char out[SPJ_MEDIUM_ID_MAX + 1], const char *uuid, uint64_t fsid,
		    uint64_t size, const char *label);
/* The directory name of a medium id: [A-Za-z0-9_-] and '.' (not first) kept,
 * every other byte %XX; an encoding over SPOOL_KEY_MAX is cut and ends in
 * "~" and a 64-bit hash of the whole id. -EINVAL for an empty id,
 * -ENAMETOOLONG for one over SPJ_MEDIUM_ID_MAX. */
int spool_medium_key(const char *medium_id, char out[SPOOL_KEY_MAX + 1]);

/* ---- a daemon's spool ---- */

struct spool;

/*
 * Open (creating DIR's last component and DIR/<key>/ as needed) the spool of
 * medium_id and lock it (flock on DIR/<key>/lock): -EBUSY while another
 * process has it, -EEXIST when the directory holds another medium's spool.
 * medium.info is written (last use now). Segments left by an earlier run are
 * pending: spool_append answers -EAGAIN until spool_replay_begin has run to
 * SPOOL_DONE or SPOOL_DAMAGED (at once when there are none).
 */
int spool_open(const char *dir, const char *medium_id,
	       const struct spool_medium_desc *desc, struct spool **out, char *why);
/* Sync and close the active segment, delete what is all on the medium,
 * write medium.info, unlock, free. End a replay before. NULL is fine. */
int spool_close(struct spool *sp);

/*
 * Journal record r (r->seq ignored) of the caller's file `key` (any value
 * but SPOOL_REPLAY_KEY, the same for every record of one file): appended to
 * the active segment, a new one begun when it would pass the segment limit.
 * *seq_out (NULL is fine): the record's sequence number. Not durable until
 * spool_sync. Errors: those of spj_append (-EINVAL, -EFBIG, -ENAMETOOLONG
 * for a bad record; an I/O error, after which a new segment is begun),
 * -EAGAIN before the replay, or the error that broke the spool.
 */
int spool_append(struct spool *sp, uint64_t key, const struct spj_record *r,
		 const void *payload, uint64_t *seq_out);
/* spool_append, and where the payload now is: *file (a new reference to the
 * segment, for reading only) and *payload_off in it. *file is NULL when the
 * segment cannot be opened for reading (the record is journaled anyway). */
struct ext_file;
int spool_append_at(struct spool *sp, uint64_t key, const struct spj_record *r,
		    const void *payload, uint64_t *seq_out, struct ext_file **file,
		    off_t *payload_off);
/* Every record appended before the call is on the disk. Callers sharing a
 * spool share the fdatasync (group commit). A failed sync breaks the spool:
 * every later append and sync returns its error (the pages may be gone). */
int spool_sync(struct spool *sp);
/* Begin a new segment at the next append (the current one synced, closed). */
int spool_rotate(struct spool *sp);
/*
 * Every record of file key numbered low_water_seq or less is on the medium
 * (or superseded): segments left with nothing the medium lacks are deleted
 * (never the active one). An error deleting one is returned; it is tried
 * again at the next call.
 */
int spool_file_done(struct spool *sp, uint64_t key, uint64_t low_water_seq);
/* File key has nothing more to write (unlinked and closed): forget it. */
int spool_forget_file(struct spool *sp, uint64_t key);

/* Bytes of the segments this spool replays and writes (not the held ones):
 * what spool_max bounds. */
uint64_t spool_bytes(struct spool *sp);
/* Whether segments rotated out still wait for their sync (the next
 * spool_sync settles them, and lets go of those with nothing left). */
bool spool_settling(struct spool *sp);

struct spool_stats {
	uint64_t bytes;	     /* spool_bytes */
	uint64_t next_seq;   /* the next record's number */
	unsigned segments;   /* this spool's (pending ones included) */
	unsigned pending;    /* left by an earlier run, not replayed yet */
	unsigned held;	     /* after a damage: kept for recover/discard only */
	uint64_t held_bytes; /* their bytes */
	unsigned set_aside;  /* damaged segments moved aside (.corrupt-T) */
	bool replay_due;     /* appends wait for a replay */
	int err;	     /* 0, or what broke the spool */
};
void spool_get_stats(struct spool *sp, struct spool_stats *st);

/* ---- replay, before the first append ---- */

struct spool_damage {
	char segment[64];  /* the segment's name */
	char moved_to[96]; /* its name now (replay: moved aside; scan: "") */
	uint64_t offset;   /* where its good records end */
	unsigned held;	   /* replay: later segments held back by it */
	char why[SPOOL_WHY_MAX];
};

struct spool_replay;

/* Replay the pending segments in order. One replay at a time (-EBUSY). */
int spool_replay_begin(struct spool *sp, struct spool_replay **out);
/*
 * The next record (rec's pointers and *payload valid until the next call):
 * SPOOL_REC; SPOOL_DONE at the end (a torn tail of the last segment, what a
 * crash leaves, is cut first); SPOOL_DAMAGED when a segment is damaged (a bad
 * checksum with records after it, an unsafe path, another medium's or an
 * out-of-order segment, a torn segment that is not the last): it is moved
 * aside, nothing after the damage is returned, and the later segments are
 * held (kept, never replayed: spool recover/discard are for them). Both end
 * the replay and allow appends. -errno: a read error (try again), or one
 * that ends this replay (begin a new one: it starts over with the segment
 * it stopped in).
 *
 * Every record returned stays in the spool under SPOOL_REPLAY_KEY, or under
 * the key given by spool_replay_track, until spool_file_done says it is on
 * the medium. Those of a segment found damaged later on are not: that
 * segment is moved aside whole, and only recover reads it again.
 */
int spool_replay_next(struct spool_replay *it, struct spj_record *rec,
		      const void **payload);
/* The record just returned belongs to file key. -ENOMEM, -EINVAL. */
int spool_replay_track(struct spool_replay *it, uint64_t key);
/* After SPOOL_DAMAGED: what, where, why. */
const struct spool_damage *spool_replay_damage(const struct spool_replay *it);
/* Free the iterator. A replay ended early leaves its segment pending. */
void spool_replay_end(struct spool_replay *it);

/* ---- reading a spool directory without a daemon (slowmediactl) ---- */

/* One medium directory, as spool_list sees it. */
struct spool_medium_info {
	char key[SPOOL_KEY_MAX + 1];
	char id[SPJ_MEDIUM_ID_MAX + 1]; /* "" when neither medium.info nor a
					   segment says */
	char label[SPOOL_LABEL_MAX + 1];
	char source[SPOOL_SOURCE_MAX + 1];
	uint64_t size;
	int64_t first_use, last_use; /* unix time; 0: unknown */
	bool have_info;		     /* medium.info was read */
	unsigned segments;	     /* *.spj: live and held */
	unsigned held;		     /* of them, held after a damage */
	unsigned set_aside;	     /* *.corrupt-T */
	uint64_t records;	     /* in the segments, up to any damage */
	uint64_t files;		     /* distinct paths of those records */
	uint64_t write_bytes;	     /* their WRITE payloads */
	uint64_t disk_bytes;	     /* every segment file, set aside too */
	/* The oldest segment's birth time where the filesystem keeps one, else
	 * its mtime (records carry no time): the pending data is about this
	 * old. 0 without segments. */
	int64_t oldest;
	bool oldest_is_birth;
	pid_t locked_by; /* the process holding the lock; 0: none, or unknown */
	char damage[SPOOL_WHY_MAX]; /* the first damage met reading; "" */
};

/* Call fn for every medium directory of dir, in name order, reading only
 * (no lock is taken: it works while daemons run, and what an active segment
 * holds may be just in the writing). fn returns non-zero to stop. -ENOENT,
 * -ENOTDIR for dir; an unreadable medium directory is passed with damage
 * saying why. */
int spool_list(const char *dir,
	       int (*fn)(const struct spool_medium_info *info, void *ctx), void *ctx,
	       char *why);
/* One medium directory's figures (dirfd: the spool dir). */
int spool_medium_stat(int dirfd, const char *key, struct spool_medium_info *info);
/* The directory of `medium` in dir: the one its id names, else one named
 * `medium` (a key as spool_list shows it). -ENOENT with why. */
int spool_find_medium(const char *dir, const char *medium, char key[SPOOL_KEY_MAX + 1],
		      char *why);

/* Reading one medium's records in order, for recover. */
enum {
	SPOOL_SCAN_LOCK = 1,	    /* take the medium's lock (-EBUSY: in use) */
	SPOOL_SCAN_HELD = 2,	    /* the held segments too */
	SPOOL_SCAN_SET_ASIDE = 4,   /* the good records of set-aside segments too */
	SPOOL_SCAN_PAST_DAMAGE = 8, /* after SPOOL_DAMAGED go on with the next */
};
struct spool_scan;
int spool_scan_open(const char *dir, const char *key, unsigned flags,
		    struct spool_scan **out, char *why);
/* SPOOL_REC, SPOOL_DONE, SPOOL_DAMAGED (spool_scan_damage; nothing is moved),
 * -errno. A torn tail of the last segment is the end, as in a replay. */
int spool_scan_next(struct spool_scan *sc, struct spj_record *rec, const void **payload);
const struct spool_damage *spool_scan_damage(const struct spool_scan *sc);
/* Segments the flags left out (held, set aside). */
unsigned spool_scan_skipped(const struct spool_scan *sc);
void spool_scan_close(struct spool_scan *sc);

/* Delete medium `key`'s directory in dir, under its lock (-EBUSY, why). */
int spool_discard(const char *dir, const char *key, char *why);

/* ---- for tests ---- */

/* The segment size limit (SPOOL_SEGMENT_MAX unless set; at least 1). */
void spool_set_segment_max(struct spool *sp, uint64_t bytes);
