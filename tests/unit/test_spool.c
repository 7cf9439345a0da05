/*
 * The spool manager (sched/spool.c): append and replay across segments,
 * sequence numbers across runs, reclaim by per-file low-water marks, torn
 * tails, damage in the middle (moved aside, later segments held), the lock,
 * media side by side, spool_list's figures, the read-only scan, discard,
 * the medium keys, group commit from threads.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glib.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "spool.h"

#define MEDIUM "uuid:2f1c5a9e-0d3b-4f7a-9c61-5b8e2d4a7f10"
#define MEDIUM2 "uuid:0000aaaa-1111-2222-3333-444455556666"
#define SMALL_SEG 1024

static char *dpath; /* the spool dir of a test */
static char key1[SPOOL_KEY_MAX + 1];

static void rm_tree(const char *path)
{
	g_autofree char *cmd = g_strdup_printf("rm -rf '%s'", path);

	ck_assert_int_eq(system(cmd), 0);
}

static void setup(void)
{
	dpath = g_dir_make_tmp("spool-XXXXXX", NULL);
	ck_assert_ptr_nonnull(dpath);
	ck_assert_int_eq(spool_medium_key(MEDIUM, key1), 0);
}

static void teardown(void)
{
	rm_tree(dpath);
	g_free(dpath);
}

/* ---- helpers ---- */

static char *mpath(const char *key, const char *name)
{
	return g_strdup_printf("%s/%s/%s", dpath, key, name);
}

static struct spool *open_ok(const char *medium)
{
	struct spool_medium_desc d = {
	    .label = "ZIP-100", .source = "/dev/sdz1", .size = 1 << 20};
	char why[SPOOL_WHY_MAX] = "";
	struct spool *sp;
	int r = spool_open(dpath, medium, &d, &sp, why);

	ck_assert_msg(r == 0, "spool_open: %d %s", r, why);
	return sp;
}

static int cmp_names(gconstpointer a, gconstpointer b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static GPtrArray *segs(const char *key)
{
	GPtrArray *a = g_ptr_array_new_with_free_func(g_free);
	g_autofree char *dir = g_strdup_printf("%s/%s", dpath, key);
	DIR *d = opendir(dir);
	struct dirent *e;

	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d)))
		if (g_str_has_suffix(e->d_name, ".spj"))
			g_ptr_array_add(a, g_strdup(e->d_name));
	closedir(d);
	g_ptr_array_sort(a, cmp_names);
	return a;
}

static guint nsegs(const char *key)
{
	g_autoptr(GPtrArray) a = segs(key);

	return a->len;
}

static bool exists(const char *key, const char *name)
{
	g_autofree char *p = mpath(key, name);

	return access(p, F_OK) == 0;
}

static GBytes *slurp(const char *key, const char *name)
{
	g_autofree char *p = mpath(key, name);
	char *data;
	gsize len;

	ck_assert_msg(g_file_get_contents(p, &data, &len, NULL), "read %s", p);
	return g_bytes_new_take(data, len);
}

static off_t fsize(const char *key, const char *name)
{
	g_autofree char *p = mpath(key, name);
	struct stat st;

	ck_assert_int_eq(stat(p, &st), 0);
	return st.st_size;
}

/* Record i's content: a deterministic mix of types (WRITE mostly). */
struct rec {
	struct spj_record r;
	char path[64];
	uint8_t payload[600];
};

static void make_rec(struct rec *x, unsigned i)
{
	memset(x, 0, sizeof(*x));
	snprintf(x->path, sizeof(x->path), "dir%u/file%u", i % 3, i % 5);
	x->r.path = x->path;
	switch (i % 7) {
	case 3:
		x->r.type = SPJ_TRUNCATE;
		x->r.offset = i * 10;
		break;
	case 5:
		x->r.type = SPJ_TIMES;
		spj_times_pack(x->payload, (int64_t)i * 1000, SPJ_TIME_OMIT);
		x->r.payload_len = SPJ_TIMES_SIZE;
		break;
	case 6:
		x->r.type = SPJ_RENAME;
		x->r.payload_len = (size_t)snprintf((char *)x->payload,
						    sizeof(x->payload), "moved/%u", i);
		break;
	default:
		x->r.type = SPJ_WRITE;
		x->r.offset = i * 100;
		x->r.length = x->r.payload_len = 1 + (i * 37) % 500;
		for (size_t k = 0; k < x->r.payload_len; k++)
			x->payload[k] = (uint8_t)(i + k);
	}
}

static uint64_t append_i(struct spool *sp, uint64_t key, unsigned i)
{
	struct rec x;
	uint64_t seq = 0;

	make_rec(&x, i);
	ck_assert_int_eq(spool_append(sp, key, &x.r, x.payload, &seq), 0);
	return seq;
}

static void check_rec(const struct spj_record *r, const void *payload, unsigned i)
{
	struct rec x;

	make_rec(&x, i);
	ck_assert_int_eq(r->type, x.r.type);
	ck_assert_str_eq(r->path, x.path);
	ck_assert_uint_eq(r->offset, x.r.offset);
	ck_assert_uint_eq(r->length, x.r.length);
	ck_assert_uint_eq(r->payload_len, x.r.payload_len);
	ck_assert(memcmp(payload, x.payload, x.r.payload_len) == 0);
}

/* Replay everything: the records must be numbered first.. and be make_rec
 * of first-1..; the count, and the end result. */
static unsigned replay_all(struct spool *sp, uint64_t first, int *end,
			   struct spool_damage *dmg)
{
	struct spool_replay *it;
	struct spj_record r;
	const void *p;
	unsigned n = 0;
	int res;

