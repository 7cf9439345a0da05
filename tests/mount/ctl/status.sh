#!/bin/bash
# slowmediactl status against the real daemon on an emulated ZIP drive
# (slowdev, 1 MB/s): an idle mount (every field present and right, human and
# --json), then with 4 MiB queued (state flushing, queued bytes and files,
# numbers as JSON numbers), status of all mounts, and --watch without a
# terminal (a block per interval, exit 0 on SIGINT).
# usage: status.sh SLOWMEDIA SLOWMEDIACTL SLOWDEV
SLOWMEDIA=$1 CTL=$2 SLOWDEV=${3:-}
. "$(dirname "$0")/ctllib.sh"
c_setup_slowdev "ct-status-$$" 32 zip
LOOP=$(slowdev_loop "$C_SD")
c_start "$LOWER" "$MNT"
PID=$ML_PID

FIELDS="mountpoint source device fstype label state queued_bytes queued_files parked_writes
	flush_rate eta_s rate latency_ms prio class weight group arbiter read_bytes
	read_errors read_error_path read_error_code read_error_age_s
	requests oldest_request oldest_request_pid oldest_request_ms slow_requests req_bound_ms
	written_bytes chunks errors pid uid file_errors"

# json_check EXPR...: each a python expression over m, all must hold.
json_check() {
	local e
	"$CTL" status "$MNT" --json >"$ML_TMP/status.json" || { ml_fail "status --json failed"; return 1; }
	for e in "$@"; do
		if python3 - "$ML_TMP/status.json" "$e" <<'PY'; then echo "ok - json: $e"; else ml_fail "json: $e"; fi
import json, sys
m = json.load(open(sys.argv[1]))["mounts"][0]
sys.exit(0 if eval(sys.argv[2]) else 1)
PY
	done
}

c_expect "status of the idle mount" 0 "" status "$MNT"
sed 's/^/  | /' "$C_OUT"
ml_check "first line: mount point and state idle" grep -qx "$MNT: idle" "$C_OUT"
ml_check "the medium: loop device and ext2" grep -Eq "^  medium +$LOOP \(ext2" "$C_OUT"
ml_check "the source" grep -q "source $LOWER\$" "$C_OUT"
ml_check "nothing queued" grep -Eq "^  queued +0 B in 0 files" "$C_OUT"
ml_check "the daemon's pid" grep -Eq "^  daemon +pid $PID, uid 0" "$C_OUT"
ml_check "no bar without a terminal" ml_not grep -q '\[#' "$C_OUT"

ints="queued_bytes queued_files parked_writes flush_rate eta_s rate latency_ms prio weight
	read_bytes read_errors read_error_age_s requests oldest_request_pid oldest_request_ms
	slow_requests req_bound_ms written_bytes chunks errors pid uid"
"$CTL" status "$MNT" --json | python3 -c '
import json, sys
extra = sorted(set(json.load(sys.stdin)["mounts"][0]) - set(sys.argv[1].split()))
print("# fields beyond the protocol'"'"'s list:", " ".join(extra) or "none")' "$(echo $FIELDS)"
json_check \
	"set('$(echo $FIELDS)'.split()) <= set(m)" \
	"all(type(m[k]) is int for k in '$(echo $ints)'.split())" \
	"all(type(m[k]) is str for k in 'mountpoint source device fstype label state class group arbiter read_error_path read_error_code oldest_request'.split())" \
	"m['mountpoint'] == '$MNT'" \
	"m['source'] == '$LOWER'" \
	"m['device'] == '$LOOP'" \
	"m['fstype'] == 'ext2'" \
	"m['state'] == 'idle'" \
	"m['queued_bytes'] == 0 and m['queued_files'] == 0" \
	"m['eta_s'] == 0" \
	"m['rate'] == 0 and m['latency_ms'] == 100" \
	"m['prio'] == 4 and m['class'] == 'be' and m['weight'] == 100" \
	"m['pid'] == $PID and m['uid'] == 0" \
	"m['errors'] == 0 and m['file_errors'] == []" \
	"m['read_errors'] == 0 and m['read_error_path'] == '' and m['read_error_age_s'] == -1" \
	"m['requests'] == 0 and m['oldest_request'] == '' and m['slow_requests'] == 0" \
	"m['req_bound_ms'] == 10000"
ml_check "no reads line without read errors" ml_not grep -q "^  reads " "$C_OUT"

c_gen "$ML_TMP/src" 4M
cp "$ML_TMP/src" "$MNT/f" || ml_fail "cp to the mount"
# The ETA needs a measured bandwidth: the first chunks on the medium.
ml_check_here "a first chunk written" c_wait_json "$MNT" "m['chunks'] >= 2" 5
c_expect "status with data queued" 0 "" status "$MNT"
sed 's/^/  | /' "$C_OUT"
ml_check "state flushing" grep -qx "$MNT: flushing" "$C_OUT"
ml_check "queued in MiB/KiB, one file" grep -Eq "^  queued +[0-9.]+ (MiB|KiB) in 1 file$" "$C_OUT"
ml_check "an ETA as m:ss" grep -Eq "ETA [0-9]+:[0-9]{2}$" "$C_OUT"
json_check \
	"m['state'] == 'flushing'" \
	"0 < m['queued_bytes'] <= 4 << 20" \
	"m['queued_files'] == 1" \
	"m['flush_rate'] >= 0 and m['eta_s'] >= -1" \
	"m['written_bytes'] + m['queued_bytes'] >= 4 << 20" \
	"m['chunks'] >= 0 and m['errors'] == 0"

c_expect "status of all mounts" 0 "" status --json
ml_check "lists exactly this mount" python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
sys.exit(0 if [m["mountpoint"] for m in d["mounts"]] == [sys.argv[2]] else 1)' "$C_OUT" "$MNT"
c_expect "human status of all mounts" 0 "" status
ml_check "shows this mount" grep -q "^$MNT: " "$C_OUT"

# --watch without a terminal: a block per interval, until SIGINT (exit 0).
rc=0
timeout --preserve-status -s INT 2.3 "$CTL" status "$MNT" --watch --interval 0.5 \
	>"$ML_TMP/watch.out" 2>"$ML_TMP/watch.err" || rc=$?
blocks=$(grep -c "^$MNT: " "$ML_TMP/watch.out")
ml_check "--watch exits 0 on SIGINT (got $rc)" [ "$rc" = 0 ]
ml_check "--watch printed a block per interval ($blocks)" test "$blocks" -ge 3 -a "$blocks" -le 6
ml_check "--watch: no escapes without a terminal" ml_not grep -q $'\e' "$ML_TMP/watch.out"
ml_check "--watch: nothing on stderr" [ ! -s "$ML_TMP/watch.err" ]

ml_alive "$MNT"
ml_stop "$MNT"
ml_check "the file reached the medium" cmp "$ML_TMP/src" "$LOWER/f"
ml_finish
