#!/usr/bin/env bash
# tests/bench/same-channel.sh [--quick|--full] [--json FILE] [--columns LIST] [--opts OPTS]
#
# The seed's "same IDE channel" rows: medium A (a DVD-RAM) is written while
# medium B (a ZIP) behind the same head is read: a 20 MB sequential read
# and single uncached 4 KiB reads of B, alone and during the write. Three
# columns in one run: raw (both ext2 mounted directly), slowmedia (both
# mounted through slowmedia with the default arbiter=auto: one arbiter, one
# group), slowmedia_arboff (both with arbiter=off). Root only (exit 77
# otherwise). See tests/bench/README.md.
set -u -o pipefail

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
: "${SLOWMEDIA_BUILD:=$top/build}"
export SLOWMEDIA_BUILD
MEDIA_STATE=/var/tmp/smchan-$$
# shellcheck source=../lib/media.sh
. "$top/tests/lib/media.sh"
# shellcheck source=lib.sh
. "$here/lib.sh"
# shellcheck source=arblib.sh
. "$here/arblib.sh"

ALL_COLUMNS="raw slowmedia slowmedia_arboff"
SCEN=samechannel

usage() {
	cat <<EOF
usage: tests/bench/same-channel.sh [--quick|--full] [--json FILE] [--columns LIST] [--opts OPTS]

  --quick        4 MiB read, 1 session per column x 3 reads (about 3 minutes; default)
  --full         the seed's 20 MB read, 3 sessions per column (about 35 minutes)
  --json FILE    default: \$SLOWMEDIA_BUILD/bench-same-channel.json
  --columns L    comma-separated subset of: ${ALL_COLUMNS// /,}
  --opts OPTS    slowmedia -o options of both mounts (default latency=100,queue=4M;
                 full: queue=64M); slowmedia_arboff adds arbiter=off
EOF
}

mode=quick json='' columns=$ALL_COLUMNS opts=''
while [ $# -gt 0 ]; do
	case $1 in
	--quick) mode=quick ;;
	--full) mode=full ;;
	--json) json=${2:?--json needs a file}; shift ;;
	--columns) columns=${2//,/ }; shift ;;
	--opts) opts=${2:?--opts needs options}; shift ;;
	-h | --help) usage; exit 0 ;;
	*) echo "same-channel: unknown argument $1" >&2; usage >&2; exit 2 ;;
	esac
	shift
done
for c in $columns; do
	[[ " $ALL_COLUMNS " == *" $c "* ]] || { echo "same-channel: unknown column $c" >&2; exit 2; }
done
json=${json:-$SLOWMEDIA_BUILD/bench-same-channel.json}
if [ "$(id -u)" != 0 ]; then
	echo "same-channel: needs root (loop devices, mounts, drop of page caches)" >&2
	exit 77
fi

BENCH_MODE=$mode
if [ "$mode" = quick ]; then
	SESSIONS=1 BENCH_REPS=3 READ_MB=4 N4K=5 BUDGET4K=20
	PAUSE=2 WARM=4 FLUSH_S=2 PROBE_T=15 P4K_T=10 BENCH_SETTLE_S=3 ARB_IMG_MB=4096
	: "${opts:=latency=100,queue=4M}"
else
	SESSIONS=3 BENCH_REPS=1 READ_MB=20 N4K=5 BUDGET4K=180
	PAUSE=10 WARM=30 FLUSH_S=20 PROBE_T=120 P4K_T=60 BENCH_SETTLE_S=10 ARB_IMG_MB=8192
	: "${opts:=latency=100,queue=64M}"
fi
FILE_MB=$((READ_MB > 4 ? READ_MB : 4))

media_install_traps
RES=$MEDIA_STATE.results.tsv
: >"$RES"
media_on_exit results "rm -f $RES"
arb_prepare
rc=$?
[ $rc = 0 ] || exit $rc
# settle_reads (lib.sh) watches the read medium's loop device.
MEDIUM=slowdev

# B's file, through whatever the column mounted, and on the lower.
b_path() { echo "$B/sd.dat"; }
b_lower() {
	if [ "$COL" = raw ]; then echo "$B/sd.dat"; else smx_lower b sd.dat; fi
}

