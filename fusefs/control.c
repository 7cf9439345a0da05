/*
 * DESIGN: the control socket and the busy hold.
 *
 * One thread runs a libev loop owning the listening socket and every client
 * (protocol: sched/ctl_proto.h). It never waits for the medium: status is a
 * snapshot under the queue's lock (wq_get_stats) plus the failing files'
 * paths; a drain is waited for by one drainer thread (wq_sync_all in slices,
 * which runs the syncfs), which posts its result back with an ev_async; set,
 * pause and resume are a few stores under the queue's lock. A client that
 * sends garbage gets one error line and is closed; one that says nothing
 * costs an fd; at most CTL_CLIENTS_MAX are served at once (others are closed
 * at accept). Only our own uid and root may connect (socket 0600 and
 * SO_PEERCRED). Every REQ_SCAN_NS it also looks for FUSE requests past
 * their bound (reqtrack.c), which logs them.
 *
 * Memory given back. The queue's buffers are allocated by the workers and
 * freed by the flushers, in glibc's two arenas (main.c); freed memory amid
 * live chunks stays resident, and a long mixed load (the soak: random sizes,
 * overwrites, truncates) grew the RSS by about 0.5 MiB a minute to 5x
 * queue=, with half of the arenas free. Every TRIM_EVERY_S the loop asks
 * malloc how much lies free in them and, past TRIM_FREE_MIN, hands the free
 * pages back (malloc_trim: madvise, the chunks stay mapped).
 *
 * The busy hold. The kernel does not make an unmount of a plain FUSE mount
 * wait for the daemon, so `fusermount3 -u` or `umount -i` would detach a
 * mount whose queue still holds data, and the user would think the medium
 * complete. While anything is queued the daemon keeps an O_PATH fd of its
 * own mount root open: a non-lazy unmount then fails with EBUSY, a lazy one
 * detaches and the connection lives on until that fd closes, so the daemon
 * drains on (status: detached-draining) and exits after; a pause (here or
 * at the arbiter) is lifted once it is detached, as at exit: nobody could
 * resume it through the mount any more. The op handlers
 * take the hold before they answer a request that queued something
 * (control_busy, under busy_lock, opened by path: the open of a mount root
 * sends no FUSE request); the loop gives it back once wq_busy says the queue
 * is empty (a timer while held, and right before a drain's "ok", so the
 * umount helper's unmount that follows succeeds). The fd is only taken if it
 * really is our mount (same st_dev, read without a request).
 *
 * Threads: control_busy runs in op handler threads; everything else here in
 * the loop's thread, except the drainer and control_start/stop (main).
 * Locks: busy_lock and drain_lock are leaves except that both call wq_busy /
 * wq_sync_all, which take q->lock (never the other way round).
 */
#include "arb_client.h"
#include "control.h"
#include "ctl_proto.h"
#include "fs.h"
#include "log.h"
#include "pacer.h"
#include "reqtrack.h"

#include <errno.h>
#include <ev.h>
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#define CTL_CLIENTS_MAX 64
#define CTL_OUT_MAX (1u << 20)	  /* a client that reads nothing is closed past this */
#define BUSY_POLL_S 0.05	  /* how often a held hold looks for an empty queue */
#define TRIM_EVERY_S 2.0	  /* how often free arena memory is looked at */
#define TRIM_FREE_MIN (2u << 20) /* free bytes in the arenas worth a trim */
#define DRAIN_SLICE_NS (200 * NSEC_PER_MSEC)

struct ctl_client {
	struct sm_control *c;
	ev_io io;
	int fd;
	struct ctl_inbuf in;
	GString *out;
	bool closing;	 /* close once out is written */
	bool draining;	 /* waits for the drainer's result */
	ev_timer progress;
	GList link;
};

struct sm_control {
	struct slowmedia *fs;
	char *mountpoint;
	char *sock_path;
	dev_t mnt_dev; /* our mount's st_dev, from mountinfo; 0 unknown */
	int listen_fd;
	struct ev_loop *loop;
	ev_io accept_io;
	ev_async wake;	     /* stop, a drain result, a hold taken */
	ev_timer busy_timer; /* while the hold is held */
	ev_timer req_scan;   /* requests past the bound, logged (reqtrack_scan) */
	ev_timer trim;	     /* free arena memory handed back (trim_cb) */
	GQueue clients;
	unsigned nclients;
	pthread_t thread;
	bool stop;	 /* atomic */
	bool detached;	 /* atomic: the FUSE loop ended */
	bool final_drain; /* the loop's: wq_detached was called */

	pthread_mutex_t busy_lock;
	int busy_fd; /* under busy_lock */

