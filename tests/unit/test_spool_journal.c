/*
 * The spool journal's format (sched/spool_journal.c): round trips, torn tails
 * at every byte, bit flips at every byte, stale salts, bad headers, bad
 * paths, CRC-32C vectors, the atomic file replacement. Records with bad
 * fields or paths (which the writer refuses to write) are made by raw_record,
 * a second, independent encoder of the layout in the DESIGN comment.
 */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glib.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "spool_journal.h"

#define SEG "seg-1"
#define MEDIUM "2f1c5a9e-0d3b-4f7a-9c61-5b8e2d4a7f10"

static int dfd = -1; /* the test's temp directory */
static char *dpath;

static void rm_tree_at(int dir)
{
	DIR *d = fdopendir(dup(dir));
	struct dirent *e;

	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (unlinkat(dir, e->d_name, 0) < 0 &&
		    (errno == EISDIR || errno == EPERM)) {
			int sub = openat(dir, e->d_name, O_RDONLY | O_DIRECTORY);
			ck_assert_int_ge(sub, 0);
			rm_tree_at(sub);
			close(sub);
			unlinkat(dir, e->d_name, AT_REMOVEDIR);
		}
	}
	closedir(d);
}

static void setup(void)
{
	dpath = g_dir_make_tmp("spj-XXXXXX", NULL);
	ck_assert_ptr_nonnull(dpath);
	dfd = open(dpath, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	ck_assert_int_ge(dfd, 0);
}

static void teardown(void)
{
	rm_tree_at(dfd);
	close(dfd);
	rmdir(dpath);
	g_free(dpath);
}

/* ---- files ---- */

static GBytes *slurp(const char *name)
{
	g_autofree char *path = g_build_filename(dpath, name, NULL);
	char *data;
	gsize len;

	ck_assert_msg(g_file_get_contents(path, &data, &len, NULL), "read %s", name);
	return g_bytes_new_take(data, len);
}

static void put_file(const char *name, const void *data, size_t len)
{
	int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, data, len), (ssize_t)len);
	close(fd);
}

static uint64_t file_size(const char *name)
{
	struct stat st;

	ck_assert_int_eq(fstatat(dfd, name, &st, 0), 0);
	return (uint64_t)st.st_size;
}

static unsigned count_entries(void)
{
	DIR *d = fdopendir(dup(dfd));
	struct dirent *e;
	unsigned n = 0;

	rewinddir(d);
	while ((e = readdir(d)))
		n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
	closedir(d);
	return n;
}

/* ---- an independent encoder of the layout ---- */

static void le(GByteArray *b, uint64_t v, unsigned bytes)
{
	for (unsigned i = 0; i < bytes; i++)
		g_byte_array_append(b, (const guint8[]){(guint8)(v >> (8 * i))}, 1);
}

static void set32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

struct raw {
	unsigned type;
	uint64_t salt, seq, offset, length;
	uint32_t mode;
	int32_t handle_type;
	const void *handle;
	size_t handle_len;
	const char *path;
	size_t path_len; /* 0: strlen(path) */
	const void *payload;
	size_t payload_len;
	uint32_t claim_payload_len; /* 0: payload_len; else what the header says */
};

static void raw_record(GByteArray *b, const struct raw *r)
{
	size_t plen = r->path_len ? r->path_len : strlen(r->path), at = b->len;
	uint32_t crc;

	le(b, 0, 8);
	le(b, r->salt, 8);
	le(b, r->seq, 8);
	le(b, r->offset, 8);
	le(b, r->length, 8);
	le(b, r->claim_payload_len ? r->claim_payload_len : r->payload_len, 4);
	le(b, r->mode, 4);
	le(b, (uint32_t)r->handle_type, 4);
	le(b, plen, 2);
	le(b, r->handle_len, 1);
	le(b, r->type, 1);
	g_byte_array_append(b, r->handle, (guint)r->handle_len);
	g_byte_array_append(b, (const guint8 *)r->path, (guint)plen);
	g_byte_array_append(b, r->payload, (guint)r->payload_len);
	crc = spj_crc32c(0, b->data + at + 8, b->len - at - 8);
	set32(b->data + at + 4, crc);
	set32(b->data + at, spj_crc32c(0, b->data + at + 4, SPJ_REC_HDR_SIZE - 4));
}

struct raw_seg {
	const char *magic;
	uint32_t version;
	const char *id;
	size_t id_len; /* 0: strlen(id) */
	unsigned claim_id_len;
	uint16_t reserved;
	uint64_t salt, first_seq;
	bool bad_crc;
};

static GByteArray *raw_segment(const struct raw_seg *s)
{
	GByteArray *b = g_byte_array_new();
	size_t id_len = s->id_len ? s->id_len : strlen(s->id);

	g_byte_array_append(b, (const guint8 *)(s->magic ? s->magic : SPJ_MAGIC), 8);
	le(b, s->version ? s->version : SPJ_VERSION, 4);
	le(b, s->claim_id_len ? s->claim_id_len : id_len, 2);
	le(b, s->reserved, 2);
	le(b, s->salt, 8);
	le(b, s->first_seq, 8);
	g_byte_array_append(b, (const guint8 *)s->id, (guint)id_len);
	le(b, spj_crc32c(0, b->data, b->len) ^ s->bad_crc, 4);
	return b;
}

/* ---- records written and expected ---- */

struct want {
	enum spj_type type;
	const char *path;
	uint64_t offset, length;
	uint32_t mode;
	const void *payload;
	size_t payload_len;
	const void *handle;
	uint32_t handle_len;
	int32_t handle_type;
};

static struct want wr(const char *path, uint64_t offset, const void *data, size_t len)
{
	return (struct want){.type = SPJ_WRITE,
			     .path = path,
			     .offset = offset,
			     .length = len,
			     .payload = data,
			     .payload_len = len};
}

static void append(struct spj_writer *w, const struct want *x)
{
	struct spj_record r = {.type = x->type,
			       .handle_type = x->handle_type,
			       .handle_len = x->handle_len,
			       .handle = x->handle,
			       .path = x->path,
			       .offset = x->offset,
			       .length = x->length,
			       .mode = x->mode,
			       .payload_len = x->payload_len};

	ck_assert_int_eq(spj_append(w, &r, x->payload), 0);
}

static void same(const struct spj_record *got, const void *payload, const struct want *x,
		 uint64_t seq)
{
	ck_assert_int_eq(got->type, x->type);
	ck_assert_uint_eq(got->seq, seq);
	ck_assert_str_eq(got->path, x->path);
	ck_assert_uint_eq(got->offset, x->offset);
	ck_assert_uint_eq(got->length, x->length);
	ck_assert_uint_eq(got->mode, x->mode);
	ck_assert_uint_eq(got->payload_len, x->payload_len);
	if (x->payload_len)
		ck_assert_mem_eq(payload, x->payload, x->payload_len);
	ck_assert_int_eq(((const char *)payload)[x->payload_len], '\0');
	ck_assert_uint_eq(got->handle_len, x->handle_len);
	ck_assert_int_eq(got->handle_type, x->handle_type);
	if (x->handle_len)
		ck_assert_mem_eq(got->handle, x->handle, x->handle_len);
}

