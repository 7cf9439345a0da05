/*
 * DESIGN: the extent map.
 *
 * Invariants: extents never overlap; each references a slice of a refcounted
 * buffer; m->bytes is the sum of their lengths (what the queue accounts).
 * Overwriting trims, splits or removes older extents; split pieces share the
 * buffer (refs), so a chunk in flight can be overwritten without copying: a
 * taken chunk pins its buffers (one reference each, in m->pinned, dropped at
 * complete/abort), so the flusher's iovecs stay valid and a pinned buffer is
 * never grown in place by an append. A piece keeps its flight id, so completing a chunk
 * removes exactly what is left of it, and newer data is never dropped.
 *
 * Memory. m->mem is what the map really holds, and what the queue holds
 * against queue=: every buffer its extents or pins use, counted once at its
 * capacity with its header (ext_buf_mem), plus EXT_NODE_BYTES per extent.
 * Each buffer knows its pieces and their live bytes, so waste is seen at no
 * cost: a buffer whose live pieces would fit in half the memory (and save
 * EXT_COMPACT_MIN_SAVING) is compacted, its pieces copied into one
 * right-sized buffer, once nothing else holds it (no chunk in flight pins
 * it): after the overwrite or truncate that cut it, or when the last chunk
 * pinning it ends. The pieces are found in the file range [lo, hi) the
 * buffer's data came from. Growth by doubling stops at EXT_BUF_GROW_MAX,
 * small buffers are not page-aligned, so slack stays a bounded share.
 *
 * Data in a file. With a spool, data beyond what queue= lets the daemon
 * keep in memory is kept only where the spool journaled it: such a buffer
 * (extmap_write_file) has no data block, only its ext_file and the offset
 * there, and costs its header. It splits, is cut and pinned like any other;
 * it is never appended to or compacted. Reads lay it over with pread; a
 * taken chunk hands its pieces' places to the flusher (extmap_take_src),
 * which reads them back.
 *
 * Allocation failure. The buffers and extents a write needs are allocated
 * before anything is cut, with calls that can fail: a write that finds no
 * memory returns -ENOMEM and leaves the map as it was. Compaction and a
 * take's split at the chunk limit are optional: without memory they are
 * skipped (the chunk takes the whole extent).
 *
 * Threads: none here; the caller (queue.c) holds its lock around every call.
 */
#include "extents.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct ext_file *ext_file_new(int fd)
{
	struct ext_file *f = g_try_new(struct ext_file, 1);

	if (f)
		*f = (struct ext_file){.fd = fd, .refs = 1};
	return f;
}

struct ext_file *ext_file_ref(struct ext_file *f)
{
	__atomic_add_fetch(&f->refs, 1, __ATOMIC_RELAXED);
	return f;
}

void ext_file_unref(struct ext_file *f)
{
	if (f && __atomic_sub_fetch(&f->refs, 1, __ATOMIC_ACQ_REL) == 0) {
		close(f->fd);
		g_free(f);
	}
}

/* What b costs against queue=. */
static size_t buf_mem(const struct ext_buf *b)
{
	return b->file ? EXT_FILE_BUF_MEM : ext_buf_mem(b->cap);
}

static gint off_cmp(gconstpointer a, gconstpointer b, gpointer unused)
{
	off_t x = *(const off_t *)a, y = *(const off_t *)b;

	return x < y ? -1 : x > y;
}

/* The test hook: 0 off, else the allocations left until one fails. */
static unsigned fail_alloc_in;

void extmap_fail_alloc_after(unsigned n)
{
	fail_alloc_in = n;
}

static bool alloc_fails(void)
{
	return fail_alloc_in && --fail_alloc_in == 0;
}

static void mem_charge(struct extmap *m, size_t n)
{
	m->mem += n;
	if (m->total)
		*m->total += n;
}

static void mem_release(struct extmap *m, size_t n)
{
	m->mem -= n;
	if (m->total)
		*m->total -= n;
}

