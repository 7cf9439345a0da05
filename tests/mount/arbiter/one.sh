#!/bin/bash
# Exactly one arbiter for mounts that start at the same moment. Two ext2
# media behind one slowdev head; no arbiter runs. Both daemons are started
# at once with arbiter=auto: each finds no arbiter and starts one, and the
# arbiters' lock leaves exactly one serving. Checked ROUNDS times (the
# arbiter killed between rounds, each pair of daemons stopped): within
# CONNECT_S both mounts are connected, with distinct ids, the arbiter lists
# both, and exactly one slowmedia-arbiterd serves the test's socket, and
# still just one SETTLE_S later (the loser exited, no third was started).
# The daemons start the arbiter through a wrapper that counts the starts;
# after the first round it waits DELAY_S before it runs the arbiter, so that
# both daemons surely find no socket and start one each: the race the lock
# must settle, every time.
# usage: one.sh SLOWMEDIA ARBITERD SLOWDEV
SLOWMEDIA=$1 ARBITERD=$2 SLOWDEV=${3:-}
. "$(dirname "$0")/alib.sh"
a_setup

ROUNDS=3 CONNECT_S=5 SETTLE_S=1.5 DELAY_S=0.3

STARTS=$ML_TMP/arbiter-starts
cat >"$ML_TMP/arbiterd-wrap" <<WRAP
#!/bin/bash
echo "\$\$ \$*" >>"$STARTS"
[ -e "$ML_TMP/delay" ] && sleep $DELAY_S
exec "$ARBITERD" "\$@"
WRAP
chmod 755 "$ML_TMP/arbiterd-wrap"
export SLOWMEDIA_ARBITERD=$ML_TMP/arbiterd-wrap

# start_both: both daemons launched before either is waited for (what
# ml_try_start does, twice over), then both mounts and control sockets.
start_both() {
	local m pid i
	for m in "$MA" "$MB"; do
		ML_LOG=$ML_TMP/daemon.$ML_NSTARTS.log
		ML_NSTARTS=$((ML_NSTARTS + 1))
		if [ "$m" = "$MA" ]; then
			"$SLOWMEDIA" "$LA" "$m" -f -o "queue=$A_QUEUE" >"$ML_LOG" 2>&1 &
		else
			"$SLOWMEDIA" "$LB" "$m" -f -o "queue=$A_QUEUE" >"$ML_LOG" 2>&1 &
		fi
		ML_PIDS[$m]=$!
		ML_LOGS[$m]=$ML_LOG
		ml_on_exit "ml_kill_daemon '$m'"
		ml_on_exit "ml_is_mounted '$m' fuse.slowmedia && umount -l '$m'"
	done
	for m in "$MA" "$MB"; do
		pid=${ML_PIDS[$m]}
		ml_wait_mount "$m" "$pid" || { echo "FAIL: no mount on $m"; ml_show_log "$m"; exit 1; }
		for ((i = 0; i < A_SOCKET_WAIT_S * 20; i++)); do
			[ -S "$(a_sock "$m")" ] && break
			sleep 0.05
		done
	done
}

mkdir -p "$MA" "$MB"
for ((r = 1; r <= ROUNDS; r++)); do
	ml_check "round $r: no arbiter before the start" [ -z "$(a_arbiters)" ]
	[ "$r" = 1 ] || touch "$ML_TMP/delay"
	: >"$STARTS"
	start_both
	ml_check_here "round $r: A connected" a_wait_field "$MA" arbiter connected "$CONNECT_S"
	ml_check_here "round $r: B connected" a_wait_field "$MB" arbiter connected "$CONNECT_S"
	ida=$(a_field "$MA" arbiter_id) idb=$(a_field "$MB" arbiter_id)
	arbs=$(a_arbiters)
	starts=$(wc -l <"$STARTS")
	ml_log "round $r: ids $ida and $idb, arbiter(s) $(tr "\n" " " <<<"$arbs"), $starts started"
	[ "$r" = 1 ] || ml_check "round $r: both daemons started an arbiter ($starts)" [ "$starts" = 2 ]
	ml_check "round $r: exactly one arbiter ($(tr "\n" " " <<<"$arbs"))" [ "$(wc -w <<<"$arbs")" = 1 ]
	ml_check "round $r: distinct ids ($ida, $idb)" [ "$ida" -gt 0 -a "$idb" -gt 0 -a "$ida" != "$idb" ]
	st=$(a_arb status)
	ml_check "round $r: the arbiter lists both mounts" \
		[ "$(grep -c "^mount id=$ida .*mountpoint=$MA\$" <<<"$st")" = 1 \
		-a "$(grep -c "^mount id=$idb .*mountpoint=$MB\$" <<<"$st")" = 1 ]
	sleep "$SETTLE_S"
	ml_check "round $r: still exactly that arbiter $SETTLE_S s later ($(a_arbiters | tr "\n" " "))" \
		[ "$(a_arbiters)" = "$arbs" ]
	ml_stop "$MA"
	ml_stop "$MB"
	# The next round starts from no arbiter at all.
	ml_kill_arbiter "$SLOWMEDIA_ARBITER_SOCKET" 2>/dev/null
	for ((i = 0; i < 100 && $(a_arbiters | wc -w) > 0; i++)); do
		sleep 0.05
	done
done
ml_finish
