/*
 * The inode table: lower (st_dev, st_ino) -> struct sm_inode.
 *
 * The table must not be bounded by RLIMIT_NOFILE (a medium may hold 100,000
 * files and `find` looks every one up). So each inode keeps a lower file handle
 * (name_to_handle_at) and its O_PATH fd is only a cache: at most fd_cache_max
 * of them stay open, least recently used ones are closed and reopened with
 * open_by_handle_at when needed. Inodes on filesystems without handles (or on
 * another device than the root) keep their fd pinned.
 *
 * An fd handed out by inode_fd_get stays open until inode_fd_put (fd_users).
 * The reopen reads the medium: it runs outside ino_lock, gated like a lookup
 * (two threads may reopen one inode at once; the second fd is closed).
 */
#include "fs.h"
#include "log.h"
#include "sys.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#define FD_CACHE_MIN 64
#define FD_HEADROOM 1024 /* fds left for open files, dirs and the kernel channel */

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

static unsigned fd_cache_size(void)
{
	struct rlimit rl;
	const char *env = getenv("SLOWMEDIA_FD_CACHE"); /* tests force eviction */

	if (env && atoi(env) > 0)
		return (unsigned)atoi(env);
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
		return 4096;
	if (rl.rlim_cur < FD_HEADROOM + FD_CACHE_MIN)
		return FD_CACHE_MIN;
	/* A third: dirty files of the write queue need up to two fds each, too. */
	return (unsigned)(rl.rlim_cur - FD_HEADROOM) / 3;
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
	/* -1 (no handles: every fd stays pinned) when the root cannot be read. */
	fs->mount_fd = openat(root_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
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

/* Called with ino_lock held. */
static void lru_touch(struct slowmedia *fs, struct sm_inode *inode)
{
	if (!inode->handle || inode->fd < 0)
		return;
	if (inode->lru.data)
		g_queue_unlink(&fs->fd_lru, &inode->lru);
	inode->lru.data = inode;
	g_queue_push_head_link(&fs->fd_lru, &inode->lru);
}

/* Called with ino_lock held: close idle cached fds beyond the cache size. */
static void lru_evict(struct slowmedia *fs)
{
	GList *l = fs->fd_lru.tail;

	while (fs->nfds > fs->fd_cache_max && l) {
		struct sm_inode *victim = l->data;
		GList *prev = l->prev;

		if (victim->fd_users == 0) {
			g_queue_unlink(&fs->fd_lru, l);
			victim->lru.data = NULL;
			close(victim->fd);
			victim->fd = -1;
			fs->nfds--;
		}
		l = prev;
	}
}

static void lru_forget(struct slowmedia *fs, struct sm_inode *inode)
{
	if (inode->lru.data) {
		g_queue_unlink(&fs->fd_lru, &inode->lru);
		inode->lru.data = NULL;
		fs->nfds--;
	}
}

static struct file_handle *handle_of(struct slowmedia *fs, int fd, dev_t dev)
{
	struct file_handle *h;
	int mount_id;

	if (dev != fs->root_dev || fs->mount_fd < 0)
		return NULL;
	h = malloc(sizeof(*h) + MAX_HANDLE_SZ);
	h->handle_bytes = MAX_HANDLE_SZ;
	if (name_to_handle_at(fd, "", h, &mount_id, AT_EMPTY_PATH) < 0) {
		free(h);
		return NULL;
	}
	return h;
}

int inode_find_or_add(struct slowmedia *fs, int fd, const struct stat *st,
		      struct sm_inode **out)
{
	struct sm_inode key = {.dev = st->st_dev, .ino = st->st_ino};
	struct sm_inode *inode, *fresh = NULL;
	int spare_fd = fd;

	pthread_mutex_lock(&fs->ino_lock);
	inode = g_hash_table_lookup(fs->inodes, &key);
	if (!inode) {
		/* Build the new inode outside the lock; recheck for a racing lookup. */
		pthread_mutex_unlock(&fs->ino_lock);
		fresh = g_new0(struct sm_inode, 1);
		fresh->dev = st->st_dev;
		fresh->ino = st->st_ino;
		fresh->type = st->st_mode & S_IFMT;
		fresh->handle = handle_of(fs, fd, st->st_dev);
		fresh->fd = -1;
		pthread_mutex_lock(&fs->ino_lock);
		inode = g_hash_table_lookup(fs->inodes, &key);
		if (!inode) {
			inode = fresh;
			fresh = NULL;
			g_hash_table_add(fs->inodes, inode);
		}
	}
	inode->nlookup++;
	if (inode->fd < 0) {
		inode->fd = fd;
		spare_fd = -1;
		if (inode->handle)
			fs->nfds++;
	}
	lru_touch(fs, inode);
	lru_evict(fs);
	pthread_mutex_unlock(&fs->ino_lock);

	if (spare_fd >= 0)
		close(spare_fd);
	if (fresh)
		inode_free(fresh);
	*out = inode;
	return 0;
}

/* Called with ino_lock held; frees the inode when nothing holds it any more. */
static void inode_maybe_free(struct slowmedia *fs, struct sm_inode *inode)
{
	if (inode == &fs->root || inode->nlookup || inode->refs)
		return;
	g_hash_table_remove(fs->inodes, inode);
	lru_forget(fs, inode);
	inode_free(inode);
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

int inode_fd_get(struct slowmedia *fs, struct sm_inode *inode)
{
	int64_t meta_t0;
	int fd;

	pthread_mutex_lock(&fs->ino_lock);
	if (inode->fd < 0) {
		/* Opening by handle reads the inode from the medium when it is not
		 * cached (hundreds of ms on a DVD-RAM): not under the lock, and as a
		 * read of the medium for the flushers (the next step of the caller,
		 * an open or a read, gets the head too). */
		pthread_mutex_unlock(&fs->ino_lock);
		meta_t0 = wq_meta_begin(fs->wq);
		fd = open_by_handle_at(fs->mount_fd, inode->handle, O_PATH);
		fd = fd < 0 ? -errno : fd;
		wq_meta_end(fs->wq, meta_t0);
		if (fd < 0)
			return fd;
		pthread_mutex_lock(&fs->ino_lock);
		if (inode->fd >= 0) {
			close(fd); /* another thread opened it meanwhile */
		} else {
			inode->fd = fd;
			fs->nfds++;
		}
	}
	inode->fd_users++;
	fd = inode->fd;
	lru_touch(fs, inode);
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
