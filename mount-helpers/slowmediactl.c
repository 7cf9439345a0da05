/*
 * slowmediactl status|drain|set|pause|resume: the user's view of slowmedia
 * mounts, through their daemons' control sockets (ctl_client.h). Human output
 * on stdout (bars and in-place redraws only on a terminal), --json for
 * scripts; every problem is one line on stderr and a documented exit code
 * (spool_cmd.h). slowmediactl spool ...: a spool directory, without a daemon
 * (spool_cmd.c).
 */
#include "ctl_client.h"
#include "sched_opts.h"
#include "spool_cmd.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#define PROG "slowmediactl"
#define WATCH_INTERVAL_DEFAULT_S 1.0
#define WATCH_INTERVAL_MIN_S 0.1
#define WATCH_INTERVAL_MAX_S 3600.0
#define STATUS_BAR_CELLS 30
#define DRAIN_TIMEOUT_MAX_S 1e9 /* "no limit" for any purpose; keeps the ms in range */

struct cli {
	const char *cmd;
	char **args;
	int nargs;
	bool json, watch, quiet, tty;
	bool interval_given, timeout_given;
	double interval_s, timeout_s;
};

static void usage_error(const char *fmt, ...) G_GNUC_PRINTF(1, 2);
static void usage_error(const char *fmt, ...)
{
	va_list ap;

	fputs(PROG ": ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs(" (try '" PROG " --help')\n", stderr);
	exit(EXIT_USAGE);
}

static void print_help(void)
{
	printf(
	    "usage: " PROG " COMMAND [MOUNT] [options]\n"
	    "\n"
	    "The write-behind queues of slowmedia mounts, through their daemons.\n"
	    "\n"
	    "commands:\n"
	    "  status [MOUNT] [--json] [--watch [--interval S]]\n"
	    "        queue, rate, ETA, errors of MOUNT (default: every mount this user\n"
	    "        can reach); --watch redraws every S seconds (1) until Ctrl-C\n"
	    "  drain MOUNT [--timeout S] [--quiet]\n"
	    "        wait until everything queued on MOUNT is on the medium\n"
	    "  set MOUNT KEY=VALUE...\n"
	    "        rate=SIZE (bytes/s, suffixes K M G; 0: no cap), latency=MS;\n"
	    "        prio=0..7, class=be|idle, weight=1..10000 if the daemon supports "
	    "it\n"
	    "  pause MOUNT   stop flushing after the chunk in flight\n"
	    "  resume MOUNT  flush again\n");
	spool_cmd_help(stdout);
	printf(
	    "\n"
	    "options:\n"
	    "  --json          status as one JSON document ({\"mounts\": [...]}); "
	    "control\n"
	    "                  bytes escaped, bytes that are not UTF-8 written as "
	    "\\udcXX\n"
	    "                  (Python's surrogateescape: os.fsencode() gives them "
	    "back);\n"
	    "                  spool list too ({\"spool\": DIR, \"media\": [...]})\n"
	    "  --watch         status again every interval (Ctrl-C ends it, exit 0)\n"
	    "  --interval S    seconds between --watch updates (%.1f)\n"
	    "  --timeout S     drain: give up after S seconds (exit 6); no limit by "
	    "default\n"
	    "  -q, --quiet     drain: no progress output\n"
	    "  --medium ID     spool recover, discard: the medium (its id, or its "
	    "directory)\n"
	    "  --to DEST       spool recover: where the files go (made if missing)\n"
	    "  --include-damaged\n"
	    "                  spool recover: also what a damage left (held and "
	    "set-aside\n"
	    "                  segments), past the damage\n"
	    "  -y, --yes       spool discard: do not ask\n"
	    "  -h, --help      this help\n"
	    "  -V, --version   the version\n"
	    "\n"
	    "exit status:\n"
	    "  0 ok; 1 the operation failed (the daemon's error is shown; a drain that\n"
	    "  failed lists the failing files); 2 usage error (command, option, value);\n"
	    "  3 MOUNT does not exist or is not a slowmedia mount (spool: no such DIR "
	    "or\n"
	    "  medium); 4 permission denied;\n"
	    "  5 the daemon is gone or not answering; 6 drain timed out;\n"
	    "  7 a daemon is using the medium's spool (spool recover, discard);\n"
	    "  130 drain interrupted (the daemon goes on flushing)\n"
	    "\n"
	    "environment:\n"
	    "  SLOWMEDIA_CTL_DIR  the only directory searched for control sockets\n"
	    "                     (default /run/slowmedia and "
	    "$XDG_RUNTIME_DIR/slowmedia)\n"
	    "\n"
	    "sync(1) does not drain slowmedia queues; fsync, umount and drain do.\n",
	    WATCH_INTERVAL_DEFAULT_S);
}

/* ---- exit codes ---- */

/* Finding the mount failed with r. */
static int find_exit(int r)
{
	switch (-r) {
	case EACCES:
	case EPERM:
		return EXIT_DENIED;
	case ECONNREFUSED:
	case EHOSTDOWN:
	case ECONNRESET:
	case EPIPE:
	case EPROTO:
		return EXIT_GONE;
	default:
		return EXIT_NOT_MOUNT;
	}
}

/* The daemon answered r (an "error" line) to a request. */
static int answer_exit(int r)
{
	switch (-r) {
	case EACCES:
	case EPERM:
		return EXIT_DENIED;
	case EINVAL:
	case ERANGE:
		return EXIT_USAGE; /* its last word on a value */
	default:
		return EXIT_FAILED;
	}
}

/* A drain failed with r: the connection's errors, else the daemon's. */
static int drain_exit(int r)
{
	switch (-r) {
	case EHOSTDOWN:
	case ECONNRESET:
	case ECONNREFUSED:
	case EPIPE:
	case ENOENT:
		return EXIT_GONE;
	default:
		return answer_exit(r);
	}
}

/* Talking to a found mount's daemon failed with r (no answer). */
static int conn_exit(int r)
{
	switch (-r) {
	case EACCES:
	case EPERM:
		return EXIT_DENIED;
	case ETIMEDOUT:
		return EXIT_TIMEOUT;
	case EINTR:
		return EXIT_INTERRUPTED;
	case EPROTO:
		return EXIT_FAILED;
	default:
		return EXIT_GONE; /* refused, reset, not answering */
	}
}

static int fail(int code, const char *what, const char *why)
{
	g_autofree char *w = what ? ctlc_fmt_text(what) : NULL;

	if (w)
		fprintf(stderr, PROG ": %s: %s\n", w, why ? why : "failed");
	else
		fprintf(stderr, PROG ": %s\n", why ? why : "failed");
	return code;
}

/* ---- JSON ---- */

/*
 * A value as a JSON string. Paths may hold any byte: control bytes become
 * \n, \t or \u00XX, and a byte that is not part of valid UTF-8 becomes the lone
 * surrogate \udcXX (PEP 383's surrogateescape), so a reader can get the
 * exact bytes back and no valid character is mistaken for one.
 */
static void json_str(GString *o, const char *s)
{
	const char *end = s + strlen(s);

	g_string_append_c(o, '"');
	while (s < end) {
		unsigned char b = (unsigned char)*s;
		gunichar c = b < 0x80 ? b : g_utf8_get_char_validated(s, end - s);

		if (b == '"' || b == '\\')
			g_string_append_printf(o, "\\%c", b);
		else if (b == '\n')
			g_string_append(o, "\\n");
		else if (b == '\t')
			g_string_append(o, "\\t");
		else if (b < 0x20 || b == 0x7f)
			g_string_append_printf(o, "\\u%04x", b);
		else if (b < 0x80)
			g_string_append_c(o, (char)b);
		else if (c == (gunichar)-1 || c == (gunichar)-2)
			g_string_append_printf(o, "\\udc%02x", b);
		else {
			const char *n = g_utf8_next_char(s);
			g_string_append_len(o, s, n - s);
			s = n;
			continue;
		}
		s++;
	}
	g_string_append_c(o, '"');
}

void smctl_json_str(GString *o, const char *s)
{
	json_str(o, s);
}

/* Digits as JSON allows them (no leading zeros, no '+'). */
static bool json_int_syntax(const char *v)
{
	if (*v == '-')
		v++;
	if (!g_ascii_isdigit(*v) || (v[0] == '0' && v[1]))
		return false;
	for (; *v; v++)
		if (!g_ascii_isdigit(*v))
			return false;
	return true;
}

/* Fields that are text even when they look like numbers (a label "2024"). */
static bool text_field(const char *key)
{
	static const char *const text[] = {"mountpoint", "source", "device", "fstype",
					   "label",	 "state",  "class",  "group",
					   "arbiter",	 "path",   "code",   "read_error_path",
					   "read_error_code", "oldest_request", NULL};
	return g_strv_contains(text, key);
}

static void json_value(GString *o, const char *key, const char *v)
{
	if (!text_field(key) && json_int_syntax(v))
		g_string_append(o, v);
	else
		json_str(o, v);
}

static void json_mount(GString *o, const struct ctlc_mount *m, bool pretty)
{
	const char *nl = pretty ? "\n      " : "", *sp = pretty ? " " : "";

	g_string_append_c(o, '{');
	for (unsigned i = 0; i < m->status.nfields; i++) {
		const struct ctl_field *f = &m->status.fields[i];
		g_string_append(o, nl);
		json_str(o, f->key);
		g_string_append_printf(o, ":%s", sp);
		json_value(o, f->key, f->value);
		g_string_append_c(o, ',');
	}
	g_string_append_printf(o, "%s\"file_errors\":%s[", nl, sp);
	for (guint i = 0; i < m->file_errors->len; i++) {
		const struct ctl_msg *e = m->file_errors->pdata[i];
		static const char *const keys[] = {"path", "code", "bytes"};
		g_string_append_printf(o, "%s%s{", i ? "," : "",
				       pretty ? "\n        " : "");
		for (unsigned k = 0; k < G_N_ELEMENTS(keys); k++) {
			const char *v = ctl_get(e, keys[k]);
			g_string_append_printf(o, "%s\"%s\":%s", k ? ", " : "", keys[k],
					       sp);
			if (!v)
				g_string_append(o, "null");
			else
				json_value(o, keys[k], v);
		}
		g_string_append_c(o, '}');
	}
	g_string_append_printf(o, "%s]%s}",
			       m->file_errors->len && pretty ? "\n      " : "",
			       pretty ? "\n    " : "");
}

static void json_doc(GString *o, GPtrArray *mounts, bool pretty)
{
	g_string_append_printf(o, "{%s\"mounts\":%s[", pretty ? "\n  " : "",
			       pretty ? " " : "");
	for (guint i = 0; i < mounts->len; i++) {
		g_string_append_printf(o, "%s%s", i ? "," : "", pretty ? "\n    " : "");
		json_mount(o, mounts->pdata[i], pretty);
	}
	g_string_append_printf(o, "%s]%s}\n", mounts->len && pretty ? "\n  " : "",
			       pretty ? "\n" : "");
}

/* ---- human output ---- */

static const char *get_s(const struct ctl_msg *m, const char *key)
{
	const char *v = ctl_get(m, key);

	return v ? v : "";
}

static uint64_t get_u(const struct ctl_msg *m, const char *key)
{
	uint64_t v;

	return ctl_get_u64(m, key, 0, &v) ? v : 0;
}

static int64_t get_i(const struct ctl_msg *m, const char *key, int64_t def)
{
	int64_t v;

	return ctl_get_i64(m, key, def, &v) ? v : def;
}

/* "3.5 MiB", or the word for 0. */
static char *size_or(uint64_t v, const char *zero)
{
	return v ? ctlc_fmt_size(v) : g_strdup(zero);
}

static void human_medium(GString *o, const struct ctl_msg *s)
{
	g_autofree char *dev = ctlc_fmt_text(get_s(s, "device"));
	g_autofree char *fs = ctlc_fmt_text(get_s(s, "fstype"));
	g_autofree char *label = ctlc_fmt_text(get_s(s, "label"));
	g_autofree char *src = ctlc_fmt_text(get_s(s, "source"));

	g_string_append_printf(o, "  medium    %s (%s", *dev ? dev : "?", *fs ? fs : "?");
	if (*label)
		g_string_append_printf(o, ", label \"%s\"", label);
	g_string_append_printf(o, "), source %s\n", src);
}

static void human_queue(GString *o, const struct ctl_msg *s, double frac, bool bar)
{
	uint64_t q = get_u(s, "queued_bytes"), files = get_u(s, "queued_files");
	uint64_t parked = get_u(s, "parked_writes"), bw = get_u(s, "flush_rate");
	uint64_t cap = get_u(s, "rate"), rate = cap && (!bw || cap < bw) ? cap : bw;
	int64_t eta = get_i(s, "eta_s", -1);
	g_autofree char *qs = ctlc_fmt_size(q), *rs = size_or(rate, "unknown");
	g_autofree char *bws = ctlc_fmt_size(bw), *es = ctlc_fmt_eta(eta);

	g_string_append_printf(o, "  queued    %s in %" G_GUINT64_FORMAT " file%s", qs,
			       files, files == 1 ? "" : "s");
	if (parked)
		g_string_append_printf(
		    o, " (%" G_GUINT64_FORMAT " write%s waiting for room)", parked,
		    parked == 1 ? "" : "s");
	g_string_append_printf(o, "\n  flushing  %s%s", rs, rate ? "/s" : "");
	if (bw && rate != bw) /* flush_rate: the medium's measured pace, before the cap */
		g_string_append_printf(o, " (the rate cap; the medium does %s/s)", bws);
	g_string_append_printf(o, ", ETA %s\n", q ? (eta < 0 ? "unknown" : es) : "-");
	if (bar) {
		g_autofree char *b = ctlc_fmt_bar(frac, STATUS_BAR_CELLS);
		g_string_append_printf(o, "  progress  %s %3d%%\n", b, (int)(frac * 100));
	}
}

static void human_settings(GString *o, const struct ctl_msg *s)
{
	g_autofree char *cap = size_or(get_u(s, "rate"), "none");
	g_autofree char *group = ctlc_fmt_text(get_s(s, "group"));
	g_autofree char *arb = ctlc_fmt_text(get_s(s, "arbiter"));
	g_autofree char *rd = ctlc_fmt_size(get_u(s, "read_bytes"));
	g_autofree char *wr = ctlc_fmt_size(get_u(s, "written_bytes"));

	g_string_append_printf(o, "  limits    rate %s%s, latency %s ms\n", cap,
			       get_u(s, "rate") ? "/s" : "", get_s(s, "latency_ms"));
	g_string_append_printf(
	    o, "  sharing   prio %s, class %s, weight %s, group %s, arbiter %s%s\n",
	    get_s(s, "prio"), get_s(s, "class"), get_s(s, "weight"), *group ? group : "-",
	    *arb ? arb : "-", get_u(s, "arbiter_lease") ? " (alone in its group: a lease)" : "");
	g_string_append_printf(
	    o, "  totals    read %s, written %s in %" G_GUINT64_FORMAT " chunk%s\n", rd,
	    wr, get_u(s, "chunks"), get_u(s, "chunks") == 1 ? "" : "s");
}

static void human_spool(GString *o, const struct ctl_msg *s)
{
	g_autofree char *dir = ctlc_fmt_text(get_s(s, "spool"));
	g_autofree char *b = ctlc_fmt_size(get_u(s, "spool_bytes"));
	g_autofree char *max = ctlc_fmt_size(get_u(s, "spool_max"));
	g_autofree char *rb = ctlc_fmt_size(get_u(s, "spool_replayed_bytes"));
	uint64_t held = get_u(s, "spool_held"), aside = get_u(s, "spool_set_aside");
	const char *err = get_s(s, "spool_error");

	if (!*dir)
		return;
	g_string_append_printf(o, "  spool     %s: %s of %s in %" G_GUINT64_FORMAT " segment%s",
			       dir, b, max, get_u(s, "spool_segments"),
			       get_u(s, "spool_segments") == 1 ? "" : "s");
	if (get_u(s, "spool_journal_only")) {
		g_autofree char *jo = ctlc_fmt_size(get_u(s, "spool_journal_only"));
		g_string_append_printf(o, "; %s of the queue kept there alone", jo);
	}
	if (get_u(s, "spool_replayed_records"))
		g_string_append_printf(o, "; replayed %" G_GUINT64_FORMAT " records (%s) at mount",
				       get_u(s, "spool_replayed_records"), rb);
	g_string_append_c(o, '\n');
	if (held || aside)
		g_string_append_printf(o, "  spool     damage: %" G_GUINT64_FORMAT " segment%s set aside, %"
				       G_GUINT64_FORMAT " held (slowmediactl spool list %s)\n",
				       aside, aside == 1 ? "" : "s", held, dir);
	if (*err)
		g_string_append_printf(o, "  spool     error: %s (writes fail until it is mended)\n", err);
}

static void human_errors(GString *o, const struct ctlc_mount *m)
{
	uint64_t n = get_u(&m->status, "errors");

	if (!n && !m->file_errors->len)
		return;
	g_string_append_printf(o, "  errors    %" G_GUINT64_FORMAT " file%s failing\n", n,
			       n == 1 ? "" : "s");
	for (guint i = 0; i < m->file_errors->len; i++) {
		const struct ctl_msg *e = m->file_errors->pdata[i];
		g_autofree char *p = ctlc_fmt_text(get_s(e, "path"));
		g_autofree char *b = ctlc_fmt_size(get_u(e, "bytes"));
		g_autofree char *code = ctlc_fmt_text(get_s(e, "code"));
		g_string_append_printf(o, "    %s: %s (%s not on the medium)\n", p, code,
				       b);
	}
}

static void human_read_errors(GString *o, const struct ctl_msg *s)
{
	uint64_t n = get_u(s, "read_errors");
	g_autofree char *p = ctlc_fmt_text(get_s(s, "read_error_path"));
	g_autofree char *code = ctlc_fmt_text(get_s(s, "read_error_code"));
	g_autofree char *ago = ctlc_fmt_eta(get_i(s, "read_error_age_s", -1));

	if (!n)
		return;
	g_string_append_printf(o, "  reads     %" G_GUINT64_FORMAT " refused by the medium; the "
			       "last: %s: %s, %s ago\n", n, p, code, ago);
}

/* FUSE requests in flight (those waiting for the medium by request aside). */
static void human_requests(GString *o, const struct ctl_msg *s)
{
	uint64_t n = get_u(s, "requests"), slow = get_u(s, "slow_requests");
	g_autofree char *op = ctlc_fmt_text(get_s(s, "oldest_request"));
	double bound = (double)get_u(s, "req_bound_ms") / 1000;

	if (!n && !slow)
		return;
	g_string_append_printf(o, "  requests  %" G_GUINT64_FORMAT " in flight", n);
	if (n && *op)
		g_string_append_printf(o, ", the oldest: %s by pid %" G_GUINT64_FORMAT ", %.1f s",
				       op, get_u(s, "oldest_request_pid"),
				       (double)get_u(s, "oldest_request_ms") / 1000);
	if (slow)
		g_string_append_printf(o, "; %" G_GUINT64_FORMAT " took over the %.0f s bound",
				       slow, bound);
	g_string_append_c(o, '\n');
}

/* base: what was queued when the watch began (0: compare with written+queued). */
static void human_mount(GString *o, const struct ctlc_mount *m, bool tty, uint64_t base)
{
	const struct ctl_msg *s = &m->status;
	g_autofree char *mp = ctlc_fmt_text(get_s(s, "mountpoint"));
	g_autofree char *state = ctlc_fmt_text(get_s(s, "state"));
	uint64_t q = get_u(s, "queued_bytes"), total = get_u(s, "written_bytes") + q;
	double frac = 1.0;

	if (base)
		frac = q >= base ? 0.0 : 1.0 - (double)q / (double)base;
	else if (total)
		frac = 1.0 - (double)q / (double)total;
	g_string_append_printf(o, "%s: %s\n", mp, state);
	human_medium(o, s);
	human_queue(o, s, frac, tty && (q || base));
	human_settings(o, s);
	human_spool(o, s);
	human_errors(o, m);
	human_read_errors(o, s);
	human_requests(o, s);
	g_string_append_printf(o, "  daemon    pid %s, uid %s\n", get_s(s, "pid"),
			       get_s(s, "uid"));
}

/* ---- status ---- */

/* The mounts to show; an exit code, the problem printed (or in *why when set). */
static int gather(const char *mount, GPtrArray **mounts, char **why)
{
	g_autoptr(GPtrArray) problems = NULL;
	struct ctlc_mount *m;
	int r;

	if (mount) {
		*mounts = g_ptr_array_new_with_free_func((GDestroyNotify)ctlc_mount_free);
		r = ctlc_find_mount(mount, &m, why);
		if (r < 0)
			return find_exit(r);
		g_ptr_array_add(*mounts, m);
		return EXIT_OK;
	}
	ctlc_all_mounts(mounts, &problems);
	for (guint i = 0; i < problems->len; i++)
		fprintf(stderr, PROG ": %s\n", (char *)problems->pdata[i]);
	return problems->len ? EXIT_GONE : EXIT_OK;
}

static void render(GString *o, GPtrArray *mounts, const struct cli *c, GHashTable *bases)
{
	if (c->json) {
		json_doc(o, mounts, !c->watch);
		return;
	}
	if (!mounts->len)
		g_string_append(o, "no slowmedia mounts\n");
	for (guint i = 0; i < mounts->len; i++) {
		struct ctlc_mount *m = mounts->pdata[i];
		const char *mp = get_s(&m->status, "mountpoint");
		uint64_t q = get_u(&m->status, "queued_bytes"), base = 0;

		if (bases) { /* the most queued since the watch began */
			gpointer v = g_hash_table_lookup(bases, mp);
			base = MAX(v ? *(uint64_t *)v : 0, q);
			uint64_t *nv = g_new(uint64_t, 1);
			*nv = base;
			g_hash_table_insert(bases, g_strdup(mp), nv);
		}
		if (i)
			g_string_append_c(o, '\n');
		human_mount(o, m, c->tty, base);
	}
}

static int status_once(const struct cli *c)
{
	g_autoptr(GPtrArray) mounts = NULL;
	g_autofree char *why = NULL;
	g_autoptr(GString) o = g_string_new(NULL);
	int rc = gather(c->nargs ? c->args[0] : NULL, &mounts, &why);

	if (why)
		return fail(rc, NULL, why);
	render(o, mounts, c, NULL);
	fputs(o->str, stdout);
	return rc;
}

static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int sig)
{
	stop_signal = sig;
}