static struct spj_writer *new_segment(const char *name, uint64_t first_seq)
{
	struct spj_writer *w;

	ck_assert_int_eq(spj_writer_open(dfd, name, MEDIUM, first_seq, &w), 0);
	return w;
}

static void write_segment(const char *name, uint64_t first_seq, const struct want *x,
			  size_t n)
{
	struct spj_writer *w = new_segment(name, first_seq);

	for (size_t i = 0; i < n; i++)
		append(w, &x[i]);
	ck_assert_int_eq(spj_sync(w), 0);
	ck_assert_int_eq(spj_close(w), 0);
}

/* Reads n good records, then wants `end` at end_off, twice (it is final). */
static void expect(struct spj_reader *rd, uint64_t first_seq, const struct want *x,
		   size_t n, int end, uint64_t end_off)
{
	struct spj_record rec;
	const void *payload;

	for (size_t i = 0; i < n; i++) {
		int res = spj_next(rd, &rec, &payload);
		ck_assert_msg(res == SPJ_OK, "record %zu: %d (%s)", i, res,
			      spj_reader_why(rd));
		same(&rec, payload, &x[i], first_seq + i);
	}
	for (int k = 0; k < 2; k++) {
		int res = spj_next(rd, &rec, &payload);
		ck_assert_msg(res == end, "after %zu records: %d, not %d (%s)", n, res,
			      end, spj_reader_why(rd));
		ck_assert_uint_eq(spj_reader_offset(rd), end_off);
	}
}

static void expect_file(const char *name, uint64_t first_seq, const struct want *x,
			size_t n, int end, uint64_t end_off)
{
	struct spj_reader *rd;

	ck_assert_int_eq(spj_reader_open(dfd, name, &rd), 0);
	expect(rd, first_seq, x, n, end, end_off);
	spj_reader_close(rd);
}

static void expect_mem(const void *data, size_t len, uint64_t first_seq,
		       const struct want *x, size_t n, int end, uint64_t end_off)
{
	struct spj_reader *rd;

	ck_assert_int_eq(spj_reader_open_mem(data, len, &rd), 0);
	expect(rd, first_seq, x, n, end, end_off);
	spj_reader_close(rd);
}

static const uint8_t fh[] = {0x81, 0x00, 0x02, 0x00, 0xde, 0xad, 0xbe, 0xef, 0x12, 0x34};
static uint8_t times_buf[SPJ_TIMES_SIZE];

/* One record of every type. */
static void every_type(struct want out[6])
{
	static const char data[] = "hello, slow medium";

	spj_times_pack(times_buf, 1700000000123456789ll, SPJ_TIME_OMIT);
	out[0] = wr("dir/file.txt", 4096, data, sizeof(data) - 1);
	out[0].handle = fh;
	out[0].handle_len = sizeof(fh);
	out[0].handle_type = 1;
	out[1] =
	    (struct want){.type = SPJ_TRUNCATE, .path = "dir/file.txt", .offset = 123};
	out[2] = (struct want){.type = SPJ_FALLOCATE,
			       .path = "dir/file.txt",
			       .offset = 1 << 20,
			       .length = 1 << 16,
			       .mode = 1 /* FALLOC_FL_KEEP_SIZE */};
	out[3] = (struct want){.type = SPJ_TIMES,
			       .path = "dir/file.txt",
			       .payload = times_buf,
			       .payload_len = SPJ_TIMES_SIZE,
			       .handle = fh,
			       .handle_len = 4,
			       .handle_type = -7};
	out[4] = (struct want){.type = SPJ_RENAME,
			       .path = "dir/file.txt",
			       .payload = "other dir/new name",
			       .payload_len = 18};
	out[5] = (struct want){.type = SPJ_UNLINK, .path = "other dir/new name"};
}

/* ---- CRC-32C ---- */

static uint32_t crc_bitwise(const uint8_t *p, size_t n)
{
	uint32_t c = 0xffffffffu;

	while (n--) {
		c ^= *p++;
		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1)));
	}
	return ~c;
}

START_TEST(test_crc32c_vectors)
{
	uint8_t b[32];
	g_autoptr(GRand) rng = g_rand_new_with_seed(7);
	uint8_t big[1000];

	ck_assert_uint_eq(spj_crc32c(0, "123456789", 9), 0xe3069283u);
	ck_assert_uint_eq(spj_crc32c(0, "", 0), 0);
	/* RFC 3720 (iSCSI), B.4. */
	memset(b, 0, sizeof(b));
	ck_assert_uint_eq(spj_crc32c(0, b, 32), 0x8a9136aau);
	memset(b, 0xff, sizeof(b));
	ck_assert_uint_eq(spj_crc32c(0, b, 32), 0x62a8ab43u);
	for (int i = 0; i < 32; i++)
		b[i] = (uint8_t)i;
	ck_assert_uint_eq(spj_crc32c(0, b, 32), 0x46dd794eu);
	for (int i = 0; i < 32; i++)
		b[i] = (uint8_t)(31 - i);
	ck_assert_uint_eq(spj_crc32c(0, b, 32), 0x113fdb5cu);
	/* Every length and alignment against the bit-by-bit definition; split
	 * anywhere, continued, the same. */
	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (uint8_t)g_rand_int(rng);
	for (size_t off = 0; off < 9; off++)
		for (size_t n = 0; n + off <= 200; n++)
			ck_assert_uint_eq(spj_crc32c(0, big + off, n),
					  crc_bitwise(big + off, n));
	for (size_t cut = 0; cut <= sizeof(big); cut++)
		ck_assert_uint_eq(
		    spj_crc32c(spj_crc32c(0, big, cut), big + cut, sizeof(big) - cut),
		    crc_bitwise(big, sizeof(big)));
}
END_TEST

/* ---- round trips ---- */

START_TEST(test_round_trip_every_type)
{
	struct want x[6];
	struct spj_reader *rd;
	const struct spj_segment_info *info;
	int64_t at, mt;

	every_type(x);
	write_segment(SEG, 42, x, 6);
	ck_assert_int_eq(spj_reader_open(dfd, SEG, &rd), 0);
	info = spj_reader_info(rd);
	ck_assert_uint_eq(info->version, SPJ_VERSION);
	ck_assert_str_eq(info->medium_id, MEDIUM);
	ck_assert_uint_eq(info->medium_id_len, strlen(MEDIUM));
	ck_assert_uint_eq(info->first_seq, 42);
	ck_assert_uint_ne(info->salt, 0);
	ck_assert_uint_eq(info->header_size, SPJ_SEG_HDR_FIXED + strlen(MEDIUM) + 4);
	expect(rd, 42, x, 6, SPJ_END, file_size(SEG));
	ck_assert_str_eq(spj_reader_why(rd), "end of segment");
	spj_reader_close(rd);

	spj_times_unpack(times_buf, &at, &mt);
	ck_assert_int_eq(at, 1700000000123456789ll);
	ck_assert_int_eq(mt, SPJ_TIME_OMIT);
}
END_TEST

