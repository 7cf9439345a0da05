/*
 * Internals of the spool shared by spool.c (a daemon's spool) and
 * spool_dir.c (the directory on disk, and reading it without a daemon).
 * Not for other callers: spool.h is the interface. The layout and the
 * rules are in the DESIGN comment of spool.c.
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "spool.h"

#define SPD_SEG_NAME_MAX 64 /* a segment's name, set-aside names too */
#define SPD_HELD_MAX 64	    /* held ranges kept; more are merged into the last */

/* A segment file of a medium directory. */
struct spd_segfile {
	char name[SPD_SEG_NAME_MAX];
	uint64_t first_seq, size;
	bool aside;
	bool held;    /* scan: in a held range */
	bool torn_ok; /* scan: the last of its kind, where a crash leaves a tail */
	int64_t birth, mtime; /* birth 0: unknown */
};

struct spd_seglist {
	struct spd_segfile *v;
	size_t n, cap;
};

struct spd_held {
	uint64_t from, to; /* segments with from <= first_seq < to are held */
};

struct spd_info {
	char id[SPJ_MEDIUM_ID_MAX + 1];
	char label[SPOOL_LABEL_MAX + 1];
	char source[SPOOL_SOURCE_MAX + 1];
	uint64_t size;
	int64_t first_use, last_use;
	uint64_t next_seq; /* as of the last open or close: numbering goes on */
	struct spd_held held[SPD_HELD_MAX];
	unsigned nheld;
};

/* One line for the user into why (SPOOL_WHY_MAX bytes; NULL: nothing). */
void spd_say(char *why, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A directory name the spool may have made: no '/', not hidden. */
bool spd_plain_key(const char *key);
/* "<16 hex>.spj" */
void spd_seg_name(char out[SPD_SEG_NAME_MAX], uint64_t first_seq);
/* The first seq past anything a segment of this size can hold. */
uint64_t spd_seq_bound(uint64_t first_seq, uint64_t size);
/* Every segment file (regular files only) of medium directory mdfd, by
 * first_seq (g_free out->v). */
int spd_list_segments(int mdfd, struct spd_seglist *out);
bool spd_is_held(const struct spd_info *in, uint64_t first_seq);
void spd_add_held(struct spd_info *in, uint64_t from, uint64_t to);
/* medium.info: 0, -ENOENT, -errno, -EUCLEAN when it names no medium. */
int spd_read_info(int mdfd, struct spd_info *in);
int spd_write_info(int mdfd, const struct spd_info *in);
/* src (NULL: "") cut to max bytes at a character's end, into dst. */
void spd_copy_str(char *dst, size_t max, const char *src);
/* Lock medium directory mdfd for this process: the lock's fd, or -EBUSY
 * (why names the holder), -errno. */
int spd_take_lock(int mdfd, const char *where, char *why);
