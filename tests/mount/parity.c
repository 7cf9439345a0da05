/*
 * parity NATIVE MOUNT [PATTERN]: run every case (or those whose name matches the
 * glob PATTERN, or with "!GLOB" those whose name does not) on a native directory
 * and on a slowmedia mount of a directory on the same filesystem type, and
 * compare what happened on both sides. One line per case, then "N passed,
 * N failed"; the exit status is 1 when a case failed. PARITY_VERBOSE=1 also
 * prints each native trace and snapshot.
 *
 * Each case runs in a forked child (so it may change credentials, umask, or
 * crash) with its working directory in a fresh SIDE/<case> directory; cases
 * use relative paths only. The child writes a trace: one line per syscall with
 * its return value and errno, plus whatever it reads back (data, stat fields,
 * xattrs, listings). The parent then adds a snapshot of the case directory
 * (names, types, modes, sizes, link counts, owners, which names share an inode,
 * content, symlink targets, xattrs). A case passes when trace and snapshot are
 * identical on both sides.
 *
 * Times are compared only where a case sets them (or checks they are "now");
 * inode numbers only as "these names are one inode".
 */
#include "parity.h"

#include <fnmatch.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#define CASE_TIMEOUT_S 120
#define DIFF_LINES_SHOWN 6

GString *trace;

void tr(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	g_string_append_vprintf(trace, fmt, ap);
	va_end(ap);
	g_string_append_c(trace, '\n');
}

static const char *errname(int err)
{
	const char *n = strerrorname_np(err);

	return n ? n : "E?";
}

long trace_ret(const char *what, long r, int err, bool exact)
{
	if (r < 0)
		tr("%s = %ld %s", what, r, errname(err));
	else if (exact)
		tr("%s = %ld", what, r);
	else
		tr("%s = ok", what);
	return r;
}

/* Run one case in a child; returns its trace (with how the child ended). */
static GString *run_child(const struct pcase *c, const char *dir)
{
	GString *out = g_string_new(NULL);
	int pipefd[2], status;
	char buf[65536];
	ssize_t n;
	pid_t pid;

	if (pipe(pipefd) < 0)
		g_error("pipe: %s", g_strerror(errno));
	pid = fork();
	if (pid < 0)
		g_error("fork: %s", g_strerror(errno));
	if (pid == 0) {
		close(pipefd[0]);
		alarm(CASE_TIMEOUT_S);
		umask(022);
		setgroups(0, NULL);
		trace = g_string_new(NULL);
		if (chdir(dir) < 0)
			tr("chdir %s: %s", dir, g_strerror(errno));
		else
			c->fn();
		for (size_t off = 0; off < trace->len; off += (size_t)n) {
			n = write(pipefd[1], trace->str + off, trace->len - off);
			if (n <= 0)
				_exit(2);
		}
		_exit(0);
	}
	close(pipefd[1]);
	while ((n = read(pipefd[0], buf, sizeof(buf))) > 0)
		g_string_append_len(out, buf, n);
	close(pipefd[0]);
	waitpid(pid, &status, 0);
	if (WIFSIGNALED(status))
		g_string_append_printf(out, "case killed by signal %d\n",
				       WTERMSIG(status));
	else if (WEXITSTATUS(status) != 0)
		g_string_append_printf(out, "case exited %d\n", WEXITSTATUS(status));
	return out;
}

/* Print the first lines where the two sides differ. */
static void show_diff(const char *what, const char *a, const char *b)
{
	g_auto(GStrv) la = g_strsplit(a, "\n", -1);
	g_auto(GStrv) lb = g_strsplit(b, "\n", -1);
	guint na = g_strv_length(la), nb = g_strv_length(lb), shown = 0;

	for (guint i = 0; (i < na || i < nb) && shown < DIFF_LINES_SHOWN; i++) {
		const char *x = i < na ? la[i] : "(end)", *y = i < nb ? lb[i] : "(end)";

		if (strcmp(x, y) == 0)
			continue;
		printf("    %s line %u:\n      native: %s\n      mount:  %s\n", what,
		       i + 1, x, y);
		shown++;
	}
}

static bool run_case(const struct pcase *c, const char *native, const char *mount,
		     bool verbose)
{
	const char *sides[2] = {native, mount};
	GString *tracev[2], *snapv[2];
	bool same;

	for (int s = 0; s < 2; s++) {
		g_autofree char *dir = g_build_filename(sides[s], c->name, NULL);

		if (mkdir(dir, 0755) < 0) /* a case needs a fresh directory */
			g_error("mkdir %s: %s", dir, g_strerror(errno));
		tracev[s] = run_child(c, dir);
		snapv[s] = snapshot(dir);
	}
	same = strcmp(tracev[0]->str, tracev[1]->str) == 0 &&
	       strcmp(snapv[0]->str, snapv[1]->str) == 0;
	printf("%s %s\n", same ? "ok  " : "FAIL", c->name);
	if (!same) {
		show_diff("trace", tracev[0]->str, tracev[1]->str);
		show_diff("snapshot", snapv[0]->str, snapv[1]->str);
	}
	if (verbose)
		printf("  -- trace (native):\n%s  -- snapshot (native):\n%s",
		       tracev[0]->str, snapv[0]->str);
	for (int s = 0; s < 2; s++) {
		g_string_free(tracev[s], TRUE);
		g_string_free(snapv[s], TRUE);
	}
	return same;
}

/* PATTERN selects cases by glob; "!GLOB" selects all others. */
static bool selected(const char *pattern, const char *name)
{
	if (pattern[0] == '!')
		return fnmatch(pattern + 1, name, 0) != 0;
	return fnmatch(pattern, name, 0) == 0;
}

int main(int argc, char **argv)
{
	const struct pcase *groups[] = {cases_file, cases_space, cases_attr, cases_ns,
					cases_dir,  cases_xattr, cases_misc, cases_perm};
	const char *pattern = argc > 3 ? argv[3] : "*";
	bool verbose = getenv("PARITY_VERBOSE") != NULL;
	unsigned passed = 0, failed = 0;

	if (argc < 3) {
		fprintf(stderr, "usage: %s NATIVE_DIR MOUNT_DIR [CASE_GLOB|!CASE_GLOB]\n",
			argv[0]);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);
	for (size_t g = 0; g < G_N_ELEMENTS(groups); g++) {
		for (const struct pcase *c = groups[g]; c->name; c++) {
			if (!selected(pattern, c->name))
				continue;
			if (run_case(c, argv[1], argv[2], verbose))
				passed++;
			else
				failed++;
		}
	}
	printf("%u passed, %u failed\n", passed, failed);
	return failed ? 1 : 0;
}
