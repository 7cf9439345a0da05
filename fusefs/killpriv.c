/*
 * Killing privileges on write, truncate and chown, as the Linux VFS does
 * (should_remove_suid, file_remove_privs), now that the kernel leaves it to
 * us (FUSE_HANDLE_KILLPRIV_V2, devio.c):
 *   - a write or truncate by a caller without CAP_FSETID (the request's kill
 *     flag) clears S_ISUID, and S_ISGID when the group may execute or the
 *     caller is not in the file's group (setattr_should_drop_sgid; the uapi
 *     comment of FUSE_HANDLE_KILLPRIV_V2 names the first case only);
 *   - every write or truncate removes security.capability;
 *   - chown is left to the lower: the daemon's own chown there kills all of it.
 * The daemon writes the lower as root, and the queue lands the data later, so
 * neither the lower's write nor its truncate would do this for the caller:
 * it is done here, before the request is answered. Cheaply: per inode we know
 * whether the mode had those bits when last seen (sxid) and whether the
 * capability is known absent (caps), so a plain write costs no syscall.
 */
#include "fs.h"
#include "sys.h"

#include <sys/xattr.h>

#define XATTR_NAME_CAPS "security.capability"

void caps_found_absent(struct sm_inode *inode, uint32_t snap)
{
	/* Fails (and leaves it unknown) when a set came in between. */
	__atomic_compare_exchange_n(&inode->caps, &snap, snap | CAPS_ABSENT, false,
				    __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
}

void caps_changed(struct sm_inode *inode)
{
	uint32_t old = caps_snapshot(inode), new;

	do
		new = (old & ~CAPS_ABSENT) + CAPS_SET_STEP;
	while (!__atomic_compare_exchange_n(&inode->caps, &old, new, false, __ATOMIC_ACQ_REL,
					    __ATOMIC_ACQUIRE));
}

/* The mode a write or truncate by an unprivileged caller leaves. */
static mode_t killed_mode(fuse_req_t req, const struct stat *st)
{
	mode_t mode = st->st_mode & ~S_ISUID;

	if ((mode & S_ISGID) && ((mode & S_IXGRP) || !creds_in_group(req, st->st_gid)))
		mode &= ~S_ISGID;
	return mode;
}

static int kill_suidgid(fuse_req_t req, struct sm_inode *inode, int ofd, int pfd)
{
	char path[PROC_FD_PATH_MAX];
	struct stat st;
	mode_t mode;
	int r;

	if (!__atomic_load_n(&inode->sxid, __ATOMIC_RELAXED))
		return 0;
	r = ofd >= 0 ? neg_errno(fstat(ofd, &st))
		     : neg_errno(fstatat(pfd, "", &st, AT_EMPTY_PATH));
	if (r < 0)
		return r;
	mode = killed_mode(req, &st) & 07777;
	if (mode == (st.st_mode & 07777)) {
		inode_note_mode(inode, mode);
		return 0;
	}
	r = ofd >= 0 ? neg_errno(fchmod(ofd, mode))
		     : neg_errno(chmod(proc_fd_path(path, pfd), mode));
	if (r < 0)
		return r;
	inode_note_mode(inode, mode);
	/* The kernel keeps the mode it cached (up to the attribute timeout), and
	 * exec believes it: a setuid bit just killed here would still count for
	 * an exec right after the write (on a mount with allow_suid). Its
	 * attributes are dropped now, before the answer. Offset -1: attributes
	 * only, no page is touched, so the writer's locks cannot deadlock it. */
	if (fs_from_req(req)->se && inode != &fs_from_req(req)->root)
		fuse_lowlevel_notify_inval_inode(fs_from_req(req)->se,
						 (fuse_ino_t)(uintptr_t)inode, -1, 0);
	return 0;
}

static int kill_caps(struct sm_inode *inode, int ofd, int pfd)
{
	char path[PROC_FD_PATH_MAX];
	uint32_t snap = caps_snapshot(inode);
	int r;

	if (snap & CAPS_ABSENT)
		return 0;
	if (ofd < 0)
		proc_fd_path(path, pfd);
	/* Asked first: removing needs CAP_SETFCAP even when there is nothing. */
	r = ofd >= 0 ? neg_errno(fgetxattr(ofd, XATTR_NAME_CAPS, NULL, 0))
		     : neg_errno(getxattr(path, XATTR_NAME_CAPS, NULL, 0));
	if (r >= 0)
		r = ofd >= 0 ? neg_errno(fremovexattr(ofd, XATTR_NAME_CAPS))
			     : neg_errno(removexattr(path, XATTR_NAME_CAPS));
	if (r == 0 || r == -ENODATA || r == -EOPNOTSUPP) {
		caps_found_absent(inode, snap);
		return 0;
	}
	/* A daemon that is not root may not; the lower's own write, by the
	 * queue, removes it later (the kernel's removal needs no permission). */
	return r == -EPERM ? 0 : r;
}

int killpriv(fuse_req_t req, struct sm_inode *inode, int ofd, int pfd, bool kill)
{
	int r = kill ? kill_suidgid(req, inode, ofd, pfd) : 0;

	return r < 0 ? r : kill_caps(inode, ofd, pfd);
}
