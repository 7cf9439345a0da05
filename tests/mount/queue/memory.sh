#!/bin/bash
# queue= bounds the daemon's memory, not just the data bytes: 200,000 writes
# of 1 to 16 bytes at random offsets over a 32 MiB file (each one an extent
# of its own, with its tree node and buffer) through a mount with queue=8M
# and a slow rate=, so that little is flushed while they come. The daemon's
# peak RSS (VmHWM) must stay within queue= + 32 MiB (the daemon's own
# footprint: libraries, thread stacks, FUSE buffers); every write succeeds and
# the drain at unmount is clean.
# usage: memory.sh SLOWMEDIA QIO TINYW
SLOWMEDIA=$1 QIO=$2 TINYW=$3
QUEUE_MIB=8
SLACK_MIB=32
WRITES=200000
SPAN=32M
SEED=7
. "$(dirname "$0")/qlib.sh"
[ -x "$TINYW" ] || { echo "TINYW '$TINYW' is not executable"; exit 1; }
q_setup_tmpfs
q_start "$LOWER" "$MNT" "queue=${QUEUE_MIB}M,rate=256K"

# VmHWM of PID in KiB (0 when it cannot be read).
hwm_kib() {
	awk '$1 == "VmHWM:" {print $2; f = 1} END {if (!f) print 0}' "/proc/$1/status" 2>/dev/null
}

base=$(hwm_kib "$Q_PID")
out=$("$TINYW" "$MNT/scattered" "$WRITES" "$SPAN" "$SEED" 2>&1)
rc=$?
echo "  $out"
q_check "$WRITES tiny writes succeeded" [ "$rc" = 0 ]
peak=$(hwm_kib "$Q_PID")
limit=$(((QUEUE_MIB + SLACK_MIB) << 10))
q_log "daemon VmHWM: $((base >> 10)) MiB at the start, $((peak >> 10)) MiB after the writes" \
	"(limit: queue= ${QUEUE_MIB} MiB + ${SLACK_MIB} MiB = $((limit >> 10)) MiB)"
within() { [ "$1" -gt 0 ] && [ "$1" -le "$2" ]; }
q_check "peak RSS ($peak KiB) <= queue= + ${SLACK_MIB} MiB ($limit KiB)" within "$peak" "$limit"

q_alive "$MNT"
q_stop "$MNT"
q_check "the file reached the lower filesystem" [ "$(q_size "$LOWER/scattered")" -gt 0 ]
q_finish
