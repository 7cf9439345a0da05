#!/bin/bash
# FUSE overhead of slowmedia on a fast lower filesystem, beside the native
# directory and beside libfuse's example passthrough_ll (built here, at run
# time, from the Debian libfuse3-dev examples; never copied into the repo).
#
# usage: run-overhead.sh [--quick] [--fs ext4|tmpfs|both] [--runs N] [--json FILE] [--sm-opts OPTS] [--only meta,seq,dbench,fio]
#
# For each lower filesystem (default: both; ext4 is an image on the root disk,
# attached through a direct-I/O loop device, tmpfs is in memory) three sibling
# directories of that one filesystem serve as: the native directory, the
# source of passthrough_ll (its default options) and the source of slowmedia
# (its default options; --sm-opts OPTS adds -o OPTS, to try tunings). After an
# unrecorded warm-up, each round runs every benchmark on the three, in an order
# rotated per round; the table shows the median of the rounds with min and
# max, and the ratios slowmedia/passthrough_ll and slowmedia/native.
#
# Benchmarks (--only takes a comma-separated subset; default all):
#   meta    metabench: create, stat, unlink of N empty files
#   seq     seqbench: 1 MiB writes of a big file + fsync, then a cold read
#   dbench  dbench N clients with its client.txt loadfile, MB/s
#   fio     fio 4 KiB random read/write 70/30 on one file, a few jobs,
#           buffered: read and write IOPS, write completion latency p99
#
# Needs root, /dev/fuse, cc, pkg-config fuse3 and the libfuse3-dev examples;
# exits 77 (skip) without them (dbench and fio are dropped, with a note,
# when not installed). Always unmounts, kills its daemons, detaches
# its loop device and removes its temp files.
set -euo pipefail
orig_args=("$@")

top=$(cd "$(dirname "$0")/../../.." && pwd)
build=${SLOWMEDIA_BUILD:-$top/build}
slowmedia=$build/fusefs/slowmedia
metabench=$build/tests/bench/overhead/metabench
seqbench=$build/tests/bench/overhead/seqbench
examples=/usr/share/doc/libfuse3-dev/examples

FULL_FILES=10000
FULL_MIB=1024
QUICK_FILES=2000
QUICK_MIB=256
WARM_FILES=500
WARM_MIB=64
MOUNT_WAIT_TENTHS=100 # 10 s for a daemon to show its mount
EXIT_WAIT_TENTHS=100  # 10 s for a daemon to exit after its unmount
META_TARGET=0.9	      # slowmedia/passthrough_ll, the issue's targets
SEQ_TARGET=1.0
DBENCH_TARGET=1.0
FIO_TARGET=1.0
DBENCH_CLIENTS=4
FULL_DBENCH_S=30
QUICK_DBENCH_S=10
WARM_DBENCH_S=2
FIO_JOBS=4
FULL_FIO_MIB=256
QUICK_FIO_MIB=64
WARM_FIO_MIB=16
FULL_FIO_S=30
QUICK_FIO_S=10
WARM_FIO_S=2
ALL_BENCHES="meta seq dbench fio"

files=$FULL_FILES
mib=$FULL_MIB
runs=3
fs_list="ext4 tmpfs"
json=$build/bench-overhead.json
sm_opts=()
dbench_s=$FULL_DBENCH_S
fio_mib=$FULL_FIO_MIB
fio_s=$FULL_FIO_S
benches=$ALL_BENCHES

usage() {
	sed -n '6p' "$0" | sed 's/^# //' >&2
	exit 2
}

