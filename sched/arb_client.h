/*
 * A mount's side of the shared arbiter (arb_client.c has the design). The
 * flushers call arb_acquire / arb_release / arb_idle with q->lock held; the
 * read gate's edges call arb_reads_changed, lock-free.
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct wq;
struct arbc;

/* What a mount tells the arbiter about itself. */
struct arb_identity {
	const char *socket;	/* NULL: the default (or $SLOWMEDIA_ARBITER_SOCKET) */
	bool spawn;		/* start an arbiter when there is none */
	const char *group;	/* NULL: arb_default_group */
	dev_t lower_dev;	/* the lower filesystem's st_dev */
	const char *mountpoint;
	unsigned prio, weight;
	bool idle_class;
	uint64_t rate_bps;
};

/* The group of the medium at dev: its whole disk; for a loop device, the
 * group of the device holding its backing file; else "dev:MAJ:MIN".
 * g_free it. */
char *arb_default_group(dev_t dev);

/* Start the client thread (after wq_start); it connects and registers in
 * the background, and the mount paces alone until it has. */
int arbc_start(struct wq *q, const struct arb_identity *id);
void arbc_stop(struct wq *q);

/* Called with q->lock held, by a flusher about to write a chunk of about
 * bytes (urgent: an fsync waits): true when it may go now (granted, or no
 * arbiter); false after waiting a while for the grant (the lock was
 * dropped): look again, the grant waits in q->arb. use_after_wait: a caller
 * whose plan does not depend on what the lock guarded (the metadata flush)
 * takes a grant that came during the wait at once. */
bool arb_acquire(struct wq *q, size_t bytes, bool urgent, bool use_after_wait);
/* Called with q->lock held after the granted chunk: bytes written. */
void arb_release(struct wq *q, uint64_t bytes);
/* Called with q->lock held by a flusher with nothing to do: a grant that
 * came for work that is gone goes back. */
void arb_idle(struct wq *q);
/* Called with q->lock held: rate= changed here (the arbiter's status shows
 * it); a pause through the arbiter is lifted (why: for the log, "for the
 * final drain"...). */
void arb_rate_changed(struct wq *q);
void arb_resume(struct wq *q, const char *why);
/* The read gate went busy or idle (lock-free). */
void arb_reads_changed(struct wq *q);
/* For status: "off", "alone" (no arbiter reached) or "connected"; the id;
 * *lease (unless lease is NULL): connected and holding a lease (alone in its
 * group, chunks need no grant each). */
const char *arb_state(struct wq *q, int *id, bool *lease);
/* Runtime changes through the arbiter (each < 0: unchanged); they also hold
 * for later registrations. 0, or -errno with *why set (g_free): -ENOTCONN
 * when no arbiter is reached (or arbiter=off). */
int arbc_set(struct wq *q, int prio, int idle_class, int weight, char **why);
