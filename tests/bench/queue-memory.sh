#!/bin/bash
# Peak daemon RSS (VmHWM) against queue=, for the fsx model tester's workload
# and for many tiny scattered writes (the worst case for bookkeeping).
#
#   tests/bench/queue-memory.sh BUILD_DIR [QUEUE...]      (default: 1M 8M 64M)
#
# Environment: FSX_OPS (default 200000) ops per fsx run; TINY_WRITES (default
# 200000) writes of 1-16 bytes over a TINY_SPAN (default 32M) file, with
# rate=TINY_RATE (default 256K) so that the queue stays full.
# Needs root and /dev/fuse (exit 77 otherwise). Prints one line per run:
#   workload queue=Q peak_rss_mib=P over_queue_mib=P-Q secs=S
set -u
build=${1:?usage: $0 BUILD_DIR [QUEUE...]}
shift
queues=("$@")
[ ${#queues[@]} -gt 0 ] || queues=(1M 8M 64M)
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
daemon=$build/fusefs/slowmedia
fsx=$build/tests/fsx/fsx
tinyw=$build/tests/mount/queue/queue-tinyw
[ "$(id -u)" = 0 ] && [ -c /dev/fuse ] || { echo "SKIP: needs root and /dev/fuse"; exit 77; }
for x in "$daemon" "$fsx" "$tinyw"; do
	[ -x "$x" ] || { echo "missing $x (build first)"; exit 1; }
done

tmp=$(mktemp -d /tmp/slowmedia-qmem.XXXXXX)
sampler=""
cleanup() {
	[ -n "$sampler" ] && kill "$sampler" 2>/dev/null
	awk -v t="$tmp" 'index($2, t) == 1 {print $2}' /proc/mounts | sort -r |
		while read -r m; do umount -l "$m"; done
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The daemon through a wrapper that notes its pid (exec keeps it), so the
# sampler finds every daemon fsx starts.
cat >"$tmp/daemon" <<EOF
#!/bin/bash
echo \$\$ >>"$tmp/pids"
exec "$daemon" "\$@"
EOF
chmod +x "$tmp/daemon"

# Poll VmHWM (monotonic: the last read before exit is the peak, within a poll).
start_sampler() {
	: >"$tmp/pids"
	: >"$tmp/peak"
	(
		peak=0
		while :; do
			while read -r pid; do
				h=$(awk '$1 == "VmHWM:" {print $2}' "/proc/$pid/status" 2>/dev/null)
				[ -n "$h" ] && [ "$h" -gt "$peak" ] && peak=$h && echo "$peak" >"$tmp/peak"
			done <"$tmp/pids"
			sleep 0.1
		done
	) &
	sampler=$!
}

stop_sampler() {
	kill "$sampler" 2>/dev/null
	wait "$sampler" 2>/dev/null
	sampler=""
	cat "$tmp/peak"
}

mib() { # SIZE with K/M/G suffix -> MiB
	awk -v s="$1" 'BEGIN { n = s + 0; u = substr(s, length(s));
		if (u == "K") n /= 1024; else if (u == "G") n *= 1024; printf "%g", n }'
}

report() { # WORKLOAD QUEUE PEAK_KIB SECS
	awk -v w="$1" -v q="$2" -v p="$3" -v qm="$(mib "$2")" -v s="$4" 'BEGIN {
		printf "%-12s queue=%-4s peak_rss_mib=%.1f over_queue_mib=%.1f secs=%s\n",
			w, q, p / 1024, p / 1024 - qm, s }'
}

for q in "${queues[@]}"; do
	start_sampler
	t0=$EPOCHREALTIME
	FSX_TMPDIR=$tmp FSX_OPS=${FSX_OPS:-200000} FSX_SEED=${FSX_SEED:-1} \
		bash "$src/tests/fsx/run-fsx.sh" "$fsx" "$tmp/daemon" \
		--config "queue=$q,rate=20M,latency=5,read_grace=1" >"$tmp/fsx.log" 2>&1
	rc=$?
	peak=$(stop_sampler)
	[ "$rc" = 0 ] || { echo "fsx failed ($rc):"; tail -20 "$tmp/fsx.log"; }
	report fsx "$q" "${peak:-0}" "$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.0f", b-a}')"

	lower=$tmp/lower mnt=$tmp/mnt
	mkdir -p "$lower" "$mnt"
	mount -t tmpfs -o size=256M qmem-lower "$lower" || exit 1
	start_sampler
	"$tmp/daemon" "$lower" "$mnt" -f -o "queue=$q,rate=${TINY_RATE:-256K}" >"$tmp/d.log" 2>&1 &
	dpid=$!
	for ((i = 0; i < 200; i++)); do
		awk -v m="$mnt" '$2 == m {f = 1} END {exit !f}' /proc/mounts && break
		sleep 0.05
	done
	t0=$EPOCHREALTIME
	"$tinyw" "$mnt/scattered" "${TINY_WRITES:-200000}" "${TINY_SPAN:-32M}" 7 >/dev/null ||
		echo "tinyw failed"
	sleep 0.3 # a last sample
	umount "$mnt"
	wait "$dpid"
	peak=$(stop_sampler)
	report tiny-writes "$q" "${peak:-0}" "$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.0f", b-a}')"
	umount "$lower"
done
