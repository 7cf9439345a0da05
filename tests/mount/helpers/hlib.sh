# Helpers for the mount(8)/umount(8) helper tests (tests/mount/helpers/*.sh),
# on top of the shared harness tests/lib/mount-lib.sh. Source it with
# SLOWMEDIA (the daemon) and HELPERS (the build's mount-helpers directory)
# set, then:
#
#   h_setup [tool...]    exit 77 unless root, /dev/fuse, losetup, overlayfs and
#                        the tools; re-run in a private mount namespace; then
#                        ml_init and the sandbox below. Sets H_SBIN.
#   h_image SIZE_MB      a fresh ext2 image file in $ML_TMP (prints its path)
#   h_mount_image IMG MNT [OPTS]   mount -t slowmedia IMG MNT (ext2, $H_OPTS)
#   h_loop_of IMG        the loop devices attached to IMG (losetup -j)
#   h_mounts             "MOUNTPOINT FSTYPE SOURCE" lines of this namespace
#   h_mounted_from MNT FSTYPE SOURCE
#   h_slowmedia_mounts   the fuse.slowmedia mount points of this test
#   h_lower_mounts       the mounts below /run/slowmedia/lower
#   h_daemon_pid MNT     the daemon serving MNT (by its command line), or nothing
#   h_wait_gone PID SECS 0 once PID has exited
#   h_put FILE SIZE_MB   random test data
#   h_ext2_cat IMG PATH  a file's content read from an ext2 image (debugfs)
#   h_fat_cat IMG PATH   the same from a FAT image (mtools)
#   h_fuse_lower_pids    the FUSE lower daemons (fusefat) of this test
#   h_wait_exited PID SECS   0 once PID has exited (a zombie child is reaped)
#
# The sandbox: mount(8) and umount(8) look for helpers in /sbin only, so an
# overlayfs (read-only: our helpers on top of /usr/sbin) is mounted on
# /usr/sbin in the test's own mount namespace; the daemon comes from
# $SLOWMEDIA_DAEMON (and, for mount.fuse3, as /usr/sbin/slowmedia). A tmpfs
# on /run keeps utab (/run/mount/utab), the control sockets and the private
# lower mounts (/run/slowmedia) to the test. Nothing outside the namespace
# sees any of it. Teardown (h_teardown, first on the exit list's way back)
# detaches every slowmedia mount and lower mount of the namespace, stops the
# daemons serving mounts below $ML_TMP and arbiters running in this
# namespace (found by pid), then the FUSE lower daemons (fusefat) of this
# test once their mounts are gone (they write their medium out as they exit;
# killed if they do not), and detaches the loop devices of images below
# $ML_TMP, even when a check failed. A test that mounts on a medium of its
# own (slowdev) registers h_teardown again after it, so that it runs first.

# shellcheck source=../../lib/mount-lib.sh
source "${MOUNT_LIB:-$(dirname "${BASH_SOURCE[0]}")/../../lib/mount-lib.sh}"

ML_DAEMON=$SLOWMEDIA
H_SBIN=""

h_setup() {
	local t
	ml_require mkfs.ext2 debugfs "$@"
	[ -x "${SLOWMEDIA:-}" ] || { echo "SLOWMEDIA '${SLOWMEDIA:-}' is not executable"; exit 1; }
	for t in mount.slowmedia umount.slowmedia; do
		[ -x "${HELPERS:-}/$t" ] || { echo "no $t in HELPERS '${HELPERS:-}'"; exit 1; }
	done
	grep -qw overlay /proc/filesystems || modprobe overlay 2>/dev/null
	grep -qw overlay /proc/filesystems || ml_skip "needs overlayfs (to put the helpers in /sbin)"
	[ "$(readlink -f /sbin)" = /usr/sbin ] || ml_skip "needs /sbin -> /usr/sbin"
	ml_private_ns
	[ -n "${ML_IN_NAMESPACE:-}" ] || ml_skip "needs a private mount namespace (unshare)"
	ml_init
	ml_on_exit h_teardown
	h_sandbox
}

