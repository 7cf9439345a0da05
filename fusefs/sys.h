/*
 * Thin syscall wrappers: 0 (or a count) on success, -errno on failure, so that
 * errno is converted once, right at the call, and never clobbered by cleanup.
 */
#pragma once
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static inline int neg_errno(long r)
{
	return r < 0 ? -errno : (int)r;
}

static inline ssize_t neg_errno_ssize(ssize_t r)
{
	return r < 0 ? -errno : r;
}

/* "/proc/self/fd/N": reaches the file behind an O_PATH fd for calls that take no fd. */
#define PROC_FD_PATH_MAX 32
static inline const char *proc_fd_path(char buf[PROC_FD_PATH_MAX], int fd)
{
	snprintf(buf, PROC_FD_PATH_MAX, "/proc/self/fd/%d", fd);
	return buf;
}

/* CLOCK_MONOTONIC in ns. */
static inline int64_t sm_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}