/* Data for *cap bytes (rounded up to whole pages when aligned), or NULL. */
static char *data_alloc(size_t *cap)
{
	void *p;

	if (alloc_fails())
		return NULL;
	if (*cap < EXT_BUF_ALIGNED_MIN)
		return g_try_malloc(*cap ? *cap : 1);
	*cap = (*cap + EXT_BUF_ALIGN - 1) / EXT_BUF_ALIGN * EXT_BUF_ALIGN;
	return posix_memalign(&p, EXT_BUF_ALIGN, *cap) == 0 ? p : NULL;
}

static void data_free(char *data, size_t cap)
{
	if (cap < EXT_BUF_ALIGNED_MIN)
		g_free(data);
	else
		free(data);
}

/* A buffer for cap bytes of the file from lo on, its one reference the
 * caller's; NULL without memory. */
static struct ext_buf *buf_new(struct extmap *m, size_t cap, off_t lo)
{
	struct ext_buf *b = alloc_fails() ? NULL : g_try_new0(struct ext_buf, 1);

	if (!b)
		return NULL;
	b->data = data_alloc(&cap);
	if (!b->data) {
		g_free(b);
		return NULL;
	}
	b->refs = 1;
	b->cap = cap;
	b->lo = b->hi = lo;
	mem_charge(m, ext_buf_mem(cap));
	return b;
}

static void buf_unref(struct extmap *m, struct ext_buf *b)
{
	if (--b->refs == 0) {
		mem_release(m, buf_mem(b));
		if (b->file)
			ext_file_unref(b->file);
		else
			data_free(b->data, b->cap);
		g_free(b);
	}
}

static struct extent *extent_alloc(void)
{
	return alloc_fails() ? NULL : g_try_new(struct extent, 1);
}

static void compact(struct extmap *m, struct ext_buf *b);

/* Whether copying b's live pieces into one right-sized buffer at least
 * halves what it costs, and saves EXT_COMPACT_MIN_SAVING. */
static bool worth_compacting(const struct ext_buf *b)
{
	size_t now = ext_buf_mem(b->cap), after = ext_buf_mem(b->live);

	if (b->file)
		return false; /* it holds no data to save */
	return after * 2 <= now && now - after >= EXT_COMPACT_MIN_SAVING;
}

/* Drop a pin or a hold on b; compact it if only its pieces hold it now. */
static void buf_drop(struct extmap *m, struct ext_buf *b)
{
	if (b->refs == 1) {
		buf_unref(m, b);
		return;
	}
	b->refs--;
	if (b->refs == b->pieces && worth_compacting(b))
		compact(m, b);
}

static void unpin(struct extmap *m, unsigned flight)
{
	gpointer key = GUINT_TO_POINTER(flight);
	GPtrArray *bufs = g_hash_table_lookup(m->pinned, key);

	if (!bufs)
		return;
	g_hash_table_steal(m->pinned, key);
	for (guint i = 0; i < bufs->len; i++)
		buf_drop(m, bufs->pdata[i]);
	g_ptr_array_free(bufs, TRUE);
}

void extmap_init(struct extmap *m, uint64_t *total)
{
	/* Keys point into the extent itself; extents are freed by remove_extent. */
	m->tree = g_tree_new_full(off_cmp, NULL, NULL, NULL);
	m->bytes = 0;
	m->file_bytes = 0;
	m->gen = 0;
	m->mem = 0;
	m->count = (struct ext_count){0}; /* no level counted until extmap_count_reset */
	m->total = total;
	m->pinned = g_hash_table_new(g_direct_hash, g_direct_equal);
}

static void remove_extent(struct extmap *m, struct extent *e);

void extmap_clear(struct extmap *m)
{
	GHashTableIter it;
	gpointer bufs;
	GTreeNode *n;

	m->total = NULL;
	if (m->tree) {
		while ((n = g_tree_node_first(m->tree)))
			remove_extent(m, g_tree_node_value(n));
		g_tree_destroy(m->tree);
	}
	if (m->pinned) {
		g_hash_table_iter_init(&it, m->pinned);
		while (g_hash_table_iter_next(&it, NULL, &bufs)) {
			for (guint i = 0; i < ((GPtrArray *)bufs)->len; i++)
				buf_unref(m, ((GPtrArray *)bufs)->pdata[i]);
			g_ptr_array_free(bufs, TRUE);
		}
		g_hash_table_destroy(m->pinned);
	}
	m->tree = NULL;
	m->pinned = NULL;
	m->bytes = 0;
}

