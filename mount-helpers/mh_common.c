/*
 * Shared by mount.slowmedia and umount.slowmedia (mh_common.h).
 *
 * DESIGN. Nothing here touches the slowmedia mount itself (no stat, no
 * realpath of its root): a daemon that stopped answering would hang the
 * caller in the kernel. Mount points are looked up in mountinfo by their
 * exact path. Only directories right below MH_LOWER_BASE are ever unmounted
 * as a lower, and a loop device is detached only while its backing file is
 * still the one it had when the lower was unmounted (its number may be
 * reused by somebody else meanwhile).
 *
 * A FUSE lower (fstype=fuse.fusefat) has written the medium only once its
 * daemon has exited, so after unmounting one we wait for that process. It
 * is found before the unmount: the process with /dev/fuse open on the
 * lower's FUSE connection (recent kernels say which in fdinfo, 6.18 here:
 * the fuse_connection line, the kernel's number of the mount's st_dev), or,
 * on kernels that do not say, the one with /dev/fuse and the medium open. Only
 * the link names of their fds are read (a stat of a file on a hung FUSE
 * mount would hang), and stat() only of /dev nodes.
 */
#include "mh_common.h"

#include <errno.h>
#include <fcntl.h>
#include <libmount.h>
#include <linux/loop.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#define POLL_MS 50
/* While a FUSE lower's daemon writes the medium out: a line after this long,
 * then one every FUSE_NOTE_EVERY_MS. */
#define FUSE_NOTE_FIRST_MS 2000
#define FUSE_NOTE_EVERY_MS 5000
#define FUSE_DEVICE "/dev/fuse"

const char *mh_prog = "slowmedia-helper";
bool mh_verbose;

static void vsay(const char *fmt, va_list ap)
{
	g_autofree char *msg = g_strdup_vprintf(fmt, ap);

	fprintf(stderr, "%s: %s\n", mh_prog, msg);
}

void mh_err(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsay(fmt, ap);
	va_end(ap);
}

void mh_info(const char *fmt, ...)
{
	va_list ap;

	if (!mh_verbose)
		return;
	va_start(ap, fmt);
	vsay(fmt, ap);
	va_end(ap);
}

gint64 mh_now_ms(void)
{
	return g_get_monotonic_time() / 1000;
}

static void sleep_ms(int ms)
{
	g_usleep((gulong)ms * 1000);
}

int mh_enter_ns(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), r = 0;

	if (fd < 0)
		return -errno;
	if (setns(fd, CLONE_NEWNS) < 0)
		r = -errno;
	close(fd);
	return r;
}

int mh_mountinfo_find(const char *target, char **source, char **fstype)
{
	struct libmnt_table *tb = mnt_new_table_from_file("/proc/self/mountinfo");
	struct libmnt_fs *fs;

	if (!tb)
		return -errno ? -errno : -ENOMEM;
	/* No cache set: the path is compared as it is, nothing is stat()ed. */
	fs = mnt_table_find_target(tb, target, MNT_ITER_BACKWARD);
	if (fs && source)
		*source = g_strdup(mnt_fs_get_source(fs));
	if (fs && fstype)
		*fstype = g_strdup(mnt_fs_get_fstype(fs));
	mnt_unref_table(tb);
	return fs ? 0 : -ENOENT;
}

int mh_mountinfo_devno(const char *target, dev_t *devno)
{
	struct libmnt_table *tb = mnt_new_table_from_file("/proc/self/mountinfo");
	struct libmnt_fs *fs;

	if (!tb)
		return -errno ? -errno : -ENOMEM;
	fs = mnt_table_find_target(tb, target, MNT_ITER_BACKWARD);
	if (fs)
		*devno = mnt_fs_get_devno(fs);
	mnt_unref_table(tb);
	return fs ? 0 : -ENOENT;
}

bool mh_is_fuse_type(const char *fstype)
{
	return fstype && (!strcmp(fstype, "fuse") || !strcmp(fstype, "fuseblk") ||
			  g_str_has_prefix(fstype, "fuse.") ||
			  g_str_has_prefix(fstype, "fuseblk."));
}

