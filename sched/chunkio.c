/*
 * DESIGN: chunk I/O, the flushers' syscalls on the lower filesystem. No locks,
 * no policy, no state beyond the fds passed in: queue.c and flusher.c decide
 * what to write and when, under their lock; the calls here run without it.
 *
 * A chunk goes out in one of two ways. Its aligned middle through a second,
 * O_DIRECT open of the file (chunk_open_direct), straight from the queue's
 * buffers when they are aligned (sequential writes coalesce into such), else
 * through an aligned bounce buffer; its ragged ends buffered, each waited for
 * with sync_file_range(WAIT_BEFORE|WRITE|WAIT_AFTER). So no page of the medium
 * stays dirty or under writeback for long: a global sync(2) waits on every
 * page under writeback of a filesystem and would chase a buffered flusher to
 * the end of its file. A lower that refuses direct writes (EINVAL) gets them
 * buffered and waited for. After a direct write the chunk's range is synced
 * through the buffered fd too (see chunk_write). A chunk whose range the
 * lower's page cache holds (a file being read while it is written) is
 * written buffered instead: a direct write drops those pages, and the next
 * read of them would wait for the medium; buffered and waited for, they stay
 * cached and clean, dirty only while the chunk is written. A FUSE lower gets no second
 * open: it keeps no dirty pages to begin with (without writeback_cache a write
 * goes to its daemon before it returns), and a second handle is a second open
 * file for that daemon, which may keep state per handle: fusefat keeps its own
 * copy of the file's directory entry in each, and writes through two of them
 * corrupt the file (a cluster chain from each). Every function returns 0 (or
 * a value) or -errno.
 */
#include "chunkio.h"
#include "fdio.h"
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/vfs.h>
#include <unistd.h>

#define FLUSH_IOV_MAX CHUNK_IOV_MAX
#define DIRECT_ALIGN 4096
#define DIRECT_MIN_BYTES (64u << 10) /* smaller chunks go buffered, whole (write_chunk_once) */
#define FUSE_SUPER_MAGIC 0x65735546
/* cachestat(2), Linux 6.5; the same number on every architecture. The C
 * library and the kernel headers here predate it. */
#ifndef SYS_cachestat
#define SYS_cachestat 451
#endif

struct cachestat_range_arg {
	uint64_t off, len;
};

struct cachestat_result {
	uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted;
};

/* /dev/block/M:m where udev made it, else /dev/DEVNAME from sysfs; checked to
 * be that device. -1 when there is none. */
static int open_dev_node(dev_t dev)
{
	char path[PATH_MAX], line[256];
	struct stat st;
	FILE *f;
	int fd;

	snprintf(path, sizeof(path), "/dev/block/%u:%u", major(dev), minor(dev));
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		snprintf(path, sizeof(path), "/sys/dev/block/%u:%u/uevent", major(dev), minor(dev));
		f = fopen(path, "re");
		if (!f)
			return -1;
		path[0] = '\0';
		while (fgets(line, sizeof(line), f))
			if (!strncmp(line, "DEVNAME=", 8)) {
				line[strcspn(line, "\n")] = '\0';
				snprintf(path, sizeof(path), "/dev/%s", line + 8);
			}
		fclose(f);
		fd = path[0] ? open(path, O_RDONLY | O_CLOEXEC) : -1;
	}
	if (fd >= 0 && (fstat(fd, &st) < 0 || !S_ISBLK(st.st_mode) || st.st_rdev != dev)) {
		close(fd);
		fd = -1;
	}
	return fd;
}

/* The block device the lower filesystem lives on, when there is one we may
 * open: its page cache holds the filesystem's dirty metadata. */
int chunk_open_bdev(int root_fd, uint64_t *size)
{
	struct stat st;
	off_t end;
	int fd;

	if (fstat(root_fd, &st) < 0 || major(st.st_dev) == 0)
		return -1; /* tmpfs, FUSE, NFS...: no block device */
	fd = open_dev_node(st.st_dev);
	if (fd < 0) {
		sm_dbg("no block device node for %u:%u: metadata is flushed by syncfs alone",
		       major(st.st_dev), minor(st.st_dev));
		return -1;
	}
	end = lseek(fd, 0, SEEK_END);
	if (end <= 0) {
		close(fd);
		return -1;
	}
	*size = (uint64_t)end;
	return fd;
}

