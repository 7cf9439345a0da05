/* The shared arbiter's policy (sched/arbiter.c), with simulated mounts, chunks and time.
 */
#include <check.h>
#include <errno.h>
#include <glib.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "arbiter.h"

#define KiB (1ull << 10)
#define MiB (1ull << 20)
#define MS NSEC_PER_MSEC
#define SEC NSEC_PER_SEC
#define T0 (1000 * SEC) /* an arbitrary monotonic time */
#define BE SCHED_CLASS_BE
#define IDLE SCHED_CLASS_IDLE

/* A mount's flusher as the arbiter sees it: asks, is granted, writes one chunk. */
struct flow {
	int id;
	uint64_t chunk;	  /* bytes per request */
	int64_t chunk_ns; /* what its chunk takes on the medium */
	bool on;	  /* asks again as soon as its chunk ended */
	bool urgent;

	int64_t asked_at; /* 0: not asking */
	int64_t done_at;  /* its chunk in flight ends; 0: none */
	unsigned grants;
	uint64_t bytes; /* written */
	int64_t min_wait, max_wait, last_grant, max_gap;
};

static struct flow flow(int id, uint64_t chunk, int64_t chunk_ns)
{
	return (struct flow){.id = id,
			     .chunk = chunk,
			     .chunk_ns = chunk_ns,
			     .on = true,
			     .min_wait = INT64_MAX};
}

static void ask(struct arb *a, struct flow *f, int64_t t)
{
	ck_assert_int_eq(arb_request(a, f->id, f->chunk, f->urgent, t), 0);
	if (!f->asked_at)
		f->asked_at = t;
}

static struct flow *flow_of(struct flow *f, unsigned n, int id)
{
	for (unsigned i = 0; i < n; i++)
		if (f[i].id == id)
			return &f[i];
	ck_abort_msg("grant to unknown id %d", id);
	return NULL;
}

static void granted(struct flow *f, int64_t t)
{
	int64_t wait = t - f->asked_at;

	ck_assert_msg(f->asked_at, "grant to %d, which did not ask", f->id);
	ck_assert_msg(!f->done_at, "second grant to %d", f->id);
	f->min_wait = MIN(f->min_wait, wait);
	f->max_wait = MAX(f->max_wait, wait);
	if (f->last_grant)
		f->max_gap = MAX(f->max_gap, t - f->last_grant);
	f->last_grant = t;
	f->grants++;
	f->asked_at = 0;
	f->done_at = t + f->chunk_ns;
}

/* From t to end: chunks end, flows that are on ask again, the arbiter grants. */
static void run(struct arb *a, struct flow *f, unsigned n, int64_t t, int64_t end)
{
	for (unsigned i = 0; i < n; i++)
		if (f[i].on && !f[i].asked_at && !f[i].done_at)
			ask(a, &f[i], t);
	while (t < end) {
		int64_t wake, next;
		int id;

		for (unsigned i = 0; i < n; i++) {
			if (!f[i].done_at || f[i].done_at > t)
				continue;
			ck_assert_int_eq(arb_done(a, f[i].id, f[i].chunk, t), 0);
			f[i].bytes += f[i].chunk;
			f[i].done_at = 0;
			if (f[i].on)
				ask(a, &f[i], t);
		}
		while ((id = arb_next(a, t, &wake)) > 0)
			granted(flow_of(f, n, id), t);
		next = MIN(end, wake);
		for (unsigned i = 0; i < n; i++)
			if (f[i].done_at)
				next = MIN(next, f[i].done_at);
		ck_assert_int_gt(next, t);
		t = next;
	}
}

static struct arb *arb_default(void)
{
	struct arb *a = arb_new(NULL);

	ck_assert_ptr_nonnull(a);
	return a;
}

/* Grants at t: exactly the ids given (0-terminated), in any order, then none. */
static void expect_grants(struct arb *a, int64_t t, const int *ids)
{
	unsigned want = 0, got = 0;
	int id;

	while (ids[want])
		want++;
	while ((id = arb_next(a, t, NULL)) > 0) {
		bool known = false;

		for (unsigned i = 0; i < want; i++)
			known |= ids[i] == id;
		ck_assert_msg(known, "unexpected grant to %d", id);
		got++;
	}
	ck_assert_uint_eq(got, want);
}

static void expect_none(struct arb *a, int64_t t, int64_t wake_want)
{
	int64_t wake;

	ck_assert_int_eq(arb_next(a, t, &wake), 0);
	ck_assert_int_eq(wake, wake_want);
}

static void expect_one(struct arb *a, int64_t t, int id)
{
	int64_t wake;

	ck_assert_int_eq(arb_next(a, t, &wake), id);
	ck_assert_int_eq(wake, t);
}

START_TEST(test_strict_prio)
{
	struct arb *a = arb_default();
	struct flow f[] = {flow(1, MiB, 100 * MS), flow(6, MiB, 120 * MS)};
	struct arb_mount_info mi;
	unsigned grants;
	uint64_t bytes;

	ck_assert_int_eq(arb_register(a, 1, "bus", 1, BE, 100, T0), 0);
	ck_assert_int_eq(arb_register(a, 6, "bus", 6, BE, 100, T0), 0);
	run(a, f, 2, T0, T0 + 60 * SEC);
	grants = f[0].grants + f[1].grants;
	bytes = f[0].bytes + f[1].bytes;
	ck_assert_uint_ge(f[0].grants * 100, 90 * grants);
	ck_assert_uint_ge(f[0].bytes * 100, 90 * bytes);
	/* Prio 6 is served by aging only: after PRIO_AGING_NS, at the end of the
	 * prio 1 chunk then in flight. */
	ck_assert_uint_ge(f[1].grants, 5);
	ck_assert_int_ge(f[1].min_wait, PRIO_AGING_NS);
	ck_assert_int_le(f[1].max_wait, PRIO_AGING_NS + f[0].chunk_ns);
	ck_assert_int_le(f[1].max_gap, PRIO_AGING_NS + f[0].chunk_ns + f[1].chunk_ns);
	ck_assert_int_le(f[0].max_wait, f[1].chunk_ns);
	ck_assert_int_eq(arb_mount_info(a, 6, T0 + 60 * SEC, &mi), 0);
	ck_assert_uint_eq(mi.grants, f[1].grants);
	ck_assert_uint_le(mi.granted_bytes, f[1].grants * MiB);
	ck_assert_uint_eq(mi.granted_bytes, f[1].bytes);
	ck_assert_int_ge(mi.wait_total_ns, (int64_t)f[1].grants * PRIO_AGING_NS);
	arb_free(a);
}
END_TEST

static void weights_case(unsigned wa, uint64_t ca, int64_t da, unsigned wb, uint64_t cb,
			 int64_t db)
{
	struct arb *a = arb_default();
	struct flow f[] = {flow(1, ca, da), flow(2, cb, db)};
	double ratio;

	ck_assert_int_eq(arb_register(a, 1, "bus", 4, BE, wa, T0), 0);
	ck_assert_int_eq(arb_register(a, 2, "bus", 4, BE, wb, T0), 0);
	run(a, f, 2, T0, T0 + 60 * SEC);
	ratio = (double)f[0].bytes / (double)f[1].bytes;
	ck_assert_msg(ratio >= 0.9 * wa / wb && ratio <= 1.1 * wa / wb,
		      "weights %u/%u: bytes %llu/%llu", wa, wb,
		      (unsigned long long)f[0].bytes, (unsigned long long)f[1].bytes);
	arb_free(a);
}

START_TEST(test_weights)
{
	/* Shared by bytes, not by grants: B's chunks are half the size. */
	weights_case(300, MiB, 100 * MS, 100, 512 * KiB, 50 * MS);
	weights_case(300, 256 * KiB, 25 * MS, 100, 256 * KiB, 25 * MS);
	weights_case(100, 4 * MiB, 400 * MS, 100, 64 * KiB, 10 * MS);
	weights_case(1, MiB, 100 * MS, 4, MiB, 100 * MS);
}
END_TEST

