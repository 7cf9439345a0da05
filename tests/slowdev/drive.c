/*
 * The drive model and the ctl language; see drive.h. Nothing here sleeps,
 * reads a clock or touches a file.
 */
#include "drive.h"

#include <errno.h>
#include <string.h>

/* A decimal "12.345" may carry this many fraction digits at most. */
#define SD_MAX_FRAC_DIGITS 9
/* Longest seek time accepted: one minute. */
#define SD_SEEK_MAX_NS (60 * SD_NS_PER_SEC)

struct sd_profile {
	const char *name;
	struct sd_params p;
};

static const struct sd_profile sd_profiles[] = {
    {"dvdram", {.read_bw = 4000000, .write_bw = 2000000, .seek_ns = 80 * SD_NS_PER_MS}},
    {"zip", {.read_bw = 1000000, .write_bw = 1000000, .seek_ns = 30 * SD_NS_PER_MS}},
    {"mo", {.read_bw = 4000000, .write_bw = 2000000, .seek_ns = 40 * SD_NS_PER_MS}},
    {"usbstick", {.read_bw = 20000000, .write_bw = 5000000, .seek_ns = 0}},
};

static const uint64_t pow10_tab[] = {
    1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000, 1000000000,
};

/*
 * "123" or "123.456" at *p: the digits as one integer and the number of
 * fraction digits, so the value is mant / 10^frac. Advances *p.
 */
static int parse_decimal(const char **p, unsigned max_frac, uint64_t *mant,
			 unsigned *frac)
{
	const char *s = *p;
	uint64_t m = 0;
	unsigned nint = 0, nfrac = 0;

	for (; g_ascii_isdigit(*s); s++, nint++)
		if (__builtin_mul_overflow(m, 10, &m) ||
		    __builtin_add_overflow(m, *s - '0', &m))
			return -ERANGE;
	if (*s == '.') {
		for (s++; g_ascii_isdigit(*s); s++, nfrac++) {
			if (nfrac == max_frac)
				return -EINVAL;
			if (__builtin_mul_overflow(m, 10, &m) ||
			    __builtin_add_overflow(m, *s - '0', &m))
				return -ERANGE;
		}
		if (nfrac == 0)
			return -EINVAL;
	}
	if (nint == 0)
		return -EINVAL;
	*p = s;
	*mant = m;
	*frac = nfrac;
	return 0;
}

/* mant / 10^frac * unit, which must be a whole number. */
static int scale_decimal(uint64_t mant, unsigned frac, uint64_t unit, uint64_t *out)
{
	unsigned __int128 v = (unsigned __int128)mant * unit;

	if (v % pow10_tab[frac])
		return -EINVAL;
	v /= pow10_tab[frac];
	if (v > UINT64_MAX)
		return -ERANGE;
	*out = (uint64_t)v;
	return 0;
}

/* "", "K", "M", "G", "T", each optionally followed by "i" (binary), then "B". */
static int parse_unit(const char *s, uint64_t *unit)
{
	static const char prefixes[] = "kmgt";
	const char *pos;
	uint64_t u = 1;

	if (*s && (pos = strchr(prefixes, g_ascii_tolower(*s)))) {
		unsigned exp = (unsigned)(pos - prefixes) + 1;
		bool binary = s[1] == 'i';

		for (unsigned i = 0; i < exp; i++)
			u *= binary ? 1024 : 1000;
		s += binary ? 2 : 1;
	}
	if (*s == 'B')
		s++;
	if (*s)
		return -EINVAL;
	*unit = u;
	return 0;
}

int sd_parse_size(const char *s, uint64_t *out)
{
	uint64_t mant, unit;
	unsigned frac;
	int r;

	if (!s)
		return -EINVAL;
	r = parse_decimal(&s, SD_MAX_FRAC_DIGITS, &mant, &frac);
	if (r < 0)
		return r;
	r = parse_unit(s, &unit);
	if (r < 0)
		return r;
	return scale_decimal(mant, frac, unit, out);
}

static int parse_time(const char *s, uint64_t unit_ns, uint64_t max_ns, uint64_t *ns_out)
{
	uint64_t mant, ns;
	unsigned frac;
	int r;

	if (!s)
		return -EINVAL;
	r = parse_decimal(&s, SD_MAX_FRAC_DIGITS, &mant, &frac);
	if (r < 0)
		return r;
	if (*s)
		return -EINVAL;
	r = scale_decimal(mant, frac, unit_ns, &ns);
	if (r < 0)
		return r;
	if (ns > max_ns)
		return -ERANGE;
	*ns_out = ns;
	return 0;
}

