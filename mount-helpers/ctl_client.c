/*
 * The client side of the control socket (ctl_client.h), shared by
 * slowmediactl and the umount helpers.
 *
 * DESIGN. Nothing here may hang on a daemon that stopped answering: connects
 * are non-blocking (a listener whose backlog is full makes a blocking
 * connect wait for ever), every read has a deadline, and a search gives each
 * socket CTLC_CONNECT_TIMEOUT_MS. A mount is found by asking every socket in
 * the control directories for its status and matching the "mountpoint"
 * field, so a lazily unmounted mount whose daemon still drains is found by
 * its old path; only when nobody claims the path does /proc/self/mountinfo
 * tell the user what the path is instead (no mount, another filesystem, a
 * slowmedia mount whose daemon is gone or belongs to somebody else).
 * ctlc_drain catches SIGINT and SIGTERM while it runs (the flag is checked
 * between lines; poll returns EINTR, and at worst the next progress record,
 * interval_ms later, ends the wait) and leaves the mount as it is.
 */
#include "ctl_client.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>


#define DRAIN_BAR_CELLS 30
#define DRAIN_RATE_MIN_MS 1000 /* before that, the daemon's rate */
#define ERRNO_SCAN_MAX 512

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void set_why(char **why, const char *fmt, ...) G_GNUC_PRINTF(2, 3);
static void set_why(char **why, const char *fmt, ...)
{
	va_list ap;

	if (!why)
		return;
	g_free(*why);
	va_start(ap, fmt);
	*why = g_strdup_vprintf(fmt, ap);
	va_end(ap);
}

/* ---- errno names ---- */

int ctlc_errno_from_name(const char *name)
{
	static const struct {
		const char *name;
		int err;
	} aliases[] = {
	    {"ENOTSUP", ENOTSUP}, {"EWOULDBLOCK", EWOULDBLOCK}, {"EDEADLOCK", EDEADLK}};

	if (!name || !*name)
		return 0;
	for (size_t i = 0; i < G_N_ELEMENTS(aliases); i++)
		if (!strcmp(name, aliases[i].name))
			return aliases[i].err;
	for (int e = 1; e < ERRNO_SCAN_MAX; e++) {
		const char *n = strerrorname_np(e);
		if (n && !strcmp(n, name))
			return e;
	}
	return 0;
}

const char *ctlc_errno_name(int err)
{
	if (err < 0)
		err = -err;
	if (err == ENOTSUP)
		return "ENOTSUP"; /* as the protocol spells it, not EOPNOTSUPP */
	return strerrorname_np(err);
}

/* ---- display helpers ---- */

char *ctlc_fmt_size(uint64_t bytes)
{
	static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
	double v = (double)bytes;
	unsigned u = 0;

	if (bytes < 1024)
		return g_strdup_printf("%" G_GUINT64_FORMAT " B", bytes);
	v /= 1024;
	while (v >= 1023.95 && u + 1 < G_N_ELEMENTS(units)) {
		v /= 1024;
		u++;
	}
	return g_strdup_printf("%.1f %s", v, units[u]);
}

char *ctlc_fmt_eta(int64_t secs)
{
	if (secs < 0)
		return g_strdup("?");
	if (secs >= 3600)
		return g_strdup_printf("%" G_GINT64_FORMAT ":%02d:%02d", secs / 3600,
				       (int)(secs / 60 % 60), (int)(secs % 60));
	return g_strdup_printf("%d:%02d", (int)(secs / 60), (int)(secs % 60));
}

char *ctlc_fmt_bar(double frac, int width)
{
	GString *s = g_string_sized_new((gsize)width + 2);
	int full;

	if (!(frac >= 0)) /* NaN too */
		frac = 0;
	if (frac > 1)
		frac = 1;
	full = (int)(frac * width + 0.5);
	g_string_append_c(s, '[');
	for (int i = 0; i < width; i++)
		g_string_append_c(s, i < full ? '#' : '.');
	g_string_append_c(s, ']');
	return g_string_free(s, FALSE);
}

