/*
 * DESIGN: pacing. A flusher writes one chunk and waits for it to reach the
 * medium, so the chunk's duration is a clean bandwidth sample. The estimate
 * follows a slower sample at once (75% new) and a faster one slowly (EWMA, 30%
 * new), and a chunk may at most double the previous one: an early sample can be
 * flattered by a device cache or a throttle's initial burst, and an
 * overestimate costs reads a long wait, an underestimate only a little
 * throughput. The next chunk is sized so it takes about latency= on the medium:
 * a read that arrives behind it waits at most that long. A chunk that follows a
 * read (or anything else that moved the head) pays a seek first: that extra
 * time is learnt apart (seek_ns, from such chunks against the bandwidth of
 * contiguous ones) and taken off its budget, so with the seek it still fits in
 * latency=; such chunks do not feed the bandwidth, or every read would drag it
 * down. When nearly every chunk seeks (files written in turn), seeking is the
 * medium's normal pace: the bandwidth then includes it and seek_ns is dropped.
 * rate= is a token bucket whose burst is one chunk. The read gate holds
 * flushers back while reads are in flight and for read_grace= after the last
 * one; after a metadata op only when it took long enough to have read the
 * medium. All functions take the time as an argument. The pacer's caller
 * (flusher.c) holds the queue's lock; the read gate is lock-free (atomics),
 * since every read, stat and lookup passes it and most of them are cached.
 */
#include "pacer.h"

#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))
#define EWMA_UP_NEW_PCT 30
#define EWMA_DOWN_NEW_PCT 75
#define SEEK_NEW_PCT 50
#define SEEKS_IN_ROW_NORMAL 4 /* this many seeking chunks in a row: seeking is the norm */

void pacer_init(struct pacer *p, uint64_t rate_bps, unsigned latency_ms)
{
	*p = (struct pacer){.rate_bps = rate_bps,
			    .latency_ns = (int64_t)latency_ms * NSEC_PER_MSEC};
}

static uint64_t effective_bw(const struct pacer *p)
{
	if (p->rate_bps && (!p->bw_bps || p->rate_bps < p->bw_bps))
		return p->rate_bps;
	return p->bw_bps;
}

/* How long bytes take to cross at bw (> 0) bytes/s; in 128 bits, as
 * bytes x NSEC_PER_SEC passes 64 beyond 18 GB. */
static int64_t transfer_ns(size_t bytes, uint64_t bw)
{
	return (int64_t)((unsigned __int128)bytes * NSEC_PER_SEC / bw);
}

static bool seek_learnt(const struct pacer *p, bool seeks)
{
	return seeks && p->seeks_in_row < SEEKS_IN_ROW_NORMAL;
}

size_t pacer_chunk_bytes(const struct pacer *p, bool seeks)
{
	uint64_t bw = effective_bw(p);
	int64_t budget_ns = p->latency_ns;
	uint64_t bytes;

	if (!bw)
		return CHUNK_MIN_BYTES;
	if (seek_learnt(p, seeks))
		budget_ns = MAX(budget_ns - p->seek_ns, 0);
	/* 128 bits: 60 s of latency times a fast disk overflows 64. */
	bytes = (uint64_t)MIN((unsigned __int128)bw * (uint64_t)budget_ns / NSEC_PER_SEC,
			      (unsigned __int128)CHUNK_MAX_BYTES);
	if (p->last_chunk && bytes > 2 * (uint64_t)p->last_chunk)
		bytes = 2 * (uint64_t)p->last_chunk;
	if (bytes < CHUNK_MIN_BYTES)
		return CHUNK_MIN_BYTES;
	if (bytes > CHUNK_MAX_BYTES)
		return CHUNK_MAX_BYTES;
	return (size_t)bytes & ~(size_t)4095;
}

int64_t pacer_chunk_ns(const struct pacer *p, size_t bytes)
{
	uint64_t bw = effective_bw(p);

	if (!bw)
		return -1;
	return transfer_ns(bytes, bw) + p->seek_ns;
}

int64_t pacer_delay_ns(const struct pacer *p, int64_t now_ns)
{
	if (!p->rate_bps || p->next_ok_ns <= now_ns)
		return 0;
	return p->next_ok_ns - now_ns;
}

/* A seeking chunk against the bandwidth of contiguous ones: the rest is the seek. */
static void seek_sample(struct pacer *p, size_t bytes, int64_t took)
{
	int64_t extra = MIN(MAX(took - transfer_ns(bytes, p->bw_bps), 0), p->latency_ns);

	p->seek_ns = p->seek_ns ? (p->seek_ns * (100 - SEEK_NEW_PCT) + extra * SEEK_NEW_PCT) / 100
				: extra;
}

unsigned pacer_runs_max(const struct pacer *p)
{
	int64_t n;

	if (!p->run_learnt)
		return RUNS_PROBE;
	n = 1 + (p->run_ns ? p->latency_ns / 2 / p->run_ns : CHUNK_RUNS_MAX);
	if (n < 2 && p->since_runs >= RUNS_REPROBE)
		return 2;
	return (unsigned)MIN(MAX(n, 1), CHUNK_RUNS_MAX);
}

