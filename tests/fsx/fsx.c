/*
 * fsx: a model-based random file-system tester for slowmedia (after the
 * classic fsx).
 *
 * Random ops run on a few files of one directory: overlapping writes, appends
 * (also through O_APPEND handles), reads, truncates, fallocates, fsyncs, opens
 * and closes, renames, links and unlinks. An in-memory model of every file
 * (and of unlinked files still open) predicts each result: read data is
 * compared byte for byte, stat sizes and link counts and the directory's names
 * too, and after an fsync the lower file itself must equal the model. The op
 * generator depends only on the seed and the model, never on timing, so a seed
 * gives the same ops again (not the same interleaving with the flushers).
 *
 * Managed mode (--daemon, --tmp) mounts slowmedia over a fresh lower directory
 * for each configuration (-c), runs the ops, then checks the medium: after an
 * unmount the daemon drains and exits, and the lower files must equal the
 * model; then once more through a second mount. Plain mode (--dir) runs on a
 * directory set up by someone else, e.g. a native one to check the tester.
 *
 * Written bytes encode the op that wrote them: byte = tag + file offset, with
 * tag = op number % 251 + 1, so a wrong byte names its writer (or its shift).
 */
#include "fsx.h"

#define DEFAULT_OPS 10000
#define DEFAULT_FILES 6
#define DEFAULT_MAX_SIZE (4u << 20)
#define DEFAULT_LOG_OPS 50
#define DEFAULT_OP_TIMEOUT_S 60
#define PROGRESS_OPS 50000
#define EXIT_SKIP 77

static void fsx_failed(struct fsx *x);

/* ---- watchdog ---- */

void wd_arm(struct fsx *x, const char *line)
{
	g_strlcpy(x->cur_line, line, sizeof(x->cur_line));
	__atomic_store_n(&x->op_start_ns, now_ns(), __ATOMIC_RELEASE);
}

void wd_disarm(struct fsx *x)
{
	__atomic_store_n(&x->op_start_ns, 0, __ATOMIC_RELEASE);
}

static void *watchdog_main(void *arg)
{
	struct fsx *x = arg;

	for (;;) {
		int64_t start = __atomic_load_n(&x->op_start_ns, __ATOMIC_ACQUIRE);

		sleep(1);
		if (!start ||
		    start != __atomic_load_n(&x->op_start_ns, __ATOMIC_ACQUIRE) ||
		    now_ns() - start < (int64_t)x->op_timeout_s * NSEC_PER_SEC)
			continue;
		printf("FAIL: HANG: op did not return in %u s: %s\n", x->op_timeout_s,
		       x->cur_line);
		log_print(x);
		if (sig_daemon_pid)
			dump_daemon_threads(sig_daemon_pid);
		fsx_failed(x);
		if (sig_daemon_pid)
			kill(sig_daemon_pid, SIGKILL);
		if (sig_mnt[0])
			umount2(sig_mnt, MNT_DETACH);
		printf("%u passed, %u failed\n", x->passed, x->failed + 1);
		fflush(stdout);
		_exit(1);
	}
	return NULL;
}

static void on_signal(int sig)
{
	if (sig_mnt[0])
		umount2(sig_mnt, MNT_DETACH);
	if (sig_daemon_pid)
		kill(sig_daemon_pid, SIGTERM);
	_exit(128 + sig);
}

/* ---- one configuration ---- */

static void model_reset(struct fsx *x)
{
	for (int i = 0; i < MAX_INODES; i++) {
		g_free(x->inodes[i].data);
		x->inodes[i] = (struct minode){0};
	}
	memset(x->names, 0, sizeof(x->names));
	memset(x->h, 0, sizeof(x->h));
	x->next_id = 0;
	x->nlogged = 0;
	x->ops_run = 0;
}

/* Forget the st_ino of every file: a new mount may number them anew. */
static void forget_inos(struct fsx *x)
{
	for (int i = 0; i < MAX_INODES; i++)
		x->inodes[i].ino_known = false;
}

static void print_summary(const struct fsx *x, uint64_t n, int64_t ns)
{
	printf("# %" PRIu64 " ops in %.1f s; %.1f MiB written, %" PRIu64
	       " writes took over %d ms (queue full); %" PRIu64
	       " fsyncs took %.1f ms on average, %.1f at most\n",
	       n, (double)ns / NSEC_PER_SEC, (double)x->written / (1 << 20),
	       x->nslow_writes, (int)(SLOW_WRITE_NS / 1000000), x->nsyncs,
	       x->nsyncs ? (double)x->sync_ns / (double)x->nsyncs / 1e6 : 0.0,
	       (double)x->sync_max_ns / 1e6);
}

