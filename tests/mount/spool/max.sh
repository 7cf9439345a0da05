#!/bin/bash
# spool-max: writers wait at spool_max=, however fast the medium empties the
# queue. Over a tmpfs lower (its chunks land at once, so the queue is empty
# between writes and the journal's records wait only for the next metadata
# flush), 40 MiB are written in 64 KiB writes through a mount with
# spool_max=8M, while the spool's size is sampled every 20 ms: it must never
# exceed spool_max by more than 1 MiB (one write's record, the segment
# header), and the data must be whole on the medium after the unmount.
# (The soak saw 49.2 MB at spool_max=32M: the journal's active segment could
# grow to 64 MiB, and a write found no room check while the queue was empty.)
# usage: max.sh SLOWMEDIA QIO
SLOWMEDIA=$1 QIO=$2
. "$(dirname "$0")/../queue/qlib.sh"
q_setup_tmpfs
SPOOL=$Q_TMP/spool
mkdir -p "$SPOOL"
mount -t tmpfs -o size=128M,mode=700 qt-spool "$SPOOL" || q_fail "no tmpfs for the spool"
q_on_exit "umount '$SPOOL' || umount -l '$SPOOL'"
MAX=$((8 << 20)) SLACK=$((1 << 20))
q_start "$LOWER" "$MNT" "spool=$SPOOL,spool_max=8M"

head -c $((40 << 20)) /dev/urandom >"$Q_TMP/src"
spool_bytes() { du -sb "$SPOOL" | cut -f1; }
ml_sample_peak "$Q_TMP/peak" 0.02 spool_bytes
t0=$(q_now)
q_check "40 MiB written through the mount" dd if="$Q_TMP/src" of="$MNT/f" bs=64K status=none
q_log "written in $(q_since "$t0") s"
ml_sample_stop
peak=$(cat "$Q_TMP/peak")
q_log "the spool's peak: $peak bytes (spool_max $MAX)"
q_check "the spool never held more than spool_max + 1 MiB" [ "$peak" -le $((MAX + SLACK)) ]
q_check "the spool was used (its peak over 1 MiB)" [ "$peak" -gt $((1 << 20)) ]
q_stop "$MNT"
q_check "the file is whole on the medium" cmp "$Q_TMP/src" "$LOWER/f"
q_finish