	ck_assert_int_eq(spool_replay_begin(sp, &it), 0);
	while ((res = spool_replay_next(it, &r, &p)) == SPOOL_REC) {
		ck_assert_uint_eq(r.seq, first + n);
		check_rec(&r, p, (unsigned)(first + n - 1));
		n++;
	}
	if (dmg && res == SPOOL_DAMAGED)
		*dmg = *spool_replay_damage(it);
	spool_replay_end(it);
	*end = res;
	return n;
}

/* ---- tests ---- */

START_TEST(test_round_trip_segments)
{
	struct spool *sp = open_ok(MEDIUM);
	struct spool_stats st;
	uint64_t seq;
	int end;

	spool_set_segment_max(sp, SMALL_SEG);
	for (unsigned i = 0; i < 60; i++) {
		seq = append_i(sp, 1 + i % 4, i);
		ck_assert_uint_eq(seq, i + 1);
	}
	ck_assert_int_eq(spool_sync(sp), 0);
	spool_get_stats(sp, &st);
	ck_assert_uint_ge(st.segments, 5);
	ck_assert_uint_eq(st.bytes, spool_bytes(sp));
	{
		g_autoptr(GPtrArray) names = segs(key1);
		uint64_t sum = 0;
		ck_assert_uint_eq(names->len, st.segments);
		/* named by their first record, in hex */
		ck_assert_str_eq(names->pdata[0], "0000000000000001.spj");
		for (guint i = 0; i < names->len; i++)
			sum += (uint64_t)fsize(key1, names->pdata[i]);
		ck_assert_uint_eq(sum, st.bytes);
	}
	ck_assert_int_eq(spool_close(sp), 0);

	sp = open_ok(MEDIUM);
	spool_get_stats(sp, &st);
	ck_assert(st.replay_due);
	ck_assert_uint_ge(st.pending, 5);
	ck_assert_uint_eq(st.next_seq, 61);
	{
		struct rec x;
		make_rec(&x, 0);
		ck_assert_int_eq(spool_append(sp, 1, &x.r, x.payload, NULL), -EAGAIN);
	}
	ck_assert_uint_eq(replay_all(sp, 1, &end, NULL), 60);
	ck_assert_int_eq(end, SPOOL_DONE);
	spool_get_stats(sp, &st);
	ck_assert(!st.replay_due);
	ck_assert_uint_eq(st.pending, 0);
	ck_assert_uint_eq(append_i(sp, 9, 60), 61);
	ck_assert_int_eq(spool_close(sp), 0);
}
END_TEST

START_TEST(test_seq_continuity)
{
	struct spool *sp = open_ok(MEDIUM);
	int end;

	/* Nothing pending: appends at once, from 1. */
	for (unsigned i = 0; i < 5; i++)
		ck_assert_uint_eq(append_i(sp, 7, i), i + 1);
	ck_assert_int_eq(spool_close(sp), 0);

	sp = open_ok(MEDIUM);
	ck_assert_uint_eq(replay_all(sp, 1, &end, NULL), 5);
	ck_assert_int_eq(end, SPOOL_DONE);
	ck_assert_uint_eq(append_i(sp, 7, 5), 6);
	ck_assert_int_eq(spool_close(sp), 0);

	/* The replayed records were not said to be on the medium: again. */
	sp = open_ok(MEDIUM);
	ck_assert_uint_eq(replay_all(sp, 1, &end, NULL), 6);
	ck_assert_uint_eq(append_i(sp, 7, 6), 7);
	/* Now they are: every segment but the active one goes. */
	ck_assert_int_eq(spool_file_done(sp, SPOOL_REPLAY_KEY, UINT64_MAX), 0);
	{
		g_autoptr(GPtrArray) names = segs(key1);
		ck_assert_uint_eq(names->len, 1);
		ck_assert_str_eq(names->pdata[0], "0000000000000007.spj");
	}
	ck_assert_int_eq(spool_close(sp), 0);
	sp = open_ok(MEDIUM);
	ck_assert_uint_eq(replay_all(sp, 7, &end, NULL), 1);
	ck_assert_uint_eq(append_i(sp, 7, 7), 8);
	ck_assert_int_eq(spool_close(sp), 0);
}
END_TEST

START_TEST(test_reclaim)
{
	struct spool *sp = open_ok(MEDIUM);
	uint64_t a1, a2, a3, b1, b2, b3;
	uint64_t before;

	/* seg 1: A A   seg 2: A B   seg 3 (active): B */
	a1 = append_i(sp, 'A', 0);
	a2 = append_i(sp, 'A', 1);
	ck_assert_int_eq(spool_rotate(sp), 0);
	a3 = append_i(sp, 'A', 2);
	b1 = append_i(sp, 'B', 3);
	ck_assert_int_eq(spool_rotate(sp), 0);
	b2 = append_i(sp, 'B', 4);
	ck_assert_uint_eq(nsegs(key1), 3);
	ck_assert(a1 < a2);

	/* A's records up to a2: seg 1 is all on the medium; seg 2 is not. */
	before = spool_bytes(sp);
	ck_assert_int_eq(spool_file_done(sp, 'A', a2), 0);
	ck_assert(!exists(key1, "0000000000000001.spj"));
	ck_assert(exists(key1, "0000000000000003.spj"));
	ck_assert_uint_lt(spool_bytes(sp), before);
	/* A entirely: seg 2 still has B. */
	ck_assert_int_eq(spool_file_done(sp, 'A', a3), 0);
	ck_assert(exists(key1, "0000000000000003.spj"));
	/* B up to b1 (its entry in seg 2): seg 2 goes; seg 3, active, stays. */
	ck_assert_int_eq(spool_file_done(sp, 'B', b1), 0);
	ck_assert(!exists(key1, "0000000000000003.spj"));
	ck_assert(exists(key1, "0000000000000005.spj"));
	/* A low water below a segment's entry keeps it. */
	b3 = append_i(sp, 'B', 5);
	ck_assert_int_eq(spool_rotate(sp), 0);
	append_i(sp, 'C', 6);
	ck_assert_int_eq(spool_file_done(sp, 'B', b2), 0);
	ck_assert(exists(key1, "0000000000000005.spj")); /* b3 is in it */
	ck_assert_int_eq(spool_file_done(sp, 'B', b3), 0);
	ck_assert(!exists(key1, "0000000000000005.spj"));
	/* Every file done: the active segment is never deleted... */
	ck_assert_int_eq(spool_forget_file(sp, 'C'), 0);
	ck_assert(exists(key1, "0000000000000007.spj"));
	/* ...until it is closed. */
	ck_assert_int_eq(spool_rotate(sp), 0);
	ck_assert_uint_eq(nsegs(key1), 0);
	ck_assert_uint_eq(spool_bytes(sp), 0);
	ck_assert_int_eq(spool_close(sp), 0);
	/* Numbering goes on with no segment left (medium.info keeps it). */
	sp = open_ok(MEDIUM);
	ck_assert_uint_eq(append_i(sp, 'A', 0), 8);
	ck_assert_int_eq(spool_close(sp), 0);
}
END_TEST

