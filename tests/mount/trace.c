/* Read-back helpers of the parity runner, and the snapshot of a case directory. */
#include "parity.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <time.h>

#define SHOWN_DATA_MAX 64     /* longer data is shown as length and digest */
#define NOW_SLACK_S 10	      /* a time this close to the clock counts as "now" */
#define ZERO_BLOCK_BYTES 4096 /* content digests skip all-zero blocks of this size */
#define READ_CHUNK_BYTES (1 << 20)
#define XATTR_BUF_BYTES 65536

static const char *type_name(mode_t m)
{
	switch (m & S_IFMT) {
	case S_IFREG:
		return "reg";
	case S_IFDIR:
		return "dir";
	case S_IFLNK:
		return "lnk";
	case S_IFIFO:
		return "fifo";
	case S_IFCHR:
		return "chr";
	case S_IFBLK:
		return "blk";
	case S_IFSOCK:
		return "sock";
	}
	return "?";
}

/* Data as text: escaped when short, else its length and digest. */
static char *fmt_data(const void *buf, size_t n)
{
	const unsigned char *p = buf;
	GString *s;

	if (n > SHOWN_DATA_MAX) {
		g_autofree char *sum =
		    g_compute_checksum_for_data(G_CHECKSUM_SHA256, buf, n);
		return g_strdup_printf("<%zu bytes sha256 %.16s>", n, sum);
	}
	s = g_string_new("\"");
	for (size_t i = 0; i < n; i++) {
		if (p[i] >= 0x20 && p[i] < 0x7f && p[i] != '"' && p[i] != '\\')
			g_string_append_c(s, (char)p[i]);
		else
			g_string_append_printf(s, "\\x%02x", p[i]);
	}
	g_string_append_c(s, '"');
	return g_string_free(s, FALSE);
}

static void fmt_time(GString *s, const char *name, const struct timespec *t, bool now_ok)
{
	struct timespec now;

	clock_gettime(CLOCK_REALTIME, &now);
	if (now_ok && llabs((long long)(t->tv_sec - now.tv_sec)) <= NOW_SLACK_S)
		g_string_append_printf(s, " %s=now", name);
	else
		g_string_append_printf(s, " %s=%lld.%09ld", name, (long long)t->tv_sec,
				       t->tv_nsec);
}

static void fmt_stat(GString *s, const struct stat *st, unsigned f)
{
	if (f & SF_MODE)
		g_string_append_printf(s, " %s mode=%04o", type_name(st->st_mode),
				       st->st_mode & 07777);
	else if (f & SF_TYPE)
		g_string_append_printf(s, " %s", type_name(st->st_mode));
	if (f & SF_SIZE)
		g_string_append_printf(s, " size=%lld", (long long)st->st_size);
	if (f & SF_NLINK)
		g_string_append_printf(s, " nlink=%lu", (unsigned long)st->st_nlink);
	if (f & SF_OWNER)
		g_string_append_printf(s, " uid=%u gid=%u", st->st_uid, st->st_gid);
	if (f & SF_RDEV)
		g_string_append_printf(s, " rdev=%u:%u", major(st->st_rdev),
				       minor(st->st_rdev));
	if (f & SF_BLOCKS)
		g_string_append_printf(s, " blocks=%lld", (long long)st->st_blocks);
	if (f & (SF_ATIME | SF_TIMES_NOW))
		fmt_time(s, "atime", &st->st_atim, f & SF_TIMES_NOW);
	if (f & (SF_MTIME | SF_TIMES_NOW))
		fmt_time(s, "mtime", &st->st_mtim, f & SF_TIMES_NOW);
}

static void trace_stat_at(const char *label, int dfd, const char *path, int flags,
			  unsigned f)
{
	g_autoptr(GString) s = g_string_new(label);
	struct stat st;

	if (fstatat(dfd, path, &st, flags) < 0) {
		tr("%s = -1 %s", label, strerrorname_np(errno));
		return;
	}
	fmt_stat(s, &st, f);
	tr("%s", s->str);
}

