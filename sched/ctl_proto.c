/*
 * The control socket's line codec and the client's connection helpers; the
 * format is written down in ctl_proto.h. The parser never trusts the peer:
 * every length is checked before use, and any line that breaks the framing
 * is -EPROTO, whole (no partial message is ever acted on).
 */
#include "ctl_proto.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static bool key_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
}

/* Words (record names like file-error) may also have '-'. */
static bool word_char(char c)
{
	return key_char(c) || c == '-';
}

static bool plain_byte(unsigned char c)
{
	return c > 0x20 && c < 0x7f && c != '%' && c != '=';
}

static int hex_val(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

void ctl_msg_clear(struct ctl_msg *m)
{
	g_free(m->word);
	for (unsigned i = 0; i < m->nfields; i++) {
		g_free(m->fields[i].key);
		g_free(m->fields[i].value);
	}
	memset(m, 0, sizeof(*m));
}

/* Decode [s, end) into a new string; NULL on a bad escape or byte. */
static char *decode(const char *s, const char *end)
{
	GString *v = g_string_sized_new((gsize)(end - s));

	while (s < end) {
		if (*s == '%') {
			int hi, lo;
			if (end - s < 3 || (hi = hex_val(s[1])) < 0 || (lo = hex_val(s[2])) < 0)
				goto bad;
			g_string_append_c(v, (char)(hi << 4 | lo));
			s += 3;
		} else if (plain_byte((unsigned char)*s)) {
			g_string_append_c(v, *s++);
		} else {
			goto bad;
		}
	}
	return g_string_free(v, FALSE);
bad:
	g_string_free(v, TRUE);
	return NULL;
}

int ctl_parse(const char *line, size_t len, struct ctl_msg *m)
{
	const char *p = line, *end = line + len, *sp;

	memset(m, 0, sizeof(*m));
	if (len >= CTL_LINE_MAX || memchr(line, '\n', len))
		return -EPROTO;
	sp = memchr(p, ' ', len);
	sp = sp ? sp : end;
	if (sp == p)
		return -EPROTO;
	for (const char *c = p; c < sp; c++)
		if (!word_char(*c))
			return -EPROTO;
	m->word = g_strndup(p, (gsize)(sp - p));
	p = sp;
	while (p < end) {
		const char *eq, *fend;
		struct ctl_field *f;

		p++; /* the space */
		fend = memchr(p, ' ', (size_t)(end - p));
		fend = fend ? fend : end;
		eq = memchr(p, '=', (size_t)(fend - p));
		if (!eq || eq == p || m->nfields == CTL_FIELDS_MAX)
			goto bad;
		for (const char *c = p; c < eq; c++)
			if (!key_char(*c))
				goto bad;
		f = &m->fields[m->nfields];
		f->value = decode(eq + 1, fend);
		if (!f->value)
			goto bad;
		f->key = g_strndup(p, (gsize)(eq - p));
		m->nfields++;
		p = fend;
	}
	return 0;
bad:
	ctl_msg_clear(m);
	return -EPROTO;
}

const char *ctl_get(const struct ctl_msg *m, const char *key)
{
	for (unsigned i = 0; i < m->nfields; i++)
		if (!strcmp(m->fields[i].key, key))
			return m->fields[i].value;
	return NULL;
}

bool ctl_get_u64(const struct ctl_msg *m, const char *key, uint64_t def, uint64_t *out)
{
	const char *v = ctl_get(m, key);
	char *e;

	*out = def;
	if (!v)
		return true;
	if (!g_ascii_isdigit(*v)) /* no sign, no blank: strtoull takes both */
		return false;
	errno = 0;
	*out = g_ascii_strtoull(v, &e, 10);
	return !*e && !errno;
}

bool ctl_get_i64(const struct ctl_msg *m, const char *key, int64_t def, int64_t *out)
{
	const char *v = ctl_get(m, key);
	char *e;

	*out = def;
	if (!v)
		return true;
	if (!g_ascii_isdigit(v[v[0] == '-']))
		return false;
	errno = 0;
	*out = g_ascii_strtoll(v, &e, 10);
	return !*e && !errno;
}

void ctl_begin(GString *out, const char *word)
{
	g_string_append(out, word);
}

void ctl_add(GString *out, const char *key, const char *value)
{
	g_string_append_printf(out, " %s=", key);
	for (const unsigned char *c = (const unsigned char *)(value ? value : ""); *c; c++) {
		if (plain_byte(*c))
			g_string_append_c(out, (char)*c);
		else
			g_string_append_printf(out, "%%%02X", *c);
	}
}

void ctl_add_u64(GString *out, const char *key, uint64_t v)
{
	g_string_append_printf(out, " %s=%" G_GUINT64_FORMAT, key, v);
}

void ctl_add_i64(GString *out, const char *key, int64_t v)
{
	g_string_append_printf(out, " %s=%" G_GINT64_FORMAT, key, v);
}

void ctl_end(GString *out)
{
	g_string_append_c(out, '\n');
}

char *ctl_dir_for(uid_t uid)
{
	const char *xdg = getenv("XDG_RUNTIME_DIR"), *over = getenv(CTL_DIR_ENV);

	if (over && *over == '/')
		return g_strdup(over);
	if (uid == 0)
		return g_strdup(CTL_ROOT_DIR);
	if (xdg && *xdg == '/')
		return g_build_filename(xdg, "slowmedia", NULL);
	return g_strdup_printf("/run/user/%u/slowmedia", (unsigned)uid);
}

#define CTL_CONNECT_RETRY_MS 10 /* a full backlog: try again this often */

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int ctl_read_line(struct ctl_conn *c, char *out, int timeout_ms)
{
	int64_t deadline = timeout_ms < 0 ? INT64_MAX : mono_ms() + timeout_ms;

	for (;;) {
		char *nl = memchr(c->buf, '\n', c->have);
		struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
		int64_t left = deadline == INT64_MAX ? -1 : MAX(0, deadline - mono_ms());
		ssize_t n;

		if (nl) {
			size_t len = (size_t)(nl - c->buf);
			if (len >= CTL_LINE_MAX)
				return -EPROTO;
			memcpy(out, c->buf, len);
			out[len] = '\0';
			c->have -= len + 1;
			memmove(c->buf, nl + 1, c->have);
			return (int)len;
		}
		if (c->have >= CTL_LINE_MAX)
			return -EPROTO;
		n = poll(&pfd, 1, left > INT32_MAX ? INT32_MAX : (int)left);
		if (n < 0 && errno == EINTR)
			return -EINTR;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -ETIMEDOUT;
		n = read(c->fd, c->buf + c->have, sizeof(c->buf) - c->have);
		if (n < 0 && errno == EINTR)
			return -EINTR;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -ECONNRESET;
		c->have += (size_t)n;
	}
}

int ctl_inbuf_recv(struct ctl_inbuf *ib, int fd,
		   bool (*fn)(void *arg, const char *line, size_t len), void *arg)
{
	ssize_t n = recv(fd, ib->buf + ib->have, sizeof(ib->buf) - ib->have, MSG_DONTWAIT);
	char *nl;

	if (n < 0)
		return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? 1 : -errno;
	if (n == 0)
		return 0;
	ib->have += (size_t)n;
	while ((nl = memchr(ib->buf, '\n', ib->have))) {
		size_t len = (size_t)(nl - ib->buf);
		if (!fn(arg, ib->buf, len))
			return 1; /* ib may have been reset: not touched again */
		ib->have -= len + 1;
		memmove(ib->buf, nl + 1, ib->have);
	}
	return ib->have == sizeof(ib->buf) ? -EMSGSIZE : 1;
}

int ctl_outbuf_send(GString *out, int fd)
{
	while (out->len) {
		ssize_t n = send(fd, out->str, out->len, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		if (n <= 0)
			return n < 0 ? -errno : -EPIPE;
		g_string_erase(out, 0, n);
	}
	return 0;
}

int ctl_send(struct ctl_conn *c, const char *line)
{
	size_t len = strlen(line), done = 0;

	while (done < len) {
		ssize_t n = send(c->fd, line + done, len - done, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		done += (size_t)n;
	}
	return 0;
}

int ctl_connect(struct ctl_conn *c, const char *path, int timeout_ms)
{
	return ctl_connect_word(c, path, "slowmedia-ctl", CTL_VERSION, timeout_ms);
}

int ctl_connect_sock(struct ctl_conn *c, const char *path, int timeout_ms)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int64_t deadline = mono_ms() + MAX(timeout_ms, 0);
	int r;

	memset(c, 0, sizeof(*c));
	c->fd = -1;
	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (c->fd < 0)
		return -errno;
	while (connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		r = -errno;
		if (r == -EINTR)
			continue;
		if (r == -EAGAIN && mono_ms() < deadline) {
			usleep(CTL_CONNECT_RETRY_MS * 1000);
			continue;
		}
		ctl_close(c);
		return r == -EAGAIN ? -EHOSTDOWN : r;
	}
	if (fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) & ~O_NONBLOCK) < 0) {
		r = -errno;
		ctl_close(c);
		return r;
	}
	return 0;
}

