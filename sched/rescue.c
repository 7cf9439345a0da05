/*
 * DESIGN: the rescue directory. When a daemon exits with data it could not
 * put on the medium and has no spool to keep it in (the final drain made no
 * progress for drain_timeout=, or a second SIGTERM), and when a replay finds
 * a journal record it must not apply (its path walks through a symbolic
 * link on the medium), the bytes go here instead of being dropped.
 *
 * Layout, each level mode 0700:
 *   BASE/<medium key>/<YYYYmmdd-HHMMSS>-<pid>/    one rescue
 *       <path as on the medium>                  the saved bytes at their
 *                                                offsets (holes elsewhere)
 *       MANIFEST                                  what each file holds
 * <medium key> is the spool's (spool_medium_key of the medium id). Paths
 * are the journal's: relative, checked by spj_path_ok, opened beneath the
 * rescue without following links.
 *
 * MANIFEST is text, written last (write, fsync, rename, fsync of the
 * directory), so a rescue without one is incomplete:
 *   # slowmedia rescue 1
 *   medium<TAB><id>
 *   file<TAB><path><TAB><size><TAB><offset>+<length>,...
 *   note<TAB><path><TAB><text>
 * Fields are escaped: '%', tab, newline, other control bytes and DEL as
 * %XX. <size> is the end of the last byte saved. Notes say what else:
 * "truncate FLOOR SIZE" (before the saved writes, the medium's bytes from
 * FLOOR on were cut and the size set to SIZE), "size SIZE" (the file's size
 * after them), "error TEXT" (why they were not written), "refused TEXT" (a
 * replay would not apply them).
 */
#include "rescue.h"
#include "fdio.h"
#include "spool.h"

#include <errno.h>
#include <fcntl.h>
#include <glib.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct rescued {
	uint64_t end;
	GString *ranges;
	GPtrArray *notes;
};

struct rescue {
	char *dir;
	int dfd;
	char *medium;
	GHashTable *files; /* path -> struct rescued */
	GPtrArray *order;  /* paths, first saved first */
	uint64_t bytes;
	int err;
	char *cache_path;
	int cache_fd;
};

static void rescued_free(gpointer p)
{
	struct rescued *f = p;

	g_string_free(f->ranges, TRUE);
	g_ptr_array_free(f->notes, TRUE);
	g_free(f);
}

char *rescue_default_base(void)
{
	const char *env = getenv("SLOWMEDIA_RESCUE_DIR"), *state = getenv("XDG_STATE_HOME");

	if (env && env[0] == '/')
		return g_strdup(env);
	if (geteuid() == 0)
		return g_strdup("/var/lib/slowmedia/rescue");
	if (state && state[0] == '/')
		return g_build_filename(state, "slowmedia", "rescue", NULL);
	return g_build_filename(g_get_home_dir(), ".local", "state", "slowmedia", "rescue", NULL);
}

int rescue_check_base(const char *base, char *why, size_t why_n)
{
	g_autofree char *dflt = base ? NULL : rescue_default_base();
	int r;

	/* Another user who may write it could take the medium's directory
	 * first, and move or delete what is saved there. Missing: made 0700
	 * when something must be saved. */
	r = fd_check_private_dir("rescue", base ? base : dflt,
				 "what is saved there could be moved or deleted by them", NULL,
				 why, why_n);
	return r == -ENOENT ? 0 : r;
}

int rescue_open(const char *base, const char *medium_id, struct rescue **out, char *why,
		size_t why_n)
{
	g_autofree char *dflt = base ? NULL : rescue_default_base();
	char key[SPOOL_KEY_MAX + 1], stamp[64];
	g_autofree char *sub = NULL;
	struct rescue *r;
	struct tm tm;
	time_t now = time(NULL);
	int err, bfd, dfd;

	base = base ? base : dflt;
	err = spool_medium_key(medium_id, key);
	if (err < 0) {
		snprintf(why, why_n, "rescue: bad medium id: %s", g_strerror(-err));
		return err;
	}
	if (g_mkdir_with_parents(base, 0700) < 0) {
		err = -errno;
		snprintf(why, why_n, "rescue: cannot make %s: %s", base, g_strerror(errno));
		return err;
	}
	err = rescue_check_base(base, why, why_n); /* checked at mount; again now */
	if (err < 0)
		return err;
	bfd = open(base, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (bfd < 0) {
		err = -errno;
		snprintf(why, why_n, "rescue: cannot open %s: %s", base, g_strerror(errno));
		return err;
	}
	localtime_r(&now, &tm);
	strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &tm);
	sub = g_strdup_printf("%s/%s-%d", key, stamp, (int)getpid());
	err = fd_open_dir_beneath(bfd, sub, true, &dfd);
	close(bfd);
	if (err < 0) {
		snprintf(why, why_n, "rescue: cannot make %s/%s: %s", base, sub, g_strerror(-err));
		return err;
	}
	r = g_new0(struct rescue, 1);
	r->dir = g_build_filename(base, sub, NULL);
	r->dfd = dfd;
	r->medium = g_strdup(medium_id);
	r->files = g_hash_table_new_full(g_str_hash, g_str_equal, NULL, rescued_free);
	r->order = g_ptr_array_new_with_free_func(g_free);
	r->cache_fd = -1;
	*out = r;
	return 0;
}