static uint64_t record_offset(const char *key, const char *name, unsigned nth);

START_TEST(test_torn_tail_cut)
{
	struct spool *sp = open_ok(MEDIUM);
	g_autofree char *seg = NULL;
	off_t full, cut;
	int end;

	for (unsigned i = 0; i < 3; i++)
		append_i(sp, 1, i);
	ck_assert_int_eq(spool_close(sp), 0);
	seg = mpath(key1, "0000000000000001.spj");
	full = fsize(key1, "0000000000000001.spj");
	ck_assert_int_eq(truncate(seg, full - 5), 0); /* the last record torn */

	sp = open_ok(MEDIUM);
	ck_assert_uint_eq(replay_all(sp, 1, &end, NULL), 2);
	ck_assert_int_eq(end, SPOOL_DONE);
	cut = fsize(key1, "0000000000000001.spj");
	ck_assert_int_lt(cut, full - 5); /* cut back to the end of record 2 */
	ck_assert_int_eq(cut, (off_t)record_offset(key1, "0000000000000001.spj", 2));
	/* Numbers are never used twice: 3 was, by the record cut off. */
	ck_assert_uint_eq(append_i(sp, 1, 2), 4);
	ck_assert_int_eq(spool_close(sp), 0);

	sp = open_ok(MEDIUM);
	{
		struct spool_replay *it;
		struct spj_record r;
		const void *p;
		uint64_t want[] = {1, 2, 4};
		unsigned n = 0;

		ck_assert_int_eq(spool_replay_begin(sp, &it), 0);
		while ((end = spool_replay_next(it, &r, &p)) == SPOOL_REC) {
			ck_assert_uint_lt(n, 3);
			ck_assert_uint_eq(r.seq, want[n]);
			check_rec(&r, p, n++);
		}
		ck_assert_int_eq(end, SPOOL_DONE);
		ck_assert_uint_eq(n, 3);
		spool_replay_end(it);
	}
	ck_assert_int_eq(spool_close(sp), 0);
}
END_TEST

/* The file offset where record `nth` (0-based) of a segment begins. */
static uint64_t record_offset(const char *key, const char *name, unsigned nth)
{
	g_autofree char *dir = g_strdup_printf("%s/%s", dpath, key);
	int dfd = open(dir, O_RDONLY | O_DIRECTORY);
	struct spj_reader *rd;
	struct spj_record r;
	const void *p;
	uint64_t off;

	ck_assert_int_eq(spj_reader_open(dfd, name, &rd), 0);
	off = spj_reader_info(rd)->header_size;
	for (unsigned i = 0; i < nth; i++) {
		ck_assert_int_eq(spj_next(rd, &r, &p), SPJ_OK);
		off = spj_reader_offset(rd);
	}
	spj_reader_close(rd);
	close(dfd);
	return off;
}

static void flip_byte(const char *key, const char *name, uint64_t off)
{
	g_autofree char *p = mpath(key, name);
	int fd = open(p, O_RDWR);
	uint8_t b;

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(pread(fd, &b, 1, (off_t)off), 1);
	b ^= 0x40;
	ck_assert_int_eq(pwrite(fd, &b, 1, (off_t)off), 1);
	close(fd);
}

/* A segment whose records are all on the medium waits behind an older one
 * that is not: a replay must find a whole suffix of the history (a file's
 * truncate in the older one, replayed without the writes after it, would cut
 * them off). */
START_TEST(test_reclaim_oldest_first)
{
	struct spool *sp = open_ok(MEDIUM);
	uint64_t a1, b1, a2;

	/* seg 1: A B   seg 2: A   seg 3 (active): C */
	a1 = append_i(sp, 'A', 0);
	b1 = append_i(sp, 'B', 1);
	ck_assert_int_eq(spool_rotate(sp), 0);
	a2 = append_i(sp, 'A', 2);
	ck_assert_int_eq(spool_rotate(sp), 0);
	append_i(sp, 'C', 3);
	ck_assert(a1 < b1 && b1 < a2);
	ck_assert_int_eq(spool_file_done(sp, 'A', a2), 0);
	ck_assert(exists(key1, "0000000000000001.spj"));
	ck_assert(exists(key1, "0000000000000003.spj")); /* all done, but behind seg 1 */
	ck_assert_int_eq(spool_file_done(sp, 'B', b1), 0);
	ck_assert(!exists(key1, "0000000000000001.spj"));
	ck_assert(!exists(key1, "0000000000000003.spj"));
	ck_assert(exists(key1, "0000000000000004.spj"));
	ck_assert_int_eq(spool_close(sp), 0);
}
END_TEST

