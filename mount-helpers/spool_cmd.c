/*
 * slowmediactl spool list|recover|discard: a spool directory (spool=DIR)
 * read and handled without a daemon, through sched/spool.h. list only reads
 * (it works beside running daemons); recover and discard take the medium's
 * lock and refuse while a daemon has it. recover writes a medium's pending
 * operations into files under DEST, every path opened beneath DEST without
 * following a symbolic link; it never deletes the spool (discard does).
 * Human output on stdout, --json for list; every problem is one line on
 * stderr and an exit status of spool_cmd.h.
 */
#include "spool_cmd.h"
#include "fdio.h"

#include "ctl_client.h"
#include "spool.h"
#include "rescue.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define PROG "slowmediactl"
#define ANSWER_MAX 64

struct spool_cli {
	const char *sub, *dir, *medium, *dest;
	bool json, yes, include_damaged;
};

void spool_cmd_help(FILE *out)
{
	fputs(
	    "  spool list DIR [--json]\n"
	    "        the media with writes pending in spool directory DIR (spool=DIR):\n"
	    "        files, bytes, records, segments, the oldest, damage; read only.\n"
	    "        DIR may be a rescue directory (rescue=, default\n"
	    "        /var/lib/slowmedia/rescue): the data saved there is listed\n"
	    "  spool recover DIR --medium ID --to DEST [--include-damaged]\n"
	    "        write medium ID's pending operations (or, from a rescue directory,\n"
	    "        its saved data) into files under DEST (paths\n"
	    "        as on the medium); the spool is kept\n"
	    "  spool discard DIR --medium ID [--yes]\n"
	    "        delete medium ID's spool (asks first, on a terminal, unless "
	    "--yes)\n",
	    out);
}

