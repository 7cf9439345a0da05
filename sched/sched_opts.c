/*
 * DESIGN: option parsing for the scheduler keys. Pure functions, no I/O, so the
 * unit tests can feed every kind of bad value. Every problem is appended to an
 * error list instead of failing fast: the daemon reports them all at once and
 * mounts nothing.
 */
#include "sched_opts.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sched_opts_init(struct sched_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->prio = SCHED_PRIO_DEFAULT;
	o->io_class = SCHED_CLASS_BE;
	o->weight = SCHED_WEIGHT_DEFAULT;
	o->queue_bytes = SCHED_QUEUE_DEFAULT_BYTES;
	o->latency_ms = SCHED_LATENCY_DEFAULT_MS;
	o->read_grace_ms = SCHED_READ_GRACE_DEFAULT_MS;
	o->spool_sync_ms = SCHED_SPOOL_SYNC_DEFAULT_MS;
	o->drain_timeout_s = SCHED_DRAIN_TIMEOUT_DEFAULT_S;
	o->flushers = SCHED_FLUSHERS_DEFAULT;
	o->arbiter = g_strdup("auto");
}

void sched_opts_free(struct sched_opts *o)
{
	g_free(o->group);
	g_free(o->spool_dir);
	g_free(o->rescue_dir);
	g_free(o->arbiter);
	if (o->no_effect)
		g_ptr_array_unref(o->no_effect);
	memset(o, 0, sizeof(*o));
}

