#!/usr/bin/env bash
# Security with allow_other: the kernel checks permissions (default_permissions
# is forced on), an unprivileged user cannot read another user's 0600 file, and
# what a user creates belongs to that user (uid and gid, on the mount and on the
# medium). Without allow_other, other users cannot enter the mount at all.
# Names resolve on the caller's side: ".." at the mount's root is the mount
# point's parent, not the lower's, and a symbolic link on the medium
# (relative or absolute) is followed by the caller's kernel in the caller's
# view of the tree, as on any filesystem: the daemon never follows one.
# Users are plain numeric ids run through setpriv (no accounts are created).
#   test-security.sh SLOWMEDIA
ML_DAEMON=$1
USER_A=1234  # owns a private file
USER_B=65534 # nobody
GROUP_G=4321 # a group only some processes carry
source "${MOUNT_LIB:-$(dirname "$0")/../lib/mount-lib.sh}"

ml_require_root_fuse
command -v setpriv >/dev/null || ml_skip "needs setpriv"
ml_init
fs=$ML_TMP/fs
lower=$fs/lower
mnt=$ML_TMP/mnt
mnt2=$ML_TMP/mnt2
ml_make_ext4 64M "$fs"
mkdir -m 755 "$lower" "$mnt" "$mnt2"
mkdir -m 755 "$lower/home-a"
chown $USER_A:$USER_A "$lower/home-a"
mkdir -m 1777 "$lower/pub"
mkdir -m 2770 "$lower/team"
chown 0:$GROUP_G "$lower/team"

as() { # UID [GROUPS] -- CMD...: run CMD as UID (gid = UID) with those groups
	local uid=$1 groups=--clear-groups
	shift
	if [ "$1" != -- ]; then
		groups=--groups=$1
		shift
	fi
	shift
	setpriv --reuid=$uid --regid=$uid $groups -- "$@"
}
# fails_with MSG CMD...: CMD must fail and say MSG (e.g. "Permission denied").
fails_with() {
	local msg=$1 out
	shift
	if out=$("$@" 2>&1); then
		echo "  (succeeded: $out)"
		return 1
	fi
	grep -q "$msg" <<<"$out" || { echo "  (said: $out)"; return 1; }
}
owner() { stat -c '%u:%g' "$1"; }

# Two markers of one name: beside the mount point (what the caller sees as
# ".." of the mount) and beside the lower (what the daemon would reach).
echo caller >"$ML_TMP/marker"
echo lower >"$fs/marker"
ln -s ../marker "$lower/rel-link"
ln -s "$ML_TMP/marker" "$lower/abs-link"
ml_start "$lower" "$mnt" -o allow_other
ml_check '".." at the root is the mount point'"'"'s parent, not the lower'"'"'s' \
	test "$(stat -c %d:%i "$mnt/..")" = "$(stat -c %d:%i "$ML_TMP")" -a \
	"$(cat "$mnt/../marker")" = caller
ml_check "a relative link on the medium to ../marker resolves on the caller's side" \
	test "$(cat "$mnt/rel-link")" = caller -a "$(readlink "$mnt/rel-link")" = ../marker
ml_check "an absolute link resolves in the caller's tree" \
	test "$(cat "$mnt/abs-link")" = caller
ml_check "(on the lower the same relative link reaches the lower's neighbour)" \
	test "$(cat "$lower/rel-link")" = lower
opts=$(awk -v m="$mnt" '$2 == m {print $4}' /proc/mounts)
ml_check "allow_other forces default_permissions ($opts)" \
	grep -q "default_permissions" <<<"$opts"
ml_check "a medium's setuid files and device nodes mean nothing (nosuid,nodev)" \
	grep -q "nosuid,nodev" <<<"$opts"

as $USER_A -- sh -c "umask 077; echo private >'$mnt/home-a/secret'"
ml_check "user A's file is 0600 $USER_A:$USER_A" \
	test "$(stat -c '%a %u:%g' "$mnt/home-a/secret")" = "600 $USER_A:$USER_A"
ml_check "user A reads it" test "$(as $USER_A -- cat "$mnt/home-a/secret")" = private
ml_check "nobody cannot read it (EACCES)" fails_with "Permission denied" \
	as $USER_B -- cat "$mnt/home-a/secret"
ml_check "nobody cannot write it" fails_with "Permission denied" \
	as $USER_B -- sh -c "echo x >>'$mnt/home-a/secret'"
ml_check "nobody cannot chmod it" fails_with "Operation not permitted" \
	as $USER_B -- chmod 666 "$mnt/home-a/secret"
ml_check "nobody cannot create in A's home" fails_with "Permission denied" \
	as $USER_B -- touch "$mnt/home-a/intruder"
ml_check "nobody cannot create in root's dir" fails_with "Permission denied" \
	as $USER_B -- mkdir "$mnt/rootdir"
ml_check "root still reads A's file" test "$(cat "$mnt/home-a/secret")" = private

as $USER_B -- sh -c "echo mine >'$mnt/pub/b-file'; mkdir '$mnt/pub/b-dir';
	ln -s b-file '$mnt/pub/b-link'; mkfifo '$mnt/pub/b-fifo'"
for f in b-file b-dir b-link b-fifo; do
	ml_check "pub/$f created by nobody is $USER_B:$USER_B on the mount" \
		test "$(owner "$mnt/pub/$f")" = "$USER_B:$USER_B"
done
as $USER_A -- sh -c "echo a >'$mnt/pub/a-file'"
ml_check "nobody cannot remove A's file from the sticky dir" \
	fails_with "Operation not permitted" as $USER_B -- rm -f "$mnt/pub/a-file"
ml_check "nobody cannot rename A's file" \
	fails_with "Operation not permitted" as $USER_B -- mv "$mnt/pub/a-file" "$mnt/pub/stolen"

# Groups: supplementary groups are honoured and a setgid dir passes its group on.
ml_check "without group $GROUP_G: no entry to team/" fails_with "Permission denied" \
	as $USER_B -- touch "$mnt/team/x"
ml_check "with supplementary group $GROUP_G: create in team/" \
	as $USER_B $GROUP_G -- sh -c "echo t >'$mnt/team/b-team'"
ml_check "team/b-team is $USER_B:$GROUP_G (setgid dir)" \
	test "$(owner "$mnt/team/b-team")" = "$USER_B:$GROUP_G"

ml_start "$lower" "$mnt2"
ml_check "without allow_other, nobody cannot enter the mount" \
	fails_with "Permission denied" as $USER_B -- ls "$mnt2"
ml_check "without allow_other, root can" test -d "$mnt2/pub"
ml_stop "$mnt2"
ml_stop "$mnt"

for f in pub/b-file pub/b-dir pub/b-link pub/b-fifo; do
	ml_check "on the medium, $f is $USER_B:$USER_B" \
		test "$(owner "$lower/$f")" = "$USER_B:$USER_B"
done
ml_check "on the medium, team/b-team is $USER_B:$GROUP_G" \
	test "$(owner "$lower/team/b-team")" = "$USER_B:$GROUP_G"
ml_check "on the medium, A's secret is intact" test "$(cat "$lower/home-a/secret")" = private
ml_finish
