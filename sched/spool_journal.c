/*
 * DESIGN: the spool journal's format. A spool is a directory of segment
 * files on a fast disk holding the queue's operations for one medium. A
 * segment is written once, front to back, by one writer, and read back whole
 * after a crash; the caller names segments, rotates them and replays them in
 * first_seq order. Replaying the records in order gives the same bytes as the
 * operations made in order: each record is one operation, whole.
 *
 * Segment header, little-endian like everything here:
 *    0 magic "SMSPJNL\n"    8 u32 version (1)    12 u16 medium id length (1..256)
 *   14 u16 0               16 u64 salt (random, never 0)    24 u64 first_seq
 *   32 the medium id (an opaque string: a filesystem UUID, say; no NUL)
 *   then u32 crc32c of all the above. Records follow it at once.
 * Record (SPJ_REC_HDR_SIZE bytes, then the variable part, no padding):
 *    0 u32 hdr_crc: crc32c of bytes 4..56
 *    4 u32 rec_crc: crc32c of bytes 8..56, then handle, path and payload
 *    8 u64 salt, the segment's    16 u64 seq    24 u64 offset    32 u64 length
 *   40 u32 payload length    44 u32 mode    48 i32 handle type
 *   52 u16 path length    54 u8 handle length    55 u8 type
 *   56 handle, path (no NUL), payload
 * The header has a checksum of its own, so its lengths are believed only once
 * it is known good: a record whose good header says it runs past the end of
 * the file is a torn tail for certain, not a guess. Sequence numbers go up by
 * one from first_seq (UINT64_MAX is never used) and are checked. Types and
 * which fields each uses: spool_journal.h. CRC-32C is done here, in software
 * (slicing by 8 bytes); the writer and the reader check records with one set
 * of rules (check_record, spj_path_ok), so the writer cannot write what the
 * reader would refuse.
 *
 * Reading, after LevelDB's log and SQLite's WAL. The writer only appends, so
 * what a crash leaves is a tail that stops short or holds garbage (zeros, a
 * part of a write); damage with good records after it is not a crash's doing.
 * spj_next:
 *  - the file ends after a record: END;
 *  - the file ends inside a record (its header, or the body its good header
 *    announces): TORN at the record's start;
 *  - a good header with another salt is a leftover of an earlier use of the
 *    file (the WAL's salt): it ends the segment, TORN;
 *  - a bad checksum, header or record: CORRUPT when a record of this segment
 *    (good header checksum, this salt) starts anywhere after it, else TORN:
 *    garbage with nothing valid after it is a torn tail;
 *  - a good header that is impossible (unknown type, a length over its limit,
 *    fields that do not fit the type, a sequence gap): CORRUPT;
 *  - an intact record whose path, or RENAME's new path, is not a plain
 *    relative path (spj_path_ok): REFUSED. Symlinks on the medium are the
 *    replayer's to check.
 * Every result but OK is final: the bad record and all after it are never
 * returned. TORN's offset is where the caller cuts the file (spj_cut) before
 * writing on; CORRUPT and REFUSED are the caller's to report. A crash may
 * write back an unsynced tail's pages out of order, leaving zeros before good
 * records: that reads as CORRUPT (nothing wrong is returned); a caller that
 * records its sync points may take CORRUPT past the last one as TORN.
 *
 * Durability: spj_writer_open fsyncs the new file and its directory;
 * spj_append is one pwritev at the end (nothing is ever rewritten), durable
 * at the next spj_sync. A failed append cuts the file back to where it was; a
 * failed cut or fdatasync breaks the writer for good (after a failed fsync
 * the kernel may have dropped the pages: a new segment is the way on).
 * spj_replace_file is the usual temp file, fsync, rename, directory fsync.
 *
 * Memory: no allocation failure aborts. The reader keeps one buffer, grown
 * to the largest record it has read (at most SPJ_PAYLOAD_MAX plus a path and
 * a handle), and -ENOMEM leaves it where it was. Every function returns 0 (or
 * a value), -errno, or a named result.
 */
#include "spool_journal.h"
#include "fdio.h"

#include <errno.h>
#include <fcntl.h>
#include <glib.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#define CRC32C_POLY 0x82f63b78u /* Castagnoli, reflected */
#define SCAN_CHUNK_BYTES (256u << 10)
#define REPLACE_TMP_SUFFIX ".tmp"
#define WHY_MAX 200

