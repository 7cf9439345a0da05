/* Option parsing: good values land in the struct, every bad value is named. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "options.h"
#include "sched_opts.h"

struct parsed {
	struct sm_options o;
	struct fuse_args args;
	GPtrArray *errors;
};

static void parse(struct parsed *p, const char *opts)
{
	char *argv[] = {"slowmedia", "/src", "/mnt", "-o", (char *)opts, NULL};

	p->errors = g_ptr_array_new_with_free_func(g_free);
	ck_assert_int_eq(sm_options_parse(5, argv, &p->o, &p->args, p->errors), 0);
}

static void done(struct parsed *p)
{
	fuse_opt_free_args(&p->args);
	sm_options_free(&p->o);
	g_ptr_array_free(p->errors, TRUE);
}

static bool errors_mention(struct parsed *p, const char *needle)
{
	for (guint i = 0; i < p->errors->len; i++)
		if (strstr(p->errors->pdata[i], needle))
			return true;
	return false;
}

static bool args_have(struct parsed *p, const char *needle)
{
	for (int i = 0; i < p->args.argc; i++)
		if (strstr(p->args.argv[i], needle))
			return true;
	return false;
}

START_TEST(test_defaults)
{
	struct parsed p;

	parse(&p, "rw");
	ck_assert_uint_eq(p.errors->len, 0);
	ck_assert_uint_eq(p.o.sched.prio, 4);
	ck_assert_uint_eq(p.o.sched.weight, 100);
	ck_assert_uint_eq(p.o.sched.queue_bytes, 64ull << 20);
	ck_assert_uint_eq(p.o.sched.latency_ms, 100);
	ck_assert_uint_eq(p.o.sched.read_grace_ms, 20);
	ck_assert_uint_eq(p.o.sched.flushers, 1);
	ck_assert_uint_eq(p.o.sched.rate_bps, 0);
	ck_assert(!p.o.sched.sync_close);
	ck_assert_str_eq(p.o.sched.arbiter, "auto");
	ck_assert_uint_eq(p.o.req_bound_s, 10);
	ck_assert(!p.o.read_only && !p.o.noexec);
	ck_assert_str_eq(p.o.source, "/src");
	ck_assert_str_eq(p.o.mountpoint, "/mnt");
	ck_assert(args_have(&p, "fsname=/src"));
	ck_assert(args_have(&p, "subtype=slowmedia"));
	ck_assert(args_have(&p, "/mnt"));
	done(&p);
}
END_TEST

START_TEST(test_all_good_values)
{
	struct parsed p;

	parse(&p, "prio=0,class=idle,weight=250,group=usb-bus.1,rate=2M,queue=1G,"
		  "spool=/var/spool/sm,spool_max=10G,latency=50,read_grace=0,flushers=4,"
		  "sync_close,arbiter=/run/arb.sock,fstype=vfat,req_bound=30");
	ck_assert_uint_eq(p.errors->len, 0);
	ck_assert_uint_eq(p.o.sched.prio, 0);
	ck_assert_int_eq(p.o.sched.io_class, SCHED_CLASS_IDLE);
	ck_assert_uint_eq(p.o.sched.weight, 250);
	ck_assert_str_eq(p.o.sched.group, "usb-bus.1");
	ck_assert_uint_eq(p.o.sched.rate_bps, 2u << 20);
	ck_assert_uint_eq(p.o.sched.queue_bytes, 1ull << 30);
	ck_assert_str_eq(p.o.sched.spool_dir, "/var/spool/sm");
	ck_assert_uint_eq(p.o.sched.spool_max_bytes, 10ull << 30);
	ck_assert_uint_eq(p.o.sched.latency_ms, 50);
	ck_assert_uint_eq(p.o.sched.read_grace_ms, 0);
	ck_assert_uint_eq(p.o.sched.flushers, 4);
	ck_assert(p.o.sched.sync_close);
	ck_assert_str_eq(p.o.sched.arbiter, "/run/arb.sock");
	ck_assert_str_eq(p.o.fstype, "vfat");
	ck_assert_uint_eq(p.o.req_bound_s, 30);
	/* Our keys are consumed: libfuse never sees them. */
	ck_assert(!args_have(&p, "prio="));
	ck_assert(!args_have(&p, "queue="));
	done(&p);
}
END_TEST

