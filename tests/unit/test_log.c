/* Names escaped for the log: no byte of a name can end a line or fake one. */
#include <check.h>
#include <glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

static const struct {
	const char *in, *out;
} cases[] = {
    {"/media/zip/plain name.txt", "/media/zip/plain name.txt"},
    {"", ""},
    {"a\nslowmedia: forged", "a\\nslowmedia: forged"},
    {"tab\there", "tab\\there"},
    {"back\\slash", "back\\\\slash"},
    {"cr\r bell\a esc\x1b[31m del\x7f", "cr\\x0d bell\\x07 esc\\x1b[31m del\\x7f"},
    {"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
     "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"},
    {"latin1 caf\xe9!", "latin1 caf\\xe9!"},
    {"cut \xe2\x82", "cut \\xe2\\x82"},			     /* a sequence cut short */
    {"overlong \xc0\xaf", "overlong \\xc0\\xaf"},	     /* '/' in two bytes */
    {"surrogate \xed\xa0\x80", "surrogate \\xed\\xa0\\x80"}, /* U+D800 */
    {"c1 \xc2\x9b"
     "31m",
     "c1 \\xc2\\x9b31m"}, /* CSI */
    {"line sep \xe2\x80\xa8.", "line sep \\xe2\\x80\\xa8."},
};

START_TEST(test_escape_cases)
{
	char out[256];

	ck_assert_ptr_eq(sm_log_escape(cases[_i].in, out, sizeof(out)), out);
	ck_assert_str_eq(out, cases[_i].out);
}
END_TEST

/* Every byte value, alone: printable ASCII stays, the rest never shows raw. */
START_TEST(test_escape_every_byte)
{
	char in[2] = {0}, out[16];

	for (int b = 1; b < 256; b++) {
		in[0] = (char)b;
		sm_log_escape(in, out, sizeof(out));
		if (b >= 0x20 && b < 0x7f && b != '\\') {
			ck_assert_int_eq(strlen(out), 1);
			ck_assert_int_eq(out[0], b);
			continue;
		}
		ck_assert_msg(out[0] == '\\' && strlen(out) >= 2, "byte %#x gave '%s'", b,
			      out);
		for (const char *p = out; *p; p++)
			ck_assert_msg(
			    (unsigned char)*p >= 0x20 && (unsigned char)*p < 0x7f,
			    "byte %#x left %#x in the output", b, (unsigned char)*p);
	}
}
END_TEST

/* The output never exceeds its buffer; a cut is marked and keeps escapes whole. */
START_TEST(test_escape_bounded)
{
	char big[4096], out[64];
	size_t n;

	memset(big, '\n', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	for (size_t size = 4; size <= sizeof(out); size++) {
		memset(out, 'X', sizeof(out));
		sm_log_escape(big, out, size);
		n = strlen(out);
		ck_assert_uint_lt(n, size);
		ck_assert_str_eq(out + n - 3, "...");
		ck_assert_uint_eq((n - 3) % 2, 0); /* only whole "\n" escapes before it */
		for (size_t i = size; i < sizeof(out); i++)
			ck_assert_int_eq(out[i], 'X');
	}
}
END_TEST

/* Exactly fitting results are not cut; one byte less is. */
START_TEST(test_escape_exact_fit)
{
	char out[16];

	sm_log_escape("abcdefghij", out, 11);
	ck_assert_str_eq(out, "abcdefghij");
	sm_log_escape("abcdefghij", out, 10);
	ck_assert_str_eq(out, "abcdef...");
	sm_log_escape("ab\xc3\xa9", out, 5); /* 4 bytes + NUL: fits */
	ck_assert_str_eq(out, "ab\xc3\xa9");
	sm_log_escape("abc\xc3\xa9x", out, 6); /* no half of the 'é' */
	ck_assert_str_eq(out, "ab...");
	sm_log_escape("abc", out, 3); /* too small even for "...": empty */
	ck_assert_str_eq(out, "");
}
END_TEST

/* A raw control character that reaches sm_log still cannot start a line. */
START_TEST(test_line_sanitized)
{
	int fds[2], saved;
	char buf[256];
	ssize_t n;

	ck_assert_int_eq(pipe(fds), 0);
	saved = dup(STDERR_FILENO);
	dup2(fds[1], STDERR_FILENO);
	sm_log_init("slowmedia", false);
	sm_err("mount %s: failed", "/dev/x\nslowmedia: forged\\n");
	fflush(stderr);
	dup2(saved, STDERR_FILENO);
	close(saved);
	close(fds[1]);
	n = read(fds[0], buf, sizeof(buf) - 1);
	close(fds[0]);
	ck_assert_int_gt(n, 0);
	buf[n] = '\0';
	ck_assert_str_eq(buf, "slowmedia: mount /dev/x\\nslowmedia: forged\\n: failed\n");
}
END_TEST

#define SEC 1000000000LL

/* A burst goes out, the rest of the window is counted, and the count comes
 * with the first line of a later window. */
START_TEST(test_ratelimit_burst_then_count)
{
	struct sm_ratelimit rl = SM_RATELIMIT_INIT(10 * SEC, 3);
	uint64_t missed = 99;
	int64_t t = 5 * SEC;

	for (int i = 0; i < 3; i++) {
		ck_assert(sm_ratelimit_pass(&rl, t + i, &missed));
		ck_assert_uint_eq(missed, 0);
	}
	for (int i = 0; i < 1000; i++) /* a reader looping on a bad sector */
		ck_assert(!sm_ratelimit_pass(&rl, t + SEC + i, &missed));
	ck_assert(!sm_ratelimit_pass(&rl, t + 10 * SEC - 1, &missed));
	ck_assert(sm_ratelimit_pass(&rl, t + 10 * SEC, &missed));
	ck_assert_uint_eq(missed, 1001);
	ck_assert(sm_ratelimit_pass(&rl, t + 10 * SEC + 1, &missed));
	ck_assert_uint_eq(missed, 0);
}
END_TEST

/* However long the loop runs, at most burst lines per interval. */
START_TEST(test_ratelimit_bounded)
{
	struct sm_ratelimit rl = SM_RATELIMIT_INIT(10 * SEC, 5);
	uint64_t missed, told = 0, passed = 0;
	int64_t t;

	for (t = 0; t < 3600 * SEC; t += SEC / 100) {
		if (sm_ratelimit_pass(&rl, t, &missed)) {
			passed++;
			told += missed;
		}
	}
	ck_assert_uint_le(passed, 5 * 360);
	ck_assert_uint_eq(passed + told + rl.missed, 360000);
}
END_TEST

static Suite *log_suite(void)
{
	Suite *s = suite_create("log");
	TCase *tc = tcase_create("escape");

	tcase_add_loop_test(tc, test_escape_cases, 0, G_N_ELEMENTS(cases));
	tcase_add_test(tc, test_escape_every_byte);
	tcase_add_test(tc, test_escape_bounded);
	tcase_add_test(tc, test_escape_exact_fit);
	tcase_add_test(tc, test_line_sanitized);
	suite_add_tcase(s, tc);
	tc = tcase_create("ratelimit");
	tcase_add_test(tc, test_ratelimit_burst_then_count);
	tcase_add_test(tc, test_ratelimit_bounded);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(log_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
