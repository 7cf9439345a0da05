/* The extent map: directed cases, then random operations checked against a byte model. */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "extents.h"

#define NO_COALESCE 0
#define BIG_COALESCE (1u << 20)

/* Each write is tagged; the byte at file offset pos written by tag t is pat(t, pos).
 * Tag 0 stands for the bytes already on the medium. */
static uint8_t pat(int tag, off_t pos)
{
	return (uint8_t)(tag * 37 + pos * 7 + (pos >> 8));
}

/* Write tag's bytes; returns extmap_write's answer. */
static int try_put(struct extmap *m, off_t off, size_t len, int tag, size_t coalesce)
{
	g_autofree uint8_t *d = g_malloc(len ? len : 1);

	for (size_t i = 0; i < len; i++)
		d[i] = pat(tag, off + (off_t)i);
	return extmap_write(m, off, d, len, coalesce);
}

static void put(struct extmap *m, off_t off, size_t len, int tag, size_t coalesce)
{
	ck_assert_int_eq(try_put(m, off, len, tag, coalesce), 0);
}

struct walk {
	GPtrArray *ext;
};

static gboolean collect(gpointer key, gpointer value, gpointer data)
{
	(void)key;
	g_ptr_array_add(data, value);
	return FALSE;
}

static GPtrArray *extents_of(const struct extmap *m)
{
	GPtrArray *a = g_ptr_array_new();

	g_tree_foreach(m->tree, collect, a);
	return a;
}

struct buf_seen {
	unsigned pieces, pins;
	size_t live;
};

/*
 * m->mem is what the map holds: each buffer its extents or pins use, once,
 * plus a node per extent; and each buffer's own counts (pieces, live bytes,
 * the file range its pieces lie in) are right.
 */
static void check_mem(const struct extmap *m, GPtrArray *a)
{
	g_autoptr(GHashTable) seen =
	    g_hash_table_new_full(g_direct_hash, g_direct_equal, NULL, g_free);
	GHashTableIter it;
	gpointer key, val;
	uint64_t mem = (uint64_t)a->len * EXT_NODE_BYTES;

	for (guint i = 0; i < a->len; i++) {
		const struct extent *e = a->pdata[i];
		struct buf_seen *s = g_hash_table_lookup(seen, e->buf);

		if (!s)
			g_hash_table_insert(seen, e->buf, s = g_new0(struct buf_seen, 1));
		s->pieces++;
		s->live += e->len;
		if (e->off < e->buf->lo || e->off + (off_t)e->len > e->buf->hi)
			ck_abort_msg("extent %lld+%zu outside its buffer's range [%lld, %lld)",
				     (long long)e->off, e->len, (long long)e->buf->lo,
				     (long long)e->buf->hi);
	}
	g_hash_table_iter_init(&it, m->pinned);
	while (g_hash_table_iter_next(&it, &key, &val)) {
		GPtrArray *bufs = val;

		for (guint i = 0; i < bufs->len; i++) {
			struct buf_seen *s = g_hash_table_lookup(seen, bufs->pdata[i]);

			if (!s)
				g_hash_table_insert(seen, bufs->pdata[i],
						    s = g_new0(struct buf_seen, 1));
			s->pins++;
		}
	}
	g_hash_table_iter_init(&it, seen);
	while (g_hash_table_iter_next(&it, &key, &val)) {
		const struct ext_buf *b = key;
		const struct buf_seen *s = val;

		mem += b->file ? EXT_FILE_BUF_MEM : ext_buf_mem(b->cap);
		if (b->file && b->data)
			ck_abort_msg("a buffer kept in a file has a data block too");
		if (b->pieces != s->pieces || b->live != s->live ||
		    b->refs != s->pieces + s->pins || b->size > b->cap)
			ck_abort_msg("buffer: pieces %u (seen %u), live %zu (seen %zu), refs %u "
				     "(seen %u pieces + %u pins), size %zu, cap %zu",
				     b->pieces, s->pieces, b->live, s->live, b->refs, s->pieces,
				     s->pins, b->size, b->cap);
		if (!b->file && b->cap >= EXT_BUF_ALIGNED_MIN && (uintptr_t)b->data % EXT_BUF_ALIGN)
			ck_abort_msg("a buffer of %zu bytes is not aligned", b->cap);
	}
	if (m->mem != mem)
		ck_abort_msg("mem %llu, what the map holds %llu", (unsigned long long)m->mem,
			     (unsigned long long)mem);
}

/* Sorted, non-overlapping, non-empty extents whose lengths sum to m->bytes. */
static void check_map(const struct extmap *m)
{
	g_autoptr(GPtrArray) a = extents_of(m);
	uint64_t sum = 0;
	off_t prev_end = -1;

	check_mem(m, a);

	for (guint i = 0; i < a->len; i++) {
		const struct extent *e = a->pdata[i];

		if (e->len == 0 || e->off < prev_end || e->boff + e->len > e->buf->size)
			ck_abort_msg("bad extent %lld+%zu (boff %zu, buffer %zu, "
				     "previous end %lld)",
				     (long long)e->off, e->len, e->boff, e->buf->size,
				     (long long)prev_end);
		prev_end = e->off + (off_t)e->len;
		sum += e->len;
	}
	if (m->bytes != sum || extmap_end(m) != (a->len ? prev_end : 0))
		ck_abort_msg(
		    "bytes %llu, extents sum to %llu; end %lld, last extent ends at %lld",
		    (unsigned long long)m->bytes, (unsigned long long)sum,
		    (long long)extmap_end(m), (long long)(a->len ? prev_end : 0));
}

/* The extents, as "off+len" (with "*id" when in flight), space separated. */
static char *layout(const struct extmap *m)
{
	g_autoptr(GPtrArray) a = extents_of(m);
	GString *s = g_string_new(NULL);

	for (guint i = 0; i < a->len; i++) {
		const struct extent *e = a->pdata[i];

		g_string_append_printf(s, "%s%lld+%zu", i ? " " : "", (long long)e->off,
				       e->len);
		if (e->flight)
			g_string_append_printf(s, "*%u", e->flight);
	}
	return g_string_free(s, FALSE);
}

#define ck_layout(m, want)                                                               \
	do {                                                                             \
		g_autofree char *got_ = layout(m);                                       \
		check_map(m);                                                            \
		ck_assert_str_eq(got_, want);                                            \
	} while (0)

/* Overlay [off, off+len) on medium bytes (tag 0) and expect tag's bytes there. */
static void ck_tag(const struct extmap *m, off_t off, size_t len, int tag)
{
	g_autofree uint8_t *b = g_malloc(len);

	for (size_t i = 0; i < len; i++)
		b[i] = pat(0, off + (off_t)i);
	extmap_overlay(m, off, (char *)b, len);
	for (size_t i = 0; i < len; i++)
		if (b[i] != pat(tag, off + (off_t)i))
			ck_abort_msg("byte %lld: got 0x%02x, want tag %d (0x%02x)",
				     (long long)(off + (off_t)i), b[i], tag,
				     pat(tag, off + (off_t)i));
}

/* iov holds tag's bytes for the file range starting at off. */
static void ck_iov_tag(const struct iovec *iov, int niov, off_t off, int tag)
{
	for (int k = 0; k < niov; k++) {
		const uint8_t *p = iov[k].iov_base;

		for (size_t i = 0; i < iov[k].iov_len; i++, off++)
			if (p[i] != pat(tag, off))
				ck_abort_msg(
				    "iov byte %lld: got 0x%02x, want tag %d (0x%02x)",
				    (long long)off, p[i], tag, pat(tag, off));
	}
}

static struct extent *extent_at(const struct extmap *m, off_t off)
{
	return g_tree_lookup(m->tree, &off);
}

/*
 * The directed tests all work on this map. A checked fixture, run around each test
 * rather than once per test case, gives every test an empty map of its own.
 */
static struct extmap m;

/* What the last take from m handed out: the chunk's iovecs, their count, its start. */
static struct {
	struct iovec iov[8];
	int niov;
	off_t off;
} taken;

static void setup(void)
{
	extmap_init(&m, NULL);
	/* Not values a take returns, so a take that fails to set them cannot pass. */
	taken.niov = -1;
	taken.off = -1;
}

static void teardown(void)
{
	extmap_clear(&m);
}

/* Take a chunk from m into taken, with room for all of its iovecs. */
static size_t take(off_t from, size_t max, unsigned flight)
{
	return extmap_take(&m, from, max, flight, taken.iov, G_N_ELEMENTS(taken.iov),
			   &taken.niov, &taken.off);
}

