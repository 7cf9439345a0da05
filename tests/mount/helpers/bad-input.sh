#!/usr/bin/env bash
# Bad input to mount.slowmedia (through mount(8)) and umount.slowmedia: one
# clear line naming the problem, mount(8)'s exit codes (1: bad invocation or
# a missing option, 32: the mount failed), and nothing left behind: no
# slowmedia or lower mount, no loop device on the image, no utab entry, no
# directory below /run/slowmedia/lower. A failure after the private lower
# mount (the daemon refuses an option) undoes it.
#   bad-input.sh SLOWMEDIA HELPERS_DIR
SLOWMEDIA=$1 HELPERS=$2
source "$(dirname "$0")/hlib.sh"

h_setup python3
img=$(h_image 64) || exit 1
mnt=$ML_TMP/media
mkdir -m 755 "$mnt" "$ML_TMP/dir" "$ML_TMP/other"
mkfifo "$ML_TMP/fifo"

own_loop="" # a loop device the test attached itself
nothing_left() {
	test -z "$(h_slowmedia_mounts)" && test -z "$(h_lower_mounts)" &&
		test -z "$(h_loop_of "$img" | grep -vxF "${own_loop:-none}")" &&
		! grep -qs "TARGET=$mnt " /run/mount/utab &&
		test -z "$(ls -A /run/slowmedia/lower 2>/dev/null)"
}

# refused DESC RC PATTERN CMD...: CMD exits RC, says PATTERN (one line of
# ours), and leaves nothing behind.
refused() {
	local desc=$1 want=$2 pattern=$3 rc=0
	shift 3
	"$@" >"$ML_TMP/out" 2>&1 || rc=$?
	sed 's/^/  | /' "$ML_TMP/out"
	ml_check "$desc: exit $want (got $rc)" test "$rc" = "$want"
	ml_check "$desc: says '$pattern'" grep -q -- "$pattern" "$ML_TMP/out"
	ml_check "$desc: nothing left behind" nothing_left
}

M="mount -t slowmedia"
refused "no fstype= for an image" 1 "is an image file: say which filesystem it holds with -o fstype=TYPE" \
	$M "$img" "$mnt" -o queue=16M
refused "unknown fstype" 32 "unknown filesystem type 'nosuchfs'" \
	$M "$img" "$mnt" -o fstype=nosuchfs
refused "missing mount point" 32 "mount point $ML_TMP/nowhere does not exist" \
	$M "$img" "$ML_TMP/nowhere" -o fstype=ext2
refused "missing device" 32 "/dev/nosuchdisk: no such device or image file" \
	$M /dev/nosuchdisk "$mnt" -o fstype=ext2
refused "a fifo as source" 32 "is not a block device, an image file or a directory" \
	$M "$ML_TMP/fifo" "$mnt" -o fstype=ext2
refused "fstype= with a directory" 1 "is a directory, not a device or image file" \
	$M "$ML_TMP/dir" "$mnt" -o fstype=ext2
refused "fstype=slowmedia" 1 "cannot be slowmedia itself" \
	$M "$img" "$mnt" -o fstype=slowmedia
refused "a bad lower= option" 32 "cannot mount $img (fstype=ext2)" \
	$M "$img" "$mnt" -o fstype=ext2,lower=nosuchoption
refused "a bad daemon option, after the lower mount" 32 "prio=99" \
	$M "$img" "$mnt" -o fstype=ext2,prio=99
refused "no arguments" 1 "usage: mount.slowmedia" /sbin/mount.slowmedia

dev=$(losetup -f --show "$img") || ml_skip "no free loop device"
ml_on_exit "losetup -d '$dev'"
own_loop=$dev
refused "a block device without fstype=" 1 "is a block device: say which filesystem" \
	$M "$dev" "$mnt"
mount "$dev" "$ML_TMP/other" || { echo "cannot mount $dev"; exit 1; }
refused "a device mounted elsewhere" 32 "$dev is in use" $M "$dev" "$mnt" -o fstype=ext2
refused "an image attached and mounted elsewhere" 32 "$img is in use (on $dev" $M "$img" "$mnt" -o fstype=ext2
umount "$ML_TMP/other"
losetup -d "$dev"
own_loop=""

# the umount helper
refused "umount.slowmedia of a directory not mounted" 32 "not mounted" \
	/sbin/umount.slowmedia "$ML_TMP/dir"
mount -t tmpfs bad-input-tmpfs "$ML_TMP/other"
ml_on_exit "umount -l '$ML_TMP/other'"
refused "umount.slowmedia of a tmpfs" 32 "is a tmpfs mount, not a slowmedia one" \
	/sbin/umount.slowmedia "$ML_TMP/other"
ml_check "the tmpfs is still mounted" ml_is_mounted "$ML_TMP/other" tmpfs
refused "umount.slowmedia without arguments" 1 "usage: umount.slowmedia" /sbin/umount.slowmedia
ml_finish