	pthread_mutex_t drain_lock;
	pthread_cond_t drain_cond;
	pthread_t drainer;
	bool drainer_started;
	unsigned drain_wanted;	/* clients waiting; under drain_lock */
	bool drain_done;	/* a result is ready; under drain_lock */
	int drain_result;	/* under drain_lock */
};

/* --- mountinfo ------------------------------------------------------------ */

/* Undo mountinfo's octal escapes (\040 for a space...) in place. */
static void unescape_octal(char *s)
{
	char *o = s;

	for (; *s; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' &&
		    s[3] >= '0' && s[3] <= '7') {
			*o++ = (char)((s[1] - '0') << 6 | (s[2] - '0') << 3 | (s[3] - '0'));
			s += 3;
		} else {
			*o++ = *s;
		}
	}
	*o = '\0';
}

/*
 * The last mountinfo line matching (mount point, or device when mnt is NULL):
 * its device, source and type (g_free them). false when none.
 */
static bool mountinfo_find(const char *mnt, dev_t want, dev_t *dev, char **source, char **type)
{
	g_autofree char *text = NULL;
	g_auto(GStrv) lines = NULL;
	bool found = false;

	if (!g_file_get_contents("/proc/self/mountinfo", &text, NULL, NULL))
		return false;
	lines = g_strsplit(text, "\n", -1);
	for (char **l = lines; *l; l++) {
		g_auto(GStrv) f = g_strsplit(*l, " ", -1);
		unsigned maj, min, n = g_strv_length(f), sep = 0;

		if (n < 7 || sscanf(f[2], "%u:%u", &maj, &min) != 2)
			continue;
		unescape_octal(f[4]);
		if (mnt ? strcmp(f[4], mnt) != 0 : makedev(maj, min) != want)
			continue;
		for (unsigned i = 6; i < n; i++)
			if (!strcmp(f[i], "-"))
				sep = i;
		if (!sep || sep + 2 >= n)
			continue;
		found = true;
		if (dev)
			*dev = makedev(maj, min);
		if (source) {
			g_free(*source);
			unescape_octal(f[sep + 2]);
			*source = g_strdup(f[sep + 2]);
		}
		if (type) {
			g_free(*type);
			*type = g_strdup(f[sep + 1]);
		}
	}
	return found;
}

/* Whether our mount is still in this namespace's tree. */
static bool still_mounted(struct sm_control *c)
{
	g_autofree char *src = NULL, *type = NULL;
	dev_t dev = 0;

	if (__atomic_load_n(&c->detached, __ATOMIC_ACQUIRE))
		return false;
	if (!c->mnt_dev)
		return true; /* cannot tell */
	return mountinfo_find(NULL, c->mnt_dev, &dev, &src, &type);
}

/* The label of the block device at dev_path, from udev's by-label links. */
static char *device_label(const char *dev_path)
{
	g_autofree char *real = dev_path ? realpath(dev_path, NULL) : NULL;
	const char *dir = "/dev/disk/by-label", *name;
	GDir *d;
	char *label = NULL;

	if (!real || !(d = g_dir_open(dir, 0, NULL)))
		return NULL;
	while (!label && (name = g_dir_read_name(d))) {
		g_autofree char *p = g_build_filename(dir, name, NULL);
		g_autofree char *r = realpath(p, NULL);
		if (r && !strcmp(r, real))
			label = g_strdup(name); /* udev escapes it as \x20 etc.; shown as is */
	}
	g_dir_close(d);
	return label;
}

/* --- the busy hold -------------------------------------------------------- */

