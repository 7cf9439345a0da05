#!/usr/bin/env bash
# Unmounts that bypass the helpers do not lie: with data queued, `umount -i`
# (no helper) and `fusermount3 -u` fail with "busy" (the daemon holds its
# mount while anything is queued) and nothing is lost; once the queue has
# drained they succeed. (Their utab entry and private lower mount are then
# left to the caller: that is what bypassing the helper means.)
#   bypass.sh SLOWMEDIA HELPERS_DIR
SLOWMEDIA=$1 HELPERS=$2
source "$(dirname "$0")/hlib.sh"

h_setup fusermount3
img=$(h_image 64) || exit 1
mnt=$ML_TMP/media
mkdir -m 755 "$mnt"
h_put "$ML_TMP/ref" 8 # 4 s at rate=2M

# bypass DESC NAME CMD...: CMD must fail while queued, then succeed.
bypass() {
	local desc=$1 name=$2 lower pid rc=0 t0 secs
	shift 2
	ml_check "$desc: mount" h_mount_image "$img" "$mnt" rate=2M,queue=32M
	lower=$(h_lower_of "$mnt")
	pid=$(h_daemon_pid "$mnt")
	ml_check "$desc: the lower is recorded and the daemon found" test -n "$lower" -a -n "$pid"
	t0=$EPOCHREALTIME
	ml_check "$desc: 8 MiB written" cp "$ML_TMP/ref" "$mnt/$name"
	"$@" "$mnt" >"$ML_TMP/out" 2>&1 || rc=$?
	sed 's/^/  | /' "$ML_TMP/out"
	ml_check "$desc: fails while data is queued (exit $rc)" test "$rc" != 0
	ml_check "$desc: and says busy" grep -qi busy "$ML_TMP/out"
	ml_check "$desc: still mounted" ml_is_mounted "$mnt" fuse.slowmedia
	ml_check "$desc: the daemon lives" kill -0 "$pid"
	ml_check "$desc: the data still reads back" cmp "$ML_TMP/ref" "$mnt/$name"
	ml_check_here "$desc: succeeds once the queue drained" h_retry 20 "$@" "$mnt"
	secs=$(ml_since "$t0")
	ml_log "$desc: unmounted $secs s after the write"
	ml_check "$desc: not before the data could be written ($secs s)" \
		awk -v s="$secs" 'BEGIN { exit !(s >= 3) }'
	ml_check "$desc: the daemon exits" h_wait_gone "$pid" 10
	ml_check "$desc: every byte is in the lower" cmp "$ML_TMP/ref" "$lower/$name"
	umount "$lower" && rmdir "$lower"
	ml_check "$desc: on the image too" h_image_has "$img" "/$name" "$ML_TMP/ref"
}

bypass "umount -i" f1 umount -i
bypass "fusermount3 -u" f2 fusermount3 -u
ml_check "no loop device left on the image" test -z "$(h_loop_of "$img")"
ml_finish
