#!/bin/bash
# Waits only for what came before them. A close with sync_close (like an
# fsync, which the kernel already serializes with writes to the file) waits
# for the writes made before it, not for those other writers keep adding to
# the same file; and
# SEEK_DATA/SEEK_HOLE answer from the queue's view at once, rather than after
# the whole file reached the medium (cp's SEEK_DATA on a file just written).
# usage: wait-bounds.sh SLOWMEDIA QIO
SLOWMEDIA=$1 QIO=$2
. "$(dirname "$0")/qlib.sh"
command -v python3 >/dev/null || q_skip "needs python3"
q_setup_tmpfs
RATE_K=1024
q_start "$LOWER" "$MNT" "rate=${RATE_K}K,queue=2M,sync_close"

# Two more writers append to f for 15 s, as fast as backpressure lets them,
# so the file always has queued data.
: >"$MNT/f"
APPENDERS=()
for i in 1 2; do
	python3 - "$MNT/f" 15 <<'PY' &
import os, sys, time
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND)
end = time.monotonic() + float(sys.argv[2])
block = b"b" * 65536
while time.monotonic() < end:
    os.write(fd, block)
os.close(fd)
PY
	APPENDERS+=($!)
	q_on_exit "kill $!"
done
sleep 2
t0=$(q_now)
out=$("$QIO" open "$MNT/f" write=ok 256K 7 close=ok)
took=$(q_since "$t0")
echo "$out" | sed 's/^/  /'
q_log "write and sync_close with appenders running: $took s (queue=2M at ${RATE_K}K/s: about 2 s of data before it)"
q_check "the close returned while the appenders still write" kill -0 "${APPENDERS[0]}"
q_check "close waited for what was queued before it, not for the appenders ($took s < 6)" \
	q_between "$took" 0 6
rc=0
for p in "${APPENDERS[@]}"; do
	wait "$p" || rc=$?
done
q_check "the appenders' writes all succeeded" [ "$rc" = 0 ]

q_stop "$MNT"

# A sparse file with queued data only: the lower file has none of it yet.
q_start "$LOWER" "$MNT" "rate=${RATE_K}K,queue=8M"
python3 - "$MNT/s" <<'PY'
import os, sys
fd = os.open(sys.argv[1], os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
os.pwrite(fd, b"x" * (2 << 20), 0)
os.pwrite(fd, b"y" * 4096, 4 << 20)
os.pwrite(fd, b"z" * 100, (8 << 20) + 50)
os.close(fd)
PY
seeks() { # FILE: SEEK_DATA/SEEK_HOLE answers at a few offsets, and their time
	python3 - "$1" <<'PY'
import os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
t0 = time.monotonic()
out = []
for off in (0, 100, (2 << 20), (2 << 20) + 4096, (4 << 20) + 10, (8 << 20), (8 << 20) + 149, (8 << 20) + 150):
    for w, name in ((os.SEEK_DATA, "D"), (os.SEEK_HOLE, "H")):
        try:
            out.append("%s%d=%d" % (name, off, os.lseek(fd, off, w)))
        except OSError as e:
            out.append("%s%d=%s" % (name, off, e.errno))
print(" ".join(out))
print("secs %.3f" % (time.monotonic() - t0))
PY
}
m=$(seeks "$MNT/s")
q_log "through the mount: $m"
q_check "SEEK_DATA/SEEK_HOLE answer without waiting for the medium" \
	q_between "$(sed -n 's/^secs //p' <<<"$m")" 0 1
q_check "the lower file does not hold the data yet (it was queued)" \
	[ "$(q_size "$LOWER/s")" -lt $((8 << 20)) ]
want="D0=0 H0=2097152 D100=100 H100=2097152 D2097152=4194304 H2097152=2097152 D2101248=4194304 H2101248=2101248"
want+=" D4194314=4194314 H4194314=4198400 D8388608=8388608 H8388608=8388758"
want+=" D8388757=8388757 H8388757=8388758 D8388758=6 H8388758=6"
# (filesystems answer in whole pages: 8 MiB + 50 is data from 8 MiB on)
q_check "answers as the file will be (data where written, holes between, ENXIO past the end)" \
	[ "$(head -n 1 <<<"$m")" = "$want" ]
q_stop "$MNT"
l=$(seeks "$LOWER/s" | head -n 1)
q_check "the same answers from the lower file once drained" [ "$l" = "$want" ]
[ "$l" = "$want" ] || echo "  lower: $l"
q_finish