static int open_own_root(struct sm_control *c)
{
	struct statx stx;
	int fd = open(c->mountpoint, O_PATH | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	/* DONT_SYNC: the cached attributes, so no request to ourselves. */
	if (statx(fd, "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC, STATX_TYPE, &stx) < 0 ||
	    (c->mnt_dev && makedev(stx.stx_dev_major, stx.stx_dev_minor) != c->mnt_dev)) {
		close(fd);
		return -ENOENT; /* detached: that path is somebody else's now */
	}
	return fd;
}

void control_busy(struct slowmedia *fs)
{
	struct sm_control *c = fs->ctl;
	bool taken = false;

	if (!c || __atomic_load_n(&c->detached, __ATOMIC_ACQUIRE))
		return;
	pthread_mutex_lock(&c->busy_lock);
	if (c->busy_fd < 0 && wq_busy(fs->wq)) {
		c->busy_fd = open_own_root(c);
		taken = c->busy_fd >= 0;
	}
	pthread_mutex_unlock(&c->busy_lock);
	if (taken)
		ev_async_send(c->loop, &c->wake);
}

/* Give the hold back if nothing is queued (force: whatever is queued). */
static bool busy_release(struct sm_control *c, bool force)
{
	bool held;

	pthread_mutex_lock(&c->busy_lock);
	if (c->busy_fd >= 0 && (force || !wq_busy(c->fs->wq))) {
		close(c->busy_fd);
		c->busy_fd = -1;
	}
	held = c->busy_fd >= 0;
	pthread_mutex_unlock(&c->busy_lock);
	return held;
}

void control_idle_check(struct slowmedia *fs)
{
	struct sm_control *c = fs->ctl;

	if (c)
		busy_release(c, false);
}

static bool busy_held(struct sm_control *c)
{
	bool held;

	pthread_mutex_lock(&c->busy_lock);
	held = c->busy_fd >= 0;
	pthread_mutex_unlock(&c->busy_lock);
	return held;
}

static void busy_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct sm_control *c = w->data;
	bool mounted;

	if (!busy_release(c, false)) {
		ev_timer_stop(loop, w);
		return;
	}
	mounted = still_mounted(c);
	/* Detached with data queued: its final drain begins (a pause, here or
	 * at the arbiter, would keep it forever). */
	if (!c->final_drain && !mounted) {
		c->final_drain = true;
		wq_detached(c->fs->wq);
	}
	/* Detached (umount -l) with nothing left that can be written: let the
	 * connection go, so the daemon ends the way it always does, with the
	 * final drain naming every file that could not be written. */
	if (!mounted && wq_gave_up(c->fs->wq)) {
		sm_warn("detached, and the data still queued cannot be written: exiting");
		busy_release(c, true);
		ev_timer_stop(loop, w);
	}
}

/* --- the drainer thread --------------------------------------------------- */

static void *drainer_main(void *arg)
{
	struct sm_control *c = arg;
	sigset_t all;

	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	pthread_mutex_lock(&c->drain_lock);
	while (!__atomic_load_n(&c->stop, __ATOMIC_ACQUIRE)) {
		int r;

		if (!c->drain_wanted || c->drain_done) {
			pthread_cond_wait(&c->drain_cond, &c->drain_lock);
			continue;
		}
		pthread_mutex_unlock(&c->drain_lock);
		r = wq_sync_all(c->fs->wq, DRAIN_SLICE_NS);
		pthread_mutex_lock(&c->drain_lock);
		if (r == -ETIMEDOUT)
			continue;
		c->drain_done = true;
		c->drain_result = r;
		ev_async_send(c->loop, &c->wake);
	}
	pthread_mutex_unlock(&c->drain_lock);
	return NULL;
}

/* --- clients -------------------------------------------------------------- */

static void client_free(struct ctl_client *cl)
{
	struct sm_control *c = cl->c;

	ev_io_stop(c->loop, &cl->io);
	ev_timer_stop(c->loop, &cl->progress);
	if (cl->draining) {
		pthread_mutex_lock(&c->drain_lock);
		c->drain_wanted--;
		pthread_mutex_unlock(&c->drain_lock);
	}
	close(cl->fd);
	g_queue_unlink(&c->clients, &cl->link);
	c->nclients--;
	g_string_free(cl->out, TRUE);
	g_free(cl);
}

/* Write what we can of cl->out; false when cl was freed. */
static bool client_flush(struct ctl_client *cl)
{
	if (ctl_outbuf_send(cl->out, cl->fd) < 0) {
		client_free(cl);
		return false;
	}
	if (!cl->out->len && cl->closing) {
		client_free(cl);
		return false;
	}
	if (cl->out->len > CTL_OUT_MAX) {
		client_free(cl); /* it reads nothing: not worth our memory */
		return false;
	}
	ev_io_stop(cl->c->loop, &cl->io);
	ev_io_set(&cl->io, cl->fd, cl->out->len ? EV_READ | EV_WRITE : EV_READ);
	ev_io_start(cl->c->loop, &cl->io);
	return true;
}

static void reply_error(struct ctl_client *cl, int err, const char *msg)
{
	char name[32];

	snprintf(name, sizeof(name), "%s", err > 0 && err < 4096 ? strerrorname_np(err) : "EIO");
	ctl_begin(cl->out, "error");
	ctl_add(cl->out, "code", name);
	ctl_add(cl->out, "msg", msg);
	ctl_end(cl->out);
}

static const char *state_of(struct sm_control *c, const struct wq_stats *s)
{
	bool busy = s->queued_files || s->parked_writes;

	if (!still_mounted(c))
		return busy ? "detached-draining" : "detached";
	if (s->paused || s->arbiter_paused)
		return "paused";
	if (s->failing_files)
		return "error";
	return busy ? "flushing" : "idle";
}

/* The queue part of a status or progress record. */
static void add_queue_fields(GString *o, const struct wq_stats *s)
{
	uint64_t bw = s->rate_bps && (!s->bw_bps || s->rate_bps < s->bw_bps) ? s->rate_bps : s->bw_bps;

	ctl_add_u64(o, "queued_bytes", s->queued_bytes);
	ctl_add_u64(o, "queued_files", s->queued_files);
	ctl_add_u64(o, "parked_writes", s->parked_writes);
	ctl_add_u64(o, "flush_rate", bw); /* what the medium takes, capped by rate= */
	ctl_add_i64(o, "eta_s",
		    !s->queued_bytes ? 0 : bw ? (int64_t)((s->queued_bytes + bw - 1) / bw) : -1);
	ctl_add_u64(o, "written_bytes", s->flushed_bytes);
	ctl_add_u64(o, "chunks", s->chunks);
	ctl_add_u64(o, "gathered_chunks", s->gathered_chunks);
	ctl_add_u64(o, "errors", s->failing_files);
}

static void add_progress_rate(GString *o, const struct wq_stats *s)
{
	ctl_add_u64(o, "rate", s->rate_bps);
}

/* Reads the lower refused: how many, and the last one. */
static void add_read_errors(GString *o, struct slowmedia *fs)
{
	g_autofree char *path = NULL;
	int64_t age_ns;
	int err;
	uint64_t n = read_errors_get(fs, &path, &err, &age_ns);
	const char *code = n && strerrorname_np(-err) ? strerrorname_np(-err) : n ? "EIO" : "";

	ctl_add_u64(o, "read_errors", n);
	ctl_add(o, "read_error_path", path ? path : "");
	ctl_add(o, "read_error_code", code);
	ctl_add_i64(o, "read_error_age_s", n ? age_ns / NSEC_PER_SEC : -1);
}

/* The oldest FUSE request in flight that does not wait for the medium. */
static void add_requests(GString *o, struct slowmedia *fs)
{
	struct req_view v = {0};
	unsigned n = fs->req ? reqtrack_oldest(fs->req, sm_now_ns(), &v) : 0;

	ctl_add_u64(o, "requests", n);
	ctl_add(o, "oldest_request", v.op ? v.op : "");
	ctl_add_u64(o, "oldest_request_pid", v.op ? (uint64_t)v.pid : 0);
	ctl_add_u64(o, "oldest_request_ms", v.op ? (uint64_t)(v.age_ns / NSEC_PER_MSEC) : 0);
	ctl_add_u64(o, "slow_requests", fs->req ? reqtrack_slow(fs->req) : 0);
	ctl_add_u64(o, "req_bound_ms",
		    fs->req ? (uint64_t)(reqtrack_bound_ns(fs->req) / NSEC_PER_MSEC) : 0);
}

static void reply_status(struct ctl_client *cl)
{
	struct sm_control *c = cl->c;
	struct slowmedia *fs = c->fs;
	const struct sched_opts *so = &fs->opts.sched;
	g_autofree char *dev = NULL, *type = NULL, *label = NULL;
	struct wq_stats s;
	GArray *failing;
	GString *o = cl->out;

	wq_get_stats(fs->wq, &s);
	mountinfo_find(NULL, fs->root_dev, NULL, &dev, &type);
	label = device_label(dev);
	ctl_begin(o, "mount");
	ctl_add(o, "mountpoint", c->mountpoint);
	ctl_add(o, "source", fs->opts.source);
	ctl_add(o, "device", dev ? dev : "");
	ctl_add(o, "fstype", type ? type : "");
	ctl_add(o, "label", label ? label : "");
	ctl_add(o, "state", state_of(c, &s));
	add_queue_fields(o, &s);
	ctl_add_u64(o, "rate", s.rate_bps);
	ctl_add_i64(o, "latency_ms", s.latency_ns / NSEC_PER_MSEC);
	ctl_add_u64(o, "prio", so->prio);
	ctl_add(o, "class", so->io_class == SCHED_CLASS_IDLE ? "idle" : "be");
	ctl_add_u64(o, "weight", so->weight);
	ctl_add(o, "group", so->group ? so->group : "");
	{
		int id;
		bool lease;
		ctl_add(o, "arbiter", arb_state(fs->wq, &id, &lease));
		ctl_add_i64(o, "arbiter_id", id);
		ctl_add_u64(o, "arbiter_lease", lease);
	}
	ctl_add_u64(o, "read_bytes", __atomic_load_n(&fs->read_bytes, __ATOMIC_RELAXED));
	add_read_errors(o, fs);
	add_requests(o, fs);
	{
		struct wq_spool_stats sp;
		wq_spool_stats(fs->wq, &sp);
		ctl_add(o, "spool", sp.on ? sp.dir : "");
		if (sp.on) {
			ctl_add(o, "spool_medium", sp.medium);
			ctl_add_u64(o, "spool_bytes", sp.bytes);
			ctl_add_u64(o, "spool_max", sp.max_bytes);
			ctl_add_u64(o, "spool_segments", sp.segments);
			ctl_add_u64(o, "spool_held", sp.held);
			ctl_add_u64(o, "spool_set_aside", sp.set_aside);
			ctl_add(o, "spool_error", sp.err ? g_strerror(-sp.err) : "");
			ctl_add_u64(o, "spool_replayed_records", sp.replayed_records);
			ctl_add_u64(o, "spool_replayed_bytes", sp.replayed_bytes);
			ctl_add_u64(o, "spool_journal_only", sp.journal_only);
		}
	}
	ctl_add_u64(o, "pid", (uint64_t)getpid());
	ctl_add_u64(o, "uid", (uint64_t)geteuid());
	ctl_end(o);
	failing = wq_failing_files(fs->wq);
	for (guint i = 0; i < failing->len; i++) {
		const struct wq_failing *e = &g_array_index(failing, struct wq_failing, i);
		ctl_begin(o, "file-error");
		ctl_add(o, "path", e->path ? e->path : "");
		ctl_add(o, "code", strerrorname_np(-e->error) ? strerrorname_np(-e->error) : "EIO");
		ctl_add_u64(o, "bytes", e->bytes);
		ctl_end(o);
	}
	wq_clear_failing(failing);
	ctl_begin(o, "ok");
	ctl_end(o);
}

static void progress_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct ctl_client *cl = w->data;
	struct wq_stats s;

	wq_get_stats(cl->c->fs->wq, &s);
	ctl_begin(cl->out, "progress");
	ctl_add(cl->out, "state", state_of(cl->c, &s));
	add_queue_fields(cl->out, &s);
	add_progress_rate(cl->out, &s);
	ctl_end(cl->out);
	client_flush(cl);
}