int ctl_connect_word(struct ctl_conn *c, const char *path, const char *word, unsigned want,
		     int timeout_ms)
{
	int64_t deadline = mono_ms() + MAX(timeout_ms, 0);
	char line[CTL_LINE_MAX + 1];
	struct ctl_msg m;
	uint64_t version = 0, pid = 0;
	int r = ctl_connect_sock(c, path, timeout_ms);

	if (r < 0)
		return r;
	r = ctl_read_line(c, line, timeout_ms < 0 ? -1 : (int)MAX(0, deadline - mono_ms()));
	if (r < 0)
		goto fail;
	r = ctl_parse(line, (size_t)r, &m);
	if (r == 0 && (strcmp(m.word, word) || !ctl_get_u64(&m, "version", 0, &version) ||
		       version != want || !ctl_get(&m, "pid") || !ctl_get_u64(&m, "pid", 0, &pid)))
		r = -EPROTO;
	ctl_msg_clear(&m);
	if (r < 0)
		goto fail;
	c->pid = (pid_t)pid;
	return 0;
fail:
	ctl_close(c);
	return r;
}

void ctl_close(struct ctl_conn *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	c->have = 0;
}

static void add_sockets(GPtrArray *out, const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d))) {
		size_t n = strlen(e->d_name);
		if (g_str_has_prefix(e->d_name, CTL_SOCKET_PREFIX) &&
		    n > strlen(CTL_SOCKET_PREFIX) + strlen(CTL_SOCKET_SUFFIX) &&
		    g_str_has_suffix(e->d_name, CTL_SOCKET_SUFFIX))
			g_ptr_array_add(out, g_build_filename(dir, e->d_name, NULL));
	}
	closedir(d);
}

static gint cmp_paths(gconstpointer a, gconstpointer b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

GPtrArray *ctl_list_sockets(void)
{
	GPtrArray *out = g_ptr_array_new_with_free_func(g_free);
	g_autofree char *mine = ctl_dir_for(geteuid());

	add_sockets(out, mine);
	if (geteuid() == 0 && !getenv(CTL_DIR_ENV)) {
		DIR *d = opendir("/run/user");
		struct dirent *e;
		const char *xdg = getenv("XDG_RUNTIME_DIR");

		if (xdg && *xdg == '/') {
			g_autofree char *x = g_build_filename(xdg, "slowmedia", NULL);
			if (strcmp(x, mine))
				add_sockets(out, x);
		}
		while (d && (e = readdir(d))) {
			if (e->d_name[0] == '.')
				continue;
			g_autofree char *u = g_build_filename("/run/user", e->d_name, "slowmedia", NULL);
			add_sockets(out, u);
		}
		if (d)
			closedir(d);
	}
	g_ptr_array_sort(out, cmp_paths);
	for (guint i = 1; i < out->len;) /* a directory reached twice */
		if (!strcmp(out->pdata[i], out->pdata[i - 1]))
			g_ptr_array_remove_index(out, i);
		else
			i++;
	return out;
}