static bool run_ops(struct fsx *x, GArray *replay)
{
	uint64_t n = replay ? MIN(replay->len, x->nops) : x->nops;
	int64_t start = now_ns();

	for (uint64_t i = 0; i < n; i++) {
		struct op op;

		if (replay)
			op = g_array_index(replay, struct op, i);
		else
			gen_op(x, &op, i + 1);
		x->ops_run = i + 1;
		if (!run_one(x, &op))
			return false;
		if ((i + 1) % PROGRESS_OPS == 0)
			printf("# %" PRIu64 " ops, %.1f s\n", i + 1,
			       (double)(now_ns() - start) / NSEC_PER_SEC);
	}
	print_summary(x, n, now_ns() - start);
	return true;
}

static void print_repro(const struct fsx *x)
{
	uint64_t n = x->ops_run ? x->ops_run : x->nops;

	printf("seed %" PRIu64 ", after %" PRIu64 " ops; to run these ops again:\n  %s",
	       x->cfg_seed, x->ops_run, x->argv[0]);
	if (x->plain_dir)
		printf(" --dir %s", x->plain_dir);
	else
		printf(" --daemon %s --tmp DIR -c '%s'", x->daemon, x->config);
	printf(" --seed %" PRIu64 " --ops %" PRIu64 " --files %u --max-size %" PRIu64
	       "%s%s%s\n",
	       x->cfg_seed, n, x->nfiles, x->max_size, x->replay ? " --replay FILE" : "",
	       x->use_direct ? "" : " --no-direct", x->lax_stat ? " --lax-stat" : "");
}

static void fsx_failed(struct fsx *x)
{
	printf("config '%s' FAILED\n", x->config ? x->config : "");
	print_repro(x);
	fflush(stdout);
}

static bool make_dirs(struct fsx *x, unsigned idx)
{
	path_fmt(x->cfgdir, "%s/c%u", x->tmp, idx);
	path_fmt(x->lower, "%s/lower", x->cfgdir);
	path_fmt(x->dir, "%s/mnt", x->cfgdir);
	path_fmt(x->pidfile, "%s/daemon.pid", x->tmp);
	if (g_mkdir_with_parents(x->lower, 0755) < 0 ||
	    g_mkdir_with_parents(x->dir, 0755) < 0) {
		report(x, "mkdir under %s: %s", x->cfgdir, g_strerror(errno));
		return false;
	}
	return true;
}

/* --crash: the op after which the daemon is killed, from the seed alone
 * (the ops themselves stay those of the seed). */
static uint64_t crash_point(const struct fsx *x)
{
	uint64_t half = x->nops / 2;

	return half + (x->cfg_seed * 0x9e3779b97f4a7c15ull >> 33) % (x->nops - half + 1);
}

/* Bytes of the segments in this configuration's spool directory. */
static uint64_t spool_bytes_of(const struct fsx *x)
{
	g_autofree char *dir = g_strdup_printf("%s/c%u", x->spool_root, x->cfg_idx);
	g_autoptr(GDir) d = g_dir_open(dir, 0, NULL);
	const char *medium, *name;
	uint64_t bytes = 0;

	while (d && (medium = g_dir_read_name(d))) {
		g_autofree char *mdir = g_build_filename(dir, medium, NULL);
		g_autoptr(GDir) m = g_dir_open(mdir, 0, NULL);
		struct stat st;

		while (m && (name = g_dir_read_name(m))) {
			g_autofree char *p = g_build_filename(mdir, name, NULL);
			if (g_str_has_suffix(name, ".spj") && stat(p, &st) == 0)
				bytes += (uint64_t)st.st_size;
		}
	}
	return bytes;
}

/* kill -9 at crash_point, then mount again: what the mount shows now must
 * be what every acknowledged op made. */
static bool run_crash(struct fsx *x, GArray *replay)
{
	uint64_t all = x->nops;
	bool ok;

	x->nops = crash_point(x);
	ok = run_ops(x, replay);
	x->nops = all;
	if (!ok) {
		log_print(x);
		return false;
	}
	printf("# kill -9 of the daemon after op %" PRIu64 "%s\n", x->ops_run,
	       x->spool_root || strstr(x->config, "spool=") ? ""
						       : " (no spool: what was queued is lost)");
	fflush(stdout);
	if (!daemon_kill(x))
		return false;
	if (x->spool_root)
		printf("# the spool holds %" PRIu64 " bytes of journal\n", spool_bytes_of(x));
	x->dead_mount = true;
	close_all(x, false); /* their fds died with the connection */
	x->dead_mount = false;
	forget_inos(x);
	return daemon_start(x) && check_tree(x, "through a new mount after the crash", x->dir, false);
}