static void start_drain(struct ctl_client *cl, const struct ctl_msg *m)
{
	struct sm_control *c = cl->c;
	uint64_t ms;

	if (!ctl_get_u64(m, "interval_ms", CTL_DRAIN_INTERVAL_MS_DEFAULT, &ms) ||
	    ms < CTL_DRAIN_INTERVAL_MS_MIN || ms > CTL_DRAIN_INTERVAL_MS_MAX) {
		reply_error(cl, EINVAL, "interval_ms: a number of ms from 50 to 60000");
		return;
	}
	cl->draining = true;
	pthread_mutex_lock(&c->drain_lock);
	c->drain_wanted++;
	c->drain_done = false; /* a new waiter wants a fresh answer */
	pthread_cond_signal(&c->drain_cond);
	pthread_mutex_unlock(&c->drain_lock);
	ev_timer_init(&cl->progress, progress_cb, 0., (double)ms / 1000.);
	cl->progress.data = cl;
	ev_timer_start(c->loop, &cl->progress);
}

static void do_set(struct ctl_client *cl, const struct ctl_msg *m)
{
	struct wq *q = cl->c->fs->wq;
	uint64_t rate = 0;
	unsigned lat = 0, prio = (unsigned)-1, weight = (unsigned)-1;
	int cls = -1;
	bool has_arb = false;
	bool has_rate = false, has_lat = false;

	if (!m->nfields) {
		reply_error(cl, EINVAL, "set: give key=value (rate=SIZE, latency=MS)");
		return;
	}
	for (unsigned i = 0; i < m->nfields; i++) {
		const char *k = m->fields[i].key, *v = m->fields[i].value;
		g_autofree char *why = NULL;

		if (!strcmp(k, "rate")) {
			if (sm_parse_size(v, &rate) < 0 || (rate && rate < SCHED_RATE_MIN_BPS))
				why = g_strdup_printf("rate=%s: a size (K, M, G) of at least 4K, or 0 for no cap", v);
			has_rate = true;
		} else if (!strcmp(k, "latency")) {
			if (sm_parse_uint(v, 1, SCHED_LATENCY_MAX_MS, &lat) < 0)
				why = g_strdup_printf("latency=%s: milliseconds from 1 to %u", v,
						      SCHED_LATENCY_MAX_MS);
			has_lat = true;
		} else if (!strcmp(k, "prio")) {
			if (sm_parse_uint(v, 0, SCHED_PRIO_MAX, &prio) < 0)
				why = g_strdup_printf("prio=%s: 0 (highest) to %u", v, SCHED_PRIO_MAX);
			has_arb = true;
		} else if (!strcmp(k, "weight")) {
			if (sm_parse_uint(v, 1, SCHED_WEIGHT_MAX, &weight) < 0)
				why = g_strdup_printf("weight=%s: 1 to %u", v, SCHED_WEIGHT_MAX);
			has_arb = true;
		} else if (!strcmp(k, "class")) {
			if (strcmp(v, "be") && strcmp(v, "idle"))
				why = g_strdup_printf("class=%s: be or idle", v);
			cls = !strcmp(v, "idle");
			has_arb = true;
		} else {
			why = g_strdup_printf("%s: unknown setting (rate, latency)", k);
		}
		if (why) {
			reply_error(cl, EINVAL, why);
			return;
		}
	}
	if (has_arb) {
		g_autofree char *why = NULL;
		struct sched_opts *so = &cl->c->fs->opts.sched;
		int r = arbc_set(q, (int)prio, cls, (int)weight, &why);
		if (r < 0) {
			reply_error(cl, -r == ENOTCONN || -r == EPERM ? -r : EINVAL, why);
			return;
		}
		if ((int)prio >= 0) /* what status shows; only this thread reads them */
			so->prio = prio;
		if ((int)weight >= 0)
			so->weight = weight;
		if (cls >= 0)
			so->io_class = cls ? SCHED_CLASS_IDLE : SCHED_CLASS_BE;
	}
	if (has_rate)
		wq_set_rate(q, rate);
	if (has_lat)
		wq_set_latency(q, lat);
	sm_info("control: set %s%s%s%s%s", has_rate ? "rate" : "", has_rate && has_lat ? ", " : "",
		has_lat ? "latency" : "", has_arb && (has_rate || has_lat) ? ", " : "",
		has_arb ? "prio/class/weight" : "");
	ctl_begin(cl->out, "ok");
	ctl_end(cl->out);
}

