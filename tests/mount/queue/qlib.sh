# Helpers for the write-behind queue mount tests (tests/mount/queue/*.sh).
# Source it with SLOWMEDIA and QIO set (the daemon and the qio driver), then:
#
#   q_require [tool...]       exit 77 unless root, /dev/fuse, losetup and the tools;
#                             then re-run the script in a private mount namespace
#   q_init                    temp dir $Q_TMP, teardown trap on EXIT
#   q_tmpfs DIR               a private tmpfs on DIR, for lowers whose timing
#                             must not depend on the machine's other disk I/O
#   q_setup_tmpfs             q_require, q_init and a tmpfs lower: sets LOWER
#                             ($Q_TMP/lower) and MNT ($Q_TMP/mnt, not mounted)
#   q_setup_ext2 SIZE_MB      the same with a fresh ext2 lower (q_ext2); Q_LOOP
#   q_ext2 SIZE_MB DIR        fresh ext2 on a new loop device mounted on DIR;
#                             sets Q_LOOP (/dev/loopN)
#   q_start LOWER MNT [OPTS]  slowmedia -f -o OPTS in the background, wait for the
#                             mount; sets Q_PID and Q_LOG
#   q_stop MNT                umount, wait for the daemon (sets Q_STOP_SECS),
#                             fail unless it exits 0
#   q_alive MNT               fail when the daemon of MNT died
#   q_check DESC CMD... / q_fail MSG / q_finish
#
# Teardown runs last-in first-out even when a check or the script fails: lazy
# unmounts, daemons killed by their pid, loop devices detached, Q_TMP removed.
# Only what these helpers set up is touched.

Q_ARGS=("$@") # the script's own arguments: sourced without any, we see them
Q_TMP=""
Q_FAILED=0
Q_MOUNT_TIMEOUT_S=10
Q_EXIT_TIMEOUT_S=30
Q_CLEANUPS=()
declare -A Q_PIDS=()
declare -A Q_LOGS=()

q_skip() {
	echo "SKIP: $*"
	exit 77
}

q_require() {
	local t
	[ "$(id -u)" = 0 ] || q_skip "needs root"
	[ -c /dev/fuse ] || q_skip "needs /dev/fuse"
	command -v losetup >/dev/null || q_skip "needs losetup"
	for t in "$@"; do
		command -v "$t" >/dev/null || q_skip "needs $t"
	done
	[ -x "${SLOWMEDIA:-}" ] || { echo "SLOWMEDIA '${SLOWMEDIA:-}' is not executable"; exit 1; }
	[ -x "${QIO:-}" ] || { echo "QIO '${QIO:-}' is not executable"; exit 1; }
	q_private_ns
}

# A process that makes a mount namespace (unshare -m) while our mount exists
# gets a copy of it, which keeps the FUSE connection alive after our umount:
# the daemon would not exit. So the tests mount in their own namespace, which
# nobody else copies; it also keeps our mounts out of everybody else's way.
q_private_ns() {
	[ -z "${Q_IN_NS:-}" ] || return 0
	unshare --mount --propagation private true 2>/dev/null || return 0
	export Q_IN_NS=1
	exec unshare --mount --propagation private bash "$0" "${Q_ARGS[@]}"
}

q_log() {
	echo "# $*"
}

q_fail() {
	echo "FAIL: $*"
	Q_FAILED=$((Q_FAILED + 1))
}

q_check() {
	local desc=$1
	shift
	if "$@"; then
		echo "ok - $desc"
	else
		q_fail "$desc"
	fi
}

q_on_exit() {
	Q_CLEANUPS+=("$1")
}

