/*
 * Names at risk: lower paths whose metadata (entry, size, block map) may not
 * be on the medium. Pure bookkeeping, no I/O, no locking: the caller (the
 * queue) holds its lock. See the DESIGN comment in risk.c.
 */
#pragma once
#include <glib.h>
#include <stdbool.h>
#include <stdint.h>

#define RISK_NAMES_MAX 10000 /* kept per set; beyond, only counted */
#define RISK_NAMES_LOGGED 50 /* named in one report */

struct risk {
	GHashTable *pending;  /* changed since the last metadata flush began */
	GHashTable *flushing; /* covered by the flush in progress (NULL: none) */
	GHashTable *lost;     /* covered by a flush that failed: at risk for good */
	uint64_t pending_dropped, flushing_dropped, lost_dropped; /* beyond the max */
};

void risk_init(struct risk *r);
void risk_free(struct risk *r);
/* path changed on the lower (made, renamed, its data written). */
void risk_add(struct risk *r, const char *path);
/* A metadata flush begins: what is pending now is what it covers. */
void risk_flush_begin(struct risk *r);
/* It ended with err (0 or -errno): its names are safe, or lost for good. */
void risk_flush_end(struct risk *r, int err);
/* How many names (kept or only counted) are lost. */
uint64_t risk_lost_count(const struct risk *r);
/*
 * "N files may be missing ...: 'a', 'b', ..." naming the lost files, when some
 * were never named in a report before (all: whenever any is lost); NULL
 * otherwise. g_free the result.
 */
char *risk_report(struct risk *r, bool all);