# Only B's file leaves the caches: a global drop would also throw away A's
# block maps and bitmaps, which the writer would then read back in front of
# the probe (see lib.sh's probe_direct4k). Through slowmedia both the FUSE
# file's pages and the lower's go.
b_evict() {
	"$SMBIO" evict "$(b_path)" && { [ "$COL" = raw ] || "$SMBIO" evict "$(b_lower)"; }
}

dvd_bytes() { slowdev_stat "$ARB_BUS" dvd.write_bytes; }

# The 20 MB sequential read of B (quick: 4 MiB), and what A got written
# meanwhile.
probe_read20() {
	local i tag=idle w0 w1
	[ "$PHASE" = during ] && tag=write
	for ((i = 0; i < BENCH_REPS; i++)); do
		settle_reads
		b_evict
		w0=$(dvd_bytes)
		measure "$PROBE_T" dd if="$(b_path)" of=/dev/null bs=1M count="$READ_MB" status=none
		w1=$(dvd_bytes)
		rec "$SCEN" "b_read_20mb_${tag}_s" s "$MB_ELAPSED" "$MB_TIMEDOUT"
		[ "$tag" = write ] && rec "$SCEN" a_write_during_read_mb_s MB/s \
			"$(awk -v a="$w0" -v b="$w1" -v t="$MB_ELAPSED" 'BEGIN { printf "%.3f", (b - a) / 1e6 / t }')"
		log "  B read ${READ_MB} MiB ($PHASE): ${MB_ELAPSED}s$([ "$MB_TIMEDOUT" = 1 ] && echo ' (bound)'), A written meanwhile $(((w1 - w0) / 1000)) kB"
		quick_give_up && break
	done
	[ "$tag" = write ] && ratio "$SCEN" b_read_20mb_factor \
		"$SCEN:b_read_20mb_write_s" "$SCEN:b_read_20mb_idle_s"
	return 0
}

# Single 4 KiB O_DIRECT reads of B, each alone: the file's data evicted, the
# file opened untimed, the block in its first 48 KiB (mapped by the inode),
# so each is one access of the medium; a random pause between them lets the
# writer go on (reads hold the group for read_grace, 20 ms, after they end).
probe_read4k() {
	local i name=b_read_4k_idle_ms t0=$SECONDS left bound ms
	[ "$PHASE" = during ] && name=b_read_4k_ms
	for ((i = 0; i < N4K; i++)); do
		left=$((BUDGET4K - (SECONDS - t0)))
		((left > 0)) || { log "  4 KiB reads: budget of ${BUDGET4K}s spent after $i"; break; }
		bound=$((left < P4K_T ? left : P4K_T))
		settle_reads
		b_evict
		sleep "0.$((RANDOM % 4 + 2))"
		measure "$((bound + 3))" "$SMBIO" latread "$(b_path)" 4096 1 "$bound" direct opened within=49152
		if kv max_ms >/dev/null; then
			ms=$(kv max_ms)
			rec "$SCEN" "$name" ms "$ms" "$(kv censored)"
		else
			ms=$(awk -v t="$MB_ELAPSED" 'BEGIN { print t * 1000 }')
			rec "$SCEN" "$name" ms "$ms" 1
			MB_TIMEDOUT=1
		fi
		[ "$(kv censored)" = 1 ] && MB_TIMEDOUT=1
		log "  4 KiB read ($PHASE) $((i + 1))/$N4K: ${ms} ms$([ "$MB_TIMEDOUT" = 1 ] && echo ' (bound)')"
		quick_give_up && break
	done
	return 0
}