START_TEST(test_corrupt_middle)
{
	struct spool *sp = open_ok(MEDIUM);
	struct spool_damage dmg;
	struct spool_stats st;
	g_autoptr(GBytes) seg3_before = NULL, seg3_after = NULL;
	g_autofree char *info = NULL;
	uint64_t bad_off;
	int end;

	/* Three segments of three records: 1-3, 4-6, 7-9. */
	for (unsigned i = 0; i < 9; i++) {
		append_i(sp, 1, i);
		if (i % 3 == 2)
			ck_assert_int_eq(spool_rotate(sp), 0);
	}
	ck_assert_int_eq(spool_close(sp), 0);
	/* Record 5 (the 2nd of segment 2): a bit flipped inside its body. */
	bad_off = record_offset(key1, "0000000000000004.spj", 1);
	flip_byte(key1, "0000000000000004.spj", bad_off + SPJ_REC_HDR_SIZE + 2);
	seg3_before = slurp(key1, "0000000000000007.spj");

	sp = open_ok(MEDIUM);
	ck_assert_uint_eq(replay_all(sp, 1, &end, &dmg), 4); /* 1, 2, 3, 4 */
	ck_assert_int_eq(end, SPOOL_DAMAGED);
	ck_assert_str_eq(dmg.segment, "0000000000000004.spj");
	ck_assert(g_str_has_prefix(dmg.moved_to, "0000000000000004.spj.corrupt-"));
	ck_assert_uint_eq(dmg.offset, bad_off);
	ck_assert_uint_eq(dmg.held, 1);
	ck_assert_msg(strstr(dmg.why, "checksum"), "why: %s", dmg.why);
	/* Segment 2 moved aside, segment 3 untouched and still there. */
	ck_assert(!exists(key1, "0000000000000004.spj"));
	ck_assert(exists(key1, dmg.moved_to));
	seg3_after = slurp(key1, "0000000000000007.spj");
	ck_assert(g_bytes_equal(seg3_before, seg3_after));
	info = mpath(key1, SPOOL_INFO_NAME);
	{
		g_autofree char *text = NULL;
		ck_assert(g_file_get_contents(info, &text, NULL, NULL));
		ck_assert_msg(strstr(text, "\nheld=4-10\n"), "medium.info: %s", text);
	}
	spool_get_stats(sp, &st);
	ck_assert_uint_eq(st.held, 1);
	ck_assert_uint_eq(st.set_aside, 1);
	ck_assert(!st.replay_due);
	/* Writes go on, numbered past everything held. */
	ck_assert_uint_eq(append_i(sp, 2, 9), 10);
	ck_assert_int_eq(spool_close(sp), 0);

	/* Next run: segment 1 (not yet said to be on the medium) and the new
	 * one; segment 3 stays held, segment 2 aside. */
	sp = open_ok(MEDIUM);
	spool_get_stats(sp, &st);
	ck_assert_uint_eq(st.held, 1);
	ck_assert_uint_eq(st.set_aside, 1);
	ck_assert_uint_eq(st.pending, 2);
	{
		struct spool_replay *it;
		struct spj_record r;
		const void *p;
		uint64_t want[] = {1, 2, 3, 10};
		unsigned n = 0;
		int res;

		ck_assert_int_eq(spool_replay_begin(sp, &it), 0);
		while ((res = spool_replay_next(it, &r, &p)) == SPOOL_REC) {
			ck_assert_uint_lt(n, 4);
			ck_assert_uint_eq(r.seq, want[n]);
			check_rec(&r, p, (unsigned)want[n] - 1);
			n++;
		}
		ck_assert_int_eq(res, SPOOL_DONE);
		ck_assert_uint_eq(n, 4);
		spool_replay_end(it);
	}
	g_bytes_unref(seg3_after);
	seg3_after = slurp(key1, "0000000000000007.spj");
	ck_assert(g_bytes_equal(seg3_before, seg3_after));
	/* Everything done: the held segment and the aside one stay. */
	ck_assert_int_eq(spool_file_done(sp, SPOOL_REPLAY_KEY, UINT64_MAX), 0);
	ck_assert_int_eq(spool_close(sp), 0);
	ck_assert(exists(key1, "0000000000000007.spj"));
	ck_assert(exists(key1, dmg.moved_to));
	ck_assert(!exists(key1, "0000000000000001.spj"));
}
END_TEST

START_TEST(test_torn_not_last_is_damage)
{
	struct spool *sp = open_ok(MEDIUM);
	struct spool_damage dmg;
	int end;

	for (unsigned i = 0; i < 6; i++) {
		append_i(sp, 1, i);
		if (i == 2)
			ck_assert_int_eq(spool_rotate(sp), 0);
	}
	ck_assert_int_eq(spool_close(sp), 0);
	{
		g_autofree char *p = mpath(key1, "0000000000000001.spj");
		ck_assert_int_eq(truncate(p, fsize(key1, "0000000000000001.spj") - 3), 0);
	}
	sp = open_ok(MEDIUM);
	ck_assert_uint_eq(replay_all(sp, 1, &end, &dmg), 2);
	ck_assert_int_eq(end, SPOOL_DAMAGED);
	ck_assert_str_eq(dmg.segment, "0000000000000001.spj");
	ck_assert_uint_eq(dmg.held, 1);
	ck_assert_msg(strstr(dmg.why, "not the last"), "why: %s", dmg.why);
	ck_assert(exists(key1, "0000000000000004.spj"));
	ck_assert_int_eq(spool_close(sp), 0);
}
END_TEST

