/* The control socket's line codec and connection helpers (sched/ctl_proto.c). */
#include <check.h>
#include <errno.h>
#include <glib.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "ctl_proto.h"

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Build "w k=value\n", check it is one clean line, parse it back. */
static void round_trip(const char *value)
{
	g_autoptr(GString) line = g_string_new(NULL);
	struct ctl_msg m;

	ctl_begin(line, "w");
	ctl_add(line, "k", value);
	ctl_add(line, "empty", "");
	ctl_end(line);
	ck_assert_int_eq(line->str[line->len - 1], '\n');
	for (gsize i = 0; i + 1 < line->len; i++) {
		unsigned char c = (unsigned char)line->str[i];
		ck_assert_msg(c > 0x20 || c == ' ', "raw byte %#x on the wire", c);
		ck_assert_msg(c < 0x7f, "raw byte %#x on the wire", c);
	}
	ck_assert_int_eq(ctl_parse(line->str, line->len - 1, &m), 0);
	ck_assert_str_eq(m.word, "w");
	ck_assert_uint_eq(m.nfields, 2);
	ck_assert_str_eq(ctl_get(&m, "k"), value);
	ck_assert_str_eq(ctl_get(&m, "empty"), "");
	ck_assert_ptr_null(ctl_get(&m, "absent"));
	ctl_msg_clear(&m);
}

START_TEST(test_round_trip_every_byte)
{
	char all[256];

	for (int i = 1; i < 256; i++)
		all[i - 1] = (char)i;
	all[255] = '\0';
	round_trip(all);
	round_trip("a path/with spaces\nand newlines\r\t%41 = %%=");
	round_trip("%");
	round_trip("=");
	round_trip(" ");
	round_trip("\xff\xfe/\xc3\xa9");
	round_trip("");
}
END_TEST

START_TEST(test_numbers_round_trip)
{
	g_autoptr(GString) line = g_string_new(NULL);
	struct ctl_msg m;
	uint64_t u;
	int64_t i;

	ctl_begin(line, "n");
	ctl_add_u64(line, "max", UINT64_MAX);
	ctl_add_i64(line, "min", INT64_MIN);
	ctl_add_i64(line, "neg", -1);
	ctl_end(line);
	ck_assert_int_eq(ctl_parse(line->str, line->len - 1, &m), 0);
	ck_assert(ctl_get_u64(&m, "max", 0, &u));
	ck_assert(u == UINT64_MAX);
	ck_assert(ctl_get_i64(&m, "min", 0, &i));
	ck_assert(i == INT64_MIN);
	ck_assert(ctl_get_i64(&m, "neg", 0, &i));
	ck_assert_int_eq(i, -1);
	ck_assert(ctl_get_u64(&m, "absent", 7, &u));
	ck_assert_uint_eq(u, 7);
	ck_assert(ctl_get_i64(&m, "absent", -7, &i));
	ck_assert_int_eq(i, -7);
	ctl_msg_clear(&m);
}
END_TEST

static void rejected(const char *line, size_t len)
{
	struct ctl_msg m;

	ck_assert_msg(ctl_parse(line, len, &m) == -EPROTO, "accepted: '%.*s'",
		      (int)MIN(len, 80), line);
	ck_assert_ptr_null(m.word);
	ck_assert_uint_eq(m.nfields, 0);
	ctl_msg_clear(&m);
}

#define REJECT(s) rejected(s, sizeof(s) - 1)

START_TEST(test_rejects_bad_lines)
{
	REJECT("");
	REJECT(" status");
	REJECT("Status");
	REJECT("st.tus");
	REJECT("w Key=1");
	REJECT("w k.y=1");
	REJECT("w k/y=1");
	REJECT("w =1");
	REJECT("w k=%4");
	REJECT("w k=%");
	REJECT("w k=%zz");
	REJECT("w k=%g0");
	REJECT("w k");
	REJECT("w k=1 j");
	REJECT("w  k=1"); /* an empty field */
	REJECT("w k=1 ");
	REJECT("w k=a=b"); /* '=' must be escaped in a value */
	REJECT("w k=\x80");
	REJECT("w k=\x7f");
	REJECT("w k=\t");
	REJECT("w k=1\nj=2"); /* an embedded newline */
	REJECT("w\n");
}
END_TEST