void trace_stat(const char *path, unsigned fields)
{
	g_autofree char *label = g_strdup_printf("lstat(%s)", path);

	trace_stat_at(label, AT_FDCWD, path, AT_SYMLINK_NOFOLLOW, fields);
}

void trace_stat_follow(const char *path, unsigned fields)
{
	g_autofree char *label = g_strdup_printf("stat(%s)", path);

	trace_stat_at(label, AT_FDCWD, path, 0, fields);
}

void trace_fstat(int fd, unsigned fields)
{
	trace_stat_at("fstat(fd)", fd, "", AT_EMPTY_PATH, fields);
}

void trace_same_inode(const char *a, const char *b)
{
	struct stat sa, sb;

	if (lstat(a, &sa) < 0 || lstat(b, &sb) < 0) {
		tr("same_inode(%s, %s): %s", a, b, strerrorname_np(errno));
		return;
	}
	tr("same_inode(%s, %s) = %s", a, b,
	   sa.st_ino == sb.st_ino && sa.st_dev == sb.st_dev ? "yes" : "no");
}

static bool all_zero(const unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

/* Digest of the non-zero blocks and their offsets: equal content gives equal
 * digests however the file is allocated. Only data segments are read, so a
 * sparse file of many GiB costs little. */
static char *content_digest(int fd, off_t size)
{
	g_autoptr(GChecksum) ck = g_checksum_new(G_CHECKSUM_SHA256);
	g_autofree unsigned char *buf = g_malloc(READ_CHUNK_BYTES);
	unsigned long blocks = 0;
	off_t off = 0;

	while (off < size) {
		off_t data = lseek(fd, off, SEEK_DATA), hole;

		if (data < 0 && errno == ENXIO)
			break;
		if (data < 0)
			data = off; /* no SEEK_DATA: read everything */
		hole = lseek(fd, data, SEEK_HOLE);
		if (hole < 0)
			hole = size;
		data -= data % ZERO_BLOCK_BYTES;
		for (off = data; off < hole;) {
			size_t want = MIN((off_t)READ_CHUNK_BYTES, hole - off);
			ssize_t n = pread(fd, buf, want, off);

			if (n <= 0)
				return g_strdup_printf(
				    "read error at %lld: %s", (long long)off,
				    n < 0 ? strerrorname_np(errno) : "EOF");
			for (ssize_t i = 0; i < n; i += ZERO_BLOCK_BYTES) {
				size_t len = MIN(ZERO_BLOCK_BYTES, (size_t)(n - i));
				gint64 at = off + i;

				if (all_zero(buf + i, len))
					continue;
				g_checksum_update(ck, (const guchar *)&at, sizeof(at));
				g_checksum_update(ck, buf + i, len);
				blocks++;
			}
			off += n;
		}
	}
	return g_strdup_printf("<%lld bytes, %lu non-zero blocks, sha256 %.16s>",
			       (long long)size, blocks, g_checksum_get_string(ck));
}

static char *file_content(const char *path)
{
	char small[SHOWN_DATA_MAX];
	struct stat st;
	char *s;
	ssize_t n;
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK);

	if (fd < 0)
		return g_strdup_printf("open: %s", strerrorname_np(errno));
	if (fstat(fd, &st) < 0) {
		s = g_strdup_printf("fstat: %s", strerrorname_np(errno));
	} else if (st.st_size <= SHOWN_DATA_MAX) {
		n = pread(fd, small, sizeof(small), 0);
		s = n < 0 ? g_strdup_printf("read: %s", strerrorname_np(errno))
			  : fmt_data(small, (size_t)n);
	} else {
		s = content_digest(fd, st.st_size);
	}
	close(fd);
	return s;
}

void trace_content(const char *path)
{
	g_autofree char *c = file_content(path);

	tr("content(%s) = %s", path, c);
}

void trace_pread(int fd, size_t len, off_t off)
{
	g_autofree char *buf = g_malloc(len ? len : 1);
	ssize_t n = pread(fd, buf, len, off);

	if (n < 0) {
		tr("pread(%zu@%lld) = -1 %s", len, (long long)off,
		   strerrorname_np(errno));
	} else {
		g_autofree char *d = fmt_data(buf, (size_t)n);
		tr("pread(%zu@%lld) = %zd %s", len, (long long)off, n, d);
	}
}