/* The bytes on disk are the layout of the DESIGN comment, exactly. */
START_TEST(test_layout)
{
	struct want x[6];
	g_autoptr(GBytes) file = NULL;
	g_autoptr(GByteArray) want = NULL;
	struct spj_reader *rd;
	uint64_t salt;

	every_type(x);
	write_segment(SEG, 9, x, 6);
	ck_assert_int_eq(spj_reader_open(dfd, SEG, &rd), 0);
	salt = spj_reader_info(rd)->salt;
	spj_reader_close(rd);
	want = raw_segment(&(struct raw_seg){.id = MEDIUM, .salt = salt, .first_seq = 9});
	for (unsigned i = 0; i < 6; i++)
		raw_record(want, &(struct raw){.type = x[i].type,
					       .salt = salt,
					       .seq = 9 + i,
					       .offset = x[i].offset,
					       .length = x[i].length,
					       .mode = x[i].mode,
					       .handle_type = x[i].handle_type,
					       .handle = x[i].handle,
					       .handle_len = x[i].handle_len,
					       .path = x[i].path,
					       .payload = x[i].payload,
					       .payload_len = x[i].payload_len});
	file = slurp(SEG);
	ck_assert_uint_eq(g_bytes_get_size(file), want->len);
	ck_assert_mem_eq(g_bytes_get_data(file, NULL), want->data, want->len);
}
END_TEST

START_TEST(test_many_records)
{
	enum { N = 600 };
	g_autoptr(GRand) rng = g_rand_new_with_seed(1234);
	uint64_t fill = 88172645463325252ull;
	struct want *x = g_new0(struct want, N);
	char **paths = g_new0(char *, N);
	uint8_t **bufs = g_new0(uint8_t *, N);
	struct spj_writer *w = new_segment(SEG, 1);
	uint64_t total = 0;

	for (unsigned i = 0; i < N; i++) {
		/* Sizes of every magnitude: 1 byte to 1 MiB, a few at the edges of 4 KiB.
		 */
		size_t len = i % 50 == 7 ? 4095 + i % 3
					 : (size_t)1 << g_rand_int_range(rng, 0, 18);
		len += (size_t)g_rand_int_range(rng, 0, (gint32)len);
		if (i % 100 == 3)
			len = 1;
		bufs[i] = g_malloc(len);
		for (size_t k = 0; k < len;
		     k++) { /* xorshift64: quick, even under valgrind */
			fill ^= fill << 13;
			fill ^= fill >> 7;
			fill ^= fill << 17;
			bufs[i][k] = (uint8_t)fill;
		}
		paths[i] = g_strdup_printf("d%u/f%u", i % 7, i);
		x[i] = wr(paths[i], total, bufs[i], len);
		x[i].handle = fh;
		x[i].handle_len = i % (sizeof(fh) + 1);
		x[i].handle_type = (int32_t)i;
		total += len;
		append(w, &x[i]);
		ck_assert_uint_eq(spj_writer_next_seq(w), 2 + i);
	}
	ck_assert_uint_eq(spj_writer_size(w), file_size(SEG));
	ck_assert_int_eq(spj_sync(w), 0);
	ck_assert_int_eq(spj_close(w), 0);
	expect_file(SEG, 1, x, N, SPJ_END, file_size(SEG));
	for (unsigned i = 0; i < N; i++) {
		g_free(bufs[i]);
		g_free(paths[i]);
	}
	g_free(bufs);
	g_free(paths);
	g_free(x);
}
END_TEST

/* The limits, at and past them; the writer numbers records itself. */
START_TEST(test_limits)
{
	uint8_t *big = g_malloc0(SPJ_PAYLOAD_MAX + 1);
	uint8_t handle[SPJ_HANDLE_MAX + 1] = {1, 2, 3};
	char *path = g_malloc(SPJ_PATH_MAX + 2);
	struct want x[3];
	struct spj_writer *w = new_segment(SEG, UINT64_MAX - 4);
	struct spj_record r = {.type = SPJ_WRITE,
			       .path = "a",
			       .length = SPJ_PAYLOAD_MAX + 1,
			       .payload_len = SPJ_PAYLOAD_MAX + 1,
			       .seq = 77};
	uint64_t size;

	big[SPJ_PAYLOAD_MAX - 1] = 0x5a;
	for (int i = 0; i <= SPJ_PATH_MAX; i++)
		path[i] = i % 8 == 7 ? '/' : 'p';
	path[SPJ_PATH_MAX - 1] = 'q';
	path[SPJ_PATH_MAX] = '\0';
	size = spj_writer_size(w);
	ck_assert_int_eq(spj_append(w, &r, big), -EFBIG);
	x[0] = wr("a", INT64_MAX - SPJ_PAYLOAD_MAX, big, SPJ_PAYLOAD_MAX);
	x[0].handle = handle;
	x[0].handle_len = SPJ_HANDLE_MAX;
	x[1] = (struct want){.type = SPJ_TRUNCATE, .path = path, .offset = INT64_MAX};
	x[2] = (struct want){.type = SPJ_RENAME,
			     .path = "a",
			     .payload = path,
			     .payload_len = SPJ_PATH_MAX};
	r = (struct spj_record){.type = SPJ_TRUNCATE,
				.path = "a",
				.handle = handle,
				.handle_len = SPJ_HANDLE_MAX + 1};
	ck_assert_int_eq(spj_append(w, &r, NULL), -EINVAL);
	r = (struct spj_record){
	    .type = SPJ_TRUNCATE, .path = "a", .offset = (uint64_t)INT64_MAX + 1};
	ck_assert_int_eq(spj_append(w, &r, NULL), -EINVAL);
	r = (struct spj_record){.type = SPJ_WRITE,
				.path = "a",
				.offset = INT64_MAX,
				.length = 1,
				.payload_len = 1};
	ck_assert_int_eq(spj_append(w, &r, "x"), -EINVAL);
	path[SPJ_PATH_MAX] = 'p';
	path[SPJ_PATH_MAX + 1] = '\0';
	r = (struct spj_record){.type = SPJ_UNLINK, .path = path};
	ck_assert_int_eq(spj_append(w, &r, NULL), -ENAMETOOLONG);
	path[SPJ_PATH_MAX] = '\0';
	ck_assert_uint_eq(spj_writer_size(w), size);
	ck_assert_uint_eq(spj_writer_next_seq(w), UINT64_MAX - 4);
	for (int i = 0; i < 3; i++)
		append(w, &x[i]);
	/* UINT64_MAX - 1 is the last number there is. */
	append(w, &x[1]);
	ck_assert_uint_eq(spj_writer_next_seq(w), UINT64_MAX);
	ck_assert_int_eq(
	    spj_append(w, &(struct spj_record){.type = SPJ_UNLINK, .path = "a"}, NULL),
	    -EOVERFLOW);
	{
		uint8_t hdr[SPJ_REC_HDR_SIZE];
		struct spj_record last = {
		    .type = SPJ_UNLINK, .path = "a", .seq = UINT64_MAX};
		ck_assert_int_eq(spj_record_header(hdr, 1, &last, NULL), -EOVERFLOW);
	}
	ck_assert_int_eq(spj_close(w), 0);
	{
		struct want y[4] = {x[0], x[1], x[2], x[1]};
		expect_file(SEG, UINT64_MAX - 4, y, 4, SPJ_END, file_size(SEG));
	}
	g_free(path);
	g_free(big);
}
END_TEST

