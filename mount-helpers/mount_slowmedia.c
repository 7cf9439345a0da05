/*
 * mount.slowmedia SRC DIR [-sfnv] [-o opts] [-t type] [-N ns]: mount(8)'s
 * helper for `mount -t slowmedia` and fstab type slowmedia.
 *
 * DESIGN. SRC is a block device or an image file holding a filesystem of
 * type fstype= (or a directory, overlaid as it is). The helper
 *   1. checks the arguments, and refuses a device that is in use;
 *   2. mounts SRC privately on a directory of its own below MH_LOWER_BASE
 *      (through libmount, which sets an image up on an autoclear loop device
 *      and falls back to read-only for a write-protected medium), nosuid,nodev
 *      unless allow_suid/allow_dev, plus lower= and the VFS flags that matter
 *      there (ro, noexec, atime); MH_LOWER_BASE is a private bind of itself,
 *      so the lower mounts propagate to no other namespace, and it is root's,
 *      0700. A FUSE type (fstype=fuse.fusefat) is mounted by running its
 *      helper (mount.fuse3) ourselves, as libmount would but with only
 *      nosuid,nodev, ro if asked and the lower= options: libmount always puts
 *      "rw" or "ro" first in a helper's options (mnt_optstr_apply_flags),
 *      and fusefat refuses a plain "rw" (it wants "rw+"). The FUSE program
 *      opens SRC itself: no loop device;
 *   3. runs `slowmedia LOWERDIR DIR -o ...` with the remaining options (plus
 *      fsname=SRC, allow_other: a mount made by mount(8) is for every user,
 *      like a kernel filesystem's, the kernel checking the medium's modes),
 *      which mounts, daemonizes and exits 0 once the mount is up;
 *   4. records DIR in utab: helper=slowmedia, so any later unmount of DIR
 *      runs umount.slowmedia, and x-slowmedia.lower= / x-slowmedia.loop=, what
 *      it must undo after the drain.
 * Any failure after step 2 undoes it: nothing is left mounted or attached.
 * SIGINT, SIGTERM and SIGHUP are caught and ignored while it runs (a few
 * seconds at most), so the steps are never left half done.
 */
#include "mh_common.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libmount.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define DAEMON_START_TIMEOUT_MS 60000
#define POLL_MS 20

#ifndef SLOWMEDIA_DAEMON_PATH
#define SLOWMEDIA_DAEMON_PATH "/usr/local/sbin/slowmedia"
#endif

struct mount_req {
	const char *src, *dir;
	bool fake, nomtab;
	char *fstype;
	GString *lower_opts;  /* lower= values and the VFS flags for the lower */
	GString *fuse_opts;   /* the same for a FUSE lower: lower= values and ro */
	GString *daemon_opts; /* the rest, for slowmedia -o */
	bool lower_given;     /* a lower= option */
	bool allow_suid, allow_dev, has_fsname, has_allow_other;
	bool src_is_dir, src_is_file;
};

/* Applied to the lower mount as well as passed to the daemon (not "rw": the
 * default, and fusefat takes a plain rw for a mistake). A FUSE lower gets
 * only "ro" of them: libfuse knows no relatime, strictatime, lazytime... */
static const char *const lower_flags[] = {
    "ro",	  "noexec",   "exec",	  "noatime",	"atime",
    "nodiratime", "diratime", "relatime", "norelatime", "strictatime",
    "lazytime",	  "sync",     "dirsync",  NULL};

/* mount(8)'s own, not the daemon's. */
static bool dropped_opt(const char *o)
{
	return g_str_has_prefix(o, "helper=") || g_str_has_prefix(o, "user=") ||
	       !strcmp(o, "loop") || g_str_has_prefix(o, "loop=") ||
	       g_str_has_prefix(o, "x-") || g_str_has_prefix(o, "X-") ||
	       g_str_has_prefix(o, "comment=");
}

static void append_opt(GString *s, const char *o)
{
	if (s->len)
		g_string_append_c(s, ',');
	g_string_append(s, o);
}

