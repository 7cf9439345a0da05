/* The op handlers; ops.c gathers them into the one fuse_lowlevel_ops table. */
#pragma once
#include "fs.h"

void sm_init(void *userdata, struct fuse_conn_info *conn);
void sm_destroy(void *userdata);

/* ops_entry.c */
void sm_lookup(fuse_req_t req, fuse_ino_t parent, const char *name);
void sm_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup);
void sm_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets);
void sm_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void sm_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int valid,
		struct fuse_file_info *fi);
void sm_readlink(fuse_req_t req, fuse_ino_t ino);
void sm_statfs(fuse_req_t req, fuse_ino_t ino);
void sm_access(fuse_req_t req, fuse_ino_t ino, int mask);

/* ops_dir.c */
void sm_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev);
void sm_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode);
void sm_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name);
void sm_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname);
void sm_unlink(fuse_req_t req, fuse_ino_t parent, const char *name);
void sm_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name);
void sm_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
	       const char *newname, unsigned int flags);
void sm_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void sm_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		struct fuse_file_info *fi);
void sm_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi);
void sm_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void sm_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi);

/* ops_file.c */
void sm_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void sm_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
	       struct fuse_file_info *fi);
void sm_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
	     struct fuse_file_info *fi);
void sm_write_buf(fuse_req_t req, fuse_ino_t ino, struct fuse_bufvec *bufv, off_t off,
		  struct fuse_file_info *fi);
void sm_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void sm_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void sm_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi);
void sm_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
		  struct fuse_file_info *fi);
void sm_lseek(fuse_req_t req, fuse_ino_t ino, off_t off, int whence,
	      struct fuse_file_info *fi);

/* ops_xattr.c */
void sm_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size);
void sm_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size);
void sm_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
		 size_t size, int flags);
void sm_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name);
