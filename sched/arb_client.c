/*
 * DESIGN: a mount's side of the shared arbiter (protocol: arb_proto.h).
 *
 * One thread with its own libev loop owns the socket. The flushers never
 * touch it: with q->lock held they post what they need in q->arb (want a
 * grant, a chunk done) and kick the loop with an ev_async; the loop reads
 * that under the lock, drops the lock, and does the socket I/O. A grant that
 * arrives sets q->arb.granted and wakes the flushers (q->work).
 *
 * Order of a chunk (the contract of arbiter.c): the flusher waits for its
 * own read gate and rate= tokens first (flusher.c), then asks for the grant,
 * writes at once when it comes, and reports done. A grant that finds no
 * work left (the file went clean meanwhile) is given back with done bytes=0.
 *
 * A grant with lease=1 (the mount is alone in its group) sets q->arb.lease:
 * from then on arb_acquire lets every chunk through at once, counting those
 * in flight (lease_flying), until `revoke` comes; the done for the whole
 * lease (its bytes) goes out when the last of them ended, and the flushers
 * ask chunk by chunk again.
 *
 * Without an arbiter the mount paces alone, as with arbiter=off: at start
 * until registered, and whenever the arbiter goes away (connection closed,
 * or no pong within ARB_DEAD_MS of a ping): connected is cleared under the
 * lock and the flushers, woken, go on without grants at once. Nothing queued
 * waits on the arbiter. The loop retries every ARB_RETRY_MS and registers
 * again; with spawn (arbiter=auto, or a path), a socket that is missing or
 * refuses is answered by starting slowmedia-arbiterd, which takes a lock so
 * that of several mounts starting one at once exactly one serves.
 *
 * Group reads: while the group has other mounts (peers > 0), reads here that
 * last ARB_READ_REPORT_NS (cached ones do not: they never reach a medium)
 * are reported as `reads active=1`, and their end as `active=0`. While
 * writers wait for room, a request says how long reads may hold it back
 * (hold_ms, the bound of the mount's own read gate, policy_gate_hold), so
 * a group read without end still lets one chunk through per bound.
 *
 * A grant with moved=1 (the head served another mount or a read since our
 * last chunk) makes the chunk count as one that seeks (q->head_moved), so the
 * pacer learns the seek apart instead of a bandwidth that the neighbour's
 * work dragged down. The arbiter's `rate` and `paused` messages set rate=
 * and show the arbiter's pause in status; the final drain asks it to resume.
 */
#include "arb_client.h"
#include "arb_proto.h"
#include "queue_int.h"

#include <errno.h>
#include <ev.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define ARB_READ_REPORT_NS (2 * NSEC_PER_MSEC)
#define ARB_GROUP_HOLD_MIN_NS NSEC_PER_SEC
#define ARB_ENV_SOCKET "SLOWMEDIA_ARBITER_SOCKET"
#define ARB_ENV_DAEMON "SLOWMEDIA_ARBITERD"
#define ARB_EXIT_IDLE "60"
#define ARB_LOOP_DEPTH 8 /* loop devices on loop devices, at most */

extern char **environ;

struct arbc {
	struct wq *q;
	char *socket;
	bool spawn;
	char *group, *mountpoint, *medium;
	unsigned prio, weight;
	bool idle_class;
	uint64_t rate_bps;

	struct ev_loop *loop;
	ev_async kick;
	ev_timer retry, ping, reads_timer;
	ev_io io;
	int fd;
	bool greeted, registered;
	struct ctl_inbuf in;
	GString *out;
	int64_t ping_sent_ns; /* oldest unanswered ping; 0: none */
	bool reads_sent;      /* active=1 was sent */
	bool warned_down;     /* "no arbiter" said once per outage */
	bool stop;	      /* atomic */
	pthread_t thread;
};

/* --- groups --------------------------------------------------------------- */

static char *sysfs_read(const char *path)
{
	char *s = NULL;

	if (!g_file_get_contents(path, &s, NULL, NULL))
		return NULL;
	return g_strstrip(s);
}