static void pin(struct extmap *m, unsigned flight, struct ext_buf *b)
{
	GPtrArray *bufs = g_hash_table_lookup(m->pinned, GUINT_TO_POINTER(flight));

	if (!bufs) {
		bufs = g_ptr_array_new();
		g_hash_table_insert(m->pinned, GUINT_TO_POINTER(flight), bufs);
	}
	b->refs++;
	g_ptr_array_add(bufs, b);
}

/* e already holds its reference to e->buf. */
static void insert(struct extmap *m, struct extent *e)
{
	g_tree_insert(m->tree, &e->off, e);
	m->bytes += e->len;
	if (e->buf->file)
		m->file_bytes += e->len;
	e->buf->live += e->len;
	e->buf->pieces++;
	mem_charge(m, EXT_NODE_BYTES);
}

static void remove_extent(struct extmap *m, struct extent *e)
{
	struct ext_buf *b = e->buf;

	g_tree_steal(m->tree, &e->off);
	m->bytes -= e->len;
	if (b->file)
		m->file_bytes -= e->len;
	b->live -= e->len;
	b->pieces--;
	mem_release(m, EXT_NODE_BYTES);
	g_free(e);
	buf_unref(m, b);
}

static void set_len(struct extmap *m, struct extent *e, size_t len)
{
	m->bytes = m->bytes - e->len + len;
	if (e->buf->file)
		m->file_bytes = m->file_bytes - e->len + len;
	e->buf->live = e->buf->live - e->len + len;
	e->len = len;
}

/* The last extent starting at or before off, or the first one after it. */
static GTreeNode *node_at_or_before(const struct extmap *m, off_t off)
{
	GTreeNode *n = g_tree_upper_bound(m->tree, &off); /* first key > off */
	GTreeNode *prev = n ? g_tree_node_previous(n) : g_tree_node_last(m->tree);

	return prev ? prev : n;
}

static GPtrArray *overlapping(const struct extmap *m, off_t start, off_t end)
{
	GPtrArray *hits = g_ptr_array_new();

	for (GTreeNode *n = node_at_or_before(m, start); n; n = g_tree_node_next(n)) {
		struct extent *e = g_tree_node_value(n);

		if (e->off >= end)
			break;
		if (e->off + (off_t)e->len > start)
			g_ptr_array_add(hits, e);
	}
	return hits;
}

/* Make p the piece [off, end) of e (same buffer, one more reference). */
static void piece_into(struct extent *p, const struct extent *e, off_t off, off_t end)
{
	*p = *e;
	p->boff = e->boff + (size_t)(off - e->off);
	p->off = off;
	p->len = (size_t)(end - off);
	p->buf->refs++;
}

/* Copy b's pieces into one buffer of their size; b goes once the last moves.
 * Only when nothing but its pieces holds b (no chunk in flight uses it). */
static void compact(struct extmap *m, struct ext_buf *b)
{
	struct ext_buf *nb = buf_new(m, b->live, b->lo);
	off_t lo = b->lo, hi = b->hi;
	unsigned left = b->pieces;

	if (!nb)
		return; /* an optimization only: it can wait for memory */
	for (GTreeNode *n = node_at_or_before(m, lo); n && left; n = g_tree_node_next(n)) {
		struct extent *e = g_tree_node_value(n);

		if (e->off >= hi)
			break;
		if (e->buf != b)
			continue;
		if (nb->size == 0)
			nb->lo = e->off;
		memcpy(nb->data + nb->size, b->data + e->boff, e->len);
		e->boff = nb->size;
		nb->size += e->len;
		nb->hi = e->off + (off_t)e->len;
		b->live -= e->len;
		b->pieces--;
		e->buf = nb;
		nb->live += e->len;
		nb->pieces++;
		nb->refs++;
		left--;
		buf_unref(m, b); /* frees b with the last piece */
	}
	buf_unref(m, nb); /* the creation reference */
}

/* Whether cutting [start, end) splits an extent in two. */
static bool splits(const struct extmap *m, off_t start, off_t end)
{
	GTreeNode *n = node_at_or_before(m, start);
	const struct extent *e = n ? g_tree_node_value(n) : NULL;

	return e && e->off < start && e->off + (off_t)e->len > end;
}