void trace_seekmap(int fd)
{
	g_autoptr(GString) s = g_string_new("seekmap:");
	struct stat st;
	off_t off = 0;

	if (fstat(fd, &st) < 0) {
		tr("seekmap: fstat %s", strerrorname_np(errno));
		return;
	}
	while (off < st.st_size) {
		off_t data = lseek(fd, off, SEEK_DATA), hole;

		if (data < 0) {
			g_string_append_printf(s, " SEEK_DATA(%lld)=%s", (long long)off,
					       strerrorname_np(errno));
			break;
		}
		hole = lseek(fd, data, SEEK_HOLE);
		g_string_append_printf(s, " [%lld,%lld)", (long long)data,
				       (long long)hole);
		if (hole <= data)
			break;
		off = hole;
	}
	tr("%s", s->str);
}

static gint cmp_str(gconstpointer a, gconstpointer b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* One line per xattr: name=value, names sorted. */
static void fmt_xattrs(GString *out, const char *path)
{
	g_autofree char *names = g_malloc(XATTR_BUF_BYTES);
	g_autofree char *val = g_malloc(XATTR_BUF_BYTES);
	g_autoptr(GPtrArray) list = g_ptr_array_new();
	ssize_t n = llistxattr(path, names, XATTR_BUF_BYTES);

	if (n < 0) {
		g_string_append_printf(out, "  xattrs(%s): %s\n", path,
				       strerrorname_np(errno));
		return;
	}
	for (char *p = names; p < names + n; p += strlen(p) + 1)
		g_ptr_array_add(list, p);
	g_ptr_array_sort(list, cmp_str);
	for (guint i = 0; i < list->len; i++) {
		const char *name = list->pdata[i];
		ssize_t vn = lgetxattr(path, name, val, XATTR_BUF_BYTES);
		g_autofree char *v =
		    vn < 0 ? g_strdup(strerrorname_np(errno)) : fmt_data(val, (size_t)vn);

		g_string_append_printf(out, "  xattr(%s) %s=%s\n", path, name, v);
	}
}

void trace_xattrs(const char *path)
{
	g_autoptr(GString) s = g_string_new(NULL);

	fmt_xattrs(s, path);
	if (s->len && s->str[s->len - 1] == '\n')
		g_string_truncate(s, s->len - 1);
	tr("xattrs(%s):%s%s", path, s->len ? "\n" : " none", s->str);
}

/* Sorted names of a directory (with d_type), or NULL and errno. */
static GPtrArray *list_dir(const char *path, bool with_type)
{
	GPtrArray *names;
	struct dirent *de;
	DIR *d = opendir(path);

	if (!d)
		return NULL;
	names = g_ptr_array_new_with_free_func(g_free);
	while ((de = readdir(d)))
		g_ptr_array_add(
		    names, with_type ? g_strdup_printf("%s:%u", de->d_name, de->d_type)
				     : g_strdup(de->d_name));
	closedir(d);
	g_ptr_array_sort(names, cmp_str);
	return names;
}

void trace_dir(const char *path)
{
	g_autoptr(GPtrArray) names = list_dir(path, true);
	g_autoptr(GString) s = g_string_new(NULL);

	if (!names) {
		tr("dir(%s) = %s", path, strerrorname_np(errno));
		return;
	}
	for (guint i = 0; i < names->len; i++)
		g_string_append_printf(s, " %s", (char *)names->pdata[i]);
	tr("dir(%s) = %u entries:%s", path, names->len, s->str);
}

void trace_readlink(const char *path)
{
	char buf[PATH_MAX + 1];
	ssize_t n = readlink(path, buf, sizeof(buf) - 1);

	if (n < 0) {
		tr("readlink(%s) = -1 %s", path, strerrorname_np(errno));
	} else {
		g_autofree char *d = fmt_data(buf, (size_t)n);
		tr("readlink(%s) = %zd %s", path, n, d);
	}
}

int put_file(const char *path, const void *data, size_t len, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
	ssize_t n;

	if (fd < 0) {
		tr("put_file(%s) = -1 %s", path, strerrorname_np(errno));
		return -1;
	}
	n = write(fd, data, len);
	if (n != (ssize_t)len || close(fd) < 0) {
		tr("put_file(%s) write = %zd %s", path, n, strerrorname_np(errno));
		return -1;
	}
	return 0;
}

int put_str(const char *path, const char *s)
{
	return put_file(path, s, strlen(s), 0644);
}

void fill_pattern(void *buf, size_t len, unsigned seed)
{
	unsigned char *p = buf;
	guint32 x = seed * 2654435761u + 1;

	for (size_t i = 0; i < len; i++) {
		x = x * 1103515245u + 12345u;
		p[i] = (unsigned char)(x >> 16);
	}
}

void as_user(uid_t uid, gid_t gid, size_t ngroups, const gid_t *groups)
{
	if (setresuid(-1, 0, -1) < 0 || setgroups(ngroups, groups) < 0 ||
	    setresgid(-1, gid, -1) < 0 || setresuid(-1, uid, -1) < 0)
		tr("as_user(%u): %s", uid, g_strerror(errno));
}

void as_nobody(void)
{
	as_user(NOBODY_ID, NOBODY_ID, 0, NULL);
}

void as_root(void)
{
	if (setresuid(-1, 0, -1) < 0 || setresgid(-1, 0, -1) < 0 ||
	    setgroups(0, NULL) < 0)
		tr("as_root: %s", g_strerror(errno));
}

/* ---- snapshot ---- */

static void snap_entry(const char *path, GHashTable *inos)
{
	g_autoptr(GString) s = g_string_new(path);
	struct stat st;
	gpointer idx;

	if (lstat(path, &st) < 0) {
		tr("%s: lstat %s", path, strerrorname_np(errno));
		return;
	}
	fmt_stat(s, &st,
		 SF_BASIC | (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? SF_RDEV : 0));
	if (!g_hash_table_lookup_extended(inos, &st.st_ino, NULL, &idx)) {
		idx = GUINT_TO_POINTER(g_hash_table_size(inos));
		g_hash_table_insert(inos, g_memdup2(&st.st_ino, sizeof(st.st_ino)), idx);
	}
	g_string_append_printf(s, " ino#%u", GPOINTER_TO_UINT(idx));
	if (S_ISLNK(st.st_mode)) {
		char buf[PATH_MAX + 1];
		ssize_t n = readlink(path, buf, sizeof(buf) - 1);
		g_autofree char *d =
		    n < 0 ? g_strdup(strerrorname_np(errno)) : fmt_data(buf, (size_t)n);
		g_string_append_printf(s, " -> %s", d);
	} else if (S_ISREG(st.st_mode)) {
		g_autofree char *c = file_content(path);
		g_string_append_printf(s, " %s", c);
	}
	g_string_append_c(s, '\n');
	fmt_xattrs(s, path);
	g_string_append(trace, s->str);
	if (S_ISDIR(st.st_mode)) {
		g_autoptr(GPtrArray) names = list_dir(path, false);

		if (!names) {
			tr("%s: opendir %s", path, strerrorname_np(errno));
			return;
		}
		for (guint i = 0; i < names->len; i++) {
			const char *n = names->pdata[i];
			g_autofree char *sub = NULL;

			if (strcmp(n, ".") == 0 || strcmp(n, "..") == 0)
				continue;
			sub = g_strdup_printf("%s/%s", path, n);
			snap_entry(sub, inos);
		}
	}
}

GString *snapshot(const char *dir)
{
	g_autoptr(GHashTable) inos =
	    g_hash_table_new_full(g_int64_hash, g_int64_equal, g_free, NULL);
	GString *saved = trace, *snap = g_string_new(NULL);

	trace = snap;
	if (chdir(dir) < 0)
		tr("chdir %s: %s", dir, strerrorname_np(errno));
	else
		snap_entry(".", inos);
	if (chdir("/") < 0)
		tr("chdir /: %s", strerrorname_np(errno));
	trace = saved;
	return snap;
}
