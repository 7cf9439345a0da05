/* The extent map: queued, not yet flushed data of one file. Pure logic, no locking. */
#pragma once
#include <glib.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

/* A file that holds buffers' data instead of memory: a spool segment the
 * data was journaled to (spool.c), read back to flush it or to lay it over a
 * read. Refcounted (atomically: the spool takes and drops its references
 * under its own lock); the fd is closed with the last reference, so data a
 * chunk or an extent still needs stays readable after the file is unlinked. */
struct ext_file {
	int fd;	       /* readable; owned */
	unsigned refs; /* atomic */
};

/* A new ext_file owning fd (its one reference the caller's); NULL without memory. */
struct ext_file *ext_file_new(int fd);
struct ext_file *ext_file_ref(struct ext_file *f);
void ext_file_unref(struct ext_file *f); /* NULL is fine */
/* Read n bytes at at: 0, or -errno (-EIO when the file ends before). */
int ext_file_read(const struct ext_file *f, off_t at, char *dst, size_t n);

/* Data buffer shared by the pieces an extent was split into. */
struct ext_buf {
	unsigned refs;	 /* extents using it, chunks pinning it, holds while punching */
	unsigned pieces; /* extents using it */
	size_t live;	 /* bytes of those extents: the rest of cap is waste */
	size_t size;	 /* bytes used */
	size_t cap;
	off_t lo, hi;	 /* every extent using it lies in the file's [lo, hi) */
	/* EXT_BUF_ALIGN-aligned from EXT_BUF_ALIGNED_MIN bytes on: chunks go out
	 * with O_DIRECT uncopied. Smaller ones are plain malloc blocks: a page
	 * for a 10-byte write would cost 400 times the data. */
	char *data;
	/* Or, with data NULL: the bytes are in file from foff on (one
	 * journaled write, never appended to); the buffer costs its header only. */
	struct ext_file *file;
	off_t foff;
};

#define EXT_BUF_ALIGN 4096
#define EXT_BUF_ALIGNED_MIN (64u << 10)
/* Appends double a buffer up to this; past it they start a new buffer (a
 * chunk gathers adjacent extents anyway), so growth leaves at most half of
 * one such buffer unused per appended-to extent, and costs at most one copy
 * of each byte on average. */
#define EXT_BUF_GROW_MAX (1u << 20)
/* What glibc's malloc adds to a block (size header, rounding to 16). */
#define EXT_MALLOC_OVERHEAD 16
/* A GTreeNode: key, value, two links, balance and thread flags. */
#define EXT_TREE_NODE_BYTES 40
/* A buffer is compacted (its pieces copied into one right-sized buffer) when
 * that at least halves what it costs and saves at least this. */
#define EXT_COMPACT_MIN_SAVING 4096

struct extent {
	off_t off;
	size_t len;
	struct ext_buf *buf;
	size_t boff;	 /* offset of this piece's data in buf */
	unsigned flight; /* 0: queued; else the id of the chunk writing it */
	/* The oldest write whose bytes this extent must bring to the medium: its
	 * own, or an older one it overwrote (a wait for that older write is a
	 * wait for this extent too). */
	uint64_t gen;
};

/* Memory an extent costs beside its data: itself and its tree node. */
#define EXT_NODE_BYTES (sizeof(struct extent) + EXT_TREE_NODE_BYTES + 2 * EXT_MALLOC_OVERHEAD)

/* Memory a buffer of cap bytes costs: its header and its data block (an
 * aligned block may cost a page more: glibc mmaps large ones with room to
 * align, and the page holding the block's header is touched). */
static inline size_t ext_buf_mem(size_t cap)
{
	size_t data = cap >= EXT_BUF_ALIGNED_MIN ? cap + EXT_BUF_ALIGN
						  : (cap + 15) / 16 * 16 + EXT_MALLOC_OVERHEAD;

	return sizeof(struct ext_buf) + EXT_MALLOC_OVERHEAD + data;
}

/*
 * Lower blocks the queued extents would make the lower filesystem allocate,
 * at up to EXT_COUNT_LEVELS granularities (data blocks, then the file ranges
 * one indirect block and one double-indirect block map): per level, the
 * distinct aligned blocks of unit bytes at index >= first that an extent
 * touches. Blocks below first are allocated on the lower already. Kept up to
 * date by the extmap_*_counted functions; see extmap_count_reset.
 */
