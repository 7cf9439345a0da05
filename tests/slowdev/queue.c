/*
 * The head: one thread that serves the FIFO of drive requests, one at a time,
 * in arrival order, for all images alike. The FUSE loop only appends to the
 * queue and never waits; the head answers the request (fuse_reply_*) once
 * the modelled service time has elapsed since its service started
 * (sd_drive_service_start()) and the real I/O is done. It takes its work
 * under sd->lock and does the I/O, the replies and the frees outside.
 */
#include "slowdev.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>

static gint64 ns_to_monotonic_us(uint64_t ns)
{
	return (gint64)((ns + 999) / 1000); /* round up: never wake early */
}

static const char *op_name(enum sd_op op)
{
	static const char *const names[] = {
	    [SD_READ] = "read", [SD_WRITE] = "write", [SD_FSYNC] = "fsync"};

	return names[op];
}

static void free_req(struct sd_req *r)
{
	free(r->data);
	g_free(r);
}

/* Buffers for the image's I/O, aligned for O_DIRECT. */
char *sd_buf_alloc(size_t len)
{
	void *p;

	if (posix_memalign(&p, SD_DIRECT_ALIGN, len ? len : 1))
		g_error("out of memory");
	return p;
}

/* pread/pwrite the whole range; the size was clipped to the image before.
 * O_DIRECT when the range allows it, else (or when the host refuses it)
 * through the page cache. */
static ssize_t do_rw(struct sd_image *img, struct sd_req *r, char *buf)
{
	bool aligned = r->off % SD_DIRECT_BLOCK == 0 && r->len % SD_DIRECT_BLOCK == 0;
	int fd = img->direct_fd >= 0 && aligned ? img->direct_fd : img->fd;
	size_t done = 0;

	while (done < r->len) {
		ssize_t n =
		    r->op == SD_WRITE
			? pwrite(fd, buf + done, r->len - done, (off_t)(r->off + done))
			: pread(fd, buf + done, r->len - done, (off_t)(r->off + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EINVAL && fd == img->direct_fd) {
			fd = img->fd;
			continue;
		}
		if (n < 0)
			return -errno;
		if (n == 0)
			break; /* the image shrank behind our back */
		if (r->op == SD_WRITE && fd == img->fd)
			img->buffered_dirty = true;
		done += (size_t)n;
	}
	return (ssize_t)done;
}

/*
 * The real I/O of one request: 0 or -errno. *rlen gets the bytes moved,
 * *rbuf the data of a read.
 */
static int do_io(struct slowdev *sd, struct sd_req *r, char **rbuf, size_t *rlen)
{
	struct sd_image *img = &sd->images[r->unit];
	ssize_t n;

	/* The host's durability of the image is not modelled: only what went
	 * through its page cache is synced, and that is rare. */
	if (r->op == SD_FSYNC) {
		if (!img->buffered_dirty)
			return 0;
		img->buffered_dirty = false;
		return fdatasync(img->fd) < 0 ? -errno : 0;
	}
	if (r->op == SD_READ)
		*rbuf = sd_buf_alloc(r->len);
	n = do_rw(img, r, r->op == SD_READ ? *rbuf : r->data);
	if (n < 0)
		return (int)n;
	*rlen = (size_t)n;
	return 0;
}

static void reply(struct sd_req *r, int err, const char *rbuf, size_t rlen)
{
	if (err)
		fuse_reply_err(r->req, -err);
	else if (r->op == SD_READ)
		fuse_reply_buf(r->req, rbuf, rlen);
	else if (r->op == SD_WRITE)
		fuse_reply_write(r->req, rlen);
	else
		fuse_reply_err(r->req, 0);
}

/* Wait, under the lock, until a request may be served; NULL on quit. */
static struct sd_req *next_req(struct slowdev *sd)
{
	for (;;) {
		uint64_t stall;

		if (sd->quit)
			return NULL;
		if (g_queue_is_empty(&sd->queue)) {
			g_cond_wait(&sd->wake, &sd->lock);
			continue;
		}
		stall = sd_drive_stall_left(&sd->drive, sd_now_ns());
		if (stall == 0)
			return g_queue_pop_head(&sd->queue);
		/* ctl may end or extend the stall: re-check on every wake. */
		g_cond_wait_until(&sd->wake, &sd->lock,
				  ns_to_monotonic_us(sd_now_ns() + stall));
	}
}

/* Sleep, under the lock, until deadline_ns, fast mode or quit. */
static void wait_service(struct slowdev *sd, uint64_t deadline_ns)
{
	while (!sd->quit && !sd->drive.fast && sd_now_ns() < deadline_ns)
		g_cond_wait_until(&sd->wake, &sd->lock, ns_to_monotonic_us(deadline_ns));
}

/* Wall-clock seconds of a CLOCK_MONOTONIC instant, to line the trace up
 * with other logs. */
static double wall_s(const struct slowdev *sd, uint64_t ns)
{
	return (double)sd->start_time.tv_sec + (double)sd->start_time.tv_nsec / 1e9 +
	       ((double)ns - (double)sd->start_ns) / 1e9;
}

/* One line per request: arrival, service start, end, op, offset, length,
 * error, and the image's name when there are several. Written by the head
 * alone, flushed at once (it is read live). */
static void trace(const struct slowdev *sd, const struct sd_req *r, uint64_t start,
		  uint64_t end, int err)
{
	if (!sd->trace)
		return;
	fprintf(sd->trace, "%.6f %.6f %.6f %s %" G_GUINT64_FORMAT " %zu %d%s%s\n",
		wall_s(sd, r->arrival_ns), wall_s(sd, start), wall_s(sd, end),
		op_name(r->op), r->off, r->len, err, sd->n_images > 1 ? " " : "",
		sd->n_images > 1 ? sd->images[r->unit].name : "");
	fflush(sd->trace);
}

/*
 * Service starts when the request arrived, or when the head became free (or
 * the stall ended), whichever is later (sd_drive_service_start()): the time
 * the FUSE loop spent copying the request in is the drive's time, as on a
 * real drive. Whatever its image, a request waits for every one before it.
 */
static void serve(struct slowdev *sd, struct sd_req *r)
{
	uint64_t start = sd_drive_service_start(&sd->drive, r->arrival_ns), service = 0;
	uint64_t end, free_ns;
	char *rbuf = NULL;
	size_t rlen = 0;
	int err;

	err = sd_unit_check(&sd->drive, r->unit, r->off, r->len, r->op);
	if (!err)
		service = sd_unit_service_ns(&sd->drive, r->unit, r->off, r->len, r->op);
	g_mutex_unlock(&sd->lock);

	if (!err)
		err = do_io(sd, r, &rbuf, &rlen);

	g_mutex_lock(&sd->lock);
	if (!err)
		wait_service(sd, start + service);
	if (!err && sd->drive.units[r->unit].ejected)
		err = -EIO; /* yanked while the head was busy */
	end = sd_now_ns();
	sd_unit_done(&sd->drive, r->unit, r->op, rlen, err, start - r->arrival_ns,
		     end - start);
	g_mutex_unlock(&sd->lock);

	trace(sd, r, start, end, err);
	if (err && err != -EIO)
		sd_log(sd, LOG_WARNING, "%s: %s at %" G_GUINT64_FORMAT ": %s",
		       sd->images[r->unit].name, op_name(r->op), r->off,
		       g_strerror(-err));
	reply(r, err, rbuf, rlen);
	free_ns = sd_now_ns();
	free(rbuf);
	free_req(r);
	g_mutex_lock(&sd->lock);
	sd->drive.free_ns = free_ns;
}

static gpointer head_main(gpointer data)
{
	struct slowdev *sd = data;
	struct sd_req *r;

	/* The model sleeps to the deadline: do not let the kernel batch wake-ups. */
	prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0);
	g_mutex_lock(&sd->lock);
	while ((r = next_req(sd)))
		serve(sd, r);
	g_mutex_unlock(&sd->lock);
	return NULL;
}

