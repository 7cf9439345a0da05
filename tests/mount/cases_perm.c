/* Parity cases as an unprivileged user: root prepares files, then the case
 * process takes the effective (and file system) ids of nobody. The mount is
 * made with allow_other, so the kernel checks permissions (default_permissions)
 * and the daemon must create files as the caller. */
#include "parity.h"

#include <stdio.h>
#include <string.h>
#include <sys/xattr.h>

static void public_dir(const char *name)
{
	T(mkdir(name, 0777));
	T(chmod(name, 01777));
}

static void perm_read_private(void)
{
	char c;

	put_file("secret", "s", 1, 0600);
	put_file("shared", "s", 1, 0644);
	as_nobody();
	T(open("secret", O_RDONLY));
	T(open("secret", O_WRONLY));
	T(faccessat(AT_FDCWD, "secret", R_OK, AT_EACCESS));
	T(faccessat(AT_FDCWD, "shared", R_OK, AT_EACCESS));
	T(faccessat(AT_FDCWD, "shared", W_OK, AT_EACCESS));
	T(open("shared", O_WRONLY));
	T(open("shared", O_RDONLY | O_TRUNC));
	int fd = TF(open("shared", O_RDONLY));
	T(read(fd, &c, 1));
	T(close(fd));
	T(truncate("shared", 0));
	trace_stat("secret", SF_BASIC);
}

static void perm_create_owned(void)
{
	int fd;

	public_dir("pub");
	as_nobody();
	fd = TF(open("pub/f", O_CREAT | O_WRONLY, 0640));
	T(write(fd, "mine", 4));
	T(close(fd));
	T(mkdir("pub/d", 0750));
	T(symlink("f", "pub/l"));
	T(mkfifo("pub/p", 0600));
	T(mknod("pub/n", S_IFREG | 0600, 0));
	T(link("pub/f", "pub/h"));
	T(mkdir("pub/d/sub", 0700));
	fd = TF(open("pub/d/sub/deep", O_CREAT | O_EXCL | O_WRONLY, 0600));
	T(close(fd));
	trace_stat("pub/f", SF_BASIC);
	trace_stat("pub/d", SF_BASIC);
	trace_stat("pub/l", SF_OWNER);
	trace_stat("pub/p", SF_BASIC);
	trace_stat("pub/d/sub/deep", SF_BASIC);
}

static void perm_no_write_in_root_dir(void)
{
	put_str("f", "root's");
	as_nobody();
	T(open("new", O_CREAT | O_WRONLY, 0644));
	T(mkdir("newdir", 0755));
	T(symlink("f", "newlink"));
	T(mkfifo("newfifo", 0644));
	T(unlink("f"));
	T(rename("f", "g"));
	T(link("f", "g"));
	trace_dir(".");
}

static void perm_sticky(void)
{
	public_dir("pub");
	put_str("pub/roots", "r");
	T(chmod("pub/roots", 0666));
	as_nobody();
	put_str("pub/mine", "m");
	T(unlink("pub/roots"));
	T(rename("pub/roots", "pub/x"));
	T(rename("pub/mine", "pub/roots"));
	T(renameat2(AT_FDCWD, "pub/mine", AT_FDCWD, "pub/roots", RENAME_EXCHANGE));
	T(rename("pub/mine", "pub/mine2"));
	T(unlink("pub/mine2"));
	trace_dir("pub");
}

static void perm_chmod_chown(void)
{
	public_dir("pub");
	put_str("pub/roots", "r");
	T(chmod("pub/roots", 0666));
	as_nobody();
	put_str("pub/mine", "m");
	T(chmod("pub/roots", 0777));
	T(chown("pub/roots", NOBODY_ID, NOBODY_ID));
	T(chmod("pub/mine", 0600));
	T(chown("pub/mine", 0, -1));
	T(chown("pub/mine", -1, 0)); /* not in group 0 */
	T(chown("pub/mine", -1, NOBODY_ID));
	T(chown("pub/mine", NOBODY_ID, -1));
	T(chmod("pub/mine", 02755)); /* setgid of a group one is in */
	trace_stat("pub/mine", SF_BASIC);
	trace_stat("pub/roots", SF_BASIC);
}

