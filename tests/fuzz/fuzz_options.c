/*
 * Fuzz target: the mount option parser (fusefs/options.c, sched/sched_opts.c).
 *
 * Input: lines ('\n'-separated; a NUL ends its line early), at most
 * MAX_ARGS of them. Each input is used three ways:
 *  1. the lines are argv[1..] of sm_options_parse, as the daemon's main()
 *     gets them (so "-o" and "prio=1,class=idle" are two lines), then
 *     sched_opts_warn_no_effect and sched_opts_check_memory;
 *  2. each line is one option for sched_opts_handle on a struct of its own,
 *     then sched_opts_finish;
 *  3. each line (and its part after '=') goes to sm_parse_size and
 *     sm_parse_uint, compared with a second, independent reading of their
 *     grammar (digits, then for sizes one of KMGT with an optional "B" or
 *     "iB"); the whole input is also a /proc/meminfo for sched_parse_meminfo.
 * What must hold: no crash, no leak, no undefined behaviour; whatever the
 * parsers accept lands in range (prio 0..7, weight 1..10000, ...); the two
 * number readings agree; and when sm_options_parse reports no error and the
 * mount point exists, libfuse's fuse_parse_cmdline accepts what is left
 * (main() relies on it: options.c checks first what libfuse would stop at).
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"
#include "options.h"
#include "sched_opts.h"

#define MAX_ARGS 64
#define INPUT_MAX 8192

const char *const fuzz_driver_tokens[] = {
	"-o", "-f", "-d", "-s", "-h", "--help", "-V", "--version", "--", ",", "=", "\\,",
	"prio=", "class=", "class=be", "class=idle", "weight=", "group=", "group", "rate=",
	"queue=", "spool=", "spool_max=", "spool_sync=", "drain_timeout=", "rescue=",
	"latency=", "read_grace=", "flushers=",
	"sync_close", "arbiter=", "arbiter=auto", "arbiter=off", "arbiter=/", "fstype=",
	"allow_suid", "allow_dev", "allow_other", "default_permissions", "fsname=",
	"subtype=", "max_read=", "blksize=", "max_threads=", "max_idle_threads=", "x-",
	"comment=", "noauto", "nofail", "_netdev", "user", "defaults", "ro", "rw",
	"0", "1", "7", "8", "4096", "65536", "65537", "100000", "100001", "4294967295",
	"4294967296", "18446744073709551615", "18446744073709551616", "9223372036854775807",
	"K", "M", "G", "T", "k", "m", "g", "t", "B", "iB", "MiB", "-1", "+1", " 1",
	"/tmp", "/", "MemAvailable:", " kB\n", NULL};

/* ---- second readings of the number grammar ---- */

static const char *digits_end(const char *s, uint64_t *v, bool *over)
{
	*v = 0;
	*over = false;
	for (; *s >= '0' && *s <= '9'; s++) {
		unsigned d = (unsigned)(*s - '0');
		if (*v > (UINT64_MAX - d) / 10)
			*over = true;
		else if (!*over)
			*v = *v * 10 + d;
	}
	return s;
}

/* true and *out when s is a size sm_parse_size must accept. */
static bool ref_size(const char *s, uint64_t *out)
{
	static const char suffixes[] = "kKmMgGtT";
	uint64_t v;
	bool over;
	const char *p = digits_end(s, &v, &over), *suf;
	unsigned shift = 0;

	if (p == s)
		return false;
	if (*p && (suf = strchr(suffixes, *p))) {
		shift = 10 * (unsigned)(1 + (suf - suffixes) / 2);
		p++;
		if (!strcmp(p, "B") || !strcmp(p, "iB"))
			p += strlen(p);
	}
	if (*p || over || (shift && v > (UINT64_MAX >> shift)))
		return false;
	*out = v << shift;
	return true;
}

static bool ref_uint(const char *s, unsigned lo, unsigned hi, unsigned *out)
{
	uint64_t v;
	bool over;
	const char *p = digits_end(s, &v, &over);

	if (p == s || *p || over || v < lo || v > hi)
		return false;
	*out = (unsigned)v;
	return true;
}

static void check_numbers(const char *s)
{
	static const struct {
		unsigned lo, hi;
	} ranges[] = {{0, UINT32_MAX}, {1, SCHED_PRIO_MAX}, {1, SCHED_WEIGHT_MAX}, {512, 65536}};
	uint64_t got = 0, want = 0;
	unsigned ugot = 0, uwant = 0;
	bool ok = ref_size(s, &want);
	int r = sm_parse_size(s, &got);

	FUZZ_CHECK(r == 0 || r == -EINVAL || r == -ERANGE, "sm_parse_size('%s') = %d", s, r);
	FUZZ_CHECK((r == 0) == ok, "sm_parse_size('%s') = %d, the grammar says %s", s, r,
		   ok ? "valid" : "invalid");
	FUZZ_CHECK(!ok || got == want, "sm_parse_size('%s') = %llu, not %llu", s,
		   (unsigned long long)got, (unsigned long long)want);
	for (size_t i = 0; i < sizeof(ranges) / sizeof(ranges[0]); i++) {
		ok = ref_uint(s, ranges[i].lo, ranges[i].hi, &uwant);
		r = sm_parse_uint(s, ranges[i].lo, ranges[i].hi, &ugot);
		FUZZ_CHECK(r == 0 || r == -EINVAL || r == -ERANGE, "sm_parse_uint('%s') = %d", s, r);
		FUZZ_CHECK((r == 0) == ok, "sm_parse_uint('%s', %u, %u) = %d, the grammar says %s",
			   s, ranges[i].lo, ranges[i].hi, r, ok ? "valid" : "invalid");
		FUZZ_CHECK(!ok || ugot == uwant, "sm_parse_uint('%s') = %u, not %u", s, ugot, uwant);
	}
}