bool mh_pid_running(pid_t pid)
{
	g_autofree char *path = g_strdup_printf("/proc/%d/stat", (int)pid);
	g_autofree char *text = NULL;
	const char *p;

	if (pid <= 0 || !g_file_get_contents(path, &text, NULL, NULL))
		return false;
	p = strrchr(text, ')'); /* the state follows the command name */
	return p && p[1] == ' ' && p[2] != 'Z' && p[2] != 'X';
}

bool mh_is_our_lower(const char *path)
{
	const char *rest;

	if (!g_str_has_prefix(path, MH_LOWER_BASE "/"))
		return false;
	rest = path + strlen(MH_LOWER_BASE "/");
	return *rest && !strchr(rest, '/') && strcmp(rest, ".") && strcmp(rest, "..");
}

char *mh_loop_backing(const char *dev)
{
	g_autofree char *base = g_path_get_basename(dev);
	g_autofree char *path = g_strdup_printf("/sys/block/%s/loop/backing_file", base);
	char *text = NULL;

	if (!g_str_has_prefix(dev, "/dev/loop") ||
	    !g_file_get_contents(path, &text, NULL, NULL))
		return NULL;
	g_strchomp(text);
	if (!*text) {
		g_free(text);
		return NULL;
	}
	return text;
}

/* Autoclear detaches the loop once its last user is gone; a loop that was not
 * set up that way (or is still held) is asked to detach (LOOP_CLR_FD turns
 * into autoclear when somebody still has it open). */
static void loop_release(const char *dev, const char *backing)
{
	gint64 deadline = mh_now_ms() + MH_LOOP_CLEAR_WAIT_MS;
	char *now;
	int fd;

	for (;;) {
		now = mh_loop_backing(dev);
		if (!now || strcmp(now, backing)) {
			g_free(now);
			mh_info("%s detached", dev);
			return;
		}
		g_free(now);
		if (mh_now_ms() >= deadline)
			break;
		sleep_ms(POLL_MS);
	}
	fd = open(dev, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || ioctl(fd, LOOP_CLR_FD, 0) < 0)
		mh_err("warning: %s (on %s) is still attached: %s", dev, backing,
		       g_strerror(errno));
	else
		mh_info("%s detached (LOOP_CLR_FD)", dev);
	if (fd >= 0)
		close(fd);
}

static int umount_waiting(const char *dir, char **why)
{
	gint64 deadline = mh_now_ms() + MH_LOWER_BUSY_WAIT_MS;

	while (umount2(dir, UMOUNT_NOFOLLOW) < 0) {
		int e = errno;
		if (e != EBUSY) {
			*why = g_strdup_printf("cannot unmount the lower mount %s: %s",
					       dir, g_strerror(e));
			return -e;
		}
		if (mh_now_ms() >= deadline) {
			mh_err("warning: the lower mount %s is still busy after %d s: "
			       "detaching it (the medium is released when its last user "
			       "lets go)",
			       dir, MH_LOWER_BUSY_WAIT_MS / 1000);
			if (umount2(dir, MNT_DETACH | UMOUNT_NOFOLLOW) < 0)
				return -errno;
			return 1;
		}
		sleep_ms(POLL_MS);
	}
	return 0;
}

/* ---- the daemon of a FUSE lower ---- */

/* What an fd of a process is open on (the link's text), or NULL. */
static char *fd_target(const char *pid, const char *fd)
{
	g_autofree char *link = g_strdup_printf("/proc/%s/fd/%s", pid, fd);

	return g_file_read_link(link, NULL);
}

/* The fuse_connection of an fd on /dev/fuse, or -1 when fdinfo does not say
 * (older kernels). */
static long fuse_fd_connection(const char *pid, const char *fd)
{
	g_autofree char *path = g_strdup_printf("/proc/%s/fdinfo/%s", pid, fd);
	g_autofree char *text = NULL;
	const char *p;

	if (!g_file_get_contents(path, &text, NULL, NULL) ||
	    !(p = strstr(text, "\nfuse_connection:")))
		return -1;
	return strtol(p + strlen("\nfuse_connection:"), NULL, 10);
}

