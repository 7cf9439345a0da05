/*
 * umount.slowmedia DIR [-flnrv] [-t type] [-N ns]: umount(8)'s helper for
 * slowmedia mounts, also installed as umount.fuse.slowmedia (umount(8) runs
 * that one when it takes the type fuse.slowmedia from mountinfo; this one
 * through the helper=slowmedia utab entry mount.slowmedia writes). Both do
 * the same; what there is to undo besides the FUSE mount comes from utab (or,
 * without an entry, from the daemon: a SOURCE below MH_LOWER_BASE).
 *
 * DESIGN. `umount DIR` returns only once the data is on the medium:
 *   1. find the daemon through its control socket; resume it if paused;
 *   2. drain (ctlc_drain: a bar on a terminal, a line every few seconds
 *      otherwise); the daemon lets go of its busy hold right before "ok";
 *   3. umount2(DIR) without MNT_DETACH (so files still open keep it: "target
 *      is busy"); when writes came in between, drain and try again;
 *   4. wait for the daemon to exit (it holds the lower mount), then unmount
 *      the lower mount and its loop device that mount.slowmedia made
 *      (x-slowmedia.lower=, x-slowmedia.loop= in utab), and drop the utab
 *      entry. A FUSE lower (fstype=fuse.fusefat) is written out by its own
 *      daemon after its unmount: that daemon's exit is waited for too, as
 *      long as it shows progress (mh_lower_undo).
 * SIGINT or SIGTERM during the drain leave everything mounted (the daemon
 * flushes on) and exit 8; so does the death of umount(8), our parent (gvfs
 * kills it after 10 s; PR_SET_PDEATHSIG). From the unmount on they are held
 * off, since the remaining steps are short, or bounded by progress.
 *
 * -l detaches at once (the daemon drains on and exits after; the lower and
 * its loop go with it). No MNT_FORCE ever: it would abort the FUSE
 * connection and then, with the daemon's busy hold, fail and leave a dead
 * mount behind; -f instead unmounts even when the daemon cannot be asked.
 *
 * A mount whose daemon is gone (the mount answers ENOTCONN) is unmounted
 * with a warning: nothing is left to drain. One whose daemon lives but
 * cannot be asked (no control socket, not answering) is refused unless -f
 * or -l, and never waited for without a bound. The mount itself is only
 * touched by a forked probe with a timeout (a hung daemon would hang any
 * stat of it in the kernel).
 */
#include "ctl_client.h"
#include "mh_common.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* Drains again when writes came in between the drain and the unmount. */
#define BUSY_RETRIES 3
/* A daemon that just mounted starts its control socket a moment after. */
#define SOCKET_APPEAR_WAIT_MS 3000
#define PROBE_TIMEOUT_MS 3000
#define POLL_MS 50

struct umount_req {
	char *dir;
	bool force, lazy, nomtab, rdonly;
	char *utab_opts; /* NULL: no utab entry */
	char *lowerdir;	 /* ours to unmount after, or NULL */
	char *loop;	 /* the loop device we attached for it, or NULL */
	char *source;	 /* the mount's SOURCE (fsname=: the medium), or NULL */
};

enum probe { PROBE_ALIVE, PROBE_DEAD, PROBE_HUNG };

static void usage(FILE *f)
{
	fprintf(f,
		"usage: %s DIR [-flnrv] [-t type] [-N namespace]\n"
		"  (normally run by umount(8))\n"
		"Drains the slowmedia queue of DIR to the medium, then unmounts it.\n"
		"  -l  detach at once; the daemon drains on and exits after\n"
		"  -f  unmount even when the daemon cannot be asked to drain\n"
		"  -n  leave utab alone    -r  remount read-only if busy    -v  verbose\n"
		"See umount.slowmedia(8).\n",
		mh_prog);
}

static void hold_signals(bool hold)
{
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGHUP);
	sigprocmask(hold ? SIG_BLOCK : SIG_UNBLOCK, &set, NULL);
}

/* DIR without touching the mount itself: its parent resolved, its name kept. */
static char *canon_target(const char *path)
{
	g_autofree char *abs = g_canonicalize_filename(path, NULL);
	g_autofree char *dir = g_path_get_dirname(abs);
	g_autofree char *base = g_path_get_basename(abs);
	char *rd;

	if (!strcmp(abs, "/") || !(rd = realpath(dir, NULL)))
		return g_steal_pointer(&abs);
	abs = g_build_filename(rd, base, NULL);
	free(rd);
	return g_steal_pointer(&abs);
}

/* stat() the mount in a child that is killed if it hangs. */
static enum probe probe_mount(const char *dir)
{
	gint64 deadline = mh_now_ms() + PROBE_TIMEOUT_MS;
	struct stat st;
	int status;
	pid_t pid = fork();