START_TEST(test_field_and_length_limits)
{
	g_autoptr(GString) line = g_string_new("w");
	struct ctl_msg m;

	for (int i = 0; i < CTL_FIELDS_MAX; i++)
		g_string_append_printf(line, " k%d=%d", i, i);
	ck_assert_int_eq(ctl_parse(line->str, line->len, &m), 0);
	ck_assert_uint_eq(m.nfields, CTL_FIELDS_MAX);
	ctl_msg_clear(&m);
	g_string_append(line, " one=more");
	rejected(line->str, line->len);

	/* CTL_LINE_MAX counts the '\n': CTL_LINE_MAX - 1 bytes are the most. */
	g_string_assign(line, "w k=");
	while (line->len < CTL_LINE_MAX - 1)
		g_string_append_c(line, 'x');
	ck_assert_int_eq(ctl_parse(line->str, line->len, &m), 0);
	ck_assert_uint_eq(strlen(ctl_get(&m, "k")), CTL_LINE_MAX - 5);
	ctl_msg_clear(&m);
	g_string_append_c(line, 'x');
	rejected(line->str, line->len);
}
END_TEST

/* A value that is not a number. */
static void bad_number(const char *encoded)
{
	g_autofree char *line = g_strdup_printf("w n=%s", encoded);
	struct ctl_msg m;
	uint64_t u;
	int64_t i;

	ck_assert_int_eq(ctl_parse(line, strlen(line), &m), 0);
	ck_assert_msg(!ctl_get_u64(&m, "n", 0, &u), "u64 accepted '%s'", encoded);
	ck_assert_msg(!ctl_get_i64(&m, "n", 0, &i), "i64 accepted '%s'", encoded);
	ctl_msg_clear(&m);
}

START_TEST(test_malformed_numbers)
{
	struct ctl_msg m;
	uint64_t u;
	int64_t i;

	bad_number("");
	bad_number("x");
	bad_number("12x");
	bad_number("1.5");
	bad_number("0x10");
	bad_number("--1");
	bad_number("99999999999999999999"); /* above UINT64_MAX */
	ck_assert_int_eq(ctl_parse("w n=-1 big=9223372036854775808", 30, &m), 0);
	ck_assert(!ctl_get_u64(&m, "n", 0, &u)); /* negative */
	ck_assert(ctl_get_i64(&m, "n", 0, &i));
	ck_assert(!ctl_get_i64(&m, "big", 0, &i)); /* above INT64_MAX */
	ck_assert(ctl_get_u64(&m, "big", 0, &u));
	ctl_msg_clear(&m);
}
END_TEST

/*
 * Failed at 1c07903 (g_ascii_strto(u)ll skip leading white space and take a
 * sign, so "%205", "+5" and, as a u64, "%20-5" = 2^64 - 5 passed); numbers
 * are plain digits since.
 */
START_TEST(test_numbers_digits_only)
{
	bad_number("+5");
	bad_number("%205");
	bad_number("%20-5");
	bad_number("5%20");
}
END_TEST

/* ---- ctl_read_line over a socketpair ---- */

struct pair {
	struct ctl_conn c;
	int peer;
};

static void pair_open(struct pair *p)
{
	int sv[2];

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	memset(&p->c, 0, sizeof(p->c));
	p->c.fd = sv[0];
	p->peer = sv[1];
}

static void pair_close(struct pair *p)
{
	ctl_close(&p->c);
	if (p->peer >= 0)
		close(p->peer);
}

static void put(struct pair *p, const char *s, size_t len)
{
	ck_assert_int_eq(write(p->peer, s, len), (ssize_t)len);
}

#define PUT(p, s) put(p, s, sizeof(s) - 1)

START_TEST(test_read_line_split_and_joined)
{
	char out[CTL_LINE_MAX + 1];
	struct pair p;

	pair_open(&p);
	PUT(&p, "sta");
	ck_assert_int_eq(ctl_read_line(&p.c, out, 20), -ETIMEDOUT); /* half a line */
	PUT(&p, "tus\n");
	ck_assert_int_eq(ctl_read_line(&p.c, out, 1000), 6);
	ck_assert_str_eq(out, "status");
	PUT(&p, "ok a=1\nprogress b=2\nrest");
	ck_assert_int_eq(ctl_read_line(&p.c, out, 1000), 6);
	ck_assert_str_eq(out, "ok a=1");
	ck_assert_int_eq(ctl_read_line(&p.c, out, 0), 12); /* already here: no wait */
	ck_assert_str_eq(out, "progress b=2");
	PUT(&p, "\n\n");
	ck_assert_int_eq(ctl_read_line(&p.c, out, 1000), 4);
	ck_assert_str_eq(out, "rest");
	ck_assert_int_eq(ctl_read_line(&p.c, out, 1000), 0); /* an empty line is a line */
	pair_close(&p);
}
END_TEST

