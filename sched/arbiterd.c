/*
 * DESIGN: slowmedia-arbiterd, the one arbiter of a machine.
 *
 * A libev loop on one unix socket (protocol: arb_proto.h). Each connection
 * that registers is a mount; the policy (arbiter.c) decides who gets the
 * next grant; this file only moves messages and time. After every batch of
 * input, and when the policy's wake time comes, it asks arb_next for grants
 * until there are none and sends them. A connection that closes is
 * unregistered, which gives its grant back: a dead mount never holds a
 * group. Output to a client that does not read is bounded (closed past
 * ARB_OUT_MAX).
 *
 * Exactly one arbiter: before binding, it takes an exclusive flock on
 * SOCKET.lock; a second one (two mounts starting it at once) finds the lock
 * held and exits 0, and its starter connects to the first. With systemd
 * socket activation (LISTEN_PID/LISTEN_FDS) the socket comes as fd 3.
 *
 * Access: SO_PEERCRED at accept. A mount may be changed by root and by the
 * uid that registered it; a non-root mount cannot take a prio above
 * SCHED_PRIO_DEFAULT (lower number) unless the config lists that user:
 *     [prio]
 *     allow_users=alice;bob
 */
#include "arb_proto.h"
#include "arbiter.h"
#include "log.h"

#include <errno.h>
#include <ev.h>
#include <fcntl.h>
#include <getopt.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define ARB_OUT_MAX (256u << 10)
/* The first bytes of a mount's mountpoint= kept for status and the log: with
 * its %XX escapes (3 bytes each at worst) and the other fields, a status line
 * stays under CTL_LINE_MAX, which its readers enforce (ctl_read_line). */
#define ARB_MOUNTPOINT_KEEP 1024
#define SD_LISTEN_FDS_START 3

struct arbd {
	struct ev_loop *loop;
	struct arb *arb;
	int lfd;
	ev_io accept_io;
	ev_timer wake;	 /* the policy's next wake time */
	ev_timer idle;	 /* --exit-idle: no mount for that long */
	ev_signal sigterm, sigint;
	GQueue clients;
	unsigned nclients, nmounts;
	int next_id;
	double exit_idle_s; /* 0: never */
	GArray *prio_uids;  /* uid_t allowed to raise their prio */
};

struct aclient {
	struct arbd *d;
	int fd;
	ev_io io;
	uid_t uid;
	struct ctl_inbuf in;
	GString *out;
	int id;		  /* > 0 once registered */
	char *group;
	char *mountpoint;
	bool reads;	  /* its reads are active */
	bool paused;	  /* paused through the arbiter */
	uint64_t rate_bps; /* its rate= as it last said (0: no cap) */
	bool closing;
	GList link;
};

static int64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * NSEC_PER_SEC + ts.tv_nsec;
}

static void client_free(struct aclient *c);
static void schedule(struct arbd *d);
static void flush_all(struct arbd *d);

static void send_line(struct aclient *c, GString *line)
{
	g_string_append_len(c->out, line->str, (gssize)line->len);
}

static void client_flush(struct aclient *c)
{
	if (ctl_outbuf_send(c->out, c->fd) < 0) {
		client_free(c);
		return;
	}
	if ((!c->out->len && c->closing) || c->out->len > ARB_OUT_MAX) {
		client_free(c);
		return;
	}
	ev_io_stop(c->d->loop, &c->io);
	ev_io_set(&c->io, c->fd, c->out->len ? EV_READ | EV_WRITE : EV_READ);
	ev_io_start(c->d->loop, &c->io);
}

static void reply_simple(struct aclient *c, const char *word)
{
	g_string_append(c->out, word);
	g_string_append_c(c->out, '\n');
}

static void reply_error(struct aclient *c, const char *code, const char *msg)
{
	g_autoptr(GString) l = g_string_new(NULL);

	ctl_begin(l, "error");
	ctl_add(l, "code", code);
	ctl_add(l, "msg", msg);
	ctl_end(l);
	send_line(c, l);
}

