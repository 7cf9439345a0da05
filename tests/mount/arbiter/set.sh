#!/bin/bash
# Runtime changes through each daemon's control socket (sched/ctl_proto.h:
# `set prio=N` goes on to the arbiter). Two ext2 media behind one slowdev
# head (one group), mounted prio=1 and prio=6, both written continuously:
# prio 1 gets >= MIN_SHARE_PCT % of the bytes. Then the priorities are
# swapped with `set prio=` on each control socket (answered ok): the arbiter
# lists the new ones, the daemons' status shows them, and the split flips.
# A bad value is refused (code=EINVAL) and changes nothing. The new prio
# outlives the arbiter: killed, and started again by the mounts, it has them
# at their new prio. Last, a mount with arbiter=off answers set prio=,
# weight= and class= with an error (code=ENOTCONN), and still takes rate=.
# usage: set.sh SLOWMEDIA ARBITERD SLOWDEV
SLOWMEDIA=$1 ARBITERD=$2 SLOWDEV=${3:-}
. "$(dirname "$0")/alib.sh"
a_setup

WARMUP_S=2 WINDOW_S=6 MIN_SHARE_PCT=90

a_start "$LA" "$MA" "prio=1,queue=$A_QUEUE"
a_start "$LB" "$MB" "prio=6,queue=$A_QUEUE"
for m in "$MA" "$MB"; do
	ml_check_here "$m registered with the arbiter" a_wait_field "$m" arbiter connected 5
done
# arb_prio MNT: MNT's prio as the arbiter has it.
arb_prio() {
	a_arb status | grep " mountpoint=$1\$" | grep -o ' prio=[0-9]*' | cut -d= -f2
}

a_writer "$MA" fa 40
a_writer "$MB" fb 40
sleep "$WARMUP_S"
a_window "$WINDOW_S" "$MA" "$MB"
share=$(a_share "$A_DA" "$A_DB")
ml_log "A at prio 1, B at 6, $A_SECS s: $A_DA and $A_DB bytes: A's share $share %"
ml_check "both queues held data throughout ($A_EMPTY of $A_SAMPLES samples not)" [ "$A_EMPTY" = 0 ]
ml_check "A (prio 1) got >= $MIN_SHARE_PCT % ($share %)" a_ge "$share" "$MIN_SHARE_PCT"

out=$(a_ctl "$MA" "set prio=6")
ml_check "set prio=6 on A's control socket: ok ($out)" [ "$out" = ok ]
out=$(a_ctl "$MB" "set prio=1")
ml_check "set prio=1 on B's control socket: ok ($out)" [ "$out" = ok ]
ml_check "the arbiter has A at prio 6, B at 1 ($(arb_prio "$MA"), $(arb_prio "$MB"))" \
	[ "$(arb_prio "$MA")" = 6 -a "$(arb_prio "$MB")" = 1 ]
ml_check "the daemons' status shows prio 6 and 1 ($(a_field "$MA" prio), $(a_field "$MB" prio))" \
	[ "$(a_field "$MA" prio)" = 6 -a "$(a_field "$MB" prio)" = 1 ]
out=$(a_ctl "$MA" "set prio=9")
ml_check "set prio=9 refused ($out)" grep -q '^error code=EINVAL ' <<<"$out"
ml_check "and nothing changed ($(arb_prio "$MA"))" [ "$(arb_prio "$MA")" = 6 ]

sleep 1
a_window "$WINDOW_S" "$MA" "$MB"
share=$(a_share "$A_DB" "$A_DA")
ml_log "swapped, $A_SECS s: A $A_DA and B $A_DB bytes: B's share $share %"
ml_check "both queues held data throughout ($A_EMPTY of $A_SAMPLES samples not)" [ "$A_EMPTY" = 0 ]
ml_check "the split flipped: B (now prio 1) got >= $MIN_SHARE_PCT % ($share %)" \
	a_ge "$share" "$MIN_SHARE_PCT"

# A new arbiter: the mounts register again, with what they were set to.
old=$(a_arbiters)
kill -9 "$old"
for m in "$MA" "$MB"; do
	ml_check_here "$m registered again after the arbiter's death" \
		a_wait_field "$m" arbiter connected 5
done
ml_check "a new arbiter ($(a_arbiters), was $old)" [ -n "$(a_arbiters)" -a "$(a_arbiters)" != "$old" ]
ml_check "the new arbiter has A at prio 6, B at 1 ($(arb_prio "$MA"), $(arb_prio "$MB"))" \
	[ "$(arb_prio "$MA")" = 6 -a "$(arb_prio "$MB")" = 1 ]

a_kill_writers
a_fast
ml_stop "$MA"
ml_stop "$MB"

a_start "$LA" "$MA" "arbiter=off,queue=$A_QUEUE"
ml_check "arbiter=off in status" [ "$(a_field "$MA" arbiter)" = off ]
for kv in prio=3 weight=5 class=idle; do
	out=$(a_ctl "$MA" "set $kv")
	ml_check "arbiter=off: set $kv refused ($out)" grep -q '^error code=ENOTCONN ' <<<"$out"
done
out=$(a_ctl "$MA" "set rate=1M")
ml_check "arbiter=off: set rate=1M still ok ($out)" [ "$out" = ok ]
ml_check "arbiter=off: rate 1M in status ($(a_field "$MA" rate))" [ "$(a_field "$MA" rate)" = $((1 << 20)) ]
ml_stop "$MA"
ml_finish
