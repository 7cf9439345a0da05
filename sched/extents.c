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
 * Threads: none here; the caller (queue.c) holds its lock around every call.
 */
#include "extents.h"

#include <stdlib.h>
#include <string.h>

static gint off_cmp(gconstpointer a, gconstpointer b, gpointer unused)
{
	off_t x = *(const off_t *)a, y = *(const off_t *)b;

	return x < y ? -1 : x > y;
}

static struct ext_buf *buf_new(size_t cap)
{
	struct ext_buf *b = g_new(struct ext_buf, 1);

	if (posix_memalign((void **)&b->data, EXT_BUF_ALIGN, cap ? cap : 1) != 0)
		g_error("out of memory for %zu queued bytes", cap);
	b->refs = 1;
	b->size = 0;
	b->cap = cap;
	return b;
}

static void buf_unref(struct ext_buf *b)
{
	if (--b->refs == 0) {
		free(b->data);
		g_free(b);
	}
}

static void extent_free(gpointer p)
{
	struct extent *e = p;

	buf_unref(e->buf);
	g_free(e);
}

static void unpin_all(gpointer p)
{
	GPtrArray *bufs = p;

	for (guint i = 0; i < bufs->len; i++)
		buf_unref(bufs->pdata[i]);
	g_ptr_array_free(bufs, TRUE);
}

void extmap_init(struct extmap *m)
{
	/* Keys point into the extent itself, so only the value is destroyed. */
	m->tree = g_tree_new_full(off_cmp, NULL, NULL, extent_free);
	m->bytes = 0;
	m->pinned = g_hash_table_new_full(g_direct_hash, g_direct_equal, NULL, unpin_all);
}

