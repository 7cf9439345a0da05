#!/bin/bash
# Reads without end on one medium do not starve another medium's writers.
# Two ext2 media behind one slowdev head (one group). Medium A is written far
# ahead of its small queue (queue=$A_QUEUE: the writer waits for room), while
# medium B is read without a pause: O_DIRECT reads of uncached data through
# B's mount (one medium read each, READ_MB MiB), back to back, for the whole
# window. B's reads hold the group (rule 1 of sched/arbiter.c); A's requests
# carry its read bound (hold_ms, since its writers wait: the longer of 1 s
# and its own gate's 4 x latency), so A still gets one chunk per bound plus
# chunk, about PERIOD_S. Over WINDOW_S seconds:
# - A's image received at least MIN_PCT % of WINDOW_S / PERIOD_S chunks of
#   A's average size in the window (its status: written_bytes / chunks, at
#   least CHUNK_MIN, the pacer's smallest: the floor keeps the check failing
#   at the ~12 KB/s A got before the read bound), and A's queue held data at
#   every sample (A wanted to flush all along);
# - B's reads went on: at least MIN_READ_MB MiB reached slowdev's image b
#   and the reader, and none of them took more than MAX_READ_S.
# usage: readhold.sh SLOWMEDIA ARBITERD SLOWDEV
SLOWMEDIA=$1 ARBITERD=$2 SLOWDEV=${3:-}
# B reads at most 4 MB/s for WARMUP_S + WINDOW_S: its file must last.
A_MB=${A_MB:-80}
. "$(dirname "$0")/alib.sh"
a_setup

READ_MB=1 FILE_MB=64 WRITER_WARMUP_S=2 WARMUP_S=1 WINDOW_S=8
PERIOD_S=1.1 MIN_PCT=30 CHUNK_MIN=65536 MIN_READ_MB=4 MAX_READ_S=1

# B's file, written straight to its lower while the medium is fast, then
# dropped from the page cache: every read through the mount reaches slowdev.
a_cold_file "$LB/big" "$FILE_MB"

a_start "$LA" "$MA" "queue=$A_QUEUE"
a_start "$LB" "$MB" "queue=$A_QUEUE"
for m in "$MA" "$MB"; do
	ml_check_here "$m registered with the arbiter" a_wait_field "$m" arbiter connected 5
done
st=$(a_arb status)
groups=$(grep '^mount' <<<"$st" | grep -o ' group=[^ ]*' | sort -u | wc -l)
ml_check "both mounts in one group ($(grep -c '^mount' <<<"$st") mounts, $groups group(s))" \
	[ "$groups" = 1 -a "$(grep -c '^mount' <<<"$st")" = 2 ]

# a_counts: A's written_bytes and chunks, from one status.
a_counts() {
	"$A_PY" "$A_TOOL" get "$(a_sock "$MA")" written_bytes chunks | tr '\n' ' '
}

a_writer "$MA" fa 40
WA=$A_WPID
sleep "$WRITER_WARMUP_S"
ml_log "A's queue before the reads: $(a_field "$MA" queued_bytes) bytes (queue=$A_QUEUE)"

rb0=$(slowdev_stat "$A_SD" b.read_bytes)
OUT=$ML_TMP/reads.out
"$A_PY" "$A_TOOL" readfor "$MB/big" $((READ_MB << 20)) \
	"$(awk -v w="$WARMUP_S" -v s="$WINDOW_S" 'BEGIN { print w + s + 0.3 }')" >"$OUT" 2>&1 &
RPID=$!
A_WRITERS[$RPID]=1
sleep "$WARMUP_S"
read -r wb0 ch0 < <(a_counts)
a_window "$WINDOW_S" "$MA"
read -r wb1 ch1 < <(a_counts)
ml_check_here "B's reader ended (its last read done)" a_wait_writer "$RPID" 10
rb1=$(slowdev_stat "$A_SD" b.read_bytes)
ml_check "A's writer still waits for room (it is far ahead of the queue)" kill -0 "$WA"
qa=$(a_field "$MA" queued_bytes)

# A's side.
dch=$((ch1 - ch0)) dwb=$((wb1 - wb0))
if [ "$dch" -gt 0 ]; then
	chunk=$((dwb / dch))
else
	chunk=$((ch1 ? wb1 / ch1 : 0))
fi
[ "$chunk" -ge "$CHUNK_MIN" ] || chunk=$CHUNK_MIN
need=$(awk -v w="$A_SECS" -v p="$PERIOD_S" -v c="$chunk" -v m="$MIN_PCT" \
	'BEGIN { printf "%d", m / 100 * w / p * c }')
rate_a=$(awk -v b="$A_DA" -v s="$A_SECS" 'BEGIN { printf "%d", b / s }')
ml_log "window $A_SECS s: A's image got $A_DA bytes ($rate_a B/s), $dch chunks of $((dch ? dwb / dch : 0)) bytes on average; longest gap $A_GAP_A s; queue $qa bytes at the end"
ml_log "one chunk per $PERIOD_S s would be $(awk -v w="$A_SECS" -v p="$PERIOD_S" 'BEGIN { printf "%.1f", w / p }') chunks; at least $need bytes ($MIN_PCT % of it, chunks of $chunk bytes) wanted"
ml_check "A's queue held data throughout ($A_EMPTY of $A_SAMPLES samples not)" [ "$A_EMPTY" = 0 ]
ml_check "A's writers were not starved by B's reads: $A_DA bytes >= $need" [ "$A_DA" -ge "$need" ]

# B's side.
nreads=$(grep -c '^read ' "$OUT")
total=$(awk '$1 == "total" { print $2 }' "$OUT")
rsecs=$(awk '$1 == "total" { print $3 }' "$OUT")
rmax=$(awk '$1 == "read" && $3 > m { m = $3 } END { printf "%.3f", m + 0 }' "$OUT")
rmed=$(awk '$1 == "read" { print $3 }' "$OUT" | sort -n | awk '{ v[NR] = $1 } END { printf "%.3f", NR ? v[int((NR + 1) / 2)] : 0 }')
ml_log "B: $nreads reads of $READ_MB MiB in ${rsecs:-?} s (${total:-?} bytes; slowdev read $((rb1 - rb0)) bytes of b); a read took $rmed s (median), $rmax s at most"
ml_check "B's reader read its file without error ($(grep -v '^read ' "$OUT" | head -n 2 | tr '\n' ' '))" \
	[ -n "$total" ]
ml_check "B's reads went on: >= $MIN_READ_MB MiB read ($((${total:-0} >> 20)) MiB) and reached the medium ($(((rb1 - rb0) >> 20)) MiB)" \
	[ "${total:-0}" -ge $((MIN_READ_MB << 20)) -a $((rb1 - rb0)) -ge $((MIN_READ_MB << 20)) ]
ml_check "no read of B took more than $MAX_READ_S s ($rmax s)" a_le "$rmax" "$MAX_READ_S"

a_end "$MA" "$MB"
