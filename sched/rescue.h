/*
 * The rescue directory: where a daemon saves data it cannot put on the
 * medium and must not drop (see the DESIGN comment of rescue.c).
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RESCUE_MANIFEST "MANIFEST"
#define RESCUE_MAGIC "# slowmedia rescue 1"

struct rescue;

/* The rescue root used when none is given: $SLOWMEDIA_RESCUE_DIR, else
 * /var/lib/slowmedia/rescue for root, else $XDG_STATE_HOME (or
 * ~/.local/state)/slowmedia/rescue. g_free it. */
char *rescue_default_base(void);
/* Whether base (NULL: the default) may hold rescues: missing (it is made
 * 0700 at need), or a directory (not a symbolic link) of this user's that
 * nobody else may write. 0, or -errno with why. */
int rescue_check_base(const char *base, char *why, size_t why_n);
/* A new rescue of medium_id under base (NULL: the default):
 * BASE/<medium key>/<YYYYmmdd-HHMMSS>-<pid>/, every level 0700. 0, or
 * -errno with why. */
int rescue_open(const char *base, const char *medium_id, struct rescue **out, char *why,
		size_t why_n);
/* len bytes of the file at path (relative to the medium's root, as a spool
 * record's) at off. Paths a record could not carry are refused (-EINVAL);
 * nothing is written through a symbolic link (-ELOOP). */
int rescue_write(struct rescue *r, const char *path, uint64_t off, const void *data,
		 size_t len);
/* A line of the manifest for path: what else the medium was to get (its
 * size after a truncate, its times) and why it did not. */
void rescue_note(struct rescue *r, const char *path, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* The directory of this rescue. */
const char *rescue_dir(const struct rescue *r);
/* Bytes and files saved so far. */
uint64_t rescue_bytes(const struct rescue *r);
unsigned rescue_files(const struct rescue *r);
/* Write the manifest, sync every file and directory, free: 0 or the first
 * error met (also of earlier writes). NULL is fine. */
int rescue_close(struct rescue *r);

/* ---- reading rescues (slowmediactl) ---- */

struct rescue_info {
	char key[256];	     /* the medium's directory under the base */
	char stamp[64];	     /* the rescue's directory under it */
	char *dir;	     /* BASE/key/stamp */
	char *medium;	     /* the id in the manifest ("" if none) */
	unsigned files;
	uint64_t bytes;	     /* saved */
	bool complete;	     /* the manifest is there and reads */
};
/* Every rescue under base, oldest first per medium: fn returns non-zero to
 * stop (NULL: stop at the first). -errno (no such directory). Whether base
 * holds any is *found. */
int rescue_list(const char *base, int (*fn)(const struct rescue_info *ri, void *ctx),
		void *ctx, bool *found);
/* The files of rescue dir as its manifest gives them: fn(path, size, ranges
 * "off+len,...", notes joined by "; ") per file. -errno, -EBADMSG. */
int rescue_read(const char *dir,
		int (*fn)(const char *path, uint64_t size, const char *ranges, const char *notes,
			  void *ctx),
		void *ctx);