void sd_queue_start(struct slowdev *sd)
{
	sigset_t all, old;

	/* The head inherits a fully blocked mask: signals go to the FUSE loop. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	sd->head = g_thread_new("slowdev-head", head_main, sd);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* Stops the head and fails what is still queued (the session is gone by now). */
void sd_queue_stop(struct slowdev *sd)
{
	struct sd_req *r;

	g_mutex_lock(&sd->lock);
	sd->quit = true;
	g_cond_broadcast(&sd->wake);
	g_mutex_unlock(&sd->lock);
	g_thread_join(sd->head);
	sd->head = NULL;

	while ((r = g_queue_pop_head(&sd->queue))) {
		fuse_reply_err(r->req, EIO);
		free_req(r);
	}
}

struct sd_req *sd_req_new(fuse_req_t req, unsigned unit, enum sd_op op, uint64_t off,
			  size_t len)
{
	struct sd_req *r = g_new0(struct sd_req, 1);

	r->arrival_ns = sd_now_ns();
	r->req = req;
	r->unit = unit;
	r->op = op;
	r->off = off;
	r->len = len;
	return r;
}

void sd_queue_submit(struct slowdev *sd, struct sd_req *r)
{
	g_mutex_lock(&sd->lock);
	sd_unit_enqueued(&sd->drive, r->unit);
	g_queue_push_tail(&sd->queue, r);
	g_cond_signal(&sd->wake);
	g_mutex_unlock(&sd->lock);
}
