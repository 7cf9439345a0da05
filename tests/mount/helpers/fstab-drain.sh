#!/usr/bin/env bash
# `umount DIR` returns only when the data is on the medium, for both fstab
# types, with real mount(8)/umount(8) and a private fstab (mount -T):
#   slowmedia       the helper mounts the ext2 privately and records utab;
#   fuse.slowmedia  over a directory the test mounted (mount.fuse3).
# The medium is slowdev's 2 MB/s profile (mo): 20 MiB written with
# queue=32M go into the queue at once, then umount drains them (~10 s, with
# progress lines) and right after it returns the image holds every byte
# (read with debugfs from the image file, no mount involved). Lines carry
# noauto,user,x-systemd.automount,x-systemd.mount-timeout= as the examples.
# The slowmedia line leaves the arbiter at its default (the daemon may start
# one), so the check that nothing holds the lower after umount covers it.
#   fstab-drain.sh SLOWMEDIA HELPERS_DIR SLOWDEV
SLOWMEDIA=$1 HELPERS=$2 SLOWDEV=${3:-}
source "$(dirname "$0")/hlib.sh"

h_setup
[ -x "$SLOWDEV" ] || ml_skip "needs the slowdev emulator"
export SLOWDEV_BIN=$SLOWDEV
# shellcheck source=../../slowdev/slowdev-media.sh
source "$(dirname "$0")/../../slowdev/slowdev-media.sh"
medium=hfstab-$$
slowdev_up "$medium" 96 mo ext2 "$ML_TMP/sd-mnt" || ml_skip "slowdev medium did not come up"
ml_on_exit "slowdev_down '$medium'"
umount "$ML_TMP/sd-mnt" # the helpers mount it themselves
dev=$(slowdev_loop "$medium")
image=$(slowdev_dir "$medium")/image
mnt=$ML_TMP/media
lower=$ML_TMP/lower
mkdir -m 755 "$mnt" "$lower"
MB=20
h_put "$ML_TMP/ref" $MB
common="queue=32M,noauto,user,x-systemd.automount,x-systemd.mount-timeout=120"
fstab=$ML_TMP/fstab
{
	echo "# a private fstab for mount -T"
	echo "$dev $mnt slowmedia fstype=ext2,$common 0 0"
} >"$fstab"

# write_and_umount DESC NAME: 20 MiB in, then a timed umount.
write_and_umount() {
	local desc=$1 name=$2 t0 secs rc=0
	t0=$EPOCHREALTIME
	ml_check "$desc: write $MB MiB" cp "$ML_TMP/ref" "$mnt/$name"
	secs=$(ml_since "$t0")
	ml_log "$desc: the copy took $secs s"
	ml_check "$desc: the copy went into the queue (took $secs s)" \
		awk -v s="$secs" 'BEGIN { exit !(s < 5) }'
	t0=$EPOCHREALTIME
	umount "$mnt" 2>"$ML_TMP/umount.err" || rc=$?
	secs=$(ml_since "$t0")
	ml_log "$desc: umount took $secs s (exit $rc)"
	sed 's/^/  | /' "$ML_TMP/umount.err"
	ml_check "$desc: umount succeeds" test "$rc" = 0
	ml_check "$desc: it took about 10 s (the drain: $secs s)" \
		awk -v s="$secs" 'BEGIN { exit !(s >= 7 && s <= 25) }'
	ml_check "$desc: with progress lines" grep -q "draining" "$ML_TMP/umount.err"
	# A warning here: something else held the lower mount after the daemon
	# exited (a process it started that inherited the lower fd, say).
	ml_check "$desc: and no warnings" ml_not grep -q "warning" "$ML_TMP/umount.err"
	ml_check "$desc: no longer mounted" ml_not ml_is_mounted "$mnt"
}

# slowmedia: mount.slowmedia does the lower mount and the utab entry.
ml_check "slowmedia: mount -T" mount -T "$fstab" "$mnt"
ml_check "slowmedia: a fuse.slowmedia mount from $dev" \
	h_mounted_from "$mnt" fuse.slowmedia "$dev"
ml_check "slowmedia: the medium is mounted below /run/slowmedia/lower" \
	test "$(h_lower_mounts | wc -l)" = 1
ml_check "slowmedia: utab says helper=slowmedia and where the lower is" \
	grep -q "TARGET=$mnt .*OPTS=helper=slowmedia,x-slowmedia.lower=/run/slowmedia/lower/" \
	/run/mount/utab
write_and_umount slowmedia f1
ml_check "slowmedia: the lower mount is gone" test -z "$(h_lower_mounts)"
ml_check "slowmedia: the utab entry is gone" ml_not grep -q "TARGET=$mnt " /run/mount/utab
ml_check "slowmedia: every byte is on the medium right after" \
	h_image_has "$image" /f1 "$ML_TMP/ref"
ml_check "slowmedia: the medium is clean (fsck)" e2fsck -fn "$image"

# fuse.slowmedia: over the test's own mount of the medium.
mount -t ext2 "$dev" "$lower" || { echo "cannot mount $dev"; exit 1; }
ml_on_exit "umount -l '$lower'"
chmod 755 "$lower"
echo "$lower $mnt fuse.slowmedia $common,$H_OPTS 0 0" >"$fstab"
ml_check "fuse.slowmedia: mount -T" mount -T "$fstab" "$mnt"
ml_check "fuse.slowmedia: mounted" ml_is_mounted "$mnt" fuse.slowmedia
write_and_umount fuse.slowmedia f2
ml_check "fuse.slowmedia: every byte is on the medium right after" \
	h_image_has "$image" /f2 "$ML_TMP/ref"
ml_check "fuse.slowmedia: the lower is still mounted (it is the test's)" \
	ml_is_mounted "$lower" ext2
umount "$lower"
ml_check "no slowmedia mount left" test -z "$(h_slowmedia_mounts)"
ml_check "the daemon reported no errors" ml_not grep -qi error "$SLOWMEDIA_LOG_FILE"
ml_finish