/* A protocol violation: one log line, one error line, then the close. */
static void violation(struct aclient *c, const char *what)
{
	sm_warn("client uid %u: %s: connection closed", (unsigned)c->uid, what);
	reply_error(c, "EPROTO", what);
	c->closing = true;
}

static struct aclient *mount_by_id(struct arbd *d, int id)
{
	for (GList *l = d->clients.head; l; l = l->next) {
		struct aclient *c = l->data;
		if (c->id == id)
			return c;
	}
	return NULL;
}

static unsigned group_size(struct arbd *d, const char *group)
{
	unsigned n = 0;

	for (GList *l = d->clients.head; l; l = l->next) {
		struct aclient *c = l->data;
		if (c->id > 0 && !strcmp(c->group, group))
			n++;
	}
	return n;
}

/* Tell every mount of group how many others it has. */
static void announce_peers(struct arbd *d, const char *group)
{
	unsigned n = group_size(d, group);

	for (GList *l = d->clients.head; l; l = l->next) {
		struct aclient *c = l->data;
		g_autoptr(GString) line = g_string_new(NULL);
		/* Not to one closing: nothing after its error line. */
		if (c->id <= 0 || c->closing || strcmp(c->group, group))
			continue;
		ctl_begin(line, "peers");
		ctl_add_u64(line, "n", n - 1);
		ctl_end(line);
		send_line(c, line);
	}
}

static void client_free(struct aclient *c)
{
	struct arbd *d = c->d;
	g_autofree char *group = c->group;

	ev_io_stop(d->loop, &c->io);
	close(c->fd);
	g_queue_unlink(&d->clients, &c->link);
	d->nclients--;
	if (c->id > 0) {
		arb_unregister(d->arb, c->id, mono_ns());
		d->nmounts--;
		sm_info("mount %d (%s) gone", c->id, c->mountpoint ? c->mountpoint : "?");
	}
	g_string_free(c->out, TRUE);
	g_free(c->mountpoint);
	if (c->id > 0) {
		announce_peers(d, group); /* written by the caller's flush_all */
		schedule(d);
	}
	if (!d->nmounts && d->exit_idle_s > 0)
		ev_timer_again(d->loop, &d->idle);
	g_free(c);
}

static bool may_raise_prio(struct arbd *d, uid_t uid)
{
	if (uid == 0)
		return true;
	for (guint i = 0; d->prio_uids && i < d->prio_uids->len; i++)
		if (g_array_index(d->prio_uids, uid_t, i) == uid)
			return true;
	return false;
}

static bool parse_class(const char *v, enum sched_class *out)
{
	if (!v)
		return true;
	if (!strcmp(v, "be"))
		*out = SCHED_CLASS_BE;
	else if (!strcmp(v, "idle"))
		*out = SCHED_CLASS_IDLE;
	else
		return false;
	return true;
}

static void do_register(struct aclient *c, const struct ctl_msg *m)
{
	struct arbd *d = c->d;
	const char *group = ctl_get(m, "group"), *cls_s = ctl_get(m, "class");
	uint64_t prio, weight;
	enum sched_class cls = SCHED_CLASS_BE;
	g_autoptr(GString) line = g_string_new(NULL);
	int id;

	if (c->id > 0) {
		violation(c, "register twice");
		return;
	}
	if (!group || !*group || strlen(group) > SCHED_GROUP_NAME_MAX ||
	    !ctl_get_u64(m, "prio", SCHED_PRIO_DEFAULT, &prio) || prio > SCHED_PRIO_MAX ||
	    !ctl_get_u64(m, "weight", SCHED_WEIGHT_DEFAULT, &weight) || !weight ||
	    weight > SCHED_WEIGHT_MAX || !parse_class(cls_s, &cls) ||
	    !ctl_get_u64(m, "rate", 0, &c->rate_bps)) {
		violation(c, "register: bad group, prio, class, weight or rate");
		return;
	}
	if (prio < SCHED_PRIO_DEFAULT && !may_raise_prio(d, c->uid))
		prio = SCHED_PRIO_DEFAULT;
	id = ++d->next_id;
	if (arb_register(d->arb, id, group, (unsigned)prio, cls, (unsigned)weight, mono_ns()) < 0) {
		violation(c, "register refused");
		return;
	}
	c->id = id;
	c->group = g_strdup(group);
	c->mountpoint = g_strndup(ctl_get(m, "mountpoint"), ARB_MOUNTPOINT_KEEP);
	d->nmounts++;
	ev_timer_stop(d->loop, &d->idle);
	sm_info("mount %d (%s) registered: group %s, prio %u, class %s, weight %u", id,
		c->mountpoint ? c->mountpoint : "?", group, (unsigned)prio,
		cls == SCHED_CLASS_IDLE ? "idle" : "be", (unsigned)weight);
	ctl_begin(line, "registered");
	ctl_add_i64(line, "id", id);
	ctl_add_u64(line, "prio", prio);
	ctl_add_u64(line, "peers", group_size(d, group) - 1);
	ctl_end(line);
	send_line(c, line);
	announce_peers(d, group);
}

