/* Parity cases: sparse files, SEEK_DATA/SEEK_HOLE, fallocate, copy_file_range,
 * truncate. */
#include "parity.h"

#include <linux/falloc.h>
#include <string.h>

#define KiB 1024LL
#define MiB (1024 * KiB)
#define GiB (1024 * MiB)
#define BLOCK 4096

static void write_block(int fd, off_t off, unsigned seed)
{
	char buf[BLOCK];

	fill_pattern(buf, sizeof(buf), seed);
	if (pwrite(fd, buf, sizeof(buf), off) != sizeof(buf))
		tr("write_block(%lld): %s", (long long)off, strerrorname_np(errno));
}

static void sparse_seek(void)
{
	int fd = TF(open("f", O_CREAT | O_RDWR, 0644));

	write_block(fd, 0, 1);
	write_block(fd, MiB, 2);
	write_block(fd, 3 * MiB, 3);
	T(ftruncate(fd, 5 * MiB));
	T(fsync(fd));
	trace_seekmap(fd);
	T(lseek(fd, 0, SEEK_DATA));
	T(lseek(fd, 0, SEEK_HOLE));
	T(lseek(fd, BLOCK + 10, SEEK_DATA));
	T(lseek(fd, MiB + 10, SEEK_HOLE));
	T(lseek(fd, 3 * MiB + BLOCK, SEEK_DATA)); /* only a hole left: ENXIO */
	T(lseek(fd, 3 * MiB + BLOCK, SEEK_HOLE));
	T(lseek(fd, 5 * MiB, SEEK_DATA));
	T(lseek(fd, 5 * MiB, SEEK_HOLE));
	T(lseek(fd, 6 * MiB, SEEK_HOLE));
	T(lseek(fd, -1, SEEK_DATA));
	trace_pread(fd, 16, 2 * MiB);
	trace_pread(fd, 8, MiB - 4);
	T(close(fd));
	trace_content("f");
}

static void sparse_unsynced(void)
{
	int fd = TF(open("f", O_CREAT | O_RDWR, 0644));

	/* No fsync: the data may still be only in page cache or a queue. */
	write_block(fd, 2 * MiB, 4);
	trace_fstat(fd, SF_SIZE);
	T(lseek(fd, 0, SEEK_DATA));
	T(lseek(fd, 0, SEEK_HOLE));
	T(lseek(fd, 2 * MiB, SEEK_HOLE));
	T(close(fd));
	trace_content("f");
}

static void sparse_empty_and_hole_only(void)
{
	int fd = TF(open("f", O_CREAT | O_RDWR, 0644));

	T(lseek(fd, 0, SEEK_DATA));
	T(lseek(fd, 0, SEEK_HOLE));
	T(ftruncate(fd, 10 * MiB));
	T(lseek(fd, 0, SEEK_DATA));
	T(lseek(fd, 0, SEEK_HOLE));
	T(lseek(fd, 10 * MiB - 1, SEEK_HOLE));
	trace_pread(fd, 32, 5 * MiB);
	T(close(fd));
	trace_stat("f", SF_SIZE | SF_BLOCKS);
}

static void sparse_over_4g(void)
{
	off_t at = 4 * GiB - 2;
	int fd = TF(open("big", O_CREAT | O_RDWR, 0644));

	T(pwrite(fd, "abcd", 4, at)); /* across the 4 GiB line */
	write_block(fd, 5 * GiB, 5);
	trace_fstat(fd, SF_SIZE);
	T(fsync(fd));
	trace_seekmap(fd);
	T(lseek(fd, 0, SEEK_DATA));
	T(lseek(fd, 0, SEEK_HOLE));
	T(lseek(fd, 4 * GiB + BLOCK, SEEK_DATA));
	T(lseek(fd, 5 * GiB, SEEK_HOLE));
	trace_pread(fd, 8, at - 2);
	trace_pread(fd, 16, 4 * GiB + 100);
	trace_pread(fd, 8, 5 * GiB + BLOCK - 4);
	T(lseek(fd, 0, SEEK_END));
	T(ftruncate(fd, 6 * GiB + 1));
	trace_fstat(fd, SF_SIZE);
	T(ftruncate(fd, 4 * GiB));
	trace_seekmap(fd);
	T(close(fd));
	trace_stat("big", SF_SIZE);
	trace_content("big");
}

