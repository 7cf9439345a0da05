/*
 * What mount.slowmedia and umount.slowmedia share: where the private lower
 * mounts live, how a mount is recorded in utab, and how a lower mount and
 * its loop device are undone. All int functions return 0 or -errno; *why,
 * when set, is one line for the user (g_free it).
 */
#pragma once
#include <glib.h>
#include <stdbool.h>
#include <sys/types.h>

/* mount(8)'s exit codes, which its helpers return too (libmount MNT_EX_*). */
enum {
	MH_EX_OK = 0,
	MH_EX_USAGE = 1,   /* bad invocation, missing option, not root */
	MH_EX_SYSERR = 2,  /* out of memory, cannot fork, cannot make a directory */
	MH_EX_USER = 8,	   /* interrupted */
	MH_EX_FILEIO = 16, /* utab could not be written */
	MH_EX_FAIL = 32,   /* the mount or unmount failed */
};

/* Each private lower mount is a directory of its own below this one, which is
 * a private (MS_PRIVATE) bind of itself, 0700, root's. */
#define MH_LOWER_BASE "/run/slowmedia/lower"
#define MH_HELPER_OPT "helper=slowmedia"
#define MH_OPT_LOWER "x-slowmedia.lower"
#define MH_OPT_LOOP "x-slowmedia.loop"

/* The daemon: SLOWMEDIA_DAEMON (absolute; honoured unless setuid) or the
 * installed one. */
#define MH_DAEMON_ENV "SLOWMEDIA_DAEMON"

/* How long to wait for the daemon to exit once its mount is gone. */
#define MH_DAEMON_EXIT_WAIT_MS 30000
/* How long to retry an unmount of the lower that says EBUSY. */
#define MH_LOWER_BUSY_WAIT_MS 10000
/* How long the kernel may take to detach an autoclear loop device. */
#define MH_LOOP_CLEAR_WAIT_MS 3000
/* How long the FUSE daemon of a FUSE lower (fusefat) may go without visible
 * progress (its I/O counters, its block devices') before we stop waiting for
 * its exit: it writes the medium then, and that takes as long as it takes. */
#define MH_FUSE_STALL_MS 30000

extern const char *mh_prog; /* for messages: "mount.slowmedia" */
extern bool mh_verbose;

void mh_err(const char *fmt, ...) G_GNUC_PRINTF(1, 2);
void mh_info(const char *fmt, ...) G_GNUC_PRINTF(1, 2); /* only with -v */

/* -N NS: enter that mount namespace (a path such as /proc/PID/ns/mnt). */
int mh_enter_ns(const char *path);

/* The source and type of the topmost mount on target (exact path, as in
 * mountinfo); -ENOENT when target is no mount point. */
int mh_mountinfo_find(const char *target, char **source, char **fstype);

/* The device number (st_dev) of the topmost mount on target, from mountinfo. */
int mh_mountinfo_devno(const char *target, dev_t *devno);

/* fstype is a FUSE one: fuse, fuseblk, fuse.TYPE, fuseblk.TYPE. */
bool mh_is_fuse_type(const char *fstype);

/* pid runs (exists and is not a zombie). */
bool mh_pid_running(pid_t pid);

/* path is a directory right below MH_LOWER_BASE (the only ones we unmount). */
bool mh_is_our_lower(const char *path);

/* The backing file of a loop device, from sysfs; NULL when unbound. */
char *mh_loop_backing(const char *dev);
/* The loop devices (/dev/loopN) attached to file now (compared by inode). */
GPtrArray *mh_loops_of(const char *file);

/*
 * Unmount one of our lower mounts and remove its directory; then make sure
 * loop (the loop device we attached for it, or NULL) is detached. lazy:
 * detach at once (for a daemon that still has the lower open; the loop goes
 * with it, autoclear). Waits MH_LOWER_BUSY_WAIT_MS at most for EBUSY to
 * pass, then detaches lazily and says so.
 *
 * A FUSE lower (fstype=fuse.fusefat) is only written out once its daemon
 * has exited: fusefat writes the FAT and closes the medium after its mount
 * is gone, and the kernel writes a block device's cached data back at that
 * last close. So unless lazy, this also waits for the daemon serving the
 * lower to exit (found by its FUSE connection, or, on kernels that do not
 * show that, as the holder of /dev/fuse and of medium, the SOURCE it was
 * mounted from; medium may be NULL), as long as it makes progress.
 */
int mh_lower_undo(const char *lowerdir, const char *loop, const char *medium, bool lazy,
		  char **why);

/* The utab user options recorded for target ("helper=slowmedia,..."), or NULL. */
char *mh_utab_options(const char *target);
/* The value of one option in an option string, or NULL. */
char *mh_opt_value(const char *optstr, const char *name);
/* Record target (mounted from source, fstype) with these userspace options. */
int mh_utab_add(const char *source, const char *target, const char *fstype,
		const char *opts, char **why);
int mh_utab_remove(const char *target, char **why);

/* For -o lists: value with ',' and '\' escaped by '\' (libfuse's rule). */
char *mh_escape_opt(const char *value);

/* Milliseconds of CLOCK_MONOTONIC. */
gint64 mh_now_ms(void);
