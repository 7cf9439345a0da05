/*
 * The spool directory on disk, for spool.c and for slowmediactl: medium
 * keys, segment names and listings, medium.info, the lock; and reading a
 * spool without a daemon: spool_scan_* (recover), spool_list and
 * spool_medium_stat, spool_find_medium, spool_discard. The layout and the
 * rules are in the DESIGN comment of spool.c. Nothing here keeps state
 * between calls; the readers take no lock unless asked (SPOOL_SCAN_LOCK,
 * discard), so they work beside a running daemon. As there, no allocation
 * failure aborts (glib's containers would): small open-coded ones over
 * g_try_*.
 */
#include "spool_int.h"
#include "fdio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glib.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#define REC_MIN_BYTES (SPJ_REC_HDR_SIZE + 1) /* a record with a 1-byte path */
#define INFO_MAX_BYTES (64u << 10)
#define INFO_VERSION 1
#define KEY_HASH_LEN 16 /* hex digits of the hash of a shortened key */
#define KEY_KEEP_MAX (SPOOL_KEY_MAX - 1 - KEY_HASH_LEN)
#define LOCKS_PATH "/proc/locks"

/* ---- messages ---- */

void spd_say(char *why, const char *fmt, ...)
{
	va_list ap;

	if (!why)
		return;
	va_start(ap, fmt);
	vsnprintf(why, SPOOL_WHY_MAX, fmt, ap);
	va_end(ap);
}

/* ---- a set of path strings (spool_list's file count) ---- */

struct pathset {
	char **slot;
	size_t cap, n;
};

static int pathset_add(struct pathset *ps, const char *path)
{
	size_t i;

	if ((ps->n + 1) * 2 > ps->cap) {
		size_t cap = ps->cap ? ps->cap * 2 : 64;
		char **ns = g_try_new0(char *, cap), **old = ps->slot;

		if (!ns)
			return -ENOMEM;
		for (size_t k = 0; k < ps->cap; k++) {
			if (!old[k])
				continue;
			for (i = g_str_hash(old[k]) & (cap - 1); ns[i];
			     i = (i + 1) & (cap - 1))
				;
			ns[i] = old[k];
		}
		g_free(old);
		ps->slot = ns;
		ps->cap = cap;
	}
	for (i = g_str_hash(path) & (ps->cap - 1); ps->slot[i];
	     i = (i + 1) & (ps->cap - 1))
		if (!strcmp(ps->slot[i], path))
			return 0;
	ps->slot[i] = g_try_malloc(strlen(path) + 1);
	if (!ps->slot[i])
		return -ENOMEM;
	strcpy(ps->slot[i], path);
	ps->n++;
	return 0;
}

static void pathset_free(struct pathset *ps)
{
	for (size_t i = 0; i < ps->cap; i++)
		g_free(ps->slot[i]);
	g_free(ps->slot);
	*ps = (struct pathset){0};
}

/* ---- names ---- */

static size_t utf8_cut(const char *s, size_t max)
{
	size_t n = strlen(s);

	if (n <= max)
		return n;
	while (max && ((unsigned char)s[max] & 0xc0) == 0x80)
		max--;
	return max;
}

int spool_medium_id(char out[SPJ_MEDIUM_ID_MAX + 1], const char *uuid, uint64_t fsid,
		    uint64_t size, const char *label)
{
	int n;

	if (uuid && *uuid) {
		n = snprintf(out, SPJ_MEDIUM_ID_MAX + 1, "uuid:%s", uuid);
		return n > SPJ_MEDIUM_ID_MAX ? -EINVAL : 0;
	}
	n = snprintf(out, SPJ_MEDIUM_ID_MAX + 1,
		     "fsid:%016" PRIx64 ":size:%" PRIu64 ":label:", fsid, size);
	if (label)
		snprintf(out + n, SPJ_MEDIUM_ID_MAX + 1 - (size_t)n, "%.*s",
			 (int)utf8_cut(label, SPJ_MEDIUM_ID_MAX - (size_t)n), label);
	return 0;
}

static bool key_byte_kept(unsigned char c, bool first)
{
	return g_ascii_isalnum(c) || c == '_' || c == '-' || (c == '.' && !first);
}

