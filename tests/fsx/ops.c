/* fsx: generating random ops from the model, running them, and reading them
 * back from a log for --replay. */

#include "fsx.h"

/* Weights per 1000 ops; a kind that does not apply is drawn again. */
static const struct {
	const char *name;
	unsigned weight;
} kinds[OP_NKINDS] = {
    [OP_OPEN] = {"open", 60},	      [OP_CLOSE] = {"close", 55},
    [OP_WRITE] = {"write", 250},      [OP_APPEND] = {"append", 50},
    [OP_READ] = {"read", 250},	      [OP_FTRUNCATE] = {"ftruncate", 30},
    [OP_TRUNCATE] = {"truncate", 15}, [OP_FALLOC] = {"falloc", 50},
    [OP_FSYNC] = {"fsync", 10},	      [OP_FDATASYNC] = {"fdatasync", 6},
    [OP_RENAME] = {"rename", 22},     [OP_LINK] = {"link", 6},
    [OP_UNLINK] = {"unlink", 12},     [OP_STAT] = {"stat", 40},
    [OP_FSTAT] = {"fstat", 40},	      [OP_DROP] = {"drop", 25},
    [OP_LIST] = {"list", 8},	      [OP_SLEEP] = {"sleep", 3},
};

static const char *const fa_names[FA_NMODES] = {"alloc", "keep", "punch"};
static const int fa_modes[FA_NMODES] = {0, FALLOC_FL_KEEP_SIZE,
					FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE};
static const char *const rn_names[] = {"", "noreplace", "exchange"};
static const unsigned rn_flags[] = {0, RENAME_NOREPLACE, RENAME_EXCHANGE};

static void addf(char *buf, size_t size, const char *fmt, ...) G_GNUC_PRINTF(3, 4);

static void addf(char *buf, size_t size, const char *fmt, ...)
{
	size_t n = strlen(buf);
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf + n, size - n, fmt, ap);
	va_end(ap);
}

static void op_format(const struct op *op, char *buf, size_t size)
{
	snprintf(buf, size, "%" PRIu64 " %s", op->no, kinds[op->kind].name);
	switch (op->kind) {
	case OP_OPEN:
		addf(buf, size, " h%d f%d %s%s%s%s", op->h, op->f,
		     op->flags & OF_RDONLY ? "ro" : "rw",
		     op->flags & OF_APPEND ? ",append" : "",
		     op->flags & OF_DIRECT ? ",direct" : "",
		     op->flags & OF_TRUNC ? ",trunc" : "");
		break;
	case OP_WRITE:
	case OP_READ:
		addf(buf, size, " h%d 0x%" PRIx64 " 0x%" PRIx64, op->h, op->off, op->len);
		break;
	case OP_APPEND:
		addf(buf, size, " h%d 0x%" PRIx64, op->h, op->len);
		if (op->flags & 1)
			addf(buf, size, " pwrite 0x%" PRIx64, op->off);
		break;
	case OP_FTRUNCATE:
		addf(buf, size, " h%d 0x%" PRIx64, op->h, op->len);
		break;
	case OP_TRUNCATE:
		addf(buf, size, " f%d 0x%" PRIx64, op->f, op->len);
		break;
	case OP_FALLOC:
		addf(buf, size, " h%d %s 0x%" PRIx64 " 0x%" PRIx64, op->h,
		     fa_names[op->flags], op->off, op->len);
		break;
	case OP_RENAME:
		addf(buf, size, " f%d f%d%s%s", op->f, op->f2, op->flags ? " " : "",
		     rn_names[op->flags]);
		break;
	case OP_LINK:
		addf(buf, size, " f%d f%d", op->f, op->f2);
		break;
	case OP_UNLINK:
	case OP_STAT:
		addf(buf, size, " f%d", op->f);
		break;
	case OP_SLEEP:
		addf(buf, size, " %" PRIu64, op->len);
		break;
	case OP_LIST:
	case OP_NKINDS:
		break;
	default:
		addf(buf, size, " h%d", op->h);
		break;
	}
}

