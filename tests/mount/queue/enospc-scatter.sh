#!/bin/bash
# ENOSPC at write time for scattered writes, where the bytes queued are far
# fewer than the blocks they take: a small medium, writes far apart until
# ENOSPC, then:
#  - ENOSPC came from write() (not from fsync or close afterwards);
#  - after the drain and exit, every acknowledged write is on the medium,
#    byte for byte, and the daemon logged no failed or lost data.
# FSTYPE ext2: 4 MiB, 4 KiB blocks; one-byte writes 4 KiB apart (each takes a
#   block), then 4 KiB writes 1 MiB apart (each also takes an indirect block).
# FSTYPE vfat: 8 MiB through fusefat, 32 KiB clusters (fusefat's statvfs says
#   1 KiB blocks); files of 4 KiB, each taking a cluster. (fusefat answers EPERM for a full medium.)
# usage: enospc-scatter.sh SLOWMEDIA QIO FSTYPE
SLOWMEDIA=$1 QIO=$2 FSTYPE=$3
. "$(dirname "$0")/qlib.sh"
case $FSTYPE in
ext2) q_require mkfs.ext2 python3 ;;
vfat) q_require mkfs.vfat fusefat python3 ;;
*) echo "usage: $0 SLOWMEDIA QIO ext2|vfat"; exit 2 ;;
esac
q_init

IMG=$Q_TMP/medium.img LOWER=$Q_TMP/lower MNT=$Q_TMP/mnt
mkdir -p "$LOWER"
lower_up() {
	if [ "$FSTYPE" = ext2 ]; then
		mount -t ext2 "$LOOP" "$LOWER"
		return
	fi
	fusefat -f -o rw+ "$LOOP" "$LOWER" </dev/null >/dev/null 2>>"$Q_TMP/fusefat.log" &
	FATPID=$!
	for ((t = 0; t < 100; t++)); do
		mountpoint -q "$LOWER" && return 0
		kill -0 "$FATPID" 2>/dev/null || break
		sleep 0.1
	done
	return 1
}
lower_down() { # until fusefat has written the device and exited
	umount "$LOWER" || umount -l "$LOWER"
	if [ -n "${FATPID:-}" ]; then
		for ((t = 0; t < 100; t++)); do
			kill -0 "$FATPID" 2>/dev/null || break
			sleep 0.1
		done
		kill "$FATPID" 2>/dev/null
		FATPID=""
	fi
}
if [ "$FSTYPE" = ext2 ]; then
	truncate -s 4M "$IMG"
	mkfs.ext2 -q -F -m 0 -b 4096 "$IMG" >/dev/null || { echo "mkfs.ext2 failed"; exit 1; }
else
	truncate -s 8M "$IMG"
	mkfs.vfat -s 64 "$IMG" >/dev/null || { echo "mkfs.vfat failed"; exit 1; }
fi
LOOP=$(losetup -f --show "$IMG") || q_skip "no free loop device"
q_on_exit "losetup -d '$LOOP'"
lower_up || { echo "cannot mount the $FSTYPE medium"; cat "$Q_TMP/fusefat.log" 2>/dev/null; exit 1; }
q_on_exit 'mountpoint -q "$LOWER" && lower_down'
# Paced, so data is still queued when space runs out: on vfat by bytes
# (whole small files), on ext2 behind one big file (one-byte chunks cost the
# token bucket next to nothing).
if [ "$FSTYPE" = ext2 ]; then RATE=256K HOLD=$((512 << 10)); else RATE=128K HOLD=4096; fi
q_start "$LOWER" "$MNT" rate=$RATE

# The writer: after a big write (see there), each phase writes LEN bytes at OFF, OFF+STRIDE... (one file, or
# a new file per write with "new") until ENOSPC, then fsyncs and closes. It
# prints each acknowledged write as "ack PATH OFF LEN SEED" and each
# fsync/close error; data is a pattern of (seed, offset).
WRITER=$Q_TMP/writer.py
cat >"$WRITER" <<'EOF'
import errno, os, sys

def pat(seed, off, n):
    return bytes(((seed * 131 + (off + i) * 7 + ((off + i) >> 12)) & 0xFF) for i in range(n))

