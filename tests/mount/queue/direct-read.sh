#!/bin/bash
# O_DIRECT reads stay single reads of the medium: slowmedia opens the lower
# file without O_DIRECT (queued writes need no alignment), so it turns the
# lower's readahead off for such opens; otherwise a random read next to a
# cached page starts readahead, an extra request the next read waits behind
# on a slow drive. Probe: what one 64 KiB O_DIRECT read through the mount
# leaves in the lower file's page cache (fincore). A buffered read through the
# mount is the control: its readahead shows up there.
# usage: direct-read.sh SLOWMEDIA QIO
SLOWMEDIA=$1 QIO=$2
. "$(dirname "$0")/qlib.sh"
command -v fincore >/dev/null || q_skip "needs fincore (util-linux)"
command -v python3 >/dev/null || q_skip "needs python3"
q_setup_ext2 64
"$QIO" gen "$LOWER/f" 8M 61 >/dev/null
sync -f "$LOWER"
q_start "$LOWER" "$MNT"

evict() { # drop the lower file's pages from the page cache
	python3 -c 'import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$LOWER/f"
}
resident() { # bytes of the lower file in the page cache
	fincore --bytes --noheadings --output RES "$LOWER/f" | tr -d ' '
}

evict
q_check "control: evicted" [ "$(resident)" = 0 ]
dd if="$MNT/f" of=/dev/null bs=64K count=1 status=none
buffered=$(resident)
q_log "a buffered 64 KiB read through the mount left $buffered bytes cached"
q_check "control: a buffered read reads ahead" [ "$buffered" -gt 65536 ]

evict
dd if="$MNT/f" of=/dev/null bs=64K count=1 iflag=direct status=none
direct=$(resident)
q_log "an O_DIRECT 64 KiB read through the mount left $direct bytes cached"
q_check "an O_DIRECT read reads no more than asked" [ "$direct" -le 65536 ]
# Next to a cached page, where the kernel would guess a sequential stream.
dd if="$MNT/f" of=/dev/null bs=64K count=1 skip=1 iflag=direct status=none
direct=$(resident)
q_check "nor does the next one after it ($direct bytes cached)" [ "$direct" -le 131072 ]
q_check "the data read is right" cmp <(dd if="$MNT/f" bs=64K count=2 iflag=direct status=none) \
	<(dd if="$LOWER/f" bs=64K count=2 status=none)

q_alive "$MNT"
q_stop "$MNT"
q_finish