h_sandbox() {
	H_SBIN=$ML_TMP/sbin
	mkdir -p "$H_SBIN"
	ln -s "$(readlink -f "$HELPERS/mount.slowmedia")" "$H_SBIN/mount.slowmedia"
	ln -s "$(readlink -f "$HELPERS/umount.slowmedia")" "$H_SBIN/umount.slowmedia"
	ln -s umount.slowmedia "$H_SBIN/umount.fuse.slowmedia"
	ln -s "$(readlink -f "$SLOWMEDIA")" "$H_SBIN/slowmedia"
	mount -t overlay -o "lowerdir=$H_SBIN:/usr/sbin" h-sbin /usr/sbin ||
		{ echo "cannot put the helpers on /usr/sbin"; exit 1; }
	ml_on_exit "umount -l /usr/sbin"
	mount -t tmpfs -o mode=755,size=16M h-run /run || { echo "cannot mount a tmpfs on /run"; exit 1; }
	ml_on_exit "umount -l /run"
	mkdir -p /run/mount /run/lock
	export SLOWMEDIA_DAEMON=$SLOWMEDIA
	[ -x /sbin/mount.slowmedia ] || { echo "the helpers are not in /sbin"; exit 1; }
}

# h_mounts: "MOUNTPOINT FSTYPE SOURCE" for each mount of this namespace
# (mountinfo's optional fields end at " - ").
h_mounts() {
	awk '{for (i = 7; i <= NF; i++) if ($i == "-") {print $5, $(i + 1), $(i + 2); break}}' \
		/proc/self/mountinfo
}

# h_slowmedia_mounts: those below $ML_TMP (the namespace also holds copies of
# the mounts other tests had when it was made).
h_slowmedia_mounts() {
	h_mounts | awk -v t="$ML_TMP/" '$2 == "fuse.slowmedia" && index($1, t) == 1 {print $1}'
}

# h_mounted_from MNT FSTYPE SOURCE
h_mounted_from() {
	h_mounts | awk -v m="$1" -v t="$2" -v s="$3" '$1 == m && $2 == t && $3 == s {f = 1}
		END {exit !f}'
}

h_lower_mounts() {
	awk '$5 ~ "^/run/slowmedia/lower/" {print $5}' /proc/self/mountinfo
}

# h_daemon_pid MNT: the slowmedia process whose command line names MNT.
h_daemon_pid() {
	local p
	for p in /proc/[0-9]*; do
		tr '\0' '\n' 2>/dev/null <"$p/cmdline" | grep -qxF -- "$1" || continue
		case $(cat "$p/comm" 2>/dev/null) in
		slowmedia) echo "${p#/proc/}" ;;
		esac
	done
}

h_wait_gone() { # PID SECS
	ml_wait_exit "$1" "$2"
}

h_loop_of() {
	losetup -j "$1" -n -O NAME 2>/dev/null
}

# The programs of FUSE lowers the tests use.
H_FUSE_LOWERS="fusefat"

# h_fuse_lower_pids: the processes of $H_FUSE_LOWERS in this mount namespace
# with an argument below $ML_TMP or /run/slowmedia/lower (their mount point).
h_fuse_lower_pids() {
	local p ns
	ns=$(readlink /proc/self/ns/mnt)
	for p in /proc/[0-9]*; do
		case " $H_FUSE_LOWERS " in *" $(cat "$p/comm" 2>/dev/null) "*) ;; *) continue ;; esac
		[ "$(readlink "$p/ns/mnt" 2>/dev/null)" = "$ns" ] || continue
		tr '\0' '\n' 2>/dev/null <"$p/cmdline" |
			grep -q -e "^$ML_TMP/" -e "^/run/slowmedia/lower/" || continue
		echo "${p#/proc/}"
	done
}

# h_wait_exited PID SECS: like h_wait_gone, but a zombie counts as exited
# (and is reaped when it is the test's own child).
h_wait_exited() {
	local i
	for ((i = 0; i < $2 * 20; i++)); do
		case $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) in
		"" | Z | X)
			wait "$1" 2>/dev/null
			return 0
			;;
		esac
		sleep 0.05
	done
	return 1
}

