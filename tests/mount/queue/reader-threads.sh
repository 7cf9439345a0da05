#!/bin/bash
# Readers are not starved by writers blocked in backpressure. With queue=1M
# and the medium stalled (slowdev `stall 30`), 32 writers fill the queue and
# all block; a reader's stat, ls and reads of files it read before (cached
# on the lower, so they need no medium) must still answer at once, each in
# 100 ms at most, however many writers wait. libfuse's default pool of 10
# threads, all waiting for room, would leave them queued behind the writers
# until the stall ends.
#
# The same probes run first with the medium idle, so a failure is the
# writers' doing. The writers' files are created and synced before the
# stall (an ext2 create may read bitmaps from the medium), in another
# directory than the probed one; the probes come after the 1 s entry and
# attribute timeout, so each reaches the daemon. Then the stall ends, the
# medium goes fast and the writers must complete.
# usage: reader-threads.sh SLOWMEDIA QIO SLOWDEV
SLOWMEDIA=$1 QIO=$2 SLOWDEV=${3:-}
. "$(dirname "$0")/qlib.sh"
q_require_slowdev timeout
q_init

SD=qt-rthr-$$ LOWER=$Q_TMP/lower MNT=$Q_TMP/mnt
WRITERS=32 WRITE_SIZE=2M PROBE_LIMIT_S=0.100 PROBE_TIMEOUT_S=5
q_on_exit "slowdev_down $SD"
slowdev_up "$SD" 128 usbstick ext2 "$LOWER" || { echo "slowdev_up failed"; exit 1; }
q_start "$LOWER" "$MNT" queue=1M

ctl() {
	slowdev_ctl "$SD" "$1" || q_fail "slowdev ctl '$1' refused"
}

mkdir "$MNT/cached" "$MNT/w"
for i in 1 2 3; do
	q_check "cached file $i written" q_quiet "$QIO" create "$MNT/cached/f$i" \
		write=ok 1M $((60 + i)) fsync=ok close=ok
done
for ((i = 0; i < WRITERS; i++)); do
	: >"$MNT/w/w$i"
done
sync -f "$LOWER"
# Keep the cached files' lower pages in memory for the whole test: on a shared
# machine anything may drop caches or reclaim, and a read that has to go to
# the stalled medium waits for it whatever the daemon does.
"$QIO" pin "$LOWER/cached/f1" pin "$LOWER/cached/f2" pin "$LOWER/cached/f3" \
	sleep 3600000 >"$Q_TMP/pin.out" &
PIN_PID=$!
q_on_exit "kill -9 $PIN_PID"
# (Pages reclaimed meanwhile are read back from the medium first: on a
# loaded machine that may take a while.)
for ((t = 0; t < 400 && $(grep -c 'rc=ok' "$Q_TMP/pin.out") < 3; t++)); do
	sleep 0.05
done
q_check "the cached files are pinned on the lower ($(tr '\n' ' ' <"$Q_TMP/pin.out"))" \
	[ "$(grep -c 'rc=ok' "$Q_TMP/pin.out")" = 3 ]

PROBE_STEPS=()
for i in 1 2 3; do
	PROBE_STEPS+=(stat=ok "$MNT/cached/f$i" readdir=ok "$MNT/cached"
		verify=ok "$MNT/cached/f$i" 1M $((60 + i)))
done
PROBE_COUNT=9

