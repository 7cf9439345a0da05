#!/bin/bash
# SEEK_DATA and SEEK_HOLE while a truncate that grows the file is pending,
# with the lower file still shorter than the file (its last block partly
# data): they answer in whole blocks, as the lower will once the truncate is
# applied and as a native file does: "0123456789", truncate to 4 then to 100,
# gives data at 0 and at 4, the hole at 100 (EOF), not at 4 or 10. A reader
# rounding down to blocks (parity's content digest) read block 0 twice when
# the hole came at 10: parity-fd-cache's truncate_path, seen under load.
# The flushers are paused (slowmediactl pause) and the file made dirty (its
# bytes written again) so the truncates stay queued.
# usage: seek-tail.sh SLOWMEDIA QIO SLOWMEDIACTL
SLOWMEDIA=$1 QIO=$2 CTL=${3:-}
. "$(dirname "$0")/qlib.sh"
q_require
[ -x "$CTL" ] || q_skip "needs slowmediactl"
q_init
LOWER=$Q_TMP/lower MNT=$Q_TMP/mnt
q_tmpfs "$LOWER"
q_start "$LOWER" "$MNT"

# seeks PATH WHAT... : qio's hole/data steps on PATH; prints "step=offset".
seeks() {
	local path=$1
	shift
	"$QIO" open "$path" "$@" | awk '{split($3, b, "="); printf "%s=%s/%s ", $1, b[2], $2}'
}

for dir in "$Q_TMP/native" "$MNT"; do
	mkdir -p "$dir"
	printf 0123456789 >"$dir/f"
	[ "$dir" = "$MNT" ] && { sync "$dir/f"; "$CTL" pause "$MNT" >/dev/null || q_fail "pause"; }
	# The same bytes again: queued, so the file is dirty and its truncates
	# are queued too (a clean file's go to the lower at once).
	printf 0123456789 | dd of="$dir/f" conv=notrunc status=none
	truncate -s 4 "$dir/f"
	truncate -s 100 "$dir/f"
	q_log "$dir: lower size now $(stat -c %s "$LOWER/f" 2>/dev/null)"
done
want=$(seeks "$Q_TMP/native/f" hole 0 hole 4 hole 10 data 0 data 4 data 50)
got=$(seeks "$MNT/f" hole 0 hole 4 hole 10 data 0 data 4 data 50)
q_log "native: $want"
q_log "mount:  $got"
q_check "the lower file is still the old 10 bytes (the truncates queued)" \
	[ "$(stat -c %s "$LOWER/f")" = 10 ]
q_check "SEEK_HOLE and SEEK_DATA through the mount as on the native file" [ "$got" = "$want" ]
"$CTL" resume "$MNT" >/dev/null
q_stop "$MNT"
q_check "after the drain, the lower file is 0123 and zeros to 100" \
	cmp "$LOWER/f" <(printf 0123; head -c 96 /dev/zero)
q_finish
