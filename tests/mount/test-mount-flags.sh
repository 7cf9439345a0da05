#!/usr/bin/env bash
# The overlay never grants what the lower's mount denies. A lower ext4 holds a
# setuid-root copy of id(1) and a world-writable device node of its own loop
# device; through slowmedia with allow_other, user nobody must not get euid 0
# from the one nor open the other, whatever options are given, and also when
# mounted through `mount -t fuse.slowmedia` (mount.fuse3 adds dev,suid to every
# mount it runs). The lower's noexec carries over too. Over a lower that allows
# suid and dev, the default is still nosuid,nodev; allow_suid,allow_dev grant
# them, with a log line.
#
# mount.fuse3 finds `slowmedia` in the default PATH of /bin/sh only, so (as in
# test-mount-helper.sh) the test runs in a private mount namespace where a
# temporary bin dir holding a link to the daemon is bound over /usr/local/sbin.
#   test-mount-flags.sh SLOWMEDIA
ML_DAEMON=$1
NOBODY=65534
source "${MOUNT_LIB:-$(dirname "$0")/../lib/mount-lib.sh}"

ml_require_root_fuse
command -v setpriv >/dev/null || ml_skip "needs setpriv"
[ -x /sbin/mount.fuse3 ] || [ -x /usr/sbin/mount.fuse3 ] || ml_skip "needs mount.fuse3"
[ -d /usr/local/sbin ] || ml_skip "needs /usr/local/sbin to bind over"
if [ -z "${ML_IN_NAMESPACE:-}" ]; then
	command -v unshare >/dev/null || ml_skip "needs unshare"
	ML_IN_NAMESPACE=1 exec unshare --mount --propagation private bash "$0" "$@"
fi
ml_init
fs=$ML_TMP/fs
mnt=$ML_TMP/mnt
bin=$ML_TMP/bin
ml_make_ext4 64M "$fs"
mkdir -m 755 "$mnt" "$bin"
ln -s "$(readlink -f "$ML_DAEMON")" "$bin/slowmedia"
mount --bind "$bin" /usr/local/sbin || { echo "cannot bind over /usr/local/sbin"; exit 1; }
ml_on_exit "umount -l /usr/local/sbin"

cp "$(command -v id)" "$fs/id-suid"
chown 0:0 "$fs/id-suid"
chmod 4755 "$fs/id-suid"
loopdev=$(findmnt -n -o SOURCE "$fs")
mknod -m 666 "$fs/blk" b $(stat -L -c '%Hr %Lr' "$loopdev")

nobody() { setpriv --reuid=$NOBODY --regid=$NOBODY --clear-groups -- "$@"; }
# fails_with MSG CMD...: CMD must fail and say MSG.
fails_with() {
	local msg=$1 out
	shift
	if out=$("$@" 2>&1); then
		echo "  (succeeded: $out)"
		return 1
	fi
	grep -q "$msg" <<<"$out" || { echo "  (said: $out)"; return 1; }
}
# has_flags MNT FLAG...: the mount's own flags in mountinfo (field 6) hold each FLAG.
has_flags() {
	local mnt=$1 have f
	shift
	have=,$(awk -v m="$mnt" '$5 == m {print $6}' /proc/self/mountinfo),
	for f in "$@"; do
		[[ $have == *,$f,* ]] || { echo "  ($f not in $have)"; return 1; }
	done
}
lower_flags() { # FLAGS: remount the lower with these per-mount flags
	mount -o "remount,$1" "$fs" || { echo "cannot remount the lower $1"; exit 1; }
}

read_blk() { head -c 1 "$mnt/blk" >/dev/null; }
# check_dev_denied DESC: the mount at $mnt is nosuid,nodev and opens no device.
check_dev_denied() {
	local desc=$1
	ml_check "$desc: mountinfo shows nosuid,nodev" has_flags "$mnt" nosuid nodev
	ml_check "$desc: nobody cannot open the device node (EACCES)" \
		fails_with "Permission denied" nobody head -c 1 "$mnt/blk"
	ml_check "$desc: root cannot open it either (nodev: EACCES)" \
		fails_with "Permission denied" read_blk
}
# check_suid_dev_denied DESC: also, the setuid-root id gives nobody no euid 0.
check_suid_dev_denied() {
	check_dev_denied "$1"
	ml_check "$1: the setuid-root id gives nobody no euid 0" \
		test "$(nobody "$mnt/id-suid" -u 2>&1)" = $NOBODY
}

