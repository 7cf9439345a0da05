/*
 * The FUSE side: a fixed tree, the images (one file each: `disk`, or the
 * names of --image), ctl and stats. Handlers run on the one FUSE loop thread
 * and never wait: image requests go to the head's queue (queue.c), which
 * answers them; ctl and stats are answered at once.
 */
#include "slowdev.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

/* The tree never changes; the kernel may cache it for this long. */
#define SD_ATTR_TIMEOUT_S 1.0

static const char sd_ctl_help[] =
    "commands (one per line):\n"
    "  fast on|off\n"
    "  fail read|write|any START END   requests touching [START, END) get EIO\n"
    "  clear                           drop fault rules, un-eject\n"
    "  eject                           every request gets EIO\n"
    "  stall SECONDS                   the head serves nothing for that long\n"
    "  set write_bw=SIZE read_bw=SIZE seek_ms=N\n"
    "  reset                           zero the counters\n"
    "fail, clear, eject and set act on every image, or on one as\n"
    "  IMAGE: COMMAND\n";

/* The files after the images, in readdir order. */
static const struct {
	const char *name;
	fuse_ino_t ino;
} sd_entries[] = {
    {"ctl", SD_INO_CTL},
    {"stats", SD_INO_STATS},
};

static struct slowdev *sd_from_req(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

/* The image behind ino, or NULL. */
static struct sd_image *image_of(struct slowdev *sd, fuse_ino_t ino)
{
	if (ino < SD_INO_IMAGE || ino - SD_INO_IMAGE >= sd->n_images)
		return NULL;
	return &sd->images[ino - SD_INO_IMAGE];
}

/* Entry i of the root (images first, then sd_entries): false past the end. */
static bool root_entry(const struct slowdev *sd, size_t i, const char **name,
		       fuse_ino_t *ino)
{
	if (i < sd->n_images) {
		*name = sd->images[i].name;
		*ino = SD_INO_IMAGE + i;
		return true;
	}
	i -= sd->n_images;
	if (i >= G_N_ELEMENTS(sd_entries))
		return false;
	*name = sd_entries[i].name;
	*ino = sd_entries[i].ino;
	return true;
}

static int sd_stat(struct slowdev *sd, fuse_ino_t ino, struct stat *st)
{
	struct sd_image *img = image_of(sd, ino);

	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	st->st_nlink = 1;
	st->st_atim = st->st_mtim = st->st_ctim = sd->start_time;
	st->st_blksize = 4096;
	if (img) {
		struct stat ist;

		if (fstat(img->fd, &ist) < 0)
			return -errno;
		st->st_mode = S_IFREG | (ist.st_mode & 07777);
		st->st_uid = ist.st_uid;
		st->st_gid = ist.st_gid;
		st->st_atim = ist.st_atim;
		st->st_mtim = ist.st_mtim;
		st->st_ctim = ist.st_ctim;
		st->st_size = (off_t)img->size;
		st->st_blocks = ist.st_blocks;
		return 0;
	}
	switch (ino) {
	case SD_INO_ROOT:
		st->st_mode = S_IFDIR | 0755;
		st->st_nlink = 2;
		return 0;
	case SD_INO_CTL:
		st->st_mode = S_IFREG | 0600;
		return 0;
	case SD_INO_STATS:
		st->st_mode = S_IFREG | 0444;
		return 0;
	}
	return -ENOENT;
}

static void sd_init(void *userdata, struct fuse_conn_info *conn)
{
	/* Every write must reach the queue when it is made, never a cache. */
	conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
}

static void sd_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct slowdev *sd = sd_from_req(req);
	struct fuse_entry_param e = {.attr_timeout = SD_ATTR_TIMEOUT_S,
				     .entry_timeout = SD_ATTR_TIMEOUT_S};
	const char *ename;
	fuse_ino_t ino;
	int err = -ENOENT;

	if (parent != SD_INO_ROOT) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	for (size_t i = 0; root_entry(sd, i, &ename, &ino); i++) {
		if (strcmp(name, ename) == 0) {
			e.ino = ino;
			err = sd_stat(sd, e.ino, &e.attr);
			break;
		}
	}
	if (err)
		fuse_reply_err(req, -err);
	else
		fuse_reply_entry(req, &e);
}

static void sd_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct stat st;
	int err = sd_stat(sd_from_req(req), ino, &st);

	if (err)
		fuse_reply_err(req, -err);
	else
		fuse_reply_attr(req, &st, SD_ATTR_TIMEOUT_S);
}

/*
 * Attribute changes are accepted and ignored. That includes the size of the
 * disk: O_TRUNC arrives here, and it is ignored as on a block device, so
 * `cp` or `dd` without conv=notrunc onto disk just overwrite it.
 */
static void sd_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
		       struct fuse_file_info *fi)
{
	sd_getattr(req, ino, fi);
}

static void sd_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	struct slowdev *sd = sd_from_req(req);
	g_autofree char *buf = g_malloc(size);
	size_t used = 0;

	if (ino != SD_INO_ROOT) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	/* Offsets: 0 ".", 1 "..", 2.. the entries; each entry's off is the next one. */
	for (off_t i = off;; i++) {
		struct stat st = {.st_ino = SD_INO_ROOT, .st_mode = S_IFDIR};
		const char *name = i == 0 ? "." : "..";
		fuse_ino_t eino;
		size_t n;

		if (i >= 2) {
			if (!root_entry(sd, (size_t)(i - 2), &name, &eino))
				break;
			sd_stat(sd, eino, &st);
		}
		n = fuse_add_direntry(req, buf + used, size - used, name, &st, i + 1);
		if (n > size - used)
			break;
		used += n;
	}
	fuse_reply_buf(req, buf, used);
}

