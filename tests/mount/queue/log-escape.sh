#!/bin/bash
# A file name cannot forge a log line. The victim's name holds a newline and
# then a fake "slowmedia: ..." line; its writes fail on the medium (slowdev's
# `fail write` over the whole disk, see eio.sh), so the daemon logs its path
# twice: "write of PATH failed" while mounted, and "PATH: N bytes are not on
# the medium ...: saved in RESCUE" at exit, once the drain gives up
# (drain_timeout=2; the rescue directory in the test's temp dir). Each must stay
# on one line, the newline shown as \n, and no line may start with the fake.
# A second file of such a name, on the medium before the mount, is read while
# its blocks refuse reads (`fail read`): "read of PATH failed" must be one
# line too.
# usage: log-escape.sh SLOWMEDIA QIO SLOWDEV
SLOWMEDIA=$1 QIO=$2 SLOWDEV=${3:-}
. "$(dirname "$0")/qlib.sh"
q_require_slowdev filefrag
q_init

loss_line() {
	grep -F "$LOWER/$ESCAPED: " "$Q_LOG" | grep -q "bytes are not on the medium .*saved in $Q_TMP/rescue/"
}

no_line_starts() { # TEXT
	awk -v t="$1" 'index($0, t) == 1 { bad = 1 } END { exit bad }' "$Q_LOG"
}

SD=qt-logesc-$$ LOWER=$Q_TMP/lower MNT=$Q_TMP/mnt
FAKE="slowmedia: FORGED all queued data is on the medium"
NAME=$'victim\n'"$FAKE"
ESCAPED="victim\\n$FAKE" # as the log must show it
q_on_exit "slowdev_down $SD"
slowdev_up "$SD" 16 dvdram ext2 "$LOWER" || { echo "slowdev_up failed"; exit 1; }
slowdev_ctl "$SD" "fast on"
"$QIO" gen "$LOWER/r$NAME" 64K 23 >/dev/null
sync -f "$LOWER"
q_start "$LOWER" "$MNT" "drain_timeout=2,rescue=$Q_TMP/rescue"

# Allocated and synced before the fault: only the overwrite must fail.
q_check "the victim file, allocated and synced" \
	"$QIO" create "$MNT/$NAME" write=ok 128K 19 fsync=ok close=ok
sync -f "$LOWER"
slowdev_ctl "$SD" "fail write 0 $((16 << 20))" || q_fail "slowdev refused the fault"

# Its close may already hear the EIO, when the flusher was quicker (a busy
# machine): only the write's acceptance is checked; the log is the point.
q_check "the overwrite is queued" "$QIO" open "$MNT/$NAME" write=ok 64K 21 close
for ((i = 0; i < 100; i++)); do
	grep -q "failed: " "$Q_LOG" && break
	sleep 0.1
done
q_check "the failed write is logged" grep -q "failed: " "$Q_LOG"
q_alive "$MNT"

# The reader's file: its pages dropped, its blocks refusing reads.
dd if="$LOWER/r$NAME" iflag=nocache count=0 status=none
filefrag -v "$LOWER/r$NAME" | awk -F: '
	/blocks of [0-9]+ bytes/ { bs = $0; sub(/.*blocks of /, "", bs); bs += 0 }
	$1 ~ /^ *[0-9]+$/ { split($3, p, /\.\./); printf "fail read %d %d\n", p[1] * bs, (p[2] + 1) * bs }' |
	while read -r cmd; do slowdev_ctl "$SD" "$cmd" || q_fail "slowdev refused '$cmd'"; done
q_check "the read of the second file fails" \
	"$QIO" verify=EIO "$MNT/r$NAME" 64K 23
q_alive "$MNT"
# The fault stays: the drain at exit gives up and saves the bytes.
q_stop "$MNT" allow-errors

echo "  the daemon's output:"
sed 's/^/  | /' "$Q_LOG"
q_check "the write failure names the file escaped, on one line" \
	grep -qF "write of $LOWER/$ESCAPED failed" "$Q_LOG"
q_check "the loss report names it escaped, on one line" loss_line
q_check "the read failure names the file escaped, on one line" \
	grep -qF "read of $LOWER/r$ESCAPED failed" "$Q_LOG"
q_check "no line starts with the forged text" no_line_starts "slowmedia: FORGED"
q_finish
