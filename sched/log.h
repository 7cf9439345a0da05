/* Logging: stderr in the foreground, syslog once daemonized; debug gated by -d. */
#pragma once
#include <stdbool.h>
#include <syslog.h>

void sm_log_init(const char *ident, bool debug);
void sm_log_to_syslog(void);
bool sm_log_debug_enabled(void);
void sm_log(int prio, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define sm_err(...) sm_log(LOG_ERR, __VA_ARGS__)
#define sm_warn(...) sm_log(LOG_WARNING, __VA_ARGS__)
#define sm_info(...) sm_log(LOG_INFO, __VA_ARGS__)
#define sm_dbg(...)                                                                  \
	do {                                                                         \
		if (sm_log_debug_enabled())                                          \
			sm_log(LOG_DEBUG, __VA_ARGS__);                              \
	} while (0)
