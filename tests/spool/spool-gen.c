/*
 * spool-gen: spools for tests/spool/spool-cli.sh, written through
 * sched/spool.c as a daemon would, and what recovering them must give.
 *
 *   spool-gen make DIR EXPECT   medium MEDIUM_A: writes (with holes), a
 *                               truncate, an unlink, renames, times, plain and
 *                               KEEP_SIZE fallocates, over several segments;
 *                               EXPECT gets the tree they make from nothing
 *                               (plain syscalls, not the recover code).
 *                               Prints medium=, key=, records=, files=,
 *                               pending_bytes=, segments= lines.
 *   spool-gen other DIR         a second medium, its id with '/', ' ', a tab
 *                               and UTF-8 (prints medium= and key=)
 *   spool-gen escape DIR        medium MEDIUM_E: sub/evil.txt, ok.txt,
 *                               link.txt, a rename into sub/ (for a DEST
 *                               with symlinks planted)
 *   spool-gen damage DIR        medium MEDIUM_D: 3 segments of 3 writes,
 *                               a bit of the 2nd record of segment 2 flipped
 *   spool-gen hold DIR ID READY open medium ID's spool (its lock) and hold
 *                               it until killed; READY is made once it is
 *   spool-gen records DIR ID    medium ID: the records read from stdin, one
 *                               per line: "write PATH OFFSET TEXT" (TEXT
 *                               to the end of the line), "truncate PATH
 *                               SIZE", "rotate" (a new segment); for the
 *                               replay tests of tests/mount/spool
 */
#include <errno.h>
#include <fcntl.h>
#include <glib.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "spool.h"

#define MEDIUM_A "uuid:5e1f0000-aaaa-4bbb-8ccc-0123456789ab"
#define MEDIUM_OTHER "vfat/ZIP 100 \xc3\xa9\tx"
#define MEDIUM_E "uuid:e5ca0000-0000-4000-8000-000000000001"
#define MEDIUM_D "uuid:da0a0000-0000-4000-8000-000000000002"
#define GEN_SEGMENT_MAX 4096

static void die(const char *what, int err)
{
	fprintf(stderr, "spool-gen: %s: %s\n", what, g_strerror(err < 0 ? -err : err));
	exit(1);
}

struct gen {
	struct spool *sp;
	const char *expect; /* NULL: no tree */
	GHashTable *paths;
	uint64_t records, bytes;
};

static struct spool *open_spool(const char *dir, const char *medium)
{
	struct spool_medium_desc d = {
	    .label = "GEN", .source = "/dev/gen0", .size = 100 << 20};
	char why[SPOOL_WHY_MAX] = "";
	struct spool *sp;
	int r = spool_open(dir, medium, &d, &sp, why);

	if (r) {
		fprintf(stderr, "spool-gen: %s\n", why);
		exit(1);
	}
	return sp;
}

static void put(struct gen *g, uint64_t key, const struct spj_record *r,
		const void *payload)
{
	int err = spool_append(g->sp, key, r, payload, NULL);

	if (err)
		die(r->path, err);
	g->records++;
	g_hash_table_add(g->paths, g_strdup(r->path));
	if (r->type == SPJ_WRITE)
		g->bytes += r->payload_len;
}

/* ---- the expected tree: the operations done directly ---- */

static char *epath(struct gen *g, const char *path)
{
	return g_build_filename(g->expect, path, NULL);
}

static void eparent(struct gen *g, const char *path)
{
	g_autofree char *p = epath(g, path), *dir = g_path_get_dirname(p);

	if (g_mkdir_with_parents(dir, 0700) < 0)
		die(dir, errno);
}

static int eopen(struct gen *g, const char *path)
{
	g_autofree char *p = epath(g, path);
	int fd;

	eparent(g, path);
	fd = open(p, O_WRONLY | O_CREAT, 0600);
	if (fd < 0)
		die(p, errno);
	return fd;
}

/* ---- records, each made in the spool and in the tree ---- */

static void g_write(struct gen *g, uint64_t key, const char *path, uint64_t off,
		    const void *data, size_t len)
{
	struct spj_record r = {.type = SPJ_WRITE,
			       .path = path,
			       .offset = off,
			       .length = len,
			       .payload_len = len};

	put(g, key, &r, data);
	if (g->expect) {
		int fd = eopen(g, path);
		if (pwrite(fd, data, len, (off_t)off) != (ssize_t)len)
			die(path, errno);
		close(fd);
	}
}

static void g_truncate(struct gen *g, uint64_t key, const char *path, uint64_t size)
{
	struct spj_record r = {.type = SPJ_TRUNCATE, .path = path, .offset = size};

	put(g, key, &r, NULL);
	if (g->expect) {
		int fd = eopen(g, path);
		if (ftruncate(fd, (off_t)size) < 0)
			die(path, errno);
		close(fd);
	}
}