while [ $# -gt 0 ]; do
	case $1 in
	--quick)
		files=$QUICK_FILES mib=$QUICK_MIB
		dbench_s=$QUICK_DBENCH_S fio_mib=$QUICK_FIO_MIB fio_s=$QUICK_FIO_S ;;
	--fs)
		[ $# -ge 2 ] || usage
		case $2 in ext4 | tmpfs) fs_list=$2 ;; both) fs_list="ext4 tmpfs" ;; *) usage ;; esac
		shift ;;
	--runs)
		if ! [ $# -ge 2 ] || ! [ "$2" -ge 1 ] 2>/dev/null; then usage; fi
		runs=$2
		shift ;;
	--json)
		[ $# -ge 2 ] || usage
		json=$2
		shift ;;
	--sm-opts)
		[ $# -ge 2 ] || usage
		sm_opts=(-o "$2")
		shift ;;
	--only)
		[ $# -ge 2 ] || usage
		benches=
		for b in ${2//,/ }; do
			[[ " $ALL_BENCHES " == *" $b "* ]] || usage
			benches+=" $b"
		done
		[ -n "$benches" ] || usage
		shift ;;
	*) usage ;;
	esac
	shift
done

prog=run-overhead
# shellcheck source=tests/bench/overhead/common.sh
. "$top/tests/bench/overhead/common.sh"

require_fuse_bench
for x in "$slowmedia" "$metabench" "$seqbench"; do
	[ -x "$x" ] || skip "$x not built (set SLOWMEDIA_BUILD, run ninja)"
done

has() { [[ " $benches " == *" $1 "* ]]; }

# drop BENCH REASON: a missing tool costs its benchmark only.
drop() {
	echo "run-overhead: note: $1 not run: $2" >&2
	benches=$(tr ' ' '\n' <<<"$benches" | grep -vx "$1" | tr '\n' ' ')
}
loadfile=
if has dbench; then
	if ! command -v dbench >/dev/null; then
		drop dbench "dbench not installed"
	else
		loadfile=$(dbench_loadfile)
		[ -n "$loadfile" ] || drop dbench "no dbench loadfile client.txt"
	fi
fi
has fio && ! command -v fio >/dev/null && drop fio "fio not installed"
[ -n "${benches// /}" ] || skip "none of the chosen benchmarks can run"

# A private mount namespace: a namespace someone else unshares meanwhile cannot
# copy our mounts (keeping our daemons serving after our umount), and whatever
# happens to this script, its mounts die with it.
if [ -z "${OVERHEAD_PRIVATE_NS:-}" ] && command -v unshare >/dev/null; then
	OVERHEAD_PRIVATE_NS=1 exec unshare --mount --propagation private "$0" ${orig_args[@]+"${orig_args[@]}"}
fi

make_tmp overhead

# Unmounts MOUNTPOINT and fails unless its daemon PID exits 0.
stop_daemon() {
	local mnt=$1 pid=$2 rc=0 i
	umount "$mnt"
	for ((i = 0; i < EXIT_WAIT_TENTHS; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$pid" 2>/dev/null; then
		echo "run-overhead: daemon on $mnt still running after unmount; TERM" >&2
		kill "$pid"
	fi
	wait "$pid" || rc=$?
	[ "$rc" = 0 ] || { echo "run-overhead: daemon on $mnt exited $rc" >&2; exit 1; }
}

# setup_lower FS: mounts a fresh FS at $tmp/FS, sized for three big files
# (seq) or for one fio file and the dbench trees.
setup_lower() {
	local fs=$1 root=$tmp/$1 size_mib=$((2 * fio_mib + 2048))
	has seq && ((3 * mib + 1024 > size_mib)) && size_mib=$((3 * mib + 1024))
	mount_lower "$fs" "$root" "$size_mib"
	mkdir "$root/native" "$root/pll" "$root/sm"
}

teardown_lower() {
	local fs=$1
	umount "$tmp/$fs"
	lower_mounts=()
	if [ "$fs" = ext4 ]; then
		losetup -d "$loopdev"
		loopdev=
		rm -f "$tmp/ext4.img"
	fi
}

declare -A dir_of result
targets=(native passthrough_ll slowmedia)

# bench FS TARGET CMD...: runs one benchmark tool (run_tool), names the
# target if it fails.
bench() {
	local fs=$1 t=$2 rc=0
	shift 2
	run_tool "$tmp/bench.out" "$@" || rc=$?
	if [ "$rc" != 0 ]; then
		echo "run-overhead: failed on $fs/$t (exit $rc): $*" >&2
		exit 1
	fi
	record "$fs" "$t" "$(cat "$tmp/bench.out")"
}

# dbench_run DIR SECONDS: dbench's throughput as a "dbench MB/s" line.
dbench_run() {
	local out tp
	out=$(dbench -c "$loadfile" -D "$1" -t "$2" "$DBENCH_CLIENTS" 2>&1) || {
		tail -5 <<<"$out" >&2
		return 1
	}
	tp=$(awk '/^Throughput/ { print $2 }' <<<"$out")
	[ -n "$tp" ] || { tail -5 <<<"$out" >&2; return 1; }
	echo "dbench $tp MB/s"
}

# fio_run DIR MIB SECONDS: FIO_JOBS jobs of 4 KiB buffered random I/O, 70%
# reads, on one shared MIB file (laid out and fsynced by fio before the
# timed part); prints read and write IOPS and the write completion p99.
fio_run() {
	local dir=$1 size=$2 secs=$3
	fio --name=randrw --filename="$dir/fio.dat" --size="${size}M" --rw=randrw \
		--rwmixread=70 --bs=4k --direct=0 --ioengine=psync --numjobs="$FIO_JOBS" \
		--time_based --runtime="$secs" --group_reporting \
		--output-format=json --output="$tmp/fio.json" >/dev/null || return 1
	rm -f "$dir/fio.dat"
	python3 - "$tmp/fio.json" <<'PY'
import json, sys
text = open(sys.argv[1]).read()
job = json.loads(text[text.index("{"):])["jobs"][0]  # group_reporting: one
p99 = job["write"]["clat_ns"].get("percentile", {}).get("99.000000", 0)
print("fio_rd %.1f IOPS" % job["read"]["iops"])
print("fio_wr %.1f IOPS" % job["write"]["iops"])
print("fio_wp99 %.4f ms" % (p99 / 1e6))
PY
}

# record FS TARGET OUTPUT: keeps the values of a tool's "name value unit" lines.
record() {
	local fs=$1 target=$2 out=$3 name value
	while read -r name value _; do
		result[$fs/$name/$target]+="$value "
	done <<<"$out"
}

# One round: every benchmark once on every target, starting at target index R.
run_round() {
	local fs=$1 r=$2 i t d order=()
	for i in 0 1 2; do order+=("${targets[$(((r + i) % 3))]}"); done
	if has meta; then
		for t in "${order[@]}"; do
			d=${dir_of[$t]}/meta.$r
			mkdir "$d"
			bench "$fs" "$t" "$metabench" "$d" "$files"
			rmdir "$d"
		done
	fi
	if has seq; then
		for t in "${order[@]}"; do
			bench "$fs" "$t" "$seqbench" write "${dir_of[$t]}/big.$r" "$mib"
		done
		for t in "${order[@]}"; do
			bench "$fs" "$t" "$seqbench" read "${dir_of[$t]}/big.$r"
			rm -f "${dir_of[$t]}/big.$r"
		done
	fi
	if has dbench; then
		for t in "${order[@]}"; do
			d=${dir_of[$t]}/dbench.$r
			mkdir "$d"
			bench "$fs" "$t" dbench_run "$d" "$dbench_s"
			rm -rf "$d"
		done
	fi
	if has fio; then
		for t in "${order[@]}"; do
			d=${dir_of[$t]}/fio.$r
			mkdir "$d"
			bench "$fs" "$t" fio_run "$d" "$fio_mib" "$fio_s"
			rmdir "$d"
		done
	fi
}

# Unrecorded: lets each daemon start its threads and each fs allocate once.
warm_up() {
	local t d
	for t in "${targets[@]}"; do
		d=${dir_of[$t]}
		mkdir "$d/warm"
		if has meta; then "$metabench" "$d/warm" "$WARM_FILES" >/dev/null; fi
		if has seq; then
			"$seqbench" write "$d/warm.big" "$WARM_MIB" >/dev/null
			"$seqbench" read "$d/warm.big" >/dev/null
			rm "$d/warm.big"
		fi
		if has dbench; then bench warm "$t" dbench_run "$d/warm" "$WARM_DBENCH_S"; fi
		if has fio; then bench warm "$t" fio_run "$d/warm" "$WARM_FIO_MIB" "$WARM_FIO_S"; fi
		rm -rf "$d/warm"
	done
}

bench_fs() {
	local fs=$1 r
	setup_lower "$fs"
	start_daemon pll "$tmp/mnt-pll" "$tmp/passthrough_ll" -f -o "source=$tmp/$fs/pll" "$tmp/mnt-pll"
	start_daemon sm "$tmp/mnt-sm" "$slowmedia" "$tmp/$fs/sm" "$tmp/mnt-sm" -f \
		${sm_opts[@]+"${sm_opts[@]}"}
	dir_of=([native]=$tmp/$fs/native [passthrough_ll]=$tmp/mnt-pll [slowmedia]=$tmp/mnt-sm)
	warm_up
	for ((r = 0; r < runs; r++)); do
		echo "run-overhead: $fs round $((r + 1))/$runs" >&2
		run_round "$fs" "$r"
	done
	stop_daemon "$tmp/mnt-sm" "${pid_of[sm]}"
	stop_daemon "$tmp/mnt-pll" "${pid_of[pll]}"
	fuse_mounts=()
	daemon_pids=()
	teardown_lower "$fs"
}

# stats "v1 v2 ..." [DECIMALS]: prints "median min max" (1 decimal by default).
stats() {
	tr ' ' '\n' <<<"$1" | grep . | sort -g | awk -v d="${2:-1}" '
		{ v[NR] = $1 }
		END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
		      f = "%." d "f"
		      printf f " " f " " f "\n", m, v[1], v[NR] }'
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }

metrics=()
has meta && metrics+=(create stat unlink files)
has seq && metrics+=(write read)
has dbench && metrics+=(dbench)
has fio && metrics+=(fio_rd fio_wr fio_wp99)
declare -A unit_of=([create]=ops/s [stat]=ops/s [unlink]=ops/s [files]=files/s
	[write]=MB/s [read]=MB/s [dbench]=MB/s [fio_rd]=IOPS [fio_wr]=IOPS [fio_wp99]=ms)
declare -A target_of=([files]=$META_TARGET [write]=$SEQ_TARGET [read]=$SEQ_TARGET
	[dbench]=$DBENCH_TARGET [fio_rd]=$FIO_TARGET [fio_wr]=$FIO_TARGET)
# Decimals kept for a metric (JSON and table); default 1 in JSON, 0 in the table.
declare -A prec_of=([fio_wp99]=3)

# The parameters of a metric's benchmark, as JSON fields.
json_params() {
	case $1 in
	dbench) printf ',"clients":%d,"seconds":%d' "$DBENCH_CLIENTS" "$dbench_s" ;;
	fio_*) printf ',"jobs":%d,"fio_mib":%d,"seconds":%d,"rwmixread":70,"bs":4096' \
		"$FIO_JOBS" "$fio_mib" "$fio_s" ;;
	*) printf ',"files":%d,"file_mib":%d' "$files" "$mib" ;;
	esac
}