static void catch_stop_signals(void)
{
	struct sigaction sa = {.sa_handler = on_stop_signal};

	sigemptyset(&sa.sa_mask); /* no SA_RESTART: a wait must end at once */
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
}

/* The terminal rows text takes, long lines wrapped (cols 0: unknown). */
static unsigned count_rows(const char *text, unsigned cols)
{
	g_auto(GStrv) lines = g_strsplit(text, "\n", -1);
	unsigned n = 0;

	for (char **l = lines; l[0] && l[1];
	     l++) { /* the last piece follows the last '\n' */
		glong len = g_utf8_strlen(*l, -1);
		n += cols && len > (glong)cols ? (unsigned)((len + cols - 1) / cols) : 1;
	}
	return n;
}

static unsigned term_cols(void)
{
	struct winsize ws;

	return ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 ? ws.ws_col : 0;
}

/* One watch frame: the header, then status (or what went wrong). */
static void watch_frame(GString *o, const struct cli *c, GHashTable *bases)
{
	g_autoptr(GPtrArray) mounts = NULL;
	g_autofree char *why = NULL;
	g_autoptr(GDateTime) now = g_date_time_new_now_local();
	g_autofree char *clock = g_date_time_format(now, "%H:%M:%S");

	gather(c->nargs ? c->args[0] : NULL, &mounts, &why);
	if (!c->json)
		g_string_append_printf(o, "%s status, every %.1f s, %s%s\n\n", PROG,
				       c->interval_s, clock,
				       c->tty ? " (Ctrl-C ends)" : "");
	if (why) {
		g_autofree char *w = ctlc_fmt_text(why);
		if (c->json)
			g_string_append(o, "{\"mounts\": []}\n");
		else
			g_string_append_printf(o, "%s\n", w);
		if (c->json || !c->tty)
			fprintf(stderr, PROG ": %s\n", w);
	} else {
		render(o, mounts, c, bases);
	}
	if (!c->tty && !c->json)
		g_string_append_c(o, '\n');
}