static void perm_setgid_cleared_on_chmod(void)
{
	public_dir("pub");
	as_nobody();
	put_str("pub/f", "x");
	as_root();
	T(chown("pub/f", NOBODY_ID, OTHER_ID));
	as_nobody();
	T(chmod("pub/f", 02755)); /* group OTHER_ID is not ours: S_ISGID dropped */
	trace_stat("pub/f", SF_BASIC);
}

static void perm_utimens(void)
{
	struct timespec tv[2] = {{1000, 0}, {2000, 0}};
	struct timespec now[2] = {{0, UTIME_NOW}, {0, UTIME_NOW}};

	put_file("writable", "w", 1, 0666);
	put_file("readonly", "r", 1, 0644);
	T(chmod("writable", 0666));
	T(utimensat(AT_FDCWD, "writable", tv, 0));
	T(utimensat(AT_FDCWD, "readonly", tv, 0));
	as_nobody();
	T(utimensat(AT_FDCWD, "writable", tv, 0)); /* explicit times: owner only */
	T(utimensat(AT_FDCWD, "readonly", now, 0));
	T(utimensat(AT_FDCWD, "readonly", NULL, 0));
	T(utimensat(AT_FDCWD, "writable", now, 0)); /* "now" needs write access */
	trace_stat("writable", SF_TIMES_NOW);
	trace_stat("readonly", SF_TIMES);
}

static void perm_search(void)
{
	T(mkdir("closed", 0700));
	put_str("closed/f", "x");
	T(mkdir("noexec", 0744));
	put_str("noexec/f", "x");
	T(mkdir("noread", 0711));
	put_str("noread/f", "x");
	as_nobody();
	trace_stat("closed/f", SF_TYPE);
	trace_stat("noexec/f", SF_TYPE);
	trace_stat("noread/f", SF_TYPE);
	trace_dir("noexec");
	trace_dir("noread");
	trace_dir("closed");
	T(chdir("closed"));
	T(open("noread/f", O_RDONLY) >= 0);
}

static void perm_write_clears_setid(void)
{
	int fd;

	put_str("f", "x");
	put_str("g", "x");
	T(chmod("f", 06777));
	T(chmod("g", 02777));
	as_nobody();
	fd = TF(open("f", O_WRONLY));
	T(write(fd, "y", 1));
	T(close(fd));
	T(truncate("g", 0));
	as_root();
	trace_stat("f", SF_MODE);
	trace_stat("g", SF_MODE);
}

static void perm_setgid_dir(void)
{
	int fd;

	T(mkdir("sg", 0777));
	T(chown("sg", 0, OTHER_ID));
	T(chmod("sg", 02777));
	as_nobody();
	fd = TF(open("sg/f", O_CREAT | O_WRONLY, 02775));
	T(close(fd));
	T(mkdir("sg/d", 0755));
	T(mknod("sg/n", S_IFREG | 0644, 0));
	trace_stat("sg/f", SF_BASIC);
	trace_stat("sg/d", SF_BASIC);
	trace_stat("sg/n", SF_BASIC);
}

static void perm_supplementary_groups(void)
{
	gid_t groups[] = {OTHER_ID};
	int fd;

	put_file("grp", "group data", 10, 0640);
	T(chown("grp", 0, OTHER_ID));
	T(mkdir("gdir", 0770));
	T(chown("gdir", 0, OTHER_ID));
	as_nobody();
	T(open("grp", O_RDONLY));
	T(open("gdir/f", O_CREAT | O_WRONLY, 0644));
	as_user(NOBODY_ID, NOBODY_ID, 1, groups);
	fd = TF(open("grp", O_RDONLY));
	T(close(fd));
	fd = TF(open("gdir/f", O_CREAT | O_WRONLY, 0644));
	T(close(fd));
	T(mkdir("gdir/d", 0755));
	T(chown("gdir/f", -1, OTHER_ID)); /* a supplementary group is ours */
	trace_stat("gdir/f", SF_BASIC);
	trace_stat("gdir/d", SF_BASIC);
}

