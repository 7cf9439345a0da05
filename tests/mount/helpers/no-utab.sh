#!/usr/bin/env bash
# A slowmedia mount without its utab entry (mount -n): umount then finds it
# as fuse.slowmedia in mountinfo (systemd's umount -c) and runs
# umount.fuse.slowmedia, which learns the private lower mount from the
# daemon itself: the drain, the unmount, and the lower and its loop device
# undone as with the entry.
#   no-utab.sh SLOWMEDIA HELPERS_DIR
SLOWMEDIA=$1 HELPERS=$2
source "$(dirname "$0")/hlib.sh"

h_setup
img=$(h_image 64) || exit 1
mnt=$ML_TMP/media
mkdir -m 755 "$mnt"
h_put "$ML_TMP/ref" 4 # 2 s at rate=2M

ml_check "mount -n" mount -n -t slowmedia "$img" "$mnt" -o "fstype=ext2,rate=2M,$H_OPTS"
ml_check "no utab entry" ml_not grep -qs "TARGET=$mnt " /run/mount/utab
ml_check "a lower mount" test "$(h_lower_mounts | wc -l)" = 1
ml_check "4 MiB written" cp "$ML_TMP/ref" "$mnt/f"
t0=$EPOCHREALTIME
ml_check "umount -c" umount -c "$mnt"
secs=$(ml_since "$t0")
ml_check "it drained first ($secs s)" awk -v s="$secs" 'BEGIN { exit !(s >= 1.5) }'
ml_check "the mount is gone" ml_not ml_is_mounted "$mnt"
ml_check "the lower mount is gone" test -z "$(h_lower_mounts)"
ml_check "and its directory" test -z "$(ls -A /run/slowmedia/lower)"
ml_check_here "the loop device is gone" h_retry 5 test -z "$(h_loop_of "$img")"
ml_check "every byte is on the medium" h_image_has "$img" /f "$ML_TMP/ref"
ml_finish