START_TEST(test_other_medium_segment)
{
	char key2[SPOOL_KEY_MAX + 1];
	struct spool *sp = open_ok(MEDIUM2);
	struct spool_damage dmg;
	int end;

	ck_assert_int_eq(spool_medium_key(MEDIUM2, key2), 0);
	append_i(sp, 1, 0);
	ck_assert_int_eq(spool_close(sp), 0);
	sp = open_ok(MEDIUM);
	ck_assert_int_eq(spool_close(sp), 0);
	/* Medium 2's segment put into medium 1's directory. */
	{
		g_autofree char *from = mpath(key2, "0000000000000001.spj");
		g_autofree char *to = mpath(key1, "0000000000000001.spj");
		ck_assert_int_eq(rename(from, to), 0);
	}
	sp = open_ok(MEDIUM);
	ck_assert_uint_eq(replay_all(sp, 1, &end, &dmg), 0);
	ck_assert_int_eq(end, SPOOL_DAMAGED);
	ck_assert_msg(strstr(dmg.why, "another medium"), "why: %s", dmg.why);
	ck_assert_int_eq(spool_close(sp), 0);
}
END_TEST

START_TEST(test_short_header_last)
{
	struct spool *sp = open_ok(MEDIUM);
	int end;

	append_i(sp, 1, 0);
	ck_assert_int_eq(spool_close(sp), 0);
	/* A crash while the next segment was begun. */
	{
		/* The magic and two bytes of the version: a header cut short. */
		static const char torn[10] = SPJ_MAGIC "\1";
		g_autofree char *p = mpath(key1, "0000000000000002.spj");
		ck_assert(g_file_set_contents(p, torn, sizeof(torn), NULL));
	}
	sp = open_ok(MEDIUM);
	ck_assert_uint_eq(replay_all(sp, 1, &end, NULL), 1);
	ck_assert_int_eq(end, SPOOL_DONE);
	ck_assert(!exists(key1, "0000000000000002.spj"));
	ck_assert_uint_ge(append_i(sp, 1, 1), 3);
	ck_assert_int_eq(spool_close(sp), 0);
}
END_TEST

START_TEST(test_lock_and_two_media)
{
	struct spool *a = open_ok(MEDIUM), *a2 = NULL, *b;
	char why[SPOOL_WHY_MAX] = "";
	int end;

	ck_assert_int_eq(spool_open(dpath, MEDIUM, NULL, &a2, why), -EBUSY);
	ck_assert_ptr_null(a2);
	ck_assert_msg(strstr(why, "in use") && strstr(why, key1), "why: %s", why);
	b = open_ok(MEDIUM2); /* another medium, same DIR: independent */
	append_i(a, 1, 0);
	append_i(a, 1, 1);
	ck_assert_uint_eq(append_i(b, 1, 0), 1);
	ck_assert_int_eq(spool_close(a), 0);
	ck_assert_int_eq(spool_close(b), 0);
	/* The lock goes with the close. */
	a = open_ok(MEDIUM);
	b = open_ok(MEDIUM2);
	ck_assert_uint_eq(replay_all(a, 1, &end, NULL), 2);
	ck_assert_uint_eq(replay_all(b, 1, &end, NULL), 1);
	/* A scan that wants the lock is refused while a spool has it. */
	{
		struct spool_scan *sc;
		ck_assert_int_eq(spool_scan_open(dpath, key1, SPOOL_SCAN_LOCK, &sc, why),
				 -EBUSY);
		ck_assert_int_eq(spool_discard(dpath, key1, why), -EBUSY);
		ck_assert_msg(strstr(why, "in use"), "why: %s", why);
	}
	ck_assert_int_eq(spool_close(a), 0);
	ck_assert_int_eq(spool_close(b), 0);
}
END_TEST

struct listed {
	GPtrArray *infos; /* struct spool_medium_info copies */
};

static int collect(const struct spool_medium_info *mi, void *ctx)
{
	struct listed *l = ctx;

	g_ptr_array_add(l->infos, g_memdup2(mi, sizeof(*mi)));
	return 0;
}

static void write_rec(struct spool *sp, uint64_t key, enum spj_type t, const char *path,
		      uint64_t off, size_t len)
{
	struct spj_record r = {.type = t, .path = path, .offset = off};
	g_autofree uint8_t *data = g_malloc0(len ? len : 1);

	if (t == SPJ_WRITE)
		r.length = r.payload_len = len;
	ck_assert_int_eq(spool_append(sp, key, &r, data, NULL), 0);
}

START_TEST(test_list_figures)
{
	struct listed l = {g_ptr_array_new_with_free_func(g_free)};
	char why[SPOOL_WHY_MAX] = "";
	struct spool *sp = open_ok(MEDIUM), *sp2;
	const struct spool_medium_info *mi;

	write_rec(sp, 1, SPJ_WRITE, "a", 0, 1000);
	write_rec(sp, 1, SPJ_WRITE, "a", 1000, 24);
	ck_assert_int_eq(spool_rotate(sp), 0);
	write_rec(sp, 2, SPJ_WRITE, "d/b", 0, 500);
	write_rec(sp, 2, SPJ_TRUNCATE, "d/b", 100, 0);
	write_rec(sp, 3, SPJ_UNLINK, "c", 0, 0);
	ck_assert_int_eq(spool_sync(sp), 0);
	sp2 = open_ok(MEDIUM2);
	ck_assert_int_eq(spool_close(sp2), 0);
	/* A directory that is not a medium's is not listed. */
	{
		g_autofree char *p = g_strdup_printf("%s/not-a-medium", dpath);
		ck_assert_int_eq(mkdir(p, 0700), 0);
	}

	ck_assert_int_eq(spool_list(dpath, collect, &l, why), 0);
	ck_assert_uint_eq(l.infos->len, 2);
	mi = l.infos->pdata[0]; /* keys sort: uuid%3A0000... first */
	ck_assert_str_eq(mi->id, MEDIUM2);
	ck_assert_uint_eq(mi->records, 0);
	ck_assert_uint_eq(mi->segments, 0);
	ck_assert_int_eq(mi->locked_by, 0);
	mi = l.infos->pdata[1];
	ck_assert_str_eq(mi->id, MEDIUM);
	ck_assert_str_eq(mi->key, key1);
	ck_assert(mi->have_info);
	ck_assert_str_eq(mi->label, "ZIP-100");
	ck_assert_str_eq(mi->source, "/dev/sdz1");
	ck_assert_uint_eq(mi->size, 1 << 20);
	ck_assert_uint_eq(mi->segments, 2);
	ck_assert_uint_eq(mi->held, 0);
	ck_assert_uint_eq(mi->records, 5);
	ck_assert_uint_eq(mi->files, 3);
	ck_assert_uint_eq(mi->write_bytes, 1524);
	ck_assert_uint_eq(mi->disk_bytes, spool_bytes(sp));
	ck_assert_int_gt(mi->oldest, 0);
	ck_assert_int_le(mi->oldest, time(NULL));
	ck_assert_int_gt(mi->first_use, 0);
	ck_assert_str_eq(mi->damage, "");
	/* The spool is open here: /proc/locks (or /proc/self/fd) says who. */
	if (access("/proc/self/fd", R_OK) == 0)
		ck_assert_int_eq(mi->locked_by, getpid());
	ck_assert_int_eq(spool_close(sp), 0);

	ck_assert_int_eq(spool_list("/nonexistent/spool", collect, &l, why), -ENOENT);
	ck_assert_msg(strstr(why, "/nonexistent/spool"), "why: %s", why);
	g_ptr_array_unref(l.infos);
}
END_TEST