/* The mount a control message names, if this client may change it. */
static struct aclient *target_of(struct aclient *c, const struct ctl_msg *m)
{
	int64_t id;
	struct aclient *t;

	if (!ctl_get(m, "id") || !ctl_get_i64(m, "id", 0, &id) || id <= 0 || id > INT32_MAX) {
		reply_error(c, "EINVAL", "id=N: the mount's id (see status)");
		return NULL;
	}
	t = mount_by_id(c->d, (int)id);
	if (!t) {
		reply_error(c, "ENOENT", "no such mount");
		return NULL;
	}
	if (c->uid != 0 && c->uid != t->uid) {
		reply_error(c, "EPERM", "not your mount");
		return NULL;
	}
	return t;
}

static void do_set(struct aclient *c, const struct ctl_msg *m)
{
	struct aclient *t = target_of(c, m);
	struct arb_mount_info info;
	uint64_t prio, weight, rate;
	enum sched_class cls;

	if (!t || arb_mount_info(c->d->arb, t->id, mono_ns(), &info) < 0)
		return;
	cls = info.cls;
	if (!ctl_get_u64(m, "rate", t->rate_bps, &rate) ||
	    (rate && rate < SCHED_RATE_MIN_BPS)) {
		reply_error(c, "EINVAL", "rate: bytes per second, at least 4096, or 0 for no cap");
		return;
	}
	if (!ctl_get_u64(m, "prio", info.prio, &prio) || prio > SCHED_PRIO_MAX) {
		reply_error(c, "EINVAL", "prio: 0 (highest) to 7");
		return;
	}
	if (!ctl_get_u64(m, "weight", info.weight, &weight) || !weight || weight > SCHED_WEIGHT_MAX) {
		reply_error(c, "EINVAL", "weight: 1 to 10000");
		return;
	}
	if (!parse_class(ctl_get(m, "class"), &cls)) {
		reply_error(c, "EINVAL", "class: be or idle");
		return;
	}
	if (prio < SCHED_PRIO_DEFAULT && prio < info.prio && !may_raise_prio(c->d, c->uid)) {
		reply_error(c, "EPERM", "only root (or a user the config allows) may raise a prio above 4");
		return;
	}
	arb_set(c->d->arb, t->id, (unsigned)prio, cls, (unsigned)weight, mono_ns());
	if (ctl_get(m, "rate")) {
		/* The mount's own token bucket enforces it (the grant order's
		 * contract, arbiter.c): tell it. */
		g_autoptr(GString) line = g_string_new(NULL);
		ctl_begin(line, "rate");
		ctl_add_u64(line, "bps", rate);
		ctl_end(line);
		send_line(t, line);
		t->rate_bps = rate;
	}
	sm_info("mount %d: prio %u, class %s, weight %u, rate %llu B/s (set by uid %u)", t->id,
		(unsigned)prio, cls == SCHED_CLASS_IDLE ? "idle" : "be", (unsigned)weight,
		(unsigned long long)t->rate_bps, (unsigned)c->uid);
	reply_simple(c, "ok");
}

