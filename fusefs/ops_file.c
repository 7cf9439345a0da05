/* File ops: open, create, read, write_buf, flush, release, fsync, fallocate, lseek,
 * copy_file_range. */
#include "fs.h"
#include "log.h"
#include "ops.h"
#include "sys.h"

#include <string.h>

static struct sm_fh *fh_of(struct fuse_file_info *fi)
{
	return (struct sm_fh *)(uintptr_t)fi->fh;
}

/* Flags for the lower open: the proc path must be followed, creation is done. */
static int lower_flags(int flags)
{
	return flags & ~(O_CREAT | O_EXCL | O_NOCTTY | O_NOFOLLOW | O_DIRECT);
}

static void fh_attach(struct slowmedia *fs, struct sm_inode *inode, int fd,
		      struct fuse_file_info *fi)
{
	struct sm_fh *fh = g_new0(struct sm_fh, 1);

	inode_ref(fs, inode);
	fh->inode = inode;
	fh->fd = fd;
	fh->flags = fi->flags;
	fi->fh = (uintptr_t)fh;
	/* O_DIRECT is honoured by bypassing the page cache of the FUSE file. */
	if (fi->flags & O_DIRECT)
		fi->direct_io = 1;
}

static void fh_free(struct slowmedia *fs, struct sm_fh *fh)
{
	close(fh->fd);
	inode_unref(fs, fh->inode);
	g_free(fh);
}

void sm_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct slowmedia *fs = fs_from_req(req);
	struct sm_inode *inode = inode_from_ino(fs, ino);
	char path[PROC_FD_PATH_MAX];
	int pfd, fd;

	pfd = inode_fd_get(fs, inode);
	if (pfd < 0) {
		fuse_reply_err(req, -pfd);
		return;
	}
	fd = neg_errno(open(proc_fd_path(path, pfd), lower_flags(fi->flags)));
	inode_fd_put(fs, inode);
	if (fd < 0) {
		fuse_reply_err(req, -fd);
		return;
	}
	fh_attach(fs, inode, fd, fi);
	if (fuse_reply_open(req, fi) == -ENOENT)
		fh_free(fs, fh_of(fi)); /* interrupted opener: no release will come */
}

void sm_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
	       struct fuse_file_info *fi)
{
	struct slowmedia *fs = fs_from_req(req);
	struct sm_inode *dir = inode_from_ino(fs, parent);
	struct fuse_entry_param e;
	struct sm_creds creds;
	int pfd, fd = -1, r;

	r = check_name(name);
	if (r < 0)
		goto out_err;
	pfd = inode_fd_get(fs, dir);
	if (pfd < 0) {
		r = pfd;
		goto out_err;
	}
	r = creds_enter(req, &creds);
	if (r == 0) {
		fd = r = neg_errno(openat(pfd, name, lower_flags(fi->flags) | O_CREAT |
						   (fi->flags & O_EXCL), mode));
		creds_leave(&creds);
	}
	inode_fd_put(fs, dir);
	if (r < 0)
		goto out_err;
	r = entry_lookup(fs, dir, name, &e);
	if (r < 0)
		goto out_close;
	fh_attach(fs, inode_from_ino(fs, e.ino), fd, fi);
	/* The attach holds its own reference; an interrupted create still needs the
	 * lookup count given back, which the kernel does by forget. */
	if (fuse_reply_create(req, &e, fi) == -ENOENT)
		fh_free(fs, fh_of(fi));
	return;
out_close:
	close(fd);
out_err:
	fuse_reply_err(req, -r);
}

void sm_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
	     struct fuse_file_info *fi)
{
	struct fuse_bufvec buf = FUSE_BUFVEC_INIT(size);

	buf.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
	buf.buf[0].fd = fh_of(fi)->fd;
	buf.buf[0].pos = off;
	fuse_reply_data(req, &buf, FUSE_BUF_SPLICE_MOVE);
}

void sm_write_buf(fuse_req_t req, fuse_ino_t ino, struct fuse_bufvec *in_buf, off_t off,
		  struct fuse_file_info *fi)
{
	struct fuse_bufvec out = FUSE_BUFVEC_INIT(fuse_buf_size(in_buf));
	ssize_t n;

	out.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
	out.buf[0].fd = fh_of(fi)->fd;
	out.buf[0].pos = off;
	n = fuse_buf_copy(&out, in_buf, 0);
	if (n < 0)
		fuse_reply_err(req, (int)-n);
	else
		fuse_reply_write(req, (size_t)n);
}

void sm_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	/* close() of a duplicate gives the lower filesystem its close-time say. */
	int r = neg_errno(close(dup(fh_of(fi)->fd)));

	fuse_reply_err(req, -r);
}

void sm_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	fh_free(fs_from_req(req), fh_of(fi));
	fuse_reply_err(req, 0);
}

void sm_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	int fd = fh_of(fi)->fd;
	int r = datasync ? neg_errno(fdatasync(fd)) : neg_errno(fsync(fd));

	fuse_reply_err(req, -r);
}

void sm_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
		  struct fuse_file_info *fi)
{
	int r = neg_errno(fallocate(fh_of(fi)->fd, mode, offset, length));

	fuse_reply_err(req, -r);
}

void sm_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence,
	      struct fuse_file_info *fi)
{
	off_t r = lseek(fh_of(fi)->fd, off, whence);

	if (r < 0)
		fuse_reply_err(req, errno);
	else
		fuse_reply_lseek(req, r);
}

void sm_copy_file_range(fuse_req_t req, fuse_ino_t ino_in, off_t off_in,
			struct fuse_file_info *fi_in, fuse_ino_t ino_out, off_t off_out,
			struct fuse_file_info *fi_out, size_t len, int flags)
{
	ssize_t n = copy_file_range(fh_of(fi_in)->fd, &off_in, fh_of(fi_out)->fd, &off_out,
				    len, (unsigned)flags);

	if (n < 0)
		fuse_reply_err(req, errno);
	else
		fuse_reply_write(req, (size_t)n);
}
