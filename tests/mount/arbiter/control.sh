#!/bin/bash
# Runtime control through the arbiter's socket (sched/arb_proto.h: pause,
# resume and set id=N sent by a control client, not by the mount), on real
# mounts: two ext2 media behind one slowdev head (one group), A at prio 1,
# B at prio 6, A written continuously.
# - pause id=N (N: A's id in the arbiter's status) is answered ok; A's daemon
#   says state=paused within STATE_S; A's image gets at most the chunk then
#   in flight (and a little metadata) for PAUSED_S, and nothing past
#   INFLIGHT_S; a drain on A's control socket answers code=EAGAIN (flushing
#   is paused) at once instead of hanging; resume id=N: ok, state=flushing
#   again, and A's image grows.
# - set id=N rate=262144: ok; the arbiter's status and A's daemon show the
#   rate; set id=N rate=100 is refused (code=EINVAL) and changes nothing;
#   over RATE_S A's image grows at 0.5 to 1.3 x the rate; rate=0 lifts it
#   (A writes faster than 1.5 x the old cap again).
# - urgent requests: B written too; an fsync of a small file on B (prio 6,
#   behind A's prio 1) returns within MAX_FSYNC_S (URGENT_AGING_NS, 1 s,
#   plus the chunk in flight and the file's own flush), well before the 10 s
#   of prio aging, while B's plain data waits: B gets at most MAX_B_PCT % of
#   the window's bytes and its queue still holds data.
# - the final drain lifts an arbiter pause: A paused at the arbiter, 1 MiB
#   written to A (queued, not written), then unmounted: the daemon says
#   "flushing resumed at the arbiter for the final drain", exits 0, and the
#   file on A's medium is the data written (cmp, uncached).
# usage: control.sh SLOWMEDIA ARBITERD SLOWDEV
SLOWMEDIA=$1 ARBITERD=$2 SLOWDEV=${3:-}
. "$(dirname "$0")/alib.sh"
a_setup

STATE_S=1 PAUSED_S=2 INFLIGHT_S=0.5 META_SLACK=65536 DRAIN_S=2 RESUME_S=1.5
RATE=262144 RATE_S=4 RATE_SETTLE_S=1 LIFT_S=2
FSYNC_KB=64 MAX_FSYNC_S=3.5 URGENT_WINDOW_S=6 MAX_B_PCT=10

a_start "$LA" "$MA" "prio=1,queue=$A_QUEUE"
a_start "$LB" "$MB" "prio=6,queue=$A_QUEUE"
for m in "$MA" "$MB"; do
	ml_check_here "$m registered with the arbiter" a_wait_field "$m" arbiter connected 5
done

# arb_line MNT: MNT's line in the arbiter's status; arb_key MNT KEY: a field.
arb_line() {
	a_arb status | grep "^mount .* mountpoint=$1\$"
}
arb_key() {
	"$A_PY" "$A_TOOL" field "$(arb_line "$1")" "$2"
}
# chunk_avg: A's average chunk so far (its status: written_bytes / chunks).
chunk_avg() {
	local b c
	{ read -r b; read -r c; } < <("$A_PY" "$A_TOOL" get "$(a_sock "$MA")" written_bytes chunks)
	echo $((c ? b / c : 0))
}
# grows SECS: 0 once A's image grew within SECS (A_WAITED: when).
grows() {
	local w0 t0=$EPOCHREALTIME
	w0=$(a_written a)
	while :; do
		A_WAITED=$(ml_since "$t0")
		[ "$(a_written a)" -gt "$w0" ] && return 0
		a_le "$A_WAITED" "$1" || return 1
		sleep 0.05
	done
}
rate_of() { awk -v b="$1" -v s="$2" 'BEGIN { printf "%d", b / s }'; }
# until_since T0 SECS: sleep until SECS after T0 (an $EPOCHREALTIME).
until_since() {
	sleep "$(awk -v p="$2" -v t="$(ml_since "$1")" 'BEGIN { d = p - t; print (d > 0 ? d : 0) }')"
}

ida=$(arb_key "$MA" id)
ml_check "A has an id at the arbiter ($ida), the one its daemon says ($(a_field "$MA" arbiter_id))" \
	[ -n "$ida" -a "$ida" = "$(a_field "$MA" arbiter_id)" ]

a_writer "$MA" fa 40
WA=$A_WPID
sleep 1.5

