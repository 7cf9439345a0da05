/* The flusher policy (sched/policy.c), with made-up sizes and times. */
#include <check.h>
#include <stdlib.h>

#include "policy.h"

#define MiB (1ull << 20)
#define T0 (100 * NSEC_PER_SEC)
#define MS NSEC_PER_MSEC
#define LAT (100 * MS)

START_TEST(test_room_plain)
{
	uint64_t cap = 64 * MiB;

	ck_assert(policy_room(cap, 0, 0, 0, 128 * MiB)); /* first write always fits */
	ck_assert(policy_room(cap, 10 * MiB, 0, 0, MiB));
	ck_assert(policy_room(cap, 63 * MiB, 0, 0, MiB));
	ck_assert(!policy_room(cap, 63 * MiB, 0, 0, MiB + 1));
	ck_assert(!policy_room(cap, 64 * MiB, 0, 0, 1));
}
END_TEST

START_TEST(test_room_file_share)
{
	uint64_t cap = 64 * MiB, share = cap / 100 * FILE_SHARE_PCT;

	ck_assert(policy_room(cap, share - MiB, 0, share - MiB, MiB));
	ck_assert(!policy_room(cap, share, 0, share, 1));
	/* Another file still fits beside it. */
	ck_assert(policy_room(cap, share, 0, 0, cap - share));
	/* A file's first write is not held to the share. */
	ck_assert(policy_room(cap, share, 0, 0, 1));
}
END_TEST

START_TEST(test_room_failing_share)
{
	uint64_t cap = 64 * MiB, limit = cap / 100 * FAIL_SHARE_PCT;

	/* Full of failing data: others get what is beyond the failing limit. */
	ck_assert(policy_room(cap, cap, cap, 0, cap - limit));
	ck_assert(!policy_room(cap, cap, cap, 0, cap - limit + 1));
	/* Failing data under the limit counts in full. */
	ck_assert(!policy_room(cap, cap, limit, 0, 1));
	ck_assert(policy_room(cap, cap - MiB, limit, 0, MiB));
}
END_TEST

START_TEST(test_retry_backoff)
{
	ck_assert_int_eq(policy_retry_at(1, T0), T0 + RETRY_MIN_NS);
	ck_assert_int_eq(policy_retry_at(2, T0), T0 + 2 * RETRY_MIN_NS);
	ck_assert_int_eq(policy_retry_at(3, T0), T0 + 4 * RETRY_MIN_NS);
	ck_assert_int_eq(policy_retry_at(20, T0), T0 + RETRY_MAX_NS);
	ck_assert_int_eq(policy_retry_at(1000, T0), T0 + RETRY_MAX_NS);
}
END_TEST

START_TEST(test_gave_up)
{
	ck_assert(!policy_gave_up(0, 100));
	ck_assert(!policy_gave_up(-5, DRAIN_GIVEUP_FAILURES - 1));
	ck_assert(policy_gave_up(-5, DRAIN_GIVEUP_FAILURES));
}
END_TEST

START_TEST(test_gate_hold_follows_gate)
{
	struct gate_hold h = {0};

	ck_assert_int_eq(policy_gate_hold(&h, 0, false, false, false, LAT, T0), 0);
	ck_assert_int_eq(policy_gate_hold(&h, 15 * MS, false, false, false, LAT, T0), 15 * MS);
	/* Nobody waits: reads may hold the flushers as long as they come. */
	ck_assert_int_eq(policy_gate_hold(&h, 20 * MS, true, false, false, LAT,
					  T0 + 3600 * NSEC_PER_SEC),
			 20 * MS);
	ck_assert_int_eq(policy_gate_hold(&h, 0, false, false, false, LAT, T0), 0);
	ck_assert_int_eq(h.since_ns, 0);
}
END_TEST

START_TEST(test_gate_hold_urgent_skips_grace)
{
	struct gate_hold h = {0};

	/* Grace only (no read in flight): an fsync'd file goes at once. */
	ck_assert_int_eq(policy_gate_hold(&h, 20 * MS, false, true, true, LAT, T0), 0);
	/* A read in flight: it waits for the read, briefly. */
	ck_assert_int_gt(policy_gate_hold(&h, 20 * MS, true, true, true, LAT, T0), 0);
	ck_assert_int_le(policy_gate_hold(&h, 20 * MS, true, true, true, LAT, T0), MS);
}
END_TEST

