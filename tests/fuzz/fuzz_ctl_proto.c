/*
 * Fuzz target: the control/arbiter line codec (sched/ctl_proto.c).
 *
 * Each input is used two ways:
 *  1. as one line for ctl_parse (as the daemons get it: the bytes before the
 *     '\n'), compared with a second, independent reading of the grammar in
 *     ctl_proto.h (a word of [a-z0-9_-], then ' key=value' fields, keys of
 *     [a-z0-9_], %XX escapes in values, at most CTL_FIELDS_MAX fields,
 *     shorter than CTL_LINE_MAX). An accepted line is
 *     built again with ctl_begin/ctl_add/ctl_end: the new line must be clean
 *     on the wire (printable bytes only), no longer, parse back to the same
 *     word and fields, and build to the same bytes a second time. Every
 *     field also goes through ctl_get_u64/ctl_get_i64, which must take
 *     exactly the decimal numbers in range ([0-9]+ and -?[0-9]+);
 *  2. as values: the input cut at every 0xff byte is the values of a line
 *     built with ctl_add (keys k0, k1...) and ctl_add_u64/i64, which must
 *     parse back to the same values, or be refused exactly when the line is
 *     too long or has too many fields.
 */
#include <errno.h>
#include <string.h>

#include "ctl_proto.h"
#include "fuzz.h"

#define INPUT_MAX (4 * CTL_LINE_MAX)

const char *const fuzz_driver_tokens[] = {
	" ", "=", "%", "%20", "%00", "%0A", "%25", "%3D", "%ff", "%FF", "%g", "%2", "-", "_",
	"status", "register", "request", "done", "reads", "ping", "pong", "set", "pause",
	"resume", "ok", "error", "mount", "drain", "progress", "slowmedia-ctl",
	"slowmedia-arbiter", " version=1", " pid=", " id=", " group=", " prio=", " class=",
	" weight=", " rate=", " bytes=", " urgent=", " active=", " code=EPROTO", " msg=",
	" mountpoint=", "0", "1", "-1", "+1", "18446744073709551615", "18446744073709551616",
	"9223372036854775807", "9223372036854775808", "-9223372036854775808",
	"-9223372036854775809", "00000000000000000000001", "\t", "\n", "\x7f", "\x80", NULL};

static bool key_char(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
}

static bool word_char(unsigned char c)
{
	return key_char(c) || c == '-';
}

static int hexval(unsigned char c)
{
	const char *h = "0123456789abcdef", *H = "0123456789ABCDEF", *p;

	if (c && (p = strchr(h, c)))
		return (int)(p - h);
	if (c && (p = strchr(H, c)))
		return (int)(p - H);
	return -1;
}

struct ref_field {
	GString *key, *value; /* value as decoded, NUL bytes and all */
};

/* The grammar of ctl_proto.h, read again: true and the fields, or false. */
static bool ref_parse(const char *s, size_t len, GString **word, struct ref_field *f,
		      unsigned *nf)
{
	size_t i = 0, start;

	*nf = 0;
	*word = NULL;
	if (len >= CTL_LINE_MAX)
		return false;
	for (start = i; i < len && s[i] != ' '; i++)
		if (!word_char((unsigned char)s[i]))
			return false;
	if (i == start)
		return false;
	*word = g_string_new_len(s + start, (gssize)(i - start));
	while (i < len) { /* s[i] == ' ' */
		struct ref_field *x;
		i++;
		if (*nf == CTL_FIELDS_MAX)
			return false;
		x = &f[(*nf)++];
		x->key = g_string_new(NULL);
		x->value = g_string_new(NULL);
		for (; i < len && s[i] != '=' && s[i] != ' '; i++) {
			if (!key_char((unsigned char)s[i]))
				return false;
			g_string_append_c(x->key, s[i]);
		}
		if (!x->key->len || i == len || s[i] != '=')
			return false;
		for (i++; i < len && s[i] != ' '; i++) {
			unsigned char c = (unsigned char)s[i];
			if (c == '%') {
				int hi = i + 1 < len ? hexval((unsigned char)s[i + 1]) : -1;
				int lo = i + 2 < len ? hexval((unsigned char)s[i + 2]) : -1;
				if (hi < 0 || lo < 0)
					return false;
				g_string_append_c(x->value, (char)(hi * 16 + lo));
				i += 2;
			} else if (c > 0x20 && c < 0x7f && c != '=') {
				g_string_append_c(x->value, (char)c);
			} else {
				return false;
			}
		}
	}
	return true;
}