static void perm_other_gid(void)
{
	int fd;

	public_dir("pub");
	as_user(NOBODY_ID, OTHER_ID, 0, NULL);
	fd = TF(open("pub/f", O_CREAT | O_WRONLY, 0644));
	T(close(fd));
	T(mkdir("pub/d", 0755));
	trace_stat("pub/f", SF_OWNER);
	trace_stat("pub/d", SF_OWNER);
}

static void perm_hardlink_protection(void)
{
	public_dir("pub");
	put_file("pub/roots", "r", 1, 0600);
	put_file("pub/readable", "r", 1, 0644);
	as_nobody();
	T(link("pub/roots", "pub/l1")); /* fs.protected_hardlinks */
	T(link("pub/readable", "pub/l2"));
	trace_dir("pub");
}

static void perm_noatime_and_xattr(void)
{
	public_dir("pub");
	put_file("pub/roots", "r", 1, 0666);
	T(chmod("pub/roots", 0666));
	T(setxattr("pub/roots", "user.r", "r", 1, 0));
	as_nobody();
	put_str("pub/mine", "m");
	T(open("pub/roots", O_RDONLY | O_NOATIME));
	T(open("pub/mine", O_RDONLY | O_NOATIME) >= 0);
	T(setxattr("pub/roots", "user.n", "n", 1, 0)); /* writable: allowed */
	T(setxattr("pub/mine", "user.m", "m", 1, 0));
	T(setxattr("pub/mine", "trusted.m", "m", 1, 0));
	T(getxattr("pub/roots", "user.r", NULL, 0));
	T(getxattr("pub/roots", "trusted.x", NULL, 0));
	T(chmod("pub/mine", 0));
	T(getxattr("pub/mine", "user.m", NULL, 0));
	T(listxattr("pub/mine", NULL, 0));
	trace_xattrs("pub/roots");
}

static void perm_rename_across(void)
{
	T(mkdir("ro", 0755));
	public_dir("pub");
	as_nobody();
	put_str("pub/f", "x");
	T(mkdir("pub/d", 0755));
	T(rename("pub/f", "ro/f"));
	T(rename("pub/f", "pub/d/f"));
	T(rename("pub/d", "pub/e"));
	T(mkdir("pub/locked", 0555));
	T(rename("pub/e/f", "pub/locked/f"));
	T(rename("pub/e", "pub/locked/e"));
	T(rmdir("pub/locked"));
	trace_dir("pub");
}

static void perm_umask_as_user(void)
{
	int fd;

	public_dir("pub");
	as_nobody();
	umask(0);
	fd = TF(open("pub/f", O_CREAT | O_WRONLY, 0666));
	T(close(fd));
	T(mkdir("pub/d", 0777));
	umask(077);
	fd = TF(open("pub/g", O_CREAT | O_WRONLY, 0666));
	T(close(fd));
	trace_stat("pub/f", SF_MODE);
	trace_stat("pub/d", SF_MODE);
	trace_stat("pub/g", SF_MODE);
}

const struct pcase cases_perm[] = {
    {"perm_read_private", perm_read_private},
    {"perm_create_owned", perm_create_owned},
    {"perm_no_write_in_root_dir", perm_no_write_in_root_dir},
    {"perm_sticky", perm_sticky},
    {"perm_chmod_chown", perm_chmod_chown},
    {"perm_setgid_cleared_on_chmod", perm_setgid_cleared_on_chmod},
    {"perm_utimens", perm_utimens},
    {"perm_search", perm_search},
    {"perm_write_clears_setid", perm_write_clears_setid},
    {"perm_setgid_dir", perm_setgid_dir},
    {"perm_supplementary_groups", perm_supplementary_groups},
    {"perm_other_gid", perm_other_gid},
    {"perm_hardlink_protection", perm_hardlink_protection},
    {"perm_noatime_and_xattr", perm_noatime_and_xattr},
    {"perm_rename_across", perm_rename_across},
    {"perm_umask_as_user", perm_umask_as_user},
    {NULL, NULL},
};