/* Split an option list at commas outside double quotes. */
static GPtrArray *split_opts(const char *s)
{
	GPtrArray *out = g_ptr_array_new_with_free_func(g_free);
	GString *cur = g_string_new(NULL);
	bool quoted = false;

	for (;; s++) {
		if (*s == '"')
			quoted = !quoted;
		if (!*s || (*s == ',' && !quoted)) {
			if (cur->len)
				g_ptr_array_add(out, g_strdup(cur->str));
			g_string_truncate(cur, 0);
			if (!*s)
				break;
			continue;
		}
		g_string_append_c(cur, *s);
	}
	g_string_free(cur, TRUE);
	return out;
}

static char *unquote(const char *v)
{
	size_t n = strlen(v);

	if (n >= 2 && v[0] == '"' && v[n - 1] == '"')
		return g_strndup(v + 1, n - 2);
	return g_strdup(v);
}

/* One option of -o: ours, the lower's, mount(8)'s or the daemon's. The
 * daemon's are checked by the daemon (all problems at once). */
static void take_opt(struct mount_req *m, const char *o)
{
	if (g_str_has_prefix(o, "fstype=")) {
		g_free(m->fstype);
		m->fstype = unquote(o + strlen("fstype="));
		return;
	}
	if (g_str_has_prefix(o, "lower=")) {
		g_autofree char *v = unquote(o + strlen("lower="));
		m->lower_given = true;
		if (*v) {
			append_opt(m->lower_opts, v);
			append_opt(m->fuse_opts, v);
		}
		return;
	}
	if (dropped_opt(o))
		return;
	if (g_strv_contains(lower_flags, o))
		append_opt(m->lower_opts, o);
	if (!strcmp(o, "ro"))
		append_opt(m->fuse_opts, o);
	m->allow_suid |= !strcmp(o, "allow_suid");
	m->allow_dev |= !strcmp(o, "allow_dev");
	m->has_fsname |= g_str_has_prefix(o, "fsname=");
	m->has_allow_other |= !strcmp(o, "allow_other") || !strcmp(o, "allow_root");
	append_opt(m->daemon_opts, o);
}

static void take_opts(struct mount_req *m, const char *list)
{
	g_autoptr(GPtrArray) opts = split_opts(list);

	for (guint i = 0; i < opts->len; i++)
		take_opt(m, opts->pdata[i]);
}

static void usage(FILE *f)
{
	fputs("usage: mount.slowmedia SOURCE DIR [-sfnv] [-o options] [-N namespace]\n"
	      "(run by mount(8): mount -t slowmedia SOURCE DIR -o fstype=TYPE,...)\n"
	      "SOURCE: a block device or an image file (fstype=), or a directory.\n"
	      "  -o fstype=TYPE  its filesystem, mounted privately below " MH_LOWER_BASE
	      "\n"
	      "  -o lower=OPTS   options of that mount (a list: lower=\"a,b\")\n"
	      "  -o ...          any other option is the daemon's (slowmedia -h)\n"
	      "  -f  only check the arguments    -n  do not record the mount in utab\n"
	      "  -v  say what is done            -s  ignored\n"
	      "See mount.slowmedia(8).\n",
	      f);
}

static const char *daemon_path(void)
{
	const char *env = getenv(MH_DAEMON_ENV);

	/* A setuid caller's environment is not ours to trust. */
	if (env && env[0] == '/' && getuid() == geteuid() && getgid() == getegid())
		return env;
	return SLOWMEDIA_DAEMON_PATH;
}

/* ---- checks ---- */