/* ---- op generation ---- */

static int pick_handle(struct fsx *x, bool writable, int append)
{
	int cand[MAX_HANDLES], n = 0;

	for (int i = 0; i < MAX_HANDLES; i++) {
		const struct handle *h = &x->h[i];

		if (!h->open || (writable && (h->flags & OF_RDONLY)))
			continue;
		if (append >= 0 && !!(h->flags & OF_APPEND) != append)
			continue;
		cand[n++] = i;
	}
	return n ? cand[rnd(x, (uint64_t)n)] : -1;
}

static int free_handle(const struct fsx *x)
{
	for (int i = 0; i < MAX_HANDLES; i++)
		if (!x->h[i].open)
			return i;
	return -1;
}

static int pick_existing(struct fsx *x)
{
	int cand[MAX_FILES], n = 0;

	for (unsigned f = 0; f < x->nfiles; f++)
		if (x->names[f])
			cand[n++] = (int)f;
	return n ? cand[rnd(x, (uint64_t)n)] : -1;
}

/* Mostly small, sometimes up to 1 MiB; a quarter page aligned. */
static uint64_t pick_len(struct fsx *x)
{
	uint64_t r = rnd(x, 100), len;

	if (r < 60)
		len = 1 + rnd(x, 8 << 10);
	else if (r < 85)
		len = 1 + rnd(x, 64 << 10);
	else if (r < 97)
		len = 1 + rnd(x, 256 << 10);
	else
		len = 1 + rnd(x, 1 << 20);
	if (chance(x, 25))
		len = (len + PAGE_BYTES - 1) / PAGE_BYTES * PAGE_BYTES;
	return len;
}

/* Anywhere, inside the data, near its end, or page aligned; < max_size. */
static uint64_t pick_off(struct fsx *x, uint64_t size)
{
	uint64_t max = x->max_size, near = 64 << 10, off;

	switch (rnd(x, 4)) {
	case 0:
		return rnd(x, max);
	case 1:
		return size ? rnd(x, size) : 0;
	case 2:
		off = size > near ? size - near : 0;
		return umin(off + rnd(x, 2 * near), max - 1);
	default:
		return rnd(x, max / PAGE_BYTES) * PAGE_BYTES;
	}
}

static uint64_t pick_size(struct fsx *x, uint64_t size)
{
	uint64_t max = x->max_size, r = rnd(x, 10);

	if (r == 0)
		return 0;
	if (r <= 3)
		return rnd(x, size + 1);
	if (r <= 6 && size < max)
		return size + 1 + rnd(x, umin(max - size, (uint64_t)256 << 10));
	if (r == 9)
		return umin(max, size > 4096 ? size - 4096 + rnd(x, 8192) : rnd(x, 8192));
	return rnd(x, max + 1);
}

static bool gen_open(struct fsx *x, struct op *op)
{
	op->h = free_handle(x);
	if (op->h < 0)
		return false;
	op->f = (int)rnd(x, x->nfiles);
	op->flags = chance(x, 20) ? OF_RDONLY : 0;
	if (!(op->flags & OF_RDONLY) && chance(x, 30))
		op->flags |= OF_APPEND;
	if (!x->no_direct && chance(x, 35))
		op->flags |= OF_DIRECT;
	if (!(op->flags & OF_RDONLY) && chance(x, 5))
		op->flags |= OF_TRUNC;
	return true;
}

static bool gen_io(struct fsx *x, struct op *op)
{
	struct minode *m;

	op->h = pick_handle(x, op->kind != OP_READ, op->kind == OP_WRITE ? 0 : -1);
	if (op->h < 0)
		return false;
	m = x->h[op->h].m;
	op->len = pick_len(x);
	if (op->kind == OP_READ) {
		op->off = chance(x, 5) ? m->size + rnd(x, 8192) : pick_off(x, m->size);
		return true;
	}
	op->off = chance(x, 15) ? m->size : pick_off(x, m->size);
	if (op->off >= x->max_size)
		return false;
	op->len = umin(op->len, x->max_size - op->off);
	return true;
}

