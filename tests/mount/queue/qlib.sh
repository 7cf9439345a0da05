# Helpers for the write-behind queue mount tests (tests/mount/queue/*.sh): the
# q_* names of the shared harness, tests/lib/mount-lib.sh. Each q_* below is
# its ml_* function (or a wrapper adapting the arguments); the Q_* variables
# are the ML_* ones under another name (bash namerefs). Only the helpers no
# other test uses (q_size, q_between, q_sectors_written...) live here.
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

# shellcheck source=../../lib/mount-lib.sh
source "${MOUNT_LIB:-$(dirname "${BASH_SOURCE[0]}")/../../lib/mount-lib.sh}"

# shellcheck disable=SC2034 # for the scripts
declare -gn Q_ARGS=ML_ARGS Q_TMP=ML_TMP Q_FAILED=ML_FAILED Q_CLEANUPS=ML_CLEANUPS \
	Q_PIDS=ML_PIDS Q_LOGS=ML_LOGS Q_PID=ML_PID Q_LOG=ML_LOG Q_LOOP=ML_LOOP Q_RC=ML_RC \
	Q_STOP_SECS=ML_STOP_SECS Q_MOUNT_TIMEOUT_S=ML_MOUNT_TIMEOUT_S \
	Q_EXIT_TIMEOUT_S=ML_EXIT_TIMEOUT_S

q_skip() { ml_skip "$@"; }
q_log() { ml_log "$@"; }
q_fail() { ml_fail "$@"; }
q_check() { ml_check_here "$@"; } # CMD runs in this shell, its output shown
q_on_exit() { ml_on_exit "$@"; }
q_teardown() { ml_teardown; }
q_private_ns() { ml_private_ns; }
q_since() { ml_since "$@"; }
q_is_mounted() { ml_is_mounted "$@"; }
q_tmpfs() { ml_tmpfs "$1"; }
q_wait_mount() { ml_wait_mount "$@"; }
q_kill_daemon() { ml_kill_daemon "$@"; }
q_alive() { ml_alive "$@"; }
q_dump_threads() { ml_dump_threads "$@"; }
q_show_log() { ml_show_log "$@"; }
q_finish() { ml_finish; }

q_require() {
	ml_require "$@"
	[ -x "${SLOWMEDIA:-}" ] || { echo "SLOWMEDIA '${SLOWMEDIA:-}' is not executable"; exit 1; }
	[ -x "${QIO:-}" ] || { echo "QIO '${QIO:-}' is not executable"; exit 1; }
	ml_private_ns
}

q_init() {
	ml__init slowmedia-qt
	# A daemonized slowmedia logs here, not to /var/log.
	export SLOWMEDIA_LOG_FILE=${SLOWMEDIA_LOG_FILE:-$Q_TMP/daemon-syslog.log}
}

q_now() {
	echo "$EPOCHREALTIME"
}

# q_between X LO HI: LO <= X <= HI (decimals allowed).
q_between() {
	awk -v x="$1" -v lo="$2" -v hi="$3" 'BEGIN { exit !(x >= lo && x <= hi) }'
}

q_size() {
	stat -c %s "$1" 2>/dev/null || echo -1
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

q_ext2() { # SIZE_MB DIR
	ml_make_ext4 "${1}M" "$2" mkfs.ext2
}

# q_start LOWER MNT [OPTS]: the daemon's output goes to $Q_LOG.
q_start() {
	local lower=$1 mnt=$2 opts=${3:-}
	mkdir -p "$mnt"
	ML_DAEMON=$SLOWMEDIA ml_start "$lower" "$mnt" ${opts:+-o "$opts"}
}

# q_wait_daemon MNT: wait (Q_EXIT_TIMEOUT_S at most) for the daemon to exit
# and check its status (not its output); sets Q_STOP_SECS from the call.
q_wait_daemon() {
	ml_wait_daemon "$1" allow-errors
}

# q_stop MNT [allow-errors]: unmount and wait for the drain and exit. Without
# allow-errors, any "error" in the daemon's output fails the test.
q_stop() {
	ml_stop "$@"
}

# q_sectors_written LOOPDEV: the block layer's count of 512-byte sectors written.
q_sectors_written() {
	awk '{print $7}' "/sys/block/${1#/dev/}/stat"
}

# q_quiet CMD...: CMD with its output discarded, for q_check (whose own
# "ok"/"FAIL" line must stay visible).
q_quiet() {
	"$@" >/dev/null 2>&1
}

# q_wait_daemon_any MNT: like q_wait_daemon, but the exit status is not
# judged, only returned in Q_RC (for daemons that may report a loss); 1 if
# the daemon was still running after Q_EXIT_TIMEOUT_S (then killed).
q_wait_daemon_any() {
	ml_reap "$1"
}

# q_require_slowdev [tool...]: q_require mkfs.ext2 and the tools, then the
# slowdev emulator ($SLOWDEV, else skip) and its helpers (slowdev-media.sh:
# slowdev_up, slowdev_ctl, ...), which use $SLOWDEV as their binary.
q_require_slowdev() {
	local lib
	lib=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../slowdev" && pwd)/slowdev-media.sh
	q_require mkfs.ext2 "$@"
	if [ ! -x "${SLOWDEV:-}" ] || [ ! -f "$lib" ]; then
		q_skip "needs the slowdev emulator (tests/slowdev)"
	fi
	export SLOWDEV_BIN=$SLOWDEV
	# shellcheck source=../../slowdev/slowdev-media.sh
	. "$lib"
}