int spool_medium_key(const char *medium_id, char out[SPOOL_KEY_MAX + 1])
{
	size_t idlen = medium_id ? strnlen(medium_id, SPJ_MEDIUM_ID_MAX + 1) : 0, n = 0;
	bool cut = false;

	if (!idlen)
		return -EINVAL;
	if (idlen > SPJ_MEDIUM_ID_MAX)
		return -ENAMETOOLONG;
	for (size_t i = 0; i < idlen; i++) {
		unsigned char c = (unsigned char)medium_id[i];
		size_t need = key_byte_kept(c, i == 0) ? 1 : 3;

		if (n + need > SPOOL_KEY_MAX) {
			cut = true;
			break;
		}
		if (need == 1)
			out[n] = (char)c;
		else
			snprintf(out + n, 4, "%%%02X", c);
		n += need;
	}
	if (cut) {
		uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */

		for (size_t i = 0; i < idlen; i++)
			h = (h ^ (unsigned char)medium_id[i]) * 0x100000001b3ull;
		n = MIN(n, (size_t)KEY_KEEP_MAX);
		while (n && (out[n - 1] == '%' || (n >= 2 && out[n - 2] == '%')))
			n--; /* never split a %XX */
		snprintf(out + n, SPOOL_KEY_MAX + 1 - n, "~%016" PRIx64, h);
		return 0;
	}
	out[n] = '\0';
	return 0;
}

bool spd_plain_key(const char *key)
{
	size_t n = strnlen(key, SPOOL_KEY_MAX + 1);

	return n && n <= SPOOL_KEY_MAX && key[0] != '.' && !strchr(key, '/');
}

void spd_seg_name(char out[SPD_SEG_NAME_MAX], uint64_t first_seq)
{
	snprintf(out, SPD_SEG_NAME_MAX, "%016" PRIx64 SPOOL_SEG_SUFFIX, first_seq);
}

/* A segment's name: 1 (live: "<16 hex>.spj"), 2 (set aside), 0 (neither). */
static int parse_seg_name(const char *name, uint64_t *first_seq)
{
	uint64_t v = 0;
	const char *rest = name + 16;

	for (int i = 0; i < 16; i++) {
		char c = name[i];
		if (!g_ascii_isdigit(c) && (c < 'a' || c > 'f'))
			return 0;
		v = v << 4 | (uint64_t)g_ascii_xdigit_value(c);
	}
	if (strncmp(rest, SPOOL_SEG_SUFFIX, strlen(SPOOL_SEG_SUFFIX)))
		return 0;
	rest += strlen(SPOOL_SEG_SUFFIX);
	*first_seq = v;
	if (!*rest)
		return 1;
	if (!strncmp(rest, SPOOL_ASIDE_INFIX, strlen(SPOOL_ASIDE_INFIX)) &&
	    g_ascii_isdigit(rest[strlen(SPOOL_ASIDE_INFIX)]))
		return 2;
	return 0;
}

/* The first seq past anything a segment of this size can hold. */
uint64_t spd_seq_bound(uint64_t first_seq, uint64_t size)
{
	uint64_t n = size / REC_MIN_BYTES + 1;

	return first_seq > UINT64_MAX - 1 - n ? UINT64_MAX - 1 : first_seq + n;
}

/* ---- small file helpers ---- */

static int segfile_cmp(const void *a, const void *b)
{
	const struct spd_segfile *x = a, *y = b;

	if (x->first_seq != y->first_seq)
		return x->first_seq < y->first_seq ? -1 : 1;
	return strcmp(x->name, y->name);
}

static int seglist_push(struct spd_seglist *l, const struct spd_segfile *f)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 16;
		struct spd_segfile *nv = g_try_renew(struct spd_segfile, l->v, cap);
		if (!nv)
			return -ENOMEM;
		l->v = nv;
		l->cap = cap;
	}
	l->v[l->n++] = *f;
	return 0;
}

static void stat_times(int mdfd, const char *name, struct spd_segfile *f)
{
	struct statx stx;

	if (statx(mdfd, name, AT_SYMLINK_NOFOLLOW, STATX_BTIME | STATX_MTIME, &stx) < 0)
		return;
	f->mtime = stx.stx_mtime.tv_sec;
	if (stx.stx_mask & STATX_BTIME)
		f->birth = stx.stx_btime.tv_sec;
}

/* Every segment file (regular files only) of medium directory mdfd, sorted. */
/* A directory stream over a copy of dirfd, from its start (dirfd stays
 * open and untouched); NULL with *err set. */
static DIR *dir_of(int dirfd, int *err)
{
	int fd = dup(dirfd);
	DIR *d;

	if (fd < 0) {
		*err = -errno;
		return NULL;
	}
	d = fdopendir(fd);
	if (!d) {
		*err = -errno;
		close(fd);
		return NULL;
	}
	rewinddir(d);
	return d;
}

