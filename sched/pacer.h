/* Chunk sizing, bandwidth estimate, rate cap and the read gate: pure logic, time passed in. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NSEC_PER_SEC 1000000000ll
#define NSEC_PER_MSEC 1000000ll
#define CHUNK_MIN_BYTES (64u << 10)
#define CHUNK_MAX_BYTES (8u << 20)

struct pacer {
	uint64_t bw_bps;     /* EWMA of chunk throughput; 0 before the first chunk */
	uint64_t rate_bps;   /* rate= cap; 0: none */
	int64_t latency_ns;  /* latency= target for one chunk */
	int64_t next_ok_ns;  /* token bucket: earliest start of the next chunk */
	size_t last_chunk;   /* bytes of the last sampled chunk: growth is at most 2x */
	int64_t seek_ns;     /* EWMA of what a chunk that moves the head takes extra */
	unsigned seeks_in_row; /* chunks in a row that moved the head */
	int64_t run_ns;      /* EWMA of what each run of a gathered chunk costs past the first */
	bool run_learnt;     /* run_ns holds a sample */
	unsigned since_runs; /* chunks since the last gathered one */
};

void pacer_init(struct pacer *p, uint64_t rate_bps, unsigned latency_ms);
/* Bytes for the next chunk: bandwidth x latency target, clamped. seeks: the
 * chunk does not continue the last I/O of the medium (a read, a syncfs or
 * another file came between), so its budget pays for the head's move first. */
size_t pacer_chunk_bytes(const struct pacer *p, bool seeks);
/* How many separate runs of one file the next chunk may gather (1: just
 * one): each run past the first costs run_ns, and together they may take at
 * most half of latency=. Before run_ns is learnt, RUNS_PROBE; when the medium
 * allows no second run, a probe of two every RUNS_REPROBE chunks. */
#define CHUNK_RUNS_MAX 64
#define RUNS_PROBE 4
#define RUNS_REPROBE 64
unsigned pacer_runs_max(const struct pacer *p);
/* pacer_done for a chunk of `runs` runs: a gathered chunk (runs > 1) feeds
 * run_ns, not the bandwidth nor the seek (its time is mostly the runs'). */
void pacer_done_runs(struct pacer *p, size_t bytes, int64_t start_ns, int64_t end_ns, bool seeks,
		     unsigned runs);
/* How long a chunk of `bytes` should take on the medium, a seek included
 * when one was learnt; -1 before the bandwidth is known. */
int64_t pacer_chunk_ns(const struct pacer *p, size_t bytes);
/* Nanoseconds to wait before the next chunk may start (0: go). */
int64_t pacer_delay_ns(const struct pacer *p, int64_t now_ns);
/* A chunk of `bytes` ran from start_ns to end_ns; seeks as for pacer_chunk_bytes. */
void pacer_done(struct pacer *p, size_t bytes, int64_t start_ns, int64_t end_ns, bool seeks);

/* Lock-free: readers enter and leave without the queue's lock. */
struct readgate {
	unsigned active;     /* reads in flight; atomic */
	int64_t last_end_ns; /* when the last read that left grace completed; atomic */
	int64_t grace_ns;    /* read_grace=; immutable */
};

void readgate_init(struct readgate *g, unsigned grace_ms);
/* enter: true for the first read in flight; leave: true for the last. */
bool readgate_enter(struct readgate *g);
bool readgate_leave(struct readgate *g, int64_t now_ns);
/* Reads and metadata ops that took at least this long went to the medium. */
#define META_MEDIUM_NS (2 * NSEC_PER_MSEC)
/* A read or metadata op that began at began_ns ended: grace after it only when
 * it took long enough to have gone to the medium (a path walk's next step, or
 * the next read of a sequential reader, is then likely to need the medium
 * too). Cached ones, the many, moved no head and leave no grace. */
bool readgate_leave_timed(struct readgate *g, int64_t began_ns, int64_t now_ns);
bool readgate_active(const struct readgate *g);
int64_t readgate_last_end_ns(const struct readgate *g);
/* Nanoseconds flushers must still hold back (0: flush). */
int64_t readgate_wait_ns(const struct readgate *g, int64_t now_ns);
