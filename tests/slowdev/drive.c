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

bool sd_unit_name_ok(const char *name)
{
	size_t len = strlen(name);

	/* Also a file name and a stats key prefix: no leading dot, no ':' or space. */
	if (len == 0 || len > SD_UNIT_NAME_MAX || name[0] == '.')
		return false;
	for (const char *c = name; *c; c++)
		if (!g_ascii_isalnum(*c) && !strchr("_.-", *c))
			return false;
	return true;
}

/* "NAME:" before the command (no command word has a ':'): record NAME. */
static int parse_target(const char **line, struct sd_cmd *cmd, char **why)
{
	const char *colon = strchr(*line, ':');
	g_autofree char *name = NULL;

	cmd->unit = SD_UNIT_ALL;
	if (!colon)
		return 0;
	name = g_strstrip(g_strndup(*line, (gsize)(colon - *line)));
	if (!sd_unit_name_ok(name)) {
		*why = g_strdup_printf("bad image name '%s'", name);
		return -EINVAL;
	}
	g_strlcpy(cmd->target, name, sizeof(cmd->target));
	cmd->unit = SD_UNIT_NAMED;
	*line = colon + 1;
	return 0;
}

int sd_cmd_parse(const char *line, struct sd_cmd *cmd, char **why)
{
	g_auto(GStrv) words = NULL;
	g_autoptr(GPtrArray) argv = g_ptr_array_new();
	int r;

	memset(cmd, 0, sizeof(*cmd));
	*why = NULL;
	r = parse_target(&line, cmd, why);
	if (r < 0)
		return r;
	words = g_strsplit_set(line, " \t\r", -1);
	for (char **w = words; *w; w++)
		if (**w)
			g_ptr_array_add(argv, *w);
	g_ptr_array_add(argv, NULL);
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

void sd_drive_init_units(struct sd_drive *d, unsigned n, const char *const *names,
			 const struct sd_params *p, bool fast)
{
	memset(d, 0, sizeof(*d));
	d->units = g_new0(struct sd_unit, n);
	d->n_units = n;
	for (unsigned i = 0; i < n; i++) {
		d->units[i].name = g_strdup(names[i]);
		d->units[i].p = p[i];
	}
	d->fast = fast;
	d->faults = g_array_new(FALSE, FALSE, sizeof(struct sd_fault));
}

void sd_drive_init(struct sd_drive *d, const struct sd_params *p, bool fast)
{
	const char *name = SD_UNIT_DEFAULT;

	sd_drive_init_units(d, 1, &name, p, fast);
}

void sd_drive_destroy(struct sd_drive *d)
{
	for (unsigned i = 0; i < d->n_units; i++)
		g_free(d->units[i].name);
	g_free(d->units);
	d->units = NULL;
	d->n_units = 0;
	g_array_unref(d->faults);
	d->faults = NULL;
}

int sd_drive_find_unit(const struct sd_drive *d, const char *name)
{
	for (unsigned i = 0; i < d->n_units; i++)
		if (strcmp(d->units[i].name, name) == 0)
			return (int)i;
	return -ENOENT;
}

static const char *const sd_cmd_names[] = {
    [SD_CMD_FAST] = "fast",   [SD_CMD_FAIL] = "fail",	[SD_CMD_CLEAR] = "clear",
    [SD_CMD_EJECT] = "eject", [SD_CMD_STALL] = "stall", [SD_CMD_SET] = "set",
    [SD_CMD_RESET] = "reset",
};

/* The head's mode, its stalls and the counters of all units go together. */
static bool acts_on_head(enum sd_cmd_kind kind)
{
	return kind == SD_CMD_FAST || kind == SD_CMD_STALL || kind == SD_CMD_RESET;
}

int sd_drive_resolve(const struct sd_drive *d, struct sd_cmd *cmd, char **why)
{
	int u;

	*why = NULL;
	if (cmd->unit != SD_UNIT_NAMED)
		return 0;
	if (acts_on_head(cmd->kind)) {
		*why = g_strdup_printf("%s: '%s' acts on the whole head, not one image",
				       cmd->target, sd_cmd_names[cmd->kind]);
		return -EINVAL;
	}
	u = sd_drive_find_unit(d, cmd->target);
	if (u < 0) {
		*why = g_strdup_printf("no image '%s'", cmd->target);
		return -EINVAL;
	}
	cmd->unit = u;
	return 0;
}

static void apply_set(struct sd_params *p, const struct sd_cmd *cmd)
{
	if (cmd->set_mask & SD_SET_READ_BW)
		p->read_bw = cmd->p.read_bw;
	if (cmd->set_mask & SD_SET_WRITE_BW)
		p->write_bw = cmd->p.write_bw;
	if (cmd->set_mask & SD_SET_SEEK)
		p->seek_ns = cmd->p.seek_ns;
}

/* Drops the fault rules of units [first, end). */
static void clear_faults(struct sd_drive *d, unsigned first, unsigned end)
{
	for (guint i = d->faults->len; i-- > 0;) {
		unsigned u = g_array_index(d->faults, struct sd_fault, i).unit;

		if (u >= first && u < end)
			g_array_remove_index(d->faults, i);
	}
}

static void reset_counters(struct sd_counters *c, uint64_t queue_depth)
{
	memset(c, 0, sizeof(*c));
	c->max_queue_depth = queue_depth;
}

void sd_drive_apply(struct sd_drive *d, const struct sd_cmd *cmd, uint64_t now_ns)
{
	/* The units it acts on: [first, end). */
	unsigned first = cmd->unit == SD_UNIT_ALL ? 0 : (unsigned)cmd->unit;
	unsigned end = cmd->unit == SD_UNIT_ALL ? d->n_units : first + 1;

	g_return_if_fail(cmd->unit == SD_UNIT_ALL ||
			 (cmd->unit >= 0 && (unsigned)cmd->unit < d->n_units));
	switch (cmd->kind) {
	case SD_CMD_FAST:
		d->fast = cmd->on;
		break;
	case SD_CMD_FAIL:
		for (unsigned u = first; u < end; u++) {
			struct sd_fault f = cmd->fault;

			f.unit = u;
			g_array_append_val(d->faults, f);
		}
		break;
	case SD_CMD_CLEAR:
		clear_faults(d, first, end);
		for (unsigned u = first; u < end; u++)
			d->units[u].ejected = false;
		break;
	case SD_CMD_EJECT:
		for (unsigned u = first; u < end; u++)
			d->units[u].ejected = true;
		break;
	case SD_CMD_STALL:
		d->stall_until_ns = now_ns + cmd->stall_ns;
		break;
	case SD_CMD_SET:
		for (unsigned u = first; u < end; u++)
			apply_set(&d->units[u].p, cmd);
		break;
	case SD_CMD_RESET:
		reset_counters(&d->c, d->queue_depth);
		for (unsigned u = 0; u < d->n_units; u++)
			reset_counters(&d->units[u].c, d->units[u].queue_depth);
		break;
	}
}

static bool fault_matches(const struct sd_fault *f, unsigned u, uint64_t off,
			  uint64_t len, enum sd_op op)
{
	if (f->unit != u)
		return false;
	if (op == SD_READ && f->kind == SD_FAIL_WRITE)
		return false;
	if (op == SD_WRITE && f->kind == SD_FAIL_READ)
		return false;
	return off < f->end && off + len > f->start;
}

int sd_unit_check(const struct sd_drive *d, unsigned u, uint64_t off, uint64_t len,
		  enum sd_op op)
{
	if (d->units[u].ejected)
		return -EIO;
	if (op == SD_FSYNC)
		return 0;
	for (guint i = 0; i < d->faults->len; i++)
		if (fault_matches(&g_array_index(d->faults, struct sd_fault, i), u, off,
				  len, op))
			return -EIO;
	return 0;
}

int sd_drive_check(const struct sd_drive *d, uint64_t off, uint64_t len, enum sd_op op)
{
	return sd_unit_check(d, 0, off, len, op);
}

static uint64_t transfer_ns(uint64_t len, uint64_t bw)
{
	return (uint64_t)((unsigned __int128)len * SD_NS_PER_SEC / bw);
}

uint64_t sd_unit_service_ns(struct sd_drive *d, unsigned u, uint64_t off, uint64_t len,
			    enum sd_op op)
{
	struct sd_unit *unit = &d->units[u];
	/* Another unit is another place for the head, wherever its offset. */
	bool seek = u != d->head_unit || off != d->head;
	uint64_t ns;

	if (op == SD_FSYNC || len == 0)
		return 0;
	d->head_unit = u;
	d->head = off + len;
	if (d->fast)
		return 0;
	ns = transfer_ns(len, op == SD_WRITE ? unit->p.write_bw : unit->p.read_bw);
	if (seek) {
		ns += unit->p.seek_ns;
		d->c.seeks++;
		unit->c.seeks++;
	}
	d->c.model_ns += ns;
	unit->c.model_ns += ns;
	return ns;
}

uint64_t sd_model_service_ns(struct sd_drive *d, uint64_t off, uint64_t len,
			     enum sd_op op)
{
	return sd_unit_service_ns(d, 0, off, len, op);
}

uint64_t sd_drive_stall_left(const struct sd_drive *d, uint64_t now_ns)
{
	return d->stall_until_ns > now_ns ? d->stall_until_ns - now_ns : 0;
}

uint64_t sd_drive_service_start(const struct sd_drive *d, uint64_t arrival_ns)
{
	return MAX(MAX(arrival_ns, d->free_ns), d->stall_until_ns);
}

static void count_enqueued(uint64_t *depth, struct sd_counters *c)
{
	(*depth)++;
	if (*depth > c->max_queue_depth)
		c->max_queue_depth = *depth;
}

void sd_unit_enqueued(struct sd_drive *d, unsigned u)
{
	count_enqueued(&d->queue_depth, &d->c);
	count_enqueued(&d->units[u].queue_depth, &d->units[u].c);
}

void sd_drive_enqueued(struct sd_drive *d)
{
	sd_unit_enqueued(d, 0);
}

static void count_done(uint64_t *depth, struct sd_counters *c, enum sd_op op,
		       uint64_t len, int err, uint64_t wait_ns, uint64_t busy_ns)
{
	(*depth)--;
	c->busy_ns += busy_ns;
	c->wait_ns += wait_ns;
	c->max_wait_ns = MAX(c->max_wait_ns, wait_ns);
	if (err) {
		c->errors++;
		return;
	}
	switch (op) {
	case SD_READ:
		c->reads++;
		c->read_bytes += len;
		break;
	case SD_WRITE:
		c->writes++;
		c->write_bytes += len;
		break;
	case SD_FSYNC:
		c->fsyncs++;
		break;
	}
}

void sd_unit_done(struct sd_drive *d, unsigned u, enum sd_op op, uint64_t len, int err,
		  uint64_t wait_ns, uint64_t busy_ns)
{
	count_done(&d->queue_depth, &d->c, op, len, err, wait_ns, busy_ns);
	count_done(&d->units[u].queue_depth, &d->units[u].c, op, len, err, wait_ns,
		   busy_ns);
}

void sd_drive_done(struct sd_drive *d, enum sd_op op, uint64_t len, int err,
		   uint64_t busy_ns)
{
	sd_unit_done(d, 0, op, len, err, 0, busy_ns);
}

/* "PREFIXkey value"; PREFIX is "" for the head, "NAME." for a unit. */
static void stat_line(GString *out, const char *prefix, const char *key, uint64_t val)
{
	g_string_append_printf(out, "%s%s %" G_GUINT64_FORMAT "\n", prefix, key,
			       (guint64)val);
}

static void format_counters(GString *out, const char *prefix, const struct sd_counters *c,
			    uint64_t queue_depth)
{
	stat_line(out, prefix, "reads", c->reads);
	stat_line(out, prefix, "writes", c->writes);
	stat_line(out, prefix, "fsyncs", c->fsyncs);
	stat_line(out, prefix, "read_bytes", c->read_bytes);
	stat_line(out, prefix, "write_bytes", c->write_bytes);
	stat_line(out, prefix, "seeks", c->seeks);
	stat_line(out, prefix, "busy_ns", c->busy_ns);
	stat_line(out, prefix, "model_ns", c->model_ns);
	stat_line(out, prefix, "queue_depth", queue_depth);
	stat_line(out, prefix, "max_queue_depth", c->max_queue_depth);
	stat_line(out, prefix, "errors", c->errors);
}

static void format_params(GString *out, const char *prefix, const struct sd_params *p)
{
	stat_line(out, prefix, "write_bw", p->write_bw);
	stat_line(out, prefix, "read_bw", p->read_bw);
	if (p->seek_ns % SD_NS_PER_MS == 0)
		stat_line(out, prefix, "seek_ms", p->seek_ns / SD_NS_PER_MS);
	else
		g_string_append_printf(out, "%sseek_ms %.6f\n", prefix,
				       (double)p->seek_ns / 1e6);
	stat_line(out, prefix, "seek_ns", p->seek_ns);
}

static uint64_t unit_faults(const struct sd_drive *d, unsigned u)
{
	uint64_t n = 0;

	for (guint i = 0; i < d->faults->len; i++)
		n += g_array_index(d->faults, struct sd_fault, i).unit == u;
	return n;
}

void sd_drive_format_stats(const struct sd_drive *d, GString *out, uint64_t size,
			   uint64_t uptime_ns, uint64_t now_ns)
{
	/* With one unit, the head's file reads as it did before units existed. */
	const struct sd_unit *one = d->n_units == 1 ? &d->units[0] : NULL;

	format_counters(out, "", &d->c, d->queue_depth);
	stat_line(out, "", "uptime_ns", uptime_ns);
	if (one)
		format_params(out, "", &one->p);
	stat_line(out, "", "fast", d->fast);
	if (one) {
		stat_line(out, "", "ejected", one->ejected);
		stat_line(out, "", "fault_rules", d->faults->len);
	}
	stat_line(out, "", "stall_ns", sd_drive_stall_left(d, now_ns));
	stat_line(out, "", "head", d->head);
	if (one)
		stat_line(out, "", "size", size);
	stat_line(out, "", "wait_ns", d->c.wait_ns);
	stat_line(out, "", "max_wait_ns", d->c.max_wait_ns);
	stat_line(out, "", "images", d->n_units);
	g_string_append_printf(out, "head_image %s\n", d->units[d->head_unit].name);

	for (unsigned u = 0; u < d->n_units; u++) {
		const struct sd_unit *unit = &d->units[u];
		g_autofree char *prefix = g_strdup_printf("%s.", unit->name);

		format_counters(out, prefix, &unit->c, unit->queue_depth);
		stat_line(out, prefix, "wait_ns", unit->c.wait_ns);
		stat_line(out, prefix, "max_wait_ns", unit->c.max_wait_ns);
		format_params(out, prefix, &unit->p);
		stat_line(out, prefix, "ejected", unit->ejected);
		stat_line(out, prefix, "fault_rules", unit_faults(d, u));
	}
}
