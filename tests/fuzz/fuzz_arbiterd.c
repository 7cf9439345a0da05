/*
 * Black-box fuzzing of slowmedia-arbiterd's message handling (protocol:
 * sched/arb_proto.h). No mount and no root: unix sockets in a temp dir.
 *
 *   fuzz-arbiterd [-t SECONDS] [-s SEED] [-a ARTIFACT_DIR] [-c CORPUS_DIR]
 *                 [--replay DIR]... [--rss-max-mb N] [--rss-growth-mb N]
 *                 [--slow F] [--keep] ARBITERD
 *
 * It starts `ARBITERD -f --socket TMP/arb.sock` (behind $FUZZ_ARB_WRAPPER,
 * e.g. "valgrind -q --error-exitcode=99", when set), registers one
 * well-behaved mount, replays every --replay DIR (sessions, or directories
 * of them named arbiterd-*, as tests/fuzz/crashes), then for SECONDS (20; 0:
 * none) opens connection after connection, each sending a session: lines
 * from the corpus (each file one session, a line a message; '#' lines are
 * comments) mutated at the line level (dropped, repeated, swapped, spliced,
 * a generated message put in) and the byte level (bits, bytes, escapes,
 * numbers at their limits, long values). A session then
 *   ping:   sends "ping" and reads until pong or the close (60%),
 *   abrupt: closes at once (20%), or
 *   keep:   stays open in a pool of up to POOL_MAX without reading, to be
 *           sent more, checked with a ping, or closed later (20%).
 * After every session: the arbiter is alive; a fresh client's `status` is
 * answered within the time limit (3 s times --slow) with well-formed lines
 * and lists the well-behaved mount; that mount's `ping` gets `pong` (and it
 * is sent nothing but peers, pong, and the paused and rate notices fuzzed
 * control lines may cause: it never asked for a grant). Every
 * line the arbiter sends must parse, be shorter than CTL_LINE_MAX and use
 * one of its words, and after `error code=EPROTO` it must close. At the
 * end, with the pool closed: status lists only the well-behaved mount, the
 * arbiter holds no more fds than after start-up, its peak RSS is under
 * --rss-max-mb (16) and its RSS grew less than --rss-growth-mb (8) (both
 * skipped behind a wrapper); SIGTERM makes it exit 0.
 *
 * On a failure the sessions that led to it (the pool's and the last
 * HISTORY ones, in the order sent) go to ARTIFACT_DIR/arbiterd-SEED-N/ as
 * NNNN-MODE[-SLOT].bin, with the arbiter's log; --replay that directory
 * sends them again, in order, to a fresh arbiter with the same checks.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "arb_proto.h"
#include "sched_opts.h"

#define POOL_MAX 32
#define HISTORY 48
#define SESSION_MAX (96u << 10)

enum mode { M_PING, M_ABRUPT, M_KEEP, M_MORE };
static const char *const mode_names[] = {"ping", "abrupt", "keep", "more"};

struct sent {
	enum mode mode;
	int slot; /* keep/more: the pool slot */
	GByteArray *bytes;
};

struct pooled {
	struct ctl_conn c;
	bool used;
	bool open_line;	 /* the last byte sent was not a '\n' */
	GPtrArray *sent; /* struct sent *: what went over it */
};

static struct {
	double budget, slow;
	uint64_t seed;
	unsigned rss_max_mb, rss_growth_mb;
	const char *artifacts, *corpus_dir, *arbiterd;
	GPtrArray *replays;
	bool keep;
} cfg = {.budget = 20, .slow = 1, .seed = 1, .rss_max_mb = 16, .rss_growth_mb = 8,
	 .artifacts = "."};

static char *tmpdir, *sock_path, *log_path;
static pid_t arb_pid = -1;
static bool wrapped;
static struct ctl_conn good;
static int good_id;
static int last_id; /* the last id a session registered */
static struct pooled pool[POOL_MAX];
static GPtrArray *history; /* struct sent *, the last HISTORY */
static GPtrArray *corpus;  /* GPtrArray of GByteArray lines, one per session */
static unsigned long long iter, sessions_by_mode[4], closed_by_arbiter, pongs, lines_sent;

/* ---- small things ---- */

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int op_ms(void)
{
	return (int)(3000 * cfg.slow);
}

static uint64_t rng_state;

