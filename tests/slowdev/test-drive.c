/* Unit tests of the slowdev drive model and ctl language (drive.c): no mount, no sleeps.
 */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "drive.h"

#define MS SD_NS_PER_MS
#define SEC SD_NS_PER_SEC

/* 20 MB/s write, 40 MB/s read, 10 ms seek: 1 MB costs 50 ms written, 25 ms read. */
static const struct sd_params test_params = {
    .read_bw = 40000000, .write_bw = 20000000, .seek_ns = 10 * MS};

static struct sd_drive drive;

static void setup(void)
{
	sd_drive_init(&drive, &test_params, false);
}

static void teardown(void)
{
	sd_drive_destroy(&drive);
}

static void apply_line(const char *line, uint64_t now_ns)
{
	struct sd_cmd cmd;
	char *why = NULL;

	ck_assert_msg(sd_cmd_parse(line, &cmd, &why) == 0, "'%s': %s", line, why);
	sd_drive_apply(&drive, &cmd, now_ns);
}

START_TEST(test_seek_only_on_discontinuity)
{
	/* The head starts at 0: the first request pays no seek. */
	ck_assert_uint_eq(sd_model_service_ns(&drive, 0, 1000000, SD_READ), 25 * MS);
	ck_assert_uint_eq(drive.head, 1000000);
	ck_assert_uint_eq(sd_model_service_ns(&drive, 1000000, 1000000, SD_READ),
			  25 * MS);
	ck_assert_uint_eq(drive.c.seeks, 0);
	/* Going back one byte is a seek; so is skipping ahead. */
	ck_assert_uint_eq(sd_model_service_ns(&drive, 1999999, 1, SD_READ), 10 * MS + 25);
	ck_assert_uint_eq(sd_model_service_ns(&drive, 5000000, 4000, SD_READ),
			  10 * MS + 100000);
	ck_assert_uint_eq(drive.c.seeks, 2);
	/* A write continuing a read does not seek: one head for both. */
	ck_assert_uint_eq(sd_model_service_ns(&drive, 5004000, 1000000, SD_WRITE),
			  50 * MS);
	ck_assert_uint_eq(drive.c.seeks, 2);
	ck_assert_uint_eq(drive.c.model_ns,
			  25 * MS * 2 + 20 * MS + 25 + 100000 + 50 * MS);
}
END_TEST

START_TEST(test_read_write_bandwidth)
{
	ck_assert_uint_eq(sd_model_service_ns(&drive, 0, 2000000, SD_WRITE), 100 * MS);
	ck_assert_uint_eq(sd_model_service_ns(&drive, 2000000, 2000000, SD_READ),
			  50 * MS);
	apply_line("set write_bw=1M read_bw=4M seek_ms=0.5", 0);
	ck_assert_uint_eq(sd_model_service_ns(&drive, 0, 1000000, SD_WRITE),
			  1 * SEC + MS / 2);
	ck_assert_uint_eq(sd_model_service_ns(&drive, 1000000, 1000000, SD_READ),
			  250 * MS);
	/* No overflow for a huge request. */
	ck_assert_uint_eq(
	    sd_model_service_ns(&drive, 2000000, UINT64_C(1) << 40, SD_READ),
	    (UINT64_C(1) << 40) / 4 * 1000);
}
END_TEST

START_TEST(test_fsync_and_empty_are_free)
{
	sd_model_service_ns(&drive, 0, 1000, SD_WRITE);
	ck_assert_uint_eq(sd_model_service_ns(&drive, 0, 0, SD_FSYNC), 0);
	ck_assert_uint_eq(sd_model_service_ns(&drive, 777777, 0, SD_READ), 0);
	ck_assert_uint_eq(drive.head, 1000);
	ck_assert_uint_eq(drive.c.seeks, 0);
}
END_TEST

START_TEST(test_fast_mode)
{
	apply_line("fast on", 0);
	ck_assert_uint_eq(sd_model_service_ns(&drive, 123456, 1000000, SD_WRITE), 0);
	/* The head still moves: leaving fast mode, continuing costs no seek. */
	apply_line("fast off", 0);
	ck_assert_uint_eq(sd_model_service_ns(&drive, 1123456, 1000000, SD_WRITE),
			  50 * MS);
	ck_assert_uint_eq(drive.c.seeks, 0);
	ck_assert_uint_eq(drive.c.model_ns, 50 * MS);
}
END_TEST

