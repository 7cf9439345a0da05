/*
 * The drive model of slowdev: pure logic, no I/O, no clock. Every function
 * that depends on time takes the time as an argument, so the unit tests are
 * deterministic and need no sleeps. The caller (queue.c) serialises all calls
 * on one struct sd_drive with its own lock.
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
};

struct sd_counters {
	uint64_t reads, writes, fsyncs;
	uint64_t read_bytes, write_bytes;
	uint64_t seeks;		  /* seeks charged (none in fast mode) */
	uint64_t model_ns;	  /* modelled service time charged */
	uint64_t busy_ns;	  /* wall time the head spent serving */
	uint64_t errors;	  /* requests answered with an error */
	uint64_t max_queue_depth; /* highest queue_depth since start or reset */
};

struct sd_drive {
	struct sd_params p;
	uint64_t head;		 /* byte offset where the last request ended */
	bool fast;		 /* no delays, nothing charged */
	bool ejected;		 /* every request fails */
	uint64_t stall_until_ns; /* the head serves nothing before this time */
	GArray *faults;		 /* of struct sd_fault */
	uint64_t queue_depth;	 /* requests queued or in service */
	struct sd_counters c;
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
	bool on;	       /* SD_CMD_FAST */
	struct sd_fault fault; /* SD_CMD_FAIL */
	uint64_t stall_ns;     /* SD_CMD_STALL */
	unsigned set_mask;     /* SD_CMD_SET: which of p are given */
	struct sd_params p;    /* SD_CMD_SET */
};

/* Parsers: 0 on success, -EINVAL (or -ERANGE on overflow) otherwise. */
int sd_parse_size(const char *s, uint64_t *out);
int sd_parse_ms(const char *s, uint64_t *ns_out);
int sd_parse_seconds(const char *s, uint64_t *ns_out);
int sd_profile_get(const char *name, struct sd_params *p);
const char *sd_profile_names(void);

/* One line, without its newline. *why gets a message to g_free on failure. */
int sd_cmd_parse(const char *line, struct sd_cmd *cmd, char **why);
/* Several lines: parses all first; on failure *cmds is left NULL. */
int sd_cmd_parse_text(const char *text, size_t len, GArray **cmds, char **why);

void sd_drive_init(struct sd_drive *d, const struct sd_params *p, bool fast);
void sd_drive_destroy(struct sd_drive *d);
void sd_drive_apply(struct sd_drive *d, const struct sd_cmd *cmd, uint64_t now_ns);

/* 0, or -EIO when the drive is ejected or a fault rule covers the request. */
int sd_drive_check(const struct sd_drive *d, uint64_t off, uint64_t len, enum sd_op op);

/*
 * The modelled service time of one request, charged: moves the head to
 * off + len, counts a seek when off != head. 0 in fast mode (the head still
 * moves). An fsync costs nothing and leaves the head where it is.
 */
uint64_t sd_model_service_ns(struct sd_drive *d, uint64_t off, uint64_t len,
			     enum sd_op op);

/* How long the head must still wait before serving, at now_ns. */
uint64_t sd_drive_stall_left(const struct sd_drive *d, uint64_t now_ns);

void sd_drive_enqueued(struct sd_drive *d);
/* A request left the queue: err is 0 or -errno, busy_ns the wall service time. */
void sd_drive_done(struct sd_drive *d, enum sd_op op, uint64_t len, int err,
		   uint64_t busy_ns);

/* The `stats` file: "key value" lines. */
void sd_drive_format_stats(const struct sd_drive *d, GString *out, uint64_t size,
			   uint64_t uptime_ns, uint64_t now_ns);
