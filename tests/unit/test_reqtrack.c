/* The request tracker: the oldest request, the bound, each slow one counted once. */
#include <check.h>
#include <glib.h>
#include <pthread.h>
#include <stdlib.h>

#include "reqtrack.h"

#define SEC 1000000000LL
#define BOUND (10 * SEC)

START_TEST(test_oldest_and_scan_once)
{
	struct reqtrack *t = reqtrack_new(BOUND);
	struct req_view v;

	ck_assert_uint_eq(reqtrack_oldest(t, 5 * SEC, &v), 0);
	ck_assert_ptr_null(v.op);
	reqtrack_begin(t, "lookup", 42, 100 * SEC);
	ck_assert_uint_eq(reqtrack_oldest(t, 105 * SEC, &v), 1);
	ck_assert_str_eq(v.op, "lookup");
	ck_assert_int_eq(v.pid, 42);
	ck_assert_int_eq(v.age_ns, 5 * SEC);
	ck_assert_uint_eq(reqtrack_scan(t, 110 * SEC), 0); /* at the bound: not past it */
	ck_assert_uint_eq(reqtrack_scan(t, 111 * SEC), 1);
	ck_assert_uint_eq(reqtrack_scan(t, 112 * SEC), 0); /* once per request */
	ck_assert_uint_eq(reqtrack_slow(t), 1);
	ck_assert(!reqtrack_end(t, 113 * SEC)); /* the scan told it already */
	ck_assert_uint_eq(reqtrack_slow(t), 1);
	ck_assert_uint_eq(reqtrack_oldest(t, 114 * SEC, &v), 0);
	reqtrack_free(t);
}
END_TEST

/* A slow request that ends between two scans is counted at its end. */
START_TEST(test_slow_between_scans)
{
	struct reqtrack *t = reqtrack_new(BOUND);

	reqtrack_begin(t, "read", 7, SEC);
	ck_assert(!reqtrack_end(t, 2 * SEC));
	reqtrack_begin(t, "read", 7, 3 * SEC);
	ck_assert(reqtrack_end(t, 14 * SEC));
	ck_assert_uint_eq(reqtrack_slow(t), 1);
	ck_assert_uint_eq(reqtrack_scan(t, 100 * SEC), 0);
	/* the next request of the same slot is a new one */
	reqtrack_begin(t, "getattr", 7, 200 * SEC);
	ck_assert_uint_eq(reqtrack_scan(t, 211 * SEC), 1);
	ck_assert_uint_eq(reqtrack_slow(t), 2);
	reqtrack_end(t, 212 * SEC);
	reqtrack_free(t);
}
END_TEST

/* fsync and the like wait for the medium by request: outside the bound. */
START_TEST(test_medium_wait_left_out)
{
	struct reqtrack *t = reqtrack_new(BOUND);
	struct req_view v;

	reqtrack_begin(t, "fsync", 9, SEC);
	reqtrack_waits_medium(t);
	ck_assert_uint_eq(reqtrack_oldest(t, 100 * SEC, &v), 0);
	ck_assert_uint_eq(reqtrack_scan(t, 100 * SEC), 0);
	ck_assert(!reqtrack_end(t, 100 * SEC));
	ck_assert_uint_eq(reqtrack_slow(t), 0);
	/* the mark does not outlive its request */
	reqtrack_begin(t, "read", 9, 200 * SEC);
	ck_assert_uint_eq(reqtrack_oldest(t, 201 * SEC, &v), 1);
	ck_assert_str_eq(v.op, "read");
	reqtrack_end(t, 201 * SEC);
	reqtrack_free(t);
}
END_TEST

#define NTHREADS 4

struct worker {
	struct reqtrack *t;
	pthread_barrier_t *began, *ended;
	int64_t start;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;

	reqtrack_begin(w->t, "readdir", 1, w->start);
	pthread_barrier_wait(w->began);
	pthread_barrier_wait(w->ended);
	reqtrack_end(w->t, w->start + SEC);
	return NULL;
}

/* One slot per worker thread, the oldest across them; rounds of new threads
 * (taking the slots the exited ones gave back) see only their own requests. */
START_TEST(test_threads)
{
	struct reqtrack *t = reqtrack_new(BOUND);
	pthread_barrier_t began, ended;
	struct worker w[NTHREADS];
	pthread_t th[NTHREADS];
	struct req_view v;

	for (int round = 0; round < 3; round++) {
		pthread_barrier_init(&began, NULL, NTHREADS + 1);
		pthread_barrier_init(&ended, NULL, NTHREADS + 1);
		for (int i = 0; i < NTHREADS; i++) {
			w[i] = (struct worker){t, &began, &ended, (int64_t)(i + 1) * SEC};
			ck_assert_int_eq(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
		}
		pthread_barrier_wait(&began);
		ck_assert_uint_eq(reqtrack_oldest(t, 20 * SEC, &v), NTHREADS);
		ck_assert_int_eq(v.age_ns, 19 * SEC); /* the one begun at 1 s */
		pthread_barrier_wait(&ended);
		for (int i = 0; i < NTHREADS; i++)
			pthread_join(th[i], NULL);
		ck_assert_uint_eq(reqtrack_oldest(t, 20 * SEC, &v), 0);
		pthread_barrier_destroy(&began);
		pthread_barrier_destroy(&ended);
	}
	reqtrack_free(t);
}
END_TEST

static Suite *reqtrack_suite(void)
{
	Suite *s = suite_create("reqtrack");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_oldest_and_scan_once);
	tcase_add_test(tc, test_slow_between_scans);
	tcase_add_test(tc, test_medium_wait_left_out);
	tcase_add_test(tc, test_threads);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(reqtrack_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
