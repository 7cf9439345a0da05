/*
 * The control client (mount-helpers/ctl_client.c) against a scripted peer in
 * a thread: answers, error mapping, refusals, hung and stale daemons, the
 * search by mount point, drain's progress, timeout and interruption. The
 * real daemon is exercised by tests/mount/ctl.
 */
#include <check.h>
#include <errno.h>
#include <glib.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "ctl_client.h"

#define GREETING "slowmedia-ctl version=1 pid=77\n"

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A scripted daemon: the greeting, then one canned answer per request word. */
struct fake {
	char *dir, *path;
	int lfd;
	const char *greeting; /* NULL: GREETING; "": says nothing */
	const char *status, *drain, *other;
	bool serve;
	atomic_bool stop; /* set by the test, polled by the thread */
	pthread_t thread;
	GString *got; /* the requests: the thread's until fake_join */
};

static void serve_one(struct fake *f, int fd)
{
	const char *g = f->greeting ? f->greeting : GREETING;
	char buf[CTL_LINE_MAX];
	size_t have = 0;
	char *nl;
	ssize_t n;

	if (*g && write(fd, g, strlen(g)) < 0)
		return;
	while ((n = read(fd, buf + have, sizeof(buf) - have)) > 0) {
		have += (size_t)n;
		while ((nl = memchr(buf, '\n', have))) {
			const char *a = f->other;
			size_t len = (size_t)(nl - buf) + 1;

			g_string_append_len(f->got, buf, (gssize)len);
			if (g_str_has_prefix(buf, "status"))
				a = f->status;
			else if (g_str_has_prefix(buf, "drain"))
				a = f->drain;
			if (a && *a && write(fd, a, strlen(a)) < 0)
				return;
			have -= len;
			memmove(buf, nl + 1, have);
		}
	}
}

static void *fake_main(void *arg)
{
	struct fake *f = arg;

	while (!atomic_load(&f->stop)) {
		struct pollfd p = {.fd = f->lfd, .events = POLLIN};
		int fd;

		if (poll(&p, 1, 20) <= 0)
			continue;
		fd = accept(f->lfd, NULL, NULL);
		if (fd < 0)
			continue;
		serve_one(f, fd);
		close(fd);
	}
	return NULL;
}

/* In dir (NULL: a new temp dir), as ctl-PID.sock; backlog as given. */
static void fake_listen(struct fake *f, const char *dir, int pid, int backlog)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};

	f->dir = dir ? g_strdup(dir) : g_dir_make_tmp("ctl-client-XXXXXX", NULL);
	f->path = g_strdup_printf("%s/ctl-%d.sock", f->dir, pid);
	f->got = g_string_new(NULL);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", f->path);
	f->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_eq(bind(f->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(f->lfd, backlog), 0);
}

static void fake_start(struct fake *f, const char *dir, int pid)
{
	fake_listen(f, dir, pid, 8);
	f->serve = true;
	ck_assert_int_eq(pthread_create(&f->thread, NULL, fake_main, f), 0);
}

/* Ends the thread: after this the test may read f->got. */
static void fake_join(struct fake *f)
{
	atomic_store(&f->stop, true);
	if (f->serve)
		pthread_join(f->thread, NULL);
	f->serve = false;
}

static void fake_stop(struct fake *f, bool rm_dir)
{
	fake_join(f);
	close(f->lfd);
	unlink(f->path);
	if (rm_dir)
		rmdir(f->dir);
	g_string_free(f->got, TRUE);
	g_free(f->path);
	g_free(f->dir);
}

