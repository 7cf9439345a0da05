/*
 * The filesystem state shared by all op handlers.
 *
 * Lock order: fs->ino_lock and fs->rerr.lock are leaf locks; nothing else is
 * taken while one is held.
 */
#pragma once
#include <fuse_lowlevel.h>
#include <glib.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "log.h"
#include "options.h"
#include "queue.h"
#include "sys.h"

struct file_handle;
struct sm_control;
struct reqtrack;

/* Where an inode's O_PATH fd is counted (fd_touch in inode.c keeps it right). */
enum sm_fd_state {
	SM_FD_NONE,   /* no fd, or the root's (never counted) */
	SM_FD_CACHED, /* in fs->fd_lru, counted in fs->nfds: may be closed */
	SM_FD_PINNED, /* counted in fs->npinned: no way back to it once closed */
};

/*
 * One lower file or directory, keyed by (dev, ino). Its address is the FUSE
 * inode number (the root is FUSE_ROOT_ID). Alive while the kernel holds lookups
 * or anyone holds a reference (open files, queued writes, child inodes).
 *
 * parent/name is one name the file had when last seen, kept right through
 * lookup, rename, link and unlink: the way back to it by a walk from the
 * nearest ancestor with an open fd when the fd was closed and there is no
 * usable handle. NULL once that name is gone (unlinked, renamed over): the fd
 * is then pinned until a lookup through another link names it again.
 */
struct sm_inode {
	dev_t dev; /* immutable */
	ino_t ino; /* immutable */
	mode_t type; /* S_IFMT bits, immutable */
	struct file_handle *handle; /* immutable; NULL: reached by name only */

	uint64_t nlookup; /* under fs->ino_lock */
	unsigned refs;	  /* under fs->ino_lock */
	struct sm_inode *parent; /* holds one reference; under fs->ino_lock */
	char *name;		 /* in parent; NULL iff parent is; under fs->ino_lock */
	unsigned name_gen;	 /* bumped at each parent/name change; under ino_lock */
	bool unreachable_logged; /* said once in the log; under fs->ino_lock */
	int fd;		  /* O_PATH; -1 while evicted. under fs->ino_lock */
	enum sm_fd_state fd_state; /* under fs->ino_lock */
	unsigned fd_users; /* callers between inode_fd_get/put; under fs->ino_lock */
	GList lru;	  /* link in fs->fd_lru while SM_FD_CACHED; under ino_lock */
	unsigned nopen;	  /* open file handles; atomic */
	uint32_t caps;	  /* CAPS_ABSENT: security.capability known absent; above
			   * it a count of sets. atomic (killpriv.c) */
	bool sxid;	  /* S_ISUID or S_ISGID when last seen; atomic (killpriv.c) */
	struct wq_file *wqf; /* write queue state; set once under the queue's lock */
};

/* An open file: fuse_file_info->fh points here. */
struct sm_fh {
	struct sm_inode *inode; /* holds one inode reference */
	int fd;			/* opened lower fd */
	int flags;		/* open flags as the caller gave them */
};

struct sm_dirh {
	DIR *dp;
	off_t offset;
	struct dirent *entry; /* read ahead but not yet returned */
};

/*
 * Reads the lower refused (EIO from a bad sector, the medium gone): counted
 * for the control socket's status, and logged with the file's name under a
 * rate limit, so a reader looping on a bad sector cannot flood the log.
 */
struct sm_read_errors {
	pthread_mutex_t lock;	 /* taken only when a read failed */
	uint64_t count;		 /* under lock */
	struct sm_ratelimit log; /* under lock */
	char *path;		 /* the last failing file's lower path (raw); under lock */
	int error;		 /* its -errno; under lock */
	int64_t at_ns;		 /* when (CLOCK_MONOTONIC); under lock */
};

struct slowmedia {
	struct sm_options opts;
	int root_fd;	 /* O_PATH of the lower root, opened before mounting */
	int mount_fd;	 /* the root opened for reading: open_by_handle_at refuses O_PATH */
	dev_t root_dev;
	struct sm_inode root;
	bool creds_switch; /* daemon is root: create files as the caller */
	bool dont_mask;	   /* set once in init: creates apply the caller's umask */
	double timeout;	   /* entry/attr cache seconds */

