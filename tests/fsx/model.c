/* fsx: the model of the files, its random numbers, the op log, and the checks of
 * what the file system shows against the model. */

#include "fsx.h"

#define RESTAT_DELAY_MS 1100

int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * NSEC_PER_SEC + ts.tv_nsec;
}

void sleep_ms(unsigned ms)
{
	struct timespec ts = {.tv_sec = ms / 1000,
			      .tv_nsec = (long)(ms % 1000) * 1000000};

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* ---- random numbers: xoshiro256**, seeded by splitmix64 ---- */

static uint64_t splitmix64(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

void rng_seed(struct fsx *x, uint64_t seed)
{
	for (int i = 0; i < 4; i++)
		x->rng[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t v, int k)
{
	return (v << k) | (v >> (64 - k));
}

static uint64_t rng_next(struct fsx *x)
{
	uint64_t *s = x->rng, r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return r;
}

/* A function, not MIN(): its arguments are often random draws. */
uint64_t umin(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

/* Uniform in [0, n); n > 0. */
uint64_t rnd(struct fsx *x, uint64_t n)
{
	return rng_next(x) % n;
}

bool chance(struct fsx *x, unsigned percent)
{
	return rnd(x, 100) < percent;
}

/* ---- the model ---- */

static void m_reserve(struct minode *m, size_t size)
{
	size_t cap;

	if (size <= m->cap)
		return;
	cap = MAX(size, m->cap * 2);
	m->data = g_realloc(m->data, cap);
	memset(m->data + m->cap, 0, cap - m->cap);
	m->cap = cap;
}

void m_truncate(struct minode *m, size_t size)
{
	if (size < m->size)
		memset(m->data + size, 0, m->size - size);
	else
		m_reserve(m, size);
	m->size = size;
}

void m_write(struct minode *m, size_t off, const uint8_t *data, size_t len)
{
	m_reserve(m, off + len);
	memcpy(m->data + off, data, len);
	m->size = MAX(m->size, off + len);
}

void m_fallocate(struct minode *m, unsigned fa, size_t off, size_t len)
{
	size_t end = MIN(off + len, m->size);

	if (fa == FA_ALLOC && off + len > m->size)
		m_truncate(m, off + len);
	else if (fa == FA_PUNCH && off < end)
		memset(m->data + off, 0, end - off);
}

struct minode *m_new(struct fsx *x)
{
	for (int i = 0; i < MAX_INODES; i++) {
		struct minode *m = &x->inodes[i];

		if (!m->live) {
			*m =
			    (struct minode){.live = true, .id = ++x->next_id, .nlink = 1};
			return m;
		}
	}
	g_error("model: out of inodes");
}

void m_put(struct minode *m)
{
	if (m->nlink || m->nopen)
		return;
	g_free(m->data);
	*m = (struct minode){0};
}

void m_unlink_name(struct fsx *x, int f)
{
	struct minode *m = x->names[f];

	x->names[f] = NULL;
	m->nlink--;
	m_put(m);
}

/* A name of m, or -1 when it has none. */
int m_name(const struct fsx *x, const struct minode *m)
{
	for (unsigned f = 0; f < x->nfiles; f++)
		if (x->names[f] == m)
			return (int)f;
	return -1;
}

/* ---- data pattern ---- */

static uint8_t op_tag(uint64_t no)
{
	return (uint8_t)(no % 251 + 1);
}

void fill_pattern(uint8_t *buf, uint64_t off, size_t len, uint64_t no)
{
	uint8_t tag = op_tag(no);

	for (size_t i = 0; i < len; i++)
		buf[i] = (uint8_t)(tag + off + i);
}

/* ---- paths and output ---- */

const char *path_fmt(char *buf, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, PATH_MAX, fmt, ap);
	va_end(ap);
	if (n >= PATH_MAX)
		g_error("path too long: %s", buf);
	return buf;
}

const char *fpath(const struct fsx *x, const char *dir, int f, char *buf)
{
	return path_fmt(buf, "%s/f%d", dir, f);
}

void report(struct fsx *x, const char *fmt, ...)
{
	va_list ap;

	printf("FAIL: ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	x->nfail++;
}

static void hexdump(const char *label, const uint8_t *p, size_t len, uint64_t base)
{
	printf("  %-9s @0x%08" PRIx64 ":", label, base);
	for (size_t i = 0; i < len; i++)
		printf(" %02x", p[i]);
	printf("\n");
}

/* ---- op log ---- */

void log_store(struct fsx *x, const char *line)
{
	g_strlcpy(x->log[x->nlogged % x->log_ops], line, LINE_BYTES);
	x->nlogged++;
}

void log_print(const struct fsx *x)
{
	uint64_t first = x->nlogged > x->log_ops ? x->nlogged - x->log_ops : 0;

	printf("last %" PRIu64 " ops (op handle/file args ; model after the op):\n",
	       x->nlogged - first);
	for (uint64_t i = first; i < x->nlogged; i++)
		printf("  %s\n", x->log[i % x->log_ops]);
}

/* Ops in the log whose data has tag t. */
static void log_tag_candidates(const struct fsx *x, uint8_t t)
{
	uint64_t first = x->nlogged > x->log_ops ? x->nlogged - x->log_ops : 0;
	bool any = false;

	printf("  got bytes decode as tag %u: written by op n with n %% 251 == %u", t,
	       (unsigned)t - 1);
	for (uint64_t i = first; i < x->nlogged; i++) {
		const char *l = x->log[i % x->log_ops];
		uint64_t no = strtoull(l, NULL, 10);

		if (op_tag(no) == t && (strstr(l, "write") || strstr(l, "append"))) {
			printf("%s #%" PRIu64, any ? "," : "; in the log:", no);
			any = true;
		}
	}
	printf("\n");
}

/* ---- comparing ---- */

static void show_lower(const char *path, uint64_t off, size_t len)
{
	uint8_t b[16];
	int fd = open(path, O_RDONLY);
	ssize_t n;

	if (fd < 0) {
		printf("  lower file %s: %s\n", path, g_strerror(errno));
		return;
	}
	n = pread(fd, b, MIN(len, sizeof(b)), (off_t)off);
	if (n > 0)
		hexdump("lower", b, (size_t)n, off);
	else
		printf("  lower file has nothing at 0x%" PRIx64 "\n", off);
	close(fd);
}

static bool all_zero(const uint8_t *p, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (p[i])
			return false;
	return true;
}

/*
 * Compare got with exp, [base, base+len) of a file; on a mismatch report the
 * first differing bytes, what they decode to and, when lower is known, what the
 * lower file holds there.
 */
bool compare(struct fsx *x, const char *what, const uint8_t *exp, const uint8_t *got,
	     size_t len, uint64_t base, const char *lower)
{
	size_t first, last = 0, ndiff = 0, show;

	if (len == 0 || memcmp(exp, got, len) == 0)
		return true;
	for (first = 0; exp[first] == got[first]; first++)
		;
	for (size_t i = first; i < len; i++)
		if (exp[i] != got[i]) {
			ndiff++;
			last = i;
		}
	report(x,
	       "%s: data mismatch at file offset 0x%" PRIx64 ": %zu bytes differ in "
	       "[0x%" PRIx64 ", 0x%" PRIx64 "]",
	       what, base + first, ndiff, base + first, base + last);
	show = MIN((size_t)16, len - first);
	hexdump("expected", exp + first, show, base + first);
	hexdump("got", got + first, show, base + first);
	if (all_zero(got + first, last - first + 1))
		printf("  got zeros over the whole differing range\n");
	else
		log_tag_candidates(x, (uint8_t)(got[first] - (uint8_t)(base + first)));
	if (lower)
		show_lower(lower, base + first, show);
	return false;
}

/* ---- checks of syscall results ---- */

static const char *err_name(int e)
{
	return e ? g_strerror(e) : "success";
}

/* r is a syscall's return value, e its errno; want is the expected errno. */
bool expect(struct fsx *x, const char *line, long r, int e, int want)
{
	int got = r < 0 ? e : 0;

	if (got == want)
		return true;
	report(x, "%s: got %s (%ld), expected %s", line, err_name(got), r,
	       err_name(want));
	return false;
}

/* A second stat after the kernel's attribute cache (1 s in slowmedia) has
 * expired: is a wrong size still wrong, or was it a moment's? */
static bool restat_size(int fd, const char *path, uint64_t *size)
{
	struct stat st;
	int r;

	sleep_ms(RESTAT_DELAY_MS);
	r = path ? stat(path, &st) : fstat(fd, &st);
	*size = (uint64_t)st.st_size;
	return r == 0;
}

static bool check_size(struct fsx *x, const char *what, const struct stat *st,
		       const struct minode *m, int fd, const char *path)
{
	uint64_t again;

	if ((uint64_t)st->st_size == m->size)
		return true;
	if (!restat_size(fd, path, &again)) {
		report(x, "%s: size 0x%" PRIx64 ", expected 0x%zx (i%u); stat again: %s",
		       what, (uint64_t)st->st_size, m->size, m->id, g_strerror(errno));
		return false;
	}
	if (again == m->size && x->lax_stat) {
		printf("# warning: %s: size 0x%" PRIx64
		       ", expected 0x%zx (i%u), right %d ms "
		       "later\n",
		       what, (uint64_t)st->st_size, m->size, m->id, RESTAT_DELAY_MS);
		return true;
	}
	report(x, "%s: size 0x%" PRIx64 ", expected 0x%zx (i%u); %d ms later: 0x%" PRIx64,
	       what, (uint64_t)st->st_size, m->size, m->id, RESTAT_DELAY_MS, again);
	return false;
}

/* st from fstat(fd) or stat(path) (fd < 0) must agree with m. */
bool check_stat(struct fsx *x, const char *what, const struct stat *st, struct minode *m,
		int fd, const char *path)
{
	bool ok;

	if (!S_ISREG(st->st_mode)) {
		report(x, "%s: mode 0%o is not a regular file", what, st->st_mode);
		return false;
	}
	ok = check_size(x, what, st, m, fd, path);
	if (st->st_nlink != m->nlink) {
		report(x, "%s: nlink %lu, expected %u (i%u)", what,
		       (unsigned long)st->st_nlink, m->nlink, m->id);
		ok = false;
	}
	if (m->ino_known && st->st_ino != m->st_ino) {
		report(x, "%s: st_ino %lu, was %lu before (i%u)", what,
		       (unsigned long)st->st_ino, (unsigned long)m->st_ino, m->id);
		ok = false;
	}
	m->ino_known = true;
	m->st_ino = st->st_ino;
	return ok;
}

bool check_fstat(struct fsx *x, const char *what, int fd, struct minode *m)
{
	struct stat st;

	if (fstat(fd, &st) < 0) {
		report(x, "%s: fstat: %s", what, g_strerror(errno));
		return false;
	}
	return check_stat(x, what, &st, m, fd, NULL);
}

/* Read all of fd (up to limit bytes) into buf; -1 on error. */
static ssize_t read_all(int fd, uint8_t *buf, size_t limit)
{
	size_t done = 0;

	while (done < limit) {
		ssize_t n = pread(fd, buf + done, MIN(limit - done, (size_t)1 << 20),
				  (off_t)done);

		if (n < 0)
			return -1;
		if (n == 0)
			break;
		done += (size_t)n;
	}
	return (ssize_t)done;
}

/* The whole file at path must equal m: size, link count, every byte. */
bool check_file(struct fsx *x, const char *what, const char *path, struct minode *m,
		const char *lower)
{
	int fd = open(path, O_RDONLY);
	ssize_t n;
	bool ok;

	if (fd < 0) {
		report(x, "%s: open %s: %s", what, path, g_strerror(errno));
		return false;
	}
	ok = check_fstat(x, what, fd, m);
	n = read_all(fd, x->buf, x->buf_size);
	if (n < 0) {
		report(x, "%s: read %s: %s", what, path, g_strerror(errno));
		ok = false;
	} else if ((size_t)n != m->size) {
		report(x, "%s: read 0x%zx bytes, expected 0x%zx (i%u)", what, (size_t)n,
		       m->size, m->id);
		ok = false;
	}
	if (n >= 0 &&
	    !compare(x, what, m->data, x->buf, MIN((size_t)n, m->size), 0, lower))
		ok = false;
	close(fd);
	return ok;
}

/* The names in dir must be exactly the model's. */
bool check_names(struct fsx *x, const char *what, const char *dir)
{
	bool seen[MAX_FILES] = {false}, ok = true;
	DIR *d = opendir(dir);
	struct dirent *de;

	if (!d) {
		report(x, "%s: opendir %s: %s", what, dir, g_strerror(errno));
		return false;
	}
	while ((de = readdir(d))) {
		char *end;
		long f;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		f = de->d_name[0] == 'f' ? strtol(de->d_name + 1, &end, 10) : -1;
		if (f < 0 || f >= (long)x->nfiles || *end || !x->names[f] || seen[f]) {
			report(x, "%s: unexpected name %s in %s", what, de->d_name, dir);
			ok = false;
			continue;
		}
		seen[f] = true;
	}
	closedir(d);
	for (unsigned f = 0; f < x->nfiles; f++)
		if (x->names[f] && !seen[f]) {
			report(x, "%s: f%u missing from %s", what, f, dir);
			ok = false;
		}
	return ok;
}

/* Every file under dir (the mount or the lower directory) must equal the model. */
bool check_tree(struct fsx *x, const char *what, const char *dir, bool is_lower)
{
	char path[PATH_MAX], lpath[PATH_MAX];
	bool ok;

	wd_arm(x, what);
	ok = check_names(x, what, dir);
	for (unsigned f = 0; f < x->nfiles; f++) {
		struct minode *m = x->names[f];
		g_autofree char *w = g_strdup_printf("%s: f%u", what, f);

		if (m && !check_file(x, w, fpath(x, dir, (int)f, path), m,
				     is_lower || !x->lower[0]
					 ? NULL
					 : fpath(x, x->lower, (int)f, lpath)))
			ok = false;
	}
	wd_disarm(x);
	return ok;
}

uint64_t parse_size_arg(const char *s)
{
	char *end;
	uint64_t v = strtoull(s, &end, 0);

	switch (g_ascii_toupper(*end)) {
	case 'K':
		return v << 10;
	case 'M':
		return v << 20;
	case 'G':
		return v << 30;
	}
	return v;
}