START_TEST(test_no_idle_credit)
{
	struct arb *a = arb_default();
	struct flow f[] = {flow(1, MiB, 100 * MS), flow(2, MiB, 100 * MS)};
	uint64_t a0, b0, b_share;

	ck_assert_int_eq(arb_register(a, 1, "bus", 4, BE, 100, T0), 0);
	ck_assert_int_eq(arb_register(a, 2, "bus", 4, BE, 100, T0), 0);
	run(a, f, 2, T0, T0 + 5 * SEC);
	/* B rests 30 s while A goes on alone. */
	f[1].on = false;
	b0 = f[1].grants;
	run(a, f, 2, T0 + 5 * SEC, T0 + 35 * SEC);
	ck_assert_uint_le(f[1].grants, b0 + 1);
	/* Back, B shares from now on: its rest earned it nothing. */
	a0 = f[0].bytes;
	b0 = f[1].bytes;
	f[1].on = true;
	f[1].max_wait = 0;
	run(a, f, 2, T0 + 35 * SEC, T0 + 45 * SEC);
	b_share = (f[1].bytes - b0) * 100 / (f[0].bytes - a0 + f[1].bytes - b0);
	ck_assert_uint_ge(b_share, 45);
	ck_assert_uint_le(b_share, 55);
	/* It waits at most for the rest of A's slice (rule 6). */
	ck_assert_int_le(f[1].max_wait, ARB_SLICE_NS + f[0].chunk_ns);
	arb_free(a);
}
END_TEST

START_TEST(test_idle_starvation_chunk)
{
	struct arb *a = arb_default();
	struct flow f[] = {flow(1, MiB, 100 * MS), flow(2, MiB, 100 * MS)};
	struct flow g[] = {flow(1, MiB, 100 * MS), flow(2, MiB, 100 * MS),
			   flow(3, MiB, 100 * MS)};

	ck_assert_int_eq(arb_register(a, 1, "bus", 4, BE, 100, T0), 0);
	ck_assert_int_eq(arb_register(a, 2, "bus", 0, IDLE, 10000, T0), 0);
	run(a, f, 2, T0, T0 + 30 * SEC);
	/* Whatever its prio and weight, idle gets one chunk every 5 s. */
	ck_assert_uint_ge(f[1].grants, 5);
	ck_assert_uint_le(f[1].grants, 6);
	ck_assert_int_ge(f[1].min_wait, IDLE_STARVE_NS);
	ck_assert_int_le(f[1].max_wait, IDLE_STARVE_NS + f[0].chunk_ns);
	ck_assert_uint_ge(f[0].bytes * 100, 95 * (f[0].bytes + f[1].bytes));
	arb_free(a);

	/* The guarantee is the group's: two idle mounts share it by age. */
	a = arb_default();
	ck_assert_int_eq(arb_register(a, 1, "bus", 4, BE, 100, T0), 0);
	ck_assert_int_eq(arb_register(a, 2, "bus", 4, IDLE, 100, T0), 0);
	ck_assert_int_eq(arb_register(a, 3, "bus", 4, IDLE, 100, T0), 0);
	run(a, g, 3, T0, T0 + 30 * SEC);
	ck_assert_uint_ge(g[1].grants + g[2].grants, 5);
	ck_assert_uint_le(g[1].grants + g[2].grants, 6);
	ck_assert_uint_ge(g[1].grants, 2);
	ck_assert_uint_ge(g[2].grants, 2);
	arb_free(a);
}
END_TEST

START_TEST(test_idle_waits_for_quiet)
{
	struct arb *a = arb_default();
	const int64_t grace = ARB_READ_GRACE_NS;

	ck_assert_int_eq(arb_register(a, 1, "bus", 4, BE, 100, T0), 0);
	ck_assert_int_eq(arb_register(a, 2, "bus", 4, IDLE, 100, T0), 0);
	/* Nothing else ever happened in the group: idle goes at once. */
	ck_assert_int_eq(arb_request(a, 2, MiB, false, T0), 0);
	expect_one(a, T0, 2);
	ck_assert_int_eq(arb_done(a, 2, MiB, T0 + 100 * MS), 0);
	/* Be first. */
	ck_assert_int_eq(arb_request(a, 2, MiB, false, T0 + 100 * MS), 0);
	ck_assert_int_eq(arb_request(a, 1, MiB, false, T0 + 100 * MS), 0);
	expect_one(a, T0 + 100 * MS, 1);
	expect_none(a, T0 + 100 * MS, INT64_MAX);
	ck_assert_int_eq(arb_done(a, 1, MiB, T0 + 200 * MS), 0);
	/* Be paused between two chunks: idle waits IDLE_GRACE_NS for it. */
	expect_none(a, T0 + 200 * MS, T0 + 200 * MS + IDLE_GRACE_NS);
	expect_none(a, T0 + 300 * MS, T0 + 200 * MS + IDLE_GRACE_NS);
	ck_assert_int_eq(arb_request(a, 1, MiB, false, T0 + 300 * MS), 0);
	expect_one(a, T0 + 300 * MS, 1);
	ck_assert_int_eq(arb_done(a, 1, MiB, T0 + 400 * MS), 0);
	expect_none(a, T0 + 600 * MS - 1, T0 + 600 * MS);
	expect_one(a, T0 + 600 * MS, 2);
	ck_assert_int_eq(arb_done(a, 2, MiB, T0 + 700 * MS), 0);

	/* A read: idle waits IDLE_GRACE_NS after it, be only read_grace. */
	ck_assert_int_eq(arb_request(a, 2, MiB, false, T0 + 700 * MS), 0);
	ck_assert_int_eq(arb_read_begin(a, 1, T0 + 700 * MS), 0);
	expect_none(a, T0 + 700 * MS, INT64_MAX);
	ck_assert_int_eq(arb_read_end(a, 1, T0 + 750 * MS), 0);
	expect_none(a, T0 + 750 * MS, T0 + 750 * MS + grace);
	expect_none(a, T0 + 750 * MS + grace, T0 + 750 * MS + IDLE_GRACE_NS);
	expect_one(a, T0 + 750 * MS + IDLE_GRACE_NS, 2);
	ck_assert_int_eq(arb_done(a, 2, MiB, T0 + 1050 * MS), 0);
	ck_assert_int_eq(arb_read_begin(a, 2, T0 + 1100 * MS), 0);
	ck_assert_int_eq(arb_request(a, 1, MiB, false, T0 + 1100 * MS), 0);
	ck_assert_int_eq(arb_request(a, 2, MiB, false, T0 + 1100 * MS), 0);
	ck_assert_int_eq(arb_read_end(a, 2, T0 + 1150 * MS), 0);
	expect_none(a, T0 + 1150 * MS, T0 + 1150 * MS + grace);
	expect_one(a, T0 + 1150 * MS + grace, 1);
	ck_assert_int_eq(arb_done(a, 1, MiB, T0 + 1270 * MS), 0);
	/* Idle after max(be quiet, read end) + IDLE_GRACE_NS. */
	expect_none(a, T0 + 1270 * MS, T0 + 1270 * MS + IDLE_GRACE_NS);
	/* A paused be mount does not want to flush. */
	ck_assert_int_eq(arb_pause(a, 1, true, T0 + 1280 * MS), 0);
	ck_assert_int_eq(arb_request(a, 1, MiB, false, T0 + 1280 * MS), 0);
	expect_none(a, T0 + 1290 * MS, T0 + 1270 * MS + IDLE_GRACE_NS);
	expect_one(a, T0 + 1270 * MS + IDLE_GRACE_NS, 2);
	arb_free(a);
}
END_TEST

START_TEST(test_idle_wake_for_starvation)
{
	struct arb_params p;
	struct arb *a;

	/* A long idle grace: the starvation deadline comes first and wakes. */
	arb_params_default(&p);
	p.idle_grace_ns = 60 * SEC;
	a = arb_new(&p);
	ck_assert_ptr_nonnull(a);
	ck_assert_int_eq(arb_register(a, 1, "bus", 4, BE, 100, T0), 0);
	ck_assert_int_eq(arb_register(a, 2, "bus", 4, IDLE, 100, T0), 0);
	ck_assert_int_eq(arb_request(a, 1, MiB, false, T0), 0);
	expect_one(a, T0, 1);
	ck_assert_int_eq(arb_request(a, 2, MiB, false, T0 + 10 * MS), 0);
	ck_assert_int_eq(arb_done(a, 1, MiB, T0 + 100 * MS), 0);
	expect_none(a, T0 + 100 * MS, T0 + 10 * MS + IDLE_STARVE_NS);
	expect_one(a, T0 + 10 * MS + IDLE_STARVE_NS, 2);
	arb_free(a);
}
END_TEST

