# The one harness of the real-mount tests: tests/mount/*.sh use it directly,
# tests/mount/queue/qlib.sh gives the same functions their q_* names. Source
# it (ML_DAEMON naming the slowmedia binary), then:
#
#   ml_require_root_fuse          exit 77 unless root with /dev/fuse, losetup and
#                                 mkfs.ext4; then ml_private_ns
#   ml_require [TOOL...]          exit 77 unless root with /dev/fuse, losetup and
#                                 the tools
#   ml_private_ns                 re-run the script in a mount namespace of its own
#   ml_init                       temp dir in $ML_TMP, teardown trap on EXIT
#   ml_make_ext4 SIZE DIR [mkfs]  loop-mounted fresh filesystem at DIR (mkfs.ext4
#                                 unless named); sets ML_LOOP (/dev/loopN)
#   ml_tmpfs DIR                  a private 64 MiB tmpfs on DIR
#   ml_scratch SIZE               root+fuse check, ml_init, an ext4 of SIZE at
#                                 $ML_FS with an empty $ML_FS/lower, and an empty
#                                 mount point $ML_MNT
#   ml_try_start SRC MNT [args...]
#                                 run the daemon with -f in the background, wait
#                                 for the mount; sets ML_PID and ML_LOG (its
#                                 output); 1 when it did not mount
#   ml_start SRC MNT [args...]    the same, but the test ends without the mount
#   ml_alive MNT                  fail when the daemon of MNT died
#   ml_stop MNT [allow-errors]    unmount, wait for the daemon (ML_STOP_SECS), fail
#                                 on a non-zero exit or, unless allow-errors, on
#                                 "error" in its output
#   ml_wait_daemon MNT [allow-errors]
#                                 ml_stop without the unmount (the daemon was told
#                                 otherwise); 1 on a non-zero exit
#   ml_reap MNT                   wait for the daemon, judging only a sanitizer report
#                                 in its output: ML_RC is its exit status; 1 when it
#                                 had to be killed
#   ml_fail MSG / ml_check DESC CMD... / ml_check_here DESC CMD... / ml_finish
#
# Everything set up through these helpers is undone by the trap, in reverse
# order, even when an assertion fails: lazy unmounts, daemons killed by pid,
# loop devices detached, the temp dir removed. Only what they set up is
# touched.

ML_ARGS=("$@") # the script's own arguments: sourced without any, we see them
ML_TMP=""
ML_PID=""
ML_LOG=""
ML_LOOP=""
ML_RC=""
ML_STOP_SECS=""
ML_FAILED=0
ML_MOUNT_TIMEOUT_S=10
ML_EXIT_TIMEOUT_S=${ML_EXIT_TIMEOUT_S:-30} # the daemon drains its queue before exiting
ML_KILL_WAIT_S=5                           # teardown: SIGTERM, then SIGKILL after this
ML_CLEANUPS=()
ML_NIMAGES=0
ML_NSTARTS=0
declare -A ML_PIDS=() # mountpoint -> daemon pid, while it runs
declare -A ML_LOGS=() # mountpoint -> daemon output file

ml_skip() {
	echo "SKIP: $*"
	exit 77
}

ml_require() {
	local t
	[ "$(id -u)" = 0 ] || ml_skip "needs root"
	[ -c /dev/fuse ] || ml_skip "needs /dev/fuse"
	for t in losetup "$@"; do
		command -v "$t" >/dev/null || ml_skip "needs $t"
	done
}

ml_require_root_fuse() {
	ml_require mkfs.ext4
	[ -x "${ML_DAEMON:-}" ] || { echo "ML_DAEMON '${ML_DAEMON:-}' is not executable"; exit 1; }
	ml_private_ns
}