/* The run on the mount, then the medium after a drain and after a remount. */
static bool run_managed(struct fsx *x, GArray *replay)
{
	bool ok = daemon_start(x);

	ok = ok && (x->crash ? run_crash(x, replay) : run_ops(x, replay));
	if (!ok && !x->crash)
		log_print(x);
	close_all(x, ok);
	ok = ok && check_tree(x, "through the mount at the end", x->dir, false);
	ok = daemon_stop(x) && ok;
	ok = ok && check_tree(x, "lower dir after the drain", x->lower, true);
	forget_inos(x);
	if (ok && daemon_start(x)) {
		ok = check_tree(x, "through a new mount", x->dir, false);
		ok = daemon_stop(x) && ok;
	} else {
		ok = false;
	}
	return ok;
}

static bool run_plain(struct fsx *x, GArray *replay)
{
	bool ok = run_ops(x, replay);

	if (!ok)
		log_print(x);
	ok = close_all(x, ok) && ok;
	return ok && check_tree(x, "at the end", x->dir, false);
}

static bool run_config(struct fsx *x, unsigned idx, const char *config, GArray *replay)
{
	g_autofree char *with = NULL;
	bool ok;

	x->config = config;
	x->cfg_idx = idx;
	x->nfail = 0;
	x->written = x->nsyncs = x->nslow_writes = 0;
	x->sync_ns = x->sync_max_ns = 0;
	x->cfg_seed = x->seed + idx;
	rng_seed(x, x->cfg_seed);
	model_reset(x);
	x->no_direct = !x->use_direct;
	x->no_rename_flags = x->fat_like;
	memset(x->no_falloc, 0, sizeof(x->no_falloc));
	printf("# config %u '%s': seed %" PRIu64 ", %" PRIu64
	       " ops, %u files up to %" PRIu64 " bytes\n",
	       idx, config, x->cfg_seed, replay ? MIN(replay->len, x->nops) : x->nops,
	       x->nfiles, x->max_size);
	fflush(stdout);
	if (x->plain_dir) {
		g_strlcpy(x->dir, x->plain_dir, sizeof(x->dir));
		g_strlcpy(x->lower, x->plain_lower ? x->plain_lower : "",
			  sizeof(x->lower));
		ok = run_plain(x, replay);
	} else {
		if (x->spool_root) {
			with = g_strdup_printf("%s%sspool=%s/c%u,rescue=%s/rescue-c%u", config,
					       config[0] ? "," : "", x->spool_root, idx,
					       x->spool_root, idx);
			x->config = with; /* a failure names the whole of it */
		}
		ok = make_dirs(x, idx) && run_managed(x, replay);
	}
	ok = ok && !x->nfail;
	if (ok)
		printf("# config %u '%s': passed\n", idx, config);
	else
		fsx_failed(x);
	x->config = config;
	return ok;
}

/* ---- main ---- */

static const char *const default_configs[] = {
    "queue=1M,rate=20M,latency=5,read_grace=1",
    "queue=64M,rate=20M,latency=5,read_grace=1",
    "queue=4M,rate=20M,flushers=4,latency=5,read_grace=1",
};

