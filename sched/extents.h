/* The extent map: queued, not yet flushed data of one file. Pure logic, no locking. */
#pragma once
#include <glib.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

/* Data buffer shared by the pieces an extent was split into. */
struct ext_buf {
	unsigned refs;
	size_t size; /* bytes used */
	size_t cap;
	char *data;  /* EXT_BUF_ALIGN-aligned: chunks go out with O_DIRECT uncopied */
};

#define EXT_BUF_ALIGN 4096

struct extent {
	off_t off;
	size_t len;
	struct ext_buf *buf;
	size_t boff;	 /* offset of this piece's data in buf */
	unsigned flight; /* 0: queued; else the id of the chunk writing it */
};

struct extmap {
	GTree *tree;	/* off -> struct extent, non-overlapping */
	uint64_t bytes; /* sum of extent lengths */
	GHashTable *pinned; /* flight id -> GPtrArray of ext_buf the chunk's iovecs use */
};

void extmap_init(struct extmap *m);
void extmap_clear(struct extmap *m);
static inline bool extmap_empty(const struct extmap *m)
{
	return g_tree_nnodes(m->tree) == 0;
}

/*
 * Queue data at off; newer data replaces the overlapped parts of older extents
 * (in flight or not: the flusher keeps its own reference to the buffer). Data
 * that continues the previous extent is appended to it while that stays under
 * coalesce_max bytes.
 */
void extmap_write(struct extmap *m, off_t off, const void *data, size_t len,
		  size_t coalesce_max);

/* Drop everything at or beyond size. */
void extmap_truncate(struct extmap *m, off_t size);

/* Copy queued data over buf, which holds the file's bytes [off, off+len). */
void extmap_overlay(const struct extmap *m, off_t off, char *buf, size_t len);

/* End of the last extent (0 when empty). */
off_t extmap_end(const struct extmap *m);

/*
 * Mark a contiguous run of queued extents as in flight under id `flight`,
 * starting at the first extent at or after `from` (wrapping to the start), at
 * most max bytes (an extent is split at the limit). Fills iov (up to niov_max
 * entries) and returns the run's length with *off its start; 0 when nothing is
 * queued.
 */
size_t extmap_take(struct extmap *m, off_t from, size_t max, unsigned flight,
		   struct iovec *iov, int niov_max, int *niov, off_t *off);

/* The chunk `flight`, taken as [off, off+len), is on the medium: drop what is
 * left of it. Returns bytes dropped. */
uint64_t extmap_complete(struct extmap *m, unsigned flight, off_t off, size_t len);

/* The chunk failed: its pieces are queued again. */
void extmap_abort(struct extmap *m, unsigned flight, off_t off, size_t len);
