/* slowmedia SOURCE MOUNTPOINT [-o opts]: the daemon. */
#include "arb_client.h"
#include "control.h"
#include "fs.h"
#include "log.h"
#include "ops.h"
#include "reqtrack.h"

#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define ENTRY_TIMEOUT_S 1.0
#define MAX_IDLE_THREADS 16
/* glibc gives each thread that mallocs a heap of its own (up to 8 x cores),
 * and memory freed in one stays there: with up to MAX_THREADS_DEFAULT workers
 * copying writes, the daemon's RSS would follow the thread count, not
 * queue= (fsx at queue=1M: peak 36-48 MiB; 25-32 MiB with 2 arenas). */
#define MALLOC_ARENAS 2
#define MAX_THREADS_LIMIT 100000 /* libfuse's own bound; larger means "not given" */
/* libfuse's default is 10. Writers waiting for room hold no worker (they are
 * parked), but fsync and sync_close waiters do: reads must still find one. */
#define MAX_THREADS_DEFAULT 64

int lower_open(const struct sm_options *o);
int lower_mount_flags(int root_fd, const struct sm_options *o, struct fuse_args *args);

static void raise_nofile_limit(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

/* The queue keeps an inode alive while it has queued work for it. */
static void hold_inode(void *ctx, void *owner)
{
	inode_ref(ctx, owner);
}

static void release_inode(void *ctx, void *owner)
{
	inode_unref(ctx, owner);
}

/* Daemonized, stderr is /dev/null: libfuse's lines go where ours go. */
__attribute__((format(printf, 2, 0))) static void
fuse_line_to_log(enum fuse_log_level level, const char *fmt, va_list ap)
{
	char line[1024];

	vsnprintf(line, sizeof(line), fmt, ap);
	sm_log((int)level, "%s", g_strchomp(line)); /* the levels are syslog's */
}

static GPtrArray *fuse_lines; /* the error list, while parse_cmdline runs */

__attribute__((format(printf, 2, 0))) static void
collect_fuse_line(enum fuse_log_level level, const char *fmt, va_list ap)
{
	g_ptr_array_add(fuse_lines, g_strchomp(g_strdup_vprintf(fmt, ap)));
}

/*
 * fuse_parse_cmdline stops at its first problem and prints it alone. What it
 * checks (the mount point, extra arguments, the thread counts) options.c has
 * checked already, so it runs only on a clean list, and anything it still
 * finds joins the list instead of going to stderr by itself.
 */
static void parse_cmdline(struct fuse_args *args, struct fuse_cmdline_opts *cmd,
			  GPtrArray *errors)
{
	if (errors->len)
		return;
	fuse_lines = errors;
	fuse_set_log_func(collect_fuse_line);
	if (fuse_parse_cmdline(args, cmd) != 0 && !errors->len)
		g_ptr_array_add(errors, g_strdup("libfuse rejected the command line"));
	fuse_set_log_func(NULL);
	fuse_lines = NULL;
}

static void warn_no_effect(const struct sm_options *o)
{
	g_autoptr(GPtrArray) warnings = g_ptr_array_new_with_free_func(g_free);

	sched_opts_warn_no_effect(&o->sched, warnings);
	for (guint i = 0; i < warnings->len; i++)
		sm_warn("warning: %s", (char *)warnings->pdata[i]);
}

static int report_errors(const char *prog, GPtrArray *errors)
{
	for (guint i = 0; i < errors->len; i++)
		fprintf(stderr, "%s: %s\n", prog, (char *)errors->pdata[i]);
	if (errors->len)
		fprintf(stderr, "%s: %u problem%s with the options; nothing mounted\n", prog,
			errors->len, errors->len == 1 ? "" : "s");
	return errors->len ? 1 : 0;
}

/* During the final drain: a second SIGTERM (or SIGINT, SIGHUP) ends it, and
 * what is left is saved (the spool, else the rescue directory). */
static struct wq *draining;

static void on_second_signal(int sig)
{
	(void)sig;
	if (draining)
		wq_abandon(draining);
}

static void catch_second_signal(struct wq *q)
{
	struct sigaction sa = {.sa_handler = on_second_signal};
	const int sigs[] = {SIGTERM, SIGINT, SIGHUP};

	draining = q;
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < G_N_ELEMENTS(sigs); i++)
		sigaction(sigs[i], &sa, NULL);
}

