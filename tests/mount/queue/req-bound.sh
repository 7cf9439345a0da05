#!/bin/bash
# The bound on FUSE requests (req_bound=, fusefs/reqtrack.c), seen from
# outside. On an emulated ZIP (slowdev) with req_bound=1:
#   - a read (one O_DIRECT request) of an uncached file stuck behind a 6 s
#     stall of the head is shown by `slowmediactl status` while it waits
#     (the oldest request: read, by the reader's pid, older than the bound;
#     the human output's requests line), logged once (not once a scan), and
#     counted in slow_requests;
#   - an fsync that waits through a stall for its data is a wait the caller
#     asked for: not in flight for the bound, not counted, not logged;
#   - nothing is left in flight afterwards.
# usage: req-bound.sh SLOWMEDIA QIO SLOWDEV SLOWMEDIACTL
SLOWMEDIA=$1 QIO=$2 SLOWDEV=${3:-} CTL=${4:-}
. "$(dirname "$0")/qlib.sh"
q_require_slowdev python3 timeout
[ -x "$CTL" ] || q_skip "needs slowmediactl"
q_init

SD=qt-rb-$$ LOWER=$Q_TMP/lower MNT=$Q_TMP/mnt STALL_S=6
q_on_exit "slowdev_down $SD"
slowdev_up "$SD" 16 zip ext2 "$LOWER" || { echo "slowdev_up failed"; exit 1; }
slowdev_ctl "$SD" "fast on"
"$QIO" gen "$LOWER/big" 1M 5 >/dev/null
sync -f "$LOWER"
slowdev_ctl "$SD" "fast off"
q_start "$LOWER" "$MNT" "arbiter=off,req_bound=1"

# status_field EXPR: a python expression over the mount's status m, printed.
status_field() {
	"$CTL" status "$MNT" --json | python3 -c '
import json, sys
m = json.load(sys.stdin)["mounts"][0]
print(eval(sys.argv[1]))' "$1"
}
kill_qio() {
	[ "$(cat "/proc/$1/comm" 2>/dev/null)" = queue-qio ] && kill -9 "$1"
}

# The reader: its lookup done, the file's data dropped from the lower's cache.
stat "$MNT/big" >/dev/null
dd if="$LOWER/big" iflag=nocache count=0 status=none
# One O_DIRECT read of 4 KiB: exactly one FUSE read request (no readahead),
# made once the file is open and the head stalled (GO exists).
python3 -c '
import mmap, os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECT)
buf = mmap.mmap(-1, 4096)
print("ready", flush=True)
while not os.path.exists(sys.argv[2]):
    time.sleep(0.01)
print("read rc=ok bytes=%d" % os.preadv(fd, [buf], 0))' "$MNT/big" "$Q_TMP/go" >"$Q_TMP/r.out" 2>&1 &
RPID=$!
q_on_exit "kill $RPID 2>/dev/null"
for ((i = 0; i < 300; i++)); do grep -q ready "$Q_TMP/r.out" && break; sleep 0.1; done
slowdev_ctl "$SD" "stall $STALL_S" || q_fail "slowdev refused the stall"
: >"$Q_TMP/go"
# Until the read has waited past the bound (python may take a while to start).
python3 - "$CTL" "$MNT" "$STALL_S" <<'PY'
import json, subprocess, sys, time
end = time.time() + float(sys.argv[3])
while time.time() < end:
    out = subprocess.run([sys.argv[1], "status", sys.argv[2], "--json"], capture_output=True)
    m = json.loads(out.stdout)["mounts"][0]
    if m["oldest_request"] == "read" and m["oldest_request_ms"] > 1200:
        break
    time.sleep(0.1)
PY
read -r op pid ms n < <(status_field '"%s %d %d %d" % (m["oldest_request"] or "-", m["oldest_request_pid"], m["oldest_request_ms"], m["requests"])')
q_log "during the stall: $n in flight, the oldest $op by pid $pid, $ms ms"
q_check "status: the oldest request in flight is the read" [ "$op" = read ]
q_check "status: by the reader ($RPID)" [ "$pid" = "$RPID" ]
q_check "status: older than the bound (1 s), younger than the stall (${ms} ms)" \
	q_between "$ms" 1000 $((STALL_S * 1000))
"$CTL" status "$MNT" >"$Q_TMP/human" 2>&1
sed 's/^/  | /' "$Q_TMP/human"
q_check "human status: a requests line naming the read" \
	grep -Eq "^  requests  [0-9]+ in flight, the oldest: read by pid $RPID, [0-9.]+ s" "$Q_TMP/human"
sleep 1.5 # more scans while it waits: still logged once
timeout 20 tail --pid=$RPID -f /dev/null
q_check "the read completes after the stall" grep -q '^read rc=ok bytes=4096' "$Q_TMP/r.out"
nslow=$(status_field 'm["slow_requests"]')
nlog=$(grep -c "slow request: read of pid $RPID .* over the bound" "$Q_LOG")
q_check "slow_requests counts it ($nslow)" [ "$nslow" = 1 ]
q_check "the log warns once about it ($nlog lines), though scans ran every second" \
	[ "$nlog" = 1 ]

# An fsync through a stall: the caller asked to wait for the medium.
"$QIO" create "$MNT/w" write=ok 1M 6 >/dev/null
slowdev_ctl "$SD" "stall $STALL_S" || q_fail "slowdev refused the stall"
"$QIO" open "$MNT/w" fsync=ok close=ok >"$Q_TMP/f.out" 2>&1 &
FPID=$!
q_on_exit "kill_qio $FPID"
sleep 2
q_check "status: the fsync is not in flight for the bound" \
	[ "$(status_field 'm["requests"]')" = 0 ]
timeout 20 tail --pid=$FPID -f /dev/null
q_log "the fsync: $(tr '\n' ' ' <"$Q_TMP/f.out")"
q_check "the fsync waited for the stall and succeeded" grep -q '^fsync rc=ok' "$Q_TMP/f.out"
q_check "slow_requests still $nslow" [ "$(status_field 'm["slow_requests"]')" = "$nslow" ]
q_check "nothing in flight afterwards" [ "$(status_field 'm["requests"]')" = 0 ]
q_check "no warning about the fsync" q_quiet ml_not grep -q "slow request: fsync" "$Q_LOG"
q_stop "$MNT"
q_finish
