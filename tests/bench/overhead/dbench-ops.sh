#!/bin/bash
# Where dbench's time goes, passthrough_ll beside slowmedia on one lower:
# dbench's own latency per operation (its closing table), the FUSE requests
# each dbench operation costs, by opcode (the kernel's fuse:fuse_request_send
# tracepoint, counted by perf), and the daemon's CPU per operation
# (perf stat -p). A companion of run-overhead.sh, which gives the throughput.
#
# usage: dbench-ops.sh [--fs ext4|tmpfs] [--seconds S] [--rounds N] [--sm-opts OPTS]
#
# The lower is an ext4 image on a direct-I/O loop device (default) or a
# tmpfs, with a directory for each daemon. Rounds alternate the two; the
# tables are of the last round, the throughput line of every round. Needs
# root, /dev/fuse, dbench, cc and the libfuse3-dev examples (exit 77 without
# them); without perf, or without the tracepoint (kernels before 6.13), the
# request and CPU figures are left out, with a note. Unmounts, kills its
# daemons, detaches its loop device and removes its files on every exit.
set -euo pipefail
orig_args=("$@")

top=$(cd "$(dirname "$0")/../../.." && pwd)
build=${SLOWMEDIA_BUILD:-$top/build}
slowmedia=$build/fusefs/slowmedia
examples=/usr/share/doc/libfuse3-dev/examples
CLIENTS=4
IMG_MIB=3072
MOUNT_WAIT_TENTHS=100

fs=ext4
seconds=10
rounds=2
sm_opts=()

usage() {
	sed -n '8p' "$0" | sed 's/^# //' >&2
	exit 2
}

while [ $# -gt 0 ]; do
	case $1 in
	--fs)
		[ $# -ge 2 ] || usage
		case $2 in ext4 | tmpfs) fs=$2 ;; *) usage ;; esac
		shift ;;
	--seconds)
		if ! [ $# -ge 2 ] || ! [ "$2" -ge 1 ] 2>/dev/null; then usage; fi
		seconds=$2
		shift ;;
	--rounds)
		if ! [ $# -ge 2 ] || ! [ "$2" -ge 1 ] 2>/dev/null; then usage; fi
		rounds=$2
		shift ;;
	--sm-opts)
		[ $# -ge 2 ] || usage
		sm_opts=(-o "$2")
		shift ;;
	*) usage ;;
	esac
	shift
done

prog=dbench-ops
# shellcheck source=tests/bench/overhead/common.sh
. "$top/tests/bench/overhead/common.sh"

require_fuse_bench
[ -x "$slowmedia" ] || skip "$slowmedia not built (run: bash tests/build.sh, or set SLOWMEDIA_BUILD)"
command -v dbench >/dev/null || skip "dbench not installed (bash tests/install-deps.sh)"
loadfile=$(dbench_loadfile)
[ -n "$loadfile" ] || skip "no dbench loadfile client.txt"

# Its own mount namespace: the mounts die with the script, whatever happens.
if [ -z "${DBENCH_OPS_PRIVATE_NS:-}" ] && command -v unshare >/dev/null; then
	DBENCH_OPS_PRIVATE_NS=1 exec unshare --mount --propagation private "$0" \
		${orig_args[@]+"${orig_args[@]}"}
fi

# (perf list whole first: grep -q would stop it mid-list, a failure under pipefail)
perf_ok=
if command -v perf >/dev/null &&
	grep -q 'fuse:fuse_request_send' <<<"$(perf list tracepoint 2>/dev/null)"; then
	perf_ok=1
else
	echo "dbench-ops: note: no perf or no fuse:fuse_request_send tracepoint:" \
		"requests and CPU per operation left out" >&2
fi

make_tmp dbench-ops
build_passthrough_ll

lower=$tmp/lower
mount_lower "$fs" "$lower" "$IMG_MIB"
mkdir "$lower/pll" "$lower/sm"

