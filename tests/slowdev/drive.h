/*
 * The drive model of slowdev: pure logic, no I/O, no clock. Every function
 * that depends on time takes the time as an argument, so the unit tests are
 * deterministic and need no sleeps. The caller (queue.c) serialises all calls
 * on one struct sd_drive with its own lock.
 *
 * A drive has one head and one or more units: the images it serves, each
 * with its own name, timing parameters, faults and counters (like several
 * drives on one bus that carries one command at a time). The head is at one
 * offset of one unit; a request to another unit always pays that unit's seek.
 * sd_drive_check(), sd_model_service_ns(), sd_drive_enqueued() and
 * sd_drive_done() are the sd_unit_* functions for unit 0, for a drive of one
 * image.
 *
 * Sizes are decimal, as media are rated: 1K = 1000, 1M = 1,000,000,
 * 1G = 10^9 bytes; Ki/Mi/Gi are the binary units. Byte ranges are half-open:
 * [start, end).
 */
#pragma once
#include <glib.h>
#include <stdbool.h>
#include <stdint.h>

#define SD_NS_PER_SEC UINT64_C(1000000000)
#define SD_NS_PER_MS UINT64_C(1000000)
/* Longest stall a ctl command may ask for: one hour. */
#define SD_STALL_MAX_NS (3600 * SD_NS_PER_SEC)
/* Longest unit (image) name, bytes. */
#define SD_UNIT_NAME_MAX 64
/* The name of the one unit of a drive made by sd_drive_init(). */
#define SD_UNIT_DEFAULT "disk"
/* sd_cmd.unit: the command acts on every unit (no "NAME:" prefix). */
#define SD_UNIT_ALL (-1)
/* sd_cmd.unit: the command names a unit in sd_cmd.target, not resolved yet. */
#define SD_UNIT_NAMED (-2)

enum sd_op { SD_READ, SD_WRITE, SD_FSYNC };

/* What a fault rule matches; SD_FAIL_ANY matches reads and writes. */
enum sd_fail_kind { SD_FAIL_READ, SD_FAIL_WRITE, SD_FAIL_ANY };

struct sd_params {
	uint64_t read_bw;  /* bytes/s, > 0 */
	uint64_t write_bw; /* bytes/s, > 0 */
	uint64_t seek_ns;  /* charged when a request does not start at the head */
};

struct sd_fault {
	enum sd_fail_kind kind;
	uint64_t start, end; /* [start, end), start < end */
	unsigned unit;	     /* in the drive: the unit it applies to */
};

struct sd_counters {
	uint64_t reads, writes, fsyncs;
	uint64_t read_bytes, write_bytes;
	uint64_t seeks;		  /* seeks charged (none in fast mode) */
	uint64_t model_ns;	  /* modelled service time charged */
	uint64_t busy_ns;	  /* wall time the head spent serving */
	uint64_t errors;	  /* requests answered with an error */
	uint64_t max_queue_depth; /* highest queue_depth since start or reset */
	uint64_t wait_ns;	  /* time requests spent queued before service */
	uint64_t max_wait_ns;	  /* the longest of those waits */
};

/* One image of the drive. */
struct sd_unit {
	char *name;
	struct sd_params p;
	bool ejected;	      /* every request to it fails */
	uint64_t queue_depth; /* its requests queued or in service */
	struct sd_counters c; /* its requests only */
};

struct sd_drive {
	struct sd_unit *units; /* n_units of them; the names are fixed after init */
	unsigned n_units;
	unsigned head_unit;	 /* the unit the head is on */
	uint64_t head;		 /* byte offset in it where the last request ended */
	bool fast;		 /* no delays, nothing charged */
	uint64_t stall_until_ns; /* the head serves nothing before this time */
	uint64_t free_ns;	 /* when the head last answered; the caller sets it */
	GArray *faults;		 /* of struct sd_fault, each for one unit */
	uint64_t queue_depth;	 /* requests queued or in service, all units */
	struct sd_counters c;	 /* the whole head: the sum over the units */
};

/* A parsed ctl command. */
enum sd_cmd_kind {
	SD_CMD_FAST,
	SD_CMD_FAIL,
	SD_CMD_CLEAR,
	SD_CMD_EJECT,
	SD_CMD_STALL,
	SD_CMD_SET,
	SD_CMD_RESET,
};

#define SD_SET_READ_BW (1u << 0)
#define SD_SET_WRITE_BW (1u << 1)
#define SD_SET_SEEK (1u << 2)