static bool gen_append(struct fsx *x, struct op *op)
{
	struct minode *m;

	op->h = pick_handle(x, true, chance(x, 70) ? 1 : -1);
	if (op->h < 0)
		return false;
	m = x->h[op->h].m;
	if (m->size >= x->max_size)
		return false;
	op->len = umin(pick_len(x), x->max_size - m->size);
	if (!(x->h[op->h].flags & OF_APPEND)) {
		/* An append through a plain handle is a write at the size. */
		op->kind = OP_WRITE;
		op->off = m->size;
	} else if (chance(x, 30)) {
		op->flags = 1; /* pwrite on O_APPEND: Linux appends, offset ignored */
		op->off = rnd(x, x->max_size);
	}
	return true;
}

static bool gen_falloc(struct fsx *x, struct op *op)
{
	op->h = pick_handle(x, true, -1);
	op->flags = (unsigned)rnd(x, FA_NMODES);
	if (op->h < 0 || x->no_falloc[op->flags])
		return false;
	op->off = pick_off(x, x->h[op->h].m->size);
	op->len = umin(1 + rnd(x, 256 << 10), x->max_size - op->off);
	return true;
}

static bool gen_names(struct fsx *x, struct op *op)
{
	op->f = pick_existing(x);
	if (op->f < 0)
		return false;
	op->f2 = (int)rnd(x, x->nfiles);
	if (op->kind == OP_LINK)
		return !x->fat_like && !x->names[op->f2];
	if (op->kind == OP_RENAME && !x->no_rename_flags && op->f != op->f2) {
		uint64_t r = rnd(x, 10);

		op->flags = r < 2 ? RN_EXCHANGE : r < 3 ? RN_NOREPLACE : RN_PLAIN;
		if (op->flags == RN_EXCHANGE && !x->names[op->f2])
			op->flags = RN_PLAIN;
	}
	return true;
}

static bool gen_kind(struct fsx *x, struct op *op)
{
	switch (op->kind) {
	case OP_OPEN:
		return gen_open(x, op);
	case OP_WRITE:
	case OP_READ:
		return gen_io(x, op);
	case OP_APPEND:
		return gen_append(x, op);
	case OP_FALLOC:
		return gen_falloc(x, op);
	case OP_FTRUNCATE:
		op->h = pick_handle(x, true, -1);
		if (op->h >= 0)
			op->len = pick_size(x, x->h[op->h].m->size);
		return op->h >= 0;
	case OP_TRUNCATE:
		op->f = pick_existing(x);
		if (op->f >= 0)
			op->len = pick_size(x, x->names[op->f]->size);
		return op->f >= 0;
	case OP_CLOSE:
	case OP_FSYNC:
	case OP_FDATASYNC:
	case OP_FSTAT:
	case OP_DROP:
		op->h = pick_handle(x, false, -1);
		return op->h >= 0;
	case OP_RENAME:
	case OP_LINK:
		return gen_names(x, op);
	case OP_UNLINK:
		op->f = pick_existing(x);
		return op->f >= 0;
	case OP_STAT:
		op->f = (int)rnd(x, x->nfiles);
		return true;
	case OP_SLEEP:
		op->len = 1 + rnd(x, 20);
		return true;
	case OP_LIST:
		return true;
	case OP_NKINDS:
		break;
	}
	return false;
}

void gen_op(struct fsx *x, struct op *op, uint64_t no)
{
	unsigned total = 0;

	for (int k = 0; k < OP_NKINDS; k++)
		total += kinds[k].weight;
	for (;;) {
		uint64_t r = rnd(x, total);
		int k = 0;

		while (r >= kinds[k].weight)
			r -= kinds[k++].weight;
		*op = (struct op){.no = no, .kind = (enum op_kind)k};
		if (gen_kind(x, op))
			return;
	}
}

