#!/bin/bash
# A mount detached with a lazy unmount while data is queued: its daemon
# drains on, and slowmediactl still finds it by the old mount point (state
# detached-draining, in status of all too); drain waits for it; then the
# daemon exits and the path is just a directory again (exit 3).
# usage: detached.sh SLOWMEDIA SLOWMEDIACTL [SLOWDEV]
SLOWMEDIA=$1 CTL=$2 SLOWDEV=${3:-}
. "$(dirname "$0")/ctllib.sh"
c_setup
ml_tmpfs "$LOWER"
c_start "$LOWER" "$MNT" rate=512K

c_gen "$ML_TMP/src" 2M
cp "$ML_TMP/src" "$MNT/f" || ml_fail "cp to the mount"
ml_check "a plain unmount is refused while data is queued" ml_not umount "$MNT"
ml_check "a lazy one detaches" umount -l "$MNT"
ml_check "the mount is gone from the table" ml_not ml_is_mounted "$MNT"
c_expect "status by the old mount point" 0 "" status "$MNT"
sed 's/^/  | /' "$C_OUT"
ml_check "state detached-draining" grep -qx "$MNT: detached-draining" "$C_OUT"
ml_check_here "--json too, with data queued" c_wait_json "$MNT" \
	"m['state'] == 'detached-draining' and m['queued_bytes'] > 0" 0
c_expect "status of all lists it" 0 "" status
ml_check "listed" grep -qx "$MNT: detached-draining" "$C_OUT"
c_expect "drain of the detached mount" 0 "" drain "$MNT" --quiet --timeout 30
ml_check "the lower file is whole" cmp "$ML_TMP/src" "$LOWER/f"
ml_wait_daemon "$MNT"
c_expect "afterwards the path is a plain directory" 3 "is not a mount point" status "$MNT"
ml_finish
