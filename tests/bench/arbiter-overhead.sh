#!/usr/bin/env bash
# tests/bench/arbiter-overhead.sh [--quick|--full] [--json FILE] [--opts OPTS]
#
# What the arbiter costs:
#   rtt    the grant round trip: a private slowmedia-arbiterd, 8 clients
#          registered in one group (arbrtt), request -> grant for one busy
#          client while the other 7 are registered and silent, and with all
#          8 contending; median and p99 in microseconds, per run, over
#          several runs
#   flush  the flush rate of one mount on one medium (slowdev, DVD-RAM
#          profile, ext2) under a sustained write, with the arbiter
#          (arbiter=auto: a group of one, a grant per chunk) and with
#          arbiter=off, runs alternating; the ratio of the medians
#          (target >= 0.98)
# Root only (exit 77 otherwise). See tests/bench/README.md.
set -u -o pipefail

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
: "${SLOWMEDIA_BUILD:=$top/build}"
export SLOWMEDIA_BUILD
MEDIA_STATE=/var/tmp/smarbo-$$
# shellcheck source=../lib/media.sh
. "$top/tests/lib/media.sh"
# shellcheck source=lib.sh
. "$here/lib.sh"
# shellcheck source=arblib.sh
. "$here/arblib.sh"

SCEN=arbiter-overhead

usage() {
	cat <<EOF
usage: tests/bench/arbiter-overhead.sh [--quick|--full] [--json FILE] [--opts OPTS] [rtt] [flush]

  --quick      rtt: 3 runs of 5,000 round trips; flush: 3 runs per column of
               10 s (about 3 minutes; default)
  --full       rtt: 5 runs of 20,000; flush: 5 runs per column of 30 s (about 9 minutes)
  --json FILE  default: \$SLOWMEDIA_BUILD/bench-arbiter-overhead.json
  --opts OPTS  slowmedia -o options (default latency=100,queue=4M; full: queue=64M)
EOF
}

mode=quick json='' opts='' parts=''
while [ $# -gt 0 ]; do
	case $1 in
	--quick) mode=quick ;;
	--full) mode=full ;;
	--json) json=${2:?--json needs a file}; shift ;;
	--opts) opts=${2:?--opts needs options}; shift ;;
	rtt | flush) parts+=" $1" ;;
	-h | --help) usage; exit 0 ;;
	*) echo "arbiter-overhead: unknown argument $1" >&2; usage >&2; exit 2 ;;
	esac
	shift
done
parts=${parts:-rtt flush}
json=${json:-$SLOWMEDIA_BUILD/bench-arbiter-overhead.json}
if [ "$(id -u)" != 0 ]; then
	echo "arbiter-overhead: needs root (loop devices, mounts)" >&2
	exit 77
fi
if [ "$mode" = quick ]; then
	RTT_RUNS=3 RTT_ROUNDS=5000 FLUSH_RUNS=3 FLUSH_WARM=4 FLUSH_S=10 ARB_IMG_MB=2048
	: "${opts:=latency=100,queue=4M}"
else
	RTT_RUNS=5 RTT_ROUNDS=20000 FLUSH_RUNS=5 FLUSH_WARM=10 FLUSH_S=30 ARB_IMG_MB=4096
	: "${opts:=latency=100,queue=64M}"
fi
RTT_CLIENTS=8
WBPS=2000000 # the DVD-RAM profile's write bandwidth

media_install_traps
RES=$MEDIA_STATE.results.tsv
: >"$RES"
media_on_exit results "rm -f $RES"
arb_prepare
rc=$?
[ $rc = 0 ] || exit $rc
ARBRTT=$SLOWMEDIA_BUILD/tests/bench/arbrtt

# ---- grant round trip -----------------------------------------------------

rtt_arbiter_down() {
	media_forget rtt-arbiter
	kill -TERM "$RTT_PID" 2>/dev/null
	media_bounded 5 wait_pid_gone "$RTT_PID"
	[ "$MB_TIMEDOUT" = 1 ] && kill -KILL "$RTT_PID" 2>/dev/null
	wait "$RTT_PID" 2>/dev/null
	return 0
}

part_rtt() {
	local sock=$MEDIA_STATE/rtt.sock i m out
	COL=slowmedia
	if [ ! -x "$ARBRTT" ]; then
		note "$SCEN" slowmedia "no arbrtt at $ARBRTT (build with -Dbench=true)"
		return
	fi
	"$ARBITERD_BIN" -f --socket "$sock" </dev/null >"$MEDIA_STATE/rtt-arbiterd.log" 2>&1 &
	RTT_PID=$!
	media_on_exit rtt-arbiter rtt_arbiter_down
	for ((i = 0; i < 50; i++)); do
		[ -S "$sock" ] && break
		sleep 0.1
	done
	log "== grant round trip: $RTT_CLIENTS clients in one group, $RTT_RUNS runs of $RTT_ROUNDS"
	for ((i = 1; i <= RTT_RUNS; i++)); do
		for m in one all; do
			out=$("$ARBRTT" "$sock" --clients "$RTT_CLIENTS" --rounds "$RTT_ROUNDS" \
				$([ "$m" = all ] && echo --all)) || {
				log "  arbrtt failed"
				note "$SCEN" slowmedia "arbrtt failed (see log above)"
				rtt_arbiter_down
				return
			}
			MB_OUT=$out
			log "  run $i $m: $out"
			rec "$SCEN" "grant_rtt_${m}_p50_us" us "$(kv p50_us)"
			rec "$SCEN" "grant_rtt_${m}_p99_us" us "$(kv p99_us)"
			rec "$SCEN" "grant_cycle_${m}_us" us "$(kv cycle_us)"
		done
	done
	rtt_arbiter_down
}