static uint64_t rnd(void)
{
	uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static size_t below(size_t n)
{
	return n ? (size_t)(rnd() % n) : 0;
}

static void sent_free(gpointer p)
{
	struct sent *s = p;

	g_byte_array_unref(s->bytes);
	g_free(s);
}

static void fail(const char *fmt, ...) G_GNUC_PRINTF(1, 2) G_GNUC_NORETURN;

/* ---- the arbiter process ---- */

static void kill_arbiter(void)
{
	if (arb_pid > 0) {
		kill(arb_pid, SIGKILL);
		waitpid(arb_pid, NULL, 0);
		arb_pid = -1;
	}
}

static void start_arbiter(void)
{
	g_auto(GStrv) wrap = NULL;
	const char *w = getenv("FUZZ_ARB_WRAPPER");
	GPtrArray *argv = g_ptr_array_new();
	int logfd;

	if (w && *w && !g_shell_parse_argv(w, NULL, &wrap, NULL)) {
		fprintf(stderr, "fuzz-arbiterd: cannot parse FUZZ_ARB_WRAPPER '%s'\n", w);
		exit(2);
	}
	wrapped = wrap != NULL;
	for (char **a = wrap; a && *a; a++)
		g_ptr_array_add(argv, *a);
	g_ptr_array_add(argv, (char *)cfg.arbiterd);
	g_ptr_array_add(argv, "-f");
	g_ptr_array_add(argv, "--socket");
	g_ptr_array_add(argv, sock_path);
	g_ptr_array_add(argv, NULL);
	logfd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (logfd < 0) {
		perror(log_path);
		exit(2);
	}
	arb_pid = fork();
	if (arb_pid < 0) {
		perror("fork");
		exit(2);
	}
	if (arb_pid == 0) {
		dup2(logfd, 1);
		dup2(logfd, 2);
		execvp(argv->pdata[0], (char **)argv->pdata);
		perror("exec");
		_exit(127);
	}
	close(logfd);
	g_ptr_array_free(argv, TRUE);
}

static void check_alive(void)
{
	int st;
	pid_t r = waitpid(arb_pid, &st, WNOHANG);

	if (r == arb_pid) {
		arb_pid = -1;
		if (WIFSIGNALED(st))
			fail("the arbiter died of signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
		fail("the arbiter exited with status %d", WEXITSTATUS(st));
	}
}

/* "VmRSS:" or "VmHWM:" of the arbiter in KiB (0: unknown). */
static unsigned long proc_kib(const char *key)
{
	g_autofree char *path = g_strdup_printf("/proc/%d/status", (int)arb_pid);
	g_autofree char *text = NULL;
	const char *p;

	if (!g_file_get_contents(path, &text, NULL, NULL) || !(p = strstr(text, key)))
		return 0;
	return strtoul(p + strlen(key), NULL, 10);
}

static int proc_fds(void)
{
	g_autofree char *path = g_strdup_printf("/proc/%d/fd", (int)arb_pid);
	DIR *d = opendir(path);
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

/* ---- talking to it ---- */

/* Connect and read the greeting; 0 or -errno. */
static int open_conn(struct ctl_conn *c)
{
	int r = ctl_connect_word(c, sock_path, "slowmedia-arbiter", ARB_VERSION, op_ms());

	if (r == -EPROTO)
		fail("the arbiter's greeting is not 'slowmedia-arbiter version=%d pid=N'", ARB_VERSION);
	return r;
}

static int send_bytes(struct ctl_conn *c, const void *data, size_t len)
{
	const char *p = data;
	double deadline = now_s() + op_ms() / 1e3;

	while (len) {
		ssize_t n = send(c->fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0) {
			p += n;
			len -= (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			struct pollfd pfd = {.fd = c->fd, .events = POLLOUT};
			int left = (int)((deadline - now_s()) * 1e3);
			if (left <= 0 || poll(&pfd, 1, left) == 0)
				return -ETIMEDOUT;
			continue;
		}
		return n < 0 ? -errno : -EPIPE;
	}
	return 0;
}

/*
 * Read what the arbiter sends on c until a line with word `until` (1), the
 * close (0) or the time limit (fail). Every line must parse and be one of
 * the arbiter's words; nothing may follow an EPROTO error. allowed: the
 * words that may come before `until` (NULL: any of the arbiter's).
 */
static int read_until(struct ctl_conn *c, const char *until, const char *const *allowed,
		      const char *who, void (*each)(const struct ctl_msg *m, void *arg), void *arg)
{
	static const char *const words[] = {"registered", "grant", "revoke", "peers", "pong", "ok", "rate", "paused",
					    "error", "mount", NULL};
	char line[CTL_LINE_MAX + 1];
	double deadline = now_s() + op_ms() / 1e3;
	bool eproto = false;

	for (;;) {
		int left = (int)((deadline - now_s()) * 1e3);
		int n = ctl_read_line(c, line, left > 0 ? left : 0);
		struct ctl_msg m;

		if (n == -ETIMEDOUT)
			fail("%s: no '%s' and no close within %d ms: the arbiter hangs", who, until, op_ms());
		if (n == -EPROTO)
			fail("%s: the arbiter sent a line of %d bytes or more", who, CTL_LINE_MAX);
		if (n == -EINTR)
			continue;
		if (n < 0)
			return 0; /* closed (or reset) */
		if (ctl_parse(line, (size_t)n, &m) < 0)
			fail("%s: the arbiter sent a malformed line: '%.200s'", who, line);
		if (eproto)
			fail("%s: the arbiter went on after an EPROTO error: '%.200s'", who, line);
		if (!g_strv_contains(words, m.word))
			fail("%s: the arbiter sent an unknown word: '%.200s'", who, line);
		if (!strcmp(m.word, "registered")) {
			int64_t id;
			if (!ctl_get_i64(&m, "id", 0, &id) || id <= 0 || id > INT32_MAX)
				fail("%s: registered without an id: '%.200s'", who, line);
			last_id = (int)id;
		}
		if (!strcmp(m.word, until)) {
			ctl_msg_clear(&m);
			return 1;
		}
		if (allowed && !g_strv_contains(allowed, m.word))
			fail("%s: unexpected '%.200s'", who, line);
		if (!strcmp(m.word, "error") && !g_strcmp0(ctl_get(&m, "code"), "EPROTO"))
			eproto = true;
		if (each)
			each(&m, arg);
		ctl_msg_clear(&m);
	}
}

struct status_seen {
	bool good;
	unsigned mounts;
};

static void on_status_line(const struct ctl_msg *m, void *arg)
{
	struct status_seen *s = arg;
	int64_t id;

	if (strcmp(m->word, "mount"))
		return;
	if (!ctl_get_i64(m, "id", 0, &id) || id <= 0 || !ctl_get(m, "group"))
		fail("status: a mount line without id or group");
	s->mounts++;
	s->good |= id == good_id;
}

static unsigned check_status(void)
{
	static const char *const allowed[] = {"mount", NULL};
	struct ctl_conn c;
	struct status_seen seen = {0};
	int r = open_conn(&c);

	if (r < 0)
		fail("a fresh client cannot connect: %s", g_strerror(-r));
	if (send_bytes(&c, "status\n", 7) < 0 ||
	    read_until(&c, "ok", allowed, "status", on_status_line, &seen) != 1)
		fail("status: the arbiter closed the connection before 'ok'");
	if (!seen.good)
		fail("status does not list the well-behaved mount %d", good_id);
	ctl_close(&c);
	return seen.mounts;
}

static void check_good(void)
{
	static const char *const allowed[] = {"peers", "paused", "rate", NULL};

	if (send_bytes(&good, "ping\n", 5) < 0 ||
	    read_until(&good, "pong", allowed, "the well-behaved mount", NULL, NULL) != 1)
		fail("the well-behaved mount's connection was closed");
}

static void check_health(void)
{
	check_alive();
	check_status();
	check_good();
	check_alive();
}

static void register_good(void)
{
	static const char *const allowed[] = {"peers", "paused", "rate", NULL};
	g_autoptr(GString) l = g_string_new(NULL);
	double deadline = now_s() + 10 * cfg.slow;
	int r;

	while ((r = open_conn(&good)) < 0) {
		check_alive();
		if (now_s() > deadline)
			fail("the arbiter does not answer on %s: %s", sock_path, g_strerror(-r));
		g_usleep(20000);
	}
	ctl_begin(l, "register");
	ctl_add(l, "group", "fuzz-good");
	ctl_add_u64(l, "prio", SCHED_PRIO_DEFAULT);
	ctl_add(l, "class", "be");
	ctl_add_u64(l, "weight", SCHED_WEIGHT_DEFAULT);
	ctl_add_u64(l, "rate", 0);
	ctl_add(l, "medium", "0:0");
	ctl_add(l, "mountpoint", "/fuzz/good");
	ctl_end(l);
	last_id = 0;
	if (send_bytes(&good, l->str, l->len) < 0 ||
	    read_until(&good, "registered", allowed, "register", NULL, NULL) != 1)
		fail("the well-behaved mount could not register");
	good_id = last_id;
}

/* ---- sessions ---- */

static const char *pick(const char *const *v)
{
	size_t n = 0;

	while (v[n])
		n++;
	return v[below(n)];
}

static void gen_number(GString *s)
{
	static const char *const nums[] = {
		"0", "1", "2", "4", "7", "8", "100", "10000", "10001", "-1", "4096", "1048576",
		"2147483647", "2147483648", "4294967296", "9223372036854775807",
		"9223372036854775808", "18446744073709551615", "18446744073709551616", "+1",
		"%201", "1%20", "007", "", "x", NULL};

	if (below(3))
		g_string_append_printf(s, "%u", (unsigned)below(below(2) ? 10 : 100000));
	else
		g_string_append(s, pick(nums));
}

static int some_id(void)
{
	switch (below(6)) {
	case 0: return good_id;
	case 1: case 2: return last_id;
	case 3: return (int)below(4) - 1;
	case 4: return (int)below(iter + 2);
	default: return (int)(rnd() & 0x7fffffff);
	}
}

static void gen_path(GString *s)
{
	static const char *const paths[] = {"/mnt/a", "/media/usb%20stick", "/x%0Ay", "%00",
					    "", "/", "rel", "/%ff%fe", NULL};
	size_t n;

	if (below(6)) {
		g_string_append(s, pick(paths));
		return;
	}
	n = below(2) ? 3000 + below(1100) : below(400); /* near the line limit, or not */
	g_string_append_c(s, '/');
	for (size_t i = 0; i < n; i++)
		g_string_append_c(s, below(30) ? 'a' + (char)below(26) : '/');
}

/* A message the protocol knows, with values drawn near its limits. */
static void gen_line(GString *s)
{
	static const char *const groups[] = {"g1", "g2", "disk:sda", "fuzz-good", "", "%00",
					     "a%20b", "0123456789012345678901234567890123456789012345678901234567890123",
					     "01234567890123456789012345678901234567890123456789012345678901234",
					     NULL};
	static const char *const classes[] = {"be", "idle", "rt", "", "BE", NULL};

	switch (below(10)) {
	case 0: case 1:
		g_string_append_printf(s, "register group=%s prio=", pick(groups));
		gen_number(s);
		g_string_append_printf(s, " class=%s weight=", pick(classes));
		gen_number(s);
		g_string_append(s, " rate=");
		gen_number(s);
		g_string_append(s, " medium=8:0 mountpoint=");
		gen_path(s);
		break;
	case 2:
		g_string_append(s, "request bytes=");
		gen_number(s);
		g_string_append(s, " urgent=");
		gen_number(s);
		break;
	case 3:
		g_string_append(s, "done bytes=");
		gen_number(s);
		break;
	case 4:
		g_string_append(s, "reads active=");
		gen_number(s);
		break;
	case 5:
		g_string_append(s, below(2) ? "ping" : "status");
		break;
	case 6: case 7:
		g_string_append_printf(s, "set id=%d", some_id());
		if (below(2)) {
			g_string_append(s, " prio=");
			gen_number(s);
		}
		if (below(2))
			g_string_append_printf(s, " class=%s", pick(classes));
		if (below(2)) {
			g_string_append(s, " weight=");
			gen_number(s);
		}
		break;
	default:
		g_string_append_printf(s, "%s id=%d", below(2) ? "pause" : "resume", some_id());
		break;
	}
}

static void ba_insert(GByteArray *l, guint at, const guint8 *data, guint n)
{
	guint old = l->len;

	g_byte_array_set_size(l, old + n);
	memmove(l->data + at + n, l->data + at, old - at);
	memcpy(l->data + at, data, n);
}

static void mutate_bytes(GByteArray *l)
{
	static const char *const toks[] = {
		" ", "=", "%", "%20", "%00", "%0A", "%zz", "%2", "\n", "\r", "\t", " id=",
		" group=", " prio=", " class=", " weight=", " bytes=", " urgent=", " active=",
		" mountpoint=", "register", "request", "done", "reads", "status", "set", "pause",
		"resume", "ping", "-1", "0", "18446744073709551616", "9223372036854775808", NULL};
	static const uint8_t special[] = {0, 0xff, '\n', ' ', '=', '%', '-', '\t', 0x7f, 0x80};
	size_t at = below(l->len + 1), n;

	switch (below(8)) {
	case 0:
		if (l->len)
			l->data[below(l->len)] ^= (uint8_t)(1u << below(8));
		break;
	case 1:
		if (l->len)
			l->data[below(l->len)] = below(2) ? (uint8_t)rnd() : special[below(sizeof(special))];
		break;
	case 2: case 3: {
		const char *t = pick(toks);
		ba_insert(l, (guint)at, (const guint8 *)t, (guint)strlen(t));
		break;
	}
	case 4:
		if (at < l->len) {
			n = 1 + below(MIN(l->len - at, 16));
			g_byte_array_remove_range(l, (guint)at, (guint)n);
		}
		break;
	case 5: /* a long run: the line limit is 4096 with its '\n' */
		n = below(2) ? CTL_LINE_MAX - 8 + below(16) : below(600);
		if (l->len + n < SESSION_MAX) {
			guint8 *fill = g_malloc(n + 1);
			memset(fill, below(4) ? 'a' : special[below(sizeof(special))], n);
			ba_insert(l, (guint)at, fill, (guint)n);
			g_free(fill);
		}
		break;
	case 6:
		g_byte_array_set_size(l, (guint)below(l->len + 1));
		break;
	default: { /* a number at its limits in place of a digit */
		GString *num = g_string_new(NULL);
		for (size_t i = 0; i < l->len; i++)
			if (l->data[(at + i) % l->len] >= '0' && l->data[(at + i) % l->len] <= '9') {
				at = (at + i) % l->len;
				break;
			}
		gen_number(num);
		if (at < l->len && l->data[at] >= '0' && l->data[at] <= '9')
			g_byte_array_remove_index(l, (guint)at);
		ba_insert(l, (guint)MIN(at, l->len), (const guint8 *)num->str,
					 (guint)num->len);
		g_string_free(num, TRUE);
		break;
	}
	}
}

static GByteArray *line_from(const char *s, size_t n)
{
	GByteArray *l = g_byte_array_sized_new((guint)n);

	g_byte_array_append(l, (const guint8 *)s, (guint)n);
	return l;
}

/* One session: lines, each then '\n' (but, rarely, the last). */
static GByteArray *make_session(void)
{
	GPtrArray *lines = g_ptr_array_new_with_free_func((GDestroyNotify)g_byte_array_unref);
	GByteArray *out = g_byte_array_new();
	GString *g = g_string_new(NULL);

	if (corpus->len && below(4)) {
		GPtrArray *base = corpus->pdata[below(corpus->len)];
		for (guint i = 0; i < base->len; i++) {
			GByteArray *b = base->pdata[i];
			g_ptr_array_add(lines, line_from((const char *)b->data, b->len));
		}
	}
	if (!lines->len || below(3) == 0) {
		g_string_truncate(g, 0);
		gen_line(g);
		g_ptr_array_insert(lines, (gint)below(lines->len + 1), line_from(g->str, g->len));
	}
	for (size_t k = below(4); k; k--) { /* line level */
		size_t i = below(lines->len), j = below(lines->len);
		switch (below(6)) {
		case 0:
			if (lines->len > 1)
				g_ptr_array_remove_index(lines, (guint)i);
			break;
		case 1: {
			GByteArray *b = lines->pdata[i];
			size_t times = below(4) ? 1 + below(3) : 50 + below(600); /* a flood */
			for (size_t t = 0; t < times && lines->len < 1000; t++)
				g_ptr_array_insert(lines, (gint)i, line_from((const char *)b->data, b->len));
			break;
		}
		case 2: {
			gpointer t = lines->pdata[i];
			lines->pdata[i] = lines->pdata[j];
			lines->pdata[j] = t;
			break;
		}
		case 3:
			if (corpus->len) {
				GPtrArray *o = corpus->pdata[below(corpus->len)];
				if (o->len) {
					GByteArray *b = o->pdata[below(o->len)];
					g_ptr_array_insert(lines, (gint)below(lines->len + 1),
							   line_from((const char *)b->data, b->len));
				}
			}
			break;
		default:
			g_string_truncate(g, 0);
			gen_line(g);
			g_ptr_array_insert(lines, (gint)below(lines->len + 1), line_from(g->str, g->len));
			break;
		}
	}
	for (size_t k = below(3) ? below(3) : below(12); k; k--) /* byte level */
		mutate_bytes(lines->pdata[below(lines->len)]);
	for (guint i = 0; i < lines->len; i++) {
		GByteArray *b = lines->pdata[i];
		if (out->len + b->len + 1 > SESSION_MAX)
			break;
		g_byte_array_append(out, b->data, b->len);
		if (i + 1 < lines->len || below(20))
			g_byte_array_append(out, (const guint8 *)"\n", 1);
		lines_sent++;
	}
	g_string_free(g, TRUE);
	g_ptr_array_unref(lines);
	return out;
}

/* For g_ptr_array_sort, which passes pointers to the elements. */
static gint cmp_names(gconstpointer a, gconstpointer b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void load_corpus(void)
{
	GDir *d;
	const char *name;
	GPtrArray *names = g_ptr_array_new_with_free_func(g_free);

	corpus = g_ptr_array_new_with_free_func((GDestroyNotify)g_ptr_array_unref);
	if (!cfg.corpus_dir)
		return;
	d = g_dir_open(cfg.corpus_dir, 0, NULL);
	if (!d) {
		fprintf(stderr, "fuzz-arbiterd: %s: cannot open\n", cfg.corpus_dir);
		exit(2);
	}
	while ((name = g_dir_read_name(d)))
		if (name[0] != '.')
			g_ptr_array_add(names, g_build_filename(cfg.corpus_dir, name, NULL));
	g_dir_close(d);
	g_ptr_array_sort(names, cmp_names);
	for (guint i = 0; i < names->len; i++) {
		g_autofree char *text = NULL;
		gsize len;
		GPtrArray *lines;
		const char *p, *end;

		if (!g_file_get_contents(names->pdata[i], &text, &len, NULL))
			continue;
		lines = g_ptr_array_new_with_free_func((GDestroyNotify)g_byte_array_unref);
		for (p = text, end = text + len; p < end;) {
			const char *nl = memchr(p, '\n', (size_t)(end - p));
			size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
			if (n && *p != '#')
				g_ptr_array_add(lines, line_from(p, n));
			p += n + 1;
		}
		g_ptr_array_add(corpus, lines);
	}
	g_ptr_array_unref(names);
}

/* ---- running sessions ---- */

static void remember(enum mode mode, int slot, GByteArray *bytes)
{
	struct sent *s = g_new0(struct sent, 1);

	s->mode = mode;
	s->slot = slot;
	s->bytes = g_byte_array_ref(bytes);
	sessions_by_mode[mode]++;
	if (mode == M_KEEP || mode == M_MORE) {
		struct sent *copy = g_new0(struct sent, 1);
		*copy = *s;
		copy->bytes = g_byte_array_ref(bytes);
		g_ptr_array_add(pool[slot].sent, copy);
	}
	g_ptr_array_add(history, s);
	if (history->len > HISTORY)
		g_ptr_array_remove_index(history, 0);
}

static void pool_close(int slot, bool ping)
{
	struct pooled *p = &pool[slot];

	if (ping) {
		g_autofree char *who = g_strdup_printf("kept session %d", slot);
		send_bytes(&p->c, p->open_line ? "\nping\n" : "ping\n", p->open_line ? 6 : 5);
		if (read_until(&p->c, "pong", NULL, who, NULL, NULL))
			pongs++;
		else
			closed_by_arbiter++;
	}
	ctl_close(&p->c);
	p->used = p->open_line = false;
	g_ptr_array_set_size(p->sent, 0);
}

static void run_session(enum mode mode, int slot, GByteArray *bytes)
{
	struct ctl_conn tmp, *c = &tmp;
	int r;

	remember(mode, slot, bytes);
	if (mode == M_MORE) {
		c = &pool[slot].c;
	} else {
		if (mode == M_KEEP)
			c = &pool[slot].c;
		r = open_conn(c);
		if (r < 0)
			fail("a session cannot connect: %s", g_strerror(-r));
		if (mode == M_KEEP)
			pool[slot].used = true;
	}
	r = send_bytes(c, bytes->data, bytes->len);
	if (slot >= 0 && bytes->len)
		pool[slot].open_line = bytes->data[bytes->len - 1] != '\n';
	if (r == -ETIMEDOUT)
		fail("the arbiter stopped reading a session (%u bytes)", bytes->len);
	switch (mode) {
	case M_PING:
		/* Read even when a send failed: what it sent before the close counts. */
		if (r == 0 && bytes->len && bytes->data[bytes->len - 1] != '\n')
			r = send_bytes(c, "\n", 1); /* end its last line: ping is a line of its own */
		if (r == 0)
			send_bytes(c, "ping\n", 5);
		if (read_until(c, "pong", NULL, "session", NULL, NULL))
			pongs++;
		else
			closed_by_arbiter++;
		ctl_close(c);
		break;
	case M_ABRUPT:
		ctl_close(c);
		break;
	default:
		break; /* stays open */
	}
}

static void one_step(void)
{
	GByteArray *bytes = make_session();
	size_t roll = below(100);
	int slot = -1, used = 0;

	for (int i = 0; i < POOL_MAX; i++)
		used += pool[i].used;
	if (roll < 60) {
		run_session(M_PING, -1, bytes);
	} else if (roll < 80) {
		run_session(M_ABRUPT, -1, bytes);
	} else if (roll < 90 || !used) {
		for (int i = 0; i < POOL_MAX && slot < 0; i++)
			if (!pool[i].used)
				slot = i;
		if (slot < 0) { /* full: let one go, checked or not */
			slot = (int)below(POOL_MAX);
			pool_close(slot, below(2));
		}
		run_session(M_KEEP, slot, bytes);
	} else {
		do
			slot = (int)below(POOL_MAX);
		while (!pool[slot].used);
		if (below(3))
			run_session(M_MORE, slot, bytes);
		else
			pool_close(slot, below(2));
	}
	g_byte_array_unref(bytes);
}

/* ---- failure: keep what led to it ---- */

static void save_artifacts(void)
{
	g_autofree char *dir = g_strdup_printf("%s/arbiterd-%llu-%llu", cfg.artifacts,
					       (unsigned long long)cfg.seed, iter);
	g_autofree char *logcopy = g_build_filename(dir, "arbiterd.log", NULL);
	g_autofree char *log = NULL;
	GPtrArray *all = g_ptr_array_new();
	gsize len;
	unsigned n = 0;

	if (!history)
		return;
	if (g_mkdir_with_parents(dir, 0755) < 0) {
		fprintf(stderr, "fuzz-arbiterd: %s: %s\n", dir, g_strerror(errno));
		return;
	}
	/* The pool's sessions older than the history first, then the history. */
	for (int i = 0; i < POOL_MAX; i++)
		for (guint j = 0; pool[i].used && j < pool[i].sent->len; j++) {
			struct sent *s = pool[i].sent->pdata[j];
			bool in_history = false;
			for (guint k = 0; k < history->len && !in_history; k++)
				in_history = ((struct sent *)history->pdata[k])->bytes == s->bytes;
			if (!in_history)
				g_ptr_array_add(all, s);
		}
	for (guint k = 0; k < history->len; k++)
		g_ptr_array_add(all, history->pdata[k]);
	for (guint k = 0; k < all->len; k++) {
		struct sent *s = all->pdata[k];
		g_autofree char *name = s->slot >= 0
			? g_strdup_printf("%s/%04u-%s-%d.bin", dir, n++, mode_names[s->mode], s->slot)
			: g_strdup_printf("%s/%04u-%s.bin", dir, n++, mode_names[s->mode]);
		g_file_set_contents(name, (const char *)s->bytes->data, s->bytes->len, NULL);
	}
	if (g_file_get_contents(log_path, &log, &len, NULL))
		g_file_set_contents(logcopy, log, (gssize)len, NULL);
	fprintf(stderr, "fuzz-arbiterd: %u sessions saved in %s (replay: --replay %s)\n", n, dir, dir);
	g_ptr_array_free(all, TRUE);
}

static void print_log_tail(void)
{
	g_autofree char *log = NULL;
	gsize len;

	if (!g_file_get_contents(log_path, &log, &len, NULL) || !len)
		return;
	fprintf(stderr, "--- the arbiter's log, last lines ---\n%s\n---\n",
		log + (len > 2000 ? len - 2000 : 0));
}

static void fail(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "fuzz-arbiterd: FAIL after %llu sessions (seed %llu): ", iter,
		(unsigned long long)cfg.seed);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	if (arb_pid > 0) {
		int st;
		g_usleep(100000);
		if (waitpid(arb_pid, &st, WNOHANG) == arb_pid) {
			if (WIFSIGNALED(st))
				fprintf(stderr, "fuzz-arbiterd: the arbiter died of signal %d\n", WTERMSIG(st));
			arb_pid = -1;
		}
	}
	save_artifacts();
	print_log_tail();
	kill_arbiter();
	fprintf(stderr, "fuzz-arbiterd: temp dir kept: %s\n", tmpdir);
	exit(1);
}

static void on_alarm(int sig)
{
	static const char msg[] = "fuzz-arbiterd: FAIL: the whole run took too long (a hang)\n";

	(void)!write(2, msg, sizeof(msg) - 1);
	if (arb_pid > 0)
		kill(arb_pid, SIGKILL);
	_exit(1);
}

/* ---- replay ---- */

static void replay_dir(const char *dir);

/* DIR: sessions (NNNN-MODE[-SLOT].bin), or directories of them named
 * arbiterd-* (tests/fuzz/crashes), each replayed on its own pool. */
static void replay(const char *dir)
{
	g_autoptr(GDir) d = g_dir_open(dir, 0, NULL);
	GPtrArray *subdirs = g_ptr_array_new_with_free_func(g_free);
	const char *name;
	bool sessions = false;

	if (!d) {
		fprintf(stderr, "fuzz-arbiterd: %s: cannot open\n", dir);
		exit(2);
	}
	while ((name = g_dir_read_name(d))) {
		g_autofree char *path = g_build_filename(dir, name, NULL);
		sessions |= g_str_has_suffix(name, ".bin");
		if (g_str_has_prefix(name, "arbiterd-") && g_file_test(path, G_FILE_TEST_IS_DIR))
			g_ptr_array_add(subdirs, g_steal_pointer(&path));
	}
	g_ptr_array_sort(subdirs, cmp_names);
	if (sessions)
		replay_dir(dir);
	for (guint i = 0; i < subdirs->len; i++)
		replay_dir(subdirs->pdata[i]);
	g_ptr_array_unref(subdirs);
}

static void replay_dir(const char *dir)
{
	g_autoptr(GDir) d = g_dir_open(dir, 0, NULL);
	GPtrArray *names = g_ptr_array_new_with_free_func(g_free);
	const char *name;

	while (d && (name = g_dir_read_name(d)))
		if (g_str_has_suffix(name, ".bin"))
			g_ptr_array_add(names, g_strdup(name));
	g_ptr_array_sort(names, cmp_names);
	for (guint i = 0; i < names->len; i++) {
		const char *n = names->pdata[i], *m = strchr(n, '-');
		g_autofree char *path = g_build_filename(dir, n, NULL);
		g_autofree char *data = NULL;
		gsize len;
		GByteArray *bytes;
		enum mode mode = M_PING;
		int slot = -1;

		if (!m || !g_file_get_contents(path, &data, &len, NULL))
			continue;
		for (int k = 0; k < 4; k++)
			if (g_str_has_prefix(m + 1, mode_names[k]))
				mode = (enum mode)k;
		if (mode == M_KEEP || mode == M_MORE) {
			const char *s = strchr(m + 1, '-');
			slot = s ? atoi(s + 1) % POOL_MAX : 0;
			if (mode == M_KEEP && pool[slot].used)
				pool_close(slot, false);
			if (mode == M_MORE && !pool[slot].used)
				mode = M_KEEP;
		}
		bytes = line_from(data, len);
		iter++;
		run_session(mode, slot, bytes);
		g_byte_array_unref(bytes);
		check_health();
	}
	for (int k = 0; k < POOL_MAX; k++) /* the next directory starts afresh */
		if (pool[k].used)
			pool_close(k, true);
	printf("fuzz-arbiterd: replayed %s: %u sessions\n", dir, names->len);
	g_ptr_array_unref(names);
}

/* ---- main ---- */

static void usage(void)
{
	fprintf(stderr, "usage: fuzz-arbiterd [-t SECONDS] [-s SEED] [-a ARTIFACT_DIR] [-c CORPUS_DIR]\n"
			"         [--rss-max-mb N] [--rss-growth-mb N] [--slow F] [--keep] [--replay DIR]\n"
			"         ARBITERD\n");
	exit(2);
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"rss-max-mb", required_argument, NULL, 'R'}, {"rss-growth-mb", required_argument, NULL, 'G'},
		{"slow", required_argument, NULL, 'S'},	      {"keep", no_argument, NULL, 'k'},
		{"replay", required_argument, NULL, 'r'},     {0}};
	unsigned long rss0, rss1, hwm;
	int opt, fds0, fds1 = -1, st;
	unsigned mounts = 0;
	double t0, t_end, t_warm;
	bool warm = false;
	const char *base;

	cfg.replays = g_ptr_array_new();
	while ((opt = getopt_long(argc, argv, "t:s:a:c:", longopts, NULL)) != -1) {
		switch (opt) {
		case 't': cfg.budget = strtod(optarg, NULL); break;
		case 's': cfg.seed = strtoull(optarg, NULL, 10); break;
		case 'a': cfg.artifacts = optarg; break;
		case 'c': cfg.corpus_dir = optarg; break;
		case 'R': cfg.rss_max_mb = (unsigned)strtoul(optarg, NULL, 10); break;
		case 'G': cfg.rss_growth_mb = (unsigned)strtoul(optarg, NULL, 10); break;
		case 'S': cfg.slow = strtod(optarg, NULL); break;
		case 'k': cfg.keep = true; break;
		case 'r': g_ptr_array_add(cfg.replays, optarg); break;
		default: usage();
		}
	}
	if (optind + 1 != argc || cfg.slow <= 0)
		usage();
	cfg.arbiterd = argv[optind];
	signal(SIGPIPE, SIG_IGN);
	signal(SIGALRM, on_alarm);
	alarm((unsigned)(cfg.budget + 120 * cfg.slow));
	base = g_getenv("TMPDIR");
	tmpdir = g_build_filename(base && *base ? base : "/tmp", "sm-fuzz-arb.XXXXXX", NULL);
	if (!g_mkdtemp(tmpdir)) {
		perror(tmpdir);
		return 2;
	}
	sock_path = g_build_filename(tmpdir, "arb.sock", NULL);
	log_path = g_build_filename(tmpdir, "arbiterd.log", NULL);
	history = g_ptr_array_new_with_free_func(sent_free);
	for (int i = 0; i < POOL_MAX; i++) {
		pool[i].c.fd = -1;
		pool[i].sent = g_ptr_array_new_with_free_func(sent_free);
	}
	load_corpus();
	rng_state = cfg.seed;

	start_arbiter();
	register_good();
	if (good_id <= 0)
		fail("the well-behaved mount got no id");
	check_health();
	fds0 = proc_fds();
	rss0 = proc_kib("VmRSS:");
	printf("fuzz-arbiterd: arbiter pid %d, socket %s, well-behaved mount %d, %u corpus sessions, seed %llu\n",
	       (int)arb_pid, sock_path, good_id, corpus->len, (unsigned long long)cfg.seed);

	for (guint i = 0; i < cfg.replays->len; i++)
		replay(cfg.replays->pdata[i]);
	t0 = now_s();
	t_warm = t0 + MIN(2.0, cfg.budget / 10);
	while (now_s() - t0 < cfg.budget) {
		iter++;
		one_step();
		check_health();
		if (!warm && now_s() > t_warm) {
			/* The first sessions grow the heap to its working size. */
			rss0 = MAX(rss0, proc_kib("VmRSS:"));
			warm = true;
		}
	}
	t_end = now_s();

	/* The end: every session closed, the arbiter back to where it started. */
	for (int i = 0; i < POOL_MAX; i++)
		if (pool[i].used)
			pool_close(i, true);
	for (int tries = 0; tries < 50 * cfg.slow; tries++) {
		mounts = check_status();
		fds1 = proc_fds();
		if (mounts == 1 && fds1 <= fds0)
			break;
		g_usleep(20000);
	}
	check_good();
	rss1 = proc_kib("VmRSS:");
	hwm = proc_kib("VmHWM:");
	printf("fuzz-arbiterd: %llu sessions (%llu ping, %llu abrupt, %llu keep, %llu more; %llu lines)"
	       " in %.1f s: %llu answered, %llu closed by the arbiter\n",
	       iter, sessions_by_mode[M_PING], sessions_by_mode[M_ABRUPT], sessions_by_mode[M_KEEP],
	       sessions_by_mode[M_MORE], lines_sent, t_end - t0, pongs, closed_by_arbiter);
	printf("fuzz-arbiterd: arbiter RSS %lu KiB after warm-up, %lu KiB at the end, peak %lu KiB; fds %d then %d\n",
	       rss0, rss1, hwm, fds0, fds1);
	if (mounts != 1)
		fail("status lists %u mounts with every session closed, not 1", mounts);
	if (fds1 > fds0)
		fail("the arbiter holds %d fds with every session closed, %d after start-up", fds1, fds0);
	if (!wrapped && hwm > cfg.rss_max_mb * 1024ul)
		fail("the arbiter's peak RSS %lu KiB is over %u MiB", hwm, cfg.rss_max_mb);
	if (!wrapped && rss1 > rss0 + cfg.rss_growth_mb * 1024ul)
		fail("the arbiter's RSS grew from %lu to %lu KiB", rss0, rss1);
	ctl_close(&good);
	kill(arb_pid, SIGTERM);
	for (int tries = 0; tries < 100 * cfg.slow; tries++) {
		if (waitpid(arb_pid, &st, WNOHANG) == arb_pid) {
			arb_pid = -1;
			break;
		}
		g_usleep(50000);
	}
	if (arb_pid > 0)
		fail("the arbiter did not exit within %.0f s of SIGTERM", 5 * cfg.slow);
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		fail("the arbiter's exit on SIGTERM: %s %d", WIFEXITED(st) ? "status" : "signal",
		     WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
	if (!cfg.keep) {
		unlink(log_path);
		unlink(sock_path);
		g_autofree char *lock = g_strconcat(sock_path, ".lock", NULL);
		unlink(lock);
		rmdir(tmpdir);
	}
	printf("fuzz-arbiterd: ok\n");
	return 0;
}
