/*
 * Logging: stderr in the foreground; once daemonized, syslog when /dev/log
 * takes a connection, else the journal's own socket, else a log file (see
 * sm_log_choose). Debug gated by -d. Every line is escaped on its way out, so
 * a name with a newline cannot forge a line.
 */
#pragma once
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <syslog.h>

/* Overrides the log file, and makes the daemon use it even beside a syslog. */
#define SM_LOG_FILE_ENV "SLOWMEDIA_LOG_FILE"
#define SM_LOG_FILE_ROOT "/var/log/slowmedia.log"
#define SM_LOG_FILE_USER "slowmedia/slowmedia.log" /* under $XDG_STATE_HOME */

void sm_log_init(const char *ident, bool debug);

/*
 * Before daemonizing: pick where the log will go and say so on stderr. A log
 * file is opened here (O_APPEND), so a failure to open it reaches the terminal.
 * Returns 0 or -errno.
 */
int sm_log_choose(void);

/* After daemonizing: lines go to the chosen place; the first one names it. */
void sm_log_start(void);

bool sm_log_debug_enabled(void);
void sm_log(int prio, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sm_vlog(int prio, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));

/*
 * s made safe for one log line: control characters, DEL, backslash and bytes
 * that are not valid UTF-8 become \n, \t, \\ or \xNN. At most size bytes are
 * written, NUL included; a longer result is cut after a whole character and
 * ends in "...". Returns out.
 */
char *sm_log_escape(const char *s, char *out, size_t size);

/*
 * A log line that may repeat without end (a reader looping on a bad sector)
 * goes through a rate limit: at most burst lines per interval; what is held
 * back is counted and told with the next line let through. The caller
 * serializes calls on one limit; time comes from the caller (pure logic).
 */
struct sm_ratelimit {
	int64_t interval_ns;
	unsigned burst;
	int64_t window_ns; /* when the current window began */
	unsigned used;	   /* lines let through in it */
	uint64_t missed;   /* held back since the last line let through */
};
#define SM_RATELIMIT_INIT(interval, n)                                                   \
	{.interval_ns = (interval), .burst = (n), .window_ns = INT64_MIN}
/* Whether a line may go out at now_ns; when it may, *missed is how many were
 * held back before it (then reset). */
bool sm_ratelimit_pass(struct sm_ratelimit *rl, int64_t now_ns, uint64_t *missed);

#define sm_err(...) sm_log(LOG_ERR, __VA_ARGS__)
#define sm_warn(...) sm_log(LOG_WARNING, __VA_ARGS__)
#define sm_info(...) sm_log(LOG_INFO, __VA_ARGS__)
#define sm_dbg(...)                                                                  \
	do {                                                                         \
		if (sm_log_debug_enabled())                                          \
			sm_log(LOG_DEBUG, __VA_ARGS__);                              \
	} while (0)