# A process that makes a mount namespace (unshare -m) while our mount exists
# gets a copy of it, which keeps the FUSE connection alive after our umount:
# the daemon would not exit. So the tests mount in a namespace of their own,
# which nobody else copies; it also keeps our mounts out of everybody else's
# way. mount(8) and mount.fuse3, run by the test, work in it as anywhere.
# Without the right to unshare, the script goes on where it is.
ml_private_ns() {
	[ -z "${ML_IN_NAMESPACE:-}" ] || return 0
	unshare --mount --propagation private true 2>/dev/null || return 0
	[ -z "$ML_TMP" ] || ml_teardown # the exec would leave it behind
	export ML_IN_NAMESPACE=1
	exec unshare --mount --propagation private bash "$0" "${ML_ARGS[@]}"
}

ml_log() {
	echo "# $*"
}

ml_fail() {
	echo "FAIL: $*"
	ML_FAILED=$((ML_FAILED + 1))
}

# ml_check DESC CMD...: run CMD (in a subshell), count a failure when it fails
# (and show the start of what it said).
ml_check() {
	local desc=$1 out
	shift
	if out=$("$@" 2>&1); then
		echo "ok - $desc"
	else
		ml_fail "$desc"
		[ -n "$out" ] && head -n 10 <<<"$out" | sed 's/^/  | /'
	fi
}

# ml_check_here DESC CMD...: the same, but CMD runs in this shell (it may set
# variables) and says what it says as it goes.
ml_check_here() {
	local desc=$1
	shift
	if "$@"; then
		echo "ok - $desc"
	else
		ml_fail "$desc"
	fi
}

# ml_not CMD...: succeeds when CMD fails (for ml_check).
ml_not() {
	! "$@"
}

# ml_since T0: seconds since T0 (an $EPOCHREALTIME), with millisecond precision.
ml_since() {
	awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.3f", b - a }'
}

# Register a cleanup command (a string, eval'ed); they run last-in first-out.
ml_on_exit() {
	ML_CLEANUPS+=("$1")
}

