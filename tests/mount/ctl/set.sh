#!/bin/bash
# slowmediactl set on the real daemon (tmpfs lower): rate= and latency=
# change the status fields and the pace; bad values are refused before
# anything is sent (exit 2, the value named, the setting unchanged); what the
# daemon cannot change (prio) is its error (exit 1).
# usage: set.sh SLOWMEDIA SLOWMEDIACTL [SLOWDEV]
SLOWMEDIA=$1 CTL=$2 SLOWDEV=${3:-}
. "$(dirname "$0")/ctllib.sh"
c_setup
ml_tmpfs "$LOWER"
c_start "$LOWER" "$MNT" rate=1M

ml_check_here "rate= from the mount options" c_wait_json "$MNT" "m['rate'] == 1 << 20" 0
c_expect "set rate=256K" 0 "" set "$MNT" rate=256K
ml_check "set says what it set" grep -q "^$MNT: set rate=256K" "$C_OUT"
ml_check_here "rate is 256 KiB/s" c_wait_json "$MNT" "m['rate'] == 256 << 10" 0
c_run status "$MNT"
ml_check "human status shows the cap" grep -Eq "^  limits +rate 256.0 KiB/s, latency 100 ms" "$C_OUT"

# The pace follows: 1 MiB at 512 KiB/s takes about 2 s.
c_expect "set rate=512K latency=50" 0 "" set "$MNT" rate=512K latency=50
ml_check_here "rate and latency_ms changed" c_wait_json "$MNT" \
	"m['rate'] == 512 << 10 and m['latency_ms'] == 50" 0
c_gen "$ML_TMP/src" 1M
cp "$ML_TMP/src" "$MNT/f" || ml_fail "cp to the mount"
t0=$EPOCHREALTIME
c_expect "drain at the new rate" 0 "" drain "$MNT" --quiet --timeout 20
secs=$(ml_since "$t0")
ml_check "1 MiB at 512 KiB/s took about 2 s ($secs s)" \
	awk -v s="$secs" 'BEGIN { exit !(s > 1.2 && s < 4) }'
ml_check "the lower file is whole" cmp "$ML_TMP/src" "$LOWER/f"

c_expect "set rate=0 (no cap)" 0 "" set "$MNT" rate=0
ml_check_here "rate is 0" c_wait_json "$MNT" "m['rate'] == 0" 0
c_run status "$MNT"
ml_check "human status: rate none" grep -Eq "^  limits +rate none" "$C_OUT"
c_expect "set rate=1M back" 0 "" set "$MNT" rate=1M

c_expect "rate=fast refused" 2 "rate=fast: expected" set "$MNT" rate=fast
c_expect "rate=1 (under 4K) refused" 2 "rate=1: expected" set "$MNT" rate=1
c_expect "rate=-5 refused" 2 "rate=-5: expected" set "$MNT" rate=-5
c_expect "rate=5X refused" 2 "rate=5X: expected" set "$MNT" rate=5X
c_expect "rate= (empty) refused" 2 "rate=: expected" set "$MNT" rate=
c_expect "latency=0 refused" 2 "latency=0: expected milliseconds" set "$MNT" latency=0
c_expect "latency=abc refused" 2 "latency=abc: expected milliseconds" set "$MNT" latency=abc
c_expect "latency=99999999 refused" 2 "latency=99999999: expected" set "$MNT" latency=99999999
c_expect "an unknown setting refused" 2 "unknown setting 'speed'" set "$MNT" speed=1
c_expect "a setting without =" 2 "'rate' is not KEY=VALUE" set "$MNT" rate
c_expect "a setting given twice" 2 "rate given twice" set "$MNT" rate=1M rate=2M
c_expect "set without settings" 2 "KEY=VALUE missing" set "$MNT"
c_expect "class=fast refused" 2 "class=fast: expected be or idle" set "$MNT" class=fast
c_expect "prio=9 refused" 2 "prio=9: expected a whole number from 0 to 7" set "$MNT" prio=9
ml_check_here "the refused values changed nothing" c_wait_json "$MNT" \
	"m['rate'] == 1 << 20 and m['latency_ms'] == 50" 0
# Two bad values: both reported (one line each), nothing sent.
c_run set "$MNT" rate=x latency=y
ml_check "two bad values: exit 2 and two lines" test "$C_RC" = 2 -a "$(wc -l <"$C_ERR")" = 2
c_run set "$MNT" rate=2M latency=y
ml_check "one good, one bad: exit 2" [ "$C_RC" = 2 ]
ml_check_here "and the good one was not sent either" c_wait_json "$MNT" "m['rate'] == 1 << 20" 0

# Valid here, but the daemon has the last word (without an arbiter it says
# no: ENOTSUP, or ENOTCONN when it cannot reach one).
c_run set "$MNT" prio=1
ml_log "set prio=1: exit $C_RC: $(cat "$C_ERR")"
if [ "$C_RC" = 1 ]; then
	ml_check "prio=1: the daemon's refusal is shown, one line" \
		test "$(grep -Ec "^slowmediactl: $MNT: set failed: E[A-Z]+: ." "$C_ERR")" = 1 \
		-a "$(wc -l <"$C_ERR")" = 1
else
	ml_check "prio=1 accepted" [ "$C_RC" = 0 ]
	ml_check_here "prio changed" c_wait_json "$MNT" "m['prio'] == 1" 0
fi
ml_alive "$MNT"
ml_stop "$MNT"
ml_finish