char *arb_default_group(dev_t dev)
{
	for (int depth = 0; depth < ARB_LOOP_DEPTH; depth++) {
		g_autofree char *sys = g_strdup_printf("/sys/dev/block/%u:%u", major(dev), minor(dev));
		g_autofree char *real = realpath(sys, NULL);
		g_autofree char *part = NULL, *disk = NULL, *backing = NULL, *name = NULL;
		struct stat st;

		if (!real)
			break; /* not a block device: its own group */
		part = g_build_filename(real, "partition", NULL);
		/* A partition's directory sits in its disk's. */
		disk = g_file_test(part, G_FILE_TEST_EXISTS) ? g_path_get_dirname(real) : g_strdup(real);
		name = g_path_get_basename(disk);
		g_autofree char *bf = g_build_filename(disk, "loop", "backing_file", NULL);
		backing = sysfs_read(bf);
		if (backing && stat(backing, &st) == 0) {
			dev = st.st_dev; /* a loop device: where its image lives */
			continue;
		}
		return g_strdup_printf("disk:%s", name);
	}
	return g_strdup_printf("dev:%u:%u", major(dev), minor(dev));
}

/* --- the flushers' side (q->lock held) ------------------------------------ */

/* How long reads may hold our next request back (0: as long as they last):
 * while writers wait, the longer of our own gate's bound and
 * ARB_GROUP_HOLD_MIN_NS. Reads of another medium have users waiting too: the
 * writer here moves a chunk per second, and their reader loses at most that
 * (15% on a DVD-RAM, with its seek). */
static unsigned hold_ms(const struct wq *q)
{
	int64_t bound = MAX(policy_gate_hold_max_ns(q->pacer.latency_ns), ARB_GROUP_HOLD_MIN_NS);

	return wq_writers_waiting(q) ? (unsigned)(bound / NSEC_PER_MSEC) : 0;
}

bool arb_acquire(struct wq *q, size_t bytes, bool urgent, bool use_after_wait)
{
	struct arb_link *a = &q->arb;
	unsigned hold;

	if (!a->client || !a->connected)
		return true;
	if (a->lease) {
		a->lease_flying++;
		return true;
	}
	hold = hold_ms(q);
	if (a->granted && !a->holding) {
		a->granted = false;
		a->holding = true;
		return true;
	}
	if (!a->holding && (!a->want || a->want_urgent != urgent || a->want_hold_ms != hold)) {
		a->want = true;
		a->want_bytes = bytes;
		a->want_urgent = urgent;
		a->want_hold_ms = hold;
		a->asked = false;
		ev_async_send(a->client->loop, &a->client->kick);
	}
	if (use_after_wait)
		a->sync_waiters++; /* arb_idle must leave our request alone */
	timed_wait(&q->work, &q->lock, IDLE_WAIT_NS);
	if (use_after_wait)
		a->sync_waiters--;
	if (!use_after_wait)
		return false; /* the lock was dropped: the caller looks again */
	if (!a->connected)
		return true; /* the arbiter went away meanwhile: alone now */
	if (a->granted && !a->holding) {
		a->granted = false;
		a->holding = true;
		return true;
	}
	return false;
}

/* Called with the lock held: the revoked lease's last chunk ended (or none
 * was in flight): its done goes out, and the flushers ask as usual again. */
static void lease_end(struct wq *q)
{
	struct arb_link *a = &q->arb;

	a->lease_ending = false;
	a->done_pending++;
	a->done_bytes += a->lease_bytes;
	a->lease_bytes = 0;
	pthread_cond_broadcast(&q->work);
	ev_async_send(a->client->loop, &a->client->kick);
}