START_TEST(test_empty)
{
	ck_assert(extmap_empty(&m));
	ck_assert_int_eq(extmap_end(&m), 0);
	ck_tag(&m, 0, 300, 0);
	ck_assert_uint_eq(
	    extmap_take(&m, 0, 4096, 1, taken.iov, 4, &taken.niov, &taken.off), 0);
	ck_assert_int_eq(taken.niov, 0);
	extmap_truncate(&m, 0);
	put(&m, 10, 0, 1, BIG_COALESCE);
	ck_layout(&m, "");
	ck_assert(extmap_empty(&m));
}
END_TEST

START_TEST(test_write_into_empty)
{
	put(&m, 100, 100, 1, NO_COALESCE);
	ck_layout(&m, "100+100");
	ck_assert(!extmap_empty(&m));
	ck_assert_uint_eq(m.bytes, 100);
	ck_assert_int_eq(extmap_end(&m), 200);
	ck_tag(&m, 0, 100, 0);
	ck_tag(&m, 100, 100, 1);
	ck_tag(&m, 200, 100, 0);
	put(&m, 1000, 50, 2, NO_COALESCE);
	ck_layout(&m, "100+100 1000+50");
	ck_assert_int_eq(extmap_end(&m), 1050);
}
END_TEST

START_TEST(test_overwrite_inside)
{
	put(&m, 0, 1000, 1, NO_COALESCE);
	ck_layout(&m, "0+1000");
	put(&m, 400, 200, 2, NO_COALESCE);
	ck_layout(&m, "0+400 400+200 600+400");
	ck_tag(&m, 0, 400, 1);
	ck_tag(&m, 400, 200, 2);
	ck_tag(&m, 600, 400, 1);
}
END_TEST

START_TEST(test_overwrite_head_and_tail)
{
	put(&m, 100, 400, 1, NO_COALESCE);
	put(&m, 0, 200, 2, NO_COALESCE); /* across the head */
	ck_layout(&m, "0+200 200+300");
	ck_tag(&m, 0, 200, 2);
	ck_tag(&m, 200, 300, 1);
	put(&m, 400, 300, 3, NO_COALESCE); /* across the tail */
	ck_layout(&m, "0+200 200+200 400+300");
	ck_tag(&m, 0, 200, 2);
	ck_tag(&m, 200, 200, 1);
	ck_tag(&m, 400, 300, 3);
	ck_tag(&m, 700, 100, 0);
}
END_TEST

START_TEST(test_overwrite_several)
{
	put(&m, 0, 100, 1, NO_COALESCE);
	put(&m, 200, 100, 1, NO_COALESCE);
	put(&m, 400, 100, 1, NO_COALESCE);
	put(&m, 600, 100, 1, NO_COALESCE);
	put(&m, 50, 400, 2, NO_COALESCE);
	ck_layout(&m, "0+50 50+400 450+50 600+100");
	ck_tag(&m, 0, 50, 1);
	ck_tag(&m, 50, 400, 2);
	ck_tag(&m, 450, 50, 1);
	ck_tag(&m, 500, 100, 0);
	ck_tag(&m, 600, 100, 1);
	/* Covering everything from exactly the first start to exactly the last end. */
	put(&m, 0, 700, 3, NO_COALESCE);
	ck_layout(&m, "0+700");
	ck_tag(&m, 0, 700, 3);
}
END_TEST

START_TEST(test_overwrite_exact)
{
	put(&m, 100, 100, 1, NO_COALESCE);
	put(&m, 300, 100, 1, NO_COALESCE);
	put(&m, 100, 100, 2, NO_COALESCE);
	ck_layout(&m, "100+100 300+100");
	ck_tag(&m, 100, 100, 2);
	ck_tag(&m, 300, 100, 1);
	put(&m, 300, 100, 3, BIG_COALESCE);
	ck_layout(&m, "100+100 300+100");
	ck_tag(&m, 300, 100, 3);
}
END_TEST

START_TEST(test_coalesce_appends)
{
	for (int i = 0; i < 10; i++)
		put(&m, i * 100, 100, 1, 4096);
	ck_layout(&m, "0+1000");
	ck_tag(&m, 0, 1000, 1);
	/* Not adjacent: a new extent. Writing just before an extent: no prepend. */
	put(&m, 1001, 10, 2, 4096);
	put(&m, 2000, 10, 3, 4096);
	put(&m, 1990, 10, 4, 4096);
	ck_layout(&m, "0+1000 1001+10 1990+10 2000+10");
	/* Appending to the just-written extent after an overwrite in the middle. */
	put(&m, 1011, 5, 5, 4096);
	ck_layout(&m, "0+1000 1001+15 1990+10 2000+10");
	ck_tag(&m, 0, 1000, 1);
	ck_tag(&m, 1001, 10, 2);
	ck_tag(&m, 1011, 5, 5);
	ck_tag(&m, 1990, 10, 4);
	ck_tag(&m, 2000, 10, 3);
}
END_TEST

START_TEST(test_coalesce_max)
{
	for (int i = 0; i < 10; i++)
		put(&m, i * 100, 100, 1, 250);
	ck_layout(&m, "0+200 200+200 400+200 600+200 800+200");
	ck_tag(&m, 0, 1000, 1);
	extmap_clear(&m);

	extmap_init(&m, NULL);
	for (int i = 0; i < 4; i++)
		put(&m, i * 100, 100, 1, 200);
	ck_layout(&m, "0+200 200+200");
	put(&m, 400, 100, 1, NO_COALESCE);
	ck_layout(&m, "0+200 200+200 400+100");
}
END_TEST

/* Appends must not write into a buffer that another piece (or a trimmed tail) still uses.
 */
START_TEST(test_coalesce_shared_buffer)
{
	put(&m, 0, 100, 1, BIG_COALESCE);
	put(&m, 40, 20, 2, BIG_COALESCE); /* [60,100) is a piece of the first buffer */
	put(&m, 100, 100, 3, BIG_COALESCE);
	put(&m, 200, 100, 4, BIG_COALESCE);
	ck_tag(&m, 0, 40, 1);
	ck_tag(&m, 40, 20, 2);
	ck_tag(&m, 60, 40, 1);
	ck_tag(&m, 100, 100, 3);
	ck_tag(&m, 200, 100, 4);
	check_map(&m);
	extmap_clear(&m);

	extmap_init(&m, NULL);
	put(&m, 0, 100, 1, BIG_COALESCE);
	extmap_truncate(&m, 50); /* the buffer still holds [50,100) of tag 1 */
	put(&m, 50, 50, 2, BIG_COALESCE);
	put(&m, 100, 50, 3, BIG_COALESCE);
	ck_tag(&m, 0, 50, 1);
	ck_tag(&m, 50, 50, 2);
	ck_tag(&m, 100, 50, 3);
	ck_tag(&m, 150, 50, 0);
	check_map(&m);
}
END_TEST

START_TEST(test_overlay_holes)
{
	char buf[64];

	put(&m, 10, 5, 1, NO_COALESCE);
	put(&m, 20, 5, 2, NO_COALESCE);
	memset(buf, 'x', sizeof(buf));
	extmap_overlay(&m, 12, buf, 10); /* [12,22): tail of one, hole, head of other */
	for (int i = 0; i < 10; i++) {
		off_t pos = 12 + i;
		uint8_t want = pos < 15 ? pat(1, pos) : pos < 20 ? 'x' : pat(2, pos);
		ck_assert_uint_eq((uint8_t)buf[i], want);
	}
	ck_assert_int_eq(buf[10], 'x');
	memset(buf, 'y', sizeof(buf));
	extmap_overlay(&m, 15, buf, 5);	     /* all hole */
	extmap_overlay(&m, 25, buf + 5, 20); /* beyond the end */
	extmap_overlay(&m, 0, buf + 25, 10); /* before the first extent */
	for (int i = 0; i < 35; i++)
		ck_assert_int_eq(buf[i], 'y');
}
END_TEST

START_TEST(test_truncate)
{
	put(&m, 0, 100, 1, NO_COALESCE);
	put(&m, 200, 100, 2, NO_COALESCE);
	put(&m, 300, 100, 3, NO_COALESCE);
	extmap_truncate(&m, 1000); /* beyond the end */
	ck_layout(&m, "0+100 200+100 300+100");
	extmap_truncate(&m, 400); /* exactly the end */
	ck_layout(&m, "0+100 200+100 300+100");
	extmap_truncate(&m, 350); /* inside an extent */
	ck_layout(&m, "0+100 200+100 300+50");
	ck_assert_int_eq(extmap_end(&m), 350);
	ck_tag(&m, 300, 50, 3);
	extmap_truncate(&m, 300); /* at a boundary */
	ck_layout(&m, "0+100 200+100");
	extmap_truncate(&m, 150); /* in a hole */
	ck_layout(&m, "0+100");
	ck_assert_uint_eq(m.bytes, 100);
	ck_tag(&m, 0, 100, 1);
	ck_tag(&m, 100, 300, 0);
	extmap_truncate(&m, 0);
	ck_layout(&m, "");
	ck_assert(extmap_empty(&m));
	ck_assert_uint_eq(m.bytes, 0);
	ck_assert_int_eq(extmap_end(&m), 0);
	/* The map is usable again. */
	put(&m, 5, 5, 4, BIG_COALESCE);
	ck_layout(&m, "5+5");
}
END_TEST

