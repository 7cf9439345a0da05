/* Parity cases: access(2) as root, mmap, O_DIRECT, locks, statfs. */
#include "parity.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <sys/wait.h>

#define PAGE 4096

static void access_as_root(void)
{
	put_file("rw", "x", 1, 0644);
	put_file("exec", "x", 1, 0744);
	put_file("none", "x", 1, 0000);
	T(chmod("none", 0));
	T(mkdir("dir", 0644));
	T(access("rw", R_OK | W_OK));
	T(access("rw", X_OK)); /* root needs some x bit to execute */
	T(access("exec", X_OK));
	T(access("none", R_OK | W_OK));
	T(access("none", X_OK));
	T(access("dir", X_OK)); /* search: root may */
	T(faccessat(AT_FDCWD, "rw", X_OK, AT_EACCESS));
	T(access("missing", F_OK));
	T(access("rw/x", F_OK));
}

static void mmap_shared_write(void)
{
	char *p;
	int fd = TF(open("f", O_CREAT | O_RDWR, 0644));

	T(ftruncate(fd, 2 * PAGE));
	p = mmap(NULL, 2 * PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	tr("mmap = %s", p == MAP_FAILED ? strerrorname_np(errno) : "ok");
	if (p != MAP_FAILED) {
		memcpy(p + 10, "mapped", 6);
		memcpy(p + PAGE + 1, "second page", 11);
		T(msync(p, 2 * PAGE, MS_SYNC));
		T(munmap(p, 2 * PAGE));
	}
	trace_pread(fd, 16, 8);
	trace_pread(fd, 16, PAGE);
	T(close(fd));
	trace_content("f");
}

static void mmap_sees_writes(void)
{
	char *p;
	int fd;

	put_str("f", "written by write(2)");
	fd = TF(open("f", O_RDWR));
	p = mmap(NULL, PAGE, PROT_READ, MAP_SHARED, fd, 0);
	tr("mmap = %s", p == MAP_FAILED ? strerrorname_np(errno) : "ok");
	if (p != MAP_FAILED) {
		tr("mapped: %.19s", p);
		T(pwrite(fd, "WRITTEN", 7, 0));
		tr("mapped after pwrite: %.19s", p);
		T(munmap(p, PAGE));
	}
	p = mmap(NULL, PAGE, PROT_READ, MAP_PRIVATE, fd, 0);
	if (p != MAP_FAILED) {
		tr("private map: %.19s", p);
		T(munmap(p, PAGE));
	}
	T(close(fd));
}

static void direct_io(void)
{
	void *buf = NULL;
	int fd;

	if (posix_memalign(&buf, PAGE, 2 * PAGE) != 0)
		return;
	fill_pattern(buf, 2 * PAGE, 12);
	fd = TF(open("f", O_CREAT | O_RDWR | O_DIRECT, 0644));
	T(pwrite(fd, buf, 2 * PAGE, 0));
	T(pwrite(fd, buf, PAGE, 4 * PAGE));
	memset(buf, 0, 2 * PAGE);
	T(pread(fd, buf, 2 * PAGE, 0));
	tr("first bytes %02x %02x", ((unsigned char *)buf)[0], ((unsigned char *)buf)[1]);
	trace_fstat(fd, SF_SIZE);
	T(close(fd));
	free(buf);
	trace_content("f");
}

static void posix_locks(void)
{
	struct flock lk = {
	    .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 10};
	int fd, status;
	pid_t pid;

	put_str("f", "lock me");
	fd = TF(open("f", O_RDWR));
	T(fcntl(fd, F_SETLK, &lk));
	T(flock(fd, LOCK_SH));
	pid = fork();
	if (pid == 0) {
		struct flock probe = {
		    .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_len = 5};
		int cfd = open("f", O_RDWR);
		int r = fcntl(cfd, F_SETLK, &probe) < 0 ? errno : 0;
		int g = fcntl(cfd, F_GETLK, &probe) < 0 ? -1 : probe.l_type;
		int fl = flock(cfd, LOCK_EX | LOCK_NB) < 0 ? errno : 0;
		int fs = flock(cfd, LOCK_SH | LOCK_NB) < 0 ? errno : 0;

		_exit((r == EAGAIN || r == EACCES) && g == F_WRLCK && fl == EWOULDBLOCK &&
			      fs == 0
			  ? 0
			  : 1);
	}
	waitpid(pid, &status, 0);
	tr("other process sees the locks: %s",
	   WIFEXITED(status) && WEXITSTATUS(status) == 0 ? "yes" : "no");
	lk.l_type = F_UNLCK;
	T(fcntl(fd, F_SETLK, &lk));
	T(flock(fd, LOCK_UN));
	T(close(fd));
}

static void statfs_fields(void)
{
	struct statvfs sv;

	if (statvfs(".", &sv) < 0) {
		tr("statvfs: %s", strerrorname_np(errno));
		return;
	}
	/* Free counts differ by what the other side holds; the shape must not. */
	tr("bsize=%lu frsize=%lu blocks=%llu files=%llu namemax=%lu", sv.f_bsize,
	   sv.f_frsize, (unsigned long long)sv.f_blocks, (unsigned long long)sv.f_files,
	   sv.f_namemax);
	tr("bfree <= blocks: %s", sv.f_bfree <= sv.f_blocks ? "yes" : "no");
	tr("bavail <= bfree: %s", sv.f_bavail <= sv.f_bfree ? "yes" : "no");
}

const struct pcase cases_misc[] = {
    {"access_as_root", access_as_root},
    {"mmap_shared_write", mmap_shared_write},
    {"mmap_sees_writes", mmap_sees_writes},
    {"direct_io", direct_io},
    {"posix_locks", posix_locks},
    {"statfs_fields", statfs_fields},
    {NULL, NULL},
};