START_TEST(test_read_hold_group)
{
	struct arb *a = arb_default();
	const int64_t grace = ARB_READ_GRACE_NS;
	struct arb_group_info gi;

	ck_assert_int_eq(arb_register(a, 1, "g1", 4, BE, 100, T0), 0);
	ck_assert_int_eq(arb_register(a, 2, "g1", 4, BE, 100, T0), 0);
	ck_assert_int_eq(arb_register(a, 3, "g2", 4, BE, 100, T0), 0);
	ck_assert_int_eq(arb_request(a, 1, MiB, false, T0), 0);
	ck_assert_int_eq(arb_request(a, 3, MiB, false, T0), 0);
	/* A read on mount 2 holds mount 1 (same group), not mount 3. */
	ck_assert_int_eq(arb_read_begin(a, 2, T0), 0);
	expect_grants(a, T0, (const int[]){3, 0});
	expect_none(a, T0, INT64_MAX);
	ck_assert_int_eq(arb_group_info(a, "g1", &gi), 0);
	ck_assert_int_eq(gi.holder, 0);
	ck_assert_uint_eq(gi.reads, 1);
	ck_assert_int_eq(arb_group_info(a, "g2", &gi), 0);
	ck_assert_int_eq(gi.holder, 3);
	/* Overlapping reads on both mounts: held until the last ends + grace. */
	ck_assert_int_eq(arb_read_begin(a, 1, T0 + 10 * MS), 0);
	ck_assert_int_eq(arb_read_end(a, 2, T0 + 50 * MS), 0);
	expect_none(a, T0 + 60 * MS, INT64_MAX);
	ck_assert_int_eq(arb_done(a, 3, MiB, T0 + 70 * MS), 0);
	ck_assert_int_eq(arb_request(a, 3, MiB, false, T0 + 70 * MS), 0);
	expect_one(a, T0 + 70 * MS, 3);
	ck_assert_int_eq(arb_read_end(a, 1, T0 + 80 * MS), 0);
	expect_none(a, T0 + 80 * MS, T0 + 80 * MS + grace);
	expect_none(a, T0 + 80 * MS + grace - 1, T0 + 80 * MS + grace);
	expect_one(a, T0 + 80 * MS + grace, 1);
	/* A read during a chunk: the chunk goes on, the next waits. */
	ck_assert_int_eq(arb_read_begin(a, 2, T0 + 110 * MS), 0);
	ck_assert_int_eq(arb_done(a, 1, MiB, T0 + 150 * MS), 0);
	ck_assert_int_eq(arb_request(a, 1, MiB, false, T0 + 150 * MS), 0);
	ck_assert_int_eq(arb_request(a, 2, MiB, false, T0 + 150 * MS), 0);
	expect_none(a, T0 + 150 * MS, INT64_MAX);
	ck_assert_int_eq(arb_read_end(a, 2, T0 + 200 * MS), 0);
	/* Mount 2 had no chunk yet, but mount 1's slice (rule 6), begun at
	 * 80 ms + grace, runs on: reads hold a slice back, they do not end it. */
	expect_grants(a, T0 + 200 * MS + grace, (const int[]){1, 0});
	ck_assert_int_eq(arb_done(a, 1, MiB, T0 + 300 * MS + grace), 0);
	ck_assert_int_eq(arb_request(a, 1, MiB, false, T0 + 300 * MS + grace), 0);
	/* Its slice over, fair share: mount 2. */
	expect_grants(a, T0 + 80 * MS + grace + ARB_SLICE_NS, (const int[]){2, 0});
	arb_free(a);
}
END_TEST

START_TEST(test_groups_independent)
{
	struct arb *a = arb_default();

	ck_assert_int_eq(arb_register(a, 1, "g1", 4, BE, 100, T0), 0);
	ck_assert_int_eq(arb_register(a, 2, "g1", 4, BE, 100, T0), 0);
	ck_assert_int_eq(arb_register(a, 3, "g2", 7, IDLE, 1, T0), 0);
	ck_assert_int_eq(arb_register(a, 4, "g3", 0, BE, 100, T0), 0);
	for (int id = 1; id <= 4; id++)
		ck_assert_int_eq(arb_request(a, id, MiB, false, T0), 0);
	/* One per group, at once. */
	expect_grants(a, T0, (const int[]){1, 3, 4, 0});
	ck_assert_int_eq(arb_done(a, 1, MiB, T0 + 100 * MS), 0);
	expect_grants(a, T0 + 100 * MS, (const int[]){2, 0});
	arb_free(a);
}
END_TEST

START_TEST(test_register_unregister)
{
	struct arb *a = arb_default();
	struct arb_mount_info mi;
	struct arb_group_info gi;

	ck_assert_int_eq(arb_unregister(a, 1, T0), -ENOENT);
	ck_assert_int_eq(arb_register(a, 1, "g", 4, BE, 100, T0), 0);
	ck_assert_int_eq(arb_register(a, 1, "g", 4, BE, 100, T0), -EEXIST);
	ck_assert_int_eq(arb_register(a, 1, "other", 2, IDLE, 5, T0), -EEXIST);
	ck_assert_int_eq(arb_group_info(a, "other", &gi), -ENOENT);
	ck_assert_int_eq(arb_register(a, 2, "g", 4, BE, 100, T0), 0);
	ck_assert_int_eq(arb_group_info(a, "g", &gi), 0);
	ck_assert_uint_eq(gi.mounts, 2);

	/* Asks, then is gone before its grant: never granted. */
	ck_assert_int_eq(arb_request(a, 1, MiB, false, T0), 0);
	ck_assert_int_eq(arb_unregister(a, 1, T0 + MS), 0);
	expect_none(a, T0 + MS, INT64_MAX);
	/* Everything on a gone id: -ENOENT. */
	ck_assert_int_eq(arb_request(a, 1, MiB, false, T0 + MS), -ENOENT);
	ck_assert_int_eq(arb_done(a, 1, MiB, T0 + MS), -ENOENT);
	ck_assert_int_eq(arb_read_begin(a, 1, T0 + MS), -ENOENT);
	ck_assert_int_eq(arb_read_end(a, 1, T0 + MS), -ENOENT);
	ck_assert_int_eq(arb_set(a, 1, 4, BE, 100, T0 + MS), -ENOENT);
	ck_assert_int_eq(arb_pause(a, 1, true, T0 + MS), -ENOENT);
	ck_assert_int_eq(arb_mount_info(a, 1, T0 + MS, &mi), -ENOENT);
	ck_assert_int_eq(arb_unregister(a, 1, T0 + MS), -ENOENT);

	/* Back, afresh, in another group. */
	ck_assert_int_eq(arb_register(a, 1, "h", 4, BE, 100, T0 + 2 * MS), 0);
	ck_assert_int_eq(arb_mount_info(a, 1, T0 + 2 * MS, &mi), 0);
	ck_assert_str_eq(mi.group, "h");
	ck_assert(!mi.requesting && !mi.holds_grant);
	ck_assert_uint_eq(mi.grants, 0);

	/* Gone with reads in flight: they end with it, grace follows. */
	ck_assert_int_eq(arb_register(a, 3, "g", 4, BE, 100, T0 + 2 * MS), 0);
	ck_assert_int_eq(arb_read_begin(a, 3, T0 + 2 * MS), 0);
	ck_assert_int_eq(arb_read_begin(a, 3, T0 + 2 * MS), 0);
	ck_assert_int_eq(arb_request(a, 2, MiB, false, T0 + 3 * MS), 0);
	expect_none(a, T0 + 3 * MS, INT64_MAX);
	ck_assert_int_eq(arb_unregister(a, 3, T0 + 4 * MS), 0);
	ck_assert_int_eq(arb_group_info(a, "g", &gi), 0);
	ck_assert_uint_eq(gi.reads, 0);
	expect_none(a, T0 + 4 * MS, T0 + 4 * MS + ARB_READ_GRACE_NS);
	expect_one(a, T0 + 4 * MS + ARB_READ_GRACE_NS, 2);

	/* The last mount of a group takes the group with it. */
	ck_assert_int_eq(arb_unregister(a, 2, T0 + 30 * MS), 0);
	ck_assert_int_eq(arb_group_info(a, "g", &gi), -ENOENT);
	ck_assert_int_eq(arb_register(a, 2, "g", 4, BE, 100, T0 + 31 * MS), 0);
	ck_assert_int_eq(arb_request(a, 2, MiB, false, T0 + 31 * MS), 0);
	expect_one(a, T0 + 31 * MS, 2); /* no read grace left from the old group */
	arb_free(a);

	/* Freed with mounts, requests, grants and reads still there. */
	a = arb_default();
	ck_assert_int_eq(arb_register(a, 1, "g", 4, BE, 100, T0), 0);
	ck_assert_int_eq(arb_register(a, 2, "g", 4, BE, 100, T0), 0);
	ck_assert_int_eq(arb_request(a, 1, MiB, false, T0), 0);
	ck_assert_int_eq(arb_request(a, 2, MiB, false, T0), 0);
	expect_one(a, T0, 1);
	ck_assert_int_eq(arb_read_begin(a, 2, T0), 0);
	arb_free(a);
	arb_free(NULL);
}
END_TEST

