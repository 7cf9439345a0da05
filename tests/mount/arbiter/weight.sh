#!/bin/bash
# Weighted fair sharing within one prio. Two ext2 media behind one slowdev
# head (one group), both at the default prio, weight=300 and weight=100,
# both written continuously (queues never empty). Over WINDOW_S seconds the
# bytes slowdev wrote to each image (IMG.write_bytes) must split 3:1 within
# TOL_PCT % (15: a 10 s window holds a few dozen chunks, and a loaded machine
# shifts one or two; an even split is 67 % off) (the arbiter charges each
# chunk its bytes / weight, B-WF2Q+ as
# BFQ's). Then the weights are swapped at runtime (set weight= on each
# daemon's control socket) and the split must follow: 1:3.
# usage: weight.sh SLOWMEDIA ARBITERD SLOWDEV
SLOWMEDIA=$1 ARBITERD=$2 SLOWDEV=${3:-}
. "$(dirname "$0")/alib.sh"
a_setup

WARMUP_S=2 WINDOW_S=10 TOL_PCT=15

a_start "$LA" "$MA" "weight=300,queue=$A_QUEUE"
a_start "$LB" "$MB" "weight=100,queue=$A_QUEUE"
for m in "$MA" "$MB"; do
	ml_check_here "$m registered with the arbiter" a_wait_field "$m" arbiter connected 5
done
st=$(a_arb status)
ml_check "both mounts at prio 4, weights 300 and 100" \
	[ "$(grep -c '^mount .* prio=4 class=be weight=300 ' <<<"$st")" = 1 \
	-a "$(grep -c '^mount .* prio=4 class=be weight=100 ' <<<"$st")" = 1 ]

a_writer "$MA" fa 40
a_writer "$MB" fb 40
sleep "$WARMUP_S"

# check_ratio WHAT X Y WANT: X / Y within TOL_PCT % of WANT.
check_ratio() {
	local what=$1 x=$2 y=$3 want=$4 r
	r=$(awk -v x="$x" -v y="$y" 'BEGIN { printf "%.3f", y ? x / y : 999 }')
	ml_log "$what: $x and $y bytes in $A_SECS s: ratio $r (want $want)"
	ml_check "$what: ratio $r within $TOL_PCT % of $want" \
		awk -v r="$r" -v w="$want" -v t="$TOL_PCT" \
		'BEGIN { exit !(r >= w * (1 - t / 100) && r <= w * (1 + t / 100)) }'
}

a_window "$WINDOW_S" "$MA" "$MB"
ml_check "both queues held data throughout ($A_EMPTY of $A_SAMPLES samples not)" [ "$A_EMPTY" = 0 ]
ml_check "the medium was written ($((A_DA + A_DB)) bytes)" [ $((A_DA + A_DB)) -gt $((4 << 20)) ]
check_ratio "weights 300:100" "$A_DA" "$A_DB" 3

ml_check_here "weight=100 set on the first mount" a_ctl "$MA" "set weight=100"
ml_check_here "weight=300 set on the second mount" a_ctl "$MB" "set weight=300"
st=$(a_arb status)
ml_check "the arbiter has the new weights" \
	[ "$(grep -c "^mount .* weight=100 .* mountpoint=$MA\$" <<<"$st")" = 1 \
	-a "$(grep -c "^mount .* weight=300 .* mountpoint=$MB\$" <<<"$st")" = 1 ]
sleep 1
a_window "$WINDOW_S" "$MA" "$MB"
ml_check "both queues held data throughout ($A_EMPTY of $A_SAMPLES samples not)" [ "$A_EMPTY" = 0 ]
check_ratio "weights swapped, 100:300" "$A_DB" "$A_DA" 3

a_end "$MA" "$MB"
