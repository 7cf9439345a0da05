#!/bin/bash
# The idle class. Two ext2 media behind one slowdev head (one group): one
# mount class=be, the other class=idle, both written continuously. While the
# be mount is busy, the idle one is served only by the thin guarantee (one
# idle chunk per group every 5 s, BFQ's idle-class timeout): over WINDOW_S
# seconds it writes at most MAX_IDLE_PCT % of the bytes, in at most
# WINDOW_S / 5 + 2 grants, and yet at least one (no gap over MAX_GAP_S).
# Once the be mount is quiet (its writer stopped, its queue empty), the idle
# mount flushes at the medium's pace: at least MIN_RATE of the bandwidth over
# the next RATE_S seconds, and its writer completes.
# usage: idle.sh SLOWMEDIA ARBITERD SLOWDEV
SLOWMEDIA=$1 ARBITERD=$2 SLOWDEV=${3:-}
. "$(dirname "$0")/alib.sh"
a_setup

WARMUP_S=2 WINDOW_S=10 MAX_IDLE_PCT=5 MAX_GAP_S=7.5 RATE_S=4 BW=1000000 MIN_RATE_PCT=60
IDLE_MB=8

a_start "$LA" "$MA" "class=be,queue=$A_QUEUE"
a_start "$LB" "$MB" "class=idle,queue=$A_QUEUE"
for m in "$MA" "$MB"; do
	ml_check_here "$m registered with the arbiter" a_wait_field "$m" arbiter connected 5
done
ml_check "the arbiter has one be and one idle mount" \
	[ "$(a_arb status | grep -c '^mount .* class=idle ')" = 1 ]

a_writer "$MA" fa 40
WA=$A_WPID
a_writer "$MB" fb "$IDLE_MB"
WB=$A_WPID
sleep "$WARMUP_S"
grants() { a_arb status | grep "mountpoint=$1\$" | grep -o ' grants=[0-9]*' | cut -d= -f2; }
g0=$(grants "$MB")
a_window "$WINDOW_S" "$MA" "$MB"
g1=$(grants "$MB")
share=$(a_share "$A_DB" "$A_DA")
ml_log "be busy, $A_SECS s: be wrote $A_DA bytes, idle $A_DB bytes ($share %) in $((g1 - g0)) grants; idle's longest gap $A_GAP_B s"
ml_check "both queues held data throughout ($A_EMPTY of $A_SAMPLES samples not)" [ "$A_EMPTY" = 0 ]
ml_check "the be mount wrote ($A_DA bytes)" [ "$A_DA" -gt $((4 << 20)) ]
ml_check "the idle mount wrote at most $MAX_IDLE_PCT % ($share %)" a_le "$share" "$MAX_IDLE_PCT"
ml_check "the idle mount got at most $((WINDOW_S / 5 + 2)) grants ($((g1 - g0)))" \
	[ $((g1 - g0)) -le $((WINDOW_S / 5 + 2)) ]
ml_check "the idle mount still got a chunk every 5 s (at $A_INC_B samples, longest gap $A_GAP_B s)" \
	a_le "$A_GAP_B" "$MAX_GAP_S"

# The be mount goes quiet: its writer stops, its queue drains.
kill -9 "$WA"
a_wait_writer "$WA" 5
t0=$EPOCHREALTIME
ml_check_here "the be mount's queue drained" a_wait_field "$MA" queued_bytes 0 10
ml_log "the be mount was empty $(ml_since "$t0") s after its writer stopped"
sleep 0.5 # its last metadata flush, and the idle grace (200 ms)
a_window "$RATE_S"
rate=$(awk -v b="$A_DB" -v s="$A_SECS" 'BEGIN { printf "%d", b / s }')
ml_log "be quiet, $A_SECS s: idle wrote $A_DB bytes ($rate bytes/s), be $A_DA bytes"
ml_check "the idle mount flushes at >= $MIN_RATE_PCT % of $BW bytes/s once the be mount is quiet ($rate)" \
	[ "$rate" -ge $((BW * MIN_RATE_PCT / 100)) ]
ml_check_here "the idle mount's writer completed" a_wait_writer "$WB" 20
ml_check_here "the idle mount's queue drained" a_wait_field "$MB" queued_bytes 0 10

ml_alive "$MA"
ml_alive "$MB"
a_fast
ml_stop "$MA"
ml_stop "$MB"
ml_finish
