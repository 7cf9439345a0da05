/* Entry and attribute ops: lookup, forget, getattr, setattr, statfs, readlink. */
#include "control.h"
#include "fs.h"
#include "ops.h"
#include "log.h"
#include "sys.h"

#include <limits.h>
#include <string.h>
#include <sys/statvfs.h>

int check_name(const char *name)
{
	/* The kernel only stops names over 1024 bytes; the lower rule is NAME_MAX. */
	return strlen(name) > NAME_MAX ? -ENAMETOOLONG : 0;
}

int named_dir_fd_get(struct slowmedia *fs, struct sm_inode *dir, const char *name)
{
	int r = check_name(name);

	return r < 0 ? r : inode_fd_get(fs, dir);
}

int inode_fd_pair_get(struct slowmedia *fs, struct sm_inode *a, struct sm_inode *b, int *fa,
		      int *fb)
{
	*fa = inode_fd_get(fs, a);
	if (*fa < 0)
		return *fa;
	*fb = inode_fd_get(fs, b);
	if (*fb < 0) {
		inode_fd_put(fs, a);
		return *fb;
	}
	return 0;
}

int entry_path(struct slowmedia *fs, struct sm_inode *dir, const char *name, char *path,
	       size_t size)
{
	char proc[PROC_FD_PATH_MAX];
	ssize_t n;

	if (inode_path_get(fs, dir, proc) < 0)
		return -1;
	n = readlink(proc, path, size);
	inode_fd_put(fs, dir);
	if (n <= 0 || (size_t)n + 1 + strlen(name) >= size)
		return -1;
	snprintf(path + n, size - (size_t)n, "%s%s", path[n - 1] == '/' ? "" : "/", name);
	return 0;
}

void note_entry(struct slowmedia *fs, struct sm_inode *dir, const char *name)
{
	char path[PATH_MAX];

	if (entry_path(fs, dir, name, path, sizeof(path)) == 0)
		wq_note_entry(fs->wq, path);
}

void reply_new_entry(fuse_req_t req, struct slowmedia *fs, struct sm_inode *dir,
		     const char *name, int r)
{
	struct fuse_entry_param e;

	if (r == 0)
		note_entry(fs, dir, name);
	if (r == 0)
		r = entry_lookup(fs, dir, name, &e);
	if (r < 0)
		fuse_reply_err(req, -r);
	else
		fuse_reply_entry(req, &e);
}

/*
 * Stat the lower file (through an open fd when ofd >= 0, else the O_PATH fd)
 * with the queue's view laid over. A chunk landing between the lower stat and
 * the fix would leave a stale size, which the kernel would keep and place
 * O_APPEND writes by: retry then.
 */
static int stat_queued(struct slowmedia *fs, struct sm_inode *inode, int fd, int ofd,
		       struct stat *st)
{
	struct wq_file *wqf = inode_wqf(inode);

	for (;;) {
		uint64_t seq = wqf ? wq_seq(fs->wq, wqf) : 0;
		int r = ofd >= 0 ? neg_errno(fstat(ofd, st))
				 : neg_errno(fstatat(fd, "", st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW));
		if (r < 0 || !wqf || wq_fix_stat(fs->wq, wqf, st, seq))
			return r;
	}
}

static int inode_stat(struct slowmedia *fs, struct sm_inode *inode, int ofd,
		      struct stat *st)
{
	int fd = inode_fd_get(fs, inode);
	int64_t meta_t0;
	int r;

	if (fd < 0)
		return fd;
	meta_t0 = wq_meta_begin(fs->wq);
	r = stat_queued(fs, inode, fd, ofd, st);
	wq_meta_end(fs->wq, meta_t0);
	inode_fd_put(fs, inode);
	if (r == 0)
		inode_note_mode(inode, st->st_mode);
	return r;
}

/* Fill e for the lower file behind the O_PATH fd (taken over) whose stat is
 * in e->attr, found as name in parent (NULL: through an open file): one
 * lookup count on its inode. */
static int entry_fill(struct slowmedia *fs, int fd, struct sm_inode *parent, const char *name,
		      struct fuse_entry_param *e)
{
	struct sm_inode *inode;
	int r;

	inode_find_or_add(fs, fd, &e->attr, parent, name, &inode);
	inode_note_mode(inode, e->attr.st_mode);
	if (inode_wqf(inode)) { /* the kernel takes the size from here too */
		r = inode_stat(fs, inode, -1, &e->attr);
		if (r < 0) {
			inode_forget(fs, inode, 1);
			return r;
		}
	}
	e->ino = (uintptr_t)inode;
	e->attr_timeout = fs->timeout;
	e->entry_timeout = fs->timeout;
	return 0;
}

