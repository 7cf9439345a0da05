# slowdev-media.sh: bring an emulated slow medium up and down. Source it (bash).
#
#   slowdev_up NAME SIZE_MB PROFILE FSTYPE MNT
#       A SIZE_MB MiB image behind slowdev (PROFILE: dvdram, zip, mo, usbstick),
#       a loop device over its disk, FSTYPE (ext2 or vfat) made on the loop in
#       fast mode and mounted on MNT (created if missing); then fast mode off.
#       Silent on success; 1 and a message on stderr on failure, after
#       undoing what it did.
#   slowdev_down NAME      unmount, detach, stop slowdev, remove the state.
#                          Safe to call twice or after a failed slowdev_up.
#   slowdev_ctl NAME CMD...   one command to MOUNTDIR/ctl (e.g. "eject")
#   slowdev_stat NAME KEY     one counter from MOUNTDIR/stats
#   slowdev_dir NAME, slowdev_loop NAME, slowdev_disk NAME   paths, for scripts
#
# State lives in /var/tmp/slowmedia-NAME/: image, dev/ (slowdev's MOUNTDIR),
# slowdev.pid, slowdev.log, loop, mnt, and markers of what is set up.
#
# The loop device is made with `losetup --direct-io=on`: the loop driver then
# keeps no page cache of its own over disk, and submits its requests
# asynchronously, so several of them wait in slowdev's FIFO at once as in a
# drive's command queue (reads really queue behind writes there, and
# queue_depth shows it). Buffered loop (direct-io=off) works too, but feeds
# slowdev one request at a time.
#
# SLOWDEV_TRACE=FILE makes slowdev append a line per request to FILE.
# The binary comes from $SLOWDEV_BIN, default $top/build/tests/slowdev/slowdev.
# shellcheck shell=bash

slowdev__top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
: "${SLOWDEV_BIN:=$slowdev__top/build/tests/slowdev/slowdev}"

# How long to wait for a mount to appear or a process to exit, in tenths of s.
SLOWDEV_WAIT_TENTHS=${SLOWDEV_WAIT_TENTHS:-100}

slowdev_dir() {
	printf '/var/tmp/slowmedia-%s\n' "$1"
}

slowdev_disk() {
	printf '%s/dev/disk\n' "$(slowdev_dir "$1")"
}

slowdev_loop() {
	cat "$(slowdev_dir "$1")/loop" 2>/dev/null
}

slowdev_ctl() {
	local name=$1
	shift
	printf '%s\n' "$*" >"$(slowdev_dir "$name")/dev/ctl"
}

slowdev_stat() {
	awk -v k="$2" '$1 == k { print $2; found = 1 } END { exit !found }' \
		"$(slowdev_dir "$1")/dev/stats"
}

slowdev__err() {
	echo "slowdev: $*" >&2
}

