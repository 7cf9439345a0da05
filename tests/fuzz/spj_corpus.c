/*
 * spj-corpus DIR: writes the seed corpus of fuzz_spool_journal.c into DIR
 * (tests/fuzz/corpus/spool_journal/): real segments made with the writer of
 * sched/spool_journal.c, the same torn, flipped, stale and patched (a bad
 * path or type, checksums made good again), and inputs for the target's
 * sealed reading (record descriptors, see fuzz_spool_journal.c). Salts are
 * random: each run writes other bytes, all as good. Every file stays under
 * the fuzzers' 8192-byte inputs.
 */
#include <errno.h>
#include <fcntl.h>
#include <glib.h>
#include <glib/gstdio.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "spool_journal.h"

static int tmpfd;
static const char *out_dir;

static void die(const char *what, int err)
{
	fprintf(stderr, "spj-corpus: %s: %s\n", what, spj_strerror(err));
	exit(1);
}

static void seed(const char *name, const void *data, size_t len)
{
	g_autofree char *path = g_build_filename(out_dir, name, NULL);
	GError *e = NULL;

	if (len > 8192 || !g_file_set_contents(path, data, (gssize)len, &e)) {
		fprintf(stderr, "spj-corpus: %s: %s\n", path,
			e ? e->message : "over 8192 bytes");
		exit(1);
	}
}

static void add(struct spj_writer *w, enum spj_type type, const char *path, uint64_t off,
		uint64_t len, const void *payload, size_t plen)
{
	static const uint8_t handle[8] = {1, 0, 0, 0, 0x2a, 0, 0, 0};
	struct spj_record r = {.type = type,
			       .path = path,
			       .offset = off,
			       .length = len,
			       .payload_len = plen,
			       .handle = handle,
			       .handle_len = type == SPJ_WRITE ? sizeof(handle) : 0,
			       .handle_type = type == SPJ_WRITE ? 1 : 0,
			       .mode = type == SPJ_FALLOCATE ? 1 : 0};
	int err = spj_append(w, &r, payload);

	if (err)
		die("spj_append", err);
}

/* A segment `name` in the temp dir, filled by fill; its bytes. */
static GByteArray *segment(const char *name, void (*fill)(struct spj_writer *))
{
	g_autofree char *path = g_strdup_printf("/proc/self/fd/%d/%s", tmpfd, name);
	struct spj_writer *w;
	char *data;
	gsize len;
	int err = spj_writer_open(tmpfd, name, "0a1b2c3d-uuid-of-the-medium", 100, &w);

	if (err)
		die("spj_writer_open", err);
	fill(w);
	err = spj_close(w);
	if (err)
		die("spj_close", err);
	if (!g_file_get_contents(path, &data, &len, NULL))
		die(path, -EIO);
	unlinkat(tmpfd, name, 0);
	return g_byte_array_new_take((guint8 *)data, len);
}

/* Where record `index` (0 first) of segment b starts and ends. */
static void record_at(const GByteArray *b, unsigned index, size_t *start, size_t *end)
{
	struct spj_reader *rd;
	struct spj_record rec;
	const void *p;
	int err = spj_reader_open_mem(b->data, b->len, &rd);

	if (err)
		die("spj_reader_open_mem", err);
	*start = spj_reader_info(rd)->header_size;
	for (unsigned i = 0; i <= index; i++) {
		if (i)
			*start = spj_reader_offset(rd);
		if (spj_next(rd, &rec, &p) != SPJ_OK)
			die("spj_next", -EINVAL);
	}
	*end = spj_reader_offset(rd);
	spj_reader_close(rd);
}

static void every_type(struct spj_writer *w)
{
	uint8_t times[SPJ_TIMES_SIZE];

	spj_times_pack(times, 1700000000000000000ll, SPJ_TIME_OMIT);
	add(w, SPJ_WRITE, "DCIM/100/IMG_0001.JPG", 0, 11, "hello world", 11);
	add(w, SPJ_TRUNCATE, "DCIM/100/IMG_0001.JPG", 4, 0, NULL, 0);
	add(w, SPJ_FALLOCATE, "DCIM/100/IMG_0001.JPG", 4096, 8192, NULL, 0);
	add(w, SPJ_TIMES, "DCIM/100/IMG_0001.JPG", 0, 0, times, sizeof(times));
	add(w, SPJ_RENAME, "DCIM/100/IMG_0001.JPG", 0, 0, "DCIM/keep.jpg", 13);
	add(w, SPJ_UNLINK, "tmp/.~lock", 0, 0, NULL, 0);
}