/* Adds the block devices pid has open to devs (their progress is the
 * daemon's while it writes them at its exit). */
static void add_block_devs(const char *pid, GArray *devs)
{
	g_autofree char *fddir = g_strdup_printf("/proc/%s/fd", pid);
	GDir *d = g_dir_open(fddir, 0, NULL);
	const char *fd;
	struct stat st;

	if (!d)
		return;
	while ((fd = g_dir_read_name(d))) {
		g_autofree char *t = fd_target(pid, fd);
		bool seen = false;

		/* Only /dev nodes are stat()ed: nothing there hangs. */
		if (!t || !g_str_has_prefix(t, "/dev/") || stat(t, &st) < 0 ||
		    !S_ISBLK(st.st_mode))
			continue;
		for (guint i = 0; i < devs->len; i++)
			seen |= g_array_index(devs, dev_t, i) == st.st_rdev;
		if (!seen)
			g_array_append_val(devs, st.st_rdev);
	}
	g_dir_close(d);
}

/* The processes serving the FUSE mount whose st_dev is conn (pids), and the
 * block devices they hold (devs). */
static void find_fuse_daemons(dev_t conn, const char *medium, GArray *pids, GArray *devs)
{
	/* The kernel's encoding of a dev_t (MKDEV), as fdinfo prints it. */
	unsigned long want = ((unsigned long)major(conn) << 20) | minor(conn);
	GDir *proc = g_dir_open("/proc", 0, NULL);
	const char *name;

	if (!proc)
		return;
	while ((name = g_dir_read_name(proc))) {
		g_autofree char *fddir = NULL;
		bool match = false, fuse_unsaid = false, has_medium = false;
		const char *fd;
		pid_t pid;
		GDir *fds;

		if (!g_ascii_isdigit(name[0]) || (pid = atoi(name)) == getpid())
			continue;
		fddir = g_strdup_printf("/proc/%s/fd", name);
		if (!(fds = g_dir_open(fddir, 0, NULL)))
			continue;
		while ((fd = g_dir_read_name(fds))) {
			g_autofree char *t = fd_target(name, fd);
			long c;

			if (!t)
				continue;
			if (!strcmp(t, FUSE_DEVICE)) {
				c = fuse_fd_connection(name, fd);
				fuse_unsaid |= c < 0;
				match |= c >= 0 && (unsigned long)c == want;
			} else if (medium && !strcmp(t, medium)) {
				has_medium = true;
			}
		}
		g_dir_close(fds);
		if (match || (fuse_unsaid && has_medium)) {
			g_array_append_val(pids, pid);
			add_block_devs(name, devs);
		}
	}
	g_dir_close(proc);
}

/* What changes while the daemons work: their I/O counters and their block
 * devices' (in flight, sectors, busy time). */
static char *progress_mark(GArray *pids, GArray *devs)
{
	GString *s = g_string_new(NULL);

	for (guint i = 0; i < pids->len; i++) {
		g_autofree char *path =
		    g_strdup_printf("/proc/%d/io", (int)g_array_index(pids, pid_t, i));
		g_autofree char *text = NULL;

		if (g_file_get_contents(path, &text, NULL, NULL))
			g_string_append(s, text);
	}
	for (guint i = 0; i < devs->len; i++) {
		dev_t d = g_array_index(devs, dev_t, i);
		g_autofree char *path =
		    g_strdup_printf("/sys/dev/block/%u:%u/stat", major(d), minor(d));
		g_autofree char *text = NULL;

		if (g_file_get_contents(path, &text, NULL, NULL))
			g_string_append(s, text);
	}
	return g_string_free(s, FALSE);
}

static char *pid_comm(pid_t pid)
{
	g_autofree char *path = g_strdup_printf("/proc/%d/comm", (int)pid);
	char *text = NULL;

	if (!g_file_get_contents(path, &text, NULL, NULL))
		return g_strdup("?");
	return g_strchomp(text);
}