declare -A mnt_of=([pll]=$tmp/mnt-pll [sm]=$tmp/mnt-sm)
start_daemon pll "$tmp/mnt-pll" "$tmp/passthrough_ll" -f -o "source=$lower/pll" "$tmp/mnt-pll"
start_daemon sm "$tmp/mnt-sm" "$slowmedia" "$lower/sm" "$tmp/mnt-sm" -f ${sm_opts[@]+"${sm_opts[@]}"}

# run NAME: one dbench on NAME's mount, traced when perf can.
run() {
	local name=$1 dir=${mnt_of[$1]}/d rc=0
	mkdir "$dir"
	local cmd=(dbench -c "$loadfile" -D "$dir" -t "$seconds" "$CLIENTS")
	if [ -n "$perf_ok" ]; then
		cmd=(perf stat -x "," -e task-clock -p "${pid_of[$name]}" -o "$tmp/cpu.$name"
			-- perf record -q -a -e fuse:fuse_request_send -o "$tmp/perf.$name" -- "${cmd[@]}")
	fi
	run_tool "$tmp/out.$name" "${cmd[@]}" || rc=$?
	rm -rf "$dir"
	[ "$rc" = 0 ] || { cat "$tmp/out.$name" >&2; echo "dbench-ops: dbench failed on $name" >&2; exit 1; }
}

# op_table NAME: "operation count ms" from dbench's closing table, sorted.
op_table() { awk '/^ [A-Z][A-Za-z]+ +[0-9]+ /{print $1, $2, $3}' "$tmp/out.$1" | sort; }
ops_of() { op_table "$1" | awk '{n += $2} END {print n + 0}'; }
mbs_of() { grep -o 'Throughput [0-9.]*' "$tmp/out.$1" | awk '{print $2}'; }

for ((r = 1; r <= rounds; r++)); do
	for name in pll sm; do
		run "$name"
		echo "round $r: $name $(mbs_of "$name") MB/s, $(ops_of "$name") operations"
	done
done

echo
echo "dbench per-operation latency, last round ($fs lower, $CLIENTS clients, $seconds s)"
printf '%-12s %10s %10s %10s %10s %7s\n' operation pll_count pll_ms sm_count sm_ms sm/pll
join <(op_table pll) <(op_table sm) |
	awk '{printf "%-12s %10d %10.3f %10d %10.3f %7s\n", $1, $2, $3, $4, $5,
		($3 > 0 ? sprintf("%.2f", $5 / $3) : "-")}'

[ -n "$perf_ok" ] || exit 0
echo
echo "FUSE requests per dbench operation, last round"
for name in pll sm; do
	perf script -i "$tmp/perf.$name" 2>/dev/null |
		awk -v c="$(findmnt -n -o MAJ:MIN --mountpoint "${mnt_of[$name]}" | cut -d: -f2)" \
			'/fuse_request_send:/ { conn = ""; op = "";
				for (i = 1; i <= NF; i++) {
					if ($i == "connection") conn = $(i + 1);
					if ($i ~ /^\(FUSE_/) op = substr($i, 2, length($i) - 2)
				}
				if (conn == c && op != "") n[op]++ }
			 END { for (k in n) print k, n[k] }' >"$tmp/req.$name"
done
printf '%-22s %9s %9s\n' request pll sm
join -a1 -a2 -e 0 -o 0,1.2,2.2 <(sort "$tmp/req.pll") <(sort "$tmp/req.sm") |
	awk -v a="$(ops_of pll)" -v b="$(ops_of sm)" \
		'{printf "%-22s %9.3f %9.3f\n", $1, $2 / a, $3 / b; ta += $2; tb += $3}
		 END {printf "%-22s %9.3f %9.3f\n", "all", ta / a, tb / b}' | sort -k3 -rn
echo
for name in pll sm; do
	ms=$(awk -F, '/task-clock/ {print $1}' "$tmp/cpu.$name")
	echo "daemon CPU per operation: $name $(awk -v m="$ms" -v n="$(ops_of "$name")" \
		'BEGIN {printf "%.1f us", m * 1000 / n}')"
done
