/* Parity cases: open flags (O_CREAT, O_EXCL, O_TRUNC, O_APPEND), modes, reads, writes. */
#include "parity.h"

#include <stdio.h>
#include <string.h>
#include <sys/uio.h>

#define BIG_BYTES (300 * 1024) /* more than one FUSE write request */

static void create_basic(void)
{
	int fd = TF(open("f", O_CREAT | O_WRONLY, 0644));

	T(write(fd, "hello", 5));
	trace_fstat(fd, SF_BASIC);
	T(close(fd));
	trace_stat("f", SF_BASIC);
	trace_content("f");
}

static void create_excl_new(void)
{
	int fd = TF(open("f", O_CREAT | O_EXCL | O_RDWR, 0600));

	T(write(fd, "x", 1));
	T(close(fd));
	trace_stat("f", SF_BASIC);
}

static void create_excl_exists(void)
{
	put_str("f", "old");
	T(open("f", O_CREAT | O_EXCL | O_WRONLY, 0600));
	T(open("f", O_CREAT | O_EXCL | O_WRONLY | O_TRUNC, 0600));
	T(mkdir("d", 0755));
	T(open("d", O_CREAT | O_EXCL | O_RDONLY, 0600));
	trace_content("f");
}

static void create_excl_dangling_symlink(void)
{
	T(symlink("target", "l"));
	T(open("l", O_CREAT | O_EXCL | O_WRONLY, 0644));
	trace_stat("target", SF_BASIC);
}

static void create_through_dangling_symlink(void)
{
	int fd;

	T(symlink("target", "l"));
	fd = TF(open("l", O_CREAT | O_WRONLY, 0640));
	T(write(fd, "via link", 8));
	T(close(fd));
	trace_stat("target", SF_BASIC);
	trace_content("target");
}

static void create_existing_keeps_mode(void)
{
	int fd;

	put_file("f", "abc", 3, 0600);
	fd = TF(open("f", O_CREAT | O_WRONLY, 0777));
	T(close(fd));
	trace_stat("f", SF_BASIC);
	trace_content("f");
}

static void open_errors(void)
{
	put_str("f", "x");
	T(symlink("f", "l"));
	T(mkdir("d", 0755));
	T(open("missing", O_RDONLY));
	T(open("missing/x", O_RDONLY | O_CREAT, 0644));
	T(open("f/x", O_RDONLY));
	T(open("f/x", O_RDONLY | O_CREAT, 0644));
	T(open("d", O_WRONLY));
	T(open("d", O_RDWR));
	T(open("f", O_RDONLY | O_DIRECTORY));
	T(open("l", O_RDONLY | O_NOFOLLOW));
	T(open("d", O_CREAT | O_DIRECTORY | O_RDONLY, 0755));
	T(open("new", O_CREAT | O_DIRECTORY | O_RDONLY, 0755));
	trace_dir(".");
}

static void open_rdonly_write(void)
{
	char c;
	int fd;

	put_str("f", "data");
	fd = TF(open("f", O_RDONLY));
	T(write(fd, "x", 1));
	T(read(fd, &c, 1));
	T(close(fd));
	fd = TF(open("f", O_WRONLY));
	T(read(fd, &c, 1));
	T(close(fd));
}

static void trunc_on_open(void)
{
	char buf[200];
	int fd;

	memset(buf, 'a', sizeof(buf));
	put_file("f", buf, sizeof(buf), 0644);
	fd = TF(open("f", O_WRONLY | O_TRUNC));
	trace_fstat(fd, SF_SIZE);
	T(write(fd, "new", 3));
	T(close(fd));
	trace_stat("f", SF_BASIC);
	trace_content("f");
}

static void trunc_rdonly(void)
{
	int fd;

	put_str("f", "0123456789");
	fd = TF(open("f", O_RDONLY | O_TRUNC)); /* Linux truncates anyway */
	trace_fstat(fd, SF_SIZE);
	T(close(fd));
	trace_content("f");
}

static void trunc_creat_existing(void)
{
	int fd;

	put_file("f", "long old content", 16, 0640);
	fd = TF(open("f", O_CREAT | O_TRUNC | O_RDWR, 0777));
	T(write(fd, "ab", 2));
	trace_pread(fd, 10, 0);
	T(close(fd));
	trace_stat("f", SF_BASIC);
}

