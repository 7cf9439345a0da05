/*
 * slowdev: a slow single-head drive (DVD-RAM, ZIP, MO, USB stick) emulated
 * over an image file, for tests and benchmarks.
 *
 * DESIGN
 *
 * MOUNTDIR holds the images, `ctl` (commands) and `stats` (counters). An
 * image is a file of fixed size, opened direct_io so no page cache hides the
 * timing: `disk` for `slowdev IMAGE MOUNTDIR`, or one file NAME per
 * `--image NAME=PATH[:PROFILE]`.
 *
 * The model (drive.c, pure logic): the drive has one head at a byte offset.
 * A request that does not start where the previous one ended pays seek_ns;
 * then it transfers len bytes at read_bw or write_bw (bytes/s). After it the
 * head is at off + len. An fsync costs nothing in the model, does a real
 * fdatasync of the image and does not move the head.
 *
 * Several images (units of the drive, like a DVD-RAM and a ZIP drive on one
 * IDE channel) share the one head and the one queue: each has its own
 * bandwidths, seek time, faults, eject and counters, but a request to one
 * waits behind everything queued before it for any other. The head is at an
 * offset of one image; a request to another image always pays that image's
 * seek (a switch of drive is a seek: the images have no positions relative to
 * each other, so no request on another image can continue the previous one).
 * A second slowdev process is another channel: nothing is shared between
 * processes.
 *
 * The queue (queue.c): every read, write and fsync of an image goes, in the
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
 * Commands act on the whole head (fast, stall, reset) or on every image,
 * or one when prefixed `NAME:` (fail, clear, eject, set). `stats` has the
 * head's counters (the sums) and `NAME.key` lines per image.
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
/* The option that names one image; its value is NAME=PATH[:PROFILE]. */
#define SD_IMAGE_OPT "--image"

struct sd_opts {
	char *image;	   /* IMAGE, the first non-option */
	unsigned nonopts;  /* how many non-options were given */
	GPtrArray *images; /* the values of --image, as given */
	char *profile;
	char *write_bw, *read_bw, *seek_ms;
	char *trace;
	int fast;
};

enum { SD_KEY_IMAGE };

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
    /* Matches "--image=V" and "--image V" (the latter reaches opt_proc as
     * "--imageV"). */
    FUSE_OPT_KEY(SD_IMAGE_OPT " ", SD_KEY_IMAGE),
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
	       "       %s [options] --image NAME=PATH[:PROFILE]... MOUNTDIR\n"
	       "\n"
	       "Serves IMAGE as MOUNTDIR/disk through a single-head drive model;\n"
	       "MOUNTDIR/ctl takes commands, MOUNTDIR/stats shows counters.\n"
	       "With --image (repeatable), each PATH is MOUNTDIR/NAME, all of them\n"
	       "served by one queue and one head, each with its PROFILE.\n"
	       "\n"
	       "    --profile NAME     %s (default " SD_DEFAULT_PROFILE ")\n"
	       "                       with --image: for images without a PROFILE\n"
	       "    --write-bw SIZE    write bandwidth, bytes/s\n"
	       "    --read-bw SIZE     read bandwidth, bytes/s\n"
	       "    --seek-ms N        seek time, ms (decimals allowed)\n"
	       "    --fast             start in fast mode (no delays)\n"
	       "    --trace FILE       append a line per request served to FILE\n"
	       "                       (wall-clock arrival, start and end, op, offset, length,\n"
	       "                       error: 0 or -errno; NAME too with several images)\n"
	       "SIZE takes K, M, G (decimal: 1M = 1000000, as media are rated)\n"
	       "or Ki, Mi, Gi (binary) suffixes. Options override the profile\n"
	       "(of every image).\n"
	       "\n",
	       prog, prog, sd_profile_names());
	fuse_cmdline_help();
	fuse_lowlevel_help();
}

