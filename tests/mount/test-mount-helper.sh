#!/usr/bin/env bash
# mount(8) integration: `mount -t fuse.slowmedia SRC DIR -o opts`, and an fstab
# line in a private file used with `mount -T FILE DIR` (never /etc/fstab).
#
# mount.fuse3 runs `slowmedia` through /bin/sh, but mount(8) drops PATH from
# the helper's environment, so the shell searches its default PATH only. So
# the test runs in a private mount namespace where a temporary bin dir holding
# a link to the daemon is bound over /usr/local/sbin (empty on these machines,
# and first in that default PATH); nothing is installed, and nothing outside
# the namespace sees the bind. The dir is put first in PATH as well.
#   test-mount-helper.sh SLOWMEDIA
ML_DAEMON=$1
source "${MOUNT_LIB:-$(dirname "$0")/../lib/mount-lib.sh}"

ml_require_root_fuse
[ -x /sbin/mount.fuse3 ] || [ -x /usr/sbin/mount.fuse3 ] || ml_skip "needs mount.fuse3"
[ -d /usr/local/sbin ] || ml_skip "needs /usr/local/sbin to bind over"
if [ -z "${ML_IN_NAMESPACE:-}" ]; then
	command -v unshare >/dev/null || ml_skip "needs unshare"
	ML_IN_NAMESPACE=1 exec unshare --mount --propagation private bash "$0" "$@"
fi
ml_init
src=$ML_TMP/src
mnt=$ML_TMP/mnt
bin=$ML_TMP/bin
mkdir -m 755 "$src" "$mnt" "$bin"
ln -s "$(readlink -f "$ML_DAEMON")" "$bin/slowmedia"
export PATH="$bin:$PATH"
mount --bind "$bin" /usr/local/sbin || { echo "cannot bind over /usr/local/sbin"; exit 1; }
ml_on_exit "umount -l /usr/local/sbin"
printf 'lower data' >"$src/existing"
ml_on_exit "ml_is_mounted '$mnt' && umount -l '$mnt'"

# The daemon forks away from mount.fuse3: find it by its mountpoint argument.
daemon_pid() {
	local p args
	for p in /proc/[0-9]*; do
		args=$(tr '\0' ' ' 2>/dev/null <"$p/cmdline") || continue
		case "$args" in
		"slowmedia $src $mnt "* | *"/slowmedia $src $mnt "*)
			echo "${p#/proc/}"
			return
			;;
		esac
	done
}

# After umount the daemon must exit by itself.
unmount_and_wait() { # DESC
	local pid i
	pid=$(daemon_pid)
	# Refused as busy while the new file is still queued (a plain unmount
	# must not look done); it succeeds once that is on the medium.
	for ((i = 0; i < 50; i++)); do
		umount "$mnt" 2>"$ML_TMP/umount.err" && break
		grep -q busy "$ML_TMP/umount.err" || break
		sleep 0.1
	done
	ml_check "$1: umount (busy at most while data is queued)" ml_not ml_is_mounted "$mnt"
	for ((i = 0; i < 100; i++)); do
		[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || break
		sleep 0.05
	done
	ml_check "$1: daemon found" test -n "$pid"
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		ml_fail "$1: daemon $pid still running 5 s after umount (killed)"
		kill -9 "$pid"
	fi
}

exercise() { # DESC OPTIONS-EXPECTED...
	local desc=$1 o
	shift
	ml_check "$desc: mounted as fuse.slowmedia from $src" \
		awk -v m="$mnt" -v s="$src" '$2 == m && $3 == "fuse.slowmedia" && $1 == s {f = 1}
			END {exit !f}' /proc/mounts
	for o in "$@"; do
		ml_check "$desc: mount option $o" \
			awk -v m="$mnt" -v o="$o" '$2 == m {n = split($4, a, ","); for (i = 1; i <= n; i++)
				if (a[i] == o) f = 1} END {exit !f}' /proc/mounts
	done
	ml_check "$desc: old file readable" test "$(cat "$mnt/existing")" = "lower data"
	printf '%s' "$desc" >"$mnt/new"
	ml_check "$desc: new file readable" test "$(cat "$mnt/new")" = "$desc"
	unmount_and_wait "$desc"
	ml_check "$desc: new file in the lower dir" test "$(cat "$src/new")" = "$desc"
}

ml_check "mount -t fuse.slowmedia" \
	mount -t fuse.slowmedia "$src" "$mnt" -o prio=2,queue=8M,allow_other
exercise "mount -t" allow_other default_permissions

fstab=$ML_TMP/fstab
printf '# a private fstab\n%s %s fuse.slowmedia %s 0 0\n' "$src" "$mnt" \
	"prio=3,class=idle,nofail,x-foo,_netdev,noatime" >"$fstab"
ml_check "mount -T FILE DIR (fstab line with nofail,x-foo)" mount -T "$fstab" "$mnt"
exercise "fstab" noatime

rc=0
mount -t fuse.slowmedia "$src" "$mnt" -o prio=99 2>"$ML_TMP/err" || rc=$?
ml_check "mount -t with a bad option fails ($rc)" test "$rc" != 0
ml_check "... and names it" grep -q "prio=99" "$ML_TMP/err"
ml_check "... and mounts nothing" ml_not ml_is_mounted "$mnt"
ml_finish
