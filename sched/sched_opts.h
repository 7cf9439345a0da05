/* The scheduler's mount options (DESIGN.md, "Mount options"): parsed and validated here. */
#pragma once
#include <glib.h>
#include <stdbool.h>
#include <stdint.h>

#define SCHED_PRIO_MAX 7
#define SCHED_PRIO_DEFAULT 4
#define SCHED_WEIGHT_DEFAULT 100
#define SCHED_WEIGHT_MAX 10000
#define SCHED_QUEUE_DEFAULT_BYTES (64ull << 20)
#define SCHED_QUEUE_MIN_BYTES (64ull << 10)
#define SCHED_QUEUE_MAX_BYTES (64ull << 30)
#define SCHED_RATE_MIN_BPS (4ull << 10)
#define SCHED_LATENCY_DEFAULT_MS 100
#define SCHED_LATENCY_MAX_MS 60000
#define SCHED_READ_GRACE_DEFAULT_MS 20
#define SCHED_READ_GRACE_MAX_MS 60000
#define SCHED_FLUSHERS_DEFAULT 1
#define SCHED_FLUSHERS_MAX 64
#define SCHED_SPOOL_SYNC_DEFAULT_MS 100
#define SCHED_DRAIN_TIMEOUT_DEFAULT_S 60
#define SCHED_DRAIN_TIMEOUT_MAX_S (7 * 24 * 3600)
#define SCHED_SPOOL_SYNC_MAX_MS 60000
#define SCHED_GROUP_NAME_MAX 64

enum sched_class { SCHED_CLASS_BE, SCHED_CLASS_IDLE };

struct sched_opts {
	unsigned prio;
	enum sched_class io_class;
	unsigned weight;
	char *group;		  /* NULL: the lower device */
	uint64_t rate_bps;	  /* 0: no cap */
	uint64_t queue_bytes;
	char *spool_dir;	  /* NULL: no spool */
	uint64_t spool_max_bytes; /* 0: not given */
	unsigned spool_sync_ms;	  /* fdatasync of the journal every MS; 0: per write */
	bool spool_sync_given;
	unsigned drain_timeout_s; /* the final drain gives up after this long without progress */
	char *rescue_dir;	  /* NULL: rescue_default_base() */
	unsigned latency_ms;
	unsigned read_grace_ms;
	unsigned flushers;
	bool sync_close;
	char *arbiter; /* "auto", "off" or a socket path */
	GPtrArray *no_effect; /* "key=value" of given options not implemented yet */
};

void sched_opts_init(struct sched_opts *o);
void sched_opts_free(struct sched_opts *o);

/*
 * Handle one "key=value" (or bare key) option. Returns 1 when the key is the
 * scheduler's (consumed; a bad value appends a message to errors), 0 when not.
 */
int sched_opts_handle(struct sched_opts *o, const char *opt, GPtrArray *errors);

/* Cross-option checks once all options are seen; appends to errors. */
void sched_opts_finish(struct sched_opts *o, GPtrArray *errors);

/* queue= may take at most 1/SCHED_QUEUE_MEM_DIV of the memory available at
 * start-up: the queue lives in the daemon's memory, and the rest of the
 * machine (its page cache, the writer itself) needs the rest. */
#define SCHED_QUEUE_MEM_DIV 2

/* Refuse queue= above MemAvailable / SCHED_QUEUE_MEM_DIV (mem_available in
 * bytes; 0: unknown, no check); appends to errors. */
void sched_opts_check_memory(const struct sched_opts *o, uint64_t mem_available,
			     GPtrArray *errors);

/* MemAvailable from the text of /proc/meminfo, in bytes: 0, or -ENOENT when
 * it has none (kernels before 3.14). */
int sched_parse_meminfo(const char *meminfo, uint64_t *bytes);

/* Help text for --help. */
const char *sched_opts_help(void);

/* One warning per given option that has no effect yet, appended to warnings. */
void sched_opts_warn_no_effect(const struct sched_opts *o, GPtrArray *warnings);

/*
 * "64M", "1G", "4096", "512K": bytes with optional binary suffix K/M/G/T.
 * Returns 0 or -EINVAL (garbage, empty, negative) / -ERANGE (overflow).
 */
int sm_parse_size(const char *s, uint64_t *out);

/* A decimal whole number from lo to hi: 0, -EINVAL (not one) or -ERANGE. */
int sm_parse_uint(const char *s, unsigned lo, unsigned hi, unsigned *out);
