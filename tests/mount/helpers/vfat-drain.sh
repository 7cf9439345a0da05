#!/usr/bin/env bash
# fstab-drain.sh on vfat: `umount DIR` returns only when the data is on the
# medium, for both fstab types, with real mount(8)/umount(8) and a private
# fstab (mount -T). There may be no vfat in the kernel: vfat is fusefat's
# (FUSE), on a loop device over slowdev's 2 MB/s profile (mo: write 2 MB/s,
# read 4 MB/s).
#
# fusefat writes through the loop device's page cache and does nothing on
# fsync: what it was given reaches the medium only when it exits, after its
# mount is gone (it writes the FAT and closes the device; the kernel writes
# the device's cached data back at that last close). And it takes writes at
# ~3 MiB/s here: the medium's FAT clusters (2 KiB) are smaller than a page,
# so each page is read from the medium (4 MB/s) before it is written.
#   fuse.slowmedia  over a directory where the test mounted fusefat itself:
#                   umount drains the queue into fusefat (MB / ~3 MiB/s); the
#                   data is on the lower filesystem right after, and on the
#                   medium once the test unmounts fusefat and it exits
#                   (MB / 2 MB/s more).
#   slowmedia       fstype=fuse.fusefat,lower=rw+: mount.slowmedia runs
#                   mount.fuse3 itself with exactly nosuid,nodev,rw+ (through
#                   libmount it would get "rw" first, which fusefat refuses);
#                   umount.slowmedia then unmounts the lower and waits for
#                   fusefat to exit, so right after umount the image holds
#                   every byte (MB / ~3 MiB/s + MB / 2 MB/s in all).
# Then the same type on an image file (no loop device: fusefat opens it):
# umount, umount -l, the daemon refusing an option after the lower mount,
# and fusefat refusing a mount without rw+ (nothing left behind).
# Images are read with mtools (no mount involved), checked with fsck.fat.
# Measured here with MB=8: fuse.slowmedia's umount 2.5-3.1 s, fusefat gone
# 4.4 s after its own unmount; slowmedia's umount 7.1-7.7 s; ~22 s in all.
# (fusefat corrupts a file written through two open handles: the daemon
# writes a FUSE lower's files through one, see sched/chunkio.c.)
#   vfat-drain.sh SLOWMEDIA HELPERS_DIR SLOWDEV
SLOWMEDIA=$1 HELPERS=$2 SLOWDEV=${3:-}
source "$(dirname "$0")/hlib.sh"

h_setup fusefat mkfs.vfat mcopy fsck.fat mount.fuse3
[ -x "$SLOWDEV" ] || ml_skip "needs the slowdev emulator"
export SLOWDEV_BIN=$SLOWDEV
# shellcheck source=../../slowdev/slowdev-media.sh
source "$(dirname "$0")/../../slowdev/slowdev-media.sh"
medium=hvfat-$$
slowdev_up "$medium" 64 mo vfat "$ML_TMP/sd-mnt" || ml_skip "slowdev medium did not come up"
ml_on_exit "slowdev_down '$medium'"
ml_on_exit h_teardown # first: our mounts and fusefat off the loop device
st=$(slowdev_dir "$medium")
# The helpers and the test mount it themselves.
umount "$ML_TMP/sd-mnt"
h_wait_exited "$(cat "$st/fusefat.pid")" 20 || { echo "slowdev's fusefat did not exit"; exit 1; }
dev=$(slowdev_loop "$medium")
image=$st/image
mnt=$ML_TMP/media
lower=$ML_TMP/lower
mkdir -m 755 "$mnt" "$lower"
MB=8
h_put "$ML_TMP/ref" $MB
common="queue=32M,noauto,user,x-systemd.automount,x-systemd.mount-timeout=120"
fstab=$ML_TMP/fstab

# timed_umount DESC MIN MAX: umount $mnt, which must take MIN..MAX s.
timed_umount() {
	local desc=$1 t0 secs rc=0
	t0=$EPOCHREALTIME
	umount "$mnt" 2>"$ML_TMP/umount.err" || rc=$?
	secs=$(ml_since "$t0")
	ml_log "$desc: umount took $secs s (exit $rc)"
	sed 's/^/  | /' "$ML_TMP/umount.err"
	ml_check "$desc: umount succeeds" test "$rc" = 0
	ml_check "$desc: it took $2..$3 s ($secs s)" \
		awk -v s="$secs" -v a="$2" -v b="$3" 'BEGIN { exit !(s >= a && s <= b) }'
	ml_check "$desc: with progress lines" grep -q "draining" "$ML_TMP/umount.err"
	ml_check "$desc: and no warnings" ml_not grep -q "warning" "$ML_TMP/umount.err"
	ml_check "$desc: no longer mounted" ml_not ml_is_mounted "$mnt"
}