/* ---- op execution ---- */

/* "i5 f2,f4 size 0x1000" or "i5 unlinked size 0x1000". */
static void note_inode(const struct fsx *x, const struct minode *m, char *note,
		       size_t size)
{
	char names[4 * MAX_FILES] = "";

	if (!m || !m->live) {
		snprintf(note, size, "gone");
		return;
	}
	for (unsigned f = 0; f < x->nfiles; f++)
		if (x->names[f] == m)
			addf(names, sizeof(names), "%sf%u", names[0] ? "," : "", f);
	/* A note cut short at size is still a fine note. */
	if (snprintf(note, size, "i%u %s size 0x%zx", m->id,
		     names[0] ? names : "unlinked", m->size) >= (int)size)
		return;
}

static bool exec_open(struct fsx *x, const struct op *op, const char *line)
{
	struct handle *h = &x->h[op->h];
	struct minode *m = x->names[op->f];
	char path[PATH_MAX];
	int flags, fd;

	flags = (op->flags & OF_RDONLY ? O_RDONLY : O_RDWR) | O_CREAT |
		(op->flags & OF_APPEND ? O_APPEND : 0) |
		(op->flags & OF_DIRECT ? O_DIRECT : 0) |
		(op->flags & OF_TRUNC ? O_TRUNC : 0);
	fd = open(fpath(x, x->dir, op->f, path), flags, 0644);
	if (fd < 0 && errno == EINVAL && (op->flags & OF_DIRECT) && !x->no_direct) {
		printf("# O_DIRECT open fails (EINVAL): no direct handles from now on\n");
		x->no_direct = true;
		fd = open(path, flags & ~O_DIRECT, 0644);
	}
	if (!expect(x, line, fd, errno, 0))
		return false;
	if (!m)
		m = x->names[op->f] = m_new(x);
	else if (op->flags & OF_TRUNC)
		m_truncate(m, 0);
	m->nopen++;
	*h = (struct handle){.open = true, .fd = fd, .flags = op->flags, .m = m};
	return check_fstat(x, line, fd, m);
}

static bool exec_close(struct fsx *x, const struct op *op, const char *line)
{
	struct handle *h = &x->h[op->h];
	int r = close(h->fd);

	h->open = false;
	h->m->nopen--;
	m_put(h->m);
	if (x->dead_mount)
		return true; /* the daemon was killed: ENOTCONN is all it can say */
	return expect(x, line, r, errno, 0);
}

static bool exec_write(struct fsx *x, const struct op *op, const char *line)
{
	struct handle *h = &x->h[op->h];
	uint64_t off = op->kind == OP_APPEND ? h->m->size : op->off;
	int64_t t;
	ssize_t n;

	fill_pattern(x->buf, off, op->len, op->no);
	t = now_ns();
	if (op->kind == OP_WRITE)
		n = pwrite(h->fd, x->buf, op->len, (off_t)off);
	else if (op->flags & 1)
		n = pwrite(h->fd, x->buf, op->len, (off_t)op->off);
	else
		n = write(h->fd, x->buf, op->len);
	if (!expect(x, line, n, errno, 0))
		return false;
	x->nslow_writes += now_ns() - t > SLOW_WRITE_NS;
	if ((uint64_t)n != op->len) {
		report(x, "%s: short write, 0x%zx of 0x%" PRIx64 " bytes", line,
		       (size_t)n, op->len);
		return false;
	}
	m_write(h->m, off, x->buf, op->len);
	x->written += op->len;
	return check_fstat(x, line, h->fd, h->m);
}