# Is DIR (canonical) a mount point? Reads the mount table only, so a dead
# FUSE mount there (ENOTCONN) is still seen.
slowdev__is_mounted() {
	local d=${1//\\/\\134}
	d=${d// /\\040}
	d=${d//$'\t'/\\011}
	d=${d//$'\n'/\\012}
	D=$d awk '$2 == ENVIRON["D"] { f = 1 } END { exit !f }' /proc/self/mounts
}

# Waits until DIR is a mount point; 1 if PID exits first or time runs out.
slowdev__wait_mount() {
	local dir=$1 pid=$2 i
	for ((i = 0; i < SLOWDEV_WAIT_TENTHS; i++)); do
		slowdev__is_mounted "$dir" && return 0
		kill -0 "$pid" 2>/dev/null || return 1
		sleep 0.1
	done
	return 1
}

# Is PID still the process we started? Its command line holds ARG (an
# argument of it, whole), so a reused pid is left alone.
slowdev__ours() {
	local pid=$1 arg=$2
	[ -n "$pid" ] && tr '\0' '\n' 2>/dev/null <"/proc/$pid/cmdline" | grep -qxF -- "$arg"
}

# Waits for PID to exit; SIGTERM, then SIGKILL if it does not.
slowdev__stop_pid() {
	local pid=$1 arg=$2 i sig
	for sig in NONE TERM KILL; do
		[ "$sig" = NONE ] || { slowdev__ours "$pid" "$arg" && kill -"$sig" "$pid" 2>/dev/null; }
		for ((i = 0; i < SLOWDEV_WAIT_TENTHS / 2; i++)); do
			slowdev__ours "$pid" "$arg" || return 0
			sleep 0.1
		done
	done
	slowdev__err "process $pid did not exit"
	return 1
}

slowdev__unmount() {
	local dir=$1
	slowdev__is_mounted "$dir" || return 0
	umount "$dir" 2>/dev/null || umount -l "$dir"
}

slowdev__mkfs_cmd() {
	case $1 in
	ext2) echo "mkfs.ext2 -q -F" ;;
	vfat)
		if command -v mkfs.vfat >/dev/null; then
			echo mkfs.vfat
		elif command -v mkfs.fat >/dev/null; then
			echo mkfs.fat
		else
			slowdev__err "vfat needs mkfs.vfat or mkfs.fat (package dosfstools), not found"
			return 1
		fi
		command -v fusefat >/dev/null || {
			slowdev__err "vfat needs fusefat, not found"
			return 1
		}
		;;
	*)
		slowdev__err "unknown FSTYPE '$1' (ext2 or vfat)"
		return 1
		;;
	esac
}

# The steps of slowdev_up; any failure returns 1 and the caller undoes.
slowdev__up() {
	local name=$1 size_mb=$2 profile=$3 fstype=$4 mnt=$5 mkfs=$6 st pid loop
	st=$(slowdev_dir "$name")

	mkdir -p "$st/dev" && printf '%s\n' "$mnt" >"$st/mnt" || return 1
	truncate -s "${size_mb}M" "$st/image" || return 1
	"$SLOWDEV_BIN" -f --fast --profile "$profile" \
		${SLOWDEV_TRACE:+--trace "$SLOWDEV_TRACE"} "$st/image" "$st/dev" \
		</dev/null >>"$st/slowdev.log" 2>&1 &
	pid=$!
	echo "$pid" >"$st/slowdev.pid"
	if ! slowdev__wait_mount "$st/dev" "$pid"; then
		slowdev__err "slowdev did not come up:"
		sed 's/^/  /' "$st/slowdev.log" >&2
		return 1
	fi

	loop=$(losetup --find --show --direct-io=on "$st/dev/disk") || return 1
	echo "$loop" >"$st/loop"
	$mkfs "$loop" >"$st/mkfs.log" 2>&1 || {
		slowdev__err "$mkfs $loop failed:"
		sed 's/^/  /' "$st/mkfs.log" >&2
		return 1
	}

	if [ ! -d "$mnt" ]; then
		mkdir -p "$mnt" && touch "$st/mnt.created" || return 1
	fi
	if slowdev__is_mounted "$mnt"; then
		slowdev__err "$mnt is already a mount point"
		return 1
	fi
	touch "$st/mounted"
	if [ "$fstype" = ext2 ]; then
		mount -t ext2 "$loop" "$mnt" || return 1
	else
		fusefat -f -o rw+ "$loop" "$mnt" </dev/null >>"$st/fusefat.log" 2>&1 &
		echo $! >"$st/fusefat.pid"
		slowdev__wait_mount "$mnt" "$!" || {
			slowdev__err "fusefat did not mount $loop on $mnt"
			return 1
		}
	fi
	slowdev_ctl "$name" "fast off"
}

slowdev_up() {
	local name=${1-} size_mb=${2-} profile=${3-} fstype=${4-} mnt=${5-} st mkfs
	if [ $# -ne 5 ]; then
		slowdev__err "usage: slowdev_up NAME SIZE_MB PROFILE FSTYPE MNT"
		return 1
	fi
	if [[ ! $name =~ ^[A-Za-z0-9_.-]+$ ]]; then
		slowdev__err "bad NAME '$name' (letters, digits, _ . -)"
		return 1
	fi
	if [[ ! $size_mb =~ ^[1-9][0-9]*$ ]]; then
		slowdev__err "bad SIZE_MB '$size_mb'"
		return 1
	fi
	if [ ! -x "$SLOWDEV_BIN" ]; then
		slowdev__err "no slowdev binary at $SLOWDEV_BIN (set SLOWDEV_BIN)"
		return 1
	fi
	mkfs=$(slowdev__mkfs_cmd "$fstype") || return 1
	st=$(slowdev_dir "$name")
	if [ -e "$st" ]; then
		slowdev__err "$st exists: slowdev_down $name first"
		return 1
	fi
	mnt=$(realpath -m -- "$mnt")
	if ! slowdev__up "$name" "$size_mb" "$profile" "$fstype" "$mnt" "$mkfs"; then
		slowdev_down "$name"
		return 1
	fi
}

slowdev_down() {
	local name=${1-} st mnt loop pid rc=0
	if [ $# -ne 1 ]; then
		slowdev__err "usage: slowdev_down NAME"
		return 1
	fi
	st=$(slowdev_dir "$name")
	[ -d "$st" ] || return 0
	mnt=$(cat "$st/mnt" 2>/dev/null)
	loop=$(cat "$st/loop" 2>/dev/null)
	pid=$(cat "$st/slowdev.pid" 2>/dev/null)

	# No delays, faults or stalls while tearing down.
	slowdev__is_mounted "$st/dev" && [ -w "$st/dev/ctl" ] &&
		printf 'clear\nstall 0\nfast on\n' >"$st/dev/ctl" 2>/dev/null

	if [ -e "$st/mounted" ] && [ -n "$mnt" ]; then
		slowdev__unmount "$mnt" || rc=1
		if [ -f "$st/fusefat.pid" ]; then
			slowdev__stop_pid "$(cat "$st/fusefat.pid")" "$mnt" || rc=1
		fi
	fi
	# Detach only a loop that is still over our disk (the number may be reused).
	if [ -n "$loop" ] &&
		[ "$(losetup -n -O BACK-FILE "$loop" 2>/dev/null)" = "$st/dev/disk" ]; then
		losetup -d "$loop" || rc=1
	fi
	slowdev__unmount "$st/dev" || rc=1
	if [ -n "$pid" ]; then
		slowdev__stop_pid "$pid" "$st/image" || rc=1
	fi
	if [ -e "$st/mnt.created" ] && [ -n "$mnt" ] && ! slowdev__is_mounted "$mnt"; then
		rmdir "$mnt" 2>/dev/null
	fi
	rm -rf "$st"
	return $rc
}