/* Printed as is: valid UTF-8 that is not a control character. */
static bool printable(gunichar c)
{
	return c != (gunichar)-1 && c != (gunichar)-2 && c >= 0x20 && c != 0x7f &&
	       !(c >= 0x80 && c < 0xa0);
}

char *ctlc_fmt_text(const char *s)
{
	GString *o = g_string_new(NULL);
	const char *end = s + strlen(s);

	while (s < end) {
		gunichar c = g_utf8_get_char_validated(s, end - s);
		const char *n = printable(c) ? g_utf8_next_char(s) : s + 1;

		if (!printable(c) && c >= 0x80 && c < 0xa0)
			n = g_utf8_next_char(s); /* a C1 control: each of its bytes */
		if (!printable(c)) {
			for (; s < n; s++)
				g_string_append_printf(o, "\\x%02X", (unsigned char)*s);
			continue;
		}
		if (c == '\\')
			g_string_append_c(o, '\\');
		g_string_append_len(o, s, n - s);
		s = n;
	}
	return g_string_free(o, FALSE);
}

/* ---- connections ---- */

static void msg_free(gpointer p)
{
	ctl_msg_clear(p);
	g_free(p);
}

/* A heap copy of m, which is left empty. */
static struct ctl_msg *msg_steal(struct ctl_msg *m)
{
	struct ctl_msg *k = g_new(struct ctl_msg, 1);

	*k = *m;
	memset(m, 0, sizeof(*m));
	return k;
}

static pid_t sock_pid(const char *sock_path)
{
	g_autofree char *base = g_path_get_basename(sock_path);

	return (pid_t)g_ascii_strtoll(base + strlen(CTL_SOCKET_PREFIX), NULL, 10);
}

/* What a failed read of the daemon's answer means to the user. */
static int read_failed(int r, const struct ctl_conn *c, int timeout_ms, char **why)
{
	switch (r) {
	case -ETIMEDOUT:
		set_why(why, "the daemon (pid %d) did not answer within %.1f s",
			(int)c->pid, timeout_ms / 1000.0);
		return -EHOSTDOWN;
	case -ECONNRESET:
		set_why(why, "the daemon (pid %d) closed the connection", (int)c->pid);
		return r;
	case -EPROTO:
		set_why(why, "the daemon (pid %d) sent a line longer than %d bytes",
			(int)c->pid, CTL_LINE_MAX);
		return r;
	case -EINTR:
		return r;
	default:
		set_why(why, "reading from the daemon (pid %d): %s", (int)c->pid,
			g_strerror(-r));
		return r;
	}
}

/* 1 for a record; 0 for "ok"; for "error" -errno, its message in *why. */
static int final_line(const struct ctl_msg *m, char **why)
{
	const char *code, *msg;
	int err;

	if (!strcmp(m->word, "ok"))
		return 0;
	if (strcmp(m->word, "error"))
		return 1;
	code = ctl_get(m, "code");
	msg = ctl_get(m, "msg");
	err = ctlc_errno_from_name(code);
	if (!err) {
		set_why(why, "the daemon answered an unknown error '%s'%s%s",
			code ? code : "", msg ? ": " : "", msg ? msg : "");
		return -EPROTO;
	}
	set_why(why, "%s", msg && *msg ? msg : g_strerror(err));
	return -err;
}

static int parse_line(const struct ctl_conn *c, const char *line, int n,
		      struct ctl_msg *m, char **why)
{
	int r = ctl_parse(line, (size_t)n, m);

	if (r < 0)
		set_why(why, "the daemon (pid %d) sent a malformed line", (int)c->pid);
	return r;
}

/*
 * ctl_connect, with a message for each way it fails and the greeting's
 * "error" understood: a daemon that refuses our uid may say so instead of
 * greeting.
 */
