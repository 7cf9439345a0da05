/* Parity cases: chmod, chown, utimensat and friends, as root. */
#include "parity.h"

#include <sys/time.h>
#include <unistd.h>

#define TS(s, ns) ((struct timespec){.tv_sec = (s), .tv_nsec = (ns)})

static void chmod_modes(void)
{
	put_str("f", "x");
	T(mkdir("d", 0755));
	T(chmod("f", 0));
	trace_stat("f", SF_MODE);
	T(chmod("f", 07777));
	trace_stat("f", SF_MODE);
	T(chmod("f", 0640 | S_IFDIR)); /* type bits are ignored */
	trace_stat("f", SF_MODE);
	T(chmod("d", 01777));
	trace_stat("d", SF_MODE);
	T(chmod("d", 02750));
	trace_stat("d", SF_MODE);
	T(chmod("missing", 0644));
	T(chmod("f/x", 0644));
}

static void chmod_fd_and_link(void)
{
	int fd;

	put_str("f", "x");
	T(symlink("f", "l"));
	T(chmod("l", 0600)); /* follows */
	trace_stat("f", SF_MODE);
	trace_stat("l", SF_MODE);
	fd = TF(open("f", O_RDONLY));
	T(fchmod(fd, 0444));
	trace_fstat(fd, SF_MODE);
	T(close(fd));
	T(fchmodat(AT_FDCWD, "l", 0644, AT_SYMLINK_NOFOLLOW));
	trace_stat("f", SF_MODE);
	trace_stat("l", SF_MODE);
}

static void chown_root(void)
{
	put_str("f", "x");
	T(mkdir("d", 0755));
	T(chown("f", OTHER_ID, OTHER_ID + 1));
	trace_stat("f", SF_OWNER);
	T(chown("f", -1, 42));
	trace_stat("f", SF_OWNER);
	T(chown("f", 43, -1));
	trace_stat("f", SF_OWNER);
	T(chown("f", -1, -1));
	trace_stat("f", SF_OWNER);
	T(chown("d", NOBODY_ID, NOBODY_ID));
	trace_stat("d", SF_OWNER);
	T(chown("missing", 1, 1));
}

static void chown_symlink(void)
{
	put_str("f", "x");
	T(symlink("f", "l"));
	T(lchown("l", OTHER_ID, OTHER_ID));
	trace_stat("l", SF_OWNER);
	trace_stat("f", SF_OWNER);
	T(chown("l", 7, 8)); /* follows */
	trace_stat("l", SF_OWNER);
	trace_stat("f", SF_OWNER);
	T(symlink("nowhere", "dangling"));
	T(lchown("dangling", 9, 9));
	T(chown("dangling", 9, 9));
	trace_stat("dangling", SF_OWNER);
}

static void chown_clears_setid(void)
{
	int fd;

	put_str("f", "x");
	put_str("g", "x");
	put_str("nx", "x");
	T(chmod("f", 06755));
	T(chmod("g", 02755));
	T(chmod("nx", 02644)); /* setgid without group exec is not cleared */
	T(chown("f", OTHER_ID, -1));
	T(chown("g", -1, OTHER_ID));
	T(chown("nx", OTHER_ID, OTHER_ID));
	trace_stat("f", SF_MODE | SF_OWNER);
	trace_stat("g", SF_MODE | SF_OWNER);
	trace_stat("nx", SF_MODE | SF_OWNER);
	T(mkdir("d", 02755));
	T(chown("d", OTHER_ID, OTHER_ID));
	trace_stat("d", SF_MODE | SF_OWNER);
	put_str("h", "x");
	fd = TF(open("h", O_RDWR));
	T(fchmod(fd, 04711));
	T(fchown(fd, 5, 5));
	trace_fstat(fd, SF_MODE | SF_OWNER);
	T(close(fd));
}

static void utimens_explicit(void)
{
	struct timespec tv[2] = {TS(1000000000, 123456789), TS(1200000000, 987654321)};

	put_str("f", "x");
	T(utimensat(AT_FDCWD, "f", tv, 0));
	trace_stat("f", SF_TIMES);
	T(mkdir("d", 0755));
	T(utimensat(AT_FDCWD, "d", tv, 0));
	trace_stat("d", SF_TIMES);
	T(utimensat(AT_FDCWD, "missing", tv, 0));
}

static void utimens_omit(void)
{
	struct timespec tv[2] = {TS(1000000000, 1), TS(1100000000, 2)};
	struct timespec a_only[2] = {TS(1300000000, 3), TS(0, UTIME_OMIT)};
	struct timespec m_only[2] = {TS(0, UTIME_OMIT), TS(1400000000, 4)};
	struct timespec both_omit[2] = {TS(0, UTIME_OMIT), TS(0, UTIME_OMIT)};

	put_str("f", "x");
	T(utimensat(AT_FDCWD, "f", tv, 0));
	T(utimensat(AT_FDCWD, "f", a_only, 0));
	trace_stat("f", SF_TIMES);
	T(utimensat(AT_FDCWD, "f", m_only, 0));
	trace_stat("f", SF_TIMES);
	T(utimensat(AT_FDCWD, "f", both_omit, 0));
	trace_stat("f", SF_TIMES);
}

