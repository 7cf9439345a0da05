#!/bin/bash
# Reads without end on a medium do not starve its own writers. One mount,
# no arbiter (arbiter=off: only the mount's own read gate decides). Its
# writer is far ahead of a small queue (queue=$A_QUEUE: it waits for room),
# while a reader reads the same medium through the mount without a pause:
# O_DIRECT reads of uncached data (one medium read each, READ_MB MiB), back
# to back. Reads win, but the gate's hold is bounded while writers wait
# (policy_gate_hold: at most 4 x latency=, here 400 ms, then one chunk), so
# over WINDOW_S seconds:
# - the image received at least MIN_PCT % of WINDOW_S / PERIOD_S chunks of
#   CHUNK_MIN bytes, the pacer's smallest (at d7e7508 the gate held as long
#   as reads went on: the writer got next to nothing);
# - the reads went on: at least MIN_READ_MB MiB reached slowdev and the
#   reader, and none took more than MAX_READ_S.
# No control socket is needed, so the same script runs against older builds.
# usage: gatebound.sh SLOWMEDIA ARBITERD SLOWDEV
SLOWMEDIA=$1 ARBITERD=$2 SLOWDEV=${3:-}
A_MB=${A_MB:-96}
. "$(dirname "$0")/alib.sh"
a_setup

READ_MB=1 FILE_MB=48 WRITER_WARMUP_S=2 WARMUP_S=1 WINDOW_S=8
PERIOD_S=0.6 MIN_PCT=30 CHUNK_MIN=65536 MIN_READ_MB=4 MAX_READ_S=1

# The file to read, written straight to the lower while the medium is fast,
# then dropped from the page cache: every read through the mount reaches
# slowdev.
a_cold_file "$LA/big" "$FILE_MB"

mkdir -p "$MA"
ML_DAEMON=$SLOWMEDIA ml_start "$LA" "$MA" -o "queue=$A_QUEUE,arbiter=off"
ml_on_exit a_fast

a_writer "$MA" fa 40
WA=$A_WPID
sleep "$WRITER_WARMUP_S"

rb0=$(slowdev_stat "$A_SD" a.read_bytes)
OUT=$ML_TMP/reads.out
"$A_PY" "$A_TOOL" readfor "$MA/big" $((READ_MB << 20)) \
	"$(awk -v w="$WARMUP_S" -v s="$WINDOW_S" 'BEGIN { print w + s + 0.3 }')" >"$OUT" 2>&1 &
RPID=$!
A_WRITERS[$RPID]=1
sleep "$WARMUP_S"
a_window "$WINDOW_S"
ml_check_here "the reader ended (its last read done)" a_wait_writer "$RPID" 10
rb1=$(slowdev_stat "$A_SD" a.read_bytes)
ml_check "the writer still waits for room (it is far ahead of the queue)" kill -0 "$WA"

need=$(awk -v w="$A_SECS" -v p="$PERIOD_S" -v c="$CHUNK_MIN" -v m="$MIN_PCT" \
	'BEGIN { printf "%d", m / 100 * w / p * c }')
ml_log "window $A_SECS s: the image got $A_DA bytes in $A_INC_A samples of $A_SAMPLES that saw it grow; longest gap $A_GAP_A s"
ml_check "the writer was not starved by the reads: $A_DA bytes >= $need" [ "$A_DA" -ge "$need" ]

nreads=$(grep -c '^read ' "$OUT")
total=$(awk '$1 == "total" { print $2 }' "$OUT")
rmax=$(awk '$1 == "read" && $3 > m { m = $3 } END { printf "%.3f", m + 0 }' "$OUT")
ml_log "reads: $nreads of $READ_MB MiB (${total:-?} bytes; slowdev read $((rb1 - rb0)) bytes), $rmax s at most"
ml_check "the reader read its file without error ($(grep -v '^read ' "$OUT" | head -n 2 | tr '\n' ' '))" \
	[ -n "$total" ]
ml_check "the reads went on: >= $MIN_READ_MB MiB read ($((${total:-0} >> 20)) MiB), reaching the medium ($(((rb1 - rb0) >> 20)) MiB)" \
	[ "${total:-0}" -ge $((MIN_READ_MB << 20)) -a $((rb1 - rb0)) -ge $((MIN_READ_MB << 20)) ]
ml_check "no read took more than $MAX_READ_S s ($rmax s)" a_le "$rmax" "$MAX_READ_S"

a_end "$MA"
