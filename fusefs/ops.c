/* The single fuse_lowlevel_ops table, and session init/destroy. */
#include "ops.h"
#include "log.h"

void sm_init(void *userdata, struct fuse_conn_info *conn)
{
	/* Never let the kernel cache writes: the queue is ours to bound and pace. */
	conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
	/* O_TRUNC must reach us as a truncate, ordered with the file's queued writes. */
	conn->want &= ~FUSE_CAP_ATOMIC_O_TRUNC;
	if (conn->capable & FUSE_CAP_SPLICE_READ)
		conn->want |= FUSE_CAP_SPLICE_READ;
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
	.copy_file_range = sm_copy_file_range,
	.getxattr = sm_getxattr,
	.listxattr = sm_listxattr,
	.setxattr = sm_setxattr,
	.removexattr = sm_removexattr,
};
