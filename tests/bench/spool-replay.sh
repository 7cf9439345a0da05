#!/usr/bin/env bash
# The spool at work: a copy to a slow medium through slowmedia with spool=,
# the daemon killed with kill -9 the moment the copy returns, and the next
# mount's replay.
#
# usage: spool-replay.sh [--quick] [--runs N] [--mb N] [--wbps BYTES] [--queue SIZE]
#
# The medium is an ext2 image on a direct-I/O loop device throttled by the
# root cgroup-v1 blkio throttle (tests/lib/media.sh) to --wbps bytes/s of
# writes (8 MB/s: a DVD-RAM's 2 MB/s would take minutes per run). The spool
# is a directory on /var/tmp, the machine's own disk. Per run:
#   1. the fast disk: dd of MB MiB to /var/tmp with conv=fsync (its write
#      throughput, for the ratio);
#   2. dd of MB MiB into a mount without spool= (queue= MB+16 MiB): the
#      writer's throughput with the queue alone; then the same into a mount
#      with spool= and queue= --queue (64M, the default: past 7/8 of it the
#      writes are kept in the journal alone, so the whole copy is
#      acknowledged at the spool disk's pace and the spool holds all of it),
#      then at once kill -9 of the daemon and a lazy unmount: the writer's
#      throughput, and what the spool holds;
#   3. the daemon started again: the time until the mount is there (the
#      replay puts the spool on the medium first), then the time until a
#      drain through slowmediactl returns; the file is compared with the
#      source.
# The table: median [min-max] of the runs; the replay's pace as a share of
# the medium's throttled bandwidth.
#
# Root only (loop device, blkio throttle); exits 77 otherwise or without
# /dev/fuse. Everything is undone on exit.
set -u -o pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
: "${SLOWMEDIA_BUILD:=$top/build}"
slowmedia=$SLOWMEDIA_BUILD/fusefs/slowmedia
ctl=$SLOWMEDIA_BUILD/mount-helpers/slowmediactl
runs=3 mb=256 wbps=8000000 queue=64M
orig_args=("$@")
while [ $# -gt 0 ]; do
	case $1 in
	--quick) runs=1 mb=64 ;;
	--runs) runs=$2; shift ;;
	--mb) mb=$2; shift ;;
	--wbps) wbps=$2; shift ;;
	--queue) queue=$2; shift ;;
	*) echo "usage: $0 [--quick] [--runs N] [--mb N] [--wbps BYTES] [--queue SIZE]" >&2; exit 2 ;;
	esac
	shift
done
# shellcheck source=spool-lib.sh
. "$here/spool-lib.sh"
spool_bench_init "$0" "${orig_args[@]}"

# copy_and_kill OPTS NAME LOG: mount with OPTS, copy the source to NAME,
# kill -9 the daemon at once and detach its mount; the writer's MB/s in
# MBPS (not a subshell: the cleanup must know $pid meanwhile).
copy_and_kill() {
	local t0 t1
	"$slowmedia" "$W/lower" "$W/mnt" -f -o "$1" 2>"$3" &
	pid=$!
	for _ in $(seq 100); do is_mounted "$W/mnt" && break; sleep 0.1; done
	t0=$(now); dd if="$W/src" of="$W/mnt/$2" bs=1M status=none; t1=$(now)
	kill -9 "$pid"; wait "$pid" 2>/dev/null; pid=
	umount -l "$W/mnt"
	MBPS=$(echo "$mb / ($t1 - $t0)" | bc -l)
}

declare -a fast wr nospool mount_s drain_s pending pace
for ((r = 1; r <= runs; r++)); do
	media_loop_up med 2048 ext2 "$W/lower" >/dev/null || exit 1
	media_throttle med "$wbps" $((wbps * 2)) || exit 1
	rm -rf "${W:?}/spool"/*
	fast+=("$(fast_disk_mbps)")
	copy_and_kill "queue=$((mb + 16))M,arbiter=off" nospool /dev/null
	nospool+=("$MBPS")
	copy_and_kill "spool=$W/spool,queue=$queue,arbiter=off" copy "$W/log.$r.1"
	wr+=("$MBPS")
	p=$(du -sb "$W/spool" | awk '{print $1}')
	pending+=("$(echo "$p / 1048576" | bc -l)")
	t0=$(now)
	"$slowmedia" "$W/lower" "$W/mnt" -f -o "spool=$W/spool,arbiter=off" 2>"$W/log.$r.2" &
	pid=$!
	for _ in $(seq 6000); do is_mounted "$W/mnt" && break; sleep 0.05; done
	t1=$(now)
	mount_s+=("$(echo "$t1 - $t0" | bc -l)")
	pace+=("$(echo "($p / ($t1 - $t0)) / $wbps" | bc -l)")
	"$ctl" drain "$W/mnt" >/dev/null 2>&1
	t2=$(now)
	drain_s+=("$(echo "$t2 - $t1" | bc -l)")
	cmp -s "$W/src" "$W/mnt/copy" || { echo "run $r: the copy differs from the source after the replay"; cat "$W/log.$r.2"; exit 1; }
	umount "$W/mnt"; wait "$pid"; pid=
	grep 'spool replay:' "$W/log.$r.2" | sed "s/^/# run $r: /"
	media_loop_down med
done
printf '\n## spool: kill -9 after a %d MiB copy to a %d MB/s medium (spool mount: queue=%s), then the replay (%d runs)\n\n' \
	"$mb" $((wbps / 1000000)) "$queue" "$runs"
echo "| figure | median [min-max] |"
echo "| --- | --- |"
echo "| fast disk write (dd conv=fsync), MB/s | $(printf '%s\n' "${fast[@]}" | med) |"
echo "| writer through slowmedia without spool (queue= $((mb + 16))M), MB/s | $(printf '%s\n' "${nospool[@]}" | med) |"
echo "| writer through slowmedia with spool=, MB/s | $(printf '%s\n' "${wr[@]}" | med) |"
echo "| with spool / without | $(for i in "${!wr[@]}"; do echo "${wr[$i]} / ${nospool[$i]}" | bc -l; done | med) |"
echo "| writer / fast disk | $(for i in "${!wr[@]}"; do echo "${wr[$i]} / ${fast[$i]}" | bc -l; done | med) |"
echo "| spool at the kill, MiB | $(printf '%s\n' "${pending[@]}" | med) |"
echo "| time to mount again (the replay), s | $(printf '%s\n' "${mount_s[@]}" | med) |"
echo "| replay pace / medium bandwidth | $(printf '%s\n' "${pace[@]}" | med) |"
echo "| drain after the mount, s | $(printf '%s\n' "${drain_s[@]}" | med) |"
