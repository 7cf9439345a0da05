/*
 * Fuzz target: the spool journal's reader (sched/spool_journal.c).
 *
 * Each input is read as two segments:
 *  1. itself, as a segment file (header and all);
 *  2. a segment built from it ("sealed"): the input is a list of record
 *     descriptors (type, which checksum, salt or sequence number to spoil,
 *     fields that fit the type or any, a handle, a path, a payload), made
 *     into records with good checksums unless spoilt. Random bytes almost
 *     never carry a good CRC-32C; these reach the field and path rules.
 *     The first input byte may cut the built segment's tail.
 * Both are read in memory (spj_reader_open_mem) and through a file (a
 * memfd), and every step is compared with ref_open/ref_next, a second,
 * independent reading of the rules in the DESIGN comment: the same result at
 * the same offset for the header and every record, the same fields for a
 * record returned. Besides: a returned record is one spj_record_header
 * encodes to exactly its bytes (the writer could have written it); the
 * result that ends the segment is final (the same again, the same offset);
 * the reader takes at most one step per SPJ_REC_HDR_SIZE bytes.
 */
#include <errno.h>
#include <fcntl.h>
#include <glib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz.h"
#include "spool_journal.h"

#define INPUT_MAX 8192
#define SEALED_RECORDS_MAX 64
#define SEALED_SALT 0x5a175a17c0ffee01ull

/* C strings: the words with NUL bytes are in spool_journal.dict only (the
 * driver puts NULs in by itself). */
const char *const fuzz_driver_tokens[] = {SPJ_MAGIC,
					  "\x01",
					  "..",
					  ".",
					  "/",
					  "./",
					  "../",
					  "//",
					  "/..",
					  "/.",
					  "a/b",
					  "\xff",
					  "\xff\xff\xff\xff\xff\xff\xff\x7f",
					  "\x38",
					  "\x02",
					  "\x03",
					  "\x04",
					  "\x05",
					  "\x06",
					  "\x07",
					  "\x10",
					  "\x08",
					  "\x0c",
					  "\xc4",
					  "\xc7",
					  NULL};

/* ---- the rules, read again ---- */

static uint32_t le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static uint64_t le64(const uint8_t *p)
{
	return le32(p) | (uint64_t)le32(p + 4) << 32;
}

/* A path is '/'-separated names; each 1..255 bytes, no NUL, not "." or "..". */
static bool ref_path_ok(const uint8_t *p, size_t len)
{
	const uint8_t *end = p + len;

	if (len < 1 || len > 4096 || memchr(p, 0, len))
		return false;
	for (;;) {
		const uint8_t *slash = memchr(p, '/', (size_t)(end - p));
		const uint8_t *stop = slash ? slash : end;
		size_t n = (size_t)(stop - p);

		if (n < 1 || n > 255 || (n == 1 && p[0] == '.') ||
		    (n == 2 && p[0] == '.' && p[1] == '.'))
			return false;
		if (!slash)
			return true;
		p = slash + 1;
	}
}

/* Per type: which fields it may set; payload: its exact size, -1 any, -2 the length. */
static const struct {
	bool offset, length, length_needed, mode;
	int payload;
} ref_types[7] = {
    [SPJ_WRITE] = {true, true, true, false, -2},
    [SPJ_TRUNCATE] = {true, false, false, false, 0},
    [SPJ_FALLOCATE] = {true, true, true, true, 0},
    [SPJ_TIMES] = {false, false, false, false, 16},
    [SPJ_RENAME] = {false, false, false, false, -1},
    [SPJ_UNLINK] = {false, false, false, false, 0},
};

static bool ref_fields_ok(unsigned type, uint64_t off, uint64_t len, uint32_t mode,
			  uint64_t paylen, unsigned hlen)
{
	if (type < 1 || type > 6 || hlen > 128 || paylen > 16 * 1024 * 1024)
		return false;
	if ((unsigned __int128)off + len > (unsigned __int128)INT64_MAX)
		return false;
	if ((!ref_types[type].offset && off) || (!ref_types[type].length && len) ||
	    (ref_types[type].length_needed && !len) || (!ref_types[type].mode && mode))
		return false;
	if (ref_types[type].payload == -2)
		return paylen == len;
	return ref_types[type].payload == -1 ||
	       paylen == (uint64_t)ref_types[type].payload;
}

struct ref_seg {
	uint64_t salt, first_seq;
	size_t hsize;
	const uint8_t *id;
	size_t id_len;
};