	if (pid < 0)
		return PROBE_ALIVE; /* cannot tell: the cautious answer */
	if (pid == 0) {
		if (stat(dir, &st) == 0)
			_exit(0);
		_exit(errno == ENOTCONN || errno == ECONNABORTED ? 1 : 2);
	}
	while (waitpid(pid, &status, WNOHANG) == 0) {
		if (mh_now_ms() >= deadline) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			return PROBE_HUNG;
		}
		g_usleep(POLL_MS * 1000);
	}
	return WIFEXITED(status) && WEXITSTATUS(status) == 1 ? PROBE_DEAD : PROBE_ALIVE;
}

/* The daemon holds the lower open until it exits. */
static bool wait_daemon_exit(pid_t pid)
{
	gint64 deadline = mh_now_ms() + MH_DAEMON_EXIT_WAIT_MS;

	while (mh_pid_running(pid)) {
		if (mh_now_ms() >= deadline)
			return false;
		g_usleep(POLL_MS * 1000);
	}
	return true;
}

/* ---- after the FUSE mount is gone ---- */

static int finish(const struct umount_req *u, pid_t daemon, bool lazy)
{
	g_autofree char *why = NULL;
	int ex = 0;

	if (!lazy && daemon > 0 && !wait_daemon_exit(daemon)) {
		mh_err("warning: the daemon (pid %d) is still running %d s after the "
		       "unmount; "
		       "its lower mount is detached and goes when it exits",
		       (int)daemon, MH_DAEMON_EXIT_WAIT_MS / 1000);
		lazy = true;
	}
	if (u->lowerdir &&
	    mh_lower_undo(u->lowerdir, u->loop, u->source, lazy, &why) < 0) {
		mh_err("%s", why);
		ex = MH_EX_FAIL;
	}
	g_clear_pointer(&why, g_free);
	if (u->utab_opts && !u->nomtab && mh_utab_remove(u->dir, &why) < 0) {
		mh_err("%s", why);
		ex = ex ? ex : MH_EX_FILEIO;
	}
	return ex;
}

/* umount2 as a user may not: fusermount3 for the user's own FUSE mounts. */
static int user_unmount(const char *dir, bool lazy)
{
	static const char *const paths[] = {"/bin/fusermount3", "/usr/bin/fusermount3",
					    NULL};
	const char *argv[7];
	int n = 0, status;
	pid_t pid;

	argv[n++] = "fusermount3";
	argv[n++] = "-u";
	argv[n++] = "-q";
	if (lazy)
		argv[n++] = "-z";
	argv[n++] = "--";
	argv[n++] = dir;
	argv[n] = NULL;
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		for (int i = 0; paths[i]; i++)
			execv(paths[i], (char *const *)argv);
		_exit(127);
	}
	if (waitpid(pid, &status, 0) < 0)
		return -errno;
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -EBUSY;
}

static int unmount_fuse(const char *dir, int flags)
{
	if (geteuid() != 0)
		return user_unmount(dir, flags & MNT_DETACH);
	return umount2(dir, flags | UMOUNT_NOFOLLOW) < 0 ? -errno : 0;
}

/* ---- the cases ---- */

static int lazy_case(const struct umount_req *u, const struct ctlc_mount *cm)
{
	uint64_t queued = 0;
	uint64_t pid = 0;
	int r = unmount_fuse(u->dir, MNT_DETACH);

	if (r < 0) {
		mh_err("%s: cannot detach: %s", u->dir, g_strerror(-r));
		return MH_EX_FAIL;
	}
	if (cm) {
		ctl_get_u64(&cm->status, "queued_bytes", 0, &queued);
		ctl_get_u64(&cm->status, "pid", 0, &pid);
	}
	if (queued) {
		g_autofree char *size = ctlc_fmt_size(queued);
		mh_err(
		    "%s detached; its daemon (pid %d) goes on writing %s to the medium "
		    "(slowmediactl status shows it) and exits after",
		    u->dir, (int)pid, size);
	} else if (!cm) {
		mh_err(
		    "%s detached; its daemon writes what it has queued to the medium and "
		    "exits after",
		    u->dir);
	}
	return finish(u, 0, true);
}

static int resume(const char *sock)
{
	g_autofree char *why = NULL;

	mh_info("resuming the paused mount");
	if (ctlc_request(sock, "resume\n", &why) < 0) {
		mh_err("cannot resume the paused mount: %s", why ? why : "?");
		return MH_EX_FAIL;
	}
	return 0;
}

