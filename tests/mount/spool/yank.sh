#!/bin/bash
# spool-yank: a medium pulled in the middle of a flush loses nothing that was
# acknowledged when spool= is on. Over an emulated USB stick (slowdev, ext2):
# files written through a mount with rate=1M and a spool on a tmpfs; the
# medium is ejected mid-flush; the writers saw no error; the mount is
# unmounted (the daemon gives up on the medium and says the data stays in
# the spool); the lower is unmounted lazily, as when a disk is pulled. Then
# the medium is "re-inserted" (the eject cleared, e2fsck -p, mounted again)
# and mounted through slowmedia with the same spool: the replay puts the
# rest on it, and every file holds what was written. At the end the spool
# holds nothing for the medium any more. SPOOL_DEBUG=1 logs every record
# the replay applies or skips.
# usage: yank.sh SLOWMEDIA QIO SLOWDEV SLOWMEDIACTL
SLOWMEDIA=$1 QIO=$2 SLOWDEV=${3:-} CTL=${4:-}
. "$(dirname "$0")/../queue/qlib.sh"
q_require_slowdev e2fsck
q_init

SD=sp-yank-$$ LOWER=$Q_TMP/lower MNT=$Q_TMP/mnt SPOOL=$Q_TMP/spool
q_tmpfs "$SPOOL"
chmod 700 "$SPOOL"
q_on_exit "slowdev_down $SD"
slowdev_up "$SD" 64 usbstick ext2 "$LOWER" || { echo "slowdev_up failed"; exit 1; }
LOOP=$(slowdev_loop "$SD")
q_start "$LOWER" "$MNT" "rate=1M,queue=16M,spool=$SPOOL,drain_timeout=2"

declare -A SIZE=([big.dat]=$((8 << 20)) [sub/small.dat]=$((100 << 10)) [second.dat]=$((1 << 20)))
declare -A SEED=([big.dat]=41 [sub/small.dat]=42 [second.dat]=43)
mkdir "$MNT/sub"
for f in big.dat sub/small.dat second.dat; do
	q_check "$f written (acknowledged)" q_quiet "$QIO" create "$MNT/$f" \
		write=ok "${SIZE[$f]}" "${SEED[$f]}" close=ok
done
sleep 2
slowdev_ctl "$SD" eject || q_fail "slowdev refused eject"
written=$(slowdev_stat "$SD" write_bytes)
q_log "ejected after $written bytes reached the medium"
q_check "ejected mid-flush (less than the data written reached it)" [ "$written" -lt $((9 << 20)) ]
sleep 1

umount "$MNT" 2>/dev/null || umount -l "$MNT" || q_fail "umount $MNT failed"
q_check "the daemon exited after the unmount" q_wait_daemon_any "$MNT"
q_check "its log says the data stays in the spool" grep -q 'stay in the spool' "$Q_LOG"
sed 's/^/  | /' "$Q_LOG" | tail -8
umount -l "$LOWER"

# Re-inserted: the same image, checked and mounted again.
slowdev_ctl "$SD" clear || q_fail "slowdev refused clear"
e2fsck -p "$LOOP" >/dev/null 2>&1
q_check "the medium mounts again" mount "$LOOP" "$LOWER"
q_on_exit "umount -l $LOWER"
ls -lR "$LOWER" | sed 's/^/  the medium before the replay: /'
q_start "$LOWER" "$MNT" "spool=$SPOOL${SPOOL_DEBUG:+,debug}"
grep -v 'unique\|^ \|replay: record' "$Q_LOG" | sed 's/^/  | /'
q_check "the replay is in the log" grep -q 'spool replay: [1-9][0-9]* records' "$Q_LOG"
for f in big.dat sub/small.dat second.dat; do
	q_check "$f holds what was written" q_quiet "$QIO" verify "$MNT/$f" "${SIZE[$f]}" "${SEED[$f]}"
done
"$CTL" status "$MNT" >"$Q_TMP/status" 2>&1
sed 's/^/  status: /' "$Q_TMP/status"
q_check "slowmediactl status shows the spool and the replay" \
	grep -Eq "spool +$SPOOL: .*replayed [1-9][0-9]* records" "$Q_TMP/status"
q_stop "$MNT"
"$CTL" spool list "$SPOOL" | sed 's/^/  list: /'
q_check "nothing is pending in the spool" grep -q 'pending   nothing' <("$CTL" spool list "$SPOOL")
q_finish