START_TEST(test_unregister_holder)
{
	struct arb *a = arb_default();
	struct arb_group_info gi;

	ck_assert_int_eq(arb_register(a, 1, "g", 4, BE, 100, T0), 0);
	ck_assert_int_eq(arb_register(a, 2, "g", 4, BE, 100, T0), 0);
	ck_assert_int_eq(arb_request(a, 1, MiB, false, T0), 0);
	ck_assert_int_eq(arb_request(a, 2, MiB, false, T0), 0);
	expect_one(a, T0, 1);
	expect_none(a, T0, INT64_MAX);
	/* A dead client's grant goes with it. */
	ck_assert_int_eq(arb_unregister(a, 1, T0 + 10 * MS), 0);
	expect_one(a, T0 + 10 * MS, 2);
	ck_assert_int_eq(arb_group_info(a, "g", &gi), 0);
	ck_assert_int_eq(gi.holder, 2);
	ck_assert_uint_eq(gi.mounts, 1);
	ck_assert_int_eq(arb_done(a, 1, MiB, T0 + 100 * MS), -ENOENT);
	ck_assert_int_eq(arb_group_info(a, "g", &gi), 0);
	ck_assert_int_eq(gi.holder, 2);
	/* It asked again during its chunk, and is gone before done. */
	ck_assert_int_eq(arb_request(a, 2, MiB, false, T0 + 20 * MS), 0);
	ck_assert_int_eq(arb_register(a, 3, "g", 4, BE, 100, T0 + 20 * MS), 0);
	ck_assert_int_eq(arb_request(a, 3, MiB, false, T0 + 20 * MS), 0);
	ck_assert_int_eq(arb_unregister(a, 2, T0 + 30 * MS), 0);
	expect_one(a, T0 + 30 * MS, 3);
	expect_none(a, T0 + 30 * MS, INT64_MAX);
	arb_free(a);
}
END_TEST

START_TEST(test_pause)
{
	struct arb *a = arb_default();
	struct flow f[] = {flow(1, MiB, 100 * MS), flow(7, MiB, 100 * MS)};
	struct arb_mount_info mi;

	ck_assert_int_eq(arb_register(a, 1, "g", 4, BE, 100, T0), 0);
	ck_assert_int_eq(arb_register(a, 2, "g", 4, BE, 100, T0), 0);
	ck_assert_int_eq(arb_pause(a, 1, true, T0), 0);
	ck_assert_int_eq(arb_pause(a, 1, true, T0), 0);
	ck_assert_int_eq(arb_request(a, 1, MiB, false, T0), 0);
	ck_assert_int_eq(arb_request(a, 2, MiB, false, T0), 0);
	expect_one(a, T0, 2);
	ck_assert_int_eq(arb_done(a, 2, MiB, T0 + 100 * MS), 0);
	expect_none(a, T0 + 100 * MS, INT64_MAX);
	ck_assert_int_eq(arb_mount_info(a, 1, T0 + 100 * MS, &mi), 0);
	ck_assert(mi.paused && mi.requesting && !mi.holds_grant);
	ck_assert_int_eq(arb_pause(a, 1, false, T0 + 200 * MS), 0);
	expect_one(a, T0 + 200 * MS, 1);
	/* Paused while its chunk is in flight: the chunk ends as usual. */
	ck_assert_int_eq(arb_pause(a, 1, true, T0 + 250 * MS), 0);
	ck_assert_int_eq(arb_request(a, 1, MiB, false, T0 + 250 * MS), 0);
	ck_assert_int_eq(arb_done(a, 1, MiB, T0 + 300 * MS), 0);
	expect_none(a, T0 + 300 * MS, INT64_MAX);
	ck_assert_int_eq(arb_unregister(a, 1, T0 + 300 * MS), 0);
	ck_assert_int_eq(arb_unregister(a, 2, T0 + 300 * MS), 0);

	/* Paused time does not age a request: prio 7 paused 20 s beside a busy
	 * prio 0 still waits the full PRIO_AGING_NS once resumed. */
	ck_assert_int_eq(arb_register(a, 1, "g", 0, BE, 100, T0), 0);
	ck_assert_int_eq(arb_register(a, 7, "g", 7, BE, 100, T0), 0);
	f[1].on = false;
	ask(a, &f[1], T0);
	ck_assert_int_eq(arb_pause(a, 7, true, T0), 0);
	run(a, f, 2, T0, T0 + 20 * SEC);
	ck_assert_uint_eq(f[1].grants, 0);
	ck_assert_int_eq(arb_pause(a, 7, false, T0 + 20 * SEC), 0);
	run(a, f, 2, T0 + 20 * SEC, T0 + 30 * SEC - 1);
	ck_assert_uint_eq(f[1].grants, 0);
	run(a, f, 2, T0 + 30 * SEC - 1, T0 + 30 * SEC + 100 * MS + 1);
	ck_assert_uint_eq(f[1].grants, 1);
	arb_free(a);
}
END_TEST

START_TEST(test_urgent_aging)
{
	struct arb *a = arb_default();
	struct flow f[] = {flow(1, MiB, 100 * MS), flow(2, MiB, 100 * MS),
			   flow(3, MiB, 100 * MS)};

	ck_assert_int_eq(arb_register(a, 1, "g", 0, BE, 100, T0), 0);
	ck_assert_int_eq(arb_register(a, 2, "g", 7, BE, 100, T0), 0);
	ck_assert_int_eq(arb_register(a, 3, "g", 7, BE, 100, T0), 0);
	f[1].on = f[2].on = false;
	f[1].urgent = true;
	run(a, f, 3, T0, T0 + 50 * MS);
	ask(a, &f[1], T0 + 50 * MS); /* an fsync waits on it */
	ask(a, &f[2], T0 + 50 * MS); /* nobody does */
	run(a, f, 3, T0 + 50 * MS, T0 + 5 * SEC);
	ck_assert_uint_eq(f[1].grants, 1);
	ck_assert_int_ge(f[1].max_wait, URGENT_AGING_NS);
	ck_assert_int_le(f[1].max_wait, URGENT_AGING_NS + f[0].chunk_ns);
	ck_assert_uint_eq(f[2].grants, 0);

	/* A request made urgent later keeps its waiting time: at 3 s it is
	 * overdue by 2 s and takes the next grant. */
	f[1].urgent = false;
	ask(a, &f[1], T0 + 5 * SEC);
	run(a, f, 3, T0 + 5 * SEC, T0 + 8 * SEC);
	ck_assert_uint_eq(f[1].grants, 1);
	f[1].urgent = true;
	ask(a, &f[1], T0 + 8 * SEC);
	run(a, f, 3, T0 + 8 * SEC, T0 + 8 * SEC + f[0].chunk_ns + 1);
	ck_assert_uint_eq(f[1].grants, 2);
	/* Meanwhile the plain one aged normally. */
	run(a, f, 3, T0 + 8 * SEC + f[0].chunk_ns + 1, T0 + 11 * SEC);
	ck_assert_uint_eq(f[2].grants, 1);
	ck_assert_int_ge(f[2].max_wait, PRIO_AGING_NS);
	arb_free(a);
}
END_TEST

START_TEST(test_idle_urgent_counts_as_be)
{
	struct arb *a = arb_default();
	struct flow f[] = {flow(1, MiB, 100 * MS), flow(2, MiB, 100 * MS),
			   flow(3, MiB, 100 * MS)};

	ck_assert_int_eq(arb_register(a, 1, "g", 4, BE, 100, T0), 0);
	ck_assert_int_eq(arb_register(a, 2, "g", 2, IDLE, 100, T0), 0);
	ck_assert_int_eq(arb_register(a, 3, "g", 6, IDLE, 100, T0), 0);
	f[1].on = f[2].on = false;
	f[1].urgent = f[2].urgent = true;
	run(a, f, 3, T0, T0 + 1 * SEC);
	/* Urgent idle at prio 2 is be at prio 2: ahead of the be prio 4. */
	ask(a, &f[1], T0 + 1 * SEC);
	run(a, f, 3, T0 + 1 * SEC, T0 + 2 * SEC);
	ck_assert_uint_eq(f[1].grants, 1);
	ck_assert_int_le(f[1].max_wait, f[0].chunk_ns);
	/* Urgent idle at prio 6 ages as urgent: 1 s, not 5 s. */
	ask(a, &f[2], T0 + 2 * SEC);
	run(a, f, 3, T0 + 2 * SEC, T0 + 4 * SEC);
	ck_assert_uint_eq(f[2].grants, 1);
	ck_assert_int_ge(f[2].max_wait, URGENT_AGING_NS);
	ck_assert_int_le(f[2].max_wait, URGENT_AGING_NS + f[0].chunk_ns);
	arb_free(a);

	/* After a read, an urgent idle request waits read_grace only. */
	a = arb_default();
	ck_assert_int_eq(arb_register(a, 1, "g", 4, BE, 100, T0), 0);
	ck_assert_int_eq(arb_register(a, 2, "g", 4, IDLE, 100, T0), 0);
	ck_assert_int_eq(arb_read_begin(a, 1, T0), 0);
	ck_assert_int_eq(arb_request(a, 2, MiB, true, T0), 0);
	ck_assert_int_eq(arb_read_end(a, 1, T0 + 10 * MS), 0);
	expect_none(a, T0 + 10 * MS, T0 + 10 * MS + ARB_READ_GRACE_NS);
	expect_one(a, T0 + 10 * MS + ARB_READ_GRACE_NS, 2);
	arb_free(a);
}
END_TEST

