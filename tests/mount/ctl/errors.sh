#!/bin/bash
# Failing files in slowmediactl, real daemon on an emulated medium whose
# writes fail (slowdev `fail write`): status shows state error, the count and
# the failing file with its error and bytes; the file's name holds a newline,
# a tab, quotes, a backslash, a byte that is not UTF-8 and an é, and --json
# still parses, with no raw control byte, and gives the exact bytes back
# (os.fsencode: \udcXX for the stray byte); the human output escapes them.
# A drain fails (exit 1) naming the file; once the fault is cleared the
# daemon's retry succeeds and a drain finishes with the data on the medium.
# usage: errors.sh SLOWMEDIA SLOWMEDIACTL SLOWDEV
SLOWMEDIA=$1 CTL=$2 SLOWDEV=${3:-}
. "$(dirname "$0")/ctllib.sh"
c_setup_slowdev "ct-errors-$$" 16 dvdram
slowdev_ctl "$C_SD" "fast on"
c_start "$LOWER" "$MNT"

NAME=$'bad\nname\t"q"\\ \xff é'
NAME_HEX=$(printf '%s' "$LOWER/$NAME" | od -An -tx1 | tr -d ' \n')
SHOWN='bad\\x0Aname\\x09"q"\\\\ \\xFF é'

# Allocated and synced before the fault: then only overwritten (see
# tests/mount/queue/eio.sh for why).
c_gen "$ML_TMP/v0" 256K
c_gen "$ML_TMP/v1" 64K
dd if="$ML_TMP/v0" of="$MNT/$NAME" bs=64K conv=fsync status=none || ml_fail "victim written"
sync -f "$LOWER"
ml_on_exit "slowdev_ctl $C_SD clear"
slowdev_ctl "$C_SD" "fail write 0 $((16 << 20))"
# Queued; its close may already hear the EIO when the flusher tried first
# (close reports an error already known), so only what follows is checked.
dd if="$ML_TMP/v1" of="$MNT/$NAME" bs=64K conv=notrunc status=none 2>/dev/null || true

ml_check_here "the failure shows in status" c_wait_json "$MNT" "m['errors'] >= 1" 10
"$CTL" status "$MNT" --json >"$ML_TMP/err.json"
ml_check "--json with the failing file: valid, no raw control bytes, exact bytes back" \
	python3 - "$ML_TMP/err.json" "$NAME_HEX" <<'PY'
import json, os, sys
raw = open(sys.argv[1], "rb").read()
assert all(b >= 0x20 or b == 0x0a for b in raw), "raw control byte"
assert raw.count(b"\n") == raw.strip().count(b"\n") + 1
m = json.loads(raw.decode("utf-8"))["mounts"][0]
assert m["state"] == "error", m["state"]
assert m["errors"] == 1, m["errors"]
fe = m["file_errors"]
assert len(fe) == 1, fe
assert sorted(fe[0]) == ["bytes", "code", "path"], fe[0]
assert fe[0]["code"] == "EIO", fe[0]
assert type(fe[0]["bytes"]) is int and fe[0]["bytes"] > 0, fe[0]
assert os.fsencode(fe[0]["path"]) == bytes.fromhex(sys.argv[2]), ascii(fe[0]["path"])
assert "\\udcff" in raw.decode("ascii", "replace")
PY
c_run status "$MNT"
sed 's/^/  | /' "$C_OUT"
ml_check "human status: one file failing" grep -Eq "^  errors +1 file failing$" "$C_OUT"
ml_check "human status: the path, escaped, with its error" grep -qF "$LOWER/$(printf "$SHOWN"): EIO (" "$C_OUT"
ml_check "human status: state error" grep -qx "$MNT: error" "$C_OUT"

c_run drain "$MNT" --timeout 30
sed 's/^/  | /' "$C_ERR"
ml_check "drain of a failing queue exits 1 (got $C_RC)" [ "$C_RC" = 1 ]
ml_check "drain says EIO" grep -q "^slowmediactl: $MNT: drain failed: EIO" "$C_ERR"
ml_check "and names the file" grep -qF "  $LOWER/$(printf "$SHOWN"): EIO (" "$C_ERR"

slowdev_ctl "$C_SD" clear
ml_check_here "the retry succeeds once the fault is cleared" c_wait_json "$MNT" \
	"m['errors'] == 0 and m['file_errors'] == []" 20
c_expect "drain after the recovery" 0 "" drain "$MNT" --timeout 30 --quiet
cp "$ML_TMP/v0" "$ML_TMP/expect"
dd if="$ML_TMP/v1" of="$ML_TMP/expect" conv=notrunc status=none
ml_check "the lower file holds the overwrite" cmp "$ML_TMP/expect" "$LOWER/$NAME"
ml_alive "$MNT"
ml_stop "$MNT" allow-errors
ml_finish