G_GNUC_PRINTF(1, 2)
static int spool_usage(const char *fmt, ...)
{
	va_list ap;

	fputs(PROG ": spool: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs(" (try '" PROG " --help')\n", stderr);
	return EXIT_USAGE;
}

/* One line on stderr (control bytes and bytes that are not UTF-8 escaped). */
G_GNUC_PRINTF(2, 3)
static int problem(int code, const char *fmt, ...)
{
	g_autofree char *msg = NULL, *shown = NULL;
	va_list ap;

	va_start(ap, fmt);
	msg = g_strdup_vprintf(fmt, ap);
	va_end(ap);
	shown = ctlc_fmt_text(msg);
	fprintf(stderr, PROG ": %s\n", shown);
	return code;
}

static int errno_exit(int err)
{
	switch (-err) {
	case EACCES:
	case EPERM:
		return EXIT_DENIED;
	case ENOENT:
	case ENOTDIR:
		return EXIT_NOT_MOUNT;
	case EBUSY:
		return EXIT_BUSY;
	default:
		return EXIT_FAILED;
	}
}

static char *fmt_time(int64_t t)
{
	g_autoptr(GDateTime) d = t ? g_date_time_new_from_unix_local(t) : NULL;

	return d ? g_date_time_format(d, "%Y-%m-%d %H:%M:%S") : g_strdup("unknown");
}

static const char *plural(uint64_t n)
{
	return n == 1 ? "" : "s";
}

/* ---- list ---- */

struct list_ctx {
	GString *o;
	bool json;
	unsigned n;
};

static void human_info(GString *o, const struct spool_medium_info *mi)
{
	g_autofree char *id = ctlc_fmt_text(mi->id[0] ? mi->id : "(unknown)");
	g_autofree char *key = ctlc_fmt_text(mi->key);
	g_autofree char *label = ctlc_fmt_text(mi->label);
	g_autofree char *src = ctlc_fmt_text(mi->source);
	g_autofree char *size = ctlc_fmt_size(mi->size);

	g_string_append_printf(o, "medium %s\n", id);
	if (mi->have_info && *label)
		g_string_append_printf(o, "  medium    label \"%s\", %s, from %s\n",
				       label, size, *src ? src : "?");
	else if (mi->have_info)
		g_string_append_printf(o, "  medium    no label, %s, from %s\n", size,
				       *src ? src : "?");
	g_string_append_printf(o, "  directory %s\n", key);
}

static void human_pending(GString *o, const struct spool_medium_info *mi)
{
	g_autofree char *wb = ctlc_fmt_size(mi->write_bytes);
	g_autofree char *db = ctlc_fmt_size(mi->disk_bytes);
	g_autofree char *oldest = fmt_time(mi->oldest);
	g_autofree char *first = fmt_time(mi->first_use), *last = fmt_time(mi->last_use);

	if (!mi->segments && !mi->set_aside)
		g_string_append(o, "  pending   nothing\n");
	else
		g_string_append_printf(
		    o,
		    "  pending   %s of writes in %" PRIu64 " file%s, %" PRIu64
		    " record%s, %u segment%s (%s on disk)\n",
		    wb, mi->files, plural(mi->files), mi->records, plural(mi->records),
		    mi->segments, plural(mi->segments), db);
	if (mi->segments)
		g_string_append_printf(o, "  oldest    %s (the oldest segment's %s)\n",
				       oldest,
				       mi->oldest_is_birth ? "creation" : "last change");
	if (mi->have_info)
		g_string_append_printf(o, "  used      first %s, last %s\n", first, last);
	if (mi->locked_by)
		g_string_append_printf(o, "  in use    by pid %d\n", (int)mi->locked_by);
	if (mi->held)
		g_string_append_printf(
		    o,
		    "  held      %u segment%s after a damage, never replayed "
		    "(recover --include-damaged, or discard)\n",
		    mi->held, plural(mi->held));
	if (mi->set_aside)
		g_string_append_printf(
		    o, "  damaged   %u segment%s set aside (*.corrupt-T)\n",
		    mi->set_aside, plural(mi->set_aside));
	if (mi->damage[0]) {
		g_autofree char *d = ctlc_fmt_text(mi->damage);
		g_string_append_printf(o, "  damage    %s\n", d);
	}
}

static void json_kv_s(GString *o, const char *k, const char *v, bool null_if_empty)
{
	g_string_append_printf(o, "\"%s\": ", k);
	if (null_if_empty && !*v)
		g_string_append(o, "null");
	else
		smctl_json_str(o, v);
	g_string_append(o, ", ");
}

static void json_kv_u(GString *o, const char *k, uint64_t v)
{
	g_string_append_printf(o, "\"%s\": %" PRIu64 ", ", k, v);
}

static void json_info(GString *o, const struct spool_medium_info *mi)
{
	g_string_append(o, "{");
	json_kv_s(o, "id", mi->id, true);
	json_kv_s(o, "key", mi->key, false);
	json_kv_s(o, "label", mi->label, false);
	json_kv_s(o, "source", mi->source, false);
	json_kv_u(o, "size", mi->size);
	json_kv_u(o, "first_use", (uint64_t)mi->first_use);
	json_kv_u(o, "last_use", (uint64_t)mi->last_use);
	json_kv_u(o, "segments", mi->segments);
	json_kv_u(o, "held_segments", mi->held);
	json_kv_u(o, "set_aside_segments", mi->set_aside);
	json_kv_u(o, "records", mi->records);
	json_kv_u(o, "files", mi->files);
	json_kv_u(o, "pending_bytes", mi->write_bytes);
	json_kv_u(o, "disk_bytes", mi->disk_bytes);
	if (mi->segments)
		g_string_append_printf(
		    o, "\"oldest\": %" PRId64 ", \"oldest_from\": \"%s\", ", mi->oldest,
		    mi->oldest_is_birth ? "birth" : "mtime");
	else
		g_string_append(o, "\"oldest\": null, \"oldest_from\": null, ");
	if (mi->locked_by)
		g_string_append_printf(o, "\"in_use_pid\": %d, ", (int)mi->locked_by);
	else
		g_string_append(o, "\"in_use_pid\": null, ");
	g_string_append(o, "\"damage\": ");
	if (mi->damage[0])
		smctl_json_str(o, mi->damage);
	else
		g_string_append(o, "null");
	g_string_append(o, "}");
}

static int list_one(const struct spool_medium_info *mi, void *arg)
{
	struct list_ctx *lc = arg;

	if (lc->json) {
		g_string_append(lc->o, lc->n ? ",\n    " : "\n    ");
		json_info(lc->o, mi);
	} else {
		if (lc->n)
			g_string_append_c(lc->o, '\n');
		human_info(lc->o, mi);
		human_pending(lc->o, mi);
	}
	lc->n++;
	return 0;
}

/* ---- rescue directories (rescue.c): listed and recovered like a spool ---- */

static int list_rescue(const struct rescue_info *ri, void *arg)
{
	struct list_ctx *lc = arg;
	g_autofree char *m = ctlc_fmt_text(ri->medium), *b = ctlc_fmt_size(ri->bytes);

	if (lc->json) {
		g_string_append(lc->o, lc->n ? ",\n    {" : "\n    {");
		json_kv_s(lc->o, "medium", ri->medium, true);
		g_string_append(lc->o, ", ");
		json_kv_s(lc->o, "directory", ri->key, false);
		g_string_append(lc->o, ", ");
		json_kv_s(lc->o, "rescue", ri->dir, false);
		g_string_append(lc->o, ", ");
		json_kv_u(lc->o, "files", ri->files);
		g_string_append(lc->o, ", ");
		json_kv_u(lc->o, "bytes", ri->bytes);
		g_string_append_printf(lc->o, ", \"complete\": %s}", ri->complete ? "true" : "false");
	} else {
		g_string_append_printf(lc->o,
				       "%srescue of medium %s\n  saved in  %s\n  holds     %s in %u "
				       "file%s%s\n",
				       lc->n ? "\n" : "", ri->medium[0] ? m : "(unknown)", ri->dir, b,
				       ri->files, plural(ri->files),
				       ri->complete ? "" : " (its MANIFEST does not read)");
	}
	lc->n++;
	return 0;
}

static int cmd_list_rescues(const struct spool_cli *c)
{
	g_autoptr(GString) o = g_string_new(NULL);
	struct list_ctx lc = {.o = o, .json = c->json};
	bool found;

	if (c->json) {
		g_string_append(o, "{\"rescue\": ");
		smctl_json_str(o, c->dir);
		g_string_append(o, ", \"rescues\": [");
	}
	rescue_list(c->dir, list_rescue, &lc, &found);
	if (c->json)
		g_string_append(o, lc.n ? "\n  ]}\n" : "]}\n");
	fputs(o->str, stdout);
	return EXIT_OK;
}

static bool is_rescue_dir(const char *dir)
{
	bool found = false;

	rescue_list(dir, NULL, NULL, &found);
	return found;
}

static int cmd_list(const struct spool_cli *c)
{
	g_autoptr(GString) o = g_string_new(NULL);
	struct list_ctx lc = {.o = o, .json = c->json};
	char why[SPOOL_WHY_MAX] = "";
	int r;

	if (is_rescue_dir(c->dir))
		return cmd_list_rescues(c);

	if (c->json) {
		g_string_append(o, "{\"spool\": ");
		smctl_json_str(o, c->dir);
		g_string_append(o, ", \"media\": [");
	}
	r = spool_list(c->dir, list_one, &lc, why);
	if (r < 0)
		return problem(errno_exit(r), "%s", why);
	if (c->json)
		g_string_append(o, lc.n ? "\n  ]}\n" : "]}\n");
	else if (!lc.n)
		g_string_append_printf(o, "no media in the spool %s\n", c->dir);
	fputs(o->str, stdout);
	return EXIT_OK;
}

/* ---- recover ---- */

struct recover {
	int destfd;
	GHashTable *noted; /* paths already named in a line on stderr */
	GHashTable *paths; /* the paths of the records applied */
	uint64_t applied, failed, bytes;
	int cache_fd; /* the file of the last write, kept open */
	char *cache_path;
};

G_GNUC_PRINTF(3, 4)
static void note(struct recover *rc, const char *path, const char *fmt, ...)
{
	g_autofree char *msg = NULL, *shown = NULL;
	va_list ap;

	if (g_hash_table_contains(rc->noted, path))
		return;
	g_hash_table_add(rc->noted, g_strdup(path));
	va_start(ap, fmt);
	msg = g_strdup_vprintf(fmt, ap);
	va_end(ap);
	shown = ctlc_fmt_text(path);
	fprintf(stderr, PROG ": recover: %s: %s\n", shown, msg);
}

static const char *errno_text(int err)
{
	if (err == -ELOOP || err == -EXDEV)
		return "a symbolic link on the way under DEST (not followed)";
	return g_strerror(-err);
}

/* The parent directory of path and its last component. */
static int open_parent(struct recover *rc, const char *path, bool create, int *pfd,
		       const char **name)
{
	const char *slash = strrchr(path, '/');
	g_autofree char *dir = NULL;

	if (!slash) {
		*name = path;
		*pfd = dup(rc->destfd);
		return *pfd < 0 ? -errno : 0;
	}
	*name = slash + 1;
	dir = g_strndup(path, (gsize)(slash - path));
	return fd_open_dir_beneath(rc->destfd, dir, create, pfd);
}

static void drop_cache(struct recover *rc)
{
	if (rc->cache_fd >= 0)
		close(rc->cache_fd);
	rc->cache_fd = -1;
	g_clear_pointer(&rc->cache_path, g_free);
}

/* path opened for writing (made, 0600, if missing): a regular file only. */
static int open_file(struct recover *rc, const char *path, int *out)
{
	const char *name;
	struct stat st;
	int pfd, fd, err;

	if (rc->cache_path && !strcmp(rc->cache_path, path)) {
		*out = rc->cache_fd;
		return 0;
	}
	drop_cache(rc);
	err = open_parent(rc, path, true, &pfd, &name);
	if (err)
		return err;
	/* Not even opened when it is not a plain file (a FIFO, a device). */
	if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(st.st_mode)) {
		close(pfd);
		return S_ISLNK(st.st_mode) ? -ELOOP : -EINVAL;
	}
	fd = openat(pfd, name, O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC,
		    0600);
	err = fd < 0 ? -errno : 0;
	close(pfd);
	if (!err && (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))) {
		err = -EINVAL;
		close(fd);
	}
	if (err)
		return err;
	rc->cache_fd = fd;
	rc->cache_path = g_strdup(path);
	*out = fd;
	return 0;
}

