/*
 * How long each FUSE request has been in the daemon: a slot per worker
 * thread, the oldest request shown in status, a warning for each request
 * past the bound. See the DESIGN comment in reqtrack.c.
 */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "log.h"

#define REQ_BOUND_S_DEFAULT 10 /* req_bound=: seconds a request may take */
#define REQ_BOUND_S_MAX 3600
#define REQ_SCAN_NS 1000000000ll /* how often in-flight requests are looked at */

struct reqtrack;

/* The bound in ns. Returns NULL only when out of memory for the thread key. */
struct reqtrack *reqtrack_new(int64_t bound_ns);
void reqtrack_free(struct reqtrack *t);

/*
 * Around one request in the calling thread: begin takes the thread's slot
 * (made at its first request), end gives the request up and returns true when
 * it took longer than the bound and the scan had not logged it yet (the
 * caller's end then counted and logged it). Time comes from the caller.
 */
void reqtrack_begin(struct reqtrack *t, const char *op, pid_t pid, int64_t now_ns);
bool reqtrack_end(struct reqtrack *t, int64_t now_ns);
/* The request in the calling thread now waits for the medium because its
 * caller asked for that (fsync, a sync write, sync_close, fallocate): it is
 * left out of the bound and of the oldest. */
void reqtrack_waits_medium(struct reqtrack *t);

/* The oldest request in flight that is not waiting for the medium. */
struct req_view {
	const char *op; /* NULL: none */
	pid_t pid;
	int64_t age_ns;
	uint64_t gen; /* which request of its slot (for logging it once) */
};
/* *oldest filled (op NULL when none); returns the requests in flight. */
unsigned reqtrack_oldest(struct reqtrack *t, int64_t now_ns, struct req_view *oldest);
/* Log, once each, the requests in flight past the bound; returns how many
 * it logged now. Call every REQ_SCAN_NS or so (the control thread does). */
unsigned reqtrack_scan(struct reqtrack *t, int64_t now_ns);
/* Requests that went past the bound since the start (in flight or done). */
uint64_t reqtrack_slow(struct reqtrack *t);
int64_t reqtrack_bound_ns(const struct reqtrack *t);