/* A failed append leaves nothing of itself, and the writer goes on. */
START_TEST(test_append_failure_cut_back)
{
	struct want x[6];
	static uint8_t data[20000];
	struct spj_writer *w = new_segment(SEG, 1);
	struct rlimit old, lim;
	struct want big = wr("big", 0, data, sizeof(data));
	struct spj_record r = {.type = SPJ_WRITE,
			       .path = "big",
			       .length = sizeof(data),
			       .payload_len = sizeof(data)};
	void (*old_sig)(int) = signal(SIGXFSZ, SIG_IGN);
	uint64_t size;

	every_type(x);
	append(w, &x[0]);
	size = spj_writer_size(w);
	/* The file may grow by a part of the record only: a short write, then EFBIG. */
	ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
	lim = (struct rlimit){.rlim_cur = size + 1000, .rlim_max = old.rlim_max};
	ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
	ck_assert_int_eq(spj_append(w, &r, data), -EFBIG);
	ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
	signal(SIGXFSZ, old_sig);
	ck_assert_uint_eq(file_size(SEG), size);
	ck_assert_uint_eq(spj_writer_size(w), size);
	ck_assert_uint_eq(spj_writer_next_seq(w), 2);
	append(w, &big);
	append(w, &x[5]);
	ck_assert_int_eq(spj_sync(w), 0);
	ck_assert_int_eq(spj_close(w), 0);
	{
		struct want y[3] = {x[0], big, x[5]};
		expect_file(SEG, 1, y, 3, SPJ_END, file_size(SEG));
	}
}
END_TEST

/* ---- torn tails ---- */

START_TEST(test_torn_tail_every_offset)
{
	struct want x[6];
	g_autoptr(GBytes) file = NULL;
	const uint8_t *data;
	size_t len, last;
	struct spj_reader *rd;

	every_type(x);
	x[5] = x[0]; /* the last one with a handle, a path and a payload */
	write_segment(SEG, 5, x, 5);
	last = file_size(SEG);
	write_segment("full", 5, x, 6);
	file = slurp("full");
	data = g_bytes_get_data(file, &len);
	for (size_t cut = last + 1; cut < len; cut++) {
		expect_mem(data, cut, 5, x, 5, SPJ_TORN, last);
		put_file("torn", data, cut);
		expect_file("torn", 5, x, 5, SPJ_TORN, last);
		/* Cut at the offset TORN gave, the segment ends cleanly there. */
		ck_assert_int_eq(spj_cut(dfd, "torn", last), 0);
		ck_assert_uint_eq(file_size("torn"), last);
		expect_file("torn", 5, x, 5, SPJ_END, last);
	}
	/* A tail cut inside the segment header: no segment, and nothing to cut. */
	ck_assert_int_eq(spj_reader_open(dfd, SEG, &rd), 0);
	for (size_t cut = 0; cut < spj_reader_info(rd)->header_size; cut++) {
		struct spj_reader *short_rd;
		ck_assert_int_eq(spj_reader_open_mem(data, cut, &short_rd),
				 SPJ_EHDRSHORT);
		ck_assert_ptr_null(short_rd);
	}
	/* The header alone is an empty segment. */
	expect_mem(data, spj_reader_info(rd)->header_size, 5, x, 0, SPJ_END,
		   spj_reader_info(rd)->header_size);
	spj_reader_close(rd);
}
END_TEST

/* A zero-filled or garbage tail (an extended file whose blocks never came)
 * is torn, wherever it starts. */
START_TEST(test_garbage_tail)
{
	struct want x[6];
	g_autoptr(GBytes) file = NULL;
	g_autoptr(GByteArray) b = g_byte_array_new();
	size_t len;
	const uint8_t *data;

	every_type(x);
	write_segment(SEG, 1, x, 6);
	file = slurp(SEG);
	data = g_bytes_get_data(file, &len);
	for (size_t zeros = 1; zeros < 3 * SPJ_REC_HDR_SIZE; zeros += 7) {
		g_byte_array_set_size(b, 0);
		g_byte_array_append(b, data, (guint)len);
		for (size_t i = 0; i < zeros; i++)
			g_byte_array_append(
			    b, (const guint8[]){i % 2 ? 0 : (guint8)(i * 37)}, 1);
		expect_mem(b->data, b->len, 1, x, 6, SPJ_TORN, len);
	}
}
END_TEST

/* ---- bit flips ---- */

/* Flip every bit of record `victim` (of 5); what comes of it. */
static void flip_every_bit(unsigned victim, bool last)
{
	struct want x[6];
	g_autoptr(GBytes) file = NULL;
	uint64_t start, end;
	const uint8_t *data;
	uint8_t *copy;
	size_t len;

	every_type(x);
	unlinkat(dfd, "pre", 0);
	unlinkat(dfd, "upto", 0);
	unlinkat(dfd, SEG, 0);
	write_segment("pre", 1, x, victim);
	start = file_size("pre");
	write_segment("upto", 1, x, victim + 1);
	end = file_size("upto");
	write_segment(SEG, 1, x, last ? victim + 1 : 6);
	file = slurp(SEG);
	data = g_bytes_get_data(file, &len);
	copy = g_memdup2(data, len);
	for (uint64_t at = start; at < end; at++) {
		for (int bit = 0; bit < 8; bit++) {
			struct spj_reader *rd;
			struct spj_record rec;
			const void *payload;
			int res;

			copy[at] ^= (uint8_t)(1u << bit);
			ck_assert_int_eq(spj_reader_open_mem(copy, len, &rd), 0);
			expect(rd, 1, x, victim, last ? SPJ_TORN : SPJ_CORRUPT, start);
			res = spj_next(rd, &rec, &payload);
			ck_assert_int_ne(res, SPJ_OK);
			spj_reader_close(rd);
			if (bit == 3) { /* and once through a file */
				put_file("flipped", copy, len);
				expect_file("flipped", 1, x, victim,
					    last ? SPJ_TORN : SPJ_CORRUPT, start);
			}
			copy[at] ^= (uint8_t)(1u << bit);
		}
	}
	g_free(copy);
}

START_TEST(test_bit_flip_middle_record)
{
	/* Every type in the middle in turn: CORRUPT at it, nothing after it. */
	for (unsigned v = 1; v < 5; v++)
		flip_every_bit(v, false);
}
END_TEST

START_TEST(test_bit_flip_last_record)
{
	/* The last record's damage is a torn tail: nothing valid after it. */
	flip_every_bit(4, true);
}
END_TEST

/* A flipped bit in a middle record that carried a bad path: CORRUPT or REFUSED,
 * never the record, never what follows. */
