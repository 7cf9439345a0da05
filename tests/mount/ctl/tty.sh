#!/bin/bash
# slowmediactl on a terminal (a pseudo-terminal from script(1)), real daemon
# (tmpfs lower, rate=256K so the queue stays a while): status draws a
# progress bar; status --watch redraws in place (cursor up, erase below) and
# a Ctrl-C typed on the terminal ends it with exit 0, the line left clean;
# --json --watch without a terminal prints one JSON document per line.
# usage: tty.sh SLOWMEDIA SLOWMEDIACTL [SLOWDEV]
SLOWMEDIA=$1 CTL=$2 SLOWDEV=${3:-}
. "$(dirname "$0")/ctllib.sh"
c_setup script timeout
ml_tmpfs "$LOWER"
c_start "$LOWER" "$MNT" rate=256K

c_gen "$ML_TMP/src" 3M
cp "$ML_TMP/src" "$MNT/f" || ml_fail "cp to the mount"

rc=0
script -qfec "exec '$CTL' status '$MNT'" /dev/null >"$ML_TMP/status.tty" 2>&1 || rc=$?
cat -v "$ML_TMP/status.tty" | sed 's/^/  | /'
ml_check "status on a terminal exits 0 (got $rc)" [ "$rc" = 0 ]
ml_check "a progress bar" grep -Eq '^  progress  \[[#.]{30}\] +[0-9]+%' "$ML_TMP/status.tty"
ml_check "no redraw escapes in a one-shot status" ml_not grep -q $'\e' "$ML_TMP/status.tty"

# --watch: Ctrl-C typed on the terminal (script passes our stdin to it).
rc=0
{ sleep 2; printf '\003'; sleep 3; } |
	timeout 20 script -qfec "exec '$CTL' status '$MNT' --watch --interval 0.3" /dev/null \
		>"$ML_TMP/watch.tty" 2>&1 || rc=$?
frames=$(grep -c "^$MNT: " "$ML_TMP/watch.tty")
ml_check "--watch on a terminal: Ctrl-C exits 0 (got $rc)" [ "$rc" = 0 ]
ml_check "--watch drew several frames ($frames)" [ "$frames" -ge 4 ]
ml_check "--watch redraws in place (cursor up, erase below)" grep -q $'\e\\[[0-9]*A\r\e\\[J' "$ML_TMP/watch.tty"
ml_check "--watch draws the bar against the queue at its start" grep -q '^  progress  \[' "$ML_TMP/watch.tty"
ml_check "--watch leaves the line clean (no ^C left)" \
	bash -c "tail -c 4 '$ML_TMP/watch.tty' | od -An -c | grep -q '\\\\r 033   \\[   K'"
tail -c 200 "$ML_TMP/watch.tty" | cat -v | tail -n 3 | sed 's/^/  | /'

# --json --watch without a terminal: JSON lines.
rc=0
timeout --preserve-status -s INT 1.6 "$CTL" status --json --watch --interval 0.5 \
	>"$ML_TMP/watch.json" 2>&1 || rc=$?
ml_check "--json --watch exits 0 on SIGINT (got $rc)" [ "$rc" = 0 ]
ml_check "--json --watch: every line a JSON document with this mount" python3 -c '
import json, sys
lines = open(sys.argv[1]).read().splitlines()
assert len(lines) >= 2, lines
for l in lines:
    assert [m["mountpoint"] for m in json.loads(l)["mounts"]] == [sys.argv[2]], l' \
	"$ML_TMP/watch.json" "$MNT"

c_expect "drain" 0 "" drain "$MNT" --quiet --timeout 30
ml_alive "$MNT"
ml_stop "$MNT"
ml_finish