START_TEST(test_list_damage_and_scan)
{
	struct listed l = {g_ptr_array_new_with_free_func(g_free)};
	char why[SPOOL_WHY_MAX] = "";
	struct spool *sp = open_ok(MEDIUM);
	const struct spool_medium_info *mi;
	struct spool_scan *sc;
	struct spj_record r;
	const void *p;
	unsigned n = 0;
	int res;

	for (unsigned i = 0; i < 9; i++) {
		append_i(sp, 1, i);
		if (i % 3 == 2)
			ck_assert_int_eq(spool_rotate(sp), 0);
	}
	ck_assert_int_eq(spool_close(sp), 0);
	flip_byte(key1, "0000000000000004.spj",
		  record_offset(key1, "0000000000000004.spj", 1) + SPJ_REC_HDR_SIZE + 2);

	/* Before any replay: list reads past the damage, names it. */
	ck_assert_int_eq(spool_list(dpath, collect, &l, why), 0);
	mi = l.infos->pdata[0];
	ck_assert_uint_eq(mi->records, 7); /* 1-3, 4, 7-9 */
	ck_assert_msg(strstr(mi->damage, "0000000000000004.spj"), "damage: %s",
		      mi->damage);

	/* The scan stops at it, as a replay would, and moves nothing. */
	ck_assert_int_eq(spool_scan_open(dpath, key1, SPOOL_SCAN_LOCK, &sc, why), 0);
	while ((res = spool_scan_next(sc, &r, &p)) == SPOOL_REC)
		check_rec(&r, p, (unsigned)r.seq - 1), n++;
	ck_assert_int_eq(res, SPOOL_DAMAGED);
	ck_assert_uint_eq(n, 4);
	ck_assert_str_eq(spool_scan_damage(sc)->segment, "0000000000000004.spj");
	ck_assert_int_eq(spool_scan_next(sc, &r, &p), SPOOL_DONE);
	spool_scan_close(sc);
	ck_assert(exists(key1, "0000000000000004.spj"));

	/* A replay moves it aside and holds segment 3. */
	sp = open_ok(MEDIUM);
	{
		int end;
		replay_all(sp, 1, &end, NULL);
		ck_assert_int_eq(end, SPOOL_DAMAGED);
	}
	ck_assert_int_eq(spool_close(sp), 0);
	g_ptr_array_set_size(l.infos, 0);
	ck_assert_int_eq(spool_list(dpath, collect, &l, why), 0);
	mi = l.infos->pdata[0];
	ck_assert_uint_eq(mi->segments, 2);
	ck_assert_uint_eq(mi->held, 1);
	ck_assert_uint_eq(mi->set_aside, 1);
	ck_assert_uint_eq(mi->records, 6); /* 1-3 (live), 7-9 (held) */

	/* Scans: the live ones only by default; everything with the flags. */
	ck_assert_int_eq(spool_scan_open(dpath, key1, 0, &sc, why), 0);
	n = 0;
	while ((res = spool_scan_next(sc, &r, &p)) == SPOOL_REC)
		n++;
	ck_assert_int_eq(res, SPOOL_DONE);
	ck_assert_uint_eq(n, 3);
	ck_assert_uint_eq(spool_scan_skipped(sc), 2);
	spool_scan_close(sc);
	ck_assert_int_eq(spool_scan_open(dpath, key1,
					 SPOOL_SCAN_HELD | SPOOL_SCAN_SET_ASIDE |
					     SPOOL_SCAN_PAST_DAMAGE,
					 &sc, why),
			 0);
	n = 0;
	unsigned damaged = 0;
	while ((res = spool_scan_next(sc, &r, &p)) != SPOOL_DONE) {
		ck_assert_int_ge(res, 0);
		if (res == SPOOL_DAMAGED) {
			damaged++;
			continue;
		}
		check_rec(&r, p, (unsigned)r.seq - 1);
		n++;
	}
	ck_assert_uint_eq(n, 7);
	ck_assert_uint_eq(damaged, 1);
	spool_scan_close(sc);
	g_ptr_array_unref(l.infos);
}
END_TEST

