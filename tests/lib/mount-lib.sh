# Shared helpers for the real-mount tests (tests/mount/*.sh). Source it, then:
#
#   ml_require_root_fuse          exit 77 unless root with /dev/fuse and losetup
#   ml_init                       temp dir in $ML_TMP, teardown trap on EXIT
#   ml_make_ext4 SIZE DIR [mkfs]  loop-mounted fresh filesystem at DIR
#   ml_scratch SIZE               root+fuse check, ml_init, an ext4 of SIZE at
#                                 $ML_FS with an empty $ML_FS/lower, and an empty
#                                 mount point $ML_MNT
#   ml_start SRC MNT [args...]    run the daemon with -f in the background, wait
#                                 for the mount; sets ML_PID
#   ml_stop MNT                   unmount, wait for the daemon, fail on a non-zero
#                                 exit or on "error" in its output
#   ml_fail MSG / ml_check DESC CMD...
#
# Everything set up through these helpers is undone by the trap, in reverse
# order, even when an assertion fails: lazy unmounts, daemons killed by pid,
# loop devices detached, the temp dir removed. ML_DAEMON must name the
# slowmedia binary.

ML_TMP=""
ML_PID=""
ML_FAILED=0
ML_MOUNT_TIMEOUT_S=10
ML_EXIT_TIMEOUT_S=${ML_EXIT_TIMEOUT_S:-30} # the daemon drains its queue before exiting
ML_CLEANUPS=()
declare -A ML_PIDS=()	# mountpoint -> daemon pid
declare -A ML_LOGS=()	# mountpoint -> daemon output file
declare -A ML_CONNS=()	# mountpoint -> FUSE connection number (/sys/fs/fuse/connections)

ml_skip() {
	echo "SKIP: $*"
	exit 77
}

ml_require_root_fuse() {
	[ "$(id -u)" = 0 ] || ml_skip "needs root"
	[ -c /dev/fuse ] || ml_skip "needs /dev/fuse"
	command -v losetup >/dev/null || ml_skip "needs losetup"
	command -v mkfs.ext4 >/dev/null || ml_skip "needs mkfs.ext4"
	[ -x "${ML_DAEMON:-}" ] || { echo "ML_DAEMON '${ML_DAEMON:-}' is not executable"; exit 1; }
}

ml_log() {
	echo "# $*"
}

ml_fail() {
	echo "FAIL: $*"
	ML_FAILED=$((ML_FAILED + 1))
}

# ml_check DESC CMD...: run CMD, count a failure when it fails (and show the
# start of what it said).
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