START_TEST(test_set)
{
	struct arb *a = arb_default();
	struct flow f[] = {flow(1, MiB, 100 * MS), flow(2, MiB, 100 * MS)};
	struct arb_mount_info mi;
	uint64_t a0;

	ck_assert_int_eq(arb_register(a, 1, "g", 4, BE, 100, T0), 0);
	ck_assert_int_eq(arb_register(a, 2, "g", 5, BE, 100, T0), 0);
	run(a, f, 2, T0, T0 + 5 * SEC);
	ck_assert_uint_eq(f[1].grants, 0);
	/* Raised to mount 1's prio with 3x its weight. */
	ck_assert_int_eq(arb_set(a, 2, 4, BE, 300, T0 + 5 * SEC), 0);
	ck_assert_int_eq(arb_mount_info(a, 2, T0 + 5 * SEC, &mi), 0);
	ck_assert_uint_eq(mi.prio, 4);
	ck_assert_uint_eq(mi.weight, 300);
	a0 = f[0].bytes;
	run(a, f, 2, T0 + 5 * SEC, T0 + 65 * SEC);
	ck_assert_uint_ge(f[1].bytes * 10, (f[0].bytes - a0) * 27);
	ck_assert_uint_le(f[1].bytes * 10, (f[0].bytes - a0) * 33);
	/* Now idle: mount 1 never rests, so it gets the starvation chunks only. */
	ck_assert_int_eq(arb_set(a, 2, 4, IDLE, 300, T0 + 65 * SEC), 0);
	f[1].grants = 0;
	run(a, f, 2, T0 + 65 * SEC, T0 + 85 * SEC);
	ck_assert_uint_ge(f[1].grants, 3);
	ck_assert_uint_le(f[1].grants, 5);
	arb_free(a);
}
END_TEST

START_TEST(test_bad_args)
{
	struct arb_params p;
	struct arb *a;
	struct arb_mount_info mi;
	struct arb_group_info gi;
	char name[SCHED_GROUP_NAME_MAX + 2];

	arb_params_default(&p);
	p.prio_aging_ns = -1;
	ck_assert_ptr_null(arb_new(&p));
	arb_params_default(&p);
	p.read_grace_ns = -1;
	ck_assert_ptr_null(arb_new(&p));
	arb_params_default(&p);
	p.idle_starve_ns = 0; /* zero is allowed */
	a = arb_new(&p);
	ck_assert_ptr_nonnull(a);
	arb_free(a);

	a = arb_default();
	ck_assert_int_eq(arb_register(a, 0, "g", 4, BE, 100, T0), -EINVAL);
	ck_assert_int_eq(arb_register(a, -3, "g", 4, BE, 100, T0), -EINVAL);
	ck_assert_int_eq(arb_register(a, 1, NULL, 4, BE, 100, T0), -EINVAL);
	ck_assert_int_eq(arb_register(a, 1, "", 4, BE, 100, T0), -EINVAL);
	memset(name, 'x', sizeof(name) - 1);
	name[sizeof(name) - 1] = '\0';
	ck_assert_int_eq(arb_register(a, 1, name, 4, BE, 100, T0), -EINVAL);
	name[sizeof(name) - 2] = '\0';
	ck_assert_int_eq(arb_register(a, 1, name, 4, BE, 100, T0), 0);
	ck_assert_int_eq(arb_register(a, 2, "g", SCHED_PRIO_MAX + 1, BE, 100, T0),
			 -EINVAL);
	ck_assert_int_eq(arb_register(a, 2, "g", 4, (enum sched_class)2, 100, T0),
			 -EINVAL);
	ck_assert_int_eq(arb_register(a, 2, "g", 4, BE, 0, T0), -EINVAL);
	ck_assert_int_eq(arb_register(a, 2, "g", 4, BE, SCHED_WEIGHT_MAX + 1, T0),
			 -EINVAL);
	ck_assert_int_eq(arb_group_info(a, "g", &gi), -ENOENT); /* nothing was created */
	ck_assert_int_eq(
	    arb_register(a, 2, "g", SCHED_PRIO_MAX, IDLE, SCHED_WEIGHT_MAX, T0), 0);
	ck_assert_int_eq(arb_register(a, 3, "g", 0, BE, 1, T0), 0);

	ck_assert_int_eq(arb_set(a, 2, SCHED_PRIO_MAX + 1, BE, 100, T0), -EINVAL);
	ck_assert_int_eq(arb_set(a, 2, 4, (enum sched_class)7, 100, T0), -EINVAL);
	ck_assert_int_eq(arb_set(a, 2, 4, BE, 0, T0), -EINVAL);
	ck_assert_int_eq(arb_mount_info(a, 2, T0, &mi), 0);
	ck_assert_uint_eq(mi.prio, SCHED_PRIO_MAX);
	ck_assert_int_eq(mi.cls, IDLE);
	ck_assert_uint_eq(mi.weight, SCHED_WEIGHT_MAX);

	ck_assert_int_eq(arb_request(a, 2, 0, false, T0), -EINVAL);
	ck_assert_int_eq(arb_mount_info(a, 2, T0, &mi), 0);
	ck_assert(!mi.requesting);
	ck_assert_int_eq(arb_done(a, 2, MiB, T0), -EINVAL); /* holds no grant */
	ck_assert_int_eq(arb_read_end(a, 2, T0), -EINVAL);  /* no read began */
	ck_assert_int_eq(arb_read_begin(a, 3, T0), 0);
	ck_assert_int_eq(arb_read_end(a, 2, T0), -EINVAL); /* the group's read is 3's */
	ck_assert_int_eq(arb_read_end(a, 3, T0), 0);
	ck_assert_int_eq(arb_read_end(a, 3, T0), -EINVAL);

	/* Unknown ids, including ones never valid. */
	ck_assert_int_eq(arb_unregister(a, 9, T0), -ENOENT);
	ck_assert_int_eq(arb_unregister(a, 0, T0), -ENOENT);
	ck_assert_int_eq(arb_set(a, 9, 4, BE, 100, T0), -ENOENT);
	ck_assert_int_eq(arb_pause(a, -1, true, T0), -ENOENT);
	ck_assert_int_eq(arb_request(a, 9, MiB, false, T0), -ENOENT);
	ck_assert_int_eq(arb_done(a, 9, MiB, T0), -ENOENT);
	ck_assert_int_eq(arb_read_begin(a, 9, T0), -ENOENT);
	ck_assert_int_eq(arb_read_end(a, 9, T0), -ENOENT);
	ck_assert_int_eq(arb_mount_info(a, 9, T0, &mi), -ENOENT);
	ck_assert_int_eq(arb_group_info(a, "nope", &gi), -ENOENT);
	ck_assert_int_eq(arb_group_info(a, NULL, &gi), -ENOENT);
	ck_assert_int_eq(arb_next(a, T0, NULL), 0);
	arb_free(a);
}
END_TEST

/*
 * Random operations against a model of what must hold: one grant per group,
 * none to a paused, absent or not asking mount, none while the group's reads
 * hold it, and every unpaused request granted within its aging bound plus
 * one chunk per mount of the group plus the time reads held the group.
 */
/* Check's own asserts record every pass; these cost nothing unless they fail,
 * which matters over a million checks. */
#define CHECK_MSG(c, ...)                                                                \
	do {                                                                             \
		if (!(c))                                                                \
			ck_abort_msg(__VA_ARGS__);                                       \
	} while (0)