/* One request line; false when cl was freed. */
static void handle_line(struct ctl_client *cl, const char *line, size_t len)
{
	struct ctl_msg m;

	if (cl->draining || ctl_parse(line, len, &m) < 0) {
		if (!cl->draining)
			ctl_msg_clear(&m);
		reply_error(cl, EPROTO, cl->draining ? "request during a drain" : "malformed request");
		cl->closing = true;
		return;
	}
	if (!strcmp(m.word, "status") && !m.nfields) {
		reply_status(cl);
	} else if (!strcmp(m.word, "drain")) {
		start_drain(cl, &m);
	} else if (!strcmp(m.word, "set")) {
		do_set(cl, &m);
	} else if ((!strcmp(m.word, "pause") || !strcmp(m.word, "resume")) && !m.nfields) {
		wq_pause(cl->c->fs->wq, m.word[0] == 'p');
		ctl_begin(cl->out, "ok");
		ctl_end(cl->out);
	} else {
		reply_error(cl, EPROTO, "unknown request (status, drain, set, pause, resume)");
		cl->closing = true;
	}
	ctl_msg_clear(&m);
}

/* ctl_inbuf_recv's: each request line, until the client is to be closed. */
static bool client_line(void *arg, const char *line, size_t len)
{
	struct ctl_client *cl = arg;

	if (cl->closing)
		return false;
	handle_line(cl, line, len);
	return !cl->closing;
}