/* A gathered chunk against the bandwidth: the rest, shared by its runs past
 * the first, is what a run costs. */
static void run_sample(struct pacer *p, size_t bytes, int64_t took, unsigned runs)
{
	int64_t transfer = p->bw_bps ? transfer_ns(bytes, p->bw_bps) : 0;
	int64_t extra = MAX(took - transfer, 0) / (int64_t)(runs - 1);

	p->run_ns = p->run_learnt ? (p->run_ns * (100 - SEEK_NEW_PCT) + extra * SEEK_NEW_PCT) / 100
				  : extra;
	p->run_learnt = true;
	/* No contiguous chunk has measured the medium yet: this is the best
	 * estimate there is (status' flush rate and ETA), a low one. */
	if (!p->bw_bps && took > 0 && bytes >= CHUNK_MIN_BYTES / 2)
		p->bw_bps = (uint64_t)bytes * NSEC_PER_SEC / (uint64_t)took;
}

void pacer_done(struct pacer *p, size_t bytes, int64_t start_ns, int64_t end_ns, bool seeks)
{
	pacer_done_runs(p, bytes, start_ns, end_ns, seeks, 1);
}

void pacer_done_runs(struct pacer *p, size_t bytes, int64_t start_ns, int64_t end_ns, bool seeks,
		     unsigned runs)
{
	int64_t took = end_ns - start_ns;
	bool learnt = seek_learnt(p, seeks); /* as pacer_chunk_bytes sized it */

	p->seeks_in_row = seeks ? p->seeks_in_row + 1 : 0;
	p->since_runs = runs > 1 ? 0 : p->since_runs + 1;
	if (runs > 1) {
		if (took > 0)
			run_sample(p, bytes, took, runs);
	} else if (learnt && p->bw_bps) {
		if (took > 0)
			seek_sample(p, bytes, took);
	} else if (took > 0 && bytes >= CHUNK_MIN_BYTES / 2) {
		uint64_t sample = (uint64_t)bytes * NSEC_PER_SEC / (uint64_t)took;
		unsigned pct = sample < p->bw_bps ? EWMA_DOWN_NEW_PCT : EWMA_UP_NEW_PCT;
		p->bw_bps = p->bw_bps ? (p->bw_bps * (100 - pct) + sample * pct) / 100 : sample;
		p->last_chunk = bytes;
	}
	if (p->seeks_in_row >= SEEKS_IN_ROW_NORMAL)
		p->seek_ns = 0;
	if (p->rate_bps) {
		/* Idle time earns no credit beyond one chunk's burst. */
		int64_t base = p->next_ok_ns > start_ns ? p->next_ok_ns : start_ns;
		p->next_ok_ns = base + (int64_t)((uint64_t)bytes * NSEC_PER_SEC / p->rate_bps);
	}
}

void readgate_init(struct readgate *g, unsigned grace_ms)
{
	*g = (struct readgate){.grace_ns = (int64_t)grace_ms * NSEC_PER_MSEC};
}

bool readgate_enter(struct readgate *g)
{
	return __atomic_add_fetch(&g->active, 1, __ATOMIC_SEQ_CST) == 1;
}

/* last_end_ns only moves forward, whoever stores last. */
static void mark_end(struct readgate *g, int64_t now_ns)
{
	int64_t seen = __atomic_load_n(&g->last_end_ns, __ATOMIC_RELAXED);

	while (now_ns > seen && !__atomic_compare_exchange_n(&g->last_end_ns, &seen, now_ns, true,
							     __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
		;
}

bool readgate_leave(struct readgate *g, int64_t now_ns)
{
	mark_end(g, now_ns);
	return __atomic_sub_fetch(&g->active, 1, __ATOMIC_SEQ_CST) == 0;
}

bool readgate_leave_timed(struct readgate *g, int64_t began_ns, int64_t now_ns)
{
	if (now_ns - began_ns >= META_MEDIUM_NS)
		mark_end(g, now_ns);
	return __atomic_sub_fetch(&g->active, 1, __ATOMIC_SEQ_CST) == 0;
}

bool readgate_active(const struct readgate *g)
{
	return __atomic_load_n(&g->active, __ATOMIC_SEQ_CST) != 0;
}

int64_t readgate_last_end_ns(const struct readgate *g)
{
	return __atomic_load_n(&g->last_end_ns, __ATOMIC_SEQ_CST);
}

int64_t readgate_wait_ns(const struct readgate *g, int64_t now_ns)
{
	int64_t until, last;

	if (readgate_active(g))
		return g->grace_ns > 0 ? g->grace_ns : NSEC_PER_MSEC;
	last = readgate_last_end_ns(g);
	if (!last)
		return 0;
	until = last + g->grace_ns;
	return until > now_ns ? until - now_ns : 0;
}
