#!/bin/bash
# spool-refuse: a spool directory that cannot be trusted or used is refused
# with a message naming the problem, and nothing is mounted: writable by
# others or by its group, owned by another user, a symbolic link (even to a
# good directory), on the medium itself, a missing parent, in use by another
# process (its lock held), a file; spool_sync= and spool_max= without
# spool=; a rescue= directory writable by others, another user's, or a
# symbolic link. A spool directory that does not exist yet (its parent does) is
# made, 0700, and the mount comes up; what the daemon puts in it (journal
# segments, the lock, the medium's directory) is owner-only too.
# usage: refuse.sh SLOWMEDIA QIO SPOOL_GEN
SLOWMEDIA=$1 QIO=$2 GEN=${3:-}
. "$(dirname "$0")/../queue/qlib.sh"
q_require
q_init
LOWER=$Q_TMP/lower MNT=$Q_TMP/mnt
q_tmpfs "$LOWER"
mkdir -p "$MNT"
FAST=$Q_TMP/fast
q_tmpfs "$FAST" # another filesystem than the lower: a fast disk

# refused WHAT OPTS PATTERN: the daemon exits non-zero, says PATTERN, and
# nothing is mounted.
refused() {
	local what=$1 opts=$2 pat=$3 out=$Q_TMP/out rc
	timeout 20 "$SLOWMEDIA" "$LOWER" "$MNT" -f -o "$opts" >"$out" 2>&1
	rc=$?
	sed 's/^/  | /' "$out"
	q_check "$what: refused (exit $rc)" [ "$rc" -ne 0 -a "$rc" -ne 124 ]
	q_check "$what: the message says why" grep -q -- "$pat" "$out"
	q_check "$what: nothing mounted" sh -c "! awk -v m='$MNT' '\$2 == m {f = 1} END {exit !f}' /proc/mounts"
}

mkdir -m 0777 "$FAST/open"
refused "world-writable" "spool=$FAST/open" "writable by others"
mkdir -m 0770 "$FAST/group"
refused "group-writable" "spool=$FAST/group" "writable by others"
mkdir -m 0700 "$FAST/theirs"
chown nobody "$FAST/theirs"
refused "owned by another user" "spool=$FAST/theirs" "owned by uid $(id -u nobody)"
mkdir -m 0700 "$FAST/good"
ln -s "$FAST/good" "$FAST/link"
refused "a symbolic link to a good directory" "spool=$FAST/link" "not a directory"
mkdir -m 0700 "$LOWER/spool"
refused "on the medium" "spool=$LOWER/spool" "on the medium itself"
refused "missing parent" "spool=$FAST/no/such" "parent $FAST/no is not a directory"
touch "$FAST/file"
refused "a file" "spool=$FAST/file" "not a directory"
refused "spool_sync without spool" "spool_sync=10" "spool_sync= needs spool=DIR"
# The rescue directory likewise (with or without a spool): another user who
# may write it could move or delete what a failing exit saves there.
refused "rescue= writable by others" "rescue=$FAST/open" "rescue=$FAST/open: writable by others"
refused "rescue= owned by another user" "rescue=$FAST/theirs" "owned by uid $(id -u nobody)"
refused "rescue= a symbolic link" "rescue=$FAST/link" "rescue=$FAST/link: not a directory"
refused "spool_max without spool" "spool_max=1G" "spool_max= needs spool=DIR"

# In use: the lock of this medium's spool held by another process.
q_start "$LOWER" "$MNT" "spool=$FAST/mine,spool_sync=0"
q_check "a missing spool directory is made, mode 0700" \
	[ "$(stat -c %a "$FAST/mine")" = 700 ]
q_check "a write journaled" q_quiet "$QIO" create "$MNT/f" write=ok 64K 3 close=ok
find "$FAST/mine" -printf '  %M %u %p\n'
q_check "everything in the spool is owner-only (no group or other bits), root's" \
	[ -z "$(find "$FAST/mine" \( -perm /077 -o ! -user root \) -print)" ]
ID=$(sed -n 's/.*spool=[^:]*: medium \([^ ,]*\).*/\1/p' "$Q_LOG" | head -1)
q_log "the medium is $ID"
q_stop "$MNT"
if [ -x "$GEN" ] && [ -n "$ID" ]; then
	"$GEN" hold "$FAST/mine" "$ID" "$Q_TMP/held" &
	HOLDER=$!
	q_on_exit "kill $HOLDER"
	for _ in $(seq 50); do [ -e "$Q_TMP/held" ] && break; sleep 0.1; done
	refused "in use" "spool=$FAST/mine" "in use"
	kill "$HOLDER"
	wait "$HOLDER" 2>/dev/null
else
	q_fail "no spool-gen or no medium id in the log"
fi
q_finish