START_TEST(test_bit_flip_bad_path_record)
{
	g_autoptr(GByteArray) b = NULL;
	struct spj_reader *rd;
	uint64_t salt = 0x1122334455667788ull, start, end;

	b = raw_segment(&(struct raw_seg){.id = "m", .salt = salt, .first_seq = 1});
	raw_record(
	    b, &(struct raw){.type = SPJ_UNLINK, .salt = salt, .seq = 1, .path = "ok"});
	start = b->len;
	raw_record(b, &(struct raw){
			  .type = SPJ_UNLINK, .salt = salt, .seq = 2, .path = "a/../b"});
	end = b->len;
	raw_record(
	    b, &(struct raw){.type = SPJ_UNLINK, .salt = salt, .seq = 3, .path = "c"});
	for (uint64_t at = start; at < end; at++)
		for (int bit = 0; bit < 8; bit++) {
			struct spj_record rec;
			const void *payload;
			int res;

			b->data[at] ^= (uint8_t)(1u << bit);
			ck_assert_int_eq(spj_reader_open_mem(b->data, b->len, &rd), 0);
			ck_assert_int_eq(spj_next(rd, &rec, &payload), SPJ_OK);
			res = spj_next(rd, &rec, &payload);
			ck_assert_msg(res == SPJ_CORRUPT || res == SPJ_REFUSED,
				      "byte %llu: %d", (unsigned long long)at, res);
			ck_assert_uint_eq(spj_reader_offset(rd), start);
			ck_assert_int_eq(spj_next(rd, &rec, &payload), res);
			spj_reader_close(rd);
			b->data[at] ^= (uint8_t)(1u << bit);
		}
}
END_TEST

/* The reader looks for good records after damage in windows (256 KiB in
 * spool_journal.c): one far after it, starting just before, at and after a
 * window's edge, is found through a file as in memory. */
START_TEST(test_damage_far_before_good_record)
{
	static const int delta[] = {-56, -55, -5, -1, 0, 1, 55};
	const size_t window = 256u << 10;
	struct want x[6];

	every_type(x);
	for (unsigned i = 0; i < G_N_ELEMENTS(delta); i++) {
		/* The far record starts at damaged + 1 + 2 windows + delta. */
		size_t len = (size_t)((long)(2 * window) + delta[i] - SPJ_REC_HDR_SIZE);
		uint8_t *data = g_malloc0(len);
		struct want y[3] = {x[1], wr("b", 0, data, len), x[5]};
		g_autoptr(GBytes) file = NULL;
		uint8_t *copy;
		size_t flen;
		uint64_t at;

		unlinkat(dfd, "one", 0);
		unlinkat(dfd, SEG, 0);
		write_segment("one", 1, y, 1);
		at = file_size("one");
		write_segment(SEG, 1, y, 3);
		file = slurp(SEG);
		flen = g_bytes_get_size(file);
		copy = g_memdup2(g_bytes_get_data(file, NULL), flen);
		copy[at + 20] ^= 0x10; /* the big record's seq */
		expect_mem(copy, flen, 1, y, 1, SPJ_CORRUPT, at);
		put_file("far", copy, flen);
		expect_file("far", 1, y, 1, SPJ_CORRUPT, at);
		/* Without the record after it, the damage is a torn tail. */
		put_file("far", copy, flen - SPJ_REC_HDR_SIZE - strlen(x[5].path));
		expect_file("far", 1, y, 1, SPJ_TORN, at);
		g_free(copy);
		g_free(data);
	}
}
END_TEST

/* ---- stale salt ---- */

START_TEST(test_stale_salt)
{
	struct want x[6];
	g_autoptr(GBytes) a = NULL, old = NULL;
	g_autoptr(GByteArray) b = g_byte_array_new();
	struct spj_reader *rd;
	size_t alen, olen, a3, o3;
	const uint8_t *ad, *od;

	every_type(x);
	/* The old use of the file had 6 records, the new one 3 so far. */
	write_segment("a3", 1, x, 3);
	a3 = file_size("a3");
	write_segment("old3", 1, x, 3);
	o3 = file_size("old3");
	write_segment("old", 1, x, 6);
	old = slurp("old");
	od = g_bytes_get_data(old, &olen);
	write_segment(SEG, 1, x, 3);
	a = slurp(SEG);
	ad = g_bytes_get_data(a, &alen);
	ck_assert_uint_eq(alen, a3);

	/* Old records right where the new ones stop (the same sizes): the salt
	 * tells them apart, though the sequence numbers go on. */
	ck_assert_uint_eq(o3, a3);
	g_byte_array_append(b, ad, (guint)alen);
	g_byte_array_append(b, od + o3, (guint)(olen - o3));
	ck_assert_int_eq(spj_reader_open_mem(b->data, b->len, &rd), 0);
	expect(rd, 1, x, 3, SPJ_TORN, a3);
	ck_assert_ptr_nonnull(strstr(spj_reader_why(rd), "earlier use"));
	spj_reader_close(rd);

	/* Old bytes from the middle of an old record on, old records after
	 * them: nothing of this segment follows, so a torn tail too. */
	for (size_t skew = 1; skew < 80; skew += 3) {
		g_byte_array_set_size(b, 0);
		g_byte_array_append(b, ad, (guint)alen);
		g_byte_array_append(b, od + o3 - skew, (guint)(olen - o3 + skew));
		expect_mem(b->data, b->len, 1, x, 3, SPJ_TORN, a3);
	}
}
END_TEST

/* ---- headers ---- */

static int open_raw(const struct raw_seg *s)
{
	g_autoptr(GByteArray) b = raw_segment(s);
	struct spj_reader *rd;
	int res = spj_reader_open_mem(b->data, b->len, &rd);

	if (!res) {
		ck_assert_ptr_nonnull(rd);
		spj_reader_close(rd);
	} else {
		ck_assert_ptr_null(rd);
	}
	return res;
}