START_TEST(test_fault_ranges)
{
	apply_line("fail read 1000 2000", 0);
	apply_line("fail write 1M 2M", 0);
	/* [start, end): touching either edge from outside is fine. */
	ck_assert_int_eq(sd_drive_check(&drive, 0, 1000, SD_READ), 0);
	ck_assert_int_eq(sd_drive_check(&drive, 0, 1001, SD_READ), -EIO);
	ck_assert_int_eq(sd_drive_check(&drive, 1999, 1, SD_READ), -EIO);
	ck_assert_int_eq(sd_drive_check(&drive, 2000, 4096, SD_READ), 0);
	ck_assert_int_eq(sd_drive_check(&drive, 0, 1000000, SD_READ), -EIO);
	/* A read rule leaves writes alone and the other way round. */
	ck_assert_int_eq(sd_drive_check(&drive, 1500, 10, SD_WRITE), 0);
	ck_assert_int_eq(sd_drive_check(&drive, 1500000, 10, SD_WRITE), -EIO);
	ck_assert_int_eq(sd_drive_check(&drive, 1500000, 10, SD_READ), 0);
	ck_assert_int_eq(sd_drive_check(&drive, 1500, 10, SD_FSYNC), 0);
	apply_line("fail any 10M 11M", 0);
	ck_assert_int_eq(sd_drive_check(&drive, 10000000, 1, SD_READ), -EIO);
	ck_assert_int_eq(sd_drive_check(&drive, 10999999, 1, SD_WRITE), -EIO);
	ck_assert_uint_eq(drive.faults->len, 3);
	apply_line("clear", 0);
	ck_assert_int_eq(sd_drive_check(&drive, 1500, 10, SD_READ), 0);
	ck_assert_int_eq(sd_drive_check(&drive, 10000000, 1, SD_WRITE), 0);
}
END_TEST

START_TEST(test_eject_and_clear)
{
	apply_line("eject", 0);
	ck_assert_int_eq(sd_drive_check(&drive, 0, 1, SD_READ), -EIO);
	ck_assert_int_eq(sd_drive_check(&drive, 0, 1, SD_WRITE), -EIO);
	ck_assert_int_eq(sd_drive_check(&drive, 0, 0, SD_FSYNC), -EIO);
	apply_line("clear", 0);
	ck_assert_int_eq(sd_drive_check(&drive, 0, 1, SD_READ), 0);
	ck_assert_int_eq(sd_drive_check(&drive, 0, 0, SD_FSYNC), 0);
}
END_TEST

START_TEST(test_stall)
{
	ck_assert_uint_eq(sd_drive_stall_left(&drive, 5 * SEC), 0);
	apply_line("stall 1.5", 5 * SEC);
	ck_assert_uint_eq(sd_drive_stall_left(&drive, 5 * SEC), 1500 * MS);
	ck_assert_uint_eq(sd_drive_stall_left(&drive, 6 * SEC), 500 * MS);
	ck_assert_uint_eq(sd_drive_stall_left(&drive, 7 * SEC), 0);
	apply_line("stall 10", 5 * SEC);
	apply_line("stall 0", 6 * SEC); /* ends it */
	ck_assert_uint_eq(sd_drive_stall_left(&drive, 6 * SEC), 0);
}
END_TEST

START_TEST(test_counters_and_reset)
{
	g_autoptr(GString) out = g_string_new(NULL);

	sd_drive_enqueued(&drive);
	sd_drive_enqueued(&drive);
	ck_assert_uint_eq(drive.c.max_queue_depth, 2);
	sd_drive_done(&drive, SD_WRITE, 4096, 0, 7);
	sd_drive_done(&drive, SD_READ, 100, -EIO, 3);
	sd_drive_enqueued(&drive);
	sd_drive_done(&drive, SD_READ, 512, 0, 5);
	ck_assert_uint_eq(drive.queue_depth, 0);
	ck_assert_uint_eq(drive.c.writes, 1);
	ck_assert_uint_eq(drive.c.write_bytes, 4096);
	ck_assert_uint_eq(drive.c.reads, 1);
	ck_assert_uint_eq(drive.c.read_bytes, 512);
	ck_assert_uint_eq(drive.c.errors, 1);
	ck_assert_uint_eq(drive.c.busy_ns, 15);

	sd_drive_format_stats(&drive, out, 1 << 20, 42, 0);
	ck_assert_ptr_nonnull(strstr(out->str, "\nwrite_bytes 4096\n"));
	ck_assert_ptr_nonnull(strstr(out->str, "\nmax_queue_depth 2\n"));
	ck_assert_ptr_nonnull(strstr(out->str, "\nuptime_ns 42\n"));
	ck_assert_ptr_nonnull(strstr(out->str, "\nseek_ms 10\n"));
	ck_assert_ptr_nonnull(strstr(out->str, "\nwrite_bw 20000000\n"));
	ck_assert_ptr_nonnull(strstr(out->str, "\nsize 1048576\n"));

	sd_drive_enqueued(&drive);
	apply_line("reset", 0);
	ck_assert_uint_eq(drive.c.writes, 0);
	ck_assert_uint_eq(drive.c.errors, 0);
	ck_assert_uint_eq(drive.c.max_queue_depth, 1); /* the one still queued */
}
END_TEST