static struct timespec times_ts(int64_t ns)
{
	if (ns == SPJ_TIME_OMIT)
		return (struct timespec){.tv_nsec = UTIME_OMIT};
	return (struct timespec){.tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000};
}

/* The name of a record's path's own operation, at path; 0 done, 1 noted
 * and skipped, -errno. */
static int apply_path_op(struct recover *rc, const struct spj_record *r,
			 const void *payload)
{
	const char *name, *nname;
	int pfd, npfd, err = 0;

	drop_cache(rc); /* renames and unlinks change what a path names */
	err = open_parent(rc, r->path, false, &pfd, &name);
	if (err == -ENOENT)
		goto missing;
	if (err)
		return err;
	if (r->type == SPJ_TIMES) {
		int64_t a, m;
		struct timespec ts[2];

		spj_times_unpack(payload, &a, &m);
		ts[0] = times_ts(a);
		ts[1] = times_ts(m);
		err = utimensat(pfd, name, ts, AT_SYMLINK_NOFOLLOW) < 0 ? -errno : 0;
	} else if (r->type == SPJ_UNLINK) {
		err = unlinkat(pfd, name, 0) < 0 ? -errno : 0;
		if (err == -EISDIR || err == -EPERM)
			err = unlinkat(pfd, name, AT_REMOVEDIR) < 0 ? -errno : 0;
	} else { /* SPJ_RENAME: the new path's parent is made */
		err = open_parent(rc, payload, true, &npfd, &nname);
		if (!err) {
			err = renameat(pfd, name, npfd, nname) < 0 ? -errno : 0;
			close(npfd);
		}
	}
	close(pfd);
	if (err != -ENOENT)
		return err;
missing:
	if (r->type == SPJ_UNLINK)
		return 0; /* gone already: what was asked */
	note(rc, r->path, "not in DEST, %s not applied (its data is on the medium)",
	     r->type == SPJ_TIMES ? "times" : "rename");
	return 1;
}