static int conn_open(struct ctl_conn *c, const char *path, int timeout_ms, char **why)
{
	int64_t deadline = mono_ms() + timeout_ms;
	char line[CTL_LINE_MAX + 1];
	struct ctl_msg m;
	uint64_t version = 0, pid = 0;
	pid_t owner = sock_pid(path);
	int r = ctl_connect_sock(c, path, timeout_ms), n;

	c->pid = owner;
	if (r == -ENAMETOOLONG) {
		set_why(why, "%s: socket path too long", path);
		return r;
	}
	if (r == -EHOSTDOWN) {
		set_why(why, "the daemon (pid %d) accepts no connections", (int)owner);
		return r;
	}
	if (r < 0) {
		set_why(why, "%s: %s", path, g_strerror(-r));
		return r;
	}
	n = ctl_read_line(c, line, (int)MAX(0, deadline - mono_ms()));
	if (n < 0) {
		r = read_failed(n, c, timeout_ms, why);
		goto fail;
	}
	r = parse_line(c, line, n, &m, why);
	if (r == 0 && !strcmp(m.word, "error")) {
		r = final_line(&m, why);
		r = r == 0 ? -EPROTO : r;
	} else if (r == 0 && (strcmp(m.word, "slowmedia-ctl") ||
			      !ctl_get_u64(&m, "version", 0, &version) ||
			      !ctl_get_u64(&m, "pid", 0, &pid))) {
		set_why(why, "%s does not speak the slowmedia control protocol", path);
		r = -EPROTO;
	} else if (r == 0 && version != CTL_VERSION) {
		set_why(why,
			"the daemon (pid %d) speaks control protocol version "
			"%" G_GUINT64_FORMAT ", this tool version %d",
			(int)pid, version, CTL_VERSION);
		r = -EPROTO;
	}
	ctl_msg_clear(&m);
	if (r < 0)
		goto fail;
	c->pid = (pid_t)pid;
	return 0;
fail:
	ctl_close(c);
	return r;
}

typedef void (*record_fn)(void *ud, struct ctl_msg *m);

/* Read the answer to one request: records to on_record (which may steal them). */
static int read_answer(struct ctl_conn *c, int timeout_ms, record_fn on_record, void *ud,
		       bool *answered, char **why)
{
	char line[CTL_LINE_MAX + 1];

	for (;;) {
		struct ctl_msg m;
		int n = ctl_read_line(c, line, timeout_ms), r;

		if (n < 0)
			return read_failed(n, c, timeout_ms, why);
		r = parse_line(c, line, n, &m, why);
		if (r == 0 && answered)
			*answered = !strcmp(m.word, "error");
		if (r == 0)
			r = final_line(&m, why);
		if (r == 1 && on_record)
			on_record(ud, &m);
		ctl_msg_clear(&m);
		if (r != 1)
			return r;
	}
}

static int send_line(struct ctl_conn *c, const char *line, char **why)
{
	int r = ctl_send(c, line);

	if (r < 0)
		set_why(why, "sending to the daemon (pid %d): %s", (int)c->pid,
			g_strerror(-r));
	return r;
}

int ctlc_request_ex(const char *sock_path, const char *line, bool *answered, char **why)
{
	struct ctl_conn c;
	int r;

	if (answered)
		*answered = false;
	r = conn_open(&c, sock_path, CTLC_CONNECT_TIMEOUT_MS, why);
	if (r < 0)
		return r;
	r = send_line(&c, line, why);
	if (r == 0)
		r = read_answer(&c, CTLC_ANSWER_TIMEOUT_MS, NULL, NULL, answered, why);
	ctl_close(&c);
	return r;
}

int ctlc_request(const char *sock_path, const char *line, char **why)
{
	return ctlc_request_ex(sock_path, line, NULL, why);
}

/* ---- status ---- */

void ctlc_mount_free(struct ctlc_mount *m)
{
	if (!m)
		return;
	g_free(m->sock_path);
	ctl_msg_clear(&m->status);
	if (m->file_errors)
		g_ptr_array_unref(m->file_errors);
	g_free(m);
}

static void status_record(void *ud, struct ctl_msg *m)
{
	struct ctlc_mount *out = ud;

	if (!strcmp(m->word, "mount") && !out->status.word) {
		out->status = *m;
		memset(m, 0, sizeof(*m));
	} else if (!strcmp(m->word, "file-error"))
		g_ptr_array_add(out->file_errors, msg_steal(m));
}

