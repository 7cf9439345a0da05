#include "fdio.h"

#include <errno.h>
#include <fcntl.h>
#include <glib.h>
#include <stdio.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

int fd_pwritev_all(int fd, struct iovec *iov, int niov, off_t off)
{
	while (niov > 0) {
		ssize_t n;

		if (!iov->iov_len) { /* nothing to write: not a file that takes nothing */
			iov++;
			niov--;
			continue;
		}
		n = pwritev(fd, iov, niov, off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EIO;
		off += n;
		while (niov > 0 && (size_t)n >= iov->iov_len) {
			n -= (ssize_t)iov->iov_len;
			iov++;
			niov--;
		}
		if (niov > 0) {
			iov->iov_base = (char *)iov->iov_base + n;
			iov->iov_len -= (size_t)n;
		}
	}
	return 0;
}

int fd_pwrite_all(int fd, const void *buf, size_t len, off_t off)
{
	struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};

	return fd_pwritev_all(fd, &iov, 1, off);
}

int fd_fsync_dir(int dirfd)
{
	int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC), err = 0;

	if (fd < 0)
		return -errno;
	if (fsync(fd) < 0)
		err = -errno;
	close(fd);
	return err;
}

/* The directory `dir` (a relative path spj_path_ok allows) beneath destfd,
 * made (0700) where missing when create: openat2 confined beneath, without
 * symlinks; else (no openat2, or to make what is missing) one component at
 * a time, each opened with O_NOFOLLOW. */
int fd_open_dir_beneath(int destfd, const char *dir, bool create, int *out)
{
	g_auto(GStrv) parts = NULL;
	int fd;

#ifdef SYS_openat2
	struct open_how how = {
	    .flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC,
	    .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
	};

	fd = (int)syscall(SYS_openat2, destfd, dir, &how, sizeof(how));
	if (fd >= 0) {
		*out = fd;
		return 0;
	}
	if (errno != ENOSYS && errno != EPERM && errno != E2BIG &&
	    !(errno == ENOENT && create))
		return -errno;
#endif
	parts = g_strsplit(dir, "/", -1);
	fd = dup(destfd);
	if (fd < 0)
		return -errno;
	for (char **p = parts; *p; p++) {
		int nfd;

		if (create && mkdirat(fd, *p, 0700) < 0 && errno != EEXIST) {
			int err = -errno;
			close(fd);
			return err;
		}
		nfd = openat(fd, *p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		close(fd);
		if (nfd < 0)
			return -errno;
		fd = nfd;
	}
	*out = fd;
	return 0;
}

int fd_check_private_dir(const char *opt, const char *dir, const char *harm,
			 struct stat *out, char *why, size_t n)
{
	struct stat st;

	if (lstat(dir, &st) < 0) {
		snprintf(why, n, "%s=%s: %s", opt, dir, g_strerror(errno));
		return -errno;
	}
	if (!S_ISDIR(st.st_mode)) {
		snprintf(why, n, "%s=%s: not a directory", opt, dir);
		return -ENOTDIR;
	}
	if (st.st_mode & (S_IWGRP | S_IWOTH)) {
		snprintf(why, n, "%s=%s: writable by others (mode %04o): %s; chmod 0700 it", opt,
			 dir, (unsigned)(st.st_mode & 07777), harm);
		return -EPERM;
	}
	if (st.st_uid != geteuid()) {
		snprintf(why, n, "%s=%s: owned by uid %u, not by this daemon's uid %u", opt, dir,
			 (unsigned)st.st_uid, (unsigned)geteuid());
		return -EPERM;
	}
	if (out)
		*out = st;
	return 0;
}