START_TEST(test_read_line_too_long)
{
	char out[CTL_LINE_MAX + 1], big[CTL_LINE_MAX + 1];
	struct pair p;

	memset(big, 'x', sizeof(big));
	pair_open(&p);
	big[CTL_LINE_MAX - 1] = '\n'; /* the longest line: fine */
	put(&p, big, CTL_LINE_MAX);
	ck_assert_int_eq(ctl_read_line(&p.c, out, 1000), CTL_LINE_MAX - 1);
	big[CTL_LINE_MAX - 1] = 'x';
	big[CTL_LINE_MAX] = '\n'; /* one more: too long, with its '\n' here */
	put(&p, big, CTL_LINE_MAX + 1);
	ck_assert_int_eq(ctl_read_line(&p.c, out, 1000), -EPROTO);
	pair_close(&p);

	pair_open(&p); /* too long and no '\n' in sight: no waiting for one */
	put(&p, big, CTL_LINE_MAX);
	ck_assert_int_eq(ctl_read_line(&p.c, out, 5000), -EPROTO);
	pair_close(&p);
}
END_TEST

START_TEST(test_read_line_timeout_and_eof)
{
	char out[CTL_LINE_MAX + 1];
	struct pair p;
	int64_t t0;

	pair_open(&p);
	t0 = mono_ms();
	ck_assert_int_eq(ctl_read_line(&p.c, out, 100), -ETIMEDOUT);
	ck_assert_int_ge(mono_ms() - t0, 95);
	ck_assert_int_lt(mono_ms() - t0, 2000);
	PUT(&p, "last\npartial");
	close(p.peer);
	p.peer = -1;
	ck_assert_int_eq(ctl_read_line(&p.c, out, 1000), 4);
	ck_assert_int_eq(ctl_read_line(&p.c, out, 1000), -ECONNRESET);
	pair_close(&p);
}
END_TEST

START_TEST(test_send)
{
	char buf[64];
	struct pair p;

	pair_open(&p);
	ck_assert_int_eq(ctl_send(&p.c, "pause\n"), 0);
	ck_assert_int_eq(read(p.peer, buf, sizeof(buf)), 6);
	close(p.peer);
	p.peer = -1;
	ck_assert_int_eq(ctl_send(&p.c, "pause\n"), -EPIPE); /* no SIGPIPE */
	pair_close(&p);
}
END_TEST

/* ---- ctl_connect against a listener in a thread ---- */

struct listener {
	char *dir, *path;
	int fd;
	const char *greeting; /* NULL: say nothing */
	pthread_t thread;
};

static void *listener_main(void *arg)
{
	struct listener *l = arg;
	int fd = accept(l->fd, NULL, NULL);
	char buf[16];

	if (fd < 0)
		return NULL;
	if (l->greeting && write(fd, l->greeting, strlen(l->greeting)) < 0)
		perror("listener");
	while (read(fd, buf, sizeof(buf)) > 0) /* until the client closes */
		;
	close(fd);
	return NULL;
}

static void listener_start(struct listener *l, const char *greeting, bool serve)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};

	l->dir = g_dir_make_tmp("ctl-proto-XXXXXX", NULL);
	ck_assert_ptr_nonnull(l->dir);
	l->path = g_build_filename(l->dir, "ctl-1.sock", NULL);
	l->greeting = greeting;
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", l->path);
	l->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_eq(bind(l->fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(l->fd, 4), 0);
	if (serve)
		ck_assert_int_eq(pthread_create(&l->thread, NULL, listener_main, l), 0);
	else
		l->thread = 0;
}

static void listener_stop(struct listener *l)
{
	if (l->thread)
		pthread_join(l->thread, NULL);
	if (l->fd >= 0)
		close(l->fd);
	unlink(l->path);
	rmdir(l->dir);
	g_free(l->path);
	g_free(l->dir);
}

static int connect_with(const char *greeting, struct ctl_conn *c, int timeout_ms)
{
	struct listener l;
	int r;

	listener_start(&l, greeting, true);
	r = ctl_connect(c, l.path, timeout_ms);
	if (r == 0)
		ck_assert_int_ge(c->fd, 0);
	else
		ck_assert_int_eq(c->fd, -1);
	ctl_close(c);
	listener_stop(&l);
	return r;
}

