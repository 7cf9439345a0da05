/* Extended attributes, reached through the inode's /proc/self/fd path. */
#include "fs.h"
#include "ops.h"
#include "reqtrack.h"
#include "sys.h"

#include <string.h>
#include <sys/xattr.h>

#define XATTR_NAME_POSIX_ACL_ACCESS "system.posix_acl_access"
#define XATTR_NAME_CAPS "security.capability"

/*
 * The kernel asks for security.capability before a write to a FUSE file
 * whose inode it has not yet marked S_NOSEC (after each refresh of its
 * attributes): a lower getxattr each time, through a /proc path walk. Its
 * absence is remembered per inode (killpriv.c) and forgotten when it is set
 * through the mount. Set on the lower behind our back, it would be seen at
 * the next lookup of a new inode only; a write by an unprivileged user
 * would then not drop it, which the lower's own write (when the queue
 * flushes) does anyway.
 */
static bool is_caps(const char *name)
{
	return strcmp(name, XATTR_NAME_CAPS) == 0;
}

enum xattr_kind { XATTR_GET, XATTR_LIST };

static void get_or_list(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size,
			enum xattr_kind kind)
{
	struct slowmedia *fs = fs_from_req(req);
	struct sm_inode *inode = inode_from_ino(fs, ino);
	char path[PROC_FD_PATH_MAX];
	g_autofree char *buf = size ? g_malloc(size) : NULL;
	ssize_t n;
	int r;

	if (kind == XATTR_GET && is_caps(name) && (caps_snapshot(inode) & CAPS_ABSENT)) {
		fuse_reply_err(req, ENODATA);
		return;
	}
	r = inode_path_get(fs, inode, path);
	if (r < 0) {
		fuse_reply_err(req, -r);
		return;
	}
	if (kind == XATTR_GET) {
		uint32_t snap = caps_snapshot(inode);

		n = neg_errno_ssize(getxattr(path, name, buf, size));
		if (n == -ENODATA && is_caps(name))
			caps_found_absent(inode, snap);
	} else
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

/*
 * An ACL is set as the caller: the lower then decides, as for a local process,
 * whether the setgid bit survives (it is cleared when the caller is neither
 * in the file's group nor privileged). The kernel has already checked that the
 * caller may set it.
 */
static int set_acl_as_caller(fuse_req_t req, const char *path, const char *name,
			     const char *value, size_t size, int flags)
{
	struct sm_creds saved;
	int r = creds_enter(req, &saved);

	if (r < 0)
		return r;
	r = neg_errno(setxattr(path, name, value, size, flags));
	creds_leave(&saved);
	return r;
}

void sm_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
		 size_t size, int flags)
{
	struct slowmedia *fs = fs_from_req(req);
	struct sm_inode *inode = inode_from_ino(fs, ino);
	char path[PROC_FD_PATH_MAX];
	struct wq_file *wqf = inode_wqf(inode);
	int r = inode_path_get(fs, inode, path);

	/* Writes queued before it land first: the lower's own write removes
	 * the capabilities, and one landing after the set would take away what
	 * the caller just set (seen in CI: setcap after `echo x >f`). Its
	 * error is the writes' own, not the set's. */
	if (r == 0 && wqf && is_caps(name)) {
		reqtrack_waits_medium(fs->req);
		wq_flush_file(fs->wq, wqf);
	}
	/* Before and after: a lookup of its absence that began before the set
	 * landed must not be remembered. */
	if (is_caps(name))
		caps_changed(inode);
	if (r == 0) {
		if (strcmp(name, XATTR_NAME_POSIX_ACL_ACCESS) == 0)
			r = set_acl_as_caller(req, path, name, value, size, flags);
		else
			r = neg_errno(setxattr(path, name, value, size, flags));
		inode_fd_put(fs, inode);
	}
	if (is_caps(name))
		caps_changed(inode);
	fuse_reply_err(req, -r);
}

void sm_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	struct slowmedia *fs = fs_from_req(req);
	struct sm_inode *inode = inode_from_ino(fs, ino);
	char path[PROC_FD_PATH_MAX];
	int r = inode_path_get(fs, inode, path);

	if (r == 0) {
		uint32_t snap = caps_snapshot(inode);

		r = neg_errno(removexattr(path, name));
		if ((r == 0 || r == -ENODATA) && is_caps(name))
			caps_found_absent(inode, snap);
		inode_fd_put(fs, inode);
	}
	fuse_reply_err(req, -r);
}
