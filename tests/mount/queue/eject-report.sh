#!/bin/bash
# After an eject, the daemon's log names every file that is not on the medium.
# A 20 MiB file is queued and flushed slowly (rate=2M); the medium is ejected
# mid-flush (slowdev `eject`), and two small files are created and written
# during the eject. The daemon is stopped (it drains, fails, exits), the
# lower is unmounted while still ejected (so nothing more reaches the
# medium, as when a disk is pulled), then the eject is cleared and the
# medium read with debugfs, straight from slowdev's disk (no cache).
#
# Checked, for every file whose acknowledged data is not whole on the medium
# (missing, short or wrong): the log names it as lost or at risk both before
# the unmount (at the failure: 3 s after the last write) and after it (the
# exit report), and in each window at least
# one such line gives no figure below what the medium really lacks of it (a
# file's metadata, written later than its data, may be missing entirely).
# "Lost or at risk": the line holds the file's name and one of lost, at risk,
# may not, not on the medium, missing. Figures: a number with a unit (bytes,
# B, K/KiB, KB, M/MiB, MB, G/GiB, GB), paths left out.
# usage: eject-report.sh SLOWMEDIA QIO SLOWDEV
SLOWMEDIA=$1 QIO=$2 SLOWDEV=${3:-}
. "$(dirname "$0")/qlib.sh"
q_require_slowdev debugfs
q_init

SD=qt-ejct-$$ LOWER=$Q_TMP/lower MNT=$Q_TMP/mnt
BIG=eject-big.dat BIG_SIZE=$((20 << 20))
q_on_exit "slowdev_down $SD"
slowdev_up "$SD" 64 usbstick ext2 "$LOWER" || { echo "slowdev_up failed"; exit 1; }
DISK=$(slowdev_disk "$SD")
q_start "$LOWER" "$MNT" "rate=2M,drain_timeout=2,rescue=$Q_TMP/rescue"

ctl() {
	slowdev_ctl "$SD" "$1" || q_fail "slowdev ctl '$1' refused"
}

declare -A SIZE=([$BIG]=$BIG_SIZE [eject-new1.dat]=$((64 << 10)) [eject-new2.dat]=$((200 << 10))
	[eject-old.dat]=$((256 << 10)))
declare -A SEED=([$BIG]=71 [eject-new1.dat]=72 [eject-new2.dat]=73 [eject-old.dat]=74)

# A file that is on the medium before the eject: the medium check must see it.
q_check "eject-old.dat written and synced" q_quiet "$QIO" create "$MNT/eject-old.dat" \
	write=ok "${SIZE[eject-old.dat]}" "${SEED[eject-old.dat]}" fsync=ok close=ok
sync -f "$LOWER"
w0=$(slowdev_stat "$SD" write_bytes)
q_check "20 MiB queued" q_quiet "$QIO" create "$MNT/$BIG" write=ok "${SIZE[$BIG]}" "${SEED[$BIG]}" close=ok
sleep 4
ctl eject
flushed=$(($(slowdev_stat "$SD" write_bytes) - w0))
q_log "ejected after $flushed bytes reached the medium"
q_check "ejected mid-flush (2 to 18 MiB written)" \
	[ "$flushed" -ge $((2 << 20)) -a "$flushed" -le $((18 << 20)) ]
# The daemon may refuse these writes or report the failure at close: what it
# acknowledged (the write's bytes) is what the medium must hold.
for f in eject-new1.dat eject-new2.dat; do
	out=$("$QIO" create "$MNT/$f" write "${SIZE[$f]}" "${SEED[$f]}" close)
	echo "$out" | sed "s/^/  $f: /"
	# The create itself may fail with EIO: once a metadata flush hit the
	# ejected medium, ext2 refuses to allocate there (the error reaches the
	# caller, nothing is acknowledged). Anything else is wrong.
	q_check "$f created during the eject, or refused with EIO" \
		grep -Eq '^create rc=(ok|EIO) ' <<<"$out"
	SIZE[$f]=$(awk '$1 == "write" {sub("bytes=", "", $3); print $3}' <<<"$out")
done
sleep 3