static int ref_open(const uint8_t *b, size_t n, struct ref_seg *s)
{
	static const uint8_t magic[8] = "SMSPJNL\n";
	size_t id_len;

	if (memcmp(b, magic, n < 8 ? n : 8))
		return SPJ_EMAGIC;
	if (n < 12)
		return SPJ_EHDRSHORT;
	if (le32(b + 8) != 1)
		return SPJ_EVERSION;
	if (n < 32)
		return SPJ_EHDRSHORT;
	id_len = b[12] | (size_t)b[13] << 8;
	if (id_len < 1 || id_len > 256)
		return SPJ_EHDRFIELD;
	if (n < 36 + id_len)
		return SPJ_EHDRSHORT;
	if (le32(b + 32 + id_len) != spj_crc32c(0, b, 32 + id_len))
		return SPJ_EHDRCRC;
	if (b[14] || b[15] || le64(b + 24) == UINT64_MAX || memchr(b + 32, 0, id_len))
		return SPJ_EHDRFIELD;
	*s = (struct ref_seg){le64(b + 16), le64(b + 24), 36 + id_len, b + 32, id_len};
	return 0;
}

static bool good_header_at(const uint8_t *h, uint64_t salt)
{
	return le64(h + 8) == salt && le32(h) == spj_crc32c(0, h + 4, 52);
}

/* Damage at `at`: corruption when a good header of this segment follows. */
static int ref_damage(const uint8_t *b, size_t n, size_t at, uint64_t salt)
{
	for (size_t p = at + 1; p + 56 <= n; p++)
		if (good_header_at(b + p, salt))
			return SPJ_CORRUPT;
	return SPJ_TORN;
}

struct ref_rec {
	unsigned type, hlen, plen;
	uint64_t seq, off, len, paylen;
	uint32_t mode;
	int32_t htype;
	const uint8_t *handle, *path, *payload;
	size_t end;
};

static int ref_next(const uint8_t *b, size_t n, size_t at, const struct ref_seg *s,
		    uint64_t seq, struct ref_rec *r)
{
	const uint8_t *h = b + at;
	uint64_t total;

	if (at == n)
		return SPJ_END;
	if (n - at < 56)
		return SPJ_TORN;
	if (le32(h) != spj_crc32c(0, h + 4, 52))
		return ref_damage(b, n, at, s->salt);
	if (le64(h + 8) != s->salt)
		return SPJ_TORN;
	*r = (struct ref_rec){.type = h[55],
			      .hlen = h[54],
			      .plen = h[52] | (unsigned)h[53] << 8,
			      .seq = le64(h + 16),
			      .off = le64(h + 24),
			      .len = le64(h + 32),
			      .paylen = le32(h + 40),
			      .mode = le32(h + 44),
			      .htype = (int32_t)le32(h + 48)};
	if (!ref_fields_ok(r->type, r->off, r->len, r->mode, r->paylen, r->hlen) ||
	    r->seq != seq || seq == UINT64_MAX)
		return SPJ_CORRUPT;
	total = 56 + (uint64_t)r->hlen + r->plen + r->paylen;
	if (total > n - at)
		return SPJ_TORN;
	if (le32(h + 4) != spj_crc32c(0, h + 8, (size_t)total - 8))
		return ref_damage(b, n, at, s->salt);
	r->handle = h + 56;
	r->path = r->handle + r->hlen;
	r->payload = r->path + r->plen;
	r->end = at + (size_t)total;
	if (!ref_path_ok(r->path, r->plen) ||
	    (r->type == SPJ_RENAME && !ref_path_ok(r->payload, (size_t)r->paylen)))
		return SPJ_REFUSED;
	return SPJ_OK;
}

/* ---- the reader against it ---- */

static void same_record(const struct spj_record *rec, const uint8_t *payload,
			const struct ref_rec *r, uint64_t salt, const uint8_t *at)
{
	uint8_t hdr[SPJ_REC_HDR_SIZE];

	FUZZ_CHECK(rec->type == r->type && rec->seq == r->seq, "type %d seq %llu",
		   rec->type, (unsigned long long)rec->seq);
	FUZZ_CHECK(rec->offset == r->off && rec->length == r->len && rec->mode == r->mode,
		   "offset, length, mode");
	FUZZ_CHECK(rec->payload_len == r->paylen &&
		       !memcmp(payload, r->payload, r->paylen) && payload[r->paylen] == 0,
		   "the payload, NUL after it");
	FUZZ_CHECK(rec->handle_type == r->htype && rec->handle_len == r->hlen &&
		       (!r->hlen || !memcmp(rec->handle, r->handle, r->hlen)),
		   "the handle");
	FUZZ_CHECK(strlen(rec->path) == r->plen && !memcmp(rec->path, r->path, r->plen),
		   "the path");
	FUZZ_CHECK(spj_record_header(hdr, salt, rec, payload) == 0,
		   "a record read is one the writer takes");
	FUZZ_CHECK(!memcmp(hdr, at, sizeof(hdr)), "spj_record_header gives its bytes");
}