START_TEST(test_parse_size)
{
	static const struct {
		const char *s;
		uint64_t v;
	} good[] = {
	    {"0", 0},
	    {"512", 512},
	    {"1K", 1000},
	    {"1k", 1000},
	    {"2M", 2000000},
	    {"2MB", 2000000},
	    {"1.5M", 1500000},
	    {"3G", 3000000000},
	    {"1Ki", 1024},
	    {"4KiB", 4096},
	    {"1Mi", 1048576},
	    {"0.5Gi", 536870912},
	    {"1T", 1000000000000},
	    {"18446744073709551615", UINT64_MAX},
	};
	static const char *const bad[] = {
	    "",	   "M",	  "-1",	 "+1",	    " 1",
	    "1 ",  "1.",  ".5",	 "1..2",    "1X",
	    "1MM", "1Mb", "1i",	 "0x10",    "1e3",
	    "inf", "nan", "1.5", "1.0001K", "1.2345678901G",
	};
	uint64_t v;

	for (size_t i = 0; i < G_N_ELEMENTS(good); i++) {
		ck_assert_msg(sd_parse_size(good[i].s, &v) == 0, "'%s' rejected",
			      good[i].s);
		ck_assert_uint_eq(v, good[i].v);
	}
	for (size_t i = 0; i < G_N_ELEMENTS(bad); i++)
		ck_assert_msg(sd_parse_size(bad[i], &v) == -EINVAL, "'%s' accepted",
			      bad[i]);
	ck_assert_int_eq(sd_parse_size("18446744073709551616", &v), -ERANGE);
	ck_assert_int_eq(sd_parse_size("20000000000G", &v), -ERANGE);
	ck_assert_int_eq(sd_parse_size(NULL, &v), -EINVAL);
}
END_TEST

START_TEST(test_parse_times)
{
	uint64_t ns;

	ck_assert_int_eq(sd_parse_ms("80", &ns), 0);
	ck_assert_uint_eq(ns, 80 * MS);
	ck_assert_int_eq(sd_parse_ms("0.25", &ns), 0);
	ck_assert_uint_eq(ns, 250000);
	ck_assert_int_eq(sd_parse_ms("0", &ns), 0);
	ck_assert_uint_eq(ns, 0);
	ck_assert_int_eq(sd_parse_ms("60001", &ns), -ERANGE);
	ck_assert_int_eq(sd_parse_ms("1ms", &ns), -EINVAL);
	ck_assert_int_eq(sd_parse_ms("-1", &ns), -EINVAL);
	ck_assert_int_eq(sd_parse_ms("0.0000001", &ns), -EINVAL); /* below 1 ns */
	ck_assert_int_eq(sd_parse_seconds("2.5", &ns), 0);
	ck_assert_uint_eq(ns, 2500 * MS);
	ck_assert_int_eq(sd_parse_seconds("3601", &ns), -ERANGE);
	ck_assert_int_eq(sd_parse_seconds("", &ns), -EINVAL);
}
END_TEST

