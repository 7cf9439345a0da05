/*
 * The spool's journal format: segment files of checksummed records on a fast
 * disk, written append-only and read back after a crash. The format and the
 * reader's rules are in the DESIGN comment of spool_journal.c. No locking: a
 * writer or a reader is used by one thread at a time.
 *
 * Results. Functions return 0 (or a value) or -errno; spj_reader_open also
 * returns the named header errors SPJ_E* below (below -4095, so never an
 * errno), as spj_cut may; spj_next one of enum spj_result. spj_strerror
 * names them all.
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SPJ_VERSION 1
#define SPJ_MAGIC "SMSPJNL\n" /* 8 bytes, no NUL on disk */
#define SPJ_MAGIC_LEN 8
#define SPJ_MEDIUM_ID_MAX 256	    /* bytes of the medium's identity (a UUID) */
#define SPJ_HANDLE_MAX 128	    /* bytes of a file handle (MAX_HANDLE_SZ) */
#define SPJ_PATH_MAX 4096	    /* bytes of a path, without its NUL */
#define SPJ_NAME_MAX 255	    /* bytes of one path component */
#define SPJ_PAYLOAD_MAX (16u << 20) /* bytes of one record's payload */
#define SPJ_SEG_HDR_FIXED 32	    /* segment header before the medium id */
#define SPJ_SEG_HDR_MAX (SPJ_SEG_HDR_FIXED + SPJ_MEDIUM_ID_MAX + 4) /* crc too */
#define SPJ_REC_HDR_SIZE 56	/* fixed part of every record */
#define SPJ_TIMES_SIZE 16	/* TIMES payload: atime_ns, mtime_ns */
#define SPJ_TIME_OMIT INT64_MIN /* in a TIMES payload: leave that time alone */

/* Header errors of spj_reader_open. */
#define SPJ_EMAGIC (-4096 - 1)	  /* not a spool segment */
#define SPJ_EVERSION (-4096 - 2)  /* a version this code does not read */
#define SPJ_EHDRSHORT (-4096 - 3) /* the file ends inside the header */
#define SPJ_EHDRCRC (-4096 - 4)	  /* header checksum mismatch */
#define SPJ_EHDRFIELD (-4096 - 5) /* a header field out of range */

enum spj_type {
	SPJ_WRITE = 1,	   /* offset, length; payload: the length bytes of data */
	SPJ_TRUNCATE = 2,  /* offset: the new size */
	SPJ_FALLOCATE = 3, /* offset, length (> 0), mode */
	SPJ_TIMES = 4,	   /* payload: spj_times_pack */
	SPJ_RENAME = 5,	   /* payload: the new path (checked as path is) */
	SPJ_UNLINK = 6,
};

/* One record. Fields a type does not use are 0. */
struct spj_record {
	enum spj_type type;
	uint64_t seq; /* set by the writer (spj_writer_next_seq); read back */
	/* The file: its handle (name_to_handle_at's handle_type and f_handle;
	 * handle_len 0: none) and its path relative to the medium root. */
	int32_t handle_type;
	uint32_t handle_len;
	const void *handle;
	const char *path; /* NUL-terminated */
	uint64_t offset;  /* at most INT64_MAX, offset + length too */
	uint64_t length;
	uint32_t mode;	    /* FALLOCATE's mode */
	size_t payload_len; /* WRITE: == length; TIMES: SPJ_TIMES_SIZE */
};

/* ---- writing ---- */

struct spj_writer;

/* Create segment `name` in directory dirfd (a directory fd, or AT_FDCWD):
 * O_CREAT|O_EXCL, mode 0600; the header written, the file and the directory
 * fsynced before it returns. medium_id: 1..SPJ_MEDIUM_ID_MAX bytes. The first
 * record appended gets first_seq (< UINT64_MAX). On error nothing is left. */
int spj_writer_open(int dirfd, const char *name, const char *medium_id,
		    uint64_t first_seq, struct spj_writer **out);
/* Append one record with one write at the end of the segment; payload holds
 * r->payload_len bytes. r->seq is ignored: the record gets the next number.
 * -EINVAL for a bad record (a path spj_path_ok refuses, fields that do not fit
 * the type), -ENAMETOOLONG, -EFBIG (payload over SPJ_PAYLOAD_MAX); an I/O
 * error cuts the segment back to where it was (a failed cut, or a failed
 * spj_sync, breaks the writer: every call returns that error again). Not
 * durable until spj_sync. */