/* ---- CRC-32C ---- */

static uint32_t crc_table[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ CRC32C_POLY : c >> 1;
		crc_table[0][i] = c;
	}
	for (uint32_t i = 0; i < 256; i++)
		for (int t = 1; t < 8; t++)
			crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^
					  crc_table[0][crc_table[t - 1][i] & 0xff];
}

uint32_t spj_crc32c(uint32_t crc, const void *data, size_t len)
{
	const uint8_t *p = data;

	pthread_once(&crc_once, crc_init);
	crc = ~crc;
	for (; len >= 8; p += 8, len -= 8) {
		uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 |
				     (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
		uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 |
			      (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
		crc = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^
		      crc_table[5][(lo >> 16) & 0xff] ^ crc_table[4][lo >> 24] ^
		      crc_table[3][hi & 0xff] ^ crc_table[2][(hi >> 8) & 0xff] ^
		      crc_table[1][(hi >> 16) & 0xff] ^ crc_table[0][hi >> 24];
	}
	while (len--)
		crc = crc_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
	return ~crc;
}

/* ---- little-endian fields ---- */

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static uint64_t get64(const uint8_t *p)
{
	return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

void spj_times_pack(uint8_t out[SPJ_TIMES_SIZE], int64_t atime_ns, int64_t mtime_ns)
{
	put64(out, (uint64_t)atime_ns);
	put64(out + 8, (uint64_t)mtime_ns);
}

void spj_times_unpack(const uint8_t in[SPJ_TIMES_SIZE], int64_t *atime_ns,
		      int64_t *mtime_ns)
{
	*atime_ns = (int64_t)get64(in);
	*mtime_ns = (int64_t)get64(in + 8);
}

/* ---- what a record may hold ---- */

bool spj_path_ok(const char *path, size_t len)
{
	size_t start = 0;

	if (!path || len == 0 || len > SPJ_PATH_MAX)
		return false;
	for (size_t i = 0; i <= len; i++) {
		size_t n = i - start;

		if (i < len && path[i] == '\0')
			return false;
		if (i < len && path[i] != '/')
			continue;
		/* A component ends: not empty (no leading '/', no "//", no
		 * trailing '/'), not "." or "..", not longer than a name can be. */
		if (n == 0 || n > SPJ_NAME_MAX)
			return false;
		if (path[start] == '.' && (n == 1 || (n == 2 && path[start + 1] == '.')))
			return false;
		start = i + 1;
	}
	return true;
}

/* The fixed fields of a record, against its type: NULL, or what is wrong. */
static const char *fields_problem(unsigned type, uint64_t offset, uint64_t length,
				  uint32_t mode, uint64_t payload_len,
				  uint64_t handle_len)
{
	if (type < SPJ_WRITE || type > SPJ_UNLINK)
		return "unknown record type";
	if (handle_len > SPJ_HANDLE_MAX)
		return "file handle too long";
	if (payload_len > SPJ_PAYLOAD_MAX)
		return "payload too long";
	if (offset > INT64_MAX || length > INT64_MAX - offset)
		return "offset or length out of range";
	if (type != SPJ_FALLOCATE && mode)
		return "mode set on a record that has none";
	switch (type) {
	case SPJ_WRITE:
		if (!length || length != payload_len)
			return "WRITE length is not its payload's";
		return NULL;
	case SPJ_TRUNCATE:
		return length || payload_len ? "TRUNCATE with a length or payload" : NULL;
	case SPJ_FALLOCATE:
		return !length || payload_len
			   ? "FALLOCATE of no length, or with a payload"
			   : NULL;
	case SPJ_TIMES:
		if (offset || length || payload_len != SPJ_TIMES_SIZE)
			return "TIMES fields";
		return NULL;
	case SPJ_RENAME:
		return offset || length ? "RENAME with an offset or length" : NULL;
	default: /* SPJ_UNLINK */
		return offset || length || payload_len ? "UNLINK fields" : NULL;
	}
}

/* The writer's side of the rules: 0 and the path's length, or -errno. */
static int check_record(const struct spj_record *r, const void *payload, size_t *path_len)
{
	size_t plen;

	if (r->payload_len > SPJ_PAYLOAD_MAX)
		return -EFBIG;
	if (fields_problem(r->type, r->offset, r->length, r->mode, r->payload_len,
			   r->handle_len))
		return -EINVAL;
	if ((r->handle_len && !r->handle) || (r->payload_len && !payload) || !r->path)
		return -EINVAL;
	if (r->seq == UINT64_MAX)
		return -EOVERFLOW;
	plen = strnlen(r->path, SPJ_PATH_MAX + 1);
	if (plen > SPJ_PATH_MAX ||
	    (r->type == SPJ_RENAME && r->payload_len > SPJ_PATH_MAX))
		return -ENAMETOOLONG;
	if (!spj_path_ok(r->path, plen))
		return -EINVAL;
	if (r->type == SPJ_RENAME && !spj_path_ok(payload, r->payload_len))
		return -EINVAL;
	*path_len = plen;
	return 0;
}

int spj_record_header(uint8_t out[SPJ_REC_HDR_SIZE], uint64_t salt,
		      const struct spj_record *r, const void *payload)
{
	size_t plen;
	uint32_t crc;
	int err = check_record(r, payload, &plen);

	if (err)
		return err;
	memset(out, 0, SPJ_REC_HDR_SIZE);
	put64(out + 8, salt);
	put64(out + 16, r->seq);
	put64(out + 24, r->offset);
	put64(out + 32, r->length);
	put32(out + 40, (uint32_t)r->payload_len);
	put32(out + 44, r->mode);
	put32(out + 48, (uint32_t)r->handle_type);
	put16(out + 52, (uint16_t)plen);
	out[54] = (uint8_t)r->handle_len;
	out[55] = (uint8_t)r->type;
	crc = spj_crc32c(0, out + 8, SPJ_REC_HDR_SIZE - 8);
	crc = spj_crc32c(crc, r->handle, r->handle_len);
	crc = spj_crc32c(crc, r->path, plen);
	crc = spj_crc32c(crc, payload, r->payload_len);
	put32(out + 4, crc);
	put32(out, spj_crc32c(0, out + 4, SPJ_REC_HDR_SIZE - 4));
	return 0;
}

/* ---- small I/O helpers ---- */

static int fsync_close(int fd)
{
	int err = fsync(fd) < 0 ? -errno : 0;

	if (close(fd) < 0 && !err)
		err = -errno;
	return err;
}

static bool plain_name(const char *name)
{
	return name && *name && !strchr(name, '/') && strcmp(name, ".") &&
	       strcmp(name, "..");
}

/* ---- writer ---- */

struct spj_writer {
	int fd;
	uint64_t salt;
	uint64_t next_seq;
	uint64_t end; /* bytes of the segment: where the next record goes */
	int err;      /* 0, or what broke the writer */
};

static int random_salt(uint64_t *salt)
{
	do {
		ssize_t n = getrandom(salt, sizeof(*salt), 0);
		if (n < 0 && errno != EINTR)
			return -errno;
		if (n != (ssize_t)sizeof(*salt))
			*salt = 0;
	} while (!*salt);
	return 0;
}

/* The segment header for this id, salt and first_seq; its size. */
static size_t build_seg_header(uint8_t *h, const char *medium_id, size_t id_len,
			       uint64_t salt, uint64_t first_seq)
{
	memcpy(h, SPJ_MAGIC, SPJ_MAGIC_LEN);
	put32(h + 8, SPJ_VERSION);
	put16(h + 12, (uint16_t)id_len);
	put16(h + 14, 0);
	put64(h + 16, salt);
	put64(h + 24, first_seq);
	memcpy(h + SPJ_SEG_HDR_FIXED, medium_id, id_len);
	put32(h + SPJ_SEG_HDR_FIXED + id_len,
	      spj_crc32c(0, h, SPJ_SEG_HDR_FIXED + id_len));
	return SPJ_SEG_HDR_FIXED + id_len + 4;
}

int spj_writer_open(int dirfd, const char *name, const char *medium_id,
		    uint64_t first_seq, struct spj_writer **out)
{
	uint8_t h[SPJ_SEG_HDR_MAX];
	struct spj_writer *w;
	size_t id_len, size;
	uint64_t salt;
	int err;

	*out = NULL;
	if (!plain_name(name) || !medium_id || first_seq == UINT64_MAX)
		return -EINVAL;
	id_len = strnlen(medium_id, SPJ_MEDIUM_ID_MAX + 1);
	if (!id_len || id_len > SPJ_MEDIUM_ID_MAX)
		return -EINVAL;
	err = random_salt(&salt);
	if (err)
		return err;
	w = g_try_new0(struct spj_writer, 1);
	if (!w)
		return -ENOMEM;
	size = build_seg_header(h, medium_id, id_len, salt, first_seq);
	w->fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (w->fd < 0) {
		err = -errno;
		goto out_free;
	}
	err = fd_pwrite_all(w->fd, h, size, 0);
	if (!err && fsync(w->fd) < 0)
		err = -errno;
	if (!err)
		err = fd_fsync_dir(dirfd);
	if (err)
		goto out_unlink;
	w->salt = salt;
	w->next_seq = first_seq;
	w->end = size;
	*out = w;
	return 0;

out_unlink:
	close(w->fd);
	unlinkat(dirfd, name, 0);
out_free:
	g_free(w);
	return err;
}

int spj_append(struct spj_writer *w, const struct spj_record *r, const void *payload)
{
	uint8_t hdr[SPJ_REC_HDR_SIZE];
	struct spj_record rec = *r;
	struct iovec iov[4];
	int cnt = 0, err;

	if (w->err)
		return w->err;
	if (w->next_seq == UINT64_MAX)
		return -EOVERFLOW;
	rec.seq = w->next_seq;
	err = spj_record_header(hdr, w->salt, &rec, payload);
	if (err)
		return err;
	iov[cnt++] = (struct iovec){hdr, sizeof(hdr)};
	if (rec.handle_len)
		iov[cnt++] = (struct iovec){(void *)rec.handle, rec.handle_len};
	iov[cnt++] = (struct iovec){(void *)rec.path, get16(hdr + 52)};
	if (rec.payload_len)
		iov[cnt++] = (struct iovec){(void *)payload, rec.payload_len};
	err = fd_pwritev_all(w->fd, iov, cnt, (off_t)w->end);
	if (err) {
		/* Leave no part of a record behind for the next append to follow. */
		if (ftruncate(w->fd, (off_t)w->end) < 0)
			w->err = err;
		return err;
	}
	w->end += sizeof(hdr) + rec.handle_len + get16(hdr + 52) + rec.payload_len;
	w->next_seq++;
	return 0;
}

int spj_sync(struct spj_writer *w)
{
	if (w->err)
		return w->err;
	if (fdatasync(w->fd) < 0)
		w->err = -errno;
	return w->err;
}

int spj_close(struct spj_writer *w)
{
	int err = 0;

	if (!w)
		return 0;
	if (close(w->fd) < 0)
		err = -errno;
	g_free(w);
	return err;
}

uint64_t spj_writer_next_seq(const struct spj_writer *w)
{
	return w->next_seq;
}

uint64_t spj_writer_size(const struct spj_writer *w)
{
	return w->end;
}

/* ---- reader ---- */

struct spj_reader {
	int fd; /* -1: reading mem */
	const uint8_t *mem;
	uint64_t size; /* of the file when opened */
	struct spj_segment_info info;
	uint64_t pos; /* the next record; after the end: see spj_reader_offset */
	uint64_t next_seq;
	int done;     /* 0, or the final result */
	uint8_t *buf; /* handle, path, NUL, payload, NUL */
	size_t cap;
	char why[WHY_MAX];
};

/* len bytes at off, all inside the size seen at open. */
static int src_read(struct spj_reader *rd, uint64_t off, void *buf, size_t len)
{
	uint8_t *p = buf;

	if (!rd->mem) {
		while (len) {
			ssize_t n = pread(rd->fd, p, len, (off_t)off);
			if (n < 0 && errno == EINTR)
				continue;
			if (n < 0)
				return -errno;
			if (n == 0)
				return -EIO; /* it shrank under us */
			p += n;
			len -= (size_t)n;
			off += (uint64_t)n;
		}
		return 0;
	}
	memcpy(p, rd->mem + off, len);
	return 0;
}

static int parse_header(struct spj_reader *rd)
{
	uint8_t h[SPJ_SEG_HDR_MAX];
	size_t n = rd->size < sizeof(h) ? (size_t)rd->size : sizeof(h), id_len, hsize;
	int err = src_read(rd, 0, h, n);

	if (err)
		return err;
	if (memcmp(h, SPJ_MAGIC, n < SPJ_MAGIC_LEN ? n : SPJ_MAGIC_LEN))
		return SPJ_EMAGIC;
	if (n < 12)
		return SPJ_EHDRSHORT;
	if (get32(h + 8) != SPJ_VERSION)
		return SPJ_EVERSION;
	if (n < SPJ_SEG_HDR_FIXED)
		return SPJ_EHDRSHORT;
	id_len = get16(h + 12);
	if (!id_len || id_len > SPJ_MEDIUM_ID_MAX)
		return SPJ_EHDRFIELD;
	hsize = SPJ_SEG_HDR_FIXED + id_len + 4;
	if (n < hsize)
		return SPJ_EHDRSHORT;
	if (get32(h + hsize - 4) != spj_crc32c(0, h, hsize - 4))
		return SPJ_EHDRCRC;
	if (get16(h + 14) || get64(h + 24) == UINT64_MAX ||
	    memchr(h + SPJ_SEG_HDR_FIXED, '\0', id_len))
		return SPJ_EHDRFIELD;
	rd->info.version = SPJ_VERSION;
	rd->info.salt = get64(h + 16);
	rd->info.first_seq = get64(h + 24);
	rd->info.header_size = (uint32_t)hsize;
	rd->info.medium_id_len = id_len;
	memcpy(rd->info.medium_id, h + SPJ_SEG_HDR_FIXED, id_len);
	rd->info.medium_id[id_len] = '\0';
	rd->pos = hsize;
	rd->next_seq = rd->info.first_seq;
	return 0;
}

static int reader_start(struct spj_reader *rd, struct spj_reader **out)
{
	int err = parse_header(rd);

	if (err) {
		spj_reader_close(rd);
		return err;
	}
	*out = rd;
	return 0;
}

int spj_reader_open(int dirfd, const char *name, struct spj_reader **out)
{
	struct spj_reader *rd;
	struct stat st;
	int err;

	*out = NULL;
	rd = g_try_new0(struct spj_reader, 1);
	if (!rd)
		return -ENOMEM;
	rd->fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);
	if (rd->fd < 0) {
		err = -errno;
		g_free(rd);
		return err;
	}
	if (fstat(rd->fd, &st) < 0)
		err = -errno;
	else if (!S_ISREG(st.st_mode))
		err = S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
	else
		err = 0;
	if (err) {
		spj_reader_close(rd);
		return err;
	}
	rd->size = (uint64_t)st.st_size;
	return reader_start(rd, out);
}

int spj_reader_open_mem(const void *data, size_t len, struct spj_reader **out)
{
	struct spj_reader *rd;

	*out = NULL;
	rd = g_try_new0(struct spj_reader, 1);
	if (!rd)
		return -ENOMEM;
	rd->fd = -1;
	rd->mem = len ? data : (const uint8_t *)"";
	rd->size = len;
	return reader_start(rd, out);
}

void spj_reader_close(struct spj_reader *rd)
{
	if (!rd)
		return;
	if (rd->fd >= 0)
		close(rd->fd);
	g_free(rd->buf);
	g_free(rd);
}

const struct spj_segment_info *spj_reader_info(const struct spj_reader *rd)
{
	return &rd->info;
}

uint64_t spj_reader_offset(const struct spj_reader *rd)
{
	return rd->pos;
}

const char *spj_reader_why(const struct spj_reader *rd)
{
	return rd->why;
}

/* The segment ends at `at` with result res: every later call says so again. */
G_GNUC_PRINTF(4, 5)
static int finish(struct spj_reader *rd, int res, uint64_t at, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(rd->why, sizeof(rd->why), fmt, ap);
	va_end(ap);
	rd->done = res;
	rd->pos = at;
	return res;
}

/* Does a header of this segment (its checksum good, its salt) start in the
 * npos positions at b (which holds npos + SPJ_REC_HDR_SIZE - 1 bytes)? */
static bool header_in(const uint8_t *b, size_t npos, uint64_t salt)
{
	uint8_t s0 = (uint8_t)salt;

	for (size_t i = 0; i < npos; i++) {
		const uint8_t *h = b + i;
		if (h[8] == s0 && get64(h + 8) == salt &&
		    get32(h) == spj_crc32c(0, h + 4, SPJ_REC_HDR_SIZE - 4))
			return true;
	}
	return false;
}

/* 1 when a record of this segment starts at `from` or later, 0 if not, -errno. */
static int valid_after(struct spj_reader *rd, uint64_t from)
{
	uint8_t *win;
	int found = 0;

	if (rd->size < SPJ_REC_HDR_SIZE || from > rd->size - SPJ_REC_HDR_SIZE)
		return 0;
	if (rd->mem)
		return header_in(rd->mem + from, rd->size - SPJ_REC_HDR_SIZE - from + 1,
				 rd->info.salt);
	win = g_try_malloc(SCAN_CHUNK_BYTES + SPJ_REC_HDR_SIZE - 1);
	if (!win)
		return -ENOMEM;
	while (!found && from <= rd->size - SPJ_REC_HDR_SIZE) {
		uint64_t npos = rd->size - SPJ_REC_HDR_SIZE - from + 1;
		int err;

		if (npos > SCAN_CHUNK_BYTES)
			npos = SCAN_CHUNK_BYTES;
		err = src_read(rd, from, win, (size_t)npos + SPJ_REC_HDR_SIZE - 1);
		if (err) {
			found = err;
			break;
		}
		found = header_in(win, (size_t)npos, rd->info.salt);
		from += npos;
	}
	g_free(win);
	return found;
}

/* A bad checksum at `at`: damage if good records follow, else a torn tail. */
static int damaged(struct spj_reader *rd, uint64_t at, const char *what)
{
	int r = valid_after(rd, at + 1);

	if (r < 0)
		return r;
	if (r)
		return finish(rd, SPJ_CORRUPT, at,
			      "record at %llu: %s, valid records after it",
			      (unsigned long long)at, what);
	return finish(rd, SPJ_TORN, at,
		      "record at %llu: %s, nothing valid after it (torn tail)",
		      (unsigned long long)at, what);
}

static int reserve(struct spj_reader *rd, size_t need)
{
	uint8_t *nb;

	if (need <= rd->cap)
		return 0;
	nb = g_try_realloc(rd->buf, need);
	if (!nb)
		return -ENOMEM;
	rd->buf = nb;
	rd->cap = need;
	return 0;
}

/* The record whose header h checked out, at `at`: its body read and checked. */
static int read_body(struct spj_reader *rd, const uint8_t *h, uint64_t at,
		     struct spj_record *rec, const void **payload)
{
	uint32_t plen = get32(h + 40), hlen = h[54], path_len = get16(h + 52);
	uint64_t body = (uint64_t)hlen + path_len + plen;
	uint8_t *path, *pay;
	uint32_t crc;
	int err;

	if (body > rd->size - at - SPJ_REC_HDR_SIZE)
		return finish(rd, SPJ_TORN, at,
			      "record at %llu runs past the end of the file (torn tail)",
			      (unsigned long long)at);
	err = reserve(rd, (size_t)body + 2);
	if (err)
		return err;
	path = rd->buf + hlen;
	pay = path + path_len + 1;
	err = src_read(rd, at + SPJ_REC_HDR_SIZE, rd->buf, hlen + path_len);
	if (!err)
		err = src_read(rd, at + SPJ_REC_HDR_SIZE + hlen + path_len, pay, plen);
	if (err)
		return err;
	path[path_len] = '\0';
	pay[plen] = '\0';
	crc = spj_crc32c(0, h + 8, SPJ_REC_HDR_SIZE - 8);
	crc = spj_crc32c(crc, rd->buf, hlen + path_len);
	crc = spj_crc32c(crc, pay, plen);
	if (crc != get32(h + 4))
		return damaged(rd, at, "record checksum mismatch");
	if (!spj_path_ok((const char *)path, path_len))
		return finish(rd, SPJ_REFUSED, at, "record at %llu: unsafe path",
			      (unsigned long long)at);
	if (h[55] == SPJ_RENAME && !spj_path_ok((const char *)pay, plen))
		return finish(rd, SPJ_REFUSED, at,
			      "record at %llu: unsafe new path of a RENAME",
			      (unsigned long long)at);
	*rec = (struct spj_record){
	    .type = (enum spj_type)h[55],
	    .seq = get64(h + 16),
	    .handle_type = (int32_t)get32(h + 48),
	    .handle_len = hlen,
	    .handle = hlen ? rd->buf : NULL,
	    .path = (const char *)path,
	    .offset = get64(h + 24),
	    .length = get64(h + 32),
	    .mode = get32(h + 44),
	    .payload_len = plen,
	};
	*payload = pay;
	rd->pos = at + SPJ_REC_HDR_SIZE + body;
	rd->next_seq++;
	rd->why[0] = '\0';
	return SPJ_OK;
}

int spj_next(struct spj_reader *rd, struct spj_record *rec, const void **payload)
{
	uint8_t h[SPJ_REC_HDR_SIZE];
	uint64_t at = rd->pos, left, seq;
	const char *problem;
	int err;

	if (rd->done)
		return rd->done;
	left = rd->size - at;
	if (!left)
		return finish(rd, SPJ_END, at, "end of segment");
	if (left < SPJ_REC_HDR_SIZE)
		return finish(
		    rd, SPJ_TORN, at,
		    "record at %llu: the file ends inside its header (torn tail)",
		    (unsigned long long)at);
	err = src_read(rd, at, h, sizeof(h));
	if (err)
		return err;
	if (get32(h) != spj_crc32c(0, h + 4, sizeof(h) - 4))
		return damaged(rd, at, "header checksum mismatch");
	if (get64(h + 8) != rd->info.salt)
		return finish(
		    rd, SPJ_TORN, at,
		    "record at %llu is left from an earlier use of the file (salt)",
		    (unsigned long long)at);
	problem = fields_problem(h[55], get64(h + 24), get64(h + 32), get32(h + 44),
				 get32(h + 40), h[54]);
	if (problem)
		return finish(rd, SPJ_CORRUPT, at, "record at %llu: %s",
			      (unsigned long long)at, problem);
	seq = get64(h + 16);
	if (seq != rd->next_seq || seq == UINT64_MAX)
		return finish(rd, SPJ_CORRUPT, at,
			      "record at %llu: sequence number %llu, expected %llu",
			      (unsigned long long)at, (unsigned long long)seq,
			      (unsigned long long)rd->next_seq);
	return read_body(rd, h, at, rec, payload);
}

int spj_cut(int dirfd, const char *name, uint64_t offset)
{
	struct spj_reader rd = {.fd = -1};
	struct stat st;
	int err;

	rd.fd = openat(dirfd, name, O_RDWR | O_CLOEXEC);
	if (rd.fd < 0)
		return -errno;
	if (fstat(rd.fd, &st) < 0) {
		err = -errno;
		goto out;
	}
	err = -EINVAL;
	if (!S_ISREG(st.st_mode))
		goto out;
	rd.size = (uint64_t)st.st_size;
	/* Never cut what is not a segment, nor into a segment's header. */
	err = parse_header(&rd);
	if (err)
		goto out;
	err = -EINVAL;
	if (offset < rd.info.header_size || offset > rd.size)
		goto out;
	err = ftruncate(rd.fd, (off_t)offset) < 0 ? -errno : 0;
	if (!err)
		return fsync_close(rd.fd);
out:
	close(rd.fd);
	return err;
}

const char *spj_strerror(int err)
{
	switch (err) {
	case SPJ_EMAGIC:
		return "not a spool segment (bad magic)";
	case SPJ_EVERSION:
		return "spool segment of an unknown version";
	case SPJ_EHDRSHORT:
		return "spool segment header cut short";
	case SPJ_EHDRCRC:
		return "spool segment header checksum mismatch";
	case SPJ_EHDRFIELD:
		return "spool segment header field out of range";
	default:
		return strerror(err < 0 ? -err : err);
	}
}

/* ---- atomic replacement of a small file ---- */

int spj_replace_file(int dirfd, const char *name, const void *data, size_t len)
{
	char tmp[NAME_MAX + 1];
	int fd, err;

	if (!plain_name(name) || (len && !data))
		return -EINVAL;
	if ((size_t)snprintf(tmp, sizeof(tmp), ".%s" REPLACE_TMP_SUFFIX, name) >=
	    sizeof(tmp))
		return -ENAMETOOLONG;
	/* A temp file left by a crash: never write through it (a hard link). */
	if (unlinkat(dirfd, tmp, 0) < 0 && errno != ENOENT)
		return -errno;
	fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	err = fd_pwrite_all(fd, data, len, 0);
	if (err) {
		close(fd);
		goto out_unlink;
	}
	err = fsync_close(fd);
	if (err)
		goto out_unlink;
	if (renameat(dirfd, tmp, dirfd, name) < 0) {
		err = -errno;
		goto out_unlink;
	}
	return fd_fsync_dir(dirfd);

out_unlink:
	unlinkat(dirfd, tmp, 0);
	return err;
}