# --- pause / resume at the arbiter ------------------------------------------
out=$(a_arb "pause id=$ida")
w0=$(a_written a) t0=$EPOCHREALTIME
ml_check "pause id=$ida at the arbiter: ok ($out)" [ "$out" = ok ]
ml_check_here "A's daemon says state=paused within $STATE_S s" a_wait_field "$MA" state paused "$STATE_S"
ml_log "state=paused after $A_WAITED s"
ml_check "the arbiter's status has A paused (paused=$(arb_key "$MA" paused))" [ "$(arb_key "$MA" paused)" = 1 ]
chunk=$(chunk_avg)
until_since "$t0" "$INFLIGHT_S"
wm=$(a_written a) tm=$(ml_since "$t0")
until_since "$t0" "$PAUSED_S"
w1=$(a_written a) secs=$(ml_since "$t0")
allowed=$((chunk * 3 / 2 + META_SLACK))
ml_log "paused: A's image got $((wm - w0)) bytes in the first $tm s, $((w1 - wm)) more by $secs s (A's chunks: $chunk bytes on average)"
ml_check "paused: at most the chunk in flight reached A's image in $secs s ($((w1 - w0)) bytes, allowed $allowed)" \
	[ $((w1 - w0)) -le "$allowed" ]
ml_check "paused: nothing after the first $tm s ($((w1 - wm)) bytes, allowed $META_SLACK)" \
	[ $((w1 - wm)) -le "$META_SLACK" ]
ml_check "A is still paused ($(a_field "$MA" state)), its queue holds data ($(a_field "$MA" queued_bytes) bytes)" \
	[ "$(a_field "$MA" state)" = paused -a "$(a_field "$MA" queued_bytes)" -gt 0 ]
t0=$EPOCHREALTIME
out=$(a_ctl "$MA" drain "$DRAIN_S")
rc=$? secs=$(ml_since "$t0")
ml_log "drain on A's control socket while paused: answered in $secs s: $(tr '\n' ';' <<<"$out")"
ml_check "drain while paused at the arbiter: an error code=EAGAIN saying paused, not a hang (exit $rc)" \
	grep -q '^error code=EAGAIN .*paused' <<<"$out"
ml_check "A's daemon is still alive and paused after the drain ($(a_field "$MA" state))" \
	[ "$(a_field "$MA" state)" = paused ]
out=$(a_arb "resume id=$ida")
ml_check "resume id=$ida at the arbiter: ok ($out)" [ "$out" = ok ]
ml_check_here "A's daemon says state=flushing within $STATE_S s" a_wait_field "$MA" state flushing "$STATE_S"
ml_log "state=flushing after $A_WAITED s"
ml_check_here "A's image is written again within $RESUME_S s" grows "$RESUME_S"
ml_log "A's image grew again $A_WAITED s after the resume"
ml_check "the arbiter's status has A unpaused (paused=$(arb_key "$MA" paused))" [ "$(arb_key "$MA" paused)" = 0 ]

# --- rate through the arbiter -----------------------------------------------
out=$(a_arb "set id=$ida rate=$RATE")
ml_check "set id=$ida rate=$RATE at the arbiter: ok ($out)" [ "$out" = ok ]
ml_check "the arbiter's status shows rate=$RATE for A ($(arb_key "$MA" rate))" [ "$(arb_key "$MA" rate)" = "$RATE" ]
ml_check_here "A's daemon shows rate $RATE within $STATE_S s" a_wait_field "$MA" rate "$RATE" "$STATE_S"
out=$(a_arb "set id=$ida rate=100")
ml_check "set id=$ida rate=100 refused ($out)" grep -q '^error code=EINVAL ' <<<"$out"
sleep 0.2
ml_check "and nothing changed: rate $(arb_key "$MA" rate) at the arbiter, $(a_field "$MA" rate) in A's daemon" \
	[ "$(arb_key "$MA" rate)" = "$RATE" -a "$(a_field "$MA" rate)" = "$RATE" ]
sleep "$RATE_SETTLE_S"
w0=$(a_written a) t0=$EPOCHREALTIME
sleep "$RATE_S"
w1=$(a_written a) secs=$(ml_since "$t0")
r=$(rate_of $((w1 - w0)) "$secs")
ml_log "rate=$RATE: A's image got $((w1 - w0)) bytes in $secs s: $r B/s"
ml_check "capped: A's image grew at 0.5 to 1.3 x $RATE B/s ($r)" \
	[ "$r" -gt $((RATE / 2)) -a "$r" -le $((RATE * 13 / 10)) ]
