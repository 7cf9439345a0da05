#!/usr/bin/env bash
# A lower without file handles (ramfs) is not bounded by fds either: 10,000
# files in 5 directories (8,000 made on the lower, 2,000 through the mount)
# with an fd budget of 400 go through find, stat of every file, cp -a out and
# checksums; the daemon's fd count (sampled all along) stays under the budget
# plus a small fixed overhead, nobody sees EMFILE, and the log reports no
# unreachable inode and no error.
#   test-inode-ramfs.sh SLOWMEDIA MTOOL
ML_DAEMON=$1
MTOOL=$2
FD_BUDGET=400
FD_LIMIT=$((FD_BUDGET + 40)) # the root, the channel, stdio, open dirs, logs
DIRS=5
PER_DIR=2000
source "${MOUNT_LIB:-$(dirname "$0")/../lib/mount-lib.sh}"

ml_require_root_fuse
grep -qw ramfs /proc/filesystems || ml_skip "no ramfs in this kernel"
ml_init
lower=$ML_TMP/ram mnt=$ML_TMP/mnt copy=$ML_TMP/copy
mkdir -m 755 "$lower" "$mnt" "$copy"
mount -t ramfs -o mode=755 ramfs "$lower" || ml_skip "cannot mount ramfs"
ml_on_exit "umount '$lower' || umount -l '$lower'"

for ((d = 0; d < DIRS - 1; d++)); do
	mkdir "$lower/d$d"
	"$MTOOL" mkfiles "$lower/d$d" $PER_DIR || { echo "cannot fill the lower"; exit 1; }
done
total=$((DIRS * PER_DIR))

SLOWMEDIA_FD_BUDGET=$FD_BUDGET ml_start "$lower" "$mnt"
log=${ML_LOGS[$mnt]}

# The highest fd count of the daemon, sampled every 50 ms until stopped.
peak_file=$ML_TMP/fd-peak
ml_sample_peak "$peak_file" 0.05 ml_daemon_fds "$mnt"

errs=$ML_TMP/errs
ml_check "mkdir d$((DIRS - 1)) through the mount" mkdir "$mnt/d$((DIRS - 1))"
ml_check "create $PER_DIR files through the mount" \
	"$MTOOL" mkfiles "$mnt/d$((DIRS - 1))" $PER_DIR
n=$(find "$mnt" -type f 2>>"$errs" | wc -l)
ml_check "find sees $total files (saw $n)" test "$n" = $total
ml_check "du works" du -s "$mnt"
echo 2 >/proc/sys/vm/drop_caches # every name looked up again
n=$(find "$mnt" -type f -print0 2>>"$errs" | xargs -0 stat -c '%i %s' 2>>"$errs" | wc -l)
ml_check "stat of every file ($n) after drop_caches" test "$n" = $total
for ((d = 0; d < DIRS; d++)); do
	ml_check "content of d$d/*" "$MTOOL" checkfiles "$mnt/d$d" $PER_DIR
done
ml_check "cp -a out" cp -a "$mnt/." "$copy/" 2>>"$errs"
sums() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 md5sum); }
sums "$mnt" >"$ML_TMP/mnt.sums" 2>>"$errs"
sums "$copy" >"$ML_TMP/copy.sums"
ml_check "checksums of the copy match the mount ($(wc -l <"$ML_TMP/copy.sums") files)" \
	cmp "$ML_TMP/mnt.sums" "$ML_TMP/copy.sums"
ml_check "nobody saw EMFILE" ml_not grep -i "too many open files" "$errs" "$log"
ml_check "no error output from the tools" test ! -s "$errs"
[ -s "$errs" ] && head -n 5 "$errs" | sed 's/^/  | /'
ml_check "no inode reported unreachable" ml_not grep "cannot be reached" "$log"
ml_sample_stop
peak=$(cat "$peak_file")
ml_check "daemon fd peak $peak < $FD_LIMIT (budget $FD_BUDGET)" test "$peak" -lt $FD_LIMIT
ml_stop "$mnt"
sums "$lower" >"$ML_TMP/lower.sums"
ml_check "the lower holds what the mount showed" cmp "$ML_TMP/mnt.sums" "$ML_TMP/lower.sums"
ml_finish
