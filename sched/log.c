#include "log.h"

#include <stdarg.h>
#include <stdio.h>

/* Set once at start-up, before any thread exists; read-only afterwards. */
static struct {
	const char *ident;
	bool debug;
	bool syslog;
} log_cfg = {"slowmedia", false, false};

void sm_log_init(const char *ident, bool debug)
{
	log_cfg.ident = ident;
	log_cfg.debug = debug;
}

void sm_log_to_syslog(void)
{
	openlog(log_cfg.ident, LOG_PID, LOG_DAEMON);
	log_cfg.syslog = true;
}

bool sm_log_debug_enabled(void)
{
	return log_cfg.debug;
}

void sm_log(int prio, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	if (log_cfg.syslog) {
		vsyslog(prio, fmt, ap);
	} else {
		/* One fprintf per line keeps lines from threads whole. */
		char line[1024];
		vsnprintf(line, sizeof(line), fmt, ap);
		fprintf(stderr, "%s: %s\n", log_cfg.ident, line);
	}
	va_end(ap);
}
