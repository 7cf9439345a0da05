#!/usr/bin/env bash
# manyfiles.sh: many files through slowmedia with the daemon's own fd budget
# (no SLOWMEDIA_FD_* overrides), on lowers with and without usable handles:
#
#   ramfs        no handles at all: every evicted inode is reached by name
#   ext2-user    the daemon runs as a test account: open_by_handle_at gives EPERM
#   ext2-root    handles work
#   vfat         FAT32 through fusefat (a FUSE lower without export support),
#                a tenth of the files (fusefat writes ~14 files/s, so the image
#                is filled with mtools first)
#
# Each case: N files in directories of 1,000 made on the lower, slowmedia
# mounted over it, the kernel's caches dropped, then timed: find, du, stat of
# every file, cp -a out, an md5sum of every file compared with the lower's.
# Printed: the times, the daemon's peak fd count and VmHWM (sampled every
# 0.2 s), and whether the fds stayed under half of its RLIMIT_NOFILE.
#
#   sudo tests/bench/manyfiles.sh [--files N] [--only ramfs,ext2-user,...]
# Binaries from $SLOWMEDIA_BUILD (default build/). Root only; exits 77 else.
set -u
FILES=100000
ONLY="ramfs ext2-user ext2-root vfat"
# In a function: mount-lib re-runs the script in its own mount namespace with
# the script's arguments, which a shift here would lose.
parse_args() {
	while [ $# -gt 0 ]; do
		case $1 in
		--files) FILES=$2; shift 2 ;;
		--only) ONLY=${2//,/ }; shift 2 ;;
		*) echo "usage: $0 [--files N] [--only ramfs,ext2-user,ext2-root,vfat]" >&2; exit 2 ;;
		esac
	done
}
parse_args "$@"
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=${SLOWMEDIA_BUILD:-$HERE/../../build}
ML_DAEMON=$BUILD/fusefs/slowmedia
MTOOL=$BUILD/tests/mount/mtool
ML_EXIT_TIMEOUT_S=120
[ -x "$MTOOL" ] || { echo "no $MTOOL (build the tests)"; exit 1; }
source "$HERE/../lib/mount-lib.sh"
ml_require_root_fuse
ml_init
PER_DIR=1000
RESULTS=()

now() { echo "$EPOCHREALTIME"; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.1f", b - a}'; }

# fill DIR N [AS...]: N files in DIR/dNNN/ of PER_DIR each.
fill() {
	local dir=$1 n=$2 d left
	shift 2
	for ((d = 0; d * PER_DIR < n; d++)); do
		left=$((n - d * PER_DIR))
		"$@" mkdir -p "$dir/d$d"
		"$@" "$MTOOL" mkfiles "$dir/d$d" $((left < PER_DIR ? left : PER_DIR)) || return 1
	done
}

# Peak fd count (all fds) of PID into FILE until the daemon is gone or
# FILE.stop appears.
sample_fds() {
	local pid=$1 out=$2 peak=0 n
	while kill -0 "$pid" 2>/dev/null && [ ! -e "$out.stop" ]; do
		n=$(ls "/proc/$pid/fd" 2>/dev/null | wc -l)
		[ "$n" -gt "$peak" ] && peak=$n && echo "$peak" >"$out"
		sleep 0.2
	done
}

sums() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 md5sum) | md5sum; }