static void trunc_directory(void)
{
	T(mkdir("d", 0755));
	T(open("d", O_RDONLY | O_TRUNC));
	T(open("d", O_WRONLY | O_TRUNC));
}

static void append_basic(void)
{
	int fd;

	put_str("f", "abc");
	fd = TF(open("f", O_WRONLY | O_APPEND));
	T(lseek(fd, 0, SEEK_SET));
	T(write(fd, "def", 3));
	T(lseek(fd, 0, SEEK_CUR));
	T(write(fd, "gh", 2));
	T(close(fd));
	trace_content("f");
	trace_stat("f", SF_SIZE);
}

static void append_pwrite(void)
{
	int fd;

	put_str("f", "12345");
	fd = TF(open("f", O_WRONLY | O_APPEND));
	T(pwrite(fd, "XY", 2, 1)); /* Linux appends regardless of the offset */
	T(close(fd));
	trace_content("f");
}

static void append_two_fds(void)
{
	int a, w;

	put_str("f", "start");
	a = TF(open("f", O_WRONLY | O_APPEND));
	w = TF(open("f", O_WRONLY));
	T(pwrite(w, "0123456789", 10, 0));
	T(write(a, "+app", 4));
	T(pwrite(w, "Z", 1, 20));
	T(write(a, "!", 1));
	T(close(a));
	T(close(w));
	trace_content("f");
	trace_stat("f", SF_SIZE);
}

static void append_rdwr_read(void)
{
	char buf[4];
	int fd;

	put_str("f", "abcdef");
	fd = TF(open("f", O_RDWR | O_APPEND));
	T(read(fd, buf, 3));
	T(lseek(fd, 0, SEEK_CUR));
	T(write(fd, "XYZ", 3));
	T(lseek(fd, 0, SEEK_CUR));
	T(read(fd, buf, 3));
	T(lseek(fd, 2, SEEK_SET));
	T(read(fd, buf, 3));
	T(close(fd));
	trace_content("f");
}

static void append_create(void)
{
	int fd = TF(open("f", O_WRONLY | O_APPEND | O_CREAT, 0644));

	T(write(fd, "one", 3));
	T(close(fd));
	fd = TF(open("f", O_WRONLY | O_APPEND | O_CREAT, 0644));
	T(write(fd, "two", 3));
	T(close(fd));
	trace_content("f");
}

static void append_truncate_between(void)
{
	int fd;

	put_str("f", "abcdefgh");
	fd = TF(open("f", O_WRONLY | O_APPEND));
	T(truncate("f", 2));
	T(write(fd, "Q", 1));
	T(ftruncate(fd, 10));
	T(write(fd, "R", 1));
	T(close(fd));
	trace_content("f");
}

static void umask_zero(void)
{
	int fd;

	umask(0);
	fd = TF(open("f", O_CREAT | O_WRONLY, 0777));
	T(close(fd));
	T(mkdir("d", 0777));
	T(mkfifo("p", 0666));
	T(mknod("n", S_IFREG | 0666, 0));
	trace_stat("f", SF_MODE);
	trace_stat("d", SF_MODE);
	trace_stat("p", SF_MODE);
	trace_stat("n", SF_MODE);
}

static void umask_027(void)
{
	int fd;

	umask(027);
	fd = TF(open("f", O_CREAT | O_WRONLY, 0666));
	T(close(fd));
	T(mkdir("d", 0777));
	trace_stat("f", SF_MODE);
	trace_stat("d", SF_MODE);
}

static void create_special_modes(void)
{
	int fd;

	umask(0);
	fd = TF(open("suid", O_CREAT | O_WRONLY, 06755));
	T(close(fd));
	T(mkdir("sticky", 01777));
	T(mkdir("sgid", 02755));
	trace_stat("suid", SF_BASIC);
	trace_stat("sticky", SF_BASIC);
	trace_stat("sgid", SF_BASIC);
}

