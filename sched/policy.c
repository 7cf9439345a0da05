/*
 * DESIGN: the flusher policy, kept apart from locks, clocks and I/O so each
 * rule can be tested with made-up times (tests/unit/test_policy.c).
 *
 * Room. A write fits while the queue holds less than queue= with it; one file
 * may hold at most FILE_SHARE_PCT of it, and data of failing files counts
 * against the others only up to FAIL_SHARE_PCT. So when a file's data fails
 * for good (a bad sector, a file the medium refuses), other files keep
 * flowing while the medium takes them, and the memory bound stays queue= for
 * one failing file (at most queue= + the rest of it when several fail).
 *
 * Errors. A failed chunk is retried after RETRY_MIN_NS, doubling up to
 * RETRY_MAX_NS; at exit a file that failed DRAIN_GIVEUP_FAILURES times in a
 * row is given up (its data reported, never silently dropped).
 *
 * Reads first. A chunk waits while reads are in flight and for read_grace=
 * after those that went to the medium (the read gate in pacer.c). A chunk
 * somebody waits on (fsync, O_SYNC) waits for reads in flight only. While
 * writers wait, reads hold the flushers back at most GATE_HOLD_MAX_LATENCIES x
 * latency= in a row, so a stream of stats cannot stop writes: reads still see
 * at most one chunk ahead of them.
 *
 * Metadata. The medium's own metadata is flushed every interval while
 * streaming, the interval priced from the last flush's cost (about 1% of the
 * medium's time, 10-30 s), and once the queue has stayed empty for a second.
 */
#include "policy.h"

#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))
#define RETRY_DOUBLINGS_MAX 10

bool policy_room(uint64_t cap, uint64_t queued, uint64_t failing, uint64_t file_bytes,
		 size_t len)
{
	uint64_t fail_limit = cap / 100 * FAIL_SHARE_PCT;

	if (file_bytes && file_bytes + len > cap / 100 * FILE_SHARE_PCT)
		return false;
	if (!queued || queued + len <= cap)
		return true;
	if (failing > fail_limit)
		queued -= failing - fail_limit;
	return queued + len <= cap;
}

int64_t policy_retry_at(unsigned failures, int64_t now_ns)
{
	int64_t backoff = RETRY_MIN_NS << MIN(failures ? failures - 1 : 0, RETRY_DOUBLINGS_MAX);

	return now_ns + MIN(backoff, RETRY_MAX_NS);
}

bool policy_gave_up(int err, unsigned failures)
{
	return err && failures >= DRAIN_GIVEUP_FAILURES;
}

int64_t policy_gate_hold_max_ns(int64_t latency_ns)
{
	return MAX(GATE_HOLD_MAX_LATENCIES * latency_ns, GATE_HOLD_MAX_MIN_NS);
}

int64_t policy_gate_hold(struct gate_hold *h, int64_t gate_wait_ns, bool reads_active,
			 bool urgent, bool writers_waiting, int64_t latency_ns, int64_t now_ns)
{
	int64_t hold = urgent ? (reads_active ? NSEC_PER_MSEC : 0) : gate_wait_ns;
	int64_t max_hold = policy_gate_hold_max_ns(latency_ns);

	if (!hold) {
		h->since_ns = 0;
		return 0;
	}
	if (!h->since_ns)
		h->since_ns = now_ns;
	if (writers_waiting && now_ns - h->since_ns >= max_hold) {
		h->since_ns = 0;
		return 0;
	}
	return MIN(hold, max_hold);
}

void policy_meta_init(struct meta_clock *m)
{
	*m = (struct meta_clock){.interval_ns = SYNCFS_INTERVAL_MIN_NS};
}

void policy_meta_written(struct meta_clock *m, int64_t end_ns)
{
	m->last_write_end_ns = end_ns;
	if (!m->dirty)
		m->interval_start_ns = end_ns;
	m->dirty = true;
}

bool policy_meta_due(const struct meta_clock *m, bool streaming, int64_t left_ns, int64_t now_ns)
{
	int64_t since;

	if (!m->dirty)
		return false;
	if (streaming) {
		since = now_ns - m->interval_start_ns;
		if (left_ns < SYNCFS_NEAR_END_NS && since < SYNCFS_INTERVAL_MAX_NS)
			return false; /* the flush at the end is near: one, not two */
		return since >= m->interval_ns;
	}
	return now_ns - m->last_write_end_ns >= SYNCFS_IDLE_NS;
}

void policy_meta_begin(struct meta_clock *m, int64_t now_ns)
{
	m->dirty = false;
	m->interval_start_ns = now_ns;
}

void policy_meta_priced(struct meta_clock *m, int64_t took_ns, bool streaming)
{
	if (streaming)
		m->interval_ns = MIN(MAX(took_ns * SYNCFS_SHARE_DIV, SYNCFS_INTERVAL_MIN_NS),
				     SYNCFS_INTERVAL_MAX_NS);
}

bool policy_chunk_seeks(bool head_moved, bool continues_last, int64_t last_read_end_ns,
			int64_t last_write_end_ns)
{
	return head_moved || !continues_last || last_read_end_ns > last_write_end_ns;
}