START_TEST(test_take_contiguous)
{
	put(&m, 0, 100, 1, NO_COALESCE);
	put(&m, 100, 100, 2, NO_COALESCE);
	put(&m, 200, 100, 3, NO_COALESCE);
	ck_assert_uint_eq(take(0, 1000, 7), 300);
	ck_assert_int_eq(taken.off, 0);
	ck_assert_int_eq(taken.niov, 3);
	ck_iov_tag(taken.iov, 1, 0, 1);
	ck_iov_tag(taken.iov + 1, 1, 100, 2);
	ck_iov_tag(taken.iov + 2, 1, 200, 3);
	ck_layout(&m, "0+100*7 100+100*7 200+100*7");
	ck_assert_uint_eq(m.bytes, 300); /* in flight is still queued */
	/* Everything in flight: nothing more to take. */
	ck_assert_uint_eq(take(0, 1000, 8), 0);
	ck_assert_int_eq(taken.niov, 0);
}
END_TEST

START_TEST(test_take_stops_at_gap)
{
	put(&m, 0, 100, 1, NO_COALESCE);
	put(&m, 101, 100, 2, NO_COALESCE);
	ck_assert_uint_eq(take(0, 1000, 1), 100);
	ck_assert_int_eq(taken.off, 0);
	ck_assert_int_eq(taken.niov, 1);
	ck_assert_uint_eq(take(100, 1000, 2), 100);
	ck_assert_int_eq(taken.off, 101);
	ck_iov_tag(taken.iov, taken.niov, 101, 2);
	ck_layout(&m, "0+100*1 101+100*2");
}
END_TEST

START_TEST(test_take_splits_at_max)
{
	put(&m, 0, 1000, 1, NO_COALESCE);
	ck_assert_uint_eq(take(0, 300, 1), 300);
	ck_assert_int_eq(taken.off, 0);
	ck_assert_int_eq(taken.niov, 1);
	ck_assert_uint_eq(taken.iov[0].iov_len, 300);
	ck_iov_tag(taken.iov, taken.niov, 0, 1);
	ck_layout(&m, "0+300*1 300+700");
	ck_assert_uint_eq(m.bytes, 1000);
	ck_assert_uint_eq(take(300, 300, 2), 300);
	ck_assert_int_eq(taken.off, 300);
	ck_iov_tag(taken.iov, taken.niov, 300, 1);
	ck_layout(&m, "0+300*1 300+300*2 600+400");
	ck_tag(&m, 0, 1000, 1);

	/* Split in the second extent of a run. */
	put(&m, 1000, 500, 2, NO_COALESCE);
	ck_assert_uint_eq(take(600, 600, 3), 600);
	ck_assert_int_eq(taken.off, 600);
	ck_assert_int_eq(taken.niov, 2);
	ck_assert_uint_eq(taken.iov[1].iov_len, 200);
	ck_iov_tag(taken.iov, 1, 600, 1);
	ck_iov_tag(taken.iov + 1, 1, 1000, 2);
	ck_layout(&m, "0+300*1 300+300*2 600+400*3 1000+200*3 1200+300");
	ck_tag(&m, 1000, 500, 2);
}
END_TEST

START_TEST(test_take_niov_max)
{
	for (int i = 0; i < 5; i++)
		put(&m, i * 10, 10, i + 1, NO_COALESCE);
	ck_assert_uint_eq(
	    extmap_take(&m, 0, 1000, 1, taken.iov, 2, &taken.niov, &taken.off), 20);
	ck_assert_int_eq(taken.niov, 2);
	ck_layout(&m, "0+10*1 10+10*1 20+10 30+10 40+10");
}
END_TEST

START_TEST(test_take_from_and_wrap)
{
	put(&m, 0, 100, 1, NO_COALESCE);
	put(&m, 500, 100, 2, NO_COALESCE);
	ck_assert_uint_eq(take(300, 1000, 1), 100);
	ck_assert_int_eq(taken.off, 500); /* first extent after from */
	extmap_abort(&m, 1, 500, 100);
	ck_assert_uint_eq(take(500, 1000, 1), 100);
	ck_assert_int_eq(taken.off, 500); /* an extent exactly at from */
	extmap_abort(&m, 1, 500, 100);
	ck_assert_uint_eq(take(600, 1000, 1), 100);
	ck_assert_int_eq(taken.off, 0); /* nothing at or after from: wrap */
	ck_iov_tag(taken.iov, taken.niov, 0, 1);
	extmap_abort(&m, 1, 0, 100);
	ck_assert_uint_eq(take(1 << 20, 1000, 1), 100);
	ck_assert_int_eq(taken.off, 0);
	ck_layout(&m, "0+100*1 500+100");
	/* Wrapped past the in-flight one to the next queued one. */
	ck_assert_uint_eq(take(700, 1000, 2), 100);
	ck_assert_int_eq(taken.off, 500);
}
END_TEST

START_TEST(test_take_runs_one_flight)
{
	struct ext_src src[8];
	uint64_t done;

	put(&m, 0, 100, 1, NO_COALESCE);
	put(&m, 500, 100, 2, NO_COALESCE);
	put(&m, 900, 100, 3, NO_COALESCE);
	/* Runs of one chunk: the first wraps as take does, the later ones not. */
	ck_assert_uint_eq(extmap_take_src(&m, 400, 1000, 7, taken.iov, src, 8, &taken.niov,
					  &taken.off), 100);
	ck_assert_int_eq(taken.off, 500);
	ck_assert_uint_eq(extmap_take_after(&m, 600, 1000, 7, taken.iov, src, 8, &taken.niov,
					    &taken.off), 100);
	ck_assert_int_eq(taken.off, 900);
	ck_assert_uint_eq(extmap_take_after(&m, 1000, 1000, 7, taken.iov, src, 8, &taken.niov,
					    &taken.off), 0); /* 0 is before: no wrap */
	/* A write into the gap while the chunk is out: not the chunk's. */
	put(&m, 700, 50, 4, NO_COALESCE);
	/* Aborted over the span: both runs queued again, the gap's write as it was. */
	extmap_abort(&m, 7, 500, 500);
	ck_layout(&m, "0+100 500+100 700+50 900+100");
	/* Completed over the span: only the chunk's runs go. */
	ck_assert_uint_eq(extmap_take_src(&m, 400, 1000, 8, taken.iov, src, 8, &taken.niov,
					  &taken.off), 100);
	ck_assert_uint_eq(extmap_take_after(&m, 600, 60, 8, taken.iov, src, 8, &taken.niov,
					    &taken.off), 50);
	ck_assert_int_eq(taken.off, 700);
	done = extmap_complete(&m, 8, 500, 250);
	ck_assert_uint_eq(done, 150);
	ck_layout(&m, "0+100 900+100");
}
END_TEST

START_TEST(test_take_skips_in_flight)
{
	put(&m, 0, 100, 1, NO_COALESCE);
	put(&m, 100, 100, 2, NO_COALESCE);
	put(&m, 200, 100, 3, NO_COALESCE);
	ck_assert_uint_eq(take(0, 100, 1), 100);
	ck_assert_int_eq(taken.off, 0);
	ck_assert_uint_eq(take(0, 1000, 2), 200);
	ck_assert_int_eq(taken.off, 100);
	ck_iov_tag(taken.iov, 1, 100, 2);
	ck_iov_tag(taken.iov + 1, 1, 200, 3);
	ck_layout(&m, "0+100*1 100+100*2 200+100*2");
	extmap_clear(&m);

	/* A run stops at an extent in flight. */
	extmap_init(&m, NULL);
	put(&m, 0, 100, 1, NO_COALESCE);
	put(&m, 100, 100, 2, NO_COALESCE);
	put(&m, 200, 100, 3, NO_COALESCE);
	ck_assert_uint_eq(take(100, 100, 1), 100);
	ck_assert_int_eq(taken.off, 100);
	ck_assert_uint_eq(take(0, 1000, 2), 100);
	ck_assert_int_eq(taken.off, 0);
	ck_layout(&m, "0+100*2 100+100*1 200+100");
}
END_TEST

