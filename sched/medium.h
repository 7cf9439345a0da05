/* Which medium is in the drive: see the DESIGN comment of medium.c. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "spool_journal.h"

struct medium {
	char id[SPJ_MEDIUM_ID_MAX + 1]; /* what spool_open takes */
	char label[256];
	char source[4096];		/* the device read, "" when none */
	uint64_t size;			/* bytes of the filesystem */
	bool weak;			/* no UUID: fsid, size and label only */
};

/* The identity of the filesystem the lower root (root_fd) is on. 0, -errno. */
int medium_identify(int root_fd, struct medium *m);
/* The UUID (as blkid prints it) and label in a device's first len bytes
 * (4 KiB: the ext superblock, a FAT or exFAT boot sector). -ENOENT: none. */
int medium_from_sectors(const unsigned char *s, size_t len, char *uuid, size_t uuid_size,
			char *label, size_t label_size);
