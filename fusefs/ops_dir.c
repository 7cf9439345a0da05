/* Namespace and directory ops: mknod, mkdir, symlink, link, unlink, rmdir, rename,
 * opendir, readdir(plus), releasedir, fsyncdir. */
#include "fs.h"
#include "log.h"
#include "ops.h"
#include "sys.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>

enum node_kind { NODE_MKNOD, NODE_MKDIR, NODE_SYMLINK };

/* Create a node as the caller, then answer with its entry. */
static void make_node(fuse_req_t req, fuse_ino_t parent, const char *name,
		      enum node_kind kind, mode_t mode, dev_t rdev, const char *target)
{
	struct slowmedia *fs = fs_from_req(req);
	struct sm_inode *dir = inode_from_ino(fs, parent);
	struct sm_creds creds;
	int pfd, r;

	pfd = r = named_dir_fd_get(fs, dir, name);
	if (r < 0)
		goto out;
	r = creds_enter(req, &creds);
	if (r < 0)
		goto out_put;
	switch (kind) {
	case NODE_MKNOD:
		r = neg_errno(mknodat(pfd, name, mode, rdev));
		break;
	case NODE_MKDIR:
		r = neg_errno(mkdirat(pfd, name, mode));
		break;
	case NODE_SYMLINK:
		r = neg_errno(symlinkat(target, pfd, name));
		break;
	}
	creds_leave(&creds);
out_put:
	inode_fd_put(fs, dir);
out:
	reply_new_entry(req, fs, dir, name, r);
}

void sm_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
	      dev_t rdev)
{
	make_node(req, parent, name, NODE_MKNOD, mode, rdev, NULL);
}

void sm_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	make_node(req, parent, name, NODE_MKDIR, mode, 0, NULL);
}

void sm_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	make_node(req, parent, name, NODE_SYMLINK, 0, 0, link);
}

static int link_at(int fd, int pfd, const char *name)
{
	char path[PROC_FD_PATH_MAX];
	int r = neg_errno(linkat(fd, "", pfd, name, AT_EMPTY_PATH));

	/* AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH; the /proc link works without. */
	if (r == -ENOENT || r == -EPERM)
		r = neg_errno(linkat(AT_FDCWD, proc_fd_path(path, fd), pfd, name,
				     AT_SYMLINK_FOLLOW));
	return r;
}

void sm_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t parent, const char *name)
{
	struct slowmedia *fs = fs_from_req(req);
	struct sm_inode *inode = inode_from_ino(fs, ino), *dir = inode_from_ino(fs, parent);
	int fd, pfd, r;

	r = check_name(name);
	if (r == 0)
		r = inode_fd_pair_get(fs, inode, dir, &fd, &pfd);
	if (r == 0) {
		r = link_at(fd, pfd, name);
		inode_fd_put(fs, dir);
		inode_fd_put(fs, inode);
	}
	/* The lookup finds the same inode: one inode per hard-linked file. */
	reply_new_entry(req, fs, dir, name, r);
}

/* The inode a name in dir refers to, if we know it (referenced), for elision. */
static struct sm_inode *known_inode(struct slowmedia *fs, int pfd, const char *name)
{
	struct stat st;

	if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
		return NULL;
	return inode_peek(fs, st.st_dev, st.st_ino);
}

static void forget_known(struct slowmedia *fs, struct sm_inode *victim, int r)
{
	if (!victim)
		return;
	if (r == 0)
		elide_if_gone(fs, victim); /* temp files never touch the medium */
	inode_unref(fs, victim);
}

static void remove_entry(fuse_req_t req, fuse_ino_t parent, const char *name, int flags)
{
	struct slowmedia *fs = fs_from_req(req);
	struct sm_inode *dir = inode_from_ino(fs, parent), *victim = NULL;
	int pfd, r;

	pfd = r = named_dir_fd_get(fs, dir, name);
	if (pfd >= 0) {
		victim = flags ? NULL : known_inode(fs, pfd, name);
		r = neg_errno(unlinkat(pfd, name, flags));
		inode_fd_put(fs, dir);
	}
	forget_known(fs, victim, r);
	fuse_reply_err(req, -r);
}

void sm_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	remove_entry(req, parent, name, 0);
}

void sm_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	remove_entry(req, parent, name, AT_REMOVEDIR);
}