START_TEST(test_profiles)
{
	struct sd_params p;

	ck_assert_int_eq(sd_profile_get("dvdram", &p), 0);
	ck_assert_uint_eq(p.write_bw, 2000000);
	ck_assert_uint_eq(p.read_bw, 4000000);
	ck_assert_uint_eq(p.seek_ns, 80 * MS);
	ck_assert_int_eq(sd_profile_get("zip", &p), 0);
	ck_assert_uint_eq(p.write_bw, 1000000);
	ck_assert_uint_eq(p.read_bw, 1000000);
	ck_assert_uint_eq(p.seek_ns, 30 * MS);
	ck_assert_int_eq(sd_profile_get("mo", &p), 0);
	ck_assert_uint_eq(p.seek_ns, 40 * MS);
	ck_assert_int_eq(sd_profile_get("usbstick", &p), 0);
	ck_assert_uint_eq(p.write_bw, 5000000);
	ck_assert_uint_eq(p.read_bw, 20000000);
	ck_assert_uint_eq(p.seek_ns, 0);
	ck_assert_int_eq(sd_profile_get("floppy", &p), -EINVAL);
	ck_assert_int_eq(sd_profile_get(NULL, &p), -EINVAL);
}
END_TEST

START_TEST(test_cmd_parse_good)
{
	struct sd_cmd c;
	char *why = NULL;

	ck_assert_int_eq(sd_cmd_parse("  fast   on\r", &c, &why), 0);
	ck_assert_int_eq(c.kind, SD_CMD_FAST);
	ck_assert(c.on);
	ck_assert_int_eq(sd_cmd_parse("fail any 4096 8192", &c, &why), 0);
	ck_assert_int_eq(c.kind, SD_CMD_FAIL);
	ck_assert_int_eq(c.fault.kind, SD_FAIL_ANY);
	ck_assert_uint_eq(c.fault.start, 4096);
	ck_assert_uint_eq(c.fault.end, 8192);
	ck_assert_int_eq(sd_cmd_parse("stall 0.25", &c, &why), 0);
	ck_assert_uint_eq(c.stall_ns, 250 * MS);
	ck_assert_int_eq(sd_cmd_parse("set seek_ms=5", &c, &why), 0);
	ck_assert_uint_eq(c.set_mask, SD_SET_SEEK);
	ck_assert_uint_eq(c.p.seek_ns, 5 * MS);
	ck_assert_int_eq(sd_cmd_parse("eject", &c, &why), 0);
	ck_assert_int_eq(c.kind, SD_CMD_EJECT);
	ck_assert_int_eq(sd_cmd_parse("reset", &c, &why), 0);
	ck_assert_int_eq(c.kind, SD_CMD_RESET);
	ck_assert_ptr_null(why);
}
END_TEST

START_TEST(test_cmd_parse_bad)
{
	static const char *const bad[] = {
	    "",
	    "   ",
	    "bogus",
	    "fast",
	    "fast maybe",
	    "fast on off",
	    "fail",
	    "fail read 10",
	    "fail read 10 10",
	    "fail read 20 10",
	    "fail sideways 0 10",
	    "fail read x 10",
	    "fail read 0 10 20",
	    "clear now",
	    "eject 1",
	    "reset all",
	    "stall",
	    "stall -1",
	    "stall 1h",
	    "stall 9999",
	    "set",
	    "set write_bw",
	    "set write_bw=",
	    "set write_bw=0",
	    "set read_bw=fast",
	    "set seek_ms=-3",
	    "set colour=blue",
	    "set write_bw=1M bogus=2",
	    "FAST on",
	};

	for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
		struct sd_cmd c;
		char *why = NULL;

		ck_assert_msg(sd_cmd_parse(bad[i], &c, &why) == -EINVAL, "'%s' accepted",
			      bad[i]);
		ck_assert_msg(why && *why, "'%s': no message", bad[i]);
		g_free(why);
	}
}
END_TEST

START_TEST(test_cmd_parse_text)
{
	static const char two[] = "fast off\n\nset read_bw=2M\n";
	static const char nul[] = "fast on\0eject";
	GArray *cmds = NULL;
	char *why = NULL;

	ck_assert_int_eq(sd_cmd_parse_text(two, strlen(two), &cmds, &why), 0);
	ck_assert_uint_eq(cmds->len, 2);
	ck_assert_int_eq(g_array_index(cmds, struct sd_cmd, 1).kind, SD_CMD_SET);
	g_array_unref(cmds);

	/* One bad line rejects the whole write: nothing is applied. */
	ck_assert_int_eq(sd_cmd_parse_text("eject\nbogus\n", 12, &cmds, &why), -EINVAL);
	ck_assert_ptr_null(cmds);
	ck_assert_ptr_nonnull(strstr(why, "bogus"));
	g_free(why);
	ck_assert_int_eq(sd_cmd_parse_text("\n\n", 2, &cmds, &why), -EINVAL);
	g_free(why);
	ck_assert_int_eq(sd_cmd_parse_text(nul, sizeof(nul) - 1, &cmds, &why), -EINVAL);
	g_free(why);
}
END_TEST