/*
 * Cut [start, end) out of the map. A split takes *spare (allocated by the
 * caller, set to NULL once used): nothing here allocates what may fail. The
 * buffers cut are held in held (one reference each), for release_held to
 * compact once the map is whole again. Returns the oldest generation of what
 * was cut (UINT64_MAX: nothing).
 */
static uint64_t punch(struct extmap *m, off_t start, off_t end, struct extent **spare,
		      GPtrArray *held)
{
	g_autoptr(GPtrArray) hits = overlapping(m, start, end);
	uint64_t oldest = UINT64_MAX;

	for (guint i = 0; i < hits->len; i++) {
		struct extent *e = hits->pdata[i];
		off_t e_end = e->off + (off_t)e->len;

		oldest = MIN(oldest, e->gen);
		e->buf->refs++;
		g_ptr_array_add(held, e->buf);
		if (e->off < start && e_end > end) {
			g_assert(spare && *spare);
			piece_into(*spare, e, end, e_end);
			insert(m, *spare);
			*spare = NULL;
		}
		if (e->off < start) {
			set_len(m, e, (size_t)(start - e->off));
		} else if (e_end > end) {
			/* The last extent hit loses its head. Nothing lies between its
			 * old start and end any more, so moving its key there keeps the
			 * tree's order: no new node, nothing to allocate. */
			e->boff += (size_t)(end - e->off);
			set_len(m, e, (size_t)(e_end - end));
			e->off = end;
		} else {
			remove_extent(m, e);
		}
	}
	return oldest;
}

static void release_held(struct extmap *m, GPtrArray *held)
{
	for (guint i = 0; i < held->len; i++)
		buf_drop(m, held->pdata[i]);
}

/* A write's cut of [off, end) (spare: the caller's, for a split; freed
 * here) and its generation: the next one, or the oldest it replaces (the
 * place it fills must reach the medium for a wait on that one too). */
static uint64_t write_cut(struct extmap *m, off_t off, off_t end, struct extent *spare,
			  GPtrArray *held)
{
	uint64_t gen = ++m->gen;
	uint64_t cut = punch(m, off, end, &spare, held);

	g_free(spare); /* not needed after all (cannot happen: splits() said so) */
	return MIN(gen, cut);
}

/* The extent a write at off would be appended to in place, or NULL. */
static struct extent *append_target(const struct extmap *m, off_t off, size_t len,
				    size_t coalesce_max)
{
	GTreeNode *n = g_tree_upper_bound(m->tree, &(off_t){off - 1});
	struct extent *p;

	n = n ? g_tree_node_previous(n) : g_tree_node_last(m->tree);
	if (!n)
		return NULL;
	p = g_tree_node_value(n);
	if (p->off + (off_t)p->len != off || p->flight || p->buf->refs != 1 || p->buf->file ||
	    p->boff + p->len != p->buf->size || p->len + len > coalesce_max)
		return NULL;
	if (p->buf->size + len > p->buf->cap && p->buf->size + len > EXT_BUF_GROW_MAX)
		return NULL;
	return p;
}

/* Append to p, into grown (of grown_cap bytes) when its buffer is full. */
static void append(struct extmap *m, struct extent *p, const void *data, size_t len,
		   char *grown, size_t grown_cap, uint64_t gen)
{
	struct ext_buf *b = p->buf;

	if (grown) {
		memcpy(grown, b->data, b->size);
		data_free(b->data, b->cap);
		mem_release(m, ext_buf_mem(b->cap));
		mem_charge(m, ext_buf_mem(grown_cap));
		b->data = grown;
		b->cap = grown_cap;
	}
	memcpy(b->data + b->size, data, len);
	b->size += len;
	b->hi += (off_t)len;
	set_len(m, p, p->len + len);
	p->gen = MIN(p->gen, gen);
}

