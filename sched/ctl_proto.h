/*
 * The control socket's wire format, shared by the daemon (fusefs/control.c)
 * and its clients (slowmediactl, the umount helpers).
 *
 * Where. One stream unix socket per daemon, named ctl-PID.sock in the
 * control directory: /run/slowmedia for a daemon running as root, else
 * $XDG_RUNTIME_DIR/slowmedia (/run/user/UID/slowmedia when unset). The
 * directory is 0755 for root, 0700 otherwise; the socket is 0600 and the
 * daemon accepts only its own uid and root (SO_PEERCRED). A client finds a
 * mount by asking every socket there for its status (ctl_list_sockets).
 * SLOWMEDIA_CTL_DIR (absolute) overrides the directory for daemon and
 * clients alike (the tests use it; nothing else is searched then).
 *
 * Framing. Text lines ending in '\n', at most CTL_LINE_MAX bytes with the
 * '\n'. A line is a word ([a-z0-9_-]+), then fields `key=value` each after
 * one space. Keys are [a-z0-9_]+; numbers are plain decimal digits (a '-'
 * first where a field may be negative). Values are bytes, with '%', '=', ' ', control bytes, DEL
 * and bytes >= 0x80 written as %XX (so a path with a newline stays one
 * field); an empty value is allowed.
 *
 * Conversation. On connect the daemon sends
 *     slowmedia-ctl version=1 pid=PID
 * Then the client sends one request line at a time; the daemon answers with
 * zero or more record lines and exactly one final line,
 *     ok [fields]            or    error code=ERRNAME msg=TEXT
 * and reads the next request. Requests:
 *     status                 record: mount (fields below), then one
 *                            file-error path=P code=ERRNAME bytes=N per failing file
 *     drain [interval_ms=N]  records: progress (the mount fields' queue part),
 *                            every N ms (default 500, 50..60000); ok once
 *                            nothing is queued and the lower filesystem has
 *                            been synced; error when the queue cannot drain
 *                            (every file left failing: code=EIO..., or
 *                            code=EAGAIN when paused)
 *     set KEY=VALUE...       rate=SIZE|0 (0: no cap), latency=MS; prio,
 *                            class, weight through the arbiter (code=ENOTCONN
 *                            when none is reached or arbiter=off)
 *     pause | resume         flushing stops after the chunk in flight / goes on
 * A request the daemon cannot parse (too long, bad field, unknown word) gets
 * one error line with code=EPROTO and the connection is closed; nothing else
 * is affected.
 *
 * The mount record's fields (slowmediactl --json uses the same names):
 *   mountpoint source device fstype label state (flushing|idle|paused|error|
 *   detached-draining|detached) queued_bytes queued_files parked_writes
 *   flush_rate (bytes/s the medium takes, capped by rate=; 0 unknown) eta_s
 *   (-1 unknown) written_bytes chunks errors (files failing now) rate (cap,
 *   0 none) latency_ms prio class weight group arbiter (connected|alone|off)
 *   arbiter_id read_bytes read_errors (reads the lower refused since the
 *   mount) read_error_path read_error_code read_error_age_s (the last of
 *   them: lower path, ERRNAME, seconds ago; "", "", -1 when none) requests
 *   (FUSE requests in flight but those waiting for the medium at their
 *   caller's wish: fsync, sync writes, sync_close, fallocate; writes held by
 *   backpressure are not in flight here either) oldest_request (its op, ""
 *   when none) oldest_request_pid oldest_request_ms slow_requests (requests
 *   that took longer than req_bound_ms since the mount) req_bound_ms pid uid.
 *   A progress record has state, the queue
 *   fields (queued_bytes ... errors) and rate.
 */
#pragma once
#include <glib.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define CTL_VERSION 1
#define CTL_LINE_MAX 4096
#define CTL_FIELDS_MAX 64
#define CTL_SOCKET_PREFIX "ctl-"
#define CTL_SOCKET_SUFFIX ".sock"
#define CTL_ROOT_DIR "/run/slowmedia"
#define CTL_DIR_ENV "SLOWMEDIA_CTL_DIR"
#define CTL_DRAIN_INTERVAL_MS_DEFAULT 500
#define CTL_DRAIN_INTERVAL_MS_MIN 50
#define CTL_DRAIN_INTERVAL_MS_MAX 60000

