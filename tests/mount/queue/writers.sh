#!/bin/bash
# Many writers, four flushers: six files written at once through a 1 MiB
# queue (so the writers wait on backpressure while four flushers take chunks
# of different files), half of them fsynced, one overwritten and one
# truncated while queued, a reader reading a file while it is written. Every
# file must be whole on the lower after the unmount, the daemon must exit 0
# and print no error. It checks results only; its point is the concurrency:
# tests/run-sanitizers.sh runs it with the daemon built for ThreadSanitizer
# and for AddressSanitizer, whose reports fail it (ml_reap).
# usage: writers.sh SLOWMEDIA QIO
SLOWMEDIA=$1 QIO=$2
. "$(dirname "$0")/qlib.sh"
q_setup_tmpfs
q_start "$LOWER" "$MNT" queue=1M,flushers=4,rate=40M,latency=5,read_grace=1

NW=6
pids=()
for ((i = 0; i < NW; i++)); do
	steps=(create "$MNT/w$i" bs 24K write=ok $((1 + i % 3))M $((70 + i)))
	((i % 2)) && steps+=(fsync=ok)
	"$QIO" "${steps[@]}" close=ok >"$Q_TMP/w$i.out" 2>&1 &
	pids+=($!)
done
# Meanwhile: a file overwritten and one truncated while their data is queued.
"$QIO" create "$MNT/ow" write=ok 1M 80 close=ok >"$Q_TMP/ow.out" 2>&1 &&
	"$QIO" open "$MNT/ow" write=ok 512K 81 close=ok >>"$Q_TMP/ow.out" 2>&1 &
pids+=($!)
"$QIO" create "$MNT/tr" write=ok 2M 82 close=ok >"$Q_TMP/tr.out" 2>&1 &&
	truncate -s 300K "$MNT/tr" &
pids+=($!)
# A reader behind one writer: whatever it reads must be the pattern.
reads=0
while kill -0 "${pids[4]}" 2>/dev/null; do
	"$QIO" verify "$MNT/w4" "$(q_size "$MNT/w4")" 74 >/dev/null 2>&1 || { reads=-1; break; }
	reads=$((reads + 1))
done
q_check "reads of w4 while it was written: the pattern ($reads reads)" [ "$reads" -ge 0 ]
bad=0
for ((i = 0; i < ${#pids[@]}; i++)); do
	wait "${pids[$i]}" || { bad=1; cat "$Q_TMP"/*.out | sed 's/^/  | /'; }
done
q_check "every writer's writes, fsyncs and closes succeeded" [ "$bad" = 0 ]
q_alive "$MNT"
q_stop "$MNT"

for ((i = 0; i < NW; i++)); do
	q_check "w$i whole on the lower" \
		"$QIO" verify=ok "$LOWER/w$i" $((1 + i % 3))M $((70 + i))
done
q_check "ow: the overwrite on the lower" "$QIO" verify=ok "$LOWER/ow" 512K 81
q_check "tr: truncated to 300K on the lower" [ "$(q_size "$LOWER/tr")" = $((300 << 10)) ]
q_check "tr: its first 300K" "$QIO" verify=ok "$LOWER/tr" 300K 82
q_finish