int entry_lookup(struct slowmedia *fs, struct sm_inode *parent, const char *name,
		 struct fuse_entry_param *e)
{
	int64_t meta_t0;
	int pfd, fd, r;

	memset(e, 0, sizeof(*e));
	pfd = named_dir_fd_get(fs, parent, name);
	if (pfd < 0)
		return pfd;
	/* Directory and inode blocks are reads of the medium too: gate them, or a
	 * path walk pays one write chunk per block it needs. */
	meta_t0 = wq_meta_begin(fs->wq);
	fd = neg_errno(openat(pfd, name, O_PATH | O_NOFOLLOW));
	inode_fd_put(fs, parent);
	r = fd < 0 ? fd : neg_errno(fstatat(fd, "", &e->attr, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW));
	wq_meta_end(fs->wq, meta_t0);
	if (fd < 0)
		return fd;
	if (r < 0) {
		close(fd);
		return r;
	}
	return entry_fill(fs, fd, parent, name, e);
}

int entry_from_open_fd(struct slowmedia *fs, int ofd, struct fuse_entry_param *e)
{
	char path[PROC_FD_PATH_MAX];
	int fd, r;

	memset(e, 0, sizeof(*e));
	fd = neg_errno(open(proc_fd_path(path, ofd), O_PATH | O_CLOEXEC));
	if (fd < 0)
		return fd;
	r = neg_errno(fstat(fd, &e->attr));
	if (r < 0) {
		close(fd);
		return r;
	}
	return entry_fill(fs, fd, NULL, NULL, e); /* no name known: its fd is pinned */
}

void sm_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct slowmedia *fs = fs_from_req(req);
	struct fuse_entry_param e;
	int r = entry_lookup(fs, inode_from_ino(fs, parent), name, &e);

	if (r == -ENOENT) {
		/* A negative entry: cached by the kernel for the entry timeout. */
		e.ino = 0;
		e.entry_timeout = fs->timeout;
		fuse_reply_entry(req, &e);
	} else if (r < 0) {
		fuse_reply_err(req, -r);
	} else {
		fuse_reply_entry(req, &e);
	}
}

void sm_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	struct slowmedia *fs = fs_from_req(req);

	inode_forget(fs, inode_from_ino(fs, ino), nlookup);
	fuse_reply_none(req);
}

void sm_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *f)
{
	struct slowmedia *fs = fs_from_req(req);

	for (size_t i = 0; i < count; i++)
		inode_forget(fs, inode_from_ino(fs, f[i].ino), f[i].nlookup);
	fuse_reply_none(req);
}

void sm_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct slowmedia *fs = fs_from_req(req);
	struct stat st;
	int r;
	struct sm_inode *inode = inode_from_ino(fs, ino);

	r = inode_stat(fs, inode, fi && fi->fh ? ((struct sm_fh *)(uintptr_t)fi->fh)->fd : -1,
		       &st);
	if (r < 0)
		fuse_reply_err(req, -r);
	else
		fuse_reply_attr(req, &st, fs->timeout);
}

static int set_times(struct slowmedia *fs, struct sm_inode *inode, int fd, int ofd,
		     const struct stat *attr, int valid)
{
	struct timespec tv[2] = {{.tv_nsec = UTIME_OMIT}, {.tv_nsec = UTIME_OMIT}};
	char path[PROC_FD_PATH_MAX];
	struct wq_file *wqf = inode_wqf(inode);

	if (valid & FUSE_SET_ATTR_ATIME_NOW)
		tv[0].tv_nsec = UTIME_NOW;
	else if (valid & FUSE_SET_ATTR_ATIME)
		tv[0] = attr->st_atim;
	if (valid & FUSE_SET_ATTR_MTIME_NOW)
		tv[1].tv_nsec = UTIME_NOW;
	else if (valid & FUSE_SET_ATTR_MTIME)
		tv[1] = attr->st_mtim;
	/* Queued writes must not bump these times when they land. */
	if (wqf) {
		int q = wq_set_times(fs->wq, wqf, ofd >= 0 ? ofd : fd, tv);
		if (q != 1)
			return q; /* queued (0), or refused */
	}
	if (ofd >= 0)
		return neg_errno(futimens(ofd, tv));
	if (S_ISLNK(inode->type))
		return neg_errno(utimensat(fd, "", tv, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW));
	return neg_errno(utimensat(AT_FDCWD, proc_fd_path(path, fd), tv, 0));
}

/* Apply one setattr request: fd is the O_PATH fd, ofd an open fd or -1; kill:
 * the kernel's FATTR_KILL_SUIDGID. (A chown kills on the lower by itself.) */