static void utimens_now(void)
{
	struct timespec past[2] = {TS(1000000000, 0), TS(1000000000, 0)};
	struct timespec now[2] = {TS(0, UTIME_NOW), TS(0, UTIME_NOW)};
	struct timespec now_omit[2] = {TS(0, UTIME_NOW), TS(0, UTIME_OMIT)};
	struct timespec omit_now[2] = {TS(0, UTIME_OMIT), TS(0, UTIME_NOW)};

	put_str("f", "x");
	T(utimensat(AT_FDCWD, "f", past, 0));
	T(utimensat(AT_FDCWD, "f", now, 0));
	trace_stat("f", SF_TIMES_NOW);
	T(utimensat(AT_FDCWD, "f", past, 0));
	T(utimensat(AT_FDCWD, "f", now_omit, 0));
	trace_stat("f", SF_TIMES_NOW);
	T(utimensat(AT_FDCWD, "f", past, 0));
	T(utimensat(AT_FDCWD, "f", omit_now, 0));
	trace_stat("f", SF_TIMES_NOW);
	T(utimensat(AT_FDCWD, "f", past, 0));
	T(utimensat(AT_FDCWD, "f", NULL, 0));
	trace_stat("f", SF_TIMES_NOW);
}

static void utimens_symlink(void)
{
	struct timespec tv[2] = {TS(1111111111, 111), TS(1222222222, 222)};
	struct timespec tl[2] = {TS(1333333333, 333), TS(1444444444, 444)};

	put_str("f", "x");
	T(symlink("f", "l"));
	T(utimensat(AT_FDCWD, "f", tv, 0));
	T(utimensat(AT_FDCWD, "l", tl, AT_SYMLINK_NOFOLLOW));
	trace_stat("l", SF_TIMES);
	trace_stat("f", SF_TIMES);
	T(utimensat(AT_FDCWD, "l", tv, 0)); /* follows, and reading l sets its atime */
	trace_stat("l", SF_MTIME);
	trace_stat("f", SF_TIMES);
}

static void utimens_extremes(void)
{
	struct timespec old[2] = {TS(-1000000000, 500), TS(-1, 999999999)};
	struct timespec future[2] = {TS(1LL << 33, 1), TS((1LL << 33) + 5, 0)};
	struct timespec bad[2] = {TS(0, 1000000000), TS(0, 0)};
	struct timespec neg[2] = {TS(0, -5), TS(0, 0)};

	put_str("f", "x");
	T(utimensat(AT_FDCWD, "f", old, 0));
	trace_stat("f", SF_TIMES);
	T(utimensat(AT_FDCWD, "f", future, 0));
	trace_stat("f", SF_TIMES);
	T(utimensat(AT_FDCWD, "f", bad, 0));
	T(utimensat(AT_FDCWD, "f", neg, 0));
	trace_stat("f", SF_TIMES);
}

static void utimens_fd(void)
{
	struct timespec tv[2] = {TS(1500000000, 5), TS(1500000001, 6)};
	struct timeval old[2] = {{1600000000, 7}, {1600000001, 8}};
	int fd;

	put_str("f", "x");
	fd = TF(open("f", O_RDONLY));
	T(futimens(fd, tv));
	trace_fstat(fd, SF_TIMES);
	T(close(fd));
	T(utimes("f", old));
	trace_stat("f", SF_TIMES);
	fd = TF(open("f", O_PATH));
	T(utimensat(fd, "", tv, AT_EMPTY_PATH));
	T(close(fd));
	trace_stat("f", SF_TIMES);
}

static void write_updates_mtime(void)
{
	struct timespec past[2] = {TS(1000000000, 0), TS(1000000000, 0)};
	int fd;

	put_str("f", "x");
	T(utimensat(AT_FDCWD, "f", past, 0));
	fd = TF(open("f", O_WRONLY));
	T(write(fd, "y", 1));
	T(close(fd));
	trace_stat("f", SF_MTIME | SF_TIMES_NOW);
	T(utimensat(AT_FDCWD, "f", past, 0));
	T(truncate("f", 0));
	trace_stat("f", SF_MTIME | SF_TIMES_NOW);
}

const struct pcase cases_attr[] = {
    {"chmod_modes", chmod_modes},
    {"chmod_fd_and_link", chmod_fd_and_link},
    {"chown_root", chown_root},
    {"chown_symlink", chown_symlink},
    {"chown_clears_setid", chown_clears_setid},
    {"utimens_explicit", utimens_explicit},
    {"utimens_omit", utimens_omit},
    {"utimens_now", utimens_now},
    {"utimens_symlink", utimens_symlink},
    {"utimens_extremes", utimens_extremes},
    {"utimens_fd", utimens_fd},
    {"write_updates_mtime", write_updates_mtime},
    {NULL, NULL},
};
