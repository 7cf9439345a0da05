# slowdev-media.sh: bring an emulated slow medium up and down. Source it (bash).
#
#   slowdev_up NAME SIZE_MB PROFILE FSTYPE MNT
#       A SIZE_MB MiB image behind slowdev (PROFILE: dvdram, zip, mo, usbstick),
#       a loop device over its disk, FSTYPE (ext2 or vfat) made on the loop in
#       fast mode and mounted on MNT (created if missing); then fast mode off.
#       Silent on success; 1 and a message on stderr on failure, after
#       undoing what it did.
#   slowdev_up_multi NAME SIZE_MB IMG:PROFILE:FSTYPE:MNT...
#       One slowdev serving several images (--image) through one queue and
#       one head, as media on one bus: per IMG a SIZE_MB MiB image with its
#       PROFILE, a loop device over MOUNTDIR/IMG, FSTYPE made on it and
#       mounted on MNT (the rest of the spec: it may hold ':'). IMG: letters,
#       digits, _ . - (not ctl or stats). Same contract as slowdev_up.
#   slowdev_down NAME      unmount, detach, stop slowdev, remove the state
#                          (of slowdev_up or slowdev_up_multi). Safe to call
#                          twice or after a failed slowdev_up(_multi).
#   slowdev_ctl NAME CMD...   one command to MOUNTDIR/ctl (e.g. "eject", or
#                             "IMG: eject" for one image)
#   slowdev_stat NAME KEY     one counter from MOUNTDIR/stats (IMG.KEY for an
#                             image's, e.g. zip.write_bytes)
#   slowdev_dir NAME, slowdev_loop NAME [IMG], slowdev_disk NAME [IMG]
#                             paths, for scripts (IMG: of slowdev_up_multi)
#
# State lives in /var/tmp/slowmedia-NAME/: dev/ (slowdev's MOUNTDIR),
# slowdev.pid, slowdev.log and, per medium, image, loop (and loop.seq, its
# diskseq when attached), mnt and markers of what is set up: in the top directory for slowdev_up, in img/IMG/ for
# slowdev_up_multi (whose images are listed in the file multi).
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
	printf '%s/dev/%s\n' "$(slowdev_dir "$1")" "${2:-disk}"
}