void sm_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
	       const char *newname, unsigned int flags)
{
	struct slowmedia *fs = fs_from_req(req);
	struct sm_inode *from = inode_from_ino(fs, parent), *to = inode_from_ino(fs, newparent);
	struct sm_inode *victim = NULL;
	int pfd, npfd, r;

	r = check_name(name);
	if (r == 0)
		r = check_name(newname);
	if (r == 0)
		r = inode_fd_pair_get(fs, from, to, &pfd, &npfd);
	if (r == 0) {
		victim = (flags & RENAME_EXCHANGE) ? NULL : known_inode(fs, npfd, newname);
		r = neg_errno(renameat2(pfd, name, npfd, newname, flags));
		inode_fd_put(fs, to);
		inode_fd_put(fs, from);
	}
	forget_known(fs, victim, r);
	fuse_reply_err(req, -r);
}

static struct sm_dirh *dirh_of(struct fuse_file_info *fi)
{
	return (struct sm_dirh *)(uintptr_t)fi->fh;
}

void sm_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct slowmedia *fs = fs_from_req(req);
	struct sm_inode *inode = inode_from_ino(fs, ino);
	struct sm_dirh *d;
	int fd, dfd;

	fd = inode_fd_get(fs, inode);
	if (fd < 0) {
		fuse_reply_err(req, -fd);
		return;
	}
	dfd = neg_errno(openat(fd, ".", O_RDONLY | O_DIRECTORY));
	inode_fd_put(fs, inode);
	if (dfd < 0) {
		fuse_reply_err(req, -dfd);
		return;
	}
	d = g_new0(struct sm_dirh, 1);
	d->dp = fdopendir(dfd);
	if (!d->dp) {
		int saverr = errno;
		close(dfd);
		g_free(d);
		fuse_reply_err(req, saverr);
		return;
	}
	fi->fh = (uintptr_t)d;
	if (fuse_reply_open(req, fi) == -ENOENT) {
		/* The opener was interrupted: nobody will release it. */
		closedir(d->dp);
		g_free(d);
	}
}

/* Add one entry to buf; returns its size, or 0 when it does not fit. */
static size_t add_entry(fuse_req_t req, struct sm_inode *dir, char *buf, size_t rem,
			struct dirent *de, off_t next, bool plus)
{
	struct slowmedia *fs = fs_from_req(req);
	struct fuse_entry_param e;
	size_t n;

	if (!plus) {
		struct stat st = {.st_ino = de->d_ino, .st_mode = (mode_t)de->d_type << 12};
		return fuse_add_direntry(req, buf, rem, de->d_name, &st, next);
	}
	if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) {
		/* No lookup count for these: the kernel does not forget them. */
		memset(&e, 0, sizeof(e));
		e.attr.st_ino = de->d_ino;
		e.attr.st_mode = (mode_t)de->d_type << 12;
		return fuse_add_direntry_plus(req, buf, rem, de->d_name, &e, next);
	}
	if (entry_lookup(fs, dir, de->d_name, &e) < 0)
		return (size_t)-1; /* vanished since readdir saw it: skip */
	n = fuse_add_direntry_plus(req, buf, rem, de->d_name, &e, next);
	if (n > rem)
		inode_forget(fs, inode_from_ino(fs, e.ino), 1);
	return n;
}

static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset,
		       struct fuse_file_info *fi, bool plus)
{
	struct slowmedia *fs = fs_from_req(req);
	struct sm_inode *dir = inode_from_ino(fs, ino);
	struct sm_dirh *d = dirh_of(fi);
	char *buf = g_malloc(size);
	size_t used = 0;
	int err = 0;
	int64_t meta_t0;

	meta_t0 = wq_meta_begin(fs->wq);
	if (offset != d->offset) {
		seekdir(d->dp, offset);
		d->entry = NULL;
		d->offset = offset;
	}
	for (;;) {
		size_t n;

		if (!d->entry) {
			errno = 0;
			d->entry = readdir(d->dp);
			if (!d->entry) {
				err = errno;
				break;
			}
		}
		n = add_entry(req, dir, buf + used, size - used, d->entry,
			      d->entry->d_off, plus);
		if (n != (size_t)-1 && n > size - used)
			break; /* keep d->entry for the next call */
		if (n != (size_t)-1)
			used += n;
		d->offset = d->entry->d_off;
		d->entry = NULL;
	}
	/* An error after some entries is reported on the next call, as getdents does. */
	wq_meta_end(fs->wq, meta_t0);
	if (err && used == 0)
		fuse_reply_err(req, err);
	else
		fuse_reply_buf(req, buf, used);
	g_free(buf);
}

void sm_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset,
		struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, offset, fi, false);
}

void sm_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset,
		    struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, offset, fi, true);
}

void sm_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct sm_dirh *d = dirh_of(fi);

	closedir(d->dp);
	g_free(d);
	fuse_reply_err(req, 0);
}

void sm_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	int fd = dirfd(dirh_of(fi)->dp);
	int r = datasync ? neg_errno(fdatasync(fd)) : neg_errno(fsync(fd));

	fuse_reply_err(req, -r);
}