START_TEST(test_request_ok_and_errors)
{
	struct fake f = {.other = "ok\n"};
	g_autofree char *why = NULL;

	fake_start(&f, NULL, 10);
	ck_assert_int_eq(ctlc_request(f.path, "pause\n", &why), 0);
	f.other = "error code=ENOTSUP msg=not%20yet\n";
	ck_assert_int_eq(ctlc_request(f.path, "set prio=1\n", &why), -ENOTSUP);
	ck_assert_str_eq(why, "not yet");
	f.other = "error code=EOPNOTSUPP msg=x\n";
	ck_assert_int_eq(ctlc_request(f.path, "set prio=1\n", &why), -EOPNOTSUPP);
	f.other = "error code=EINVAL\n";
	ck_assert_int_eq(ctlc_request(f.path, "set rate=1\n", &why), -EINVAL);
	ck_assert_str_eq(why, g_strerror(EINVAL));
	f.other = "error code=EBOGUS msg=x\n";
	ck_assert_int_eq(ctlc_request(f.path, "pause\n", &why), -EPROTO);
	ck_assert_ptr_nonnull(strstr(why, "EBOGUS"));
	bool answered = false;
	f.other = "error code=ENOTCONN msg=no%20arbiter\n"; /* the daemon's, not ours */
	ck_assert_int_eq(ctlc_request_ex(f.path, "set prio=1\n", &answered, &why), -ENOTCONN);
	ck_assert(answered);
	f.other = "ok\n";
	ck_assert_int_eq(ctlc_request_ex(f.path, "pause\n", &answered, &why), 0);
	ck_assert(!answered);
	f.other = "progress a=1\nok\n"; /* records before the final line are skipped */
	ck_assert_int_eq(ctlc_request(f.path, "resume\n", &why), 0);
	f.other = "ok k=%zz\n";
	ck_assert_int_eq(ctlc_request(f.path, "resume\n", &why), -EPROTO);
	fake_stop(&f, true);
}
END_TEST

START_TEST(test_refused_hung_stale)
{
	struct fake f = {.greeting = "error code=EACCES msg=not%20yours\n"};
	g_autofree char *why = NULL;
	int64_t t0;

	fake_start(&f, NULL, 11);
	ck_assert_int_eq(ctlc_request(f.path, "pause\n", &why), -EACCES);
	f.greeting = "slowmedia-ctl version=9 pid=1\n";
	ck_assert_int_eq(ctlc_request(f.path, "pause\n", &why), -EPROTO);
	ck_assert_ptr_nonnull(strstr(why, "version 9"));
	f.greeting = ""; /* accepts, says nothing */
	t0 = mono_ms();
	ck_assert_int_eq(ctlc_request(f.path, "pause\n", &why), -EHOSTDOWN);
	ck_assert_int_ge(mono_ms() - t0, CTLC_CONNECT_TIMEOUT_MS - 50);
	ck_assert_int_lt(mono_ms() - t0, CTLC_CONNECT_TIMEOUT_MS + 1000);
	fake_stop(&f, true);

	f = (struct fake){0};
	fake_listen(&f, NULL, 12, 1); /* nobody accepts: fill the backlog */
	for (int i = 0; i < 8; i++) {
		struct sockaddr_un sa = {.sun_family = AF_UNIX};
		int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
		snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", f.path);
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
			close(fd);
			break;
		}
	}
	t0 = mono_ms();
	ck_assert_int_eq(ctlc_request(f.path, "pause\n", &why), -EHOSTDOWN);
	ck_assert_int_lt(mono_ms() - t0, CTLC_CONNECT_TIMEOUT_MS + 1000);
	close(f.lfd);
	f.lfd = -1;
	bool answered = true;
	ck_assert_int_eq(ctlc_request_ex(f.path, "pause\n", &answered, &why), -ECONNREFUSED);
	ck_assert(!answered);
	fake_stop(&f, true);
}
END_TEST

START_TEST(test_status_records)
{
	struct fake f = {.status = "mount mountpoint=/x state=idle queued_bytes=0\n"
				   "file-error path=/x/a%20b code=EIO bytes=5\n"
				   "something-new k=1\n"
				   "ok\n"};
	struct ctlc_mount *m;
	g_autofree char *why = NULL;

	fake_start(&f, NULL, 13);
	ck_assert_int_eq(ctlc_status(f.path, 1000, &m, &why), 0);
	ck_assert_str_eq(m->status.word, "mount");
	ck_assert_str_eq(ctl_get(&m->status, "state"), "idle");
	ck_assert_uint_eq(m->file_errors->len, 1);
	ck_assert_str_eq(ctl_get(m->file_errors->pdata[0], "path"), "/x/a b");
	ck_assert_str_eq(m->sock_path, f.path);
	ctlc_mount_free(m);
	f.status = "ok\n";
	ck_assert_int_eq(ctlc_status(f.path, 1000, &m, &why), -EPROTO);
	ck_assert_ptr_null(m);
	fake_stop(&f, true);
}
END_TEST