int extmap_write(struct extmap *m, off_t off, const void *data, size_t len,
		 size_t coalesce_max)
{
	off_t end = off + (off_t)len;
	g_autoptr(GPtrArray) held = NULL;
	struct extent *spare = NULL, *e = NULL, *p;
	struct ext_buf *b = NULL;
	char *grown = NULL;
	size_t grown_cap = 0;
	uint64_t gen;

	if (len == 0)
		return 0;
	/* All that may fail first: on ENOMEM nothing queued is touched. */
	if (splits(m, off, end) && !(spare = extent_alloc()))
		return -ENOMEM;
	p = append_target(m, off, len, coalesce_max);
	if (p && p->buf->size + len > p->buf->cap) {
		grown_cap = MIN(MAX(p->buf->cap * 2, p->buf->size + len), EXT_BUF_GROW_MAX);
		grown = data_alloc(&grown_cap);
		if (!grown)
			p = NULL; /* a buffer of len may still be had */
	}
	if (!p) {
		b = buf_new(m, len, off);
		e = b ? extent_alloc() : NULL;
		if (!e) {
			if (b)
				buf_unref(m, b);
			g_free(spare);
			return -ENOMEM;
		}
	}
	held = g_ptr_array_new();
	gen = write_cut(m, off, end, spare, held);
	if (p) {
		append(m, p, data, len, grown, grown_cap, gen);
	} else {
		memcpy(b->data, data, len);
		b->size = len;
		b->hi = end;
		*e = (struct extent){.off = off, .len = len, .buf = b, .boff = 0, .flight = 0,
				     .gen = gen};
		insert(m, e);
	}
	release_held(m, held);
	return 0;
}

int extmap_write_file(struct extmap *m, off_t off, size_t len, struct ext_file *file,
		      off_t foff)
{
	off_t end = off + (off_t)len;
	g_autoptr(GPtrArray) held = NULL;
	struct extent *spare = NULL, *e;
	struct ext_buf *b;
	uint64_t gen;

	if (len == 0)
		return 0;
	if (splits(m, off, end) && !(spare = extent_alloc()))
		return -ENOMEM;
	b = alloc_fails() ? NULL : g_try_new0(struct ext_buf, 1);
	e = b ? extent_alloc() : NULL;
	if (!e) {
		g_free(b);
		g_free(spare);
		return -ENOMEM;
	}
	*b = (struct ext_buf){.refs = 1, .size = len, .cap = len, .lo = off, .hi = end,
			      .file = ext_file_ref(file), .foff = foff};
	mem_charge(m, buf_mem(b));
	held = g_ptr_array_new();
	gen = write_cut(m, off, end, spare, held);
	*e = (struct extent){.off = off, .len = len, .buf = b, .boff = 0, .flight = 0, .gen = gen};
	insert(m, e);
	release_held(m, held);
	return 0;
}

int ext_file_read(const struct ext_file *f, off_t at, char *dst, size_t n)
{
	while (n) {
		ssize_t r = pread(f->fd, dst, n, at);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? -errno : -EIO;
		dst += r;
		at += r;
		n -= (size_t)r;
	}
	return 0;
}

void extmap_truncate(struct extmap *m, off_t size)
{
	off_t end = extmap_end(m);
	g_autoptr(GPtrArray) held = NULL;

	if (end <= size)
		return;
	/* Cutting the tail splits nothing: punch needs no spare. */
	held = g_ptr_array_new();
	punch(m, size, end, NULL, held);
	release_held(m, held);
}

int extmap_overlay(const struct extmap *m, off_t off, char *buf, size_t len)
{
	off_t end = off + (off_t)len;
	g_autoptr(GPtrArray) hits = overlapping(m, off, end);
	int err = 0;

	for (guint i = 0; i < hits->len; i++) {
		const struct extent *e = hits->pdata[i];
		off_t s = MAX(off, e->off);
		off_t t = MIN(end, e->off + (off_t)e->len);
		size_t boff = e->boff + (size_t)(s - e->off);

		if (!e->buf->file)
			memcpy(buf + (s - off), e->buf->data + boff, (size_t)(t - s));
		else if (!err)
			err = ext_file_read(e->buf->file, e->buf->foff + (off_t)boff,
					    buf + (s - off), (size_t)(t - s));
	}
	return err;
}

struct oldest {
	uint64_t gen;
	off_t off;
	bool queued_only;
};