static bool exec_read(struct fsx *x, const struct op *op, const char *line)
{
	struct handle *h = &x->h[op->h];
	struct minode *m = h->m;
	size_t want = op->off < m->size ? MIN(op->len, m->size - op->off) : 0;
	char lpath[PATH_MAX];
	int f = m_name(x, m);
	ssize_t n = pread(h->fd, x->buf, op->len, (off_t)op->off);

	if (!expect(x, line, n, errno, 0))
		return false;
	if ((size_t)n != want) {
		report(x, "%s: read returned 0x%zx bytes, expected 0x%zx (size 0x%zx)",
		       line, (size_t)n, want, m->size);
		if (n > 0)
			compare(x, line, m->data + op->off, x->buf, MIN((size_t)n, want),
				op->off, NULL);
		return false;
	}
	return compare(x, line, m->data + op->off, x->buf, want, op->off,
		       x->lower[0] && f >= 0 ? fpath(x, x->lower, f, lpath) : NULL);
}

static bool exec_truncate(struct fsx *x, const struct op *op, const char *line)
{
	char path[PATH_MAX];
	struct minode *m;
	int r;

	if (op->kind == OP_FTRUNCATE) {
		m = x->h[op->h].m;
		r = ftruncate(x->h[op->h].fd, (off_t)op->len);
	} else {
		m = x->names[op->f];
		r = truncate(fpath(x, x->dir, op->f, path), (off_t)op->len);
	}
	if (!expect(x, line, r, errno, m ? 0 : ENOENT) || !m)
		return m == NULL;
	m_truncate(m, op->len);
	if (op->kind == OP_FTRUNCATE)
		return check_fstat(x, line, x->h[op->h].fd, m);
	return true;
}

static bool exec_falloc(struct fsx *x, const struct op *op, const char *line)
{
	struct handle *h = &x->h[op->h];
	int r = fallocate(h->fd, fa_modes[op->flags], (off_t)op->off, (off_t)op->len);

	if (r < 0 && errno == EOPNOTSUPP) {
		printf("# fallocate %s: not supported here, not tried again\n",
		       fa_names[op->flags]);
		x->no_falloc[op->flags] = true;
		return true;
	}
	if (!expect(x, line, r, errno, 0))
		return false;
	m_fallocate(h->m, op->flags, op->off, op->len);
	return check_fstat(x, line, h->fd, h->m);
}

static bool exec_fsync(struct fsx *x, const struct op *op, const char *line)
{
	struct handle *h = &x->h[op->h];
	int64_t t = now_ns();
	int r = op->kind == OP_FSYNC ? fsync(h->fd) : fdatasync(h->fd);
	g_autofree char *what = NULL;
	char path[PATH_MAX];
	int f;

	if (!expect(x, line, r, errno, 0))
		return false;
	t = now_ns() - t;
	x->nsyncs++;
	x->sync_ns += t;
	x->sync_max_ns = MAX(x->sync_max_ns, t);
	/* fsync returns once the file's queued data is on the medium. */
	f = m_name(x, h->m);
	if (!x->fsync_check || !x->lower[0] || f < 0)
		return true;
	what = g_strdup_printf("%s: lower file after fsync", line);
	return check_file(x, what, fpath(x, x->lower, f, path), h->m, NULL);
}

/* The errno rename(2) gives for the model, or 0. */
static int rename_errno(const struct fsx *x, const struct op *op)
{
	if (!x->names[op->f])
		return ENOENT;
	if (op->flags == RN_NOREPLACE && x->names[op->f2])
		return EEXIST;
	if (op->flags == RN_EXCHANGE && !x->names[op->f2])
		return ENOENT;
	return 0;
}

static void rename_model(struct fsx *x, const struct op *op)
{
	struct minode *src = x->names[op->f], *dst = x->names[op->f2];

	if (src == dst) /* same name, or two links of one file: nothing happens */
		return;
	if (op->flags == RN_EXCHANGE) {
		x->names[op->f] = dst;
		x->names[op->f2] = src;
		return;
	}
	if (dst)
		m_unlink_name(x, op->f2);
	x->names[op->f2] = src;
	x->names[op->f] = NULL;
}