static void do_status(struct aclient *c)
{
	int64_t now = mono_ns();

	for (GList *l = c->d->clients.head; l; l = l->next) {
		struct aclient *t = l->data;
		struct arb_mount_info i;
		g_autoptr(GString) line = g_string_new(NULL);

		if (t->id <= 0 || (c->uid != 0 && c->uid != t->uid) ||
		    arb_mount_info(c->d->arb, t->id, now, &i) < 0)
			continue;
		ctl_begin(line, "mount");
		ctl_add_i64(line, "id", t->id);
		ctl_add(line, "group", t->group);
		ctl_add_u64(line, "prio", i.prio);
		ctl_add(line, "class", i.cls == SCHED_CLASS_IDLE ? "idle" : "be");
		ctl_add_u64(line, "weight", i.weight);
		ctl_add_u64(line, "paused", i.paused);
		ctl_add_u64(line, "requesting", i.requesting);
		ctl_add_u64(line, "holds_grant", i.holds_grant);
		ctl_add_u64(line, "lease", i.lease);
		ctl_add_u64(line, "grants", i.grants);
		ctl_add_u64(line, "bytes", i.granted_bytes);
		ctl_add_i64(line, "waiting_ms", i.waiting_ns / NSEC_PER_MSEC);
		ctl_add_u64(line, "rate", t->rate_bps);
		ctl_add_u64(line, "uid", t->uid);
		ctl_add(line, "mountpoint", t->mountpoint ? t->mountpoint : "");
		ctl_end(line);
		send_line(c, line);
	}
	reply_simple(c, "ok");
}

static void handle(struct aclient *c, const struct ctl_msg *m)
{
	struct arbd *d = c->d;
	int64_t now = mono_ns();
	uint64_t bytes, flag;

	if (!strcmp(m->word, "register")) {
		do_register(c, m);
	} else if (!strcmp(m->word, "request") || !strcmp(m->word, "done") ||
		   !strcmp(m->word, "reads") || !strcmp(m->word, "rate")) {
		if (c->id <= 0) {
			violation(c, "request, done, reads or rate before register");
			return;
		}
		if (!strcmp(m->word, "request")) {
			uint64_t hold_ms;
			if (!ctl_get_u64(m, "bytes", 0, &bytes) || !ctl_get_u64(m, "urgent", 0, &flag) ||
			    flag > 1 || !ctl_get_u64(m, "hold_ms", 0, &hold_ms) ||
			    hold_ms > ARB_HOLD_MAX_MS ||
			    arb_read_bound(d->arb, c->id, (int64_t)hold_ms * NSEC_PER_MSEC) < 0 ||
			    arb_request(d->arb, c->id, bytes, flag, now) < 0)
				violation(c, "bad request");
		} else if (!strcmp(m->word, "rate")) {
			if (!ctl_get(m, "bps") || !ctl_get_u64(m, "bps", 0, &c->rate_bps))
				violation(c, "rate: bps=N");
		} else if (m->word[0] == 'd') {
			if (!ctl_get_u64(m, "bytes", 0, &bytes) || arb_done(d->arb, c->id, bytes, now) < 0)
				violation(c, "done without a grant");
		} else {
			if (!ctl_get_u64(m, "active", 0, &flag) || flag > 1) {
				violation(c, "reads: active=0|1");
				return;
			}
			if (flag && !c->reads)
				arb_read_begin(d->arb, c->id, now);
			else if (!flag && c->reads)
				arb_read_end(d->arb, c->id, now);
			c->reads = flag;
		}
	} else if (!strcmp(m->word, "ping")) {
		reply_simple(c, "pong");
	} else if (!strcmp(m->word, "status") && !m->nfields) {
		do_status(c);
	} else if (!strcmp(m->word, "set")) {
		do_set(c, m);
	} else if (!strcmp(m->word, "pause") || !strcmp(m->word, "resume")) {
		struct aclient *t = target_of(c, m);
		if (t) {
			bool on = m->word[0] == 'p';
			arb_pause(d->arb, t->id, on, now);
			if (on != t->paused) {
				/* So its own status says why nothing moves. */
				reply_simple(t, on ? "paused on=1" : "paused on=0");
				t->paused = on;
				sm_info("mount %d: %s by uid %u", t->id, on ? "paused" : "resumed",
					(unsigned)c->uid);
			}
			reply_simple(c, "ok");
		}
	} else {
		violation(c, "unknown message");
	}
}