/* A socket file nobody listens on: a daemon that was killed. */
static void make_stale(const char *dir, int pid)
{
	struct fake s = {0};

	fake_listen(&s, dir, pid, 1);
	close(s.lfd);
	g_string_free(s.got, TRUE);
	g_free(s.path);
	g_free(s.dir);
}

START_TEST(test_find)
{
	g_autofree char *target = g_dir_make_tmp("ctl-target-XXXXXX", NULL);
	g_autofree char *real = realpath(target, NULL);
	g_autofree char *other = g_dir_make_tmp("ctl-other-XXXXXX", NULL);
	g_autofree char *status = NULL, *why = NULL, *sock = NULL, *dotted = NULL;
	g_autofree char *missing = NULL;
	struct fake f = {0};
	struct ctl_msg st;
	GString *enc = g_string_new(NULL);

	ctl_begin(enc, "mount");
	ctl_add(enc, "mountpoint", real);
	ctl_add(enc, "state", "idle");
	ctl_end(enc);
	g_string_append(enc, "ok\n");
	status = g_string_free(enc, FALSE);
	f.status = status;
	fake_start(&f, NULL, 20);
	make_stale(f.dir, 21); /* skipped */
	g_setenv(CTL_DIR_ENV, f.dir, TRUE);

	ck_assert_int_eq(ctlc_find(target, &sock, &st, &why), 0);
	ck_assert_str_eq(sock, f.path);
	ck_assert_str_eq(ctl_get(&st, "mountpoint"), real);
	ctl_msg_clear(&st);
	dotted = g_strdup_printf("%s/../%s/", other, strrchr(real, '/') + 1);
	g_clear_pointer(&sock, g_free);
	ck_assert_int_eq(ctlc_find(dotted, &sock, &st, &why), 0);
	ctl_msg_clear(&st);

	ck_assert_int_eq(ctlc_find(other, &sock, &st, &why), -ENOENT);
	ck_assert_msg(strstr(why, "is not a mount point"), "%s", why);
	ck_assert_int_eq(ctlc_find("/proc", &sock, &st, &why), -ENOENT);
	ck_assert_msg(strstr(why, "is a proc mount"), "%s", why);
	missing = g_build_filename(other, "nope", NULL);
	ck_assert_int_eq(ctlc_find(missing, &sock, &st, &why), -ENOENT);
	ck_assert_msg(strstr(why, "no such file"), "%s", why);

	g_unsetenv(CTL_DIR_ENV);
	g_autofree char *stale = g_strdup_printf("%s/ctl-21.sock", f.dir);
	unlink(stale);
	fake_stop(&f, true);
	rmdir(target);
	rmdir(other);
}
END_TEST

START_TEST(test_all)
{
	struct fake a = {.status = "mount mountpoint=/a state=idle\nok\n"};
	struct fake b = {.greeting = ""};
	g_autoptr(GPtrArray) mounts = NULL, problems = NULL, socks = NULL, sts = NULL;
	g_autofree char *stale = NULL;

	fake_start(&a, NULL, 30);
	fake_start(&b, a.dir, 31); /* hung */
	make_stale(a.dir, 32);
	g_setenv(CTL_DIR_ENV, a.dir, TRUE);
	ck_assert_int_eq(ctlc_all_mounts(&mounts, &problems), 0);
	ck_assert_uint_eq(mounts->len, 1);
	ck_assert_uint_eq(problems->len, 1);
	ck_assert_msg(strstr(problems->pdata[0], "ctl-31.sock"), "%s",
		      (char *)problems->pdata[0]);
	ck_assert_int_eq(ctlc_all(&socks, &sts), 0);
	ck_assert_uint_eq(socks->len, 1);
	ck_assert_uint_eq(sts->len, 1);
	ck_assert_str_eq(ctl_get(sts->pdata[0], "mountpoint"), "/a");
	g_unsetenv(CTL_DIR_ENV);
	stale = g_strdup_printf("%s/ctl-32.sock", a.dir);
	unlink(stale);
	fake_stop(&b, false);
	fake_stop(&a, true);
}
END_TEST