json_target() {
	local fs=$1 m=$2 t=$3 med min max
	read -r med min max <<<"$(stats "${result[$fs/$m/$t]}" "${prec_of[$m]:-1}")"
	printf '"%s":{"median":%s,"min":%s,"max":%s,"runs":[%s]}' "$t" "$med" "$min" \
		"$max" "$(tr -s ' ' ',' <<<"${result[$fs/$m/$t]% }")"
}

# One JSON record per (lower fs, metric); the table goes to stdout meanwhile.
report() {
	local fs m t row med min max verdict r js="" sep="" what="" d f
	declare -A med_of
	{ has meta || has seq; } && what+=", $files files, $mib MiB file"
	has dbench && what+=", dbench $DBENCH_CLIENTS clients ${dbench_s} s"
	has fio && what+=", fio ${FIO_JOBS} jobs 4k randrw 70/30 ${fio_mib} MiB ${fio_s} s"
	for fs in $fs_list; do
		printf '\nFUSE overhead, lower fs %s%s; median [min-max] of %d runs%s\n' \
			"$fs" "$what" "$runs" "${sm_opts[1]:+; slowmedia -o ${sm_opts[1]}}"
		printf '%-8s %-8s %25s %25s %25s %6s %6s %s\n' metric unit native \
			passthrough_ll slowmedia sm/pll sm/nat target
		for m in "${metrics[@]}"; do
			row=$(printf '%-8s %-8s' "$m" "${unit_of[$m]}")
			js+=$(printf '%s\n{"scenario":"overhead","lower":"%s","metric":"%s","unit":"%s"%s,"slowmedia_opts":"%s"' \
				"$sep" "$fs" "$m" "${unit_of[$m]}" "$(json_params "$m")" "${sm_opts[1]:-}")
			d=${prec_of[$m]:-0}
			f="%.${d}f"
			for t in "${targets[@]}"; do
				read -r med min max <<<"$(stats "${result[$fs/$m/$t]}" "${prec_of[$m]:-1}")"
				med_of[$t]=$med
				# shellcheck disable=SC2059 # the format is ours
				row+=$(printf ' %25s' "$(printf "$f [$f-$f]" "$med" "$min" "$max")")
				js+=,$(json_target "$fs" "$m" "$t")
			done
			r=$(ratio "${med_of[slowmedia]}" "${med_of[passthrough_ll]}")
			row+=$(printf ' %6s %6s' "$r" "$(ratio "${med_of[slowmedia]}" "${med_of[native]}")")
			js+=$(printf ',"slowmedia_per_passthrough_ll":%s' "$r")
			if [ -n "${target_of[$m]:-}" ]; then
				verdict=SHORT
				awk -v r="$r" -v g="${target_of[$m]}" 'BEGIN { exit !(r >= g) }' && verdict=ok
				row+=" >=${target_of[$m]} $verdict"
				js+=$(printf ',"target":%s' "${target_of[$m]}")
			fi
			js+="}"
			sep=","
			echo "$row"
		done
	done
	printf '[%s\n]\n' "$js" >"$json"
}

build_passthrough_ll
for fs in $fs_list; do
	bench_fs "$fs"
done
report
echo "run-overhead: results in $json" >&2