static void usage(FILE *out)
{
	fprintf(
	    out,
	    "usage: fsx --daemon SLOWMEDIA --tmp DIR [-c OPTS]... [options]\n"
	    "       fsx --dir DIR [--lower DIR] [options]\n"
	    "\n"
	    "Random file ops checked against an in-memory model. With --daemon, each\n"
	    "configuration mounts SLOWMEDIA -o OPTS over DIR/cN/lower at DIR/cN/mnt,\n"
	    "runs the ops, and checks the lower files after unmount (drain) and the\n"
	    "files through a second mount. Default configurations:\n");
	for (size_t i = 0; i < G_N_ELEMENTS(default_configs); i++)
		fprintf(out, "  %s\n", default_configs[i]);
	fprintf(
	    out,
	    "\n"
	    "  -s, --seed N        seed (default: random); config i uses N+i\n"
	    "  -n, --ops N         ops per configuration (default %d)\n"
	    "  -c, --config OPTS   slowmedia -o options; repeat for more configurations\n"
	    "  -f, --files N       file names f0..f(N-1) (default %d, max %d)\n"
	    "  -m, --max-size N    largest file size (default %u)\n"
	    "  -r, --replay FILE   run the ops listed in FILE (lines of the op log)\n"
	    "  -l, --log-ops N     ops shown on failure (default %d)\n"
	    "  -t, --op-timeout S  an op taking longer is a hang (default %d)\n"
	    "      --dir DIR       run in DIR, an empty directory (no daemon)\n"
	    "      --lower DIR     with --dir: DIR's lower directory, for fsync checks\n"
	    "      --no-fsync-check  do not compare the lower file after fsync\n"
	    "      --no-direct     no O_DIRECT handles (a native --dir needs this: they\n"
	    "                      would need aligned I/O)\n"
	    "      --crash         kill -9 the daemon after a number of ops the seed\n"
	    "                      picks (half to all of --ops), mount again (a\n"
	    "                      spool= in the config replays), check the files,\n"
	    "                      then drain and check as usual\n"
	    "      --fat-like      no hard links and no rename flags (what FAT has)\n"
	    "      --spool-root D  add spool=D/cN to configuration N (D on another\n"
	    "                      filesystem than --tmp)\n"
	    "      --no-unshare    mount in the caller's mount namespace, not a private\n"
	    "                      one (to look at the mount from outside)\n"
	    "      --lax-stat      only warn about a wrong stat size that is right once\n"
	    "                      the attribute cache expired (to look past that bug)\n"
	    "  -v, --verbose       print every op before running it\n"
	    "\n"
	    "Prints 'N passed, N failed' (configurations) last; exits 1 on a failure,\n"
	    "77 when it cannot run (not root, no /dev/fuse).\n",
	    DEFAULT_OPS, DEFAULT_FILES, MAX_FILES, DEFAULT_MAX_SIZE, DEFAULT_LOG_OPS,
	    DEFAULT_OP_TIMEOUT_S);
}

/* Long options without a short one. */
enum {
	O_DIR = 256,
	O_LOWER,
	O_NOFSYNC,
	O_DAEMON,
	O_TMP,
	O_NODIRECT,
	O_LAXSTAT,
	O_NOUNSHARE,
	O_CRASH,
	O_FATLIKE,
	O_SPOOLROOT
};

static void set_option(struct fsx *x, int c, const char *arg)
{
	switch (c) {
	case 's':
		x->seed = strtoull(arg, NULL, 0);
		x->seeded = true;
		break;
	case 'n':
		x->nops = parse_size_arg(arg);
		break;
	case 'c':
		g_ptr_array_add(x->configs, (char *)arg);
		break;
	case 'f':
		x->nfiles = (unsigned)strtoul(arg, NULL, 0);
		break;
	case 'm':
		x->max_size = parse_size_arg(arg);
		break;
	case 'r':
		x->replay = arg;
		break;
	case 'l':
		x->log_ops = (unsigned)strtoul(arg, NULL, 0);
		break;
	case 't':
		x->op_timeout_s = (unsigned)strtoul(arg, NULL, 0);
		break;
	case 'v':
		x->verbose = true;
		break;
	case O_DIR:
		x->plain_dir = arg;
		break;
	case O_LOWER:
		x->plain_lower = arg;
		break;
	case O_DAEMON:
		x->daemon = arg;
		break;
	case O_TMP:
		x->tmp = arg;
		break;
	case O_NOFSYNC:
		x->fsync_check = false;
		break;
	case O_NODIRECT:
		x->use_direct = false;
		break;
	case O_LAXSTAT:
		x->lax_stat = true;
		break;
	case O_NOUNSHARE:
		x->unshare_ns = false;
		break;
	case O_CRASH:
		x->crash = true;
		break;
	case O_FATLIKE:
		x->fat_like = true;
		break;
	case O_SPOOLROOT:
		x->spool_root = arg;
		break;
	case 'h':
		usage(stdout);
		exit(0);
	default:
		usage(stderr);
		exit(2);
	}
}

