#!/bin/bash
# Unlink elision: queued data of a file that is unlinked and no longer open is
# dropped, never written. With the flush rate capped, a 5 MiB temp file is
# written, closed and unlinked at once (and another one unlinked while still
# open, then closed); the medium (ext2 on a loop device) sees far fewer than
# 5 MiB written, nothing is left, and the unmount has nothing to drain.
# usage: unlink-elision.sh SLOWMEDIA QIO
SLOWMEDIA=$1 QIO=$2
. "$(dirname "$0")/qlib.sh"

q_setup_ext2 16
LOOP=$Q_LOOP
q_start "$LOWER" "$MNT" rate=256K
LIMIT=$((1 << 20))

written_since() { # S0: bytes the loop device wrote since sector count S0
	echo $((($(q_sectors_written "$LOOP") - $1) * 512))
}
free0=$(stat -f -c %f "$LOWER")
sync -f "$LOWER"
s0=$(q_sectors_written "$LOOP")

# Closed, then unlinked.
q_check "write 5 MiB and close" "$QIO" create "$MNT/tmp1" write=ok 5M 41 close=ok
rm "$MNT/tmp1"
# Unlinked while open, then closed.
exec 3>"$MNT/tmp2"
q_check "write 5 MiB to a file" "$QIO" gen /proc/self/fd/3 5M 42
rm "$MNT/tmp2"
sleep 1
exec 3>&-

# Long enough for the flusher to write ~0.75 MiB more at 256K/s had it not
# dropped the data.
sleep 2
sync -f "$LOWER"
w=$(written_since "$s0")
q_log "the medium wrote $w bytes for 10 MiB of temp files"
q_check "the medium wrote less than 1 MiB of the 10 MiB" [ "$w" -lt $LIMIT ]
gone() { [ ! -e "$LOWER/tmp1" ] && [ ! -e "$LOWER/tmp2" ]; }
q_check "nothing is left on the medium" gone

q_alive "$MNT"
q_stop "$MNT"
q_log "unmount took $Q_STOP_SECS s"
q_check "the unmount had nothing to drain (under 2 s)" q_between "$Q_STOP_SECS" 0 2
w=$(written_since "$s0")
q_check "still less than 1 MiB written after the unmount ($w bytes)" [ "$w" -lt $LIMIT ]
free1=$(stat -f -c %f "$LOWER")
q_check "all free blocks back ($free0 before, $free1 after)" [ "$free1" -ge $((free0 - 8)) ]
q_finish