START_TEST(test_find_and_discard)
{
	char key[SPOOL_KEY_MAX + 1], why[SPOOL_WHY_MAX] = "";
	struct spool *sp = open_ok(MEDIUM);

	append_i(sp, 1, 0);
	ck_assert_int_eq(spool_close(sp), 0);
	ck_assert_int_eq(spool_find_medium(dpath, MEDIUM, key, why), 0);
	ck_assert_str_eq(key, key1);
	ck_assert_int_eq(spool_find_medium(dpath, key1, key, why), 0); /* by key */
	ck_assert_str_eq(key, key1);
	ck_assert_int_eq(spool_find_medium(dpath, "uuid:nope", key, why), -ENOENT);
	ck_assert_msg(strstr(why, "no medium 'uuid:nope'"), "why: %s", why);
	ck_assert_int_eq(spool_discard(dpath, key1, why), 0);
	{
		g_autofree char *p = g_strdup_printf("%s/%s", dpath, key1);
		ck_assert_int_ne(access(p, F_OK), 0);
	}
	ck_assert_int_eq(spool_find_medium(dpath, MEDIUM, key, why), -ENOENT);
	ck_assert_int_eq(spool_discard(dpath, "../x", why), -EINVAL);
}
END_TEST

START_TEST(test_replay_track)
{
	struct spool *sp = open_ok(MEDIUM);
	struct spool_replay *it;
	struct spj_record r;
	const void *p;

	append_i(sp, 1, 0);
	append_i(sp, 1, 1);
	ck_assert_int_eq(spool_rotate(sp), 0);
	append_i(sp, 1, 2);
	ck_assert_int_eq(spool_close(sp), 0);
	sp = open_ok(MEDIUM);
	ck_assert_int_eq(spool_replay_begin(sp, &it), 0);
	{
		struct spool_replay *it2;
		ck_assert_int_eq(spool_replay_begin(sp, &it2), -EBUSY);
	}
	ck_assert_int_eq(spool_replay_track(it, 5), -EINVAL); /* nothing returned yet */
	/* Records 1 and 2 to file 5; record 3 left to SPOOL_REPLAY_KEY. */
	ck_assert_int_eq(spool_replay_next(it, &r, &p), SPOOL_REC);
	ck_assert_int_eq(spool_replay_track(it, 5), 0);
	ck_assert_int_eq(spool_replay_next(it, &r, &p), SPOOL_REC);
	ck_assert_int_eq(spool_replay_track(it, 5), 0);
	ck_assert_int_eq(spool_replay_track(it, SPOOL_REPLAY_KEY), -EINVAL);
	ck_assert_int_eq(spool_replay_next(it, &r, &p), SPOOL_REC);
	ck_assert_int_eq(spool_replay_next(it, &r, &p), SPOOL_DONE);
	ck_assert_int_eq(spool_replay_next(it, &r, &p), SPOOL_DONE);
	spool_replay_end(it);
	ck_assert_int_eq(spool_file_done(sp, 5, 2), 0);
	ck_assert(!exists(key1, "0000000000000001.spj"));
	ck_assert(exists(key1, "0000000000000003.spj"));
	ck_assert_int_eq(spool_file_done(sp, SPOOL_REPLAY_KEY, 3), 0);
	ck_assert(!exists(key1, "0000000000000003.spj"));
	ck_assert_int_eq(spool_close(sp), 0);
}
END_TEST

START_TEST(test_bad_records_and_args)
{
	struct spool *sp = open_ok(MEDIUM), *x;
	struct spj_record r = {
	    .type = SPJ_WRITE, .path = "../escape", .length = 1, .payload_len = 1};
	char why[SPOOL_WHY_MAX] = "";

	ck_assert_int_eq(spool_append(sp, 1, &r, "x", NULL), -EINVAL);
	ck_assert_int_eq(spool_append(sp, SPOOL_REPLAY_KEY, &r, "x", NULL), -EINVAL);
	r.path = "ok";
	ck_assert_int_eq(spool_append(sp, 1, &r, "x", NULL), 0);
	ck_assert_int_eq(spool_close(sp), 0);
	ck_assert_int_eq(spool_open(dpath, "", NULL, &x, why), -EINVAL);
	{
		char big[SPJ_MEDIUM_ID_MAX + 2];
		memset(big, 'a', sizeof(big) - 1);
		big[sizeof(big) - 1] = '\0';
		ck_assert_int_eq(spool_open(dpath, big, NULL, &x, why), -ENAMETOOLONG);
	}
	/* A DIR whose parent is missing is not made. */
	{
		g_autofree char *d = g_strdup_printf("%s/no/such", dpath);
		ck_assert_int_eq(spool_open(d, MEDIUM, NULL, &x, why), -ENOENT);
		ck_assert_msg(strstr(why, d), "why: %s", why);
	}
}
END_TEST

START_TEST(test_medium_keys)
{
	char k[SPOOL_KEY_MAX + 1], k2[SPOOL_KEY_MAX + 1], id[SPJ_MEDIUM_ID_MAX + 1];
	char big[SPJ_MEDIUM_ID_MAX + 1];

	ck_assert_int_eq(spool_medium_key("uuid:2F1c-a_b.c", k), 0);
	ck_assert_str_eq(k, "uuid%3A2F1c-a_b.c");
	ck_assert_int_eq(spool_medium_key(".hidden", k), 0);
	ck_assert_str_eq(k, "%2Ehidden");
	ck_assert_int_eq(spool_medium_key("..", k), 0);
	ck_assert_str_eq(k, "%2E.");
	ck_assert_int_eq(spool_medium_key("a/b~%", k), 0);
	ck_assert_str_eq(k, "a%2Fb%7E%25");
	ck_assert_int_eq(spool_medium_key("", k), -EINVAL);
	/* Long: cut, with a hash of the whole id; never split inside a %XX. */
	memset(big, 0xff, SPJ_MEDIUM_ID_MAX);
	big[SPJ_MEDIUM_ID_MAX] = '\0';
	ck_assert_int_eq(spool_medium_key(big, k), 0);
	ck_assert_uint_le(strlen(k), SPOOL_KEY_MAX);
	ck_assert_ptr_nonnull(strchr(k, '~'));
	ck_assert_uint_eq(strlen(strchr(k, '~')), 17);
	ck_assert_uint_eq((strchr(k, '~') - k) % 3, 0);
	big[SPJ_MEDIUM_ID_MAX - 1] = 0xfe;
	ck_assert_int_eq(spool_medium_key(big, k2), 0);
	ck_assert_str_ne(k, k2);

	ck_assert_int_eq(spool_medium_id(id, "2f1c-0d3b", 0, 0, NULL), 0);
	ck_assert_str_eq(id, "uuid:2f1c-0d3b");
	ck_assert_int_eq(spool_medium_id(id, NULL, 0xabcdef, 100 << 20, "ZIP 100"), 0);
	ck_assert_str_eq(id, "fsid:0000000000abcdef:size:104857600:label:ZIP 100");
	memset(big, 'L', SPJ_MEDIUM_ID_MAX);
	ck_assert_int_eq(spool_medium_id(id, "", 1, 1, big), 0);
	ck_assert_uint_eq(strlen(id), SPJ_MEDIUM_ID_MAX);
}
END_TEST