static void sd_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct slowdev *sd = sd_from_req(req);

	if (ino == SD_INO_ROOT) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	/* No page cache: every read and write of the disk must meet the head. */
	fi->direct_io = 1;
	fi->keep_cache = 0;
	if (ino == SD_INO_STATS) {
		GString *text = g_string_new(NULL);
		uint64_t now = sd_now_ns();

		/* A snapshot per open, so a reader sees one consistent set. */
		g_mutex_lock(&sd->lock);
		sd_drive_format_stats(&sd->drive, text, sd->images[0].size,
				      now - sd->start_ns, now);
		g_mutex_unlock(&sd->lock);
		fi->fh = (uintptr_t)g_string_free_to_bytes(text);
	}
	fuse_reply_open(req, fi);
}

static void sd_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	if (ino == SD_INO_STATS && fi->fh)
		g_bytes_unref((GBytes *)(uintptr_t)fi->fh);
	fuse_reply_err(req, 0);
}

/* The part of [off, off + size) inside the image. */
static size_t clip(const struct sd_image *img, size_t size, off_t off)
{
	return (uint64_t)off >= img->size ? 0 : MIN(size, img->size - (uint64_t)off);
}

static void reply_slice(fuse_req_t req, const char *text, size_t len, size_t size,
			off_t off)
{
	if ((uint64_t)off >= len)
		fuse_reply_buf(req, NULL, 0);
	else
		fuse_reply_buf(req, text + off, MIN(size, len - (size_t)off));
}

static void sd_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	struct slowdev *sd = sd_from_req(req);
	struct sd_image *img = image_of(sd, ino);

	if (ino == SD_INO_CTL) {
		reply_slice(req, sd_ctl_help, strlen(sd_ctl_help), size, off);
		return;
	}
	if (ino == SD_INO_STATS) {
		gsize len;
		const char *text = g_bytes_get_data((GBytes *)(uintptr_t)fi->fh, &len);

		reply_slice(req, text, len, size, off);
		return;
	}
	if (!img) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	sd_queue_submit(sd, sd_req_new(req, (unsigned)(img - sd->images), SD_READ,
				       (uint64_t)off, clip(img, size, off)));
}

static void ctl_write(fuse_req_t req, struct slowdev *sd, const char *buf, size_t size)
{
	g_autoptr(GArray) cmds = NULL;
	g_autofree char *why = NULL;

	if (sd_cmd_parse_text(buf, size, &cmds, &why) < 0) {
		sd_log(sd, LOG_WARNING, "ctl: %s", why);
		fuse_reply_err(req, EINVAL);
		return;
	}
	/* Image names do not change after start: no lock needed to resolve them. */
	for (guint i = 0; i < cmds->len; i++) {
		if (sd_drive_resolve(&sd->drive, &g_array_index(cmds, struct sd_cmd, i),
				     &why) < 0) {
			sd_log(sd, LOG_WARNING, "ctl: %s", why);
			fuse_reply_err(req, EINVAL);
			return;
		}
	}
	g_mutex_lock(&sd->lock);
	for (guint i = 0; i < cmds->len; i++)
		sd_drive_apply(&sd->drive, &g_array_index(cmds, struct sd_cmd, i),
			       sd_now_ns());
	/* A stall, fast mode or eject may concern the head now. */
	g_cond_signal(&sd->wake);
	g_mutex_unlock(&sd->lock);
	if (sd->debug)
		sd_log(sd, LOG_DEBUG, "ctl: %.*s", (int)size, buf);
	fuse_reply_write(req, size);
}

static void sd_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size,
		     off_t off, struct fuse_file_info *fi)
{
	struct slowdev *sd = sd_from_req(req);
	struct sd_image *img = image_of(sd, ino);
	struct sd_req *r;

	if (ino == SD_INO_CTL) {
		ctl_write(req, sd, buf, size);
		return;
	}
	if (!img) {
		fuse_reply_err(req, EACCES);
		return;
	}
	if (size && (uint64_t)off >= img->size) {
		fuse_reply_err(req, ENOSPC); /* past the end of the medium */
		return;
	}
	r = sd_req_new(req, (unsigned)(img - sd->images), SD_WRITE, (uint64_t)off,
		       clip(img, size, off));
	r->data = sd_buf_alloc(r->len);
	memcpy(r->data, buf, r->len);
	sd_queue_submit(sd, r);
}

static void sd_fsync(fuse_req_t req, fuse_ino_t ino, int datasync,
		     struct fuse_file_info *fi)
{
	struct slowdev *sd = sd_from_req(req);
	struct sd_image *img = image_of(sd, ino);

	if (!img) {
		fuse_reply_err(req, 0);
		return;
	}
	/* Queued like any request, so it returns after the writes before it,
	 * to any image. */
	sd_queue_submit(sd,
			sd_req_new(req, (unsigned)(img - sd->images), SD_FSYNC, 0, 0));
}

static void sd_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	fuse_reply_err(req, 0);
}

const struct fuse_lowlevel_ops sd_ops = {
    .init = sd_init,
    .lookup = sd_lookup,
    .getattr = sd_getattr,
    .setattr = sd_setattr,
    .readdir = sd_readdir,
    .open = sd_open,
    .read = sd_read,
    .write = sd_write,
    .flush = sd_flush,
    .release = sd_release,
    .fsync = sd_fsync,
};
