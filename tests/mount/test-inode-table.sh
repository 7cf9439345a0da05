#!/usr/bin/env bash
# The inode table is not bounded by fds: with an O_PATH fd cache of 100, 3,000
# files in 3 directories must work through find, du, stat and reads, before
# and after the kernel forgets its inodes; hard links stay one inode; an open
# unlinked file stays usable; the daemon stays under ~200 fds; the lower dir
# holds the same files after unmount. Then a burst of 15,000 small files with
# flushing slowed down: all created, and still no fd per file.
#   test-inode-table.sh SLOWMEDIA MTOOL
ML_DAEMON=$1
MTOOL=$2
FD_BUDGET=160 # cache 80, dirty files 40 x 2 fds
FD_LIMIT=200
PER_DIR=1000
DIRS=3
BURST=15000
source "${MOUNT_LIB:-$(dirname "$0")/../lib/mount-lib.sh}"

ml_scratch 256M
fs=$ML_FS mnt=$ML_MNT
SLOWMEDIA_FD_BUDGET=$FD_BUDGET ml_start "$fs/lower" "$mnt"

check_fds() { # MNT WHEN
	local n
	n=$(ml_daemon_fds "$1")
	ml_check "daemon holds $n fds (< $FD_LIMIT) $2" test "$n" -lt $FD_LIMIT
}

# The kernel forgets cached inodes and dentries, so every name is looked up
# again and the daemon must reach inodes whose fds it closed long ago. (No
# sync first: a global sync would wait for other people's slow devices.)
forget_kernel_inodes() {
	echo 2 >/proc/sys/vm/drop_caches
}

for ((d = 0; d < DIRS; d++)); do
	mkdir "$mnt/d$d"
	ml_check "create $PER_DIR files in d$d" "$MTOOL" mkfiles "$mnt/d$d" $PER_DIR
done
check_fds "$mnt" "after creating $((DIRS * PER_DIR)) files"

walk() { # PHASE
	local n
	n=$(find "$mnt" -type f 2>/dev/null | wc -l)
	ml_check "$1: find sees $((DIRS * PER_DIR)) files (saw $n)" test "$n" = $((DIRS * PER_DIR))
	ml_check "$1: du works" du -s "$mnt"
	n=$(find "$mnt" -type f -print0 2>/dev/null | xargs -0 stat -c '%s' 2>/dev/null | wc -l)
	ml_check "$1: stat each file ($n)" test "$n" = $((DIRS * PER_DIR))
	for ((d = 0; d < DIRS; d++)); do
		ml_check "$1: content of d$d/*" "$MTOOL" checkfiles "$mnt/d$d" $PER_DIR
	done
	check_fds "$mnt" "after $1"
}
walk "warm"
forget_kernel_inodes
walk "after drop_caches"

# Hard links across the table: one inode, right link counts.
for i in 00007 00500 00999; do
	ml_check "link d1/link$i" ln "$mnt/d0/f$i" "$mnt/d1/link$i"
	ml_check "link d2/link$i" ln "$mnt/d0/f$i" "$mnt/d2/link$i"
done
"$MTOOL" checkfiles "$mnt/d2" $PER_DIR >/dev/null 2>&1 # push the fd cache around
forget_kernel_inodes
for i in 00007 00500 00999; do
	a=$(stat -c '%i %h' "$mnt/d0/f$i" 2>&1)
	b=$(stat -c '%i %h' "$mnt/d1/link$i" 2>&1)
	c=$(stat -c '%i %h' "$mnt/d2/link$i" 2>&1)
	ml_check "links of f$i: one inode, 3 links ($a / $b / $c)" \
		test "$a" = "$b" -a "$b" = "$c" -a "${a#* }" = 3
	ml_check "content through link$i" test "$(cat "$mnt/d2/link$i" 2>&1)" = "f$i"
done
ml_check "find -samefile finds all links" \
	test "$(find "$mnt" -samefile "$mnt/d0/f00500" 2>/dev/null | wc -l)" = 3

ml_check "open unlinked file usable after its fd was evicted" \
	"$MTOOL" unlinked-open "$mnt/d0/victim" "$mnt/d1"

# Rename and remove with evicted parents.
ml_check "rename across directories" mv "$mnt/d0/f00001" "$mnt/d2/moved"
ml_check "moved file readable" test "$(cat "$mnt/d2/moved" 2>&1)" = f00001
ml_check "rm -r of a directory" rm -r "$mnt/d1"
check_fds "$mnt" "at the end"

listing() { # DIR: every file with its checksum
	(cd "$1" && find . -type f -print0 | sort -z | xargs -0 md5sum)
}
listing "$mnt" >"$ML_TMP/mount.list"
ml_stop "$mnt"
listing "$fs/lower" >"$ML_TMP/lower.list"
ml_check "after unmount the lower dir holds what the mount showed ($(wc -l <"$ML_TMP/mount.list") files)" \
	cmp "$ML_TMP/mount.list" "$ML_TMP/lower.list"

# A burst of small files, as from `cp -a` to a slow medium (flushing capped at
# 64 KiB/s, so most of them still have queued data): all must be created, and
# queued data must not cost fds per file (RLIMIT_NOFILE is 20,000 here and
# cannot be raised). Removed before they are flushed, they leave nothing to drain.
mkdir -m 755 "$fs/burst" "$ML_TMP/burst"
SLOWMEDIA_FD_BUDGET=$FD_BUDGET ml_start "$fs/burst" "$ML_TMP/burst" -o rate=64K
ml_check "burst of $BURST files: all created" "$MTOOL" mkfiles "$ML_TMP/burst" $BURST
check_fds "$ML_TMP/burst" "right after the burst"
ml_check "burst: content" "$MTOOL" checkfiles "$ML_TMP/burst" $BURST
rm -rf "$ML_TMP/burst"/*
ml_stop "$ML_TMP/burst"
ml_finish