int ctlc_status(const char *sock_path, int timeout_ms, struct ctlc_mount **out,
		char **why)
{
	struct ctlc_mount *m;
	struct ctl_conn c;
	int r = conn_open(&c, sock_path, timeout_ms, why);

	*out = NULL;
	if (r < 0)
		return r;
	m = g_new0(struct ctlc_mount, 1);
	m->sock_path = g_strdup(sock_path);
	m->file_errors = g_ptr_array_new_with_free_func(msg_free);
	r = send_line(&c, "status\n", why);
	if (r == 0)
		r = read_answer(&c, timeout_ms, status_record, m, NULL, why);
	if (r == 0 && !m->status.word) {
		set_why(why, "the daemon (pid %d) answered status without a mount record",
			(int)c.pid);
		r = -EPROTO;
	}
	ctl_close(&c);
	if (r < 0) {
		ctlc_mount_free(m);
		return r;
	}
	*out = m;
	return 0;
}

static void mount_free(gpointer p)
{
	ctlc_mount_free(p);
}

int ctlc_all_mounts(GPtrArray **mounts, GPtrArray **problems)
{
	g_autoptr(GPtrArray) socks = ctl_list_sockets();

	*mounts = g_ptr_array_new_with_free_func(mount_free);
	if (problems)
		*problems = g_ptr_array_new_with_free_func(g_free);
	for (guint i = 0; i < socks->len; i++) {
		g_autofree char *why = NULL;
		struct ctlc_mount *m;
		int r = ctlc_status(socks->pdata[i], CTLC_CONNECT_TIMEOUT_MS, &m, &why);

		if (r == 0)
			g_ptr_array_add(*mounts, m);
		else if (r != -ECONNREFUSED && r != -ENOENT && r != -EACCES && problems)
			g_ptr_array_add(*problems,
					g_strdup_printf("%s: %s", (char *)socks->pdata[i],
							why ? why : g_strerror(-r)));
	}
	return 0;
}

int ctlc_all(GPtrArray **sock_paths, GPtrArray **statuses)
{
	g_autoptr(GPtrArray) mounts = NULL;
	int r = ctlc_all_mounts(&mounts, NULL);

	if (r < 0)
		return r;
	*sock_paths = g_ptr_array_new_with_free_func(g_free);
	*statuses = g_ptr_array_new_with_free_func(msg_free);
	for (guint i = 0; i < mounts->len; i++) {
		struct ctlc_mount *m = mounts->pdata[i];
		g_ptr_array_add(*sock_paths, g_strdup(m->sock_path));
		g_ptr_array_add(*statuses, msg_steal(&m->status));
	}
	return 0;
}

/* ---- finding a mount ---- */

/* mountinfo's octal escapes (\040 for a space...), in place. */
static void unescape_octal(char *s)
{
	char *o = s;

	for (; *s; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' &&
		    s[2] <= '7' && s[3] >= '0' && s[3] <= '7') {
			*o++ =
			    (char)((s[1] - '0') << 6 | (s[2] - '0') << 3 | (s[3] - '0'));
			s += 3;
		} else {
			*o++ = *s;
		}
	}
	*o = '\0';
}

struct mnt_info {
	char *fstype;	 /* of the topmost mount on the path itself, else NULL */
	char *super;	 /* its super options */
	char *enclosing; /* else the mount point the path is inside */
	char *enc_fstype;
};

static void mnt_info_clear(struct mnt_info *mi)
{
	g_free(mi->fstype);
	g_free(mi->super);
	g_free(mi->enclosing);
	g_free(mi->enc_fstype);
}

static bool under(const char *path, const char *dir)
{
	size_t n = strlen(dir);

	if (!strcmp(dir, "/"))
		return true;
	return !strncmp(path, dir, n) && (path[n] == '/' || path[n] == '\0');
}

