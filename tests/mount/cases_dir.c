/* Parity cases: mkdir, rmdir, unlink, readdir (with seekdir/telldir), directory fsync. */
#include "parity.h"

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>

#define BIG_DIR_ENTRIES 10000

static void mkdir_basic(void)
{
	T(mkdir("d", 0750));
	trace_stat("d", SF_BASIC);
	trace_stat(".", SF_NLINK);
	T(mkdir("d/e", 0700));
	T(mkdir("d/f", 0700));
	trace_stat("d", SF_NLINK);
	T(mkdir("d", 0755));
	T(mkdir("missing/x", 0755));
	T(mkdir("d/e/", 0755));
	put_str("file", "x");
	T(mkdir("file", 0755));
	T(mkdir("file/x", 0755));
	T(mkdir("d/g/", 0711));
	trace_dir("d");
}

static void rmdir_and_unlink_errors(void)
{
	T(mkdir("d", 0755));
	T(mkdir("full", 0755));
	put_str("full/f", "x");
	put_str("f", "x");
	T(rmdir("full"));
	T(rmdir("f"));
	T(rmdir("missing"));
	T(rmdir("."));
	T(rmdir("d/.."));
	T(rmdir("d/."));
	T(unlink("d"));
	T(unlink("missing"));
	T(unlink("f/x"));
	T(rmdir("d"));
	T(rmdir("d"));
	T(unlink("full/f"));
	T(rmdir("full/"));
	trace_dir(".");
	trace_stat(".", SF_NLINK);
}

static void rmdir_open_dir(void)
{
	struct dirent *de;
	DIR *dp;
	int n = 0;

	T(mkdir("d", 0755));
	dp = TP(opendir("d"));
	T(rmdir("d"));
	errno = 0;
	while (dp && (de = readdir(dp)))
		n++;
	tr("entries after rmdir: %d errno %d", n, errno);
	if (dp)
		T(openat(dirfd(dp), "new", O_CREAT | O_WRONLY, 0644));
	if (dp)
		T(closedir(dp));
	trace_dir(".");
}

static void readdir_small(void)
{
	T(mkdir("d", 0755));
	put_str("f", "x");
	T(symlink("f", "l"));
	T(mkfifo("p", 0644));
	T(mkdir("d/inner", 0755));
	trace_dir(".");
	trace_dir("d");
	trace_dir("f");
	trace_dir("missing");
}

static void make_entries(int n)
{
	char name[32];
	int fd, fails = 0;

	for (int i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "entry-%05d", i);
		fd = open(name, O_CREAT | O_WRONLY, 0644);
		if (fd < 0 || close(fd) < 0)
			fails++;
	}
	tr("created %d entries, %d failures", n, fails);
}

/* Read up to n names into out (NULL: just count); returns how many were read. */
static int read_names(DIR *dp, int n, GString *out)
{
	struct dirent *de;
	int i = 0;

	while (i < n && (de = readdir(dp))) {
		if (out)
			g_string_append_printf(out, "%s,", de->d_name);
		i++;
	}
	return i;
}

static void readdir_10000(void)
{
	g_autoptr(GString) first = g_string_new(NULL), again = g_string_new(NULL);
	g_autoptr(GString) tail = g_string_new(NULL);
	long at1234, at5000;
	DIR *dp;

	make_entries(BIG_DIR_ENTRIES);
	dp = TP(opendir("."));
	if (!dp)
		return;
	T(read_names(dp, 1234, NULL));
	at1234 = TF(telldir(dp));
	T(read_names(dp, 5000 - 1234, NULL));
	at5000 = TF(telldir(dp));
	T(read_names(dp, 50, first));
	T(read_names(dp, BIG_DIR_ENTRIES * 2, tail));
	seekdir(dp, at5000);
	T(read_names(dp, 50, again));
	tr("same 50 names after seekdir: %s",
	   strcmp(first->str, again->str) ? "no" : "yes");
	seekdir(dp, at1234);
	g_string_truncate(again, 0);
	T(read_names(dp, BIG_DIR_ENTRIES * 2, again));
	tr("rest after seekdir(1234) ends like the first pass: %s",
	   g_str_has_suffix(again->str, tail->str) ? "yes" : "no");
	rewinddir(dp);
	T(read_names(dp, BIG_DIR_ENTRIES * 2, NULL));
	T(closedir(dp));
	/* The walk order of the listing itself: a digest of the names in order. */
	dp = opendir(".");
	g_string_truncate(again, 0);
	read_names(dp, BIG_DIR_ENTRIES * 2, again);
	closedir(dp);
	tr("order digest %.16s",
	   g_compute_checksum_for_string(G_CHECKSUM_SHA256, again->str, -1));
}