# probe WHAT: run the reader's steps (each timed by qio) under a timeout;
# every step must answer, correctly, within PROBE_LIMIT_S.
probe() {
	local what=$1 out rc answered slow
	local pid t0=$EPOCHREALTIME
	"$QIO" "${PROBE_STEPS[@]}" >"$Q_TMP/probe.out" &
	pid=$!
	while kill -0 "$pid" 2>/dev/null && q_between "$(q_since "$t0")" 0 "$PROBE_TIMEOUT_S"; do
		sleep 0.05
	done
	if kill -0 "$pid" 2>/dev/null; then
		# Where the reader and the daemon wait, for the report.
		echo "  the reader is stuck in: $(tr '\n' ' ' <"/proc/$pid/stack" 2>/dev/null)"
		echo "  the medium: $(slowdev_stat "$SD" reads) reads, queue depth $(slowdev_stat "$SD" queue_depth)"
		echo "  lower pages in memory: $(fincore -n -o PAGES,SIZE,FILE "$LOWER"/cached/f* | tr '\n' ' ')"
		kill -9 "$pid"
		q_dump_threads "$Q_PID"
	fi
	rc=0
	wait "$pid" || rc=$?
	out=$(cat "$Q_TMP/probe.out")
	answered=$(echo "$out" | grep -c ' rc=')
	slow=$(echo "$out" | awk -v lim="$PROBE_LIMIT_S" \
		'{sub("secs=", "", $4); if ($4 > lim) printf "%s%s %s s", n++ ? ", " : "", $1, $4}')
	[ "$answered" = "$PROBE_COUNT" ] ||
		slow+="${slow:+, }probe $((answered + 1)) unanswered after $PROBE_TIMEOUT_S s"
	[ -z "$out" ] || q_log "$what: $(echo "$out" | awk '{sub("secs=", "", $4); printf "%s %s, ", $1, $4}')"
	q_check "$what: all $PROBE_COUNT probes answered ($answered, qio rc $rc)" \
		[ "$rc" = 0 -a "$answered" = "$PROBE_COUNT" ]
	q_check "$what: every answer within $PROBE_LIMIT_S s${slow:+ (slow: $slow)}" [ -z "$slow" ]
}

# Warm the caches (the lower's page cache, dentries, inodes), then the
# reference run with nothing queued.
"$QIO" "${PROBE_STEPS[@]}" >/dev/null
sleep 1.2
probe "idle medium"

# Teardown kills the writers not yet waited for (their pids are ours).
declare -A WLIVE=()
kill_writers() {
	local p
	for p in "${!WLIVE[@]}"; do
		kill -9 "$p"
	done
}
q_on_exit kill_writers

ctl "stall 30"
WPIDS=()
for ((i = 0; i < WRITERS; i++)); do
	"$QIO" open "$MNT/w/w$i" write=ok "$WRITE_SIZE" $((100 + i)) close=ok \
		>"$Q_TMP/writer.$i.out" 2>&1 &
	WPIDS+=($!)
	WLIVE[$!]=1
done
# The queue fills at once; wait past the attribute timeout, then check that
# all writers are still waiting (the stall lets nothing through).
sleep 1.5
running=0
for p in "${WPIDS[@]}"; do
	kill -0 "$p" 2>/dev/null && running=$((running + 1))
done
q_log "$running of $WRITERS writers blocked; the daemon has $(find /proc/"$Q_PID"/task -mindepth 1 -maxdepth 1 | wc -l) threads"
q_check "the writers are blocked (all $WRITERS still running)" [ "$running" = "$WRITERS" ]
q_check "the medium is still stalled" [ "$(slowdev_stat "$SD" stall_ns)" -gt 0 ]

probe "$WRITERS writers blocked"
sleep 0.3
probe "$WRITERS writers blocked, again"
q_alive "$MNT"

ctl "stall 0"
ctl "fast on"
t0=$(q_now)
for p in "${WPIDS[@]}"; do
	while kill -0 "$p" 2>/dev/null && q_between "$(q_since "$t0")" 0 30; do
		sleep 0.1
	done
done
done_ok=0
for ((i = 0; i < WRITERS; i++)); do
	# qio exits 1 when a step's expectation fails.
	if kill -0 "${WPIDS[$i]}" 2>/dev/null; then
		sed 's/^/  w'"$i"': /' "$Q_TMP/writer.$i.out" | tail -3
		continue
	fi
	rc=0
	wait "${WPIDS[$i]}" || rc=$?
	unset "WLIVE[${WPIDS[$i]}]"
	if [ "$rc" = 0 ]; then
		done_ok=$((done_ok + 1))
	else
		sed 's/^/  w'"$i"': /' "$Q_TMP/writer.$i.out" | tail -3
	fi
done
q_log "the writers ended $(q_since "$t0") s after the stall"
q_check "all $WRITERS writers completed once the stall ended ($done_ok ok)" [ "$done_ok" = "$WRITERS" ]

q_alive "$MNT"
q_stop "$MNT"
bad=0
for ((i = 0; i < WRITERS; i++)); do
	"$QIO" verify=ok "$LOWER/w/w$i" "$WRITE_SIZE" $((100 + i)) >/dev/null || bad=$((bad + 1))
done
q_check "every writer's file is complete on the lower ($bad bad)" [ "$bad" = 0 ]
q_finish