/* Drain; 0, or an exit code with the reason said. */
static int drain(const struct umount_req *u, const char *sock,
		 const struct ctl_msg *status)
{
	const char *state = ctl_get(status, "state");
	bool paused = state && !strcmp(state, "paused");
	uint64_t queued = 0;
	FILE *out;
	gint64 t0;
	int r;

	ctl_get_u64(status, "queued_bytes", 0, &queued);
	/* Quiet when nothing is queued: the drain is then only the lower's sync. */
	out = queued ? stderr : NULL;
	for (int tries = 0;; tries++) {
		g_autofree char *why = NULL;

		if (paused && resume(sock))
			return MH_EX_FAIL;
		t0 = mh_now_ms();
		r = ctlc_drain(sock, out, out && isatty(fileno(out)), -1, &why);
		if (r == 0) {
			g_autofree char *size = ctlc_fmt_size(queued);
			mh_info("drained %s in %.1f s", size,
				(mh_now_ms() - t0) / 1000.0);
			return 0;
		}
		if (r == -EINTR) {
			mh_err("interrupted: %s stays mounted, %s; run umount again to "
			       "wait for it",
			       u->dir, why ? why : "the daemon goes on flushing");
			return MH_EX_USER;
		}
		paused = r == -EAGAIN; /* paused by somebody meanwhile */
		if (!paused || tries >= 2) {
			mh_err("cannot drain %s: %s; it stays mounted, nothing is lost",
			       u->dir, why ? why : g_strerror(-r));
			return MH_EX_FAIL;
		}
	}
}

static int busy(const struct umount_req *u, bool drained)
{
	if (u->rdonly && mount(NULL, u->dir, NULL, MS_REMOUNT | MS_RDONLY, NULL) == 0) {
		mh_err("%s is busy: remounted read-only", u->dir);
		return MH_EX_FAIL;
	}
	mh_err("%s: target is busy (%s)", u->dir,
	       drained ? "something still uses it; its queue is on the medium"
		       : "data is still queued, or something uses it");
	return MH_EX_FAIL;
}

static int drain_case(const struct umount_req *u, struct ctlc_mount *cm)
{
	uint64_t pid = 0, queued = 0;
	struct ctlc_mount *now;
	int ex, r = 0;

	ctl_get_u64(&cm->status, "pid", 0, &pid);
	for (int attempt = 0; attempt <= BUSY_RETRIES; attempt++) {
		if ((ex = drain(u, cm->sock_path, &cm->status)))
			return ex;
		hold_signals(true);
		r = unmount_fuse(u->dir, 0);
		if (r != -EBUSY)
			break;
		hold_signals(false);
		/* Written to since the drain (the daemon holds its mount again)? */
		if (ctlc_status(cm->sock_path, CTLC_CONNECT_TIMEOUT_MS, &now, NULL) < 0)
			return busy(u, true);
		ctl_get_u64(&now->status, "queued_bytes", 0, &queued);
		ctl_msg_clear(&cm->status);
		cm->status = now->status;
		memset(&now->status, 0, sizeof(now->status));
		ctlc_mount_free(now);
		if (!queued)
			return busy(u, true);
		mh_info("written to while unmounting: draining again");
	}
	if (r == -EBUSY)
		return busy(u, true);
	if (r < 0) {
		mh_err("%s: %s", u->dir, g_strerror(-r));
		return MH_EX_FAIL;
	}
	return finish(u, (pid_t)pid, false);
}

/* Unmount without a drain: the daemon is gone, or -f. */
static int undrained_unmount(const struct umount_req *u, bool detach_if_busy)
{
	int r;

	hold_signals(true);
	r = unmount_fuse(u->dir, 0);
	if (r == -EBUSY && detach_if_busy)
		r = unmount_fuse(u->dir, MNT_DETACH);
	if (r == -EBUSY)
		return busy(u, false);
	if (r < 0) {
		mh_err("%s: %s", u->dir, g_strerror(-r));
		return MH_EX_FAIL;
	}
	return finish(u, 0, false);
}

/* No control socket answers for the mount: why says what ctlc_find found. */
static int unreachable_case(const struct umount_req *u, enum probe p, int r,
			    const char *why)
{
	g_autofree char *ctl_dir = ctl_dir_for(geteuid());
	g_autofree char *problem = NULL;

	if (r == -EHOSTDOWN)
		p = PROBE_HUNG;
	if (p == PROBE_DEAD) {
		mh_err("warning: the daemon of %s is gone: unmounting it; what it had "
		       "queued and not written is not on the medium (see its log)",
		       u->dir);
		/* Nobody serves it: files still open on it cannot keep it. */
		return undrained_unmount(u, true);
	}
	if (p == PROBE_HUNG)
		problem = g_strdup_printf("its daemon does not answer (%s)", why);
	else
		problem = g_strdup_printf("its daemon runs, but no control socket "
					  "in %s answers for it",
					  ctl_dir);
	if (u->force && p == PROBE_ALIVE) {
		mh_err("warning: %s: %s; unmounting without a drain (-f)", u->dir,
		       problem);
		return undrained_unmount(u, false);
	}
	mh_err("%s: %s; not unmounted, since its queue may not be on the medium "
	       "(umount -l detaches it and the daemon drains on%s)",
	       u->dir, problem,
	       p == PROBE_ALIVE ? "; -f unmounts without the drain" : "");
	return MH_EX_FAIL;
}

