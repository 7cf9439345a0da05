#!/bin/bash
# slowmediactl drain on an emulated ZIP drive (slowdev, 1 MB/s): it returns
# only once the queue is on the medium (status then shows nothing queued, the
# medium took the bytes, the lower file is whole), with a progress line
# without a terminal and a redrawn bar through a pseudo-terminal; on a stalled
# medium --timeout gives up quickly with exit 6, and SIGINT ends the wait
# with exit 130 while the daemon goes on flushing.
# usage: drain.sh SLOWMEDIA SLOWMEDIACTL SLOWDEV
SLOWMEDIA=$1 CTL=$2 SLOWDEV=${3:-}
. "$(dirname "$0")/ctllib.sh"
c_setup_slowdev "ct-drain-$$" 32 zip script
c_start "$LOWER" "$MNT"

w0=$(slowdev_stat "$C_SD" write_bytes)
c_gen "$ML_TMP/a" 3M
cp "$ML_TMP/a" "$MNT/a" || ml_fail "cp to the mount"
ml_check "data is queued before the drain" c_wait_json "$MNT" "m['queued_bytes'] > 1 << 20" 1
t0=$EPOCHREALTIME
c_expect "drain" 0 "" drain "$MNT"
secs=$(ml_since "$t0")
sed 's/^/  | /' "$C_OUT"
ml_log "the drain took $secs s"
ml_check "it waited for the medium (3 MiB at 1 MB/s: over 1.5 s, took $secs s)" \
	awk -v s="$secs" 'BEGIN { exit !(s > 1.5 && s < 20) }'
ml_check "a progress line without a terminal" grep -Eq '^draining: [0-9.]+ (B|KiB|MiB) left in [0-9]+ files?' "$C_OUT"
ml_check "no bar without a terminal" ml_not grep -q $'\r' "$C_OUT"
ml_check "it says it is done" grep -qx "$MNT: drained, everything queued is on the medium" "$C_OUT"
ml_check "status after the drain: nothing queued" c_wait_json "$MNT" \
	"m['queued_bytes'] == 0 and m['queued_files'] == 0 and m['state'] == 'idle'" 0.1
w1=$(slowdev_stat "$C_SD" write_bytes)
ml_check "the medium took the 3 MiB ($((w1 - w0)) bytes written)" [ $((w1 - w0)) -ge $((3 << 20)) ]
ml_check "the lower file is whole" cmp "$ML_TMP/a" "$LOWER/a"
c_expect "drain of an empty queue" 0 "" drain "$MNT" --quiet
ml_check "--quiet prints nothing" [ ! -s "$C_OUT" ]

# Through a pseudo-terminal: a bar redrawn in place (CR, erase line).
c_gen "$ML_TMP/b" 2M
cp "$ML_TMP/b" "$MNT/b" || ml_fail "cp to the mount"
rc=0
script -qfec "exec '$CTL' drain '$MNT'" /dev/null >"$ML_TMP/tty.out" 2>&1 || rc=$?
ml_check "drain on a terminal exits 0 (got $rc)" [ "$rc" = 0 ]
ml_check "the bar is redrawn in place" grep -q $'\r\e\\[K\\[[#.]*\\]' "$ML_TMP/tty.out"
ml_check "several redraws" test "$(grep -o $'\r\e\\[K' "$ML_TMP/tty.out" | wc -l)" -ge 3
ml_check "the bar ends full" grep -q '\[#*\] 100%' "$ML_TMP/tty.out"
ml_check "bytes left, rate and ETA on the bar" grep -Eq 'left  [0-9.]+ (B|KiB|MiB)/s  ETA [0-9]+:[0-9]{2}' "$ML_TMP/tty.out"
tr '\r' '\n' <"$ML_TMP/tty.out" | tail -n 3 | cat -v | sed 's/^/  | /'
ml_check "the lower file b is whole" cmp "$ML_TMP/b" "$LOWER/b"

# A stalled medium: --timeout gives up, says so, exit 6.
ml_on_exit "slowdev_ctl $C_SD 'stall 0'"
slowdev_ctl "$C_SD" "stall 60"
c_gen "$ML_TMP/c" 1M
cp "$ML_TMP/c" "$MNT/c" || ml_fail "cp to the mount"
t0=$EPOCHREALTIME
c_expect "drain --timeout 1 on a stalled medium" 6 "drain timed out after 1 s: 1.0 MiB still queued in 1 file" \
	drain "$MNT" --timeout 1
secs=$(ml_since "$t0")
ml_check "it gave up in time ($secs s)" awk -v s="$secs" 'BEGIN { exit !(s >= 0.9 && s < 4) }'
ml_check "the message names the mount" grep -q "^slowmediactl: $MNT: " "$C_ERR"

# SIGINT: the wait ends (exit 130), the mount stays as it is.
"$CTL" drain "$MNT" >"$ML_TMP/int.out" 2>"$ML_TMP/int.err" &
cpid=$!
sleep 0.7
kill -INT "$cpid"
rc=0
wait "$cpid" || rc=$?
ml_check "drain interrupted by SIGINT exits 130 (got $rc)" [ "$rc" = 130 ]
ml_check "and says the daemon goes on" grep -q "^slowmediactl: $MNT: drain interrupted: .* still queued (the daemon goes on flushing)" "$ML_TMP/int.err"
ml_check "the data is still queued" c_wait_json "$MNT" "m['queued_bytes'] > 0" 0.1
ml_alive "$MNT"

slowdev_ctl "$C_SD" "stall 0"
c_expect "drain once the medium moves again" 0 "" drain "$MNT" --timeout 30
ml_check "the lower file c is whole" cmp "$ML_TMP/c" "$LOWER/c"
ml_alive "$MNT"
ml_stop "$MNT"
ml_finish