out=$(a_arb "set id=$ida rate=0")
ml_check "set id=$ida rate=0 at the arbiter: ok ($out)" [ "$out" = ok ]
ml_check_here "A's daemon shows rate 0 (no cap) within $STATE_S s" a_wait_field "$MA" rate 0 "$STATE_S"
ml_check "the arbiter's status shows rate=0 ($(arb_key "$MA" rate))" [ "$(arb_key "$MA" rate)" = 0 ]
sleep 0.5
w0=$(a_written a) t0=$EPOCHREALTIME
sleep "$LIFT_S"
w1=$(a_written a) secs=$(ml_since "$t0")
r=$(rate_of $((w1 - w0)) "$secs")
ml_log "rate=0: A's image got $((w1 - w0)) bytes in $secs s: $r B/s"
ml_check "the cap is lifted: A writes faster than 1.5 x $RATE B/s ($r)" [ "$r" -gt $((RATE * 3 / 2)) ]

# --- urgent requests: an fsync on the prio 6 medium ------------------------
ml_check "A's writer still runs" kill -0 "$WA"
a_writer "$MB" fb 40
sleep 2
FS_OUT=$ML_TMP/fsync.out
"$A_PY" -c 'import os, sys, time
time.sleep(1)
data = os.urandom(int(sys.argv[2]) << 10)
t = time.monotonic()
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, data)
w = time.monotonic() - t
t = time.monotonic()
os.fsync(fd)
f = time.monotonic() - t
os.close(fd)
print("write %.3f fsync %.3f" % (w, f))' "$MB/small" "$FSYNC_KB" >"$FS_OUT" 2>&1 &
FPID=$!
A_WRITERS[$FPID]=1
a_window "$URGENT_WINDOW_S" "$MA" "$MB"
ml_check_here "the fsync on B returned (within 10 s more)" a_wait_writer "$FPID" 10
read -r _ wsecs _ fsecs <"$FS_OUT"
share=$(a_share "$A_DB" "$A_DA")
qb=$(a_field "$MB" queued_bytes)
ml_log "fsync of $FSYNC_KB KiB on B (prio 6): write ${wsecs:-?} s, fsync ${fsecs:-?} s ($(cat "$FS_OUT"))"
ml_log "window $A_SECS s: A $A_DA bytes, B $A_DB bytes: B's share $share %; B's queue $qb bytes at the end"
ml_check "the fsync on B (urgent) returned within $MAX_FSYNC_S s (${fsecs:-none} s), not after prio aging's 10 s" \
	a_le "${fsecs:-99}" "$MAX_FSYNC_S"
ml_check "B's plain data waited: B's share <= $MAX_B_PCT % ($share %)" a_le "$share" "$MAX_B_PCT"
ml_check "B's queue still holds its plain data ($qb bytes)" [ "${qb:-0}" -gt 0 ]
ml_check "A's queue held data throughout ($A_EMPTY of $A_SAMPLES samples not)" [ "$A_EMPTY" = 0 ]

# --- the final drain lifts a pause at the arbiter ---------------------------
ml_alive "$MA"
ml_alive "$MB"
a_kill_writers
a_fast
ml_check_here "A's queue drained" a_wait_field "$MA" queued_bytes 0 20
ml_stop "$MB"
slowdev_ctl "$A_SD" "fast off"
out=$(a_arb "pause id=$ida")
ml_check "pause id=$ida again: ok ($out)" [ "$out" = ok ]
ml_check_here "A's daemon says state=paused" a_wait_field "$MA" state paused "$STATE_S"
a_gen "$ML_TMP/src" 1
w0=$(a_written a)
ml_check "1 MiB written to A while paused" cp "$ML_TMP/src" "$MA/final"
sleep 0.5
q=$(a_field "$MA" queued_bytes) w1=$(a_written a)
ml_log "paused, 1 MiB written: $q bytes queued, $((w1 - w0)) bytes reached A's image"
ml_check "it is queued, not written ($q bytes queued)" [ "${q:-0}" -ge $((1 << 20)) ]
# The drain of 1 MiB takes about a second: no need for the harness's 30 s.
ML_EXIT_TIMEOUT_S=10 ml_stop "$MA"
ml_check "the daemon said the final drain resumed it at the arbiter" \
	grep -q 'flushing resumed at the arbiter for the final drain' "${ML_LOGS[$MA]}" "$SLOWMEDIA_LOG_FILE"
# Read back from the medium, not from the lower's page cache.
[ ! -e "$LA/final" ] || "$A_PY" -c 'import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$LA/final"
ml_check "the file on A's medium is the data written" cmp "$ML_TMP/src" "$LA/final"
ml_finish