START_TEST(test_connect_greeting)
{
	struct ctl_conn c;

	ck_assert_int_eq(connect_with("slowmedia-ctl version=1 pid=4242\n", &c, 1000), 0);
	ck_assert_int_eq(c.pid, 4242);
	ck_assert_int_eq(connect_with("slowmedia-ctl version=2 pid=1\n", &c, 1000),
			 -EPROTO);
	ck_assert_int_eq(connect_with("slowmedia-ctl version=x pid=1\n", &c, 1000),
			 -EPROTO);
	ck_assert_int_eq(connect_with("slowmedia-ctl pid=1\n", &c, 1000), -EPROTO);
	ck_assert_int_eq(connect_with("hello version=1 pid=1\n", &c, 1000), -EPROTO);
	ck_assert_int_eq(connect_with("not a greeting at all\n", &c, 1000), -EPROTO);
	ck_assert_int_eq(connect_with(NULL, &c, 100), -ETIMEDOUT);
}
END_TEST

START_TEST(test_connect_failures)
{
	struct ctl_conn c;
	struct listener l;
	g_autofree char *stale = NULL;

	ck_assert_int_eq(ctl_connect(&c, "/nonexistent/ctl-1.sock", 100), -ENOENT);
	listener_start(&l, NULL, false);
	close(l.fd); /* the socket file stays: a daemon that died */
	l.fd = -1;
	ck_assert_int_eq(ctl_connect(&c, l.path, 100), -ECONNREFUSED);
	listener_stop(&l);
	stale = g_strnfill(200, 'x');
	ck_assert_int_eq(ctl_connect(&c, stale, 100), -ENAMETOOLONG);
}
END_TEST

START_TEST(test_dir_for)
{
	g_autofree char *root = NULL, *user = NULL, *over = NULL, *rel = NULL;

	g_unsetenv(CTL_DIR_ENV);
	g_setenv("XDG_RUNTIME_DIR", "/run/user/1000", TRUE);
	root = ctl_dir_for(0);
	user = ctl_dir_for(1000);
	ck_assert_str_eq(root, CTL_ROOT_DIR);
	ck_assert_str_eq(user, "/run/user/1000/slowmedia");
	g_setenv(CTL_DIR_ENV, "/tmp/x", TRUE);
	over = ctl_dir_for(0);
	ck_assert_str_eq(over, "/tmp/x");
	g_setenv(CTL_DIR_ENV, "relative", TRUE); /* not absolute: ignored */
	rel = ctl_dir_for(0);
	ck_assert_str_eq(rel, CTL_ROOT_DIR);
	g_unsetenv(CTL_DIR_ENV);
}
END_TEST

START_TEST(test_list_sockets)
{
	g_autofree char *dir = g_dir_make_tmp("ctl-list-XXXXXX", NULL);
	static const char *const names[] = {"ctl-2.sock", "ctl-1.sock", "other.sock",
					    "ctl-3.sockx", "xctl-4.sock"};
	g_autoptr(GPtrArray) found = NULL;

	for (unsigned i = 0; i < G_N_ELEMENTS(names); i++) {
		g_autofree char *p = g_build_filename(dir, names[i], NULL);
		ck_assert(g_file_set_contents(p, "", 0, NULL));
	}
	g_setenv(CTL_DIR_ENV, dir, TRUE);
	found = ctl_list_sockets();
	g_unsetenv(CTL_DIR_ENV);
	ck_assert_uint_eq(found->len, 2);
	ck_assert(g_str_has_suffix(found->pdata[0], "/ctl-1.sock"));
	ck_assert(g_str_has_suffix(found->pdata[1], "/ctl-2.sock"));
	for (unsigned i = 0; i < G_N_ELEMENTS(names); i++) {
		g_autofree char *p = g_build_filename(dir, names[i], NULL);
		unlink(p);
	}
	rmdir(dir);
}
END_TEST

/* ctl_inbuf_recv's callback: collects lines; stops after stop_after. */
struct lines {
	GPtrArray *got;
	unsigned stop_after;
};

static bool take_line(void *arg, const char *line, size_t len)
{
	struct lines *l = arg;

	g_ptr_array_add(l->got, g_strndup(line, len));
	return l->got->len < l->stop_after;
}