static void fallocate_extend(void)
{
	int fd = TF(open("f", O_CREAT | O_RDWR, 0644));

	T(fallocate(fd, 0, 0, MiB));
	trace_fstat(fd, SF_SIZE);
	T(fallocate(fd, 0, 2 * MiB, 64 * KiB));
	trace_fstat(fd, SF_SIZE);
	T(pwrite(fd, "x", 1, 100));
	trace_pread(fd, 8, 96);
	T(close(fd));
	trace_content("f");
}

static void fallocate_keep_size(void)
{
	int fd = TF(open("f", O_CREAT | O_RDWR, 0644));

	T(write(fd, "short", 5));
	T(fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, MiB));
	trace_fstat(fd, SF_SIZE);
	T(lseek(fd, 0, SEEK_END));
	trace_pread(fd, 16, 0);
	T(close(fd));
	trace_content("f");
}

static void fallocate_punch(void)
{
	char buf[64 * KiB];
	int fd;

	fill_pattern(buf, sizeof(buf), 7);
	put_file("f", buf, sizeof(buf), 0644);
	fd = TF(open("f", O_RDWR));
	T(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 16 * KiB, 16 * KiB));
	T(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 100, 10));
	T(fallocate(fd, FALLOC_FL_PUNCH_HOLE, 0, BLOCK)); /* needs KEEP_SIZE */
	trace_fstat(fd, SF_SIZE);
	T(fsync(fd));
	trace_seekmap(fd);
	trace_pread(fd, 20, 95);
	trace_pread(fd, 16, 16 * KiB - 8);
	T(close(fd));
	trace_content("f");
}

static void fallocate_zero_range(void)
{
	char buf[32 * KiB];
	int fd;

	fill_pattern(buf, sizeof(buf), 8);
	put_file("f", buf, sizeof(buf), 0644);
	fd = TF(open("f", O_RDWR));
	T(fallocate(fd, FALLOC_FL_ZERO_RANGE, BLOCK, 2 * BLOCK));
	T(fallocate(fd, FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, 30 * KiB, 8 * KiB));
	trace_fstat(fd, SF_SIZE);
	trace_pread(fd, 16, BLOCK - 8);
	T(close(fd));
	trace_content("f");
}

static void fallocate_errors(void)
{
	int ro, fd = TF(open("f", O_CREAT | O_RDWR, 0644));

	T(fallocate(fd, 0, 0, 0));
	T(fallocate(fd, 0, -1, 10));
	T(fallocate(fd, 0, 10, -1));
	T(fallocate(fd, 0x4000, 0, 10));
	ro = TF(open("f", O_RDONLY));
	T(fallocate(ro, 0, 0, 10));
	T(close(ro));
	T(close(fd));
	trace_stat("f", SF_SIZE);
}

static void copy_range_basic(void)
{
	g_autofree char *buf = g_malloc(200 * KiB);
	int in, out;

	fill_pattern(buf, 200 * KiB, 9);
	put_file("src", buf, 200 * KiB, 0644);
	in = TF(open("src", O_RDONLY));
	out = TF(open("dst", O_CREAT | O_WRONLY, 0644));
	T(copy_file_range(in, NULL, out, NULL, 200 * KiB, 0));
	T(lseek(in, 0, SEEK_CUR));
	T(lseek(out, 0, SEEK_CUR));
	T(copy_file_range(in, NULL, out, NULL, 100, 0)); /* at EOF: 0 */
	T(close(in));
	T(close(out));
	trace_content("dst");
	trace_stat("dst", SF_SIZE);
}

static void copy_range_offsets(void)
{
	loff_t oin = 10, oout = 1000;
	int in, out;

	put_str("src", "0123456789abcdefghijklmnopqrstuvwxyz");
	put_str("dst", "DESTINATION");
	in = TF(open("src", O_RDONLY));
	out = TF(open("dst", O_WRONLY));
	T(copy_file_range(in, &oin, out, &oout, 10, 0));
	tr("oin=%lld oout=%lld", (long long)oin, (long long)oout);
	oout = 2;
	T(copy_file_range(in, &oin, out, &oout, 5, 0));
	tr("oin=%lld oout=%lld", (long long)oin, (long long)oout);
	T(lseek(in, 0, SEEK_CUR));
	T(lseek(out, 0, SEEK_CUR));
	oin = 100;
	T(copy_file_range(in, &oin, out, NULL, 5, 0));
	T(close(in));
	T(close(out));
	trace_content("dst");
	trace_stat("dst", SF_SIZE);
}

