#!/bin/bash
# Writes the lower filesystem can never take are refused at write(), exactly as
# on the lower itself. The lower is ext2 (its largest file size, L, comes from
# ftruncate on a native file: a binary search); each case is one pwrite on a
# fresh file, once in a directory of the ext2 itself (native) and once through
# the mount: the same return value (bytes, or the errno: EFBIG) and the same
# size after. Cases: far beyond L (2^45, 2^62, 2^63 - 2), at L, one byte
# before L, and 4 KiB from L - 512 (a short write of 512 bytes); 4 KiB at
# 2^63 - 2 is EINVAL everywhere (its end overflows). Through the
# mount, fsync and close then return 0 (no deferred error), the lower file has
# the native size after the drain, and the daemon logs no error and nothing lost.
# usage: efbig.sh SLOWMEDIA QIO QIO2
SLOWMEDIA=$1 QIO=$2 QIO2=${3:-}
. "$(dirname "$0")/qlib.sh"
[ -x "$QIO2" ] || { echo "QIO2 '$QIO2' is not executable"; exit 1; }
# q2 STEP...: qio2, its report indented.
q2() {
	"$QIO2" "$@" | sed 's/^/  /'
	return "${PIPESTATUS[0]}"
}
q_setup_ext2 64
NATIVE=$LOWER/native
mkdir "$NATIVE"
q_start "$LOWER" "$MNT"

L=$("$QIO2" open "$NATIVE/limit" rdwr,creat limit | awk '$1 == "limit" {sub("bytes=", "", $3); print $3}')
q_log "the ext2's largest file size: ${L:-?}"
if [ -z "$L" ] || [ "$L" -lt $((1 << 30)) ]; then
	echo "FAIL: no file size limit found"
	exit 1
fi

# field LINES STEP KEY: KEY's value on the STEP line of qio2's output.
field() {
	echo "$1" | awk -v s="$2" -v k="$3=" '$1 == s { for (i = 2; i <= NF; i++)
		if (index($i, k) == 1) print substr($i, length(k) + 1) }'
}

n=0
# case OFF LEN: one pwrite, native and through the mount.
case_write() {
	local off=$1 len=$2 name nat mnt got want
	n=$((n + 1))
	name=c$n
	nat=$("$QIO2" open "$NATIVE/$name" wronly,creat,trunc pwrite "$off" "$len" $n fstat close)
	mnt=$("$QIO2" open "$MNT/$name" wronly,creat,trunc pwrite "$off" "$len" $n fstat \
		fsync=ok close=ok)
	local rc=$?
	want="$(field "$nat" pwrite rc) $(field "$nat" pwrite bytes) size $(field "$nat" fstat bytes)"
	got="$(field "$mnt" pwrite rc) $(field "$mnt" pwrite bytes) size $(field "$mnt" fstat bytes)"
	q_check "pwrite of $len at $off: native '$want', through the mount '$got'" [ "$got" = "$want" ]
	if [ $rc != 0 ]; then
		echo "$mnt" | grep -E '^(fsync|close|qio2)' | sed 's/^/  /'
	fi
	q_check "pwrite of $len at $off: then fsync and close return 0" [ $rc = 0 ]
	SIZES[$name]=$(field "$nat" fstat bytes)
}
declare -A SIZES=()

case_write $((1 << 45)) 4096
case_write $((1 << 62)) 4096
case_write $(((1 << 63) - 2)) 1
case_write $(((1 << 63) - 2)) 4096 # EINVAL: the end overflows off_t
case_write "$L" 4096
case_write $((L + 1)) 1
case_write $((L - 1)) 1
case_write $((L - 512)) 4096
case_write $((L - 4096)) 4096

q_alive "$MNT"
q_stop "$MNT"
if grep -qi lost "$Q_LOG"; then
	q_fail "the daemon's log says data is lost:"
	grep -i lost "$Q_LOG" | head -5 | sed 's/^/  | /'
fi
for ((i = 1; i <= n; i++)); do
	name=c$i
	q_check "after the drain the lower $name has the native size (${SIZES[$name]})" \
		[ "$(q_size "$LOWER/$name")" = "${SIZES[$name]}" ]
done
q_check "the last byte written one before the limit is on the lower" \
	q2 verify "$LOWER/c7" $((L - 1)) 1 7 $((L - 1))
q_finish