mnt, hold, phases = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
# First one big write, which keeps the paced flusher busy: the scattered
# writes' chunks (one per extent) go out only between its chunks, so they
# pile up in the queue.
hfd = os.open(mnt + "/hold", os.O_WRONLY | os.O_CREAT, 0o644)
print("ack hold 0 %d 7" % os.pwrite(hfd, pat(7, 0, hold), 0))
for k, ph in enumerate(phases):
    mode, off0, stride, length, limit = ph.split(":")
    off0, stride, length, limit = int(off0), int(stride), int(length), int(limit)
    fds, err, acked = {}, None, 0
    for i in range(limit):
        if mode == "new":
            path, off = "%s/p%d-%d" % (mnt, k, i), off0
        else:
            path, off = "%s/p%d" % (mnt, k), off0 + i * stride
        seed = k * 1000 + i
        try:
            if path not in fds:
                fds[path] = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
            n = os.pwrite(fds[path], pat(seed, off, length), off)
        except OSError as e:
            err = e.errno
            break
        print("ack %s %d %d %d" % (os.path.basename(path), off, n, seed))
        acked += 1
        if n < length:
            err = "short"
            break
    print("phase %d: %d writes acknowledged, then %s" %
          (k, acked, errno.errorcode.get(err, err) if err else "no error"))
    for path, fd in fds.items():
        for what, fn in (("fsync", os.fsync), ("close", os.close)):
            try:
                fn(fd)
            except OSError as e:
                print("late %s %s %s" % (what, os.path.basename(path), errno.errorcode[e.errno]))
os.close(hfd)
EOF

# The first phase stops short of the medium's size, the second fills it.
if [ "$FSTYPE" = ext2 ]; then
	phases=(same:0:4096:1:300 same:0:4194304:4096:3000)
else
	# One-byte files, each a whole cluster. (Not writes past the end:
	# fusefat refuses every other one that leaves a gap, full or not.)
	phases=(new:0:0:4096:40 new:0:0:4096:3000)
fi
# fusefat says EPERM where the kernel's vfat says ENOSPC: the medium's answer.
FULL=ENOSPC
[ "$FSTYPE" = vfat ] && FULL="(ENOSPC|EPERM)"

out=$(python3 "$WRITER" "$MNT" "$HOLD" "${phases[@]}" 2>&1)
echo "$out" | grep -v '^ack' | sed 's/^/# /'
echo "$out" | grep '^ack' >"$Q_TMP/acked"
q_log "$(wc -l <"$Q_TMP/acked") writes acknowledged in all"
q_check "phase 0 wrote all it meant to" grep -q "^phase 0: .* then no error" <<<"$out"
q_check "phase 1 ended with $FULL at write()" grep -Eq "^phase 1: .* then $FULL" <<<"$out"

q_check "no error at fsync or close after acknowledged writes" \
	bash -c "! grep -q '^late' <<<\"\$1\"" - "$out"

q_alive "$MNT"
q_stop "$MNT" allow-errors
q_check "the daemon reported no failed or lost data" \
	bash -c "! grep -Ei 'failed|lost|could not' '$ML_LOG'"

# Read the medium itself: remount it (fusefat wrote it out at its exit).
lower_down
lower_up || { q_fail "cannot mount the medium again"; q_finish; }
q_check "every acknowledged write is on the medium, byte for byte" \
	python3 - "$LOWER" "$Q_TMP/acked" <<'EOF'
import sys
sys.path.insert(0, "")
lower, acked = sys.argv[1], sys.argv[2]
def pat(seed, off, n):
    return bytes(((seed * 131 + (off + i) * 7 + ((off + i) >> 12)) & 0xFF) for i in range(n))
bad = 0
files = {}
for line in open(acked):
    _, name, off, n, seed = line.split()
    off, n, seed = int(off), int(n), int(seed)
    if name not in files:
        try:
            files[name] = open("%s/%s" % (lower, name), "rb").read()
        except OSError as e:
            print("# %s: %s" % (name, e)); files[name] = b""
    got = files[name][off:off + n]
    if got != pat(seed, off, n):
        bad += 1
        if bad <= 5:
            print("# %s: %d bytes at %d differ (have %d bytes there)" % (name, n, off, len(got)))
print("# %d acknowledged writes missing or wrong" % bad)
sys.exit(1 if bad else 0)
EOF
q_finish
