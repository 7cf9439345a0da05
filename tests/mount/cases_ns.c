/* Parity cases: hard links, symlinks, rename, long names, mknod. */
#include "parity.h"

#include <linux/fs.h>
#include <stdio.h>
#include <string.h>
#include <sys/sysmacros.h>

#define FUSE_NAME_MAX 1024 /* the kernel's own limit for FUSE names */

static void link_count(void)
{
	int fd;

	put_str("a", "shared");
	T(link("a", "b"));
	trace_stat("a", SF_BASIC);
	trace_stat("b", SF_BASIC);
	trace_same_inode("a", "b");
	fd = TF(open("b", O_WRONLY | O_APPEND));
	T(write(fd, "+b", 2));
	T(close(fd));
	trace_content("a");
	T(link("b", "c"));
	trace_stat("a", SF_NLINK);
	T(unlink("a"));
	trace_stat("b", SF_NLINK);
	trace_stat("c", SF_NLINK);
}

static void link_fstat_open(void)
{
	int fd;

	put_str("a", "x");
	fd = TF(open("a", O_RDONLY));
	trace_fstat(fd, SF_NLINK);
	T(link("a", "b"));
	trace_fstat(fd, SF_NLINK);
	T(unlink("a"));
	trace_fstat(fd, SF_NLINK);
	T(unlink("b"));
	trace_fstat(fd, SF_NLINK);
	T(close(fd));
}

static void link_errors(void)
{
	put_str("a", "x");
	put_str("b", "y");
	T(mkdir("d", 0755));
	T(link("a", "b"));
	T(link("d", "d2"));
	T(link("missing", "m"));
	T(link("a", "missing/x"));
	T(link("a", "a/x"));
	T(link("a", "d"));
	trace_stat("a", SF_NLINK);
}

static void link_many_and_dirs(void)
{
	char name[32];

	put_str("a", "many");
	T(mkdir("sub", 0755));
	for (int i = 0; i < 10; i++) {
		snprintf(name, sizeof(name), i % 2 ? "sub/l%d" : "l%d", i);
		T(link("a", name));
	}
	trace_stat("a", SF_NLINK);
	trace_same_inode("a", "sub/l5");
	T(unlink("l0"));
	T(unlink("sub/l1"));
	T(rename("sub/l3", "moved"));
	trace_stat("sub/l9", SF_NLINK);
	trace_same_inode("moved", "l8");
}

static void link_symlink(void)
{
	put_str("f", "target");
	T(symlink("f", "s"));
	T(linkat(AT_FDCWD, "s", AT_FDCWD, "hard_s", 0));
	T(linkat(AT_FDCWD, "s", AT_FDCWD, "hard_f", AT_SYMLINK_FOLLOW));
	trace_stat("hard_s", SF_TYPE | SF_NLINK);
	trace_stat("hard_f", SF_TYPE | SF_NLINK);
	trace_same_inode("s", "hard_s");
	trace_same_inode("f", "hard_f");
	trace_readlink("hard_s");
}

static void link_attr_shared(void)
{
	struct timespec tv[2] = {{1000, 0}, {2000, 0}};

	put_str("a", "x");
	T(link("a", "b"));
	T(chmod("a", 0600));
	trace_stat("b", SF_MODE);
	T(chown("b", OTHER_ID, OTHER_ID));
	trace_stat("a", SF_OWNER);
	T(utimensat(AT_FDCWD, "a", tv, 0));
	trace_stat("b", SF_TIMES);
	T(truncate("b", 0));
	trace_stat("a", SF_SIZE);
}

static void link_rename_same_inode(void)
{
	put_str("a", "x");
	T(link("a", "b"));
	T(rename("a", "b")); /* both names of one inode: nothing happens */
	trace_dir(".");
	trace_stat("a", SF_NLINK);
	T(renameat2(AT_FDCWD, "a", AT_FDCWD, "b", RENAME_NOREPLACE));
	T(renameat2(AT_FDCWD, "a", AT_FDCWD, "b", RENAME_EXCHANGE));
	trace_dir(".");
}

static void link_at_empty_path(void)
{
	int fd;

	put_str("a", "x");
	fd = TF(open("a", O_RDONLY));
	T(linkat(fd, "", AT_FDCWD, "b", AT_EMPTY_PATH));
	T(unlink("a"));
	T(linkat(fd, "", AT_FDCWD, "c", AT_EMPTY_PATH)); /* no name left: ENOENT */
	T(close(fd));
	trace_dir(".");
}

