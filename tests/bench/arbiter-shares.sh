#!/usr/bin/env bash
# tests/bench/arbiter-shares.sh [--quick|--full] [--json FILE] [--png FILE] [--opts OPTS]
#
# Bandwidth shares of two slowmedia mounts on one head (two DVD-RAM images
# of one slowdev, so one arbiter group), both writing all the time:
#   prio    prio=1 against prio=6 (mount options): strict priority, the
#           prio 6 mount getting only what aging gives it (a chunk after
#           10 s of waiting)
#   weight  prio 4 both, weight 300 against 100 (set at run time through
#           the daemons' control sockets): 75% / 25% of the bytes
#   equal   prio 4, weight 100 both: 50% / 50%
# Each phase is measured over several windows while both are busy; the
# table gives each mount's share of the bytes (as the medium counted them,
# and as the arbiter granted them) as median [min-max] over the windows,
# and a PNG plots each mount's bytes over time (skipped, with a message,
# without matplotlib). Root only (exit 77 otherwise).
set -u -o pipefail

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
: "${SLOWMEDIA_BUILD:=$top/build}"
export SLOWMEDIA_BUILD
MEDIA_STATE=/var/tmp/smshare-$$
# shellcheck source=../lib/media.sh
. "$top/tests/lib/media.sh"
# shellcheck source=lib.sh
. "$here/lib.sh"
# shellcheck source=arblib.sh
. "$here/arblib.sh"

usage() {
	cat <<EOF
usage: tests/bench/arbiter-shares.sh [--quick|--full] [--json FILE] [--png FILE] [--opts OPTS]

  --quick      3 windows of 10 s per phase (about 2.5 minutes; default)
  --full       5 windows of 30 s per phase (about 9 minutes)
  --json FILE  default: \$SLOWMEDIA_BUILD/bench-arbiter-shares.json
  --png FILE   default: the JSON's name with .png
  --opts OPTS  slowmedia -o options of both mounts (default latency=100,queue=4M)
EOF
}

mode=quick json='' png='' opts=latency=100,queue=4M
while [ $# -gt 0 ]; do
	case $1 in
	--quick) mode=quick ;;
	--full) mode=full ;;
	--json) json=${2:?--json needs a file}; shift ;;
	--png) png=${2:?--png needs a file}; shift ;;
	--opts) opts=${2:?--opts needs options}; shift ;;
	-h | --help) usage; exit 0 ;;
	*) echo "arbiter-shares: unknown argument $1" >&2; usage >&2; exit 2 ;;
	esac
	shift
done
json=${json:-$SLOWMEDIA_BUILD/bench-arbiter-shares.json}
png=${png:-${json%.json}.png}
if [ "$(id -u)" != 0 ]; then
	echo "arbiter-shares: needs root (loop devices, mounts)" >&2
	exit 77
fi
if [ "$mode" = quick ]; then
	NWIN=3 WIN_S=10 WARM=3 ARB_IMG_MB=4096
else
	NWIN=5 WIN_S=30 WARM=10 ARB_IMG_MB=8192
fi
SAMPLE_S=0.25

media_install_traps
arb_prepare
rc=$?
[ $rc = 0 ] || exit $rc
OUT=$MEDIA_STATE/samples.tsv WINDOWS=$MEDIA_STATE/windows

D1=$MEDIA_STATE/d1 D2=$MEDIA_STATE/d2
log "arbiter-shares: mode $mode; two dvdram images on one head; slowmedia -o $opts"
arb_bus_up "d1:dvdram:ext2:$D1" "d2:dvdram:ext2:$D2" || exit 1
smx_up d1 "$D1" "$opts,prio=1" && smx_up d2 "$D2" "$opts,prio=6" || exit 1
smx_wait_arbiter d1 connected && smx_wait_arbiter d2 connected || exit 1
$SMCTL "$SLOWMEDIA_ARBITER_SOCKET" --all id,group,prio,weight,mountpoint | sed 's/^/  arbiter: /' >&2
[ "$($SMCTL "$SLOWMEDIA_ARBITER_SOCKET" --all group | sort -u | wc -l)" = 1 ] ||
	{ log "the two mounts are not in one arbiter group"; exit 1; }

python3 "$here/arbshares.py" sample "$(slowdev_dir "$ARB_BUS")/dev/stats" \
	"$SLOWMEDIA_ARBITER_SOCKET" "$OUT" "$SAMPLE_S" "d1=$D1" "d2=$D2" &
SAMPLER=$!
media_on_exit sampler "kill $SAMPLER 2>/dev/null; wait $SAMPLER 2>/dev/null"

# Two writers, one per mount, for the whole run (lib.sh's writer_stop
# knows one: the second has its own undo step).
dd if=/dev/zero of="$D2/w" bs=1M status=none 2>/dev/null &
WRITER2=$!
disown "$WRITER2"
media_on_exit writer2 "kill -KILL $WRITER2 2>/dev/null"
writer_to "$D1/w"

# phase NAME "d1:PRIO:WEIGHT:EXPECTED d2:..."
phase() {
	local name=$1 mounts=$2 i t0 t1
	log "== phase $name ($mounts): ${WARM}s, then $NWIN windows of ${WIN_S}s"
	sleep "$WARM"
	for ((i = 1; i <= NWIN; i++)); do
		t0=$EPOCHREALTIME
		sleep "$WIN_S"
		t1=$EPOCHREALTIME
		echo "$name $t0 $t1 $mounts" >>"$WINDOWS"
	done
	$SMCTL "$SLOWMEDIA_ARBITER_SOCKET" --all id,prio,weight,grants,bytes,waiting_ms |
		sed 's/^/  arbiter (id prio weight grants bytes waiting_ms): /' >&2
	# The daemons' own bandwidth estimates size their chunks (latency=).
	log "  flush_rate (B/s) d1 $(smx_get d1 flush_rate) d2 $(smx_get d2 flush_rate)"
}

set_both() { # set_both "FIELDS1" "FIELDS2"
	# shellcheck disable=SC2086
	$SMCTL "$(smx_sock d1)" set $1 && $SMCTL "$(smx_sock d2)" set $2
}

: >"$WINDOWS"
phase prio "d1:1:100:1.0 d2:6:100:0.0"
set_both "prio=4 weight=300" "prio=4 weight=100" || { log "set failed"; exit 1; }
phase weight "d1:4:300:0.75 d2:4:100:0.25"
set_both "weight=100" "weight=100" || { log "set failed"; exit 1; }
phase equal "d1:4:100:0.5 d2:4:100:0.5"

writer_stop
media_undo writer2
media_undo sampler
slowdev_ctl "$ARB_BUS" "fast on"
rm -f "$D1/w" "$D2/w"
mkdir -p "$(dirname "$json")"
cp "$OUT" "${json%.json}.samples.tsv"
cp "$WINDOWS" "${json%.json}.windows"
PY=$(pick_python) || PY=python3
"$PY" "$here/arbshares.py" report "$OUT" "$WINDOWS" "$json" "$png"
rc=$?
media_cleanup_all
log "done in ${SECONDS}s"
[ $rc = 0 ] && echo "JSON: $json (samples: ${json%.json}.samples.tsv)"
exit $rc