static void parse_cmdline(struct fsx *x, int argc, char **argv)
{
	static const struct option longopts[] = {{"seed", 1, NULL, 's'},
						 {"ops", 1, NULL, 'n'},
						 {"config", 1, NULL, 'c'},
						 {"files", 1, NULL, 'f'},
						 {"max-size", 1, NULL, 'm'},
						 {"replay", 1, NULL, 'r'},
						 {"log-ops", 1, NULL, 'l'},
						 {"op-timeout", 1, NULL, 't'},
						 {"verbose", 0, NULL, 'v'},
						 {"help", 0, NULL, 'h'},
						 {"dir", 1, NULL, O_DIR},
						 {"lower", 1, NULL, O_LOWER},
						 {"daemon", 1, NULL, O_DAEMON},
						 {"tmp", 1, NULL, O_TMP},
						 {"no-fsync-check", 0, NULL, O_NOFSYNC},
						 {"no-direct", 0, NULL, O_NODIRECT},
						 {"lax-stat", 0, NULL, O_LAXSTAT},
						 {"no-unshare", 0, NULL, O_NOUNSHARE},
						 {"crash", 0, NULL, O_CRASH},
						 {"fat-like", 0, NULL, O_FATLIKE},
						 {"spool-root", 1, NULL, O_SPOOLROOT},
						 {NULL, 0, NULL, 0}};
	int c;

	while ((c = getopt_long(argc, argv, "s:n:c:f:m:r:l:t:vh", longopts, NULL)) != -1)
		set_option(x, c, optarg);
	if (optind < argc || x->nfiles < 2 || x->nfiles > MAX_FILES || x->log_ops < 1 ||
	    x->max_size < 2 * PAGE_BYTES || x->op_timeout_s < 1 ||
	    (!x->plain_dir && (!x->daemon || !x->tmp))) {
		usage(stderr);
		exit(2);
	}
	if (x->tmp && !(x->tmp = realpath(x->tmp, NULL))) {
		fprintf(stderr, "fsx: --tmp: %s\n", strerror(errno));
		exit(2);
	}
	if (!x->seeded)
		x->seed = (uint64_t)now_ns() ^ ((uint64_t)getpid() << 32);
	if (!x->plain_dir && !x->configs->len)
		for (size_t i = 0; i < G_N_ELEMENTS(default_configs); i++)
			g_ptr_array_add(x->configs, (char *)default_configs[i]);
	if (x->plain_dir && !x->configs->len)
		g_ptr_array_add(x->configs, (char *)"");
}

static bool dir_is_empty(const char *dir)
{
	g_autoptr(GDir) d = g_dir_open(dir, 0, NULL);

	return d && !g_dir_read_name(d);
}

static void setup_process(struct fsx *x)
{
	struct sigaction sa = {.sa_handler = on_signal};
	pthread_t wd;

	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	setvbuf(stdout, NULL, _IOLBF, 0);
	x->buf_size = x->max_size + (2u << 20);
	x->buf = g_aligned_alloc(x->buf_size, 1, PAGE_BYTES);
	x->log = g_malloc0_n(x->log_ops, LINE_BYTES);
	pthread_create(&wd, NULL, watchdog_main, x);
	pthread_detach(wd);
}

int main(int argc, char **argv)
{
	struct fsx x = {.nops = DEFAULT_OPS,
			.nfiles = DEFAULT_FILES,
			.max_size = DEFAULT_MAX_SIZE,
			.log_ops = DEFAULT_LOG_OPS,
			.op_timeout_s = DEFAULT_OP_TIMEOUT_S,
			.fsync_check = true,
			.use_direct = true,
			.unshare_ns = true,
			.configs = g_ptr_array_new(),
			.argv = argv};
	g_autoptr(GArray) replay = NULL;

	parse_cmdline(&x, argc, argv);
	if (!x.plain_dir && (geteuid() != 0 || access("/dev/fuse", R_OK | W_OK) < 0)) {
		printf("SKIP: fsx needs root and /dev/fuse to mount slowmedia\n");
		return EXIT_SKIP;
	}
	if (x.plain_dir && !dir_is_empty(x.plain_dir)) {
		fprintf(stderr, "fsx: --dir %s must be an empty directory\n",
			x.plain_dir);
		return 2;
	}
	if (!x.plain_dir && x.unshare_ns)
		private_mount_ns();
	if (x.replay)
		replay = load_replay(x.replay);
	printf("# fsx seed %" PRIu64 "\n", x.seed);
	setup_process(&x);
	for (guint i = 0; i < x.configs->len; i++) {
		if (run_config(&x, i, x.configs->pdata[i], replay))
			x.passed++;
		else
			x.failed++;
	}
	model_reset(&x);
	g_aligned_free(x.buf);
	g_free(x.log);
	free((char *)x.tmp); /* from realpath() */
	g_ptr_array_free(x.configs, TRUE);
	printf("%u passed, %u failed\n", x.passed, x.failed);
	return x.failed ? 1 : 0;
}