static void ref_free(GString *word, struct ref_field *f, unsigned nf)
{
	if (word)
		g_string_free(word, TRUE);
	for (unsigned i = 0; i < nf; i++) {
		g_string_free(f[i].key, TRUE);
		g_string_free(f[i].value, TRUE);
	}
}

/* What ctl_get_u64/i64 must make of v: the digits-only reading. */
static bool ref_number(const char *v, bool is_signed, uint64_t *u, int64_t *s)
{
	bool neg = is_signed && *v == '-';
	const char *p = v + neg;
	uint64_t x = 0;

	if (!*p)
		return false;
	for (; *p; p++) {
		unsigned d = (unsigned)(*p - '0');
		if (*p < '0' || *p > '9' || x > (UINT64_MAX - d) / 10)
			return false;
		x = x * 10 + d;
	}
	if (!is_signed) {
		*u = x;
		return true;
	}
	if (neg ? x > (uint64_t)INT64_MAX + 1 : x > (uint64_t)INT64_MAX)
		return false;
	*s = neg ? (int64_t)(0 - x) : (int64_t)x;
	return true;
}

static void check_numbers(const struct ctl_msg *m, const char *key)
{
	const char *v = ctl_get(m, key);
	uint64_t u = 0, uref = 0;
	int64_t s = 0, sref = 0;
	bool ok = ctl_get_u64(m, key, 7, &u), want = ref_number(v, false, &uref, &sref);

	FUZZ_CHECK(ok == want, "ctl_get_u64('%s') %s it", v, ok ? "accepts" : "refuses");
	FUZZ_CHECK(!ok || u == uref, "ctl_get_u64('%s') = %llu", v, (unsigned long long)u);
	ok = ctl_get_i64(m, key, -7, &s);
	want = ref_number(v, true, &uref, &sref);
	FUZZ_CHECK(ok == want, "ctl_get_i64('%s') %s it", v, ok ? "accepts" : "refuses");
	FUZZ_CHECK(!ok || s == sref, "ctl_get_i64('%s') = %lld", v, (long long)s);
}

/* The bytes ctl_add may put on the wire: printable, no '=' or '%' but escapes. */
static void check_clean(const GString *line)
{
	FUZZ_CHECK(line->len && line->str[line->len - 1] == '\n', "a built line to end in '\\n'");
	for (gsize i = 0; i + 1 < line->len; i++) {
		unsigned char c = (unsigned char)line->str[i];
		FUZZ_CHECK(c >= 0x20 && c < 0x7f, "no raw byte %#x on the wire", c);
	}
}

static GString *build(const struct ctl_msg *m)
{
	GString *out = g_string_new(NULL);

	ctl_begin(out, m->word);
	for (unsigned i = 0; i < m->nfields; i++)
		ctl_add(out, m->fields[i].key, m->fields[i].value);
	ctl_end(out);
	return out;
}

static void same_msg(const struct ctl_msg *a, const struct ctl_msg *b)
{
	FUZZ_CHECK(!strcmp(a->word, b->word), "word '%s' back, not '%s'", b->word, a->word);
	FUZZ_CHECK(a->nfields == b->nfields, "%u fields back, not %u", b->nfields, a->nfields);
	for (unsigned i = 0; i < a->nfields; i++) {
		FUZZ_CHECK(!strcmp(a->fields[i].key, b->fields[i].key), "key %u", i);
		FUZZ_CHECK(!strcmp(a->fields[i].value, b->fields[i].value), "value of %s",
			   a->fields[i].key);
	}
}