static int check_source(struct mount_req *m)
{
	struct stat st;

	if (stat(m->src, &st) < 0) {
		mh_err("%s: %s", m->src,
		       errno == ENOENT ? "no such device or image file"
				       : g_strerror(errno));
		return MH_EX_FAIL;
	}
	m->src_is_dir = S_ISDIR(st.st_mode);
	m->src_is_file = S_ISREG(st.st_mode);
	if (m->src_is_dir && m->fstype) {
		mh_err("fstype=%s: %s is a directory, not a device or image file",
		       m->fstype, m->src);
		return MH_EX_USAGE;
	}
	if (m->src_is_dir && m->lower_given) {
		mh_err("lower=: %s is a directory, there is no private mount to give "
		       "options to",
		       m->src);
		return MH_EX_USAGE;
	}
	if (m->src_is_dir)
		return 0;
	if (!S_ISBLK(st.st_mode) && !m->src_is_file) {
		mh_err("%s is not a block device, an image file or a directory", m->src);
		return MH_EX_FAIL;
	}
	if (!m->fstype || !*m->fstype) {
		mh_err("%s is %s: say which filesystem it holds with -o fstype=TYPE "
		       "(for example fstype=vfat)",
		       m->src, m->src_is_file ? "an image file" : "a block device");
		return MH_EX_USAGE;
	}
	if (!strcmp(m->fstype, "slowmedia") ||
	    g_str_has_prefix(m->fstype, "fuse.slowmedia")) {
		mh_err("fstype=%s: the lower filesystem cannot be slowmedia itself",
		       m->fstype);
		return MH_EX_USAGE;
	}
	return 0;
}

static int check_dir(const struct mount_req *m)
{
	struct stat st;

	if (stat(m->dir, &st) < 0) {
		mh_err("mount point %s %s", m->dir,
		       errno == ENOENT ? "does not exist" : g_strerror(errno));
		return MH_EX_FAIL;
	}
	if (!S_ISDIR(st.st_mode)) {
		mh_err("mount point %s is not a directory", m->dir);
		return MH_EX_FAIL;
	}
	return 0;
}

