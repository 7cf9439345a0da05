/*
 * Per-request credentials. When the daemon runs as root (mounted with
 * allow_other for several users), new files must belong to the caller: the
 * worker thread takes the caller's fsuid, fsgid and supplementary groups for
 * the creating syscall, so the lower filesystem applies its own rules (setgid
 * directories, quotas) exactly as for a local process.
 *
 * setfsuid/setfsgid and the raw setgroups syscall act on the calling thread
 * only (glibc's setgroups() would change every thread of the process).
 *
 * With FUSE_CAP_DONT_MASK (asked for with POSIX ACLs) the kernel leaves the
 * caller's umask to us, so that the lower can ignore it under a default ACL as
 * it does for a local process: the creating syscall runs under the caller's
 * umask. umask is per fs_struct, shared by all threads, so a worker thread
 * first takes a private one (unshare(CLONE_FS)); the daemon never changes its
 * directory, so nothing else differs.
 */
#include "fs.h"
#include "log.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <linux/capability.h>
#include <sys/fsuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#define CREDS_MAX_GROUPS 256

static int thread_setgroups(int n, const gid_t *groups)
{
	return syscall(SYS_setgroups, (size_t)n, groups) < 0 ? -errno : 0;
}

/*
 * The caller's supplementary groups (at most max), from its thread's status
 * in /proc. Not fuse_req_getgroups: libfuse 3.14 runs strstr over its read
 * buffer without terminating it, reading past the data into the rest of the
 * heap block and beyond (ASan, heap-buffer-overflow, in the mount suite).
 */
static int caller_groups(pid_t tid, gid_t *groups, int max)
{
	g_autofree char *path = g_strdup_printf("/proc/%d/task/%d/status", (int)tid, (int)tid);
	g_autofree char *status = NULL;
	char *s, *end;
	int n = 0;

	if (!g_file_get_contents(path, &status, NULL, NULL))
		return -EIO;
	s = strstr(status, "\nGroups:");
	if (!s)
		return -EIO;
	s += strlen("\nGroups:");
	end = strchr(s, '\n');
	if (end)
		*end = '\0';
	while (n < max) {
		unsigned long g = strtoul(s, &end, 10);

		if (end == s)
			break;
		groups[n++] = (gid_t)g;
		s = end;
	}
	return n;
}

int creds_enter(fuse_req_t req, struct sm_creds *saved)
{
	struct slowmedia *fs = fs_from_req(req);
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	gid_t groups[CREDS_MAX_GROUPS];
	int n, r;

	saved->switched = false;
	saved->umask_set = false;
	if (!fs->creds_switch || (ctx->uid == 0 && ctx->gid == 0))
		return 0;
	n = caller_groups(ctx->pid, groups, CREDS_MAX_GROUPS);
	if (n < 0)
		n = 0; /* the caller is gone, or no /proc: primary group only */
	r = thread_setgroups(n, groups);
	if (r < 0)
		return r;
	setfsgid(ctx->gid);
	setfsuid(ctx->uid);
	saved->switched = true;
	return 0;
}

bool creds_in_group(fuse_req_t req, gid_t gid)
{
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	gid_t groups[CREDS_MAX_GROUPS];
	int n;

	if (ctx->gid == gid)
		return true;
	n = caller_groups(ctx->pid, groups, CREDS_MAX_GROUPS);
	for (int i = 0; i < n; i++)
		if (groups[i] == gid)
			return true;
	return false;
}

bool creds_has_fsetid(fuse_req_t req)
{
	pid_t tid = fuse_req_ctx(req)->pid;
	g_autofree char *path = g_strdup_printf("/proc/%d/task/%d/status", (int)tid, (int)tid);
	g_autofree char *status = NULL;
	const char *s;

	if (!g_file_get_contents(path, &status, NULL, NULL))
		return false; /* gone: no privilege assumed */
	s = strstr(status, "\nCapEff:");
	return s && (strtoull(s + strlen("\nCapEff:"), NULL, 16) >> CAP_FSETID) & 1;
}

/* Called once per worker thread before its first umask(). */
static int thread_private_umask(void)
{
	static __thread bool done;

	if (!done && unshare(CLONE_FS) < 0)
		return -errno;
	done = true;
	return 0;
}

int creds_enter_create(fuse_req_t req, struct sm_creds *saved)
{
	struct slowmedia *fs = fs_from_req(req);
	int r = creds_enter(req, saved);

	if (r < 0 || !fs->dont_mask)
		return r;
	r = thread_private_umask();
	if (r < 0) {
		creds_leave(saved);
		return r;
	}
	umask(fuse_req_ctx(req)->umask);
	saved->umask_set = true;
	return 0;
}

void creds_leave(struct sm_creds *saved)
{
	if (saved->umask_set) {
		umask(0);
		saved->umask_set = false;
	}
	if (!saved->switched)
		return;
	setfsuid(0);
	setfsgid(0);
	if (thread_setgroups(0, NULL) < 0)
		sm_err("cannot restore supplementary groups: %s", g_strerror(errno));
	saved->switched = false;
}