START_TEST(test_inbuf_recv)
{
	int sv[2];
	struct ctl_inbuf ib = {.have = 0};
	struct lines l = {.got = g_ptr_array_new_with_free_func(g_free), .stop_after = 100};
	char *big;

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	/* Nothing there yet: goes on, nothing taken. */
	ck_assert_int_eq(ctl_inbuf_recv(&ib, sv[0], take_line, &l), 1);
	ck_assert_uint_eq(l.got->len, 0);
	/* Two lines and a half, then the rest of the half. */
	ck_assert_int_eq(write(sv[1], "a x=1\nb\npart", 12), 12);
	ck_assert_int_eq(ctl_inbuf_recv(&ib, sv[0], take_line, &l), 1);
	ck_assert_uint_eq(l.got->len, 2);
	ck_assert_str_eq(g_ptr_array_index(l.got, 0), "a x=1");
	ck_assert_str_eq(g_ptr_array_index(l.got, 1), "b");
	ck_assert_uint_eq(ib.have, 4);
	ck_assert_int_eq(write(sv[1], "ial\n", 4), 4);
	ck_assert_int_eq(ctl_inbuf_recv(&ib, sv[0], take_line, &l), 1);
	ck_assert_str_eq(g_ptr_array_index(l.got, 2), "partial");
	ck_assert_uint_eq(ib.have, 0);
	/* The callback stops: later lines stay in the buffer, untouched. */
	l.stop_after = 4;
	ck_assert_int_eq(write(sv[1], "c\nd\n", 4), 4);
	ck_assert_int_eq(ctl_inbuf_recv(&ib, sv[0], take_line, &l), 1);
	ck_assert_uint_eq(l.got->len, 4);
	ck_assert_uint_eq(ib.have, 4);
	/* CTL_LINE_MAX bytes without a newline: -EMSGSIZE. */
	ib.have = 0;
	big = g_malloc(CTL_LINE_MAX);
	memset(big, 'x', CTL_LINE_MAX);
	ck_assert_int_eq(write(sv[1], big, CTL_LINE_MAX), CTL_LINE_MAX);
	ck_assert_int_eq(ctl_inbuf_recv(&ib, sv[0], take_line, &l), -EMSGSIZE);
	g_free(big);
	/* The peer closes: 0. */
	ib.have = 0;
	close(sv[1]);
	ck_assert_int_eq(ctl_inbuf_recv(&ib, sv[0], take_line, &l), 0);
	close(sv[0]);
	/* A closed descriptor: -errno. */
	ck_assert_int_eq(ctl_inbuf_recv(&ib, sv[0], take_line, &l), -EBADF);
	g_ptr_array_free(l.got, TRUE);
}
END_TEST

START_TEST(test_outbuf_send)
{
	int sv[2], sndbuf = 4096;
	g_autoptr(GString) out = g_string_new("hello\n");
	char buf[64];
	size_t sent = 0;

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	ck_assert_int_eq(ctl_outbuf_send(out, sv[0]), 0);
	ck_assert_uint_eq(out->len, 0);
	ck_assert_int_eq(read(sv[1], buf, sizeof(buf)), 6);
	/* More than the socket takes now: what is left waits in out. */
	setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
	for (int i = 0; i < 100000; i++)
		g_string_append(out, "0123456789");
	sent = out->len;
	ck_assert_int_eq(ctl_outbuf_send(out, sv[0]), 0);
	ck_assert_uint_gt(out->len, 0);
	ck_assert_uint_lt(out->len, sent);
	/* The peer gone: -EPIPE, no SIGPIPE. */
	close(sv[1]);
	ck_assert_int_eq(ctl_outbuf_send(out, sv[0]), -EPIPE);
	close(sv[0]);
}
END_TEST

static Suite *ctl_proto_suite(void)
{
	Suite *s = suite_create("ctl_proto");
	TCase *codec = tcase_create("codec"), *conn = tcase_create("connection");

	tcase_add_test(codec, test_round_trip_every_byte);
	tcase_add_test(codec, test_numbers_round_trip);
	tcase_add_test(codec, test_rejects_bad_lines);
	tcase_add_test(codec, test_field_and_length_limits);
	tcase_add_test(codec, test_malformed_numbers);
	tcase_add_test(codec, test_numbers_digits_only);
	suite_add_tcase(s, codec);
	tcase_add_test(conn, test_read_line_split_and_joined);
	tcase_add_test(conn, test_read_line_too_long);
	tcase_add_test(conn, test_read_line_timeout_and_eof);
	tcase_add_test(conn, test_send);
	tcase_add_test(conn, test_connect_greeting);
	tcase_add_test(conn, test_connect_failures);
	tcase_add_test(conn, test_dir_for);
	tcase_add_test(conn, test_list_sockets);
	tcase_add_test(conn, test_inbuf_recv);
	tcase_add_test(conn, test_outbuf_send);
	tcase_set_timeout(conn, 20);
	suite_add_tcase(s, conn);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(ctl_proto_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