int sm_parse_size(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;
	unsigned shift = 0;

	if (!s || !isdigit((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno == ERANGE)
		return -ERANGE;
	switch (*end) {
	case '\0':
		break;
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	case 't': case 'T': shift = 40; end++; break;
	default:
		return -EINVAL;
	}
	/* Allow "64MiB" and "64MB" as spellings of the same binary size. */
	if (shift && (strcmp(end, "iB") == 0 || strcmp(end, "B") == 0))
		end += strlen(end);
	if (*end)
		return -EINVAL;
	if (shift && v > (UINT64_MAX >> shift))
		return -ERANGE;
	*out = (uint64_t)v << shift;
	return 0;
}

int sm_parse_uint(const char *s, unsigned lo, unsigned hi, unsigned *out)
{
	char *end;
	unsigned long v;

	if (!s || !isdigit((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	v = strtoul(s, &end, 10);
	if (*end)
		return -EINVAL;
	if (errno == ERANGE || v < lo || v > hi)
		return -ERANGE;
	*out = (unsigned)v;
	return 0;
}

static void add_err(GPtrArray *errors, const char *fmt, ...) G_GNUC_PRINTF(2, 3);
static void add_err(GPtrArray *errors, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	g_ptr_array_add(errors, g_strdup_vprintf(fmt, ap));
	va_end(ap);
}

static void uint_opt(const char *key, const char *val, unsigned lo, unsigned hi,
		     unsigned *out, GPtrArray *errors)
{
	if (sm_parse_uint(val, lo, hi, out) < 0)
		add_err(errors, "%s=%s: expected a whole number from %u to %u", key, val,
			lo, hi);
}

static void size_opt(const char *key, const char *val, uint64_t lo, uint64_t hi,
		     uint64_t *out, GPtrArray *errors)
{
	uint64_t v;

	if (sm_parse_size(val, &v) < 0 || v < lo || v > hi) {
		add_err(errors,
			"%s=%s: expected a size from %" G_GUINT64_FORMAT
			" to %" G_GUINT64_FORMAT " bytes (suffixes K, M, G, T)",
			key, val, lo, hi);
		return;
	}
	*out = v;
}

static bool valid_group_name(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > SCHED_GROUP_NAME_MAX)
		return false;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && !strchr("_.:-", *s))
			return false;
	return true;
}

static void path_opt(const char *key, const char *val, char **out, GPtrArray *errors)
{
	if (val[0] != '/') {
		add_err(errors, "%s=%s: expected an absolute path", key, val);
		return;
	}
	g_free(*out);
	*out = g_strdup(val);
}

/* Keys that do nothing with arbiter=off (sched_opts_warn_no_effect says). */
static const char *const no_effect_keys[] = {"prio", "class", "weight", "group", NULL};

static bool has_key(const char *opt, const char *key)
{
	size_t n = strlen(key);

	return strncmp(opt, key, n) == 0 && opt[n] == '=';
}

/* Remember the option as given, the last one of each key, for the warning. */
static void note_no_effect(struct sched_opts *o, const char *key, const char *opt)
{
	if (!g_strv_contains(no_effect_keys, key))
		return;
	if (!o->no_effect)
		o->no_effect = g_ptr_array_new_with_free_func(g_free);
	for (guint i = 0; i < o->no_effect->len; i++)
		if (has_key(o->no_effect->pdata[i], key))
			g_ptr_array_remove_index(o->no_effect, i--);
	g_ptr_array_add(o->no_effect, g_strdup(opt));
}

void sched_opts_warn_no_effect(const struct sched_opts *o, GPtrArray *warnings)
{
	for (guint i = 0; o->no_effect && i < o->no_effect->len; i++) {
		const char *opt = o->no_effect->pdata[i];

		if (o->arbiter && !strcmp(o->arbiter, "off") && !has_key(opt, "arbiter"))
			add_err(warnings, "%s has no effect with arbiter=off: this mount paces itself alone",
				opt);
	}
}

int sched_opts_handle(struct sched_opts *o, const char *opt, GPtrArray *errors)
{
	const char *eq = strchr(opt, '=');
	g_autofree char *key = eq ? g_strndup(opt, eq - opt) : g_strdup(opt);
	const char *val = eq ? eq + 1 : NULL;
	static const char *const valued[] = {
		"prio", "class", "weight", "group", "rate", "queue", "spool", "spool_max",
		"spool_sync", "drain_timeout", "rescue", "latency", "read_grace", "flushers", "arbiter", NULL};

	if (strcmp(key, "sync_close") == 0) {
		if (val)
			add_err(errors, "sync_close takes no value (got '%s')", val);
		o->sync_close = true;
		return 1;
	}
	if (!g_strv_contains(valued, key))
		return 0;
	if (!val && strcmp(key, "group") == 0)
		return 0; /* bare "group" is an fstab key (mount by group members) */
	if (!val || !*val) {
		add_err(errors, "%s: needs a value (%s=...)", key, key);
		return 1;
	}
	note_no_effect(o, key, opt);

	if (strcmp(key, "prio") == 0) {
		uint_opt(key, val, 0, SCHED_PRIO_MAX, &o->prio, errors);
	} else if (strcmp(key, "class") == 0) {
		if (strcmp(val, "be") == 0)
			o->io_class = SCHED_CLASS_BE;
		else if (strcmp(val, "idle") == 0)
			o->io_class = SCHED_CLASS_IDLE;
		else
			add_err(errors, "class=%s: expected 'be' or 'idle'", val);
	} else if (strcmp(key, "weight") == 0) {
		uint_opt(key, val, 1, SCHED_WEIGHT_MAX, &o->weight, errors);
	} else if (strcmp(key, "group") == 0) {
		if (!valid_group_name(val)) {
			add_err(errors,
				"group=%s: expected 1-%d characters of letters, digits, "
				"'_', '.', ':' or '-'",
				val, SCHED_GROUP_NAME_MAX);
		} else {
			g_free(o->group);
			o->group = g_strdup(val);
		}
	} else if (strcmp(key, "rate") == 0) {
		size_opt(key, val, SCHED_RATE_MIN_BPS, UINT64_MAX >> 1, &o->rate_bps,
			 errors);
	} else if (strcmp(key, "queue") == 0) {
		size_opt(key, val, SCHED_QUEUE_MIN_BYTES, SCHED_QUEUE_MAX_BYTES,
			 &o->queue_bytes, errors);
	} else if (strcmp(key, "spool") == 0) {
		path_opt(key, val, &o->spool_dir, errors);
	} else if (strcmp(key, "spool_max") == 0) {
		size_opt(key, val, SCHED_QUEUE_MIN_BYTES, UINT64_MAX >> 1,
			 &o->spool_max_bytes, errors);
	} else if (strcmp(key, "drain_timeout") == 0) {
		uint_opt(key, val, 1, SCHED_DRAIN_TIMEOUT_MAX_S, &o->drain_timeout_s, errors);
	} else if (strcmp(key, "rescue") == 0) {
		path_opt(key, val, &o->rescue_dir, errors);
	} else if (strcmp(key, "spool_sync") == 0) {
		uint_opt(key, val, 0, SCHED_SPOOL_SYNC_MAX_MS, &o->spool_sync_ms, errors);
		o->spool_sync_given = true;
	} else if (strcmp(key, "latency") == 0) {
		uint_opt(key, val, 1, SCHED_LATENCY_MAX_MS, &o->latency_ms, errors);
	} else if (strcmp(key, "read_grace") == 0) {
		uint_opt(key, val, 0, SCHED_READ_GRACE_MAX_MS, &o->read_grace_ms, errors);
	} else if (strcmp(key, "flushers") == 0) {
		uint_opt(key, val, 1, SCHED_FLUSHERS_MAX, &o->flushers, errors);
	} else if (strcmp(key, "arbiter") == 0) {
		if (strcmp(val, "auto") == 0 || strcmp(val, "off") == 0) {
			g_free(o->arbiter);
			o->arbiter = g_strdup(val);
		} else {
			path_opt(key, val, &o->arbiter, errors);
		}
	}
	return 1;
}

void sched_opts_finish(struct sched_opts *o, GPtrArray *errors)
{
	if (o->spool_max_bytes && !o->spool_dir)
		add_err(errors, "spool_max= needs spool=DIR");
	if (o->spool_sync_given && !o->spool_dir)
		add_err(errors, "spool_sync= needs spool=DIR");
}

/* A size as an option would spell it: the largest binary suffix it is a
 * whole multiple of. */
static char *size_str(uint64_t v)
{
	static const char suffix[] = "TGMK";

	for (int i = 0; i < 4; i++) {
		unsigned shift = 10 * (4 - i);
		if (v && v % (1ull << shift) == 0)
			return g_strdup_printf("%" G_GUINT64_FORMAT "%c", v >> shift, suffix[i]);
	}
	return g_strdup_printf("%" G_GUINT64_FORMAT, v);
}

void sched_opts_check_memory(const struct sched_opts *o, uint64_t mem_available,
			     GPtrArray *errors)
{
	uint64_t limit = mem_available / SCHED_QUEUE_MEM_DIV;
	g_autofree char *val = NULL, *avail = NULL, *max = NULL;

	if (!mem_available || o->queue_bytes <= limit)
		return;
	val = size_str(o->queue_bytes);
	avail = size_str(mem_available / (1u << 20) * (1u << 20));
	/* Rounded down to whole MiB: a value the user can copy. */
	max = size_str(MAX(limit / (1u << 20) * (1u << 20), 1));
	add_err(errors,
		"queue=%s: more than 1/%d of the memory available (MemAvailable %s); "
		"at most queue=%s on this machine now",
		val, SCHED_QUEUE_MEM_DIV, avail, max);
}

int sched_parse_meminfo(const char *meminfo, uint64_t *bytes)
{
	static const char key[] = "MemAvailable:";
	const char *p = meminfo;
	unsigned long long kib;

	while (p && *p) {
		if (strncmp(p, key, sizeof(key) - 1) == 0 &&
		    sscanf(p + sizeof(key) - 1, " %llu kB", &kib) == 1) {
			*bytes = (uint64_t)kib << 10;
			return 0;
		}
		p = strchr(p, '\n');
		if (p)
			p++;
	}
	return -ENOENT;
}

const char *sched_opts_help(void)
{
	return "slowmedia options:\n"
	       "    -o prio=0..7           flush priority among the mounts of a group, 0\n"
	       "                           highest (4; only root may take 0..3)\n"
	       "    -o class=be|idle       idle flushes only when the group is quiet (be)\n"
	       "    -o weight=N            share within one prio, 1..10000 (100)\n"
	       "    -o group=NAME          mounts sharing one bus/head: one chunk in\n"
	       "                           flight at a time (the lower's whole disk)\n"
	       "    -o rate=SIZE           cap on flush bandwidth, bytes/s (none)\n"
	       "    -o queue=SIZE          memory for queued data (64M; at most half of\n"
	       "                           MemAvailable)\n"
	       "    -o spool=DIR           journal queued writes in DIR on a fast disk:\n"
	       "                           they survive a crash or a yanked medium and\n"
	       "                           are replayed at its next mount (off)\n"
	       "    -o spool_max=SIZE      writers wait while the spool holds this (4G), not\n"
	       "                           at queue= (big writes are kept in it alone)\n"
	       "    -o spool_sync=MS       fdatasync of the journal at most MS after a\n"
	       "                           write; 0: before every answer (100)\n"
	       "    -o drain_timeout=S     at exit, give up on a medium that takes nothing\n"
	       "                           for S s (or at a second SIGTERM): the data left\n"
	       "                           stays in the spool, else goes to the rescue\n"
	       "                           directory (60)\n"
	       "    -o rescue=DIR          the rescue directory (/var/lib/slowmedia/rescue)\n"
	       "    -o latency=MS          longest delay a read may see from one chunk (100)\n"
	       "    -o read_grace=MS       quiet time after reads before flushing (20)\n"
	       "    -o flushers=N          flusher threads (1)\n"
	       "    -o sync_close          close() waits for the file's data\n"
	       "    -o arbiter=auto|off|PATH  the shared arbiter's socket; auto: the default\n"
	       "                           one, started if absent; off: pace alone (auto)\n";
}
