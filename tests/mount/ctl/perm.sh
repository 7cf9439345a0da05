#!/bin/bash
# Another user may not control root's mount: as nobody, status, pause,
# resume, drain and set of root's mount exit 4 with "permission denied",
# both with the test's SLOWMEDIA_CTL_DIR (the socket is 0600: the connect is
# refused) and with the default location (nobody searches only its own
# directory; mountinfo says whose mount it is). nobody's status of all shows
# nothing and exits 0. Root's own requests still work, and nobody's changed
# nothing.
# usage: perm.sh SLOWMEDIA SLOWMEDIACTL [SLOWDEV]
SLOWMEDIA=$1 CTL=$2 SLOWDEV=${3:-}
. "$(dirname "$0")/ctllib.sh"
c_setup setpriv
ml_tmpfs "$LOWER"
c_start "$LOWER" "$MNT" rate=1M
SOCK=$SLOWMEDIA_CTL_DIR/ctl-$ML_PID.sock
ml_check "the socket is 0600 root" test "$(stat -c '%a %U' "$SOCK")" = "600 root"

as_nobody() {
	setpriv --reuid=nobody --regid=nogroup --clear-groups "$@"
}
as_nobody test -x "$CTL" || ml_skip "nobody cannot run $CTL (a build directory it cannot reach)"

# c_expect, but as nobody; ENV... before the command line.
nobody_expect() {
	local desc=$1 rc=$2 pat=$3
	shift 3
	CTL_REAL=$CTL CTL="as_nobody_ctl" c_expect "$desc" "$rc" "$pat" "$@"
}
as_nobody_ctl() {
	as_nobody env $C_NOBODY_ENV "$CTL_REAL" "$@"
}

c_gen "$ML_TMP/src" 2M
cp "$ML_TMP/src" "$MNT/f" || ml_fail "cp to the mount"

for where in test-dir default; do
	if [ "$where" = test-dir ]; then
		C_NOBODY_ENV="SLOWMEDIA_CTL_DIR=$SLOWMEDIA_CTL_DIR"
	else
		C_NOBODY_ENV="-u SLOWMEDIA_CTL_DIR -u XDG_RUNTIME_DIR"
	fi
	for cmd in status pause resume drain; do
		nobody_expect "$where: nobody's $cmd of root's mount" 4 \
			"^slowmediactl: $MNT: permission denied" "$cmd" "$MNT"
	done
	nobody_expect "$where: nobody's set of root's mount" 4 "permission denied" \
		set "$MNT" rate=4K
	nobody_expect "$where: nobody's status of all" 0 "" status
	ml_check "$where: shows none of root's mounts" grep -qx "no slowmedia mounts" "$C_OUT"
done

ml_check_here "nobody changed nothing" c_wait_json "$MNT" \
	"m['state'] == 'flushing' and m['rate'] == 1 << 20" 0
c_expect "root may pause" 0 "" pause "$MNT"
c_expect "and resume" 0 "" resume "$MNT"
c_expect "and drain" 0 "" drain "$MNT" --quiet --timeout 30
ml_check "the lower file is whole" cmp "$ML_TMP/src" "$LOWER/f"
ml_alive "$MNT"
ml_stop "$MNT"
ml_finish