static void client_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct ctl_client *cl = w->data;

	if (revents & EV_READ) {
		int r = ctl_inbuf_recv(&cl->in, cl->fd, client_line, cl);

		if (r <= 0 && r != -EMSGSIZE) {
			client_free(cl);
			return;
		}
		if (r == -EMSGSIZE && !cl->closing) {
			reply_error(cl, EPROTO, "request line too long");
			cl->closing = true;
		}
	}
	client_flush(cl);
}

static void accept_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct sm_control *c = w->data;
	struct ucred cred;
	socklen_t len = sizeof(cred);
	struct ctl_client *cl;
	int fd = accept4(c->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

	if (fd < 0)
		return;
	if (c->nclients >= CTL_CLIENTS_MAX ||
	    getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0 ||
	    (cred.uid != 0 && cred.uid != geteuid())) {
		static const char no[] = "error code=EACCES msg=not%20yours\n";
		if (send(fd, no, sizeof(no) - 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
			sm_dbg("control: refusal not sent: %s", g_strerror(errno));
		close(fd);
		return;
	}
	cl = g_new0(struct ctl_client, 1);
	cl->c = c;
	cl->fd = fd;
	cl->out = g_string_new(NULL);
	cl->link.data = cl;
	g_queue_push_tail_link(&c->clients, &cl->link);
	c->nclients++;
	ev_timer_init(&cl->progress, progress_cb, 0., 0.);
	ev_io_init(&cl->io, client_cb, fd, EV_READ);
	cl->io.data = cl;
	ctl_begin(cl->out, "slowmedia-ctl");
	ctl_add_u64(cl->out, "version", CTL_VERSION);
	ctl_add_u64(cl->out, "pid", (uint64_t)getpid());
	ctl_end(cl->out);
	ev_io_start(loop, &cl->io);
	client_flush(cl);
}

/* Answer every waiting drain client with the drainer's result. */
static void finish_drains(struct sm_control *c, int r)
{
	GList *next;

	if (r == 0)
		busy_release(c, false); /* before the "ok": the unmount that follows must work */
	for (GList *l = c->clients.head; l; l = next) {
		struct ctl_client *cl = l->data;
		next = l->next;
		if (!cl->draining)
			continue;
		progress_cb(c->loop, &cl->progress, 0);
		if (!g_queue_find(&c->clients, cl))
			continue; /* gone while we wrote */
		ev_timer_stop(c->loop, &cl->progress);
		pthread_mutex_lock(&c->drain_lock);
		c->drain_wanted--;
		pthread_mutex_unlock(&c->drain_lock);
		cl->draining = false;
		if (r == 0) {
			ctl_begin(cl->out, "ok");
			ctl_end(cl->out);
		} else {
			reply_error(cl, -r, r == -EAGAIN ? "flushing is paused"
				    : "the queue cannot drain: files keep failing (see status)");
		}
		client_flush(cl);
	}
}

static void wake_cb(struct ev_loop *loop, ev_async *w, int revents)
{
	struct sm_control *c = w->data;
	bool done;
	int r;

	if (__atomic_load_n(&c->stop, __ATOMIC_ACQUIRE)) {
		ev_break(loop, EVBREAK_ALL);
		return;
	}
	if (busy_held(c) && !ev_is_active(&c->busy_timer))
		ev_timer_start(loop, &c->busy_timer);
	pthread_mutex_lock(&c->drain_lock);
	done = c->drain_done;
	r = c->drain_result;
	c->drain_done = false;
	pthread_mutex_unlock(&c->drain_lock);
	if (done)
		finish_drains(c, r);
}

static void req_scan_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct sm_control *c = w->data;

	reqtrack_scan(c->fs->req, sm_now_ns());
}

static void trim_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct mallinfo2 mi = mallinfo2();

	/* fordblks: free bytes in the arenas; keepcost: the top chunk's, which
	 * malloc hands back by itself. */
	if (mi.fordblks - mi.keepcost >= TRIM_FREE_MIN)
		malloc_trim(0);
}