static int serve(struct slowmedia *fs, struct fuse_args *args,
		 struct fuse_cmdline_opts *cmd)
{
	struct fuse_session *se;
	struct fuse_loop_config *loop;
	int r = 1;

	se = fuse_session_new(args, &sm_ops, sizeof(sm_ops), fs);
	if (!se)
		return 1;
	fs->se = se;
	if (fuse_set_signal_handlers(se) != 0)
		goto out_destroy;
	if (fuse_session_mount(se, cmd->mountpoint) != 0)
		goto out_handlers;
	/* Before INIT is read: our hooks must see it. */
	if (devio_install(se, fs) != 0)
		sm_warn("cannot hook the FUSE device: the kernel asks for "
			"security.capability before every write");
	if (fuse_daemonize(cmd->foreground) != 0)
		goto out_unmount;
	if (!cmd->foreground) {
		sm_log_start();
		fuse_set_log_func(fuse_line_to_log);
	}
	/* Threads only after the fork of fuse_daemonize: a fork keeps just one. */
	if (wq_start(fs->wq) < 0) {
		sm_err("cannot start the flusher threads");
		goto out_unmount;
	}
	if (strcmp(fs->opts.sched.arbiter, "off") != 0) {
		const struct sched_opts *so = &fs->opts.sched;
		bool dflt = !strcmp(so->arbiter, "auto");
		struct arb_identity id = {.socket = dflt ? NULL : so->arbiter, .spawn = true,
					  .group = so->group, .lower_dev = fs->root_dev,
					  .mountpoint = cmd->mountpoint, .prio = so->prio,
					  .weight = so->weight,
					  .idle_class = so->io_class == SCHED_CLASS_IDLE,
					  .rate_bps = so->rate_bps};
		if (arbc_start(fs->wq, &id) < 0)
			sm_warn("cannot start the arbiter client: flushing alone");
	}
	control_start(fs, cmd->mountpoint);
	if (cmd->singlethread) {
		r = fuse_session_loop(se);
	} else {
		loop = fuse_loop_cfg_create();
		fuse_loop_cfg_set_clone_fd(loop, cmd->clone_fd);
		if (cmd->max_threads > 0 && cmd->max_threads <= MAX_THREADS_LIMIT)
			fuse_loop_cfg_set_max_threads(loop, cmd->max_threads);
		if (cmd->max_idle_threads <= MAX_THREADS_LIMIT)
			fuse_loop_cfg_set_idle_threads(loop, cmd->max_idle_threads);
		r = fuse_session_loop_mt(se, loop);
		fuse_loop_cfg_destroy(loop);
	}
	r = r < 0 ? 1 : 0; /* a signal ends the loop with 0 or the signal number */
	/* Unmount first: the flushers have their own fds, and nobody should hang on
	 * an unserved mount while the queue drains. */
	control_detached(fs); /* the hold goes: nobody serves the mount any more */
	fuse_session_unmount(se);
	catch_second_signal(fs->wq);
	if (wq_busy(fs->wq))
		sm_info("draining what is queued to the medium; a second SIGTERM saves it "
			"instead (%s)", fs->opts.sched.spool_dir ? "it stays in the spool"
								 : "in the rescue directory");
	wq_drain(fs->wq);
	arbc_stop(fs->wq);
	control_stop(fs);
	goto out_handlers;
out_unmount:
	fuse_session_unmount(se);
out_handlers:
	fuse_remove_signal_handlers(se);
out_destroy:
	fuse_session_destroy(se);
	return r;
}