/* -EBUSY when dev is mounted (in any namespace) or claimed elsewhere. */
static int probe_exclusive(const char *dev)
{
	int fd = open(dev, O_RDONLY | O_EXCL | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	close(fd);
	return 0;
}

/* A device in use elsewhere would be shared with that mount (same superblock),
 * and writes there would bypass the queue. libmount would even reuse a loop
 * device already attached to an image and mounted. */
static int check_unused(const struct mount_req *m)
{
	g_autoptr(GPtrArray) loops = NULL;

	if (m->src_is_dir)
		return 0;
	if (!m->src_is_file) {
		if (probe_exclusive(m->src) == -EBUSY) {
			mh_err("%s is in use (mounted, or held by another program)",
			       m->src);
			return MH_EX_FAIL;
		}
		return 0;
	}
	loops = mh_loops_of(m->src);
	for (guint i = 0; i < loops->len; i++)
		if (probe_exclusive(loops->pdata[i]) == -EBUSY) {
			mh_err("%s is in use (on %s, which is mounted or held by another "
			       "program)",
			       m->src, (char *)loops->pdata[i]);
			return MH_EX_FAIL;
		}
	return 0;
}

/* ---- the private lower mount ---- */

static int make_dir(const char *path, mode_t mode)
{
	struct stat st;

	if (mkdir(path, mode) < 0 && errno != EEXIST)
		return -errno;
	if (lstat(path, &st) < 0)
		return -errno;
	if (!S_ISDIR(st.st_mode) || st.st_uid != 0 || (st.st_mode & 022))
		return -EPERM; /* somebody else's, or writable by others */
	return 0;
}

/* MH_LOWER_BASE, 0700 and a private mount of its own (made once). */
static int prepare_base(void)
{
	int r = make_dir("/run/slowmedia", 0755);

	if (r == 0)
		r = make_dir(MH_LOWER_BASE, 0700);
	if (r < 0) {
		mh_err("cannot prepare %s: %s", MH_LOWER_BASE, g_strerror(-r));
		return MH_EX_SYSERR;
	}
	if (chmod(MH_LOWER_BASE, 0700) < 0)
		return MH_EX_SYSERR;
	if (mh_mountinfo_find(MH_LOWER_BASE, NULL, NULL) < 0 &&
	    mount(MH_LOWER_BASE, MH_LOWER_BASE, NULL, MS_BIND, NULL) < 0) {
		mh_err("cannot bind %s on itself: %s", MH_LOWER_BASE, g_strerror(errno));
		return MH_EX_SYSERR;
	}
	if (mount(NULL, MH_LOWER_BASE, NULL, MS_PRIVATE, NULL) < 0) {
		mh_err("cannot make %s private: %s", MH_LOWER_BASE, g_strerror(errno));
		return MH_EX_SYSERR;
	}
	return 0;
}

/* A new directory below MH_LOWER_BASE named after the mount point. */
static char *new_lower_dir(const char *dir)
{
	g_autofree char *base = g_path_get_basename(dir);
	g_autofree char *tmpl = NULL;

	for (char *p = base; *p; p++)
		if (!g_ascii_isalnum(*p) && *p != '-' && *p != '_')
			*p = '_';
	tmpl = g_strdup_printf("%s/%.40s.XXXXXX", MH_LOWER_BASE, base);
	if (!mkdtemp(tmpl))
		return NULL;
	return g_steal_pointer(&tmpl);
}

/* Wait for a child that mounts and exits (the daemon, a mount helper). */
static int wait_daemon(pid_t pid, int *status)
{
	gint64 deadline = mh_now_ms() + DAEMON_START_TIMEOUT_MS;

	for (;;) {
		pid_t r = waitpid(pid, status, WNOHANG);
		if (r == pid)
			return 0;
		if (r < 0 && errno != EINTR)
			return -errno;
		if (mh_now_ms() >= deadline)
			return -ETIMEDOUT;
		g_usleep(POLL_MS * 1000);
	}
}

static bool has_opt(const char *list, const char *name)
{
	g_autoptr(GPtrArray) opts = split_opts(list);

	for (guint i = 0; i < opts->len; i++)
		if (!strcmp(opts->pdata[i], name))
			return true;
	return false;
}

/* The helper mount(8) runs for a FUSE type, looked for as libmount does
 * (mnt_context_prepare_helper): /sbin/mount.fuse.fusefat, else the type
 * without its last ".subtype", /sbin/mount.fuse; then in /sbin/fs.d, /sbin/fs. */
static char *fuse_helper(const char *fstype)
{
	static const char *const dirs[] = {"/sbin", "/sbin/fs.d", "/sbin/fs", NULL};

	for (int i = 0; dirs[i]; i++) {
		g_autofree char *path = g_strdup_printf("%s/mount.%s", dirs[i], fstype);
		char *dot = strrchr(path, '.');

		if (access(path, X_OK) == 0)
			return g_steal_pointer(&path);
		if (strchr(fstype, '.') && dot) {
			*dot = '\0';
			if (access(path, X_OK) == 0)
				return g_steal_pointer(&path);
		}
	}
	return NULL;
}

/* Run the FUSE type's helper: HELPER SRC LOWERDIR -o OPTS [-t TYPE], as
 * libmount's exec_helper does, with our options only. Its program (fusefat)
 * mounts, daemonizes, and the helper exits. */
static int mount_lower_fuse(const struct mount_req *m, const char *lowerdir)
{
	g_autofree char *helper = fuse_helper(m->fstype);
	g_autoptr(GString) opts = g_string_new(NULL);
	const char *argv[8];
	sigset_t none;
	int n = 0, status, r;
	pid_t pid;

	if (!helper) {
		mh_err("cannot mount %s (fstype=%s): no /sbin/mount.%s or mount.fuse "
		       "(package fuse3)",
		       m->src, m->fstype, m->fstype);
		return MH_EX_FAIL;
	}
	/* libfuse mounts nosuid,nodev by default: allow_suid/allow_dev say so. */
	append_opt(opts, m->allow_suid ? "suid" : "nosuid");
	append_opt(opts, m->allow_dev ? "dev" : "nodev");
	if (m->fuse_opts->len)
		append_opt(opts, m->fuse_opts->str);
	argv[n++] = helper;
	argv[n++] = m->src;
	argv[n++] = lowerdir;
	argv[n++] = "-o";
	argv[n++] = opts->str;
	if (!g_str_has_suffix(helper, m->fstype)) {
		argv[n++] = "-t";
		argv[n++] = m->fstype;
	}
	argv[n] = NULL;
	mh_info("mounting %s (%s, %s) on %s: %s", m->src, m->fstype, opts->str, lowerdir,
		helper);
	pid = fork();
	if (pid < 0) {
		mh_err("cannot fork: %s", g_strerror(errno));
		return MH_EX_SYSERR;
	}
	if (pid == 0) {
		int null = open("/dev/null", O_RDONLY);

		/* Our stdout is mount(8)'s: what the program says goes to stderr. */
		if (null >= 0 && dup2(null, STDIN_FILENO) >= 0 && null > STDERR_FILENO)
			close(null);
		dup2(STDERR_FILENO, STDOUT_FILENO);
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		signal(SIGINT, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		signal(SIGHUP, SIG_DFL);
		setpgid(0, 0);
		execv(helper, (char *const *)argv);
		fprintf(stderr, "%s: cannot run %s: %s\n", mh_prog, helper,
			g_strerror(errno));
		_exit(127);
	}
	r = wait_daemon(pid, &status);
	if (r == -ETIMEDOUT) {
		mh_err("%s did not mount %s within %d s: stopped", helper, m->src,
		       DAEMON_START_TIMEOUT_MS / 1000);
		kill(-pid, SIGTERM);
		kill(pid, SIGTERM);
		waitpid(pid, &status, 0);
	} else if (r < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		mh_err("cannot mount %s (fstype=%s, options %s): %s failed (%s %d)%s",
		       m->src, m->fstype, opts->str, helper,
		       r == 0 && WIFSIGNALED(status) ? "signal" : "exit status",
		       r < 0		     ? -1
		       : WIFSIGNALED(status) ? WTERMSIG(status)
					     : WEXITSTATUS(status),
		       !strcmp(m->fstype, "fuse.fusefat") && !has_opt(opts->str, "rw+") &&
			       !has_opt(opts->str, "ro")
			   ? "; fusefat mounts read-write only with lower=rw+"
			   : "");
	} else if (mh_mountinfo_find(lowerdir, NULL, NULL) < 0) {
		mh_err("cannot mount %s (fstype=%s): %s exited 0, but nothing is "
		       "mounted",
		       m->src, m->fstype, helper);
	} else {
		return 0;
	}
	/* Whatever the program mounted after all goes again. */
	if (mh_mountinfo_find(lowerdir, NULL, NULL) == 0)
		umount2(lowerdir, MNT_DETACH | UMOUNT_NOFOLLOW);
	return MH_EX_FAIL;
}

static int mount_lower(const struct mount_req *m, const char *lowerdir)
{
	struct libmnt_context *cxt;
	g_autoptr(GString) opts = g_string_new(NULL);
	char buf[BUFSIZ] = "";
	int rc, ex;

	if (mh_is_fuse_type(m->fstype))
		return mount_lower_fuse(m, lowerdir);
	if (!(cxt = mnt_new_context()))
		return MH_EX_SYSERR;
	if (!m->allow_suid)
		append_opt(opts, "nosuid");
	if (!m->allow_dev)
		append_opt(opts, "nodev");
	if (m->src_is_file)
		append_opt(opts, "loop");
	if (m->lower_opts->len)
		append_opt(opts, m->lower_opts->str);
	mnt_context_set_optsmode(cxt, MNT_OMODE_NOTAB);
	mnt_context_disable_mtab(cxt, TRUE); /* only the slowmedia mount goes to utab */
	mnt_context_enable_verbose(cxt, mh_verbose);
	mnt_context_set_source(cxt, m->src);
	mnt_context_set_target(cxt, lowerdir);
	mnt_context_set_fstype(cxt, m->fstype);
	mnt_context_set_options(cxt, opts->str);
	mh_info("mounting %s (%s, %s) on %s", m->src, m->fstype, opts->str, lowerdir);
	rc = mnt_context_mount(cxt);
	ex = mnt_context_get_excode(cxt, rc, buf, sizeof(buf));
	if (ex != MNT_EX_SUCCESS)
		mh_err("cannot mount %s (fstype=%s): %s", m->src, m->fstype,
		       *buf ? buf : "mount failed");
	else if (*buf)
		mh_err("%s", buf); /* e.g. write-protected, mounted read-only */
	mnt_free_context(cxt);
	if (ex == MNT_EX_SUCCESS)
		return 0;
	/* A helper's own status (mount.fuse's) is not one of mount(8)'s. */
	return ex == MH_EX_USAGE || ex == MH_EX_SYSERR || ex == MH_EX_USER ? ex
									   : MH_EX_FAIL;
}

/* ---- the daemon ---- */

static int run_daemon(const struct mount_req *m, const char *lowerdir)
{
	const char *daemon = daemon_path();
	const char *argv[] = {daemon, lowerdir, m->dir, "-o", m->daemon_opts->str, NULL};
	sigset_t none;
	int status, r;
	pid_t pid;

	mh_info("running %s %s %s -o %s", daemon, lowerdir, m->dir, m->daemon_opts->str);
	pid = fork();
	if (pid < 0) {
		mh_err("cannot fork: %s", g_strerror(errno));
		return MH_EX_SYSERR;
	}
	if (pid == 0) {
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL); /* exec keeps the mask */
		signal(SIGINT, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		signal(SIGHUP, SIG_DFL);
		setpgid(0, 0);
		execv(daemon, (char *const *)argv);
		fprintf(stderr, "%s: cannot run %s: %s\n", mh_prog, daemon,
			g_strerror(errno));
		_exit(127);
	}
	r = wait_daemon(pid, &status);
	if (r == -ETIMEDOUT) {
		mh_err("%s did not mount %s within %d s: stopped", daemon, m->dir,
		       DAEMON_START_TIMEOUT_MS / 1000);
		kill(-pid, SIGTERM);
		kill(pid, SIGTERM);
		waitpid(pid, &status, 0);
		return MH_EX_FAIL;
	}
	if (r < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		if (r == 0 && WIFSIGNALED(status))
			mh_err(
			    "the slowmedia daemon did not mount %s (killed by signal %d)",
			    m->dir, WTERMSIG(status));
		else
			mh_err("the slowmedia daemon did not mount %s (exit status %d)",
			       m->dir, r < 0 ? -1 : WEXITSTATUS(status));
		return MH_EX_FAIL;
	}
	return 0;
}

static bool slowmedia_mounted(const char *dir)
{
	g_autofree char *fstype = NULL;

	return mh_mountinfo_find(dir, NULL, &fstype) == 0 && fstype &&
	       !strcmp(fstype, "fuse.slowmedia");
}

/* ---- steps ---- */

static void add_daemon_defaults(struct mount_req *m)
{
	if (!m->has_fsname) {
		g_autofree char *esc = mh_escape_opt(m->src);
		g_autofree char *o = g_strdup_printf("fsname=%s", esc);
		append_opt(m->daemon_opts, o);
	}
	if (!m->has_allow_other)
		append_opt(m->daemon_opts, "allow_other");
}

static int record(const struct mount_req *m, const char *lowerdir, const char *loop)
{
	g_autoptr(GString) opts = g_string_new(MH_HELPER_OPT);
	g_autofree char *why = NULL;

	if (lowerdir)
		g_string_append_printf(opts, ",%s=%s", MH_OPT_LOWER, lowerdir);
	if (loop)
		g_string_append_printf(opts, ",%s=%s", MH_OPT_LOOP, loop);
	if (mh_utab_add(m->src, m->dir, "fuse.slowmedia", opts->str, &why) < 0) {
		mh_err("%s is mounted, but %s: unmount it with umount.slowmedia %s "
		       "(a plain umount may not run it)",
		       m->dir, why, m->dir);
		return MH_EX_FILEIO;
	}
	mh_info("recorded in utab: %s", opts->str);
	return 0;
}

/* The lower mount's loop device if libmount attached it for us (it reuses a
 * loop device somebody attached to the image before: that one is not ours). */
static char *lower_loop(const struct mount_req *m, const char *lowerdir,
			GPtrArray *before)
{
	g_autofree char *source = NULL;

	if (!m->src_is_file || mh_is_fuse_type(m->fstype) ||
	    mh_mountinfo_find(lowerdir, &source, NULL) < 0 || !source ||
	    !g_str_has_prefix(source, "/dev/loop"))
		return NULL;
	for (guint i = 0; before && i < before->len; i++)
		if (!strcmp(before->pdata[i], source)) {
			mh_info("%s was attached to %s before: it stays", source, m->src);
			return NULL;
		}
	return g_steal_pointer(&source);
}

static void undo_lower(const struct mount_req *m, const char *lowerdir, const char *loop)
{
	g_autofree char *why = NULL;

	if (mh_lower_undo(lowerdir, loop, m->src, false, &why) < 0)
		mh_err("%s", why);
}

static int do_mount(struct mount_req *m)
{
	g_autofree char *lowerdir = NULL, *loop = NULL;
	g_autoptr(GPtrArray) loops_before = NULL;
	int ex;

	add_daemon_defaults(m);
	if (m->src_is_dir)
		goto overlay;
	ex = prepare_base();
	if (ex)
		return ex;
	lowerdir = new_lower_dir(m->dir);
	if (!lowerdir) {
		mh_err("cannot make a directory in %s: %s", MH_LOWER_BASE,
		       g_strerror(errno));
		return MH_EX_SYSERR;
	}
	loops_before = m->src_is_file ? mh_loops_of(m->src) : NULL;
	ex = mount_lower(m, lowerdir);
	if (ex) {
		rmdir(lowerdir);
		return ex;
	}
	loop = lower_loop(m, lowerdir, loops_before);
overlay:
	ex = run_daemon(m, lowerdir ? lowerdir : m->src);
	if (!ex && !slowmedia_mounted(m->dir)) {
		mh_err("the slowmedia daemon exited but %s is not mounted", m->dir);
		ex = MH_EX_FAIL;
	}
	if (ex) {
		if (lowerdir)
			undo_lower(m, lowerdir, loop);
		mh_err("nothing mounted");
		return ex;
	}
	return m->nomtab ? 0 : record(m, lowerdir, loop);
}

static void note_signal(int sig)
{
	(void)sig; /* the mount goes on: a few seconds, never left half done */
}

/* Caught, not blocked or ignored: what we exec (the daemon, mount.fuse) must
 * start with the default dispositions and an empty mask. */
static void catch_signals(void)
{
	struct sigaction sa = {.sa_handler = note_signal, .sa_flags = SA_RESTART};

	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
	    {"help", no_argument, NULL, 'h'},
	    {"options", required_argument, NULL, 'o'},
	    {0}};
	struct mount_req m = {.lower_opts = g_string_new(NULL),
			      .fuse_opts = g_string_new(NULL),
			      .daemon_opts = g_string_new(NULL)};
	const char *ns = NULL;
	char *real;
	int c, ex, r;

	mh_prog = "mount.slowmedia";
	while ((c = getopt_long(argc, argv, "sfnvrwho:t:N:", longopts, NULL)) != -1) {
		switch (c) {
		case 'f':
			m.fake = true;
			break;
		case 'n':
			m.nomtab = true;
			break;
		case 'v':
			mh_verbose = true;
			break;
		case 'r':
			take_opts(&m, "ro");
			break;
		case 'w':
			take_opts(&m, "rw");
			break;
		case 'o':
			take_opts(&m, optarg);
			break;
		case 'N':
			ns = optarg;
			break;
		case 's':
		case 't':
			break; /* sloppy: the daemon is strict anyway */
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return MH_EX_USAGE;
		}
	}
	if (argc - optind != 2) {
		usage(stderr);
		return MH_EX_USAGE;
	}
	m.src = argv[optind];
	m.dir = argv[optind + 1];
	if (geteuid() != 0) {
		mh_err("only root can mount type slowmedia (for a user's mount use "
		       "x-systemd.automount in fstab, or type fuse.slowmedia on a "
		       "directory)");
		return MH_EX_USAGE;
	}
	catch_signals();
	if (ns && (r = mh_enter_ns(ns)) < 0) {
		mh_err("cannot enter the mount namespace %s: %s", ns, g_strerror(-r));
		return MH_EX_SYSERR;
	}
	if ((ex = check_dir(&m)) || (ex = check_source(&m)) || (ex = check_unused(&m)))
		return ex;
	/* utab and the daemon want absolute paths (mount(8) gives them so). */
	if ((real = realpath(m.dir, NULL)))
		m.dir = real;
	if ((real = realpath(m.src, NULL)))
		m.src = real;
	if (m.fake)
		return 0;
	return do_mount(&m);
}