/*
 * Two units on one head: "a" at test_params, "b" slower (10 MB/s both ways:
 * 1 MB costs 100 ms) with a 5 ms seek.
 */
static const struct sd_params b_params = {
    .read_bw = 10000000, .write_bw = 10000000, .seek_ns = 5 * MS};

static void setup_units(void)
{
	static const char *const names[] = {"a", "b"};
	const struct sd_params p[] = {test_params, b_params};

	sd_drive_init_units(&drive, 2, names, p, false);
}

/* Parses, resolves and applies one line: 0 or -EINVAL. */
static int ctl_line(const char *line, uint64_t now_ns)
{
	struct sd_cmd cmd;
	char *why = NULL;
	int r = sd_cmd_parse(line, &cmd, &why);

	if (r == 0)
		r = sd_drive_resolve(&drive, &cmd, &why);
	if (r == 0)
		sd_drive_apply(&drive, &cmd, now_ns);
	else
		ck_assert_msg(why && *why, "'%s': no message", line);
	g_free(why);
	return r;
}

/*
 * What the head (queue.c) does with one request to unit u that arrived at
 * arrival_ns, the wall clock keeping to the model: returns when it is done.
 */
static uint64_t serve(unsigned u, uint64_t off, uint64_t len, enum sd_op op,
		      uint64_t arrival_ns)
{
	uint64_t start = sd_drive_service_start(&drive, arrival_ns);
	uint64_t end = start + sd_unit_service_ns(&drive, u, off, len, op);

	sd_unit_done(&drive, u, op, len, 0, start - arrival_ns, end - start);
	drive.free_ns = end;
	return end;
}

START_TEST(test_units_switch_is_seek)
{
	/* The head starts on unit 0 at 0. */
	ck_assert_uint_eq(sd_unit_service_ns(&drive, 0, 0, 1000000, SD_READ), 25 * MS);
	/* b at the very offset where a ended: another unit, so b's seek. */
	ck_assert_uint_eq(sd_unit_service_ns(&drive, 1, 1000000, 1000000, SD_READ),
			  5 * MS + 100 * MS);
	ck_assert_uint_eq(drive.head_unit, 1);
	ck_assert_uint_eq(drive.head, 2000000);
	/* Continuing on b does not seek, whatever a's head was. */
	ck_assert_uint_eq(sd_unit_service_ns(&drive, 1, 2000000, 1000000, SD_WRITE),
			  100 * MS);
	/* Back to a where it ended: a seek again, at a's seek time. */
	ck_assert_uint_eq(sd_unit_service_ns(&drive, 0, 1000000, 1000000, SD_WRITE),
			  10 * MS + 50 * MS);
	ck_assert_uint_eq(drive.c.seeks, 2);
	ck_assert_uint_eq(drive.units[0].c.seeks, 1);
	ck_assert_uint_eq(drive.units[1].c.seeks, 1);
	ck_assert_uint_eq(drive.units[0].c.model_ns, 25 * MS + 60 * MS);
	ck_assert_uint_eq(drive.units[1].c.model_ns, 205 * MS);
	ck_assert_uint_eq(drive.c.model_ns, 290 * MS);
	/* An fsync of b neither moves the head nor costs a seek. */
	ck_assert_uint_eq(sd_unit_service_ns(&drive, 1, 0, 0, SD_FSYNC), 0);
	ck_assert_uint_eq(drive.head_unit, 0);
	/* Fast mode moves the head across units without charging. */
	ctl_line("fast on", 0);
	ck_assert_uint_eq(sd_unit_service_ns(&drive, 1, 0, 4096, SD_READ), 0);
	ctl_line("fast off", 0);
	ck_assert_uint_eq(sd_unit_service_ns(&drive, 1, 4096, 1000000, SD_READ),
			  100 * MS);
	ck_assert_uint_eq(drive.c.seeks, 2);
}
END_TEST