# The daemon's exit status is not judged here: it may well report the loss.
cp "$Q_LOG" "$Q_TMP/log.failure"
# Busy: what is queued cannot be written. Detached lazily, the daemon gives
# up on it, reports it and exits.
umount "$MNT" 2>/dev/null || umount -l "$MNT" || q_fail "umount $MNT failed"
t0=$(q_now)
q_check "the daemon exited within $Q_EXIT_TIMEOUT_S s of the unmount" q_wait_daemon_any "$MNT"
q_log "the daemon exited with status $Q_RC after $(q_since "$t0") s"
lines=$(wc -l <"$Q_TMP/log.failure")
tail -n +$((lines + 1)) "$Q_LOG" >"$Q_TMP/log.exit"
echo "  the daemon's log:"
sed 's/^/  | /' "$Q_LOG" | head -40

# The medium pulled: whatever the lower still holds in memory is gone.
umount "$LOWER" 2>/dev/null || umount -l "$LOWER"
ctl clear
sleep 0.2

# missing NAME: bytes of NAME the medium lacks: its size if it is absent,
# else from the first byte that differs (or the size it falls short by).
missing() {
	local f=$1 out=$Q_TMP/medium.$1 want=$Q_TMP/want.$1 first
	rm -f "$out"
	"$QIO" gen "$want" "${SIZE[$f]}" "${SEED[$f]}" >/dev/null
	debugfs -R "dump /$f $out" "$DISK" >/dev/null 2>&1
	if [ ! -f "$out" ] || ! debugfs -R "stat /$f" "$DISK" 2>/dev/null | grep -q Inode:; then
		echo "${SIZE[$f]}"
		return
	fi
	first=$(cmp "$want" "$out" 2>/dev/null | awk '{sub(",", "", $5); print $5}')
	if [ -n "$first" ]; then
		echo $((SIZE[$f] - first + 1))
	elif [ "$(q_size "$out")" -lt "${SIZE[$f]}" ]; then
		echo $((SIZE[$f] - $(q_size "$out")))
	else
		echo 0
	fi
}

# reported LOG NAME MISSING: LOG has a line naming NAME as lost or at risk
# whose figures (if any) are not below MISSING (5% for rounding).
reported() {
	grep -F -- "$2" "$1" | grep -Ei 'lost|at risk|may not|not on the medium|missing' |
		awk -v need="$3" '
		function unit(u) {
			if (u ~ /^(bytes?|B)$/) return 1
			if (u ~ /^(K|KiB)$/) return 1024
			if (u ~ /^[kK]B$/) return 1000
			if (u ~ /^(M|MiB)$/) return 1048576
			if (u == "MB") return 1e6
			if (u ~ /^(G|GiB)$/) return 1073741824
			if (u == "GB") return 1e9
			return 0
		}
		{
			s = $0
			gsub(/[^ ]*\/[^ ]*/, " ", s) # paths
			max = -1
			while (match(s, /[0-9]+(\.[0-9]+)? ?[A-Za-z]+/)) {
				tok = substr(s, RSTART, RLENGTH)
				s = substr(s, RSTART + RLENGTH)
				n = tok; sub(/[^0-9.].*/, "", n)
				u = tok; sub(/^[0-9.]+ ?/, "", u)
				if (unit(u) && n * unit(u) > max) max = n * unit(u)
			}
			if (max < 0 || max >= 0.95 * need) ok = 1
		}
		END { exit !ok }'
}

debugfs -R "ls -l /" "$DISK" >"$Q_TMP/medium.ls" 2>&1
sed 's/^/  medium: /' "$Q_TMP/medium.ls"
q_check "debugfs reads the medium" grep -q lost+found "$Q_TMP/medium.ls"
q_check "the file synced before the eject is whole on the medium" \
	[ "$(missing eject-old.dat)" = 0 ]
for f in "$BIG" eject-new1.dat eject-new2.dat; do
	if [ "${SIZE[$f]:-0}" = 0 ]; then
		q_log "$f: no bytes acknowledged, nothing to look for"
		continue
	fi
	m=$(missing "$f")
	q_log "$f: the medium lacks $m of its ${SIZE[$f]} acknowledged bytes"
	[ "$m" = 0 ] && continue
	q_check "$f (lacks $m bytes) is reported lost or at risk at the failure" \
		reported "$Q_TMP/log.failure" "$f" "$m"
	q_check "$f (lacks $m bytes) is reported lost or at risk at exit" \
		reported "$Q_TMP/log.exit" "$f" "$m"
done
q_finish
