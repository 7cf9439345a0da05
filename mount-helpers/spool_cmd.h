/*
 * slowmediactl's exit statuses, shared by all its commands, and its spool
 * commands (spool_cmd.c): list, recover and discard over a spool directory
 * (spool=DIR), done here without a daemon (sched/spool.h).
 */
#pragma once
#include <glib.h>
#include <stdio.h>

enum {
	EXIT_OK = 0,
	EXIT_FAILED = 1,	/* the daemon answered an error; spool: what was
				   asked could not be done (whole) */
	EXIT_USAGE = 2,		/* unknown command or option, bad value */
	EXIT_NOT_MOUNT = 3,	/* no such path, or not a slowmedia mount; spool:
				   no such spool directory or medium */
	EXIT_DENIED = 4,	/* permission denied */
	EXIT_GONE = 5,		/* the daemon is gone or not answering */
	EXIT_TIMEOUT = 6,	/* drain --timeout ran out */
	EXIT_BUSY = 7,		/* spool: a daemon is using the medium's spool */
	EXIT_INTERRUPTED = 130, /* drain interrupted by SIGINT/SIGTERM */
};

/* `slowmediactl spool ...`: argv[0] is "spool". Returns an exit status. */
int spool_cmd_main(int argc, char **argv);
/* The spool commands' part of --help. */
void spool_cmd_help(FILE *out);

/* In slowmediactl.c: s as a JSON string, bytes that are not UTF-8 as
 * \udcXX (surrogateescape). */
void smctl_json_str(GString *o, const char *s);