/* ctlc_find, waiting a moment for the socket of a daemon that just mounted. */
static int find_daemon(const char *dir, struct ctlc_mount **cm, char **why)
{
	gint64 deadline = mh_now_ms() + SOCKET_APPEAR_WAIT_MS;
	int r;

	for (;;) {
		g_clear_pointer(why, g_free);
		r = ctlc_find_mount(dir, cm, why);
		if (r != -ECONNREFUSED || mh_now_ms() >= deadline ||
		    probe_mount(dir) != PROBE_ALIVE)
			return r;
		g_usleep(POLL_MS * 2 * 1000);
	}
}

static int check_mounted(struct umount_req *u)
{
	g_autofree char *fstype = NULL;

	if (mh_mountinfo_find(u->dir, &u->source, &fstype) < 0) {
		mh_err("%s: not mounted", u->dir);
		return MH_EX_FAIL;
	}
	if (!fstype || strcmp(fstype, "fuse.slowmedia")) {
		mh_err("%s is a %s mount, not a slowmedia one", u->dir,
		       fstype ? fstype : "?");
		return MH_EX_FAIL;
	}
	u->utab_opts = mh_utab_options(u->dir);
	u->lowerdir = mh_opt_value(u->utab_opts, MH_OPT_LOWER);
	u->loop = mh_opt_value(u->utab_opts, MH_OPT_LOOP);
	if (u->lowerdir && !mh_is_our_lower(u->lowerdir)) {
		mh_err("warning: ignoring %s=%s from utab: not below %s", MH_OPT_LOWER,
		       u->lowerdir, MH_LOWER_BASE);
		g_clear_pointer(&u->lowerdir, g_free);
	}
	if (u->lowerdir && geteuid() != 0) {
		mh_err("only root can unmount %s (its medium is mounted privately by "
		       "mount.slowmedia)",
		       u->dir);
		return MH_EX_USAGE;
	}
	return 0;
}

static int do_umount(struct umount_req *u)
{
	g_autofree char *why = NULL;
	struct ctlc_mount *cm = NULL;
	int r, ex;

	enum probe p;

	if ((ex = check_mounted(u)))
		return ex;
	/* ctlc_find resolves the path, which would hang on a hung mount. */
	p = probe_mount(u->dir);
	r = p == PROBE_HUNG ? -EHOSTDOWN : find_daemon(u->dir, &cm, &why);
	/* Without utab (mounted with -n, or utab lost) the daemon still knows. */
	if (r == 0 && !u->lowerdir && ctl_get(&cm->status, "source") &&
	    mh_is_our_lower(ctl_get(&cm->status, "source")))
		u->lowerdir = g_strdup(ctl_get(&cm->status, "source"));
	if (u->lazy) {
		ex = lazy_case(u, r == 0 ? cm : NULL);
	} else if (r == 0) {
		ex = drain_case(u, cm);
	} else if (r == -ECONNREFUSED || r == -EHOSTDOWN) {
		ex = unreachable_case(u, p, r, why ? why : g_strerror(-r));
	} else {
		mh_err("%s", why ? why : g_strerror(-r));
		ex = r == -EACCES ? MH_EX_USAGE : MH_EX_FAIL;
	}
	ctlc_mount_free(cm);
	return ex;
}

int main(int argc, char **argv)
{
	struct umount_req u = {0};
	const char *ns = NULL;
	int c, r;

	mh_prog = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
	/* Whoever asked gave up (gvfs kills umount(8) after 10 s): leave it mounted. */
	prctl(PR_SET_PDEATHSIG, SIGTERM);
	while ((c = getopt(argc, argv, "flnrvht:N:")) != -1) {
		switch (c) {
		case 'f':
			u.force = true;
			break;
		case 'l':
			u.lazy = true;
			break;
		case 'n':
			u.nomtab = true;
			break;
		case 'r':
			u.rdonly = true;
			break;
		case 'v':
			mh_verbose = true;
			break;
		case 't':
			break; /* fuse.slowmedia: we know */
		case 'N':
			ns = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return MH_EX_USAGE;
		}
	}
	if (argc - optind != 1) {
		usage(stderr);
		return MH_EX_USAGE;
	}
	if (ns && (r = mh_enter_ns(ns)) < 0) {
		mh_err("cannot enter the mount namespace %s: %s", ns, g_strerror(-r));
		return MH_EX_SYSERR;
	}
	u.dir = canon_target(argv[optind]);
	return do_umount(&u);
}