# ml_not CMD...: succeeds when CMD fails (for ml_check).
ml_not() {
	! "$@"
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

ml_init() {
	ML_TMP=$(mktemp -d /tmp/slowmedia-mt.XXXXXX)
	chmod 755 "$ML_TMP" # unprivileged test users must reach what is below
	ml_on_exit "rm -rf '$ML_TMP'"
	trap 'rc=$?; ml_teardown; exit $rc' EXIT
	trap 'exit 130' INT TERM
}

ml_is_mounted() { # MNT [TYPE]
	awk -v m="$1" -v t="${2:-}" '$2 == m && (t == "" || $3 == t) {f = 1} END {exit !f}' \
		/proc/mounts
}

# ml_make_ext4 SIZE DIR [MKFS]: a sparse image of SIZE on a new loop device,
# with a fresh filesystem mounted on DIR.
ml_make_ext4() {
	local size=$1 dir=$2 mkfs=${3:-mkfs.ext4} img loop
	img="$ML_TMP/img.$RANDOM"
	truncate -s "$size" "$img"
	"$mkfs" -q -F "$img" >/dev/null || { echo "$mkfs failed"; exit 1; }
	loop=$(losetup -f --show "$img") || ml_skip "no free loop device"
	ml_on_exit "losetup -d '$loop'"
	mkdir -p "$dir"
	mount "$loop" "$dir" || { echo "cannot mount $loop"; exit 1; }
	ml_on_exit "umount '$dir' || umount -l '$dir'"
	chmod 755 "$dir"
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
	local src=$1 mnt=$2 log
	shift 2
	log="$ML_TMP/daemon.${#ML_LOGS[@]}.log"
	"$ML_DAEMON" "$src" "$mnt" -f "$@" >"$log" 2>&1 &
	ML_PID=$!
	ML_PIDS[$mnt]=$ML_PID
	ML_LOGS[$mnt]=$log
	ml_on_exit "ml_kill_daemon '$mnt'"
	ml_on_exit "ml_is_mounted '$mnt' fuse.slowmedia && umount -l '$mnt'"
	if ! ml_wait_mount "$mnt" "$ML_PID"; then
		echo "slowmedia did not mount $mnt; its output:"
		sed 's/^/  | /' "$log"
		ml_kill_daemon "$mnt"
		return 1
	fi
	ML_CONNS[$mnt]=$(stat -c %d "$mnt")
}

# ml_start SRC MNT [daemon args...]: as ml_try_start, but the test ends when
# the mount does not appear.
ml_start() {
	ml_try_start "$@" || { echo "FAIL: no mount, giving up"; exit 1; }
}

# ml_wait_exit PID SECONDS: 0 once PID is gone; 1 if it is still there.
ml_wait_exit() {
	local pid=$1 i
	for ((i = 0; i < $2 * 20; i++)); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.05
	done
	! kill -0 "$pid" 2>/dev/null
}

# Only a daemon still registered (not yet stopped) is killed: its pid is ours.
# A daemon that does not stop within a few seconds is killed hard.
ml_kill_daemon() {
	local pid=${ML_PIDS[$1]:-}
	[ -n "$pid" ] || return 0
	kill "$pid" 2>/dev/null
	ml_wait_exit "$pid" 5 || kill -9 "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null
	unset "ML_PIDS[$1]"
}

# ml_daemon_fds MNT: open fds of the daemon serving MNT, without pipes: libfuse
# keeps a splice pipe pair per worker thread, so those follow the thread count.
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

# ml_held_elsewhere MNT: another mount namespace (made by someone's unshare
# while MNT was mounted) still has a copy of MNT, so the kernel keeps the FUSE
# connection and the daemon cannot see the unmount. Sets ML_HOLDERS.
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

# ml_stop MNT: unmount, then the daemon must exit 0 (after draining its queue)
# without saying "error".
ml_stop() {
	local mnt=$1 pid=${ML_PIDS[$1]} log=${ML_LOGS[$1]} rc=0 start=$SECONDS
	if ! umount "$mnt"; then
		ml_fail "umount $mnt failed"
		umount -l "$mnt"
	fi
	ml_wait_exit "$pid" 3
	if kill -0 "$pid" 2>/dev/null && ml_held_elsewhere "$mnt"; then
		# Not the daemon's fault: end the connection the other namespace keeps.
		echo "  (mount still held by other mount namespaces: $ML_HOLDERS; aborting it)"
		echo 1 >"/sys/fs/fuse/connections/${ML_CONNS[$mnt]}/abort"
		ml_wait_exit "$pid" 10
		rc=ignored
	fi
	if ! ml_wait_exit "$pid" "$ML_EXIT_TIMEOUT_S"; then
		ml_fail "daemon $pid still running $ML_EXIT_TIMEOUT_S s after unmount"
		if command -v gdb >/dev/null; then
			echo "  its threads:"
			gdb -p "$pid" -batch -ex "thread apply all bt" 2>/dev/null |
				grep -E '^(Thread|#[0-9])' | head -n 60 | sed 's/^/  | /'
		fi
		kill -9 "$pid"
	else
		ml_log "daemon exited within $((SECONDS - start + 1)) s of the unmount"
	fi
	if [ "$rc" = ignored ]; then
		wait "$pid"
	else
		wait "$pid" || rc=$?
		[ "$rc" = 0 ] || ml_fail "daemon for $mnt exited with status $rc"
	fi
	if grep -qi error "$log"; then
		ml_fail "daemon for $mnt printed errors:"
		sed 's/^/  | /' "$log"
	fi
	unset "ML_PIDS[$mnt]"
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
