/*
 * DESIGN: names at risk after a failed metadata flush.
 *
 * The flushers write the medium's own metadata (bitmaps, inodes, indirect
 * blocks, directory blocks) by a sweep and a syncfs. Until one succeeds, a file
 * made, renamed or written since the last good one may be missing, short or
 * stale on the medium even where its data was written: its entry or block map
 * may only be in memory. When a syncfs fails (the medium is gone), the kernel
 * drops the metadata whose writeback failed, so what that flush covered stays
 * at risk for good, whatever later flushes say: it moves to the lost set,
 * which only grows. Names changed after a flush began are not covered by it:
 * risk_flush_begin cuts the pending set.
 *
 * Each set keeps at most RISK_NAMES_MAX names and counts the rest. A report
 * names at most RISK_NAMES_LOGGED of them; it is made only when there are
 * lost names not yet reported (or when asked for all, at exit), so a medium
 * that stays gone does not fill the log.
 */
#include "risk.h"

#include <string.h>

#define REPORTED GINT_TO_POINTER(1)

static GHashTable *name_set(void)
{
	return g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
}

void risk_init(struct risk *r)
{
	*r = (struct risk){.pending = name_set(), .lost = name_set()};
}

void risk_free(struct risk *r)
{
	g_hash_table_destroy(r->pending);
	g_hash_table_destroy(r->lost);
	if (r->flushing)
		g_hash_table_destroy(r->flushing);
}

void risk_add(struct risk *r, const char *path)
{
	if (g_hash_table_contains(r->pending, path))
		return;
	if (g_hash_table_size(r->pending) >= RISK_NAMES_MAX) {
		r->pending_dropped++;
		return;
	}
	g_hash_table_add(r->pending, g_strdup(path));
}

void risk_flush_begin(struct risk *r)
{
	if (r->flushing) /* one flush at a time; an unfinished one counts as failed */
		risk_flush_end(r, -1);
	r->flushing = r->pending;
	r->flushing_dropped = r->pending_dropped;
	r->pending = name_set();
	r->pending_dropped = 0;
}

void risk_flush_end(struct risk *r, int err)
{
	GHashTableIter it;
	gpointer key, val;

	if (!r->flushing)
		return;
	if (err) {
		r->lost_dropped += r->flushing_dropped;
		g_hash_table_iter_init(&it, r->flushing);
		while (g_hash_table_iter_next(&it, &key, &val)) {
			g_hash_table_iter_steal(&it);
			if (g_hash_table_contains(r->lost, key))
				g_free(key);
			else if (g_hash_table_size(r->lost) >= RISK_NAMES_MAX) {
				r->lost_dropped++;
				g_free(key);
			} else
				g_hash_table_insert(r->lost, key, NULL);
		}
	}
	g_hash_table_destroy(r->flushing);
	r->flushing = NULL;
	r->flushing_dropped = 0;
}

uint64_t risk_lost_count(const struct risk *r)
{
	return g_hash_table_size(r->lost) + r->lost_dropped;
}

static gint by_name(gconstpointer a, gconstpointer b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

char *risk_report(struct risk *r, bool all)
{
	GHashTableIter it;
	gpointer key, val;
	g_autoptr(GPtrArray) names = g_ptr_array_new();
	GString *s;
	unsigned fresh = 0;
	uint64_t total = risk_lost_count(r);

	g_hash_table_iter_init(&it, r->lost);
	while (g_hash_table_iter_next(&it, &key, &val)) {
		fresh += val != REPORTED;
		g_hash_table_iter_replace(&it, REPORTED);
		g_ptr_array_add(names, key);
	}
	if (!total || (!fresh && !all))
		return NULL;
	g_ptr_array_sort(names, by_name); /* a stable order for whoever reads it */
	s = g_string_new(NULL);
	g_string_printf(s, "%" G_GUINT64_FORMAT " files may be missing, short or stale on the "
		       "medium (their names, sizes or blocks were not written to it): ", total);
	for (guint i = 0; i < names->len && i < RISK_NAMES_LOGGED; i++)
		g_string_append_printf(s, "%s'%s'", i ? ", " : "", (char *)names->pdata[i]);
	if (total > MIN(names->len, RISK_NAMES_LOGGED))
		g_string_append_printf(s, "%sand %" G_GUINT64_FORMAT " more", names->len ? ", " : "",
				       total - MIN(names->len, RISK_NAMES_LOGGED));
	return g_string_free(s, FALSE);
}
