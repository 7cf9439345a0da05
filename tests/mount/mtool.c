/*
 * mtool: loops the shell would need thousands of processes for.
 *
 *   mtool churn DIR N         N cycles of create+write+close+unlink, plus renames,
 *                             links, symlinks, mkdir/rmdir, held-open files
 *   mtool mkfiles DIR N       create DIR/f00000.. each holding its own name
 *   mtool checkfiles DIR N    read every file back: content must be its name
 *   mtool unlinked-open FILE DIR
 *                             open FILE, unlink it, stat every file in DIR (so
 *                             the daemon's fd cache moves on), then use the fd
 *
 * Exit status 0 when everything worked, 1 with a message per problem.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define HELD_OPEN 100 /* files held open at once in the churn */
#define MAX_PROBLEMS 20

static int problems;

/* Report one problem (the first MAX_PROBLEMS of them); err 0: no errno. */
static void problem(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void problem(int err, const char *fmt, ...)
{
	va_list ap;

	if (++problems > MAX_PROBLEMS)
		return;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, err ? ": %s\n" : "\n", strerror(err));
}

static int at(const char *dir, const char *name, char *buf, size_t len)
{
	return snprintf(buf, len, "%s/%s", dir, name);
}

static void create_write(const char *path, const char *data)
{
	int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);

	if (fd < 0) {
		problem(errno, "create %s", path);
		return;
	}
	if (write(fd, data, strlen(data)) != (ssize_t)strlen(data))
		problem(errno, "write %s", path);
	if (close(fd) < 0)
		problem(errno, "close %s", path);
}

static void churn_one(const char *dir, int i)
{
	char a[4096], b[4096], name[64];

	snprintf(name, sizeof(name), "churn-%d", i % 7);
	at(dir, name, a, sizeof(a));
	at(dir, "churn-other", b, sizeof(b));
	create_write(a, name);
	switch (i % 5) {
	case 1:
		if (rename(a, b) < 0 || unlink(b) < 0)
			problem(errno, "rename+unlink %s", a);
		return;
	case 2:
		if (link(a, b) < 0 || unlink(b) < 0)
			problem(errno, "link+unlink %s", a);
		break;
	case 3:
		if (symlink(name, b) < 0 || unlink(b) < 0)
			problem(errno, "symlink+unlink %s", b);
		if (mkdir(b, 0755) < 0 || rmdir(b) < 0)
			problem(errno, "mkdir+rmdir %s", b);
		break;
	}
	if (unlink(a) < 0)
		problem(errno, "unlink %s", a);
}

static void churn_held_open(const char *dir)
{
	char path[4096];
	int fds[HELD_OPEN];

	for (int i = 0; i < HELD_OPEN; i++) {
		snprintf(path, sizeof(path), "%s/held-%d", dir, i);
		fds[i] = open(path, O_CREAT | O_RDWR, 0644);
		if (fds[i] < 0)
			problem(errno, "create %s", path);
		else if (unlink(path) < 0)
			problem(errno, "unlink %s", path);
	}
	for (int i = 0; i < HELD_OPEN; i++)
		if (fds[i] >= 0 && (write(fds[i], "x", 1) != 1 || close(fds[i]) < 0))
			problem(errno, "write+close held file %s", dir);
}

static void churn(const char *dir, int n)
{
	for (int i = 0; i < n; i++)
		churn_one(dir, i);
	churn_held_open(dir);
}

static void file_path(char *buf, size_t len, const char *dir, int i)
{
	snprintf(buf, len, "%s/f%05d", dir, i);
}

static void mkfiles(const char *dir, int n)
{
	char path[4096];

	for (int i = 0; i < n; i++) {
		file_path(path, sizeof(path), dir, i);
		create_write(path, strrchr(path, '/') + 1);
	}
}

static void checkfiles(const char *dir, int n)
{
	char path[4096], buf[64];
	ssize_t got;
	int fd;

	for (int i = 0; i < n; i++) {
		file_path(path, sizeof(path), dir, i);
		fd = open(path, O_RDONLY);
		if (fd < 0) {
			problem(errno, "open %s", path);
			continue;
		}
		got = read(fd, buf, sizeof(buf) - 1);
		if (got < 0)
			problem(errno, "read %s", path);
		else if (buf[got] = '\0', strcmp(buf, strrchr(path, '/') + 1) != 0)
			problem(0, "content of %s is wrong", path);
		close(fd);
	}
}

static void stat_all(const char *dir)
{
	char path[4096];
	struct dirent *de;
	struct stat st;
	DIR *d = opendir(dir);

	if (!d) {
		problem(errno, "opendir %s", dir);
		return;
	}
	while ((de = readdir(d))) {
		at(dir, de->d_name, path, sizeof(path));
		if (lstat(path, &st) < 0)
			problem(errno, "lstat %s", path);
	}
	closedir(d);
}

/* An open, unlinked file must stay usable however long ago it was looked up. */
static void unlinked_open(const char *file, const char *dir)
{
	struct stat st;
	char buf[8];
	int fd = open(file, O_CREAT | O_RDWR, 0644);

	if (fd < 0) {
		problem(errno, "open %s", file);
		return;
	}
	if (write(fd, "before", 6) != 6 || unlink(file) < 0)
		problem(errno, "write+unlink %s", file);
	stat_all(dir);
	sleep(2); /* past the attribute timeout: fstat must ask the daemon */
	if (fstat(fd, &st) < 0)
		problem(errno, "fstat of unlinked %s", file);
	else if (st.st_nlink != 0 || st.st_size != 6)
		problem(0, "fstat of unlinked %s: wrong nlink or size", file);
	if (pwrite(fd, "after", 5, 6) != 5)
		problem(errno, "write to unlinked %s", file);
	if (pread(fd, buf, 5, 6) != 5 || memcmp(buf, "after", 5) != 0)
		problem(errno, "read back from unlinked %s", file);
	if (fchmod(fd, 0600) < 0)
		problem(errno, "fchmod of unlinked %s", file);
	if (ftruncate(fd, 3) < 0)
		problem(errno, "ftruncate of unlinked %s", file);
	if (fsync(fd) < 0)
		problem(errno, "fsync of unlinked %s", file);
	if (close(fd) < 0)
		problem(errno, "close of unlinked %s", file);
}

int main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "churn") == 0)
		churn(argv[2], atoi(argv[3]));
	else if (argc == 4 && strcmp(argv[1], "mkfiles") == 0)
		mkfiles(argv[2], atoi(argv[3]));
	else if (argc == 4 && strcmp(argv[1], "checkfiles") == 0)
		checkfiles(argv[2], atoi(argv[3]));
	else if (argc == 4 && strcmp(argv[1], "unlinked-open") == 0)
		unlinked_open(argv[2], argv[3]);
	else {
		fprintf(stderr, "usage: mtool churn|mkfiles|checkfiles DIR N\n"
				"       mtool unlinked-open FILE DIR\n");
		return 2;
	}
	if (problems > MAX_PROBLEMS)
		fprintf(stderr, "... %d problems in all\n", problems);
	return problems ? 1 : 0;
}
