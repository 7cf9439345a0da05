#!/bin/bash
# The arbiter against bad clients, with a real mount registered and flushing
# (medium A written continuously, arbiter=auto). Every violation closes that
# connection only, after one `error code=EPROTO` line: a malformed line, a
# line over 4096 bytes, an unknown word, request / done / reads before
# register, done without a grant, a second register, register out of range,
# a request of 0 bytes. Silent clients (many, and one stopped mid-line) cost
# nothing: the mount keeps flushing at the medium's pace and the arbiter's
# CPU time hardly moves. After all of it the mount is still registered (the
# same id), still flushing, and the arbiter answers `status` to another
# client. Then an unprivileged user (nobody): cannot set, pause or resume
# root's mount (code=EPERM), sees none of root's mounts in status, registers
# asking prio=1 and gets prio 4 back, and cannot raise its own mount above 4.
# The socket's modes: 0666 (every user's mounts register there; the checks
# are by SO_PEERCRED), its lock 0600 root, its directory writable by root
# alone (nobody can put another socket in its place).
# usage: abuse.sh SLOWMEDIA ARBITERD SLOWDEV
SLOWMEDIA=$1 ARBITERD=$2 SLOWDEV=${3:-}
. "$(dirname "$0")/alib.sh"
a_setup

SILENT=40 SILENT_S=3 BW=1000000 MIN_RATE_PCT=50 MAX_CPU_TICKS=30

a_start "$LA" "$MA" "queue=$A_QUEUE"
ml_check_here "the mount registered with the arbiter" a_wait_field "$MA" arbiter connected 5
ida=$(a_field "$MA" arbiter_id)
apid=$(a_arbiters)
ml_check "one arbiter ($apid), the mount is id $ida" [ "$(wc -w <<<"$apid")" = 1 -a "$ida" -gt 0 ]
a_writer "$MA" fa 40
sleep 1
SOCK=$SLOWMEDIA_ARBITER_SOCKET

# served: the arbiter answers status, listing our mount with its id.
served() {
	a_arb status | grep -q "^mount id=$ida .*mountpoint=$MA\$"
}

# closes DESC LINE...: a session sending the LINEs gets one error line with
# code=EPROTO, then the arbiter closes it; and everybody else is served on.
closes() {
	local desc=$1 out
	shift
	out=$("$A_PY" "$A_TOOL" session "$SOCK" 3 "$@")
	ml_check "$desc: one error code=EPROTO, then closed ($(grep '^error' <<<"$out" | head -c 120))" \
		[ "$(grep -c '^error code=EPROTO ' <<<"$out")" = 1 -a "$(tail -n 1 <<<"$out")" = EOF ]
	ml_check "$desc: the arbiter still serves status, with our mount" served
}

w0=$(a_written a)
REG="register group=abuse-$$ prio=4 class=be weight=100 rate=0 medium=0:0 mountpoint=/x"
closes "a malformed line (bad escape)" "status x=%zz"
closes "a malformed line (bad key)" "status X=1"
closes "a line of 5000 bytes" "@long:5000"
closes "a line of 5000 bytes after a register" "$REG" "@long:5000"
closes "an unknown word" "frobnicate"
closes "request before register" "request bytes=65536 urgent=0"
closes "done before register" "done bytes=4096"
closes "reads before register" "reads active=1"
closes "done without a grant" "$REG" "done bytes=4096"
closes "a second register" "$REG" "$REG"
closes "register with prio=9" "register group=abuse-$$ prio=9"
closes "register without a group" "register prio=4"
closes "a request of 0 bytes" "$REG" "request bytes=0 urgent=0"
closes "urgent=2" "$REG" "request bytes=4096 urgent=2"
nviol=14
w1=$(a_written a)
ml_check "the mount kept flushing meanwhile ($((w1 - w0)) bytes)" [ $((w1 - w0)) -gt 0 ]

# Silent clients: connected, saying nothing (one stopped in the middle of a
# line), while the mount flushes.
SPIDS=()
kill_silent() {
	local p
	for p in "${SPIDS[@]}"; do
		kill "$p" 2>/dev/null
	done
}
ml_on_exit kill_silent
for ((i = 0; i < SILENT; i++)); do
	"$A_PY" "$A_TOOL" silent "$SOCK" 30 >/dev/null &
	SPIDS+=($!)