static void symlink_basic(void)
{
	put_str("f", "pointed to");
	T(symlink("f", "l"));
	T(symlink("sub/../f", "l2"));
	trace_stat("l", SF_TYPE | SF_SIZE | SF_NLINK);
	trace_stat_follow("l", SF_TYPE | SF_SIZE);
	trace_readlink("l");
	trace_readlink("l2");
	trace_content("l");
	T(symlink("f", "l"));
	T(symlink("", "empty"));
	T(symlink("x", "missing/l"));
}

static void symlink_dangling_and_loops(void)
{
	T(symlink("nowhere", "dangling"));
	T(symlink("b", "a"));
	T(symlink("a", "b"));
	T(symlink("self", "self"));
	trace_stat_follow("dangling", SF_TYPE);
	trace_stat("dangling", SF_TYPE | SF_SIZE);
	trace_stat_follow("a", SF_TYPE);
	T(open("a", O_RDONLY));
	T(open("self", O_CREAT | O_WRONLY, 0644));
	T(open("dangling/x", O_RDONLY));
	T(access("dangling", F_OK));
	T(faccessat(AT_FDCWD, "dangling", F_OK, AT_SYMLINK_NOFOLLOW));
}

static void symlink_long_target(void)
{
	char target[5000];

	memset(target, 'x', sizeof(target));
	target[4095] = '\0';
	T(symlink(target, "l4095"));
	trace_stat("l4095", SF_SIZE);
	trace_readlink("l4095");
	target[4095] = 'x';
	target[4096] = '\0';
	T(symlink(target, "l4096"));
	target[4999] = '\0';
	T(symlink(target, "l4999"));
	trace_dir(".");
}

static void symlink_readlink_edges(void)
{
	char buf[8];

	put_str("f", "x");
	T(symlink("abcdefghij", "l"));
	T(readlink("l", buf, 3));
	tr("buf=%.3s", buf);
	T(readlink("f", buf, sizeof(buf)));
	T(readlink("missing", buf, sizeof(buf)));
	T(readlink(".", buf, sizeof(buf)));
}

static void symlink_to_dir(void)
{
	int fd;

	T(mkdir("d", 0755));
	T(symlink("d", "ld"));
	fd = TF(open("ld/f", O_CREAT | O_WRONLY, 0644));
	T(write(fd, "through", 7));
	T(close(fd));
	trace_content("d/f");
	T(rmdir("ld"));
	T(unlink("ld/"));
	T(open("ld", O_RDONLY | O_DIRECTORY | O_NOFOLLOW));
	T(unlink("ld"));
	trace_dir(".");
}

static void rename_file_basic(void)
{
	int fd;

	put_str("a", "moving");
	fd = TF(open("a", O_RDONLY));
	T(rename("a", "b"));
	trace_pread(fd, 16, 0);
	trace_fstat(fd, SF_BASIC);
	T(close(fd));
	T(mkdir("d", 0755));
	T(rename("b", "d/c"));
	T(rename("d/c", "e"));
	trace_dir(".");
	trace_content("e");
}

static void rename_over_file(void)
{
	put_str("a", "new content");
	put_str("b", "old");
	T(link("b", "b2"));
	T(rename("a", "b"));
	trace_content("b");
	trace_stat("b2", SF_NLINK);
	trace_stat("b", SF_NLINK);
	trace_dir(".");
}

static void rename_type_clashes(void)
{
	put_str("f", "x");
	T(mkdir("d", 0755));
	T(mkdir("full", 0755));
	put_str("full/x", "x");
	T(mkdir("empty", 0755));
	T(rename("f", "d"));
	T(rename("d", "f"));
	T(rename("d", "full"));
	T(rename("f", "d/"));
	T(rename("d", "empty"));
	trace_dir(".");
	trace_stat("empty", SF_NLINK);
	trace_stat(".", SF_NLINK);
}

static void rename_into_self(void)
{
	T(mkdir("a", 0755));
	T(mkdir("a/b", 0755));
	T(mkdir("a/b/c", 0755));
	T(rename("a", "a/b/x"));
	T(rename("a", "a/b"));
	T(rename("a/b", "a"));
	T(rename("a/b/c", "a"));
	T(rename("a", "a/x"));
	T(rename(".", "x"));
	T(rename("a/b/..", "y"));
	T(rename("a", "."));
	T(rename("a/b", "a/b"));
	trace_dir("a");
}