static void readdir_getdents_sizes(void)
{
	char buf[64 * 1024];
	long n, total = 0;
	int fd;

	make_entries(300);
	fd = TF(open(".", O_RDONLY | O_DIRECTORY));
	T(syscall(SYS_getdents64, fd, buf, 10)); /* smaller than one entry */
	while ((n = syscall(SYS_getdents64, fd, buf, 512)) > 0)
		total += n;
	tr("getdents64 in 512-byte reads: %ld bytes, last %ld", total, n);
	T(lseek(fd, 0, SEEK_SET));
	T(syscall(SYS_getdents64, fd, buf, sizeof(buf)));
	T(syscall(SYS_getdents64, fd, buf, sizeof(buf)));
	T(read(fd, buf, sizeof(buf)));
	T(close(fd));
}

static void readdir_while_changing(void)
{
	char name[32];
	DIR *dp;

	make_entries(100);
	dp = TP(opendir("."));
	if (!dp)
		return;
	T(read_names(dp, 10, NULL));
	for (int i = 0; i < 100; i += 2) {
		snprintf(name, sizeof(name), "entry-%05d", i);
		unlink(name);
	}
	/* Which removed names still show up is unspecified; count only that the
	 * stream ends without an error. */
	errno = 0;
	while (readdir(dp))
		;
	tr("stream ended with errno %d", errno);
	T(closedir(dp));
	trace_dir(".");
}

static void dir_fsync(void)
{
	int fd, pfd;

	T(mkdir("d", 0755));
	put_str("d/f", "x");
	fd = TF(open("d", O_RDONLY | O_DIRECTORY));
	T(fsync(fd));
	T(fdatasync(fd));
	T(close(fd));
	pfd = TF(open("d", O_PATH));
	T(fsync(pfd));
	T(close(pfd));
	fd = TF(open(".", O_RDONLY));
	T(fsync(fd));
	T(syncfs(fd));
	T(close(fd));
}

static void dir_nlink_and_sizes(void)
{
	T(mkdir("a", 0755));
	T(mkdir("a/1", 0755));
	T(mkdir("a/2", 0755));
	T(mkdir("a/3", 0755));
	put_str("a/f", "x");
	trace_stat("a", SF_BASIC);
	T(rmdir("a/2"));
	trace_stat("a", SF_NLINK);
	T(rename("a/3", "b"));
	trace_stat("a", SF_NLINK);
	trace_stat(".", SF_NLINK);
}

static void dir_open_flags(void)
{
	int fd;

	T(mkdir("d", 0755));
	fd = TF(open("d", O_RDONLY | O_DIRECTORY | O_NOFOLLOW));
	T(openat(fd, "..", O_RDONLY | O_DIRECTORY) >= 0);
	T(openat(fd, "x", O_CREAT | O_EXCL | O_WRONLY, 0644) >= 0);
	T(faccessat(fd, "x", F_OK, 0));
	T(unlinkat(fd, "x", 0));
	T(mkdirat(fd, "sub", 0700));
	T(unlinkat(fd, "sub", 0));
	T(unlinkat(fd, "sub", AT_REMOVEDIR));
	T(close(fd));
	trace_dir("d");
}

const struct pcase cases_dir[] = {
    {"mkdir_basic", mkdir_basic},
    {"rmdir_and_unlink_errors", rmdir_and_unlink_errors},
    {"rmdir_open_dir", rmdir_open_dir},
    {"readdir_small", readdir_small},
    {"readdir_10000", readdir_10000},
    {"readdir_getdents_sizes", readdir_getdents_sizes},
    {"readdir_while_changing", readdir_while_changing},
    {"dir_fsync", dir_fsync},
    {"dir_nlink_and_sizes", dir_nlink_and_sizes},
    {"dir_open_flags", dir_open_flags},
    {NULL, NULL},
};
