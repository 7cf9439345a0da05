/*
 * Our own reads and writes of /dev/fuse (libfuse's custom io), for what
 * libfuse 3.14 cannot do: negotiate FUSE_HANDLE_KILLPRIV_V2, and pass on the
 * kill flags the kernel then puts in WRITE, SETATTR and OPEN requests.
 *
 * Why: without it the kernel asks GETXATTR security.capability before every
 * write (file_remove_privs, under the file's lock): two round trips per
 * write. With it, the kernel marks the superblock SB_NOSEC, so an inode
 * whose security.capability was found absent once is not asked again until
 * its attributes are next refreshed; in return, the daemon kills suid, sgid
 * and capabilities itself (killpriv.c), as the Linux VFS would.
 *
 * The read hook sees each request before libfuse parses it. A worker thread
 * processes the request it has just read before it reads the next one
 * (fuse_do_work in fuse_loop_mt.c; fuse_session_loop; the same with
 * clone_fd, where each worker reads its own cloned fd), so a thread-local
 * carries the request's flags to the op handler. The writev hook adds the
 * flag to the INIT reply, if the kernel offered it and sm_init wants it.
 * No splice hooks: libfuse then neither splices requests in (their bytes are
 * read straight into memory, which the write path wants anyway) nor replies
 * out; read replies are copied, as they were (slowmedia never asked for
 * splice writes).
 */
#include "fs.h"
#include "log.h"

#include <errno.h>
#include <linux/fuse.h>
#include <string.h>
#include <sys/uio.h>

enum { KPV2_OFF, KPV2_PENDING, KPV2_ON };

static __thread bool req_kill_suidgid;

bool devio_req_kill_suidgid(void)
{
	return req_kill_suidgid;
}

/* The argument of a request, copied out (the buffer needs no alignment). */
static bool req_arg(const char *buf, size_t n, void *arg, size_t size)
{
	if (n < sizeof(struct fuse_in_header) + size)
		return false;
	memcpy(arg, buf + sizeof(struct fuse_in_header), size);
	return true;
}

static void note_init(struct slowmedia *fs, const struct fuse_in_header *h, const char *buf,
		      size_t n)
{
	struct fuse_init_in in;

	if (!req_arg(buf, n, &in, offsetof(struct fuse_init_in, flags2)))
		return;
	fs->kpv2.init_unique = h->unique;
	fs->kpv2.offered = in.major == FUSE_KERNEL_VERSION && in.minor >= 33 &&
			   (in.flags & FUSE_HANDLE_KILLPRIV_V2);
}

static void note_request(struct slowmedia *fs, const char *buf, size_t n)
{
	struct fuse_in_header h;
	union {
		struct fuse_write_in write;
		struct fuse_setattr_in setattr;
		struct fuse_open_in open;
	} a;

	memcpy(&h, buf, sizeof(h));
	switch (h.opcode) {
	case FUSE_WRITE:
		req_kill_suidgid = req_arg(buf, n, &a.write, sizeof(a.write)) &&
				   (a.write.write_flags & FUSE_WRITE_KILL_SUIDGID);
		break;
	case FUSE_SETATTR:
		req_kill_suidgid = req_arg(buf, n, &a.setattr, sizeof(a.setattr)) &&
				   (a.setattr.valid & FATTR_KILL_SUIDGID);
		break;
	case FUSE_OPEN:
		req_kill_suidgid = req_arg(buf, n, &a.open, sizeof(a.open)) &&
				   (a.open.open_flags & FUSE_OPEN_KILL_SUIDGID);
		break;
	case FUSE_INIT:
		note_init(fs, &h, buf, n);
		break;
	}
}

/*
 * The kernel ends the connection at unmount by aborting it (fuse_conn_destroy
 * calls fuse_abort_conn). A worker that has just taken a request off the
 * queue when that happens gets ECONNABORTED instead of ENODEV (fpq no longer
 * connected, in fuse_dev_do_read). Either way nothing more can come; libfuse
 * knows only ENODEV as the end and calls anything else a failure ("fuse:
 * reading device"), and the daemon would exit 1 after a clean umount (seen
 * once in about 200 busy unmounts, and once in CI).
 */
static ssize_t devio_read(int fd, void *buf, size_t len, void *userdata)
{
	ssize_t n = read(fd, buf, len);

	if (n < 0 && errno == ECONNABORTED)
		errno = ENODEV;
	req_kill_suidgid = false;
	if (n >= (ssize_t)sizeof(struct fuse_in_header))
		note_request(userdata, buf, (size_t)n);
	return n;
}

/* The INIT reply, with FUSE_HANDLE_KILLPRIV_V2 added to its flags. */
static ssize_t writev_init(struct slowmedia *fs, int fd, const struct iovec *iov, int count)
{
	const struct fuse_out_header *out = iov[0].iov_base;
	struct iovec v[2];
	struct fuse_init_out init;
	ssize_t n;

	if (count < 1 || iov[0].iov_len != sizeof(*out) || out->unique != fs->kpv2.init_unique)
		return writev(fd, iov, count);
	if (count != 2 || out->error != 0 ||
	    iov[1].iov_len < offsetof(struct fuse_init_out, max_background) ||
	    iov[1].iov_len > sizeof(init)) {
		__atomic_store_n(&fs->kpv2.state, KPV2_OFF, __ATOMIC_RELEASE);
		return writev(fd, iov, count);
	}
	memcpy(&init, iov[1].iov_base, iov[1].iov_len);
	init.flags |= FUSE_HANDLE_KILLPRIV_V2;
	v[0] = iov[0];
	v[1] = (struct iovec){.iov_base = &init, .iov_len = iov[1].iov_len};
	n = writev(fd, v, 2);
	__atomic_store_n(&fs->kpv2.state, n < 0 ? KPV2_OFF : KPV2_ON, __ATOMIC_RELEASE);
	if (n >= 0)
		sm_dbg("init: FUSE_HANDLE_KILLPRIV_V2 on: suid, sgid and capabilities "
		       "are killed here");
	return n;
}

static ssize_t devio_writev(int fd, struct iovec *iov, int count, void *userdata)
{
	struct slowmedia *fs = userdata;

	if (__atomic_load_n(&fs->kpv2.state, __ATOMIC_ACQUIRE) == KPV2_PENDING)
		return writev_init(fs, fd, iov, count);
	return writev(fd, iov, count);
}

bool devio_killpriv_v2_on(struct slowmedia *fs)
{
	return __atomic_load_n(&fs->kpv2.state, __ATOMIC_ACQUIRE) == KPV2_ON;
}

bool devio_want_killpriv_v2(struct slowmedia *fs)
{
	if (!fs->kpv2.offered)
		return false;
	__atomic_store_n(&fs->kpv2.state, KPV2_PENDING, __ATOMIC_RELEASE);
	return true;
}

void devio_hooks(struct fuse_custom_io *io)
{
	*io = (struct fuse_custom_io){.read = devio_read, .writev = devio_writev};
}

int devio_install(struct fuse_session *se, struct slowmedia *fs)
{
	struct fuse_custom_io io;

	(void)fs; /* the hooks get it as the session's userdata */
	devio_hooks(&io);
	return fuse_session_custom_io(se, &io, fuse_session_fd(se));
}