#define EXT_COUNT_LEVELS 3
struct ext_count {
	uint64_t unit[EXT_COUNT_LEVELS];   /* bytes per block; 0: level not counted */
	uint64_t first[EXT_COUNT_LEVELS];  /* lower blocks below this are allocated */
	uint64_t blocks[EXT_COUNT_LEVELS]; /* blocks at or past first touched */
	uint64_t bytes; /* m->bytes when blocks[] were last right (see _stale) */
};

struct extmap {
	GTree *tree;	/* off -> struct extent, non-overlapping */
	uint64_t bytes; /* sum of extent lengths */
	uint64_t file_bytes; /* of them, kept in a file (extmap_write_file) */
	GHashTable *pinned; /* flight id -> GPtrArray of ext_buf the chunk's iovecs use */
	uint64_t gen;	    /* writes so far; each extmap_write is the next generation */
	struct ext_count count; /* lower blocks needed (extmap_count_reset) */
	/* Memory held: ext_buf_mem of every buffer its extents or chunks in
	 * flight use, each once, plus EXT_NODE_BYTES per extent. What queue=
	 * bounds: unlike bytes it counts slack, bookkeeping and whole buffers
	 * kept alive by small pieces. */
	uint64_t mem;
	uint64_t *total; /* NULL, or a sum over several maps kept in step with mem */
};

/* total: NULL, or a counter (the queue's) that every change of m->mem is added
 * to, so no caller can forget one (a take's split, a buffer freed at complete). */
void extmap_init(struct extmap *m, uint64_t *total);
/* Frees everything; total is not updated any more (a map is cleared when its
 * file is freed, possibly after the queue; it holds nothing by then unless
 * data was given up at exit). */
void extmap_clear(struct extmap *m);
static inline bool extmap_empty(const struct extmap *m)
{
	return g_tree_nnodes(m->tree) == 0;
}

/*
 * Queue data at off; newer data replaces the overlapped parts of older extents
 * (in flight or not: the flusher keeps its own reference to the buffer). Data
 * that continues the previous extent is appended to it while that stays under
 * coalesce_max bytes (and its buffer under EXT_BUF_GROW_MAX). Returns 0, or
 * -ENOMEM with the map unchanged: what can fail is allocated before anything
 * is cut. (GLib's own small blocks, a tree node, still abort on failure.)
 */
int extmap_write(struct extmap *m, off_t off, const void *data, size_t len,
		 size_t coalesce_max);

/* At most what writing len bytes adds to a map's mem, unless it doubles the
 * buffer it appends to (by at most EXT_BUF_GROW_MAX / 2): a new buffer, its
 * extent, and the piece a split leaves. */
static inline size_t extmap_write_cost(size_t len)
{
	return ext_buf_mem(len) + 2 * EXT_NODE_BYTES;
}

/* Memory a buffer whose data is in a file costs: its header alone. */
#define EXT_FILE_BUF_MEM (sizeof(struct ext_buf) + EXT_MALLOC_OVERHEAD)
/* What queueing len bytes kept in a file adds to a map's mem, at most. */
#define EXT_FILE_WRITE_COST (EXT_FILE_BUF_MEM + 2 * EXT_NODE_BYTES)

/*
 * Queue len bytes at off whose data is at foff in file (the map takes its
 * own reference): as extmap_write, without copying anything. Such an extent
 * is read back by extmap_overlay and by the flusher (extmap_take_src).
 */
int extmap_write_file(struct extmap *m, off_t off, size_t len, struct ext_file *file,
		      off_t foff);

/* For tests: the n-th allocation from now that may fail (buffers, extents)
 * fails, once; 0 turns it off. Not thread safe. */
void extmap_fail_alloc_after(unsigned n);

/* The generation of the last write (0: none yet). */
static inline uint64_t extmap_gen(const struct extmap *m)
{
	return m->gen;
}

/* Take the next generation for an event ordered with the writes (a truncate). */
static inline uint64_t extmap_next_gen(struct extmap *m)
{
	return ++m->gen;
}

