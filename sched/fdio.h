/*
 * Whole writes at an offset, through short writes and EINTR, a directory's
 * fsync, and directories opened beneath another without following links:
 * the chunk writer (chunkio.c), the spool (spool*.c), the rescue directory
 * (rescue.c) and slowmediactl spool share them.
 */
#pragma once
#include <stdbool.h>
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
/* The directory `dir` (relative, no "..") beneath destfd, never through a
 * symbolic link, its components made (0700) where missing when create:
 * *out, 0 or -errno (-ELOOP or -EXDEV: a link or an escape on the way). */
int fd_open_dir_beneath(int destfd, const char *dir, bool create, int *out);
/* Whether dir (OPT=dir in messages) is a directory, not a symbolic link,
 * of this user's, that nobody else may write (harm: what others could do
 * with it, said when it is writable by them). 0 with *st (NULL is fine)
 * filled, or -errno (-ENOENT: missing) with why. */
struct stat;
int fd_check_private_dir(const char *opt, const char *dir, const char *harm,
			 struct stat *st, char *why, size_t n);
