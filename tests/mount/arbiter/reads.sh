#!/bin/bash
# Reads of one medium between another's chunks. Two ext2 media behind one
# slowdev head (one group). Medium A is written continuously; reads of
# uncached data on medium B (O_DIRECT through the mount: one medium read
# each, no readahead, READ_MB MiB each, PAUSE_S apart, so each one is a new
# burst) are timed. With the arbiter, B's reads hold the group: a read waits
# at most for the chunk of A in flight when it came, about one chunk (A's
# average chunk from its status, at the medium's write bandwidth). With
# arbiter=off on both, A's flusher knows nothing of B's reads and its chunks
# keep coming between the medium requests of one read: the same reads wait
# longer, and this is checked too (with the arbiter they wait less in all,
# by more than a chunk). A wait is a read's time less the best time of the
# same reads with A quiet.
# usage: reads.sh SLOWMEDIA ARBITERD SLOWDEV
SLOWMEDIA=$1 ARBITERD=$2 SLOWDEV=${3:-}
. "$(dirname "$0")/alib.sh"
a_setup

READ_MB=2 NREADS=4 PAUSE_S=0.3 WARMUP_S=2 WRITE_BW=1000000
SLACK_MS=60 # what a loaded machine adds to one read (FUSE, loop, scheduling)

# B's files, written straight to its lower while the medium is fast, then
# dropped from the page cache: every read through the mount reaches slowdev.
a_fast
a_gen "$LB/base" $((2 * READ_MB))
a_gen "$LB/auto" $((NREADS * READ_MB))
a_gen "$LB/off" $((NREADS * READ_MB))
sync -f "$LB"
for f in base auto off; do
	"$A_PY" -c 'import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$LB/$f"
done
slowdev_ctl "$A_SD" "fast off"

# reads FILE COUNT: time COUNT reads of READ_MB MiB of B's FILE; sets WAITS
# (ms each, less BASE_MS), WAIT_MAX and WAIT_SUM.
reads() {
	local out
	out=$("$A_PY" "$A_TOOL" readtime "$MB/$1" $((READ_MB << 20)) "$2" "$PAUSE_S") ||
		{ ml_fail "reads of $1: $out"; return 1; }
	WAITS=$(awk -v b="${BASE_MS:-0}" '{ printf "%d ", $3 * 1000 - b }' <<<"$out")
	WAIT_MAX=$(tr ' ' '\n' <<<"$WAITS" | sort -n | tail -n 1)
	WAIT_SUM=$(tr ' ' '\n' <<<"$WAITS" | awk '{ s += $1 } END { print s + 0 }')
}

# phase MODE FILE: both mounts with arbiter=MODE, A written, B's FILE read.
phase() {
	local mode=$1 file=$2 a0 a1 q0 q1 bytes chunks
	a_start "$LA" "$MA" "arbiter=$mode,queue=$A_QUEUE"
	a_start "$LB" "$MB" "arbiter=$mode,queue=$A_QUEUE"
	if [ "$mode" = auto ]; then
		ml_check_here "A registered" a_wait_field "$MA" arbiter connected 5
		ml_check_here "B registered" a_wait_field "$MB" arbiter connected 5
		# B with A quiet: the time the reads take without waiting.
		reads base 2
		BASE_MS=$(tr ' ' '\n' <<<"$WAITS" | grep . | sort -n | head -n 1)
		ml_log "reads of $READ_MB MiB with A quiet: $WAITS ms"
	fi
	a_writer "$MA" "f-$mode" 40
	sleep "$WARMUP_S"
	a0=$(a_written a) q0=$(a_field "$MA" queued_bytes)
	reads "$file" "$NREADS"
	a1=$(a_written a) q1=$(a_field "$MA" queued_bytes)
	bytes=$(a_field "$MA" written_bytes) chunks=$(a_field "$MA" chunks)
	CHUNK_MS=$(awk -v b="$bytes" -v c="$chunks" -v bw="$WRITE_BW" 'BEGIN { printf "%d", c ? 1000 * b / c / bw : 0 }')
	ml_log "arbiter=$mode: B's reads waited $WAITS ms (A's chunks: $CHUNK_MS ms on average; A wrote $((a1 - a0)) bytes meanwhile)"
	ml_check "arbiter=$mode: A was busy all along (queued $q0 and $q1 bytes)" [ "$q0" -gt 0 -a "$q1" -gt 0 ]
	a_kill_writers
	a_fast
	ml_stop "$MA"
	ml_stop "$MB"
	slowdev_ctl "$A_SD" "fast off"
}

phase auto auto
auto_max=$WAIT_MAX auto_sum=$WAIT_SUM auto_chunk=$CHUNK_MS
bound=$((auto_chunk + SLACK_MS))
ml_check "with the arbiter, each read waited at most about one chunk of A ($auto_max ms, bound $bound ms)" \
	[ "$auto_chunk" -gt 0 -a "$auto_max" -le "$bound" ]

phase off off
ml_log "reads waited $auto_sum ms in all with the arbiter, $WAIT_SUM ms with arbiter=off"
ml_check "with the arbiter the reads waited less, by more than a chunk ($auto_sum ms, against $WAIT_SUM ms off)" \
	[ $((auto_sum + auto_chunk)) -lt "$WAIT_SUM" ]
ml_finish