int sd_parse_ms(const char *s, uint64_t *ns_out)
{
	return parse_time(s, SD_NS_PER_MS, SD_SEEK_MAX_NS, ns_out);
}

int sd_parse_seconds(const char *s, uint64_t *ns_out)
{
	return parse_time(s, SD_NS_PER_SEC, SD_STALL_MAX_NS, ns_out);
}

int sd_profile_get(const char *name, struct sd_params *p)
{
	for (size_t i = 0; i < G_N_ELEMENTS(sd_profiles); i++) {
		if (name && strcmp(name, sd_profiles[i].name) == 0) {
			*p = sd_profiles[i].p;
			return 0;
		}
	}
	return -EINVAL;
}

const char *sd_profile_names(void)
{
	return "dvdram, zip, mo, usbstick";
}

/* A bandwidth: a size greater than zero. */
static int parse_bw(const char *s, uint64_t *out)
{
	int r = sd_parse_size(s, out);

	if (r == 0 && *out == 0)
		return -EINVAL;
	return r;
}

static int parse_set(char **argv, struct sd_cmd *cmd, char **why)
{
	if (!argv[0]) {
		*why = g_strdup("set needs write_bw=SIZE, read_bw=SIZE or seek_ms=N");
		return -EINVAL;
	}
	for (; *argv; argv++) {
		const char *eq = strchr(*argv, '=');
		g_autofree char *key = eq ? g_strndup(*argv, (gsize)(eq - *argv)) : NULL;
		int r;

		if (!eq) {
			r = -EINVAL;
		} else if (strcmp(key, "write_bw") == 0) {
			r = parse_bw(eq + 1, &cmd->p.write_bw);
			cmd->set_mask |= SD_SET_WRITE_BW;
		} else if (strcmp(key, "read_bw") == 0) {
			r = parse_bw(eq + 1, &cmd->p.read_bw);
			cmd->set_mask |= SD_SET_READ_BW;
		} else if (strcmp(key, "seek_ms") == 0) {
			r = sd_parse_ms(eq + 1, &cmd->p.seek_ns);
			cmd->set_mask |= SD_SET_SEEK;
		} else {
			*why = g_strdup_printf("set: unknown parameter '%s'", key);
			return -EINVAL;
		}
		if (r < 0) {
			*why = g_strdup_printf("set: bad value in '%s'", *argv);
			return -EINVAL;
		}
	}
	return 0;
}

static int parse_fail(char **argv, struct sd_cmd *cmd, char **why)
{
	static const char *const kinds[] = {"read", "write", "any"};
	struct sd_fault *f = &cmd->fault;
	size_t k;

	if (g_strv_length(argv) != 3)
		goto usage;
	for (k = 0; k < G_N_ELEMENTS(kinds); k++)
		if (strcmp(argv[0], kinds[k]) == 0)
			break;
	if (k == G_N_ELEMENTS(kinds))
		goto usage;
	f->kind = (enum sd_fail_kind)k;
	if (sd_parse_size(argv[1], &f->start) < 0 ||
	    sd_parse_size(argv[2], &f->end) < 0 || f->end <= f->start) {
		*why = g_strdup("fail: need byte offsets START < END");
		return -EINVAL;
	}
	return 0;
usage:
	*why = g_strdup("usage: fail read|write|any START END");
	return -EINVAL;
}

