/*
 * DESIGN: where the daemon's lines go. In the foreground, stderr. Daemonized
 * (as mount.fuse3 runs it) stderr is /dev/null, and a machine or container
 * without a syslog daemon would swallow the "they are lost" reports, so
 * sm_log_choose falls back: syslog when /dev/log takes a connection, else the
 * journal's sockets, else a file the user can read. The choice and the open
 * happen before daemonizing, so a failure is seen on the terminal.
 *
 * Threads: sm_log may be called from any thread. Each line is formatted on the
 * stack and leaves in one write(2), send(2) or syslog call, so lines of
 * different threads never mix. The configuration is set before any thread
 * exists and read-only afterwards.
 */
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <glib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define LINE_MAX_BYTES 1024
#define PIECE_MAX 8 /* the longest escape, "\xNN", or one UTF-8 character */
#define ELLIPSIS "..."
#define DEV_LOG "/dev/log"
#define JOURNAL_SYSLOG "/run/systemd/journal/dev-log" /* syslog protocol */
#define JOURNAL_NATIVE "/run/systemd/journal/socket"  /* journal protocol */

enum log_target { TO_STDERR, TO_SYSLOG, TO_JOURNAL_SYSLOG, TO_JOURNAL_NATIVE, TO_FILE };

static struct {
	const char *ident;
	bool debug;
	enum log_target chosen; /* by sm_log_choose */
	enum log_target target; /* in use: stderr until sm_log_start */
	int fd;			/* the journal socket or the log file */
	char *where;		/* what the start-up line names */
	int pid;		/* the daemon's, set after the fork */
} log_cfg = {"slowmedia", false, TO_STDERR, TO_STDERR, -1, NULL, 0};

void sm_log_init(const char *ident, bool debug)
{
	log_cfg.ident = ident;
	log_cfg.debug = debug;
}

bool sm_log_debug_enabled(void)
{
	return log_cfg.debug;
}

/* The next piece of *s as logged; advances *s, returns the piece's length. */
static size_t next_piece(const char **s, char piece[PIECE_MAX], bool backslash)
{
	unsigned char b = (unsigned char)**s;
	gunichar c;
	size_t n;

	if (b < 0x80) {
		(*s)++;
		if (b == '\n' || b == '\t' || (b == '\\' && backslash)) {
			piece[0] = '\\';
			piece[1] = b == '\n' ? 'n' : b == '\t' ? 't' : '\\';
			return 2;
		}
		if (b < 0x20 || b == 0x7f)
			return (size_t)snprintf(piece, PIECE_MAX, "\\x%02x", b);
		piece[0] = (char)b;
		return 1;
	}
	c = g_utf8_get_char_validated(*s, -1);
	/* C1 controls and the line separators end lines in some viewers. */
	if (c == (gunichar)-1 || c == (gunichar)-2 || (c >= 0x80 && c < 0xa0) ||
	    c == 0x2028 || c == 0x2029) {
		(*s)++; /* the rest of the sequence is escaped byte by byte */
		return (size_t)snprintf(piece, PIECE_MAX, "\\x%02x", b);
	}
	n = (size_t)g_utf8_skip[b];
	memcpy(piece, *s, n);
	*s += n;
	return n;
}

/* Whether all of s, escaped, fits in room bytes with its NUL. */
static bool rest_fits(const char *s, size_t room, bool backslash)
{
	char piece[PIECE_MAX];
	size_t n = 0;

	while (*s && n < room)
		n += next_piece(&s, piece, backslash);
	return n < room;
}

static char *escape(const char *s, char *out, size_t size, bool backslash)
{
	char piece[PIECE_MAX];
	size_t n = 0, len;

	if (size < sizeof(ELLIPSIS)) {
		if (size)
			out[0] = '\0';
		return out;
	}
	/* Invariant: n + sizeof(ELLIPSIS) <= size, so the cut always fits. */
	while (*s) {
		const char *at = s;
		len = next_piece(&s, piece, backslash);
		if (n + len + sizeof(ELLIPSIS) > size &&
		    !rest_fits(at, size - n, backslash)) {
			memcpy(out + n, ELLIPSIS, sizeof(ELLIPSIS));
			return out;
		}
		memcpy(out + n, piece, len);
		n += len;
	}
	out[n] = '\0';
	return out;
}

char *sm_log_escape(const char *s, char *out, size_t size)
{
	return escape(s, out, size, true);
}

/* A unix socket of ours connected to path, or -errno. */
static int connect_unix(const char *path, int type)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd, err;

	g_strlcpy(sa.sun_path, path, sizeof(sa.sun_path));
	fd = socket(AF_UNIX, type | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		err = -errno;
		close(fd);
		return err;
	}
	return fd;
}

static bool is_socket(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && S_ISSOCK(st.st_mode);
}

/* /dev/log may be a datagram or a stream socket; glibc's syslog takes both. */
static bool syslog_listens(void)
{
	int fd;

	if (!is_socket(DEV_LOG))
		return false;
	fd = connect_unix(DEV_LOG, SOCK_DGRAM);
	if (fd == -EPROTOTYPE)
		fd = connect_unix(DEV_LOG, SOCK_STREAM);
	if (fd < 0)
		return false;
	close(fd);
	return true;
}

static int try_journal(const char *path, enum log_target t)
{
	int fd;

	if (!is_socket(path))
		return -ENOENT;
	fd = connect_unix(path, SOCK_DGRAM);
	if (fd < 0)
		return fd;
	log_cfg.fd = fd;
	log_cfg.chosen = t;
	log_cfg.where = g_strdup_printf("the journal (%s)", path);
	return 0;
}