/* Drain against f, its progress written to a memory stream. */
static int drain_out(struct fake *f, bool tty, double timeout_s, char **out, char **why)
{
	size_t len;
	FILE *mem = open_memstream(out, &len);
	int r = ctlc_drain(f->path, mem, tty, timeout_s, why);

	fclose(mem);
	return r;
}

START_TEST(test_drain_progress)
{
	struct fake f = {
	    .drain = "progress queued_bytes=2097152 queued_files=2 flush_rate=1048576 "
		     "eta_s=2\n"
		     "progress queued_bytes=0 queued_files=0 flush_rate=1048576 eta_s=0\n"
		     "ok\n"};
	g_autofree char *out = NULL, *tty_out = NULL, *why = NULL;

	fake_start(&f, NULL, 40);
	ck_assert_int_eq(drain_out(&f, false, -1, &out, &why), 0);
	ck_assert_msg(
	    strstr(out, "draining: 2.0 MiB left in 2 files, 1.0 MiB/s, ETA 0:02\n"), "%s",
	    out);
	ck_assert_ptr_null(strchr(out, '\r'));
	ck_assert_int_eq(drain_out(&f, true, -1, &tty_out, &why), 0);
	ck_assert_msg(strstr(tty_out, "\r\033[K["), "%s", tty_out);
	ck_assert_msg(strstr(tty_out, "100%"), "%s", tty_out);
	ck_assert(g_str_has_suffix(tty_out, "\n"));
	ck_assert_int_eq(ctlc_drain(f.path, NULL, false, 5, &why), 0);
	fake_join(&f);
	ck_assert_msg(strstr(f.got->str, "drain interval_ms=250\n"), "%s", f.got->str);
	ck_assert_msg(strstr(f.got->str, "drain interval_ms=1000\n"), "%s", f.got->str);
	fake_stop(&f, true);
}
END_TEST

START_TEST(test_drain_timeout)
{
	struct fake f = {.drain = "progress queued_bytes=100 queued_files=1\n"};
	g_autofree char *out = NULL, *why = NULL;
	int64_t t0 = mono_ms();

	fake_start(&f, NULL, 41);
	ck_assert_int_eq(drain_out(&f, false, 0.3, &out, &why), -ETIMEDOUT);
	ck_assert_int_ge(mono_ms() - t0, 280);
	ck_assert_int_lt(mono_ms() - t0, 1500);
	ck_assert_msg(strstr(why, "100 B still queued in 1 file"), "%s", why);
	fake_stop(&f, true);
}
END_TEST

START_TEST(test_drain_errors)
{
	struct fake f = {.drain = "error code=EIO msg=files%20keep%20failing\n",
			 .status =
			     "mount mountpoint=/m state=error\n"
			     "file-error path=/m/bad%0Aname code=EIO bytes=65536\nok\n"};
	g_autofree char *why = NULL;

	fake_start(&f, NULL, 42);
	ck_assert_int_eq(ctlc_drain(f.path, NULL, false, -1, &why), -EIO);
	ck_assert_msg(strstr(why, "EIO: files keep failing"), "%s", why);
	ck_assert_msg(
	    strstr(why, "\n  /m/bad\\x0Aname: EIO (64.0 KiB not on the medium)"), "%s",
	    why);
	f.drain = "error code=EAGAIN msg=flushing%20is%20paused\n";
	ck_assert_int_eq(ctlc_drain(f.path, NULL, false, -1, &why), -EAGAIN);
	ck_assert_msg(strstr(why, "paused"), "%s", why);
	fake_stop(&f, true);
}
END_TEST

static void *send_sigint(void *arg)
{
	g_usleep(200 * 1000);
	pthread_kill(*(pthread_t *)arg, SIGINT);
	return NULL;
}