static int status_watch(const struct cli *c)
{
	g_autoptr(GHashTable) bases =
	    g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
	unsigned shown = 0; /* lines of the frame on the screen */

	catch_stop_signals();
	while (!stop_signal) {
		g_autoptr(GString) o = g_string_new(NULL);

		watch_frame(o, c, bases);
		if (stop_signal)
			break;
		if (c->tty && !c->json && shown)
			printf("\033[%uA\r\033[J",
			       shown); /* back to the frame's top, clear below */
		fputs(o->str, stdout);
		fflush(stdout);
		shown = count_rows(o->str, term_cols());
		poll(NULL, 0, (int)(c->interval_s * 1000));
	}
	if (c->tty)
		fputs("\r\033[K", stdout); /* the terminal's "^C" */
	fflush(stdout);
	return EXIT_OK;
}

static int cmd_status(const struct cli *c)
{
	return c->watch ? status_watch(c) : status_once(c);
}

/* ---- the other commands ---- */

static struct ctlc_mount *find_or_exit(const char *mount)
{
	g_autofree char *why = NULL;
	struct ctlc_mount *m;
	int r = ctlc_find_mount(mount, &m, &why);

	if (r < 0)
		exit(fail(find_exit(r), NULL, why));
	return m;
}

static int cmd_drain(const struct cli *c)
{
	struct ctlc_mount *m = find_or_exit(c->args[0]);
	g_autofree char *mp = ctlc_fmt_text(get_s(&m->status, "mountpoint"));
	g_autofree char *why = NULL;
	int r = ctlc_drain(m->sock_path, c->quiet ? NULL : stdout, c->tty,
			   c->timeout_given ? c->timeout_s : -1, &why);

	ctlc_mount_free(m);
	if (r == -ETIMEDOUT) {
		fprintf(stderr, PROG ": %s: drain timed out after %g s: %s\n", mp,
			c->timeout_s, why ? why : "");
		return EXIT_TIMEOUT;
	}
	if (r == -EINTR) {
		fprintf(stderr, PROG ": %s: drain interrupted: %s\n", mp, why ? why : "");
		return EXIT_INTERRUPTED;
	}
	if (r < 0) {
		fprintf(stderr, PROG ": %s: drain failed: %s\n", mp,
			why ? why : g_strerror(-r));
		return drain_exit(r);
	}
	if (!c->quiet)
		printf("%s: drained, everything queued is on the medium\n", mp);
	return EXIT_OK;
}