static char *default_log_file(void)
{
	const char *state = getenv("XDG_STATE_HOME");

	if (geteuid() == 0)
		return g_strdup(SM_LOG_FILE_ROOT);
	/* XDG: a relative $XDG_STATE_HOME is invalid and to be ignored. */
	if (state && state[0] == '/')
		return g_build_filename(state, SM_LOG_FILE_USER, NULL);
	return g_build_filename(g_get_home_dir(), ".local", "state", SM_LOG_FILE_USER,
				NULL);
}

static int open_log_file(char *path)
{
	g_autofree char *dir = g_path_get_dirname(path);
	mode_t mode = geteuid() == 0 ? 0640 : 0600;
	int fd;

	if (geteuid() != 0 && g_mkdir_with_parents(dir, 0700) < 0) {
		fd = -errno;
		fprintf(stderr, "%s: cannot create %s for the log: %s\n", log_cfg.ident,
			dir, g_strerror(-fd));
		g_free(path);
		return fd;
	}
	fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_NOCTTY | O_CLOEXEC, mode);
	if (fd < 0) {
		fd = -errno;
		fprintf(stderr, "%s: cannot open the log file %s: %s\n", log_cfg.ident,
			path, g_strerror(-fd));
		g_free(path);
		return fd;
	}
	log_cfg.fd = fd;
	log_cfg.chosen = TO_FILE;
	log_cfg.where = path;
	return 0;
}

int sm_log_choose(void)
{
	const char *file = getenv(SM_LOG_FILE_ENV);
	int r = 0;

	if (file && *file) {
		r = open_log_file(g_strdup(file));
	} else if (syslog_listens()) {
		/* Connect now: after the fork the daemon may no longer see /dev/log. */
		openlog(log_cfg.ident, LOG_PID | LOG_NDELAY, LOG_DAEMON);
		log_cfg.chosen = TO_SYSLOG;
		log_cfg.where = g_strdup("syslog");
	} else if (try_journal(JOURNAL_SYSLOG, TO_JOURNAL_SYSLOG) < 0 &&
		   try_journal(JOURNAL_NATIVE, TO_JOURNAL_NATIVE) < 0) {
		r = open_log_file(default_log_file());
	}
	if (r == 0)
		fprintf(stderr, "%s: logging to %s\n", log_cfg.ident, log_cfg.where);
	return r;
}

void sm_log_start(void)
{
	log_cfg.pid = getpid();
	log_cfg.target = log_cfg.chosen;
	if (log_cfg.target != TO_STDERR)
		sm_info("logging to %s", log_cfg.where);
}

static void write_file(const char *line)
{
	char out[LINE_MAX_BYTES + 128], stamp[40], zone[8];
	struct timespec ts;
	struct tm tm;
	int n;

	clock_gettime(CLOCK_REALTIME, &ts);
	localtime_r(&ts.tv_sec, &tm);
	strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
	strftime(zone, sizeof(zone), "%z", &tm);
	n = snprintf(out, sizeof(out), "%s.%03ld%s %s[%d]: %s\n", stamp,
		     ts.tv_nsec / 1000000, zone, log_cfg.ident, log_cfg.pid, line);
	if (n >= (int)sizeof(out))
		n = sizeof(out) - 1;
	/* Nobody to tell when the log itself fails. */
	if (write(log_cfg.fd, out, (size_t)n) < 0)
		return;
}

static void send_journal(int prio, const char *line)
{
	char out[LINE_MAX_BYTES + 160];
	int n;

	if (log_cfg.target == TO_JOURNAL_SYSLOG)
		n = snprintf(out, sizeof(out), "<%d>%s[%d]: %s", LOG_DAEMON | prio,
			     log_cfg.ident, log_cfg.pid, line);
	else
		n = snprintf(out, sizeof(out),
			     "PRIORITY=%d\nSYSLOG_FACILITY=%d\nSYSLOG_IDENTIFIER=%s\n"
			     "SYSLOG_PID=%d\nMESSAGE=%s\n",
			     prio, LOG_DAEMON >> 3, log_cfg.ident, log_cfg.pid, line);
	if (n >= (int)sizeof(out))
		n = sizeof(out) - 1;
	send(log_cfg.fd, out, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
}

void sm_vlog(int prio, const char *fmt, va_list ap)
{
	char raw[LINE_MAX_BYTES], line[LINE_MAX_BYTES];

	vsnprintf(raw, sizeof(raw), fmt, ap);
	/* Names are escaped by their callers (backslashes too); this catches any
	 * control character that still slipped in, so no line can be forged. */
	escape(raw, line, sizeof(line), false);
	switch (log_cfg.target) {
	case TO_SYSLOG:
		syslog(prio, "%s", line);
		break;
	case TO_JOURNAL_SYSLOG:
	case TO_JOURNAL_NATIVE:
		send_journal(prio, line);
		break;
	case TO_FILE:
		write_file(line);
		break;
	case TO_STDERR:
		/* One fprintf per line keeps lines from threads whole. */
		fprintf(stderr, "%s: %s\n", log_cfg.ident, line);
		break;
	}
}

void sm_log(int prio, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	sm_vlog(prio, fmt, ap);
	va_end(ap);
}

bool sm_ratelimit_pass(struct sm_ratelimit *rl, int64_t now_ns, uint64_t *missed)
{
	if (rl->window_ns == INT64_MIN || now_ns - rl->window_ns >= rl->interval_ns ||
	    now_ns < rl->window_ns) {
		rl->window_ns = now_ns;
		rl->used = 0;
	}
	if (rl->used >= rl->burst) {
		rl->missed++;
		return false;
	}
	rl->used++;
	*missed = rl->missed;
	rl->missed = 0;
	return true;
}