START_TEST(test_bad_header)
{
	char id257[258], id256[257];
	struct spj_writer *w;
	struct spj_reader *rd;
	g_autoptr(GBytes) file = NULL;
	uint8_t *copy;
	size_t len, hsize;
	static const int named[] = {SPJ_EMAGIC, SPJ_EVERSION, SPJ_EHDRSHORT, SPJ_EHDRCRC,
				    SPJ_EHDRFIELD};

	memset(id257, 'u', 257);
	id257[257] = '\0';
	memset(id256, 'u', 256);
	id256[256] = '\0';
	ck_assert_int_eq(open_raw(&(struct raw_seg){.id = "m", .salt = 1}), 0);
	ck_assert_int_eq(open_raw(&(struct raw_seg){.id = id256, .salt = 1}), 0);
	ck_assert_int_eq(open_raw(&(struct raw_seg){.magic = "SMSPJNL\r", .id = "m"}),
			 SPJ_EMAGIC);
	ck_assert_int_eq(open_raw(&(struct raw_seg){.magic = "smspjnl\n", .id = "m"}),
			 SPJ_EMAGIC);
	ck_assert_int_eq(open_raw(&(struct raw_seg){.version = 2, .id = "m"}),
			 SPJ_EVERSION);
	ck_assert_int_eq(open_raw(&(struct raw_seg){.id = "m", .bad_crc = true}),
			 SPJ_EHDRCRC);
	ck_assert_int_eq(open_raw(&(struct raw_seg){.id = id257}), SPJ_EHDRFIELD);
	ck_assert_int_eq(open_raw(&(struct raw_seg){.id = "m", .claim_id_len = 0xffff}),
			 SPJ_EHDRFIELD);
	ck_assert_int_eq(open_raw(&(struct raw_seg){.id = "", .id_len = 0}),
			 SPJ_EHDRFIELD);
	ck_assert_int_eq(open_raw(&(struct raw_seg){.id = "m", .reserved = 1}),
			 SPJ_EHDRFIELD);
	ck_assert_int_eq(open_raw(&(struct raw_seg){.id = "m", .first_seq = UINT64_MAX}),
			 SPJ_EHDRFIELD);
	ck_assert_int_eq(open_raw(&(struct raw_seg){.id = "a\0b", .id_len = 3}),
			 SPJ_EHDRFIELD);
	/* The id's length says more than the file holds. */
	ck_assert_int_eq(open_raw(&(struct raw_seg){.id = "m", .claim_id_len = 200}),
			 SPJ_EHDRSHORT);
	put_file("empty", "", 0);
	ck_assert_int_eq(spj_reader_open(dfd, "empty", &rd), SPJ_EHDRSHORT);
	put_file("text", "hello\n", 6);
	ck_assert_int_eq(spj_reader_open(dfd, "text", &rd), SPJ_EMAGIC);
	ck_assert_int_eq(spj_reader_open(dfd, "absent", &rd), -ENOENT);
	ck_assert_int_eq(mkdirat(dfd, "dir", 0700), 0);
	ck_assert_int_eq(spj_reader_open(dfd, "dir", &rd), -EISDIR);

	/* Any flipped bit of a real header: refused, with a named error. */
	w = new_segment(SEG, 3);
	spj_close(w);
	file = slurp(SEG);
	hsize = len = g_bytes_get_size(file);
	copy = g_memdup2(g_bytes_get_data(file, NULL), len);
	for (size_t at = 0; at < hsize; at++)
		for (int bit = 0; bit < 8; bit++) {
			int res;
			copy[at] ^= (uint8_t)(1u << bit);
			res = spj_reader_open_mem(copy, len, &rd);
			ck_assert_msg(res <= SPJ_EMAGIC && res >= SPJ_EHDRFIELD,
				      "byte %zu: %d", at, res);
			copy[at] ^= (uint8_t)(1u << bit);
		}
	g_free(copy);

	for (unsigned i = 0; i < G_N_ELEMENTS(named); i++) {
		ck_assert_ptr_nonnull(strstr(spj_strerror(named[i]), "segment"));
		for (unsigned j = 0; j < i; j++)
			ck_assert_str_ne(spj_strerror(named[i]), spj_strerror(named[j]));
	}
	ck_assert_str_eq(spj_strerror(-ENOENT), strerror(ENOENT));
}
END_TEST

START_TEST(test_writer_open_errors)
{
	char id257[258];
	struct spj_writer *w;

	memset(id257, 'u', 257);
	id257[257] = '\0';
	w = new_segment(SEG, 1);
	spj_close(w);
	ck_assert_int_eq(spj_writer_open(dfd, SEG, MEDIUM, 1, &w), -EEXIST);
	ck_assert_ptr_null(w);
	ck_assert_int_eq(spj_writer_open(dfd, "x", "", 1, &w), -EINVAL);
	ck_assert_int_eq(spj_writer_open(dfd, "x", id257, 1, &w), -EINVAL);
	ck_assert_int_eq(spj_writer_open(dfd, "x", MEDIUM, UINT64_MAX, &w), -EINVAL);
	ck_assert_int_eq(spj_writer_open(dfd, "a/x", MEDIUM, 1, &w), -EINVAL);
	ck_assert_int_eq(spj_writer_open(dfd, "..", MEDIUM, 1, &w), -EINVAL);
	ck_assert_int_eq(spj_writer_open(dfd, "x", MEDIUM, 1, &w), 0);
	spj_close(w);
	ck_assert_int_eq(count_entries(), 2);
	ck_assert_int_eq(spj_writer_open(-1, "y", MEDIUM, 1, &w), -EBADF);
	ck_assert_int_eq(spj_close(NULL), 0);
	spj_reader_close(NULL);
}
END_TEST

/* ---- records the writer never writes ---- */

static const uint64_t SALT = 0xa5a5f00dcafe0001ull;

/* Segment: a good record, the one given (seq 2 unless it says), a good one. */
static GByteArray *with_middle(const struct raw *mid, uint64_t *mid_at)
{
	GByteArray *b =
	    raw_segment(&(struct raw_seg){.id = "medium", .salt = SALT, .first_seq = 1});
	struct raw m = *mid;

	raw_record(b, &(struct raw){
			  .type = SPJ_UNLINK, .salt = SALT, .seq = 1, .path = "first"});
	*mid_at = b->len;
	m.salt = SALT;
	if (!m.seq)
		m.seq = 2;
	raw_record(b, &m);
	raw_record(
	    b, &(struct raw){
		   .type = SPJ_UNLINK, .salt = SALT, .seq = m.seq + 1, .path = "last"});
	return b;
}

/* The middle record's result, checked to be final at its offset. */
static int middle_result(const struct raw *mid)
{
	uint64_t at;
	g_autoptr(GByteArray) b = with_middle(mid, &at);
	struct spj_reader *rd;
	struct spj_record rec;
	const void *payload;
	int res;

	ck_assert_int_eq(spj_reader_open_mem(b->data, b->len, &rd), 0);
	ck_assert_int_eq(spj_next(rd, &rec, &payload), SPJ_OK);
	ck_assert_str_eq(rec.path, "first");
	res = spj_next(rd, &rec, &payload);
	if (res != SPJ_OK) {
		ck_assert_uint_eq(spj_reader_offset(rd), at);
		ck_assert_str_ne(spj_reader_why(rd), "");
		ck_assert_int_eq(spj_next(rd, &rec, &payload), res);
	}
	spj_reader_close(rd);
	return res;
}

static int path_result(const char *path, size_t len)
{
	return middle_result(
	    &(struct raw){.type = SPJ_UNLINK, .path = path, .path_len = len});
}

/* spj_append's result on a fresh segment; a refused record writes nothing. */
static int append_one(const struct spj_record *r, const void *payload)
{
	struct spj_writer *w;
	uint64_t size;
	int res;

	unlinkat(dfd, "w", 0);
	w = new_segment("w", 1);
	size = spj_writer_size(w);
	res = spj_append(w, r, payload);
	if (res)
		ck_assert_uint_eq(file_size("w"), size);
	spj_close(w);
	return res;
}

static int append_path(const char *path)
{
	return append_one(&(struct spj_record){.type = SPJ_UNLINK, .path = path}, NULL);
}

static int append_rename(const char *to)
{
	return append_one(&(struct spj_record){.type = SPJ_RENAME,
					       .path = "ok",
					       .payload_len = strlen(to)},
			  to);
}

