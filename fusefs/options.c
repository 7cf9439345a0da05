/*
 * Option parsing. Strategy: one fuse_opt_parse pass sees every -o option and
 * every non-option argument. Scheduler keys go to sched_opts_handle, ours are
 * handled here, fstab-only keys are dropped, libfuse's own keys are kept for
 * fuse_session_new, and anything else is an error. All errors are collected so
 * the user sees them at once and nothing is mounted.
 */
#include "options.h"
#include "reqtrack.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define FUSE_THREADS_MAX 100000 /* libfuse 3.14's own bound on worker threads */

enum { KEY_HELP, KEY_VERSION };

static const struct fuse_opt sm_opt_spec[] = {
	FUSE_OPT_KEY("-h", KEY_HELP),
	FUSE_OPT_KEY("--help", KEY_HELP),
	FUSE_OPT_KEY("-V", KEY_VERSION),
	FUSE_OPT_KEY("--version", KEY_VERSION),
	FUSE_OPT_END,
};

/* Keys libfuse 3 itself understands (mount flags, mount options, session options). */
static const char *const fuse_keys[] = {
	"allow_other", "allow_root", "auto_unmount", "blkdev", "default_permissions",
	"debug", "clone_fd", "rw", "ro", "suid", "nosuid", "dev", "nodev", "exec",
	"noexec", "async", "sync", "dirsync", "atime", "noatime", "diratime",
	"nodiratime", "relatime", "norelatime", "strictatime", "nostrictatime",
	"lazytime", "nolazytime", NULL};
static const char *const fuse_valued_keys[] = {
	"fsname", "subtype", "max_read", "blksize", "context", "fscontext",
	"defcontext", "rootcontext", "max_idle_threads", "max_threads", NULL};

/* Keys that only mean something to mount(8) and fstab; accepted and dropped. */
static const char *const fstab_keys[] = {
	"auto", "noauto", "nofail", "_netdev", "user", "users", "nouser", "owner",
	"group", "defaults", "noowner", NULL};

struct parse_ctx {
	struct sm_options *o;
	GPtrArray *errors;
	int nonopts;
};

static bool key_in(const char *opt, const char *const *keys, bool valued)
{
	size_t n = strcspn(opt, "=");

	if (valued != (opt[n] == '='))
		return false;
	for (; *keys; keys++)
		if (strlen(*keys) == n && strncmp(*keys, opt, n) == 0)
			return true;
	return false;
}

/*
 * libfuse checks its numbers one at a time and stops at the first bad one,
 * before we could report ours (fuse_parse_cmdline: the thread counts), or only
 * once mounting (max_read; blksize is the kernel's, for fuseblk): check them
 * here, with the rest.
 */
static void check_fuse_number(struct parse_ctx *c, const char *arg)
{
	static const struct {
		const char *key;
		unsigned lo, hi;
	} nums[] = {
		{"max_threads", 1, FUSE_THREADS_MAX},
		{"max_idle_threads", 0, FUSE_THREADS_MAX},
		{"max_read", 0, UINT_MAX},
		{"blksize", 512, 65536},
	};
	const char *val = strchr(arg, '=');
	unsigned v;

	for (size_t i = 0; val && i < G_N_ELEMENTS(nums); i++) {
		if (strlen(nums[i].key) != (size_t)(val - arg) ||
		    strncmp(arg, nums[i].key, val - arg) != 0)
			continue;
		if (sm_parse_uint(val + 1, nums[i].lo, nums[i].hi, &v) < 0)
			g_ptr_array_add(c->errors,
					g_strdup_printf("%s: expected a whole number from %u to %u",
							arg, nums[i].lo, nums[i].hi));
		else if (strcmp(nums[i].key, "blksize") == 0 && (v & (v - 1)))
			g_ptr_array_add(c->errors,
					g_strdup_printf("%s: expected a power of two", arg));
	}
}

