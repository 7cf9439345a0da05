/*
 * The flushers' decisions, as pure functions of their inputs (time passed
 * in): room for a write, retry backoff, how long reads hold a chunk back,
 * when the medium's metadata is due, whether a chunk seeks. See the DESIGN
 * comment in policy.c. No locking: the caller holds the queue's lock.
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pacer.h"

/* No file may fill more than this share of queue=, so that when its data
 * fails for good other files still find room. */
#define FILE_SHARE_PCT 75
/* The data of failing files counts against other files' room only up to this
 * share of queue=: several failing files cannot wedge the rest. */
#define FAIL_SHARE_PCT 75
#define RETRY_MIN_NS (500 * NSEC_PER_MSEC)
#define RETRY_MAX_NS (30 * NSEC_PER_SEC)
#define DRAIN_GIVEUP_FAILURES 3
/* While writers wait (for room, or in fsync), reads hold the flushers back at
 * most this many latency= targets in a row: reads still win, writes still move. */
#define GATE_HOLD_MAX_LATENCIES 4
#define GATE_HOLD_MAX_MIN_NS (200 * NSEC_PER_MSEC)
/* Metadata (bitmaps, inode tables, indirect blocks) sits elsewhere on the
 * medium: each flush of it costs a few seeks (half a second on a DVD-RAM:
 * group descriptors, bitmaps, inode table and back), and the same blocks are
 * written again each time. So the interval grows with what a flush costs, to
 * keep it at about 1/SYNCFS_SHARE_DIV of the medium's time (at 1/40, a
 * DVD-RAM's writer lost 3% to it), within [MIN, MAX]. Reads do not wait for a
 * whole flush (it goes in slices), so it can be long; ext2 dirties a few
 * blocks per second of flushing, so even 30 s stays well under a megabyte, and
 * the kernel would write it at 30 s anyway (dirty_expire). When the queue runs
 * empty, the metadata is flushed once it has stayed empty SYNCFS_IDLE_NS: a
 * writer of many small files empties it again and again. */
#define SYNCFS_INTERVAL_MIN_NS (10 * NSEC_PER_SEC)
#define SYNCFS_INTERVAL_MAX_NS (30 * NSEC_PER_SEC)
#define SYNCFS_SHARE_DIV 100
#define SYNCFS_IDLE_NS NSEC_PER_SEC
#define SYNCFS_NEAR_END_NS (5 * NSEC_PER_SEC)

/* Whether a write of len bytes to a file holding file_bytes fits in a queue of
 * cap bytes holding queued, of which failing belong to files whose data
 * fails. The first write into an empty queue always fits. */
bool policy_room(uint64_t cap, uint64_t queued, uint64_t failing, uint64_t file_bytes,
		 size_t len);

/* When a step that failed for the failures-th time in a row is retried. */
int64_t policy_retry_at(unsigned failures, int64_t now_ns);
/* At exit, a file failing with err for that many tries in a row is given up. */
bool policy_gave_up(int err, unsigned failures);

/* Reads holding the flushers back, bounded while writers wait. */
struct gate_hold {
	int64_t since_ns; /* held back since (0: not held) */
};
/*
 * How long the next chunk must still wait for reads (0: go). gate_wait_ns is
 * the read gate's answer (readgate_wait_ns); reads_active whether reads are in
 * flight that the chunk would delay noticeably (flusher.c). A chunk somebody
 * waits on (urgent) waits for those only, not for their grace; while writers wait, no chunk is held back more than
 * GATE_HOLD_MAX_LATENCIES x latency_ns in a row.
 */
int64_t policy_gate_hold(struct gate_hold *h, int64_t gate_wait_ns, bool reads_active,
			 bool urgent, bool writers_waiting, int64_t latency_ns, int64_t now_ns);
/* That bound: the longest reads hold a chunk back while writers wait. */
int64_t policy_gate_hold_max_ns(int64_t latency_ns);

/* When the medium's own metadata is flushed. */
struct meta_clock {
	bool dirty;		  /* the medium was written since the last flush began */
	int64_t interval_start_ns; /* the interval runs from here */
	int64_t last_write_end_ns; /* the end of the last chunk or truncate */
	int64_t interval_ns;	  /* from the last flush's cost */
};
void policy_meta_init(struct meta_clock *m);
/* A chunk or truncate ended at end_ns: the interval runs from the first write
 * after the medium was clean (a flush right after a burst's first chunk would
 * find little). */
void policy_meta_written(struct meta_clock *m, int64_t end_ns);
/* Whether a flush is due now: every interval_ns while streaming (files have
 * queued work), or once the queue has stayed empty SYNCFS_IDLE_NS. While
 * streaming, not when what is queued will be written within
 * SYNCFS_NEAR_END_NS (left_ns, at the medium's pace; INT64_MAX: unknown),
 * up to SYNCFS_INTERVAL_MAX_NS: the flush after the end writes the same
 * bitmaps and inodes once instead of twice (a drain before umount saved
 * 0.4 s of seeks on an MO). */
bool policy_meta_due(const struct meta_clock *m, bool streaming, int64_t left_ns, int64_t now_ns);
/* A flush begins at now_ns. */
void policy_meta_begin(struct meta_clock *m, int64_t now_ns);
/* It took took_ns of the medium's time; only one in the middle of a stream
 * prices the next (after the queue ran empty it finds next to nothing). */
void policy_meta_priced(struct meta_clock *m, int64_t took_ns, bool streaming);

/* Whether a chunk must pay a seek: something else moved the head since the
 * last chunk (head_moved: a truncate, syncfs or failure; a read that ended
 * after it), or it does not continue the last chunk's file at its end. */
bool policy_chunk_seeks(bool head_moved, bool continues_last, int64_t last_read_end_ns,
			int64_t last_write_end_ns);
