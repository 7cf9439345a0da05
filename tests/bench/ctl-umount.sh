#!/usr/bin/env bash
# The control socket's and the umount helper's figures (issue "Using
# slowmedia like a disk", Numbers):
#   1. `slowmediactl status` (every mount) with 8 busy mounts: median and p99
#      answer time, target < 50 ms;
#   2. `umount DIR` through the helper after a writer stops, on a 2 MB/s
#      medium (slowdev, mo profile, ext2): its time vs queued bytes /
#      bandwidth + 2 s, with the data checked on the image right after; the
#      raw kernel's umount of the same write for comparison.
# Real mount(8)/umount(8) in a private namespace (the helpers are put on
# /usr/sbin there, as in tests/mount/helpers). Root only (exit 77 else).
#   tests/bench/ctl-umount.sh [--quick]     (SLOWMEDIA_BUILD=DIR: another build)
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=${SLOWMEDIA_BUILD:-$here/../../build}
quick=0
[ "${1:-}" = --quick ] && quick=1
if [ ! -x "$build/fusefs/slowmedia" ] || [ ! -x "$build/mount-helpers/slowmediactl" ]; then
	echo "ctl-umount: no build at $build: run 'bash tests/build.sh' first" >&2
	exit 1
fi
SLOWMEDIA=$build/fusefs/slowmedia HELPERS=$build/mount-helpers
CTL=$build/mount-helpers/slowmediactl
MOUNT_LIB=$here/../lib/mount-lib.sh
source "$here/../mount/helpers/hlib.sh"
h_setup
export SLOWDEV_BIN=$build/tests/slowdev/slowdev
source "$here/../slowdev/slowdev-media.sh"

RUNS=$((quick ? 1 : 3)) PROBES=$((quick ? 30 : 100)) MB=$((quick ? 10 : 20))

# stats: median and p99 of the numbers on stdin (one per line).
stats() {
	sort -g | awk '{v[NR] = $1} END {i = int(NR * 0.99 + 0.999); if (i > NR) i = NR;
		printf "%.1f %.1f", (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2), v[i]}'
}

echo "## 1. slowmediactl status, 8 busy mounts"
pids=()
for i in 1 2 3 4 5 6 7 8; do
	mkdir -p "$ML_TMP/l$i" "$ML_TMP/m$i"
	mount -t tmpfs -o size=256M "l$i" "$ML_TMP/l$i"
	ml_on_exit "umount -l '$ML_TMP/l$i'"
	ml_start "$ML_TMP/l$i" "$ML_TMP/m$i" -o rate=1M,queue=8M,arbiter=off
	# A writer that never stops: the mount stays busy (backpressure).
	(while :; do dd if=/dev/zero of="$ML_TMP/m$i/f" bs=1M count=64 2>/dev/null; done) &
	pids+=($!)
done
ml_on_exit "kill ${pids[*]}"
sleep 2
for ((r = 0; r < PROBES; r++)); do
	t0=$EPOCHREALTIME
	"$CTL" status >/dev/null || echo "status failed" >&2
	awk -v s="$(ml_since "$t0")" 'BEGIN {print s * 1000}'
done >"$ML_TMP/status.ms"
busy=$("$CTL" status --json | python3 -c 'import json,sys
m=json.load(sys.stdin)["mounts"]; print("%d of %d" % (sum(1 for x in m if x["queued_bytes"] > 0), len(m)))')
read -r med p99 < <(stats <"$ML_TMP/status.ms")
echo "status of every mount ($busy mounts busy, $PROBES calls): median $med ms, p99 $p99 ms (target < 50 ms)"
kill "${pids[@]}" 2>/dev/null
for i in 1 2 3 4 5 6 7 8; do
	umount -l "$ML_TMP/m$i" 2>/dev/null
done

echo "## 2. umount after the writer stops ($MB MiB, 2 MB/s medium)"
medium=bctl-$$
slowdev_up "$medium" 128 mo ext2 "$ML_TMP/sd" || { echo "slowdev did not come up"; exit 1; }
ml_on_exit "slowdev_down '$medium'"
umount "$ML_TMP/sd"
dev=$(slowdev_loop "$medium")
image=$(slowdev_dir "$medium")/image
mkdir -p "$ML_TMP/media" "$ML_TMP/raw"
h_put "$ML_TMP/ref" "$MB"
for ((r = 1; r <= RUNS; r++)); do
	# raw kernel: ext2 on the same medium, the same write, then umount
	mount -t ext2 "$dev" "$ML_TMP/raw"
	rm -f "$ML_TMP/raw"/* 2>/dev/null # the last run's files: room for this one
	sync -f "$ML_TMP/raw"
	cp "$ML_TMP/ref" "$ML_TMP/raw/raw$r"
	t0=$EPOCHREALTIME
	umount "$ML_TMP/raw"
	raw=$(ml_since "$t0")
	# slowmedia through mount(8) and the umount helper
	mount -t slowmedia "$dev" "$ML_TMP/media" -o fstype=ext2,queue=32M,arbiter=off
	cp "$ML_TMP/ref" "$ML_TMP/media/sm$r"
	st=$("$CTL" status "$ML_TMP/media" --json)
	queued=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["mounts"][0]["queued_bytes"])' "$st")
	t0=$EPOCHREALTIME
	umount "$ML_TMP/media" 2>"$ML_TMP/umount.err"
	secs=$(ml_since "$t0")
	# A slow one shows what the helper said (its progress lines).
	awk -v s="$secs" -v b="$queued" 'BEGIN {exit !(s > b / 2000000 + 2)}' &&
		sed 's/^/  | /' "$ML_TMP/umount.err"
	ok=no
	h_image_has "$image" "/sm$r" "$ML_TMP/ref" && ok=yes
	bw=$(slowdev_stat "$medium" write_bw)
	bound=$(awk -v q="$queued" -v b="$bw" 'BEGIN {printf "%.2f", q / b + 2}')
	echo "run $r: raw umount $raw s; slowmedia umount $secs s for $queued queued bytes" \
		"(bound: queued / $bw B/s + 2 s = $bound s; data on the image right after: $ok)"
	echo "$secs $bound $raw" >>"$ML_TMP/umount.runs"
done
awk 'BEGIN {w = -1e9} {d = $1 - $2; if (d > w) w = d; s = s " " $1 / ($2 - 2)}
	END {printf "umount / (queued / bandwidth): %s; worst margin to the bound %+.2f s\n", s, w}' \
	"$ML_TMP/umount.runs"
ml_finish