q_teardown() {
	local i
	for ((i = ${#Q_CLEANUPS[@]} - 1; i >= 0; i--)); do
		eval "${Q_CLEANUPS[$i]}" >/dev/null 2>&1 || true
	done
	Q_CLEANUPS=()
}

q_init() {
	Q_TMP=$(mktemp -d /tmp/slowmedia-qt.XXXXXX)
	q_on_exit "rm -rf '$Q_TMP'"
	trap 'rc=$?; q_teardown; exit $rc' EXIT
	trap 'exit 130' INT TERM
}

q_now() {
	echo "$EPOCHREALTIME"
}

# q_since T0: seconds since T0, with millisecond precision.
q_since() {
	awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.3f", b - a }'
}

# q_between X LO HI: LO <= X <= HI (decimals allowed).
q_between() {
	awk -v x="$1" -v lo="$2" -v hi="$3" 'BEGIN { exit !(x >= lo && x <= hi) }'
}

q_is_mounted() { # MNT [TYPE]
	awk -v m="$1" -v t="${2:-}" '$2 == m && (t == "" || $3 == t) {f = 1} END {exit !f}' \
		/proc/mounts
}

q_size() {
	stat -c %s "$1" 2>/dev/null || echo -1
}

# q_tmpfs DIR: the daemon syncfs()es its lower filesystem (every second and at
# exit); on a shared disk that waits for everybody's dirty data, and the timing
# checks would measure the neighbours.
q_tmpfs() {
	mkdir -p "$1"
	mount -t tmpfs -o size=64M,mode=755 qt-lower "$1" || { echo "cannot mount a tmpfs"; exit 1; }
	q_on_exit "umount '$1' || umount -l '$1'"
}

q_setup_tmpfs() {
	q_require
	q_init
	LOWER=$Q_TMP/lower MNT=$Q_TMP/mnt
	q_tmpfs "$LOWER"
}

q_setup_ext2() {
	q_require mkfs.ext2
	q_init
	LOWER=$Q_TMP/lower MNT=$Q_TMP/mnt
	q_ext2 "$1" "$LOWER"
}

# q_ext2 SIZE_MB DIR: sparse image, loop device, mkfs.ext2, mounted on DIR.
q_ext2() {
	local size=$1 dir=$2 img
	img="$Q_TMP/ext2.$RANDOM.img"
	truncate -s "${size}M" "$img"
	mkfs.ext2 -q -F "$img" >/dev/null || { echo "mkfs.ext2 failed"; exit 1; }
	Q_LOOP=$(losetup -f --show "$img") || q_skip "no free loop device"
	q_on_exit "losetup -d '$Q_LOOP'"
	mkdir -p "$dir"
	mount -t ext2 "$Q_LOOP" "$dir" || { echo "cannot mount $Q_LOOP"; exit 1; }
	q_on_exit "umount '$dir' || umount -l '$dir'"
}

q_wait_mount() { # MNT PID
	local i
	for ((i = 0; i < Q_MOUNT_TIMEOUT_S * 20; i++)); do
		q_is_mounted "$1" fuse.slowmedia && return 0
		kill -0 "$2" 2>/dev/null || return 1
		sleep 0.05
	done
	return 1
}

# q_start LOWER MNT [OPTS]: the daemon's output goes to $Q_LOG.
q_start() {
	local lower=$1 mnt=$2 opts=${3:-}
	mkdir -p "$mnt"
	Q_LOG="$Q_TMP/daemon.${#Q_LOGS[@]}.log"
	if [ -n "$opts" ]; then
		"$SLOWMEDIA" "$lower" "$mnt" -f -o "$opts" >"$Q_LOG" 2>&1 &
	else
		"$SLOWMEDIA" "$lower" "$mnt" -f >"$Q_LOG" 2>&1 &
	fi
	Q_PID=$!
	Q_PIDS[$mnt]=$Q_PID
	Q_LOGS[$mnt]=$Q_LOG
	q_on_exit "q_kill_daemon '$mnt'"
	q_on_exit "q_is_mounted '$mnt' fuse.slowmedia && umount -l '$mnt'"
	if ! q_wait_mount "$mnt" "$Q_PID"; then
		echo "FAIL: slowmedia did not mount $mnt; its output:"
		cat "$Q_LOG"
		exit 1
	fi
}

# Teardown only: kill a daemon still registered (its pid is ours), TERM then KILL.
q_kill_daemon() {
	local pid=${Q_PIDS[$1]:-} i
	[ -n "$pid" ] || return 0
	kill "$pid"
	for ((i = 0; i < 40; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.05
	done
	kill -9 "$pid"
	unset "Q_PIDS[$1]"
}

q_alive() {
	local pid=${Q_PIDS[$1]:-}
	if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then
		q_fail "daemon for $1 is gone"
		q_show_log "$1"
		return 1
	fi
	return 0
}

# q_dump_threads PID: where a stuck daemon's threads are, for the report.
q_dump_threads() {
	local t
	echo "  threads of $1 (name, state, kernel wait channel):"
	for t in /proc/"$1"/task/*; do
		echo "    $(cat "$t/comm") $(awk '{print $3}' "$t/stat") $(cat "$t/wchan")"
	done
	if command -v gdb >/dev/null; then
		timeout 20 gdb -p "$1" -batch -ex 'thread apply all bt' 2>/dev/null |
			grep -E '^(Thread|#)' | sed 's/^/    /'
	fi
}

q_show_log() {
	sed 's/^/  | /' "${Q_LOGS[$1]}"
}

# q_wait_daemon MNT: wait (Q_EXIT_TIMEOUT_S at most) for the daemon to exit
# and check its status; sets Q_STOP_SECS from the call.
q_wait_daemon() {
	local mnt=$1 pid=${Q_PIDS[$1]} t0=$EPOCHREALTIME rc i
	for ((i = 0; i < Q_EXIT_TIMEOUT_S * 50; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.02
	done
	Q_STOP_SECS=$(q_since "$t0")
	if kill -0 "$pid" 2>/dev/null; then
		q_fail "daemon $pid still running ${Q_EXIT_TIMEOUT_S} s after unmount"
		q_dump_threads "$pid"
		kill -9 "$pid"
	fi
	rc=0
	wait "$pid" || rc=$?
	unset "Q_PIDS[$mnt]"
	if [ "$rc" != 0 ]; then
		q_fail "daemon for $mnt exited with status $rc; its output:"
		q_show_log "$mnt"
		return 1
	fi
	return 0
}

# q_stop MNT [allow-errors]: unmount and wait for the drain and exit. Without
# allow-errors, any "error" in the daemon's output fails the test.
q_stop() {
	local mnt=$1 t0=$EPOCHREALTIME
	if ! umount "$mnt"; then
		q_fail "umount $mnt failed"
		umount -l "$mnt"
	fi
	q_wait_daemon "$mnt"
	# shellcheck disable=SC2034 # for the caller
	Q_STOP_SECS=$(q_since "$t0")
	if [ "${2:-}" != allow-errors ] && grep -qi error "${Q_LOGS[$mnt]}"; then
		q_fail "daemon for $mnt printed errors:"
		q_show_log "$mnt"
	fi
}

# q_sectors_written LOOPDEV: the block layer's count of 512-byte sectors written.
q_sectors_written() {
	awk '{print $7}' "/sys/block/${1#/dev/}/stat"
}

q_finish() {
	if [ "$Q_FAILED" != 0 ]; then
		echo "$Q_FAILED check(s) failed"
		exit 1
	fi
	echo "all checks passed"
	exit 0
}