START_TEST(test_long_medium_id)
{
	char id[SPJ_MEDIUM_ID_MAX + 1], key[SPOOL_KEY_MAX + 1];
	struct spool *sp;
	int end;

	memset(id, 'x', SPJ_MEDIUM_ID_MAX);
	id[SPJ_MEDIUM_ID_MAX] = '\0';
	ck_assert_int_eq(spool_medium_key(id, key), 0);
	sp = open_ok(id);
	append_i(sp, 1, 0);
	ck_assert_int_eq(spool_close(sp), 0);
	sp = open_ok(id);
	ck_assert_uint_eq(replay_all(sp, 1, &end, NULL), 1);
	ck_assert_int_eq(spool_close(sp), 0);
	/* Another id with the same key (a forged collision) is refused. */
	{
		g_autofree char *info =
		    g_strdup_printf("%s/%s/%s", dpath, key, SPOOL_INFO_NAME);
		g_autofree char *text = NULL;
		char why[SPOOL_WHY_MAX] = "";
		ck_assert(g_file_get_contents(info, &text, NULL, NULL));
		text[strlen(
		    "# slowmedia spool: one medium's pending writes (do not edit)\n"
		    "version=1\nid=")] = 'y';
		ck_assert(g_file_set_contents(info, text, -1, NULL));
		ck_assert_int_eq(spool_open(dpath, id, NULL, &sp, why), -EEXIST);
		ck_assert_msg(strstr(why, "another medium"), "why: %s", why);
	}
}
END_TEST

struct thr {
	struct spool *sp;
	unsigned id;
	uint64_t seqs[200];
};

static void *writer_thread(void *arg)
{
	struct thr *t = arg;

	for (unsigned i = 0; i < G_N_ELEMENTS(t->seqs); i++) {
		struct rec x;
		make_rec(&x, t->id * 1000 + i);
		if (spool_append(t->sp, t->id, &x.r, x.payload, &t->seqs[i]) ||
		    spool_sync(t->sp))
			t->seqs[i] = 0;
	}
	return NULL;
}

START_TEST(test_threads_group_commit)
{
	struct spool *sp = open_ok(MEDIUM);
	struct thr t[4];
	pthread_t th[4];
	GHashTable *seen = g_hash_table_new(g_int64_hash, g_int64_equal);
	struct spool_replay *it;
	struct spj_record r;
	const void *p;
	unsigned n = 0;

	spool_set_segment_max(sp, 16 << 10); /* rotations under way too */
	for (unsigned i = 0; i < 4; i++) {
		t[i] = (struct thr){.sp = sp, .id = i + 1};
		ck_assert_int_eq(pthread_create(&th[i], NULL, writer_thread, &t[i]), 0);
	}
	for (unsigned i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	for (unsigned i = 0; i < 4; i++)
		for (unsigned k = 0; k < G_N_ELEMENTS(t[i].seqs); k++) {
			ck_assert_uint_ne(t[i].seqs[k], 0);
			ck_assert(!g_hash_table_contains(seen, &t[i].seqs[k]));
			g_hash_table_add(seen, &t[i].seqs[k]);
		}
	ck_assert_int_eq(spool_close(sp), 0);
	sp = open_ok(MEDIUM);
	ck_assert_int_eq(spool_replay_begin(sp, &it), 0);
	while (spool_replay_next(it, &r, &p) == SPOOL_REC) {
		ck_assert_uint_eq(r.seq, n + 1);
		n++;
	}
	spool_replay_end(it);
	ck_assert_uint_eq(n, 800);
	ck_assert_int_eq(spool_close(sp), 0);
	g_hash_table_unref(seen);
}
END_TEST

static Suite *spool_suite(void)
{
	Suite *s = suite_create("spool");
	TCase *tc = tcase_create("spool");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_round_trip_segments);
	tcase_add_test(tc, test_seq_continuity);
	tcase_add_test(tc, test_reclaim);
	tcase_add_test(tc, test_torn_tail_cut);
	tcase_add_test(tc, test_reclaim_oldest_first);
	tcase_add_test(tc, test_corrupt_middle);
	tcase_add_test(tc, test_torn_not_last_is_damage);
	tcase_add_test(tc, test_other_medium_segment);
	tcase_add_test(tc, test_short_header_last);
	tcase_add_test(tc, test_lock_and_two_media);
	tcase_add_test(tc, test_list_figures);
	tcase_add_test(tc, test_list_damage_and_scan);
	tcase_add_test(tc, test_find_and_discard);
	tcase_add_test(tc, test_replay_track);
	tcase_add_test(tc, test_bad_records_and_args);
	tcase_add_test(tc, test_medium_keys);
	tcase_add_test(tc, test_long_medium_id);
	tcase_add_test(tc, test_threads_group_commit);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(spool_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