/* One KEY=VALUE of set, checked here too (the daemon has the last word); its
 * field added to req, or false with the problem printed. */
static bool set_field(GString *req, const char *arg, GHashTable *seen)
{
	g_autofree char *key = NULL;
	const char *eq = strchr(arg, '='), *val;
	uint64_t size;
	unsigned n;

	if (!eq || eq == arg) {
		fprintf(stderr, PROG ": set: '%s' is not KEY=VALUE\n", arg);
		return false;
	}
	key = g_strndup(arg, (gsize)(eq - arg));
	val = eq + 1;
	if (g_hash_table_contains(seen, key)) {
		fprintf(stderr, PROG ": set: %s given twice\n", key);
		return false;
	}
	g_hash_table_add(seen, g_strdup(key));
	if (!strcmp(key, "rate")) {
		if (sm_parse_size(val, &size) < 0 ||
		    (size && size < SCHED_RATE_MIN_BPS)) {
			fprintf(
			    stderr,
			    PROG
			    ": set: rate=%s: expected 0 (no cap) or a size of at least "
			    "%llu bytes/s (suffixes K, M, G)\n",
			    val, (unsigned long long)SCHED_RATE_MIN_BPS);
			return false;
		}
		ctl_add_u64(req, "rate", size);
	} else if (!strcmp(key, "latency")) {
		if (sm_parse_uint(val, 1, SCHED_LATENCY_MAX_MS, &n) < 0) {
			fprintf(stderr,
				PROG
				": set: latency=%s: expected milliseconds from 1 to %u\n",
				val, SCHED_LATENCY_MAX_MS);
			return false;
		}
		ctl_add_u64(req, "latency", n);
	} else if (!strcmp(key, "prio") || !strcmp(key, "weight")) {
		bool prio = !strcmp(key, "prio");
		unsigned lo = prio ? 0 : 1, hi = prio ? SCHED_PRIO_MAX : SCHED_WEIGHT_MAX;
		if (sm_parse_uint(val, lo, hi, &n) < 0) {
			fprintf(stderr,
				PROG
				": set: %s=%s: expected a whole number from %u to %u\n",
				key, val, lo, hi);
			return false;
		}
		ctl_add_u64(req, key, n);
	} else if (!strcmp(key, "class")) {
		if (strcmp(val, "be") && strcmp(val, "idle")) {
			fprintf(stderr, PROG ": set: class=%s: expected be or idle\n",
				val);
			return false;
		}
		ctl_add(req, key, val);
	} else {
		fprintf(
		    stderr,
		    PROG
		    ": set: unknown setting '%s' (rate, latency, prio, class, weight)\n",
		    key);
		return false;
	}
	return true;
}