static bool exec_rename(struct fsx *x, const struct op *op, const char *line)
{
	char p1[PATH_MAX], p2[PATH_MAX];
	int want = rename_errno(x, op);
	int r = renameat2(AT_FDCWD, fpath(x, x->dir, op->f, p1), AT_FDCWD,
			  fpath(x, x->dir, op->f2, p2), rn_flags[op->flags]);

	if (r < 0 && errno == EINVAL && op->flags && !x->no_rename_flags) {
		printf("# renameat2 flags not supported here, not tried again\n");
		x->no_rename_flags = true;
		return true;
	}
	if (!expect(x, line, r, errno, want))
		return false;
	if (!want)
		rename_model(x, op);
	return true;
}

static bool exec_link(struct fsx *x, const struct op *op, const char *line)
{
	char p1[PATH_MAX], p2[PATH_MAX];
	struct minode *m = x->names[op->f];
	int want = !m ? ENOENT : x->names[op->f2] ? EEXIST : 0;
	int r = link(fpath(x, x->dir, op->f, p1), fpath(x, x->dir, op->f2, p2));

	if (!expect(x, line, r, errno, want))
		return false;
	if (want)
		return true;
	x->names[op->f2] = m;
	m->nlink++;
	return true;
}

static bool exec_unlink(struct fsx *x, const struct op *op, const char *line)
{
	char path[PATH_MAX];
	int r = unlink(fpath(x, x->dir, op->f, path));

	if (!expect(x, line, r, errno, x->names[op->f] ? 0 : ENOENT))
		return false;
	if (x->names[op->f])
		m_unlink_name(x, op->f);
	return true;
}

static bool exec_stat(struct fsx *x, const struct op *op, const char *line)
{
	struct minode *m = x->names[op->f];
	char path[PATH_MAX];
	struct stat st;
	int r = stat(fpath(x, x->dir, op->f, path), &st);

	if (!expect(x, line, r, errno, m ? 0 : ENOENT))
		return false;
	return !m || check_stat(x, line, &st, m, -1, path);
}

static bool exec_op(struct fsx *x, const struct op *op, const char *line)
{
	switch (op->kind) {
	case OP_OPEN:
		return exec_open(x, op, line);
	case OP_CLOSE:
		return exec_close(x, op, line);
	case OP_WRITE:
	case OP_APPEND:
		return exec_write(x, op, line);
	case OP_READ:
		return exec_read(x, op, line);
	case OP_FTRUNCATE:
	case OP_TRUNCATE:
		return exec_truncate(x, op, line);
	case OP_FALLOC:
		return exec_falloc(x, op, line);
	case OP_FSYNC:
	case OP_FDATASYNC:
		return exec_fsync(x, op, line);
	case OP_RENAME:
		return exec_rename(x, op, line);
	case OP_LINK:
		return exec_link(x, op, line);
	case OP_UNLINK:
		return exec_unlink(x, op, line);
	case OP_STAT:
		return exec_stat(x, op, line);
	case OP_FSTAT:
		return check_fstat(x, line, x->h[op->h].fd, x->h[op->h].m);
	case OP_DROP:
		return expect(x, line,
			      -posix_fadvise(x->h[op->h].fd, 0, 0, POSIX_FADV_DONTNEED),
			      0, 0);
	case OP_LIST:
		return check_names(x, line, x->dir);
	case OP_SLEEP:
		sleep_ms((unsigned)op->len);
		return true;
	case OP_NKINDS:
		break;
	}
	return false;
}

