/*
 * Whole writes at an offset, through short writes and EINTR, and a
 * directory's fsync: the chunk writer (chunkio.c), the spool (spool*.c) and
 * slowmediactl spool share them.
 */
#pragma once
#include <stddef.h>
#include <sys/types.h>
#include <sys/uio.h>

/* Write every byte of iov[0..niov) at off: 0, or -errno (-EIO if the file
 * takes nothing). The iovecs are advanced as they are written: pass a copy
 * to keep them. */
int fd_pwritev_all(int fd, struct iovec *iov, int niov, off_t off);
/* The same for one buffer. */
int fd_pwrite_all(int fd, const void *buf, size_t len, off_t off);
/* fsync the directory dirfd names (it may be O_PATH or AT_FDCWD: a real
 * open of it is synced): 0 or -errno. */
int fd_fsync_dir(int dirfd);