static void many_small(struct spj_writer *w)
{
	char data[64];

	for (int i = 0; i < 40; i++) {
		memset(data, 'a' + i % 26, sizeof(data));
		add(w, SPJ_WRITE, i % 2 ? "a" : "b/c", (uint64_t)i * 37, 1 + i % 60, data,
		    1 + i % 60);
	}
}

static void three(struct spj_writer *w)
{
	add(w, SPJ_WRITE, "f", 0, 5, "12345", 5);
	add(w, SPJ_WRITE, "f", 5, 5, "67890", 5);
	add(w, SPJ_TRUNCATE, "f", 7, 0, NULL, 0);
}

static void five(struct spj_writer *w)
{
	three(w);
	add(w, SPJ_RENAME, "f", 0, 0, "g", 1);
	add(w, SPJ_UNLINK, "g", 0, 0, NULL, 0);
}

/* Rewrite the record at `at` (to `end`) and make its checksums good again. */
static void reseal(GByteArray *b, size_t at, size_t end)
{
	uint32_t crc = spj_crc32c(0, b->data + at + 8, end - at - 8);

	for (int i = 0; i < 4; i++)
		b->data[at + 4 + i] = (uint8_t)(crc >> (8 * i));
	crc = spj_crc32c(0, b->data + at + 4, SPJ_REC_HDR_SIZE - 4);
	for (int i = 0; i < 4; i++)
		b->data[at + i] = (uint8_t)(crc >> (8 * i));
}

static GByteArray *copy_of(const GByteArray *b, size_t len)
{
	GByteArray *c = g_byte_array_sized_new((guint)len);

	g_byte_array_append(c, b->data, (guint)len);
	return c;
}

/* Descriptors for the sealed reading: byte 0 (cut), id length - 1, first seq, id,
 * then per record: type, flags, [handle length], handle, handle type, path
 * (a length byte and the bytes), then what the type takes. */
static void sealed_seeds(void)
{
	/* One record a line. */
	/* clang-format off */
	static const uint8_t good[] = {
	    0x00, 2, 7, 'u', 'i', 'd',
	    SPJ_WRITE, 0x10, 4, 1, 2, 3, 4, 1, 3, 'a', '/', 'b', 2, 5,
	    'h', 'e', 'l', 'l', 'o',
	    SPJ_TRUNCATE, 0x00, 0, 1, 'a', 0,
	    SPJ_FALLOCATE, 0x00, 0, 1, 'a', 1, 9, 1,
	    SPJ_TIMES, 0x00, 0, 1, 'a',
	    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
	    SPJ_RENAME, 0x00, 0, 1, 'a', 3, 'n', '/', 'b',
	    SPJ_UNLINK, 0x00, 0, 3, 'n', '/', 'b'};
	static const uint8_t bad_paths[] = {
	    0x00, 0, 0, 'm',
	    SPJ_UNLINK, 0x00, 0, 1, 'x',
	    SPJ_UNLINK, 0x00, 0, 4, '.', '.', '/', 'x',
	    SPJ_RENAME, 0x00, 0, 1, 'x', 5, 'a', '/', '.', '/', 'b',
	    SPJ_UNLINK, 0x00, 0, 4, '/', 'a', 'b', 's'};
	/* Cut 5 bytes; a bad header crc, a stale salt, fields that do not fit. */
	static const uint8_t spoilt[] = {
	    0xc5, 1, 0x81, 'i', 'd',
	    SPJ_UNLINK, 0x00, 0, 1, 'a',
	    SPJ_UNLINK, 0x04, 0, 1, 'b',
	    SPJ_UNLINK, 0x00, 0, 1, 'c',
	    SPJ_UNLINK, 0x06, 0, 1, 'd', 3,
	    SPJ_WRITE, 0x0d, 0, 1, 'e', 3, 0, 5, 3, 'x', 'y', 'z', 0xff};
	/* 4096 bytes in names of 255; 4097; names of 256. */
	static const uint8_t long_paths[] = {
	    0x00, 0, 1, 'l',
	    SPJ_UNLINK, 0x00, 0, 0xc2, 5,
	    SPJ_UNLINK, 0x00, 0, 0xc3, 0,
	    SPJ_UNLINK, 0x00, 0, 0xc0, 6};
	/* clang-format on */

	seed("20-sealed-every-type", good, sizeof(good));
	seed("21-sealed-bad-paths", bad_paths, sizeof(bad_paths));
	seed("22-sealed-spoilt", spoilt, sizeof(spoilt));
	seed("23-sealed-long-paths", long_paths, sizeof(long_paths));
}

