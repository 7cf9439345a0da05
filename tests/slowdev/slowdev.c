/*
 * slowdev: a slow single-head drive (DVD-RAM, ZIP, MO, USB stick) emulated
 * over an image file, for tests and benchmarks.
 *
 * DESIGN
 *
 * MOUNTDIR holds three files: `disk` (the image, fixed size, opened direct_io
 * so no page cache hides the timing), `ctl` (commands) and `stats` (counters).
 *
 * The model (drive.c, pure logic): the drive has one head at a byte offset.
 * A request that does not start where the previous one ended pays seek_ns;
 * then it transfers len bytes at read_bw or write_bw (bytes/s). After it the
 * head is at off + len. An fsync costs nothing in the model, does a real
 * fdatasync of the image and does not move the head.
 *
 * The queue (queue.c): every read, write and fsync of `disk` goes, in the
 * order the FUSE loop received it, into one FIFO served by one thread, the
 * head. Service of a request starts at T, the later of its arrival and the
 * moment the head became free (its previous answer, or the end of a stall).
 * The head charges the request, does the real I/O on the image meanwhile and
 * answers no earlier than T + service time (a wall-clock sleep). So a read
 * queued behind writes waits for all of them, as on a real drive; the FUSE
 * loop itself never waits, and many requests may be queued. What the host
 * adds (reply, wake-ups, the client's next call: ~0.1-0.5 ms a request) is
 * not charged, so a client sees the model's time plus that.
 *
 * Faults are decided when a request reaches the head, not when it arrives:
 * requests already queued when `eject` comes fail too; a failed request costs
 * no time and does not move the head. An eject during service fails the
 * request being served (its data may have reached the image, as on a yanked
 * drive). Errors are EIO: that is what a filesystem over a loop device sees
 * of any failed block request anyway. `stall` stops the head between
 * requests; `fast on` ends the current request's wait and makes all later
 * ones free (the head position is still tracked, nothing is charged).
 *
 * Threads: the FUSE loop (single-threaded, handlers never block) and the head.
 * One lock, sd->lock, guards the drive state and the queue.
 */
#include "slowdev.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#ifndef PR_SET_IO_FLUSHER
#define PR_SET_IO_FLUSHER 57
#endif

#define SD_DEFAULT_PROFILE "dvdram"

struct sd_opts {
	char *image;
	char *profile;
	char *write_bw, *read_bw, *seek_ms;
	char *trace;
	int fast;
};

#define SD_OPT(t, p)                                                                     \
	{                                                                                \
		t, offsetof(struct sd_opts, p), 1                                        \
	}

static const struct fuse_opt sd_opt_spec[] = {
    SD_OPT("--profile %s", profile),
    SD_OPT("--profile=%s", profile),
    SD_OPT("--write-bw %s", write_bw),
    SD_OPT("--write-bw=%s", write_bw),
    SD_OPT("--read-bw %s", read_bw),
    SD_OPT("--read-bw=%s", read_bw),
    SD_OPT("--seek-ms %s", seek_ms),
    SD_OPT("--seek-ms=%s", seek_ms),
    SD_OPT("--fast", fast),
    SD_OPT("--trace %s", trace),
    SD_OPT("--trace=%s", trace),
    FUSE_OPT_END,
};

uint64_t sd_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * SD_NS_PER_SEC + (uint64_t)ts.tv_nsec;
}

void sd_log(const struct slowdev *sd, int prio, const char *fmt, ...)
{
	va_list ap;

	if (prio == LOG_DEBUG && !sd->debug)
		return;
	va_start(ap, fmt);
	if (sd->foreground) {
		fprintf(stderr, "slowdev: ");
		vfprintf(stderr, fmt, ap);
		fputc('\n', stderr);
	} else {
		vsyslog(prio, fmt, ap);
	}
	va_end(ap);
}

static void usage(const char *prog)
{
	printf("usage: %s [options] IMAGE MOUNTDIR\n"
	       "\n"
	       "Serves IMAGE as MOUNTDIR/disk through a single-head drive model;\n"
	       "MOUNTDIR/ctl takes commands, MOUNTDIR/stats shows counters.\n"
	       "\n"
	       "    --profile NAME     %s (default " SD_DEFAULT_PROFILE ")\n"
	       "    --write-bw SIZE    write bandwidth, bytes/s\n"
	       "    --read-bw SIZE     read bandwidth, bytes/s\n"
	       "    --seek-ms N        seek time, ms (decimals allowed)\n"
	       "    --fast             start in fast mode (no delays)\n"
	       "    --trace FILE       append a line per request served to FILE\n"
	       "                       (wall-clock arrival, start and end, op, offset, length,\n"
	       "                       error: 0 or -errno)\n"
	       "SIZE takes K, M, G (decimal: 1M = 1000000, as media are rated)\n"
	       "or Ki, Mi, Gi (binary) suffixes. Options override the profile.\n"
	       "\n",
	       prog, sd_profile_names());
	fuse_cmdline_help();
	fuse_lowlevel_help();
}

static int opt_proc(void *data, const char *arg, int key, struct fuse_args *outargs)
{
	struct sd_opts *o = data;

	if (key == FUSE_OPT_KEY_NONOPT && !o->image) {
		o->image = strdup(arg);
		return 0;
	}
	return 1; /* libfuse's: the mount point and its own options */
}

static void __attribute__((format(printf, 2, 3)))
add_err(GPtrArray *errs, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	g_ptr_array_add(errs, g_strdup_vprintf(fmt, ap));
	va_end(ap);
}