void arb_release(struct wq *q, uint64_t bytes)
{
	struct arb_link *a = &q->arb;

	if (!a->holding) {
		if (!a->lease_flying)
			return;
		a->lease_flying--;
		a->lease_bytes += bytes;
		if (a->lease_ending && !a->lease_flying)
			lease_end(q);
		return;
	}
	a->holding = false;
	pthread_cond_broadcast(&q->work); /* another flusher may ask now */
	if (!a->connected)
		return; /* that arbiter is gone; a new one never granted it */
	a->done_pending++;
	a->done_bytes += bytes;
	/* The next chunk's request goes with this done, in one message, when the
	 * flusher will ask at once anyway (data left, its tokens and read gate
	 * clear: the order of arbiter.c's contract holds). Asked later, it would
	 * reach the arbiter after the done whenever this loop takes the lock
	 * first (the flusher drops it between chunks), and the free group would
	 * go to any other mount asking then, whatever its prio. A guess that
	 * turns out wrong costs a grant given back (arb_idle). */
	if (!a->want && q->queued > 0 && !q->paused && !q->stopping &&
	    pacer_delay_ns(&q->pacer, now_ns()) == 0 && readgate_wait_ns(&q->gate, now_ns()) == 0) {
		a->want = true;
		a->want_bytes = pacer_chunk_bytes(&q->pacer, true);
		a->want_urgent = false; /* the flusher's own ask updates it */
		a->want_hold_ms = hold_ms(q);
		a->asked = false;
	}
	ev_async_send(a->client->loop, &a->client->kick);
}

void arb_rate_changed(struct wq *q)
{
	struct arb_link *a = &q->arb;

	if (!a->client)
		return;
	a->client->rate_bps = q->pacer.rate_bps; /* for the next register */
	a->rate_told = true;
	ev_async_send(a->client->loop, &a->client->kick);
}

void arb_resume(struct wq *q, const char *why)
{
	struct arb_link *a = &q->arb;

	if (!a->client || !a->paused || !a->connected)
		return;
	wq_info(q, "flushing resumed at the arbiter %s (it was paused there)", why);
	a->resume = true;
	ev_async_send(a->client->loop, &a->client->kick);
}

void arb_idle(struct wq *q)
{
	struct arb_link *a = &q->arb;

	/* A metadata flush or a drain waits for the grant: neither give it back
	 * nor take its request away (it would wait out its whole timed wait). */
	if (!a->client || a->sync_waiters)
		return;
	if (a->granted && !a->holding) {
		a->granted = false;
		a->holding = true;
		arb_release(q, 0);
	}
	a->want = false; /* a grant still coming goes back (grant_cb) */
}

void arb_reads_changed(struct wq *q)
{
	struct arb_link *a = &q->arb;
	struct arbc *c = __atomic_load_n(&a->client, __ATOMIC_ACQUIRE);

	if (c && __atomic_load_n(&a->peers, __ATOMIC_RELAXED))
		ev_async_send(c->loop, &c->kick);
}

const char *arb_state(struct wq *q, int *id, bool *lease)
{
	const char *s;

	pthread_mutex_lock(&q->lock);
	s = !q->arb.client ? "off" : q->arb.connected ? "connected" : "alone";
	*id = q->arb.connected ? q->arb.id : 0;
	if (lease)
		*lease = q->arb.connected && q->arb.lease;
	pthread_mutex_unlock(&q->lock);
	return s;
}

/* --- the loop ------------------------------------------------------------- */

static int64_t mono_ns(void)
{
	return now_ns();
}