int main(int argc, char **argv)
{
	g_autofree char *tmp = g_dir_make_tmp("spj-corpus-XXXXXX", NULL);
	GByteArray *all, *many, *a, *old, *c;
	size_t hsize, start, end;

	if (argc != 2 || !tmp) {
		fprintf(stderr, "usage: spj-corpus DIR\n");
		return 2;
	}
	out_dir = argv[1];
	tmpfd = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (tmpfd < 0)
		die(tmp, -errno);
	all = segment("all", every_type);
	many = segment("many", many_small);
	a = segment("a", three);
	old = segment("old", five); /* the same 3 records first, another salt */
	record_at(all, 0, &hsize, &end);
	seed("01-every-type", all->data, all->len);
	seed("02-many-small", many->data, many->len);
	seed("03-three", a->data, a->len);
	seed("04-header-only", all->data, hsize);

	/* Torn: inside the last record's header, inside its body. */
	seed("05-torn-header", all->data, all->len - 30);
	seed("06-torn-body", all->data, all->len - 3);
	/* A flipped bit in the second record's header: valid records after it. */
	record_at(all, 1, &start, &end);
	c = copy_of(all, all->len);
	c->data[start + 20] ^= 0x04;
	seed("07-flipped-middle", c->data, c->len);
	g_byte_array_unref(c);
	/* Zeros where the tail should be (an extended file whose blocks never came). */
	c = copy_of(a, a->len);
	g_byte_array_set_size(c, c->len + 120);
	memset(c->data + a->len, 0, 120);
	seed("08-zero-tail", c->data, c->len);
	g_byte_array_unref(c);
	/* The new segment's 3 records, then an older use's records (its salt). */
	c = copy_of(a, a->len);
	g_byte_array_append(c, old->data + a->len, old->len - a->len);
	seed("09-stale-tail", c->data, c->len);
	g_byte_array_unref(c);

	/* Headers: magic, version, checksum. */
	c = copy_of(a, a->len);
	c->data[0] = 'X';
	seed("10-bad-magic", c->data, c->len);
	c->data[0] = 'S';
	c->data[8] = 2;
	seed("11-bad-version", c->data, c->len);
	c->data[8] = 1;
	c->data[20] ^= 1;
	seed("12-bad-header-crc", c->data, c->len);
	g_byte_array_unref(c);

	/* Good checksums over bad contents: the first record's path "f" (after
	 * its handle) made ".", then its type made 9. */
	record_at(a, 0, &start, &end);
	c = copy_of(a, a->len);
	c->data[start + SPJ_REC_HDR_SIZE + c->data[start + 54]] = '.';
	reseal(c, start, end);
	seed("13-refused-path", c->data, c->len);
	c->data[start + SPJ_REC_HDR_SIZE + c->data[start + 54]] = 'f';
	c->data[start + 55] = 9;
	reseal(c, start, end);
	seed("14-bad-type", c->data, c->len);
	g_byte_array_unref(c);
	sealed_seeds();

	g_byte_array_unref(all);
	g_byte_array_unref(many);
	g_byte_array_unref(a);
	g_byte_array_unref(old);
	close(tmpfd);
	g_rmdir(tmp);
	return 0;
}