/* Each bad value, alone: one error that names the option. */
static const char *const bad_values[][2] = {
	{"prio=8", "prio=8"},
	{"prio=-1", "prio=-1"},
	{"prio=x", "prio=x"},
	{"prio=", "prio"},
	{"prio", "prio"},
	{"prio=1.5", "prio=1.5"},
	{"class=rt", "class=rt"},
	{"weight=0", "weight=0"},
	{"weight=100000", "weight=100000"},
	{"group=", "group"},
	{"group=a/b", "group=a/b"},
	{"group=has space", "group=has space"},
	{"rate=0", "rate=0"},
	{"rate=fast", "rate=fast"},
	{"rate=2X", "rate=2X"},
	{"rate=99999999999999999999", "rate="},
	{"queue=1K", "queue=1K"},
	{"queue=100T", "queue=100T"},
	{"queue=-5M", "queue=-5M"},
	{"queue=5MM", "queue=5MM"},
	{"spool=relative/dir", "spool=relative/dir"},
	{"spool_max=1G", "spool_max"},
	{"latency=0", "latency=0"},
	{"latency=999999", "latency=999999"},
	{"read_grace=abc", "read_grace=abc"},
	{"flushers=0", "flushers=0"},
	{"flushers=65", "flushers=65"},
	{"sync_close=yes", "sync_close"},
	{"arbiter=maybe", "arbiter=maybe"},
	{"fstype=", "fstype"},
	{"nonsense", "nonsense"},
	{"allow_other=1", "allow_other=1"},
	{"req_bound=0", "req_bound=0"},
	{"req_bound=3601", "req_bound=3601"},
	{"req_bound=", "req_bound"},
};

START_TEST(test_bad_value)
{
	struct parsed p;

	parse(&p, bad_values[_i][0]);
	ck_assert_msg(p.errors->len == 1, "%s: %u errors", bad_values[_i][0], p.errors->len);
	ck_assert_msg(errors_mention(&p, bad_values[_i][1]), "%s: error '%s' does not name it",
		      bad_values[_i][0], (char *)p.errors->pdata[0]);
	done(&p);
}
END_TEST

/* ro and noexec go to libfuse and are remembered for fstype='s private
 * mount; the last of ro/rw, noexec/exec wins, as in mount(8). */
START_TEST(test_ro_noexec_remembered)
{
	struct parsed p;

	parse(&p, "ro,noexec,fstype=vfat");
	ck_assert_uint_eq(p.errors->len, 0);
	ck_assert(p.o.read_only && p.o.noexec);
	ck_assert(args_have(&p, "ro"));
	done(&p);
	parse(&p, "ro,rw,noexec,exec");
	ck_assert(!p.o.read_only && !p.o.noexec);
	done(&p);
}
END_TEST

START_TEST(test_all_reported_at_once)
{
	struct parsed p;

	parse(&p, "prio=9,queue=1X,bogus,class=x,rate=,flushers=0");
	ck_assert_uint_eq(p.errors->len, 6);
	ck_assert(errors_mention(&p, "prio=9"));
	ck_assert(errors_mention(&p, "queue=1X"));
	ck_assert(errors_mention(&p, "bogus"));
	ck_assert(errors_mention(&p, "class=x"));
	ck_assert(errors_mention(&p, "rate"));
	ck_assert(errors_mention(&p, "flushers=0"));
	done(&p);
}
END_TEST

START_TEST(test_fstab_keys_dropped)
{
	struct parsed p;

	parse(&p, "auto,noauto,nofail,_netdev,user,users,defaults,x-systemd.automount,"
		  "comment=hi,group,rw,noatime");
	ck_assert_uint_eq(p.errors->len, 0);
	ck_assert(!args_have(&p, "nofail"));
	ck_assert(!args_have(&p, "x-systemd"));
	ck_assert(!args_have(&p, "_netdev"));
	ck_assert(args_have(&p, "noatime")); /* libfuse's: kept */
	ck_assert(p.o.sched.group == NULL);  /* bare 'group' is fstab's, not group= */
	done(&p);
}
END_TEST

START_TEST(test_allow_other_forces_default_permissions)
{
	struct parsed p;

	parse(&p, "allow_other");
	ck_assert_uint_eq(p.errors->len, 0);
	ck_assert(p.o.default_permissions);
	ck_assert(args_have(&p, "default_permissions"));
	done(&p);
}
END_TEST

START_TEST(test_missing_args)
{
	char *argv[] = {"slowmedia", NULL};
	char *argv3[] = {"slowmedia", "/a", "/b", "/c", NULL};
	struct sm_options o;
	struct fuse_args args;
	g_autoptr(GPtrArray) errors = g_ptr_array_new_with_free_func(g_free);

	ck_assert_int_eq(sm_options_parse(1, argv, &o, &args, errors), 0);
	ck_assert_uint_eq(errors->len, 1);
	ck_assert(strstr(errors->pdata[0], "SOURCE"));
	fuse_opt_free_args(&args);
	sm_options_free(&o);

	g_ptr_array_set_size(errors, 0);
	ck_assert_int_eq(sm_options_parse(4, argv3, &o, &args, errors), 0);
	ck_assert_uint_eq(errors->len, 1);
	ck_assert(strstr(errors->pdata[0], "/c"));
	fuse_opt_free_args(&args);
	sm_options_free(&o);
}
END_TEST

START_TEST(test_fsname_escapes_commas)
{
	char *argv[] = {"slowmedia", "/media/a,b", "/mnt", NULL};
	struct sm_options o;
	struct fuse_args args;
	g_autoptr(GPtrArray) errors = g_ptr_array_new_with_free_func(g_free);
	bool found = false;

	ck_assert_int_eq(sm_options_parse(3, argv, &o, &args, errors), 0);
	for (int i = 0; i < args.argc; i++)
		found |= strcmp(args.argv[i], "-ofsname=/media/a\\,b") == 0;
	ck_assert(found);
	fuse_opt_free_args(&args);
	sm_options_free(&o);
}
END_TEST