static void go_alone(struct arbc *c, const char *why)
{
	struct wq *q = c->q;
	bool was;

	if (c->fd >= 0) {
		ev_io_stop(c->loop, &c->io);
		close(c->fd);
		c->fd = -1;
	}
	ev_timer_stop(c->loop, &c->ping);
	ev_timer_stop(c->loop, &c->reads_timer);
	c->greeted = c->registered = c->reads_sent = false;
	c->in.have = 0;
	g_string_truncate(c->out, 0);
	c->ping_sent_ns = 0;
	pthread_mutex_lock(&q->lock);
	was = q->arb.connected;
	q->arb.connected = false;
	q->arb.want = q->arb.granted = q->arb.asked = false;
	/* That arbiter's lease went with it; chunks still under it are not
	 * counted against a next one. */
	q->arb.lease = q->arb.lease_ending = false;
	q->arb.lease_flying = 0;
	q->arb.lease_bytes = 0;
	q->arb.done_pending = 0;
	q->arb.done_bytes = 0;
	q->arb.paused = q->arb.resume = false; /* that arbiter's pause went with it */
	__atomic_store_n(&q->arb.peers, 0, __ATOMIC_RELAXED);
	pthread_cond_broadcast(&q->work);
	pthread_mutex_unlock(&q->lock);
	if (was || !c->warned_down)
		sm_log(was ? LOG_WARNING : LOG_INFO, "arbiter %s: %s; flushing alone until it is back",
		       c->socket, why);
	c->warned_down = true;
	if (!ev_is_active(&c->retry))
		ev_timer_again(c->loop, &c->retry);
}

static void flush_out(struct arbc *c)
{
	if (c->fd < 0)
		return;
	if (ctl_outbuf_send(c->out, c->fd) < 0) {
		go_alone(c, "connection lost");
		return;
	}
	ev_io_stop(c->loop, &c->io);
	ev_io_set(&c->io, c->fd, c->out->len ? EV_READ | EV_WRITE : EV_READ);
	ev_io_start(c->loop, &c->io);
}

static void send_register(struct arbc *c)
{
	unsigned prio, weight;
	uint64_t rate;
	bool idle;

	pthread_mutex_lock(&c->q->lock); /* arbc_set, rate= may change them */
	prio = c->prio;
	weight = c->weight;
	idle = c->idle_class;
	rate = c->rate_bps;
	pthread_mutex_unlock(&c->q->lock);
	ctl_begin(c->out, "register");
	ctl_add(c->out, "group", c->group);
	ctl_add_u64(c->out, "prio", prio);
	ctl_add(c->out, "class", idle ? "idle" : "be");
	ctl_add_u64(c->out, "weight", weight);
	ctl_add_u64(c->out, "rate", rate);
	ctl_add(c->out, "medium", c->medium);
	ctl_add(c->out, "mountpoint", c->mountpoint);
	ctl_end(c->out);
}

/* Whether reads here count for the group now: in flight for a while. */
static bool reads_for_group(struct wq *q)
{
	return readgate_active(&q->gate);
}

/* Post what the flushers asked for, and the read state. */
static void kick_cb(struct ev_loop *loop, ev_async *w, int revents)
{
	struct arbc *c = w->data;
	struct wq *q = c->q;
	bool ask = false, urgent = false, reads, resume, tell_rate;
	unsigned done = 0, hold = 0;
	uint64_t bytes = 0, done_bytes = 0, rate;

	if (__atomic_load_n(&c->stop, __ATOMIC_ACQUIRE)) {
		ev_break(loop, EVBREAK_ALL);
		return;
	}
	if (!c->registered)
		return;
	pthread_mutex_lock(&q->lock);
	if (q->arb.want && !q->arb.asked) {
		ask = true;
		q->arb.asked = true;
		bytes = q->arb.want_bytes;
		urgent = q->arb.want_urgent;
		hold = q->arb.want_hold_ms;
	}
	resume = q->arb.resume;
	tell_rate = q->arb.rate_told;
	rate = q->pacer.rate_bps;
	q->arb.resume = q->arb.rate_told = false;
	done = q->arb.done_pending;
	done_bytes = q->arb.done_bytes;
	q->arb.done_pending = 0;
	q->arb.done_bytes = 0;
	pthread_mutex_unlock(&q->lock);
	for (unsigned i = 0; i < done; i++) {
		ctl_begin(c->out, "done");
		ctl_add_u64(c->out, "bytes", i == 0 ? done_bytes : 0);
		ctl_end(c->out);
	}
	if (ask) {
		ctl_begin(c->out, "request");
		ctl_add_u64(c->out, "bytes", bytes);
		ctl_add_u64(c->out, "urgent", urgent);
		if (hold)
			ctl_add_u64(c->out, "hold_ms", hold);
		ctl_end(c->out);
	}
	if (resume) {
		ctl_begin(c->out, "resume");
		ctl_add_i64(c->out, "id", q->arb.id);
		ctl_end(c->out);
	}
	if (tell_rate) {
		ctl_begin(c->out, "rate");
		ctl_add_u64(c->out, "bps", rate);
		ctl_end(c->out);
	}
	reads = reads_for_group(q) && __atomic_load_n(&q->arb.peers, __ATOMIC_RELAXED);
	if (reads && !c->reads_sent && !ev_is_active(&c->reads_timer)) {
		ev_timer_set(&c->reads_timer, (double)ARB_READ_REPORT_NS / 1e9, 0.);
		ev_timer_start(loop, &c->reads_timer);
	} else if (!reads) {
		ev_timer_stop(loop, &c->reads_timer);
		if (c->reads_sent) {
			g_string_append(c->out, "reads active=0\n");
			c->reads_sent = false;
		}
	}
	flush_out(c);
}