struct ctl_field {
	char *key;
	char *value; /* decoded; NUL-terminated (a %00 ends it early) */
};

struct ctl_msg {
	char *word;
	unsigned nfields;
	struct ctl_field fields[CTL_FIELDS_MAX];
};

/*
 * Parse one line (without its '\n'; len bytes, need not be NUL-terminated).
 * 0, or -EPROTO for a line that breaks the framing (empty word, bad key,
 * bad escape, too many fields, too long). m is cleared first; free it with
 * ctl_msg_clear in either case.
 */
int ctl_parse(const char *line, size_t len, struct ctl_msg *m);
void ctl_msg_clear(struct ctl_msg *m);
/* The value of key, or NULL. */
const char *ctl_get(const struct ctl_msg *m, const char *key);
/* The value of key as a number; def when absent, and false when malformed. */
bool ctl_get_u64(const struct ctl_msg *m, const char *key, uint64_t def, uint64_t *out);
bool ctl_get_i64(const struct ctl_msg *m, const char *key, int64_t def, int64_t *out);

/* Building a line: start, add fields, end (appends the '\n'). */
void ctl_begin(GString *out, const char *word);
void ctl_add(GString *out, const char *key, const char *value);
void ctl_add_u64(GString *out, const char *key, uint64_t v);
void ctl_add_i64(GString *out, const char *key, int64_t v);
void ctl_end(GString *out);

/* The control directory for a daemon running as uid (see above); g_free it. */
char *ctl_dir_for(uid_t uid);

/*
 * A client's side of a connection: ctl_connect checks the greeting (version);
 * ctl_read_line reads one line into buf (size CTL_LINE_MAX + 1), waiting at
 * most timeout_ms (-1: no limit): its length, or -errno (-ETIMEDOUT, -EPROTO
 * for a line too long, -ECONNRESET at end of stream).
 */
struct ctl_conn {
	int fd;
	pid_t pid; /* from the greeting */
	size_t have;
	char buf[CTL_LINE_MAX * 2];
};
int ctl_connect(struct ctl_conn *c, const char *path, int timeout_ms);
/* The connection alone, greeting not read: connect without blocking on a
 * full backlog (a hung server's), trying again until timeout_ms; then a
 * blocking fd. 0, or -errno (-EHOSTDOWN: the backlog stayed full). */
int ctl_connect_sock(struct ctl_conn *c, const char *path, int timeout_ms);
/* ctl_connect for a server that greets with word and version (the arbiter). */
int ctl_connect_word(struct ctl_conn *c, const char *path, const char *word, unsigned want,
		     int timeout_ms);
void ctl_close(struct ctl_conn *c);
int ctl_send(struct ctl_conn *c, const char *line); /* line ends in '\n' */
int ctl_read_line(struct ctl_conn *c, char *out, int timeout_ms);

/*
 * The servers' side (libev loops: the control socket, the arbiter and its
 * clients), on non-blocking sockets. ctl_inbuf_recv does one receive into
 * ib, then calls fn(arg, line, len) for each complete line ('\n' left out)
 * while fn returns true (false: stop, the caller closes or reset ib).
 * Returns 1 while the connection goes on (also when nothing came: EAGAIN,
 * EINTR), 0 when the peer closed it, -errno on a receive error, -EMSGSIZE
 * when CTL_LINE_MAX bytes came without a newline. ctl_outbuf_send sends as
 * much of out as the socket takes now and erases it from out: 0 (what is
 * left waits for EV_WRITE), or -errno (the connection is gone).
 */
struct ctl_inbuf {
	char buf[CTL_LINE_MAX];
	size_t have;
};
int ctl_inbuf_recv(struct ctl_inbuf *ib, int fd,
		   bool (*fn)(void *arg, const char *line, size_t len), void *arg);
int ctl_outbuf_send(GString *out, int fd);

/*
 * Every control socket in the directories this user can see (root: the root
 * directory and every /run/user/UID/slowmedia; others: their own), full paths
 * in a GPtrArray of g_strdup'd strings.
 */
GPtrArray *ctl_list_sockets(void);