static gboolean oldest_of(gpointer key, gpointer value, gpointer data)
{
	struct oldest *o = data;
	const struct extent *e = value;

	if (e->gen < o->gen && !(o->queued_only && e->flight)) {
		o->gen = e->gen;
		o->off = e->off;
	}
	return FALSE;
}

uint64_t extmap_oldest_gen(const struct extmap *m)
{
	struct oldest o = {.gen = UINT64_MAX};

	g_tree_foreach(m->tree, oldest_of, &o);
	return o.gen;
}

off_t extmap_oldest_off(const struct extmap *m)
{
	struct oldest o = {.gen = UINT64_MAX, .queued_only = true};

	g_tree_foreach(m->tree, oldest_of, &o);
	return o.off;
}

off_t extmap_end(const struct extmap *m)
{
	GTreeNode *n = g_tree_node_last(m->tree);
	const struct extent *e;

	if (!n)
		return 0;
	e = g_tree_node_value(n);
	return e->off + (off_t)e->len;
}

static GTreeNode *first_queued_from(struct extmap *m, off_t from, bool wrap)
{
	GTreeNode *n = node_at_or_before(m, from);

	if (n && ((struct extent *)g_tree_node_value(n))->off < from)
		n = g_tree_node_next(n);
	for (; n; n = g_tree_node_next(n))
		if (!((struct extent *)g_tree_node_value(n))->flight)
			return n;
	if (!wrap)
		return NULL;
	for (n = g_tree_node_first(m->tree); n; n = g_tree_node_next(n))
		if (!((struct extent *)g_tree_node_value(n))->flight)
			return n;
	return NULL;
}

static size_t take(struct extmap *m, off_t from, bool wrap, size_t max, unsigned flight,
		   struct iovec *iov, struct ext_src *src, int niov_max, int *niov, off_t *off)
{
	GTreeNode *n = first_queued_from(m, from, wrap);
	size_t total = 0;
	off_t next = 0;

	*niov = 0;
	while (n && *niov < niov_max && total < max) {
		struct extent *e = g_tree_node_value(n);

		if (e->flight || (*niov > 0 && e->off != next) || (!src && e->buf->file))
			break;
		if (e->len > max - total) {
			/* Split at the chunk limit; the tail stays queued. */
			off_t cut = e->off + (off_t)(max - total);
			struct extent *tail = extent_alloc();

			if (tail) {
				piece_into(tail, e, cut, e->off + (off_t)e->len);
				set_len(m, e, (size_t)(cut - e->off));
				insert(m, tail);
			} else if (*niov > 0) {
				break;
			}
			/* else without memory for the split the chunk takes the whole
			 * extent: longer than asked, once, rather than none at all. */
		}
		if (*niov == 0)
			*off = e->off;
		e->flight = flight;
		pin(m, flight, e->buf);
		iov[*niov].iov_base = e->buf->file ? NULL : e->buf->data + e->boff;
		iov[*niov].iov_len = e->len;
		if (src)
			src[*niov] = (struct ext_src){.file = e->buf->file,
						      .off = e->buf->foff + (off_t)e->boff};
		(*niov)++;
		total += e->len;
		next = e->off + (off_t)e->len;
		n = g_tree_lookup_node(m->tree, &e->off);
		n = g_tree_node_next(n);
	}
	return total;
}

size_t extmap_take(struct extmap *m, off_t from, size_t max, unsigned flight,
		   struct iovec *iov, int niov_max, int *niov, off_t *off)
{
	return take(m, from, true, max, flight, iov, NULL, niov_max, niov, off);
}

size_t extmap_take_src(struct extmap *m, off_t from, size_t max, unsigned flight,
		       struct iovec *iov, struct ext_src *src, int niov_max, int *niov,
		       off_t *off)
{
	return take(m, from, true, max, flight, iov, src, niov_max, niov, off);
}

size_t extmap_take_after(struct extmap *m, off_t from, size_t max, unsigned flight,
			 struct iovec *iov, struct ext_src *src, int niov_max, int *niov,
			 off_t *off)
{
	return take(m, from, false, max, flight, iov, src, niov_max, niov, off);
}

