/* Namespace and directory ops: mknod, mkdir, symlink, link, unlink, rmdir, rename,
 * opendir, readdir(plus), releasedir, fsyncdir. */
#include "fs.h"
#include "log.h"
#include "ops.h"
#include "reqtrack.h"
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
	r = creds_enter_create(req, &creds);
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

/* After an op that may have removed what name in dir named (gone: it did). */
static void release_victim(struct slowmedia *fs, struct sm_inode *dir, const char *name,
			   bool gone, struct sm_name_hold *victim)
{
	if (gone && victim->inode && S_ISREG(victim->inode->type))
		elide_if_gone(fs, victim->inode); /* temp files never touch the medium */
	inode_name_release(fs, dir, name, gone, victim);
}

static void remove_entry(fuse_req_t req, fuse_ino_t parent, const char *name, int flags)
{
	struct slowmedia *fs = fs_from_req(req);
	struct sm_inode *dir = inode_from_ino(fs, parent);
	struct sm_name_hold victim = {0};
	char path[PATH_MAX];
	bool spooled = wq_spooling(fs->wq) && entry_path(fs, dir, name, path, sizeof(path)) == 0;
	int pfd, r;

	pfd = r = named_dir_fd_get(fs, dir, name);
	if (pfd >= 0) {
		inode_name_hold(fs, pfd, dir, name, &victim);
		r = neg_errno(unlinkat(pfd, name, flags));
		release_victim(fs, dir, name, r == 0, &victim);
		inode_fd_put(fs, dir);
	}
	if (r == 0 && spooled)
		wq_note_rename(fs->wq, path, NULL); /* its journaled writes are void */
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

/* After a rename: the moved inode (both, for an exchange) is reached by its
 * new name from now on. */
static void note_moved(struct slowmedia *fs, struct sm_inode *from, int pfd, const char *name,
		       struct sm_inode *to, int npfd, const char *newname, unsigned int flags)
{
	inode_name_moved(fs, npfd, to, newname);
	if (flags & RENAME_EXCHANGE)
		inode_name_moved(fs, pfd, from, name);
}

void sm_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
	       const char *newname, unsigned int flags)
{
	struct slowmedia *fs = fs_from_req(req);
	struct sm_inode *from = inode_from_ino(fs, parent), *to = inode_from_ino(fs, newparent);
	struct sm_name_hold victim = {0};
	char path[PATH_MAX], newpath[PATH_MAX];
	bool spooled = false;
	int pfd, npfd, r;

	/* The spool follows moved names of files it journaled. */
	if (wq_spooling(fs->wq))
		spooled = entry_path(fs, from, name, path, sizeof(path)) == 0 &&
			  entry_path(fs, to, newname, newpath, sizeof(newpath)) == 0;
	r = check_name(name);
	if (r == 0)
		r = check_name(newname);
	if (r == 0)
		r = inode_fd_pair_get(fs, from, to, &pfd, &npfd);
	if (r < 0)
		goto out;
	if (!(flags & RENAME_EXCHANGE))
		inode_name_hold(fs, npfd, to, newname, &victim);
	r = neg_errno(renameat2(pfd, name, npfd, newname, flags));
	/* The victim first: renaming a link onto another link of the same file
	 * removes nothing, and the moved name then names it again. */
	release_victim(fs, to, newname, r == 0, &victim);
	if (r == 0)
		note_moved(fs, from, pfd, name, to, npfd, newname, flags);
	inode_fd_put(fs, to);
	inode_fd_put(fs, from);
	if (r == 0)
		note_entry(fs, to, newname);
	if (r == 0 && spooled && (flags & RENAME_EXCHANGE)) {
		/* Three moves through a name that never exists: a replay that
		 * carries a path through them in order ends at the other one. */
		g_autofree char *tmp = g_strconcat(path, ".slowmedia-exchange", NULL);
		wq_note_rename(fs->wq, path, tmp);
		wq_note_rename(fs->wq, newpath, path);
		wq_note_rename(fs->wq, tmp, newpath);
	} else if (r == 0 && spooled) {
		wq_note_rename(fs->wq, newpath, NULL); /* a replaced file */
		wq_note_rename(fs->wq, path, newpath);
	}
out:
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

/*
 * A readdirplus entry without attributes: nodeid 0 tells the kernel to list
 * the name (with d_ino and d_type) but make no dentry and take no lookup
 * count (fs/fuse/readdir.c, fuse_direntplus_link), so whoever wants the inode
 * later sends a LOOKUP and gets its error.
 */
static size_t add_plain_plus(fuse_req_t req, char *buf, size_t rem, struct dirent *de,
			     off_t next)
{
	struct fuse_entry_param e;

	memset(&e, 0, sizeof(e));
	e.attr.st_ino = de->d_ino;
	e.attr.st_mode = (mode_t)de->d_type << 12;
	return fuse_add_direntry_plus(req, buf, rem, de->d_name, &e, next);
}

/* Add one entry to buf; returns its size (more than rem when it does not
 * fit), or (size_t)-1 to skip it. */
static size_t add_entry(fuse_req_t req, struct sm_inode *dir, char *buf, size_t rem,
			struct dirent *de, off_t next, bool plus)
{
	struct slowmedia *fs = fs_from_req(req);
	struct fuse_entry_param e;
	size_t n;
	int r;

	if (!plus) {
		struct stat st = {.st_ino = de->d_ino, .st_mode = (mode_t)de->d_type << 12};
		return fuse_add_direntry(req, buf, rem, de->d_name, &st, next);
	}
	/* No lookup count for these: the kernel does not forget them. */
	if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
		return add_plain_plus(req, buf, rem, de, next);
	r = entry_lookup(fs, dir, de->d_name, &e);
	if (r == -ENOENT)
		return (size_t)-1; /* vanished since readdir saw it: skip */
	/*
	 * Any other failure (EMFILE, ENOMEM, EIO, ESTALE) is about reaching the
	 * inode, not about the name, which the lower readdir did return. Failing
	 * the whole call would hide every later name behind one bad inode (or
	 * behind a moment of fd pressure); dropping the name lies to ls, find and
	 * cp -a. Listed without attributes, the name stays and the error reaches
	 * whoever stats or opens it, as on a native filesystem.
	 */
	if (r < 0) {
		sm_dbg("readdirplus: %s listed without attributes: %s", de->d_name,
		       g_strerror(-r));
		return add_plain_plus(req, buf, rem, de, next);
	}
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
	int r;

	reqtrack_waits_medium(fs_from_req(req)->req);
	r = datasync ? neg_errno(fdatasync(fd)) : neg_errno(fsync(fd));

	fuse_reply_err(req, -r);
}