/* The oldest generation whose bytes are not on the medium yet (queued or in
 * flight), UINT64_MAX when none: a wait for the writes up to generation g is
 * over once this is > g. */
uint64_t extmap_oldest_gen(const struct extmap *m);
/* Where the oldest queued (not in flight) extent starts (0 when none). */
off_t extmap_oldest_off(const struct extmap *m);

/* The run of queued data (adjacent extents) that contains pos or, failing
 * that, is the first after it: [*start, *end). False when there is none. */
bool extmap_run_from(const struct extmap *m, off_t pos, off_t *start, off_t *end);

/* Drop everything at or beyond size. */
void extmap_truncate(struct extmap *m, off_t size);

/* Copy queued data over buf, which holds the file's bytes [off, off+len):
 * 0, or -errno when data kept in a file cannot be read back (buf is then
 * partly overlaid). */
int extmap_overlay(const struct extmap *m, off_t off, char *buf, size_t len);

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

/* Where a piece of a taken chunk is when its data is in a file (iov_base is
 * NULL then): at off in file->fd. The chunk pins the file until it ends. */
struct ext_src {
	struct ext_file *file; /* NULL: the iovec points at memory */
	off_t off;
};
/* extmap_take, pieces kept in files included: src[i] says where iov[i]'s
 * bytes are. (extmap_take stops at the first such piece.) */
size_t extmap_take_src(struct extmap *m, off_t from, size_t max, unsigned flight,
		       struct iovec *iov, struct ext_src *src, int niov_max, int *niov,
		       off_t *off);
/* extmap_take_src without the wrap: only extents at or after from (a further
 * run of a chunk that gathers several, in offset order). */
size_t extmap_take_after(struct extmap *m, off_t from, size_t max, unsigned flight,
			 struct iovec *iov, struct ext_src *src, int niov_max, int *niov,
			 off_t *off);

/* The chunk `flight`, taken as [off, off+len), is on the medium: drop what is
 * left of it. Returns bytes dropped. A chunk of several runs is completed (or
 * aborted) once, over the span from its first run's start to its last's end:
 * only extents of `flight` count, so the gaps are left alone. */
uint64_t extmap_complete(struct extmap *m, unsigned flight, off_t off, size_t len);

/* The chunk failed: its pieces are queued again. */
void extmap_abort(struct extmap *m, unsigned flight, off_t off, size_t len);

/*
 * Counting the lower blocks the queued data needs (struct ext_count). Start
 * with extmap_count_reset, then use the _counted forms of write, truncate and
 * complete; a plain extmap_complete leaves the count too high (never too
 * low) until extmap_count_stale says so and a reset recounts. Each counted
 * call costs O(log n) per block region already touched in the range it
 * changes, never a walk of the whole map.
 */

/* Blocks of bs bytes with index in [first, end) that some extent touches. */
uint64_t extmap_blocks_in(const struct extmap *m, uint64_t first, uint64_t end, uint64_t bs);

/* Count with unit[] bytes per block at each level (0: level unused), taking
 * the lower file's [0, allocated) as allocated: recounts the whole map. */
void extmap_count_reset(struct extmap *m, const uint64_t unit[EXT_COUNT_LEVELS], off_t allocated);

/* The blocks per level a write of [off, off+len) would add to the count. */
void extmap_count_need(const struct extmap *m, off_t off, size_t len,
		       uint64_t add[EXT_COUNT_LEVELS]);

/* 0 or -ENOMEM, as extmap_write (the count unchanged then). */
int extmap_write_counted(struct extmap *m, off_t off, const void *data, size_t len,
			 size_t coalesce_max);
int extmap_write_file_counted(struct extmap *m, off_t off, size_t len, struct ext_file *file,
			      off_t foff);
/* Also lowers first[]: the lower frees the blocks past size once the
 * truncate reaches it, so writing there again allocates again. */
void extmap_truncate_counted(struct extmap *m, off_t size);
uint64_t extmap_complete_counted(struct extmap *m, unsigned flight, off_t off, size_t len);

/* Whether an uncounted change (a plain extmap_complete) made the count stale. */
static inline bool extmap_count_stale(const struct extmap *m)
{
	return m->bytes != m->count.bytes;
}