static void as_line(const uint8_t *data, size_t size)
{
	struct ctl_msg m, back;
	struct ref_field rf[CTL_FIELDS_MAX];
	GString *word, *line, *again;
	unsigned nf;
	bool want = ref_parse((const char *)data, size, &word, rf, &nf);
	int r = ctl_parse((const char *)data, size, &m);

	FUZZ_CHECK(r == 0 || r == -EPROTO, "ctl_parse = %d", r);
	FUZZ_CHECK((r == 0) == want, "ctl_parse %s a line the grammar %s", r ? "refuses" : "accepts",
		   want ? "allows" : "forbids");
	if (r) {
		FUZZ_CHECK(!m.word && !m.nfields, "a refused line leaves no fields");
		ref_free(word, rf, nf);
		ctl_msg_clear(&m);
		return;
	}
	FUZZ_CHECK(m.nfields == nf && m.nfields <= CTL_FIELDS_MAX, "%u fields, not %u", m.nfields, nf);
	FUZZ_CHECK(!strcmp(m.word, word->str) && strlen(m.word) == word->len, "word '%s'", m.word);
	for (unsigned i = 0; i < nf; i++) {
		FUZZ_CHECK(!strcmp(m.fields[i].key, rf[i].key->str), "key '%s'", m.fields[i].key);
		/* The decoded value is cut at its first NUL (%00). */
		FUZZ_CHECK(!strcmp(m.fields[i].value, rf[i].value->str), "value of '%s'",
			   m.fields[i].key);
		FUZZ_CHECK(ctl_get(&m, m.fields[i].key), "ctl_get finds '%s'", m.fields[i].key);
		check_numbers(&m, m.fields[i].key);
	}
	ref_free(word, rf, nf);

	line = build(&m);
	check_clean(line);
	FUZZ_CHECK(line->len - 1 <= size, "a rebuilt line no longer than the original (%zu > %zu)",
		   (size_t)line->len - 1, size);
	r = ctl_parse(line->str, line->len - 1, &back);
	FUZZ_CHECK(r == 0, "the rebuilt line '%s' parses", line->str);
	same_msg(&m, &back);
	again = build(&back);
	FUZZ_CHECK(again->len == line->len && !memcmp(again->str, line->str, line->len),
		   "building twice gives the same line");
	g_string_free(again, TRUE);
	g_string_free(line, TRUE);
	ctl_msg_clear(&back);
	ctl_msg_clear(&m);
}

static void as_values(const uint8_t *data, size_t size)
{
	GString *line = g_string_new(NULL);
	GPtrArray *vals = g_ptr_array_new_with_free_func(g_free);
	uint64_t u = 0, got_u;
	int64_t s, got_s;
	struct ctl_msg m;
	size_t start = 0;
	int r;

	for (size_t i = 0; i <= size; i++)
		if (i == size || data[i] == 0xff) {
			/* As a C string, the way ctl_add takes it. */
			g_ptr_array_add(vals, g_strndup((const char *)data + start, i - start));
			start = i + 1;
		}
	for (size_t i = 0; i < 8 && i < size; i++)
		u = u << 8 | data[i];
	s = (int64_t)u;
	ctl_begin(line, "v");
	ctl_add_u64(line, "u", u);
	ctl_add_i64(line, "s", s);
	for (guint i = 0; i < vals->len; i++) {
		char key[16];
		snprintf(key, sizeof(key), "k%u", i);
		ctl_add(line, key, vals->pdata[i]);
	}
	ctl_end(line);
	check_clean(line);
	r = ctl_parse(line->str, line->len - 1, &m);
	if (line->len - 1 >= CTL_LINE_MAX || vals->len + 2 > CTL_FIELDS_MAX) {
		FUZZ_CHECK(r == -EPROTO, "a line of %zu bytes and %u fields refused",
			   (size_t)line->len - 1, vals->len + 2);
	} else {
		FUZZ_CHECK(r == 0, "a built line parses: '%s'", line->str);
		FUZZ_CHECK(m.nfields == vals->len + 2, "%u fields", m.nfields);
		FUZZ_CHECK(ctl_get_u64(&m, "u", 0, &got_u) && got_u == u, "u64 %llu round trip",
			   (unsigned long long)u);
		FUZZ_CHECK(ctl_get_i64(&m, "s", 0, &got_s) && got_s == s, "i64 %lld round trip",
			   (long long)s);
		for (guint i = 0; i < vals->len; i++)
			FUZZ_CHECK(!strcmp(m.fields[i + 2].value, vals->pdata[i]), "value %u back", i);
	}
	ctl_msg_clear(&m);
	g_ptr_array_unref(vals);
	g_string_free(line, TRUE);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > INPUT_MAX)
		return 0;
	as_line(data, size);
	as_values(data, size);
	return 0;
}
