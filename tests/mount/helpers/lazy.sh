#!/usr/bin/env bash
# `umount -l` detaches at once and says so; the daemon drains on, the data
# lands on the medium, then the daemon exits and its private lower mount and
# loop device go with it.
#   lazy.sh SLOWMEDIA HELPERS_DIR
SLOWMEDIA=$1 HELPERS=$2
source "$(dirname "$0")/hlib.sh"

h_setup
img=$(h_image 64) || exit 1
mnt=$ML_TMP/media
mkdir -m 755 "$mnt"
h_put "$ML_TMP/ref" 8 # 4 s at rate=2M

ml_check "mount" h_mount_image "$img" "$mnt" rate=2M,queue=32M
pid=$(h_daemon_pid "$mnt")
ml_check "8 MiB written" cp "$ML_TMP/ref" "$mnt/f"
t0=$EPOCHREALTIME
rc=0
umount -l "$mnt" 2>"$ML_TMP/err" || rc=$?
secs=$(ml_since "$t0")
sed 's/^/  | /' "$ML_TMP/err"
ml_check "umount -l succeeds (exit $rc)" test "$rc" = 0
ml_check "at once ($secs s)" awk -v s="$secs" 'BEGIN { exit !(s < 2) }'
ml_check "and says the daemon goes on writing" grep -q "goes on writing" "$ML_TMP/err"
ml_check "the mount is gone" ml_not ml_is_mounted "$mnt"
ml_check "the lower mount is detached" test -z "$(h_lower_mounts)"
ml_check "the utab entry is gone" ml_not grep -q "TARGET=$mnt " /run/mount/utab
ml_check "the daemon still runs (draining)" kill -0 "$pid"
ml_check "the daemon exits once drained" h_wait_gone "$pid" 20
ml_log "the daemon was gone $(ml_since "$t0") s after umount -l"
ml_check_here "then the loop device goes too" h_retry 5 test -z "$(h_loop_of "$img")"
ml_check "every byte is on the medium" h_image_has "$img" /f "$ML_TMP/ref"
ml_check "the medium is clean (fsck)" e2fsck -fn "$img"
ml_finish