	pthread_mutex_t ino_lock;
	GHashTable *inodes; /* (dev, ino) -> sm_inode; under ino_lock */
	GQueue fd_lru;	    /* evictable inodes with an open fd, MRU first; ino_lock */
	unsigned nfds;	    /* open O_PATH fds of evictable inodes; under ino_lock */
	unsigned npinned;   /* open O_PATH fds that cannot be closed; under ino_lock */
	unsigned fd_cache_max; /* nfds + npinned at most (when idle); immutable */
	bool pinned_warned; /* npinned alone passed fd_cache_max; under ino_lock */
	int handles;	    /* enum in inode.c: use, off (EPERM...), forced stale; atomic */

	struct wq *wq; /* the write-behind queue; immutable once serving */
	struct fuse_session *se; /* immutable once serving (notifications) */
	struct sm_control *ctl; /* control socket and busy hold (control.c); NULL: none */
	uint64_t read_bytes;	/* asked for by reads (all of it, also past EOF); atomic */
	struct {
		uint64_t init_unique; /* of the INIT request; set before sm_init runs */
		bool offered;	      /* by the kernel in INIT; set before sm_init runs */
		int state;	      /* atomic: off, pending (the INIT reply), on */
	} kpv2;			      /* FUSE_HANDLE_KILLPRIV_V2 (devio.c) */
	struct sm_read_errors rerr; /* ops_file.c */
	struct reqtrack *req;	    /* each request's age (reqtrack.c); immutable once serving */
};