START_TEST(test_drain_interrupted)
{
	struct fake f = {.drain = "progress queued_bytes=100 queued_files=1\n"};
	g_autofree char *why = NULL;
	pthread_t self = pthread_self(), killer;
	struct sigaction before, after;
	int64_t t0 = mono_ms();

	sigaction(SIGINT, NULL, &before);

	fake_start(&f, NULL, 43);
	pthread_create(&killer, NULL, send_sigint, &self);
	ck_assert_int_eq(ctlc_drain(f.path, NULL, false, 10, &why), -EINTR);
	ck_assert_int_lt(mono_ms() - t0, 3000);
	ck_assert_msg(strstr(why, "100 B still queued"), "%s", why);
	pthread_join(killer, NULL);
	sigaction(SIGINT, NULL, &after); /* given back */
	ck_assert_ptr_eq(after.sa_handler, before.sa_handler);
	fake_stop(&f, true);
}
END_TEST

START_TEST(test_formats)
{
	static const struct {
		uint64_t v;
		const char *s;
	} sizes[] = {{0, "0 B"},
		     {1023, "1023 B"},
		     {1024, "1.0 KiB"},
		     {1536, "1.5 KiB"},
		     {1048575, "1.0 MiB"},
		     {5u << 20, "5.0 MiB"},
		     {3ull << 40, "3.0 TiB"}};

	for (unsigned i = 0; i < G_N_ELEMENTS(sizes); i++) {
		g_autofree char *s = ctlc_fmt_size(sizes[i].v);
		ck_assert_str_eq(s, sizes[i].s);
	}
	g_autofree char *e1 = ctlc_fmt_eta(-1), *e2 = ctlc_fmt_eta(0),
			*e3 = ctlc_fmt_eta(65);
	g_autofree char *e4 = ctlc_fmt_eta(3725), *b1 = ctlc_fmt_bar(0.5, 10);
	g_autofree char *b2 = ctlc_fmt_bar(2, 4), *b3 = ctlc_fmt_bar(-1, 4);
	g_autofree char *t = ctlc_fmt_text("a\nb\xff\\ \xc3\xa9\xc2\x85");
	ck_assert_str_eq(e1, "?");
	ck_assert_str_eq(e2, "0:00");
	ck_assert_str_eq(e3, "1:05");
	ck_assert_str_eq(e4, "1:02:05");
	ck_assert_str_eq(b1, "[#####.....]");
	ck_assert_str_eq(b2, "[####]");
	ck_assert_str_eq(b3, "[....]");
	ck_assert_str_eq(t, "a\\x0Ab\\xFF\\\\ \xc3\xa9\\xC2\\x85");
	ck_assert_int_eq(ctlc_errno_from_name("EIO"), EIO);
	ck_assert_int_eq(ctlc_errno_from_name("ENOTSUP"), ENOTSUP);
	ck_assert_int_eq(ctlc_errno_from_name("EOPNOTSUPP"), EOPNOTSUPP);
	ck_assert_int_eq(ctlc_errno_from_name("EAGAIN"), EAGAIN);
	ck_assert_int_eq(ctlc_errno_from_name("EWOULDBLOCK"), EAGAIN);
	ck_assert_int_eq(ctlc_errno_from_name("nonsense"), 0);
	ck_assert_int_eq(ctlc_errno_from_name(NULL), 0);
	ck_assert_str_eq(ctlc_errno_name(-EIO), "EIO");
	ck_assert_str_eq(ctlc_errno_name(ENOTSUP), "ENOTSUP");
}
END_TEST

static Suite *ctl_client_suite(void)
{
	Suite *s = suite_create("ctl_client");
	TCase *tc = tcase_create("client");

	tcase_add_test(tc, test_request_ok_and_errors);
	tcase_add_test(tc, test_refused_hung_stale);
	tcase_add_test(tc, test_status_records);
	tcase_add_test(tc, test_find);
	tcase_add_test(tc, test_all);
	tcase_add_test(tc, test_drain_progress);
	tcase_add_test(tc, test_drain_timeout);
	tcase_add_test(tc, test_drain_errors);
	tcase_add_test(tc, test_drain_interrupted);
	tcase_add_test(tc, test_formats);
	tcase_set_timeout(tc, 20);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(ctl_client_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