static void g_fallocate(struct gen *g, uint64_t key, const char *path, uint64_t off,
			uint64_t len, uint32_t mode)
{
	struct spj_record r = {.type = SPJ_FALLOCATE,
			       .path = path,
			       .offset = off,
			       .length = len,
			       .mode = mode};

	put(g, key, &r, NULL);
	if (g->expect && !mode) { /* KEEP_SIZE and the like change nothing seen */
		int fd = eopen(g, path);
		if (posix_fallocate(fd, (off_t)off, (off_t)len))
			die(path, EIO);
		close(fd);
	}
}

static void g_times(struct gen *g, uint64_t key, const char *path, int64_t atime_ns,
		    int64_t mtime_ns, bool in_tree)
{
	struct spj_record r = {
	    .type = SPJ_TIMES, .path = path, .payload_len = SPJ_TIMES_SIZE};
	uint8_t t[SPJ_TIMES_SIZE];

	spj_times_pack(t, atime_ns, mtime_ns);
	put(g, key, &r, t);
	if (g->expect && in_tree) {
		g_autofree char *p = epath(g, path);
		struct timespec ts[2] = {
		    {.tv_nsec = UTIME_OMIT},
		    {.tv_sec = mtime_ns / 1000000000, .tv_nsec = mtime_ns % 1000000000},
		};
		if (atime_ns != SPJ_TIME_OMIT)
			ts[0] = (struct timespec){atime_ns / 1000000000,
						  atime_ns % 1000000000};
		if (utimensat(AT_FDCWD, p, ts, AT_SYMLINK_NOFOLLOW) < 0)
			die(p, errno);
	}
}

static void g_rename(struct gen *g, uint64_t key, const char *from, const char *to)
{
	struct spj_record r = {
	    .type = SPJ_RENAME, .path = from, .payload_len = strlen(to)};

	put(g, key, &r, to);
	if (g->expect) {
		g_autofree char *a = epath(g, from), *b = epath(g, to);
		eparent(g, to);
		if (rename(a, b) < 0)
			die(a, errno);
	}
}

static void g_unlink(struct gen *g, uint64_t key, const char *path)
{
	struct spj_record r = {.type = SPJ_UNLINK, .path = path};

	put(g, key, &r, NULL);
	if (g->expect) {
		g_autofree char *p = epath(g, path);
		if (unlink(p) < 0)
			die(p, errno);
	}
}

static void print_figures(struct gen *g, const char *medium)
{
	char key[SPOOL_KEY_MAX + 1];
	struct spool_stats st;

	spool_get_stats(g->sp, &st);
	spool_medium_key(medium, key);
	printf("medium=%s\nkey=%s\nrecords=%" PRIu64 "\nfiles=%u\npending_bytes=%" PRIu64
	       "\nsegments=%u\n",
	       medium, key, g->records, g_hash_table_size(g->paths), g->bytes,
	       st.segments);
}

static void fill(uint8_t *b, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)(seed * 131 + i * 7 + (i >> 8));
}

static int cmd_make(const char *dir, const char *expect)
{
	struct gen g = {.expect = expect,
			.paths =
			    g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL)};
	static const char hello[] = "hello, slow world\n";
	uint8_t buf[5000];
	int err;

	if (g_mkdir_with_parents(expect, 0700) < 0)
		die(expect, errno);
	g.sp = open_spool(dir, MEDIUM_A);
	spool_set_segment_max(g.sp, GEN_SEGMENT_MAX);
	for (int i = 0; i < 40; i++)
		g_write(&g, 1, "docs/readme.txt", (uint64_t)i * (sizeof(hello) - 1),
			hello, sizeof(hello) - 1);
	g_write(&g, 1, "docs/readme.txt", 10000, "tail\n", 5); /* a hole before */
	for (unsigned i = 0; i < 4; i++) {
		fill(buf, sizeof(buf), i);
		g_write(&g, 2, "big.bin", i * sizeof(buf), buf, sizeof(buf));
	}
	g_truncate(&g, 2, "big.bin", 12345);
	fill(buf, 100, 9);
	g_write(&g, 3, "tmp/scratch", 0, buf, 100);
	g_unlink(&g, 3, "tmp/scratch");
	fill(buf, 50, 10);
	g_write(&g, 4, "old name.txt", 0, buf, 50);
	g_rename(&g, 4, "old name.txt", "renamed/new name.txt");
	g_write(&g, 4, "renamed/new name.txt", 50, "!", 1);
	g_fallocate(&g, 5, "alloc.bin", 0, 8192, 0);
	g_fallocate(&g, 5, "alloc.bin", 0, 65536, 1 /* FALLOC_FL_KEEP_SIZE */);
	g_write(&g, 6, "bin\xff.dat", 0, "odd name", 8);
	g_times(&g, 1, "docs/readme.txt", SPJ_TIME_OMIT, 1600000000500000000LL, true);
	g_times(&g, 7, "missing.txt", 1, 2, false); /* its file is on the medium only */
	err = spool_sync(g.sp);
	if (err)
		die("sync", err);
	print_figures(&g, MEDIUM_A);
	err = spool_close(g.sp);
	if (err)
		die("close", err);
	g_hash_table_unref(g.paths);
	return 0;
}

