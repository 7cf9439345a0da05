/* Command line and mount options of the daemon; the scheduler keys live in sched/. */
#pragma once
#include <fuse_lowlevel.h>
#include <glib.h>
#include <stdbool.h>

#include "sched_opts.h"

struct sm_options {
	struct sched_opts sched;
	char *source;	  /* lower directory (or block device with fstype=) */
	char *mountpoint; /* as given; libfuse's copy is in the cmdline opts */
	char *fstype;	  /* mount SOURCE privately first (block device) */
	bool allow_other;
	bool allow_suid;   /* honour the medium's setuid bits, where the lower mount does */
	bool allow_dev;    /* honour its device nodes, where the lower mount does */
	bool read_only;    /* ro (the last of ro/rw): also for the private mount of fstype= */
	bool noexec;	   /* noexec (the last of noexec/exec): the same */
	bool default_permissions;
	bool has_fsname;
	bool has_max_threads;
	unsigned req_bound_s; /* req_bound=: a request taking longer is logged */
	bool show_help;
	bool show_version;
};

/*
 * Parse argv. Our keys are consumed; libfuse's stay in *args (which the caller
 * frees with fuse_opt_free_args). Every problem is appended to errors.
 * Returns -1 only when argv could not be parsed at all.
 */
int sm_options_parse(int argc, char **argv, struct sm_options *o, struct fuse_args *args,
		     GPtrArray *errors);

/* Checks that need the filesystem (source exists, spool is a directory...). */
void sm_options_check_paths(struct sm_options *o, GPtrArray *errors);

void sm_options_free(struct sm_options *o);
void sm_options_print_help(const char *prog);