/*
 * A second, O_DIRECT open of the file: the aligned middle of each chunk goes
 * through it, so no page cache pages of the medium are dirty or under
 * writeback for long. A global sync(2) waits on every page under writeback of
 * a filesystem and would chase a buffered flusher to the end of its file.
 * Not on a FUSE lower (see the top): -1, as if refused.
 */
int chunk_open_direct(int fd)
{
	struct statfs sf;
	char proc[32];

	if (fstatfs(fd, &sf) == 0 && sf.f_type == FUSE_SUPER_MAGIC)
		return -1;
	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	return open(proc, O_WRONLY | O_DIRECT | O_CLOEXEC);
}

/* The largest offset the lower filesystem allows in this file: lseek refuses
 * positions past its s_maxbytes (per inode on ext4: block-mapped files have a
 * lower limit), which is also where its write() gives EFBIG. No I/O. */
off_t chunk_max_size(int fd, off_t hint)
{
	off_t lo = 0, hi = INT64_MAX, keep = lseek(fd, 0, SEEK_CUR);

	if (lseek(fd, hi, SEEK_SET) == hi)
		goto out;
	if (hint > 0 && hint < INT64_MAX && lseek(fd, hint, SEEK_SET) == hint &&
	    lseek(fd, hint + 1, SEEK_SET) < 0) {
		hi = hint;
		goto out;
	}
	while (lo < hi) {
		off_t mid = lo + (hi - lo) / 2 + 1;
		if (lseek(fd, mid, SEEK_SET) == mid)
			lo = mid;
		else
			hi = mid - 1;
	}
	hi = lo;
out:
	if (keep >= 0)
		lseek(fd, keep, SEEK_SET);
	return hi;
}

/* Write fd's dirty pages in [off, off+len) and wait until they are written. */
static int wait_written(int fd, off_t off, off_t len)
{
	return sync_file_range(fd, off, len,
			       SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
				       SYNC_FILE_RANGE_WAIT_AFTER) < 0
		       ? -errno
		       : 0;
}

static int write_buffered(int fd, struct iovec *iov, int niov, off_t off, size_t len)
{
	int r = fd_pwritev_all(fd, iov, niov, off);

	return r == 0 && len ? wait_written(fd, off, (off_t)len) : r;
}

/* Whether the page cache holds any page of fd's [off, off+len). False when
 * the kernel cannot tell (before 6.5): the direct write, as before. */
static bool range_cached(int fd, off_t off, size_t len)
{
	struct cachestat_range_arg range = {(uint64_t)off, len};
	struct cachestat_result cs;

	if (syscall(SYS_cachestat, fd, &range, &cs, 0) < 0)
		return false;
	return cs.nr_cache > 0;
}

/* Whether the chunk's aligned middle can go out from the queue's own buffers:
 * it starts aligned and every piece is aligned in memory and length (the last
 * piece's length excepted). Sequential writes coalesce into such chunks. */
static bool direct_ready(const struct iovec *iov, int niov, off_t off)
{
	if (off % DIRECT_ALIGN)
		return false;
	for (int i = 0; i < niov; i++)
		if ((uintptr_t)iov[i].iov_base % DIRECT_ALIGN ||
		    (i < niov - 1 && iov[i].iov_len % DIRECT_ALIGN))
			return false;
	return true;
}

/* Aligned chunk: the middle straight from the queue's buffers, the tail buffered. */
static int write_chunk_aligned(int fd, int dfd, struct iovec *iov, int niov, off_t off,
			       size_t len)
{
	size_t mid = len / DIRECT_ALIGN * DIRECT_ALIGN, tail = len - mid;
	struct iovec last = iov[niov - 1];
	int r;

	iov[niov - 1].iov_len -= tail;
	r = fd_pwritev_all(dfd, iov, iov[niov - 1].iov_len ? niov : niov - 1, off);
	if (r == 0 && tail)
		r = write_buffered(fd,
				   &(struct iovec){(char *)last.iov_base + last.iov_len - tail, tail},
				   1, off + (off_t)mid, tail);
	return r;
}

/* The aligned middle of a chunk through the O_DIRECT fd, the ragged ends
 * buffered and waited for; everything buffered when there is no middle. */
