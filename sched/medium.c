/*
 * DESIGN: which medium is in the drive, for the spool (spool.h keys its
 * directories by it). A spool must never replay one medium's data onto
 * another that happens to sit in the same drive or under the same mount
 * point, so the identity comes from the filesystem itself:
 *
 *   1. The block device the lower filesystem lives on: the one its st_dev
 *      names (ext2/3/4, FAT, exFAT mounted by the kernel), or, for a FUSE
 *      lower (fusefat, exfat-fuse), the device its mountinfo line gives as
 *      source. From that device's first sectors: the ext superblock's UUID
 *      (magic 0xEF53 at 1024+56, UUID at 1024+104) or the FAT volume serial
 *      (FAT12/16 at 39, FAT32 at 67, as blkid prints them) or exFAT's serial
 *      (at 100). These are what blkid reports as UUID, and they survive
 *      remounts, other drives and other mount points.
 *   2. Else (tmpfs, NFS, a device this process cannot read): f_fsid, the
 *      filesystem's size and its label (FS_IOC_GETFSLABEL where the
 *      filesystem has one). Weaker: two blank media of one make and size may
 *      share it, which the README says.
 *
 * Only reads; nothing here writes the medium.
 */
#include "medium.h"
#include "spool.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <glib.h>
#include <inttypes.h>
#include <linux/fs.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#define SB_READ 4096
#define EXT_SB 1024
#define EXT_MAGIC 0xEF53

/* The source field of the mountinfo line of device dev ("" if none). */
static void mount_source(dev_t dev, char *out, size_t size)
{
	g_autofree char *text = NULL;
	g_auto(GStrv) lines = NULL;
	char want[32];

	out[0] = '\0';
	if (!g_file_get_contents("/proc/self/mountinfo", &text, NULL, NULL))
		return;
	snprintf(want, sizeof(want), "%u:%u", major(dev), minor(dev));
	lines = g_strsplit(text, "\n", -1);
	for (char **l = lines; *l; l++) {
		g_auto(GStrv) f = g_strsplit(*l, " ", -1);
		guint n = g_strv_length(f);

		if (n < 3 || strcmp(f[2], want) != 0)
			continue;
		for (guint i = 3; i + 2 < n; i++)
			if (strcmp(f[i], "-") == 0) {
				g_strlcpy(out, f[i + 2], size);
				return;
			}
	}
}

static int open_source_device(int root_fd, char *source, size_t size)
{
	struct stat st, dst;
	char node[64];
	int fd;

	source[0] = '\0';
	if (fstat(root_fd, &st) < 0)
		return -1;
	if (major(st.st_dev) != 0) {
		snprintf(node, sizeof(node), "/dev/block/%u:%u", major(st.st_dev),
			 minor(st.st_dev));
		fd = open(node, O_RDONLY | O_CLOEXEC);
		if (fd >= 0) {
			g_strlcpy(source, node, size);
			return fd;
		}
	}
	mount_source(st.st_dev, source, size);
	if (source[0] != '/')
		return -1;
	fd = open(source, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -1;
	if (fstat(fd, &dst) < 0 || !S_ISBLK(dst.st_mode)) {
		close(fd);
		return -1;
	}
	return fd;
}

static uint32_t le32(const unsigned char *p)
{
	return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* A label copied without trailing blanks and NULs, control bytes as '?'. */
static void copy_label(char *out, size_t size, const unsigned char *p, size_t n)
{
	while (n && (p[n - 1] == ' ' || p[n - 1] == '\0'))
		n--;
	if (n >= size)
		n = size - 1;
	for (size_t i = 0; i < n; i++)
		out[i] = (p[i] < 0x20 || p[i] == 0x7f) ? '?' : (char)p[i];
	out[n] = '\0';
}

int medium_from_sectors(const unsigned char *s, size_t len, char *uuid, size_t uuid_size,
			char *label, size_t label_size)
{
	uuid[0] = label[0] = '\0';
	if (len >= EXT_SB + 136 && (s[EXT_SB + 56] | s[EXT_SB + 57] << 8) == EXT_MAGIC) {
		const unsigned char *u = s + EXT_SB + 104;
		static const unsigned char zero[16];

		if (memcmp(u, zero, 16) == 0)
			return -ENOENT;
		snprintf(uuid, uuid_size,
			 "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
			 u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11],
			 u[12], u[13], u[14], u[15]);
		copy_label(label, label_size, s + EXT_SB + 120, 16);
		return 0;
	}
	if (len < 512 || s[510] != 0x55 || s[511] != 0xAA)
		return -ENOENT;
	if (memcmp(s + 3, "EXFAT   ", 8) == 0) {
		snprintf(uuid, uuid_size, "%04X-%04X", le32(s + 100) >> 16, le32(s + 100) & 0xffff);
		return 0;
	}
	/* FAT32's extended boot record at 64 (signature 0x29 at 66), FAT12/16's at 36. */
	if (memcmp(s + 82, "FAT32", 5) == 0 && s[66] == 0x29) {
		snprintf(uuid, uuid_size, "%04X-%04X", le32(s + 67) >> 16, le32(s + 67) & 0xffff);
		copy_label(label, label_size, s + 71, 11);
		return 0;
	}
	if (memcmp(s + 54, "FAT", 3) == 0 && s[38] == 0x29) {
		snprintf(uuid, uuid_size, "%04X-%04X", le32(s + 39) >> 16, le32(s + 39) & 0xffff);
		copy_label(label, label_size, s + 43, 11);
		return 0;
	}
	return -ENOENT;
}

int medium_identify(int root_fd, struct medium *m)
{
	unsigned char s[SB_READ];
	char uuid[64] = "";
	struct statvfs sv;
	struct statfs sf;
	uint64_t fsid = 0;
	ssize_t n;
	int fd;

	memset(m, 0, sizeof(*m));
	if (fstatvfs(root_fd, &sv) < 0)
		return -errno;
	m->size = (uint64_t)sv.f_blocks * (sv.f_frsize ? sv.f_frsize : sv.f_bsize);
	fd = open_source_device(root_fd, m->source, sizeof(m->source));
	if (fd >= 0) {
		n = pread(fd, s, sizeof(s), 0);
		close(fd);
		if (n > 0)
			medium_from_sectors(s, (size_t)n, uuid, sizeof(uuid), m->label,
					    sizeof(m->label));
	}
	if (!uuid[0]) {
		char fl[FSLABEL_MAX] = "";

		if (ioctl(root_fd, FS_IOC_GETFSLABEL, fl) == 0)
			copy_label(m->label, sizeof(m->label), (unsigned char *)fl,
				   strnlen(fl, sizeof(fl)));
		if (fstatfs(root_fd, &sf) == 0)
			memcpy(&fsid, &sf.f_fsid, MIN(sizeof(fsid), sizeof(sf.f_fsid)));
		m->weak = true;
	}
	return spool_medium_id(m->id, uuid, fsid, m->size, m->label);
}