/* ctl_inbuf_recv's: each line, until the client is to be closed. */
static bool client_line(void *arg, const char *line, size_t len)
{
	struct aclient *c = arg;
	struct ctl_msg m;

	if (c->closing)
		return false;
	/* Lines of "status" would each add every mount's line before
	 * client_flush looks: stop at the bound it would close at. */
	if (c->out->len > ARB_OUT_MAX) {
		violation(c, "replies not read");
		return false;
	}
	if (ctl_parse(line, len, &m) < 0)
		violation(c, "malformed line");
	else
		handle(c, &m);
	ctl_msg_clear(&m);
	return !c->closing;
}

static void client_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct aclient *c = w->data;
	struct arbd *d = c->d;

	if (revents & EV_READ) {
		int r = ctl_inbuf_recv(&c->in, c->fd, client_line, c);

		if (r <= 0 && r != -EMSGSIZE) {
			client_free(c);
			return;
		}
		if (r == -EMSGSIZE && !c->closing)
			violation(c, "line too long");
		schedule(d);
	}
	flush_all(d);
}

/* Start writing to every client with output waiting. */
static void flush_all(struct arbd *d)
{
	GList *next;

	for (GList *l = d->clients.head; l; l = next) {
		struct aclient *c = l->data;
		next = l->next;
		if (c->out->len || c->closing)
			client_flush(c); /* may free c: next was taken before */
	}
}

/* Hand out every grant the policy gives now; arm the timer for the next. */
static void schedule(struct arbd *d)
{
	int64_t now = mono_ns(), wake = INT64_MAX;
	int id;

	while ((id = arb_next(d->arb, now, &wake)) > 0) {
		struct aclient *c = mount_by_id(d, id);
		/* Closing (after a violation): nothing more after its error line;
		 * client_free gives the grant back when it goes. */
		if (!c || c->closing)
			continue;
		struct arb_mount_info i;
		arb_mount_info(d->arb, id, now, &i);
		ctl_begin(c->out, "grant");
		ctl_add_u64(c->out, "moved", i.moved);
		if (i.lease)
			ctl_add_u64(c->out, "lease", 1);
		ctl_end(c->out);
	}
	/* Leases that must end: their holder stops, and its done frees the group. */
	while ((id = arb_next_revoke(d->arb)) > 0) {
		struct aclient *c = mount_by_id(d, id);
		if (c && !c->closing)
			reply_simple(c, "revoke");
	}
	ev_timer_stop(d->loop, &d->wake);
	if (wake != INT64_MAX) {
		double s = wake > now ? (double)(wake - now) / 1e9 : 0.;
		ev_timer_set(&d->wake, s + 1e-4, 0.);
		ev_timer_start(d->loop, &d->wake);
	}
}

static void wake_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	schedule(w->data);
	flush_all(w->data);
}

static void idle_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct arbd *d = w->data;

	if (!d->nmounts) {
		sm_info("no mount for %.0f s: exiting", d->exit_idle_s);
		ev_break(loop, EVBREAK_ALL);
	}
}

static void signal_cb(struct ev_loop *loop, ev_signal *w, int revents)
{
	ev_break(loop, EVBREAK_ALL);
}

static void accept_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct arbd *d = w->data;
	struct ucred cred;
	socklen_t len = sizeof(cred);
	struct aclient *c;
	int fd = accept4(d->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

	if (fd < 0)
		return;
	if (d->nclients >= ARB_CLIENTS_MAX ||
	    getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
		close(fd);
		return;
	}
	c = g_new0(struct aclient, 1);
	c->d = d;
	c->fd = fd;
	c->uid = cred.uid;
	c->out = g_string_new(NULL);
	c->link.data = c;
	g_queue_push_tail_link(&d->clients, &c->link);
	d->nclients++;
	ev_io_init(&c->io, client_cb, fd, EV_READ);
	c->io.data = c;
	ev_io_start(loop, &c->io);
	g_string_append_printf(c->out, "slowmedia-arbiter version=%d pid=%d\n", ARB_VERSION,
			       (int)getpid());
	client_flush(c);
}