static void rename_noreplace(void)
{
	put_str("a", "A");
	put_str("b", "B");
	T(mkdir("d", 0755));
	T(renameat2(AT_FDCWD, "a", AT_FDCWD, "b", RENAME_NOREPLACE));
	T(renameat2(AT_FDCWD, "a", AT_FDCWD, "d", RENAME_NOREPLACE));
	T(renameat2(AT_FDCWD, "a", AT_FDCWD, "c", RENAME_NOREPLACE));
	T(renameat2(AT_FDCWD, "missing", AT_FDCWD, "x", RENAME_NOREPLACE));
	T(renameat2(AT_FDCWD, "d", AT_FDCWD, "d2", RENAME_NOREPLACE));
	trace_dir(".");
	trace_content("c");
}

static void rename_exchange(void)
{
	put_str("a", "A");
	put_str("b", "Bee");
	T(mkdir("d", 0755));
	put_str("d/inside", "i");
	T(link("a", "a_link"));
	T(renameat2(AT_FDCWD, "a", AT_FDCWD, "b", RENAME_EXCHANGE));
	trace_content("a");
	trace_content("b");
	trace_same_inode("b", "a_link");
	T(renameat2(AT_FDCWD, "a", AT_FDCWD, "d", RENAME_EXCHANGE));
	trace_stat("a", SF_TYPE);
	trace_stat("d", SF_TYPE);
	trace_content("a/inside");
	T(renameat2(AT_FDCWD, "a", AT_FDCWD, "missing", RENAME_EXCHANGE));
	T(renameat2(AT_FDCWD, "missing", AT_FDCWD, "a", RENAME_EXCHANGE));
	T(renameat2(AT_FDCWD, "a", AT_FDCWD, "b", RENAME_EXCHANGE | RENAME_NOREPLACE));
	T(renameat2(AT_FDCWD, "a", AT_FDCWD, "a/inside", RENAME_EXCHANGE));
	T(renameat2(AT_FDCWD, "b", AT_FDCWD, "b", RENAME_EXCHANGE));
	T(renameat2(AT_FDCWD, "a", AT_FDCWD, "b", 0x80));
	trace_dir(".");
}

static void rename_exchange_dirs_nlink(void)
{
	T(mkdir("p1", 0755));
	T(mkdir("p2", 0755));
	T(mkdir("p1/x", 0755));
	T(mkdir("p1/x/y", 0755));
	put_str("p2/f", "file");
	T(renameat2(AT_FDCWD, "p1/x", AT_FDCWD, "p2/f", RENAME_EXCHANGE));
	trace_stat("p1", SF_NLINK);
	trace_stat("p2", SF_NLINK);
	trace_stat("p2/f", SF_TYPE | SF_NLINK);
	trace_stat("p2/f/y", SF_TYPE);
	trace_content("p1/x");
}

static void rename_dir_keeps_inode(void)
{
	struct stat before, after;

	T(mkdir("p1", 0755));
	T(mkdir("p2", 0755));
	T(mkdir("p1/d", 0755));
	put_str("p1/d/f", "f");
	if (stat("p1/d", &before) < 0)
		tr("stat: %s", strerrorname_np(errno));
	T(rename("p1/d", "p2/e"));
	if (stat("p2/e", &after) < 0)
		tr("stat: %s", strerrorname_np(errno));
	tr("dir inode unchanged by rename: %s",
	   before.st_ino == after.st_ino ? "yes" : "no");
	trace_stat("p1", SF_NLINK);
	trace_stat("p2", SF_NLINK);
	trace_content("p2/e/f");
	trace_stat("p1/d", SF_TYPE);
}

static void rename_errors(void)
{
	put_str("f", "x");
	T(rename("missing", "x"));
	T(rename("f", "missing/x"));
	T(rename("f", "f/x"));
	T(rename("f", "f"));
	T(rename("f/", "g"));
	trace_dir(".");
}

static void rename_open_dir_and_file(void)
{
	int dfd, fd;

	T(mkdir("d", 0755));
	put_str("d/f", "in d");
	dfd = TF(open("d", O_RDONLY | O_DIRECTORY));
	fd = TF(openat(dfd, "f", O_RDWR));
	T(rename("d", "moved"));
	T(write(fd, "X", 1));
	T(faccessat(dfd, "f", F_OK, 0));
	T(renameat(dfd, "f", dfd, "g"));
	T(close(fd));
	T(close(dfd));
	trace_dir("moved");
	trace_content("moved/g");
}

