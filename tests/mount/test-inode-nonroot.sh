#!/usr/bin/env bash
# A daemon that is not root gets EPERM from open_by_handle_at: evicted inodes
# must be reached again by name. slowmedia runs as a test account (setpriv;
# mounted through the setuid fusermount3; where /dev/fuse is 0600, as in
# containers, that uid is let in by an ACL entry on it for the test's length:
# libfuse opens /dev/fuse itself before it falls back to fusermount3) over an
# ext4 directory that uid owns, with an fd budget of 160. 6,000 files in 5
# directories, made and checked by that uid (the mount has no allow_other),
# go through find, du, stat of every file, reads, rename, link and unlink
# after the kernel forgot its inodes; the daemon says once that handles are
# refused, holds few fds and reports no unreachable inode.
#   test-inode-nonroot.sh SLOWMEDIA MTOOL
SLOWMEDIA=$1
MTOOL=$2
USER_NAME=smtest-ino$$ # fusermount3 wants an account; removed at the end
FD_BUDGET=160
FD_LIMIT=$((FD_BUDGET + 40))
DIRS=5
PER_DIR=1200
source "${MOUNT_LIB:-$(dirname "$0")/../lib/mount-lib.sh}"

ML_DAEMON=$SLOWMEDIA
ml_require_root_fuse
for t in setpriv fusermount3; do
	command -v $t >/dev/null || ml_skip "needs $t"
done
[ -u "$(command -v fusermount3)" ] || ml_skip "fusermount3 is not setuid"
command -v useradd >/dev/null || ml_skip "needs useradd"
ml_scratch 256M
useradd -r -M -N -g nogroup -d / -s /usr/sbin/nologin "$USER_NAME" ||
	ml_skip "cannot add a test user"
ml_on_exit "userdel '$USER_NAME'"
USER_ID=$(id -u "$USER_NAME")
fs=$ML_FS mnt=$ML_MNT
chown $USER_ID:$USER_ID "$fs/lower" "$mnt"
if ! setpriv --reuid=$USER_ID --regid=$USER_ID --clear-groups -- test -r /dev/fuse -a -w /dev/fuse; then
	command -v setfacl >/dev/null || ml_skip "/dev/fuse is closed to users and no setfacl"
	getfacl -p /dev/fuse >"$ML_TMP/dev-fuse.acl" 2>/dev/null || ml_skip "no ACLs on /dev"
	setfacl -m u:$USER_ID:rw /dev/fuse || ml_skip "cannot let uid $USER_ID use /dev/fuse"
	ml_on_exit "setfacl --restore='$ML_TMP/dev-fuse.acl'"
fi
as_user() { setpriv --reuid=$USER_ID --regid=$USER_ID --clear-groups -- "$@"; }

# ml_start runs ML_DAEMON: a wrapper that drops to the test uid (exec keeps
# the pid, so the daemon's fds are still found by it).
ML_DAEMON=$ML_TMP/slowmedia-as-user
cat >"$ML_DAEMON" <<EOF
#!/bin/sh
exec setpriv --reuid=$USER_ID --regid=$USER_ID --clear-groups -- env HOME=$ML_TMP '$SLOWMEDIA' "\$@"
EOF
chmod 755 "$ML_DAEMON"
# Root cannot stat a mount without allow_other: a helper that does so may
# report failure although the daemon mounted.
SLOWMEDIA_FD_BUDGET=$FD_BUDGET ml_try_start "$fs/lower" "$mnt" 2>/dev/null ||
	ml_is_mounted "$mnt" fuse.slowmedia || { echo "FAIL: no mount, giving up"; exit 1; }
log=${ML_LOGS[$mnt]}
ml_check "the daemon runs as uid $USER_ID" \
	test "$(awk '/^Uid:/ {print $2}' "/proc/$ML_PID/status")" = $USER_ID

check_fds() { # WHEN
	local n
	n=$(ml_daemon_fds "$mnt")
	ml_check "daemon holds $n fds (< $FD_LIMIT) $1" test "$n" -lt $FD_LIMIT
}
forget_kernel_inodes() { echo 2 >/proc/sys/vm/drop_caches; }

for ((d = 0; d < DIRS; d++)); do
	as_user mkdir "$mnt/d$d"
	ml_check "create $PER_DIR files in d$d" as_user "$MTOOL" mkfiles "$mnt/d$d" $PER_DIR
done
total=$((DIRS * PER_DIR))
forget_kernel_inodes
n=$(as_user find "$mnt" -type f 2>/dev/null | wc -l)
ml_check "find sees $total files (saw $n)" test "$n" = $total
ml_check "du works" as_user du -s "$mnt"
forget_kernel_inodes
n=$(as_user find "$mnt" -type f -print0 2>/dev/null | as_user xargs -0 stat -c %s 2>/dev/null | wc -l)
ml_check "stat of every file ($n)" test "$n" = $total
for ((d = 0; d < DIRS; d++)); do
	ml_check "content of d$d/*" as_user "$MTOOL" checkfiles "$mnt/d$d" $PER_DIR
done
check_fds "after the walk"
forget_kernel_inodes
as_user "$MTOOL" checkfiles "$mnt/d4" $PER_DIR >/dev/null 2>&1 # push the fd cache
ml_check "rename across evicted directories" as_user mv "$mnt/d0/f00001" "$mnt/d1/moved"
ml_check "link into an evicted directory" as_user ln "$mnt/d0/f00002" "$mnt/d2/link2"
ml_check "unlink in an evicted directory" as_user rm "$mnt/d3/f00003"
forget_kernel_inodes
as_user "$MTOOL" checkfiles "$mnt/d4" $PER_DIR >/dev/null 2>&1
ml_check "moved file readable" test "$(as_user cat "$mnt/d1/moved" 2>&1)" = f00001
ml_check "link count through the mount" test "$(as_user stat -c %h "$mnt/d2/link2" 2>&1)" = 2
ml_check "the daemon said handles are refused" grep -q "file handles refused" "$log"
ml_check "no inode reported unreachable" ml_not grep "cannot be reached" "$log"
check_fds "at the end"
ml_stop "$mnt"
ml_finish