static int write_chunk_once(int fd, int *dfd, struct iovec *iov, int niov, off_t off,
			    size_t len)
{
	off_t end = off + (off_t)len;
	off_t a0 = (off + DIRECT_ALIGN - 1) / DIRECT_ALIGN * DIRECT_ALIGN;
	off_t a1 = end / DIRECT_ALIGN * DIRECT_ALIGN;
	char *bounce;
	size_t pos = 0;
	int r = 0;

	/* A small chunk goes buffered, whole: its ragged ends would each be a
	 * waited write of their own beside the direct middle, three round trips
	 * to the device for what one takes. */
	if (len < DIRECT_MIN_BYTES)
		return write_buffered(fd, iov, niov, off, len);
	if (a1 - a0 >= DIRECT_ALIGN && *dfd == CHUNK_DFD_UNTRIED)
		*dfd = chunk_open_direct(fd);
	if (*dfd < 0 || a1 - a0 < DIRECT_ALIGN || range_cached(fd, a0, (size_t)(a1 - a0)))
		return write_buffered(fd, iov, niov, off, len);
	if (direct_ready(iov, niov, off)) {
		/* fd_pwritev_all advances the iovecs it is given: work on a copy */
		struct iovec copy[FLUSH_IOV_MAX];
		memcpy(copy, iov, sizeof(*iov) * (size_t)niov);
		r = write_chunk_aligned(fd, *dfd, copy, niov, off, len);
		if (r != -EINVAL)
			return r;
	}
	if (posix_memalign((void **)&bounce, DIRECT_ALIGN, len) != 0)
		return write_buffered(fd, iov, niov, off, len);
	for (int i = 0; i < niov; i++) {
		memcpy(bounce + pos, iov[i].iov_base, iov[i].iov_len);
		pos += iov[i].iov_len;
	}
	if (a0 > off)
		r = write_buffered(fd, &(struct iovec){bounce, (size_t)(a0 - off)}, 1, off,
				   (size_t)(a0 - off));
	if (r == 0)
		r = fd_pwritev_all(*dfd, &(struct iovec){bounce + (a0 - off), (size_t)(a1 - a0)}, 1,
			      a0);
	if (r == -EINVAL) /* the lower filesystem refuses this direct write */
		r = write_buffered(fd, &(struct iovec){bounce + (a0 - off), (size_t)(a1 - a0)},
				   1, a0, (size_t)(a1 - a0));
	if (r == 0 && end > a1)
		r = write_buffered(fd, &(struct iovec){bounce + (a1 - off), (size_t)(end - a1)},
				   1, a1, (size_t)(end - a1));
	free(bounce);
	return r;
}

/* A direct write the filesystem quietly turned into a buffered one (ext2
 * does, into blocks a failed write allocated) returns success without its
 * writeback's result; a medium that is gone would then "take" every retry.
 * So the chunk's range is synced through the buffered fd too, which also
 * reports writeback errors of the file since that fd last looked. Nearly free
 * when the direct write really went direct: no pages to write. */
int chunk_write(int fd, int *dfd, struct iovec *iov, int niov, off_t off, size_t len)
{
	int r = write_chunk_once(fd, dfd, iov, niov, off, len);

	if (r == 0 && *dfd >= 0)
		r = wait_written(fd, off, (off_t)len);
	return r;
}

/* Scattered small writes (a database, fio's random 4 KiB) make runs of a page
 * or two: one waited write each would give the device a queue depth of one.
 * Buffered, they are dirty only until the sync_file_range over their span,
 * which starts them together and waits for them; pages in the gaps are not
 * ours to be dirty (every write of the file goes through the queue). */
int chunk_write_runs(int fd, struct iovec *iov, const struct chunk_run *runs, int nruns)
{
	const struct chunk_run *last = &runs[nruns - 1];
	off_t span = last->off + (off_t)last->len - runs[0].off;

	for (int i = 0; i < nruns; i++) {
		int r = fd_pwritev_all(fd, iov + runs[i].iov0, runs[i].niov, runs[i].off);
		if (r < 0)
			return r;
	}
	return wait_written(fd, runs[0].off, span);
}

int chunk_truncate(int fd, off_t floor, off_t size)
{
	if (ftruncate(fd, floor) < 0)
		return -errno;
	if (size != floor && ftruncate(fd, size) < 0)
		return -errno;
	return 0;
}

int chunk_sync_bdev_range(int bdev_fd, uint64_t off, uint64_t len)
{
	return wait_written(bdev_fd, (off_t)off, (off_t)len);
}