int main(int argc, char *argv[])
{
	const char *prog = "slowmedia";
	struct slowmedia fs = {.root_fd = -1, .timeout = ENTRY_TIMEOUT_S};
	struct fuse_args args;
	struct fuse_cmdline_opts cmd = {0};
	g_autoptr(GPtrArray) errors = g_ptr_array_new_with_free_func(g_free);
	int fd, r = 1;

	read_errors_init(&fs);
	if (sm_options_parse(argc, argv, &fs.opts, &args, errors) < 0)
		return 1;
	if (fs.opts.show_help) {
		sm_options_print_help(prog);
		fuse_cmdline_help();
		fuse_lowlevel_help();
		r = 0;
		goto out_opts;
	}
	if (fs.opts.show_version) {
		printf("slowmedia version %s\n", SLOWMEDIA_VERSION);
		/* Ours first: libfuse forks fusermount3, which writes to stdout itself. */
		fflush(stdout);
		fuse_lowlevel_version();
		r = 0;
		goto out_opts;
	}
	sm_options_check_paths(&fs.opts, errors);
	parse_cmdline(&args, &cmd, errors);
	if (report_errors(prog, errors))
		goto out_opts;
	sm_log_init(prog, cmd.debug);
	warn_no_effect(&fs.opts);
	/* Before mounting: a log file that cannot be opened is said on the terminal. */
	if (!cmd.foreground && sm_log_choose() < 0)
		goto out_opts;

	raise_nofile_limit();
	mallopt(M_ARENA_MAX, MALLOC_ARENAS); /* before any thread exists */
	umask(0); /* the caller's umask is already applied by the kernel */
	fd = lower_open(&fs.opts);
	if (fd < 0) {
		fprintf(stderr, "%s: cannot open %s: %s\n", prog, fs.opts.source,
			g_strerror(-fd));
		goto out_opts;
	}
	/* Only now: the lower mount's nosuid, nodev, noexec, ro bound ours. */
	if (lower_mount_flags(fd, &fs.opts, &args) < 0) {
		fprintf(stderr, "%s: cannot read the mount flags of %s\n", prog, fs.opts.source);
		close(fd);
		goto out_opts;
	}
	if (inode_table_init(&fs, fd) < 0) {
		close(fd);
		goto out_opts;
	}
	fs.creds_switch = geteuid() == 0;
	fs.wq = wq_new(&fs.opts.sched, fd,
		       &(struct wq_hooks){.ctx = &fs, .hold = hold_inode, .release = release_inode},
		       fd_budget() / 4);
	/* Before mounting: a spool that cannot be used, or a replay of an earlier
	 * run's journal that cannot complete, mounts nothing. */
	{
		char why[1024];
		if (wq_spool_open(fs.wq, why, sizeof(why)) < 0) {
			fprintf(stderr, "%s: %s\n", prog, why);
			if (!cmd.foreground)
				sm_err("%s", why); /* and in the log, which a boot-time mount has */
			r = 1;
			goto out_wq;
		}
	}
	fs.req = reqtrack_new((int64_t)fs.opts.req_bound_s * 1000000000ll);
	if (!fs.req)
		sm_warn("cannot track the requests' ages: no thread key");
	if (!fs.opts.has_max_threads)
		cmd.max_threads = MAX_THREADS_DEFAULT;
	if (cmd.max_idle_threads == 0 || cmd.max_idle_threads > MAX_THREADS_LIMIT)
		cmd.max_idle_threads = MAX_IDLE_THREADS;
	r = serve(&fs, &args, &cmd);
out_wq:
	reqtrack_free(fs.req); /* the workers are gone, the control thread too */
	wq_free(fs.wq);
	inode_table_destroy(&fs);
	close(fd);
out_opts:
	read_errors_destroy(&fs);
	free(cmd.mountpoint);
	fuse_opt_free_args(&args);
	sm_options_free(&fs.opts);
	return r;
}
