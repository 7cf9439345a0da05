#!/bin/bash
# Nothing that can block runs under the queue's lock. A log line is such a
# call: the daemon's stderr may be a pipe nobody reads for a while (a
# terminal on hold, a full journal). Here it is a FIFO whose reader stops
# reading, filled up; then a chunk fails on the medium (slowdev's `fail
# write`), so the flusher logs the failure and blocks in that write. While it
# is blocked, a write of another file and an O_DIRECT read of a cached file
# through the mount must answer at once (<= PROBE_MAX_S): they take the
# queue's lock, which the blocked flusher must not hold. (At d7e7508 the
# failure was logged under the lock, and every probe waited for the pipe.)
# usage: lock-io.sh SLOWMEDIA QIO SLOWDEV
SLOWMEDIA=$1 QIO=$2 SLOWDEV=${3:-}
. "$(dirname "$0")/qlib.sh"
q_require_slowdev python3
q_init

PROBE_MAX_S=0.25 PROBE_TIMEOUT_S=5 BLOCK_WAIT_S=10
SD=qt-lockio-$$ LOWER=$Q_TMP/lower MNT=$Q_TMP/mnt
FIFO=$Q_TMP/stderr.fifo GO=$Q_TMP/drain-now ERRLOG=$Q_TMP/stderr.log
q_on_exit "slowdev_down $SD"
slowdev_up "$SD" 16 dvdram ext2 "$LOWER" || { echo "slowdev_up failed"; exit 1; }
slowdev_ctl "$SD" "fast on"

# The reader holds the FIFO open and reads nothing until $GO exists, then
# copies everything to $ERRLOG until the daemon closes its end.
mkfifo "$FIFO"
python3 - "$FIFO" "$GO" "$ERRLOG" <<'PY' &
import os, sys, time
fifo, go, out = sys.argv[1:4]
fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
while not os.path.exists(go):
    time.sleep(0.05)
os.set_blocking(fd, True)
with open(out, "ab") as f:
    while True:
        b = os.read(fd, 65536)
        if not b:
            break
        f.write(b)
        f.flush()
PY
READER=$!
q_on_exit "touch '$GO'; kill $READER 2>/dev/null; wait $READER 2>/dev/null"
for ((i = 0; i < 100; i++)); do
	[ -e "/proc/$READER/fd" ] && ls -l "/proc/$READER/fd" 2>/dev/null | grep -q "$FIFO" && break
	sleep 0.05
done

# The daemon's stderr is the FIFO (its stdout stays in the harness's log).
WRAP=$Q_TMP/slowmedia-stderr-fifo
printf '#!/bin/sh\nexec "%s" "$@" 2>"%s"\n' "$SLOWMEDIA" "$FIFO" >"$WRAP"
chmod 755 "$WRAP"
SLOWMEDIA=$WRAP
q_start "$LOWER" "$MNT"

ctl() {
	slowdev_ctl "$SD" "$1" || q_fail "slowdev ctl '$1' refused"
}

# The victim is allocated and synced before the fault, then only overwritten
# (as in eio.sh); the cached file is on the lower and in its page cache.
q_check "the victim file, allocated and synced" \
	"$QIO" create "$MNT/victim" write=ok 256K 19 fsync=ok close=ok
q_check "the cached file, allocated and synced" \
	"$QIO" create "$MNT/cached" write=ok 256K 20 fsync=ok close=ok
sync -f "$LOWER"
cat "$LOWER/cached" >/dev/null

# Fill the pipe: from here on, any write to the daemon's stderr blocks.
python3 - "$FIFO" <<'PY' || q_fail "could not fill the FIFO"
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_NONBLOCK)
n = 0
try:
    while True:
        n += os.write(fd, b"#" * 4096)
except BlockingIOError:
    pass
print("  the FIFO holds %d bytes" % n)
PY

DPID=${ML_PIDS[$MNT]}
ctl "fail write 0 $((16 << 20))"
q_check "an overwrite of the victim is queued (the medium fails it later)" \
	"$QIO" open "$MNT/victim" write=ok 64K 21 close

# blocked_in_pipe: a thread of the daemon sleeps in a write to the full pipe.
blocked_in_pipe() {
	grep -qs pipe_write /proc/"$DPID"/task/*/wchan
}
t0=$(q_now)
blocked=0
while awk -v a="$(q_since "$t0")" -v b="$BLOCK_WAIT_S" 'BEGIN { exit !(a < b) }'; do
	if blocked_in_pipe; then
		blocked=1
		break
	fi
	sleep 0.05
done
q_log "a daemon thread blocked writing its log line after $(q_since "$t0") s"
q_check "the flusher's failure report blocks on the full pipe" [ $blocked = 1 ]

# probe NAME CMD...: run CMD, killed (SIGKILL: a FUSE request in flight
# ignores SIGTERM) after PROBE_TIMEOUT_S; its time in PROBE_T.
probe() {
	local name=$1 t rc
	shift
	t=$(q_now)
	timeout -s KILL "$PROBE_TIMEOUT_S" "$@" >/dev/null 2>&1
	rc=$?
	PROBE_T=$(q_since "$t")
	q_log "$name: ${PROBE_T} s (exit $rc)"
	q_check "$name answers within $PROBE_MAX_S s while the flusher is blocked (${PROBE_T} s)" \
		awk -v a="$PROBE_T" -v b="$PROBE_MAX_S" -v rc="$rc" 'BEGIN { exit !(rc == 0 && a <= b) }'
}
for i in 1 2 3; do
	probe "write of another file ($i)" "$QIO" create "$MNT/other$i" write=ok 4K 22 close=ok
	probe "O_DIRECT read of a cached file ($i)" \
		dd if="$MNT/cached" of=/dev/null bs=4k count=1 skip="$i" iflag=direct status=none
	probe "stat of a name not looked up yet ($i)" stat "$MNT/other$i"
done
q_check "the flusher is still blocked after the probes (they did not wait for it)" blocked_in_pipe

# Let the log flow again, clear the fault; the daemon recovers and stops.
touch "$GO"
ctl clear
q_alive "$MNT"
q_stop "$MNT" allow-errors
q_check "the failure was reported on stderr" grep -q "victim" "$ERRLOG"
q_finish