static int open_memfd(const uint8_t *b, size_t n, struct spj_reader **rd)
{
	static int fd = -1; /* one-time set-up: rewritten for each input */
	char path[64];

	if (fd < 0)
		fd = memfd_create("fuzz-spj", MFD_CLOEXEC);
	FUZZ_CHECK(fd >= 0, "memfd_create: %s", strerror(errno));
	FUZZ_CHECK(ftruncate(fd, 0) == 0 && (n == 0 || pwrite(fd, b, n, 0) == (ssize_t)n),
		   "the memfd written");
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	return spj_reader_open(AT_FDCWD, path, rd);
}

static void check_segment(const uint8_t *b, size_t n, bool through_file)
{
	struct spj_reader *rd;
	struct ref_seg s = {0};
	const struct spj_segment_info *info;
	uint64_t seq;
	size_t at, steps = 0;
	int want = ref_open(b, n, &s);
	int got = through_file ? open_memfd(b, n, &rd) : spj_reader_open_mem(b, n, &rd);

	FUZZ_CHECK(got == want, "spj_reader_open = %d, not %d (%s)", got, want,
		   spj_strerror(got));
	if (got) {
		FUZZ_CHECK(!rd, "no reader on an error");
		return;
	}
	info = spj_reader_info(rd);
	FUZZ_CHECK(info->salt == s.salt && info->first_seq == s.first_seq &&
		       info->header_size == s.hsize && info->medium_id_len == s.id_len &&
		       strlen(info->medium_id) == s.id_len &&
		       !memcmp(info->medium_id, s.id, s.id_len),
		   "the header's fields");
	for (at = s.hsize, seq = s.first_seq;; seq++) {
		struct spj_record rec;
		struct ref_rec r = {0};
		const void *payload;

		want = ref_next(b, n, at, &s, seq, &r);
		got = spj_next(rd, &rec, &payload);
		FUZZ_CHECK(got == want, "record at %zu: %d, not %d (%s)", at, got, want,
			   spj_reader_why(rd));
		FUZZ_CHECK(++steps <= n / SPJ_REC_HDR_SIZE + 1, "%zu steps for %zu bytes",
			   steps, n);
		if (got != SPJ_OK)
			break;
		same_record(&rec, payload, &r, s.salt, b + at);
		at = r.end;
		FUZZ_CHECK(spj_reader_offset(rd) == at,
			   "offset %llu after a record ending at %zu",
			   (unsigned long long)spj_reader_offset(rd), at);
	}
	FUZZ_CHECK(spj_reader_offset(rd) == (got == SPJ_END ? n : at),
		   "final offset %llu", (unsigned long long)spj_reader_offset(rd));
	FUZZ_CHECK(spj_next(rd, &(struct spj_record){0}, &(const void *){NULL}) == got &&
		       spj_reader_offset(rd) == (got == SPJ_END ? n : at),
		   "the end is final");
	spj_reader_close(rd);
}

/* ---- sealed segments ---- */

struct cur {
	const uint8_t *p;
	size_t n;
};

static unsigned take(struct cur *c)
{
	if (!c->n)
		return 0;
	c->n--;
	return *c->p++;
}

static void put(GByteArray *b, uint64_t v, unsigned bytes)
{
	for (unsigned i = 0; i < bytes; i++) {
		guint8 x = (guint8)(v >> (8 * i));
		g_byte_array_append(b, &x, 1);
	}
}

static void take_bytes(struct cur *c, GByteArray *b, size_t len)
{
	while (len--) {
		guint8 x = (guint8)take(c);
		g_byte_array_append(b, &x, 1);
	}
}

static uint64_t pick64(struct cur *c)
{
	uint64_t v = 0;

	switch (take(c) % 8) {
	case 0:
		return 0;
	case 1:
		return 1 + take(c);
	case 2:
		return (uint64_t)take(c) << 12;
	case 3:
		return INT64_MAX;
	case 4:
		return (uint64_t)INT64_MAX + 1;
	case 5:
		return UINT64_MAX;
	case 6:
		return INT64_MAX - take(c);
	default:
		for (int i = 0; i < 8; i++)
			v = v << 8 | take(c);
		return v;
	}
}

/* Short paths from the input, or long ones built to sit at the limits. */
static void take_path(struct cur *c, GByteArray *b)
{
	unsigned f = take(c);

	if ((f & 0xc0) == 0xc0) {
		size_t want = 4094 + (f & 3), name = 250 + take(c) % 13, k = 0;
		while (b->len < want) {
			guint8 ch = k == name ? '/' : (guint8)('a' + k % 26);
			k = k == name ? 0 : k + 1;
			g_byte_array_append(b, &ch, 1);
		}
		if (b->data[b->len - 1] == '/')
			g_byte_array_set_size(b, b->len - 1);
	} else {
		take_bytes(c, b, f & 0x3f);
	}
}