#define CHECK(c) CHECK_MSG(c, "%s:%d: %s", __FILE__, __LINE__, #c)
#define CHECK_OP(x, op, y)                                                               \
	CHECK_MSG((x)op(y), "%s:%d: %s %s %s: %lld, %lld", __FILE__, __LINE__, #x, #op,  \
		  #y, (long long)(x), (long long)(y))
#define CHECK_EQ(x, y) CHECK_OP(x, ==, y)
#define CHECK_LE(x, y) CHECK_OP(x, <=, y)
#define CHECK_GE(x, y) CHECK_OP(x, >=, y)
#define CHECK_GT(x, y) CHECK_OP(x, >, y)

#define R_IDS 8
#define R_GROUPS 3
#define R_READS 4
#define R_CHUNK_MAX_NS (200 * MS)
#define R_SPAN_NS (20 * 60 * SEC)

struct rmount {
	bool reg;
	int group;
	bool paused;
	int64_t paused_at;
	bool asking;
	int64_t age_at;	 /* the arbiter's aging clock, paused time left out */
	int64_t held_ns; /* reads held the group during this request's wait */
	bool granted;
	int64_t done_at;
	uint64_t bytes;
	unsigned nreads;
	int64_t read_end[R_READS];
};

struct rgroup {
	int holder;
	unsigned reads;
	int64_t read_end; /* 0: never */
};

struct rsim {
	struct arb *a;
	GRand *r;
	int64_t t;
	struct rmount m[R_IDS + 1]; /* by id; 0 unused */
	struct rgroup g[R_GROUPS];
	unsigned grants;
	int ngroups;	   /* mounts register in the first ngroups */
	int read_permille; /* of random operations, reads */
};

static const char *rgroup_name(int g)
{
	static const char *const names[R_GROUPS] = {"g0", "g1", "g2"};

	return names[g];
}

static int rand_id(struct rsim *s, bool registered)
{
	for (int tries = 0; tries < 4 * R_IDS; tries++) {
		int id = g_rand_int_range(s->r, 1, R_IDS + 1);

		if (s->m[id].reg == registered)
			return id;
	}
	return 0;
}

static int64_t rand_ns(struct rsim *s, int64_t lo, int64_t hi)
{
	return lo + (int64_t)(g_rand_double(s->r) * (double)(hi - lo));
}

static void r_read_end(struct rsim *s, int id, unsigned i)
{
	struct rmount *m = &s->m[id];
	struct rgroup *g = &s->g[m->group];

	CHECK_EQ(arb_read_end(s->a, id, s->t), 0);
	m->read_end[i] = m->read_end[--m->nreads];
	if (!--g->reads)
		g->read_end = s->t;
}

static void r_ask(struct rsim *s, int id)
{
	struct rmount *m = &s->m[id];
	uint64_t bytes = (uint64_t)g_rand_int_range(s->r, 1, 1024) * 4096;

	CHECK_EQ(arb_request(s->a, id, bytes, g_rand_int_range(s->r, 0, 100) < 15, s->t),
		 0);
	if (!m->asking) {
		m->asking = true;
		m->age_at = s->t;
		m->held_ns = 0;
	}
	m->bytes = bytes;
}

static void r_register(struct rsim *s, int id)
{
	struct rmount *m = &s->m[id];
	int g = g_rand_int_range(s->r, 0, s->ngroups);
	enum sched_class cls = g_rand_int_range(s->r, 0, 100) < 25 ? IDLE : BE;

	CHECK_EQ(arb_register(s->a, id, rgroup_name(g), g_rand_int_range(s->r, 0, 8), cls,
			      g_rand_int_range(s->r, 1, 1000), s->t),
		 0);
	*m = (struct rmount){.reg = true, .group = g};
}

static void r_unregister(struct rsim *s, int id)
{
	struct rmount *m = &s->m[id];
	struct rgroup *g = &s->g[m->group];

	CHECK_EQ(arb_unregister(s->a, id, s->t), 0);
	if (m->granted)
		g->holder = 0;
	if (m->nreads) {
		g->reads -= m->nreads;
		if (!g->reads)
			g->read_end = s->t;
	}
	*m = (struct rmount){0};
	/* A dead client's late calls. */
	CHECK_EQ(arb_done(s->a, id, 4096, s->t), -ENOENT);
	CHECK_EQ(arb_read_end(s->a, id, s->t), -ENOENT);
}

static void r_pause(struct rsim *s, int id)
{
	struct rmount *m = &s->m[id];

	m->paused = !m->paused;
	CHECK_EQ(arb_pause(s->a, id, m->paused, s->t), 0);
	if (m->paused)
		m->paused_at = s->t;
	else if (m->asking)
		m->age_at += s->t - MAX(m->age_at, m->paused_at);
}

static void r_random_op(struct rsim *s)
{
	int op = g_rand_int_range(s->r, 0, 1000), id;

	if (op < 20) {
		if ((id = rand_id(s, false)))
			r_register(s, id);
	} else if (op < 23) {
		if ((id = rand_id(s, true)))
			r_unregister(s, id);
	} else if (op < 28) {
		if ((id = rand_id(s, true)))
			CHECK_EQ(arb_set(s->a, id, g_rand_int_range(s->r, 0, 8),
					 g_rand_int_range(s->r, 0, 100) < 25 ? IDLE : BE,
					 g_rand_int_range(s->r, 1, 1000), s->t),
				 0);
	} else if (op < 38) {
		if ((id = rand_id(s, true)))
			r_pause(s, id);
	} else if (op < 38 + s->read_permille) {
		id = rand_id(s, true);
		if (id && s->m[id].nreads < R_READS) {
			struct rmount *m = &s->m[id];

			CHECK_EQ(arb_read_begin(s->a, id, s->t), 0);
			m->read_end[m->nreads++] = s->t + rand_ns(s, MS, 100 * MS);
			s->g[m->group].reads++;
		}
	} else if (op < 700) {
		if ((id = rand_id(s, true)))
			r_ask(s, id);
	}
}

/* Chunks and reads that end now. */
static void r_events(struct rsim *s)
{
	for (int id = 1; id <= R_IDS; id++) {
		struct rmount *m = &s->m[id];

		if (!m->reg)
			continue;
		if (m->granted && m->done_at <= s->t) {
			uint64_t wrote = g_rand_int_range(s->r, 0, 10) ? m->bytes : 0;

			CHECK_EQ(arb_done(s->a, id, wrote, s->t), 0);
			m->granted = false;
			s->g[m->group].holder = 0;
			if (g_rand_int_range(s->r, 0, 100) < 95)
				r_ask(s, id);
		}
		for (unsigned i = 0; i < m->nreads;)
			if (m->read_end[i] <= s->t)
				r_read_end(s, id, i);
			else
				i++;
	}
}

static int64_t r_bound(const struct rmount *m)
{
	return PRIO_AGING_NS + m->held_ns + (int64_t)R_IDS * R_CHUNK_MAX_NS;
}

static void r_grant(struct rsim *s, int id)
{
	struct rmount *m;
	struct rgroup *g;

	CHECK_GE(id, 1);
	CHECK_LE(id, R_IDS);
	m = &s->m[id];
	g = &s->g[m->group];
	CHECK_MSG(m->reg, "grant to unregistered %d", id);
	CHECK_MSG(m->asking, "grant to %d, which did not ask", id);
	CHECK_MSG(!m->paused, "grant to paused %d", id);
	CHECK_MSG(!g->holder, "second grant in group %d (%d holds it)", m->group,
		  g->holder);
	CHECK_MSG(!g->reads, "grant during a read");
	CHECK(!g->read_end || s->t >= g->read_end + ARB_READ_GRACE_NS);
	CHECK_LE(s->t - m->age_at, r_bound(m));
	m->asking = false;
	m->granted = true;
	m->done_at = s->t + rand_ns(s, 10 * MS, R_CHUNK_MAX_NS);
	g->holder = id;
	s->grants++;
}

static void r_check(struct rsim *s)
{
	for (int id = 1; id <= R_IDS; id++) {
		struct rmount *m = &s->m[id];
		struct arb_mount_info mi;

		if (!m->reg)
			continue;
		CHECK_EQ(arb_mount_info(s->a, id, s->t, &mi), 0);
		CHECK(mi.holds_grant == m->granted);
		CHECK(mi.requesting == m->asking);
		CHECK(mi.paused == m->paused);
		CHECK_EQ(mi.reads, m->nreads);
		if (m->asking && !m->paused)
			CHECK_MSG(s->t - m->age_at <= r_bound(m), "%d waits %lld ns", id,
				  (long long)(s->t - m->age_at));
	}
	for (int gi = 0; gi < R_GROUPS; gi++) {
		struct arb_group_info info;
		int rc = arb_group_info(s->a, rgroup_name(gi), &info);

		if (rc == -ENOENT) {
			CHECK_EQ(s->g[gi].holder, 0);
			s->g[gi] = (struct rgroup){0}; /* forgotten with its last mount */
			continue;
		}
		CHECK_EQ(rc, 0);
		CHECK_EQ(info.holder, s->g[gi].holder);
		CHECK_EQ(info.reads, s->g[gi].reads);
	}
}

/* Reads held each group for part of [from, to]: charge the waiting requests. */
static void r_charge_holds(struct rsim *s, int64_t from, int64_t to)
{
	for (int gi = 0; gi < R_GROUPS; gi++) {
		struct rgroup *g = &s->g[gi];
		int64_t held = 0;

		if (g->reads)
			held = to - from;
		else if (g->read_end)
			held = MAX(MIN(to, g->read_end + ARB_READ_GRACE_NS) -
				       MAX(from, g->read_end),
				   0);
		for (int id = 1; id <= R_IDS; id++)
			if (s->m[id].reg && s->m[id].group == gi && s->m[id].asking)
				s->m[id].held_ns += held;
	}
}

static int64_t r_next_time(const struct rsim *s, int64_t next_op, int64_t wake)
{
	int64_t next = MIN(next_op, wake);

	for (int id = 1; id <= R_IDS; id++) {
		const struct rmount *m = &s->m[id];

		if (!m->reg)
			continue;
		if (m->granted)
			next = MIN(next, m->done_at);
		for (unsigned i = 0; i < m->nreads; i++)
			next = MIN(next, m->read_end[i]);
	}
	return next;
}

static void random_run(guint32 seed, int ngroups, int read_permille)
{
	struct rsim s = {.a = arb_default(),
			 .r = g_rand_new_with_seed(seed),
			 .t = T0,
			 .ngroups = ngroups,
			 .read_permille = read_permille};
	int64_t next_op = T0, wake = INT64_MAX, next;
	int id;

	while (s.t < T0 + R_SPAN_NS) {
		/* No call since arb_next said none before wake: still none. */
		if (s.t < wake)
			CHECK_EQ(arb_next(s.a, s.t, NULL), 0);
		r_events(&s);
		if (s.t >= next_op) {
			r_random_op(&s);
			next_op = s.t + rand_ns(&s, MS, 30 * MS);
		}
		while ((id = arb_next(s.a, s.t, &wake)) > 0)
			r_grant(&s, id);
		r_check(&s);
		next = r_next_time(&s, next_op, wake);
		CHECK_GT(next, s.t);
		r_charge_holds(&s, s.t, next);
		s.t = next;
	}
	CHECK_GT(s.grants, 1000);
	g_rand_free(s.r);
	arb_free(s.a);
}

START_TEST(test_random_invariants)
{
	/* Fixed seeds; one group without reads is where aging bites most. */
	static const struct {
		guint32 seed;
		int groups, read_permille;
	} runs[] = {{1, 3, 100}, {20240611, 3, 100}, {0xdeadbeef, 3, 100},
		    {5, 1, 20},	 {6, 1, 0},	     {7, 2, 50}};

	for (unsigned i = 0; i < G_N_ELEMENTS(runs); i++)
		random_run(runs[i].seed, runs[i].groups, runs[i].read_permille);
}
END_TEST

/* The grants of a run as a string of ids (one digit each), at most n. */
static void grant_order(struct arb *a, struct flow *f, unsigned nf, int64_t *t, unsigned n,
			char *out)
{
	unsigned k = 0;

	for (unsigned i = 0; i < nf; i++)
		ask(a, &f[i], *t);
	while (k < n) {
		int64_t wake;
		int id = arb_next(a, *t, &wake);
		struct flow *g;

		ck_assert_int_gt(id, 0);
		g = flow_of(f, nf, id);
		out[k++] = (char)('0' + id);
		*t += g->chunk_ns;
		ck_assert_int_eq(arb_done(a, id, g->chunk, *t), 0);
		ask(a, g, *t);
	}
	out[k] = 0;
}

START_TEST(test_slices)
{
	struct arb_params p;
	struct arb *a = arb_default();
	struct flow f[] = {flow(1, MiB, 100 * MS), flow(2, MiB, 100 * MS)};
	int64_t t = T0;
	char order[64];

	ck_assert_int_eq(ARB_SLICE_NS, 500 * MS); /* the strings below */
	ck_assert_int_eq(arb_register(a, 1, "g", 4, BE, 100, T0), 0);
	ck_assert_int_eq(arb_register(a, 2, "g", 4, BE, 100, T0), 0);
	/* Equal mounts take turns by slices of half of ARB_SLICE_NS each (3
	 * chunks of 100 ms: a chunk that would end past its slice by more than
	 * half waits for the next turn), not chunk by chunk. */
	grant_order(a, f, 2, &t, 19, order);
	ck_assert_str_eq(order, "1112221112221112221");
	/* In mount 1's slice, a plain request of 2 waits for its end... */
	expect_one(a, t, 1);
	t += 100 * MS;
	ck_assert_int_eq(arb_done(a, 1, MiB, t), 0);
	ck_assert_int_eq(arb_request(a, 1, MiB, false, t), 0);
	/* ... an urgent one ends it at once... */
	ck_assert_int_eq(arb_request(a, 2, MiB, true, t), 0);
	expect_one(a, t, 2);
	ck_assert_int_eq(arb_done(a, 2, MiB, t + 100 * MS), 0);
	arb_free(a);

	/* ... as does a better prio; the slice of a lower one never starts. */
	a = arb_default();
	ck_assert_int_eq(arb_register(a, 1, "g", 4, BE, 100, T0), 0);
	ck_assert_int_eq(arb_register(a, 2, "g", 4, BE, 100, T0), 0);
	ck_assert_int_eq(arb_register(a, 3, "g", 2, BE, 100, T0), 0);
	t = T0;
	grant_order(a, f, 2, &t, 2, order);
	ck_assert_str_eq(order, "11");
	ck_assert_int_eq(arb_request(a, 3, MiB, false, t), 0);
	expect_one(a, t, 3);
	ck_assert_int_eq(arb_done(a, 3, MiB, t + 100 * MS), 0);
	arb_free(a);

	/* Weights hold over slices: 3:1 by bytes, with B's chunks half the size. */
	weights_case(300, MiB, 100 * MS, 100, 512 * KiB, 50 * MS);

	/* slice_ns 0: the fairest request every time. */
	arb_params_default(&p);
	p.slice_ns = 0;
	a = arb_new(&p);
	ck_assert_int_eq(arb_register(a, 1, "g", 4, BE, 100, T0), 0);
	ck_assert_int_eq(arb_register(a, 2, "g", 4, BE, 100, T0), 0);
	t = T0;
	f[0].asked_at = f[1].asked_at = 0;
	grant_order(a, f, 2, &t, 8, order);
	ck_assert_str_eq(order, "12121212");
	arb_free(a);
}
END_TEST

START_TEST(test_read_bound)
{
	struct arb *a = arb_default();
	const int64_t bound = 400 * MS;
	struct arb_mount_info mi;
	int64_t t = T0, wake;
	unsigned grants = 0;

	ck_assert_int_eq(arb_register(a, 1, "g", 4, BE, 100, T0), 0);
	ck_assert_int_eq(arb_register(a, 2, "g", 4, BE, 100, T0), 0);
	ck_assert_int_eq(arb_register(a, 3, "g", 0, BE, 100, T0), 0);
	ck_assert_int_eq(arb_read_bound(a, 1, -1), -EINVAL);
	ck_assert_int_eq(arb_read_bound(a, 9, bound), -ENOENT);
	/* Mount 2 reads without end; mount 3 (prio 0) has no bound, mount 1
	 * (its writers wait for room) has one. */
	ck_assert_int_eq(arb_read_begin(a, 2, t), 0);
	ck_assert_int_eq(arb_request(a, 3, MiB, false, t), 0);
	ck_assert_int_eq(arb_request(a, 1, MiB, false, t), 0);
	expect_none(a, t, INT64_MAX);
	ck_assert_int_eq(arb_read_bound(a, 1, bound), 0);
	ck_assert_int_eq(arb_mount_info(a, 1, t, &mi), 0);
	ck_assert_int_eq(mi.read_bound_ns, bound);
	expect_none(a, t, T0 + bound);
	expect_none(a, T0 + bound - 1, T0 + bound);
	/* One chunk per bound goes, to the bounded mount only, though the
	 * unbounded one has the better prio. */
	for (int i = 0; i < 5; i++) {
		ck_assert_int_eq(arb_next(a, t + bound, &wake), 1);
		grants++;
		t += bound + 100 * MS;
		ck_assert_int_eq(arb_done(a, 1, MiB, t), 0);
		ck_assert_int_eq(arb_request(a, 1, MiB, false, t), 0);
		expect_none(a, t, t + bound);
	}
	ck_assert_int_eq(arb_mount_info(a, 3, t, &mi), 0);
	ck_assert_uint_eq(mi.grants, 0);
	/* Bound off again: reads hold it as long as they last. */
	ck_assert_int_eq(arb_read_bound(a, 1, 0), 0);
	expect_none(a, t + 10 * bound, INT64_MAX);
	/* The reads end: after the grace the better prio goes first. */
	ck_assert_int_eq(arb_read_end(a, 2, t + 10 * bound), 0);
	expect_one(a, t + 10 * bound + ARB_READ_GRACE_NS, 3);
	ck_assert_uint_eq(grants, 5);
	arb_free(a);
}
END_TEST

START_TEST(test_moved)
{
	struct arb *a = arb_default();
	struct arb_mount_info mi;
	int64_t t = T0;

	ck_assert_int_eq(arb_register(a, 1, "g", 4, BE, 100, T0), 0);
	ck_assert_int_eq(arb_register(a, 2, "g", 4, BE, 100, T0), 0);
	ck_assert_int_eq(arb_register(a, 3, "h", 4, BE, 100, T0), 0);
	/* Mount 1 alone: the head stays where its chunks left it. */
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(arb_request(a, 1, MiB, false, t), 0);
		expect_one(a, t, 1);
		ck_assert_int_eq(arb_mount_info(a, 1, t, &mi), 0);
		ck_assert(i == 0 ? mi.moved : !mi.moved);
		t += 100 * MS;
		ck_assert_int_eq(arb_done(a, 1, MiB, t), 0);
	}
	/* Another group's work does not move this head. */
	ck_assert_int_eq(arb_request(a, 3, MiB, false, t), 0);
	expect_one(a, t, 3);
	ck_assert_int_eq(arb_done(a, 3, MiB, t + MS), 0);
	ck_assert_int_eq(arb_request(a, 1, MiB, false, t), 0);
	expect_one(a, t, 1);
	ck_assert_int_eq(arb_mount_info(a, 1, t, &mi), 0);
	ck_assert(!mi.moved);
	t += 100 * MS;
	ck_assert_int_eq(arb_done(a, 1, MiB, t), 0);
	/* Mount 2's chunk moves it... */
	ck_assert_int_eq(arb_request(a, 2, MiB, false, t), 0);
	expect_one(a, t, 2);
	t += 100 * MS;
	ck_assert_int_eq(arb_done(a, 2, MiB, t), 0);
	ck_assert_int_eq(arb_request(a, 1, MiB, false, t), 0);
	expect_one(a, t, 1);
	ck_assert_int_eq(arb_mount_info(a, 1, t, &mi), 0);
	ck_assert(mi.moved);
	t += 100 * MS;
	ck_assert_int_eq(arb_done(a, 1, MiB, t), 0);
	/* ... and so does a read on mount 2. */
	ck_assert_int_eq(arb_read_begin(a, 2, t), 0);
	ck_assert_int_eq(arb_read_end(a, 2, t + MS), 0);
	ck_assert_int_eq(arb_request(a, 1, MiB, false, t + MS), 0);
	expect_one(a, t + MS + ARB_READ_GRACE_NS, 1);
	ck_assert_int_eq(arb_mount_info(a, 1, t, &mi), 0);
	ck_assert(mi.moved);
	arb_free(a);
}
END_TEST