static struct rescued *entry(struct rescue *r, const char *path)
{
	struct rescued *f = g_hash_table_lookup(r->files, path);

	if (!f) {
		char *key = g_strdup(path);
		f = g_new0(struct rescued, 1);
		f->ranges = g_string_new(NULL);
		f->notes = g_ptr_array_new_with_free_func(g_free);
		g_ptr_array_add(r->order, key);
		g_hash_table_insert(r->files, key, f);
	}
	return f;
}

static int open_file(struct rescue *r, const char *path)
{
	const char *slash = strrchr(path, '/');
	g_autofree char *dir = slash ? g_strndup(path, (gsize)(slash - path)) : NULL;
	int pfd, fd, err;

	if (r->cache_path && strcmp(r->cache_path, path) == 0)
		return r->cache_fd;
	if (r->cache_fd >= 0)
		close(r->cache_fd);
	r->cache_fd = -1;
	g_clear_pointer(&r->cache_path, g_free);
	if (dir) {
		err = fd_open_dir_beneath(r->dfd, dir, true, &pfd);
		if (err < 0)
			return err;
	} else {
		pfd = r->dfd;
	}
	fd = openat(pfd, slash ? slash + 1 : path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC,
		    0600);
	err = fd < 0 ? -errno : 0;
	if (dir)
		close(pfd);
	if (err < 0)
		return err;
	r->cache_fd = fd;
	r->cache_path = g_strdup(path);
	return fd;
}

int rescue_write(struct rescue *r, const char *path, uint64_t off, const void *data,
		 size_t len)
{
	struct rescued *f;
	int fd, err;

	if (!spj_path_ok(path, strlen(path)) || strcmp(path, RESCUE_MANIFEST) == 0)
		return -EINVAL;
	fd = open_file(r, path);
	err = fd < 0 ? fd : fd_pwrite_all(fd, data, len, (off_t)off);
	if (err < 0) {
		if (!r->err)
			r->err = err;
		return err;
	}
	f = entry(r, path);
	g_string_append_printf(f->ranges, "%s%" PRIu64 "+%zu", f->ranges->len ? "," : "", off,
			       len);
	f->end = MAX(f->end, off + len);
	r->bytes += len;
	return 0;
}

void rescue_note(struct rescue *r, const char *path, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	g_ptr_array_add(entry(r, path)->notes, g_strdup_vprintf(fmt, ap));
	va_end(ap);
}

const char *rescue_dir(const struct rescue *r)
{
	return r->dir;
}

uint64_t rescue_bytes(const struct rescue *r)
{
	return r->bytes;
}

unsigned rescue_files(const struct rescue *r)
{
	return r->order->len;
}

static void put_escaped(GString *o, const char *s)
{
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p < 0x20 || *p == 0x7f || *p == '%')
			g_string_append_printf(o, "%%%02X", *p);
		else
			g_string_append_c(o, (char)*p);
	}
}

static int fsync_tree(int dfd)
{
	g_autoptr(GDir) d = NULL;
	char self[64];
	const char *name;
	int err = 0;

	snprintf(self, sizeof(self), "/proc/self/fd/%d", dfd);
	d = g_dir_open(self, 0, NULL);
	while (d && (name = g_dir_read_name(d))) {
		struct stat st;
		int fd;

		if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
			continue;
		fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			continue;
		if (S_ISDIR(st.st_mode)) {
			int e = fsync_tree(fd);
			if (!err)
				err = e;
		} else if (fsync(fd) < 0 && !err) {
			err = -errno;
		}
		close(fd);
	}
	if (fsync(dfd) < 0 && !err)
		err = -errno;
	return err;
}