START_TEST(test_bad_paths)
{
	static const char *const bad[] = {
	    "../x", "/abs", "a//b", "a/./b", "a/..",   "..",	       ".",   "./a",
	    "a/.",  "a/",   "/",    "//",    "a/../b", "x/y/../../..", "a///"};
	static const char *const good[] = {
	    "a",       "a/b", "...",	    "..a",
	    ".a",      "a..", "a.b/.c/..d", "with space/and\nnewline",
	    "\xff\xfe"};
	char *longp = g_malloc(SPJ_PATH_MAX + 2);
	char name[SPJ_NAME_MAX + 2];

	for (unsigned i = 0; i < G_N_ELEMENTS(bad); i++) {
		ck_assert_msg(!spj_path_ok(bad[i], strlen(bad[i])), "%s", bad[i]);
		ck_assert_msg(path_result(bad[i], strlen(bad[i])) == SPJ_REFUSED, "%s",
			      bad[i]);
		ck_assert_int_eq(append_path(bad[i]), -EINVAL);
		ck_assert_int_eq(append_rename(bad[i]), -EINVAL);
		/* As RENAME's new path too. */
		ck_assert_int_eq(
		    middle_result(&(struct raw){.type = SPJ_RENAME,
						.path = "ok",
						.payload = bad[i],
						.payload_len = strlen(bad[i])}),
		    SPJ_REFUSED);
	}
	for (unsigned i = 0; i < G_N_ELEMENTS(good); i++) {
		ck_assert_msg(spj_path_ok(good[i], strlen(good[i])), "%s", good[i]);
		ck_assert_int_eq(path_result(good[i], strlen(good[i])), SPJ_OK);
		ck_assert_int_eq(append_path(good[i]), 0);
		ck_assert_int_eq(append_rename(good[i]), 0);
	}
	/* NUL inside; empty. */
	ck_assert(!spj_path_ok("a\0b", 3));
	ck_assert_int_eq(path_result("a\0b", 3), SPJ_REFUSED);
	ck_assert_int_eq(path_result("a\0", 2), SPJ_REFUSED);
	ck_assert_int_eq(
	    middle_result(&(struct raw){
		.type = SPJ_RENAME, .path = "ok", .payload = "x\0y", .payload_len = 3}),
	    SPJ_REFUSED);
	ck_assert(!spj_path_ok("", 0));
	ck_assert_int_eq(append_path(""), -EINVAL);
	ck_assert_int_eq(middle_result(&(struct raw){.type = SPJ_RENAME, .path = "ok"}),
			 SPJ_REFUSED);
	/* Lengths: a whole path, one name. */
	memset(longp, 'l', SPJ_PATH_MAX + 1);
	for (int i = 200; i < SPJ_PATH_MAX; i += 201)
		longp[i] = '/';
	ck_assert(spj_path_ok(longp, SPJ_PATH_MAX));
	ck_assert_int_eq(path_result(longp, SPJ_PATH_MAX), SPJ_OK);
	ck_assert(!spj_path_ok(longp, SPJ_PATH_MAX + 1));
	ck_assert_int_eq(path_result(longp, SPJ_PATH_MAX + 1), SPJ_REFUSED);
	longp[SPJ_PATH_MAX + 1] = '\0';
	ck_assert_int_eq(append_path(longp), -ENAMETOOLONG);
	ck_assert_int_eq(append_rename(longp), -ENAMETOOLONG);
	/* A payload or handle length without the bytes. */
	ck_assert_int_eq(
	    append_one(
		&(struct spj_record){.type = SPJ_RENAME, .path = "a", .payload_len = 1},
		NULL),
	    -EINVAL);
	ck_assert_int_eq(
	    append_one(
		&(struct spj_record){.type = SPJ_UNLINK, .path = "a", .handle_len = 1},
		NULL),
	    -EINVAL);
	ck_assert_int_eq(append_one(&(struct spj_record){.type = SPJ_UNLINK}, NULL),
			 -EINVAL);
	memset(name, 'n', sizeof(name));
	ck_assert(spj_path_ok(name, SPJ_NAME_MAX));
	ck_assert(!spj_path_ok(name, SPJ_NAME_MAX + 1));
	ck_assert_int_eq(path_result(name, SPJ_NAME_MAX + 1), SPJ_REFUSED);
	g_free(longp);
}
END_TEST

START_TEST(test_impossible_records)
{
	static uint8_t data[8] = "abcdefgh";
	static const struct raw bad[] = {
	    {.type = 0, .path = "a"},
	    {.type = 7, .path = "a"},
	    {.type = 255, .path = "a"},
	    {.type = SPJ_WRITE,
	     .path = "a",
	     .length = 9,
	     .payload = data,
	     .payload_len = 8},
	    {.type = SPJ_WRITE, .path = "a", .length = 0},
	    {.type = SPJ_WRITE,
	     .path = "a",
	     .offset = INT64_MAX,
	     .length = 8,
	     .payload = data,
	     .payload_len = 8},
	    {.type = SPJ_WRITE,
	     .path = "a",
	     .length = 8,
	     .payload = data,
	     .payload_len = 8,
	     .mode = 1},
	    {.type = SPJ_TRUNCATE, .path = "a", .offset = (uint64_t)INT64_MAX + 1},
	    {.type = SPJ_TRUNCATE, .path = "a", .length = 1},
	    {.type = SPJ_TRUNCATE, .path = "a", .payload = data, .payload_len = 1},
	    {.type = SPJ_FALLOCATE, .path = "a", .length = 0},
	    {.type = SPJ_FALLOCATE, .path = "a", .offset = 1, .length = INT64_MAX},
	    {.type = SPJ_TIMES, .path = "a", .payload = data, .payload_len = 8},
	    {.type = SPJ_TIMES,
	     .path = "a",
	     .offset = 1,
	     .payload = times_buf,
	     .payload_len = 16},
	    {.type = SPJ_RENAME,
	     .path = "a",
	     .offset = 1,
	     .payload = "b",
	     .payload_len = 1},
	    {.type = SPJ_UNLINK, .path = "a", .length = 1},
	    /* Lengths over the limits: never read, whatever the file holds. */
	    {.type = SPJ_WRITE,
	     .path = "a",
	     .length = SPJ_PAYLOAD_MAX + 1,
	     .claim_payload_len = SPJ_PAYLOAD_MAX + 1},
	    {.type = SPJ_UNLINK, .path = "a", .claim_payload_len = UINT32_MAX},
	    /* Sequence numbers: a gap, a repeat, the one never used. */
	    {.type = SPJ_UNLINK, .path = "a", .seq = 3},
	    {.type = SPJ_UNLINK, .path = "a", .seq = 1},
	    {.type = SPJ_UNLINK, .path = "a", .seq = UINT64_MAX},
	};
	static uint8_t handle[SPJ_HANDLE_MAX + 1];
	struct raw big_handle = {.type = SPJ_UNLINK,
				 .path = "a",
				 .handle = handle,
				 .handle_len = SPJ_HANDLE_MAX + 1};
	struct raw max_handle = big_handle;

	for (unsigned i = 0; i < G_N_ELEMENTS(bad); i++) {
		int res = middle_result(&bad[i]);
		ck_assert_msg(res == SPJ_CORRUPT, "case %u: %d", i, res);
	}
	ck_assert_int_eq(middle_result(&big_handle), SPJ_CORRUPT);
	max_handle.handle_len = SPJ_HANDLE_MAX;
	ck_assert_int_eq(middle_result(&max_handle), SPJ_OK);
}
END_TEST

/* A REFUSED record is as final as a CORRUPT one: the good one after it never comes. */
START_TEST(test_refused_is_final)
{
	uint64_t at;
	g_autoptr(GByteArray) b =
	    with_middle(&(struct raw){.type = SPJ_UNLINK, .path = "/etc/passwd"}, &at);
	struct spj_reader *rd;
	struct spj_record rec;
	const void *payload;

	ck_assert_int_eq(spj_reader_open_mem(b->data, b->len, &rd), 0);
	ck_assert_int_eq(spj_next(rd, &rec, &payload), SPJ_OK);
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(spj_next(rd, &rec, &payload), SPJ_REFUSED);
		ck_assert_uint_eq(spj_reader_offset(rd), at);
	}
	ck_assert_ptr_nonnull(strstr(spj_reader_why(rd), "unsafe path"));
	spj_reader_close(rd);
}
END_TEST

