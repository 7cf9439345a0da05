/*
 * Per-request credentials. When the daemon runs as root (mounted with
 * allow_other for several users), new files must belong to the caller: the
 * worker thread takes the caller's fsuid, fsgid and supplementary groups for
 * the creating syscall, so the lower filesystem applies its own rules (setgid
 * directories, quotas) exactly as for a local process.
 *
 * setfsuid/setfsgid and the raw setgroups syscall act on the calling thread
 * only (glibc's setgroups() would change every thread of the process).
 */
#include "fs.h"
#include "log.h"

#include <errno.h>
#include <grp.h>
#include <sys/fsuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#define CREDS_MAX_GROUPS 256

static int thread_setgroups(int n, const gid_t *groups)
{
	return syscall(SYS_setgroups, (size_t)n, groups) < 0 ? -errno : 0;
}

int creds_enter(fuse_req_t req, struct sm_creds *saved)
{
	struct slowmedia *fs = fs_from_req(req);
	const struct fuse_ctx *ctx = fuse_req_ctx(req);
	gid_t groups[CREDS_MAX_GROUPS];
	int n, r;

	saved->switched = false;
	if (!fs->creds_switch || (ctx->uid == 0 && ctx->gid == 0))
		return 0;
	n = fuse_req_getgroups(req, CREDS_MAX_GROUPS, groups);
	if (n < 0)
		n = 0; /* kernel without group info: primary group only */
	if (n > CREDS_MAX_GROUPS)
		n = CREDS_MAX_GROUPS;
	r = thread_setgroups(n, groups);
	if (r < 0)
		return r;
	setfsgid(ctx->gid);
	setfsuid(ctx->uid);
	saved->switched = true;
	return 0;
}

void creds_leave(struct sm_creds *saved)
{
	if (!saved->switched)
		return;
	setfsuid(0);
	setfsgid(0);
	if (thread_setgroups(0, NULL) < 0)
		sm_err("cannot restore supplementary groups: %s", g_strerror(errno));
	saved->switched = false;
}