static int do_setattr(fuse_req_t req, struct sm_inode *inode, int fd, int ofd,
		      const struct stat *attr, int valid, bool kill)
{
	struct slowmedia *fs = fs_from_req(req);
	struct wq_file *wqf = inode_wqf(inode);
	char path[PROC_FD_PATH_MAX];
	int r = 0;

	if (valid & FUSE_SET_ATTR_MODE) {
		r = ofd >= 0 ? neg_errno(fchmod(ofd, attr->st_mode))
			     : neg_errno(chmod(proc_fd_path(path, fd), attr->st_mode));
		if (r < 0)
			return r;
	}
	if (valid & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)) {
		uid_t uid = (valid & FUSE_SET_ATTR_UID) ? attr->st_uid : (uid_t)-1;
		gid_t gid = (valid & FUSE_SET_ATTR_GID) ? attr->st_gid : (gid_t)-1;
		r = neg_errno(fchownat(fd, "", uid, gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW));
		if (r < 0)
			return r;
	}
	/* Before the truncate, which may be queued: what it kills. */
	if (valid & FUSE_SET_ATTR_SIZE)
		r = killpriv(req, inode, ofd, fd, kill);
	if (r < 0)
		return r;
	if (valid & FUSE_SET_ATTR_SIZE)
		r = wqf ? wq_truncate(fs->wq, wqf, ofd >= 0 ? ofd : fd, attr->st_size) : 1;
	if (r < 0)
		return r;
	if (r == 1) { /* nothing queued: truncate the lower file now */
		r = ofd >= 0 ? neg_errno(ftruncate(ofd, attr->st_size))
			     : neg_errno(truncate(proc_fd_path(path, fd), attr->st_size));
		if (r < 0)
			return r;
	}
	if (valid & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME))
		r = set_times(fs, inode, fd, ofd, attr, valid);
	return r;
}

void sm_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int valid,
		       struct fuse_file_info *fi)
{
	struct slowmedia *fs = fs_from_req(req);
	struct sm_inode *inode = inode_from_ino(fs, ino);
	int ofd = fi && fi->fh ? ((struct sm_fh *)(uintptr_t)fi->fh)->fd : -1;
	bool kill = devio_req_kill_suidgid();
	struct stat st;
	int fd, r;

	fd = inode_fd_get(fs, inode);
	if (fd < 0) {
		fuse_reply_err(req, -fd);
		return;
	}
	r = do_setattr(req, inode, fd, ofd, attr, valid, kill);
	if (r == 0)
		r = stat_queued(fs, inode, fd, -1, &st);
	inode_fd_put(fs, inode);
	if (r == 0)
		inode_note_mode(inode, st.st_mode);
	if (r < 0) {
		fuse_reply_err(req, -r);
		return;
	}
	if (inode_wqf(inode) && (valid & (FUSE_SET_ATTR_SIZE | FUSE_SET_ATTR_ATIME |
					  FUSE_SET_ATTR_MTIME)))
		control_busy(fs); /* a truncate or times may be queued */
	fuse_reply_attr(req, &st, fs->timeout);
}

void sm_readlink(fuse_req_t req, fuse_ino_t ino)
{
	struct slowmedia *fs = fs_from_req(req);
	struct sm_inode *inode = inode_from_ino(fs, ino);
	char buf[PATH_MAX + 1];
	ssize_t n;
	int fd = inode_fd_get(fs, inode);

	if (fd < 0) {
		fuse_reply_err(req, -fd);
		return;
	}
	n = neg_errno_ssize(readlinkat(fd, "", buf, sizeof(buf)));
	inode_fd_put(fs, inode);
	if (n < 0) {
		fuse_reply_err(req, (int)-n);
	} else if (n == sizeof(buf)) {
		fuse_reply_err(req, ENAMETOOLONG);
	} else {
		buf[n] = '\0';
		fuse_reply_readlink(req, buf);
	}
}

void sm_access(fuse_req_t req, fuse_ino_t ino, int mask)
{
	struct slowmedia *fs = fs_from_req(req);
	struct sm_inode *inode = inode_from_ino(fs, ino);
	char path[PROC_FD_PATH_MAX];
	int r = inode_path_get(fs, inode, path);

	if (r == 0) {
		r = neg_errno(faccessat(AT_FDCWD, path, mask, AT_EACCESS));
		inode_fd_put(fs, inode);
	}
	fuse_reply_err(req, -r);
}

void sm_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct slowmedia *fs = fs_from_req(req);
	struct statvfs sv;

	if (fstatvfs(fs->root_fd, &sv) < 0) {
		fuse_reply_err(req, errno);
		return;
	}
	wq_fix_statvfs(fs->wq, &sv);
	fuse_reply_statfs(req, &sv);
}