/* ---- spj_cut ---- */

START_TEST(test_cut)
{
	struct want x[6];
	struct spj_writer *w;
	uint64_t hsize, one;
	char text[60];

	every_type(x);
	w = new_segment(SEG, 1);
	hsize = spj_writer_size(w);
	append(w, &x[0]);
	one = spj_writer_size(w);
	append(w, &x[1]);
	spj_close(w);
	ck_assert_int_eq(spj_cut(dfd, SEG, hsize - 1), -EINVAL);
	ck_assert_int_eq(spj_cut(dfd, SEG, file_size(SEG) + 1), -EINVAL);
	ck_assert_int_eq(spj_cut(dfd, SEG, one), 0);
	expect_file(SEG, 1, x, 1, SPJ_END, one);
	ck_assert_int_eq(spj_cut(dfd, SEG, hsize), 0);
	expect_file(SEG, 1, x, 0, SPJ_END, hsize);
	memset(text, 't', sizeof(text));
	put_file("text", text, sizeof(text));
	ck_assert_int_eq(spj_cut(dfd, "text", 40), SPJ_EMAGIC);
	ck_assert_uint_eq(file_size("text"), 60);
	ck_assert_int_eq(spj_cut(dfd, "absent", 40), -ENOENT);
}
END_TEST

/* ---- spj_replace_file ---- */

START_TEST(test_replace_file)
{
	g_autoptr(GBytes) got = NULL;

	ck_assert_int_eq(spj_replace_file(dfd, "state", "one", 3), 0);
	got = slurp("state");
	ck_assert_uint_eq(g_bytes_get_size(got), 3);
	ck_assert_mem_eq(g_bytes_get_data(got, NULL), "one", 3);
	g_bytes_unref(got);
	ck_assert_int_eq(spj_replace_file(dfd, "state", "second", 6), 0);
	got = slurp("state");
	ck_assert_uint_eq(g_bytes_get_size(got), 6);
	ck_assert_mem_eq(g_bytes_get_data(got, NULL), "second", 6);
	g_bytes_unref(got);
	ck_assert_int_eq(spj_replace_file(dfd, "state", NULL, 0), 0);
	got = slurp("state");
	ck_assert_uint_eq(g_bytes_get_size(got), 0);
	ck_assert_uint_eq(count_entries(), 1); /* no temp file left */

	/* A rename that fails leaves the old one and no temp file. */
	ck_assert_int_eq(mkdirat(dfd, "busy", 0700), 0);
	put_file("busy-file", "x", 1);
	ck_assert_int_eq(renameat(dfd, "busy-file", dfd, "busy/x"), 0);
	ck_assert_int_eq(spj_replace_file(dfd, "busy", "new", 3), -EISDIR);
	ck_assert_uint_eq(count_entries(), 2);
	ck_assert_int_eq(spj_replace_file(dfd, "a/b", "x", 1), -EINVAL);
	ck_assert_int_eq(spj_replace_file(dfd, "", "x", 1), -EINVAL);
	{
		char longname[NAME_MAX + 1];
		memset(longname, 'n', NAME_MAX);
		longname[NAME_MAX] = '\0';
		ck_assert_int_eq(spj_replace_file(dfd, longname, "x", 1), -ENAMETOOLONG);
	}
}
END_TEST

/* Old or new, never a mix, never empty: while it is replaced over and over,
 * and after the replacer is killed in the middle. */
START_TEST(test_replace_file_atomic)
{
	enum { A_LEN = 100, B_LEN = 70000 };
	char *a = g_malloc(A_LEN), *bb = g_malloc(B_LEN);
	pid_t pid, parent = getpid();
	int status;

	memset(a, 'a', A_LEN);
	memset(bb, 'b', B_LEN);
	ck_assert_int_eq(spj_replace_file(dfd, "state", a, A_LEN), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		/* Until killed, or orphaned by a failed test. */
		for (unsigned i = 0; getppid() == parent; i++)
			if (spj_replace_file(dfd, "state", i % 2 ? a : bb,
					     i % 2 ? A_LEN : B_LEN))
				_exit(1);
		_exit(0);
	}
	for (int round = 0; round < 3; round++) {
		for (int i = 0; i < 300; i++) {
			g_autoptr(GBytes) got = slurp("state");
			gsize len;
			const char *d = g_bytes_get_data(got, &len);
			ck_assert_msg(len == A_LEN || len == B_LEN, "%zu bytes",
				      (size_t)len);
			ck_assert_mem_eq(d, len == A_LEN ? a : bb, len);
		}
	}
	ck_assert_int_eq(kill(pid, SIGKILL), 0);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFSIGNALED(status));
	{
		g_autoptr(GBytes) got = slurp("state");
		gsize len = g_bytes_get_size(got);
		ck_assert(len == A_LEN || len == B_LEN);
	}
	/* A temp file the killed one left is taken over. */
	ck_assert_int_eq(spj_replace_file(dfd, "state", "end", 3), 0);
	ck_assert_uint_eq(count_entries(), 1);
	g_free(a);
	g_free(bb);
}
END_TEST

static Suite *spool_journal_suite(void)
{
	Suite *s = suite_create("spool_journal");
	TCase *fmt = tcase_create("format"), *dmg = tcase_create("damage");
	TCase *file = tcase_create("files");

	tcase_add_checked_fixture(fmt, setup, teardown);
	tcase_add_test(fmt, test_crc32c_vectors);
	tcase_add_test(fmt, test_round_trip_every_type);
	tcase_add_test(fmt, test_layout);
	tcase_add_test(fmt, test_many_records);
	tcase_add_test(fmt, test_limits);
	tcase_add_test(fmt, test_append_failure_cut_back);
	tcase_set_timeout(fmt, 60);
	suite_add_tcase(s, fmt);

	tcase_add_checked_fixture(dmg, setup, teardown);
	tcase_add_test(dmg, test_torn_tail_every_offset);
	tcase_add_test(dmg, test_garbage_tail);
	tcase_add_test(dmg, test_bit_flip_middle_record);
	tcase_add_test(dmg, test_bit_flip_last_record);
	tcase_add_test(dmg, test_bit_flip_bad_path_record);
	tcase_add_test(dmg, test_damage_far_before_good_record);
	tcase_add_test(dmg, test_stale_salt);
	tcase_add_test(dmg, test_bad_header);
	tcase_add_test(dmg, test_writer_open_errors);
	tcase_add_test(dmg, test_bad_paths);
	tcase_add_test(dmg, test_impossible_records);
	tcase_add_test(dmg, test_refused_is_final);
	tcase_set_timeout(dmg, 60);
	suite_add_tcase(s, dmg);

	tcase_add_checked_fixture(file, setup, teardown);
	tcase_add_test(file, test_cut);
	tcase_add_test(file, test_replace_file);
	tcase_add_test(file, test_replace_file_atomic);
	tcase_set_timeout(file, 60);
	suite_add_tcase(s, file);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(spool_journal_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
