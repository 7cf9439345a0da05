#!/usr/bin/env bash
# Inodes are reached by name when their file handle fails: on ext4 with every
# open_by_handle_at forced to fail with ESTALE (SLOWMEDIA_TEST_HANDLES=stale)
# and an fd cache of 20, find, du, stat of every file and reads of contents
# work before and after the kernel forgets its inodes, and so do rename, link
# and unlink with evicted parents, a renamed directory's files, the other link
# of a file whose recorded name was unlinked, and an open unlinked file. A
# directory renamed on the lower behind the daemon's back gives ESTALE (not
# ENOENT), logged once, until a lookup by its new name heals it.
#   test-inode-stale.sh SLOWMEDIA MTOOL
ML_DAEMON=$1
MTOOL=$2
FD_BUDGET=160
FD_CACHE=20
FD_LIMIT=$((FD_BUDGET + 40))
PER_DIR=1000
DIRS=3
source "${MOUNT_LIB:-$(dirname "$0")/../lib/mount-lib.sh}"

ml_scratch 256M
fs=$ML_FS mnt=$ML_MNT
SLOWMEDIA_TEST_HANDLES=stale SLOWMEDIA_FD_BUDGET=$FD_BUDGET SLOWMEDIA_FD_CACHE=$FD_CACHE \
	ml_start "$fs/lower" "$mnt"
log=${ML_LOGS[$mnt]}
ml_check "the daemon forces stale handles" grep -q "SLOWMEDIA_TEST_HANDLES=stale" "$log"

check_fds() { # WHEN
	local n
	n=$(ml_daemon_fds "$mnt")
	ml_check "daemon holds $n fds (< $FD_LIMIT) $1" test "$n" -lt $FD_LIMIT
}
forget_kernel_inodes() { echo 2 >/proc/sys/vm/drop_caches; }
push_cache() { "$MTOOL" checkfiles "$mnt/d2" $PER_DIR >/dev/null 2>&1; }

for ((d = 0; d < DIRS; d++)); do
	mkdir "$mnt/d$d"
	ml_check "create $PER_DIR files in d$d" "$MTOOL" mkfiles "$mnt/d$d" $PER_DIR
done
mkdir -p "$mnt/deep/a/b/c/d/e"
ml_check "create 100 files 6 levels down" "$MTOOL" mkfiles "$mnt/deep/a/b/c/d/e" 100
total=$((DIRS * PER_DIR + 100))

walk() { # PHASE
	local n
	n=$(find "$mnt" -type f 2>/dev/null | wc -l)
	ml_check "$1: find sees $total files (saw $n)" test "$n" = $total
	ml_check "$1: du works" du -s "$mnt"
	n=$(find "$mnt" -type f -print0 2>/dev/null | xargs -0 stat -c '%s' 2>/dev/null | wc -l)
	ml_check "$1: stat each file ($n)" test "$n" = $total
	for ((d = 0; d < DIRS; d++)); do
		ml_check "$1: content of d$d/*" "$MTOOL" checkfiles "$mnt/d$d" $PER_DIR
	done
	ml_check "$1: content 6 levels down" "$MTOOL" checkfiles "$mnt/deep/a/b/c/d/e" 100
	check_fds "after $1"
}
walk "warm"
forget_kernel_inodes
walk "after drop_caches"

# Namespace ops whose parents' fds were closed long ago.
forget_kernel_inodes
push_cache
ml_check "rename across evicted directories" mv "$mnt/d0/f00001" "$mnt/d1/moved"
push_cache
ml_check "moved file readable" test "$(cat "$mnt/d1/moved" 2>&1)" = f00001
ml_check "link into an evicted directory" ln "$mnt/d0/f00002" "$mnt/d1/link2"
ml_check "unlink in an evicted directory" rm "$mnt/d0/f00003"
ml_check "rename a directory" mv "$mnt/deep/a/b" "$mnt/deep/B"
forget_kernel_inodes
push_cache
ml_check "files below the renamed directory" "$MTOOL" checkfiles "$mnt/deep/B/c/d/e" 100
a=$(stat -c '%i %h' "$mnt/d0/f00002" 2>&1) b=$(stat -c '%i %h' "$mnt/d1/link2" 2>&1)
ml_check "link: one inode, 2 links ($a / $b)" test "$a" = "$b" -a "${a#* }" = 2

# The recorded name of a linked file goes; an open fd then reaches it through
# the other name, with no lookup to help.
ln "$mnt/d0/f00010" "$mnt/d1/h10" # the lookup after link records d1/h10
exec 3<"$mnt/d0/f00010"
ml_check "unlink the recorded link" rm "$mnt/d1/h10"
forget_kernel_inodes
push_cache
sleep 1.2 # past the attribute timeout
ml_check "open file with its recorded link gone: stat" stat -L /dev/fd/3
ml_check "open file with its recorded link gone: the other name" \
	test "$(stat -c %h "$mnt/d0/f00010" 2>&1)" = 1
exec 3<&-
ml_check "open unlinked file usable after its fd was evicted" \
	"$MTOOL" unlinked-open "$mnt/d0/victim" "$mnt/d2"

# Behind the daemon's back: the directory a process sits in is renamed on the
# lower. Its inode cannot be reached by its recorded name any more.
mkdir -p "$mnt/x/y"
echo data >"$mnt/x/y/file"
(cd "$mnt/x/y" && exec sleep 60) &
holder=$!
ml_on_exit "kill $holder"
sleep 0.2
mv "$fs/lower/x" "$fs/lower/x2"
forget_kernel_inodes
push_cache
out=$(stat "/proc/$holder/cwd/file" 2>&1)
ml_check "renamed behind our back: ESTALE, not ENOENT ($out)" \
	grep -q "Stale file handle" <<<"$out"
ml_check "...and the log says it once" test "$(grep -c "cannot be reached" "$log")" = 1
ml_check "the new name works" test "$(cat "$mnt/x2/y/file" 2>&1)" = data
ml_check "...and heals the held directory" test "$(cat "/proc/$holder/cwd/file" 2>&1)" = data
kill $holder
wait $holder 2>/dev/null

ml_check "rm -r of a directory" rm -r "$mnt/d1"
check_fds "at the end"
listing() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 md5sum); }
listing "$mnt" >"$ML_TMP/mount.list"
ml_stop "$mnt"
listing "$fs/lower" >"$ML_TMP/lower.list"
ml_check "after unmount the lower dir holds what the mount showed ($(wc -l <"$ML_TMP/mount.list") files)" \
	cmp "$ML_TMP/mount.list" "$ML_TMP/lower.list"
ml_finish