/* A replayed op that the model cannot run (its handle is not open, ...). */
static bool op_runnable(const struct fsx *x, const struct op *op)
{
	bool has_h = op->kind != OP_TRUNCATE && op->kind != OP_RENAME &&
		     op->kind != OP_LINK && op->kind != OP_UNLINK &&
		     op->kind != OP_STAT && op->kind != OP_LIST && op->kind != OP_SLEEP;
	unsigned nf = x->nfiles;

	if (op->f < 0 || op->f >= (int)nf || op->f2 < 0 || op->f2 >= (int)nf)
		return false;
	if (op->h < 0 || op->h >= MAX_HANDLES)
		return false;
	if (op->kind == OP_OPEN)
		return !x->h[op->h].open;
	if (!has_h)
		return true;
	if (!x->h[op->h].open)
		return false;
	if (op->kind == OP_READ || op->kind == OP_FSTAT || op->kind == OP_DROP ||
	    op->kind == OP_CLOSE || op->kind == OP_FSYNC || op->kind == OP_FDATASYNC)
		return true;
	if (x->h[op->h].flags & OF_RDONLY)
		return false;
	if (op->kind == OP_APPEND)
		return (x->h[op->h].flags & OF_APPEND) &&
		       x->h[op->h].m->size + op->len <= x->buf_size;
	return op->off + op->len <= x->buf_size && op->len <= x->buf_size;
}

/* The file an op is about, for the log's note. */
static struct minode *op_inode(const struct fsx *x, const struct op *op)
{
	switch (op->kind) {
	case OP_TRUNCATE:
	case OP_STAT:
		return x->names[op->f];
	case OP_RENAME:
	case OP_LINK:
		return x->names[op->f2];
	case OP_UNLINK:
	case OP_LIST:
	case OP_SLEEP:
	case OP_NKINDS:
		return NULL;
	default:
		return x->h[op->h].m;
	}
}

bool run_one(struct fsx *x, const struct op *op)
{
	char line[LINE_BYTES], note[64];
	struct minode *m;
	bool ok;

	op_format(op, line, sizeof(line));
	if (!op_runnable(x, op)) {
		printf("# skipped (not runnable now): %s\n", line);
		return true;
	}
	if (x->verbose)
		printf("%s\n", line);
	wd_arm(x, line);
	ok = exec_op(x, op, line);
	wd_disarm(x);
	m = op_inode(x, op);
	if (m) {
		note_inode(x, m, note, sizeof(note));
		addf(line, sizeof(line), "  ; %s", note);
	}
	log_store(x, line);
	return ok;
}

/* ---- replay files: the log's format, "NO KIND ARGS [; note]" per line ---- */

static bool parse_num(const char *s, uint64_t *v)
{
	char *end;

	if (!s)
		return false;
	*v = strtoull(s, &end, 0);
	return end != s && !*end;
}

static bool parse_ref(const char *s, char c, int *v)
{
	uint64_t n;

	if (!s || s[0] != c || !parse_num(s + 1, &n))
		return false;
	*v = (int)n;
	return true;
}

static unsigned parse_open_flags(const char *s)
{
	unsigned fl = 0;
	g_auto(GStrv) parts = g_strsplit(s ? s : "", ",", -1);

	for (int i = 0; parts[i]; i++) {
		if (!strcmp(parts[i], "ro"))
			fl |= OF_RDONLY;
		else if (!strcmp(parts[i], "append"))
			fl |= OF_APPEND;
		else if (!strcmp(parts[i], "direct"))
			fl |= OF_DIRECT;
		else if (!strcmp(parts[i], "trunc"))
			fl |= OF_TRUNC;
	}
	return fl;
}

static int name_index(const char *const *names, int n, const char *s)
{
	for (int i = 0; i < n; i++)
		if (!g_strcmp0(names[i], s ? s : ""))
			return i;
	return -1;
}