static void rw_big(void)
{
	g_autofree char *buf = g_malloc(BIG_BYTES);
	int fd;

	fill_pattern(buf, BIG_BYTES, 1);
	put_file("f", buf, BIG_BYTES, 0644);
	fd = TF(open("f", O_RDWR));
	trace_pread(fd, 1000, 131000);
	trace_pread(fd, 100, BIG_BYTES - 50);
	trace_pread(fd, BIG_BYTES, 0);
	T(pwrite(fd, "MID", 3, BIG_BYTES / 2));
	trace_pread(fd, 7, BIG_BYTES / 2 - 2);
	T(close(fd));
	trace_content("f");
	trace_stat("f", SF_SIZE);
}

static void rw_beyond_eof(void)
{
	int fd = TF(open("f", O_CREAT | O_RDWR, 0644));

	T(pwrite(fd, "tail", 4, 1 << 20));
	trace_fstat(fd, SF_SIZE);
	trace_pread(fd, 16, (1 << 20) - 8);
	trace_pread(fd, 16, (1 << 20) + 4);
	trace_pread(fd, 16, 5 << 20);
	T(lseek(fd, 0, SEEK_END));
	T(lseek(fd, -2, SEEK_END));
	T(lseek(fd, -1, SEEK_SET));
	T(lseek(fd, 3, SEEK_CUR));
	T(lseek(fd, 0, 17));
	T(close(fd));
	trace_content("f");
}

static void rw_vectors(void)
{
	char a[5], b[7];
	struct iovec out[3] = {{"abc", 3}, {"", 0}, {"defghij", 7}};
	struct iovec in[2] = {{a, sizeof(a)}, {b, sizeof(b)}};
	int fd = TF(open("f", O_CREAT | O_RDWR, 0644));

	T(writev(fd, out, 3));
	T(pwritev(fd, out, 1, 20));
	T(preadv(fd, in, 2, 0));
	tr("a=%.5s", a);
	T(close(fd));
	trace_content("f");
}

static void unlink_open_file(void)
{
	int fd;

	put_str("f", "still here");
	fd = TF(open("f", O_RDWR));
	T(unlink("f"));
	trace_fstat(fd, SF_BASIC);
	T(pwrite(fd, "STILL", 5, 0));
	trace_pread(fd, 32, 0);
	T(fsync(fd));
	T(ftruncate(fd, 3));
	trace_fstat(fd, SF_SIZE | SF_NLINK);
	T(access("f", F_OK));
	T(close(fd));
	trace_dir(".");
}

static void fsync_file(void)
{
	int fd = TF(open("f", O_CREAT | O_WRONLY, 0644));

	T(write(fd, "synced", 6));
	T(fsync(fd));
	T(fdatasync(fd));
	T(syncfs(fd));
	T(close(fd));
	trace_content("f");
}

static void close_twice(void)
{
	int fd = TF(open("f", O_CREAT | O_WRONLY, 0644));
	int dup_fd = TF(dup(fd));

	T(write(dup_fd, "dup", 3));
	T(close(fd));
	T(write(dup_fd, "!", 1));
	T(close(dup_fd));
	T(close(dup_fd));
	trace_content("f");
}

const struct pcase cases_file[] = {
    {"create_basic", create_basic},
    {"create_excl_new", create_excl_new},
    {"create_excl_exists", create_excl_exists},
    {"create_excl_dangling_symlink", create_excl_dangling_symlink},
    {"create_through_dangling_symlink", create_through_dangling_symlink},
    {"create_existing_keeps_mode", create_existing_keeps_mode},
    {"open_errors", open_errors},
    {"open_rdonly_write", open_rdonly_write},
    {"trunc_on_open", trunc_on_open},
    {"trunc_rdonly", trunc_rdonly},
    {"trunc_creat_existing", trunc_creat_existing},
    {"trunc_directory", trunc_directory},
    {"append_basic", append_basic},
    {"append_pwrite", append_pwrite},
    {"append_two_fds", append_two_fds},
    {"append_rdwr_read", append_rdwr_read},
    {"append_create", append_create},
    {"append_truncate_between", append_truncate_between},
    {"umask_zero", umask_zero},
    {"umask_027", umask_027},
    {"create_special_modes", create_special_modes},
    {"rw_big", rw_big},
    {"rw_beyond_eof", rw_beyond_eof},
    {"rw_vectors", rw_vectors},
    {"unlink_open_file", unlink_open_file},
    {"fsync_file", fsync_file},
    {"close_twice", close_twice},
    {NULL, NULL},
};