START_TEST(test_complete)
{
	put(&m, 0, 300, 1, NO_COALESCE);
	put(&m, 400, 100, 2, NO_COALESCE);
	ck_assert_uint_eq(take(0, 200, 1), 200);
	ck_assert_uint_eq(extmap_complete(&m, 1, taken.off, 200), 200);
	ck_layout(&m, "200+100 400+100");
	ck_assert_uint_eq(m.bytes, 200);
	ck_tag(&m, 0, 200, 0);
	ck_tag(&m, 200, 100, 1);
	/* Completing an id that is not in flight drops nothing. */
	ck_assert_uint_eq(extmap_complete(&m, 9, 0, 1000), 0);
	ck_layout(&m, "200+100 400+100");
}
END_TEST

/* Newer data written over a chunk in flight survives the chunk's completion. */
START_TEST(test_overwrite_in_flight_then_complete)
{
	put(&m, 0, 1000, 1, NO_COALESCE);
	put(&m, 1000, 1000, 1, NO_COALESCE);
	ck_assert_uint_eq(take(0, 1500, 5), 1500);
	ck_layout(&m, "0+1000*5 1000+500*5 1500+500");
	put(&m, 200, 200, 2, NO_COALESCE);   /* inside */
	put(&m, 900, 200, 3, NO_COALESCE);   /* across two in-flight pieces */
	put(&m, 1400, 200, 4, BIG_COALESCE); /* across the chunk's end */
	put(&m, 0, 50, 5, NO_COALESCE);	     /* across the head */
	ck_layout(&m, "0+50 50+150*5 200+200 400+500*5 900+200 1100+300*5 1400+200 "
		      "1600+400");
	/* The flusher still writes the data it took. */
	ck_iov_tag(taken.iov, taken.niov, 0, 1);
	ck_assert_uint_eq(extmap_complete(&m, 5, taken.off, 1500), 150 + 500 + 300);
	ck_layout(&m, "0+50 200+200 900+200 1400+200 1600+400");
	ck_tag(&m, 0, 50, 5);
	ck_tag(&m, 50, 150, 0);
	ck_tag(&m, 200, 200, 2);
	ck_tag(&m, 400, 500, 0);
	ck_tag(&m, 900, 200, 3);
	ck_tag(&m, 1100, 300, 0);
	ck_tag(&m, 1400, 200, 4);
	ck_tag(&m, 1600, 400, 1);
}
END_TEST

START_TEST(test_truncate_in_flight_then_complete)
{
	put(&m, 0, 1000, 1, NO_COALESCE);
	ck_assert_uint_eq(take(0, 1000, 3), 1000);
	extmap_truncate(&m, 600);
	put(&m, 600, 100, 2, BIG_COALESCE); /* must not append to the in-flight extent */
	ck_layout(&m, "0+600*3 600+100");
	ck_assert_uint_eq(extmap_complete(&m, 3, 0, 1000), 600);
	ck_layout(&m, "600+100");
	ck_tag(&m, 600, 100, 2);
}
END_TEST

START_TEST(test_abort_requeues)
{
	put(&m, 0, 1000, 1, NO_COALESCE);
	ck_assert_uint_eq(take(0, 600, 1), 600);
	put(&m, 100, 100, 2, NO_COALESCE);
	extmap_abort(&m, 1, taken.off, 600);
	ck_layout(&m, "0+100 100+100 200+400 600+400");
	ck_assert_uint_eq(m.bytes, 1000);
	ck_tag(&m, 0, 100, 1);
	ck_tag(&m, 100, 100, 2);
	ck_tag(&m, 200, 800, 1);
	/* Taken again from the start: the same bytes, now with the newer data. */
	ck_assert_uint_eq(take(0, 1000, 2), 1000);
	ck_assert_int_eq(taken.off, 0);
	ck_iov_tag(taken.iov, 1, 0, 1);
	ck_iov_tag(taken.iov + 1, 1, 100, 2);
	ck_iov_tag(taken.iov + 2, taken.niov - 2, 200, 1);
	/* Aborting another id leaves this chunk alone. */
	extmap_abort(&m, 1, 0, 1000);
	ck_layout(&m, "0+100*2 100+100*2 200+400*2 600+400*2");
	ck_assert_uint_eq(extmap_complete(&m, 2, 0, 1000), 1000);
	ck_layout(&m, "");
}
END_TEST

/*
 * The flusher writes from the iovecs without the lock (queue.c flush_chunk), so
 * the bytes it took must stay put however the map changes meanwhile: "the
 * flusher keeps its own reference to the buffer" (extents.h).
 */
START_TEST(test_in_flight_buffer_survives_full_overwrite)
{
	put(&m, 0, 1000, 1, NO_COALESCE);
	ck_assert_uint_eq(take(0, 1000, 1), 1000);
	put(&m, 0, 1000, 2, NO_COALESCE);
	ck_iov_tag(taken.iov, taken.niov, 0, 1);
	ck_assert_uint_eq(extmap_complete(&m, 1, 0, 1000), 0);
	ck_tag(&m, 0, 1000, 2);
}
END_TEST

START_TEST(test_in_flight_buffer_not_moved_by_append)
{
	const struct extent *tail;

	put(&m, 0, 8192, 1, BIG_COALESCE);
	ck_assert_uint_eq(take(0, 4096, 1), 4096);
	tail = extent_at(&m, 4096);
	ck_assert_ptr_eq(tail->buf->data, taken.iov[0].iov_base); /* one shared buffer */
	put(&m, 0, 4096, 2, BIG_COALESCE);     /* the in-flight piece is overwritten */
	put(&m, 8192, 65536, 3, BIG_COALESCE); /* appends to the tail's buffer */
	tail = extent_at(&m, 4096);
	ck_assert_msg(tail->buf->data == (char *)taken.iov[0].iov_base,
		      "the in-flight chunk's buffer was reallocated under the flusher");
}
END_TEST

/*
 * Generations: a wait for the writes up to generation g (fsync) is over once
 * extmap_oldest_gen > g; bytes that overwrite older queued ones keep the
 * older generation.
 */
START_TEST(test_gen_order)
{
	ck_assert_uint_eq(extmap_oldest_gen(&m), UINT64_MAX);
	put(&m, 0, 4096, 1, BIG_COALESCE);	    /* gen 1 */
	put(&m, 100000, 4096, 2, BIG_COALESCE); /* gen 2 */
	ck_assert_uint_eq(extmap_gen(&m), 2);
	ck_assert_uint_eq(extmap_oldest_gen(&m), 1);
	ck_assert_uint_eq(take(0, 4096, 1), 4096);
	ck_assert_uint_eq(extmap_oldest_gen(&m), 1); /* in flight: not on the medium yet */
	extmap_complete(&m, 1, 0, 4096);
	ck_assert_uint_eq(extmap_oldest_gen(&m), 2);
}
END_TEST

START_TEST(test_gen_overwrite_keeps_older)
{
	put(&m, 0, 8192, 1, BIG_COALESCE);	/* gen 1 */
	put(&m, 50000, 100, 2, BIG_COALESCE);	/* gen 2 */
	put(&m, 4096, 8192, 3, BIG_COALESCE);	/* gen 3, over part of gen 1 */
	ck_assert_uint_eq(extent_at(&m, 4096)->gen, 1);
	ck_assert_uint_eq(extent_at(&m, 0)->gen, 1);
	/* Over all of gen 1, in flight or not: still owed to a wait on gen 1. */
	ck_assert_uint_eq(take(0, 4096, 1), 4096);
	put(&m, 0, 16384, 4, BIG_COALESCE);
	extmap_complete(&m, 1, 0, 4096);
	ck_assert_uint_eq(extmap_oldest_gen(&m), 1);
	/* New data elsewhere is newer. */
	put(&m, 200000, 10, 5, BIG_COALESCE);
	ck_assert_uint_eq(extent_at(&m, 200000)->gen, 5);
	/* Appended bytes join the older extent's generation. */
	put(&m, 200010, 10, 6, BIG_COALESCE);
	ck_assert_uint_le(extent_at(&m, 200000)->gen, 5);
}
END_TEST

START_TEST(test_gen_truncate_takes_a_place)
{
	put(&m, 0, 10, 1, BIG_COALESCE);
	ck_assert_uint_eq(extmap_next_gen(&m), 2);
	put(&m, 0, 10, 2, BIG_COALESCE);
	ck_assert_uint_eq(extmap_gen(&m), 3);
}
END_TEST