START_TEST(test_units_share_the_queue)
{
	uint64_t a1, a2, b;

	/* Two 1 MB writes to a, then a 4 KB read of b, queued 1 ms apart. */
	sd_unit_enqueued(&drive, 0);
	sd_unit_enqueued(&drive, 0);
	sd_unit_enqueued(&drive, 1);
	ck_assert_uint_eq(drive.queue_depth, 3);
	ck_assert_uint_eq(drive.units[0].queue_depth, 2);
	ck_assert_uint_eq(drive.units[1].c.max_queue_depth, 1);
	ck_assert_uint_eq(drive.c.max_queue_depth, 3);

	a1 = serve(0, 0, 1000000, SD_WRITE, 0);
	a2 = serve(0, 1000000, 1000000, SD_WRITE, 1 * MS);
	b = serve(1, 0, 4096, SD_READ, 2 * MS);
	ck_assert_uint_eq(a1, 50 * MS);
	ck_assert_uint_eq(a2, 100 * MS);
	/* b waits behind both of a's writes, then seeks over to b. */
	ck_assert_uint_eq(b, 100 * MS + 5 * MS + 409600);
	ck_assert_uint_gt(b, a2);
	ck_assert_uint_eq(drive.units[1].c.wait_ns, 98 * MS);
	ck_assert_uint_eq(drive.units[1].c.max_wait_ns, 98 * MS);
	ck_assert_uint_eq(drive.units[0].c.wait_ns, 49 * MS);
	ck_assert_uint_eq(drive.c.wait_ns, 147 * MS);
	ck_assert_uint_eq(drive.c.max_wait_ns, 98 * MS);
	ck_assert_uint_eq(drive.queue_depth, 0);
	ck_assert_uint_eq(drive.units[1].queue_depth, 0);

	/* A stall holds every unit: a request to b arriving in it starts at its end. */
	ctl_line("stall 1", b);
	ck_assert_uint_eq(sd_drive_service_start(&drive, b + MS), b + SEC);
	ck_assert_uint_eq(sd_drive_service_start(&drive, b + 2 * SEC), b + 2 * SEC);
}
END_TEST

START_TEST(test_units_counters)
{
	g_autoptr(GString) out = g_string_new(NULL);

	sd_unit_enqueued(&drive, 0);
	sd_unit_enqueued(&drive, 1);
	sd_unit_enqueued(&drive, 1);
	sd_unit_done(&drive, 0, SD_WRITE, 5000, 0, 0, 7);
	sd_unit_done(&drive, 1, SD_WRITE, 3000, 0, 2, 5);
	sd_unit_done(&drive, 1, SD_READ, 100, -EIO, 4, 1);
	ck_assert_uint_eq(drive.units[0].c.write_bytes, 5000);
	ck_assert_uint_eq(drive.units[1].c.write_bytes, 3000);
	ck_assert_uint_eq(drive.units[1].c.reads, 0);
	ck_assert_uint_eq(drive.units[1].c.errors, 1);
	ck_assert_uint_eq(drive.units[0].c.errors, 0);
	ck_assert_uint_eq(drive.c.write_bytes, 8000);
	ck_assert_uint_eq(drive.c.writes, 2);
	ck_assert_uint_eq(drive.c.busy_ns, 13);
	ck_assert_uint_eq(drive.units[1].c.busy_ns, 6);
	ck_assert_uint_eq(drive.units[1].c.max_queue_depth, 2);

	sd_drive_format_stats(&drive, out, 0, 42, 0);
	ck_assert_ptr_nonnull(strstr(out->str, "\nwrite_bytes 8000\n"));
	ck_assert_ptr_nonnull(strstr(out->str, "\na.write_bytes 5000\n"));
	ck_assert_ptr_nonnull(strstr(out->str, "\nb.write_bytes 3000\n"));
	ck_assert_ptr_nonnull(strstr(out->str, "\nb.errors 1\n"));
	ck_assert_ptr_nonnull(strstr(out->str, "\nb.wait_ns 6\n"));
	ck_assert_ptr_nonnull(strstr(out->str, "\nb.max_wait_ns 4\n"));
	ck_assert_ptr_nonnull(strstr(out->str, "\nb.seek_ms 5\n"));
	ck_assert_ptr_nonnull(strstr(out->str, "\na.write_bw 20000000\n"));
	ck_assert_ptr_nonnull(strstr(out->str, "\nimages 2\n"));
	ck_assert_ptr_nonnull(strstr(out->str, "\nhead_image a\n"));
	/* What describes one medium is per image only. */
	ck_assert_ptr_null(strstr(out->str, "\nwrite_bw "));
	ck_assert_ptr_null(strstr(out->str, "\nejected "));
	ck_assert_ptr_null(strstr(out->str, "\nsize "));

	/* reset acts on the whole head: every unit's counters too. */
	sd_unit_enqueued(&drive, 1);
	ctl_line("reset", 0);
	ck_assert_uint_eq(drive.c.write_bytes, 0);
	ck_assert_uint_eq(drive.units[0].c.write_bytes, 0);
	ck_assert_uint_eq(drive.units[1].c.errors, 0);
	ck_assert_uint_eq(drive.units[1].c.max_queue_depth, 1);
	ck_assert_uint_eq(drive.units[0].c.max_queue_depth, 0);
}
END_TEST