int rescue_close(struct rescue *r)
{
	g_autoptr(GString) m = g_string_new(RESCUE_MAGIC "\n");
	int err;

	if (!r)
		return 0;
	if (r->cache_fd >= 0)
		close(r->cache_fd);
	g_string_append(m, "medium\t");
	put_escaped(m, r->medium);
	g_string_append_c(m, '\n');
	for (guint i = 0; i < r->order->len; i++) {
		const char *path = r->order->pdata[i];
		const struct rescued *f = g_hash_table_lookup(r->files, path);

		g_string_append(m, "file\t");
		put_escaped(m, path);
		g_string_append_printf(m, "\t%" PRIu64 "\t%s\n", f->end,
				       f->ranges->len ? f->ranges->str : "-");
		for (guint j = 0; j < f->notes->len; j++) {
			g_string_append(m, "note\t");
			put_escaped(m, path);
			g_string_append_c(m, '\t');
			put_escaped(m, f->notes->pdata[j]);
			g_string_append_c(m, '\n');
		}
	}
	err = fsync_tree(r->dfd);
	{
		int e = spj_replace_file(r->dfd, RESCUE_MANIFEST, m->str, m->len);
		if (!err)
			err = e;
	}
	if (r->err)
		err = r->err;
	close(r->dfd);
	g_hash_table_destroy(r->files);
	g_ptr_array_free(r->order, TRUE);
	g_free(r->cache_path);
	g_free(r->medium);
	g_free(r->dir);
	g_free(r);
	return err;
}

/* ---- reading ---- */

static char *unescape(const char *s)
{
	GString *o = g_string_new(NULL);

	for (; *s; s++) {
		if (s[0] == '%' && g_ascii_isxdigit(s[1]) && g_ascii_isxdigit(s[2])) {
			g_string_append_c(o, (char)(g_ascii_xdigit_value(s[1]) * 16 +
						    g_ascii_xdigit_value(s[2])));
			s += 2;
		} else {
			g_string_append_c(o, *s);
		}
	}
	return g_string_free(o, FALSE);
}

struct parsed {
	char *medium;
	GPtrArray *paths;    /* in order */
	GHashTable *size;    /* path -> uint64 (as pointer) */
	GHashTable *ranges;  /* path -> char* */
	GHashTable *notes;   /* path -> GString */
};

static void parsed_free(struct parsed *p)
{
	g_free(p->medium);
	g_ptr_array_free(p->paths, TRUE);
	g_hash_table_destroy(p->size);
	g_hash_table_destroy(p->ranges);
	g_hash_table_destroy(p->notes);
}

static void gstring_free(gpointer p)
{
	g_string_free(p, TRUE);
}

static int parse_manifest(const char *dir, struct parsed *p)
{
	g_autofree char *path = g_build_filename(dir, RESCUE_MANIFEST, NULL), *text = NULL;
	g_auto(GStrv) lines = NULL;
	GError *e = NULL;

	*p = (struct parsed){.paths = g_ptr_array_new_with_free_func(g_free),
			     .size = g_hash_table_new(g_str_hash, g_str_equal),
			     .ranges = g_hash_table_new_full(g_str_hash, g_str_equal, NULL, g_free),
			     .notes = g_hash_table_new_full(g_str_hash, g_str_equal, NULL,
							    gstring_free)};
	if (!g_file_get_contents(path, &text, NULL, &e)) {
		int err = e->code == G_FILE_ERROR_NOENT ? -ENOENT : -EIO;
		g_error_free(e);
		parsed_free(p);
		return err;
	}
	lines = g_strsplit(text, "\n", -1);
	if (!lines[0] || strcmp(lines[0], RESCUE_MAGIC) != 0) {
		parsed_free(p);
		return -EBADMSG;
	}
	for (char **l = lines + 1; *l; l++) {
		g_auto(GStrv) f = g_strsplit(*l, "\t", -1);
		guint n = g_strv_length(f);

		if (n == 2 && strcmp(f[0], "medium") == 0) {
			g_free(p->medium);
			p->medium = unescape(f[1]);
		} else if (n == 4 && strcmp(f[0], "file") == 0) {
			char *fp = unescape(f[1]);
			if (!spj_path_ok(fp, strlen(fp)) || g_hash_table_contains(p->size, fp)) {
				g_free(fp);
				continue; /* never a path a record could not carry */
			}
			g_ptr_array_add(p->paths, fp);
			g_hash_table_insert(p->size, fp,
					    GSIZE_TO_POINTER((gsize)g_ascii_strtoull(f[2], NULL, 10)));
			g_hash_table_insert(p->ranges, fp, g_strdup(f[3]));
		} else if (n == 3 && strcmp(f[0], "note") == 0) {
			g_autofree char *fp = unescape(f[1]);
			g_autofree char *txt = unescape(f[2]);
			char *key = NULL;
			for (guint i = 0; i < p->paths->len; i++)
				if (strcmp(p->paths->pdata[i], fp) == 0)
					key = p->paths->pdata[i];
			if (!key)
				continue;
			GString *g = g_hash_table_lookup(p->notes, key);
			if (!g)
				g_hash_table_insert(p->notes, key, g = g_string_new(NULL));
			g_string_append_printf(g, "%s%s", g->len ? "; " : "", txt);
		}
	}
	return 0;
}