# ---- flush rate -------------------------------------------------------------

flush_run() {
	local o=$1 want=$2 w0 w1 t0 t1 mbs
	smx_up m "$MNT" "$o" || return 1
	smx_wait_arbiter m "$want" || { media_undo sm:m; return 1; }
	writer_to "$MNT/w"
	sleep "$FLUSH_WARM"
	w0=$(slowdev_stat "$ARB_BUS" m.write_bytes) t0=$EPOCHREALTIME
	sleep "$FLUSH_S"
	w1=$(slowdev_stat "$ARB_BUS" m.write_bytes) t1=$EPOCHREALTIME
	mbs=$(awk -v a="$w0" -v b="$w1" -v s="$t0" -v e="$t1" 'BEGIN { printf "%.4f", (b - a) / 1e6 / (e - s) }')
	rec "$SCEN" flush_mb_s MB/s "$mbs"
	rec "$SCEN" flush_vs_bw x "$(awk -v m="$mbs" -v b="$WBPS" 'BEGIN { printf "%.4f", m * 1e6 / b }')"
	log "  [$COL] flush ${mbs} MB/s (arbiter=$(smx_get m arbiter), $(smx_get m chunks) chunks so far)"
	writer_stop
	# The queued rest is dropped with the file (unlinked, not open).
	t0=$SECONDS
	slowdev_ctl "$ARB_BUS" "fast on"
	rm -f "$MNT/w"
	media_undo sm:m
	slowdev_ctl "$ARB_BUS" "fast off"
	((SECONDS - t0 > 10)) && log "  (unmount took $((SECONDS - t0))s)"
	return 0
}

part_flush() {
	local i c
	MNT=$MEDIA_STATE/m
	log "== flush rate: one mount, sustained write, $FLUSH_RUNS runs per column of ${FLUSH_S}s after ${FLUSH_WARM}s"
	arb_bus_up "m:dvdram:ext2:$MNT" || { note "$SCEN" - "slowdev did not come up"; return; }
	for ((i = 1; i <= FLUSH_RUNS; i++)); do
		# Alternating which goes first, so a drift of the machine does not
		# favour one column.
		for c in $( ((i % 2)) && echo "slowmedia slowmedia_arboff" || echo "slowmedia_arboff slowmedia"); do
			COL=$c
			if [ "$c" = slowmedia ]; then
				flush_run "$opts" connected
			else
				flush_run "arbiter=off,$opts" off
			fi || note "$SCEN" "$c" "a run failed (see log above)"
		done
	done
	media_undo "bus:$ARB_BUS"
	arb_stop
}

log "arbiter-overhead: mode $mode; parts:$parts; slowmedia -o $opts"
for p in $parts; do "part_$p"; done

media_forget results
media_cleanup_all
log "done in ${SECONDS}s"
mkdir -p "$(dirname "$json")"
python3 "$here/report.py" "$RES" "$json" --columns slowmedia_arboff,slowmedia
rc=$?
rm -f "$RES"
[ $rc = 0 ] || exit $rc
echo "JSON: $json"
python3 - "$json" <<'EOF'
import json, sys
recs = {r["metric"]: r for r in json.load(open(sys.argv[1]))}
f = recs.get("flush_mb_s")
if f and f.get("slowmedia") and f.get("slowmedia_arboff"):
    r = f["slowmedia"]["median"] / f["slowmedia_arboff"]["median"]
    print("target: flush rate with the arbiter / arbiter=off >= 0.98: %.3f -> %s"
          % (r, "met" if r >= 0.98 else "NOT met"))
for m in ("one", "all"):
    p50, p99 = recs.get("grant_rtt_%s_p50_us" % m), recs.get("grant_rtt_%s_p99_us" % m)
    if p50 and p50.get("slowmedia"):
        print("grant round trip (%s): p50 %.1f us [%.1f-%.1f], p99 %.1f us [%.1f-%.1f] (medians over runs)"
              % ("one busy, 7 idle" if m == "one" else "8 contending",
                 p50["slowmedia"]["median"], p50["slowmedia"]["min"], p50["slowmedia"]["max"],
                 p99["slowmedia"]["median"], p99["slowmedia"]["min"], p99["slowmedia"]["max"]))
EOF
exit 0