/* Leases: a mount alone in its group holds its grant as a lease until
 * another mount joins (or it is paused), is told so once, and the group waits
 * for its done; a lease is charged at most the chunk it asked for. */
START_TEST(test_lease)
{
	struct arb *a = arb_default();
	struct arb_mount_info mi;
	int64_t t = T0;
	int last = 0, run_len = 0, max_run = 0;

	ck_assert_int_eq(arb_register(a, 1, "g", 4, BE, 100, t), 0);
	ck_assert_int_eq(arb_register(a, 3, "h", 4, BE, 100, t), 0);
	ck_assert_int_eq(arb_request(a, 1, MiB, false, t), 0);
	expect_one(a, t, 1);
	ck_assert_int_eq(arb_mount_info(a, 1, t, &mi), 0);
	ck_assert(mi.holds_grant && mi.lease);
	ck_assert_int_eq(arb_next_revoke(a), 0);
	/* Another group's mount does not end it. */
	ck_assert_int_eq(arb_register(a, 4, "h", 4, BE, 100, t), 0);
	ck_assert_int_eq(arb_next_revoke(a), 0);
	/* A second mount in g: the holder is named once; g waits for its done. */
	t += SEC;
	ck_assert_int_eq(arb_register(a, 2, "g", 4, BE, 100, t), 0);
	ck_assert_int_eq(arb_request(a, 2, MiB, false, t), 0);
	ck_assert_int_eq(arb_next_revoke(a), 1);
	ck_assert_int_eq(arb_next_revoke(a), 0);
	expect_none(a, t, INT64_MAX);
	ck_assert_int_eq(arb_request(a, 1, MiB, false, t), 0);
	t += 50 * MS;
	/* It wrote 200 MiB alone; charged as one chunk, it does not now wait
	 * 200 chunks of mount 2's. */
	ck_assert_int_eq(arb_done(a, 1, 200 * MiB, t), 0);
	ck_assert_int_eq(arb_mount_info(a, 1, t, &mi), 0);
	ck_assert(!mi.holds_grant && !mi.lease);
	ck_assert_uint_eq(mi.granted_bytes, 200 * MiB);
	for (int i = 0; i < 20; i++) {
		int id = arb_next(a, t, NULL);

		ck_assert_int_gt(id, 0);
		ck_assert_int_eq(arb_mount_info(a, id, t, &mi), 0);
		ck_assert(mi.holds_grant && !mi.lease); /* two mounts: grants */
		ck_assert_int_eq(arb_next_revoke(a), 0);
		run_len = id == last ? run_len + 1 : 1;
		max_run = MAX(max_run, run_len);
		last = id;
		t += 100 * MS;
		ck_assert_int_eq(arb_done(a, id, MiB, t), 0);
		ck_assert_int_eq(arb_request(a, id, MiB, false, t), 0);
	}
	ck_assert_int_le(max_run, 3); /* slices of ARB_SLICE_NS / 2, no debt */
	/* Alone again: the next grant is a lease; pausing it names it once. */
	ck_assert_int_eq(arb_unregister(a, 2, t), 0);
	while (arb_mount_info(a, 1, t, &mi) == 0 && mi.holds_grant) {
		t += 100 * MS;
		ck_assert_int_eq(arb_done(a, 1, MiB, t), 0);
	}
	ck_assert_int_eq(arb_request(a, 1, MiB, false, t), 0);
	expect_one(a, t, 1);
	ck_assert_int_eq(arb_mount_info(a, 1, t, &mi), 0);
	ck_assert(mi.lease);
	ck_assert_int_eq(arb_pause(a, 1, true, t), 0);
	ck_assert_int_eq(arb_next_revoke(a), 1);
	ck_assert_int_eq(arb_next_revoke(a), 0);
	ck_assert_int_eq(arb_done(a, 1, 5 * MiB, t + MS), 0);
	ck_assert_int_eq(arb_next_revoke(a), 0);
	/* A lease whose holder goes is gone with it. */
	ck_assert_int_eq(arb_pause(a, 1, false, t + MS), 0);
	ck_assert_int_eq(arb_request(a, 1, MiB, false, t + MS), 0);
	expect_one(a, t + MS, 1);
	ck_assert_int_eq(arb_unregister(a, 1, t + 2 * MS), 0);
	ck_assert_int_eq(arb_register(a, 5, "g", 4, BE, 100, t + 2 * MS), 0);
	ck_assert_int_eq(arb_next_revoke(a), 0);
	arb_free(a);
}
END_TEST

