#!/bin/bash
# spool-rescue: without a spool, no exit throws queued data away. Over an
# emulated USB stick (slowdev, ext2), files are written through a mount with
# rate=1M and the medium is ejected mid-flush; then the mount ends:
#   1. detached, with drain_timeout=3: the drain keeps retrying for 3 s
#      without progress, then saves what is left in the rescue directory
#      (rescue=) and says where;
#   2. the same with drain_timeout=600 and a second SIGTERM to the daemon.
# Each time: the log names the rescue directory; slowmediactl spool list
# shows it; the medium is re-inserted (eject cleared, e2fsck -p, mounted),
# its files are copied to DEST, `slowmediactl spool recover RESCUE --medium
# ID --to DEST` lays the rescued bytes over them, and every file in DEST then
# holds what was written, byte for byte. The rescue directory is root's and
# owner-only at every level (0700 directories, 0600 files): it holds the
# medium's data, which its own modes may not have let others read.
# usage: rescue.sh SLOWMEDIA QIO SLOWDEV SLOWMEDIACTL
SLOWMEDIA=$1 QIO=$2 SLOWDEV=${3:-} CTL=${4:-}
. "$(dirname "$0")/../queue/qlib.sh"
q_require_slowdev e2fsck blkid
q_init

declare -A SIZE=([big.dat]=$((6 << 20)) [sub/small.dat]=$((100 << 10)))
declare -A SEED=([big.dat]=51 [sub/small.dat]=52)

# run N HOW: one medium, written, ejected, the mount ended by HOW
# (timeout | signal), the rescue checked and recovered.
run() {
	local n=$1 how=$2 sd=sp-resc$1-$$ lower=$Q_TMP/lower$1 mnt=$Q_TMP/mnt$1
	local rescue=$Q_TMP/rescue$1 dest=$Q_TMP/dest$1 opts loop uuid t0 f
	q_on_exit "slowdev_down $sd"
	slowdev_up "$sd" 64 usbstick ext2 "$lower" || { q_fail "slowdev_up failed"; return; }
	loop=$(slowdev_loop "$sd")
	uuid=$(blkid -o value -s UUID "$loop")
	opts="rate=1M,queue=16M,rescue=$rescue,drain_timeout=3"
	[ "$how" = signal ] && opts="rate=1M,queue=16M,rescue=$rescue,drain_timeout=600"
	q_start "$lower" "$mnt" "$opts"
	mkdir "$mnt/sub"
	for f in big.dat sub/small.dat; do
		q_check "$how: $f written" q_quiet "$QIO" create "$mnt/$f" write=ok \
			"${SIZE[$f]}" "${SEED[$f]}" close=ok
	done
	sleep 1.5
	slowdev_ctl "$sd" eject || q_fail "slowdev refused eject"
	sleep 1
	t0=$(q_now)
	if [ "$how" = signal ]; then
		kill -TERM "$Q_PID"
		sleep 2
		q_check "signal: still draining after the first SIGTERM" kill -0 "$Q_PID"
		kill -TERM "$Q_PID"
	else
		umount -l "$mnt"
	fi
	q_check "$how: the daemon exited" q_wait_daemon_any "$mnt"
	q_log "$how: it exited $(q_since "$t0") s after the end began, status $Q_RC"
	grep -E 'saved in|second signal|drain_timeout|rescue' "$Q_LOG" | sed 's/^/  | /'
	q_check "$how: the log names the rescue directory" grep -q "saved in $rescue/" "$Q_LOG"
	find "$rescue" -printf "  $how: %M %u %p\n"
	q_check "$how: the rescue is root's, directories 0700, files 0600" \
		[ -z "$(find "$rescue" \( \( -type d ! -perm 0700 \) -o \( -type f ! -perm 0600 \) \
			-o ! -user root \) -print)" -a -n "$(find "$rescue" -type f -name MANIFEST)" ]
	q_check "$how: slowmediactl spool list shows it" \
		grep -q "rescue of medium uuid:$uuid" <("$CTL" spool list "$rescue")
	"$CTL" spool list "$rescue" | sed 's/^/  list: /'
	umount -l "$lower"
	slowdev_ctl "$sd" clear || q_fail "slowdev refused clear"
	e2fsck -p "$loop" >/dev/null 2>&1
	q_check "$how: the medium mounts again" mount "$loop" "$lower"
	mkdir -p "$dest"
	cp -a "$lower/." "$dest/"
	umount "$lower"
	q_check "$how: recover lays the rescue over a copy of the medium" \
		"$CTL" spool recover "$rescue" --medium "uuid:$uuid" --to "$dest"
	for f in big.dat sub/small.dat; do
		q_check "$how: $f whole after the recover" q_quiet "$QIO" verify "$dest/$f" \
			"${SIZE[$f]}" "${SEED[$f]}"
	done
	slowdev_down "$sd"
}

run 1 timeout
run 2 signal
q_finish
