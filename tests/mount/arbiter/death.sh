#!/bin/bash
# The arbiter dies, or goes silent, mid-run. Two ext2 media behind one
# slowdev head (one group), both mounts with arbiter=auto (they start
# slowmedia-arbiterd themselves), each written a file of random data.
# - kill -9 of the arbiter: both mounts say arbiter=alone within ALONE_S
#   (their connection closed), both keep flushing while alone, and within
#   BACK_S one of them has started a new arbiter (exactly one process, not
#   the old one) and both are registered with it (arbiter=connected, the new
#   arbiter lists them).
# - SIGSTOP of that arbiter (it accepts nothing, answers no ping): both go
#   alone after the dead timeout (1 s without a pong) and flush on; after
#   SIGCONT they register with it again.
# Then the writers complete, the queues drain, and each file on its medium
# is the data written (cmp); the daemons exit 0.
# usage: death.sh SLOWMEDIA ARBITERD SLOWDEV
SLOWMEDIA=$1 ARBITERD=$2 SLOWDEV=${3:-}
A_SD_SET="write_bw=2M read_bw=4M seek_ms=2"
. "$(dirname "$0")/alib.sh"
a_setup

FILE_MB=8 ALONE_S=2 BACK_S=3 SILENT_ALONE_S=2.5

a_start "$LA" "$MA" "queue=$A_QUEUE"
a_start "$LB" "$MB" "queue=$A_QUEUE"
for m in "$MA" "$MB"; do
	ml_check_here "$m registered with the arbiter" a_wait_field "$m" arbiter connected 5
done
arbs=$(a_arbiters)
ml_check "one arbiter serves our socket ($(tr "\n" " " <<<"$arbs"))" [ "$(wc -w <<<"$arbs")" = 1 ]
old=$arbs

a_gen "$ML_TMP/src-a" "$FILE_MB"
a_gen "$ML_TMP/src-b" "$FILE_MB"
dd if="$ML_TMP/src-a" of="$MA/fa" bs=64k status=none &
WA=$!
A_WRITERS[$WA]=1
dd if="$ML_TMP/src-b" of="$MB/fb" bs=64k status=none &
WB=$!
A_WRITERS[$WB]=1
sleep 1.5

# both_state STATE SECS: poll until both mounts say arbiter=STATE; T_BOTH:
# the seconds it took; Q_A, Q_B: slowdev's bytes of each image then.
both_state() {
	local want=$1 secs=$2 t0=$EPOCHREALTIME sa sb
	while :; do
		sa=$(a_field "$MA" arbiter) sb=$(a_field "$MB" arbiter)
		T_BOTH=$(ml_since "$t0")
		[ "$sa" = "$want" ] && [ "$sb" = "$want" ] && break
		a_le "$T_BOTH" "$secs" || { ml_log "after $T_BOTH s: arbiter=$sa and $sb"; return 1; }
		sleep 0.05
	done
	Q_A=$(a_written a) Q_B=$(a_written b)
}

# --- kill -9 --------------------------------------------------------------
ml_log "kill -9 of the arbiter, pid $old"
kill -9 "$old"
ml_check_here "both mounts alone within $ALONE_S s" both_state alone "$ALONE_S"
ml_log "both alone after $T_BOTH s"
a0=$Q_A b0=$Q_B
sleep 0.4
a1=$(a_written a) b1=$(a_written b)
ml_check "both media written while alone ($((a1 - a0)) and $((b1 - b0)) bytes in 0.4 s)" \
	[ $((a1 - a0)) -gt 0 -a $((b1 - b0)) -gt 0 ]
ml_check_here "both registered again within $BACK_S s" both_state connected "$BACK_S"
ml_log "both connected again $T_BOTH s after they were seen alone"
arbs=$(a_arbiters)
ml_check "one new arbiter serves our socket (was $old, now $(tr "\n" " " <<<"$arbs"))" \
	[ "$(wc -w <<<"$arbs")" = 1 -a "$arbs" != "$old" ]
st=$(a_arb status)
ml_check "the new arbiter lists both mounts" \
	[ "$(grep -c "^mount .* mountpoint=$MA\$" <<<"$st")" = 1 \
	-a "$(grep -c "^mount .* mountpoint=$MB\$" <<<"$st")" = 1 ]
new=$arbs

# --- SIGSTOP: an arbiter that answers nothing ------------------------------
ml_log "SIGSTOP to the arbiter, pid $new"
kill -STOP "$new"
ml_on_exit "kill -CONT $new"
ml_check_here "both mounts alone within $SILENT_ALONE_S s of a silent arbiter" \
	both_state alone "$SILENT_ALONE_S"
ml_log "both alone after $T_BOTH s"
a0=$Q_A b0=$Q_B
sleep 1
a1=$(a_written a) b1=$(a_written b)
ml_check "both media written while the arbiter is silent ($((a1 - a0)) and $((b1 - b0)) bytes in 1 s)" \
	[ $((a1 - a0)) -gt 0 -a $((b1 - b0)) -gt 0 ]
kill -CONT "$new"
ml_check_here "both registered again within $BACK_S s of SIGCONT" both_state connected "$BACK_S"
ml_check "still that one arbiter ($(a_arbiters | tr "\n" " "))" [ "$(a_arbiters)" = "$new" ]

# --- the data --------------------------------------------------------------
ml_check_here "writer A completed" a_wait_writer "$WA" 30
ml_check_here "writer B completed" a_wait_writer "$WB" 30
ml_check_here "A's queue drained" a_wait_field "$MA" queued_bytes 0 20
ml_check_here "B's queue drained" a_wait_field "$MB" queued_bytes 0 20
ml_alive "$MA"
ml_alive "$MB"
ml_stop "$MA"
ml_stop "$MB"
ml_check "A's file on its medium is the data written" cmp "$ML_TMP/src-a" "$LA/fa"
ml_check "B's file on its medium is the data written" cmp "$ML_TMP/src-b" "$LB/fb"
for m in "$MA" "$MB"; do
	ml_check "$m's daemon said it flushed alone, then registered again" \
		[ "$(grep -c 'flushing alone until it is back' "${ML_LOGS[$m]}")" -ge 2 \
		-a "$(grep -c 'registered with the arbiter' "${ML_LOGS[$m]}")" -ge 3 ]
done
ml_finish
