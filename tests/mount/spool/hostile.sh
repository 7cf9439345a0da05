#!/bin/bash
# spool-hostile: journals made by hand (spool-gen records, then bytes cut
# and flipped) are replayed without harm, and the mount still comes up:
#   - a record whose path walks through a symbolic link planted on the medium
#     (link -> a directory outside it) is refused, never followed: nothing
#     appears outside, its bytes go to the rescue directory and the log says
#     so; a record of a plain path beside it is applied;
#   - a byte flipped in a record with more records after it is damage: the
#     log says so, nothing from it on is applied, the segment is set aside
#     and slowmediactl spool list reports it;
#   - another medium's spool in the same directory is left alone.
# (Paths with "..", absolute ones, huge lengths, bad checksums and torn
# tails are handled by the journal reader itself: test_spool_journal,
# test_spool and the fuzzer. Here segment 3, held after the damage, also
# ends torn: it is kept as it is for recover.)
# usage: hostile.sh SLOWMEDIA QIO SPOOL_GEN SLOWMEDIACTL
SLOWMEDIA=$1 QIO=$2 GEN=${3:-} CTL=${4:-}
. "$(dirname "$0")/../queue/qlib.sh"
q_require mkfs.ext2 blkid
[ -x "$GEN" ] && [ -x "$CTL" ] || { echo "needs spool-gen and slowmediactl"; exit 1; }
q_init
LOWER=$Q_TMP/lower MNT=$Q_TMP/mnt SPOOL=$Q_TMP/spool OUT=$Q_TMP/outside RESCUE=$Q_TMP/rescue
q_ext2 32 "$LOWER"
q_tmpfs "$SPOOL"
chmod 700 "$SPOOL"
mkdir -p "$OUT" "$MNT"
ID=uuid:$(blkid -o value -s UUID "$Q_LOOP")
ln -s "$OUT" "$LOWER/link"
long=$(head -c 3000 /dev/zero | tr '\0' x)

# Segment 1: a plain write and one through the link. Segment 2: three
# records, the middle one to be flipped. Segment 3: a record after the damage.
"$GEN" records "$SPOOL" "$ID" <<EOF2 || q_fail "spool-gen records"
write plain.txt 0 hello from the spool
write link/evil.txt 0 this must not land outside
rotate
write two.txt 0 first
write two.txt 5 $long
write two.txt 3005 third
rotate
write after.txt 0 after the damage
EOF2
"$GEN" records "$SPOOL" "uuid:00000000-1111-4222-8333-444444444444" <<EOF2 || q_fail "spool-gen other"
write other.txt 0 not for this medium
EOF2
MDIR=$(ls -d "$SPOOL"/uuid%3A"${ID#uuid:}")
SEGS=("$MDIR"/*.spj)
q_log "segments: ${SEGS[*]##*/}"
q_check "three segments made" [ ${#SEGS[@]} = 3 ]
# Flip a byte in the middle of segment 2 (inside the long record's payload).
size=$(stat -c %s "${SEGS[1]}")
printf '\x01' | dd of="${SEGS[1]}" bs=1 seek=$((size / 2)) conv=notrunc status=none
# A torn tail on segment 3: half a record more, as a crash leaves it.
head -c 40 "${SEGS[2]}" | tail -c 30 >>"${SEGS[2]}"

q_start "$LOWER" "$MNT" "spool=$SPOOL,rescue=$RESCUE"
grep -v '^ ' "$Q_LOG" | sed 's/^/  | /'
q_check "the mount came up" q_is_mounted "$MNT"
q_check "the plain record is applied" grep -qx "hello from the spool" "$MNT/plain.txt"
q_check "nothing was written through the link" [ -z "$(ls -A "$OUT")" ]
q_check "the refusal is in the log" grep -q "link/evil.txt refused: a symbolic link" "$Q_LOG"
q_check "its bytes are in the rescue directory" \
	grep -rqx "this must not land outside" "$RESCUE"
q_check "the damage is in the log" grep -q "replay stopped at damage" "$Q_LOG"
q_check "nothing from the damage on is applied" [ ! -e "$MNT/after.txt" ]
q_check "the record before the damage is applied" grep -qx "first" "$MNT/two.txt"
q_check "another medium's records are not replayed here" [ ! -e "$MNT/other.txt" ]
q_stop "$MNT" allow-errors
"$CTL" spool list "$SPOOL" | sed 's/^/  list: /'
q_check "spool list reports the damage" grep -qi "damage\|set aside\|held" <("$CTL" spool list "$SPOOL")
q_check "the other medium's spool is untouched" \
	grep -q "not for this medium" <(cat "$SPOOL"/uuid%3A00000000*/*.spj)
q_finish
