/*
 * What slowmediactl and the umount helpers share: finding the daemon of a
 * mount and talking to it over its control socket (sched/ctl_proto.h has the
 * protocol). All return 0 or -errno; *why, when set, is one line for the user
 * (g_free it; a drain that failed on files adds one indented line per file).
 *
 * Errors beside the daemon's own answers (error code=X: -X):
 *   -ENOENT        no slowmedia daemon serves the path (*why: no such path,
 *                  not a mount point, or some other filesystem's mount)
 *   -EACCES        one does, but this user may not talk to it
 *   -ECONNREFUSED  the path is a slowmedia mount whose daemon is gone (its
 *                  socket is stale, or there is none)
 *   -EHOSTDOWN     a daemon accepted the connection but did not answer in
 *                  time (CTLC_CONNECT_TIMEOUT_MS, CTLC_ANSWER_TIMEOUT_MS)
 *   -ECONNRESET    the daemon closed the connection mid-answer
 *   -EPROTO        it sent something that is not the protocol
 */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "ctl_proto.h"

/* Connecting and the status answer, while searching: a hung daemon must not
 * hang the tool, and a live one answers in microseconds. */
#define CTLC_CONNECT_TIMEOUT_MS 1000
/* set/pause/resume: the daemon answers once the request is applied. */
#define CTLC_ANSWER_TIMEOUT_MS 15000
/* drain: the longest silence between two progress records before the
 * daemon counts as hung (it sends one every interval_ms, even when stalled). */
#define CTLC_DRAIN_SILENCE_MS 60000
#define CTLC_DRAIN_TTY_INTERVAL_MS 250
#define CTLC_DRAIN_INTERVAL_MS 1000
/* Without a terminal, drain progress is one line this often. */
#define CTLC_DRAIN_LINE_EVERY_MS 5000

/* One daemon's answer to status. */
struct ctlc_mount {
	char *sock_path;
	struct ctl_msg status;	/* the "mount" record */
	GPtrArray *file_errors; /* struct ctl_msg *: the "file-error" records */
};
void ctlc_mount_free(struct ctlc_mount *m);

/*
 * The daemon serving mountpoint (a path, resolved with realpath; a daemon
 * whose mount is detached still answers for its old mount point): its socket
 * path and status record (the "mount" line; ctl_msg_clear it). -ENOENT when no
 * slowmedia daemon serves it (*why says whether it is some other mount or no
 * mount at all), -EACCES when one does but this user may not talk to it.
 */
int ctlc_find(const char *mountpoint, char **sock_path, struct ctl_msg *status,
	      char **why);
/* The same, with the file-error records (ctlc_mount_free it). */
int ctlc_find_mount(const char *mountpoint, struct ctlc_mount **out, char **why);

/*
 * Every daemon this user can reach: socket paths and status records, in two
 * arrays of the same length (g_ptr_array_unref them; the records are freed
 * with them). Stale sockets and other users' daemons are skipped.
 */
int ctlc_all(GPtrArray **sock_paths, GPtrArray **statuses);
/* The same as struct ctlc_mount * (freed with the array); problems, unless
 * NULL: one line per daemon that did not answer (g_ptr_array_unref it). */
int ctlc_all_mounts(GPtrArray **mounts, GPtrArray **problems);

/* Ask one socket for status, waiting timeout_ms at most for each step. */
int ctlc_status(const char *sock_path, int timeout_ms, struct ctlc_mount **out,
		char **why);

/*
 * Drain: wait until the mount's queue is on the medium, showing progress on
 * out (a bar redrawn in place when tty, else one line every few seconds; NULL
 * shows nothing). timeout_s < 0: no limit. -ETIMEDOUT, or the daemon's error
 * (e.g. -EIO with the failing files in *why, -EAGAIN when paused), or -EINTR
 * when interrupted by a signal (the daemon goes on flushing). SIGINT and
 * SIGTERM are caught for the time of the call.
 */
int ctlc_drain(const char *sock_path, FILE *out, bool tty, double timeout_s, char **why);

/* Send one request (a full line, '\n' included) and wait for its final line. */
int ctlc_request(const char *sock_path, const char *line, char **why);
/* The same; *answered: the error is the daemon's answer (an "error" line),
 * not the connection's (e.g. its ENOTCONN for an arbiter it cannot reach is
 * not the daemon being gone). */
int ctlc_request_ex(const char *sock_path, const char *line, bool *answered, char **why);

/* Errno names as the protocol spells them ("EIO"); 0 / NULL when unknown. */
int ctlc_errno_from_name(const char *name);
const char *ctlc_errno_name(int err);

/* For display (g_free them): "512 B", "3.5 MiB"; "1:05", "1:02:03"; a bar of
 * width cells for a fraction in [0, 1]; a value with control bytes and bytes
 * that are not UTF-8 written as \xNN. */
char *ctlc_fmt_size(uint64_t bytes);
char *ctlc_fmt_eta(int64_t secs);
char *ctlc_fmt_bar(double frac, int width);
char *ctlc_fmt_text(const char *s);