static void copy_range_same_file(void)
{
	loff_t a = 0, b = 4;
	int fd;

	put_str("f", "abcdefghijklmnop");
	fd = TF(open("f", O_RDWR));
	T(copy_file_range(fd, &a, fd, &b, 8, 0)); /* overlapping: EINVAL */
	a = 0;
	b = 8;
	T(copy_file_range(fd, &a, fd, &b, 8, 0));
	T(close(fd));
	trace_content("f");
}

static void copy_range_errors(void)
{
	int in, ro, app, dir;

	put_str("src", "source");
	put_str("dst", "dest");
	in = TF(open("src", O_RDONLY));
	ro = TF(open("dst", O_RDONLY));
	app = TF(open("dst", O_WRONLY | O_APPEND));
	T(mkdir("d", 0755));
	dir = TF(open("d", O_RDONLY | O_DIRECTORY));
	T(copy_file_range(in, NULL, ro, NULL, 3, 0));
	T(copy_file_range(in, NULL, app, NULL, 3, 0));
	T(copy_file_range(app, NULL, ro, NULL, 3, 0));
	T(copy_file_range(in, NULL, dir, NULL, 3, 0));
	T(copy_file_range(dir, NULL, app, NULL, 3, 0));
	T(copy_file_range(in, NULL, app, NULL, 3, 1));
	T(close(in));
	T(close(ro));
	T(close(app));
	T(close(dir));
	trace_content("dst");
}

static void copy_range_sparse(void)
{
	int in, out;

	in = TF(open("src", O_CREAT | O_RDWR, 0644));
	write_block(in, 0, 10);
	write_block(in, 2 * MiB, 11);
	out = TF(open("dst", O_CREAT | O_RDWR, 0644));
	T(copy_file_range(in, NULL, out, NULL, 2 * MiB + BLOCK, 0));
	trace_fstat(out, SF_SIZE);
	T(close(in));
	T(close(out));
	trace_content("dst");
}

static void truncate_path(void)
{
	put_str("f", "0123456789");
	T(truncate("f", 4));
	trace_content("f");
	T(truncate("f", 100));
	trace_stat("f", SF_SIZE);
	trace_content("f");
	T(truncate("f", 0));
	trace_stat("f", SF_SIZE);
	T(truncate("f", 3 * GiB));
	trace_stat("f", SF_SIZE);
}

static void truncate_errors(void)
{
	int ro;

	put_str("f", "content");
	T(mkdir("d", 0755));
	T(symlink("f", "l"));
	T(truncate("f", -1));
	T(truncate("d", 0));
	T(truncate("missing", 0));
	T(truncate("f/x", 0));
	T(truncate("l", 2)); /* follows the link */
	ro = TF(open("f", O_RDONLY));
	T(ftruncate(ro, 0));
	T(close(ro));
	trace_stat("f", SF_SIZE);
	trace_stat("l", SF_TYPE | SF_SIZE);
}

static void ftruncate_grow_shrink(void)
{
	int fd = TF(open("f", O_CREAT | O_RDWR, 0644));

	T(write(fd, "abcdefgh", 8));
	T(ftruncate(fd, 3));
	T(lseek(fd, 0, SEEK_CUR));
	T(write(fd, "Z", 1)); /* at 8: a hole between */
	trace_pread(fd, 16, 0);
	T(ftruncate(fd, 64 * KiB));
	trace_fstat(fd, SF_SIZE);
	T(ftruncate(fd, 5));
	trace_pread(fd, 16, 0);
	T(close(fd));
	trace_content("f");
}

const struct pcase cases_space[] = {
    {"sparse_seek", sparse_seek},
    {"sparse_unsynced", sparse_unsynced},
    {"sparse_empty_and_hole_only", sparse_empty_and_hole_only},
    {"sparse_over_4g", sparse_over_4g},
    {"fallocate_extend", fallocate_extend},
    {"fallocate_keep_size", fallocate_keep_size},
    {"fallocate_punch", fallocate_punch},
    {"fallocate_zero_range", fallocate_zero_range},
    {"fallocate_errors", fallocate_errors},
    {"copy_range_basic", copy_range_basic},
    {"copy_range_offsets", copy_range_offsets},
    {"copy_range_same_file", copy_range_same_file},
    {"copy_range_errors", copy_range_errors},
    {"copy_range_sparse", copy_range_sparse},
    {"truncate_path", truncate_path},
    {"truncate_errors", truncate_errors},
    {"ftruncate_grow_shrink", ftruncate_grow_shrink},
    {NULL, NULL},
};
