/*
 * The inode table: lower (st_dev, st_ino) -> struct sm_inode.
 *
 * The table must not be bounded by RLIMIT_NOFILE (a medium may hold 100,000
 * files and `find` looks every one up). So an inode's O_PATH fd is only a
 * cache: at most fd_cache_max of them stay open, least recently used ones are
 * closed and reopened when needed, first with open_by_handle_at where the
 * lower gave a handle (name_to_handle_at), else (or when that fails: ESTALE
 * from vfat once its inode cache forgot the file, EPERM for a daemon that is
 * not root, EOPNOTSUPP...) by a walk down the names from the nearest ancestor
 * with an open fd.
 *
 * The walk: each inode records one name it has in its parent (a referenced
 * inode), set at each lookup and moved by rename; the root's fd never closes.
 * Each step is an openat(O_PATH | O_NOFOLLOW) of the name in the parent's fd,
 * and the (st_dev, st_ino) found must be the inode's own: a name changed on
 * the lower behind our back gives ESTALE (logged once per inode), never a
 * different file. A recorded parent never makes a loop (set_name refuses).
 *
 * Only fds with no way back stay open (pinned, counted in npinned): an inode
 * whose name was removed (unlinked while open or still known to the kernel,
 * renamed over) or that was reached through an open file only. A lookup
 * through another link names it again and unpins it. Pinned fds count against
 * the same cache size, so the cache shrinks while many are pinned.
 *
 * An fd handed out by inode_fd_get stays open until inode_fd_put (fd_users).
 * Reopening reads the medium: it runs outside ino_lock, gated like a lookup
 * (two threads may reopen one inode at once; the second fd is closed).
 */
#include "fs.h"
#include "log.h"
#include "sys.h"

#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#define FD_BUDGET_MIN 128
#define FD_HEADROOM 1024 /* fds left for open files, dirs and the kernel channel */
#define WALK_RETRIES 3	 /* a rename moved the name while we walked to it */

/* fs->handles: whether open_by_handle_at is tried. */
enum {
	HANDLES_USE,
	HANDLES_OFF,   /* none, or the lower or our privileges refuse them */
	HANDLES_STALE, /* SLOWMEDIA_TEST_HANDLES=stale: each one fails with ESTALE */
};

static guint inode_hash(gconstpointer p)
{
	const struct sm_inode *i = p;

	return g_int64_hash(&(gint64){(gint64)i->ino}) ^ (guint)i->dev;
}

static gboolean inode_equal(gconstpointer a, gconstpointer b)
{
	const struct sm_inode *x = a, *y = b;

	return x->ino == y->ino && x->dev == y->dev;
}

/*
 * The daemon's one fd budget: everything but a fixed headroom (open files,
 * directories, the kernel channel) of RLIMIT_NOFILE, which cannot be raised
 * past its hard limit (20,000 on these machines). Half of it for the inode
 * fd cache, a quarter for dirty files of the write queue (two fds each).
 * SLOWMEDIA_FD_BUDGET lowers it, so tests reach the limits with few files.
 */
unsigned fd_budget(void)
{
	struct rlimit rl;
	const char *env = getenv("SLOWMEDIA_FD_BUDGET");

	if (env && atoi(env) > 0)
		return MAX((unsigned)atoi(env), FD_BUDGET_MIN);
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
		return 3 * 4096;
	if (rl.rlim_cur < FD_HEADROOM + FD_BUDGET_MIN)
		return FD_BUDGET_MIN;
	return (unsigned)(rl.rlim_cur - FD_HEADROOM);
}

static unsigned fd_cache_size(void)
{
	const char *env = getenv("SLOWMEDIA_FD_CACHE"); /* tests force eviction */

	if (env && atoi(env) > 0)
		return (unsigned)atoi(env);
	return fd_budget() / 2;
}

/* Read once: tests make every handle stale to drive the walk on any lower. */
static int handles_mode(const struct slowmedia *fs)
{
	const char *env = getenv("SLOWMEDIA_TEST_HANDLES");

	if (env && strcmp(env, "stale") == 0) {
		sm_info("test hook SLOWMEDIA_TEST_HANDLES=stale: every open by handle fails "
			"with ESTALE");
		return HANDLES_STALE;
	}
	return fs->mount_fd < 0 ? HANDLES_OFF : HANDLES_USE;
}