/* --- start-up ------------------------------------------------------------- */

static int load_config(struct arbd *d, const char *path)
{
	g_autoptr(GKeyFile) kf = g_key_file_new();
	g_autoptr(GError) err = NULL;
	g_auto(GStrv) users = NULL;

	if (!g_key_file_load_from_file(kf, path, G_KEY_FILE_NONE, &err)) {
		fprintf(stderr, "slowmedia-arbiterd: %s: %s\n", path, err->message);
		return -1;
	}
	users = g_key_file_get_string_list(kf, "prio", "allow_users", NULL, NULL);
	d->prio_uids = g_array_new(FALSE, FALSE, sizeof(uid_t));
	for (char **u = users; u && *u; u++) {
		struct passwd *pw = getpwnam(g_strstrip(*u));
		char *e;
		unsigned long n = strtoul(*u, &e, 10);
		uid_t uid;
		if (pw) {
			uid = pw->pw_uid;
		} else if (**u && !*e) {
			uid = (uid_t)n;
		} else {
			fprintf(stderr, "slowmedia-arbiterd: %s: [prio] allow_users: no user '%s'\n",
				path, *u);
			return -1;
		}
		g_array_append_val(d->prio_uids, uid);
	}
	return 0;
}

/* The socket from systemd, if we were started with one. */
static int listen_fd_from_systemd(void)
{
	const char *pid = getenv("LISTEN_PID"), *fds = getenv("LISTEN_FDS");

	if (!pid || !fds || strtol(pid, NULL, 10) != getpid() || strtol(fds, NULL, 10) < 1)
		return -1;
	unsetenv("LISTEN_PID");
	unsetenv("LISTEN_FDS");
	fcntl(SD_LISTEN_FDS_START, F_SETFD, FD_CLOEXEC);
	fcntl(SD_LISTEN_FDS_START, F_SETFL, fcntl(SD_LISTEN_FDS_START, F_GETFL) | O_NONBLOCK);
	return SD_LISTEN_FDS_START;
}

/* 0 with the lock held, 1 when another arbiter holds it, -errno. */
static int take_lock(const char *sock)
{
	g_autofree char *lock = g_strconcat(sock, ".lock", NULL);
	int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);

	if (fd < 0)
		return -errno;
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		int e = errno;
		close(fd);
		return e == EWOULDBLOCK ? 1 : -e;
	}
	return 0; /* fd stays open (and locked) for our lifetime */
}

static int bind_socket(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	unlink(path); /* ours: we hold the lock */
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || chmod(path, 0666) < 0 ||
	    listen(fd, 64) < 0) {
		int e = -errno;
		close(fd);
		return e;
	}
	return fd;
}

static void usage(FILE *out)
{
	fprintf(out,
		"usage: slowmedia-arbiterd [-f] [--socket PATH] [--config FILE] [--exit-idle S]\n"
		"The shared flush arbiter of slowmedia mounts (see slowmedia-arbiterd(8)).\n"
		"  -f, --foreground   stay in the foreground, log to stderr\n"
		"  --socket PATH      listen on PATH (default " ARB_SOCKET_DEFAULT ")\n"
		"  --config FILE      [prio] allow_users=a;b: users who may take prio < 4\n"
		"  --exit-idle S      exit after S seconds without any mount (mounts that\n"
		"                     start it use 60)\n"
		"  -d, --debug        debug log\n"
		"  -h, --help, -V, --version\n");
}

