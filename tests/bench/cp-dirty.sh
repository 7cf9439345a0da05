#!/usr/bin/env bash
# The slow medium's dirty-page peak while `cp` copies a file inside it, raw
# kernel vs slowmedia, in one run.
#
# usage: cp-dirty.sh [--quick] [--runs N] [--mb N] [--wbps BYTES] [--json FILE] [--sm-opts OPTS]
#
# The medium is an ext2 image on a direct-I/O loop device, throttled by the
# root cgroup-v1 blkio throttle (tests/lib/media.sh) to 8 MB/s write and
# 16 MB/s read: a DVD-RAM is 2 MB/s, but 200 MB would then take 100 s per
# copy; the pile-up of dirty pages shows the same at 8 MB/s. Two directories
# of that one filesystem: raw/ is used directly, sm/ is the source of a
# slowmedia mount (its default options, --sm-opts adds -o OPTS). Each holds
# a source file written while the medium was fast, fsynced (the slowmedia
# one through slowmedia) and read once before each copy, so the copy reads
# from the page cache and only its writes meet the medium. A run copies the
# source with cp (coreutils uses copy_file_range; inside one mount the
# kernel hands that to the filesystem) and then fsyncs the copy; meanwhile
# tests/bench/sampler.py samples every 100 ms the medium's BdiReclaimable +
# BdiWriteback (debugfs, mounted if needed and unmounted after) and the
# machine's Dirty + Writeback (/proc/meminfo, the fallback). Runs alternate
# which column goes first; the table shows median [min-max] of the runs.
#
# Root only (loop device, blkio throttle, debugfs); exits 77 otherwise, or
# without /dev/fuse or a slowmedia binary. Everything is undone on exit,
# Ctrl-C or TERM: copies killed, slowmedia unmounted, throttle removed,
# medium unmounted and detached, image deleted, debugfs unmounted if we
# mounted it. It runs in a private mount namespace.
set -u -o pipefail
orig_args=("$@")

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
: "${SLOWMEDIA_BUILD:=$top/build}"
slowmedia=$SLOWMEDIA_BUILD/fusefs/slowmedia

FULL_MB=200
QUICK_MB=48
WRITE_BPS=8000000 # the emulated medium: 4x a DVD-RAM, read twice the write
SAMPLE_S=0.1
MOUNT_WAIT_TENTHS=100
EXIT_WAIT_S=120 # slowmedia drains its queue at exit

mb=$FULL_MB
runs=3
wbps=$WRITE_BPS
json=$SLOWMEDIA_BUILD/bench-cp-dirty.json
sm_opts=()

usage() {
	sed -n '6p' "$0" | sed 's/^# //' >&2
	exit 2
}

posint() { [ "$1" -ge 1 ] 2>/dev/null; }

while [ $# -gt 0 ]; do
	case $1 in
	--quick) mb=$QUICK_MB ;;
	--runs)
		if ! [ $# -ge 2 ] || ! posint "$2"; then usage; fi
		runs=$2
		shift ;;
	--mb)
		if ! [ $# -ge 2 ] || ! posint "$2"; then usage; fi
		mb=$2
		shift ;;
	--wbps)
		if ! [ $# -ge 2 ] || ! posint "$2"; then usage; fi
		wbps=$2
		shift ;;
	--json) [ $# -ge 2 ] || usage; json=$2; shift ;;
	--sm-opts) [ $# -ge 2 ] || usage; sm_opts=(-o "$2"); shift ;;
	*) usage ;;
	esac
	shift
done
rbps=$((2 * wbps))

skip() {
	echo "cp-dirty: skipped: $*" >&2
	exit 77
}
[ "$(id -u)" = 0 ] || skip "needs root (loop device, blkio throttle, debugfs)"
[ -c /dev/fuse ] || skip "no /dev/fuse"
[ -x "$slowmedia" ] || skip "no slowmedia binary at $slowmedia (set SLOWMEDIA_BUILD)"
[ -w "${MEDIA_BLKIO:-/sys/fs/cgroup/blkio}/blkio.throttle.write_bps_device" ] ||
	skip "no cgroup-v1 blkio throttle"

# Our mounts die with this script, whatever happens to it, and no namespace
# unshared meanwhile keeps a copy of them (and the daemon) alive.
if [ -z "${CPDIRTY_PRIVATE_NS:-}" ] && command -v unshare >/dev/null; then
	CPDIRTY_PRIVATE_NS=1 exec unshare --mount --propagation private "$0" ${orig_args[@]+"${orig_args[@]}"}
