#!/bin/bash
# Backpressure: with queue=1M and rate=1M, writing 8 MiB blocks the writer
# once the queue is full, so the write takes about (8 - 1) MiB / 1 MiB/s = 7 s
# (within 25%), and at the end at most queue= bytes are still to be flushed.
# usage: backpressure.sh SLOWMEDIA QIO
SLOWMEDIA=$1 QIO=$2
. "$(dirname "$0")/qlib.sh"
q_setup_tmpfs
q_start "$LOWER" "$MNT" queue=1M,rate=1M

out=$("$QIO" create "$MNT/big" write=ok 8M 51 close=ok)
q_check "8 MiB written" [ $? = 0 ]
echo "$out" | sed 's/^/  /'
secs=$(echo "$out" | awk '$1 == "write" {sub("secs=", "", $4); print $4}')
lower=$(q_size "$LOWER/big")
q_log "the write took $secs s; the lower file then held $lower bytes"
q_check "the write took 7 s +- 25% ($secs s)" q_between "$secs" 5.25 8.75
q_check "no more than queue= (1 MiB) plus a chunk was left queued" \
	[ "$lower" -ge $(((8 << 20) - (1 << 20) - (256 << 10))) ]

q_alive "$MNT"
q_stop "$MNT"
q_check "the file is complete after the unmount" "$QIO" verify=ok "$LOWER/big" 8M 51
q_check "and no longer" [ "$(q_size "$LOWER/big")" = $((8 << 20)) ]
q_finish