done
"$A_PY" "$A_TOOL" session "$SOCK" 30 "@raw:737461747573" >/dev/null &
SPIDS+=($!)
sleep 0.5
cpu() { awk '{ print $14 + $15 }' "/proc/$apid/stat"; }
c0=$(cpu) w0=$(a_written a)
sleep "$SILENT_S"
c1=$(cpu) w1=$(a_written a)
rate=$((( w1 - w0) / SILENT_S))
ml_log "with $((SILENT + 1)) silent clients: the mount flushed $rate bytes/s; the arbiter used $((c1 - c0)) ticks of CPU in $SILENT_S s"
ml_check "with $((SILENT + 1)) silent clients the mount flushes at >= $MIN_RATE_PCT % of $BW bytes/s ($rate)" \
	[ "$rate" -ge $((BW * MIN_RATE_PCT / 100)) ]
ml_check "the silent clients cost the arbiter no CPU ($((c1 - c0)) ticks in $SILENT_S s)" \
	[ $((c1 - c0)) -le "$MAX_CPU_TICKS" ]
ml_check "the arbiter serves status with $((SILENT + 1)) silent clients" served
kill_silent

ml_check "the mount is still registered, with the same id ($(a_field "$MA" arbiter_id))" \
	[ "$(a_field "$MA" arbiter)" = connected -a "$(a_field "$MA" arbiter_id)" = "$ida" ]
ml_check "the same arbiter ($(a_arbiters))" [ "$(a_arbiters)" = "$apid" ]
n=$(grep -c 'connection closed' "$SLOWMEDIA_LOG_FILE")
ml_check "the arbiter logged each violation once ($n lines for $nviol)" [ "$n" = "$nviol" ]

# --- an unprivileged user ---------------------------------------------------
ml_check "the arbiter's socket is 0666 root: anyone may connect ($(stat -c '%a %U' "$SOCK"))" \
	[ "$(stat -c '%a %U' "$SOCK")" = "666 root" ]
ml_check "its lock is 0600 root ($(stat -c '%a %U' "$SOCK.lock"))" \
	[ "$(stat -c '%a %U' "$SOCK.lock")" = "600 root" ]
dmode=$(stat -c '%a %U' "$(dirname "$SOCK")")
ml_check "its directory is writable by root alone ($dmode)" \
	[ "${dmode#* }" = root -a $((0${dmode% *} & 022)) = 0 ]
cp "$A_TOOL" "$ML_TMP/arbtool.py"
chmod 644 "$ML_TMP/arbtool.py"
nobody() {
	setpriv --reuid=nobody --regid=nogroup --clear-groups "$A_PY" "$ML_TMP/arbtool.py" "$@"
}
out=$(nobody request "$SOCK" "set id=$ida prio=0")
ml_check "nobody cannot set root's mount ($out)" grep -q '^error code=EPERM ' <<<"$out"
out=$(nobody request "$SOCK" "set id=$ida prio=7 weight=1")
ml_check "nobody cannot lower root's mount either ($out)" grep -q '^error code=EPERM ' <<<"$out"
out=$(nobody request "$SOCK" "pause id=$ida")
ml_check "nobody cannot pause root's mount ($out)" grep -q '^error code=EPERM ' <<<"$out"
out=$(nobody request "$SOCK" "resume id=$ida")
ml_check "nobody cannot resume root's mount ($out)" grep -q '^error code=EPERM ' <<<"$out"
out=$(nobody request "$SOCK" status)
ml_check "nobody sees none of root's mounts in status ($(tr '\n' ';' <<<"$out"))" \
	[ "$(grep -c '^mount ' <<<"$out")" = 0 -a "$(tail -n 1 <<<"$out")" = ok ]
st=$(a_arb status | grep "^mount id=$ida ")
ml_check "root's mount is unchanged (prio 4, weight 100, not paused)" \
	grep -q ' prio=4 class=be weight=100 paused=0 ' <<<"$st"
out=$(nobody session "$SOCK" 1 \
	"register group=nobody-$$ prio=1 class=be weight=100 rate=0 medium=0:0 mountpoint=/n" \
	"set id={id} prio=1" "set id={id} prio=5" "status")
ml_log "nobody's session: $(tr '\n' ';' <<<"$out")"
ml_check "nobody asking prio=1 is registered at prio 4" grep -q '^registered id=[0-9]* prio=4 ' <<<"$out"
ml_check "nobody cannot raise its own mount above 4" grep -q '^error code=EPERM ' <<<"$out"
ml_check "nobody may lower its own mount, and sees it (only it) in status" \
	[ "$(grep -c '^ok$' <<<"$out")" = 2 -a "$(grep -c '^mount ' <<<"$out")" = 1 \
	-a "$(grep -c '^mount .* prio=5 .* mountpoint=/n$' <<<"$out")" = 1 ]

w0=$(a_written a)
sleep 1
w1=$(a_written a)
ml_check "the mount still flushes ($((w1 - w0)) bytes in 1 s)" [ $((w1 - w0)) -gt 0 ]
a_end "$MA"