static int cmd_other(const char *dir)
{
	struct gen g = {.paths =
			    g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL)};

	g.sp = open_spool(dir, MEDIUM_OTHER);
	g_write(&g, 1, "x", 0, "12345", 5);
	print_figures(&g, MEDIUM_OTHER);
	spool_close(g.sp);
	g_hash_table_unref(g.paths);
	return 0;
}

static int cmd_escape(const char *dir)
{
	struct gen g = {.paths =
			    g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL)};

	g.sp = open_spool(dir, MEDIUM_E);
	g_write(&g, 1, "sub/evil.txt", 0, "escaped!", 8);
	g_write(&g, 2, "ok.txt", 0, "fine", 4);
	g_write(&g, 3, "link.txt", 0, "through a link", 14);
	g_rename(&g, 2, "ok.txt", "sub/moved.txt");
	g_write(&g, 4, "ok2.txt", 0, "fine too", 8);
	print_figures(&g, MEDIUM_E);
	spool_close(g.sp);
	g_hash_table_unref(g.paths);
	return 0;
}

static int cmd_damage(const char *dir)
{
	struct gen g = {.paths =
			    g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL)};
	char key[SPOOL_KEY_MAX + 1];
	g_autofree char *seg = NULL;
	uint8_t b;
	int fd;

	g.sp = open_spool(dir, MEDIUM_D);
	for (unsigned i = 0; i < 9; i++) {
		char path[32];
		snprintf(path, sizeof(path), "f%u", i);
		g_write(&g, 1, path, 0, "0123456789", 10);
		if (i % 3 == 2)
			spool_rotate(g.sp);
	}
	print_figures(&g, MEDIUM_D);
	spool_close(g.sp);
	spool_medium_key(MEDIUM_D, key);
	/* Record 5 begins at the header (32 + id + 4) plus one record of
	 * 56 + 2 + 10 bytes; a byte of its payload flipped. */
	seg = g_strdup_printf("%s/%s/0000000000000004.spj", dir, key);
	fd = open(seg, O_RDWR);
	if (fd < 0)
		die(seg, errno);
	{
		off_t off = 32 + (off_t)strlen(MEDIUM_D) + 4 + (56 + 2 + 10) + 56 + 2 + 3;
		if (pread(fd, &b, 1, off) != 1)
			die(seg, EIO);
		b ^= 0x10;
		if (pwrite(fd, &b, 1, off) != 1)
			die(seg, EIO);
	}
	close(fd);
	g_hash_table_unref(g.paths);
	return 0;
}

G_GNUC_NORETURN
static void cmd_hold(const char *dir, const char *medium, const char *ready)
{
	struct spool *sp = open_spool(dir, medium);
	int fd = open(ready, O_WRONLY | O_CREAT | O_EXCL, 0600);

	(void)sp;
	if (fd < 0)
		die(ready, errno);
	close(fd);
	for (;;)
		pause(); /* until killed: the lock goes with the process */
}

static int cmd_records(const char *dir, const char *medium)
{
	struct gen g = {.sp = open_spool(dir, medium),
			.paths = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL)};
	char line[8192], path[4097];
	unsigned long long n;
	int used;

	while (fgets(line, sizeof(line), stdin)) {
		line[strcspn(line, "\n")] = '\0';
		if (sscanf(line, "write %4096s %llu %n", path, &n, &used) == 2)
			g_write(&g, 1, path, n, line + used, strlen(line + used));
		else if (sscanf(line, "truncate %4096s %llu", path, &n) == 2)
			g_truncate(&g, 1, path, n);
		else if (strcmp(line, "rotate") == 0)
			spool_rotate(g.sp);
		else if (line[0])
			die(line, EINVAL);
	}
	printf("records=%" PRIu64 "\n", g.records);
	spool_close(g.sp);
	g_hash_table_destroy(g.paths);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 4 && !strcmp(argv[1], "make"))
		return cmd_make(argv[2], argv[3]);
	if (argc == 3 && !strcmp(argv[1], "other"))
		return cmd_other(argv[2]);
	if (argc == 3 && !strcmp(argv[1], "escape"))
		return cmd_escape(argv[2]);
	if (argc == 3 && !strcmp(argv[1], "damage"))
		return cmd_damage(argv[2]);
	if (argc == 5 && !strcmp(argv[1], "hold"))
		cmd_hold(argv[2], argv[3], argv[4]);
	if (argc == 4 && !strcmp(argv[1], "records"))
		return cmd_records(argv[2], argv[3]);
	fprintf(stderr, "usage: spool-gen make DIR EXPECT | other DIR | escape DIR | "
			"damage DIR | hold DIR ID READY | records DIR ID\n");
	return 2;
}