/*
 * Memory: what queue= bounds is m->mem (check_map recomputes it after each
 * directed step). These cases pin down what it must not let grow: tiny
 * writes, whole buffers kept by small pieces, slack from doubling; and what
 * an allocation failure must leave.
 */

/* The largest capacity among the buffers the extents in [off, off+len) use. */
static size_t max_cap_in(const struct extmap *mp, off_t off, size_t len)
{
	g_autoptr(GPtrArray) a = extents_of(mp);
	size_t cap = 0;

	for (guint i = 0; i < a->len; i++) {
		const struct extent *e = a->pdata[i];

		if (e->off < off + (off_t)len && e->off + (off_t)e->len > off)
			cap = MAX(cap, e->buf->cap);
	}
	return cap;
}

#define TINY_WRITES 1000
/* A tiny write costs its node, its buffer header and a malloc block: not a page. */
#define TINY_WRITE_MEM_MAX 256

START_TEST(test_mem_tiny_writes)
{
	for (int i = 0; i < TINY_WRITES; i++)
		put(&m, (off_t)i * 1000, 1 + (size_t)i % 16, 1, NO_COALESCE);
	check_map(&m);
	ck_assert_msg(m.mem <= (uint64_t)TINY_WRITES * TINY_WRITE_MEM_MAX,
		      "%d tiny writes hold %llu bytes", TINY_WRITES, (unsigned long long)m.mem);
	ck_assert_uint_ge(m.mem, (uint64_t)TINY_WRITES * EXT_NODE_BYTES);
	/* The queue's room check takes the cost as an upper bound of each. */
	ck_assert_uint_le(m.mem / TINY_WRITES, extmap_write_cost(1));
	for (int i = 0; i < TINY_WRITES; i++)
		ck_tag(&m, (off_t)i * 1000, 1 + (size_t)i % 16, 1);
}
END_TEST

/* Two maps with one total (the queue's): every change of either reaches it,
 * takes and completes included, and it is 0 once both hold nothing. */
START_TEST(test_mem_shared_total)
{
	struct extmap a, b;
	uint64_t total = 0;
	struct iovec iov[4];
	int niov;
	off_t off;

	extmap_init(&a, &total);
	extmap_init(&b, &total);
	for (int i = 0; i < 50; i++) {
		struct extmap *x = i % 2 ? &a : &b;
		uint8_t d[300] = {0};
		ck_assert_int_eq(extmap_write(x, (i * 7919) % 20000, d, 1 + (size_t)(i * 37) % 300,
					      BIG_COALESCE), 0);
	}
	ck_assert_uint_eq(total, a.mem + b.mem);
	ck_assert_uint_gt(extmap_take(&a, 0, 700, 1, iov, 4, &niov, &off), 0);
	ck_assert_uint_eq(total, a.mem + b.mem);
	extmap_truncate(&a, 0); /* the chunk's buffers stay pinned */
	ck_assert_uint_gt(a.mem, 0);
	ck_assert_uint_eq(total, a.mem + b.mem);
	extmap_complete(&a, 1, off, 700);
	ck_assert_uint_eq(a.mem, 0);
	ck_assert_uint_eq(total, b.mem);
	extmap_truncate(&b, 0);
	ck_assert_uint_eq(total, 0);
	extmap_clear(&a);
	extmap_clear(&b);
}
END_TEST

#define BIG_WRITE (256u << 10)
#define KEEP_EVERY (32u << 10)
#define KEEP 16
/* Once its pieces are few, a big buffer must not stay behind them. */
#define SMALL_BUF_CAP 4096

/* A 256 KiB write overwritten all but 16 bytes in every 32 KiB: the pieces
 * left end up in small buffers, the big one is gone. */
START_TEST(test_compact_after_overwrites)
{
	put(&m, 0, BIG_WRITE, 1, NO_COALESCE);
	for (off_t k = 0; k < BIG_WRITE; k += KEEP_EVERY) {
		put(&m, k + KEEP, KEEP_EVERY - KEEP, 2, NO_COALESCE);
		check_map(&m);
	}
	for (off_t k = 0; k < BIG_WRITE; k += KEEP_EVERY) {
		ck_tag(&m, k, KEEP, 1);
		ck_tag(&m, k + KEEP, KEEP_EVERY - KEEP, 2);
		ck_assert_msg(max_cap_in(&m, k, KEEP) <= SMALL_BUF_CAP,
			      "the %d bytes left at %lld keep a buffer of %zu bytes alive", KEEP,
			      (long long)k, max_cap_in(&m, k, KEEP));
	}
}
END_TEST

/* The same after a truncate, which cuts the tail of one big buffer. */
START_TEST(test_compact_after_truncate)
{
	put(&m, 0, BIG_WRITE, 1, NO_COALESCE);
	extmap_truncate(&m, KEEP);
	ck_tag(&m, 0, KEEP, 1);
	ck_assert_uint_le(max_cap_in(&m, 0, KEEP), SMALL_BUF_CAP);
	check_map(&m);
}
END_TEST

/* A buffer a chunk in flight uses is not moved under the flusher's iovecs;
 * it is compacted when that chunk ends. */
START_TEST(test_compact_waits_for_flight)
{
	const off_t keep = 200 << 10;

	put(&m, 0, BIG_WRITE, 1, NO_COALESCE);
	ck_assert_uint_eq(take(0, 4096, 1), 4096);
	put(&m, 0, (size_t)keep, 2, NO_COALESCE);
	put(&m, keep + KEEP, BIG_WRITE - (size_t)keep - KEEP, 2, NO_COALESCE);
	ck_assert_uint_ge(max_cap_in(&m, keep, KEEP), BIG_WRITE); /* pinned: left alone */
	ck_iov_tag(taken.iov, taken.niov, 0, 1);
	check_map(&m);
	ck_assert_uint_eq(extmap_complete(&m, 1, 0, 4096), 0);
	ck_assert_uint_le(max_cap_in(&m, keep, KEEP), SMALL_BUF_CAP);
	ck_tag(&m, keep, KEEP, 1);
	check_map(&m);
}
END_TEST

#define STREAM_BYTES (4u << 20)
#define STREAM_WRITE (64u << 10)

/* A sequential stream coalesces, but no buffer grows past EXT_BUF_GROW_MAX,
 * and growth leaves at most one buffer half empty. */
START_TEST(test_growth_bounded)
{
	for (off_t o = 0; o < STREAM_BYTES; o += STREAM_WRITE)
		put(&m, o, STREAM_WRITE, 1, 8u << 20);
	check_map(&m);
	ck_assert_uint_le(max_cap_in(&m, 0, STREAM_BYTES), EXT_BUF_GROW_MAX);
	ck_assert_int_eq(g_tree_nnodes(m.tree), STREAM_BYTES / EXT_BUF_GROW_MAX);
	ck_assert_uint_le(m.mem, STREAM_BYTES + STREAM_BYTES / 16);
	ck_tag(&m, 0, STREAM_BYTES, 1);
}
END_TEST

/* A write that splits an extent needs, in this order: the split piece, a
 * buffer header, its data, its extent. Whichever fails, the write fails with
 * ENOMEM and the map is as it was. */
#define SPLIT_WRITE_ALLOCS 4

START_TEST(test_enomem_leaves_map)
{
	g_autofree char *before = NULL;
	uint64_t mem, bytes;

	put(&m, 0, 3000, 1, NO_COALESCE);
	put(&m, 5000, 1000, 2, NO_COALESCE);
	before = layout(&m);
	mem = m.mem;
	bytes = m.bytes;
	for (unsigned n = 1; n <= SPLIT_WRITE_ALLOCS; n++) {
		extmap_fail_alloc_after(n);
		ck_assert_int_eq(try_put(&m, 1000, 500, 3, NO_COALESCE), -ENOMEM);
		ck_layout(&m, before);
		ck_assert_uint_eq(m.mem, mem);
		ck_assert_uint_eq(m.bytes, bytes);
		ck_tag(&m, 0, 3000, 1);
		ck_tag(&m, 5000, 1000, 2);
	}
	extmap_fail_alloc_after(SPLIT_WRITE_ALLOCS + 1);
	ck_assert_int_eq(try_put(&m, 1000, 500, 3, NO_COALESCE), 0);
	extmap_fail_alloc_after(0);
	ck_layout(&m, "0+1000 1000+500 1500+1500 5000+1000");
	ck_tag(&m, 0, 1000, 1);
	ck_tag(&m, 1000, 500, 3);
	ck_tag(&m, 1500, 1500, 1);
}
END_TEST