struct sd_cmd {
	enum sd_cmd_kind kind;
	int unit;			   /* SD_UNIT_ALL, SD_UNIT_NAMED or an index */
	char target[SD_UNIT_NAME_MAX + 1]; /* SD_UNIT_NAMED: the name before ':' */
	bool on;			   /* SD_CMD_FAST */
	struct sd_fault fault;		   /* SD_CMD_FAIL */
	uint64_t stall_ns;		   /* SD_CMD_STALL */
	unsigned set_mask;		   /* SD_CMD_SET: which of p are given */
	struct sd_params p;		   /* SD_CMD_SET */
};

/* Parsers: 0 on success, -EINVAL (or -ERANGE on overflow) otherwise. */
int sd_parse_size(const char *s, uint64_t *out);
int sd_parse_ms(const char *s, uint64_t *ns_out);
int sd_parse_seconds(const char *s, uint64_t *ns_out);
int sd_profile_get(const char *name, struct sd_params *p);
const char *sd_profile_names(void);

/*
 * One line, without its newline: "[NAME:] command". *why gets a message to
 * g_free on failure. A NAME is only recorded here (SD_UNIT_NAMED); see
 * sd_drive_resolve().
 */
int sd_cmd_parse(const char *line, struct sd_cmd *cmd, char **why);
/* Several lines: parses all first; on failure *cmds is left NULL. */
int sd_cmd_parse_text(const char *text, size_t len, GArray **cmds, char **why);

/* Is NAME acceptable for a unit (and so a file of MOUNTDIR)? */
bool sd_unit_name_ok(const char *name);

/* A drive of n >= 1 units: names[i] (copied, valid, distinct) with p[i]. */
void sd_drive_init_units(struct sd_drive *d, unsigned n, const char *const *names,
			 const struct sd_params *p, bool fast);
/* A drive of one unit, SD_UNIT_DEFAULT. */
void sd_drive_init(struct sd_drive *d, const struct sd_params *p, bool fast);
void sd_drive_destroy(struct sd_drive *d);
/* The index of the unit NAME, or -ENOENT. */
int sd_drive_find_unit(const struct sd_drive *d, const char *name);
/*
 * Turns cmd->target into cmd->unit: -EINVAL (and *why) for an unknown name
 * or a command that acts on the whole head (fast, stall, reset). Reads only
 * the unit names, which do not change.
 */
int sd_drive_resolve(const struct sd_drive *d, struct sd_cmd *cmd, char **why);
/* cmd must be resolved (cmd->unit != SD_UNIT_NAMED). */
void sd_drive_apply(struct sd_drive *d, const struct sd_cmd *cmd, uint64_t now_ns);

/* 0, or -EIO when the unit is ejected or a fault rule covers the request. */
int sd_unit_check(const struct sd_drive *d, unsigned u, uint64_t off, uint64_t len,
		  enum sd_op op);
int sd_drive_check(const struct sd_drive *d, uint64_t off, uint64_t len, enum sd_op op);

/*
 * The modelled service time of one request to unit u, at u's parameters,
 * charged to the head and to u: moves the head to off + len of u, counts a
 * seek (u's seek_ns) when the head was on another unit or off != head. 0 in
 * fast mode (the head still moves). An fsync costs nothing and leaves the
 * head where it is.
 */
uint64_t sd_unit_service_ns(struct sd_drive *d, unsigned u, uint64_t off, uint64_t len,
			    enum sd_op op);
uint64_t sd_model_service_ns(struct sd_drive *d, uint64_t off, uint64_t len,
			     enum sd_op op);

/* How long the head must still wait before serving, at now_ns. */
uint64_t sd_drive_stall_left(const struct sd_drive *d, uint64_t now_ns);
/*
 * When service of a request that arrived at arrival_ns starts: the latest of
 * its arrival, free_ns and the end of a stall. The head serves one request
 * at a time, whatever its unit, so a request waits for all before it.
 */
uint64_t sd_drive_service_start(const struct sd_drive *d, uint64_t arrival_ns);

void sd_unit_enqueued(struct sd_drive *d, unsigned u);
void sd_drive_enqueued(struct sd_drive *d);
/*
 * A request to unit u left the queue: err is 0 or -errno, wait_ns the time
 * from its arrival to its service start, busy_ns the wall service time.
 */
void sd_unit_done(struct sd_drive *d, unsigned u, enum sd_op op, uint64_t len, int err,
		  uint64_t wait_ns, uint64_t busy_ns);
void sd_drive_done(struct sd_drive *d, enum sd_op op, uint64_t len, int err,
		   uint64_t busy_ns);

/*
 * The `stats` file: "key value" lines: the head's, then "NAME.key" ones per
 * unit. The keys that describe one medium (bandwidths, seek, ejected,
 * fault_rules, size) are unprefixed too when there is one unit, as before
 * units existed; size is that unit's.
 */
void sd_drive_format_stats(const struct sd_drive *d, GString *out, uint64_t size,
			   uint64_t uptime_ns, uint64_t now_ns);
