/* The write queue's API without flusher threads (sched/queue.c): what stays
 * queued and how it is reported, on a real temporary directory. */
#include <check.h>
#include <fcntl.h>
#include <glib.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "queue.h"

static char dir[] = "/tmp/slowmedia-unit-queue.XXXXXX";
static int root_fd = -1, file_fd = -1;
static struct wq *q;
static struct wq_file *slot;

static void hold(void *ctx, void *owner)
{
}

static void release(void *ctx, void *owner)
{
}

static void setup(void)
{
	struct sched_opts o;
	g_autofree char *path = NULL;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	root_fd = open(dir, O_PATH | O_DIRECTORY);
	ck_assert_int_ge(root_fd, 0);
	path = g_build_filename(dir, "f", NULL);
	file_fd = open(path, O_RDWR | O_CREAT, 0644);
	ck_assert_int_ge(file_fd, 0);
	sched_opts_init(&o);
	q = wq_new(&o, root_fd, &(struct wq_hooks){.hold = hold, .release = release}, 16);
	sched_opts_free(&o);
	slot = NULL;
}

static void teardown(void)
{
	g_autofree char *path = g_build_filename(dir, "f", NULL);

	/* No flushers were started: nothing is written, just freed. */
	wq_free(q);
	wq_file_free(slot);
	close(file_fd);
	close(root_fd);
	unlink(path);
	rmdir(dir);
	memcpy(dir + sizeof(dir) - 7, "XXXXXX", 6);
}

/* A lower that reports no block size (a FUSE lower may) must not make statfs
 * divide by zero while data is queued. */
START_TEST(test_statvfs_zero_block_size)
{
	struct wq_file *f = wq_file_attach(q, &slot, NULL);
	struct statvfs sv = {.f_blocks = 1000, .f_bfree = 500, .f_bavail = 400};
	char data[4096] = {1};

	ck_assert_int_eq(wq_write(q, f, file_fd, data, sizeof(data), 0, NULL, NULL), sizeof(data));
	wq_fix_statvfs(q, &sv);
	ck_assert_uint_eq(sv.f_bfree, 500);
	ck_assert_uint_eq(sv.f_bavail, 400);
	/* With a block size, the queued data is taken off what is free. */
	sv.f_frsize = 4096;
	wq_fix_statvfs(q, &sv);
	ck_assert_uint_lt(sv.f_bavail, 400);
}
END_TEST

/* A truncate on a file whose data fails is refused, not applied later; and
 * with nothing queued the caller truncates itself. */
START_TEST(test_truncate_without_queue)
{
	struct wq_file *f = wq_file_attach(q, &slot, NULL);

	ck_assert_int_eq(wq_truncate(q, f, -1, 10), 1);
	ck_assert_int_eq(wq_write(q, f, file_fd, "abc", 3, 0, NULL, NULL), 3);
	ck_assert_int_eq(wq_truncate(q, f, -1, 1), 0);
}
END_TEST

static Suite *queue_suite(void)
{
	Suite *s = suite_create("queue");
	TCase *tc = tcase_create("queue");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_statvfs_zero_block_size);
	tcase_add_test(tc, test_truncate_without_queue);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(queue_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