h_teardown() {
	local m p l img
	for m in $(h_slowmedia_mounts | sort -r); do
		case $m in "$ML_TMP"/*) umount -l "$m" ;; esac
	done
	for m in $(awk '{print $5}' /proc/self/mountinfo | sort -r); do
		case $m in "$ML_TMP"/* | /run/slowmedia/lower/*) umount -l "$m" ;; esac
	done
	for p in /proc/[0-9]*; do
		case $(cat "$p/comm" 2>/dev/null) in
		slowmedia)
			tr '\0' '\n' 2>/dev/null <"$p/cmdline" | grep -q "^$ML_TMP/" || continue ;;
		slowmedia-arbit) # started by one of our daemons, in our namespace
			[ "$(readlink "$p/ns/mnt")" = "$(readlink /proc/self/ns/mnt)" ] || continue ;;
		*) continue ;;
		esac
		p=${p#/proc/}
		kill "$p" 2>/dev/null
		h_wait_gone "$p" 5 || kill -9 "$p" 2>/dev/null
	done
	# Their mounts are gone: they write the medium out and exit, or are made to.
	for p in $(h_fuse_lower_pids); do
		h_wait_exited "$p" 20 && continue
		kill "$p" 2>/dev/null
		h_wait_exited "$p" 5 || kill -9 "$p" 2>/dev/null
	done
	for img in "$ML_TMP"/*.img; do
		[ -e "$img" ] || continue
		for l in $(h_loop_of "$img"); do
			losetup -d "$l"
		done
	done
}

# h_image SIZE_MB: a new ext2 image file; its path on stdout.
h_image() {
	local img
	ML_NIMAGES=$((ML_NIMAGES + 1))
	img=$ML_TMP/medium.$ML_NIMAGES.img
	truncate -s "${1}M" "$img"
	mkfs.ext2 -q -F "$img" >/dev/null || { echo "mkfs.ext2 failed" >&2; return 1; }
	echo "$img"
}

h_put() { # FILE SIZE_MB
	head -c "$(($2 << 20))" /dev/urandom >"$1"
}

# h_ext2_cat IMG PATH: the file as written on the image (no mount involved).
h_ext2_cat() {
	debugfs -R "cat $2" "$1" 2>/dev/null
}

# h_image_has IMG PATH REF: the image holds PATH with REF's content.
h_image_has() {
	cmp -s <(h_ext2_cat "$1" "$2") "$3"
}

# h_fat_cat IMG PATH: the file as written on a FAT image. fusefat marks the
# FAT clean with 0x8000 in entry 1 (the hard-error bit cleared), which mtools
# takes for a bad FAT unless told not to check.
h_fat_cat() {
	MTOOLS_SKIP_CHECK=1 mcopy -n -i "$1" "::$2" - 2>/dev/null
}

h_fat_has() { # IMG PATH REF
	cmp -s <(h_fat_cat "$1" "$2") "$3"
}

# Options for every mount of these tests: they are about the helpers, not the
# arbiter (and an arbiter a daemon starts would outlive the test).
H_OPTS=arbiter=off

# h_mount_image IMG MNT [OPTS]: mount -t slowmedia of an ext2 image.
h_mount_image() {
	mount -t slowmedia "$1" "$2" -o "fstype=ext2,$H_OPTS${3:+,$3}"
}

# h_lower_of MNT: the private lower directory utab records for MNT.
h_lower_of() {
	grep "TARGET=$1 " /run/mount/utab 2>/dev/null |
		sed -n 's/.*x-slowmedia\.lower=\([^, ]*\).*/\1/p'
}

# h_wait_size FILE BYTES SECS: 0 once FILE holds BYTES (the flushers wrote it).
h_wait_size() {
	local i
	for ((i = 0; i < $3 * 10; i++)); do
		[ "$(stat -c %s "$1" 2>/dev/null)" = "$2" ] && return 0
		sleep 0.1
	done
	return 1
}

# h_retry SECS CMD...: run CMD every 0.2 s until it succeeds; 1 on time out.
h_retry() {
	local i n=$(($1 * 5))
	shift
	for ((i = 0; i < n; i++)); do
		"$@" 2>/dev/null && return 0
		sleep 0.2
	done
	return 1
}