void extmap_clear(struct extmap *m)
{
	if (m->tree)
		g_tree_destroy(m->tree);
	if (m->pinned)
		g_hash_table_destroy(m->pinned);
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

static void insert(struct extmap *m, struct extent *e)
{
	g_tree_insert(m->tree, &e->off, e);
	m->bytes += e->len;
}

static void remove_extent(struct extmap *m, struct extent *e)
{
	m->bytes -= e->len;
	g_tree_remove(m->tree, &e->off);
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

static struct extent *piece(const struct extent *e, off_t off, off_t end)
{
	struct extent *p = g_new(struct extent, 1);

	*p = *e;
	p->boff = e->boff + (size_t)(off - e->off);
	p->off = off;
	p->len = (size_t)(end - off);
	p->buf->refs++;
	return p;
}

/* Cut [start, end) out of the map. */
static void punch(struct extmap *m, off_t start, off_t end)
{
	g_autoptr(GPtrArray) hits = overlapping(m, start, end);

	for (guint i = 0; i < hits->len; i++) {
		struct extent *e = hits->pdata[i];
		off_t e_end = e->off + (off_t)e->len;

		if (e->off < start && e_end > end)
			insert(m, piece(e, end, e_end));
		if (e->off < start) {
			m->bytes -= (uint64_t)(e_end - start);
			e->len = (size_t)(start - e->off);
		} else if (e_end > end) {
			struct extent *tail = piece(e, end, e_end);
			remove_extent(m, e);
			insert(m, tail);
		} else {
			remove_extent(m, e);
		}
	}
}

static bool try_append(struct extmap *m, off_t off, const void *data, size_t len,
		       size_t coalesce_max)
{
	GTreeNode *n;
	struct extent *p;

	n = g_tree_upper_bound(m->tree, &(off_t){off - 1});
	n = n ? g_tree_node_previous(n) : g_tree_node_last(m->tree);
	if (!n)
		return false;
	p = g_tree_node_value(n);
	if (p->off + (off_t)p->len != off || p->flight || p->buf->refs != 1 ||
	    p->boff + p->len != p->buf->size || p->len + len > coalesce_max)
		return false;
	if (p->buf->size + len > p->buf->cap) {
		size_t cap = MAX(p->buf->cap * 2, p->buf->size + len);
		char *grown;
		if (posix_memalign((void **)&grown, EXT_BUF_ALIGN, cap) != 0)
			return false;
		memcpy(grown, p->buf->data, p->buf->size);
		free(p->buf->data);
		p->buf->data = grown;
		p->buf->cap = cap;
	}
	memcpy(p->buf->data + p->buf->size, data, len);
	p->buf->size += len;
	p->len += len;
	m->bytes += len;
	return true;
}

void extmap_write(struct extmap *m, off_t off, const void *data, size_t len,
		  size_t coalesce_max)
{
	struct extent *e;
	struct ext_buf *b;

	if (len == 0)
		return;
	punch(m, off, off + (off_t)len);
	if (try_append(m, off, data, len, coalesce_max))
		return;
	b = buf_new(len);
	b->size = len;
	memcpy(b->data, data, len);
	e = g_new(struct extent, 1);
	*e = (struct extent){.off = off, .len = len, .buf = b, .boff = 0, .flight = 0};
	insert(m, e);
}

void extmap_truncate(struct extmap *m, off_t size)
{
	off_t end = extmap_end(m);

	if (end > size)
		punch(m, size, end);
}

void extmap_overlay(const struct extmap *m, off_t off, char *buf, size_t len)
{
	off_t end = off + (off_t)len;
	g_autoptr(GPtrArray) hits = overlapping(m, off, end);

	for (guint i = 0; i < hits->len; i++) {
		const struct extent *e = hits->pdata[i];
		off_t s = MAX(off, e->off);
		off_t t = MIN(end, e->off + (off_t)e->len);

		memcpy(buf + (s - off), e->buf->data + e->boff + (s - e->off), (size_t)(t - s));
	}
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

static GTreeNode *first_queued_from(struct extmap *m, off_t from)
{
	GTreeNode *n = node_at_or_before(m, from);

	if (n && ((struct extent *)g_tree_node_value(n))->off < from)
		n = g_tree_node_next(n);
	for (; n; n = g_tree_node_next(n))
		if (!((struct extent *)g_tree_node_value(n))->flight)
			return n;
	for (n = g_tree_node_first(m->tree); n; n = g_tree_node_next(n))
		if (!((struct extent *)g_tree_node_value(n))->flight)
			return n;
	return NULL;
}

size_t extmap_take(struct extmap *m, off_t from, size_t max, unsigned flight,
		   struct iovec *iov, int niov_max, int *niov, off_t *off)
{
	GTreeNode *n = first_queued_from(m, from);
	size_t total = 0;
	off_t next = 0;

	*niov = 0;
	while (n && *niov < niov_max && total < max) {
		struct extent *e = g_tree_node_value(n);

		if (e->flight || (*niov > 0 && e->off != next))
			break;
		if (e->len > max - total) {
			/* Split at the chunk limit; the tail stays queued. */
			off_t cut = e->off + (off_t)(max - total);
			struct extent *tail = piece(e, cut, e->off + (off_t)e->len);
			e->len = (size_t)(cut - e->off);
			m->bytes -= tail->len;
			insert(m, tail);
		}
		if (*niov == 0)
			*off = e->off;
		e->flight = flight;
		pin(m, flight, e->buf);
		iov[*niov].iov_base = e->buf->data + e->boff;
		iov[*niov].iov_len = e->len;
		(*niov)++;
		total += e->len;
		next = e->off + (off_t)e->len;
		n = g_tree_lookup_node(m->tree, &e->off);
		n = g_tree_node_next(n);
	}
	return total;
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
	g_hash_table_remove(m->pinned, GUINT_TO_POINTER(flight));
	return dropped;
}

void extmap_abort(struct extmap *m, unsigned flight, off_t off, size_t len)
{
	g_autoptr(GPtrArray) hits = in_flight(m, flight, off, len);

	for (guint i = 0; i < hits->len; i++)
		((struct extent *)hits->pdata[i])->flight = 0;
	g_hash_table_remove(m->pinned, GUINT_TO_POINTER(flight));
}
