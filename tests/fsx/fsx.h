/* fsx: shared types and functions; see fsx.c for what fsx does. */

#pragma once

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <glib.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/falloc.h>
#include <sched.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_FILES 16 /* names f0..f15 */
#define MAX_HANDLES 16
#define MAX_INODES (MAX_FILES + MAX_HANDLES + 1)
#define LINE_BYTES 160 /* one op log line */
#define SLOW_WRITE_NS (2 * 1000000LL)
#define NSEC_PER_SEC 1000000000LL
#define PAGE_BYTES 4096

/* Open flags of a handle, as logged. */
enum { OF_RDONLY = 1, OF_APPEND = 2, OF_DIRECT = 4, OF_TRUNC = 8 };

/* Fallocate modes, as logged. */
enum { FA_ALLOC, FA_KEEP, FA_PUNCH, FA_NMODES };

/* Rename flavours, as logged. */
enum { RN_PLAIN, RN_NOREPLACE, RN_EXCHANGE };

enum op_kind {
	OP_OPEN,
	OP_CLOSE,
	OP_WRITE,
	OP_APPEND,
	OP_READ,
	OP_FTRUNCATE,
	OP_TRUNCATE,
	OP_FALLOC,
	OP_FSYNC,
	OP_FDATASYNC,
	OP_RENAME,
	OP_LINK,
	OP_UNLINK,
	OP_STAT,
	OP_FSTAT,
	OP_DROP,
	OP_LIST,
	OP_SLEEP,
	OP_NKINDS
};

/* One op, as generated or read back from a log line. */
struct op {
	uint64_t no;
	enum op_kind kind;
	int h;	   /* handle slot */
	int f, f2; /* file names f<N> */
	/* OF_* (open), FA_* (falloc), RN_* (rename), 1 = pwrite (append) */
	unsigned flags;
	uint64_t off, len; /* len is the size for truncates, ms for sleep */
};

/* A file as the model knows it; bytes past size are kept zero. */
struct minode {
	bool live;
	unsigned id; /* serial, for the log */
	uint8_t *data;
	size_t size, cap;
	unsigned nlink, nopen;
	bool ino_known;
	ino_t st_ino;
};

/* An open file descriptor of the run, in slot h<N>. */
struct handle {
	bool open;
	int fd;
	unsigned flags; /* OF_* */
	struct minode *m;
};

/* The tester: settings, then the state of one configuration's run. */
struct fsx {
	/* settings */
	uint64_t seed, nops;
	bool seeded;
	unsigned nfiles, log_ops, op_timeout_s;
	uint64_t max_size;
	bool verbose, fsync_check, use_direct, lax_stat, unshare_ns, crash;
	bool dead_mount; /* --crash: between the kill and the new mount */
	bool fat_like;	 /* --fat-like: no hard links, no rename flags */
	const char *daemon, *tmp, *plain_dir, *plain_lower, *replay, *spool_root;
	GPtrArray *configs;
	char **argv;
	/* one configuration's run */
	const char *config;
	unsigned cfg_idx;
	uint64_t cfg_seed;
	char cfgdir[PATH_MAX], dir[PATH_MAX], lower[PATH_MAX], daemon_log[PATH_MAX];
	char pidfile[PATH_MAX];
	pid_t daemon_pid;
	dev_t mnt_dev; /* the mount's device: names its FUSE connection */
	unsigned nstarts;
	uint64_t rng[4];
	struct minode inodes[MAX_INODES];
	struct minode *names[MAX_FILES];
	struct handle h[MAX_HANDLES];
	unsigned next_id;
	bool no_direct, no_falloc[FA_NMODES], no_rename_flags;
	char (*log)[LINE_BYTES];
	uint64_t nlogged;
	uint64_t ops_run; /* ops of this configuration run so far */
	uint8_t *buf;	  /* for one op's data: max_size and more */
	size_t buf_size;
	/* watchdog */
	int64_t op_start_ns; /* atomic; 0 when idle */
	char cur_line[LINE_BYTES];
	unsigned nfail;		  /* checks failed in this configuration */
	uint64_t written, nsyncs; /* bytes written, fsyncs: for the summary */
	uint64_t nslow_writes;	  /* writes that took long: the queue was full */
	int64_t sync_ns, sync_max_ns;
	unsigned passed, failed; /* configurations */
};

/* For the signal handler and the watchdog: the daemon to stop, the mount to
 * detach (in mount.c). */
extern volatile pid_t sig_daemon_pid;
extern char sig_mnt[PATH_MAX];

/* model.c */
int64_t now_ns(void);
void sleep_ms(unsigned ms);
void rng_seed(struct fsx *x, uint64_t seed);
uint64_t umin(uint64_t a, uint64_t b);
uint64_t rnd(struct fsx *x, uint64_t n);
bool chance(struct fsx *x, unsigned percent);
void m_truncate(struct minode *m, size_t size);
void m_write(struct minode *m, size_t off, const uint8_t *data, size_t len);
void m_fallocate(struct minode *m, unsigned fa, size_t off, size_t len);
struct minode *m_new(struct fsx *x);
void m_put(struct minode *m);
void m_unlink_name(struct fsx *x, int f);
int m_name(const struct fsx *x, const struct minode *m);
void fill_pattern(uint8_t *buf, uint64_t off, size_t len, uint64_t no);
const char *path_fmt(char *buf, const char *fmt, ...) G_GNUC_PRINTF(2, 3);
const char *fpath(const struct fsx *x, const char *dir, int f, char *buf);
void report(struct fsx *x, const char *fmt, ...) G_GNUC_PRINTF(2, 3);
void log_store(struct fsx *x, const char *line);
void log_print(const struct fsx *x);
bool compare(struct fsx *x, const char *what, const uint8_t *exp, const uint8_t *got,
	     size_t len, uint64_t base, const char *lower);
bool expect(struct fsx *x, const char *line, long r, int e, int want);
bool check_stat(struct fsx *x, const char *what, const struct stat *st, struct minode *m,
		int fd, const char *path);
bool check_fstat(struct fsx *x, const char *what, int fd, struct minode *m);
bool check_file(struct fsx *x, const char *what, const char *path, struct minode *m,
		const char *lower);
bool check_names(struct fsx *x, const char *what, const char *dir);
bool check_tree(struct fsx *x, const char *what, const char *dir, bool is_lower);
uint64_t parse_size_arg(const char *s);

/* ops.c */
void gen_op(struct fsx *x, struct op *op, uint64_t no);
bool run_one(struct fsx *x, const struct op *op);
GArray *load_replay(const char *file);
bool close_all(struct fsx *x, bool check);

/* mount.c */
void dump_daemon_threads(pid_t pid);
bool daemon_start(struct fsx *x);
bool daemon_stop(struct fsx *x);
/* kill -9 the daemon and detach its dead mount. */
bool daemon_kill(struct fsx *x);
void private_mount_ns(void);

/* fsx.c */
void wd_arm(struct fsx *x, const char *line);
void wd_disarm(struct fsx *x);