static int apply(struct recover *rc, const struct spj_record *r, const void *payload)
{
	int fd, err;

	switch (r->type) {
	case SPJ_WRITE:
	case SPJ_TRUNCATE:
	case SPJ_FALLOCATE:
		if (r->type == SPJ_FALLOCATE && r->mode) {
			note(rc, r->path,
			     "FALLOCATE with mode 0x%x skipped (only plain allocations "
			     "are "
			     "recovered)",
			     r->mode);
			return 1;
		}
		err = open_file(rc, r->path, &fd);
		if (err)
			return err;
		if (r->type == SPJ_WRITE)
			err = fd_pwrite_all(fd, payload, r->payload_len, (off_t)r->offset);
		else if (r->type == SPJ_TRUNCATE)
			err = ftruncate(fd, (off_t)r->offset) < 0 ? -errno : 0;
		else
			err = -posix_fallocate(fd, (off_t)r->offset, (off_t)r->length);
		if (!err && r->type == SPJ_WRITE)
			rc->bytes += r->payload_len;
		return err;
	default:
		return apply_path_op(rc, r, payload);
	}
}

/*
 * Where path p is or will be: the realpath of its deepest existing ancestor
 * (symlinks and ".." resolved as the kernel will), the rest added and only
 * then folded (it will be made of plain directories).
 */
