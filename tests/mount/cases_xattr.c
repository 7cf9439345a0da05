/* Parity cases: extended attributes. */
#include "parity.h"

#include <stdio.h>
#include <string.h>
#include <sys/xattr.h>

static void xattr_basic(void)
{
	char buf[64];

	put_str("f", "x");
	T(setxattr("f", "user.color", "blue", 4, 0));
	T(getxattr("f", "user.color", buf, sizeof(buf)));
	tr("value=%.4s", buf);
	T(setxattr("f", "user.color", "green", 5, 0));
	T(getxattr("f", "user.color", buf, sizeof(buf)));
	T(setxattr("f", "user.empty", "", 0, 0));
	T(getxattr("f", "user.empty", buf, sizeof(buf)));
	trace_xattrs("f");
	T(removexattr("f", "user.color"));
	T(getxattr("f", "user.color", buf, sizeof(buf)));
	T(removexattr("f", "user.color"));
	trace_xattrs("f");
}

static void xattr_flags(void)
{
	put_str("f", "x");
	T(setxattr("f", "user.a", "1", 1, XATTR_CREATE));
	T(setxattr("f", "user.a", "2", 1, XATTR_CREATE));
	T(setxattr("f", "user.a", "3", 1, XATTR_REPLACE));
	T(setxattr("f", "user.b", "4", 1, XATTR_REPLACE));
	T(setxattr("f", "user.b", "5", 1, XATTR_CREATE | XATTR_REPLACE));
	T(setxattr("f", "user.c", "6", 1, 0x40));
	trace_xattrs("f");
}

static void xattr_sizes(void)
{
#define XATTR_TOO_BIG 70000 /* over the VFS limit of 64 KiB */
	g_autofree char *big = g_malloc0(XATTR_TOO_BIG);
	char buf[4];

	put_str("f", "x");
	T(setxattr("f", "user.long", "0123456789", 10, 0));
	T(getxattr("f", "user.long", NULL, 0));
	T(getxattr("f", "user.long", buf, sizeof(buf)));
	T(listxattr("f", NULL, 0));
	T(listxattr("f", buf, sizeof(buf)));
	fill_pattern(big, 4000, 3);
	T(setxattr("f", "user.big", big, 4000, 0));
	T(getxattr("f", "user.big", NULL, 0));
	T(setxattr("f", "user.toobig", big, XATTR_TOO_BIG, 0));
	trace_xattrs("f");
}

static void xattr_names(void)
{
	char name[300];

	put_str("f", "x");
	memset(name, 'n', sizeof(name));
	memcpy(name, "user.", 5);
	name[255] = '\0';
	T(setxattr("f", name, "v", 1, 0));
	name[255] = 'n';
	name[256] = '\0';
	T(setxattr("f", name, "v", 1, 0));
	T(getxattr("f", name, NULL, 0));
	T(setxattr("f", "user.", "v", 1, 0));
	T(setxattr("f", "", "v", 1, 0));
	T(setxattr("f", "nonamespace", "v", 1, 0));
	T(setxattr("f", "bogus.x", "v", 1, 0));
	T(getxattr("f", "bogus.x", NULL, 0));
	trace_xattrs("f");
}

static void xattr_many(void)
{
	char name[32], val[32];

	put_str("f", "x");
	for (int i = 0; i < 30; i++) {
		snprintf(name, sizeof(name), "user.attr%02d", (i * 7) % 30);
		snprintf(val, sizeof(val), "value-%d", i);
		T(setxattr("f", name, val, strlen(val), 0));
	}
	for (int i = 0; i < 30; i += 3) {
		snprintf(name, sizeof(name), "user.attr%02d", i);
		T(removexattr("f", name));
	}
	trace_xattrs("f");
}

static void xattr_dir_and_special(void)
{
	T(mkdir("d", 0755));
	T(mkfifo("p", 0644));
	put_str("f", "x");
	T(symlink("f", "l"));
	T(setxattr("d", "user.dir", "yes", 3, 0));
	T(setxattr("p", "user.fifo", "no", 2, 0)); /* user.* only on files and dirs */
	T(lsetxattr("l", "user.link", "no", 2, 0));
	T(lgetxattr("l", "user.link", NULL, 0));
	T(setxattr("l", "user.through", "yes", 3, 0)); /* follows to f */
	T(llistxattr("l", NULL, 0));
	trace_xattrs("d");
	trace_xattrs("l");
	trace_xattrs("f");
}

static void xattr_trusted(void)
{
	put_str("f", "x");
	T(symlink("f", "l"));
	T(symlink("nowhere", "dangling"));
	T(setxattr("f", "trusted.t", "root only", 9, 0));
	T(lsetxattr("l", "trusted.onlink", "L", 1, 0));
	T(lgetxattr("l", "trusted.onlink", NULL, 0));
	T(getxattr("l", "trusted.onlink", NULL, 0)); /* follows: not on f */
	T(lsetxattr("dangling", "trusted.d", "D", 1, 0));
	T(lremovexattr("l", "trusted.onlink"));
	T(lsetxattr("l", "trusted.again", "A", 1, 0));
	trace_xattrs("f");
	trace_xattrs("l");
	trace_xattrs("dangling");
}

static void xattr_fd(void)
{
	char buf[64];
	int fd;

	put_str("f", "x");
	fd = TF(open("f", O_RDONLY));
	T(fsetxattr(fd, "user.byfd", "fd", 2, 0));
	T(fgetxattr(fd, "user.byfd", buf, sizeof(buf)));
	T(flistxattr(fd, buf, sizeof(buf)));
	T(fremovexattr(fd, "user.byfd"));
	T(fgetxattr(fd, "user.byfd", buf, sizeof(buf)));
	T(unlink("f"));
	T(fsetxattr(fd, "user.unlinked", "u", 1, 0));
	T(fgetxattr(fd, "user.unlinked", buf, sizeof(buf)));
	T(close(fd));
}

static void xattr_survives_rename_and_link(void)
{
	put_str("f", "x");
	T(setxattr("f", "user.keep", "kept", 4, 0));
	T(rename("f", "g"));
	T(link("g", "h"));
	T(setxattr("h", "user.viah", "1", 1, 0));
	trace_xattrs("g");
	trace_xattrs("h");
	T(getxattr("f", "user.keep", NULL, 0));
}

const struct pcase cases_xattr[] = {
    {"xattr_basic", xattr_basic},
    {"xattr_flags", xattr_flags},
    {"xattr_sizes", xattr_sizes},
    {"xattr_names", xattr_names},
    {"xattr_many", xattr_many},
    {"xattr_dir_and_special", xattr_dir_and_special},
    {"xattr_trusted", xattr_trusted},
    {"xattr_fd", xattr_fd},
    {"xattr_survives_rename_and_link", xattr_survives_rename_and_link},
    {NULL, NULL},
};