/* Waits for the daemons to exit as long as they make progress. */
static void wait_fuse_daemons(GArray *pids, GArray *devs)
{
	gint64 start = mh_now_ms(), moved = start, note = start + FUSE_NOTE_FIRST_MS;
	g_autofree char *mark = progress_mark(pids, devs);

	for (;;) {
		g_autofree char *now_mark = NULL, *comm = NULL;
		pid_t alive = 0;
		gint64 now;

		for (guint i = 0; i < pids->len && !alive; i++)
			if (mh_pid_running(g_array_index(pids, pid_t, i)))
				alive = g_array_index(pids, pid_t, i);
		now = mh_now_ms();
		if (!alive) {
			mh_info("the FUSE daemon of the medium exited after %.1f s",
				(now - start) / 1000.0);
			return;
		}
		comm = pid_comm(alive);
		if (now - moved >= MH_FUSE_STALL_MS) {
			mh_err("warning: %s (pid %d), the FUSE daemon of the medium, "
			       "still runs and has shown no progress for %d s: not "
			       "waiting for it any more; the medium is completely "
			       "written only once it exits",
			       comm, (int)alive, MH_FUSE_STALL_MS / 1000);
			return;
		}
		if (now >= note) {
			mh_err("%s (pid %d) is writing the medium out: waiting for it "
			       "to exit (%.0f s)",
			       comm, (int)alive, (now - start) / 1000.0);
			note = now + FUSE_NOTE_EVERY_MS;
		}
		sleep_ms(POLL_MS);
		now_mark = progress_mark(pids, devs);
		if (strcmp(now_mark, mark)) {
			g_free(mark);
			mark = g_steal_pointer(&now_mark);
			moved = mh_now_ms();
		}
	}
}

GPtrArray *mh_loops_of(const char *file)
{
	GPtrArray *out = g_ptr_array_new_with_free_func(g_free);
	struct loop_info64 info;
	const char *name;
	struct stat st;
	GDir *d;

	if (stat(file, &st) < 0 || !(d = g_dir_open("/sys/block", 0, NULL)))
		return out;
	while ((name = g_dir_read_name(d))) {
		g_autofree char *dev = g_strdup_printf("/dev/%s", name);
		g_autofree char *backing = mh_loop_backing(dev);
		int fd;

		if (!backing || (fd = open(dev, O_RDONLY | O_CLOEXEC)) < 0)
			continue;
		/* lo_device is encoded as st_dev is (huge_encode_dev). */
		if (ioctl(fd, LOOP_GET_STATUS64, &info) == 0 &&
		    info.lo_inode == st.st_ino && info.lo_device == st.st_dev)
			g_ptr_array_add(out, g_steal_pointer(&dev));
		close(fd);
	}
	g_dir_close(d);
	return out;
}

int mh_lower_undo(const char *lowerdir, const char *loop, const char *medium, bool lazy,
		  char **why)
{
	g_autofree char *source = NULL, *backing = NULL, *fstype = NULL;
	g_autoptr(GArray) pids = g_array_new(FALSE, FALSE, sizeof(pid_t));
	g_autoptr(GArray) devs = g_array_new(FALSE, FALSE, sizeof(dev_t));
	dev_t conn;
	int r = 0;

	if (!mh_is_our_lower(lowerdir)) {
		*why = g_strdup_printf("%s is not a lower mount of mount.slowmedia",
				       lowerdir);
		return -EINVAL;
	}
	backing = loop ? mh_loop_backing(loop) : NULL;
	if (mh_mountinfo_find(lowerdir, &source, &fstype) == 0) {
		/* Lazily detached, the daemon sees the end only when the last user
		 * lets go: nothing to wait for now. */
		if (!lazy && mh_is_fuse_type(fstype) &&
		    mh_mountinfo_devno(lowerdir, &conn) == 0) {
			find_fuse_daemons(conn, medium, pids, devs);
			for (guint i = 0; i < pids->len; i++)
				mh_info("%s (%s) is served by pid %d", lowerdir, fstype,
					(int)g_array_index(pids, pid_t, i));
		}
		if (lazy)
			r = umount2(lowerdir, MNT_DETACH | UMOUNT_NOFOLLOW) < 0 ? -errno
										: 1;
		else
			r = umount_waiting(lowerdir, why);
		if (r < 0) {
			if (!*why)
				*why = g_strdup_printf(
				    "cannot detach the lower mount %s: %s", lowerdir,
				    g_strerror(-r));
			return r;
		}
		mh_info("lower mount %s (%s) %s", lowerdir, source ? source : "?",
			r == 1 ? "detached" : "unmounted");
	}
	if (rmdir(lowerdir) < 0 && errno != ENOENT)
		mh_err("warning: cannot remove %s: %s", lowerdir, g_strerror(errno));
	if (r == 0 && pids->len)
		wait_fuse_daemons(pids, devs);
	/* Detached lazily, the loop goes when the filesystem does (autoclear). */
	if (backing && r == 0)
		loop_release(loop, backing);
	return 0;
}

