/*
 * Opening the lower filesystem before mounting over anything: SOURCE may be the
 * mountpoint itself (overlay in place), and with fstype= SOURCE is a block
 * device that is mounted privately and detached at once, so only our fd keeps
 * it alive and nobody else can write to it behind our back.
 */
#include "fs.h"
#include "log.h"
#include "sys.h"

#include <stdlib.h>
#include <sys/mount.h>

#define PRIVATE_MOUNT_DIR "/run/slowmedia"

static int open_private_mount(const char *dev, const char *fstype)
{
	char dir[] = PRIVATE_MOUNT_DIR "/lower.XXXXXX";
	int fd, r;

	if (mkdir(PRIVATE_MOUNT_DIR, 0700) < 0 && errno != EEXIST)
		return -errno;
	if (!mkdtemp(dir))
		return -errno;
	r = neg_errno(mount(dev, dir, fstype, MS_NOSUID | MS_NODEV, NULL));
	if (r < 0) {
		sm_err("mount %s (type %s): %s", dev, fstype, g_strerror(-r));
		rmdir(dir);
		return r;
	}
	fd = neg_errno(open(dir, O_PATH | O_DIRECTORY));
	umount2(dir, MNT_DETACH);
	rmdir(dir);
	return fd;
}

int lower_open(const struct sm_options *o);
int lower_open(const struct sm_options *o)
{
	if (o->fstype)
		return open_private_mount(o->source, o->fstype);
	return neg_errno(open(o->source, O_PATH | O_DIRECTORY));
}