static void long_names(void)
{
	char n255[256], n256[257], n1025[FUSE_NAME_MAX + 2];
	int fd;

	memset(n255, 'a', 255);
	n255[255] = '\0';
	memset(n256, 'b', 256);
	n256[256] = '\0';
	memset(n1025, 'c', FUSE_NAME_MAX + 1);
	n1025[FUSE_NAME_MAX + 1] = '\0';
	fd = TF(open(n255, O_CREAT | O_WRONLY, 0644));
	T(close(fd));
	trace_stat(n255, SF_SIZE);
	T(open(n256, O_CREAT | O_WRONLY, 0644));
	T(open(n256, O_RDONLY));
	T(open(n1025, O_CREAT | O_WRONLY, 0644));
	T(access(n256, F_OK));
	T(mkdir(n256, 0755));
	T(mkdir(n1025, 0755));
	T(symlink("x", n256));
	T(symlink(n256, "l")); /* a long target is fine */
	T(link(n255, n256));
	T(rename(n255, n256));
	T(renameat2(AT_FDCWD, n255, AT_FDCWD, n256, RENAME_NOREPLACE));
	T(mknod(n256, S_IFIFO | 0644, 0));
	T(unlink(n256));
	T(rmdir(n256));
	T(truncate(n256, 0));
	T(rename(n255, "short"));
	T(rename("short", n255));
	trace_dir(".");
}

static void mknod_fifo(void)
{
	char buf[8];
	int fd;

	T(mkfifo("p", 0640));
	T(mknod("q", S_IFIFO | 0600, 0));
	trace_stat("p", SF_BASIC);
	trace_stat("q", SF_BASIC);
	fd = TF(open("p", O_RDWR)); /* Linux allows this on a fifo */
	T(write(fd, "pipe", 4));
	T(read(fd, buf, sizeof(buf)));
	T(close(fd));
	fd = TF(open("q", O_RDONLY | O_NONBLOCK));
	T(open("q", O_WRONLY | O_NONBLOCK)); /* ok: there is a reader */
	T(close(fd));
	T(open("q", O_WRONLY | O_NONBLOCK)); /* no reader: ENXIO */
	T(mkfifo("p", 0640));
	T(mkfifo("missing/p", 0640));
	T(link("p", "p2"));
	T(rename("q", "q2"));
	trace_dir(".");
}

static void mknod_others(void)
{
	T(mknod("reg", S_IFREG | 0640, 0));
	T(mknod("plain", 0640, 0)); /* no type: a regular file */
	T(mknod("chr", S_IFCHR | 0600, makedev(1, 3)));
	T(mknod("blk", S_IFBLK | 0600, makedev(7, 200)));
	T(mknod("dir", S_IFDIR | 0755, 0));
	T(mknod("reg", S_IFREG | 0640, 0));
	trace_stat("reg", SF_BASIC);
	trace_stat("chr", SF_BASIC | SF_RDEV);
	trace_stat("blk", SF_BASIC | SF_RDEV);
	trace_dir(".");
}

const struct pcase cases_ns[] = {
    {"link_count", link_count},
    {"link_fstat_open", link_fstat_open},
    {"link_errors", link_errors},
    {"link_many_and_dirs", link_many_and_dirs},
    {"link_symlink", link_symlink},
    {"link_attr_shared", link_attr_shared},
    {"link_rename_same_inode", link_rename_same_inode},
    {"link_at_empty_path", link_at_empty_path},
    {"symlink_basic", symlink_basic},
    {"symlink_dangling_and_loops", symlink_dangling_and_loops},
    {"symlink_long_target", symlink_long_target},
    {"symlink_readlink_edges", symlink_readlink_edges},
    {"symlink_to_dir", symlink_to_dir},
    {"rename_file_basic", rename_file_basic},
    {"rename_over_file", rename_over_file},
    {"rename_type_clashes", rename_type_clashes},
    {"rename_into_self", rename_into_self},
    {"rename_noreplace", rename_noreplace},
    {"rename_exchange", rename_exchange},
    {"rename_exchange_dirs_nlink", rename_exchange_dirs_nlink},
    {"rename_dir_keeps_inode", rename_dir_keeps_inode},
    {"rename_errors", rename_errors},
    {"rename_open_dir_and_file", rename_open_dir_and_file},
    {"long_names", long_names},
    {"mknod_fifo", mknod_fifo},
    {"mknod_others", mknod_others},
    {NULL, NULL},
};
