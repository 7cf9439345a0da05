/* File ops: open, create, read, write_buf, flush, release, fsync, fallocate, lseek.
 * copy_file_range is deliberately not implemented: see ops.c. */
#include "control.h"
#include "fs.h"
#include "log.h"
#include "ops.h"
#include "reqtrack.h"
#include "sys.h"

#include <inttypes.h>
#include <limits.h>
#include <linux/falloc.h>
#include <string.h>

/* Read errors in the log: at most this many lines per interval per mount;
 * the count of those held back comes with the next line (and every one is
 * counted in status). */
#define READ_ERR_LOG_BURST 5
#define READ_ERR_LOG_INTERVAL_NS (60 * 1000000000ll)

static struct sm_fh *fh_of(struct fuse_file_info *fi)
{
	return (struct sm_fh *)(uintptr_t)fi->fh;
}

/*
 * Flags for the lower open: the proc path must be followed, creation is done,
 * and O_APPEND goes: the kernel already turns appends into writes at its size,
 * and the queue must place them at that offset, not at the lower file's end.
 */
static int lower_flags(int flags)
{
	return flags & ~(O_CREAT | O_EXCL | O_NOCTTY | O_NOFOLLOW | O_DIRECT | O_APPEND);
}

static void fh_attach(struct slowmedia *fs, struct sm_inode *inode, int fd,
		      struct fuse_file_info *fi)
{
	struct sm_fh *fh = g_new0(struct sm_fh, 1);

	/* O_DIRECT is not passed down (queued writes need no alignment), but its
	 * reader wants no caching: at least no readahead, which the lower page
	 * cache would otherwise start whenever a random read lands next to a
	 * cached page, an extra request that the next read waits behind. */
	if (fi->flags & O_DIRECT)
		posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
	inode_ref(fs, inode);
	__atomic_add_fetch(&inode->nopen, 1, __ATOMIC_RELAXED);
	fh->inode = inode;
	fh->fd = fd;
	fh->flags = fi->flags;
	fi->fh = (uintptr_t)fh;
	/* O_DIRECT is honoured by bypassing the page cache of the FUSE file. */
	if (fi->flags & O_DIRECT)
		fi->direct_io = 1;
}

void elide_if_gone(struct slowmedia *fs, struct sm_inode *inode)
{
	struct wq_file *wqf = inode_wqf(inode);

	if (wqf && __atomic_load_n(&inode->nopen, __ATOMIC_RELAXED) == 0)
		wq_drop_if_unlinked(fs->wq, wqf);
}

static void fh_free(struct slowmedia *fs, struct sm_fh *fh)
{
	struct sm_inode *inode = fh->inode;

	close(fh->fd);
	__atomic_sub_fetch(&inode->nopen, 1, __ATOMIC_RELAXED);
	elide_if_gone(fs, inode);
	inode_unref(fs, inode);
	g_free(fh);
}