static void seal_record(GByteArray *seg, struct cur *c, uint64_t seq)
{
	unsigned type = take(c) % 8, f = take(c), spoil = f & 7, hlen = 0;
	g_autoptr(GByteArray) handle = g_byte_array_new(), path = g_byte_array_new();
	g_autoptr(GByteArray) pay = g_byte_array_new();
	uint64_t off = 0, len = 0, salt = SEALED_SALT, claim;
	uint32_t mode = 0, crc;
	int32_t htype;
	size_t at = seg->len;

	if (f & 0x10)
		hlen = take(c) % 130;
	take_bytes(c, handle, hlen);
	htype = (int8_t)take(c);
	take_path(c, path);
	if (f & 0x08) { /* any fields */
		off = pick64(c);
		len = pick64(c);
		mode = take(c) % 4 ? 0 : take(c);
		take_bytes(c, pay, take(c) % 40);
	} else if (type == SPJ_WRITE) {
		off = (uint64_t)take(c) << 9;
		take_bytes(c, pay, take(c) % 100);
		len = pay->len;
	} else if (type == SPJ_TRUNCATE) {
		off = pick64(c);
	} else if (type == SPJ_FALLOCATE) {
		off = (uint64_t)take(c) << 12;
		len = 1 + take(c);
		mode = take(c) % 4;
	} else if (type == SPJ_TIMES) {
		take_bytes(c, pay, SPJ_TIMES_SIZE);
	} else if (type == SPJ_RENAME) {
		take_path(c, pay);
	}
	claim = (f & 0x08) && take(c) == 0xff ? SPJ_PAYLOAD_MAX + 1 : pay->len;
	if (spoil == 6)
		salt ^= 1ull << (take(c) % 64);
	if (spoil == 7)
		seq += 1 + take(c) % 2;
	put(seg, 0, 8);
	put(seg, salt, 8);
	put(seg, seq, 8);
	put(seg, off, 8);
	put(seg, len, 8);
	put(seg, claim, 4);
	put(seg, mode, 4);
	put(seg, (uint32_t)htype, 4);
	put(seg, path->len, 2);
	put(seg, hlen, 1);
	put(seg, type, 1);
	g_byte_array_append(seg, handle->data, handle->len);
	g_byte_array_append(seg, path->data, path->len);
	g_byte_array_append(seg, pay->data, pay->len);
	crc = spj_crc32c(0, seg->data + at + 8, seg->len - at - 8) ^ (spoil == 5);
	memcpy(seg->data + at + 4, (uint8_t[]){crc, crc >> 8, crc >> 16, crc >> 24}, 4);
	crc = spj_crc32c(0, seg->data + at + 4, SPJ_REC_HDR_SIZE - 4) ^ (spoil == 4);
	memcpy(seg->data + at, (uint8_t[]){crc, crc >> 8, crc >> 16, crc >> 24}, 4);
}

static GByteArray *seal(const uint8_t *data, size_t size)
{
	struct cur c = {data + 1, size - 1};
	GByteArray *seg = g_byte_array_new();
	size_t id_len = 1 + take(&c) % 12, cut;
	uint64_t first = take(&c);
	uint32_t crc;

	if (first & 0x80)
		first = UINT64_MAX - 1 - (first & 7);
	g_byte_array_append(seg, (const guint8 *)SPJ_MAGIC, SPJ_MAGIC_LEN);
	put(seg, SPJ_VERSION, 4);
	put(seg, id_len, 2);
	put(seg, 0, 2);
	put(seg, SEALED_SALT, 8);
	put(seg, first, 8);
	for (size_t i = 0; i < id_len; i++)
		put(seg, 'a' + take(&c) % 26, 1);
	crc = spj_crc32c(0, seg->data, seg->len);
	put(seg, crc, 4);
	for (unsigned i = 0; c.n && i < SEALED_RECORDS_MAX; i++)
		seal_record(seg, &c, first + i);
	/* The first byte, when its top bits are set, cuts the tail. */
	cut = (data[0] & 0xc0) == 0xc0 ? data[0] & 0x3f : 0;
	g_byte_array_set_size(seg, seg->len > cut ? seg->len - (guint)cut : 0);
	return seg;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	GByteArray *seg;

	if (size > INPUT_MAX)
		return 0;
	check_segment(data, size, false);
	check_segment(data, size, true);
	if (!size)
		return 0;
	seg = seal(data, size);
	check_segment(seg->data, seg->len, false);
	check_segment(seg->data, seg->len, true);
	g_byte_array_unref(seg);
	return 0;
}