# write DESC NAME: $MB MiB into the queue.
write() {
	local t0 secs
	t0=$EPOCHREALTIME
	ml_check "$1: write $MB MiB" cp "$ML_TMP/ref" "$mnt/$2"
	secs=$(ml_since "$t0")
	ml_log "$1: the copy took $secs s"
	ml_check "$1: the copy went into the queue (took $secs s)" \
		awk -v s="$secs" 'BEGIN { exit !(s < 3) }'
}

# fuse.slowmedia: over the test's own fusefat mount of the medium.
fusefat -f -o rw+ "$dev" "$lower" </dev/null >/dev/null 2>"$ML_TMP/fusefat.log" &
fatpid=$!
ml_on_exit "umount -l '$lower'"
h_retry 10 ml_is_mounted "$lower" fuse.fusefat || { cat "$ML_TMP/fusefat.log"; exit 1; }
echo "$lower $mnt fuse.slowmedia $common,$H_OPTS 0 0" >"$fstab"
ml_check "fuse.slowmedia: mount -T" mount -T "$fstab" "$mnt"
ml_check "fuse.slowmedia: mounted" ml_is_mounted "$mnt" fuse.slowmedia
write fuse.slowmedia f1
# The drain: MB into fusefat at ~3 MiB/s.
timed_umount fuse.slowmedia 1.5 9
ml_check "fuse.slowmedia: every byte is on the lower right after" cmp "$lower/f1" "$ML_TMP/ref"
ml_check "fuse.slowmedia: the lower is still mounted (it is the test's)" \
	ml_is_mounted "$lower" fuse.fusefat
t0=$EPOCHREALTIME
umount "$lower"
ml_check "fuse.slowmedia: fusefat exits after its unmount" h_wait_exited "$fatpid" 60
ml_log "fuse.slowmedia: fusefat was gone $(ml_since "$t0") s after its unmount (it wrote the device out)"
ml_check "fuse.slowmedia: then every byte is on the medium" h_fat_has "$image" /f1 "$ML_TMP/ref"
ml_check "fuse.slowmedia: the medium is clean (fsck)" fsck.fat -n "$image"

# slowmedia: mount.slowmedia mounts the device through fusefat itself.
echo "$dev $mnt slowmedia fstype=fuse.fusefat,lower=rw+,$common 0 0" >"$fstab"
rc=0
mount -v -T "$fstab" "$mnt" >"$ML_TMP/mount.err" 2>&1 || rc=$?
ml_check "slowmedia: mount -T (exit $rc)" test "$rc" = 0
[ "$rc" = 0 ] || sed 's/^/  | /' "$ML_TMP/mount.err"
ml_check "slowmedia: a fuse.slowmedia mount from $dev" \
	h_mounted_from "$mnt" fuse.slowmedia "$dev"
ml_check "slowmedia: the medium is mounted by fusefat below /run/slowmedia/lower" \
	test "$(h_mounts | awk '$1 ~ "^/run/slowmedia/lower/" && $2 == "fuse.fusefat"' | wc -l)" = 1
ml_check "slowmedia: mount.fuse3 was given nosuid,nodev,rw+ and nothing else" \
	grep -qF "(fuse.fusefat, nosuid,nodev,rw+) on /run/slowmedia/lower/" "$ML_TMP/mount.err"
ml_check "slowmedia: one fusefat serves it" test "$(h_fuse_lower_pids | wc -l)" = 1
fatpid=$(h_fuse_lower_pids)
ml_check "slowmedia: utab says helper=slowmedia, where the lower is, and no loop" \
	grep -q "TARGET=$mnt .*OPTS=helper=slowmedia,x-slowmedia.lower=/run/slowmedia/lower/[^,]*\$" \
	/run/mount/utab
write slowmedia f2
# The drain (MB / ~3 MiB/s), then fusefat writes the device out (MB / 2 MB/s).
timed_umount slowmedia 5 18
ml_check "slowmedia: fusefat has exited" test -z "$(h_fuse_lower_pids)"
ml_check "slowmedia: the lower mount is gone" test -z "$(h_lower_mounts)"
ml_check "slowmedia: its directory is gone" test -z "$(ls -A /run/slowmedia/lower)"
ml_check "slowmedia: the utab entry is gone" ml_not grep -q "TARGET=$mnt " /run/mount/utab
ml_check "slowmedia: every byte is on the medium right after" \
	h_fat_has "$image" /f2 "$ML_TMP/ref"