static void mountinfo_lookup(const char *path, struct mnt_info *mi)
{
	g_autofree char *text = NULL;
	g_auto(GStrv) lines = NULL;

	memset(mi, 0, sizeof(*mi));
	if (!g_file_get_contents("/proc/self/mountinfo", &text, NULL, NULL))
		return;
	lines = g_strsplit(text, "\n", -1);
	for (char **l = lines; *l && **l; l++) {
		g_auto(GStrv) f = g_strsplit(*l, " ", -1);
		guint n = g_strv_length(f), dash;

		for (dash = 6; dash < n && strcmp(f[dash], "-"); dash++)
			;
		if (dash + 3 >= n) /* fstype, source, super options */
			continue;
		unescape_octal(f[4]);
		if (!strcmp(f[4], path)) { /* later lines are mounted on top */
			g_free(mi->fstype);
			g_free(mi->super);
			mi->fstype = g_strdup(f[dash + 1]);
			mi->super = g_strdup(f[dash + 3]);
		} else if (under(path, f[4]) &&
			   (!mi->enclosing || strlen(f[4]) >= strlen(mi->enclosing))) {
			g_free(mi->enclosing);
			g_free(mi->enc_fstype);
			mi->enclosing = g_strdup(f[4]);
			mi->enc_fstype = g_strdup(f[dash + 1]);
		}
	}
}

static bool is_slowmedia_type(const char *fstype)
{
	return fstype && !strcmp(fstype, "fuse.slowmedia");
}

static long super_user_id(const char *super)
{
	const char *p = super ? strstr(super, "user_id=") : NULL;

	return p ? strtol(p + strlen("user_id="), NULL, 10) : -1;
}

/*
 * The path with its parent resolved and its last name kept, without looking
 * at the last component itself: when it is a mount point, a stat would be a
 * request to its daemon, which may be hung (a stopped daemon would hang us),
 * dead (ENOTCONN) or another user's (EACCES). NULL when the name is "." or
 * ".." or the parent does not resolve.
 */
static char *resolve_parent(const char *path)
{
	g_autofree char *dir = g_path_get_dirname(path),
			*base = g_path_get_basename(path);
	char *rd, *r;

	if (!strcmp(base, ".") || !strcmp(base, "..") || !strcmp(base, "/") ||
	    !(rd = realpath(dir, NULL)))
		return NULL;
	r = g_build_filename(rd, base, NULL);
	free(rd);
	return r;
}

/*
 * The path fully resolved. *missing: it does not exist (the result is its
 * lexical absolute form then, to match a detached mount whose directory is
 * gone); NULL with *err for other failures.
 */
static char *resolve(const char *path, bool *missing, int *err)
{
	char *r = realpath(path, NULL);

	*missing = false;
	*err = 0;
	if (r)
		return r;
	if (errno == ENOENT || errno == ENOTDIR) {
		*missing = true;
		return g_canonicalize_filename(path, NULL);
	}
	*err = -errno;
	return NULL;
}

struct search {
	GPtrArray *answers; /* struct ctlc_mount * */
	unsigned denied, hung;
	pid_t hung_pid;
};

/* Ask every socket once. */
static void search_start(struct search *s)
{
	g_autoptr(GPtrArray) socks = ctl_list_sockets();

	memset(s, 0, sizeof(*s));
	s->answers = g_ptr_array_new_with_free_func(mount_free);
	for (guint i = 0; i < socks->len; i++) {
		struct ctlc_mount *m;
		int r = ctlc_status(socks->pdata[i], CTLC_CONNECT_TIMEOUT_MS, &m, NULL);

		if (r == 0) {
			g_ptr_array_add(s->answers, m);
		} else if (r == -EACCES || r == -EPERM) {
			s->denied++;
		} else if (r == -EHOSTDOWN) {
			s->hung++;
			s->hung_pid = sock_pid(socks->pdata[i]);
		} /* else stale: skipped */
	}
}

/* The daemon claiming path (taken out of the answers), preferring one whose
 * mount is still attached. */
static struct ctlc_mount *search_match(struct search *s, const char *path)
{
	int best = -1;

	for (guint i = 0; path && i < s->answers->len; i++) {
		const struct ctlc_mount *m = s->answers->pdata[i];
		const char *mp = ctl_get(&m->status, "mountpoint");
		const char *state = ctl_get(&m->status, "state");

		if (!mp || strcmp(mp, path))
			continue;
		if (best < 0 || (state && !g_str_has_prefix(state, "detached")))
			best = (int)i;
	}
	return best < 0 ? NULL : g_ptr_array_steal_index(s->answers, (guint)best);
}

