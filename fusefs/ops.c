/* The single fuse_lowlevel_ops table, and session init/destroy. */
#include "ops.h"
#include "log.h"

#include <sys/xattr.h>

/* Whether the lower filesystem keeps POSIX ACLs (ext4 noacl, vfat do not). */
static bool lower_has_acls(struct slowmedia *fs)
{
	char path[PROC_FD_PATH_MAX];
	const char *root = proc_fd_path(path, fs->root_fd);

	if (getxattr(root, "system.posix_acl_access", NULL, 0) >= 0)
		return true;
	return errno == ENODATA;
}

void sm_init(void *userdata, struct fuse_conn_info *conn)
{
	struct slowmedia *fs = userdata;

	/* Never let the kernel cache writes: the queue is ours to bound and pace. */
	conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
	/* O_TRUNC must reach us as a truncate, ordered with the file's queued writes. */
	conn->want &= ~FUSE_CAP_ATOMIC_O_TRUNC;
	if (conn->capable & FUSE_CAP_SPLICE_READ)
		conn->want |= FUSE_CAP_SPLICE_READ;
	/*
	 * The kernel then stops asking for security.capability before every
	 * write; the kills are ours (devio.c, killpriv.c). And no
	 * auto_inval_data: it refreshes the attributes at every read after a
	 * write, and each refresh makes the next write ask again. It guards
	 * against changes of the lower behind the mount's back, which slowmedia
	 * does not support anyway (the queue could not be laid over them); the
	 * kernel still drops a file's pages at open and at a size change.
	 */
	if (devio_want_killpriv_v2(fs))
		sm_dbg("init: the kernel offers FUSE_HANDLE_KILLPRIV_V2: taken");
	conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA;
	/*
	 * default_permissions checks mode bits only: with other users let in, an
	 * ACL entry denying one of them would mean nothing. The kernel enforces
	 * ACLs itself once asked, reading them through getxattr. Not where the
	 * lower has none: the kernel would fail every check with its EOPNOTSUPP.
	 */
	if ((conn->capable & FUSE_CAP_POSIX_ACL) && lower_has_acls(fs))
		conn->want |= FUSE_CAP_POSIX_ACL;
	/* Under a default ACL the lower must see the caller's umask, not a mode
	 * the kernel has already masked: creates apply it themselves (creds.c). */
	if ((conn->want & FUSE_CAP_POSIX_ACL) && (conn->capable & FUSE_CAP_DONT_MASK)) {
		conn->want |= FUSE_CAP_DONT_MASK;
		fs->dont_mask = true;
	}
	sm_dbg("init: proto %u.%u, max_write %u", conn->proto_major, conn->proto_minor,
	       conn->max_write);
}

void sm_destroy(void *userdata)
{
	sm_dbg("destroy");
}

const struct fuse_lowlevel_ops sm_ops = {
	.init = sm_init,
	.destroy = sm_destroy,
	.lookup = sm_lookup,
	.forget = sm_forget,
	.forget_multi = sm_forget_multi,
	.getattr = sm_getattr,
	.setattr = sm_setattr,
	.readlink = sm_readlink,
	.statfs = sm_statfs,
	.access = sm_access,
	.mknod = sm_mknod,
	.mkdir = sm_mkdir,
	.symlink = sm_symlink,
	.link = sm_link,
	.unlink = sm_unlink,
	.rmdir = sm_rmdir,
	.rename = sm_rename,
	.opendir = sm_opendir,
	.readdir = sm_readdir,
	.readdirplus = sm_readdirplus,
	.releasedir = sm_releasedir,
	.fsyncdir = sm_fsyncdir,
	.open = sm_open,
	.create = sm_create,
	.read = sm_read,
	.write_buf = sm_write_buf,
	.flush = sm_flush,
	.release = sm_release,
	.fsync = sm_fsync,
	.fallocate = sm_fallocate,
	.lseek = sm_lseek,
	/* No copy_file_range: libfuse answers ENOSYS, and the kernel then copies
	 * through read and write (splice), so a copy inside the mount goes
	 * through the queue, paced and bounded like any other write. A copy on
	 * the lower would pile up the medium's dirty pages unpaced. */
	.getxattr = sm_getxattr,
	.listxattr = sm_listxattr,
	.setxattr = sm_setxattr,
	.removexattr = sm_removexattr,
};
