#!/bin/bash
# spool-crash: kill -9 of the daemon in the middle of fsx's model workload
# with spool= on another filesystem; the next mount replays the journal, and
# what it shows (then the medium after a drain, then a second mount) must be
# what every acknowledged op made. Each configuration is one seed: the kill
# comes after a number of ops its seed picks (fsx --crash).
#
#   crash.sh FSX SLOWMEDIA
#
# SPOOL_SEEDS (default 10) configurations with file handles (every fsx op:
# hard links, exchanges), then as many journaling paths alone
# (SLOWMEDIA_SPOOL_NO_HANDLES=1, as on fusefat) with --fat-like ops and
# spool_sync=0 (a journal fdatasync before each answer);
# SPOOL_OPS ops each (default 200); FSX_SEED as run-fsx.sh. The spool lives
# on a tmpfs of this test's private mount namespace: it goes with it.
set -u -o pipefail
fsx=$1 daemon=$2
here=$(cd "$(dirname "$0")" && pwd)
runner=$here/../../fsx/run-fsx.sh
seeds=${SPOOL_SEEDS:-10} ops=${SPOOL_OPS:-200}

[ "$(id -u)" = 0 ] || { echo "SKIP: needs root"; exit 77; }
[ -c /dev/fuse ] || { echo "SKIP: needs /dev/fuse"; exit 77; }
if [ -z "${SPOOL_CRASH_NS:-}" ]; then
	SPOOL_CRASH_NS=1 exec unshare -m --propagation private bash "$0" "$@"
fi
spool=$(mktemp -d /tmp/slowmedia-spool-crash.XXXXXX) || exit 1
trap 'umount -l "$spool" 2>/dev/null; rmdir "$spool"' EXIT
mount -t tmpfs -o mode=0700 spool "$spool" && mkdir -m 700 "$spool/h" "$spool/p" || exit 1

base='queue=1M,rate=2M,latency=5,read_grace=1,arbiter=off'
configs() { for ((i = 0; i < seeds; i++)); do printf -- '-c\n%s\n' "$base"; done; }
mapfile -t cfg < <(configs)
base="$base,spool_sync=0"
mapfile -t cfg0 < <(configs)
seed=${FSX_SEED:-$((RANDOM * 32768 + RANDOM))}
rc=0
out=$(mktemp)
trap 'rm -f "$out"; umount -l "$spool" 2>/dev/null; rmdir "$spool"' EXIT
echo "# with file handles: $seeds seeds from $seed"
FSX_SEED=$seed bash "$runner" "$fsx" "$daemon" --crash --ops "$ops" \
	--spool-root "$spool/h" "${cfg[@]}" | tee "$out" || rc=1
echo "# paths alone: $seeds seeds from $((seed + seeds))"
FSX_SEED=$((seed + seeds)) SLOWMEDIA_SPOOL_NO_HANDLES=1 bash "$runner" "$fsx" "$daemon" \
	--crash --fat-like --ops "$ops" --spool-root "$spool/p" "${cfg0[@]}" | tee -a "$out" || rc=1
# The test means something only if the kills found journaled data to replay.
full=$(awk '/^# the spool holds/ && $5 > 0 {n++} END {print n + 0}' "$out")
echo "# $full of $((2 * seeds)) kills found a journal to replay"
if ((full < seeds)); then
	echo "FAIL: fewer than half the kills left anything in the spool: the workload is too light"
	rc=1
fi
exit $rc
