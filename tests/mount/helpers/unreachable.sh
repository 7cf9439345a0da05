#!/usr/bin/env bash
# When the control socket cannot be reached the umount helper never hangs:
#  - the daemon is gone (killed): the mount answers ENOTCONN, nothing is left
#    to drain, so umount unmounts it (and its lower mount and loop device)
#    with a warning, exit 0;
#  - the daemon lives but its socket is not found (SLOWMEDIA_CTL_DIR elsewhere
#    for the helper): umount refuses (exit 32) and says why, leaving the mount
#    as it is; -f unmounts without the drain, which still fails "busy" while
#    data is queued (the daemon's hold), and succeeds once it drained.
#   unreachable.sh SLOWMEDIA HELPERS_DIR
SLOWMEDIA=$1 HELPERS=$2
source "$(dirname "$0")/hlib.sh"

h_setup
img=$(h_image 64) || exit 1
mnt=$ML_TMP/media
mkdir -m 755 "$mnt" "$ML_TMP/no-sockets"
h_put "$ML_TMP/ref" 24 # 12 s at rate=2M: three tries, 3 s each, see it queued

# a dead daemon
ml_check "mount" h_mount_image "$img" "$mnt" rate=2M,queue=32M
pid=$(h_daemon_pid "$mnt")
ml_check "the daemon found" test -n "$pid"
kill -9 "$pid"
h_wait_gone "$pid" 5
t0=$EPOCHREALTIME
rc=0
umount "$mnt" 2>"$ML_TMP/err" || rc=$?
sed 's/^/  | /' "$ML_TMP/err"
ml_check "dead daemon: umount succeeds (exit $rc)" test "$rc" = 0
ml_check "dead daemon: quickly ($(ml_since "$t0") s)" \
	awk -v s="$(ml_since "$t0")" 'BEGIN { exit !(s < 8) }'
ml_check "dead daemon: with a warning" grep -q "warning: the daemon of $mnt is gone" "$ML_TMP/err"
ml_check "dead daemon: the mount is gone" ml_not ml_is_mounted "$mnt"
ml_check "dead daemon: the lower mount is gone" test -z "$(h_lower_mounts)"
ml_check_here "dead daemon: the loop device is gone" h_retry 5 test -z "$(h_loop_of "$img")"
ml_check "dead daemon: the utab entry is gone" ml_not grep -q "TARGET=$mnt " /run/mount/utab

# a live daemon whose socket the helper cannot find
ml_check "mount again" h_mount_image "$img" "$mnt" rate=2M,queue=32M
pid=$(h_daemon_pid "$mnt")
lower=$(h_lower_of "$mnt")
t0=$EPOCHREALTIME
ml_check "24 MiB written" cp "$ML_TMP/ref" "$mnt/f"
rc=0
SLOWMEDIA_CTL_DIR=$ML_TMP/no-sockets umount "$mnt" 2>"$ML_TMP/err" || rc=$?
sed 's/^/  | /' "$ML_TMP/err"
ml_check "no socket: umount refuses (exit $rc)" test "$rc" = 32
ml_check "no socket: and says why" grep -q "no control socket .* answers for it; not unmounted" "$ML_TMP/err"
ml_check "no socket: still mounted" ml_is_mounted "$mnt" fuse.slowmedia
rc=0
SLOWMEDIA_CTL_DIR=$ML_TMP/no-sockets umount -f "$mnt" 2>"$ML_TMP/err" || rc=$?
sed 's/^/  | /' "$ML_TMP/err"
ml_check "no socket, -f, data queued: refused as busy (exit $rc)" test "$rc" = 32
ml_check "no socket, -f, data queued: still mounted" ml_is_mounted "$mnt" fuse.slowmedia
ml_check_here "no socket, -f: succeeds once drained" \
	h_retry 30 env SLOWMEDIA_CTL_DIR="$ML_TMP/no-sockets" umount -f "$mnt"
ml_log "unmounted $(ml_since "$t0") s after the write"
ml_check "no socket, -f: the daemon exits" h_wait_gone "$pid" 10
ml_check "no socket, -f: the lower mount is gone" test -z "$(h_lower_mounts)"
ml_check "no socket, -f: its directory too" test ! -e "$lower"
ml_check "no socket, -f: every byte is on the medium" h_image_has "$img" /f "$ML_TMP/ref"
ml_finish