int rescue_read(const char *dir,
		int (*fn)(const char *path, uint64_t size, const char *ranges, const char *notes,
			  void *ctx),
		void *ctx)
{
	struct parsed p;
	int r = parse_manifest(dir, &p);

	if (r < 0)
		return r;
	for (guint i = 0; i < p.paths->len && !r; i++) {
		const char *path = p.paths->pdata[i];
		GString *notes = g_hash_table_lookup(p.notes, path);
		r = fn(path, GPOINTER_TO_SIZE(g_hash_table_lookup(p.size, path)),
		       g_hash_table_lookup(p.ranges, path), notes ? notes->str : "", ctx);
	}
	parsed_free(&p);
	return r;
}

static gint cmp_str(gconstpointer a, gconstpointer b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static GPtrArray *sorted_entries(const char *dir)
{
	GPtrArray *v = g_ptr_array_new_with_free_func(g_free);
	g_autoptr(GDir) d = g_dir_open(dir, 0, NULL);
	const char *name;

	while (d && (name = g_dir_read_name(d)))
		g_ptr_array_add(v, g_strdup(name));
	g_ptr_array_sort(v, cmp_str);
	return v;
}

int rescue_list(const char *base, int (*fn)(const struct rescue_info *ri, void *ctx),
		void *ctx, bool *found)
{
	g_autoptr(GPtrArray) keys = NULL;
	struct stat st;

	*found = false;
	if (stat(base, &st) < 0)
		return -errno;
	if (!S_ISDIR(st.st_mode))
		return -ENOTDIR;
	keys = sorted_entries(base);
	for (guint i = 0; i < keys->len; i++) {
		g_autofree char *kdir = g_build_filename(base, keys->pdata[i], NULL);
		g_autoptr(GPtrArray) stamps = sorted_entries(kdir);

		for (guint j = 0; j < stamps->len; j++) {
			g_autofree char *rdir = g_build_filename(kdir, stamps->pdata[j], NULL);
			g_autofree char *man = g_build_filename(rdir, RESCUE_MANIFEST, NULL);
			struct rescue_info ri = {.dir = rdir};
			struct parsed p;
			int stop;

			if (stat(man, &st) < 0)
				continue;
			*found = true;
			g_strlcpy(ri.key, keys->pdata[i], sizeof(ri.key));
			g_strlcpy(ri.stamp, stamps->pdata[j], sizeof(ri.stamp));
			if (parse_manifest(rdir, &p) == 0) {
				ri.complete = true;
				ri.medium = p.medium ? p.medium : "";
				ri.files = p.paths->len;
				for (guint k = 0; k < p.paths->len; k++) {
					g_auto(GStrv) rs = g_strsplit(
					    g_hash_table_lookup(p.ranges, p.paths->pdata[k]), ",", -1);
					for (char **x = rs; *x; x++) {
						const char *plus = strchr(*x, '+');
						if (plus)
							ri.bytes += g_ascii_strtoull(plus + 1, NULL, 10);
					}
				}
				stop = fn ? fn(&ri, ctx) : 1;
				parsed_free(&p);
			} else {
				ri.medium = "";
				stop = fn ? fn(&ri, ctx) : 1;
			}
			if (stop)
				return 0;
		}
	}
	return 0;
}
