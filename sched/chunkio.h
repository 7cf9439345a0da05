/* Chunk I/O on the lower filesystem: see the DESIGN comment in chunkio.c. */
#pragma once
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#define CHUNK_IOV_MAX 64
#define CHUNK_DFD_UNTRIED (-2) /* *dfd before chunk_write first needs it */

/* Write [off, off+len) from iov through fd (buffered) and *dfd (O_DIRECT,
 * opened on first need; -1 once refused), and wait until it is written. */
int chunk_write(int fd, int *dfd, struct iovec *iov, int niov, off_t off, size_t len);
/* One run of a chunk that gathers several separate runs of a file: its
 * pieces are iov[iov0 .. iov0+niov). */
struct chunk_run {
	off_t off;
	size_t len;
	int iov0, niov;
};
/* Write the runs (in offset order) through fd, buffered, then start all
 * their writeback at once and wait for it: the device gets them together,
 * not one synchronous write each. */
int chunk_write_runs(int fd, struct iovec *iov, const struct chunk_run *runs, int nruns);
/* A second open of fd's file, O_WRONLY|O_DIRECT (or -1). */
int chunk_open_direct(int fd);
/* Truncate to floor, then (if larger) extend to size: a queued series of
 * truncates has the same effect on the file's bytes. */
int chunk_truncate(int fd, off_t floor, off_t size);
/* The largest offset the filesystem allows in fd's file, from lseek (which
 * refuses positions past its s_maxbytes, where write gives EFBIG). No I/O.
 * hint (0: none) is a limit found before on the same filesystem: when it is
 * fd's too, two lseeks tell, not a search of some sixty. */
off_t chunk_max_size(int fd, off_t hint);
/* The block device under root_fd's filesystem, read-only (or -1), and its size. */
int chunk_open_bdev(int root_fd, uint64_t *size);
/* Write and wait for the block device's dirty pages in [off, off+len). */
int chunk_sync_bdev_range(int bdev_fd, uint64_t off, uint64_t len);
