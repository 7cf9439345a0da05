/*
 * The medium's identity from its first sectors (sched/medium.c): the UUID
 * and label blkid would report for ext2/3/4, FAT12/16, FAT32 and exFAT, and
 * nothing for sectors that hold none of them; and the rescue directory
 * (sched/rescue.c): what it saves reads back through its manifest.
 */
#include "medium.h"
#include "rescue.h"

#include <check.h>
#include <glib.h>
#include <glib/gstdio.h>
#include <stdlib.h>
#include <string.h>

#define SECT 4096

static void put32(unsigned char *p, uint32_t v)
{
	p[0] = v & 0xff;
	p[1] = (v >> 8) & 0xff;
	p[2] = (v >> 16) & 0xff;
	p[3] = v >> 24;
}

START_TEST(test_ext)
{
	unsigned char s[SECT] = {0};
	static const unsigned char u[16] = {0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0,
					    0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef};
	char uuid[64], label[64];

	s[1024 + 56] = 0x53;
	s[1024 + 57] = 0xEF;
	memcpy(s + 1024 + 104, u, 16);
	memcpy(s + 1024 + 120, "BACKUP\0\0", 8);
	ck_assert_int_eq(medium_from_sectors(s, sizeof(s), uuid, sizeof(uuid), label, sizeof(label)), 0);
	ck_assert_str_eq(uuid, "12345678-9abc-def0-0123-456789abcdef");
	ck_assert_str_eq(label, "BACKUP");
	/* An all-zero UUID is none. */
	memset(s + 1024 + 104, 0, 16);
	ck_assert_int_eq(medium_from_sectors(s, sizeof(s), uuid, sizeof(uuid), label, sizeof(label)),
			 -ENOENT);
	/* Too short to hold the superblock. */
	ck_assert_int_eq(medium_from_sectors(s, 1100, uuid, sizeof(uuid), label, sizeof(label)),
			 -ENOENT);
}
END_TEST

START_TEST(test_fat)
{
	unsigned char s[SECT] = {0};
	char uuid[64], label[64];

	s[510] = 0x55;
	s[511] = 0xAA;
	/* FAT16: extended boot record at 36. */
	memcpy(s + 54, "FAT16   ", 8);
	s[38] = 0x29;
	put32(s + 39, 0x1A2B3C4D);
	memcpy(s + 43, "ZIP DISK   ", 11);
	ck_assert_int_eq(medium_from_sectors(s, sizeof(s), uuid, sizeof(uuid), label, sizeof(label)), 0);
	ck_assert_str_eq(uuid, "1A2B-3C4D");
	ck_assert_str_eq(label, "ZIP DISK");
	/* FAT32: at 64. */
	memset(s, 0, 510);
	memcpy(s + 82, "FAT32   ", 8);
	s[66] = 0x29;
	put32(s + 67, 0xDEADBEEF);
	memcpy(s + 71, "SDCARD\x01    ", 11);
	ck_assert_int_eq(medium_from_sectors(s, sizeof(s), uuid, sizeof(uuid), label, sizeof(label)), 0);
	ck_assert_str_eq(uuid, "DEAD-BEEF");
	ck_assert_str_eq(label, "SDCARD?"); /* a control byte is not copied */
	/* exFAT. */
	memset(s, 0, 510);
	memcpy(s + 3, "EXFAT   ", 8);
	put32(s + 100, 0x0102A0B0);
	ck_assert_int_eq(medium_from_sectors(s, sizeof(s), uuid, sizeof(uuid), label, sizeof(label)), 0);
	ck_assert_str_eq(uuid, "0102-A0B0");
	/* A boot signature and nothing else. */
	memset(s, 0, 510);
	ck_assert_int_eq(medium_from_sectors(s, sizeof(s), uuid, sizeof(uuid), label, sizeof(label)),
			 -ENOENT);
}
END_TEST

static int seen(const char *path, uint64_t size, const char *ranges, const char *notes, void *ctx)
{
	GString *o = ctx;

	g_string_append_printf(o, "%s|%llu|%s|%s\n", path, (unsigned long long)size, ranges, notes);
	return 0;
}

static int count(const struct rescue_info *ri, void *ctx)
{
	(*(int *)ctx)++;
	ck_assert(ri->complete);
	ck_assert_str_eq(ri->medium, "uuid:x\ty");
	ck_assert_uint_eq(ri->files, 2);
	ck_assert_uint_eq(ri->bytes, 7);
	return 0;
}

START_TEST(test_rescue_round_trip)
{
	g_autofree char *base = g_dir_make_tmp("test-rescue-XXXXXX", NULL);
	g_autoptr(GString) o = g_string_new(NULL);
	g_autofree char *data = NULL;
	struct rescue *r;
	char why[256];
	bool found;
	int n = 0;

	ck_assert_int_eq(rescue_open(base, "uuid:x\ty", &r, why, sizeof(why)), 0);
	ck_assert_int_eq(rescue_write(r, "dir/a b\n.txt", 10, "abcd", 4), 0);
	ck_assert_int_eq(rescue_write(r, "c", 0, "xyz", 3), 0);
	ck_assert_int_eq(rescue_write(r, "../escape", 0, "no", 2), -EINVAL);
	ck_assert_int_eq(rescue_write(r, "/abs", 0, "no", 2), -EINVAL);
	ck_assert_int_eq(rescue_write(r, RESCUE_MANIFEST, 0, "no", 2), -EINVAL);
	rescue_note(r, "c", "truncate %d %d", 1, 2);
	rescue_note(r, "c", "size %d", 3);
	g_autofree char *dir = g_strdup(rescue_dir(r));
	ck_assert_int_eq(rescue_close(r), 0);
	ck_assert_int_eq(rescue_read(dir, seen, o), 0);
	ck_assert_str_eq(o->str, "dir/a b\n.txt|14|10+4|\nc|3|0+3|truncate 1 2; size 3\n");
	g_autofree char *p = g_build_filename(dir, "dir", "a b\n.txt", NULL);
	ck_assert(g_file_get_contents(p, &data, NULL, NULL));
	ck_assert(memcmp(data + 10, "abcd", 4) == 0);
	ck_assert_int_eq(rescue_list(base, count, &n, &found), 0);
	ck_assert(found);
	ck_assert_int_eq(n, 1);
	/* A manifest that is not ours is not read. */
	g_autofree char *m = g_build_filename(dir, RESCUE_MANIFEST, NULL);
	ck_assert(g_file_set_contents(m, "hello\n", -1, NULL));
	ck_assert_int_eq(rescue_read(dir, seen, o), -EBADMSG);
	g_autofree char *cmd = g_strdup_printf("rm -rf '%s'", base);
	ck_assert_int_eq(system(cmd), 0);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("medium");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_ext);
	tcase_add_test(tc, test_fat);
	tcase_add_test(tc, test_rescue_round_trip);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