ml_teardown() {
	local i
	for ((i = ${#ML_CLEANUPS[@]} - 1; i >= 0; i--)); do
		eval "${ML_CLEANUPS[$i]}" >/dev/null 2>&1 || true
	done
	ML_CLEANUPS=()
}

# ml__init NAME: the temp dir /tmp/NAME.XXXXXX and the teardown trap (for
# ml_init and qlib's q_init, which differ in the name and the log file).
ml__init() {
	ML_TMP=$(mktemp -d "/tmp/$1.XXXXXX")
	chmod 755 "$ML_TMP" # unprivileged test users must reach what is below
	ml_on_exit "rm -rf '$ML_TMP'"
	# The daemons' control sockets and the arbiter they start (arbiter=auto)
	# live here, not in /run/slowmedia; the arbiter goes with the test.
	export SLOWMEDIA_CTL_DIR=$ML_TMP/ctl SLOWMEDIA_ARBITER_SOCKET=$ML_TMP/arbiter.sock
	ml_on_exit "ml_kill_arbiter '$ML_TMP/arbiter.sock'"
	trap 'rc=$?; ml_teardown; exit $rc' EXIT
	trap 'exit 130' INT TERM
}

# ml_kill_arbiter SOCKET: stop the slowmedia-arbiterd serving SOCKET, if any.
ml_kill_arbiter() {
	local p
	for p in $(pgrep -x slowmedia-arbit); do
		tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -qF -- "--socket $1 " && kill "$p"
	done
	return 0
}

ml_init() {
	ml__init slowmedia-mt
	# A daemonized slowmedia (through mount.fuse3) logs here, not to /var/log.
	export SLOWMEDIA_LOG_FILE=$ML_TMP/daemon-syslog.log
}

ml_is_mounted() { # MNT [TYPE]
	awk -v m="$1" -v t="${2:-}" '$2 == m && (t == "" || $3 == t) {f = 1} END {exit !f}' \
		/proc/mounts
}

# ml_make_ext4 SIZE DIR [MKFS]: a sparse image of SIZE (truncate's units) on a
# new loop device, with a fresh filesystem mounted on DIR.
ml_make_ext4() {
	local size=$1 dir=$2 mkfs=${3:-mkfs.ext4} img
	ML_NIMAGES=$((ML_NIMAGES + 1))
	img=$ML_TMP/img.$ML_NIMAGES
	truncate -s "$size" "$img"
	"$mkfs" -q -F "$img" >/dev/null || { echo "$mkfs failed"; exit 1; }
	ML_LOOP=$(losetup -f --show "$img") || ml_skip "no free loop device"
	ml_on_exit "losetup -d '$ML_LOOP'"
	mkdir -p "$dir"
	mount "$ML_LOOP" "$dir" || { echo "cannot mount $ML_LOOP"; exit 1; }
	ml_on_exit "umount '$dir' || umount -l '$dir'"
	chmod 755 "$dir"
}

# ml_native_pair TOOL...: the setup of the tests that compare a native
# directory with the same operations through a mount (acl, killpriv): skips
# without root, /dev/fuse or one of the TOOLs, then one fresh ext4 at
# $fs holding $native and $lower (0755), and $mnt for the mount.
ml_native_pair() {
	local t
	ml_require_root_fuse
	for t in "$@"; do
		command -v "$t" >/dev/null || ml_skip "needs $t"
	done
	ml_init
	fs=$ML_TMP/fs native=$ML_TMP/fs/native lower=$ML_TMP/fs/lower mnt=$ML_TMP/mnt
	ml_make_ext4 64M "$fs"
	mkdir -m 755 "$native" "$lower" "$mnt"
}

# ml_tmpfs DIR: for lowers whose timing must not depend on the machine's other
# disk I/O (the daemon syncfs()es its lower every second and at exit; on a
# shared disk that waits for everybody's dirty data).
ml_tmpfs() {
	mkdir -p "$1"
	mount -t tmpfs -o size=64M,mode=755 qt-lower "$1" || { echo "cannot mount a tmpfs"; exit 1; }
	ml_on_exit "umount '$1' || umount -l '$1'"
}

ml_scratch() {
	ml_require_root_fuse
	ml_init
	ML_FS=$ML_TMP/fs
	ML_MNT=$ML_TMP/mnt
	ml_make_ext4 "$1" "$ML_FS"
	mkdir -m 755 "$ML_FS/lower" "$ML_MNT"
}

# ml_wait_mount MNT PID: poll /proc/mounts; fail when the daemon dies first.
ml_wait_mount() {
	local mnt=$1 pid=$2 i
	for ((i = 0; i < ML_MOUNT_TIMEOUT_S * 20; i++)); do
		ml_is_mounted "$mnt" fuse.slowmedia && return 0
		kill -0 "$pid" 2>/dev/null || return 1
		sleep 0.05
	done
	return 1
}

# ml_try_start SRC MNT [daemon args...]: daemon output goes to
# $ML_TMP/daemon.N.log; returns 1 (with the output shown) when it did not mount.
ml_try_start() {
	local src=$1 mnt=$2
	shift 2
	ML_LOG=$ML_TMP/daemon.$ML_NSTARTS.log
	ML_NSTARTS=$((ML_NSTARTS + 1))
	"$ML_DAEMON" "$src" "$mnt" -f "$@" >"$ML_LOG" 2>&1 &
	ML_PID=$!
	ML_PIDS[$mnt]=$ML_PID
	ML_LOGS[$mnt]=$ML_LOG
	ml_on_exit "ml_kill_daemon '$mnt'"
	ml_on_exit "ml_is_mounted '$mnt' fuse.slowmedia && umount -l '$mnt'"
	if ! ml_wait_mount "$mnt" "$ML_PID"; then
		echo "slowmedia did not mount $mnt; its output:"
		ml_show_log "$mnt"
		ml_kill_daemon "$mnt"
		return 1
	fi
}

# ml_start SRC MNT [daemon args...]: as ml_try_start, but the test ends when
# the mount does not appear.
ml_start() {
	ml_try_start "$@" || { echo "FAIL: no mount, giving up"; exit 1; }
}

# ml_wait_exit PID SECONDS: 0 once PID is gone; 1 if it is still there.
ml_wait_exit() {
	local pid=$1 i
	for ((i = 0; i < $2 * 50; i++)); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.02
	done
	! kill -0 "$pid" 2>/dev/null
}

# Only a daemon still registered (not yet stopped) is killed: its pid is ours.
# A daemon that does not stop within ML_KILL_WAIT_S is killed hard.
ml_kill_daemon() {
	local pid=${ML_PIDS[$1]:-}
	[ -n "$pid" ] || return 0
	kill "$pid" 2>/dev/null
	ml_wait_exit "$pid" "$ML_KILL_WAIT_S" || kill -9 "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null
	unset "ML_PIDS[$1]"
}

ml_alive() {
	local pid=${ML_PIDS[$1]:-}
	if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then
		ml_fail "daemon for $1 is gone"
		ml_show_log "$1"
		return 1
	fi
}

ml_show_log() { # MNT
	sed 's/^/  | /' "${ML_LOGS[$1]}"
}

# ml_daemon_fds MNT: open fds of the daemon serving MNT, without pipes: libfuse
# keeps a splice pipe pair per worker thread, so those follow the thread count.
# ml_sample_peak FILE SECONDS CMD...: in the background, runs CMD every
# SECONDS until it fails or ml_sample_stop, keeping in FILE the largest
# number it printed (0 before the first).
ml_sample_peak() {
	local file=$1 period=$2
	shift 2
	echo 0 >"$file"
	(
		local peak=0 n
		while n=$("$@" 2>/dev/null); do
			[ "${n:-0}" -gt "$peak" ] && peak=$n && echo "$peak" >"$file"
			sleep "$period"
		done
	) &
	ML_SAMPLER=$!
	ml_on_exit "kill $ML_SAMPLER 2>/dev/null"
}

# ml_sample_stop: ends ml_sample_peak's sampler.
ml_sample_stop() {
	kill "$ML_SAMPLER" 2>/dev/null
	wait "$ML_SAMPLER" 2>/dev/null
}

ml_daemon_fds() {
	find "/proc/${ML_PIDS[$1]}/fd" -mindepth 1 -printf '%l\n' | grep -vc '^pipe:'
}

# ml_daemon_pipes MNT / ml_daemon_threads MNT
ml_daemon_pipes() {
	find "/proc/${ML_PIDS[$1]}/fd" -mindepth 1 -printf '%l\n' | grep -c '^pipe:'
}
ml_daemon_threads() {
	ls "/proc/${ML_PIDS[$1]}/task" | wc -l
}

# ml_held_elsewhere MNT: another mount namespace (made by an unshare from ours
# while MNT was mounted: ml_private_ns keeps everybody else's out) still has a
# copy of MNT, so the kernel keeps the FUSE connection and the daemon cannot
# see the unmount. Sets ML_HOLDERS. For the report of a daemon that is stuck.
ml_held_elsewhere() {
	local f p
	ML_HOLDERS=""
	for f in /proc/[0-9]*/mountinfo; do
		p=${f#/proc/}
		p=${p%/mountinfo}
		grep -qF " $1 " "$f" 2>/dev/null && ML_HOLDERS+="$p($(cat "/proc/$p/comm" 2>/dev/null)) "
	done
	[ -n "$ML_HOLDERS" ]
}

# ml_dump_threads PID: where a stuck daemon's threads are, for the report.
ml_dump_threads() {
	local t
	echo "  threads of $1 (name, state, kernel wait channel):"
	for t in /proc/"$1"/task/*; do
		echo "    $(cat "$t/comm") $(awk '{print $3}' "$t/stat") $(cat "$t/wchan")"
	done
	if command -v gdb >/dev/null; then
		timeout 20 gdb -p "$1" -batch -ex 'thread apply all bt' 2>/dev/null |
			grep -E '^(Thread|#)' | head -n 200 | sed 's/^/    /'
	fi
}

# ml_reap MNT: wait (ML_EXIT_TIMEOUT_S at most) for the daemon of MNT to exit;
# one still running then is shown (threads, other namespaces holding its
# mount) and killed, and ml_reap returns 1. Sets ML_RC to its exit status and
# ML_STOP_SECS to the seconds waited; the daemon is no longer registered.
ml_reap() {
	local mnt=$1 pid=${ML_PIDS[$1]} t0=$EPOCHREALTIME late=0
	if ! ml_wait_exit "$pid" "$ML_EXIT_TIMEOUT_S"; then
		echo "  daemon $pid still running $ML_EXIT_TIMEOUT_S s after the unmount"
		! ml_held_elsewhere "$mnt" || echo "  (its mount is held by other mount namespaces: $ML_HOLDERS)"
		ml_dump_threads "$pid"
		kill -9 "$pid"
		late=1
	fi
	ML_STOP_SECS=$(ml_since "$t0")
	ML_RC=0
	wait "$pid" || ML_RC=$?
	unset "ML_PIDS[$mnt]"
	ml_sanitizer_clean "${ML_LOGS[$mnt]}"
	return $late
}

# ml_sanitizer_clean LOG: fail on a sanitizer's report in a daemon's output
# (tests/run-sanitizers.sh runs mount tests with sanitized daemons; a report
# need not change what the test sees, and a daemon's allowed errors must not
# hide it).
ml_sanitizer_clean() {
	local pat='(ERROR|WARNING): (Address|Thread|Leak|Memory)Sanitizer|runtime error:'
	grep -qE "$pat" "$1" 2>/dev/null || return 0
	ml_fail "the daemon's output ($1) has a sanitizer report:"
	grep -E -A30 "$pat" "$1" | head -n 60 | sed 's/^/  | /'
}

# ml_wait_daemon MNT [allow-errors]: ml_reap, then the daemon must have exited
# in time with status 0 and, unless allow-errors, without saying "error"; its
# output is shown when not. 1 when the status was not 0.
ml_wait_daemon() {
	local mnt=$1 pid=${ML_PIDS[$1]} log=${ML_LOGS[$1]} show=0
	ml_reap "$mnt" || ml_fail "daemon $pid still running $ML_EXIT_TIMEOUT_S s after unmount"
	if [ "$ML_RC" != 0 ]; then
		ml_fail "daemon for $mnt exited with status $ML_RC"
		show=1
	fi
	if [ "${2:-}" != allow-errors ] && grep -qi error "$log"; then
		ml_fail "daemon for $mnt printed errors:"
		show=1
	fi
	[ "$show" = 0 ] || sed 's/^/  | /' "$log"
	[ "$ML_RC" = 0 ]
}

# ml_stop MNT [allow-errors]: unmount, then the daemon must exit 0 (after
# draining its queue) without saying "error". ML_STOP_SECS: from the unmount
# to the exit.
ml_stop() {
	local mnt=$1 t0=$EPOCHREALTIME
	# While data is queued the daemon keeps its mount busy (a plain unmount
	# must not look done): detach lazily then, and the daemon drains and exits.
	if ! umount "$mnt" 2>/dev/null; then
		if ml_is_mounted "$mnt" && umount -l "$mnt"; then
			ml_log "umount $mnt: busy (data queued), detached lazily"
		else
			ml_fail "umount $mnt failed"
		fi
	fi
	ml_wait_daemon "$mnt" "${2:-}"
	ML_STOP_SECS=$(ml_since "$t0")
	ml_log "the daemon was gone $ML_STOP_SECS s after the unmount began"
}

# ml_finish: the final verdict of a test script.
ml_finish() {
	if [ "$ML_FAILED" != 0 ]; then
		echo "$ML_FAILED check(s) failed"
		exit 1
	fi
	echo "all checks passed"
	exit 0
}