static void reads_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct arbc *c = w->data;

	if (c->registered && !c->reads_sent && reads_for_group(c->q)) {
		g_string_append(c->out, "reads active=1\n");
		c->reads_sent = true;
		flush_out(c);
		ev_async_send(loop, &c->kick); /* it may have ended meanwhile */
	}
}

static void on_line(struct arbc *c, const struct ctl_msg *m)
{
	struct wq *q = c->q;
	uint64_t v;

	if (!c->greeted) {
		if (strcmp(m->word, "slowmedia-arbiter") || !ctl_get_u64(m, "version", 0, &v) ||
		    v != ARB_VERSION) {
			go_alone(c, "not a slowmedia arbiter of this version");
			return;
		}
		c->greeted = true;
		send_register(c);
	} else if (!strcmp(m->word, "registered")) {
		int64_t id = 0;
		uint64_t prio = c->prio, peers = 0;
		ctl_get_i64(m, "id", 0, &id);
		ctl_get_u64(m, "prio", c->prio, &prio);
		ctl_get_u64(m, "peers", 0, &peers);
		c->registered = true;
		c->warned_down = false;
		pthread_mutex_lock(&q->lock);
		q->arb.connected = true;
		q->arb.id = (int)id;
		q->arb.want = q->arb.granted = q->arb.asked = false;
		__atomic_store_n(&q->arb.peers, (unsigned)peers, __ATOMIC_RELAXED);
		pthread_cond_broadcast(&q->work);
		pthread_mutex_unlock(&q->lock);
		sm_info("registered with the arbiter %s as mount %d (group %s, prio %u%s)", c->socket,
			(int)id, c->group, (unsigned)prio,
			prio != c->prio ? ", lowered: only root may raise it" : "");
		ev_timer_again(c->loop, &c->ping);
		ev_async_send(c->loop, &c->kick); /* a flusher may be waiting already */
	} else if (!strcmp(m->word, "grant")) {
		bool give_back;
		uint64_t moved = 0, lease = 0;
		ctl_get_u64(m, "moved", 0, &moved);
		ctl_get_u64(m, "lease", 0, &lease);
		pthread_mutex_lock(&q->lock);
		give_back = !q->arb.want || q->arb.holding;
		if (!give_back) {
			q->arb.want = false;
			q->arb.asked = false;
			/* A lease: arb_acquire lets chunks through from now on. */
			if (lease)
				q->arb.lease = true;
			else
				q->arb.granted = true;
			if (moved)
				q->head_moved = true;
			pthread_cond_broadcast(&q->work);
		}
		pthread_mutex_unlock(&q->lock);
		if (give_back)
			g_string_append(c->out, "done bytes=0\n");
	} else if (!strcmp(m->word, "revoke")) {
		pthread_mutex_lock(&q->lock);
		if (q->arb.lease) {
			q->arb.lease = false;
			q->arb.lease_ending = true;
			if (!q->arb.lease_flying)
				lease_end(q);
		}
		pthread_mutex_unlock(&q->lock);
	} else if (!strcmp(m->word, "peers")) {
		if (ctl_get_u64(m, "n", 0, &v))
			__atomic_store_n(&q->arb.peers, (unsigned)v, __ATOMIC_RELAXED);
	} else if (!strcmp(m->word, "rate") && ctl_get_u64(m, "bps", 0, &v)) {
		sm_info("arbiter %s: rate set to %" G_GUINT64_FORMAT " B/s%s", c->socket, v,
			v ? "" : " (no cap)");
		pthread_mutex_lock(&q->lock);
		q->pacer.rate_bps = v;
		if (!v)
			q->pacer.next_ok_ns = 0;
		c->rate_bps = v;
		pthread_cond_broadcast(&q->work);
		pthread_mutex_unlock(&q->lock);
	} else if (!strcmp(m->word, "paused") && ctl_get_u64(m, "on", 0, &v)) {
		sm_info("arbiter %s: flushing %s there", c->socket, v ? "paused" : "resumed");
		pthread_mutex_lock(&q->lock);
		q->arb.paused = v != 0;
		pthread_cond_broadcast(&q->work);
		pthread_cond_broadcast(&q->done);
		pthread_mutex_unlock(&q->lock);
	} else if (!strcmp(m->word, "pong")) {
		c->ping_sent_ns = 0;
	} else if (!strcmp(m->word, "error")) {
		const char *msg = ctl_get(m, "msg");
		sm_warn("arbiter %s refused us: %s", c->socket, msg ? msg : "?");
		go_alone(c, "refused");
	}
}