/* Nobody claims real: say what it is. */
static int not_found(const char *real, bool missing, const struct search *s, char **why)
{
	g_autofree char *shown = ctlc_fmt_text(real);
	g_autofree char *dir = ctl_dir_for(geteuid());
	struct mnt_info mi;
	int r = -ENOENT;

	if (missing) {
		set_why(why, "%s: no such file or directory", shown);
		return -ENOENT;
	}
	mountinfo_lookup(real, &mi);
	if (is_slowmedia_type(mi.fstype)) {
		long owner = super_user_id(mi.super);
		if (s->hung) {
			set_why(why,
				"%s: its daemon is not answering (pid %d did not answer "
				"in %.1f s)",
				shown, (int)s->hung_pid,
				CTLC_CONNECT_TIMEOUT_MS / 1000.0);
			r = -EHOSTDOWN;
		} else if (s->denied ||
			   (geteuid() != 0 && owner >= 0 && owner != (long)geteuid())) {
			set_why(why,
				"%s: permission denied: the slowmedia mount belongs to "
				"uid %ld",
				shown, owner);
			r = -EACCES;
		} else {
			set_why(why,
				"%s: its slowmedia daemon is gone (no control socket in "
				"%s answers for it)",
				shown, dir);
			r = -ECONNREFUSED;
		}
	} else if (mi.fstype) {
		set_why(why, "%s is a %s mount, not a slowmedia one", shown, mi.fstype);
	} else if (mi.enclosing && is_slowmedia_type(mi.enc_fstype)) {
		g_autofree char *enc = ctlc_fmt_text(mi.enclosing);
		set_why(why,
			"%s is not a mount point (it is inside the slowmedia mount %s)",
			shown, enc);
	} else {
		set_why(why, "%s is not a mount point", shown);
	}
	mnt_info_clear(&mi);
	return r;
}

static bool is_mount_point(const char *path)
{
	struct mnt_info mi;
	bool r;

	mountinfo_lookup(path, &mi);
	r = mi.fstype != NULL;
	mnt_info_clear(&mi);
	return r;
}

int ctlc_find_mount(const char *mountpoint, struct ctlc_mount **out, char **why)
{
	g_autofree char *cheap = resolve_parent(mountpoint), *real = NULL;
	struct search s;
	bool missing = false;
	int err = 0, r = -ENOENT;

	search_start(&s);
	*out = search_match(&s, cheap);
	if (*out)
		goto done;
	if (cheap && is_mount_point(cheap)) { /* a mount nobody claims: do not enter it */
		r = not_found(cheap, false, &s, why);
		goto done;
	}
	real = resolve(mountpoint, &missing, &err);
	if (!real) {
		g_autofree char *shown = ctlc_fmt_text(mountpoint);
		set_why(why, "%s: %s", shown, g_strerror(-err));
		r = err == -EACCES ? -EACCES : -ENOENT;
		goto done;
	}
	*out = search_match(&s, real);
	if (!*out)
		r = not_found(real, missing, &s, why);
done:
	g_ptr_array_unref(s.answers);
	return *out ? 0 : r;
}

int ctlc_find(const char *mountpoint, char **sock_path, struct ctl_msg *status,
	      char **why)
{
	struct ctlc_mount *m;
	int r = ctlc_find_mount(mountpoint, &m, why);

	if (r < 0)
		return r;
	*sock_path = g_steal_pointer(&m->sock_path);
	*status = m->status;
	memset(&m->status, 0, sizeof(m->status));
	ctlc_mount_free(m);
	return 0;
}

/* ---- drain ---- */

static volatile sig_atomic_t drain_signal;

static void on_drain_signal(int sig)
{
	drain_signal = sig;
}

struct drain_view {
	FILE *out;
	bool tty, drawn;
	uint64_t max_queued, queued, files;
	int64_t last_line_ms;
	/* the first progress record's time and written_bytes: the rate seen */
	int64_t t0_ms;
	uint64_t written0;
	bool have_written;
};

/* The rate the queue really goes out at during this drain (the daemon's
 * flush_rate is the medium's measured bandwidth, before any rate= cap). */
