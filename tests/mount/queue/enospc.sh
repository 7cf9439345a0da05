#!/bin/bash
# ENOSPC on a small, nearly full medium (8 MiB ext2, no root reserve), flush
# rate capped so the queue holds data when space runs out:
#  - statfs through the mount drops by the queued bytes at once;
#  - a writer filling the medium file by file gets ENOSPC (or a short write)
#    from write, fsync or close;
#  - after the drain every byte a write() acknowledged is on the medium, and
#    the medium is full to within a few blocks.
# usage: enospc.sh SLOWMEDIA QIO
SLOWMEDIA=$1 QIO=$2
. "$(dirname "$0")/qlib.sh"
q_require mkfs.ext2
q_init

IMG=$Q_TMP/medium.img LOWER=$Q_TMP/lower MNT=$Q_TMP/mnt
truncate -s 8M "$IMG"
mkfs.ext2 -q -F -m 0 "$IMG" >/dev/null || { echo "mkfs.ext2 failed"; exit 1; }
LOOP=$(losetup -f --show "$IMG") || q_skip "no free loop device"
q_on_exit "losetup -d '$LOOP'"
mkdir -p "$LOWER"
mount -t ext2 "$LOOP" "$LOWER" || { echo "cannot mount $LOOP"; exit 1; }
q_on_exit "umount '$LOWER' || umount -l '$LOWER'"
q_start "$LOWER" "$MNT" rate=2M

avail() { # DIR: free bytes for unprivileged users, as statfs says
	stat -f -c '%a %S' "$1" | awk '{print $1 * $2}'
}
bfree() { # DIR: free blocks
	stat -f -c '%f' "$1"
}

# statfs: the queued megabyte is reserved before it reaches the medium.
a0=$(avail "$MNT")
"$QIO" create "$MNT/probe" write=ok 1M 30 close=ok >/dev/null
am=$(avail "$MNT") al=$(avail "$LOWER")
q_log "avail before $a0; after queuing 1 MiB: mount $am, lower $al"
q_check "df through the mount drops by at least the queued 1 MiB at once" \
	[ "$am" -le $((a0 - (1 << 20))) ]
q_check "df through the mount is below the lower's (reservation)" \
	[ "$am" -lt "$al" ]
rm -f "$MNT/probe"

# Fill: 1 MiB files until something fails; remember what write() acknowledged.
declare -A acked=()
enospc=""
for ((i = 1; i <= 16 && !${#enospc}; i++)); do
	out=$("$QIO" create "$MNT/f$i" write 1M $((100 + i)) close)
	acked[$i]=$(echo "$out" | awk '$1 == "write" {sub("bytes=", "", $3); print $3}')
	q_log "f$i: $(echo "$out" | tr '\n' ' ')"
	if echo "$out" | grep -q "rc=ENOSPC"; then
		enospc=$(echo "$out" | awk '/rc=ENOSPC/ {print $1; exit}')
	elif echo "$out" | grep -qv "rc=ok"; then
		q_fail "f$i: unexpected error: $out"
		enospc=other
	fi
done
nfiles=$((i - 1))
got_enospc() { [ -n "$enospc" ] && [ "$enospc" != other ]; }
q_check "the writer got ENOSPC (from ${enospc:-nothing})" got_enospc
# Then small writes to a new file, to fill the last blocks.
out=$("$QIO" create "$MNT/last" bs 4K write 64K 99 close)
q_log "last: $(echo "$out" | tr '\n' ' ')"
acked[last]=$(echo "$out" | awk '$1 == "write" {sub("bytes=", "", $3); print $3}')

q_alive "$MNT"
q_stop "$MNT"
q_check "the daemon reported no failed or lost data" \
	bash -c "! grep -Ei 'failed|lost|could not' '$Q_LOG'"

# Read the medium itself, not the page cache.
umount "$LOWER" && mount -t ext2 "$LOOP" "$LOWER"
total=0
for ((i = 1; i <= nfiles; i++)); do
	n=${acked[$i]:-0}
	total=$((total + n))
	q_check "f$i: $n acknowledged bytes on the medium" \
		"$QIO" verify=ok "$LOWER/f$i" "$n" $((100 + i))
	q_check "f$i: no more than that" [ "$(q_size "$LOWER/f$i")" = "$n" ]
done
q_check "last: ${acked[last]:-0} acknowledged bytes on the medium" \
	"$QIO" verify=ok "$LOWER/last" "${acked[last]:-0}" 99
free=$(bfree "$LOWER") bs=$(stat -f -c %S "$LOWER")
q_log "$total bytes acknowledged in $nfiles files; $free blocks of $bs bytes left free"
q_check "the medium is full to within 16 blocks" [ "$free" -le 16 ]
q_finish