# measure NAME LOWER MNT N [AS...]: the timed steps on a mounted slowmedia.
measure() {
	local name=$1 lower=$2 mnt=$3 n=$4 pid=$ML_PID t0 t out=$ML_TMP/$1 ok=ok
	shift 4
	local as=("$@")
	mkdir -p "$out" && chmod 777 "$out" && "${as[@]}" mkdir "$out/copy"
	echo 0 >"$out/fds"
	sample_fds "$pid" "$out/fds" &
	local sampler=$!
	local limit
	limit=$(awk '/^Max open files/ {print $4}' "/proc/$pid/limits")
	echo 3 >/proc/sys/vm/drop_caches
	t0=$(now)
	local seen
	seen=$("${as[@]}" find "$mnt" -type f | wc -l)
	t=$(now); local t_find; t_find=$(secs "$t0" "$t"); t0=$t
	"${as[@]}" du -s "$mnt" >/dev/null || ok=fail
	t=$(now); local t_du; t_du=$(secs "$t0" "$t"); t0=$t
	echo 3 >/proc/sys/vm/drop_caches
	t0=$(now)
	"${as[@]}" sh -c 'find "$1" -type f -print0 | xargs -0 stat -c %s' - "$mnt" | wc -l >"$out/stat"
	t=$(now); local t_stat; t_stat=$(secs "$t0" "$t"); t0=$t
	"${as[@]}" cp -a "$mnt/." "$out/copy/" || ok=fail
	t=$(now); local t_cp; t_cp=$(secs "$t0" "$t"); t0=$t
	local sm
	sm=$("${as[@]}" sh -c "cd '$mnt' && find . -type f -print0 | sort -z | xargs -0 md5sum" | md5sum)
	t=$(now); local t_sum; t_sum=$(secs "$t0" "$t")
	local hwm
	hwm=$(awk '/^VmHWM/ {printf "%d MiB", $2 / 1024}' "/proc/$pid/status")
	touch "$out/fds.stop"
	wait "$sampler"
	local peak
	peak=$(cat "$out/fds")
	[ "$seen" = "$n" ] || ok="fail: find saw $seen"
	[ "$(cat "$out/stat")" = "$n" ] || ok="fail: stat of $(cat "$out/stat")"
	[ "$sm" = "$(sums "$lower")" ] || ok="fail: checksums differ"
	[ "$sm" = "$(sums "$out/copy")" ] || ok="fail: the copy differs"
	[ "$peak" -lt $((limit / 2)) ] || ok="fail: $peak fds >= half of $limit"
	RESULTS+=("$(printf '%-10s %7d %7s %7s %7s %7s %7s %6d/%-6d %9s  %s' "$name" "$n" "$t_find" \
		"$t_du" "$t_stat" "$t_cp" "$t_sum" "$peak" "$limit" "$hwm" "$ok")")
	echo "${RESULTS[-1]}"
	rm -rf "$out"
}

mkfs_many() { mkfs.ext2 -N $((FILES + FILES / 10 + 1000)) "$@"; }
ext2_size() { echo "$((FILES / 100 * 6 + 256))M"; } # ~6 KiB a file, inodes included

case_ramfs() {
	local lower=$ML_TMP/ram mnt=$ML_TMP/mnt-ram
	mkdir -p "$lower" "$mnt"
	mount -t ramfs -o mode=755 ramfs "$lower" || { echo "ramfs: cannot mount"; return; }
	ml_on_exit "umount '$lower'"
	fill "$lower" "$FILES" || return
	ml_start "$lower" "$mnt"
	measure ramfs "$lower" "$mnt" "$FILES"
	ml_stop "$mnt"
	umount "$lower"
}

case_ext2_root() {
	local lower=$ML_TMP/e2root mnt=$ML_TMP/mnt-e2root
	ml_make_ext4 "$(ext2_size)" "$lower" mkfs_many
	mkdir -p "$mnt"
	fill "$lower" "$FILES" || return
	ml_start "$lower" "$mnt"
	measure ext2-root "$lower" "$mnt" "$FILES"
	ml_stop "$mnt"
}