START_TEST(test_parse_size)
{
	uint64_t v;

	ck_assert_int_eq(sm_parse_size("4096", &v), 0);
	ck_assert_uint_eq(v, 4096);
	ck_assert_int_eq(sm_parse_size("64k", &v), 0);
	ck_assert_uint_eq(v, 65536);
	ck_assert_int_eq(sm_parse_size("3M", &v), 0);
	ck_assert_uint_eq(v, 3u << 20);
	ck_assert_int_eq(sm_parse_size("2GiB", &v), 0);
	ck_assert_uint_eq(v, 2ull << 30);
	ck_assert_int_eq(sm_parse_size("1TB", &v), 0);
	ck_assert_uint_eq(v, 1ull << 40);
	ck_assert_int_eq(sm_parse_size("", &v), -EINVAL);
	ck_assert_int_eq(sm_parse_size("M", &v), -EINVAL);
	ck_assert_int_eq(sm_parse_size(" 5", &v), -EINVAL);
	ck_assert_int_eq(sm_parse_size("5 M", &v), -EINVAL);
	ck_assert_int_eq(sm_parse_size("5Mx", &v), -EINVAL);
	ck_assert_int_eq(sm_parse_size("-1", &v), -EINVAL);
	ck_assert_int_eq(sm_parse_size("99999999999999999999", &v), -ERANGE);
	ck_assert_int_eq(sm_parse_size("99999999999T", &v), -ERANGE);
}
END_TEST

#define GIB (1ull << 30)

/* queue= above half of MemAvailable is refused, naming queue=, the value and
 * the limit; at the limit, or with no figure, it is not. */
START_TEST(test_queue_vs_memory)
{
	struct parsed p;

	parse(&p, "queue=64G");
	ck_assert_uint_eq(p.errors->len, 0); /* within 64K..64G */
	sched_opts_check_memory(&p.o.sched, 24 * GIB, p.errors);
	ck_assert_uint_eq(p.errors->len, 1);
	ck_assert_msg(errors_mention(&p, "queue=64G") && errors_mention(&p, "MemAvailable 24G") &&
			  errors_mention(&p, "at most queue=12G"),
		      "message: %s", (char *)p.errors->pdata[0]);
	done(&p);

	parse(&p, "queue=12G");
	sched_opts_check_memory(&p.o.sched, 24 * GIB, p.errors);
	ck_assert_uint_eq(p.errors->len, 0); /* exactly half */
	sched_opts_check_memory(&p.o.sched, 24 * GIB - 2, p.errors);
	ck_assert_uint_eq(p.errors->len, 1);
	done(&p);

	parse(&p, "rw"); /* the default counts too, and no figure means no check */
	sched_opts_check_memory(&p.o.sched, 100ull << 20, p.errors);
	ck_assert(errors_mention(&p, "queue=64M"));
	ck_assert(errors_mention(&p, "at most queue=50M"));
	g_ptr_array_set_size(p.errors, 0);
	sched_opts_check_memory(&p.o.sched, 0, p.errors);
	ck_assert_uint_eq(p.errors->len, 0);
	done(&p);
}
END_TEST

START_TEST(test_parse_meminfo)
{
	uint64_t v = 0;

	ck_assert_int_eq(sched_parse_meminfo("MemTotal:       24567890 kB\n"
					     "MemFree:        23000000 kB\n"
					     "MemAvailable:   24102416 kB\n"
					     "Buffers:           12345 kB\n",
					     &v),
			 0);
	ck_assert_uint_eq(v, 24102416ull << 10);
	ck_assert_int_eq(sched_parse_meminfo("MemTotal: 1 kB\nMemFree: 1 kB\n", &v), -ENOENT);
	ck_assert_int_eq(sched_parse_meminfo("", &v), -ENOENT);
}
END_TEST

static Suite *options_suite(void)
{
	Suite *s = suite_create("options");
	TCase *tc = tcase_create("parse");

	tcase_add_test(tc, test_defaults);
	tcase_add_test(tc, test_all_good_values);
	tcase_add_loop_test(tc, test_bad_value, 0, G_N_ELEMENTS(bad_values));
	tcase_add_test(tc, test_all_reported_at_once);
	tcase_add_test(tc, test_ro_noexec_remembered);
	tcase_add_test(tc, test_fstab_keys_dropped);
	tcase_add_test(tc, test_allow_other_forces_default_permissions);
	tcase_add_test(tc, test_missing_args);
	tcase_add_test(tc, test_fsname_escapes_commas);
	tcase_add_test(tc, test_parse_size);
	tcase_add_test(tc, test_queue_vs_memory);
	tcase_add_test(tc, test_parse_meminfo);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(options_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