static int request(const struct cli *c, const char *line, const char *done)
{
	struct ctlc_mount *m = find_or_exit(c->args[0]);
	g_autofree char *mp = ctlc_fmt_text(get_s(&m->status, "mountpoint"));
	g_autofree char *why = NULL;
	bool answered;
	int r = ctlc_request_ex(m->sock_path, line, &answered, &why);

	ctlc_mount_free(m);
	if (r < 0 && answered) {
		fprintf(stderr, PROG ": %s: %s failed: %s: %s\n", mp, c->cmd,
			ctlc_errno_name(r) ? ctlc_errno_name(r) : "error",
			why ? why : g_strerror(-r));
		return answer_exit(r);
	}
	if (r < 0) {
		fprintf(stderr, PROG ": %s: %s failed: %s\n", mp, c->cmd,
			why ? why : g_strerror(-r));
		return conn_exit(r);
	}
	printf("%s: %s\n", mp, done);
	return EXIT_OK;
}

static int cmd_set(const struct cli *c)
{
	g_autoptr(GHashTable) seen =
	    g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
	g_autoptr(GString) req = g_string_new(NULL);
	g_autofree char *done = NULL;
	bool ok = true;

	ctl_begin(req, "set");
	for (int i = 1; i < c->nargs; i++)
		ok = set_field(req, c->args[i], seen) && ok;
	if (!ok)
		return EXIT_USAGE;
	ctl_end(req);
	if (req->len >= CTL_LINE_MAX)
		return fail(EXIT_USAGE, "set", "too many settings for one request");
	{
		g_auto(GStrv) shown = g_new0(char *, (gsize)c->nargs);
		for (int i = 1; i < c->nargs; i++)
			shown[i - 1] = ctlc_fmt_text(c->args[i]);
		g_autofree char *list = g_strjoinv(" ", shown);
		done = g_strdup_printf("set %s", list);
	}
	return request(c, req->str, done);
}

