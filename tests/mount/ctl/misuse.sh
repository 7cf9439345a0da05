#!/bin/bash
# Every misuse of slowmediactl gives one line on stderr naming the problem
# and its documented exit code: usage errors (2); no such path, a plain
# directory, a file, a path inside the mount, another filesystem's mount (3);
# the stale socket of a killed daemon (5, and status of all skips it); a
# daemon that is stopped and does not answer (5 within about a second, the
# tool never entering its mount). Also --help and --version.
# usage: misuse.sh SLOWMEDIA SLOWMEDIACTL [SLOWDEV]
SLOWMEDIA=$1 CTL=$2 SLOWDEV=${3:-}
. "$(dirname "$0")/ctllib.sh"
c_setup timeout
ml_tmpfs "$LOWER"
c_start "$LOWER" "$MNT"
PID=$ML_PID
mkdir -p "$MNT/sub" "$ML_TMP/plain"
touch "$ML_TMP/file"

c_expect "--help" 0 "" --help
ml_check "--help lists the commands" grep -q "status \[MOUNT\]" "$C_OUT"
ml_check "--help documents the exit codes" grep -q "5 the daemon is gone or not answering" "$C_OUT"
c_expect "--version" 0 "" --version
ml_check "--version prints the version" grep -Eq "^slowmediactl \(slowmedia\) [0-9]" "$C_OUT"

c_expect "no command" 2 "no command given" 
c_expect "unknown command" 2 "unknown command 'frobnicate'" frobnicate "$MNT"
c_expect "unknown option" 2 "unknown option '--bogus'" status --bogus
c_expect "unknown short option" 2 "unknown option '-z'" status -z
c_expect "option without its value" 2 "option --timeout needs a value" drain "$MNT" --timeout
c_expect "--interval without --watch" 2 "--interval needs --watch" status --interval 1
c_expect "--interval 0" 2 "--interval 0: expected seconds" status --watch --interval 0
c_expect "--timeout abc" 2 "--timeout abc: expected seconds" drain "$MNT" --timeout abc
c_expect "--timeout -1" 2 "--timeout -1: expected seconds" drain "$MNT" --timeout -1
c_expect "an option of another command" 2 "pause: --json, --watch and --interval are for status" \
	pause "$MNT" --json
c_expect "drain without MOUNT" 2 "drain: MOUNT missing" drain
c_expect "pause with two mounts" 2 "pause: one MOUNT only" pause "$MNT" "$MNT"
c_expect "status with two mounts" 2 "status: one MOUNT at most" status "$MNT" "$MNT"

c_expect "no such path" 3 "$ML_TMP/nope: no such file or directory" status "$ML_TMP/nope"
c_expect "no such path (drain)" 3 "no such file or directory" drain "$ML_TMP/nope"
c_expect "a plain directory" 3 "$ML_TMP/plain is not a mount point\$" pause "$ML_TMP/plain"
c_expect "a file" 3 "$ML_TMP/file is not a mount point" status "$ML_TMP/file"
c_expect "a directory inside the mount" 3 \
	"$MNT/sub is not a mount point \(it is inside the slowmedia mount $MNT\)" drain "$MNT/sub"
c_expect "another filesystem's mount (tmpfs)" 3 "$LOWER is a tmpfs mount, not a slowmedia one" \
	status "$LOWER"
c_expect "the mount by another spelling" 0 "" status "$ML_TMP/plain/../mnt/"
ml_check "found it" grep -q "^$MNT: " "$C_OUT"

# A killed daemon leaves its socket behind (and a dead FUSE mount).
LOWER2=$ML_TMP/lower2 MNT2=$ML_TMP/mnt2
ml_tmpfs "$LOWER2"
c_start "$LOWER2" "$MNT2"
PID2=$ML_PID
kill -KILL "$PID2"
ml_wait_exit "$PID2" 5
ml_check "the stale socket is there" [ -S "$SLOWMEDIA_CTL_DIR/ctl-$PID2.sock" ]
c_expect "status of a killed daemon's mount" 5 "$MNT2: its slowmedia daemon is gone" status "$MNT2"
c_expect "pause of a killed daemon's mount" 5 "daemon is gone" pause "$MNT2"
c_expect "status of all skips the stale socket" 0 "" status --json
ml_check "only the live mount is listed" python3 -c '
import json, sys
sys.exit(0 if [m["mountpoint"] for m in json.load(open(sys.argv[1]))["mounts"]] == [sys.argv[2]] else 1)' \
	"$C_OUT" "$MNT"
ml_check "and nothing is said about it" [ ! -s "$C_ERR" ]

# A daemon that does not answer (stopped): the tool gives up within about a
# second per socket and never touches the mount itself (that would hang).
ml_on_exit "kill -CONT $PID"
kill -STOP "$PID"
sleep 1.5 # past the kernel's attribute cache of the mount root
t0=$EPOCHREALTIME
rc=0
timeout 15 "$CTL" status "$MNT" >"$C_OUT" 2>"$C_ERR" || rc=$?
secs=$(ml_since "$t0")
ml_check "status of a stopped daemon's mount: exit 5 (got $rc)" [ "$rc" = 5 ]
ml_check "it says the daemon is not answering" grep -q "^slowmediactl: $MNT: its daemon is not answering (pid $PID" "$C_ERR"
ml_check "in about a second ($secs s)" awk -v s="$secs" 'BEGIN { exit !(s < 3) }'
c_expect "pause of a stopped daemon's mount" 5 "not answering" pause "$MNT"
c_run status
ml_check "status of all: exit 5 for the daemon not answering (got $C_RC)" [ "$C_RC" = 5 ]
ml_check "it names that socket" grep -q "ctl-$PID.sock: the daemon (pid $PID) did not answer" "$C_ERR"
kill -CONT "$PID"
c_expect "answers again once continued" 0 "" status "$MNT"

ml_alive "$MNT"
ml_stop "$MNT"
ml_finish