# mount.fuse3 daemonizes the daemon: wait for it to go after the unmount.
mount_t_stop() {
	local pid i
	pid=$(pgrep -x -f "slowmedia $fs $mnt .*" | head -n 1)
	ml_check "mount -t: umount" umount "$mnt"
	for ((i = 0; i < 100; i++)); do
		[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || break
		sleep 0.05
	done
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		ml_fail "mount -t: daemon $pid still running 5 s after umount (killed)"
		kill -9 "$pid"
	fi
}
ml_on_exit "ml_is_mounted '$mnt' fuse.slowmedia && umount -l '$mnt'"

# 1. Lower nosuid,nodev,noexec: nothing of it can be switched back on.
lower_flags nosuid,nodev,noexec
for opts in allow_other allow_other,suid,dev,exec allow_other,allow_suid,allow_dev,suid,dev,exec; do
	ml_try_start "$fs" "$mnt" -o "$opts" || { ml_fail "no mount with -o $opts"; continue; }
	ml_check "lower noexec, -o $opts: mountinfo shows noexec" has_flags "$mnt" nosuid nodev noexec
	ml_check "lower noexec, -o $opts: nobody cannot run a program (EACCES)" \
		fails_with "Permission denied" nobody "$mnt/id-suid" -u
	check_dev_denied "lower noexec, -o $opts"
	ml_stop "$mnt"
done
ml_check "allow_suid over a nosuid lower is refused with a log line" \
	grep -q "allow_suid refused" "${ML_LOGS[$mnt]}"
ml_check "allow_dev over a nodev lower is refused with a log line" \
	grep -q "allow_dev refused" "${ML_LOGS[$mnt]}"

ml_check "mount -t fuse.slowmedia -o allow_other (lower noexec)" \
	mount -t fuse.slowmedia "$fs" "$mnt" -o allow_other
ml_check "mount -t, lower noexec: mountinfo shows nosuid,nodev,noexec" \
	has_flags "$mnt" nosuid nodev noexec
mount_t_stop

# 2. Lower nosuid,nodev but exec: the setuid bit itself must mean nothing.
lower_flags nosuid,nodev,exec
ml_start "$fs" "$mnt" -o allow_other,suid,dev
check_suid_dev_denied "lower nosuid,nodev, -o suid,dev"
ml_stop "$mnt"
ml_check "mount -t fuse.slowmedia -o allow_other,suid,dev (lower nosuid,nodev)" \
	mount -t fuse.slowmedia "$fs" "$mnt" -o allow_other,suid,dev
check_suid_dev_denied "mount -t, lower nosuid,nodev"
mount_t_stop

# 3. Lower suid,dev: media default nosuid,nodev, also where mount.fuse3 adds
# suid,dev; allow_suid,allow_dev grant them and say so.
lower_flags suid,dev,exec
ml_start "$fs" "$mnt" -o allow_other,suid,dev
check_suid_dev_denied "lower suid,dev, -o suid,dev"
ml_stop "$mnt"
ml_check "mount -t fuse.slowmedia -o allow_other (lower suid,dev)" \
	mount -t fuse.slowmedia "$fs" "$mnt" -o allow_other
check_suid_dev_denied "mount -t, lower suid,dev"
mount_t_stop

ml_try_start "$fs" "$mnt" -o allow_other,allow_suid,allow_dev ||
	{ ml_fail "no mount with allow_suid,allow_dev"; ml_finish; }
ml_check "allow_suid,allow_dev over a suid,dev lower: mountinfo has no nosuid" \
	ml_not has_flags "$mnt" nosuid
ml_check "... and no nodev" ml_not has_flags "$mnt" nodev
ml_check "... the setuid-root id runs with euid 0" \
	test "$(nobody "$mnt/id-suid" -u 2>&1)" = 0
ml_check "... root reads the device node" read_blk
ml_stop "$mnt"
ml_check "... and the daemon said so (allow_suid)" \
	grep -q "allow_suid: the medium's setuid" "${ML_LOGS[$mnt]}"
ml_check "... and the daemon said so (allow_dev)" \
	grep -q "allow_dev: the medium's device nodes" "${ML_LOGS[$mnt]}"
ml_finish
