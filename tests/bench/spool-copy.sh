#!/usr/bin/env bash
# The spool's copy figures: a big copy through slowmedia with spool= on the
# fast disk and the default queue=64M, to a slow medium, then its drain.
#
# usage: spool-copy.sh [--quick] [--runs N] [--drain-runs N] [--mb N] [--wbps BYTES] [--queue SIZE]
#
# The medium is an ext2 image on a direct-I/O loop device throttled by the
# root cgroup-v1 blkio throttle (tests/lib/media.sh) to --wbps bytes/s of
# writes (2 MB/s, a DVD-RAM's pace, by default; --quick: 256 MiB at 8 MB/s).
# The spool is a directory on /var/tmp, the machine's own disk. Per run:
#   1. the fast disk: dd of MB MiB to /var/tmp with conv=fsync (its write
#      throughput, for the ratio);
#   2. dd of MB MiB (bs=1M) into slowmedia with spool= and queue=: past 7/8
#      of queue= the writes are kept in the journal alone, so the writer
#      runs at the spool disk's pace until spool_max=: its MB/s;
#   3. at once `slowmediactl drain`, timed; what was queued when the copy
#      returned (status: queued_bytes), divided by the medium's bandwidth, is
#      what the drain should take. Only the first --drain-runs runs (1) time
#      it: a 1 GiB drain at 2 MB/s takes 9 minutes; the later runs lift the
#      throttle first, and their drain is not counted;
#   4. the daemon's peak RSS (VmHWM, the whole run's high-water mark) against
#      queue= + 32 MiB; the file on the medium compared with the source.
# The table: median [min-max] of the runs.
#
# Root only (loop device, blkio throttle); exits 77 otherwise or without
# /dev/fuse. Everything is undone on exit.
set -u -o pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
: "${SLOWMEDIA_BUILD:=$top/build}"
slowmedia=$SLOWMEDIA_BUILD/fusefs/slowmedia
ctl=$SLOWMEDIA_BUILD/mount-helpers/slowmediactl
runs=3 drain_runs=1 mb=1024 wbps=2000000 queue=64M
orig_args=("$@")
usage="usage: $0 [--quick] [--runs N] [--drain-runs N] [--mb N] [--wbps BYTES] [--queue SIZE]"
while [ $# -gt 0 ]; do
	case $1 in
	--quick) mb=256 wbps=8000000 ;;
	--runs) runs=$2; shift ;;
	--drain-runs) drain_runs=$2; shift ;;
	--mb) mb=$2; shift ;;
	--wbps) wbps=$2; shift ;;
	--queue) queue=$2; shift ;;
	*) echo "$usage" >&2; exit 2 ;;
	esac
	shift
done
case $queue in
*[Mm]) queue_mib=${queue%[Mm]} ;;
*[Gg]) queue_mib=$((${queue%[Gg]} * 1024)) ;;
*) echo "--queue: give it in M or G (e.g. 64M)" >&2; exit 2 ;;
esac
# shellcheck source=spool-lib.sh
. "$here/spool-lib.sh"
spool_bench_init "$0" "${orig_args[@]}"

json_u() { grep -o "\"$1\": *[0-9]*" | head -n 1 | grep -o '[0-9]*$'; }

declare -a fast wr ratio queued drain expect dratio rss
for ((r = 1; r <= runs; r++)); do
	media_loop_up med $((mb + 512)) ext2 "$W/lower" >/dev/null || exit 1
	media_throttle med "$wbps" $((wbps * 2)) || exit 1
	rm -rf "${W:?}/spool"/*
	fast+=("$(fast_disk_mbps)")
	"$slowmedia" "$W/lower" "$W/mnt" -f -o "spool=$W/spool,queue=$queue,arbiter=off" \
		2>"$W/log.$r" &
	pid=$!
	for _ in $(seq 100); do is_mounted "$W/mnt" && break; sleep 0.1; done
	t0=$(now); dd if="$W/src" of="$W/mnt/copy" bs=1M status=none; t1=$(now)
	st=$("$ctl" status "$W/mnt" --json)
	q=$(json_u queued_bytes <<<"$st")
	((r > drain_runs)) && media_unthrottle med
	t2=$(now)
	"$ctl" drain "$W/mnt" --quiet
	t3=$(now)
	hwm=$(awk '/^VmHWM:/ {print $2}' "/proc/$pid/status")
	wr+=("$(echo "$mb / ($t1 - $t0)" | bc -l)")
	ratio+=("$(echo "${wr[-1]} / ${fast[-1]}" | bc -l)")
	queued+=("$(echo "$q / 1048576" | bc -l)")
	rss+=("$(echo "$hwm / 1024" | bc -l)")
	d="not timed (throttle lifted)"
	if ((r <= drain_runs)); then
		drain+=("$(echo "$t3 - $t2" | bc -l)")
		expect+=("$(echo "$q / $wbps" | bc -l)")
		dratio+=("$(echo "($t3 - $t2) / ($q / $wbps)" | bc -l)")
		d="$(printf %.1f "${drain[-1]}") s (expected $(printf %.1f "${expect[-1]}") s)"
	fi
	echo "# run $r: writer $(printf %.1f "${wr[-1]}") MB/s, fast disk $(printf %.1f "${fast[-1]}") MB/s," \
		"queued $(printf %.1f "${queued[-1]}") MiB at the copy's end, drain $d," \
		"peak RSS $(printf %.1f "${rss[-1]}") MiB"
	umount "$W/mnt"; wait "$pid"; pid=
	media_unthrottle med # the check reads the medium
	cmp -s "$W/src" "$W/lower/copy" || { echo "run $r: the medium's copy differs from the source"; exit 1; }
	media_loop_down med
done
printf '\n## spool: a %d MiB copy to a %.1f MB/s medium, spool= on the fast disk, queue=%s (%d runs)\n\n' \
	"$mb" "$(echo "$wbps / 1000000" | bc -l)" "$queue" "$runs"
echo "| figure | median [min-max] | target |"
echo "| --- | --- | --- |"
echo "| fast disk write (dd conv=fsync), MB/s | $(printf '%s\n' "${fast[@]}" | med) | |"
echo "| writer through slowmedia with spool=, MB/s | $(printf '%s\n' "${wr[@]}" | med) | |"
echo "| writer / fast disk | $(printf '%s\n' "${ratio[@]}" | med) | >= 0.50 |"
echo "| queued when the copy returned, MiB | $(printf '%s\n' "${queued[@]}" | med) | |"
if ((${#drain[@]})); then
	echo "| drain, s (${#drain[@]} run(s)) | $(printf '%s\n' "${drain[@]}" | med) | |"
	echo "| drain / (queued / bandwidth) | $(printf '%s\n' "${dratio[@]}" | med) | <= 1.05 |"
fi
echo "| daemon peak RSS (VmHWM), MiB | $(printf '%s\n' "${rss[@]}" | med) | <= $((queue_mib + 32)) |"