/* ---- what a parsed struct may hold ---- */

static bool group_name_ok(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > SCHED_GROUP_NAME_MAX)
		return false;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && !strchr("_.:-", *s))
			return false;
	return true;
}

static void check_sched(const struct sched_opts *o)
{
	FUZZ_CHECK(o->prio <= SCHED_PRIO_MAX, "prio %u", o->prio);
	FUZZ_CHECK(o->io_class == SCHED_CLASS_BE || o->io_class == SCHED_CLASS_IDLE, "class %d",
		   (int)o->io_class);
	FUZZ_CHECK(o->weight >= 1 && o->weight <= SCHED_WEIGHT_MAX, "weight %u", o->weight);
	FUZZ_CHECK(!o->group || group_name_ok(o->group), "group '%s'", o->group);
	FUZZ_CHECK(!o->rate_bps || (o->rate_bps >= SCHED_RATE_MIN_BPS && o->rate_bps <= UINT64_MAX >> 1),
		   "rate %llu", (unsigned long long)o->rate_bps);
	FUZZ_CHECK(o->queue_bytes >= SCHED_QUEUE_MIN_BYTES && o->queue_bytes <= SCHED_QUEUE_MAX_BYTES,
		   "queue %llu", (unsigned long long)o->queue_bytes);
	FUZZ_CHECK(!o->spool_dir || o->spool_dir[0] == '/', "spool '%s'", o->spool_dir);
	FUZZ_CHECK(!o->spool_max_bytes || o->spool_max_bytes >= SCHED_QUEUE_MIN_BYTES,
		   "spool_max %llu", (unsigned long long)o->spool_max_bytes);
	FUZZ_CHECK(o->spool_sync_ms <= SCHED_SPOOL_SYNC_MAX_MS, "spool_sync %u", o->spool_sync_ms);
	FUZZ_CHECK(o->drain_timeout_s >= 1 && o->drain_timeout_s <= SCHED_DRAIN_TIMEOUT_MAX_S,
		   "drain_timeout %u", o->drain_timeout_s);
	FUZZ_CHECK(!o->rescue_dir || o->rescue_dir[0] == '/', "rescue %s", o->rescue_dir);
	FUZZ_CHECK(o->latency_ms >= 1 && o->latency_ms <= SCHED_LATENCY_MAX_MS, "latency %u",
		   o->latency_ms);
	FUZZ_CHECK(o->read_grace_ms <= SCHED_READ_GRACE_MAX_MS, "read_grace %u", o->read_grace_ms);
	FUZZ_CHECK(o->flushers >= 1 && o->flushers <= SCHED_FLUSHERS_MAX, "flushers %u",
		   o->flushers);
	FUZZ_CHECK(o->arbiter && (!strcmp(o->arbiter, "auto") || !strcmp(o->arbiter, "off") ||
				  o->arbiter[0] == '/'),
		   "arbiter '%s'", o->arbiter ? o->arbiter : "(null)");
}

static void check_errors(GPtrArray *errors, guint from)
{
	for (guint i = from; i < errors->len; i++)
		FUZZ_CHECK(errors->pdata[i] && *(char *)errors->pdata[i], "error %u is empty", i);
}

/* sched_opts_handle's answer: 1 exactly for the scheduler's keys. */
static bool sched_key(const char *opt)
{
	static const char *const valued[] = {"prio",	  "class",   "weight",	   "group",
					     "rate",	  "queue",   "spool",	   "spool_max",
					     "spool_sync", "drain_timeout", "rescue",
					     "latency",	  "read_grace", "flushers", "arbiter", NULL};
	size_t n = strcspn(opt, "=");

	if (!strcmp(opt, "sync_close") || !strncmp(opt, "sync_close=", 11))
		return true;
	if (n == 5 && !strncmp(opt, "group", 5) && !opt[n])
		return false; /* bare group: the fstab key */
	for (const char *const *k = valued; *k; k++)
		if (strlen(*k) == n && !strncmp(*k, opt, n))
			return true;
	return false;
}

/* ---- libfuse's view ---- */

static GString *fuse_said;

static void fuse_log_quiet(enum fuse_log_level level, const char *fmt, va_list ap)
{
	if (fuse_said)
		g_string_append_vprintf(fuse_said, fmt, ap);
}

