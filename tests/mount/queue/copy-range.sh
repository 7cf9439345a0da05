#!/bin/bash
# copy_file_range inside the mount goes at the medium's pace, like writes. The
# lower is ext2, the mount has rate=2M,queue=2M; a 16 MiB source is on the
# lower (written and synced before the mount). A copy_file_range of it to a new
# file through the mount, and coreutils cp (which uses copy_file_range), must
# each take at least about (16 MiB - queue=) / rate = 7 s (we ask for 3/4 of
# it): no unpaced copy on the lower that leaves the kernel holding the whole
# file as dirty pages. When it returns, at most queue= (plus a chunk) is left to
# flush, and after fsync the lower copy is right.
# Correctness, compared with the same copies done natively on the ext2: a
# source whose data is still queued (read-your-writes through the copy), odd
# offsets and lengths, a copy across the source's end (short) and at it (0).
# usage: copy-range.sh SLOWMEDIA QIO QIO2
SLOWMEDIA=$1 QIO=$2 QIO2=${3:-}
. "$(dirname "$0")/qlib.sh"
[ -x "$QIO2" ] || { echo "QIO2 '$QIO2' is not executable"; exit 1; }
# q2 STEP...: qio2, its report indented.
q2() {
	"$QIO2" "$@" | sed 's/^/  /'
	return "${PIPESTATUS[0]}"
}
q_setup_ext2 128
SRC_SIZE=$((16 << 20))
QUEUE=$((2 << 20))
RATE=$((2 << 20))
"$QIO2" gen "$LOWER/src" $SRC_SIZE 41 >/dev/null || { echo "cannot make the source"; exit 1; }
mkdir "$LOWER/native"
sync -f "$LOWER"
q_start "$LOWER" "$MNT" rate=2M,queue=2M

# field LINES STEP KEY: KEY's value on the first STEP line of qio2's output.
field() {
	echo "$1" | awk -v s="$2" -v k="$3=" '$1 == s && !done { for (i = 2; i <= NF; i++)
		if (index($i, k) == 1) print substr($i, length(k) + 1); done = 1 }'
}

# A source with queued data: the copy must see it.
out=$("$QIO2" open "$MNT/queued" wronly,creat,trunc pwrite=ok 0 1M 42 close=ok)
q_check "1 MiB written to a new source" [ $? = 0 ]
q_log "its lower size before the copy: $(q_size "$LOWER/queued") (1 MiB would take 0.5 s to flush)"
out=$("$QIO2" open "$MNT/from-queued" wronly,creat,trunc src "$MNT/queued" copyall=ok 0 0 1M \
	close=ok)
q_check "copy_file_range of the queued source" [ $? = 0 ]
q_check "it copied 1 MiB ($(field "$out" copyall bytes))" [ "$(field "$out" copyall bytes)" = $((1 << 20)) ]
q_check "the copy holds the queued data" q2 verify "$MNT/from-queued" 0 1M 42 0

# Odd offsets and lengths, a short copy at the source's end, none past it:
# byte for byte what the same calls do on the ext2 itself.
# copies DIR SRC: the calls, into DIR/odd; prints what each returned.
copies() {
	"$QIO2" open "$1/odd" wronly,creat,trunc src "$2" \
		copyall 100000 12345 300000 \
		copyall $((SRC_SIZE - 1000)) $((1 << 20)) 5000 \
		copy $SRC_SIZE $((2 << 20)) 100 \
		copyall 0 $((3 << 20)) 65537 \
		fstat fsync close | awk '$1 ~ /^(copy|fstat|fsync|close)/ {print $1, $2, $3}'
}
want=$(copies "$LOWER/native" "$LOWER/src")
got=$(copies "$MNT" "$MNT/src")
echo "$got" | sed 's/^/  /'
q_check "offsets, lengths, short copies: the same returns as native" [ "$got" = "$want" ]
[ "$got" = "$want" ] || echo "$want" | sed 's/^/  native: /'
q_check "and the same bytes" cmp "$LOWER/native/odd" "$MNT/odd"
q_check "the bytes are the source's" q2 verify "$MNT/odd" 12345 300000 41 100000
q_check "a hole where nothing was copied" q2 zeros "$MNT/odd" 0 12345

# The paced copy.
MIN_SECS=$(awk -v s=$SRC_SIZE -v q=$QUEUE -v r=$RATE 'BEGIN { printf "%.2f", 0.75 * (s - q) / r }')
out=$("$QIO2" open "$MNT/copy" wronly,creat,trunc src "$MNT/src" copyall=ok 0 0 $SRC_SIZE close=ok)
q_check "copy_file_range of 16 MiB" [ $? = 0 ]
echo "$out" | sed 's/^/  /'
lower=$(q_size "$LOWER/copy")
secs=$(field "$out" copyall secs)
q_log "the copy took $secs s; the lower file then held $lower bytes"
q_check "it copied every byte" [ "$(field "$out" copyall bytes)" = $SRC_SIZE ]
q_check "the copy is paced: at least $MIN_SECS s ($secs s)" q_between "$secs" "$MIN_SECS" 60
q_check "no more than queue= plus a chunk was left to flush" \
	[ "$lower" -ge $((SRC_SIZE - QUEUE - (256 << 10))) ]
q_check "fsync of the copy" "$QIO" open "$MNT/copy" fsync=ok close=ok
q_check "the lower copy is the source" cmp "$LOWER/src" "$LOWER/copy"

t0=$(q_now)
q_check "cp of the 16 MiB file inside the mount" cp "$MNT/src" "$MNT/cp"
secs=$(q_since "$t0")
q_log "cp took $secs s"
q_check "cp is paced: at least $MIN_SECS s ($secs s)" q_between "$secs" "$MIN_SECS" 60
q_check "the cp copy reads back right" cmp "$MNT/src" "$MNT/cp"

q_alive "$MNT"
q_stop "$MNT"
q_check "after the drain the lower cp copy is the source" cmp "$LOWER/src" "$LOWER/cp"
q_check "and the copy of the queued source" q2 verify "$LOWER/from-queued" 0 1M 42 0
q_finish