static int parse_args(const char *verb, char **argv, struct sd_cmd *cmd, char **why)
{
	if (strcmp(verb, "fast") == 0) {
		cmd->kind = SD_CMD_FAST;
		if (g_strv_length(argv) == 1 && strcmp(argv[0], "on") == 0)
			cmd->on = true;
		else if (g_strv_length(argv) == 1 && strcmp(argv[0], "off") == 0)
			cmd->on = false;
		else
			goto bad_usage;
		return 0;
	}
	if (strcmp(verb, "fail") == 0) {
		cmd->kind = SD_CMD_FAIL;
		return parse_fail(argv, cmd, why);
	}
	if (strcmp(verb, "stall") == 0) {
		cmd->kind = SD_CMD_STALL;
		if (g_strv_length(argv) != 1 ||
		    sd_parse_seconds(argv[0], &cmd->stall_ns) < 0)
			goto bad_usage;
		return 0;
	}
	if (strcmp(verb, "set") == 0) {
		cmd->kind = SD_CMD_SET;
		return parse_set(argv, cmd, why);
	}
	if (strcmp(verb, "clear") == 0)
		cmd->kind = SD_CMD_CLEAR;
	else if (strcmp(verb, "eject") == 0)
		cmd->kind = SD_CMD_EJECT;
	else if (strcmp(verb, "reset") == 0)
		cmd->kind = SD_CMD_RESET;
	else {
		*why = g_strdup_printf("unknown command '%s'", verb);
		return -EINVAL;
	}
	if (argv[0]) {
		*why = g_strdup_printf("%s takes no argument", verb);
		return -EINVAL;
	}
	return 0;
bad_usage:
	*why = g_strdup_printf("usage: %s", strcmp(verb, "fast") == 0 ? "fast on|off"
								      : "stall SECONDS");
	return -EINVAL;
}

int sd_cmd_parse(const char *line, struct sd_cmd *cmd, char **why)
{
	g_auto(GStrv) words = g_strsplit_set(line, " \t\r", -1);
	g_autoptr(GPtrArray) argv = g_ptr_array_new();

	for (char **w = words; *w; w++)
		if (**w)
			g_ptr_array_add(argv, *w);
	g_ptr_array_add(argv, NULL);
	memset(cmd, 0, sizeof(*cmd));
	*why = NULL;
	if (argv->len == 1) {
		*why = g_strdup("empty command");
		return -EINVAL;
	}
	return parse_args(argv->pdata[0], (char **)argv->pdata + 1, cmd, why);
}

static bool is_blank(const char *s)
{
	for (; *s; s++)
		if (!g_ascii_isspace(*s))
			return false;
	return true;
}

int sd_cmd_parse_text(const char *text, size_t len, GArray **cmds, char **why)
{
	g_autoptr(GArray) out = g_array_new(FALSE, FALSE, sizeof(struct sd_cmd));
	g_autofree char *copy = NULL;
	g_auto(GStrv) lines = NULL;

	*cmds = NULL;
	*why = NULL;
	if (memchr(text, '\0', len)) {
		*why = g_strdup("NUL byte in command");
		return -EINVAL;
	}
	copy = g_strndup(text, len);
	lines = g_strsplit(copy, "\n", -1);
	for (char **l = lines; *l; l++) {
		struct sd_cmd cmd;
		char *msg = NULL;

		if (is_blank(*l))
			continue;
		if (sd_cmd_parse(*l, &cmd, &msg) < 0) {
			*why = g_strdup_printf("'%s': %s", g_strstrip(*l), msg);
			g_free(msg);
			return -EINVAL;
		}
		g_array_append_val(out, cmd);
	}
	if (out->len == 0) {
		*why = g_strdup("empty command");
		return -EINVAL;
	}
	*cmds = g_steal_pointer(&out);
	return 0;
}

void sd_drive_init(struct sd_drive *d, const struct sd_params *p, bool fast)
{
	memset(d, 0, sizeof(*d));
	d->p = *p;
	d->fast = fast;
	d->faults = g_array_new(FALSE, FALSE, sizeof(struct sd_fault));
}

void sd_drive_destroy(struct sd_drive *d)
{
	g_array_unref(d->faults);
	d->faults = NULL;
}

static void apply_set(struct sd_drive *d, const struct sd_cmd *cmd)
{
	if (cmd->set_mask & SD_SET_READ_BW)
		d->p.read_bw = cmd->p.read_bw;
	if (cmd->set_mask & SD_SET_WRITE_BW)
		d->p.write_bw = cmd->p.write_bw;
	if (cmd->set_mask & SD_SET_SEEK)
		d->p.seek_ns = cmd->p.seek_ns;
}

void sd_drive_apply(struct sd_drive *d, const struct sd_cmd *cmd, uint64_t now_ns)
{
	switch (cmd->kind) {
	case SD_CMD_FAST:
		d->fast = cmd->on;
		break;
	case SD_CMD_FAIL:
		g_array_append_val(d->faults, cmd->fault);
		break;
	case SD_CMD_CLEAR:
		g_array_set_size(d->faults, 0);
		d->ejected = false;
		break;
	case SD_CMD_EJECT:
		d->ejected = true;
		break;
	case SD_CMD_STALL:
		d->stall_until_ns = now_ns + cmd->stall_ns;
		break;
	case SD_CMD_SET:
		apply_set(d, cmd);
		break;
	case SD_CMD_RESET:
		memset(&d->c, 0, sizeof(d->c));
		d->c.max_queue_depth = d->queue_depth;
		break;
	}
}