int main(int argc, char *argv[])
{
	static const struct option longopts[] = {
	    {"foreground", no_argument, NULL, 'f'}, {"socket", required_argument, NULL, 's'},
	    {"config", required_argument, NULL, 'c'}, {"exit-idle", required_argument, NULL, 'i'},
	    {"debug", no_argument, NULL, 'd'},	     {"help", no_argument, NULL, 'h'},
	    {"version", no_argument, NULL, 'V'},     {0}};
	struct arbd d = {.lfd = -1};
	bool activated;
	const char *sock = ARB_SOCKET_DEFAULT, *config = NULL;
	bool fg = false, debug = false;
	int opt, r;

	/* Whatever fds the starter left us (a mount's lower, say) would keep
	 * them busy as long as we run; systemd's sockets start at 3. */
	{
		const char *nfds = getenv("LISTEN_FDS");
		long keep = nfds ? strtol(nfds, NULL, 10) : 0;
		close_range((unsigned)(SD_LISTEN_FDS_START + MAX(keep, 0)), ~0u, 0);
	}
	while ((opt = getopt_long(argc, argv, "fdhV", longopts, NULL)) != -1) {
		switch (opt) {
		case 'f': fg = true; break;
		case 'd': debug = true; break;
		case 's': sock = optarg; break;
		case 'c': config = optarg; break;
		case 'i': {
			char *e;
			d.exit_idle_s = strtod(optarg, &e);
			if (*e || d.exit_idle_s < 0) {
				fprintf(stderr, "slowmedia-arbiterd: --exit-idle %s: seconds\n", optarg);
				return 2;
			}
			break;
		}
		case 'h': usage(stdout); return 0;
		case 'V': printf("slowmedia-arbiterd version %s\n", SLOWMEDIA_VERSION); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "slowmedia-arbiterd: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	if (config && load_config(&d, config) < 0)
		return 1;
	sm_log_init("slowmedia-arbiterd", debug);
	d.lfd = listen_fd_from_systemd();
	activated = d.lfd >= 0;
	if (!activated) {
		g_autofree char *dir = g_path_get_dirname(sock);
		if (g_mkdir_with_parents(dir, 0755) < 0) {
			fprintf(stderr, "slowmedia-arbiterd: %s: %s\n", dir, g_strerror(errno));
			return 1;
		}
		r = take_lock(sock);
		if (r == 1) {
			if (fg)
				fprintf(stderr, "slowmedia-arbiterd: another arbiter serves %s\n", sock);
			return 0;
		}
		if (r == 0)
			r = d.lfd = bind_socket(sock);
		if (r < 0) {
			fprintf(stderr, "slowmedia-arbiterd: %s: %s\n", sock, g_strerror(-r));
			return 1;
		}
	}
	if (!fg) {
		/* Daemonized, stderr is /dev/null: the log goes where the mount's
		 * does (sm_log_choose: syslog, the journal, or a file), chosen
		 * before the fork. Without one it serves on, unlogged: mounts are
		 * better off with an arbiter than without. */
		if (sm_log_choose() < 0)
			fprintf(stderr, "slowmedia-arbiterd: serving without a log\n");
		if (daemon(0, 0) < 0) {
			fprintf(stderr, "slowmedia-arbiterd: daemon: %s\n", g_strerror(errno));
			return 1;
		}
		sm_log_start();
	}
	signal(SIGPIPE, SIG_IGN);
	{ /* a starter's mask may block everything (a mount's thread does) */
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
	}
	d.arb = arb_new(NULL);
	d.loop = ev_default_loop(EVFLAG_AUTO);
	ev_io_init(&d.accept_io, accept_cb, d.lfd, EV_READ);
	d.accept_io.data = &d;
	ev_io_start(d.loop, &d.accept_io);
	ev_init(&d.wake, wake_cb);
	d.wake.data = &d;
	ev_init(&d.idle, idle_cb);
	d.idle.repeat = d.exit_idle_s;
	d.idle.data = &d;
	if (d.exit_idle_s > 0)
		ev_timer_again(d.loop, &d.idle);
	ev_signal_init(&d.sigterm, signal_cb, SIGTERM);
	ev_signal_start(d.loop, &d.sigterm);
	ev_signal_init(&d.sigint, signal_cb, SIGINT);
	ev_signal_start(d.loop, &d.sigint);
	sm_info("serving %s", sock);
	ev_run(d.loop, 0);
	while (d.clients.head)
		client_free(d.clients.head->data);
	close(d.lfd);
	if (!activated)
		unlink(sock);
	arb_free(d.arb);
	if (d.prio_uids)
		g_array_free(d.prio_uids, TRUE);
	return 0;
}