/* ---- the command line ---- */

static double parse_seconds(const char *opt, const char *s, double lo, double hi,
			    const char *range)
{
	char *end;
	double v = g_ascii_strtod(s, &end);

	if (!*s || *end || !isfinite(v) || v < lo || v > hi)
		usage_error("%s %s: expected seconds, %s", opt, s, range);
	return v;
}

enum { OPT_JSON = 256, OPT_WATCH, OPT_INTERVAL, OPT_TIMEOUT };

static void parse_options(int argc, char **argv, struct cli *c)
{
	static const struct option opts[] = {
	    {"help", no_argument, NULL, 'h'},
	    {"version", no_argument, NULL, 'V'},
	    {"quiet", no_argument, NULL, 'q'},
	    {"json", no_argument, NULL, OPT_JSON},
	    {"watch", no_argument, NULL, OPT_WATCH},
	    {"interval", required_argument, NULL, OPT_INTERVAL},
	    {"timeout", required_argument, NULL, OPT_TIMEOUT},
	    {NULL, 0, NULL, 0}};
	int o;

	opterr = 0;
	while ((o = getopt_long(argc, argv, ":hVq", opts, NULL)) != -1) {
		switch (o) {
		case 'h':
			print_help();
			exit(EXIT_OK);
		case 'V':
			printf(PROG " (slowmedia) %s\n", SLOWMEDIA_VERSION);
			exit(EXIT_OK);
		case 'q':
			c->quiet = true;
			break;
		case OPT_JSON:
			c->json = true;
			break;
		case OPT_WATCH:
			c->watch = true;
			break;
		case OPT_INTERVAL:
			c->interval_given = true;
			c->interval_s =
			    parse_seconds("--interval", optarg, WATCH_INTERVAL_MIN_S,
					  WATCH_INTERVAL_MAX_S, "from 0.1 to 3600");
			break;
		case OPT_TIMEOUT:
			c->timeout_given = true;
			c->timeout_s = parse_seconds("--timeout", optarg, 0,
						     DRAIN_TIMEOUT_MAX_S, "0 or more");
			break;
		case ':':
			usage_error("option %s needs a value", argv[optind - 1]);
			break;
		default:
			if (optopt)
				usage_error("unknown option '-%c'", optopt);
			usage_error("unknown option '%s'", argv[optind - 1]);
		}
	}
	c->cmd = optind < argc ? argv[optind++] : NULL;
	c->args = argv + optind;
	c->nargs = argc - optind;
}