static Suite *arbiter_suite(void)
{
	Suite *s = suite_create("arbiter");
	TCase *tc = tcase_create("policy");
	TCase *api = tcase_create("api");
	TCase *rnd = tcase_create("random");

	tcase_add_test(tc, test_strict_prio);
	tcase_add_test(tc, test_weights);
	tcase_add_test(tc, test_no_idle_credit);
	tcase_add_test(tc, test_idle_starvation_chunk);
	tcase_add_test(tc, test_idle_waits_for_quiet);
	tcase_add_test(tc, test_idle_wake_for_starvation);
	tcase_add_test(tc, test_read_hold_group);
	tcase_add_test(tc, test_groups_independent);
	tcase_add_test(tc, test_urgent_aging);
	tcase_add_test(tc, test_idle_urgent_counts_as_be);
	tcase_add_test(tc, test_set);
	tcase_add_test(tc, test_slices);
	tcase_add_test(tc, test_read_bound);
	tcase_add_test(tc, test_moved);
	tcase_add_test(tc, test_lease);
	suite_add_tcase(s, tc);

	tcase_add_test(api, test_register_unregister);
	tcase_add_test(api, test_unregister_holder);
	tcase_add_test(api, test_pause);
	tcase_add_test(api, test_bad_args);
	suite_add_tcase(s, api);

	tcase_add_test(rnd, test_random_invariants);
	tcase_set_timeout(rnd, 60);
	suite_add_tcase(s, rnd);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(arbiter_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