static uint64_t seen_rate(struct drain_view *v, const struct ctl_msg *m, int64_t now)
{
	uint64_t w;

	if (!m || !ctl_get(m, "written_bytes") || !ctl_get_u64(m, "written_bytes", 0, &w))
		return 0;
	if (!v->have_written) {
		v->have_written = true;
		v->t0_ms = now;
		v->written0 = w;
		return 0;
	}
	if (now - v->t0_ms < DRAIN_RATE_MIN_MS || w < v->written0)
		return 0;
	return (w - v->written0) * 1000 / (uint64_t)(now - v->t0_ms);
}

static void drain_show(struct drain_view *v, const struct ctl_msg *m, bool final)
{
	uint64_t rate = 0, seen;
	int64_t eta = -1, now = mono_ms();
	g_autofree char *left = NULL, *rs = NULL, *es = NULL;

	if (m) {
		ctl_get_u64(m, "queued_bytes", v->queued, &v->queued);
		ctl_get_u64(m, "queued_files", v->files, &v->files);
		ctl_get_u64(m, "flush_rate", 0, &rate);
		ctl_get_i64(m, "eta_s", -1, &eta);
	}
	seen = seen_rate(v, m, now);
	if (seen) {
		rate = seen;
		eta = (int64_t)((v->queued + seen - 1) / seen);
	}
	v->max_queued = MAX(v->max_queued, v->queued);
	if (!v->out)
		return;
	if (eta < 0 && rate)
		eta = (int64_t)((v->queued + rate - 1) / rate);
	left = ctlc_fmt_size(v->queued);
	rs = rate ? ctlc_fmt_size(rate) : g_strdup("?");
	es = ctlc_fmt_eta(v->queued ? eta : 0);
	if (v->tty) {
		double frac =
		    v->max_queued ? 1.0 - (double)v->queued / (double)v->max_queued : 1.0;
		g_autofree char *bar = ctlc_fmt_bar(final ? 1.0 : frac, DRAIN_BAR_CELLS);
		fprintf(v->out, "\r\033[K%s %3d%%  %s left  %s/s  ETA %s", bar,
			(int)((final ? 1.0 : frac) * 100), left, rs, es);
		v->drawn = true;
	} else if (!v->last_line_ms ||
		   now - v->last_line_ms >= CTLC_DRAIN_LINE_EVERY_MS) {
		fprintf(v->out, "draining: %s left in %" G_GUINT64_FORMAT " file%s", left,
			v->files, v->files == 1 ? "" : "s");
		if (rate)
			fprintf(v->out, ", %s/s, ETA %s", rs, es);
		fputc('\n', v->out);
		v->last_line_ms = now;
	}
	fflush(v->out);
}

static void drain_end_line(struct drain_view *v)
{
	if (v->out && v->drawn) {
		fputc('\n', v->out);
		fflush(v->out);
	}
	v->drawn = false;
}

struct drain_ctx {
	struct drain_view view;
	GPtrArray *file_errors;
};

static int drain_loop(struct ctl_conn *c, struct drain_ctx *d, double timeout_s,
		      char **why)
{
	int64_t deadline =
	    timeout_s < 0 ? INT64_MAX : mono_ms() + (int64_t)(timeout_s * 1000);
	char line[CTL_LINE_MAX + 1];

	for (;;) {
		int64_t now = mono_ms();
		int wait = CTLC_DRAIN_SILENCE_MS, n, r;
		struct ctl_msg m;

		if (drain_signal)
			return -EINTR;
		if (now >= deadline)
			return -ETIMEDOUT;
		if (deadline - now < wait)
			wait = (int)(deadline - now);
		n = ctl_read_line(c, line, wait);
		if (n == -EINTR)
			continue;
		if (n == -ETIMEDOUT && mono_ms() >= deadline)
			return -ETIMEDOUT;
		if (n < 0)
			return read_failed(n, c, CTLC_DRAIN_SILENCE_MS, why);
		r = parse_line(c, line, n, &m, why);
		if (r == 0)
			r = final_line(&m, why);
		if (r == 1 && !strcmp(m.word, "progress"))
			drain_show(&d->view, &m, false);
		else if (r == 1 && !strcmp(m.word, "file-error"))
			g_ptr_array_add(d->file_errors, msg_steal(&m));
		ctl_msg_clear(&m);
		if (r != 1)
			return r;
	}
}