static bool fault_matches(const struct sd_fault *f, uint64_t off, uint64_t len,
			  enum sd_op op)
{
	if (op == SD_READ && f->kind == SD_FAIL_WRITE)
		return false;
	if (op == SD_WRITE && f->kind == SD_FAIL_READ)
		return false;
	return off < f->end && off + len > f->start;
}

int sd_drive_check(const struct sd_drive *d, uint64_t off, uint64_t len, enum sd_op op)
{
	if (d->ejected)
		return -EIO;
	if (op == SD_FSYNC)
		return 0;
	for (guint i = 0; i < d->faults->len; i++)
		if (fault_matches(&g_array_index(d->faults, struct sd_fault, i), off, len,
				  op))
			return -EIO;
	return 0;
}

static uint64_t transfer_ns(uint64_t len, uint64_t bw)
{
	return (uint64_t)((unsigned __int128)len * SD_NS_PER_SEC / bw);
}

uint64_t sd_model_service_ns(struct sd_drive *d, uint64_t off, uint64_t len,
			     enum sd_op op)
{
	bool seek = off != d->head;
	uint64_t ns;

	if (op == SD_FSYNC || len == 0)
		return 0;
	d->head = off + len;
	if (d->fast)
		return 0;
	ns = transfer_ns(len, op == SD_WRITE ? d->p.write_bw : d->p.read_bw);
	if (seek) {
		ns += d->p.seek_ns;
		d->c.seeks++;
	}
	d->c.model_ns += ns;
	return ns;
}

uint64_t sd_drive_stall_left(const struct sd_drive *d, uint64_t now_ns)
{
	return d->stall_until_ns > now_ns ? d->stall_until_ns - now_ns : 0;
}

void sd_drive_enqueued(struct sd_drive *d)
{
	d->queue_depth++;
	if (d->queue_depth > d->c.max_queue_depth)
		d->c.max_queue_depth = d->queue_depth;
}

void sd_drive_done(struct sd_drive *d, enum sd_op op, uint64_t len, int err,
		   uint64_t busy_ns)
{
	d->queue_depth--;
	d->c.busy_ns += busy_ns;
	if (err) {
		d->c.errors++;
		return;
	}
	switch (op) {
	case SD_READ:
		d->c.reads++;
		d->c.read_bytes += len;
		break;
	case SD_WRITE:
		d->c.writes++;
		d->c.write_bytes += len;
		break;
	case SD_FSYNC:
		d->c.fsyncs++;
		break;
	}
}

#define STAT(key, val)                                                                   \
	g_string_append_printf(out, "%s %" G_GUINT64_FORMAT "\n", key, (guint64)(val))

void sd_drive_format_stats(const struct sd_drive *d, GString *out, uint64_t size,
			   uint64_t uptime_ns, uint64_t now_ns)
{
	const struct sd_counters *c = &d->c;

	STAT("reads", c->reads);
	STAT("writes", c->writes);
	STAT("fsyncs", c->fsyncs);
	STAT("read_bytes", c->read_bytes);
	STAT("write_bytes", c->write_bytes);
	STAT("seeks", c->seeks);
	STAT("busy_ns", c->busy_ns);
	STAT("model_ns", c->model_ns);
	STAT("queue_depth", d->queue_depth);
	STAT("max_queue_depth", c->max_queue_depth);
	STAT("errors", c->errors);
	STAT("uptime_ns", uptime_ns);
	STAT("write_bw", d->p.write_bw);
	STAT("read_bw", d->p.read_bw);
	if (d->p.seek_ns % SD_NS_PER_MS == 0)
		STAT("seek_ms", d->p.seek_ns / SD_NS_PER_MS);
	else
		g_string_append_printf(out, "seek_ms %.6f\n", (double)d->p.seek_ns / 1e6);
	STAT("seek_ns", d->p.seek_ns);
	STAT("fast", d->fast);
	STAT("ejected", d->ejected);
	STAT("fault_rules", d->faults->len);
	STAT("stall_ns", sd_drive_stall_left(d, now_ns));
	STAT("head", d->head);
	STAT("size", size);
}
