#!/bin/bash
# The default control directory, the one test that uses it: a root daemon
# started without SLOWMEDIA_CTL_DIR makes /run/slowmedia/ctl-PID.sock (the
# directory 0755, the socket 0600) and slowmediactl finds the mount there
# without being told; SLOWMEDIA_CTL_DIR, when set, is the only directory
# searched; the socket goes away with the daemon. Only our own socket is
# looked at; /run/slowmedia itself is left as it is (others may use it).
# usage: default-dir.sh SLOWMEDIA SLOWMEDIACTL [SLOWDEV]
SLOWMEDIA=$1 CTL=$2 SLOWDEV=${3:-}
. "$(dirname "$0")/ctllib.sh"
c_setup
unset SLOWMEDIA_CTL_DIR
ml_tmpfs "$LOWER"
mkdir -p "$MNT"
ML_DAEMON=$SLOWMEDIA ml_start "$LOWER" "$MNT" -o arbiter=off
PID=$ML_PID
SOCK=/run/slowmedia/ctl-$PID.sock
for ((i = 0; i < 100; i++)); do
	[ -S "$SOCK" ] && break
	sleep 0.05
done
ml_check "the daemon's socket is $SOCK" [ -S "$SOCK" ]
ml_check "the socket is 0600 root" test "$(stat -c '%a %U' "$SOCK")" = "600 root"
# ctl_proto.h says 0755; fusefs/lower.c makes the same directory 0700 for its
# private lower mounts (fstype=) when it comes first. Either keeps others out
# of root's sockets; what matters is that nobody else may write there.
perm=$(stat -c '%a %U' /run/slowmedia)
ml_log "/run/slowmedia: $perm"
ml_check "the directory is root's, 0755 or 0700 ($perm)" \
	bash -c "[ '$perm' = '755 root' ] || [ '$perm' = '700 root' ]"

c_expect "status finds the mount by the default directory" 0 "" status "$MNT"
ml_check "it is this daemon" grep -Eq "^  daemon +pid $PID, uid 0" "$C_OUT"
c_expect "status of all includes it" 0 "" status --json
ml_check "listed" python3 -c '
import json, sys
sys.exit(0 if sys.argv[2] in [m["mountpoint"] for m in json.load(open(sys.argv[1]))["mounts"]] else 1)' \
	"$C_OUT" "$MNT"
mkdir "$ML_TMP/empty"
SLOWMEDIA_CTL_DIR=$ML_TMP/empty c_expect "SLOWMEDIA_CTL_DIR is the only directory searched" 5 \
	"no control socket in $ML_TMP/empty answers for it" status "$MNT"

ml_alive "$MNT"
ml_stop "$MNT"
ml_check "the socket is gone with the daemon" [ ! -e "$SOCK" ]
ml_finish
