/*
 * Opening the lower filesystem before mounting over anything: SOURCE may be the
 * mountpoint itself (overlay in place), and with fstype= SOURCE is a block
 * device that is mounted privately and detached at once, so only our fd keeps
 * it alive.
 *
 * That private mount cannot be made exclusive: a second mount of the same
 * device with the same filesystem type shares our superblock (the kernel finds
 * it by device number and never claims the device again), and the only claim
 * a process can hold, an O_EXCL open, would make our own mount fail. What does
 * hold: we refuse a device that is already in use (an O_EXCL probe fails for a
 * device mounted in any namespace, detached mounts included, or claimed by md,
 * LVM or another slowmedia), and while we hold it, O_EXCL opens
 * and mounts with another filesystem type fail with EBUSY.
 *
 * The overlay never grants what the lower's mount denies: its nosuid, nodev,
 * noexec and ro carry over, whatever the options say.
 */
#include "fs.h"
#include "log.h"
#include "sys.h"

#include <stdlib.h>
#include <sys/mount.h>
#include <sys/statvfs.h>

#define PRIVATE_MOUNT_DIR "/run/slowmedia"

/* -EBUSY when dev is mounted or claimed anywhere; the claim ends with close. */
static int probe_unused(const char *dev)
{
	int fd = neg_errno(open(dev, O_RDONLY | O_EXCL | O_CLOEXEC));

	if (fd == -EBUSY)
		sm_err("%s is in use (mounted, or held by another program): "
		       "it would be written behind slowmedia's back",
		       dev);
	if (fd < 0)
		return fd;
	close(fd);
	return 0;
}

static int open_private_mount(const struct sm_options *o)
{
	char dir[] = PRIVATE_MOUNT_DIR "/lower.XXXXXX";
	/* ro: an untrusted medium's superblock is not even written. */
	unsigned long flags = (o->allow_suid ? 0 : MS_NOSUID) | (o->allow_dev ? 0 : MS_NODEV) |
			      (o->read_only ? MS_RDONLY : 0) | (o->noexec ? MS_NOEXEC : 0);
	int fd, r;

	r = probe_unused(o->source);
	if (r < 0)
		return r;
	/* Shared with the control sockets and the arbiter (ctl_proto.h): 0755;
	 * each private mount dir is mkdtemp's 0700. */
	if (mkdir(PRIVATE_MOUNT_DIR, 0755) < 0 && errno != EEXIST)
		return -errno;
	if (!mkdtemp(dir))
		return -errno;
	r = neg_errno(mount(o->source, dir, o->fstype, flags, NULL));
	if (r < 0) {
		sm_err("mount %s (type %s): %s", o->source, o->fstype, g_strerror(-r));
		rmdir(dir);
		return r;
	}
	fd = neg_errno(open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC));
	umount2(dir, MNT_DETACH);
	rmdir(dir);
	return fd;
}

int lower_open(const struct sm_options *o);
int lower_open(const struct sm_options *o)
{
	if (o->fstype)
		return open_private_mount(o);
	return neg_errno(open(o->source, O_PATH | O_DIRECTORY | O_CLOEXEC));
}

/* The mount flag for one right: granted only when asked for and the lower
 * grants it too. libfuse's defaults are nosuid,nodev, but mount.fuse3 adds
 * suid,dev to every mount, so the decision is always spelled out. */
static void add_right(struct fuse_args *args, const char *right, bool asked,
		      bool lower_denies)
{
	g_autofree char *deny = g_strdup_printf("-ono%s", right);
	g_autofree char *grant = g_strdup_printf("-o%s", right);

	if (asked && lower_denies)
		sm_warn("allow_%s refused: the lower mount is no%s", right, right);
	else if (asked)
		sm_info("allow_%s: the medium's %s take effect", right,
			right[0] == 's' ? "setuid and setgid bits" : "device nodes");
	fuse_opt_add_arg(args, asked && !lower_denies ? grant : deny);
}

/*
 * Append to args the mount flags the lower mount (of root_fd) imposes. They go
 * last, after the caller's and mount.fuse3's options: libfuse applies flags in
 * order, so these win.
 */
int lower_mount_flags(int root_fd, const struct sm_options *o, struct fuse_args *args);
int lower_mount_flags(int root_fd, const struct sm_options *o, struct fuse_args *args)
{
	struct statvfs sv;

	if (fstatvfs(root_fd, &sv) < 0)
		return -errno;
	add_right(args, "suid", o->allow_suid, sv.f_flag & ST_NOSUID);
	add_right(args, "dev", o->allow_dev, sv.f_flag & ST_NODEV);
	if (sv.f_flag & ST_NOEXEC)
		fuse_opt_add_arg(args, "-onoexec");
	if (sv.f_flag & ST_RDONLY)
		fuse_opt_add_arg(args, "-oro");
	return 0;
}