char *mh_utab_options(const char *target)
{
	struct libmnt_table *tb = mnt_new_table();
	struct libmnt_fs *fs;
	char *opts = NULL;

	/* mountinfo with utab's user options merged, as umount(8) sees it. */
	if (tb && mnt_table_parse_mtab(tb, NULL) == 0) {
		fs = mnt_table_find_target(tb, target, MNT_ITER_BACKWARD);
		if (fs && mnt_fs_get_user_options(fs))
			opts = g_strdup(mnt_fs_get_user_options(fs));
	}
	mnt_unref_table(tb);
	return opts;
}

char *mh_opt_value(const char *optstr, const char *name)
{
	char *value = NULL;
	size_t len = 0;

	if (!optstr || mnt_optstr_get_option(optstr, name, &value, &len) != 0 || !value)
		return NULL;
	return g_strndup(value, len);
}

/* Write the prepared update under utab's lock. */
static int update_locked(struct libmnt_update *upd, char **why)
{
	struct libmnt_lock *lock;
	int r;

	lock = mnt_new_lock(mnt_update_get_filename(upd), 0);
	if (lock)
		mnt_lock_block_signals(lock, TRUE);
	r = mnt_update_table(upd, lock);
	mnt_free_lock(lock);
	if (r < 0)
		*why = g_strdup_printf("cannot update %s: %s",
				       mnt_update_get_filename(upd), g_strerror(-r));
	return r;
}

int mh_utab_add(const char *source, const char *target, const char *fstype,
		const char *opts, char **why)
{
	struct libmnt_update *upd = mnt_new_update();
	struct libmnt_fs *fs = mnt_new_fs();
	int r = -ENOMEM;

	if (!upd || !fs)
		goto out;
	mnt_fs_set_source(fs, source);
	mnt_fs_set_target(fs, target);
	mnt_fs_set_fstype(fs, fstype);
	mnt_fs_set_options(fs, opts);
	r = mnt_update_set_fs(upd, 0, NULL, fs);
	if (r == 0)
		r = update_locked(upd, why);
	else if (r < 0)
		*why =
		    g_strdup_printf("cannot prepare the utab entry: %s", g_strerror(-r));
	else
		r = 0; /* nothing to record */
out:
	if (r == -ENOMEM && !*why)
		*why = g_strdup(g_strerror(ENOMEM));
	mnt_unref_fs(fs);
	mnt_free_update(upd);
	return r;
}

int mh_utab_remove(const char *target, char **why)
{
	struct libmnt_update *upd = mnt_new_update();
	int r;

	if (!upd) {
		*why = g_strdup(g_strerror(ENOMEM));
		return -ENOMEM;
	}
	r = mnt_update_set_fs(upd, 0, target, NULL);
	if (r == 0)
		r = update_locked(upd, why);
	else if (r < 0)
		*why =
		    g_strdup_printf("cannot prepare the utab update: %s", g_strerror(-r));
	else
		r = 0;
	mnt_free_update(upd);
	return r;
}

char *mh_escape_opt(const char *value)
{
	GString *s = g_string_sized_new(strlen(value) + 8);

	for (; *value; value++) {
		if (*value == ',' || *value == '\\')
			g_string_append_c(s, '\\');
		g_string_append_c(s, *value);
	}
	return g_string_free(s, FALSE);
}