slowdev_loop() {
	cat "$(slowdev_dir "$1")${2:+/img/$2}/loop" 2>/dev/null
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

# Runs slowdev -f --fast ARGS... for NAME and waits for its MOUNTDIR.
slowdev__start() {
	local name=$1 st pid
	shift
	st=$(slowdev_dir "$name")
	"$SLOWDEV_BIN" -f --fast "$@" ${SLOWDEV_TRACE:+--trace "$SLOWDEV_TRACE"} "$st/dev" \
		</dev/null >>"$st/slowdev.log" 2>&1 &
	pid=$!
	echo "$pid" >"$st/slowdev.pid"
	if ! slowdev__wait_mount "$st/dev" "$pid"; then
		slowdev__err "slowdev did not come up:"
		sed 's/^/  /' "$st/slowdev.log" >&2
		return 1
	fi
}

# One medium over slowdev: a loop device over DISK, FSTYPE made on it with
# MKFS, mounted on MNT. What is set up is noted in MDIR (loop, loop.seq,
# mounted, mnt.created, fusefat.pid), for slowdev__medium_down.
slowdev__medium_up() {
	local mdir=$1 disk=$2 fstype=$3 mnt=$4 mkfs=$5 loop
	loop=$(losetup --find --show --direct-io=on "$disk") || return 1
	echo "$loop" >"$mdir/loop"
	cat "/sys/block/${loop#/dev/}/diskseq" >"$mdir/loop.seq" 2>/dev/null
	$mkfs "$loop" >"$mdir/mkfs.log" 2>&1 || {
		slowdev__err "$mkfs $loop failed:"
		sed 's/^/  /' "$mdir/mkfs.log" >&2
		return 1
	}

	if [ ! -d "$mnt" ]; then
		mkdir -p "$mnt" && touch "$mdir/mnt.created" || return 1
	fi
	if slowdev__is_mounted "$mnt"; then
		slowdev__err "$mnt is already a mount point"
		return 1
	fi
	touch "$mdir/mounted"
	if [ "$fstype" = ext2 ]; then
		mount -t ext2 "$loop" "$mnt" || return 1
	else
		fusefat -f -o rw+ "$loop" "$mnt" </dev/null >>"$mdir/fusefat.log" 2>&1 &
		echo $! >"$mdir/fusefat.pid"
		slowdev__wait_mount "$mnt" "$!" || {
			slowdev__err "fusefat did not mount $loop on $mnt"
			return 1
		}
	fi
}

# The steps of slowdev_up; any failure returns 1 and the caller undoes.
slowdev__up() {
	local name=$1 size_mb=$2 profile=$3 fstype=$4 mnt=$5 mkfs=$6 st
	st=$(slowdev_dir "$name")

	mkdir -p "$st/dev" && printf '%s\n' "$mnt" >"$st/mnt" || return 1
	truncate -s "${size_mb}M" "$st/image" || return 1
	slowdev__start "$name" --profile "$profile" "$st/image" || return 1
	slowdev__medium_up "$st" "$st/dev/disk" "$fstype" "$mnt" "$mkfs" || return 1
	slowdev_ctl "$name" "fast off"
}

# The steps of slowdev_up_multi, over its arrays imgs, profiles, fstypes,
# mnts and mkfss (one entry per image); any failure returns 1 and the
# caller undoes.
slowdev__up_multi() {
	local name=$1 size_mb=$2 st m i args=()
	st=$(slowdev_dir "$name")

	mkdir -p "$st/dev" && printf '%s\n' "${imgs[@]}" >"$st/multi" || return 1
	for i in "${!imgs[@]}"; do
		m=$st/img/${imgs[i]}
		mkdir -p "$m" && printf '%s\n' "${mnts[i]}" >"$m/mnt" || return 1
		truncate -s "${size_mb}M" "$m/image" || return 1
		args+=(--image "${imgs[i]}=$m/image:${profiles[i]}")
	done
	slowdev__start "$name" "${args[@]}" || return 1
	for i in "${!imgs[@]}"; do
		slowdev__medium_up "$st/img/${imgs[i]}" "$st/dev/${imgs[i]}" "${fstypes[i]}" \
			"${mnts[i]}" "${mkfss[i]}" || return 1
	done
	slowdev_ctl "$name" "fast off"
}

# Checks NAME and SIZE_MB of slowdev_up(_multi) and the binary.
slowdev__check_args() {
	local name=$1 size_mb=$2
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
}

# Is NAME free (not up)?
slowdev__check_free() {
	local st
	st=$(slowdev_dir "$1")
	if [ -e "$st" ]; then
		slowdev__err "$st exists: slowdev_down $1 first"
		return 1
	fi
}

slowdev_up() {
	local name=${1-} size_mb=${2-} profile=${3-} fstype=${4-} mnt=${5-} mkfs
	if [ $# -ne 5 ]; then
		slowdev__err "usage: slowdev_up NAME SIZE_MB PROFILE FSTYPE MNT"
		return 1
	fi
	slowdev__check_args "$name" "$size_mb" || return 1
	mkfs=$(slowdev__mkfs_cmd "$fstype") || return 1
	slowdev__check_free "$name" || return 1
	mnt=$(realpath -m -- "$mnt")
	if ! slowdev__up "$name" "$size_mb" "$profile" "$fstype" "$mnt" "$mkfs"; then
		slowdev_down "$name"
		return 1
	fi
}

slowdev_up_multi() {
	local name=${1-} size_mb=${2-} spec img profile fstype mnt mkfs seen=" "
	local -a imgs=() profiles=() fstypes=() mnts=() mkfss=()
	if [ $# -lt 3 ]; then
		slowdev__err "usage: slowdev_up_multi NAME SIZE_MB IMG:PROFILE:FSTYPE:MNT..."
		return 1
	fi
	slowdev__check_args "$name" "$size_mb" || return 1
	shift 2
	for spec in "$@"; do
		IFS=: read -r img profile fstype mnt <<<"$spec"
		if [ -z "$img" ] || [ -z "$profile" ] || [ -z "$fstype" ] || [ -z "$mnt" ]; then
			slowdev__err "bad image '$spec' (want IMG:PROFILE:FSTYPE:MNT)"
			return 1
		fi
		if [[ ! $img =~ ^[A-Za-z0-9_-][A-Za-z0-9_.-]*$ ]] || [ "$img" = ctl ] ||
			[ "$img" = stats ]; then
			slowdev__err "bad IMG '$img' (letters, digits, _ . -; not ctl or stats)"
			return 1
		fi
		if [[ $seen == *" $img "* ]]; then
			slowdev__err "IMG '$img' given twice"
			return 1
		fi
		seen+="$img "
		mkfs=$(slowdev__mkfs_cmd "$fstype") || return 1
		imgs+=("$img")
		profiles+=("$profile")
		fstypes+=("$fstype")
		mnts+=("$(realpath -m -- "$mnt")")
		mkfss+=("$mkfs")
	done
	slowdev__check_free "$name" || return 1
	if ! slowdev__up_multi "$name" "$size_mb"; then
		slowdev_down "$name"
		return 1
	fi
}

# Undoes slowdev__medium_up in MDIR: unmounts, stops fusefat, detaches the
# loop device if it is still over DISK (the number may be reused), or still
# has the diskseq it had when attached: a slowdev that got SIGTERM (a test
# killed with its process group) detached its mount lazily itself, and the
# loop's backing file is then "/disk", outside any mount.
slowdev__medium_down() {
	local mdir=$1 disk=$2 mnt loop seq rc=0
	mnt=$(cat "$mdir/mnt" 2>/dev/null)
	loop=$(cat "$mdir/loop" 2>/dev/null)
	seq=$(cat "$mdir/loop.seq" 2>/dev/null)
	if [ -e "$mdir/mounted" ] && [ -n "$mnt" ]; then
		slowdev__unmount "$mnt" || rc=1
		if [ -f "$mdir/fusefat.pid" ]; then
			slowdev__stop_pid "$(cat "$mdir/fusefat.pid")" "$mnt" || rc=1
		fi
	fi
	if [ -n "$loop" ] && {
		[ "$(losetup -n -O BACK-FILE "$loop" 2>/dev/null)" = "$disk" ] || {
			[ -n "$seq" ] && [ -n "$(losetup -n -O NAME "$loop" 2>/dev/null)" ] &&
				[ "$(cat "/sys/block/${loop#/dev/}/diskseq" 2>/dev/null)" = "$seq" ]
		}
	}; then
		losetup -d "$loop" || rc=1
	fi
	return $rc
}

# Removes the mount point of the medium in MDIR if slowdev_up made it.
slowdev__medium_rmdir() {
	local mdir=$1 mnt
	mnt=$(cat "$mdir/mnt" 2>/dev/null)
	if [ -e "$mdir/mnt.created" ] && [ -n "$mnt" ] && ! slowdev__is_mounted "$mnt"; then
		rmdir "$mnt" 2>/dev/null
	fi
}

slowdev_down() {
	local name=${1-} st pid arg img i rc=0
	local -a imgs=() mdirs=() disks=()
	if [ $# -ne 1 ]; then
		slowdev__err "usage: slowdev_down NAME"
		return 1
	fi
	st=$(slowdev_dir "$name")
	[ -d "$st" ] || return 0
	pid=$(cat "$st/slowdev.pid" 2>/dev/null)
	if [ -f "$st/multi" ]; then
		# The process is known by its MOUNTDIR: the images are in --image values.
		arg=$st/dev
		mapfile -t imgs <"$st/multi"
		for img in "${imgs[@]}"; do
			mdirs+=("$st/img/$img")
			disks+=("$st/dev/$img")
		done
	else
		arg=$st/image
		mdirs=("$st")
		disks=("$st/dev/disk")
	fi

	# No delays, faults or stalls while tearing down.
	slowdev__is_mounted "$st/dev" && [ -w "$st/dev/ctl" ] &&
		printf 'clear\nstall 0\nfast on\n' >"$st/dev/ctl" 2>/dev/null

	for i in "${!mdirs[@]}"; do
		slowdev__medium_down "${mdirs[i]}" "${disks[i]}" || rc=1
	done
	slowdev__unmount "$st/dev" || rc=1
	if [ -n "$pid" ]; then
		slowdev__stop_pid "$pid" "$arg" || rc=1
	fi
	for i in "${!mdirs[@]}"; do
		slowdev__medium_rmdir "${mdirs[i]}"
	done
	rm -rf "$st"
	return $rc
}
