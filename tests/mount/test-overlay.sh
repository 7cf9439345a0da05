#!/usr/bin/env bash
# Overlay in place: SOURCE == MOUNTPOINT. What was there stays visible through
# the mount, and what is written through it lands in the directory underneath
# (checked after unmount).
#   test-overlay.sh SLOWMEDIA
ML_DAEMON=$1
source "${MOUNT_LIB:-$(dirname "$0")/../lib/mount-lib.sh}"

ml_require_root_fuse
ml_init
fs=$ML_TMP/fs
dir=$fs/media
ml_make_ext4 64M "$fs"
mkdir -m 755 "$dir" "$dir/old-dir"
printf 'was here' >"$dir/old-file"
printf 'old sub' >"$dir/old-dir/sub"
ln -s old-file "$dir/old-link"

ml_start "$dir" "$dir"
ml_check "mounted over itself as fuse.slowmedia, fsname $dir" \
	awk -v m="$dir" '$2 == m && $3 == "fuse.slowmedia" && $1 == m {f = 1} END {exit !f}' \
	/proc/mounts
ml_check "old file visible through the mount" test "$(cat "$dir/old-file")" = "was here"
ml_check "old subdir file visible" test "$(cat "$dir/old-dir/sub")" = "old sub"
ml_check "old symlink visible" test "$(readlink "$dir/old-link")" = old-file

head -c 3000000 /dev/urandom >"$ML_TMP/random"
ml_check "copy a 3 MB file in" cp "$ML_TMP/random" "$dir/new-file"
ml_check "read it back through the mount" cmp "$ML_TMP/random" "$dir/new-file"
printf ' and more' >>"$dir/old-file"
mkdir "$dir/new-dir"
printf 'new sub' >"$dir/new-dir/sub"
mv "$dir/old-dir/sub" "$dir/new-dir/moved"
rm "$dir/old-link"
ml_check "sync through the mount" sync -f "$dir/new-file"
ml_stop "$dir"
ml_check "no longer mounted" ml_not ml_is_mounted "$dir"

ml_check "lower: new file landed" cmp "$ML_TMP/random" "$dir/new-file"
ml_check "lower: append landed" test "$(cat "$dir/old-file")" = "was here and more"
ml_check "lower: new dir and file" test "$(cat "$dir/new-dir/sub")" = "new sub"
ml_check "lower: rename landed" test "$(cat "$dir/new-dir/moved")" = "old sub"
ml_check "lower: old name gone" test ! -e "$dir/old-dir/sub"
ml_check "lower: symlink removed" test ! -L "$dir/old-link"
ml_finish
