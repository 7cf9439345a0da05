#!/usr/bin/env bash
# fstype=: how exclusive the private mount of a block device is (README,
# "fstype= and other mounts of the device"). The kernel lets a second mount of
# the same device and filesystem type share the existing superblock, so that
# cannot be refused; what must hold:
#  - slowmedia refuses a device that is already mounted (here, or by another
#    slowmedia), instead of sharing it unnoticed;
#  - while slowmedia holds it, an O_EXCL open and a mount with
#    another filesystem type fail with EBUSY;
#  - the private mount adds no rights: the overlay is nosuid,nodev;
#  - with ro, the private mount of the device is read-only too.
#   test-fstype-excl.sh SLOWMEDIA
ML_DAEMON=$1
source "${MOUNT_LIB:-$(dirname "$0")/../lib/mount-lib.sh}"

ml_require_root_fuse
command -v python3 >/dev/null || ml_skip "needs python3 (for an O_EXCL open)"
ml_init
img=$ML_TMP/img
mnt=$ML_TMP/mnt
mnt2=$ML_TMP/mnt2
other=$ML_TMP/other
mkdir -m 755 "$mnt" "$mnt2" "$other"
truncate -s 64M "$img"
mkfs.ext4 -q -F "$img" >/dev/null || { echo "mkfs.ext4 failed"; exit 1; }
dev=$(losetup -f --show "$img") || ml_skip "no free loop device"
ml_on_exit "losetup -d '$dev'"
ml_on_exit "ml_is_mounted '$other' && umount -l '$other'"

excl_open() { # DEV: open it O_EXCL; says the errno name on failure
	python3 -c 'import os, sys, errno
try:
    os.close(os.open(sys.argv[1], os.O_RDONLY | os.O_EXCL))
except OSError as e:
    sys.exit(errno.errorcode[e.errno])' "$1"
}

# refused MNT DESC: slowmedia -o fstype=ext4 on $dev must exit non-zero,
# say why, and mount nothing.
refused() {
	local mnt=$1 desc=$2 log=$ML_TMP/refused.$RANDOM.log pid rc=0
	"$ML_DAEMON" "$dev" "$mnt" -f -o fstype=ext4 >"$log" 2>&1 &
	pid=$!
	ML_PIDS[$mnt]=$pid
	ML_LOGS[$mnt]=$log
	ml_on_exit "ml_kill_daemon '$mnt'"
	ml_on_exit "ml_is_mounted '$mnt' fuse.slowmedia && umount -l '$mnt'"
	if ! ml_wait_exit "$pid" 10 || ml_is_mounted "$mnt"; then
		ml_fail "$desc: slowmedia mounted it"
		ml_is_mounted "$mnt" && umount "$mnt"
		ml_kill_daemon "$mnt"
		return
	fi
	wait "$pid" || rc=$?
	unset "ML_PIDS[$mnt]"
	ml_check "$desc: slowmedia exits non-zero ($rc)" test "$rc" != 0
	ml_check "$desc: and says the device is in use" grep -q "in use" "$log"
	ml_check "$desc: nothing mounted" ml_not ml_is_mounted "$mnt"
}

mount "$dev" "$other" || { echo "cannot mount $dev"; exit 1; }
refused "$mnt" "device mounted elsewhere"
umount "$other"

ml_start "$dev" "$mnt" -o fstype=ext4
echo data >"$mnt/file"
ml_check "the overlay of the private mount is nosuid,nodev" \
	awk -v m="$mnt" '$5 == m && $6 ~ /nosuid/ && $6 ~ /nodev/ {f = 1} END {exit !f}' \
	/proc/self/mountinfo
ml_check "while held: an O_EXCL open fails with EBUSY" \
	test "$(excl_open "$dev" 2>&1)" = EBUSY
ml_check "while held: a mount with another type (ext2) fails" \
	ml_not mount -t ext2 "$dev" "$other"
refused "$mnt2" "device held by another slowmedia"
ml_check "the first mount still works" test "$(cat "$mnt/file")" = data
ml_stop "$mnt"

ml_check "after the unmount the device is free (O_EXCL open)" excl_open "$dev"

ml_start "$dev" "$mnt" -o fstype=ext4,ro,noexec
opts=/proc/fs/ext4/${dev#/dev/}/options
ml_check "with ro the device's private mount is read-only ($(head -1 "$opts" 2>&1))" \
	test "$(head -1 "$opts")" = ro
ml_check "and the file reads through the overlay" test "$(cat "$mnt/file")" = data
ml_stop "$mnt"
ml_check "the device is free again" excl_open "$dev"
ml_check "and its data is on it" mount -o ro "$dev" "$other"
ml_check "... file intact" test "$(cat "$other/file" 2>&1)" = data
umount "$other"
ml_finish
