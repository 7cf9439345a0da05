/*
 * The parity runner's case API. A case is a function run in a child process
 * whose working directory is its own fresh directory; everything it should
 * compare goes into the trace through the helpers below.
 *
 *   T(expr)   run a syscall, trace its exact return value (or -1 and errno)
 *   TF(expr)  the same, but a success is traced as "ok" (fds, cookies)
 *   TP(expr)  for calls returning a pointer (opendir): "ok" or errno
 */
#pragma once
#include <errno.h>
#include <fcntl.h>
#include <glib.h>
#include <grp.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <unistd.h>

struct pcase {
	const char *name;
	void (*fn)(void);
};

extern const struct pcase cases_file[], cases_space[], cases_attr[], cases_ns[],
    cases_dir[], cases_xattr[], cases_misc[], cases_perm[];

extern GString *trace; /* the running case's trace (or the snapshot being built) */

void tr(const char *fmt, ...) G_GNUC_PRINTF(1, 2);
long trace_ret(const char *what, long r, int err, bool exact);

#define T_(expr, exact)                                                                  \
	({                                                                               \
		errno = 0;                                                               \
		long t_r_ = (long)(expr);                                                \
		int t_e_ = errno;                                                        \
		trace_ret(#expr, t_r_, t_e_, exact);                                     \
	})
#define T(expr) T_(expr, true)
#define TF(expr) T_(expr, false)
#define TP(expr)                                                                         \
	({                                                                               \
		errno = 0;                                                               \
		void *t_p_ = (void *)(expr);                                             \
		int t_e_ = errno;                                                        \
		trace_ret(#expr, t_p_ ? 0 : -1, t_e_, false);                            \
		t_p_;                                                                    \
	})

/* What trace_stat shows. Times are only worth comparing where a case set them. */
enum {
	SF_TYPE = 1 << 0,
	SF_MODE = 1 << 1, /* includes the type */
	SF_SIZE = 1 << 2,
	SF_NLINK = 1 << 3,
	SF_OWNER = 1 << 4,
	SF_ATIME = 1 << 5,
	SF_MTIME = 1 << 6,
	SF_TIMES_NOW = 1 << 7, /* atime and mtime: "now" if within a few seconds */
	SF_RDEV = 1 << 8,
	SF_BLOCKS = 1 << 9,
};
#define SF_BASIC (SF_MODE | SF_SIZE | SF_NLINK | SF_OWNER)
#define SF_TIMES (SF_ATIME | SF_MTIME)

#define NOBODY_ID 65534
#define OTHER_ID 1234 /* an id no process runs as */

/* trace.c: read-back helpers, all tracing into the current trace. */
void trace_stat(const char *path, unsigned fields);	   /* lstat */
void trace_stat_follow(const char *path, unsigned fields); /* stat */
void trace_fstat(int fd, unsigned fields);
void trace_same_inode(const char *a, const char *b);
void trace_content(const char *path);		 /* whole file, digest when long */
void trace_pread(int fd, size_t len, off_t off); /* one read */
void trace_seekmap(int fd);			 /* data/hole segments */
void trace_xattrs(const char *path);		 /* names and values, no follow */
void trace_dir(const char *path);		 /* sorted names and d_type */
void trace_readlink(const char *path);
/* Create (or truncate) a file holding len bytes of data: traced. */
int put_file(const char *path, const void *data, size_t len, mode_t mode);
int put_str(const char *path, const char *s);
/* A deterministic byte pattern, different per seed. */
void fill_pattern(void *buf, size_t len, unsigned seed);
/* The effective identity of the case process, for permission cases. */
void as_user(uid_t uid, gid_t gid, size_t ngroups, const gid_t *groups);
void as_nobody(void);
void as_root(void);
/* The snapshot the parent takes of a case directory after the case ran. */
GString *snapshot(const char *dir);
