#include "fdio.h"

#include <errno.h>
#include <fcntl.h>
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