static void check_bw(GPtrArray *errs, const char *opt, const char *val, uint64_t *bw)
{
	if (val && (sd_parse_size(val, bw) < 0 || *bw == 0))
		add_err(errs, "%s: bad bandwidth '%s'", opt, val);
}

/* Validates everything and reports every problem at once: 0 or -EINVAL. */
static int configure(struct slowdev *sd, const struct sd_opts *o, const char *mountpoint,
		     struct sd_params *p)
{
	g_autoptr(GPtrArray) errs = g_ptr_array_new_with_free_func(g_free);
	const char *profile = o->profile ? o->profile : SD_DEFAULT_PROFILE;
	off_t end;

	if (sd_profile_get(profile, p) < 0)
		add_err(errs, "--profile: unknown '%s' (know %s)", profile,
			sd_profile_names());
	check_bw(errs, "--write-bw", o->write_bw, &p->write_bw);
	check_bw(errs, "--read-bw", o->read_bw, &p->read_bw);
	if (o->seek_ms && sd_parse_ms(o->seek_ms, &p->seek_ns) < 0)
		add_err(errs, "--seek-ms: bad time '%s'", o->seek_ms);
	if (!mountpoint)
		add_err(errs, "missing IMAGE or MOUNTDIR");
	if (o->image) {
		sd->image_fd = open(o->image, O_RDWR | O_CLOEXEC);
		end = sd->image_fd < 0 ? -1 : lseek(sd->image_fd, 0, SEEK_END);
		if (end < 0)
			add_err(errs, "%s: %s", o->image, g_strerror(errno));
		else if (end == 0)
			add_err(errs, "%s: empty image", o->image);
		sd->size = end > 0 ? (uint64_t)end : 0;
		sd->direct_fd = open(o->image, O_RDWR | O_DIRECT | O_CLOEXEC);
	}
	if (o->trace) {
		sd->trace = fopen(o->trace, "ae");
		if (!sd->trace)
			add_err(errs, "--trace: %s: %s", o->trace, g_strerror(errno));
	}
	for (guint i = 0; i < errs->len; i++)
		fprintf(stderr, "slowdev: %s\n", (char *)errs->pdata[i]);
	return errs->len ? -EINVAL : 0;
}

static int run(struct slowdev *sd, struct fuse_args *args, const char *mountpoint)
{
	struct fuse_session *se;
	int ret = -EIO;

	se = fuse_session_new(args, &sd_ops, sizeof(sd_ops), sd);
	if (!se)
		return -EINVAL;
	if (fuse_set_signal_handlers(se) != 0)
		goto out_destroy;
	if (fuse_session_mount(se, mountpoint) != 0)
		goto out_signals;
	fuse_daemonize(sd->foreground);
	/* The image I/O may be what frees memory (a loop device over disk). */
	if (prctl(PR_SET_IO_FLUSHER, 1, 0, 0, 0) < 0)
		sd_log(sd, LOG_DEBUG, "PR_SET_IO_FLUSHER: %s", g_strerror(errno));

	sd_queue_start(sd);
	ret = fuse_session_loop(se);
	sd_queue_stop(sd);
	/* A positive value is the signal that ended the loop: a normal stop. */
	ret = ret < 0 ? ret : 0;

	fuse_session_unmount(se);
out_signals:
	fuse_remove_signal_handlers(se);
out_destroy:
	fuse_session_destroy(se);
	return ret;
}

int main(int argc, char *argv[])
{
	struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
	struct fuse_cmdline_opts copts = {0};
	struct sd_opts o = {0};
	struct slowdev sd = {.image_fd = -1, .direct_fd = -1};
	struct sd_params p;
	int ret = 1;

	if (fuse_opt_parse(&args, &o, sd_opt_spec, opt_proc) != 0 ||
	    fuse_parse_cmdline(&args, &copts) != 0)
		goto out_args;
	if (copts.show_help) {
		usage(argv[0]);
		ret = 0;
		goto out_args;
	}
	if (copts.show_version) {
		printf("slowdev " SLOWMEDIA_VERSION "\n");
		fflush(stdout);
		fuse_lowlevel_version();
		ret = 0;
		goto out_args;
	}
	if (configure(&sd, &o, copts.mountpoint, &p) < 0) {
		fprintf(stderr, "try '%s --help'\n", argv[0]);
		goto out_close;
	}
	fuse_opt_add_arg(&args, "-ofsname=slowdev,subtype=slowdev");

	sd.foreground = copts.foreground;
	sd.debug = copts.debug;
	sd.start_ns = sd_now_ns();
	clock_gettime(CLOCK_REALTIME, &sd.start_time);
	g_mutex_init(&sd.lock);
	g_cond_init(&sd.wake);
	g_queue_init(&sd.queue);
	sd_drive_init(&sd.drive, &p, o.fast);

	ret = run(&sd, &args, copts.mountpoint) < 0 ? 1 : 0;

	sd_drive_destroy(&sd.drive);
	g_cond_clear(&sd.wake);
	g_mutex_clear(&sd.lock);
out_close:
	if (sd.trace)
		fclose(sd.trace);
	if (sd.image_fd >= 0)
		close(sd.image_fd);
	if (sd.direct_fd >= 0)
		close(sd.direct_fd);
out_args:
	free(copts.mountpoint);
	free(o.image);
	free(o.profile);
	free(o.write_bw);
	free(o.read_bw);
	free(o.seek_ms);
	free(o.trace);
	fuse_opt_free_args(&args);
	return ret;
}