void sm_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct slowmedia *fs = fs_from_req(req);
	struct sm_inode *inode = inode_from_ino(fs, ino);
	bool kill = devio_req_kill_suidgid();
	char path[PROC_FD_PATH_MAX];
	int64_t meta_t0;
	int pfd, fd, r;

	pfd = inode_fd_get(fs, inode);
	if (pfd < 0) {
		fuse_reply_err(req, -pfd);
		return;
	}
	meta_t0 = wq_meta_begin(fs->wq);
	fd = neg_errno(open(proc_fd_path(path, pfd), lower_flags(fi->flags)));
	wq_meta_end(fs->wq, meta_t0);
	inode_fd_put(fs, inode);
	if (fd < 0) {
		fuse_reply_err(req, -fd);
		return;
	}
	/* Only with atomic O_TRUNC (not asked for): an open that truncates. */
	r = kill ? killpriv(req, inode, fd, -1, true) : 0;
	if (r < 0) {
		close(fd);
		fuse_reply_err(req, -r);
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

	pfd = r = named_dir_fd_get(fs, dir, name);
	if (r < 0)
		goto out_err;
	r = creds_enter_create(req, &creds);
	if (r == 0) {
		fd = r = neg_errno(openat(pfd, name, lower_flags(fi->flags) | O_CREAT |
						   (fi->flags & O_EXCL), mode));
		creds_leave(&creds);
	}
	inode_fd_put(fs, dir);
	if (r < 0)
		goto out_err;
	/* The file exists now: the create must not be reported failed because
	 * the lookup by name did not work (renamed meanwhile, or out of fds for
	 * a moment); reach it through the fd we hold instead. */
	note_entry(fs, dir, name);
	r = entry_lookup(fs, dir, name, &e);
	if (r < 0)
		r = entry_from_open_fd(fs, fd, &e);
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

void read_errors_init(struct slowmedia *fs)
{
	struct sm_read_errors *e = &fs->rerr;

	pthread_mutex_init(&e->lock, NULL);
	e->log = (struct sm_ratelimit)SM_RATELIMIT_INIT(READ_ERR_LOG_INTERVAL_NS,
							READ_ERR_LOG_BURST);
}

void read_errors_destroy(struct slowmedia *fs)
{
	pthread_mutex_destroy(&fs->rerr.lock);
	g_free(fs->rerr.path);
	fs->rerr.path = NULL;
}

uint64_t read_errors_get(struct slowmedia *fs, char **path, int *error, int64_t *age_ns)
{
	struct sm_read_errors *e = &fs->rerr;
	uint64_t n;

	pthread_mutex_lock(&e->lock);
	n = e->count;
	*path = g_strdup(e->path);
	*error = e->error;
	*age_ns = n ? sm_now_ns() - e->at_ns : 0;
	pthread_mutex_unlock(&e->lock);
	return n;
}

/* The lower refused a read of fh (err: -errno): count it, and log it unless
 * the rate limit holds it back. The log line is written outside the lock. */
static void note_read_error(struct slowmedia *fs, struct sm_fh *fh, int err, size_t size,
			    off_t off)
{
	struct sm_read_errors *e = &fs->rerr;
	char proc[PROC_FD_PATH_MAX], raw[PATH_MAX], esc[512];
	const char *path = "(unknown path)";
	uint64_t missed = 0;
	ssize_t len;
	bool log;

	if (err == -EINTR || err == -EAGAIN)
		return; /* the caller's doing, not the medium's */
	len = readlink(proc_fd_path(proc, fh->fd), raw, sizeof(raw) - 1);
	if (len > 0) {
		raw[len] = '\0';
		path = raw;
	}
	pthread_mutex_lock(&e->lock);
	e->count++;
	e->error = err;
	e->at_ns = sm_now_ns();
	g_free(e->path);
	e->path = g_strdup(path);
	log = sm_ratelimit_pass(&e->log, e->at_ns, &missed);
	pthread_mutex_unlock(&e->lock);
	if (!log)
		return;
	if (missed)
		sm_err("%" PRIu64 " read error%s not logged before this one (at most %d lines in "
		       "%lld s; status counts them all)",
		       missed, missed == 1 ? "" : "s", READ_ERR_LOG_BURST,
		       READ_ERR_LOG_INTERVAL_NS / 1000000000ll);
	sm_err("read of %s failed (%zu bytes at %lld): %s", sm_log_escape(path, esc, sizeof(esc)),
	       size, (long long)off, g_strerror(-err));
}

/*
 * Always a pread into our buffer, with the queued data laid over it where
 * there is any. libfuse's fuse_reply_data from the lower fd would copy the
 * same (we do not ask for FUSE_CAP_SPLICE_WRITE), but it answers a failed
 * read itself and does not tell us: the error would go unlogged.
 */
void sm_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
	     struct fuse_file_info *fi)
{
	struct slowmedia *fs = fs_from_req(req);
	struct sm_fh *fh = fh_of(fi);
	struct wq_file *wqf = inode_wqf(fh->inode);
	char *data = g_malloc(size);
	ssize_t n;

