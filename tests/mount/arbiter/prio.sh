#!/bin/bash
# Strict priority with aging across two mounts of one group. Two ext2 media
# behind one slowdev head (one group by default), mounted prio=1 and prio=6,
# both written continuously (each writer far ahead of its small queue, so
# both always want to flush). Over a window of WINDOW_S seconds, with both
# queues non-empty at every sample:
# - the prio 1 medium gets at least MIN_SHARE_PCT % of the bytes slowdev wrote
#   (per image, IMG.write_bytes);
# - the prio 6 medium is not starved: aging (10 s, mq-deadline's) grants it a
#   chunk at the latest 10 s after it began waiting, plus the chunk in flight
#   and one more (arbiter.c's bound): no gap between two of its writes, nor
#   from the window's start to its first, longer than MAX_GAP_S, and at
#   least one write in the window;
# - and no more than aging gives it: at most WINDOW_S / 10 + 2 grants (the
#   prio 1 mount asks for its next chunk with its done, so a free group never
#   goes to prio 6 between two of its chunks).
# usage: prio.sh SLOWMEDIA ARBITERD SLOWDEV
SLOWMEDIA=$1 ARBITERD=$2 SLOWDEV=${3:-}
. "$(dirname "$0")/alib.sh"
a_setup

WARMUP_S=2 WINDOW_S=16 MIN_SHARE_PCT=90 MAX_GAP_S=12.5

a_start "$LA" "$MA" "prio=1,queue=$A_QUEUE"
a_start "$LB" "$MB" "prio=6,queue=$A_QUEUE"
for m in "$MA" "$MB"; do
	ml_check_here "$m registered with the arbiter" a_wait_field "$m" arbiter connected 5
done
st=$(a_arb status)
ml_log "arbiter: $(grep '^mount' <<<"$st" | tr '\n' ';')"
groups=$(grep '^mount' <<<"$st" | grep -o ' group=[^ ]*' | sort -u | wc -l)
ml_check "both mounts in one group, at prio 1 and 6" \
	[ "$groups" = 1 -a "$(grep -c '^mount .* prio=1 ' <<<"$st")" = 1 \
	-a "$(grep -c '^mount .* prio=6 ' <<<"$st")" = 1 ]

a_writer "$MA" fa 40
a_writer "$MB" fb 40
sleep "$WARMUP_S"
g0=$(a_arb status | grep -o 'prio=6 .* grants=[0-9]*' | grep -o '[0-9]*$')
a_window "$WINDOW_S" "$MA" "$MB"
g1=$(a_arb status | grep -o 'prio=6 .* grants=[0-9]*' | grep -o '[0-9]*$')
share=$(a_share "$A_DA" "$A_DB")
ml_log "window $A_SECS s: prio 1 wrote $A_DA bytes, prio 6 $A_DB bytes: prio 1's share $share %"
ml_log "prio 6: $((g1 - g0)) grants, writes seen at $A_INC_B samples, longest gap $A_GAP_B s (aging alone: one grant per 10 s)"

ml_check "both queues held data throughout ($A_EMPTY of $A_SAMPLES samples not)" [ "$A_EMPTY" = 0 ]
ml_check "the medium was written in the window ($((A_DA + A_DB)) bytes)" \
	[ $((A_DA + A_DB)) -gt $((4 << 20)) ]
ml_check "prio 1 got >= $MIN_SHARE_PCT % of the bytes ($share %)" a_ge "$share" "$MIN_SHARE_PCT"
ml_check "prio 6 wrote in the window (at $A_INC_B samples)" [ "$A_INC_B" -ge 1 ]
ml_check "prio 6 waited at most $MAX_GAP_S s for a chunk ($A_GAP_B s)" a_le "$A_GAP_B" "$MAX_GAP_S"
max_grants=$((WINDOW_S / 10 + 2))
ml_check "prio 6 got no more grants than aging gives ($((g1 - g0)), at most $max_grants)" \
	[ $((g1 - g0)) -le "$max_grants" ]

a_end "$MA" "$MB"