/* Pieces of a chunk never leave the range it was taken from. */
static GPtrArray *in_flight(struct extmap *m, unsigned flight, off_t off, size_t len)
{
	GPtrArray *hits = overlapping(m, off, off + (off_t)len);

	for (guint i = hits->len; i-- > 0;)
		if (((struct extent *)hits->pdata[i])->flight != flight)
			g_ptr_array_remove_index(hits, i);
	return hits;
}

uint64_t extmap_complete(struct extmap *m, unsigned flight, off_t off, size_t len)
{
	g_autoptr(GPtrArray) hits = in_flight(m, flight, off, len);
	uint64_t dropped = 0;

	for (guint i = 0; i < hits->len; i++) {
		struct extent *e = hits->pdata[i];
		dropped += e->len;
		remove_extent(m, e);
	}
	unpin(m, flight);
	return dropped;
}

void extmap_abort(struct extmap *m, unsigned flight, off_t off, size_t len)
{
	g_autoptr(GPtrArray) hits = in_flight(m, flight, off, len);

	for (guint i = 0; i < hits->len; i++)
		((struct extent *)hits->pdata[i])->flight = 0;
	unpin(m, flight);
}

/* ---- Lower blocks the queued data needs (struct ext_count) ---- */

static uint64_t div_up(uint64_t x, uint64_t d)
{
	return x / d + (x % d != 0);
}

/* The extent holding pos or, if none does, the first one after it. */
static const struct extent *extent_from(const struct extmap *m, off_t pos)
{
	GTreeNode *n = node_at_or_before(m, pos);
	const struct extent *e;

	if (!n)
		return NULL;
	e = g_tree_node_value(n);
	if (e->off + (off_t)e->len > pos || e->off >= pos)
		return e;
	n = g_tree_node_next(n);
	return n ? g_tree_node_value(n) : NULL;
}

/* One lookup per touched run of blocks, not per extent: many small extents
 * inside one block cost a single step. */
uint64_t extmap_blocks_in(const struct extmap *m, uint64_t first, uint64_t end, uint64_t bs)
{
	uint64_t count = 0, b = first;

	while (b < end) {
		const struct extent *e = extent_from(m, (off_t)(b * bs));
		uint64_t s, t;

		if (!e || (uint64_t)e->off / bs >= end)
			break;
		s = MAX((uint64_t)e->off / bs, b);
		t = MIN(div_up((uint64_t)e->off + e->len, bs), end);
		count += t - s;
		b = t;
	}
	return count;
}

void extmap_count_reset(struct extmap *m, const uint64_t unit[EXT_COUNT_LEVELS], off_t allocated)
{
	struct ext_count *c = &m->count;

	for (int l = 0; l < EXT_COUNT_LEVELS; l++) {
		c->unit[l] = unit[l];
		c->first[l] = unit[l] ? div_up((uint64_t)MAX(allocated, 0), unit[l]) : 0;
		c->blocks[l] = unit[l] ? extmap_blocks_in(m, c->first[l], UINT64_MAX, unit[l]) : 0;
	}
	c->bytes = m->bytes;
}

/* Level l's block range [*b0, *b1) that [off, end) touches, past first. */
static bool count_window(const struct ext_count *c, int l, off_t off, off_t end, uint64_t *b0,
			 uint64_t *b1)
{
	uint64_t u = c->unit[l];

	if (!u || end <= off)
		return false;
	*b0 = MAX((uint64_t)off / u, c->first[l]);
	*b1 = div_up((uint64_t)end, u);
	return *b0 < *b1;
}

void extmap_count_need(const struct extmap *m, off_t off, size_t len,
		       uint64_t add[EXT_COUNT_LEVELS])
{
	const struct ext_count *c = &m->count;

	for (int l = 0; l < EXT_COUNT_LEVELS; l++) {
		uint64_t b0, b1;

		add[l] = 0;
		if (count_window(c, l, off, off + (off_t)len, &b0, &b1))
			add[l] = (b1 - b0) - extmap_blocks_in(m, b0, b1, c->unit[l]);
	}
}

/* The map changed from old_bytes: a count that was right stays right, a
 * stale one stays stale. */
static void count_follow(struct extmap *m, uint64_t old_bytes)
{
	m->count.bytes += m->bytes - old_bytes;
}