fi

MEDIA_STATE=/var/tmp/smcpdirty-$$
# shellcheck source=../lib/media.sh
. "$top/tests/lib/media.sh"
media_install_traps

log() { printf '[%4ds] %s\n' "$SECONDS" "$*" >&2; }

MNT=$MEDIA_STATE/mnt  # the medium
SMNT=$MEDIA_STATE/sm  # slowmedia over $MNT/sm
declare -A dir_of=([raw]=$MNT/raw [slowmedia]=$SMNT)
declare -A result

sm_pid=
sm_up() {
	local i
	mkdir -p "$SMNT"
	"$slowmedia" "$MNT/sm" "$SMNT" -f ${sm_opts[@]+"${sm_opts[@]}"} </dev/null \
		>"$MEDIA_STATE/slowmedia.log" 2>&1 &
	sm_pid=$!
	# Unthrottled first: the daemon drains its queue as it exits.
	media_on_exit slowmedia "media_unthrottle m; sm_down"
	for ((i = 0; i < MOUNT_WAIT_TENTHS; i++)); do
		[ "$(findmnt -n -o FSTYPE --mountpoint "$SMNT" 2>/dev/null)" = fuse.slowmedia ] && return 0
		kill -0 "$sm_pid" 2>/dev/null || break
		sleep 0.1
	done
	log "slowmedia did not mount:"
	sed 's/^/  /' "$MEDIA_STATE/slowmedia.log" >&2
	return 1
}

sm_down() {
	local i
	media_forget slowmedia
	mountpoint -q "$SMNT" && { umount "$SMNT" || umount -l "$SMNT"; }
	for ((i = 0; i < EXIT_WAIT_S * 10; i++)); do
		kill -0 "$sm_pid" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$sm_pid" 2>/dev/null; then
		log "slowmedia still running ${EXIT_WAIT_S}s after its unmount; killing it"
		kill -KILL "$sm_pid"
	fi
	wait "$sm_pid" 2>/dev/null
	grep -qi error "$MEDIA_STATE/slowmedia.log" &&
		{ log "slowmedia log:"; tail -5 "$MEDIA_STATE/slowmedia.log" >&2; }
	return 0
}

# The timed part of a run: cp, then fsync of the copy. Prints key=value.
cp_and_fsync() {
	local t0 t1 t2
	t0=$EPOCHREALTIME
	cp "$1" "$2" || return 1
	t1=$EPOCHREALTIME
	sync "$2" || return 1
	t2=$EPOCHREALTIME
	awk -v a="$t0" -v b="$t1" -v c="$t2" 'BEGIN { printf "cp_s=%.3f total_s=%.3f\n", b - a, c - a }'
}

# kv KEY "k=v ...": the value of KEY.
kv() {
	local w
	for w in $2; do
		[ "${w%%=*}" = "$1" ] && { echo "${w#*=}"; return 0; }
	done
	return 1
}

# one_run COLUMN: one copy with the sampler running; records its figures.
one_run() {
	local col=$1 d=${dir_of[$1]} out=$MEDIA_STATE/run.out peaks=$MEDIA_STATE/peaks
	local limit pid sampler deadline v
	cat "$d/src.dat" >/dev/null
	rm -f "$out" "$peaks"
	python3 "$here/sampler.py" "$peaks" "$SAMPLE_S" "$MED_MM" &
	sampler=$!
	media_on_exit sampler "kill $sampler 2>/dev/null; wait $sampler 2>/dev/null"
	cp_and_fsync "$d/src.dat" "$d/copy.dat" >"$out" &
	pid=$!
	media_on_exit copy "kill -KILL \$(media__tree $pid) 2>/dev/null; wait $pid 2>/dev/null"
	# Four times the medium's pace, and a minute: a hung copy fails the run.
	limit=$((4 * mb * 1048576 / wbps + 60))
	deadline=$((SECONDS + limit))
	while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.05; done
	if kill -0 "$pid" 2>/dev/null; then
		log "$col: cp + fsync still running after ${limit}s; giving up"
		exit 1
	fi
	media_forget copy
	wait "$pid" || { log "$col: cp or fsync failed"; exit 1; }
	media_undo sampler
	v=$(cat "$peaks" 2>/dev/null)
	result[$col/cp_s]+="$(kv cp_s "$(cat "$out")") "
	result[$col/total_s]+="$(kv total_s "$(cat "$out")") "
	result[$col/meminfo_peak]+="$(kv meminfo_mb "$v") "
	[ "$(kv bdi_mb "$v")" != -1 ] && result[$col/medium_peak]+="$(kv bdi_mb "$v") "
	log "  $col: cp $(kv cp_s "$(cat "$out")") s, +fsync $(kv total_s "$(cat "$out")") s, peaks $v"
	rm -f "$d/copy.dat"
	sync -f "$MNT"
}