column_up() {
	local o want
	case $COL in
	raw) return 0 ;;
	slowmedia) o=$opts want=connected ;;
	slowmedia_arboff) o=arbiter=off,$opts want=off ;;
	esac
	smx_up a "$A" "$o" && smx_up b "$B" "$o" hold || return 1
	smx_wait_arbiter a "$want" && smx_wait_arbiter b "$want" || return 1
	if [ "$COL" = slowmedia ]; then
		# Both in one group, the default one (the slowdev images' device).
		$SMCTL "$SLOWMEDIA_ARBITER_SOCKET" --all id,group,mountpoint | sed 's/^/  arbiter: /' >&2
		[ "$($SMCTL "$SLOWMEDIA_ARBITER_SOCKET" --all group | sort -u | wc -l)" = 1 ] ||
			{ log "  the two mounts are not in one group"; return 1; }
	fi
}

session_one() {
	local w0 w1 t0 t1
	A=$MEDIA_STATE/a B=$MEDIA_STATE/b
	arb_bus_up "dvd:dvdram:ext2:$A" "zip:zip:ext2:$B" || return 1
	MED_DEV=$(slowdev_loop "$ARB_BUS" zip)
	slowdev_ctl "$ARB_BUS" "fast on"
	"$SMBIO" fill "$B/sd.dat" "$FILE_MB" >/dev/null && sync -f "$B" || return 1
	slowdev_ctl "$ARB_BUS" "fast off"
	column_up || return 1
	PHASE=alone
	sleep "$PAUSE"
	probe_read20
	probe_read4k
	writer_to "$A/tmp"
	sleep "$((WARM - FLUSH_S))"
	w0=$(dvd_bytes) t0=$EPOCHREALTIME
	sleep "$FLUSH_S"
	w1=$(dvd_bytes) t1=$EPOCHREALTIME
	rec "$SCEN" a_flush_mb_s MB/s "$(awk -v a="$w0" -v b="$w1" -v s="$t0" -v e="$t1" 'BEGIN { printf "%.3f", (b - a) / 1e6 / (e - s) }')"
	PHASE=during
	probe_read20
	probe_read4k
	writer_stop
}

session_teardown() {
	local t0=$SECONDS
	media_undo writer
	[ -n "${ARB_BUS:-}" ] && slowdev_ctl "$ARB_BUS" "fast on" 2>/dev/null
	# Drops the writer's dirty pages (or queued data) instead of writing them.
	[ -n "${A:-}" ] && [ -e "$A/tmp" ] && media_bounded 60 rm -f "$A/tmp"
	media_pending_wait
	media_undo sm:b
	media_undo sm:a
	arb_stop
	[ -n "${ARB_BUS:-}" ] && media_undo "bus:$ARB_BUS"
	ARB_BUS=
	((SECONDS - t0 > 10)) && log "  (teardown took $((SECONDS - t0))s)"
	return 0
}

log "same-channel: mode $mode; columns: $columns; slowmedia -o $opts; B read ${READ_MB} MiB"
for COL in $columns; do
	for ((s = 1; s <= SESSIONS; s++)); do
		log "== same-channel [$COL] session $s/$SESSIONS"
		session_one || note "$SCEN" "$COL" "session failed (see log above)"
		session_teardown
	done
done

media_forget results
media_cleanup_all
log "done in ${SECONDS}s"
mkdir -p "$(dirname "$json")"
# shellcheck disable=SC2086
python3 "$here/report.py" "$RES" "$json" --columns "${columns// /,}"
rc=$?
rm -f "$RES"
[ $rc = 0 ] || exit $rc
echo "JSON: $json"
python3 - "$json" <<'EOF'
import json, sys
recs = {r["metric"]: r for r in json.load(open(sys.argv[1]))}
def col(metric, c="slowmedia"):
    return (recs.get(metric) or {}).get(c)
f, r4 = col("b_read_20mb_factor"), col("b_read_4k_ms")
if f:
    print("target: read factor with the arbiter <= 1.2: median %.3f -> %s"
          % (f["median"], "met" if f["median"] <= 1.2 and not f["timed_out"] else "NOT met"))
if r4:
    print("target: 4 KiB read with the arbiter <= 200 ms: median %.1f ms (%s), max %.1f ms (%s)"
          % (r4["median"], "met" if r4["median"] <= 200 else "NOT met",
             r4["max"], "met" if r4["max"] <= 200 and not r4["timed_out"] else "NOT met"))
EOF
exit 0
