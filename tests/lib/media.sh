# media.sh: emulated slow media and the safety net around them. Source it (bash).
#
# Everything a benchmark or test changes on the machine is registered on a
# cleanup list the moment it is made, and undone in reverse order by
# media_cleanup_all, which media_install_traps runs on EXIT, INT and TERM:
# mounts, loop devices, images, blkio throttle rules, bdi knobs, sysctls,
# debugfs (only if we mounted it). A step can also be undone early by key
# (media_undo KEY), which takes it off the list.
#
#   media_install_traps
#   media_bounded SECONDS CMD...     run CMD, wait at most SECONDS; never blocks
#                                    on a process stuck in the kernel (D state)
#   media_loop_up NAME SIZE_MB FSTYPE MNT    image + loop + ext2|vfat, mounted
#   media_throttle NAME WRITE_BPS READ_BPS   root cgroup-v1 blkio throttle
#   media_unthrottle NAME
#   media_loop_down NAME             unthrottle, unmount, detach, remove image
#   media_sysctl_small DIRTY BG      vm.dirty_bytes / dirty_background_bytes
#   media_sysctl_restore
#   media_bdi_mitigate MAJ:MIN MAX_BYTES     strict_limit=1, max_bytes
#   media_bdi_restore MAJ:MIN
#   media_debugfs                    mount debugfs if needed (undone at exit)
#
# Names: everything lives under $MEDIA_STATE (/var/tmp/smbench-PID by
# default) so concurrent users of the machine are never touched; only rules
# and knobs of our own loop devices are written.
# shellcheck shell=bash

: "${MEDIA_STATE:=/var/tmp/smbench-$$}"
MEDIA_BLKIO=${MEDIA_BLKIO:-/sys/fs/cgroup/blkio}
# Bound on tearing a medium down once its throttle is gone.
MEDIA_DOWN_TIMEOUT_S=${MEDIA_DOWN_TIMEOUT_S:-120}

declare -a media__keys=()
declare -A media__undo=()
declare -A MEDIA_LOOP=() MEDIA_MM=() MEDIA_MNT=() MEDIA_FSTYPE=() MEDIA_PID=()

media_log() {
	echo "bench: $*" >&2
}

# media_on_exit KEY CMD: remember how to undo step KEY.
media_on_exit() {
	local key=$1
	shift
	[ -n "${media__undo[$key]+x}" ] || media__keys+=("$key")
	media__undo[$key]="$*"
}

# media_undo KEY: undo step KEY now (if still registered).
media_undo() {
	local key=$1 cmd
	[ -n "${media__undo[$key]+x}" ] || return 0
	cmd=${media__undo[$key]}
	unset "media__undo[$key]"
	eval "$cmd" || media_log "cleanup '$key' failed"
}

media_forget() {
	unset "media__undo[$1]"
}