static char *real_or_planned(const char *p)
{
	g_autofree char *cwd = g_get_current_dir();
	char *dir = g_path_is_absolute(p) ? g_strdup(p) : g_build_filename(cwd, p, NULL);
	g_autofree char *rest = NULL, *full = NULL;
	char *r;

	while (!(r = realpath(dir, NULL)) && strcmp(dir, "/")) {
		char *base = g_path_get_basename(dir), *up = g_path_get_dirname(dir);
		char *nrest = rest ? g_build_filename(base, rest, NULL) : g_strdup(base);

		g_free(base);
		g_free(rest);
		rest = nrest;
		g_free(dir);
		dir = up;
	}
	g_free(dir);
	full = g_build_filename(r ? r : "/", rest, NULL);
	free(r);
	return g_canonicalize_filename(full, "/");
}

static bool path_within(const char *inner, const char *outer)
{
	size_t n = strlen(outer);

	return !strcmp(outer, "/") ||
	       (!strncmp(inner, outer, n) && (!inner[n] || inner[n] == '/'));
}

/* DEST: not in the spool, nor holding it; made if missing. */
static int check_dest(const struct spool_cli *c, int *destfd)
{
	g_autofree char *rdir = realpath(c->dir, NULL);
	g_autofree char *rdest = real_or_planned(c->dest);
	g_autofree char *real = NULL;

	if (!rdir)
		return problem(errno_exit(-errno), "%s: %s", c->dir, g_strerror(errno));
	if (path_within(rdest, rdir))
		return problem(EXIT_USAGE,
			       "recover: DEST %s is inside the spool directory %s",
			       c->dest, c->dir);
	if (path_within(rdir, rdest))
		return problem(EXIT_USAGE,
			       "recover: DEST %s holds the spool directory %s (choose a "
			       "directory outside it)",
			       c->dest, c->dir);
	if (g_mkdir_with_parents(c->dest, 0700) < 0)
		return problem(errno == ENOTDIR || errno == EEXIST ? EXIT_USAGE
								   : errno_exit(-errno),
			       "recover: %s: %s", c->dest, g_strerror(errno));
	*destfd = open(c->dest, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (*destfd < 0)
		return problem(errno == ENOTDIR ? EXIT_USAGE : errno_exit(-errno),
			       "recover: %s: %s", c->dest, g_strerror(errno));
	/* Again as the kernel resolved it: ".." after a symlink is not what it
	 * looks like. */
	real = realpath(c->dest, NULL);
	if (!real || path_within(real, rdir)) {
		close(*destfd);
		*destfd = -1;
		return problem(EXIT_USAGE,
			       "recover: DEST %s is inside the spool directory %s",
			       c->dest, c->dir);
	}
	return EXIT_OK;
}

static int busy_exit(const char *why)
{
	return problem(EXIT_BUSY, "a daemon is using this medium's spool: %s", why);
}

/* Read every record and apply it: EXIT_OK, or EXIT_FAILED with the lines said. */
static int recover_records(struct spool_scan *sc, struct recover *rc,
			   const struct spool_cli *c)
{
	struct spj_record r;
	const void *payload;
	bool stopped = false;
	int res;

	while ((res = spool_scan_next(sc, &r, &payload)) != SPOOL_DONE) {
		if (res < 0)
			return problem(EXIT_FAILED, "recover: reading the spool: %s",
				       g_strerror(-res));
		if (res == SPOOL_DAMAGED) {
			const struct spool_damage *d = spool_scan_damage(sc);
			problem(EXIT_FAILED,
				"recover: damage at offset %" PRIu64 ": %s%s", d->offset,
				d->why,
				c->include_damaged ? "; going on with the next segment"
						   : "; nothing after it is recovered "
						     "(--include-damaged goes on)");
			stopped = !c->include_damaged;
			continue;
		}
		res = apply(rc, &r, payload);
		if (res < 0) {
			note(rc, r.path, "%s not applied: %s",
			     r.type == SPJ_WRITE ? "write" : "operation",
			     errno_text(res));
			rc->failed++;
			continue;
		}
		rc->applied += res == 0;
		g_hash_table_add(rc->paths, g_strdup(r.path));
	}
	return stopped || rc->failed ? EXIT_FAILED : EXIT_OK;
}

/* One rescued file put under DEST: its truncate first, then the saved ranges
 * copied from the rescue, then its size. */
struct rescue_rc {
	struct recover *rc;
	const char *rdir;
	int rfd;
};

static int copy_range(int from, int to, uint64_t off, uint64_t len)
{
	char buf[1 << 16];

	while (len) {
		ssize_t n = pread(from, buf, MIN(len, sizeof(buf)), (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		int err = fd_pwrite_all(to, buf, (size_t)n, (off_t)off);
		if (err)
			return err;
		off += (uint64_t)n;
		len -= (uint64_t)n;
	}
	return 0;
}

static int recover_rescued(const char *path, uint64_t saved_end, const char *ranges,
			   const char *notes, void *arg)
{
	struct rescue_rc *x = arg;
	struct recover *rc = x->rc;
	g_auto(GStrv) ns = g_strsplit(notes, "; ", -1), rs = g_strsplit(ranges, ",", -1);
	long long floor, tsize, size = -1;
	int src, dst, err = 0;
	struct stat st;

	(void)saved_end;
	err = open_file(rc, path, &dst);
	if (err) {
		note(rc, path, "%s", errno_text(err));
		rc->failed++;
		return 0;
	}
	for (char **n = ns; *n; n++) {
		if (sscanf(*n, "truncate %lld %lld", &floor, &tsize) == 2) {
			if ((fstat(dst, &st) == 0 && st.st_size > floor && ftruncate(dst, floor) < 0) ||
			    ftruncate(dst, tsize) < 0)
				err = -errno;
		} else {
			sscanf(*n, "size %lld", &size);
		}
	}
	src = openat(x->rfd, path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (src < 0 && ranges[0] != '-')
		err = -errno;
	for (char **r = rs; src >= 0 && *r && !err; r++) {
		unsigned long long off, len;
		if (sscanf(*r, "%llu+%llu", &off, &len) != 2)
			continue;
		err = copy_range(src, dst, off, len);
		if (!err)
			rc->bytes += len;
	}
	if (src >= 0)
		close(src);
	if (!err && size >= 0 && fstat(dst, &st) == 0 && st.st_size < size && ftruncate(dst, size) < 0)
		err = -errno;
	if (err) {
		note(rc, path, "%s", errno_text(err));
		rc->failed++;
	} else {
		rc->applied++;
	}
	g_hash_table_add(rc->paths, g_strdup(path));
	return 0;
}

struct pick_rescue {
	const char *medium;
	GPtrArray *dirs;
};

static int pick_rescue(const struct rescue_info *ri, void *arg)
{
	struct pick_rescue *pr = arg;

	if (ri->complete && (!strcmp(ri->medium, pr->medium) || !strcmp(ri->key, pr->medium)))
		g_ptr_array_add(pr->dirs, g_strdup(ri->dir));
	return 0;
}

static int cmd_recover_rescues(const struct spool_cli *c)
{
	struct recover rc = {.destfd = -1, .cache_fd = -1};
	struct pick_rescue pr = {.medium = c->medium, .dirs = g_ptr_array_new_with_free_func(g_free)};
	bool found;
	int code;

	rescue_list(c->dir, pick_rescue, &pr, &found);
	if (!pr.dirs->len) {
		g_ptr_array_free(pr.dirs, TRUE);
		return problem(EXIT_FAILED, "no rescue of medium %s in %s (see: " PROG
					    " spool list %s)", c->medium, c->dir, c->dir);
	}
	code = check_dest(c, &rc.destfd);
	if (code) {
		g_ptr_array_free(pr.dirs, TRUE);
		return code;
	}
	rc.noted = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
	rc.paths = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
	/* Oldest first: a later rescue's bytes win. */
	for (guint i = 0; i < pr.dirs->len; i++) {
		struct rescue_rc x = {.rc = &rc, .rdir = pr.dirs->pdata[i]};
		x.rfd = open(x.rdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (x.rfd < 0 || rescue_read(x.rdir, recover_rescued, &x) < 0)
			code = problem(EXIT_FAILED, "recover: cannot read the rescue %s", x.rdir);
		if (x.rfd >= 0)
			close(x.rfd);
		drop_cache(&rc);
	}
	if (syncfs(rc.destfd) < 0 && !code)
		code = problem(EXIT_FAILED, "recover: %s: %s", c->dest, g_strerror(errno));
	close(rc.destfd);
	{
		g_autofree char *b = ctlc_fmt_size(rc.bytes);
		guint files = g_hash_table_size(rc.paths);

		printf("recovered %u file%s (%s saved) from %u rescue%s into %s%s\n", files,
		       plural(files), b, pr.dirs->len, plural(pr.dirs->len), c->dest,
		       rc.failed ? "; some failed (above)" : "");
		printf("the rescue is kept in %s\n", c->dir);
	}
	g_hash_table_unref(rc.noted);
	g_hash_table_unref(rc.paths);
	g_ptr_array_free(pr.dirs, TRUE);
	return code ? code : rc.failed ? EXIT_FAILED : EXIT_OK;
}

static int cmd_recover(const struct spool_cli *c)
{
	char key[SPOOL_KEY_MAX + 1], why[SPOOL_WHY_MAX] = "";
	struct recover rc = {.destfd = -1, .cache_fd = -1};
	struct spool_scan *sc;
	unsigned flags = SPOOL_SCAN_LOCK;
	int r, code;

	if (is_rescue_dir(c->dir))
		return cmd_recover_rescues(c);
	r = spool_find_medium(c->dir, c->medium, key, why);
	if (r < 0)
		return problem(errno_exit(r), "%s", why);
	code = check_dest(c, &rc.destfd);
	if (code)
		return code;
	if (c->include_damaged)
		flags |= SPOOL_SCAN_HELD | SPOOL_SCAN_SET_ASIDE | SPOOL_SCAN_PAST_DAMAGE;
	r = spool_scan_open(c->dir, key, flags, &sc, why);
	if (r == -EBUSY) {
		close(rc.destfd);
		return busy_exit(why);
	}
	if (r < 0) {
		close(rc.destfd);
		return problem(errno_exit(r), "%s", why);
	}
	rc.noted = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
	rc.paths = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
	code = recover_records(sc, &rc, c);
	if (spool_scan_skipped(sc))
		printf("%u held or set-aside segment%s not read (--include-damaged reads "
		       "them)\n",
		       spool_scan_skipped(sc), plural(spool_scan_skipped(sc)));
	spool_scan_close(sc);
	drop_cache(&rc);
	if (syncfs(rc.destfd) < 0 && !code) /* on the disk before a discard */
		code =
		    problem(EXIT_FAILED, "recover: %s: %s", c->dest, g_strerror(errno));
	close(rc.destfd);
	{
		g_autofree char *b = ctlc_fmt_size(rc.bytes),
				*m = ctlc_fmt_text(c->medium);
		guint files = g_hash_table_size(rc.paths);

		printf("recovered %" PRIu64
		       " record%s of %u file%s (%s of writes) into %s%s\n",
		       rc.applied, plural(rc.applied), files, plural(files), b, c->dest,
		       rc.failed ? "; some failed (above)" : "");
		printf("the spool is kept: '" PROG
		       " spool discard %s --medium %s' deletes it\n",
		       c->dir, m);
	}
	g_hash_table_unref(rc.noted);
	g_hash_table_unref(rc.paths);
	return code;
}

/* ---- discard ---- */

static bool ask(uint64_t bytes, uint64_t files, const char *medium)
{
	g_autofree char *m = ctlc_fmt_text(medium);
	char line[ANSWER_MAX];

	fprintf(stderr,
		"discard %" PRIu64 " byte%s of %" PRIu64
		" file%s pending for medium %s? [y/N] ",
		bytes, plural(bytes), files, plural(files), m);
	fflush(stderr);
	if (!fgets(line, sizeof(line), stdin))
		return false;
	g_strstrip(line);
	return !g_ascii_strcasecmp(line, "y") || !g_ascii_strcasecmp(line, "yes");
}

static int cmd_discard(const struct spool_cli *c)
{
	char key[SPOOL_KEY_MAX + 1], why[SPOOL_WHY_MAX] = "";
	g_autofree struct spool_medium_info *mi = g_new0(struct spool_medium_info, 1);
	g_autofree char *m = ctlc_fmt_text(c->medium);
	int r, dfd;

	r = spool_find_medium(c->dir, c->medium, key, why);
	if (r < 0)
		return problem(errno_exit(r), "%s", why);
	dfd = open(c->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return problem(errno_exit(-errno), "%s: %s", c->dir, g_strerror(errno));
	spool_medium_stat(dfd, key, mi);
	close(dfd);
	if (mi->locked_by)
		return problem(EXIT_BUSY,
			       "a daemon is using this medium's spool (pid %d): "
			       "nothing discarded",
			       (int)mi->locked_by);
	if (!c->yes && !isatty(STDIN_FILENO))
		return problem(
		    EXIT_USAGE,
		    "spool discard: refusing to delete medium %s's spool without "
		    "--yes (standard input is not a terminal to ask on)",
		    c->medium);
	if (!c->yes && !ask(mi->write_bytes, mi->files, c->medium)) {
		fprintf(stderr, PROG ": spool discard: nothing discarded\n");
		return EXIT_FAILED;
	}
	r = spool_discard(c->dir, key, why);
	if (r == -EBUSY)
		return busy_exit(why);
	if (r < 0)
		return problem(errno_exit(r) == EXIT_NOT_MOUNT ? EXIT_FAILED
							       : errno_exit(r),
			       "spool discard: %s", why);
	printf("discarded medium %s: %" PRIu64 " byte%s of writes to %" PRIu64
	       " file%s, %u segment%s\n",
	       m, mi->write_bytes, plural(mi->write_bytes), mi->files, plural(mi->files),
	       mi->segments + mi->set_aside, plural(mi->segments + mi->set_aside));
	return EXIT_OK;
}

/* ---- the command line ---- */

enum { OPT_JSON = 256, OPT_MEDIUM, OPT_TO, OPT_YES, OPT_INCLUDE_DAMAGED };

static int parse(int argc, char **argv, struct spool_cli *c)
{
	static const struct option opts[] = {
	    {"help", no_argument, NULL, 'h'},
	    {"json", no_argument, NULL, OPT_JSON},
	    {"medium", required_argument, NULL, OPT_MEDIUM},
	    {"to", required_argument, NULL, OPT_TO},
	    {"yes", no_argument, NULL, OPT_YES},
	    {"include-damaged", no_argument, NULL, OPT_INCLUDE_DAMAGED},
	    {NULL, 0, NULL, 0}};
	int o;

	optind = 1;
	opterr = 0;
	while ((o = getopt_long(argc, argv, ":hy", opts, NULL)) != -1) {
		switch (o) {
		case 'h':
			printf("usage: " PROG
			       " spool list|recover|discard DIR [options]\n\n");
			spool_cmd_help(stdout);
			exit(EXIT_OK);
		case OPT_JSON:
			c->json = true;
			break;
		case OPT_MEDIUM:
			c->medium = optarg;
			break;
		case OPT_TO:
			c->dest = optarg;
			break;
		case 'y':
		case OPT_YES:
			c->yes = true;
			break;
		case OPT_INCLUDE_DAMAGED:
			c->include_damaged = true;
			break;
		case ':':
			return spool_usage("option %s needs a value", argv[optind - 1]);
		default:
			if (optopt)
				return spool_usage("unknown option '-%c'", optopt);
			return spool_usage("unknown option '%s'", argv[optind - 1]);
		}
	}
	c->sub = optind < argc ? argv[optind++] : NULL;
	c->dir = optind < argc ? argv[optind++] : NULL;
	if (!c->sub)
		return spool_usage("no subcommand given (list, recover, discard)");
	if (optind < argc)
		return spool_usage("%s: one DIR only, got '%s' too", c->sub,
				   argv[optind]);
	return EXIT_OK;
}

static int check(const struct spool_cli *c)
{
	bool list = !strcmp(c->sub, "list"), recover = !strcmp(c->sub, "recover");
	bool discard = !strcmp(c->sub, "discard");

	if (!list && !recover && !discard)
		return spool_usage("unknown subcommand '%s' (list, recover, discard)",
				   c->sub);
	if (!c->dir || !*c->dir)
		return spool_usage("%s: DIR missing", c->sub);
	if (!list && (!c->medium || !*c->medium))
		return spool_usage("%s: --medium ID missing", c->sub);
	if (list && c->medium)
		return spool_usage("list: --medium is for recover and discard");
	if (!list && c->json)
		return spool_usage("%s: --json is for list", c->sub);
	if (recover && (!c->dest || !*c->dest))
		return spool_usage("recover: --to DEST missing");
	if (!recover && (c->dest || c->include_damaged))
		return spool_usage("%s: --to and --include-damaged are for recover",
				   c->sub);
	if (!discard && c->yes)
		return spool_usage("%s: --yes is for discard", c->sub);
	return EXIT_OK;
}

int spool_cmd_main(int argc, char **argv)
{
	struct spool_cli c = {0};
	int code = parse(argc, argv, &c);

	if (!code)
		code = check(&c);
	if (code)
		return code;
	if (!strcmp(c.sub, "list"))
		return cmd_list(&c);
	if (!strcmp(c.sub, "recover"))
		return cmd_recover(&c);
	return cmd_discard(&c);
}