# The daemon and every client as a test account (the mount has no
# allow_other); /dev/fuse opened to it by an ACL entry where it is closed.
case_ext2_user() {
	local lower=$ML_TMP/e2user mnt=$ML_TMP/mnt-e2user user=smbench$$ uid daemon=$ML_DAEMON
	command -v useradd >/dev/null && command -v fusermount3 >/dev/null ||
		{ echo "ext2-user: needs useradd and fusermount3"; return; }
	useradd -r -M -N -g nogroup -d / -s /usr/sbin/nologin "$user" || return
	ml_on_exit "userdel '$user'"
	uid=$(id -u "$user")
	local as=(setpriv --reuid="$uid" --regid="$uid" --clear-groups --)
	if ! "${as[@]}" test -r /dev/fuse -a -w /dev/fuse; then
		getfacl -p /dev/fuse >"$ML_TMP/dev-fuse.acl" && setfacl -m "u:$uid:rw" /dev/fuse ||
			{ echo "ext2-user: cannot open /dev/fuse to uid $uid"; return; }
		ml_on_exit "setfacl --restore='$ML_TMP/dev-fuse.acl'"
	fi
	ml_make_ext4 "$(ext2_size)" "$lower" mkfs_many
	rmdir "$lower/lost+found" # root's, unreadable to the user
	chown "$uid:$uid" "$lower"
	mkdir -p "$mnt" && chown "$uid:$uid" "$mnt"
	fill "$lower" "$FILES" "${as[@]}" || return
	ML_DAEMON=$ML_TMP/slowmedia-as-user
	printf '#!/bin/sh\nexec %s env HOME=%s %s "$@"\n' "${as[*]}" "$ML_TMP" "$daemon" >"$ML_DAEMON"
	chmod 755 "$ML_DAEMON"
	ml_start "$lower" "$mnt"
	ML_DAEMON=$daemon
	measure ext2-user "$lower" "$mnt" "$FILES" "${as[@]}"
	ml_stop "$mnt"
}

case_vfat() {
	local n=$((FILES / 10)) img=$ML_TMP/fat.img lower=$ML_TMP/fat mnt=$ML_TMP/mnt-fat loop fpid
	for t in fusefat mcopy mkfs.vfat; do
		command -v $t >/dev/null ||
			{ echo "vfat: skipped, needs $t (packages fusefat, mtools, dosfstools)"; return; }
	done
	fill "$ML_TMP/fatsrc" "$n" || return
	truncate -s $((n / 100 + 64))M "$img" && mkfs.vfat -F 32 "$img" >/dev/null || return
	MTOOLS_SKIP_CHECK=1 mcopy -s -i "$img" "$ML_TMP/fatsrc"/* ::/ || { echo "vfat: mcopy failed"; return; }
	rm -rf "$ML_TMP/fatsrc"
	loop=$(losetup -f --show "$img") || return
	ml_on_exit "losetup -d '$loop'"
	mkdir -p "$lower" "$mnt"
	fusefat -f -o rw+ "$loop" "$lower" </dev/null >/dev/null 2>"$ML_TMP/fusefat.log" &
	fpid=$!
	ml_on_exit "kill $fpid"
	ml_on_exit "umount -l '$lower'"
	for ((i = 0; i < 100; i++)); do ml_is_mounted "$lower" && break; sleep 0.1; done
	ml_start "$lower" "$mnt"
	measure vfat "$lower" "$mnt" "$n"
	ml_stop "$mnt"
	umount "$lower"
	wait "$fpid"
}

echo "slowmedia $(git -C "$HERE" rev-parse --short HEAD 2>/dev/null), $FILES files, fd budget $(ulimit -n) - 1024"
printf '%-10s %7s %7s %7s %7s %7s %7s %13s %9s  %s\n' case files find du stat cp md5sum \
	"fds/limit" VmHWM result
for c in $ONLY; do
	case $c in
	ramfs) case_ramfs ;;
	ext2-user) case_ext2_user ;;
	ext2-root) case_ext2_root ;;
	vfat) case_vfat ;;
	*) echo "unknown case $c" ;;
	esac
done
echo
echo "times in s; fds: the daemon's peak count (all fds) against its RLIMIT_NOFILE"
printf '%s\n' "${RESULTS[@]}"
ml_finish