/* ctl_inbuf_recv's: each line from the arbiter, while connected. */
static bool arbiter_line(void *arg, const char *line, size_t len)
{
	struct arbc *c = arg;
	struct ctl_msg m;

	if (ctl_parse(line, len, &m) == 0)
		on_line(c, &m);
	else
		go_alone(c, "it sent a malformed line");
	ctl_msg_clear(&m);
	return c->fd >= 0; /* go_alone reset the buffer */
}

static void io_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct arbc *c = w->data;

	if (revents & EV_READ) {
		int r = ctl_inbuf_recv(&c->in, c->fd, arbiter_line, c);

		if (c->fd < 0)
			return;
		if (r <= 0) {
			go_alone(c, r == 0		 ? "it closed the connection"
				    : r == -EMSGSIZE ? "it sent a line too long"
						     : g_strerror(-r));
			return;
		}
	}
	flush_out(c);
}

static void ping_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct arbc *c = w->data;
	int64_t now = mono_ns();

	if (!c->registered)
		return;
	if (c->ping_sent_ns && now - c->ping_sent_ns > (int64_t)ARB_DEAD_MS * NSEC_PER_MSEC) {
		go_alone(c, "it stopped answering");
		return;
	}
	if (!c->ping_sent_ns) {
		c->ping_sent_ns = now;
		g_string_append(c->out, "ping\n");
		flush_out(c);
	}
}

/* Where slowmedia-arbiterd is: $SLOWMEDIA_ARBITERD, beside our own binary
 * (installed), or in the build tree's sched/. */
static char *arbiterd_path(void)
{
	const char *env = getenv(ARB_ENV_DAEMON);
	g_autofree char *self = g_file_read_link("/proc/self/exe", NULL);
	g_autofree char *dir = self ? g_path_get_dirname(self) : NULL;
	char *p;

	if (env && *env)
		return g_strdup(env);
	if (dir) {
		p = g_build_filename(dir, "slowmedia-arbiterd", NULL);
		if (access(p, X_OK) == 0)
			return p;
		g_free(p);
		p = g_build_filename(dir, "..", "sched", "slowmedia-arbiterd", NULL);
		if (access(p, X_OK) == 0)
			return p;
		g_free(p);
	}
	return g_strdup(SLOWMEDIA_SBINDIR "/slowmedia-arbiterd");
}

/* Start an arbiter on our socket; it daemonizes once listening, so the wait
 * for its first process is the wait for the socket. */