START_TEST(test_units_ctl)
{
	/* Eject of one image; clear without a name un-ejects them all. */
	ck_assert_int_eq(ctl_line("b: eject", 0), 0);
	ck_assert_int_eq(sd_unit_check(&drive, 1, 0, 1, SD_READ), -EIO);
	ck_assert_int_eq(sd_unit_check(&drive, 1, 0, 0, SD_FSYNC), -EIO);
	ck_assert_int_eq(sd_unit_check(&drive, 0, 0, 1, SD_READ), 0);
	ck_assert_int_eq(ctl_line("eject", 0), 0);
	ck_assert_int_eq(sd_unit_check(&drive, 0, 0, 1, SD_READ), -EIO);
	ck_assert_int_eq(ctl_line("clear", 0), 0);
	ck_assert_int_eq(sd_unit_check(&drive, 0, 0, 1, SD_READ), 0);
	ck_assert_int_eq(sd_unit_check(&drive, 1, 0, 1, SD_READ), 0);

	/* Fault rules: per image, or one per image without a name. */
	ck_assert_int_eq(ctl_line("a:fail write 0 1M", 0), 0);
	ck_assert_int_eq(sd_unit_check(&drive, 0, 0, 4096, SD_WRITE), -EIO);
	ck_assert_int_eq(sd_unit_check(&drive, 1, 0, 4096, SD_WRITE), 0);
	ck_assert_int_eq(ctl_line("fail read 2M 3M", 0), 0);
	ck_assert_uint_eq(drive.faults->len, 3);
	ck_assert_int_eq(sd_unit_check(&drive, 1, 2000000, 1, SD_READ), -EIO);
	ck_assert_int_eq(ctl_line("  b :  clear", 0), 0);
	ck_assert_uint_eq(drive.faults->len, 2);
	ck_assert_int_eq(sd_unit_check(&drive, 1, 2000000, 1, SD_READ), 0);
	ck_assert_int_eq(sd_unit_check(&drive, 0, 2000000, 1, SD_READ), -EIO);
	ck_assert_int_eq(sd_unit_check(&drive, 0, 0, 4096, SD_WRITE), -EIO);

	/* set: one image, or all. */
	ck_assert_int_eq(ctl_line("a: set write_bw=1M", 0), 0);
	ck_assert_uint_eq(drive.units[0].p.write_bw, 1000000);
	ck_assert_uint_eq(drive.units[1].p.write_bw, b_params.write_bw);
	ck_assert_int_eq(ctl_line("set seek_ms=1", 0), 0);
	ck_assert_uint_eq(drive.units[0].p.seek_ns, 1 * MS);
	ck_assert_uint_eq(drive.units[1].p.seek_ns, 1 * MS);

	/* The head's commands take no name; names must exist. */
	ck_assert_int_eq(ctl_line("a: fast on", 0), -EINVAL);
	ck_assert_int_eq(ctl_line("b: stall 1", 0), -EINVAL);
	ck_assert_int_eq(ctl_line("a: reset", 0), -EINVAL);
	ck_assert_int_eq(ctl_line("c: eject", 0), -EINVAL);
	ck_assert(!drive.fast);
	ck_assert_uint_eq(drive.stall_until_ns, 0);
	ck_assert_int_eq(ctl_line(": eject", 0), -EINVAL);
	ck_assert_int_eq(ctl_line("a b: eject", 0), -EINVAL);
	ck_assert_int_eq(ctl_line(".a: eject", 0), -EINVAL);
	ck_assert_int_eq(ctl_line("a:", 0), -EINVAL);
	ck_assert_int_eq(ctl_line("a: b: eject", 0), -EINVAL);
	ck_assert(!drive.units[0].ejected && !drive.units[1].ejected);
}
END_TEST

