#!/usr/bin/env bash
# Parity: every case of the parity runner on a native directory and on a
# slowmedia mount of a sibling directory of the same ext4 filesystem.
#   test-parity.sh SLOWMEDIA PARITY [fd-cache]
# The plain run mounts with allow_other (so default_permissions: the kernel
# checks permissions) and includes the cases run as nobody. With fd-cache the
# daemon keeps a single cached O_PATH fd, so nearly every op reaches its inode
# again through a file handle, and the mount is a root-only one without
# allow_other (the daemon answers access(2) itself); the cases as nobody, who
# cannot enter such a mount, are left out.
# PARITY_CASES=GLOB (or !GLOB) picks cases by name.
ML_DAEMON=$1
PARITY=$2
MODE=${3:-}
source "${MOUNT_LIB:-$(dirname "$0")/../lib/mount-lib.sh}"

ml_require_root_fuse
[ -x "$PARITY" ] || { echo "parity runner '$PARITY' missing"; exit 1; }
ml_init
fs=$ML_TMP/fs
mnt=$ML_TMP/mnt
ml_make_ext4 6G "$fs"
mkdir -m 755 "$fs/native" "$fs/lower" "$mnt"
cases=${PARITY_CASES:-*}
if [ "$MODE" = fd-cache ]; then
	SLOWMEDIA_FD_CACHE=1 ml_start "$fs/lower" "$mnt"
	[ -n "${PARITY_CASES:-}" ] || cases='!perm_*'
else
	ml_start "$fs/lower" "$mnt" -o allow_other
fi

rc=0
"$PARITY" "$fs/native" "$mnt" "$cases" || rc=$?
[ "$rc" = 0 ] || ml_fail "parity runner exited with $rc"
ml_stop "$mnt"
ml_finish