static int handle_mount_opt(struct parse_ctx *c, const char *arg)
{
	struct sm_options *o = c->o;

	if (sched_opts_handle(&o->sched, arg, c->errors))
		return 0;
	if (strncmp(arg, "fstype=", 7) == 0) {
		g_free(o->fstype);
		o->fstype = NULL;
		/* Left unset, the path checks do not report it a second time. */
		if (!arg[7])
			g_ptr_array_add(c->errors, g_strdup("fstype: needs a value"));
		else
			o->fstype = g_strdup(arg + 7);
		return 0;
	}
	if (strncmp(arg, "req_bound=", 10) == 0) {
		if (sm_parse_uint(arg + 10, 1, REQ_BOUND_S_MAX, &o->req_bound_s) < 0)
			g_ptr_array_add(c->errors,
					g_strdup_printf("%s: seconds from 1 to %u", arg,
							REQ_BOUND_S_MAX));
		return 0;
	}
	/* Not plain suid/dev: mount.fuse3 adds those to every mount it runs. */
	if (strcmp(arg, "allow_suid") == 0) {
		o->allow_suid = true;
		return 0;
	}
	if (strcmp(arg, "allow_dev") == 0) {
		o->allow_dev = true;
		return 0;
	}
	/* helper=: mount(8) passes a utab helper= on to mount helpers; it names
	 * the umount helper, nothing for us or libfuse. */
	if (strncmp(arg, "x-", 2) == 0 || strncmp(arg, "comment=", 8) == 0 ||
	    strncmp(arg, "helper=", 7) == 0 || key_in(arg, fstab_keys, false))
		return 0;
	if (key_in(arg, fuse_keys, false) || key_in(arg, fuse_valued_keys, true)) {
		if (strcmp(arg, "allow_other") == 0)
			o->allow_other = true;
		/* Passed on to libfuse, and remembered for fstype='s private mount. */
		if (strcmp(arg, "ro") == 0 || strcmp(arg, "rw") == 0)
			o->read_only = arg[1] == 'o';
		if (strcmp(arg, "noexec") == 0 || strcmp(arg, "exec") == 0)
			o->noexec = arg[0] == 'n';
		if (strcmp(arg, "default_permissions") == 0)
			o->default_permissions = true;
		if (strncmp(arg, "fsname=", 7) == 0)
			o->has_fsname = true;
		if (strncmp(arg, "max_threads=", 12) == 0)
			o->has_max_threads = true;
		check_fuse_number(c, arg);
		return 1;
	}
	g_ptr_array_add(c->errors, g_strdup_printf("unknown option '%s'", arg));
	return 0;
}

static int opt_proc(void *data, const char *arg, int key, struct fuse_args *outargs)
{
	struct parse_ctx *c = data;

	switch (key) {
	case KEY_HELP:
		c->o->show_help = true;
		return 1; /* libfuse's fuse_parse_cmdline sees it too */
	case KEY_VERSION:
		c->o->show_version = true;
		return 1;
	case FUSE_OPT_KEY_NONOPT:
		c->nonopts++;
		if (c->nonopts == 1) {
			c->o->source = g_strdup(arg);
			return 0;
		}
		if (c->nonopts == 2) {
			c->o->mountpoint = g_strdup(arg);
			return 1;
		}
		g_ptr_array_add(c->errors, g_strdup_printf("unexpected argument '%s'", arg));
		return 0;
	case FUSE_OPT_KEY_OPT:
		if (arg[0] == '-')
			return 1; /* -f, -d, -s ...: fuse_parse_cmdline's */
		return handle_mount_opt(c, arg);
	}
	return 1;
}

int sm_options_parse(int argc, char **argv, struct sm_options *o, struct fuse_args *args,
		     GPtrArray *errors)
{
	struct parse_ctx c = {.o = o, .errors = errors};

	memset(o, 0, sizeof(*o));
	sched_opts_init(&o->sched);
	o->req_bound_s = REQ_BOUND_S_DEFAULT;
	*args = (struct fuse_args)FUSE_ARGS_INIT(argc, argv);
	if (fuse_opt_parse(args, &c, sm_opt_spec, opt_proc) == -1)
		return -1;
	if (o->show_help || o->show_version)
		return 0;
	sched_opts_finish(&o->sched, errors);
	if (!o->source)
		g_ptr_array_add(errors, g_strdup("missing SOURCE (the lower directory)"));
	else if (!o->mountpoint)
		g_ptr_array_add(errors, g_strdup("missing MOUNTPOINT"));
	if (o->allow_other && !o->default_permissions) {
		/* With other users let in, the kernel must check permissions. */
		fuse_opt_add_arg(args, "-odefault_permissions");
		o->default_permissions = true;
	}
	if (o->source && !o->has_fsname) {
		/* libfuse splits -o lists on commas: escape them in the source path. */
		char *esc = NULL;
		fuse_opt_add_opt_escaped(&esc, o->source);
		g_autofree char *fsname = g_strdup_printf("-ofsname=%s", esc ? esc : "");
		fuse_opt_add_arg(args, fsname);
		free(esc);
	}
	fuse_opt_add_arg(args, "-osubtype=slowmedia");
	return 0;
}