static void spawn_arbiter(struct arbc *c)
{
	g_autofree char *path = arbiterd_path();
	char *argv[] = {path, "--socket", c->socket, "--exit-idle", ARB_EXIT_IDLE, NULL};
	posix_spawnattr_t attr;
	posix_spawn_file_actions_t fa;
	sigset_t none, dflt;
	pid_t pid;
	int st, r;

	/* Not our thread's mask (everything blocked) nor our handlers. */
	sigemptyset(&none);
	sigemptyset(&dflt);
	sigaddset(&dflt, SIGTERM);
	sigaddset(&dflt, SIGINT);
	sigaddset(&dflt, SIGHUP);
	sigaddset(&dflt, SIGPIPE);
	posix_spawnattr_init(&attr);
	posix_spawnattr_setsigmask(&attr, &none);
	posix_spawnattr_setsigdefault(&attr, &dflt);
	posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
	/* None of our fds: one on the lower would keep the medium mounted for
	 * as long as the arbiter lives. */
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addclosefrom_np(&fa, STDERR_FILENO + 1);
	r = posix_spawn(&pid, path, &fa, &attr, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&attr);
	if (r != 0) {
		if (!c->warned_down)
			sm_warn("cannot start %s: %s", path, g_strerror(r));
		return;
	}
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		sm_dbg("%s exited with status %d", path, WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}

static int try_connect(struct arbc *c)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd;

	if (strlen(c->socket) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, c->socket);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int e = -errno;
		close(fd);
		return e;
	}
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	return fd;
}

static void retry_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct arbc *c = w->data;
	int fd;

	if (c->fd >= 0)
		return;
	fd = try_connect(c);
	if (fd < 0 && c->spawn && (fd == -ENOENT || fd == -ECONNREFUSED)) {
		spawn_arbiter(c);
		fd = try_connect(c);
	}
	if (fd < 0) {
		if (!c->warned_down)
			sm_info("no arbiter at %s (%s): flushing alone, trying again every %d ms",
				c->socket, g_strerror(-fd), ARB_RETRY_MS);
		c->warned_down = true;
		return;
	}
	ev_timer_stop(loop, w);
	c->fd = fd;
	ev_io_init(&c->io, io_cb, fd, EV_READ);
	c->io.data = c;
	ev_io_start(loop, &c->io);
}

static void *arbc_main(void *arg)
{
	struct arbc *c = arg;
	sigset_t all;

	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	retry_cb(c->loop, &c->retry, 0);
	ev_run(c->loop, 0);
	return NULL;
}

int arbc_start(struct wq *q, const struct arb_identity *id)
{
	struct arbc *c = g_new0(struct arbc, 1);
	const char *env = getenv(ARB_ENV_SOCKET);

	c->q = q;
	c->fd = -1;
	c->socket = g_strdup(id->socket ? id->socket : env && *env ? env : ARB_SOCKET_DEFAULT);
	c->spawn = id->spawn;
	c->group = id->group ? g_strdup(id->group) : arb_default_group(id->lower_dev);
	c->medium = g_strdup_printf("%u:%u", major(id->lower_dev), minor(id->lower_dev));
	c->mountpoint = g_strdup(id->mountpoint ? id->mountpoint : "");
	c->prio = id->prio;
	c->weight = id->weight;
	c->idle_class = id->idle_class;
	c->rate_bps = id->rate_bps;
	c->out = g_string_new(NULL);
	c->loop = ev_loop_new(EVFLAG_AUTO | EVFLAG_NOSIGMASK);
	ev_async_init(&c->kick, kick_cb);
	c->kick.data = c;
	ev_async_start(c->loop, &c->kick);
	ev_init(&c->retry, retry_cb);
	c->retry.repeat = (double)ARB_RETRY_MS / 1000.;
	c->retry.data = c;
	ev_timer_again(c->loop, &c->retry);
	ev_init(&c->ping, ping_cb);
	c->ping.repeat = (double)ARB_PING_INTERVAL_MS / 1000.;
	c->ping.data = c;
	ev_init(&c->reads_timer, reads_timer_cb);
	c->reads_timer.data = c;
	pthread_mutex_lock(&q->lock);
	__atomic_store_n(&q->arb.client, c, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&q->lock);
	if (pthread_create(&c->thread, NULL, arbc_main, c) != 0) {
		pthread_mutex_lock(&q->lock);
		q->arb.client = NULL;
		pthread_mutex_unlock(&q->lock);
		ev_loop_destroy(c->loop);
		g_string_free(c->out, TRUE);
		g_free(c->socket);
		g_free(c->group);
		g_free(c->medium);
		g_free(c->mountpoint);
		g_free(c);
		return -EAGAIN;
	}
	pthread_setname_np(c->thread, "sm-arbiter");
	sm_dbg("arbiter client: socket %s, group %s", c->socket, c->group);
	return 0;
}