ml_check "slowmedia: the first file too" h_fat_has "$image" /f1 "$ML_TMP/ref"
ml_check "slowmedia: the medium is clean (fsck)" fsck.fat -n "$image"
ml_check "slowmedia: the loop device is still slowdev's (not detached)" \
	test "$(losetup -n -O BACK-FILE "$dev")" = "$st/dev/disk"

# The same type on an image file: fusefat opens it, no loop device.
img=$ML_TMP/file.img
truncate -s 32M "$img"
mkfs.vfat "$img" >/dev/null || { echo "mkfs.vfat failed"; exit 1; }
head -c 1M /dev/urandom >"$ML_TMP/ref1"
ml_check "image: mount -t slowmedia IMG DIR -o fstype=fuse.fusefat,lower=rw+" \
	mount -t slowmedia "$img" "$mnt" -o "fstype=fuse.fusefat,lower=rw+,$H_OPTS"
ml_check "image: no loop device on it" test -z "$(h_loop_of "$img")"
ml_check "image: fusefat has it open" \
	test "$(for p in $(h_fuse_lower_pids); do find "/proc/$p/fd" -lname "$img"; done | wc -l)" = 1
ml_check "image: write" cp "$ML_TMP/ref1" "$mnt/g"
rc=0
umount -v "$mnt" >"$ML_TMP/umount.err" 2>&1 || rc=$?
ml_check "image: umount (exit $rc)" test "$rc" = 0
[ "$rc" = 0 ] || sed 's/^/  | /' "$ML_TMP/umount.err"
ml_check "image: fusefat has exited" test -z "$(h_fuse_lower_pids)"
ml_check "image: nothing left mounted" test -z "$(h_lower_mounts)$(h_slowmedia_mounts)"
ml_check "image: every byte is in the image right after" h_fat_has "$img" /g "$ML_TMP/ref1"
h_fat_has "$img" /g "$ML_TMP/ref1" || sed 's/^/  | /' "$ML_TMP/umount.err"
ml_check "image: the image is clean (fsck)" fsck.fat -n "$img"

# umount -l: detached at once; the daemon drains, exits, and fusefat after it
# (when the lazily detached lower goes).
ml_check "lazy: mount" mount -t slowmedia "$img" "$mnt" -o "fstype=fuse.fusefat,lower=rw+,$H_OPTS"
ml_check "lazy: write" cp "$ML_TMP/ref1" "$mnt/h"
ml_check "lazy: umount -l" umount -l "$mnt"
ml_check "lazy: detached" ml_not ml_is_mounted "$mnt"
ml_check "lazy: fusefat exits after the daemon" h_retry 30 test -z "$(h_fuse_lower_pids)"
ml_check "lazy: then every byte is in the image" h_retry 5 h_fat_has "$img" /h "$ML_TMP/ref1"
ml_check "lazy: the utab entry is gone" ml_not grep -qs "TARGET=$mnt " /run/mount/utab

# The daemon refuses an option after the lower is mounted: fusefat is
# unmounted again, and has exited when mount returns.
rc=0
mount -t slowmedia "$img" "$mnt" -o "fstype=fuse.fusefat,lower=rw+,queue=nonsense,$H_OPTS" \
	>"$ML_TMP/out" 2>&1 || rc=$?
sed 's/^/  | /' "$ML_TMP/out"
ml_check "daemon refuses: mount fails with 32 (got $rc)" test "$rc" = 32
ml_check "daemon refuses: fusefat has exited" test -z "$(h_fuse_lower_pids)"
ml_check "daemon refuses: nothing left behind" test -z "$(h_slowmedia_mounts)$(h_lower_mounts)"
ml_check "daemon refuses: the image is clean (fsck)" fsck.fat -n "$img"

# fusefat refuses a read-write mount without rw+: the mount fails, with its
# message, and nothing is left behind.
rc=0
mount -t slowmedia "$img" "$mnt" -o "fstype=fuse.fusefat,$H_OPTS" >"$ML_TMP/out" 2>&1 || rc=$?
sed 's/^/  | /' "$ML_TMP/out"
ml_check "no rw+: mount fails with 32 (got $rc)" test "$rc" = 32
ml_check "no rw+: says what fusefat wants" grep -q "only with lower=rw+" "$ML_TMP/out"
ml_check "no rw+: nothing left behind" test -z "$(h_slowmedia_mounts)$(h_lower_mounts)$(h_fuse_lower_pids)"
ml_check "no rw+: no directory below /run/slowmedia/lower" test -z "$(ls -A /run/slowmedia/lower)"
ml_check "no rw+: no utab entry" ml_not grep -qs "TARGET=$mnt " /run/mount/utab

ml_check "no slowmedia mount left" test -z "$(h_slowmedia_mounts)"
ml_check "the daemon reported no errors" ml_not grep -qi error "$SLOWMEDIA_LOG_FILE"
ml_finish