	n = wq_read(fs->wq, wqf, fh->fd, data, size, off);
	__atomic_add_fetch(&fs->read_bytes, size, __ATOMIC_RELAXED);
	if (n < 0) {
		note_read_error(fs, fh, (int)n, size, off);
		fuse_reply_err(req, (int)-n);
	} else {
		fuse_reply_buf(req, data, (size_t)n);
	}
	g_free(data);
}

/* The write's bytes in one piece of memory; *owned is set when we allocated it. */
static ssize_t write_data(struct fuse_bufvec *in_buf, const char **data, char **owned)
{
	size_t len = fuse_buf_size(in_buf);
	struct fuse_bufvec mem = FUSE_BUFVEC_INIT(len);
	ssize_t n;

	*owned = NULL;
	if (in_buf->count == 1 && !(in_buf->buf[0].flags & FUSE_BUF_IS_FD)) {
		*data = in_buf->buf[0].mem;
		return (ssize_t)len;
	}
	*owned = g_malloc(len);
	mem.buf[0].mem = *owned;
	n = fuse_buf_copy(&mem, in_buf, 0);
	*data = *owned;
	return n;
}

static void reply_write_result(fuse_req_t req, ssize_t n)
{
	if (n > 0) /* queued: held busy before the writer hears it */
		control_busy(fs_from_req(req));
	if (n < 0)
		fuse_reply_err(req, (int)-n);
	else
		fuse_reply_write(req, (size_t)n);
}

/* The answer to a write that waited for room in the queue's admitter. */
static void parked_write_done(void *ctx, ssize_t n)
{
	reply_write_result(ctx, n);
}

/*
 * Whether the write must be on the medium before it returns (O_SYNC,
 * O_DSYNC). The kernel syncs buffered writes itself (an fsync request after
 * each), but not those of files opened O_DIRECT, which reach us direct_io.
 * Per-call RWF_SYNC/RWF_DSYNC flags are not passed to FUSE daemons.
 */
static bool write_must_sync(const struct sm_fh *fh, const struct fuse_file_info *fi)
{
	return (fh->flags & O_DIRECT) && (fi->flags & O_DSYNC);
}

void sm_write_buf(fuse_req_t req, fuse_ino_t ino, struct fuse_bufvec *in_buf, off_t off,
		  struct fuse_file_info *fi)
{
	struct slowmedia *fs = fs_from_req(req);
	struct sm_fh *fh = fh_of(fi);
	bool sync = write_must_sync(fh, fi);
	struct wq_file *wqf;
	const char *data;
	char *owned;
	ssize_t n;
	int r;

	/* Before it is queued, and answered: what the write kills. */
	r = killpriv(req, fh->inode, fh->fd, -1, devio_req_kill_suidgid());
	if (r < 0) {
		fuse_reply_err(req, -r);
		return;
	}
	wqf = wq_file_attach(fs->wq, &fh->inode->wqf, fh->inode);
	n = write_data(in_buf, &data, &owned);
	/* A sync write waits for the medium anyway: it may wait for room here. */
	if (sync)
		reqtrack_waits_medium(fs->req);
	if (n > 0)
		n = wq_write(fs->wq, wqf, fh->fd, data, (size_t)n, off,
			     sync ? NULL : parked_write_done, req);
	g_free(owned);
	if (n == WQ_PARKED)
		return;
	if (n > 0 && sync) {
		r = wq_fsync(fs->wq, wqf, fh->fd, (fi->flags & O_SYNC) != O_SYNC);
		if (r < 0)
			n = r;
	}
	reply_write_result(req, n);
}

/* What close() of the caller's descriptor would report: the lower file's own
 * close-time errors (NFS-like lowers report write errors there). Without an
 * fd to spare for the dup, there is nothing to ask: the caller's close did
 * not fail for it (the lower fd is closed at release). */