void sm_options_check_paths(struct sm_options *o, GPtrArray *errors)
{
	g_autofree char *meminfo = NULL;
	uint64_t mem_available;
	struct stat st;

	if (o->source) {
		if (stat(o->source, &st) < 0)
			g_ptr_array_add(errors, g_strdup_printf("SOURCE %s: %s", o->source,
								g_strerror(errno)));
		else if (o->fstype && !S_ISBLK(st.st_mode))
			g_ptr_array_add(errors,
					g_strdup_printf("fstype=%s: SOURCE %s is not a block device",
							o->fstype, o->source));
		else if (!o->fstype && !S_ISDIR(st.st_mode))
			g_ptr_array_add(errors,
					g_strdup_printf("SOURCE %s is not a directory%s", o->source,
							S_ISBLK(st.st_mode) ? " (a block device needs fstype=TYPE)" : ""));
	}
	if (o->mountpoint && stat(o->mountpoint, &st) < 0)
		g_ptr_array_add(errors, g_strdup_printf("MOUNTPOINT %s: %s", o->mountpoint,
							g_strerror(errno)));
	else if (o->mountpoint && !S_ISDIR(st.st_mode))
		g_ptr_array_add(errors,
				g_strdup_printf("MOUNTPOINT %s is not a directory", o->mountpoint));
	/* A missing spool directory is made (0700) if its parent exists. */
	if (o->sched.spool_dir) {
		g_autofree char *parent = g_path_get_dirname(o->sched.spool_dir);
		if (stat(o->sched.spool_dir, &st) == 0 && !S_ISDIR(st.st_mode))
			g_ptr_array_add(errors, g_strdup_printf("spool=%s: not a directory",
								o->sched.spool_dir));
		else if (stat(parent, &st) < 0 || !S_ISDIR(st.st_mode))
			g_ptr_array_add(errors,
					g_strdup_printf("spool=%s: its parent %s is not a directory",
							o->sched.spool_dir, parent));
	}
	/* queue= is memory: read what the machine has once, here (no figure: no check). */
	if (g_file_get_contents("/proc/meminfo", &meminfo, NULL, NULL) &&
	    sched_parse_meminfo(meminfo, &mem_available) == 0)
		sched_opts_check_memory(&o->sched, mem_available, errors);
}

void sm_options_free(struct sm_options *o)
{
	sched_opts_free(&o->sched);
	g_free(o->source);
	g_free(o->mountpoint);
	g_free(o->fstype);
}

void sm_options_print_help(const char *prog)
{
	printf("usage: %s SOURCE MOUNTPOINT [-f] [-d] [-o opt[,opt...]]\n\n"
	       "A FUSE passthrough filesystem for slow removable media: writes are\n"
	       "queued and flushed in paced chunks, reads pass through at once.\n"
	       "SOURCE may equal MOUNTPOINT (overlay in place).\n\n"
	       "%s"
	       "    -o fstype=TYPE         SOURCE is a block device: mount it privately\n"
	       "    -o allow_suid          honour setuid bits, if the lower mount does\n"
	       "    -o allow_dev           honour device nodes, if the lower mount does\n"
	       "    -o req_bound=S         log a request that takes longer than S seconds,\n"
	       "                           fsync and other waits for the medium aside (10)\n"
	       "    fstab-only keys (auto, noauto, nofail, _netdev, user, users, x-*) are ignored\n\n",
	       prog, sched_opts_help());
}
