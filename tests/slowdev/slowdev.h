/* slowdev internals shared by slowdev.c (main), ops.c (FUSE) and queue.c (the head). */
#pragma once
#include <fuse_lowlevel.h>
#include <glib.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <syslog.h>

#include "drive.h"

/* Inode numbers of the fixed tree: image i is SD_INO_IMAGE + i. */
enum {
	SD_INO_ROOT = FUSE_ROOT_ID,
	SD_INO_CTL,
	SD_INO_STATS,
	SD_INO_IMAGE,
};

/* One image, the file MOUNTDIR/name; its index is its unit in the drive. */
struct sd_image {
	char *name; /* "disk" for IMAGE MOUNTDIR, else NAME of --image */
	int fd;
	/* The image opened O_DIRECT (-1: not supported there): the host's page
	 * cache stays out of the model, so neither its writeback nor its dirty
	 * throttling (other writers fill it in the benchmarks) stalls the head. */
	int direct_fd;
	bool buffered_dirty; /* a write went through the page cache since the last fsync; head only */
	uint64_t size;	     /* bytes, fixed */
};

/* One request to the drive, owned by the queue until answered. */
struct sd_req {
	fuse_req_t req;
	unsigned unit; /* index of the image */
	enum sd_op op;
	uint64_t off;
	size_t len;
	char *data; /* SD_WRITE: a copy of the data (the loop reuses its buffer) */
	uint64_t arrival_ns; /* when the FUSE loop got it */
};

/*
 * Lock order: there is one lock, sd->lock. It is never held across I/O, a
 * sleep of the model or a FUSE reply.
 */
struct slowdev {
	struct sd_image *images; /* n_images of them, read-only after start but
				  * for buffered_dirty */
	unsigned n_images;
	bool foreground, debug;
	uint64_t start_ns;	    /* CLOCK_MONOTONIC at start */
	struct timespec start_time; /* wall clock, for the attributes of ctl and stats */

	GMutex lock;
	GCond wake;	       /* the head waits on it: new request, ctl change, quit */
	struct sd_drive drive; /* under lock */
	GQueue queue;	       /* of struct sd_req *, under lock */
	bool quit;	       /* under lock */
	GThread *head;
	FILE *trace; /* --trace: a line per request served; head only */
};

uint64_t sd_now_ns(void);
void sd_log(const struct slowdev *sd, int prio, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* queue.c */
void sd_queue_start(struct slowdev *sd);
void sd_queue_stop(struct slowdev *sd);
struct sd_req *sd_req_new(fuse_req_t req, unsigned unit, enum sd_op op, uint64_t off,
			  size_t len);
/* A buffer for the image's I/O (O_DIRECT-aligned); free() it. */
#define SD_DIRECT_ALIGN 4096
/* Ranges O_DIRECT is tried for: the host's usual logical block. */
#define SD_DIRECT_BLOCK 512
char *sd_buf_alloc(size_t len);
void sd_queue_submit(struct slowdev *sd, struct sd_req *r);

/* ops.c */
extern const struct fuse_lowlevel_ops sd_ops;