/* A clean parse with an existing mount point: libfuse must take the rest. */
static void check_libfuse_agrees(struct sm_options *o, struct fuse_args *args)
{
	struct fuse_cmdline_opts cmd = {0};
	struct stat st;
	int r;

	if (!o->mountpoint || stat(o->mountpoint, &st) < 0 || !S_ISDIR(st.st_mode))
		return;
	/* Only plain options before the '--' the real daemon never gets. */
	for (int i = 1; i < args->argc; i++)
		if (!strcmp(args->argv[i], "--"))
			return;
	fuse_said = g_string_new(NULL);
	r = fuse_parse_cmdline(args, &cmd);
	FUZZ_CHECK(r == 0, "libfuse to accept a command line options.c found no fault in (%s)",
		   fuse_said->str);
	g_string_free(fuse_said, TRUE);
	fuse_said = NULL;
	free(cmd.mountpoint);
}

static void run_sm_options_parse(int argc, char **argv, uint64_t mem_available)
{
	struct sm_options o;
	struct fuse_args args;
	GPtrArray *errors = g_ptr_array_new_with_free_func(g_free);
	int r = sm_options_parse(argc, argv, &o, &args, errors);

	FUZZ_CHECK(r == 0 || r == -1, "sm_options_parse = %d", r);
	check_errors(errors, 0);
	check_sched(&o.sched);
	if (r == 0 && !o.show_help && !o.show_version) {
		bool subtype = false;
		for (int i = 0; i < args.argc; i++)
			subtype |= !strcmp(args.argv[i], "-osubtype=slowmedia");
		FUZZ_CHECK(subtype, "-osubtype=slowmedia in the arguments left for libfuse");
		FUZZ_CHECK(!o.allow_other || o.default_permissions, "allow_other without default_permissions");
		FUZZ_CHECK(errors->len || (o.source && o.mountpoint), "an error for a missing SOURCE or MOUNTPOINT");
		FUZZ_CHECK(!o.fstype || *o.fstype, "fstype is empty");
		if (!errors->len) {
			GPtrArray *warnings = g_ptr_array_new_with_free_func(g_free);
			guint before = errors->len;

			sched_opts_warn_no_effect(&o.sched, warnings);
			check_errors(warnings, 0);
			g_ptr_array_unref(warnings);
			sched_opts_check_memory(&o.sched, mem_available, errors);
			FUZZ_CHECK((errors->len > before) ==
					   (mem_available && o.sched.queue_bytes >
								     mem_available / SCHED_QUEUE_MEM_DIV),
				   "the memory check to refuse exactly a queue over 1/%d of %llu",
				   SCHED_QUEUE_MEM_DIV, (unsigned long long)mem_available);
			check_errors(errors, before);
			if (errors->len == before)
				check_libfuse_agrees(&o, &args);
		}
	}
	fuse_opt_free_args(&args);
	sm_options_free(&o);
	g_ptr_array_unref(errors);
}

static void run_sched_opts(char **lines, int n)
{
	struct sched_opts so;
	GPtrArray *errors = g_ptr_array_new_with_free_func(g_free);

	sched_opts_init(&so);
	for (int i = 0; i < n; i++) {
		guint before = errors->len;
		int r = sched_opts_handle(&so, lines[i], errors);

		FUZZ_CHECK(r == (int)sched_key(lines[i]), "sched_opts_handle('%s') = %d", lines[i], r);
		FUZZ_CHECK(r || errors->len == before, "an error for a key that is not ours ('%s')",
			   lines[i]);
		check_errors(errors, before);
		check_sched(&so);
	}
	sched_opts_finish(&so, errors);
	check_errors(errors, 0);
	sched_opts_free(&so);
	g_ptr_array_unref(errors);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool ready;
	char *text, *argv[MAX_ARGS + 2];
	int argc = 0;
	uint64_t mem_available = 0;

	if (!ready) {
		fuse_set_log_func(fuse_log_quiet);
		ready = true;
	}
	if (size > INPUT_MAX)
		return 0;
	text = g_strndup((const char *)data, size); /* stops at a NUL: meminfo is text */
	if (sched_parse_meminfo(text, &mem_available) < 0)
		mem_available = 8ull << 30;
	g_free(text);

	/* The lines, each its own string (a NUL inside ends it early). */
	text = g_malloc(size + 1);
	memcpy(text, data, size);
	text[size] = '\0';
	argv[argc++] = "slowmedia";
	for (char *p = text; argc <= MAX_ARGS;) {
		char *nl = memchr(p, '\n', (size_t)(text + size - p));
		argv[argc++] = p;
		if (!nl)
			break;
		*nl = '\0';
		p = nl + 1;
	}
	argv[argc] = NULL;
	if (argc == 2 && !*argv[1])
		argc = 1; /* empty input: no argument at all */

	for (int i = 1; i < argc; i++) {
		const char *eq = strchr(argv[i], '=');
		check_numbers(argv[i]);
		if (eq)
			check_numbers(eq + 1);
	}
	run_sched_opts(argv + 1, argc - 1);
	run_sm_options_parse(argc, argv, mem_available);
	g_free(text);
	return 0;
}