int spd_list_segments(int mdfd, struct spd_seglist *out)
{
	int err = 0;
	struct dirent *e;
	DIR *d;

	*out = (struct spd_seglist){0};
	d = dir_of(mdfd, &err);
	if (!d)
		return err;
	while (!err && (errno = 0, e = readdir(d))) {
		struct spd_segfile f = {0};
		struct stat st;
		int kind = strlen(e->d_name) < SPD_SEG_NAME_MAX
			       ? parse_seg_name(e->d_name, &f.first_seq)
			       : 0;

		if (!kind || fstatat(mdfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
		    !S_ISREG(st.st_mode))
			continue;
		strcpy(f.name, e->d_name);
		f.size = (uint64_t)st.st_size;
		f.aside = kind == 2;
		stat_times(mdfd, e->d_name, &f);
		err = seglist_push(out, &f);
	}
	if (!err && errno)
		err = -errno;
	closedir(d);
	if (err) {
		g_free(out->v);
		*out = (struct spd_seglist){0};
		return err;
	}
	if (out->n)
		qsort(out->v, out->n, sizeof(*out->v), segfile_cmp);
	return 0;
}

/* ---- medium.info ---- */

bool spd_is_held(const struct spd_info *in, uint64_t first_seq)
{
	for (unsigned i = 0; i < in->nheld; i++)
		if (first_seq >= in->held[i].from && first_seq < in->held[i].to)
			return true;
	return false;
}

void spd_add_held(struct spd_info *in, uint64_t from, uint64_t to)
{
	if (in->nheld == SPD_HELD_MAX) { /* widen the last: holds more, never less */
		struct spd_held *last = &in->held[SPD_HELD_MAX - 1];
		last->from = MIN(last->from, from);
		last->to = MAX(last->to, to);
		return;
	}
	in->held[in->nheld++] = (struct spd_held){from, to};
}

/* A text built in a buffer sized for the longest values (no allocation
 * while writing, so nothing can abort). */
struct textbuf {
	char *p;
	size_t len, cap;
	bool over;
};

G_GNUC_PRINTF(2, 3)
static void tb_printf(struct textbuf *t, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (t->over)
		return;
	va_start(ap, fmt);
	n = vsnprintf(t->p + t->len, t->cap - t->len, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= t->cap - t->len)
		t->over = true;
	else
		t->len += (size_t)n;
}

static void tb_escaped(struct textbuf *t, const char *key, const char *v)
{
	tb_printf(t, "%s=", key);
	for (; *v; v++) {
		unsigned char c = (unsigned char)*v;
		if (c < 0x20 || c == 0x7f || c == '\\')
			tb_printf(t, "\\x%02x", c);
		else
			tb_printf(t, "%c", c);
	}
	tb_printf(t, "\n");
}

/* Unescape v (NUL-terminated) into out (max bytes and a NUL); cut if longer. */
static void unesc(const char *v, char *out, size_t max)
{
	size_t n = 0;

	while (*v && n < max) {
		if (v[0] == '\\' && v[1] == 'x' && g_ascii_isxdigit(v[2]) &&
		    g_ascii_isxdigit(v[3])) {
			out[n++] = (char)(g_ascii_xdigit_value(v[2]) << 4 |
					  g_ascii_xdigit_value(v[3]));
			v += 4;
		} else {
			out[n++] = *v++;
		}
	}
	out[n] = '\0';
}

int spd_write_info(int mdfd, const struct spd_info *in)
{
	struct textbuf t = {
	    .cap = 1024 + 4 * (sizeof(in->id) + sizeof(in->label) + sizeof(in->source)) +
		   SPD_HELD_MAX * 48,
	};
	int err;

	t.p = g_try_malloc(t.cap);
	if (!t.p)
		return -ENOMEM;
	tb_printf(&t, "# slowmedia spool: one medium's pending writes (do not edit)\n");
	tb_printf(&t, "version=%d\n", INFO_VERSION);
	tb_escaped(&t, "id", in->id);
	tb_escaped(&t, "label", in->label);
	tb_escaped(&t, "source", in->source);
	tb_printf(&t,
		  "size=%" PRIu64 "\nfirst_use=%" PRId64 "\nlast_use=%" PRId64
		  "\nnext_seq=%" PRIu64 "\n",
		  in->size, in->first_use, in->last_use, in->next_seq);
	for (unsigned i = 0; i < in->nheld; i++)
		tb_printf(&t, "held=%" PRIu64 "-%" PRIu64 "\n", in->held[i].from,
			  in->held[i].to);
	err = t.over ? -EOVERFLOW : spj_replace_file(mdfd, SPOOL_INFO_NAME, t.p, t.len);
	g_free(t.p);
	return err;
}

static void parse_info_line(struct spd_info *in, char *line)
{
	char *eq = strchr(line, '=');
	const char *v;
	uint64_t a, b;

	if (!eq || line[0] == '#')
		return;
	*eq = '\0';
	v = eq + 1;
	if (!strcmp(line, "id"))
		unesc(v, in->id, sizeof(in->id) - 1);
	else if (!strcmp(line, "label"))
		unesc(v, in->label, sizeof(in->label) - 1);
	else if (!strcmp(line, "source"))
		unesc(v, in->source, sizeof(in->source) - 1);
	else if (!strcmp(line, "size"))
		in->size = g_ascii_strtoull(v, NULL, 10);
	else if (!strcmp(line, "first_use"))
		in->first_use = g_ascii_strtoll(v, NULL, 10);
	else if (!strcmp(line, "last_use"))
		in->last_use = g_ascii_strtoll(v, NULL, 10);
	else if (!strcmp(line, "next_seq"))
		in->next_seq = MIN(g_ascii_strtoull(v, NULL, 10), UINT64_MAX - 1);
	else if (!strcmp(line, "held") &&
		 sscanf(v, "%" SCNu64 "-%" SCNu64, &a, &b) == 2 && a < b)
		spd_add_held(in, a, b);
}

/* 0, -ENOENT when there is none, -errno, -EUCLEAN when it makes no sense. */
int spd_read_info(int mdfd, struct spd_info *in)
{
	char *buf, *line, *save = NULL;
	int fd, err = 0;
	ssize_t n;

	*in = (struct spd_info){0};
	fd = openat(mdfd, SPOOL_INFO_NAME, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	buf = g_try_malloc(INFO_MAX_BYTES + 1);
	if (!buf) {
		close(fd);
		return -ENOMEM;
	}
	do
		n = pread(fd, buf, INFO_MAX_BYTES, 0);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		err = -errno;
	close(fd);
	if (!err) {
		buf[n] = '\0';
		for (line = strtok_r(buf, "\n", &save); line;
		     line = strtok_r(NULL, "\n", &save))
			parse_info_line(in, line);
		if (!in->id[0])
			err = -EUCLEAN;
	}
	g_free(buf);
	return err;
}

void spd_copy_str(char *dst, size_t max, const char *src)
{
	snprintf(dst, max + 1, "%.*s", (int)utf8_cut(src ? src : "", max),
		 src ? src : "");
}

/* ---- the lock ---- */

/* The pid written in a lock file, 0 if none. */
static pid_t lock_pid(int fd)
{
	char b[24];
	ssize_t n = pread(fd, b, sizeof(b) - 1, 0);

	if (n <= 0)
		return 0;
	b[n] = '\0';
	return (pid_t)strtol(b, NULL, 10);
}

/* Lock medium directory mdfd for this process: the lock fd, or -EBUSY (why
 * names the holder), -errno. */
int spd_take_lock(int mdfd, const char *where, char *why)
{
	int fd = openat(mdfd, SPOOL_LOCK_NAME, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW,
			0600);
	char b[24];
	int err, n;

	if (fd < 0) {
		err = -errno;
		spd_say(why, "%s/" SPOOL_LOCK_NAME ": %s", where, g_strerror(-err));
		return err;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		err = errno == EWOULDBLOCK ? -EBUSY : -errno;
		if (err == -EBUSY) {
			pid_t pid = lock_pid(fd);
			if (pid > 0)
				spd_say(why, "%s is in use by another process (pid %d)",
					where, (int)pid);
			else
				spd_say(why, "%s is in use by another process", where);
		} else {
			spd_say(why, "%s/" SPOOL_LOCK_NAME ": %s", where,
				g_strerror(-err));
		}
		close(fd);
		return err;
	}
	/* For messages only: who has it. */
	n = snprintf(b, sizeof(b), "%d\n", (int)getpid());
	if (ftruncate(fd, 0) == 0) {
		ssize_t w = pwrite(fd, b, (size_t)n, 0);
		(void)w;
	}
	return fd;
}

/* The FLOCK holder of the inode st names in /proc/locks; 0 if none. */
static pid_t locks_holder(const struct stat *st)
{
	char line[256];
	pid_t found = 0;
	FILE *f = fopen(LOCKS_PATH, "re");

	if (!f)
		return 0;
	while (!found && fgets(line, sizeof(line), f)) {
		char type[16];
		unsigned maj, min;
		unsigned long long ino;
		int pid;

		if (sscanf(line, "%*d: %15s %*s %*s %d %x:%x:%llu", type, &pid, &maj,
			   &min, &ino) == 5 &&
		    !strcmp(type, "FLOCK") && maj == major(st->st_dev) &&
		    min == minor(st->st_dev) && ino == (unsigned long long)st->st_ino)
			found = (pid_t)pid;
	}
	fclose(f);
	return found;
}

/* Whether process pid has the file st names open (its /proc/PID/fd links
 * lead where stat says, on any filesystem). */
static bool has_open(pid_t pid, const struct stat *st)
{
	char path[64];
	struct dirent *e;
	bool yes = false;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
	d = opendir(path);
	if (!d)
		return false;
	while (!yes && (e = readdir(d))) {
		struct stat fst;

		yes = e->d_name[0] != '.' && fstatat(dirfd(d), e->d_name, &fst, 0) == 0 &&
		      fst.st_dev == st->st_dev && fst.st_ino == st->st_ino;
	}
	closedir(d);
	return yes;
}

/*
 * Who holds mdfd's lock, without taking it (so a daemon starting meanwhile
 * is never turned away): /proc/locks, where its device numbers are stat's;
 * else the pid the lock file names, if that process has the file open (the
 * lockers keep it open exactly while they hold it). 0: nobody, or unknown.
 */
static pid_t lock_holder(int mdfd)
{
	struct stat st;
	pid_t pid;
	int fd;

	if (fstatat(mdfd, SPOOL_LOCK_NAME, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return 0;
	pid = locks_holder(&st);
	if (pid)
		return pid;
	fd = openat(mdfd, SPOOL_LOCK_NAME, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return 0;
	pid = lock_pid(fd);
	close(fd);
	return pid > 0 && has_open(pid, &st) ? pid : 0;
}

/* ---- reading without a daemon: scan, list, discard ---- */

struct spool_scan {
	int mdfd, lockfd;
	unsigned flags;
	char id[SPJ_MEDIUM_ID_MAX + 1]; /* the medium's; "" until a segment says */
	struct spd_seglist segs;	/* those the flags keep */
	size_t i;			/* the next (or current) of them */
	unsigned skipped;
	struct spj_reader *rd;
	uint64_t prev_last;
	bool done;
	struct spool_damage dmg;
};

/* Which segments a scan reads, and where a torn tail is only a crash's. */
static int scan_pick(struct spool_scan *sc, const struct spd_info *in, bool have_info)
{
	struct spd_seglist all;
	bool any_aside = false;
	int err = spd_list_segments(sc->mdfd, &all);

	if (err)
		return err;
	for (size_t i = 0; i < all.n; i++)
		any_aside |= all.v[i].aside;
	for (size_t i = 0; !err && i < all.n; i++) {
		struct spd_segfile *f = &all.v[i];

		f->held = !f->aside &&
			  (spd_is_held(in, f->first_seq) || (any_aside && !have_info));
		if ((f->aside && !(sc->flags & SPOOL_SCAN_SET_ASIDE)) ||
		    (f->held && !(sc->flags & SPOOL_SCAN_HELD)))
			sc->skipped++;
		else
			err = seglist_push(&sc->segs, f);
	}
	g_free(all.v);
	for (size_t i = 0; i < sc->segs.n; i++) {
		struct spd_segfile *f = &sc->segs.v[i], *next = NULL;

		for (size_t k = i + 1; !next && k < sc->segs.n; k++)
			if (!sc->segs.v[k].aside)
				next = &sc->segs.v[k];
		f->torn_ok = !f->aside && (!next || next->held != f->held);
	}
	return err;
}

/* mdfd is the scan's from here on. */
static int scan_open_fd(int mdfd, const char *where, unsigned flags,
			struct spool_scan **out, char *why)
{
	struct spool_scan *sc = g_try_new0(struct spool_scan, 1);
	struct spd_info *in = g_try_new0(struct spd_info, 1);
	int err;

	*out = NULL;
	if (!sc || !in) {
		g_free(sc);
		g_free(in);
		close(mdfd);
		spd_say(why, "%s: out of memory", where);
		return -ENOMEM;
	}
	sc->mdfd = mdfd;
	sc->lockfd = -1;
	sc->flags = flags;
	if (flags & SPOOL_SCAN_LOCK) {
		sc->lockfd = spd_take_lock(mdfd, where, why);
		if (sc->lockfd < 0) {
			err = sc->lockfd;
			goto out_free;
		}
	}
	err = spd_read_info(mdfd, in);
	if (err && err != -ENOENT && err != -EUCLEAN) {
		spd_say(why, "%s/" SPOOL_INFO_NAME ": %s", where, g_strerror(-err));
		goto out_free;
	}
	if (!err)
		snprintf(sc->id, sizeof(sc->id), "%s", in->id);
	else
		*in = (struct spd_info){0};
	err = scan_pick(sc, in, sc->id[0] != '\0');
	if (err) {
		spd_say(why, "%s: %s", where, g_strerror(-err));
		goto out_free;
	}
	g_free(in);
	*out = sc;
	return 0;

out_free:
	if (sc->lockfd >= 0)
		close(sc->lockfd);
	g_free(sc->segs.v);
	g_free(sc);
	g_free(in);
	close(mdfd);
	return err;
}

/* Open DIR and its medium directory key (no symlink): 0 with *dfd and *mdfd
 * (keep_dir false: *dfd closed, -1), or -errno with why set; where gets
 * "DIR/key" for messages. */
static int open_medium_dir(const char *dir, const char *key, bool keep_dir, int *dfd,
			   int *mdfd, char *where, size_t where_len, char *why)
{
	int err = 0;

	snprintf(where, where_len, "%s/%s", dir, key);
	*dfd = *mdfd = -1;
	if (!spd_plain_key(key)) {
		spd_say(why, "%s: not a medium directory name", key);
		return -EINVAL;
	}
	*dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (*dfd < 0) {
		err = -errno;
		spd_say(why, "%s: %s", dir, g_strerror(-err));
		return err;
	}
	*mdfd = openat(*dfd, key, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (*mdfd < 0) {
		err = -errno;
		spd_say(why, "%s: %s", where, g_strerror(-err));
	}
	if (err || !keep_dir) {
		close(*dfd);
		*dfd = -1;
	}
	return err;
}

int spool_scan_open(const char *dir, const char *key, unsigned flags,
		    struct spool_scan **out, char *why)
{
	char where[PATH_MAX + SPOOL_KEY_MAX + 2];
	int dfd, mdfd, err;

	*out = NULL;
	err = open_medium_dir(dir, key, false, &dfd, &mdfd, where, sizeof(where), why);
	if (err)
		return err;
	return scan_open_fd(mdfd, where, flags, out, why);
}

G_GNUC_PRINTF(3, 4)
static int scan_damage(struct spool_scan *sc, uint64_t offset, const char *fmt, ...)
{
	va_list ap;

	memset(&sc->dmg, 0, sizeof(sc->dmg));
	va_start(ap, fmt); /* before the reader goes: the arguments may be its */
	vsnprintf(sc->dmg.why, sizeof(sc->dmg.why), fmt, ap);
	va_end(ap);
	spj_reader_close(sc->rd);
	sc->rd = NULL;
	snprintf(sc->dmg.segment, sizeof(sc->dmg.segment), "%s", sc->segs.v[sc->i].name);
	sc->dmg.offset = offset;
	sc->i++;
	if (!(sc->flags & SPOOL_SCAN_PAST_DAMAGE))
		sc->done = true;
	return SPOOL_DAMAGED;
}

/* Open segment sc->i: 0, SPOOL_DAMAGED, 1 (skip it: nothing in it), -errno. */
static int scan_begin_segment(struct spool_scan *sc)
{
	const struct spd_segfile *f = &sc->segs.v[sc->i];
	const struct spj_segment_info *si;
	int r = spj_reader_open(sc->mdfd, f->name, &sc->rd);

	if (r == SPJ_EHDRSHORT && f->torn_ok) {
		sc->i++; /* begun when a crash came: never held a record */
		return 1;
	}
	if (r < -4095)
		return scan_damage(sc, 0, "%s: %s", f->name, spj_strerror(r));
	if (r < 0)
		return r;
	si = spj_reader_info(sc->rd);
	if (!sc->id[0])
		snprintf(sc->id, sizeof(sc->id), "%s", si->medium_id);
	if (strcmp(si->medium_id, sc->id))
		return scan_damage(sc, 0, "%s: a segment of another medium (%s)", f->name,
				   si->medium_id);
	if (si->first_seq != f->first_seq)
		return scan_damage(sc, 0, "%s: its header says first record %" PRIu64,
				   f->name, si->first_seq);
	if (sc->prev_last && si->first_seq <= sc->prev_last)
		return scan_damage(sc, 0,
				   "%s: begins at record %" PRIu64 ", not after %" PRIu64
				   " (out of order)",
				   f->name, si->first_seq, sc->prev_last);
	return 0;
}

int spool_scan_next(struct spool_scan *sc, struct spj_record *rec, const void **payload)
{
	for (;;) {
		const struct spd_segfile *f;
		int r;

		if (sc->done)
			return SPOOL_DONE;
		if (!sc->rd) {
			if (sc->i == sc->segs.n) {
				sc->done = true;
				return SPOOL_DONE;
			}
			r = scan_begin_segment(sc);
			if (r == 1)
				continue;
			if (r)
				return r;
		}
		f = &sc->segs.v[sc->i];
		r = spj_next(sc->rd, rec, payload);
		if (r == SPJ_OK) {
			sc->prev_last = rec->seq;
			return SPOOL_REC;
		}
		if (r < 0)
			return r;
		if (r == SPJ_END || (r == SPJ_TORN && f->torn_ok)) {
			spj_reader_close(sc->rd);
			sc->rd = NULL;
			sc->i++;
			continue;
		}
		return scan_damage(sc, spj_reader_offset(sc->rd), "%s: %s", f->name,
				   spj_reader_why(sc->rd));
	}
}

const struct spool_damage *spool_scan_damage(const struct spool_scan *sc)
{
	return &sc->dmg;
}

unsigned spool_scan_skipped(const struct spool_scan *sc)
{
	return sc->skipped;
}

void spool_scan_close(struct spool_scan *sc)
{
	if (!sc)
		return;
	spj_reader_close(sc->rd);
	if (sc->lockfd >= 0)
		close(sc->lockfd);
	close(sc->mdfd);
	g_free(sc->segs.v);
	g_free(sc);
}

/* Figures from the segment files themselves (names, sizes, times). */
static void stat_files(int mdfd, const struct spd_info *in, bool have_info,
		       struct spool_medium_info *mi)
{
	struct spd_seglist l;
	bool any_aside = false, first = true;

	if (spd_list_segments(mdfd, &l))
		return;
	for (size_t i = 0; i < l.n; i++)
		any_aside |= l.v[i].aside;
	for (size_t i = 0; i < l.n; i++) {
		const struct spd_segfile *f = &l.v[i];

		mi->disk_bytes += f->size;
		if (f->aside) {
			mi->set_aside++;
			continue;
		}
		mi->segments++;
		mi->held += spd_is_held(in, f->first_seq) || (any_aside && !have_info);
		if (first) { /* the lowest seq: the oldest records */
			mi->oldest = f->birth ? f->birth : f->mtime;
			mi->oldest_is_birth = f->birth != 0;
			first = false;
		}
	}
	g_free(l.v);
}

/* Records, files, bytes: what a recover of the live and held segments
 * would read. */
static int stat_records(int mdfd, const char *where, struct spool_medium_info *mi)
{
	struct pathset paths = {0};
	struct spool_scan *sc;
	struct spj_record rec;
	const void *payload;
	int r = scan_open_fd(mdfd, where, SPOOL_SCAN_HELD | SPOOL_SCAN_PAST_DAMAGE, &sc,
			     mi->damage);

	if (r)
		return r;
	while ((r = spool_scan_next(sc, &rec, &payload)) != SPOOL_DONE) {
		if (r == SPOOL_REC) {
			mi->records++;
			if (rec.type == SPJ_WRITE)
				mi->write_bytes += rec.payload_len;
			r = pathset_add(&paths, rec.path);
		} else if (r == SPOOL_DAMAGED) {
			if (!mi->damage[0])
				spd_say(mi->damage, "%s", spool_scan_damage(sc)->why);
			r = 0;
		}
		if (r < 0) {
			spd_say(mi->damage, "%s: %s", where, g_strerror(-r));
			break;
		}
	}
	mi->files = paths.n;
	if (!mi->id[0])
		snprintf(mi->id, sizeof(mi->id), "%s", sc->id);
	pathset_free(&paths);
	spool_scan_close(sc);
	return r < 0 ? r : 0;
}

int spool_medium_stat(int dirfd, const char *key, struct spool_medium_info *mi)
{
	const char *where = key;
	struct spd_info *in = g_try_new0(struct spd_info, 1);
	int mdfd, err, scanfd;

	memset(mi, 0, sizeof(*mi));
	snprintf(mi->key, sizeof(mi->key), "%s", key);
	if (!in)
		return -ENOMEM;
	mdfd = openat(dirfd, key, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (mdfd < 0) {
		err = -errno;
		spd_say(mi->damage, "%s: %s", key, g_strerror(-err));
		g_free(in);
		return err;
	}
	err = spd_read_info(mdfd, in);
	mi->have_info = !err;
	if (mi->have_info) {
		snprintf(mi->id, sizeof(mi->id), "%s", in->id);
		snprintf(mi->label, sizeof(mi->label), "%s", in->label);
		snprintf(mi->source, sizeof(mi->source), "%s", in->source);
		mi->size = in->size;
		mi->first_use = in->first_use;
		mi->last_use = in->last_use;
	} else {
		*in = (struct spd_info){0};
	}
	stat_files(mdfd, in, mi->have_info, mi);
	mi->locked_by = lock_holder(mdfd);
	scanfd = dup(mdfd);
	err = scanfd < 0 ? -errno : stat_records(scanfd, where, mi);
	close(mdfd);
	g_free(in);
	return err;
}

/* Names in dfd (directories only, or all but directories), sorted. */
struct names {
	char **v;
	size_t n, cap;
};

static void names_free(struct names *ns)
{
	for (size_t i = 0; i < ns->n; i++)
		g_free(ns->v[i]);
	g_free(ns->v);
	*ns = (struct names){0};
}

static int names_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int list_names(int dfd, bool dirs, struct names *out)
{
	int err = 0;
	struct dirent *e;
	DIR *d;

	*out = (struct names){0};
	d = dir_of(dfd, &err);
	if (!d)
		return err;
	while (!err && (errno = 0, e = readdir(d))) {
		struct stat st;

		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
		    !!S_ISDIR(st.st_mode) != dirs)
			continue;
		if (out->n == out->cap) {
			size_t cap = out->cap ? out->cap * 2 : 16;
			char **nv = g_try_renew(char *, out->v, cap);
			if (!nv) {
				err = -ENOMEM;
				break;
			}
			out->v = nv;
			out->cap = cap;
		}
		out->v[out->n] = g_try_malloc(strlen(e->d_name) + 1);
		if (!out->v[out->n])
			err = -ENOMEM;
		else
			strcpy(out->v[out->n++], e->d_name);
	}
	if (!err && errno)
		err = -errno;
	closedir(d);
	if (err)
		names_free(out);
	else if (out->n)
		qsort(out->v, out->n, sizeof(*out->v), names_cmp);
	return err;
}

/* A directory the spool made: medium.info or a segment in it. */
static bool medium_dir(int dirfd, const char *name)
{
	int mdfd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	struct spd_seglist l;
	bool yes;

	if (mdfd < 0)
		return errno == EACCES; /* not ours to judge: show the error */
	yes = faccessat(mdfd, SPOOL_INFO_NAME, F_OK, AT_SYMLINK_NOFOLLOW) == 0;
	if (!yes && !spd_list_segments(mdfd, &l)) {
		yes = l.n > 0;
		g_free(l.v);
	}
	close(mdfd);
	return yes;
}

int spool_list(const char *dir,
	       int (*fn)(const struct spool_medium_info *info, void *ctx), void *ctx,
	       char *why)
{
	struct spool_medium_info *mi = g_try_new0(struct spool_medium_info, 1);
	struct names ns;
	int dfd, err;

	if (!mi) {
		spd_say(why, "%s: out of memory", dir);
		return -ENOMEM;
	}
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0) {
		err = -errno;
		spd_say(why, "%s: %s", dir, g_strerror(-err));
		g_free(mi);
		return err;
	}
	err = list_names(dfd, true, &ns);
	if (err)
		spd_say(why, "%s: %s", dir, g_strerror(-err));
	for (size_t i = 0; !err && i < ns.n; i++) {
		if (ns.v[i][0] == '.' || !medium_dir(dfd, ns.v[i]))
			continue;
		spool_medium_stat(dfd, ns.v[i], mi); /* its errors are in mi->damage */
		if (fn(mi, ctx))
			break;
	}
	names_free(&ns);
	close(dfd);
	g_free(mi);
	return err;
}

int spool_find_medium(const char *dir, const char *medium, char key[SPOOL_KEY_MAX + 1],
		      char *why)
{
	struct stat st;
	struct spd_info *in;
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), err;
	bool found = false;

	if (dfd < 0) {
		err = -errno;
		spd_say(why, "%s: %s", dir, g_strerror(-err));
		return err;
	}
	in = g_try_new0(struct spd_info, 1);
	if (!in) {
		close(dfd);
		return -ENOMEM;
	}
	/* By id: the directory it names, unless that holds another medium. */
	if (!spool_medium_key(medium, key) &&
	    fstatat(dfd, key, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode)) {
		int mdfd =
		    openat(dfd, key, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		found = mdfd >= 0 && (spd_read_info(mdfd, in) || !strcmp(in->id, medium));
		if (mdfd >= 0)
			close(mdfd);
	}
	/* By key, as spool list shows it. */
	if (!found && spd_plain_key(medium) &&
	    fstatat(dfd, medium, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode) &&
	    medium_dir(dfd, medium)) {
		snprintf(key, SPOOL_KEY_MAX + 1, "%s", medium);
		found = true;
	}
	close(dfd);
	g_free(in);
	if (!found) {
		spd_say(why, "%s: no medium '%s' in this spool (spool list shows them)",
			dir, medium);
		return -ENOENT;
	}
	return 0;
}

int spool_discard(const char *dir, const char *key, char *why)
{
	char where[PATH_MAX + SPOOL_KEY_MAX + 2];
	struct names ns = {0};
	int dfd, mdfd = -1, lockfd = -1, err;

	err = open_medium_dir(dir, key, true, &dfd, &mdfd, where, sizeof(where), why);
	if (err)
		return err;
	lockfd = spd_take_lock(mdfd, where, why);
	if (lockfd < 0) {
		err = lockfd;
		goto out;
	}
	err = list_names(mdfd, false, &ns);
	for (size_t i = 0; !err && i < ns.n; i++)
		if (strcmp(ns.v[i], SPOOL_LOCK_NAME) && unlinkat(mdfd, ns.v[i], 0) < 0 &&
		    errno != ENOENT)
			err = -errno;
	if (err) {
		spd_say(why, "%s: %s", where, g_strerror(-err));
		goto out;
	}
	fd_fsync_dir(mdfd);
	/* The lock last: whoever opens it meanwhile is refused. */
	unlinkat(mdfd, SPOOL_LOCK_NAME, 0);
	if (unlinkat(dfd, key, AT_REMOVEDIR) < 0) {
		err = -errno;
		spd_say(why, "%s: %s%s", where, g_strerror(-err),
			err == -ENOTEMPTY
			    ? " (the spool's files are gone; something else is "
			      "in it, or a daemon began using it again)"
			    : "");
		goto out;
	}
	err = fd_fsync_dir(dfd);
out:
	names_free(&ns);
	if (lockfd >= 0)
		close(lockfd);
	if (mdfd >= 0)
		close(mdfd);
	close(dfd);
	return err;
}