/* An append that cannot have its buffer doubled goes into a buffer of its own. */
START_TEST(test_enomem_append_falls_back)
{
	put(&m, 0, 4096, 1, BIG_COALESCE);
	extmap_fail_alloc_after(1);
	ck_assert_int_eq(try_put(&m, 4096, 8192, 1, BIG_COALESCE), 0);
	extmap_fail_alloc_after(0);
	ck_layout(&m, "0+4096 4096+8192");
	ck_tag(&m, 0, 4096 + 8192, 1);
}
END_TEST

/* Without memory to split at the chunk limit, a take takes the whole extent
 * rather than nothing (a flusher would spin), and none of a second one. */
START_TEST(test_enomem_take_whole)
{
	put(&m, 0, 8192, 1, NO_COALESCE);
	put(&m, 8192, 8192, 2, NO_COALESCE);
	extmap_fail_alloc_after(1);
	ck_assert_uint_eq(take(0, 4096, 1), 8192);
	extmap_fail_alloc_after(0);
	ck_layout(&m, "0+8192*1 8192+8192");
	ck_iov_tag(taken.iov, taken.niov, 0, 1);
	ck_assert_uint_eq(extmap_complete(&m, 1, 0, 8192), 8192);
	check_map(&m);
}
END_TEST

/*
 * Random operations against a byte model. A failure names its seed;
 * EXTENTS_SEED=n reruns that seed alone.
 */

/* n divided by SLOWMEDIA_TEST_SLOWDOWN (set by tests/run-sanitizers.sh for
 * TSan and valgrind, which run this file 15-40 times slower): fewer random
 * operations, the same checks after each. */
static int scaled(int n)
{
	const char *env = getenv("SLOWMEDIA_TEST_SLOWDOWN");
	long d = env ? strtol(env, NULL, 10) : 1;

	return d > 1 ? MAX(n / (int)d, 1) : n;
}

#define MODEL_SIZE (64 << 10)
#define MODEL_OPS 4000
#define MODEL_SEED 20240611u
#define MAX_FLYING 3

struct model {
	uint8_t data[MODEL_SIZE];
	uint8_t medium[MODEL_SIZE]; /* what overlay is laid over */
	bool present[MODEL_SIZE];
	unsigned owner[MODEL_SIZE]; /* flight id, 0: queued */
};

struct chunk {
	unsigned id;
	off_t off;
	size_t len;
};

struct rnd {
	struct extmap m;
	struct model *md;
	GRand *r;
	guint32 seed;
	int op;
	struct chunk fly[MAX_FLYING];
	int nfly;
	unsigned next_id;
	uint64_t total; /* the map's mem, kept by it (extmap_init) */
	/* Half the writes, in the second half of the runs: their data is put
	 * in this file first (as the spool journals it) and queued as a place
	 * there (extmap_write_file). */
	struct ext_file *file;
	off_t fend;
};