/* A write (of memory or file-kept data: file NULL or not), counted. */
static int write_counted(struct extmap *m, off_t off, const void *data, size_t len,
			 size_t coalesce_max, struct ext_file *file, off_t foff)
{
	uint64_t add[EXT_COUNT_LEVELS], old = m->bytes;
	int r;

	extmap_count_need(m, off, len, add);
	r = file ? extmap_write_file(m, off, len, file, foff)
		 : extmap_write(m, off, data, len, coalesce_max);
	if (r < 0)
		return r;
	for (int l = 0; l < EXT_COUNT_LEVELS; l++)
		m->count.blocks[l] += add[l];
	count_follow(m, old);
	return 0;
}

int extmap_write_counted(struct extmap *m, off_t off, const void *data, size_t len,
			 size_t coalesce_max)
{
	return write_counted(m, off, data, len, coalesce_max, NULL, 0);
}

int extmap_write_file_counted(struct extmap *m, off_t off, size_t len, struct ext_file *file,
			      off_t foff)
{
	return write_counted(m, off, NULL, len, 0, file, foff);
}

static void count_drop(struct ext_count *c, int l, uint64_t before, uint64_t after)
{
	uint64_t gone = before > after ? before - after : 0;

	c->blocks[l] -= MIN(c->blocks[l], gone);
}

void extmap_truncate_counted(struct extmap *m, off_t size)
{
	struct ext_count *c = &m->count;
	uint64_t before[EXT_COUNT_LEVELS] = {0}, from[EXT_COUNT_LEVELS] = {0}, old = m->bytes;

	for (int l = 0; l < EXT_COUNT_LEVELS; l++) {
		if (!c->unit[l])
			continue;
		from[l] = MAX((uint64_t)MAX(size, 0) / c->unit[l], c->first[l]);
		before[l] = extmap_blocks_in(m, from[l], UINT64_MAX, c->unit[l]);
	}
	extmap_truncate(m, size);
	for (int l = 0; l < EXT_COUNT_LEVELS; l++) {
		if (!c->unit[l])
			continue;
		count_drop(c, l, before[l], extmap_blocks_in(m, from[l], UINT64_MAX, c->unit[l]));
		/* Nothing is queued past size any more, so this adds no block. */
		c->first[l] = MIN(c->first[l], div_up((uint64_t)MAX(size, 0), c->unit[l]));
	}
	count_follow(m, old);
}

uint64_t extmap_complete_counted(struct extmap *m, unsigned flight, off_t off, size_t len)
{
	struct ext_count *c = &m->count;
	uint64_t before[EXT_COUNT_LEVELS] = {0}, b0[EXT_COUNT_LEVELS], b1[EXT_COUNT_LEVELS];
	uint64_t old = m->bytes, dropped;
	bool w[EXT_COUNT_LEVELS];

	for (int l = 0; l < EXT_COUNT_LEVELS; l++) {
		w[l] = count_window(c, l, off, off + (off_t)len, &b0[l], &b1[l]);
		if (w[l])
			before[l] = extmap_blocks_in(m, b0[l], b1[l], c->unit[l]);
	}
	dropped = extmap_complete(m, flight, off, len);
	for (int l = 0; l < EXT_COUNT_LEVELS; l++)
		if (w[l])
			count_drop(c, l, before[l], extmap_blocks_in(m, b0[l], b1[l], c->unit[l]));
	count_follow(m, old);
	return dropped;
}

bool extmap_run_from(const struct extmap *m, off_t pos, off_t *start, off_t *end)
{
	GTreeNode *n = node_at_or_before(m, pos);
	const struct extent *e;

	if (n && ((const struct extent *)g_tree_node_value(n))->off +
			 (off_t)((const struct extent *)g_tree_node_value(n))->len <= pos)
		n = g_tree_node_next(n);
	if (!n)
		return false;
	e = g_tree_node_value(n);
	*start = e->off;
	*end = e->off + (off_t)e->len;
	/* Adjacent extents are one run of data. */
	for (n = g_tree_node_next(n); n; n = g_tree_node_next(n)) {
		e = g_tree_node_value(n);
		if (e->off != *end)
			break;
		*end += (off_t)e->len;
	}
	return true;
}