static int close_dup(int fd)
{
	int d = neg_errno(dup(fd));

	if (d < 0) {
		sm_dbg("flush: no fd for the lower close check (%s)", g_strerror(-d));
		return 0;
	}
	return neg_errno(close(d));
}

void sm_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct slowmedia *fs = fs_from_req(req);
	struct sm_fh *fh = fh_of(fi);
	struct wq_file *wqf = inode_wqf(fh->inode);
	int r = 0;

	/* close() does not wait for the medium, unless sync_close; but an error
	 * already known is the writer's to hear. */
	if (wqf && fs->opts.sched.sync_close)
		reqtrack_waits_medium(fs->req);
	if (wqf)
		r = fs->opts.sched.sync_close ? wq_flush_file(fs->wq, wqf) : wq_error(fs->wq, wqf);
	if (r == 0)
		r = close_dup(fh->fd);
	fuse_reply_err(req, -r);
}

void sm_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	fh_free(fs_from_req(req), fh_of(fi));
	fuse_reply_err(req, 0);
}

void sm_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	struct slowmedia *fs = fs_from_req(req);
	struct sm_fh *fh = fh_of(fi);
	struct wq_file *wqf = inode_wqf(fh->inode);
	int r;

	reqtrack_waits_medium(fs->req);
	if (wqf)
		r = wq_fsync(fs->wq, wqf, fh->fd, datasync);
	else
		r = datasync ? neg_errno(fdatasync(fh->fd)) : neg_errno(fsync(fh->fd));
	control_idle_check(fs);
	fuse_reply_err(req, -r);
}

void sm_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
		  struct fuse_file_info *fi)
{
	struct slowmedia *fs = fs_from_req(req);
	struct sm_fh *fh = fh_of(fi);
	struct wq_file *wqf = inode_wqf(fh->inode);
	bool kill;
	int r = 0;

	/* The kernel kills privileges before a fallocate too (file_modified),
	 * but sends no kill flag with it: a setuid or setgid file asks whether
	 * the caller could keep them. */
	kill = devio_killpriv_v2_on(fs) && __atomic_load_n(&fh->inode->sxid, __ATOMIC_RELAXED) &&
	       !creds_has_fsetid(req);
	r = killpriv(req, fh->inode, fh->fd, -1, kill);
	if (r < 0) {
		fuse_reply_err(req, -r);
		return;
	}
	/* Writes made before must be on the lower first; collapse and insert
	 * move the file's bytes, so nothing may stay queued at all. */
	reqtrack_waits_medium(fs->req);
	if (wqf)
		r = (mode & (FALLOC_FL_COLLAPSE_RANGE | FALLOC_FL_INSERT_RANGE))
			    ? wq_settle_file(fs->wq, wqf)
			    : wq_flush_file(fs->wq, wqf);
	/* Through the queue's space check: what it allocates is not there for
	 * writes the queue has acknowledged. */
	if (r == 0)
		r = wq_fallocate(fs->wq, wqf, fh->fd, mode, offset, length);
	fuse_reply_err(req, -r);
}

void sm_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence,
	      struct fuse_file_info *fi)
{
	struct slowmedia *fs = fs_from_req(req);
	struct sm_fh *fh = fh_of(fi);
	struct wq_file *wqf = inode_wqf(fh->inode);
	off_t pos;
	int r = 1;

	/* Only SEEK_DATA and SEEK_HOLE reach us (the kernel does the others).
	 * Answered from the queue's view: cp's SEEK_DATA on a file just written
	 * must not wait until all of it is on the medium. */
	if (wqf && (whence == SEEK_DATA || whence == SEEK_HOLE))
		r = wq_lseek(fs->wq, wqf, fh->fd, off, whence, &pos);
	if (r == 1)
		r = (pos = lseek(fh->fd, off, whence)) < 0 ? -errno : 0;
	if (r < 0)
		fuse_reply_err(req, -r);
	else
		fuse_reply_lseek(req, pos);
}
