#!/bin/bash
# Scattered small writes flushed as gathered chunks (flusher.c take_runs,
# chunkio.c chunk_write_runs): with the flushers paused, 4 KiB writes land at
# 600 separate places of a 12 MiB file (a few also overwrite each other),
# the same ones in a native file; resumed, the flushers write them several
# runs to a chunk: status counts gathered chunks, far fewer chunks than
# runs, and the lower file ends byte for byte the native one. Twice: in
# memory, and with spool= and queue=1M, where most writes are kept in the
# journal alone (each run read back into one buffer before the write).
# usage: scatter.sh SLOWMEDIA QIO SLOWMEDIACTL
SLOWMEDIA=$1 QIO=$2 CTL=${3:-}
. "$(dirname "$0")/qlib.sh"
q_require mkfs.ext2 python3
[ -x "$CTL" ] || q_skip "needs slowmediactl"
q_init
LOWER=$Q_TMP/lower MNT=$Q_TMP/mnt SPOOL_FS=$Q_TMP/spoolfs
RUNS=600 FILE_MIB=12
q_ext2 128 "$LOWER"
q_tmpfs "$SPOOL_FS"

# status_field EXPR: a Python expression over the mount's status m.
status_field() {
	"$CTL" status "$MNT" --json | python3 -c "import json, sys; m = json.load(sys.stdin)['mounts'][0]; print($1)"
}

# scatter SEED FILE...: the same RUNS writes of 4 KiB into every FILE, at
# random 4 KiB-aligned places of the first FILE_MIB MiB (a fixed seed).
scatter() {
	python3 - "$RUNS" "$FILE_MIB" "$@" <<'PY'
import os, random, sys
runs, mib, seed, paths = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
rnd = random.Random(seed)
fds = [os.open(p, os.O_WRONLY | os.O_CREAT, 0o644) for p in paths]
blocks = mib * 256
for i in range(runs):
    off = rnd.randrange(blocks) * 4096
    data = bytes([rnd.randrange(1, 256)]) * 4096
    for fd in fds:
        os.pwrite(fd, data, off)
for fd in fds:
    os.close(fd)
PY
}

round() {
	local name=$1 opts=$2 seed=$3 chunks gathered
	q_log "== $name: -o $opts"
	q_start "$LOWER" "$MNT" "$opts"
	"$CTL" pause "$MNT" >/dev/null || q_fail "pause"
	rm -f "$Q_TMP/native"
	scatter "$seed" "$MNT/f-$name" "$Q_TMP/native"
	q_log "$(status_field 'm["queued_bytes"], "bytes queued in", m["queued_files"], "file(s)"')"
	"$CTL" resume "$MNT" >/dev/null || q_fail "resume"
	"$CTL" drain "$MNT" >/dev/null || q_fail "drain"
	chunks=$(status_field 'm["chunks"]')
	gathered=$(status_field 'm["gathered_chunks"]')
	q_log "$name: $chunks chunks, $gathered of them gathered, for $RUNS writes"
	q_check "$name: chunks of several runs were written ($gathered)" [ "${gathered:-0}" -gt 0 ]
	q_check "$name: fewer chunks ($chunks) than a third of the writes" \
		[ "${chunks:-$RUNS}" -lt $((RUNS / 3)) ]
	q_stop "$MNT"
	q_check "$name: the lower file is the native one, byte for byte" \
		cmp "$LOWER/f-$name" "$Q_TMP/native"
}

round memory "" 1
round spool "spool=$SPOOL_FS/spool,queue=1M" 2
q_finish
