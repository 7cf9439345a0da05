#!/usr/bin/env bash
# The umount helper interrupted mid-drain (SIGINT as from Ctrl-C, SIGTERM as
# from systemd's timeout; and umount(8) itself killed, as gvfs does after
# 10 s): umount fails with exit 8 and says so, the mount stays as it was, the
# daemon flushes on and the data lands; a later umount then finishes at once.
#   interrupt.sh SLOWMEDIA HELPERS_DIR
SLOWMEDIA=$1 HELPERS=$2
source "$(dirname "$0")/hlib.sh"

h_setup pgrep
img=$(h_image 64) || exit 1
mnt=$ML_TMP/media
mkdir -m 755 "$mnt"
h_put "$ML_TMP/ref" 8 # 4 s at rate=2M
ml_check "mount" h_mount_image "$img" "$mnt" rate=2M,queue=32M
lower=$(h_lower_of "$mnt")
pid=$(h_daemon_pid "$mnt")

# helper_of PID: the umount helper umount(8) PID runs (waits for it to start).
helper_of() {
	local i h
	for ((i = 0; i < 50; i++)); do
		h=$(pgrep -P "$1" 2>/dev/null | head -n 1)
		[ -n "$h" ] && [ "$(cat "/proc/$h/comm" 2>/dev/null)" = umount.slowmedi ] &&
			{ echo "$h"; return; }
		sleep 0.05
	done
}

# interrupted DESC NAME WHO SIG: umount in the background, SIG to WHO
# (helper or umount) a second into the drain.
interrupted() {
	local desc=$1 name=$2 who=$3 sig=$4 upid hpid rc=0 target
	ml_check "$desc: 8 MiB written" cp "$ML_TMP/ref" "$mnt/$name"
	umount "$mnt" 2>"$ML_TMP/err" &
	upid=$!
	hpid=$(helper_of "$upid")
	sleep 1
	target=$([ "$who" = helper ] && echo "$hpid" || echo "$upid")
	ml_check "$desc: the helper runs" test -n "$hpid"
	[ -n "$target" ] && kill -"$sig" "$target"
	wait "$upid" || rc=$?
	[ -n "$hpid" ] && h_wait_gone "$hpid" 5
	sed 's/^/  | /' "$ML_TMP/err"
	if [ "$who" = helper ]; then
		ml_check "$desc: umount fails with exit 8 (got $rc)" test "$rc" = 8
		ml_check "$desc: and says interrupted, still mounted" \
			grep -q "interrupted: .* stays mounted" "$ML_TMP/err"
	else
		ml_check "$desc: umount(8) is gone (exit $rc)" test "$rc" != 0
		ml_check "$desc: its helper stopped too" ml_not kill -0 "$hpid"
	fi
	ml_check "$desc: still mounted" ml_is_mounted "$mnt" fuse.slowmedia
	ml_check "$desc: the lower too" test "$(h_lower_mounts)" = "$lower"
	ml_check "$desc: the daemon lives" kill -0 "$pid"
	ml_check "$desc: the file reads back" cmp "$ML_TMP/ref" "$mnt/$name"
	ml_check_here "$desc: the data lands anyway" h_wait_size "$lower/$name" $((8 << 20)) 15
	ml_check "$desc: the lower file is complete" cmp "$ML_TMP/ref" "$lower/$name"
}

interrupted "SIGINT to the helper" f1 helper INT
interrupted "SIGTERM to the helper" f2 helper TERM
interrupted "SIGTERM to umount(8)" f3 umount TERM
t0=$EPOCHREALTIME
ml_check "then umount succeeds" umount "$mnt"
secs=$(ml_since "$t0")
ml_check "at once, nothing left to drain ($secs s)" awk -v s="$secs" 'BEGIN { exit !(s < 3) }'
ml_check "the lower mount is gone" test -z "$(h_lower_mounts)"
for f in f1 f2 f3; do
	ml_check "$f is on the medium" h_image_has "$img" "/$f" "$ML_TMP/ref"
done
ml_check "the daemon reported no errors" ml_not grep -qi error "$SLOWMEDIA_LOG_FILE"
ml_finish