START_TEST(test_gate_hold_bounded_while_writers_wait)
{
	struct gate_hold h = {0};
	int64_t max = GATE_HOLD_MAX_LATENCIES * LAT, t;

	for (t = T0; t < T0 + max; t += 10 * MS)
		ck_assert_int_gt(policy_gate_hold(&h, 20 * MS, true, false, true, LAT, t), 0);
	/* Held for max in a row with writers waiting: one chunk goes. */
	ck_assert_int_eq(policy_gate_hold(&h, 20 * MS, true, false, true, LAT, T0 + max), 0);
	/* And the bound starts again. */
	ck_assert_int_gt(policy_gate_hold(&h, 20 * MS, true, false, true, LAT, T0 + max + MS), 0);
	/* A tiny latency= still gets the floor. */
	h.since_ns = 0;
	ck_assert_int_gt(policy_gate_hold(&h, 20 * MS, true, false, true, MS, T0), 0);
	ck_assert_int_gt(policy_gate_hold(&h, 20 * MS, true, false, true, MS,
					  T0 + GATE_HOLD_MAX_MIN_NS - 1), 0);
	ck_assert_int_eq(policy_gate_hold(&h, 20 * MS, true, false, true, MS,
					  T0 + GATE_HOLD_MAX_MIN_NS), 0);
}
END_TEST

START_TEST(test_meta_clock)
{
	struct meta_clock m;

	policy_meta_init(&m);
	ck_assert(!policy_meta_due(&m, true, INT64_MAX, T0));
	policy_meta_written(&m, T0);
	/* Streaming: the interval runs from the first write after clean. */
	policy_meta_written(&m, T0 + 5 * NSEC_PER_SEC);
	ck_assert(!policy_meta_due(&m, true, INT64_MAX, T0 + SYNCFS_INTERVAL_MIN_NS - 1));
	ck_assert(policy_meta_due(&m, true, INT64_MAX, T0 + SYNCFS_INTERVAL_MIN_NS));
	/* Near the end of the queue: the flush after it does the work, but not
	 * later than SYNCFS_INTERVAL_MAX_NS. */
	ck_assert(policy_meta_due(&m, true, SYNCFS_NEAR_END_NS, T0 + SYNCFS_INTERVAL_MIN_NS));
	ck_assert(!policy_meta_due(&m, true, SYNCFS_NEAR_END_NS - 1, T0 + SYNCFS_INTERVAL_MIN_NS));
	ck_assert(!policy_meta_due(&m, true, 0, T0 + SYNCFS_INTERVAL_MAX_NS - 1));
	ck_assert(policy_meta_due(&m, true, 0, T0 + SYNCFS_INTERVAL_MAX_NS));
	/* Idle: once nothing was written for SYNCFS_IDLE_NS. */
	ck_assert(!policy_meta_due(&m, false, INT64_MAX, T0 + 5 * NSEC_PER_SEC + SYNCFS_IDLE_NS - 1));
	ck_assert(policy_meta_due(&m, false, INT64_MAX, T0 + 5 * NSEC_PER_SEC + SYNCFS_IDLE_NS));
	policy_meta_begin(&m, T0 + 20 * NSEC_PER_SEC);
	ck_assert(!policy_meta_due(&m, false, INT64_MAX, T0 + 60 * NSEC_PER_SEC));
}
END_TEST

START_TEST(test_meta_priced)
{
	struct meta_clock m;

	policy_meta_init(&m);
	policy_meta_priced(&m, 150 * MS, true);
	ck_assert_int_eq(m.interval_ns, 150 * MS * SYNCFS_SHARE_DIV);
	policy_meta_priced(&m, MS, true);
	ck_assert_int_eq(m.interval_ns, SYNCFS_INTERVAL_MIN_NS);
	policy_meta_priced(&m, 10 * NSEC_PER_SEC, true);
	ck_assert_int_eq(m.interval_ns, SYNCFS_INTERVAL_MAX_NS);
	/* A flush after the queue ran empty does not price the next. */
	policy_meta_priced(&m, MS, false);
	ck_assert_int_eq(m.interval_ns, SYNCFS_INTERVAL_MAX_NS);
}
END_TEST

START_TEST(test_chunk_seeks)
{
	ck_assert(!policy_chunk_seeks(false, true, T0 - 1, T0));
	ck_assert(policy_chunk_seeks(true, true, T0 - 1, T0));
	ck_assert(policy_chunk_seeks(false, false, T0 - 1, T0));
	ck_assert(policy_chunk_seeks(false, true, T0 + 1, T0)); /* a read came between */
}
END_TEST

static Suite *policy_suite(void)
{
	Suite *s = suite_create("policy");
	TCase *tc = tcase_create("policy");

	tcase_add_test(tc, test_room_plain);
	tcase_add_test(tc, test_room_file_share);
	tcase_add_test(tc, test_room_failing_share);
	tcase_add_test(tc, test_retry_backoff);
	tcase_add_test(tc, test_gave_up);
	tcase_add_test(tc, test_gate_hold_follows_gate);
	tcase_add_test(tc, test_gate_hold_urgent_skips_grace);
	tcase_add_test(tc, test_gate_hold_bounded_while_writers_wait);
	tcase_add_test(tc, test_meta_clock);
	tcase_add_test(tc, test_meta_priced);
	tcase_add_test(tc, test_chunk_seeks);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(policy_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