void arbc_stop(struct wq *q)
{
	struct arbc *c = q->arb.client;

	if (!c)
		return;
	__atomic_store_n(&c->stop, true, __ATOMIC_RELEASE);
	ev_async_send(c->loop, &c->kick);
	pthread_join(c->thread, NULL);
	pthread_mutex_lock(&q->lock);
	__atomic_store_n(&q->arb.client, NULL, __ATOMIC_RELEASE);
	q->arb.connected = false;
	pthread_cond_broadcast(&q->work);
	pthread_mutex_unlock(&q->lock);
	if (c->fd >= 0)
		close(c->fd);
	ev_loop_destroy(c->loop);
	g_string_free(c->out, TRUE);
	g_free(c->socket);
	g_free(c->group);
	g_free(c->medium);
	g_free(c->mountpoint);
	g_free(c);
}

int arbc_set(struct wq *q, int prio, int idle_class, int weight, char **why)
{
	struct arbc *c = q->arb.client;
	struct ctl_conn conn;
	char line[CTL_LINE_MAX + 1];
	g_autoptr(GString) req = g_string_new("set");
	int id = 0, r;
	struct ctl_msg m;

	*why = NULL;
	if (!c || strcmp(arb_state(q, &id, NULL), "connected")) {
		*why = g_strdup(c ? "no arbiter reached: prio, class and weight need one"
				  : "arbiter=off: prio, class and weight need the arbiter");
		return -ENOTCONN;
	}
	ctl_add_i64(req, "id", id);
	if (prio >= 0)
		ctl_add_i64(req, "prio", prio);
	if (idle_class >= 0)
		ctl_add(req, "class", idle_class ? "idle" : "be");
	if (weight >= 0)
		ctl_add_i64(req, "weight", weight);
	ctl_end(req);
	r = ctl_connect_word(&conn, c->socket, "slowmedia-arbiter", ARB_VERSION, 1000);
	if (r == 0) {
		r = ctl_send(&conn, req->str);
		if (r == 0)
			r = ctl_read_line(&conn, line, 1000);
		ctl_close(&conn);
	}
	if (r < 0) {
		*why = g_strdup_printf("arbiter %s: %s", c->socket, g_strerror(-r));
		return r;
	}
	if (ctl_parse(line, (size_t)r, &m) < 0) {
		*why = g_strdup("the arbiter's answer is malformed");
		return -EPROTO;
	}
	r = 0;
	if (strcmp(m.word, "ok")) {
		const char *msg = ctl_get(&m, "msg"), *code = ctl_get(&m, "code");
		*why = g_strdup(msg ? msg : "refused by the arbiter");
		r = code && !strcmp(code, "EPERM") ? -EPERM : -EINVAL;
	}
	ctl_msg_clear(&m);
	if (r == 0) { /* a later registration (a new arbiter) says the same */
		pthread_mutex_lock(&q->lock);
		if (prio >= 0)
			c->prio = (unsigned)prio;
		if (idle_class >= 0)
			c->idle_class = idle_class;
		if (weight >= 0)
			c->weight = (unsigned)weight;
		pthread_mutex_unlock(&q->lock);
	}
	return r;
}
