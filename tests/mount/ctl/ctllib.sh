# Helpers for the slowmediactl mount tests (tests/mount/ctl/*.sh), on the
# shared harness (tests/lib/mount-lib.sh: ml_* set-up, checks and teardown).
# The scripts take SLOWMEDIA (the daemon), CTL (slowmediactl) and SLOWDEV
# (the emulator, possibly empty); source this with those set, then:
#
#   c_setup [tool...]         root, /dev/fuse and the tools (else exit 77), a
#                             private mount namespace, the temp dir and
#                             teardown; every test's control sockets live in
#                             $ML_TMP/ctl (SLOWMEDIA_CTL_DIR), never /run/slowmedia
#   c_setup_slowdev NAME MB PROFILE
#                             c_setup with ext2 on an emulated slow medium at
#                             $LOWER (slowdev_down on exit); MNT not mounted yet
#   c_start LOWER MNT [OPTS]  the daemon with -f -o arbiter=off,OPTS (an
#                             auto-started arbiter would live in
#                             /run/slowmedia), and its control socket up
#   c_run ARGS...             slowmediactl ARGS: C_RC, C_OUT, C_ERR (files)
#   c_expect DESC RC PATTERN ARGS...
#                             c_run, then exit status RC and, when PATTERN is
#                             not empty, exactly one line on stderr matching it
#                             (grep -E)
#   c_json MNT EXPR           python3 EXPR over m, the mount's --json object
#   c_wait_json MNT EXPR SECS poll until EXPR is true; 1 if it never is
#   c_gen FILE SIZE           a file of SIZE random bytes (head -c units)

# shellcheck source=../../lib/mount-lib.sh
source "${MOUNT_LIB:-$(dirname "${BASH_SOURCE[0]}")/../../lib/mount-lib.sh}"

C_SOCKET_WAIT_S=5

c_setup() {
	ml_require python3 "$@"
	[ -x "${SLOWMEDIA:-}" ] || { echo "SLOWMEDIA '${SLOWMEDIA:-}' is not executable"; exit 1; }
	[ -x "${CTL:-}" ] || { echo "CTL '${CTL:-}' is not executable"; exit 1; }
	ml_private_ns
	ml__init slowmedia-ct
	export SLOWMEDIA_LOG_FILE=$ML_TMP/daemon-syslog.log
	export SLOWMEDIA_CTL_DIR=$ML_TMP/ctl
	C_OUT=$ML_TMP/ctl.out C_ERR=$ML_TMP/ctl.err
	LOWER=$ML_TMP/lower MNT=$ML_TMP/mnt
}

c_setup_slowdev() {
	local lib
	lib=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../slowdev" && pwd)/slowdev-media.sh
	c_setup mkfs.ext2
	if [ ! -x "${SLOWDEV:-}" ] || [ ! -f "$lib" ]; then
		ml_skip "needs the slowdev emulator (tests/slowdev)"
	fi
	export SLOWDEV_BIN=$SLOWDEV
	# shellcheck source=../../slowdev/slowdev-media.sh
	. "$lib"
	C_SD=$1
	ml_on_exit "slowdev_down $C_SD"
	slowdev_up "$C_SD" "$2" "$3" ext2 "$LOWER" || { echo "slowdev_up failed"; exit 1; }
}

c_start() {
	local lower=$1 mnt=$2 opts=arbiter=off${3:+,$3} i sock
	mkdir -p "$mnt"
	ML_DAEMON=$SLOWMEDIA ml_start "$lower" "$mnt" -o "$opts"
	sock=$SLOWMEDIA_CTL_DIR/ctl-$ML_PID.sock
	for ((i = 0; i < C_SOCKET_WAIT_S * 20; i++)); do
		[ -S "$sock" ] && return 0
		sleep 0.05
	done
	echo "FAIL: no control socket $sock after $C_SOCKET_WAIT_S s; the daemon said:"
	ml_show_log "$mnt"
	exit 1
}

c_run() {
	C_RC=0
	"$CTL" "$@" >"$C_OUT" 2>"$C_ERR" || C_RC=$?
}

# c_expect DESC RC PATTERN ARGS...: see the header.
c_expect() {
	local desc=$1 rc=$2 pat=$3 lines
	shift 3
	c_run "$@"
	lines=$(wc -l <"$C_ERR")
	if [ "$C_RC" != "$rc" ]; then
		ml_fail "$desc: exit $C_RC, expected $rc"
	elif [ -n "$pat" ] && ! grep -Eq -- "$pat" "$C_ERR"; then
		ml_fail "$desc: stderr does not match '$pat'"
	elif [ -n "$pat" ] && [ "$lines" != 1 ]; then
		ml_fail "$desc: $lines lines on stderr, expected one"
	else
		echo "ok - $desc (exit $C_RC${pat:+: $(head -n 1 "$C_ERR")})"
		return 0
	fi
	sed 's/^/  | out: /' "$C_OUT" | head -n 20
	sed 's/^/  | err: /' "$C_ERR" | head -n 20
	return 1
}

c_json() { # MNT EXPR
	"$CTL" status "$1" --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
m = d["mounts"][0]
print(eval(sys.argv[1]))' "$2"
}

c_wait_json() { # MNT EXPR SECS (decimals allowed; 0: once)
	local i n
	n=$(awk -v s="$3" 'BEGIN { n = int(s * 10); print n < 1 ? 1 : n }')
	for ((i = 0; i < n; i++)); do
		[ "$(c_json "$1" "$2" 2>/dev/null)" = True ] && return 0
		sleep 0.1
	done
	echo "never true: $2; the last status:"
	"$CTL" status "$1" --json 2>&1 | head -n 40
	return 1
}

c_gen() { # FILE SIZE
	head -c "$2" /dev/urandom >"$1"
}
