/*
 * The daemon's control socket (protocol: sched/ctl_proto.h) and the busy hold
 * that keeps a plain unmount from lying (control.c has the design).
 */
#pragma once
#include <stdbool.h>

struct slowmedia;

/*
 * Start serving the control socket for the mount at mountpoint (after the
 * mount and the daemonize; the flushers running). A socket that cannot be
 * made is logged, not fatal: the mount works without it. 0 or -errno.
 */
int control_start(struct slowmedia *fs, const char *mountpoint);
/* The mount is gone (the FUSE loop ended): drop the hold, say detached. */
void control_detached(struct slowmedia *fs);
/* After the final drain: stop the thread, remove the socket. */
void control_stop(struct slowmedia *fs);

/*
 * Called by the op handlers after they queued something and before they
 * answer: from then until the queue is empty again the daemon holds its own
 * mount open, so a non-lazy unmount fails with EBUSY instead of leaving
 * queued data behind a mount that looks gone. Cheap when already held.
 */
void control_busy(struct slowmedia *fs);

/* After an op that waited for the medium (fsync): give the hold back now if
 * the queue is empty, so an unmount right after it is not refused. */
void control_idle_check(struct slowmedia *fs);