/* The options and argument counts each command takes. */
static void check_usage(const struct cli *c)
{
	bool status = !strcmp(c->cmd, "status"), drain = !strcmp(c->cmd, "drain");
	bool set = !strcmp(c->cmd, "set");

	if (!strcmp(c->cmd, "spool"))
		usage_error("spool: give it first, options after it: " PROG
			    " spool list|recover|discard DIR ...");
	if (!status && !drain && !set && strcmp(c->cmd, "pause") &&
	    strcmp(c->cmd, "resume"))
		usage_error(
		    "unknown command '%s' (status, drain, set, pause, resume, spool)",
		    c->cmd);
	if (!status && (c->json || c->watch || c->interval_given))
		usage_error("%s: --json, --watch and --interval are for status", c->cmd);
	if (!drain && (c->timeout_given || c->quiet))
		usage_error("%s: --timeout and --quiet are for drain", c->cmd);
	if (c->interval_given && !c->watch)
		usage_error("status: --interval needs --watch");
	if (status && c->nargs > 1)
		usage_error("status: one MOUNT at most, got '%s' too", c->args[1]);
	if (!status && c->nargs < 1)
		usage_error("%s: MOUNT missing", c->cmd);
	if (set && c->nargs < 2)
		usage_error("set: KEY=VALUE missing (rate=SIZE, latency=MS)");
	if (!status && !set && c->nargs > 1)
		usage_error("%s: one MOUNT only, got '%s' too", c->cmd, c->args[1]);
}

int main(int argc, char **argv)
{
	struct cli c = {.interval_s = WATCH_INTERVAL_DEFAULT_S};

	/* Its own options (--medium, --to, --yes): parsed there. */
	if (argc > 1 && !strcmp(argv[1], "spool"))
		return spool_cmd_main(argc - 1, argv + 1);
	parse_options(argc, argv, &c);
	if (!c.cmd)
		usage_error(
		    "no command given (status, drain, set, pause, resume, spool)");
	check_usage(&c);
	c.tty = isatty(STDOUT_FILENO);
	if (!strcmp(c.cmd, "status"))
		return cmd_status(&c);
	if (!strcmp(c.cmd, "drain"))
		return cmd_drain(&c);
	if (!strcmp(c.cmd, "set"))
		return cmd_set(&c);
	if (!strcmp(c.cmd, "pause"))
		return request(&c, "pause\n",
			       "paused (flushing stops after the chunk in flight)");
	return request(&c, "resume\n", "flushing again");
}