media_cleanup_all() {
	local i
	trap '' INT TERM
	for ((i = ${#media__keys[@]} - 1; i >= 0; i--))
	do
		media_undo "${media__keys[i]}"
	done
	media__keys=()
	media_pending_wait
	media_strays_wait
	[ -d "$MEDIA_STATE" ] && rm -rf "$MEDIA_STATE"
	trap - INT TERM
}

media_install_traps() {
	mkdir -p "$MEDIA_STATE"
	trap 'media_cleanup_all' EXIT
	trap 'media_log "interrupted, cleaning up"; exit 130' INT
	trap 'media_log "terminated, cleaning up"; exit 143' TERM
}

# media_bounded SECONDS CMD...: runs CMD (a command or shell function) in the
# background and polls it. Sets MB_ELAPSED (seconds, measured around CMD
# itself), MB_TIMEDOUT (0|1), MB_RC, MB_PID, and MB_OUT (CMD's stdout). On
# timeout CMD is left running: the caller decides whether to kill it
# (media_kill_bounded) or to release what it waits for and reap it later
# (media_pending_add / media_pending_wait).
media_bounded() {
	local limit=$1 f deadline t0 t1
	shift
	f=$(mktemp "$MEDIA_STATE/bounded.XXXXXX")
	(
		t0=$EPOCHREALTIME
		"$@" >"$f.out"
		rc=$?
		echo "$rc $t0 $EPOCHREALTIME" >"$f.done"
	) &
	MB_PID=$!
	# Completion is told by the .done file; disowned, a killed CMD prints
	# no "Killed" job notice.
	disown "$MB_PID"
	deadline=$(( ${EPOCHREALTIME/./} + $(awk -v s="$limit" 'BEGIN { printf "%d", s * 1e6 }') ))
	MB_TIMEDOUT=0
	while [ ! -e "$f.done" ]; do
		if (( ${EPOCHREALTIME/./} >= deadline )); then
			MB_TIMEDOUT=1
			break
		fi
		sleep 0.02
	done
	if [ "$MB_TIMEDOUT" = 0 ]; then
		read -r MB_RC t0 t1 <"$f.done"
		MB_ELAPSED=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f", b - a }')
	else
		MB_RC=124
		MB_ELAPSED=$limit
	fi
	MB_OUT=$(cat "$f.out" 2>/dev/null)
	rm -f "$f" "$f.done" "$f.out" 2>/dev/null
	return 0
}

# Kills a timed-out bounded command and its children (best effort: a task
# stuck uninterruptibly in the kernel dies when its I/O completes).
media_kill_bounded() {
	# shellcheck disable=SC2046
	kill -KILL $(media__tree "$1") 2>/dev/null
	media_pending_add "$1"
}

# PID and all its descendants.
media__tree() {
	local kid
	echo "$1"
	for kid in $(pgrep -P "$1" 2>/dev/null); do
		media__tree "$kid"
	done
}

declare -a media__pending=()
media_pending_add() {
	media__pending+=("$1")
}

# A stuck global sync waits for every device of the machine, other people's
# slow media too: it is not waited for at each teardown, only briefly at exit
# (media_strays_wait), and then left to finish by itself.
declare -a media__strays=()
media_stray_add() {
	media__strays+=("$1")
}

media_strays_wait() {
	local pid i
	for pid in "${media__strays[@]}"; do
		for ((i = 0; i < 100; i++)); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -0 "$pid" 2>/dev/null &&
			media_log "a global sync ($pid) is still waiting for some device's writeback; left running"
	done
	media__strays=()
}

# Waits (bounded) for the pending commands, then kills what is left.
media_pending_wait() {
	local limit=${1:-$MEDIA_DOWN_TIMEOUT_S} pid i
	for pid in "${media__pending[@]}"; do
		for ((i = 0; i < limit * 10; i++)); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$pid" 2>/dev/null; then
			media_log "process $pid still stuck after ${limit}s; killing"
			# shellcheck disable=SC2046
			kill -KILL $(media__tree "$pid") 2>/dev/null
		fi
	done
	media__pending=()
}

# ---- sysctls -------------------------------------------------------------

media__sysctl_saved=
media_sysctl_save() {
	[ -n "$media__sysctl_saved" ] && return 0
	media__sysctl_saved="$(cat /proc/sys/vm/dirty_bytes) $(cat /proc/sys/vm/dirty_ratio)"
	media__sysctl_saved+=" $(cat /proc/sys/vm/dirty_background_bytes)"
	media__sysctl_saved+=" $(cat /proc/sys/vm/dirty_background_ratio)"
	media_on_exit sysctl media_sysctl_restore
}

media_sysctl_small() {
	media_sysctl_save
	echo "$1" >/proc/sys/vm/dirty_bytes
	echo "$2" >/proc/sys/vm/dirty_background_bytes
}

# Writing a *_bytes sysctl zeroes its *_ratio twin and back: restore the one
# that was in force.
media_sysctl_restore() {
	local b r bb br
	[ -n "$media__sysctl_saved" ] || return 0
	read -r b r bb br <<<"$media__sysctl_saved"
	if [ "$b" != 0 ]; then echo "$b" >/proc/sys/vm/dirty_bytes; else echo "$r" >/proc/sys/vm/dirty_ratio; fi
	if [ "$bb" != 0 ]; then
		echo "$bb" >/proc/sys/vm/dirty_background_bytes
	else
		echo "$br" >/proc/sys/vm/dirty_background_ratio
	fi
	media__sysctl_saved=
	media_forget sysctl
}

# ---- bdi knobs ------------------------------------------------------------

media_bdi_mitigate() {
	local mm=$1 max=$2 d=/sys/class/bdi/$1
	[ -w "$d/strict_limit" ] && [ -w "$d/max_bytes" ] || {
		media_log "no strict_limit/max_bytes knobs in $d"
		return 1
	}
	media_on_exit "bdi:$mm" "media__bdi_set $mm $(cat "$d/strict_limit") $(cat "$d/max_ratio_fine")"
	echo 1 >"$d/strict_limit" && echo "$max" >"$d/max_bytes"
}

media__bdi_set() {
	local d=/sys/class/bdi/$1
	[ -d "$d" ] || return 0
	echo "$3" >"$d/max_ratio_fine"
	echo "$2" >"$d/strict_limit"
}

media_bdi_restore() {
	media_undo "bdi:$1"
}

# ---- debugfs --------------------------------------------------------------

media_debugfs() {
	[ -d /sys/kernel/debug/bdi ] && return 0
	mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null || return 1
	media_on_exit debugfs "mountpoint -q /sys/kernel/debug && umount /sys/kernel/debug"
}

# ---- blkio throttle -------------------------------------------------------

media_throttle() {
	local name=$1 w=$2 r=$3 mm=${MEDIA_MM[$1]}
	media_on_exit "throttle:$name" "media__unthrottle_mm $mm"
	echo "$mm $w" >"$MEDIA_BLKIO/blkio.throttle.write_bps_device" &&
		echo "$mm $r" >"$MEDIA_BLKIO/blkio.throttle.read_bps_device"
}

media__unthrottle_mm() {
	local mm=$1 f
	for f in write_bps_device read_bps_device; do
		grep -q "^$mm " "$MEDIA_BLKIO/blkio.throttle.$f" 2>/dev/null &&
			echo "$mm 0" >"$MEDIA_BLKIO/blkio.throttle.$f"
	done
	return 0
}

media_unthrottle() {
	media_undo "throttle:$1"
}

# ---- the loop medium ------------------------------------------------------

media__mkfs() {
	local fstype=$1 dev=$2
	case $fstype in
	ext2) mkfs.ext2 -q -F -N 65536 -m 0 "$dev" ;;
	vfat)
		if command -v mkfs.vfat >/dev/null; then
			mkfs.vfat -F 32 "$dev" >/dev/null
		else
			python3 "$(dirname "${BASH_SOURCE[0]}")/mkfat.py" "$dev"
		fi
		;;
	*) media_log "unknown fstype $fstype"; return 1 ;;
	esac
}