int inode_table_init(struct slowmedia *fs, int root_fd)
{
	struct stat st;

	if (fstat(root_fd, &st) < 0)
		return -errno;
	pthread_mutex_init(&fs->ino_lock, NULL);
	fs->inodes = g_hash_table_new(inode_hash, inode_equal);
	g_queue_init(&fs->fd_lru);
	fs->fd_cache_max = fd_cache_size();
	fs->root_fd = root_fd;
	fs->root_dev = st.st_dev;
	/* -1 (no handles: inodes are reached by name) when the root cannot be read. */
	fs->mount_fd = openat(root_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	fs->handles = handles_mode(fs);
	fs->root = (struct sm_inode){
		.dev = st.st_dev, .ino = st.st_ino, .type = S_IFDIR, .fd = root_fd,
		.nlookup = 1, .refs = 1};
	return 0;
}

static void inode_free(struct sm_inode *inode)
{
	wq_file_free(inode->wqf);
	if (inode->fd >= 0)
		close(inode->fd);
	free(inode->handle);
	g_free(inode->name);
	g_free(inode);
}

void inode_table_destroy(struct slowmedia *fs)
{
	GHashTableIter it;
	gpointer key;

	g_hash_table_iter_init(&it, fs->inodes);
	while (g_hash_table_iter_next(&it, &key, NULL))
		inode_free(key);
	g_hash_table_destroy(fs->inodes);
	if (fs->mount_fd >= 0)
		close(fs->mount_fd);
	pthread_mutex_destroy(&fs->ino_lock);
}

struct sm_inode *inode_from_ino(struct slowmedia *fs, fuse_ino_t ino)
{
	if (ino == FUSE_ROOT_ID)
		return &fs->root;
	return (struct sm_inode *)(uintptr_t)ino;
}

/* Called with ino_lock held after the inode's fd or name changed, or its fd
 * was used: count the fd where it belongs now, most recently used first. */
static void fd_touch(struct slowmedia *fs, struct sm_inode *inode)
{
	enum sm_fd_state want = SM_FD_NONE;

	if (inode != &fs->root && inode->fd >= 0)
		want = inode->parent ? SM_FD_CACHED : SM_FD_PINNED;
	if (inode->fd_state == SM_FD_CACHED) {
		g_queue_unlink(&fs->fd_lru, &inode->lru);
		fs->nfds--;
	} else if (inode->fd_state == SM_FD_PINNED) {
		fs->npinned--;
	}
	inode->fd_state = want;
	if (want == SM_FD_CACHED) {
		inode->lru.data = inode;
		g_queue_push_head_link(&fs->fd_lru, &inode->lru);
		fs->nfds++;
	} else if (want == SM_FD_PINNED) {
		fs->npinned++;
	}
}

/* Called with ino_lock held: close idle cached fds beyond the cache size. */
static void lru_evict(struct slowmedia *fs)
{
	GList *l = fs->fd_lru.tail;

	while (fs->nfds + fs->npinned > fs->fd_cache_max && l) {
		struct sm_inode *victim = l->data;
		GList *prev = l->prev;

		if (victim->fd_users == 0) {
			close(victim->fd);
			victim->fd = -1;
			fd_touch(fs, victim);
		}
		l = prev;
	}
}

/* Called with ino_lock held: the pinned count once, when pinned fds alone
 * first fill the cache (every other inode is then reopened at each use); else 0. */
static unsigned pinned_over(struct slowmedia *fs)
{
	if (fs->pinned_warned || fs->npinned <= fs->fd_cache_max)
		return 0;
	fs->pinned_warned = true;
	return fs->npinned;
}

static void warn_pinned(struct slowmedia *fs, unsigned over)
{
	if (over)
		sm_warn("%u inodes without a name left (unlinked but in use) hold their fds "
			"open, more than the fd cache of %u", over, fs->fd_cache_max);
}

/* Called with ino_lock held; frees the inode when nothing holds it any more,
 * then its parent when that was its last reference, and so on up. */
static void inode_maybe_free(struct slowmedia *fs, struct sm_inode *inode)
{
	while (inode != &fs->root && !inode->nlookup && !inode->refs) {
		struct sm_inode *parent = inode->parent;

		g_hash_table_remove(fs->inodes, inode);
		if (inode->fd >= 0)
			close(inode->fd);
		inode->fd = -1;
		fd_touch(fs, inode);
		inode_free(inode);
		if (!parent)
			break;
		parent->refs--;
		inode = parent;
	}
}

/* Called with ino_lock held: whether inode is dir or one of its ancestors. */
static bool is_ancestor(const struct sm_inode *inode, const struct sm_inode *dir)
{
	for (; dir; dir = dir->parent)
		if (dir == inode)
			return true;
	return false;
}

/*
 * Called with ino_lock held: record name in parent as the inode's way back
 * (parent NULL: it has none). A parent below the inode itself can only come
 * from renames on the lower behind our back: the old name is kept then (a
 * loop would make the walk endless; the old name fails cleanly, ESTALE).
 */
static void set_name(struct slowmedia *fs, struct sm_inode *inode, struct sm_inode *parent,
		     const char *name)
{
	struct sm_inode *old = inode->parent;

	if (inode == &fs->root || (parent == old && (!old || strcmp(name, inode->name) == 0)))
		return;
	if (parent && is_ancestor(inode, parent))
		return;
	if (parent)
		parent->refs++;
	g_free(inode->name);
	inode->name = parent ? g_strdup(name) : NULL;
	inode->parent = parent;
	inode->name_gen++;
	inode->unreachable_logged = false;
	fd_touch(fs, inode);
	if (old) {
		old->refs--;
		inode_maybe_free(fs, old);
	}
}

/* A handle, sized to fit, when handles can be used to reopen fd's inode. */
static struct file_handle *handle_of(struct slowmedia *fs, int fd, dev_t dev)
{
	struct file_handle *h;
	int mount_id;

	if (dev != fs->root_dev || __atomic_load_n(&fs->handles, __ATOMIC_RELAXED) == HANDLES_OFF)
		return NULL;
	h = malloc(sizeof(*h) + MAX_HANDLE_SZ);
	if (!h)
		return NULL;
	h->handle_bytes = MAX_HANDLE_SZ;
	if (name_to_handle_at(fd, "", h, &mount_id, AT_EMPTY_PATH) < 0) {
		free(h);
		return NULL;
	}
	return realloc(h, sizeof(*h) + h->handle_bytes) ?: h;
}

static bool is_dot(const char *name)
{
	return strcmp(name, ".") == 0 || strcmp(name, "..") == 0;
}

static struct sm_inode *inode_new(struct slowmedia *fs, int fd, const struct stat *st)
{
	struct sm_inode *inode = g_new0(struct sm_inode, 1);

	inode->dev = st->st_dev;
	inode->ino = st->st_ino;
	inode->type = st->st_mode & S_IFMT;
	inode->handle = handle_of(fs, fd, st->st_dev);
	inode->fd = -1;
	return inode;
}

int inode_find_or_add(struct slowmedia *fs, int fd, const struct stat *st,
		      struct sm_inode *parent, const char *name, struct sm_inode **out)
{
	struct sm_inode key = {.dev = st->st_dev, .ino = st->st_ino};
	struct sm_inode *inode, *fresh = NULL;
	int spare_fd = fd;
	unsigned over;

	pthread_mutex_lock(&fs->ino_lock);
	inode = g_hash_table_lookup(fs->inodes, &key);
	if (!inode) {
		/* Build the new inode outside the lock; recheck for a racing lookup. */
		pthread_mutex_unlock(&fs->ino_lock);
		fresh = inode_new(fs, fd, st);
		pthread_mutex_lock(&fs->ino_lock);
		inode = g_hash_table_lookup(fs->inodes, &key);
		if (!inode) {
			inode = fresh;
			fresh = NULL;
			g_hash_table_add(fs->inodes, inode);
		}
	}
	inode->nlookup++;
	/* The name it was just found by is right now: the best way back. */
	if (parent && !is_dot(name))
		set_name(fs, inode, parent, name);
	if (inode->fd < 0) {
		inode->fd = fd;
		spare_fd = -1;
	}
	fd_touch(fs, inode);
	lru_evict(fs);
	over = pinned_over(fs);
	pthread_mutex_unlock(&fs->ino_lock);

	warn_pinned(fs, over);
	if (spare_fd >= 0)
		close(spare_fd);
	if (fresh)
		inode_free(fresh);
	*out = inode;
	return 0;
}

void inode_forget(struct slowmedia *fs, struct sm_inode *inode, uint64_t n)
{
	pthread_mutex_lock(&fs->ino_lock);
	if (inode != &fs->root) {
		if (n > inode->nlookup) {
			sm_warn("forget of %" PRIu64 " lookups on inode %lu with %" PRIu64,
				n, (unsigned long)inode->ino, inode->nlookup);
			n = inode->nlookup;
		}
		inode->nlookup -= n;
		inode_maybe_free(fs, inode);
	}
	pthread_mutex_unlock(&fs->ino_lock);
}

void inode_ref(struct slowmedia *fs, struct sm_inode *inode)
{
	pthread_mutex_lock(&fs->ino_lock);
	inode->refs++;
	pthread_mutex_unlock(&fs->ino_lock);
}

struct sm_inode *inode_peek(struct slowmedia *fs, dev_t dev, ino_t ino)
{
	struct sm_inode key = {.dev = dev, .ino = ino};
	struct sm_inode *inode;

	pthread_mutex_lock(&fs->ino_lock);
	inode = g_hash_table_lookup(fs->inodes, &key);
	if (inode)
		inode->refs++;
	pthread_mutex_unlock(&fs->ino_lock);
	return inode;
}

void inode_unref(struct slowmedia *fs, struct sm_inode *inode)
{
	pthread_mutex_lock(&fs->ino_lock);
	inode->refs--;
	inode_maybe_free(fs, inode);
	pthread_mutex_unlock(&fs->ino_lock);
}

/* Once per inode (until it is named again): say that it cannot be reached. */
static void log_unreachable(struct slowmedia *fs, struct sm_inode *inode, int err)
{
	char name[NAME_MAX + 1] = "";
	bool first, named;

	pthread_mutex_lock(&fs->ino_lock);
	first = !inode->unreachable_logged;
	inode->unreachable_logged = true;
	named = inode->name != NULL;
	if (named)
		g_strlcpy(name, inode->name, sizeof(name));
	pthread_mutex_unlock(&fs->ino_lock);
	if (first)
		sm_warn("inode %lu (%s%s) cannot be reached again on the lower: %s",
			(unsigned long)inode->ino, named ? "last named " : "no name left",
			name, g_strerror(-err));
}

/* A permanent refusal (not privileged, not supported) ends handle use. */
static void handles_refused(struct slowmedia *fs, int err)
{
	if (err != -EPERM && err != -EOPNOTSUPP && err != -ENOSYS && err != -EBADF &&
	    err != -EINVAL)
		return;
	if (__atomic_exchange_n(&fs->handles, HANDLES_OFF, __ATOMIC_RELAXED) == HANDLES_USE)
		sm_info("lower file handles refused (%s): evicted inodes are reached again "
			"by name", g_strerror(-err));
}

static int reopen_by_handle(struct slowmedia *fs, struct sm_inode *inode)
{
	int mode = __atomic_load_n(&fs->handles, __ATOMIC_RELAXED);
	int64_t meta_t0;
	int fd;

	if (!inode->handle || mode != HANDLES_USE)
		return -ESTALE;
	/* Opening by handle reads the inode from the medium when it is not cached
	 * (hundreds of ms on a DVD-RAM): a read of the medium for the flushers
	 * (the next step of the caller, an open or a read, gets the head too). */
	meta_t0 = wq_meta_begin(fs->wq);
	fd = neg_errno(open_by_handle_at(fs->mount_fd, inode->handle, O_PATH | O_CLOEXEC));
	wq_meta_end(fs->wq, meta_t0);
	if (fd < 0)
		handles_refused(fs, fd);
	return fd;
}

/* One step of the walk: name in parent, which must be inode. *above is set
 * when the parent itself could not be reached (and said so). */
static int open_child(struct slowmedia *fs, struct sm_inode *parent, const char *name,
		      const struct sm_inode *inode, bool *above)
{
	struct stat st;
	int64_t meta_t0;
	int pfd, fd, r;

	pfd = inode_fd_get(fs, parent);
	*above = pfd < 0;
	if (pfd < 0)
		return pfd;
	meta_t0 = wq_meta_begin(fs->wq);
	fd = neg_errno(openat(pfd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC));
	r = fd < 0 ? fd : neg_errno(fstat(fd, &st));
	wq_meta_end(fs->wq, meta_t0);
	inode_fd_put(fs, parent);
	if (r == 0 && (st.st_dev != inode->dev || st.st_ino != inode->ino))
		r = -ESTALE; /* another file has that name now */
	if (fd >= 0 && r < 0)
		close(fd);
	/* The file is still there (someone holds it), under a name we do not know. */
	if (r == -ENOENT || r == -ENOTDIR)
		r = -ESTALE;
	return r < 0 ? r : fd;
}

/* Reopen by the recorded name, walking up as far as needed (through
 * inode_fd_get of the parent). Retried when a rename moved the name meanwhile. */
static int reopen_by_name(struct slowmedia *fs, struct sm_inode *inode)
{
	char name[NAME_MAX + 1];
	struct sm_inode *parent;
	unsigned gen;
	bool above, moved;
	int fd;

	for (int tries = 0;; tries++) {
		pthread_mutex_lock(&fs->ino_lock);
		parent = inode->parent;
		if (parent) {
			parent->refs++;
			g_strlcpy(name, inode->name, sizeof(name));
		}
		gen = inode->name_gen;
		pthread_mutex_unlock(&fs->ino_lock);
		if (!parent) {
			fd = -ESTALE;
			break;
		}
		fd = open_child(fs, parent, name, inode, &above);
		inode_unref(fs, parent);
		if (fd >= 0 || above)
			return fd;
		pthread_mutex_lock(&fs->ino_lock);
		moved = inode->name_gen != gen;
		pthread_mutex_unlock(&fs->ino_lock);
		if (!moved || tries == WALK_RETRIES)
			break;
	}
	log_unreachable(fs, inode, fd);
	return fd;
}

static int reopen(struct slowmedia *fs, struct sm_inode *inode)
{
	int fd = reopen_by_handle(fs, inode);

	return fd >= 0 ? fd : reopen_by_name(fs, inode);
}

int inode_fd_get(struct slowmedia *fs, struct sm_inode *inode)
{
	int fd;

	pthread_mutex_lock(&fs->ino_lock);
	if (inode->fd < 0) {
		pthread_mutex_unlock(&fs->ino_lock);
		fd = reopen(fs, inode);
		if (fd < 0)
			return fd;
		pthread_mutex_lock(&fs->ino_lock);
		if (inode->fd >= 0)
			close(fd); /* another thread opened it meanwhile */
		else
			inode->fd = fd;
	}
	inode->fd_users++;
	fd = inode->fd;
	fd_touch(fs, inode);
	lru_evict(fs);
	pthread_mutex_unlock(&fs->ino_lock);
	return fd;
}

int inode_path_get(struct slowmedia *fs, struct sm_inode *inode, char path[PROC_FD_PATH_MAX])
{
	int fd = inode_fd_get(fs, inode);

	if (fd < 0)
		return fd;
	proc_fd_path(path, fd);
	return 0;
}

void inode_fd_put(struct slowmedia *fs, struct sm_inode *inode)
{
	pthread_mutex_lock(&fs->ino_lock);
	inode->fd_users--;
	pthread_mutex_unlock(&fs->ino_lock);
}

/* Called with ino_lock held. */
static bool named_as(const struct sm_inode *inode, const struct sm_inode *dir,
		     const char *name)
{
	return inode->parent == dir && strcmp(inode->name, name) == 0;
}

void inode_name_hold(struct slowmedia *fs, int pfd, struct sm_inode *dir, const char *name,
		     struct sm_name_hold *h)
{
	struct stat st;
	bool named;

	h->inode = NULL;
	h->fd_held = false;
	if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return;
	h->inode = inode_peek(fs, st.st_dev, st.st_ino);
	if (!h->inode)
		return;
	pthread_mutex_lock(&fs->ino_lock);
	named = named_as(h->inode, dir, name);
	pthread_mutex_unlock(&fs->ino_lock);
	/* Still reachable by that name now: the last chance to open it. */
	if (named)
		h->fd_held = inode_fd_get(fs, h->inode) >= 0;
}

void inode_name_release(struct slowmedia *fs, struct sm_inode *dir, const char *name,
			bool gone, struct sm_name_hold *h)
{
	struct sm_inode *inode = h->inode;
	unsigned over;

	if (!inode)
		return;
	pthread_mutex_lock(&fs->ino_lock);
	if (gone && named_as(inode, dir, name))
		set_name(fs, inode, NULL, NULL); /* its fd, held, is pinned now */
	over = pinned_over(fs);
	pthread_mutex_unlock(&fs->ino_lock);
	warn_pinned(fs, over);
	if (h->fd_held)
		inode_fd_put(fs, inode);
	inode_unref(fs, inode);
	h->inode = NULL;
}

void inode_name_moved(struct slowmedia *fs, int pfd, struct sm_inode *dir, const char *name)
{
	struct sm_inode *inode;
	struct stat st;

	if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return;
	inode = inode_peek(fs, st.st_dev, st.st_ino);
	if (!inode)
		return;
	pthread_mutex_lock(&fs->ino_lock);
	set_name(fs, inode, dir, name);
	pthread_mutex_unlock(&fs->ino_lock);
	inode_unref(fs, inode);
}