static bool parse_args(struct op *op, char **a)
{
	int m;

	switch (op->kind) {
	case OP_OPEN:
		op->flags = parse_open_flags(a[2]);
		return parse_ref(a[0], 'h', &op->h) && parse_ref(a[1], 'f', &op->f);
	case OP_WRITE:
	case OP_READ:
		return parse_ref(a[0], 'h', &op->h) && parse_num(a[1], &op->off) &&
		       parse_num(a[2], &op->len);
	case OP_APPEND:
		if (a[2] && !strcmp(a[2], "pwrite")) {
			op->flags = 1;
			if (!parse_num(a[3], &op->off))
				return false;
		}
		return parse_ref(a[0], 'h', &op->h) && parse_num(a[1], &op->len);
	case OP_FTRUNCATE:
		return parse_ref(a[0], 'h', &op->h) && parse_num(a[1], &op->len);
	case OP_TRUNCATE:
		return parse_ref(a[0], 'f', &op->f) && parse_num(a[1], &op->len);
	case OP_FALLOC:
		m = name_index(fa_names, FA_NMODES, a[1]);
		op->flags = (unsigned)m;
		return m >= 0 && parse_ref(a[0], 'h', &op->h) &&
		       parse_num(a[2], &op->off) && parse_num(a[3], &op->len);
	case OP_RENAME:
		m = name_index(rn_names, 3, a[2]);
		op->flags = (unsigned)m;
		return m >= 0 && parse_ref(a[0], 'f', &op->f) &&
		       parse_ref(a[1], 'f', &op->f2);
	case OP_LINK:
		return parse_ref(a[0], 'f', &op->f) && parse_ref(a[1], 'f', &op->f2);
	case OP_UNLINK:
	case OP_STAT:
		return parse_ref(a[0], 'f', &op->f);
	case OP_SLEEP:
		return parse_num(a[0], &op->len);
	case OP_LIST:
		return true;
	default:
		return parse_ref(a[0], 'h', &op->h);
	}
}

static bool parse_line(const char *text, struct op *op)
{
	g_autofree char *s = g_strdup(text);
	char *semi = strchr(s, ';'), *save = NULL, *t[8] = {NULL};
	int k, n = 0;

	if (semi)
		*semi = '\0';
	for (char *tok = strtok_r(s, " \t", &save); tok && n < 7;
	     tok = strtok_r(NULL, " \t", &save))
		t[n++] = tok;
	*op = (struct op){0};
	if (n < 2 || !parse_num(t[0], &op->no))
		return false;
	for (k = 0; k < OP_NKINDS && strcmp(kinds[k].name, t[1]); k++)
		;
	if (k == OP_NKINDS)
		return false;
	op->kind = (enum op_kind)k;
	return parse_args(op, t + 2);
}

GArray *load_replay(const char *file)
{
	g_autofree char *text = NULL;
	g_autoptr(GError) err = NULL;
	g_auto(GStrv) lines = NULL;
	GArray *ops = g_array_new(FALSE, FALSE, sizeof(struct op));

	if (!g_file_get_contents(file, &text, NULL, &err)) {
		fprintf(stderr, "fsx: %s\n", err->message);
		exit(2);
	}
	lines = g_strsplit(text, "\n", -1);
	for (int i = 0; lines[i]; i++) {
		struct op op;
		char *l = g_strstrip(lines[i]);

		/* Log lines printed on failure are indented; "FAIL"/"# " lines are not
		 * ops. */
		if (parse_line(l, &op))
			g_array_append_val(ops, op);
		else if (*l && *l != '#' && g_ascii_isdigit(*l))
			fprintf(stderr, "fsx: %s:%d: cannot parse: %s\n", file, i + 1, l);
	}
	return ops;
}

bool close_all(struct fsx *x, bool check)
{
	bool ok = true;

	for (int i = 0; i < MAX_HANDLES; i++) {
		struct op op = {.kind = OP_CLOSE, .h = i};

		if (!x->h[i].open)
			continue;
		if (check)
			ok = run_one(x, &op) && ok;
		else
			exec_close(x, &op, "close");
	}
	return ok;
}