/* "\n  PATH: CODE (SIZE not on the medium)" for each failing file. */
static void append_file_errors(GString *s, GPtrArray *errs)
{
	for (guint i = 0; i < errs->len; i++) {
		const struct ctl_msg *m = errs->pdata[i];
		g_autofree char *p =
		    ctlc_fmt_text(ctl_get(m, "path") ? ctl_get(m, "path") : "?");
		g_autofree char *b = NULL;
		uint64_t bytes = 0;

		ctl_get_u64(m, "bytes", 0, &bytes);
		b = ctlc_fmt_size(bytes);
		g_string_append_printf(s, "\n  %s: %s (%s not on the medium)", p,
				       ctl_get(m, "code") ? ctl_get(m, "code") : "?", b);
	}
}

static void drain_failed(const char *sock_path, struct drain_ctx *d, int r, char **why)
{
	g_autoptr(GString) s = g_string_new(NULL);
	g_autofree char *left = ctlc_fmt_size(d->view.queued);

	if (!why)
		return;
	if (r == -ETIMEDOUT) {
		set_why(why,
			"%s still queued in %" G_GUINT64_FORMAT
			" file%s (the daemon goes on flushing)",
			left, d->view.files, d->view.files == 1 ? "" : "s");
		return;
	}
	if (r == -EINTR) {
		set_why(why, "%s still queued (the daemon goes on flushing)", left);
		return;
	}
	if (r == -EAGAIN) {
		set_why(why, "the mount is paused: resume it to drain");
		return;
	}
	if (r == -EHOSTDOWN || r == -ECONNRESET || r == -EPROTO || r == -ECONNREFUSED)
		return;		    /* *why says it already */
	if (!d->file_errors->len) { /* the daemon named none: ask it */
		struct ctlc_mount *m;
		if (ctlc_status(sock_path, CTLC_CONNECT_TIMEOUT_MS, &m, NULL) == 0) {
			g_ptr_array_extend_and_steal(d->file_errors,
						     g_steal_pointer(&m->file_errors));
			m->file_errors = NULL;
			ctlc_mount_free(m);
		}
	}
	g_string_append_printf(s, "%s%s%s",
			       ctlc_errno_name(r) ? ctlc_errno_name(r) : "error",
			       *why ? ": " : "", *why ? *why : "");
	append_file_errors(s, d->file_errors);
	g_free(*why);
	*why = g_strdup(s->str);
}

int ctlc_drain(const char *sock_path, FILE *out, bool tty, double timeout_s, char **why)
{
	struct sigaction sa = {.sa_handler = on_drain_signal}, old_int, old_term;
	struct drain_ctx d = {.view = {.out = out, .tty = tty}};
	g_autofree char *req = NULL;
	struct ctl_conn c;
	int r;

	sigemptyset(&sa.sa_mask); /* no SA_RESTART: the wait must end */
	drain_signal = 0;
	sigaction(SIGINT, &sa, &old_int);
	sigaction(SIGTERM, &sa, &old_term);
	d.file_errors = g_ptr_array_new_with_free_func(msg_free);
	r = conn_open(&c, sock_path, CTLC_CONNECT_TIMEOUT_MS, why);
	if (r < 0)
		goto out;
	req = g_strdup_printf("drain interval_ms=%d\n",
			      tty ? CTLC_DRAIN_TTY_INTERVAL_MS : CTLC_DRAIN_INTERVAL_MS);
	r = send_line(&c, req, why);
	if (r == 0)
		r = drain_loop(&c, &d, timeout_s, why);
	ctl_close(&c);
	if (r == 0 && d.view.drawn) {
		d.view.queued = 0;
		drain_show(&d.view, NULL, true);
	}
	drain_end_line(&d.view);
	if (r < 0)
		drain_failed(sock_path, &d, r, why);
out:
	g_ptr_array_unref(d.file_errors);
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGTERM, &old_term, NULL);
	return r;
}