static void *control_main(void *arg)
{
	struct sm_control *c = arg;
	sigset_t all;

	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	ev_run(c->loop, 0);
	while (c->clients.head)
		client_free(c->clients.head->data);
	return NULL;
}

/* --- start and stop ------------------------------------------------------- */

/* Our directory: made if missing, and refused unless it is a directory of
 * ours that nobody else may write to. */
static int ctl_dir_ready(const char *dir)
{
	struct stat st;

	if (mkdir(dir, geteuid() == 0 ? 0755 : 0700) < 0 && errno != EEXIST)
		return -errno;
	if (lstat(dir, &st) < 0)
		return -errno;
	if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 022))
		return -EPERM;
	return 0;
}

/* Sockets left by daemons that died without removing theirs. */
static void remove_stale(const char *dir)
{
	GDir *d = g_dir_open(dir, 0, NULL);
	const char *name;

	while (d && (name = g_dir_read_name(d))) {
		unsigned pid;
		char tail[8];
		if (sscanf(name, CTL_SOCKET_PREFIX "%u%7s", &pid, tail) == 2 &&
		    !strcmp(tail, CTL_SOCKET_SUFFIX) && kill((pid_t)pid, 0) < 0 && errno == ESRCH) {
			g_autofree char *p = g_build_filename(dir, name, NULL);
			unlink(p);
		}
	}
	if (d)
		g_dir_close(d);
}

static int listen_on(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd, r;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	unlink(path);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || chmod(path, 0600) < 0 ||
	    listen(fd, 16) < 0) {
		r = -errno;
		close(fd);
		unlink(path);
		return r;
	}
	return fd;
}