/* Check reports every passing assertion to the runner: too slow per byte. */
#define ck_rnd(t, cond, fmt, ...)                                                        \
	do {                                                                             \
		if (!(cond))                                                             \
			ck_abort_msg("seed %u op %d: " fmt, (t)->seed, (t)->op,          \
				     ##__VA_ARGS__);                                     \
	} while (0)

static void rnd_check(struct rnd *t)
{
	static uint8_t buf[MODEL_SIZE];
	g_autoptr(GPtrArray) a = extents_of(&t->m);
	uint64_t present = 0;
	off_t end = 0;

	memcpy(buf, t->md->medium, MODEL_SIZE);
	extmap_overlay(&t->m, 0, (char *)buf, MODEL_SIZE);
	for (int i = 0; i < MODEL_SIZE; i++) {
		uint8_t want = t->md->present[i] ? t->md->data[i] : t->md->medium[i];
		ck_rnd(t, buf[i] == want, "overlay byte %d is 0x%02x, want 0x%02x", i,
		       buf[i], want);
		if (t->md->present[i]) {
			present++;
			end = i + 1;
		}
	}
	ck_rnd(t, t->total == t->m.mem, "the shared total %llu, the map's mem %llu",
	       (unsigned long long)t->total, (unsigned long long)t->m.mem);
	ck_rnd(t, t->m.bytes == present, "bytes %llu, model %llu",
	       (unsigned long long)t->m.bytes, (unsigned long long)present);
	ck_rnd(t, extmap_end(&t->m) == end, "end %lld, model %lld",
	       (long long)extmap_end(&t->m), (long long)end);
	for (guint k = 0; k < a->len; k++) {
		const struct extent *e = a->pdata[k];
		for (size_t i = 0; i < e->len; i++) {
			off_t p = e->off + (off_t)i;
			ck_rnd(t,
			       p < MODEL_SIZE && t->md->present[p] &&
				   t->md->owner[p] == e->flight,
			       "extent %lld+%zu (flight %u) at byte %lld disagrees with "
			       "the model",
			       (long long)e->off, e->len, e->flight, (long long)p);
		}
	}
	check_map(&t->m);
}

static void rnd_write(struct rnd *t)
{
	static const size_t coalesce[] = {0, 512, 8192, BIG_COALESCE};
	off_t off = g_rand_int_range(t->r, 0, MODEL_SIZE);
	size_t len = (size_t)g_rand_int_range(t->r, 1, g_rand_boolean(t->r) ? 600 : 9000);
	uint8_t d[9000];
	int r;

	/* Appends are common in real use: favour them. */
	if (g_rand_int_range(t->r, 0, 3) == 0)
		off = extmap_end(&t->m);
	if (off + (off_t)len > MODEL_SIZE)
		len = (size_t)(MODEL_SIZE - off);
	if (len == 0)
		return;
	for (size_t i = 0; i < len; i++)
		d[i] = (uint8_t)g_rand_int(t->r);
	/* Now and then an allocation fails: the write is then as if not made. */
	if (g_rand_int_range(t->r, 0, 10) == 0)
		extmap_fail_alloc_after((unsigned)g_rand_int_range(t->r, 1, 5));
	if (t->file && g_rand_boolean(t->r)) {
		t->fend += g_rand_int_range(t->r, 0, 100); /* a record's header */
		ck_rnd(t, pwrite(t->file->fd, d, len, t->fend) == (ssize_t)len, "pwrite: %m");
		r = extmap_write_file(&t->m, off, len, t->file, t->fend);
		t->fend += (off_t)len;
	} else {
		r = extmap_write(&t->m, off, d, len,
				 coalesce[g_rand_int_range(t->r, 0, G_N_ELEMENTS(coalesce))]);
	}
	extmap_fail_alloc_after(0);
	ck_rnd(t, r == 0 || r == -ENOMEM, "write returned %d", r);
	if (r < 0)
		return;
	for (size_t i = 0; i < len; i++) {
		t->md->data[off + (off_t)i] = d[i];
		t->md->present[off + (off_t)i] = true;
		t->md->owner[off + (off_t)i] = 0;
	}
}

static void rnd_truncate(struct rnd *t)
{
	off_t size = g_rand_int_range(t->r, 0, MODEL_SIZE + 1);

	if (g_rand_boolean(t->r))
		size = MIN(extmap_end(&t->m), size + 1000);
	for (off_t i = size; i < MODEL_SIZE; i++)
		t->md->present[i] = false;
	extmap_truncate(&t->m, size);
}

static void rnd_take(struct rnd *t)
{
	struct iovec iov[8];
	struct ext_src src[8];
	uint8_t back[20000];
	off_t from = g_rand_int_range(t->r, 0, MODEL_SIZE + 1), off = -1;
	size_t max = (size_t)g_rand_int_range(t->r, 1, 20000), len, sum = 0;
	int niov_max = g_rand_int_range(t->r, 1, 9), niov;
	unsigned id = ++t->next_id;
	bool any_queued = false;

	if (t->nfly == MAX_FLYING)
		return;
	for (int i = 0; i < MODEL_SIZE; i++)
		any_queued |= t->md->present[i] && !t->md->owner[i];
	len = extmap_take_src(&t->m, from, max, id, iov, src, niov_max, &niov, &off);
	ck_rnd(t, (len > 0) == any_queued, "take returned %zu, model has queued data: %d",
	       len, any_queued);
	if (!len)
		return;
	ck_rnd(t, len <= max && niov >= 1 && niov <= niov_max,
	       "take %zu of max %zu, niov %d", len, max, niov);
	for (int k = 0; k < niov; k++) {
		const uint8_t *p = iov[k].iov_base;

		ck_rnd(t, !p == !!src[k].file, "piece %d: iov_base %p, file %p", k, (void *)p,
		       (void *)src[k].file);
		if (src[k].file) {
			ck_rnd(t, iov[k].iov_len <= sizeof(back), "piece %d: %zu bytes", k,
			       iov[k].iov_len);
			ck_rnd(t, pread(src[k].file->fd, back, iov[k].iov_len, src[k].off) ==
				      (ssize_t)iov[k].iov_len, "pread: %m");
			p = back;
		}
		for (size_t i = 0; i < iov[k].iov_len; i++) {
			off_t pos = off + (off_t)(sum + i);
			ck_rnd(t,
			       t->md->present[pos] && !t->md->owner[pos] &&
				   p[i] == t->md->data[pos],
			       "take byte %lld: wrong or not queued", (long long)pos);
			t->md->owner[pos] = id;
		}
		sum += iov[k].iov_len;
	}
	ck_rnd(t, sum == len, "iov sum %zu, len %zu", sum, len);
	/* The run is as long as allowed: it ends at a limit or where queued data does. */
	if (len < max && niov < niov_max && off + (off_t)len < MODEL_SIZE) {
		off_t nx = off + (off_t)len;
		ck_rnd(t, !t->md->present[nx] || t->md->owner[nx],
		       "run at %lld+%zu stops before queued byte %lld", (long long)off,
		       len, (long long)nx);
	}
	t->fly[t->nfly++] = (struct chunk){.id = id, .off = off, .len = len};
}

static void rnd_finish(struct rnd *t, bool ok)
{
	int k = g_rand_int_range(t->r, 0, t->nfly);
	struct chunk c = t->fly[k];
	uint64_t want = 0;

	t->fly[k] = t->fly[--t->nfly];
	for (int i = 0; i < MODEL_SIZE; i++) {
		if (!t->md->present[i] || t->md->owner[i] != c.id)
			continue;
		ck_rnd(t, i >= c.off && i < c.off + (off_t)c.len,
		       "chunk %u's byte %d lies outside %lld+%zu", c.id, i,
		       (long long)c.off, c.len);
		want++;
		if (ok)
			t->md->present[i] = false;
		else
			t->md->owner[i] = 0;
	}
	if (ok) {
		uint64_t got = extmap_complete(&t->m, c.id, c.off, c.len);
		ck_rnd(t, got == want, "complete dropped %llu, model %llu",
		       (unsigned long long)got, (unsigned long long)want);
	} else {
		extmap_abort(&t->m, c.id, c.off, c.len);
	}
}

START_TEST(test_random_against_model)
{
	struct rnd t = {.seed = MODEL_SEED + (guint32)_i};
	const char *env = getenv("EXTENTS_SEED");

	if (env)
		t.seed = (guint32)strtoul(env, NULL, 0);
	t.r = g_rand_new_with_seed(t.seed);
	t.md = g_new0(struct model, 1);
	for (int i = 0; i < MODEL_SIZE; i++)
		t.md->medium[i] = (uint8_t)g_rand_int(t.r);
	extmap_init(&t.m, &t.total);
	if (_i >= 2) {
		FILE *tf = tmpfile();

		ck_assert_ptr_nonnull(tf);
		t.file = ext_file_new(dup(fileno(tf)));
		fclose(tf);
	}
	for (t.op = 0; t.op < scaled(MODEL_OPS); t.op++) {
		int dice = g_rand_int_range(t.r, 0, 100);

		if (dice < 50)
			rnd_write(&t);
		else if (dice < 55)
			rnd_truncate(&t);
		else if (dice < 75)
			rnd_take(&t);
		else if (t.nfly && dice < 92)
			rnd_finish(&t, true);
		else if (t.nfly)
			rnd_finish(&t, false);
		rnd_check(&t);
	}
	while (t.nfly)
		rnd_finish(&t, true);
	extmap_truncate(&t.m, 0);
	ck_assert_uint_eq(t.total, 0); /* nothing queued, nothing held */
	extmap_clear(&t.m);
	if (t.file) {
		ck_assert_uint_eq(t.file->refs, 1); /* the map kept no reference */
		ext_file_unref(t.file);
	}
	g_free(t.md);
	g_rand_free(t.r);
}
END_TEST

/* ---- Counting the lower blocks the queued data needs (ext_count) ---- */

#define CNT_BS 4096u
#define CNT_PTRS (CNT_BS / 4u)

static const uint64_t cnt_units[EXT_COUNT_LEVELS] = {
	CNT_BS, (uint64_t)CNT_BS * CNT_PTRS, (uint64_t)CNT_BS * CNT_PTRS * CNT_PTRS};

static void cnt_put(struct extmap *x, off_t off, size_t len, int tag)
{
	g_autofree uint8_t *d = g_malloc(len ? len : 1);

	for (size_t i = 0; i < len; i++)
		d[i] = pat(tag, off + (off_t)i);
	ck_assert_int_eq(extmap_write_counted(x, off, d, len, BIG_COALESCE), 0);
}

/* The count as it should be: a walk over every byte's block. */
static uint64_t cnt_model(const struct extmap *x, int l)
{
	g_autoptr(GPtrArray) a = extents_of(x);
	g_autoptr(GHashTable) seen = g_hash_table_new(g_int64_hash, g_int64_equal);
	uint64_t u = x->count.unit[l];
	g_autofree gint64 *keys = NULL;
	uint64_t n = 0;

	if (!u)
		return 0;
	keys = g_new(gint64, a->len * 4 + 1);
	for (guint i = 0; i < a->len; i++) {
		const struct extent *e = a->pdata[i];
		for (uint64_t b = (uint64_t)e->off / u; b * u < (uint64_t)e->off + e->len; b++) {
			if (b < x->count.first[l] || g_hash_table_contains(seen, &(gint64){(gint64)b}))
				continue;
			/* Small maps only: keys live in a fixed array. */
			ck_assert_uint_lt(n, a->len * 4 + 1);
			keys[n] = (gint64)b;
			g_hash_table_add(seen, &keys[n]);
			n++;
		}
	}
	return n;
}

static void ck_counts(const struct extmap *x)
{
	ck_assert(!extmap_count_stale(x));
	for (int l = 0; l < EXT_COUNT_LEVELS; l++)
		ck_assert_uint_eq(x->count.blocks[l], cnt_model(x, l));
}

/* The case: 1000 one-byte writes 4 KiB apart need 1000 blocks, not one. */
START_TEST(test_count_scattered_bytes)
{
	struct extmap cm;

	extmap_init(&cm, NULL);
	extmap_count_reset(&cm, cnt_units, 0);
	for (int i = 0; i < 1000; i++)
		cnt_put(&cm, (off_t)i * CNT_BS, 1, 1);
	ck_assert_uint_eq(cm.bytes, 1000);
	ck_assert_uint_eq(cm.count.blocks[0], 1000);
	ck_assert_uint_eq(cm.count.blocks[1], 1); /* 4 MB: one indirect block's range */
	ck_assert_uint_eq(cm.count.blocks[2], 1);
	ck_counts(&cm);
	/* More bytes in blocks already counted need nothing. */
	cnt_put(&cm, 100, 10, 2);
	cnt_put(&cm, 0, 2 * CNT_BS, 3);
	ck_assert_uint_eq(cm.count.blocks[0], 1000);
	ck_counts(&cm);
	extmap_clear(&cm);
}
END_TEST

/* Blocks below the lower's allocated prefix are not counted; the block
 * holding the prefix's end is allocated too. */
START_TEST(test_count_allocated_prefix)
{
	struct extmap cm;
	uint64_t add[EXT_COUNT_LEVELS];

	extmap_init(&cm, NULL);
	for (int i = 0; i < 1000; i++)
		cnt_put(&cm, (off_t)i * CNT_BS, 1, 1);
	extmap_count_reset(&cm, cnt_units, 2 * 1024 * 1024 + 1);
	ck_assert_uint_eq(cm.count.first[0], 513);
	ck_assert_uint_eq(cm.count.blocks[0], 1000 - 513);
	ck_assert_uint_eq(cm.count.blocks[1], 0); /* its indirect block exists */
	ck_counts(&cm);
	extmap_count_need(&cm, 0, 100 * CNT_BS, add);
	ck_assert_uint_eq(add[0], 0);
	/* A write across the prefix's end: only the blocks past it. */
	extmap_count_need(&cm, 510 * CNT_BS + 7, 5 * CNT_BS, add);
	ck_assert_uint_eq(add[0], 0); /* 513..515 already touched */
	extmap_count_need(&cm, 5000 * CNT_BS - 1, 2, add);
	ck_assert_uint_eq(add[0], 2);
	ck_assert_uint_eq(add[1], 1);
	extmap_clear(&cm);
}
END_TEST

/* Many small writes inside one block, and one extent over many blocks. */
START_TEST(test_count_dense_and_long)
{
	struct extmap cm;

	extmap_init(&cm, NULL);
	extmap_count_reset(&cm, cnt_units, 0);
	for (int i = 0; i < 40; i++)
		cnt_put(&cm, 8192 + i * 100, 10, 1);
	ck_assert_uint_eq(cm.count.blocks[0], 1);
	cnt_put(&cm, 3 * CNT_BS - 1, 10 * CNT_BS + 2, 2); /* blocks 2..13 */
	ck_assert_uint_eq(cm.count.blocks[0], 12);
	ck_counts(&cm);
	ck_assert_uint_eq(extmap_blocks_in(&cm, 0, UINT64_MAX, CNT_BS), 12);
	ck_assert_uint_eq(extmap_blocks_in(&cm, 5, 7, CNT_BS), 2);
	ck_assert_uint_eq(extmap_blocks_in(&cm, 14, UINT64_MAX, CNT_BS), 0);
	extmap_clear(&cm);
}
END_TEST

START_TEST(test_count_truncate)
{
	struct extmap cm;

	extmap_init(&cm, NULL);
	for (int i = 0; i < 100; i++)
		cnt_put(&cm, (off_t)i * 2 * CNT_BS, 1, 1);
	extmap_count_reset(&cm, cnt_units, 50 * CNT_BS);
	ck_assert_uint_eq(cm.count.blocks[0], 75); /* 50, 52, ... 198 */
	/* Into the middle of a block that keeps a byte: that block stays. */
	extmap_truncate_counted(&cm, 150 * CNT_BS + 1);
	ck_assert_uint_eq(cm.count.blocks[0], 51);
	ck_counts(&cm);
	/* Below the allocated prefix: it shrinks too, so rewriting past the
	 * new size counts again. */
	extmap_truncate_counted(&cm, 10 * CNT_BS);
	ck_assert_uint_eq(cm.count.first[0], 10);
	ck_assert_uint_eq(cm.count.blocks[0], 0);
	cnt_put(&cm, 20 * CNT_BS, 1, 2);
	ck_assert_uint_eq(cm.count.blocks[0], 1);
	ck_counts(&cm);
	extmap_clear(&cm);
}
END_TEST

/* A counted complete keeps it exact; a plain one leaves it stale (too high)
 * until a reset recounts. */
START_TEST(test_count_complete)
{
	struct extmap cm;
	struct iovec iov[8];
	int niov;
	off_t off;
	size_t len;

	extmap_init(&cm, NULL);
	extmap_count_reset(&cm, cnt_units, 0);
	cnt_put(&cm, 0, 3 * CNT_BS, 1);
	cnt_put(&cm, 10 * CNT_BS, 100, 2);
	len = extmap_take(&cm, 0, 1 << 20, 1, iov, 8, &niov, &off);
	ck_assert_uint_eq(len, 3 * CNT_BS);
	/* Overwritten while in flight: that block stays queued. */
	cnt_put(&cm, CNT_BS, 10, 3);
	ck_assert_uint_eq(extmap_complete_counted(&cm, 1, off, len), 3 * CNT_BS - 10);
	ck_assert_uint_eq(cm.count.blocks[0], 2);
	ck_counts(&cm);
	len = extmap_take(&cm, 0, 1 << 20, 2, iov, 8, &niov, &off);
	ck_assert_uint_eq(extmap_complete(&cm, 2, off, len), len);
	ck_assert(extmap_count_stale(&cm));
	ck_assert_uint_ge(cm.count.blocks[0], cnt_model(&cm, 0));
	cnt_put(&cm, 20 * CNT_BS, 1, 4); /* a stale count stays stale, and high */
	ck_assert(extmap_count_stale(&cm));
	extmap_count_reset(&cm, cnt_units, 0);
	ck_assert_uint_eq(cm.count.blocks[0], 2);
	ck_counts(&cm);
	extmap_clear(&cm);
}
END_TEST

/* Random counted writes, truncates, takes and completes against the walk. */
START_TEST(test_count_random)
{
	GRand *r = g_rand_new_with_seed(4242 + (guint32)_i);
	struct extmap cm;
	struct iovec iov[16];
	unsigned next = 1;

	extmap_init(&cm, NULL);
	extmap_count_reset(&cm, (const uint64_t[]){1024, 1024 * 64, 0}, 5000);
	for (int op = 0; op < scaled(3000); op++) {
		int dice = g_rand_int_range(r, 0, 100);
		off_t at = g_rand_int_range(r, 0, 1 << 18);
		int niov;
		off_t off;
		size_t len;

		if (dice < 70) {
			cnt_put(&cm, at, (size_t)g_rand_int_range(r, 1, dice < 10 ? 9000 : 300), op);
		} else if (dice < 73) {
			extmap_truncate_counted(&cm, at);
		} else {
			len = extmap_take(&cm, at, (size_t)g_rand_int_range(r, 1, 5000), next, iov,
					  16, &niov, &off);
			if (len) {
				if (dice < 90)
					extmap_complete_counted(&cm, next, off, len);
				else
					extmap_abort(&cm, next, off, len);
			}
			next++;
		}
		ck_counts(&cm);
	}
	extmap_clear(&cm);
	g_rand_free(r);
}
END_TEST

static TCase *count_tcase(void)
{
	TCase *ct = tcase_create("count");

	tcase_add_test(ct, test_count_scattered_bytes);
	tcase_add_test(ct, test_count_allocated_prefix);
	tcase_add_test(ct, test_count_dense_and_long);
	tcase_add_test(ct, test_count_truncate);
	tcase_add_test(ct, test_count_complete);
	tcase_set_timeout(ct, 60);
	tcase_add_loop_test(ct, test_count_random, 0, 3);
	return ct;
}

static Suite *extents_suite(void)
{
	Suite *s = suite_create("extents");
	TCase *tc = tcase_create("map");
	TCase *fl = tcase_create("flight");
	TCase *mem = tcase_create("memory");
	TCase *rnd = tcase_create("random");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_empty);
	tcase_add_test(tc, test_write_into_empty);
	tcase_add_test(tc, test_overwrite_inside);
	tcase_add_test(tc, test_overwrite_head_and_tail);
	tcase_add_test(tc, test_overwrite_several);
	tcase_add_test(tc, test_overwrite_exact);
	tcase_add_test(tc, test_coalesce_appends);
	tcase_add_test(tc, test_coalesce_max);
	tcase_add_test(tc, test_coalesce_shared_buffer);
	tcase_add_test(tc, test_overlay_holes);
	tcase_add_test(tc, test_truncate);
	suite_add_tcase(s, tc);

	tcase_add_checked_fixture(fl, setup, teardown);
	tcase_add_test(fl, test_take_contiguous);
	tcase_add_test(fl, test_take_stops_at_gap);
	tcase_add_test(fl, test_take_splits_at_max);
	tcase_add_test(fl, test_take_niov_max);
	tcase_add_test(fl, test_take_from_and_wrap);
	tcase_add_test(fl, test_take_runs_one_flight);
	tcase_add_test(fl, test_take_skips_in_flight);
	tcase_add_test(fl, test_complete);
	tcase_add_test(fl, test_overwrite_in_flight_then_complete);
	tcase_add_test(fl, test_truncate_in_flight_then_complete);
	tcase_add_test(fl, test_abort_requeues);
	tcase_add_test(fl, test_in_flight_buffer_survives_full_overwrite);
	tcase_add_test(fl, test_in_flight_buffer_not_moved_by_append);
	tcase_add_test(fl, test_gen_order);
	tcase_add_test(fl, test_gen_overwrite_keeps_older);
	tcase_add_test(fl, test_gen_truncate_takes_a_place);
	suite_add_tcase(s, fl);

	tcase_add_checked_fixture(mem, setup, teardown);
	tcase_add_test(mem, test_mem_tiny_writes);
	tcase_add_test(mem, test_mem_shared_total);
	tcase_add_test(mem, test_compact_after_overwrites);
	tcase_add_test(mem, test_compact_after_truncate);
	tcase_add_test(mem, test_compact_waits_for_flight);
	tcase_add_test(mem, test_growth_bounded);
	tcase_add_test(mem, test_enomem_leaves_map);
	tcase_add_test(mem, test_enomem_append_falls_back);
	tcase_add_test(mem, test_enomem_take_whole);
	suite_add_tcase(s, mem);

	tcase_set_timeout(rnd, 60);
	tcase_add_loop_test(rnd, test_random_against_model, 0, 4);
	suite_add_tcase(s, rnd);
	suite_add_tcase(s, count_tcase());
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(extents_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
