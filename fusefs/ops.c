/* The single fuse_lowlevel_ops table, and session init/destroy. */
#include "ops.h"
#include "log.h"
#include "reqtrack.h"

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

/*
 * Each handler runs between reqtrack_begin and reqtrack_end (reqtrack.c), so
 * status shows the oldest request and one past the bound is logged. fs and
 * the caller's pid are read first: the handler's reply frees req.
 */
static void track_begin(struct slowmedia *fs, fuse_req_t req, const char *op)
{
	if (fs->req)
		reqtrack_begin(fs->req, op, fuse_req_ctx(req)->pid, sm_now_ns());
}

static void track_end(struct slowmedia *fs)
{
	if (fs->req)
		reqtrack_end(fs->req, sm_now_ns());
}

#define TRACKED_AS(name, op, params, args)                                               \
	static void t_##name params                                                      \
	{                                                                                \
		struct slowmedia *fs = fs_from_req(req);                                 \
		track_begin(fs, req, op);                                                \
		sm_##name args;                                                          \
		track_end(fs);                                                           \
	}
#define TRACKED(name, params, args) TRACKED_AS(name, #name, params, args)

typedef struct fuse_file_info *fi_t;

TRACKED(lookup, (fuse_req_t req, fuse_ino_t parent, const char *name), (req, parent, name))
TRACKED(forget, (fuse_req_t req, fuse_ino_t ino, uint64_t n), (req, ino, n))
TRACKED(forget_multi, (fuse_req_t req, size_t count, struct fuse_forget_data *forgets),
	(req, count, forgets))
TRACKED(getattr, (fuse_req_t req, fuse_ino_t ino, fi_t fi), (req, ino, fi))
TRACKED(setattr, (fuse_req_t req, fuse_ino_t ino, struct stat *attr, int valid, fi_t fi),
	(req, ino, attr, valid, fi))
TRACKED(readlink, (fuse_req_t req, fuse_ino_t ino), (req, ino))
TRACKED(statfs, (fuse_req_t req, fuse_ino_t ino), (req, ino))
TRACKED(access, (fuse_req_t req, fuse_ino_t ino, int mask), (req, ino, mask))
TRACKED(mknod, (fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev),
	(req, parent, name, mode, rdev))
TRACKED(mkdir, (fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode),
	(req, parent, name, mode))
TRACKED(symlink, (fuse_req_t req, const char *link, fuse_ino_t parent, const char *name),
	(req, link, parent, name))
TRACKED(link, (fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname),
	(req, ino, newparent, newname))
TRACKED(unlink, (fuse_req_t req, fuse_ino_t parent, const char *name), (req, parent, name))
TRACKED(rmdir, (fuse_req_t req, fuse_ino_t parent, const char *name), (req, parent, name))
TRACKED(rename,
	(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
	 const char *newname, unsigned int flags),
	(req, parent, name, newparent, newname, flags))
TRACKED(opendir, (fuse_req_t req, fuse_ino_t ino, fi_t fi), (req, ino, fi))
TRACKED(readdir, (fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fi_t fi),
	(req, ino, size, off, fi))
TRACKED(readdirplus, (fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fi_t fi),
	(req, ino, size, off, fi))
TRACKED(releasedir, (fuse_req_t req, fuse_ino_t ino, fi_t fi), (req, ino, fi))
TRACKED(fsyncdir, (fuse_req_t req, fuse_ino_t ino, int datasync, fi_t fi),
	(req, ino, datasync, fi))
TRACKED(open, (fuse_req_t req, fuse_ino_t ino, fi_t fi), (req, ino, fi))
TRACKED(create, (fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, fi_t fi),
	(req, parent, name, mode, fi))
TRACKED(read, (fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fi_t fi),
	(req, ino, size, off, fi))
TRACKED_AS(write_buf, "write", (fuse_req_t req, fuse_ino_t ino, struct fuse_bufvec *bufv, off_t off, fi_t fi),
	(req, ino, bufv, off, fi))
TRACKED(flush, (fuse_req_t req, fuse_ino_t ino, fi_t fi), (req, ino, fi))
TRACKED(release, (fuse_req_t req, fuse_ino_t ino, fi_t fi), (req, ino, fi))
TRACKED(fsync, (fuse_req_t req, fuse_ino_t ino, int datasync, fi_t fi), (req, ino, datasync, fi))
TRACKED(fallocate,
	(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length, fi_t fi),
	(req, ino, mode, offset, length, fi))
TRACKED(lseek, (fuse_req_t req, fuse_ino_t ino, off_t off, int whence, fi_t fi),
	(req, ino, off, whence, fi))
TRACKED(getxattr, (fuse_req_t req, fuse_ino_t ino, const char *name, size_t size),
	(req, ino, name, size))
TRACKED(listxattr, (fuse_req_t req, fuse_ino_t ino, size_t size), (req, ino, size))
TRACKED(setxattr,
	(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value, size_t size,
	 int flags),
	(req, ino, name, value, size, flags))
TRACKED(removexattr, (fuse_req_t req, fuse_ino_t ino, const char *name), (req, ino, name))

const struct fuse_lowlevel_ops sm_ops = {
	.init = sm_init,
	.destroy = sm_destroy,
	.lookup = t_lookup,
	.forget = t_forget,
	.forget_multi = t_forget_multi,
	.getattr = t_getattr,
	.setattr = t_setattr,
	.readlink = t_readlink,
	.statfs = t_statfs,
	.access = t_access,
	.mknod = t_mknod,
	.mkdir = t_mkdir,
	.symlink = t_symlink,
	.link = t_link,
	.unlink = t_unlink,
	.rmdir = t_rmdir,
	.rename = t_rename,
	.opendir = t_opendir,
	.readdir = t_readdir,
	.readdirplus = t_readdirplus,
	.releasedir = t_releasedir,
	.fsyncdir = t_fsyncdir,
	.open = t_open,
	.create = t_create,
	.read = t_read,
	.write_buf = t_write_buf,
	.flush = t_flush,
	.release = t_release,
	.fsync = t_fsync,
	.fallocate = t_fallocate,
	.lseek = t_lseek,
	/* No copy_file_range: libfuse answers ENOSYS, and the kernel then copies
	 * through read and write (splice), so a copy inside the mount goes
	 * through the queue, paced and bounded like any other write. A copy on
	 * the lower would pile up the medium's dirty pages unpaced. */
	.getxattr = t_getxattr,
	.listxattr = t_listxattr,
	.setxattr = t_setxattr,
	.removexattr = t_removexattr,
};