static inline struct slowmedia *fs_from_req(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

/* inode.c */
/* The fds the daemon may spend on inodes and dirty files (see inode.c). */
unsigned fd_budget(void);
int inode_table_init(struct slowmedia *fs, int root_fd);
void inode_table_destroy(struct slowmedia *fs);
struct sm_inode *inode_from_ino(struct slowmedia *fs, fuse_ino_t ino);
/* Look up (or add) the inode for an O_PATH fd already opened on it; takes fd
 * over. It was found as name in parent (both NULL: reached through an open
 * file, no name known), which is recorded as its way back. */
int inode_find_or_add(struct slowmedia *fs, int fd, const struct stat *st,
		      struct sm_inode *parent, const char *name, struct sm_inode **out);
void inode_forget(struct slowmedia *fs, struct sm_inode *inode, uint64_t n);
void inode_ref(struct slowmedia *fs, struct sm_inode *inode);
/* The inode of (dev, ino) with a reference taken, if the table has it. */
struct sm_inode *inode_peek(struct slowmedia *fs, dev_t dev, ino_t ino);
void inode_unref(struct slowmedia *fs, struct sm_inode *inode);
/* An O_PATH fd of the inode, valid until inode_fd_put; -errno when it cannot be reached. */
int inode_fd_get(struct slowmedia *fs, struct sm_inode *inode);
void inode_fd_put(struct slowmedia *fs, struct sm_inode *inode);
/*
 * Around an op that removes name from dir (unlink, rmdir, rename over it):
 * hold finds the inode it names (if the table has it; a reference in h->inode)
 * and, when that is its recorded name, keeps its fd open so that it stays
 * reachable after; release (gone: the op succeeded) then pins that fd and
 * forgets the name. pfd is dir's fd.
 */
struct sm_name_hold {
	struct sm_inode *inode;
	bool fd_held;
};
void inode_name_hold(struct slowmedia *fs, int pfd, struct sm_inode *dir, const char *name,
		     struct sm_name_hold *h);
void inode_name_release(struct slowmedia *fs, struct sm_inode *dir, const char *name,
			bool gone, struct sm_name_hold *h);
/* name in dir (pfd its fd) now names what it names on the lower (after a
 * rename): record it as that inode's way back, if the table has it. */
void inode_name_moved(struct slowmedia *fs, int pfd, struct sm_inode *dir, const char *name);
/* inode_fd_get, as a "/proc/self/fd/N" path for calls that take no fd; 0 or
 * -errno. Pair with inode_fd_put. */
int inode_path_get(struct slowmedia *fs, struct sm_inode *inode, char path[PROC_FD_PATH_MAX]);

/* creds.c: create files as the requesting user when the daemon runs as root. */
struct sm_creds {
	bool switched;
	bool umask_set;
};
int creds_enter(fuse_req_t req, struct sm_creds *saved);
/* creds_enter for a call that makes a file, plus the caller's umask when the
 * kernel leaves it to us (dont_mask). Pair with creds_leave. */
int creds_enter_create(fuse_req_t req, struct sm_creds *saved);
void creds_leave(struct sm_creds *saved);
/* Whether the caller is in group gid (its own, or a supplementary one). */
bool creds_in_group(fuse_req_t req, gid_t gid);
/* Whether the caller holds CAP_FSETID (its effective set, from /proc). */
bool creds_has_fsetid(fuse_req_t req);

/* devio.c: our reads and writes of /dev/fuse, for FUSE_HANDLE_KILLPRIV_V2. */
int devio_install(struct fuse_session *se, struct slowmedia *fs);
/* The hooks devio_install installs (for the unit test). */
void devio_hooks(struct fuse_custom_io *io);
/* From sm_init: whether the kernel offered it; if so the INIT reply takes it. */
bool devio_want_killpriv_v2(struct slowmedia *fs);
/* The request this thread serves asks to kill suid and sgid (a WRITE,
 * SETATTR or OPEN by a caller without CAP_FSETID). */
bool devio_req_kill_suidgid(void);
/* Whether the kernel left the kills to us. */
bool devio_killpriv_v2_on(struct slowmedia *fs);

/* killpriv.c: what the Linux VFS kills on write, truncate and chown, killed on
 * the lower before the request is answered (the queue writes it later). */
#define CAPS_ABSENT 1u
#define CAPS_SET_STEP 2u
/* Remember what the mode says about suid and sgid, from each lower stat. */
static inline void inode_note_mode(struct sm_inode *inode, mode_t mode)
{
	__atomic_store_n(&inode->sxid, (mode & (S_ISUID | S_ISGID)) != 0, __ATOMIC_RELAXED);
}
static inline uint32_t caps_snapshot(struct sm_inode *inode)
{
	return __atomic_load_n(&inode->caps, __ATOMIC_ACQUIRE);
}
/* security.capability was found absent (by a call begun at snapshot snap):
 * remembered unless it was set since. */
void caps_found_absent(struct sm_inode *inode, uint32_t snap);
/* security.capability is being set: forget that it was absent. */
void caps_changed(struct sm_inode *inode);
/*
 * Before a write or truncate is answered: remove security.capability, and when
 * the kernel's kill flag is set (the caller, req, lacks CAP_FSETID) clear
 * S_ISUID, and S_ISGID if the group may execute or the caller is not in the
 * file's group. ofd is an open fd of the file or -1, pfd its O_PATH fd.
 * Touches the lower only when the mode has those bits or the capability is
 * not known absent. 0 or -errno.
 */
int killpriv(fuse_req_t req, struct sm_inode *inode, int ofd, int pfd, bool kill);

/* ops_file.c: the read error figures (read_errors_init before serving). */
void read_errors_init(struct slowmedia *fs);
void read_errors_destroy(struct slowmedia *fs);
/* A snapshot for status: the count, and the last failure's path (g_free it;
 * NULL when none), -errno and age. */
uint64_t read_errors_get(struct slowmedia *fs, char **path, int *error, int64_t *age_ns);

/* ops_file.c: drop queued data of a file that is unlinked and not open. */
void elide_if_gone(struct slowmedia *fs, struct sm_inode *inode);
static inline struct wq_file *inode_wqf(struct sm_inode *inode)
{
	return __atomic_load_n(&inode->wqf, __ATOMIC_ACQUIRE);
}

/* ops_entry.c helpers shared with ops_dir.c and ops_file.c */
int entry_lookup(struct slowmedia *fs, struct sm_inode *parent, const char *name,
		 struct fuse_entry_param *e);
/* The entry of the file open on ofd (a lower fd), reached through the fd, not
 * a name: for a file just created, whose name may already be gone. */
int entry_from_open_fd(struct slowmedia *fs, int ofd, struct fuse_entry_param *e);
/* -ENAMETOOLONG for a name the lower filesystem would refuse, else 0. */
int check_name(const char *name);
/* check_name, then the O_PATH fd of dir to create or remove name in. Pair with
 * inode_fd_put(dir). */
int named_dir_fd_get(struct slowmedia *fs, struct sm_inode *dir, const char *name);
/* Both fds or neither (then -errno). Pair with inode_fd_put of each. */
int inode_fd_pair_get(struct slowmedia *fs, struct sm_inode *a, struct sm_inode *b, int *fa,
		      int *fb);
/* name in dir was made or renamed on the lower: at risk until the medium's
 * metadata is flushed (the queue's loss report names it). */
void note_entry(struct slowmedia *fs, struct sm_inode *dir, const char *name);
/* The lower's absolute path of dir/name into path: 0, or -1. */
int entry_path(struct slowmedia *fs, struct sm_inode *dir, const char *name, char *path,
	       size_t size);
/* After an op made name in dir (r == 0): reply with its entry; else the error. */
void reply_new_entry(fuse_req_t req, struct slowmedia *fs, struct sm_inode *dir,
		     const char *name, int r);

extern const struct fuse_lowlevel_ops sm_ops;
