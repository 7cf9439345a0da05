/*
 * arbrtt: the grant round trip of slowmedia-arbiterd (tests/bench/arbiter-overhead.sh).
 *
 *   arbrtt SOCKET [--clients N] [--rounds R] [--warmup W] [--bytes B] [--all]
 *
 * Connects N clients (default 8) to the arbiter on SOCKET and registers them
 * in one group, as N mounts on one head (protocol: sched/arb_proto.h). Then:
 *
 *   default  one client is busy, the others registered and silent: R times
 *            request -> grant -> done, back to back, as a flusher does it
 *            for chunks of B bytes, each done carrying the next request in
 *            the same write as the mount's client sends them (no chunk is
 *            written: the time is the arbiter's and the socket's alone)
 *   --all    all N contend: each asks again right after its done, so the
 *            group always has N-1 requests waiting; R grants in all
 *
 * The first W rounds (default R / 10) are not counted. Prints one line of
 * key=value: the request -> grant latency's p50_us, p99_us, max_us, mean_us,
 * n (counted rounds); cycle_us (wall time per grant: request, grant, done,
 * next request); grants_s; and in --all mode the fewest and most grants one
 * client got (fair sharing among equal weights: close to each other).
 * Exit 0, or 1 with a message when the arbiter misbehaves or goes away.
 */
#include "arb_proto.h"
#include "ctl_proto.h"
#include "sched_opts.h"

#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define RTT_TIMEOUT_MS 5000
#define RTT_CLIENTS_MAX 64
#define RTT_GROUP "arbrtt"

struct rtt_client {
	struct ctl_conn conn;
	double asked_s; /* when its request was sent; 0: none out */
	unsigned long grants;
};

