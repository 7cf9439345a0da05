/* Extended attributes, reached through the inode's /proc/self/fd path. */
#include "fs.h"
#include "ops.h"
#include "sys.h"

#include <sys/xattr.h>

enum xattr_kind { XATTR_GET, XATTR_LIST };

static void get_or_list(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size,
			enum xattr_kind kind)
{
	struct slowmedia *fs = fs_from_req(req);
	struct sm_inode *inode = inode_from_ino(fs, ino);
	char path[PROC_FD_PATH_MAX];
	g_autofree char *buf = size ? g_malloc(size) : NULL;
	ssize_t n;
	int r = inode_path_get(fs, inode, path);

	if (r < 0) {
		fuse_reply_err(req, -r);
		return;
	}
	if (kind == XATTR_GET)
		n = neg_errno_ssize(getxattr(path, name, buf, size));
	else
		n = neg_errno_ssize(listxattr(path, buf, size));
	inode_fd_put(fs, inode);
	if (n < 0)
		fuse_reply_err(req, (int)-n);
	else if (size == 0)
		fuse_reply_xattr(req, (size_t)n);
	else
		fuse_reply_buf(req, buf, (size_t)n);
}

void sm_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	get_or_list(req, ino, name, size, XATTR_GET);
}

void sm_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	get_or_list(req, ino, NULL, size, XATTR_LIST);
}

void sm_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
		 size_t size, int flags)
{
	struct slowmedia *fs = fs_from_req(req);
	struct sm_inode *inode = inode_from_ino(fs, ino);
	char path[PROC_FD_PATH_MAX];
	int r = inode_path_get(fs, inode, path);

	if (r == 0) {
		r = neg_errno(setxattr(path, name, value, size, flags));
		inode_fd_put(fs, inode);
	}
	fuse_reply_err(req, -r);
}

void sm_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	struct slowmedia *fs = fs_from_req(req);
	struct sm_inode *inode = inode_from_ino(fs, ino);
	char path[PROC_FD_PATH_MAX];
	int r = inode_path_get(fs, inode, path);

	if (r == 0) {
		r = neg_errno(removexattr(path, name));
		inode_fd_put(fs, inode);
	}
	fuse_reply_err(req, -r);
}