static int opt_proc(void *data, const char *arg, int key, struct fuse_args *outargs)
{
	struct sd_opts *o = data;

	if (key == SD_KEY_IMAGE) {
		const char *val = arg + strlen(SD_IMAGE_OPT);

		g_ptr_array_add(o->images, g_strdup(*val == '=' ? val + 1 : val));
		return 0;
	}
	if (key == FUSE_OPT_KEY_NONOPT && o->nonopts++ == 0) {
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

/*
 * NAME=PATH[:PROFILE] into its parts (*profile NULL: the default); 0, or
 * -EINVAL with the problem in errs. PROFILE is what follows the last ':', so
 * a PATH with a ':' needs one (or an empty one: "PATH:").
 */
static int parse_image_spec(GPtrArray *errs, const char *spec, char **name, char **path,
			    char **profile)
{
	const char *eq = strchr(spec, '='), *colon;

	if (!eq) {
		add_err(errs, SD_IMAGE_OPT ": want NAME=PATH[:PROFILE], got '%s'", spec);
		return -EINVAL;
	}
	colon = strrchr(eq + 1, ':');
	*name = g_strndup(spec, (gsize)(eq - spec));
	*path = colon ? g_strndup(eq + 1, (gsize)(colon - eq - 1)) : g_strdup(eq + 1);
	*profile = colon && colon[1] ? g_strdup(colon + 1) : NULL;
	if (!**path) {
		add_err(errs, SD_IMAGE_OPT " '%s': no PATH", spec);
		return -EINVAL;
	}
	return 0;
}

/* A file name of MOUNTDIR: a valid unit name that is not ctl or stats. */
static void check_image_name(GPtrArray *errs, const struct slowdev *sd, unsigned i)
{
	const char *name = sd->images[i].name;

	if (!sd_unit_name_ok(name) || strcmp(name, "ctl") == 0 ||
	    strcmp(name, "stats") == 0) {
		add_err(errs,
			SD_IMAGE_OPT ": bad NAME '%s' (up to %d letters, digits, _ . -; "
				     "not ctl or stats; no leading '.')",
			name, SD_UNIT_NAME_MAX);
		return;
	}
	for (unsigned j = 0; j < i; j++)
		if (sd->images[j].name && strcmp(sd->images[j].name, name) == 0)
			add_err(errs, SD_IMAGE_OPT ": NAME '%s' given twice", name);
}

static void open_image(GPtrArray *errs, struct sd_image *img, const char *path)
{
	off_t end;

	img->fd = open(path, O_RDWR | O_CLOEXEC);
	end = img->fd < 0 ? -1 : lseek(img->fd, 0, SEEK_END);
	if (end < 0)
		add_err(errs, "%s: %s", path, g_strerror(errno));
	else if (end == 0)
		add_err(errs, "%s: empty image", path);
	img->size = end > 0 ? (uint64_t)end : 0;
	img->direct_fd = open(path, O_RDWR | O_DIRECT | O_CLOEXEC);
}

/*
 * Validates everything and reports every problem at once: 0 or -EINVAL.
 * Fills sd->images and *params (one per image, to g_free), also on failure.
 */
static int configure(struct slowdev *sd, const struct sd_opts *o, const char *mountpoint,
		     struct sd_params **params)
{
	g_autoptr(GPtrArray) errs = g_ptr_array_new_with_free_func(g_free);
	const char *profile = o->profile ? o->profile : SD_DEFAULT_PROFILE;
	bool multi = o->images->len > 0;
	struct sd_params dflt = {0}, over = {0};

	if (sd_profile_get(profile, &dflt) < 0)
		add_err(errs, "--profile: unknown '%s' (know %s)", profile,
			sd_profile_names());
	check_bw(errs, "--write-bw", o->write_bw, &over.write_bw);
	check_bw(errs, "--read-bw", o->read_bw, &over.read_bw);
	if (o->seek_ms && sd_parse_ms(o->seek_ms, &over.seek_ns) < 0)
		add_err(errs, "--seek-ms: bad time '%s'", o->seek_ms);
	if (!mountpoint)
		add_err(errs, multi ? "missing MOUNTDIR" : "missing IMAGE or MOUNTDIR");

	sd->n_images = multi ? o->images->len : 1;
	sd->images = g_new0(struct sd_image, sd->n_images);
	*params = g_new0(struct sd_params, sd->n_images);
	for (unsigned i = 0; i < sd->n_images; i++) {
		struct sd_image *img = &sd->images[i];
		struct sd_params *p = &(*params)[i];
		g_autofree char *path = NULL, *own = NULL;

		img->fd = img->direct_fd = -1;
		*p = dflt;
		if (!multi) {
			img->name = g_strdup(SD_UNIT_DEFAULT);
			path = o->image ? g_strdup(o->image) : NULL;
		} else if (parse_image_spec(errs, o->images->pdata[i], &img->name, &path,
					    &own) < 0) {
			continue;
		}
		check_image_name(errs, sd, i);
		if (own && sd_profile_get(own, p) < 0)
			add_err(errs, SD_IMAGE_OPT " %s: unknown profile '%s' (know %s)",
				img->name, own, sd_profile_names());
		if (o->write_bw)
			p->write_bw = over.write_bw;
		if (o->read_bw)
			p->read_bw = over.read_bw;
		if (o->seek_ms)
			p->seek_ns = over.seek_ns;
		if (path)
			open_image(errs, img, path);
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

/* Closes and frees what configure() opened. */
static void close_images(struct slowdev *sd)
{
	for (unsigned i = 0; sd->images && i < sd->n_images; i++) {
		if (sd->images[i].fd >= 0)
			close(sd->images[i].fd);
		if (sd->images[i].direct_fd >= 0)
			close(sd->images[i].direct_fd);
		g_free(sd->images[i].name);
	}
	g_free(sd->images);
	sd->images = NULL;
}

int main(int argc, char *argv[])
{
	struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
	struct fuse_cmdline_opts copts = {0};
	struct sd_opts o = {.images = g_ptr_array_new_with_free_func(g_free)};
	struct slowdev sd = {0};
	g_autofree struct sd_params *p = NULL;
	g_autofree const char **names = NULL;
	int ret = 1;

	if (fuse_opt_parse(&args, &o, sd_opt_spec, opt_proc) != 0)
		goto out_args;
	/* With --image the one non-option is MOUNTDIR: libfuse's again. */
	if (o.images->len && o.nonopts > 1) {
		fprintf(stderr, "slowdev: with " SD_IMAGE_OPT ", give MOUNTDIR only\n");
		goto out_args;
	}
	if (o.images->len && o.image) {
		fuse_opt_insert_arg(&args, 1, o.image);
		free(o.image);
		o.image = NULL;
	}
	if (fuse_parse_cmdline(&args, &copts) != 0)
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
	names = g_new(const char *, sd.n_images);
	for (unsigned i = 0; i < sd.n_images; i++)
		names[i] = sd.images[i].name;
	sd_drive_init_units(&sd.drive, sd.n_images, names, p, o.fast);

	ret = run(&sd, &args, copts.mountpoint) < 0 ? 1 : 0;

	sd_drive_destroy(&sd.drive);
	g_cond_clear(&sd.wake);
	g_mutex_clear(&sd.lock);
out_close:
	if (sd.trace)
		fclose(sd.trace);
	close_images(&sd);
out_args:
	free(copts.mountpoint);
	free(o.image);
	g_ptr_array_unref(o.images);
	free(o.profile);
	free(o.write_bw);
	free(o.read_bw);
	free(o.seek_ms);
	free(o.trace);
	fuse_opt_free_args(&args);
	return ret;
}