int spj_append(struct spj_writer *w, const struct spj_record *r, const void *payload);
/* fdatasync: every record appended so far is on the disk. */
int spj_sync(struct spj_writer *w);
/* Close (no sync) and free; the close's error, if any. NULL is fine. */
int spj_close(struct spj_writer *w);
uint64_t spj_writer_next_seq(const struct spj_writer *w);
uint64_t spj_writer_size(const struct spj_writer *w); /* bytes in the segment */

/* ---- reading ---- */

enum spj_result {
	SPJ_OK = 0,  /* a record */
	SPJ_END,     /* the segment ends after the last record */
	SPJ_TORN,    /* a torn tail (or stale records) from the offset on: cut it */
	SPJ_CORRUPT, /* damage with valid records after it, at the offset */
	SPJ_REFUSED, /* an intact record with an unsafe path, at the offset */
};

struct spj_segment_info {
	uint32_t version;
	uint64_t salt;
	uint64_t first_seq;
	uint32_t header_size; /* the first record's offset */
	size_t medium_id_len;
	char medium_id[SPJ_MEDIUM_ID_MAX + 1]; /* NUL-terminated */
};

struct spj_reader;

/* Open segment `name` and check its header: 0, -errno, or SPJ_E*. */
int spj_reader_open(int dirfd, const char *name, struct spj_reader **out);
/* The same over len bytes in memory (kept, not copied: they must outlive it). */
int spj_reader_open_mem(const void *data, size_t len, struct spj_reader **out);
void spj_reader_close(struct spj_reader *rd); /* NULL is fine */
const struct spj_segment_info *spj_reader_info(const struct spj_reader *rd);
/* The next record: SPJ_OK with *rec and *payload (rec's pointers and the
 * payload, followed by a NUL byte, stay valid until the next call), else the
 * end of the segment, which every later call returns again. -errno (-EIO,
 * -ENOMEM) leaves the reader where it was. */
int spj_next(struct spj_reader *rd, struct spj_record *rec, const void **payload);
/* After SPJ_OK: where the next record starts. After TORN, CORRUPT, REFUSED:
 * where valid data ends (the bad record's start). After END: the file's size. */
uint64_t spj_reader_offset(const struct spj_reader *rd);
/* What the last result was about, for a log line ("" after SPJ_OK). */
const char *spj_reader_why(const struct spj_reader *rd);

/* Cut segment `name` at offset (SPJ_TORN's) and fsync it. -EINVAL when the
 * file is shorter than that or the offset is inside the header; SPJ_E* when
 * it is not a segment (nothing is cut then). */
int spj_cut(int dirfd, const char *name, uint64_t offset);

/* ---- helpers ---- */

/* CRC-32C (Castagnoli), continued from crc (0 to start):
 * spj_crc32c(spj_crc32c(0, a, n), b, m) is the CRC of a then b. */
uint32_t spj_crc32c(uint32_t crc, const void *data, size_t len);
/* A path a record may carry: relative, 1..SPJ_PATH_MAX bytes, no NUL, no
 * empty, "." or ".." component, none longer than SPJ_NAME_MAX. */
bool spj_path_ok(const char *path, size_t len);
void spj_times_pack(uint8_t out[SPJ_TIMES_SIZE], int64_t atime_ns, int64_t mtime_ns);
void spj_times_unpack(const uint8_t in[SPJ_TIMES_SIZE], int64_t *atime_ns,
		      int64_t *mtime_ns);
/* The fixed part of record r, numbered r->seq, in a segment of this salt, as
 * spj_append writes it (handle, path and payload follow it on disk as they
 * are). -EINVAL etc. as spj_append; -EOVERFLOW for seq UINT64_MAX. */
int spj_record_header(uint8_t out[SPJ_REC_HDR_SIZE], uint64_t salt,
		      const struct spj_record *r, const void *payload);
const char *spj_strerror(int err);

/* Replace small file `name` in dirfd atomically: write a temp file, fsync,
 * rename over name, fsync the directory. After a crash name has the old
 * content or the new one. Not for concurrent callers of one name. */
int spj_replace_file(int dirfd, const char *name, const void *data, size_t len);