struct rtt {
	struct rtt_client c[RTT_CLIENTS_MAX];
	unsigned n;
	unsigned long rounds, warmup;
	unsigned long bytes;
	double *lat_us; /* counted rounds */
	unsigned long nlat;
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int fail(const char *what, int err)
{
	fprintf(stderr, "arbrtt: %s: %s\n", what, err ? strerror(-err) : "unexpected reply");
	return -1;
}

/* A request, after a done when done is set: one write, one message. */
static int send_ask(struct rtt_client *c, unsigned long bytes, bool done)
{
	g_autoptr(GString) l = g_string_new(NULL);

	if (done) {
		ctl_begin(l, "done");
		ctl_add_u64(l, "bytes", bytes);
		ctl_end(l);
	}
	ctl_begin(l, "request");
	ctl_add_u64(l, "bytes", bytes);
	ctl_add_u64(l, "urgent", 0);
	ctl_end(l);
	return ctl_send(&c->conn, l->str);
}

/* The next line of c that is not a `peers` notice: its word in word. */
static int next_word(struct rtt_client *c, char *word, size_t size, int timeout_ms)
{
	char line[CTL_LINE_MAX + 1];

	for (;;) {
		int r = ctl_read_line(&c->conn, line, timeout_ms);
		if (r < 0)
			return r;
		if (!strncmp(line, "peers", 5) && (line[5] == ' ' || !line[5]))
			continue;
		snprintf(word, size, "%.*s", (int)strcspn(line, " "), line);
		if (!strcmp(word, "error"))
			fprintf(stderr, "arbrtt: arbiter says: %s\n", line);
		return 0;
	}
}

static bool has_line(const struct rtt_client *c)
{
	return memchr(c->conn.buf, '\n', c->conn.have) != NULL;
}

static int connect_all(struct rtt *t, const char *sock)
{
	char word[32];

	for (unsigned i = 0; i < t->n; i++) {
		struct rtt_client *c = &t->c[i];
		g_autoptr(GString) l = g_string_new(NULL);
		g_autofree char *mp = g_strdup_printf("/arbrtt/%u", i);
		int r = ctl_connect_word(&c->conn, sock, "slowmedia-arbiter", ARB_VERSION,
					 RTT_TIMEOUT_MS);
		if (r < 0)
			return fail(sock, r);
		ctl_begin(l, "register");
		ctl_add(l, "group", RTT_GROUP);
		ctl_add_u64(l, "prio", SCHED_PRIO_DEFAULT);
		ctl_add(l, "class", "be");
		ctl_add_u64(l, "weight", SCHED_WEIGHT_DEFAULT);
		ctl_add_u64(l, "rate", 0);
		ctl_add(l, "medium", "arbrtt");
		ctl_add(l, "mountpoint", mp);
		ctl_end(l);
		r = ctl_send(&c->conn, l->str);
		if (r < 0)
			return fail("register", r);
		r = next_word(c, word, sizeof(word), RTT_TIMEOUT_MS);
		if (r < 0)
			return fail("register", r);
		if (strcmp(word, "registered"))
			return fail("register", 0);
	}
	return 0;
}

static void count(struct rtt *t, unsigned long round, double lat_s)
{
	if (round >= t->warmup)
		t->lat_us[t->nlat++] = lat_s * 1e6;
}

/* One client busy, request -> grant -> done, the others silent. */
static int run_one(struct rtt *t, double *elapsed)
{
	struct rtt_client *c = &t->c[0];
	char word[32];
	double start = 0;

	for (unsigned long i = 0; i < t->rounds; i++) {
		double t0;
		int r;

		if (i == t->warmup)
			start = now_s();
		t0 = now_s();
		r = send_ask(c, t->bytes, i > 0);
		if (r < 0)
			return fail("done and request", r);
		r = next_word(c, word, sizeof(word), RTT_TIMEOUT_MS);
		if (r < 0)
			return fail("waiting for the grant", r);
		if (strcmp(word, "grant"))
			return fail("waiting for the grant", 0);
		count(t, i, now_s() - t0);
		c->grants++;
	}
	*elapsed = now_s() - start;
	return 0;
}

/* A grant to client i: done at once, with the next request. */
static int on_grant(struct rtt *t, unsigned i, unsigned long *round)
{
	struct rtt_client *c = &t->c[i];
	double now = now_s();
	int r;

	if (!c->asked_s)
		return fail("a grant without a request", 0);
	count(t, (*round)++, now - c->asked_s);
	c->grants++;
	c->asked_s = now_s();
	r = send_ask(c, t->bytes, true);
	return r < 0 ? fail("done and request", r) : 0;
}

/* All clients contend for the group's one grant. */
static int run_all(struct rtt *t, double *elapsed)
{
	struct pollfd pfd[RTT_CLIENTS_MAX];
	unsigned long round = 0;
	double start = 0;
	char word[32];

	for (unsigned i = 0; i < t->n; i++) {
		int r;

		t->c[i].asked_s = now_s();
		r = send_ask(&t->c[i], t->bytes, false);
		if (r < 0)
			return fail("request", r);
		pfd[i] = (struct pollfd){.fd = t->c[i].conn.fd, .events = POLLIN};
	}
	while (round < t->rounds) {
		int r = 0;

		for (unsigned i = 0; i < t->n && round < t->rounds; i++) {
			if (!has_line(&t->c[i]) && !(pfd[i].revents & POLLIN))
				continue;
			pfd[i].revents = 0;
			/* A line buffered, or data the poll saw: read what is there. */
			while (round < t->rounds &&
			       (r = next_word(&t->c[i], word, sizeof(word), 0)) == 0) {
				if (strcmp(word, "grant"))
					return fail("waiting for a grant", 0);
				if (round == t->warmup)
					start = now_s();
				if (on_grant(t, i, &round) < 0)
					return -1;
				if (!has_line(&t->c[i]))
					break;
			}
			if (r < 0 && r != -ETIMEDOUT)
				return fail("waiting for a grant", r);
		}
		if (round >= t->rounds)
			break;
		r = poll(pfd, t->n, RTT_TIMEOUT_MS);
		if (r == 0)
			return fail("waiting for a grant", -ETIMEDOUT);
		if (r < 0 && errno != EINTR)
			return fail("poll", -errno);
	}
	*elapsed = now_s() - start;
	return 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double pct(const double *v, unsigned long n, double p)
{
	unsigned long i;

	if (!n)
		return 0;
	i = (unsigned long)(p * (double)(n - 1) + 0.5);
	return v[i < n ? i : n - 1];
}

static void print_result(struct rtt *t, bool all, double elapsed)
{
	double sum = 0;
	unsigned long gmin = (unsigned long)-1, gmax = 0;

	qsort(t->lat_us, t->nlat, sizeof(double), cmp_double);
	for (unsigned long i = 0; i < t->nlat; i++)
		sum += t->lat_us[i];
	for (unsigned i = 0; i < t->n; i++) {
		gmin = MIN(gmin, t->c[i].grants);
		gmax = MAX(gmax, t->c[i].grants);
	}
	printf("mode=%s clients=%u n=%lu p50_us=%.1f p99_us=%.1f max_us=%.1f mean_us=%.1f "
	       "cycle_us=%.1f grants_s=%.0f",
	       all ? "all" : "one", t->n, t->nlat, pct(t->lat_us, t->nlat, 0.5),
	       pct(t->lat_us, t->nlat, 0.99), t->nlat ? t->lat_us[t->nlat - 1] : 0,
	       t->nlat ? sum / (double)t->nlat : 0, t->nlat ? elapsed * 1e6 / (double)t->nlat : 0,
	       elapsed > 0 ? (double)t->nlat / elapsed : 0);
	if (all)
		printf(" client_grants_min=%lu client_grants_max=%lu", gmin, gmax);
	printf("\n");
}

static void usage(FILE *out)
{
	fprintf(out, "usage: arbrtt SOCKET [--clients N] [--rounds R] [--warmup W] [--bytes B] [--all]\n");
}

int main(int argc, char *argv[])
{
	static const struct option longopts[] = {
	    {"clients", required_argument, NULL, 'n'}, {"rounds", required_argument, NULL, 'r'},
	    {"warmup", required_argument, NULL, 'w'},  {"bytes", required_argument, NULL, 'b'},
	    {"all", no_argument, NULL, 'a'},	       {"help", no_argument, NULL, 'h'},
	    {0}};
	static struct rtt t = {.n = 8, .rounds = 20000, .bytes = 262144};
	bool all = false;
	long warmup = -1;
	double elapsed = 0;
	int opt, rc;

	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (opt) {
		case 'n': t.n = (unsigned)strtoul(optarg, NULL, 10); break;
		case 'r': t.rounds = strtoul(optarg, NULL, 10); break;
		case 'w': warmup = strtol(optarg, NULL, 10); break;
		case 'b': t.bytes = strtoul(optarg, NULL, 10); break;
		case 'a': all = true; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind + 1 != argc || t.n < 1 || t.n > RTT_CLIENTS_MAX || t.rounds < 1) {
		usage(stderr);
		return 2;
	}
	t.warmup = warmup >= 0 ? (unsigned long)warmup : t.rounds / 10;
	if (t.warmup >= t.rounds)
		t.warmup = t.rounds - 1;
	t.lat_us = g_new0(double, t.rounds);
	rc = connect_all(&t, argv[optind]);
	if (rc == 0)
		rc = all ? run_all(&t, &elapsed) : run_one(&t, &elapsed);
	if (rc == 0)
		print_result(&t, all, elapsed);
	for (unsigned i = 0; i < t.n; i++)
		ctl_close(&t.c[i].conn);
	g_free(t.lat_us);
	return rc == 0 ? 0 : 1;
}