START_TEST(test_one_unit_is_disk)
{
	g_autoptr(GString) out = g_string_new(NULL);
	struct sd_cmd cmd;
	char *why = NULL;

	/* sd_drive_init's drive: one unit, "disk", nameable in ctl. */
	ck_assert_uint_eq(drive.n_units, 1);
	ck_assert_str_eq(drive.units[0].name, SD_UNIT_DEFAULT);
	ck_assert_int_eq(sd_cmd_parse("disk: eject", &cmd, &why), 0);
	ck_assert_int_eq(cmd.unit, SD_UNIT_NAMED);
	ck_assert_str_eq(cmd.target, "disk");
	ck_assert_int_eq(sd_drive_resolve(&drive, &cmd, &why), 0);
	ck_assert_int_eq(cmd.unit, 0);
	sd_drive_apply(&drive, &cmd, 0);
	ck_assert_int_eq(sd_drive_check(&drive, 0, 1, SD_READ), -EIO);
	ck_assert_int_eq(sd_cmd_parse("eject", &cmd, &why), 0);
	ck_assert_int_eq(cmd.unit, SD_UNIT_ALL);

	sd_drive_format_stats(&drive, out, 4096, 0, 0);
	ck_assert_ptr_nonnull(strstr(out->str, "\nejected 1\n"));
	ck_assert_ptr_nonnull(strstr(out->str, "\nsize 4096\n"));
	ck_assert_ptr_nonnull(strstr(out->str, "\nwrite_bw 20000000\n"));
	ck_assert_ptr_nonnull(strstr(out->str, "\ndisk.ejected 1\n"));
	ck_assert_ptr_nonnull(strstr(out->str, "\nimages 1\n"));
}
END_TEST

START_TEST(test_unit_names)
{
	static const char *const good[] = {"a", "disk", "dvd-ram", "zip_1", "a.b", "0"};
	static const char *const bad[] = {"",	 ".",	"..",  ".x",	  "a b",
					  "a:b", "a/b", "a=b", "\xc3\xa9"};
	char longest[SD_UNIT_NAME_MAX + 2];

	for (size_t i = 0; i < G_N_ELEMENTS(good); i++)
		ck_assert_msg(sd_unit_name_ok(good[i]), "'%s' rejected", good[i]);
	for (size_t i = 0; i < G_N_ELEMENTS(bad); i++)
		ck_assert_msg(!sd_unit_name_ok(bad[i]), "'%s' accepted", bad[i]);
	memset(longest, 'x', sizeof(longest) - 1);
	longest[SD_UNIT_NAME_MAX] = '\0';
	ck_assert(sd_unit_name_ok(longest));
	longest[SD_UNIT_NAME_MAX] = 'x';
	longest[SD_UNIT_NAME_MAX + 1] = '\0';
	ck_assert(!sd_unit_name_ok(longest));
}
END_TEST

static Suite *drive_suite(void)
{
	Suite *s = suite_create("slowdev-drive");
	TCase *model = tcase_create("model");
	TCase *parse = tcase_create("parse");
	TCase *units = tcase_create("units");

	tcase_add_checked_fixture(model, setup, teardown);
	tcase_add_test(model, test_seek_only_on_discontinuity);
	tcase_add_test(model, test_read_write_bandwidth);
	tcase_add_test(model, test_fsync_and_empty_are_free);
	tcase_add_test(model, test_fast_mode);
	tcase_add_test(model, test_fault_ranges);
	tcase_add_test(model, test_eject_and_clear);
	tcase_add_test(model, test_stall);
	tcase_add_test(model, test_counters_and_reset);
	tcase_add_test(model, test_one_unit_is_disk);
	suite_add_tcase(s, model);

	tcase_add_checked_fixture(units, setup_units, teardown);
	tcase_add_test(units, test_units_switch_is_seek);
	tcase_add_test(units, test_units_share_the_queue);
	tcase_add_test(units, test_units_counters);
	tcase_add_test(units, test_units_ctl);
	suite_add_tcase(s, units);

	tcase_add_test(parse, test_parse_size);
	tcase_add_test(parse, test_parse_times);
	tcase_add_test(parse, test_profiles);
	tcase_add_test(parse, test_cmd_parse_good);
	tcase_add_test(parse, test_cmd_parse_bad);
	tcase_add_test(parse, test_cmd_parse_text);
	tcase_add_test(parse, test_unit_names);
	suite_add_tcase(s, parse);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(drive_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
