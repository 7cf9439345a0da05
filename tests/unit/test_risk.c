/* Names at risk after failed metadata flushes (sched/risk.c). */
#include <check.h>
#include <glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "risk.h"

static bool report_names(struct risk *r, bool all, const char *name)
{
	g_autofree char *m = risk_report(r, all);

	return m && strstr(m, name);
}

START_TEST(test_good_flush_clears)
{
	struct risk r;

	risk_init(&r);
	risk_add(&r, "/m/a");
	risk_flush_begin(&r);
	risk_flush_end(&r, 0);
	ck_assert_uint_eq(risk_lost_count(&r), 0);
	ck_assert_ptr_null(risk_report(&r, true));
	risk_free(&r);
}
END_TEST

START_TEST(test_failed_flush_loses_for_good)
{
	struct risk r;

	risk_init(&r);
	risk_add(&r, "/m/a");
	risk_add(&r, "/m/a");
	risk_add(&r, "/m/b");
	risk_flush_begin(&r);
	risk_add(&r, "/m/c"); /* after the flush began: not covered by it */
	risk_flush_end(&r, -5);
	ck_assert_uint_eq(risk_lost_count(&r), 2);
	ck_assert(report_names(&r, false, "'/m/a'"));
	/* Named once; again only when asked for all, or when new ones come. */
	ck_assert_ptr_null(risk_report(&r, false));
	ck_assert(report_names(&r, true, "'/m/b'"));
	/* A later good flush covers c, but a and b stay lost. */
	risk_flush_begin(&r);
	risk_flush_end(&r, 0);
	ck_assert_uint_eq(risk_lost_count(&r), 2);
	ck_assert(!report_names(&r, true, "/m/c"));
	risk_add(&r, "/m/d");
	risk_flush_begin(&r);
	risk_flush_end(&r, -5);
	ck_assert(report_names(&r, false, "'/m/d'"));
	ck_assert_uint_eq(risk_lost_count(&r), 3);
	risk_free(&r);
}
END_TEST

START_TEST(test_bounded)
{
	struct risk r;
	char name[32];
	g_autofree char *m = NULL;

	risk_init(&r);
	for (int i = 0; i < RISK_NAMES_MAX + 7; i++) {
		snprintf(name, sizeof(name), "/m/f%06d", i);
		risk_add(&r, name);
	}
	risk_flush_begin(&r);
	risk_flush_end(&r, -5);
	ck_assert_uint_eq(risk_lost_count(&r), RISK_NAMES_MAX + 7);
	m = risk_report(&r, false);
	ck_assert_ptr_nonnull(m);
	ck_assert_ptr_nonnull(strstr(m, "10007 files"));
	ck_assert_ptr_nonnull(strstr(m, "and 9957 more"));
	ck_assert_ptr_nonnull(strstr(m, "'/m/f000000'")); /* sorted: the first ones */
	risk_free(&r);
}
END_TEST

START_TEST(test_unfinished_flush_counts_as_failed)
{
	struct risk r;

	risk_init(&r);
	risk_add(&r, "/m/a");
	risk_flush_begin(&r);
	risk_flush_begin(&r);
	risk_flush_end(&r, 0);
	ck_assert_uint_eq(risk_lost_count(&r), 1);
	risk_free(&r);
}
END_TEST

static Suite *risk_suite(void)
{
	Suite *s = suite_create("risk");
	TCase *tc = tcase_create("risk");

	tcase_add_test(tc, test_good_flush_clears);
	tcase_add_test(tc, test_failed_flush_loses_for_good);
	tcase_add_test(tc, test_bounded);
	tcase_add_test(tc, test_unfinished_flush_counts_as_failed);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(risk_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