# stats "v1 v2 ...": "median min max".
stats() {
	tr ' ' '\n' <<<"$1" | grep . | sort -g | awk '
		{ v[NR] = $1 }
		END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
		      printf "%.3f %.3f %.3f\n", m, v[1], v[NR] }'
}

report() {
	local m c row med min max js="" sep="" r f
	declare -A med_of
	declare -A unit_of=([medium_peak]=MiB [meminfo_peak]=MiB [cp_s]=s [total_s]=s)
	declare -A what_of=([medium_peak]="medium Dirty+Writeback peak (debugfs bdi)"
		[meminfo_peak]="machine Dirty+Writeback peak (/proc/meminfo)"
		[cp_s]="cp" [total_s]="cp + fsync of the copy")
	printf '\ncp-dirty: %d MiB cp inside the medium (ext2, loop throttled to %s MB/s write, %s MB/s read); median [min-max] of %d runs%s\n' \
		"$mb" "$(awk -v b="$wbps" 'BEGIN { print b / 1e6 }')" "$(awk -v b="$rbps" 'BEGIN { print b / 1e6 }')" \
		"$runs" "${sm_opts[1]:+; slowmedia -o ${sm_opts[1]}}"
	printf '%-13s %-4s %24s %24s %7s  %s\n' metric unit raw slowmedia sm/raw what
	for m in medium_peak meminfo_peak cp_s total_s; do
		[ -n "${result[raw/$m]:-}" ] || continue
		row=$(printf '%-13s %-4s' "$m" "${unit_of[$m]}")
		f=%.1f
		[ "${unit_of[$m]}" = s ] && f=%.2f
		js+=$(printf '%s\n{"scenario":"cp-dirty","metric":"%s","unit":"%s","mib":%d,"write_bps":%d,"read_bps":%d,"slowmedia_opts":"%s"' \
			"$sep" "$m" "${unit_of[$m]}" "$mb" "$wbps" "$rbps" "${sm_opts[1]:-}")
		for c in raw slowmedia; do
			read -r med min max <<<"$(stats "${result[$c/$m]}")"
			med_of[$c]=$med
			# shellcheck disable=SC2059 # the format is ours
			row+=$(printf ' %24s' "$(printf "$f [$f-$f]" "$med" "$min" "$max")")
			js+=$(printf ',"%s":{"median":%s,"min":%s,"max":%s,"runs":[%s]}' "$c" "$med" "$min" "$max" \
				"$(tr -s ' ' ',' <<<"${result[$c/$m]% }")")
		done
		r=$(awk -v a="${med_of[slowmedia]}" -v b="${med_of[raw]}" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "null" }')
		row+=$(printf ' %7s  %s' "$r" "${what_of[$m]}")
		js+=",\"slowmedia_per_raw\":$r}"
		sep=,
		echo "$row"
	done
	mkdir -p "$(dirname "$json")"
	printf '[%s\n]\n' "$js" >"$json"
}

media_debugfs || log "no debugfs: only the machine-wide /proc/meminfo figure"
media_loop_up m "$((4 * mb + 512))" ext2 "$MNT" || { log "cannot make the medium"; exit 1; }
MED_MM=${MEDIA_MM[m]}
mkdir -p "$MNT/raw" "$MNT/sm"
sm_up || exit 1
log "writing the ${mb} MiB sources (medium still fast)"
if ! dd if=/dev/urandom of="$MNT/raw/src.dat" bs=1M count="$mb" conv=fsync status=none ||
	! dd if=/dev/urandom of="$SMNT/src.dat" bs=1M count="$mb" conv=fsync status=none ||
	! sync -f "$MNT"; then
	log "cannot write the sources"
	exit 1
fi
media_throttle m "$wbps" "$rbps"
for ((i = 0; i < runs; i++)); do
	log "run $((i + 1))/$runs"
	if ((i % 2 == 0)); then order="raw slowmedia"; else order="slowmedia raw"; fi
	for c in $order; do one_run "$c"; done
done
report
log "results in $json"
