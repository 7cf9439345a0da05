#!/bin/bash
# slowmediactl pause and resume on the real daemon (tmpfs lower, rate=1M, so
# 4 MiB take about 4 s): paused, the written bytes stop growing while data
# is queued, status says paused and a drain fails at once (exit 1, "paused");
# resumed, the bytes grow again and a drain finishes. Paused again and
# detached (umount -l, busy while queued): the final drain lifts the pause,
# the daemon exits and the data is whole.
# usage: pause.sh SLOWMEDIA SLOWMEDIACTL [SLOWDEV]
SLOWMEDIA=$1 CTL=$2 SLOWDEV=${3:-}
. "$(dirname "$0")/ctllib.sh"
c_setup
ml_tmpfs "$LOWER"
c_start "$LOWER" "$MNT" rate=1M

written() {
	c_json "$MNT" "m['written_bytes']"
}

c_gen "$ML_TMP/src" 4M
cp "$ML_TMP/src" "$MNT/f" || ml_fail "cp to the mount"
ml_check_here "flushing has begun" c_wait_json "$MNT" "m['written_bytes'] > 0" 3
c_expect "pause" 0 "" pause "$MNT"
ml_check "pause says so" grep -q "^$MNT: paused" "$C_OUT"
ml_check_here "state paused" c_wait_json "$MNT" "m['state'] == 'paused'" 0
sleep 0.5 # the chunk in flight may still land
w1=$(written)
sleep 1.5
w2=$(written)
ml_log "written while paused: $w1, then $w2 1.5 s later"
ml_check "paused: the written bytes do not grow" [ "$w1" = "$w2" ]
ml_check_here "paused: data is still queued" c_wait_json "$MNT" "m['queued_bytes'] > 1 << 20" 0
c_expect "drain of a paused mount fails at once" 1 "drain failed: .*paused" drain "$MNT" --timeout 5
c_expect "pause twice is fine" 0 "" pause "$MNT"

c_expect "resume" 0 "" resume "$MNT"
ml_check "resume says so" grep -q "^$MNT: flushing again" "$C_OUT"
ml_check_here "state flushing again" c_wait_json "$MNT" "m['state'] == 'flushing'" 1
sleep 1
w3=$(written)
ml_log "written 1 s after the resume: $w3"
ml_check "resumed: the written bytes grow" [ "$w3" -gt "$w2" ]
c_expect "drain after the resume" 0 "" drain "$MNT" --timeout 20 --quiet
ml_check "the lower file is whole" cmp "$ML_TMP/src" "$LOWER/f"
ml_check_here "idle" c_wait_json "$MNT" "m['state'] == 'idle' and m['queued_bytes'] == 0" 0
ml_alive "$MNT"

# Paused, then detached (umount -l): nobody can resume it through the mount
# any more, so its final drain begins; the daemon drains, exits, the data lands.
c_expect "pause again" 0 "" pause "$MNT"
head -c $((2 << 20)) /dev/urandom >"$ML_TMP/src2"
cp "$ML_TMP/src2" "$MNT/g"
ml_check_here "paused with data queued" c_wait_json "$MNT" "m['state'] == 'paused' and m['queued_bytes'] > 0" 1
ml_stop "$MNT" 15
ml_check "detached while paused: the final drain said so" \
	grep -q "flushing resumed for the final drain" "$ML_LOG"
ml_check "detached while paused: the data landed" cmp "$ML_TMP/src2" "$LOWER/g"
ml_finish