int control_start(struct slowmedia *fs, const char *mountpoint)
{
	struct sm_control *c = g_new0(struct sm_control, 1);
	g_autofree char *dir = ctl_dir_for(geteuid());
	int r;

	c->fs = fs;
	c->busy_fd = -1;
	c->listen_fd = -1;
	/* libfuse made it absolute and canonical; a realpath here would stat
	 * our own root before anyone serves it. */
	c->mountpoint = g_strdup(mountpoint);
	mountinfo_find(c->mountpoint, 0, &c->mnt_dev, NULL, NULL);
	pthread_mutex_init(&c->busy_lock, NULL);
	pthread_mutex_init(&c->drain_lock, NULL);
	pthread_cond_init(&c->drain_cond, NULL);
	r = ctl_dir_ready(dir);
	if (r < 0) {
		sm_warn("control socket: directory %s: %s; slowmediactl cannot reach this mount",
			dir, r == -EPERM ? "not ours, or writable by others" : g_strerror(-r));
	} else {
		remove_stale(dir);
		c->sock_path = g_strdup_printf("%s/" CTL_SOCKET_PREFIX "%d" CTL_SOCKET_SUFFIX, dir,
					       (int)getpid());
		c->listen_fd = listen_on(c->sock_path);
		if (c->listen_fd < 0)
			sm_warn("control socket %s: %s; slowmediactl cannot reach this mount",
				c->sock_path, g_strerror(-c->listen_fd));
	}
	c->loop = ev_loop_new(EVFLAG_AUTO | EVFLAG_NOSIGMASK);
	ev_async_init(&c->wake, wake_cb);
	c->wake.data = c;
	ev_async_start(c->loop, &c->wake);
	ev_timer_init(&c->busy_timer, busy_timer_cb, BUSY_POLL_S, BUSY_POLL_S);
	c->busy_timer.data = c;
	if (fs->req) {
		ev_timer_init(&c->req_scan, req_scan_cb, (double)REQ_SCAN_NS / NSEC_PER_SEC,
			      (double)REQ_SCAN_NS / NSEC_PER_SEC);
		c->req_scan.data = c;
		ev_timer_start(c->loop, &c->req_scan);
	}
	ev_timer_init(&c->trim, trim_cb, TRIM_EVERY_S, TRIM_EVERY_S);
	ev_timer_start(c->loop, &c->trim);
	if (c->listen_fd >= 0) {
		ev_io_init(&c->accept_io, accept_cb, c->listen_fd, EV_READ);
		c->accept_io.data = c;
		ev_io_start(c->loop, &c->accept_io);
	}
	/* The hold works without a socket: the unmount must not lie either way. */
	if (pthread_create(&c->thread, NULL, control_main, c) != 0) {
		sm_err("control: cannot start its thread");
		ev_loop_destroy(c->loop);
		if (c->listen_fd >= 0) {
			close(c->listen_fd);
			unlink(c->sock_path);
		}
		g_free(c->sock_path);
		g_free(c->mountpoint);
		g_free(c);
		return -EAGAIN;
	}
	pthread_setname_np(c->thread, "sm-control");
	c->drainer_started = pthread_create(&c->drainer, NULL, drainer_main, c) == 0;
	if (c->drainer_started)
		pthread_setname_np(c->drainer, "sm-drain");
	fs->ctl = c;
	if (c->listen_fd >= 0)
		sm_dbg("control socket: %s", c->sock_path);
	return 0;
}

void control_detached(struct slowmedia *fs)
{
	struct sm_control *c = fs->ctl;

	if (!c)
		return;
	__atomic_store_n(&c->detached, true, __ATOMIC_RELEASE);
	busy_release(c, true);
}

void control_stop(struct slowmedia *fs)
{
	struct sm_control *c = fs->ctl;

	if (!c)
		return;
	__atomic_store_n(&c->stop, true, __ATOMIC_RELEASE);
	ev_async_send(c->loop, &c->wake);
	pthread_join(c->thread, NULL);
	if (c->drainer_started) {
		pthread_mutex_lock(&c->drain_lock);
		pthread_cond_broadcast(&c->drain_cond);
		pthread_mutex_unlock(&c->drain_lock);
		pthread_join(c->drainer, NULL);
	}
	busy_release(c, true);
	ev_loop_destroy(c->loop);
	if (c->listen_fd >= 0) {
		close(c->listen_fd);
		unlink(c->sock_path);
	}
	pthread_mutex_destroy(&c->busy_lock);
	pthread_mutex_destroy(&c->drain_lock);
	pthread_cond_destroy(&c->drain_cond);
	g_free(c->sock_path);
	g_free(c->mountpoint);
	g_free(c);
	fs->ctl = NULL;
}