# Waits (tenths of seconds) until DIR is a mount point; 1 if PID dies first.
media_wait_mount() {
	local dir=$1 pid=$2 i
	for ((i = 0; i < 100; i++)); do
		mountpoint -q "$dir" && return 0
		[ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null && return 1
		sleep 0.1
	done
	return 1
}

media_loop_up() {
	local name=$1 size_mb=$2 fstype=$3 mnt=$4 img loop
	[ "$fstype" = vfat ] && ! command -v fusefat >/dev/null && {
		media_log "vfat medium needs fusefat"
		return 1
	}
	img=$MEDIA_STATE/$name.img
	mkdir -p "$MEDIA_STATE" "$mnt" || return 1
	truncate -s "${size_mb}M" "$img" || return 1
	media_on_exit "loop:$name" "media_loop_down $name"
	loop=$(losetup --find --show --direct-io=on "$img") || return 1
	MEDIA_LOOP[$name]=$loop
	MEDIA_MM[$name]=$(lsblk -dno MAJ:MIN "$loop" | tr -d ' ')
	MEDIA_MNT[$name]=$mnt
	MEDIA_FSTYPE[$name]=$fstype
	media__mkfs "$fstype" "$loop" || return 1
	if [ "$fstype" = ext2 ]; then
		mount -t ext2 "$loop" "$mnt" || return 1
	else
		# fusefat is very chatty on stdout, even without -d.
		fusefat -f -o rw+ "$loop" "$mnt" </dev/null >/dev/null 2>"$MEDIA_STATE/$name.fusefat.log" &
		MEDIA_PID[$name]=$!
		media_wait_mount "$mnt" "${MEDIA_PID[$name]}" || {
			media_log "fusefat did not mount $loop:"
			cat "$MEDIA_STATE/$name.fusefat.log" >&2
			return 1
		}
	fi
}

# Waits until nothing holds block device DEV any more (an O_EXCL open
# succeeds). umount(8) can return while the filesystem lives on, e.g. when a
# global sync holds the superblock: the medium is only free to be pulled
# once its filesystem has been shut down and written out.
media_wait_released() {
	python3 -c '
import os, sys, time
while True:
    try:
        os.close(os.open(sys.argv[1], os.O_RDONLY | os.O_EXCL))
        break
    except OSError:
        time.sleep(0.02)
' "$1"
}

# Unmounts the medium of NAME until the device is released: for fusefat this
# includes the daemon's exit, when it writes the device's dirty data.
# Bounded by the caller.
media_loop_umount() {
	local name=$1 mnt=${MEDIA_MNT[$1]} pid=${MEDIA_PID[$1]:-}
	if mountpoint -q "$mnt"; then
		umount "$mnt" || return 1
	fi
	if [ -n "$pid" ]; then
		while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
	fi
	media_wait_released "${MEDIA_LOOP[$name]}"
}

media_loop_down() {
	local name=$1 loop=${MEDIA_LOOP[$1]:-} mnt=${MEDIA_MNT[$1]:-} pid=${MEDIA_PID[$1]:-}
	media_forget "loop:$name"
	media_unthrottle "$name"
	[ -n "${MEDIA_MM[$name]:-}" ] && media_bdi_restore "${MEDIA_MM[$name]}"
	media_pending_wait
	if [ -n "$mnt" ] && { mountpoint -q "$mnt" || [ -n "$pid" ]; }; then
		media_bounded "$MEDIA_DOWN_TIMEOUT_S" media_loop_umount "$name"
		if [ "$MB_TIMEDOUT" = 1 ] || [ "$MB_RC" != 0 ]; then
			media_log "unmounting $mnt failed or hung; lazy unmount"
			umount -l "$mnt" 2>/dev/null
			[ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null
			media_pending_add "$MB_PID"
			media_pending_wait 30
		fi
	fi
	[ -n "$pid" ] && wait "$pid" 2>/dev/null
	if [ -n "$loop" ] && [ "$(losetup -n -O BACK-FILE "$loop" 2>/dev/null)" = "$MEDIA_STATE/$name.img" ]; then
		losetup -d "$loop" || media_log "could not detach $loop"
	fi
	# Deleting the image also drops the page cache it holds, so a big
	# backlog flushed into it does not go on to load the fast disk.
	rm -f "$MEDIA_STATE/$name.img"
	[ -n "$mnt" ] && rmdir "$mnt" 2>/dev/null
	unset "MEDIA_LOOP[$name]" "MEDIA_MNT[$name]" "MEDIA_PID[$name]"
	return 0
}
