#!/usr/bin/env bash
# tests/bench/soak.sh [--full|--quick] [--minutes N] [--json FILE] [--opts OPTS] [--seed N] [--img-mb N]
#                     [--kill-at MIN]
#
# The soak benchmark (not CI): two slowmedia mounts over two ext2 DVD-RAM
# images behind one slowdev head (one arbiter group, the arbiter on), 4
# writers and 2 readers on each for 20 minutes (--quick: 2). The writers
# (soak.py writer) make files of 4 KiB..4 MiB, overwrite, append,
# truncate, rename and delete them, fsync now and then, read some back
# through the mount against their model (the same changes made in a
# directory on the fast disk); the readers read random ranges and files.
# Every minute each daemon's and the arbiter's RSS, open fds and threads
# are printed (soak.py sample, which reads /proc every second), and a
# daemon that flushed nothing in the minute while data was queued is
# flagged, its threads' stacks saved. At the end the queues are drained
# (slowmediactl drain), slowmedia unmounted, the images checked (e2fsck
# -fn, through new read-only loop devices) and mounted read-only, and
# every file compared with the model. Bounds: RSS <= queue + 32 MiB
# (arbiter: 32 MiB); fds not on the mount's files at the last minute <=
# the first minute's + 16, and after the drain no more fds on files than
# files, none on deleted ones; threads <= max_threads + 16 (arbiter: the
# first minute's + 4). Exit 0 if every bound and check passes, 1
# otherwise, 77 without root or a build. See README.md, "Soak".
#
# --kill-at MIN: both mounts get spool= (DIR/spool, unless --opts has one),
# and MIN minutes into the load m1's daemon is killed with SIGKILL: its
# workers stop starting ops (a flag file), the ops in flight are cut off
# (ENOTCONN/ECONNABORTED: counted apart, their files left out of the
# check and removed once the mount is back), the dead mount is detached and slowmedia mounted again over the
# same medium with the same spool (the replay puts what was acknowledged
# but not yet flushed on the medium before the mount comes up); then the
# workers go on. The model check at the end must find no difference:
# every op acknowledged before the kill is in the model and must be on the
# medium.
set -u -o pipefail

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
: "${SLOWMEDIA_BUILD:=$top/build}"
export SLOWMEDIA_BUILD
MEDIA_STATE=/var/tmp/soak-$$
# shellcheck source=../lib/media.sh
. "$top/tests/lib/media.sh"
# shellcheck source=lib.sh
. "$here/lib.sh"
# shellcheck source=arblib.sh
. "$here/arblib.sh"

WRITERS_PER_MOUNT=4
READERS_PER_MOUNT=2
BUDGET_PCT=60 # of an image's free space, shared by its writers
RSS_SLACK_MIB=32 # over queue= (the arbiter's bound: this alone)
FD_SLACK=16      # fds (less files) at the last minute over the first minute's
THREAD_SLACK=16  # threads over max_threads (the arbiter's: 4 over the first minute's)
RELEASE_T=300    # for a loop device another mount namespace still holds (see foreign_holders)
FOREIGN_WAIT_S=300 # the same for a daemon
SLOW_EXIT_S=5 # a daemon's exit after its umount: longer, and its stacks are taken
STALL_ABORT_S=${SOAK_STALL_ABORT_S:-180} # no byte to the medium for this long after the deadline: stuck
WORKER_GRACE_S=600 # after the deadline, for the op in progress (a 4 MiB write under backpressure)
DRAIN_T=600
KILL_SETTLE_S=2   # --kill-at: between the kill and the detach of the dead mount
KILL_SPOOL_MAX=32M # --kill-at: the spool's bound (see "the run")
REMOUNT_WAIT_S=1800 # --kill-at: for the replay (a whole spool segment, up to 64 MiB, on a shared head) and the mount

usage() {
	cat <<EOF
usage: tests/bench/soak.sh [--full|--quick] [--minutes N] [--json FILE] [--opts OPTS] [--seed N] [--img-mb N]

  --full       20 minutes of load (the default)
  --quick      2 minutes
  --minutes N  N minutes of load, whatever the mode
  --json FILE  default: \$SLOWMEDIA_BUILD/bench-soak.json
  --opts OPTS  slowmedia -o options of both mounts
               (default arbiter=auto,latency=100,queue=8M)
  --seed N     the writers' seeds are N+1..N+8 (default: the pid): a seed
               gives a writer the same sequence of operations again
  --img-mb N   size of each image (default 256)
  --kill-at MIN  with spool=,spool_max=32M on both mounts (added when --opts has none),
               kill -9 m1's daemon MIN minutes into the load and mount it
               again over the same spool (the replay); the workers go on
EOF
}

mode=full minutes='' json='' opts=arbiter=auto,latency=100,queue=8M seed=$$ img_mb=256 kill_at=
cmdline="$*"
while [ $# -gt 0 ]; do
	case $1 in
	--quick) mode=quick ;;
	--full) mode=full ;;
	--minutes) minutes=${2:?--minutes needs a number}; shift ;;
	--json) json=${2:?--json needs a file}; shift ;;
	--opts) opts=${2:?--opts needs options}; shift ;;
	--seed) seed=${2:?--seed needs a number}; shift ;;
	--img-mb) img_mb=${2:?--img-mb needs a size}; shift ;;
	--kill-at) kill_at=${2:?--kill-at needs a minute}; shift ;;
	-h | --help) usage; exit 0 ;;
	*) echo "soak: unknown argument $1" >&2; usage >&2; exit 2 ;;
	esac
	shift
done
[ -n "$minutes" ] || { [ "$mode" = quick ] && minutes=2 || minutes=20; }
for v in minutes seed img_mb ${kill_at:+kill_at}; do
	if [[ ! ${!v} =~ ^[0-9]+$ ]] || [ "${!v}" = 0 ]; then
		echo "soak: bad --${v/_/-} ${!v}" >&2
		exit 2
	fi
done
if [ -n "$kill_at" ] && [ "$kill_at" -ge "$minutes" ]; then
	echo "soak: --kill-at $kill_at is not within the $minutes minutes of load" >&2
	exit 2
fi
json=${json:-$SLOWMEDIA_BUILD/bench-soak.json}
if [ "$(id -u)" != 0 ]; then
	echo "soak: needs root (loop devices, mounts)" >&2
	exit 77
fi
SLOWMEDIACTL=$SLOWMEDIA_BUILD/mount-helpers/slowmediactl
if [ ! -x "$SLOWMEDIA_BUILD/fusefs/slowmedia" ] || [ ! -x "$SLOWMEDIACTL" ]; then
	echo "soak: no build in $SLOWMEDIA_BUILD: build first (bash tests/build.sh, or" \
		"meson setup DIR && ninja -C DIR) and set SLOWMEDIA_BUILD=DIR" >&2
	exit 77
fi
for c in e2fsck losetup; do
	command -v "$c" >/dev/null || { echo "soak: no $c (e2fsprogs, util-linux)" >&2; exit 77; }
done

# The commit the build was made from (its meson source dir), read-only git.
build_commit() {
	local src c
	src=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["directories"]["source"])' \
		"$SLOWMEDIA_BUILD/meson-info/meson-info.json" 2>/dev/null) || { echo unknown; return; }
	c=$(git -C "$src" rev-parse --short HEAD 2>/dev/null) || { echo unknown; return; }
	[ -n "$(git --no-optional-locks -C "$src" status --porcelain -uno 2>/dev/null)" ] && c+=-dirty
	echo "$c"
}

# opt_value KEY DEFAULT: KEY's value in $opts.
opt_value() {
	local o v=$2
	for o in ${opts//,/ }; do
		[ "${o%%=*}" = "$1" ] && v=${o#*=}
	done
	echo "$v"
}

# size_bytes SIZE: K, M, G, T binary suffixes, as the daemon reads them.
size_bytes() {
	awk -v s="$1" 'BEGIN { n = s + 0; u = toupper(substr(s, length(s)))
		m = u == "K" ? 1024 : u == "M" ? 1048576 : u == "G" ? 1073741824 : u == "T" ? 1099511627776 : 1
		printf "%d", n * m }'
}

# ---- helpers ------------------------------------------------------------------

# The workers are disowned (no "Killed" notices): whether one finished is
# told by its stats file ("done"), its traceback by its log.
# shellcheck disable=SC2317 # run by media_cleanup_all
kill_workers() {
	local p i
	for p in "${WORKERS[@]}"; do kill -KILL "$p" 2>/dev/null; done
	# One waiting for a daemon that does not answer stays (D state) until
	# the daemon is gone: left to media_pending_wait after the daemons.
	for ((i = 0; i < 50; i++)); do
		alive_workers >/dev/null || break
		sleep 0.1
	done
	for p in $(alive_workers); do media_pending_add "$p"; done
	return 0
}

# start_worker NAME ARGS...: soak.py ARGS in the background, as worker NAME.
start_worker() {
	local name=$1
	shift
	python3 "$here/soak.py" "$@" 2>"$MEDIA_STATE/$name.log" &
	WORKERS+=($!)
	WORKER_NAME[$!]=$name
	disown $!
}

# Is PID running (not a zombie)?
running() {
	local st
	st=$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null) && [ -n "$st" ] && [ "$st" != Z ]
}

# The workers still running; 1 if none.
alive_workers() {
	local p r=1
	for p in "${WORKERS[@]}"; do
		running "$p" && { echo "$p"; r=0; }
	done
	return $r
}

drain_one() {
	local k=$1 t0=$EPOCHREALTIME rc
	"$SLOWMEDIACTL" drain "${MNT[$k]}" --timeout "$DRAIN_T" 2>&1 | sed "s/^/  drain $k: /" >&2
	rc=${PIPESTATUS[0]}
	echo "$rc $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')" \
		>"$MEDIA_STATE/drain-$k"
}

# Processes of other mount namespaces that have PATH mounted, one per
# namespace: "pid mnt:[ns] command". An `unshare -m` (other tests, systemd
# services) copies every mount there is, ours too, and the copy keeps the
# superblock alive after our umount: a FUSE daemon then serves on, an ext2
# stays mounted (and its device busy).
foreign_holders() {
	local path=$1 p ns me seen=" "
	me=$(readlink /proc/self/ns/mnt)
	for p in /proc/[0-9]*; do
		ns=$(readlink "$p/ns/mnt" 2>/dev/null) || continue
		[ "$ns" = "$me" ] && continue
		[[ $seen == *" $ns "* ]] && continue
		awk -v m="$path" '$5 == m { f = 1 } END { exit !f }' "$p/mountinfo" 2>/dev/null || continue
		seen+="$ns "
		echo "${p#/proc/} $ns $(tr '\0' ' ' <"$p/cmdline" 2>/dev/null | cut -c1-100)"
	done
}

# Where the threads of daemon KEY (PID) are (kernel stacks; gdb's
# backtraces when gdb exists) and who else has its mount, into FILE.
stacks_to() {
	local f=$1 k=$2 pid=$3 t
	{
		echo "# daemon $k (pid $pid) at $(date -Iseconds)"
		echo "# other mount namespaces with ${MNT[$k]} mounted:"
		foreign_holders "${MNT[$k]}" | sed 's/^/#   /'
		for t in /proc/"$pid"/task/*; do
			echo "## thread ${t##*/} $(cat "$t/comm" 2>/dev/null) wchan $(cat "$t/wchan" 2>/dev/null)"
			cat "$t/stack" 2>/dev/null
		done
		command -v gdb >/dev/null &&
			timeout 60 gdb -p "$pid" -batch -ex 'thread apply all bt' 2>/dev/null
	} >"$f"
	log "  $k: threads $(grep '^## thread' "$f" | awk '{ print $4 "(" $6 ")" }' | sort | uniq -c |
		tr -s ' \n' ' ')(all in $(basename "$f"))"
}

# A daemon slow to exit once its queue is empty.
exit_stacks() {
	log "  $1: daemon still running ${SLOW_EXIT_S}s after its umount"
	stacks_to "$MEDIA_STATE/exit-$1.txt" "$1" "$2"
	SLOW_EXITS+=("$MEDIA_STATE/exit-$1.txt")
}

# kill_restart KEY: SIGKILL to KEY's daemon, the dead mount detached, the
# daemon started again over the same medium and spool (the replay runs
# before it mounts); the workers of KEY wait meanwhile (DOWN flag file).
kill_restart() {
	local k=$1 old=${SMX_PID[$1]} t0 spool_b q_b
	read -r q_b spool_b < <("$SLOWMEDIACTL" status "${MNT[$k]}" --json 2>/dev/null | python3 -c '
import json, sys
m = json.load(sys.stdin)["mounts"][0]
print(m.get("queued_bytes", "?"), m.get("spool_bytes", "?"))')
	: >"$MEDIA_STATE/down-$k"
	t0=$EPOCHREALTIME
	kill -KILL "$old"
	wait "$old" 2>/dev/null
	KILL_OLD_PID=$old
	log "== kill -9 of $k's daemon (pid $old) at minute $kill_at: $q_b bytes queued," \
		"$spool_b in the spool"
	# What was in flight gets ECONNABORTED, what comes next ENOTCONN: give
	# the ops that had begun time to hit the dead mount, not the bare lower.
	sleep "$KILL_SETTLE_S"
	umount -l "${MNT[$k]}" || { log "cannot detach the dead mount ${MNT[$k]}"; return 1; }
	mv "$MEDIA_STATE/sm-$k.log" "$MEDIA_STATE/sm-$k.killed.log"
	SMX_UP_WAIT_S=$REMOUNT_WAIT_S smx_up "$k" "${MNT[$k]}" "$opts" || return 1
	echo "${SMX_PID[$k]}" >"$MEDIA_STATE/pid-$k"
	KILL_NEW_PID=${SMX_PID[$k]}
	KILL_DOWN_S=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
	KILL_REPLAY=$(grep -o 'spool replay: [0-9]* records (.*' "$MEDIA_STATE/sm-$k.log" | tail -1)
	export KILL_REPLAY
	rm -f "$MEDIA_STATE/down-$k"
	log "  $k: mounted again as pid ${SMX_PID[$k]}, ${KILL_DOWN_S} s after the kill;" \
		"${KILL_REPLAY:-no replay line in its log}"
	KILLED=yes
}

# Unmounts slowmedia on KEY (queue empty: a plain umount) and waits for its
# daemon's exit status: EXIT_RC[KEY], or "held" if it was killed after
# FOREIGN_WAIT_S while another mount namespace still had the mount.
sm_down() {
	local k=$1 pid=${SMX_PID[$1]} i limit=$MEDIA_DOWN_TIMEOUT_S t0=$EPOCHREALTIME t1 w0 r0 held=
	media_forget "sm:$k"
	w0=$(slowdev_stat "$ARB_BUS" "$k.write_bytes") r0=$(slowdev_stat "$ARB_BUS" "$k.read_bytes")
	umount "${MNT[$k]}" || { log "umount ${MNT[$k]} failed after the drain; lazily"; umount -l "${MNT[$k]}"; }
	t1=$EPOCHREALTIME
	for ((i = 0; i < limit * 10; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		if ((i == SLOW_EXIT_S * 10)); then
			exit_stacks "$k" "$pid"
			held=$(foreign_holders "${MNT[$k]}")
			if [ -n "$held" ]; then
				limit=$FOREIGN_WAIT_S
				log "  $k: still mounted in other mount namespaces (copies made by their" \
					"unshare): $(tr '\n' ';' <<<"$held")"
			fi
		fi
		sleep 0.1
	done
	if kill -0 "$pid" 2>/dev/null; then
		log "daemon $k (pid $pid) did not exit in ${limit}s; killing it"
		kill -KILL "$pid"
	fi
	wait "$pid"
	EXIT_RC[$k]=$?
	[ "${EXIT_RC[$k]}" = 137 ] && [ -n "$held" ] && EXIT_RC[$k]=held
	UMOUNT_S[$k]=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
	EXITED_S[$k]=$(awk -v a="$t1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
	FOREIGN[$k]=${held:+yes}
	log "  $k: umount ${UMOUNT_S[$k]} s, then the daemon's exit ${EXITED_S[$k]} s (status ${EXIT_RC[$k]});" \
		"the medium meanwhile: $(($(slowdev_stat "$ARB_BUS" "$k.write_bytes") - w0)) bytes written," \
		"$(($(slowdev_stat "$ARB_BUS" "$k.read_bytes") - r0)) read"
	if [ "${EXIT_RC[$k]}" != 0 ]; then
		log "daemon $k exited ${EXIT_RC[$k]}; its log:"
		tail -20 "$MEDIA_STATE/sm-$k.log" | sed 's/^/  /' >&2
	elif grep -qiE 'error|warn|fail' "$MEDIA_STATE/sm-$k.log"; then
		log "daemon $k log:"
		grep -iE 'error|warn|fail' "$MEDIA_STATE/sm-$k.log" | tail -20 | sed 's/^/  /' >&2
	fi
	SMX_PID[$k]=
}
# Waits (at most RELEASE_T s) until nothing holds block device DEV; 1 if
# something still does.
wait_released() {
	python3 - "$1" "$RELEASE_T" <<'PY'
import os, sys, time
end = time.time() + float(sys.argv[2])
while True:
    try:
        os.close(os.open(sys.argv[1], os.O_RDONLY | os.O_EXCL))
        sys.exit(0)
    except OSError:
        if time.time() >= end:
            sys.exit(1)
        time.sleep(0.1)
PY
}

# Writes the meta data the report needs (whatever of it exists: an early
# end leaves the drains, exits and checks out), runs the report, copies the
# logs and exits with its verdict. finish EARLY: 1 if the run ended early.
finish() {
	local early=$1 rc arb_same=False f
	[ -n "${ARB_END:-}" ] && [ "$ARB_END" = "$ARB_PID" ] && arb_same=True
	python3 - "$META" <<EOF
import json, os, sys
def num(v):
    return None if v == "" else float(v) if "." in v else int(v) if v.lstrip("-").isdigit() else v
keys = ("m1", "m2")
def per(vals):
    return {k: num(v) for k, v in zip(keys, vals)}
json.dump({"commit": "$COMMIT", "mode": "$mode", "minutes": $minutes, "opts": "$opts",
           "profile": "dvdram", "img_mb": $img_mb, "seed": $seed,
           "queue_bytes": $QUEUE_BYTES, "max_threads": $MAX_THREADS, "run_end": $RUN_END,
           "fd_slack": $FD_SLACK, "thread_slack": $THREAD_SLACK, "rss_slack_mib": $RSS_SLACK_MIB,
           "writers": $((WRITERS_PER_MOUNT * 2)), "readers": $((READERS_PER_MOUNT * 2)),
           "budget_mib": per(["${BUDGET[m1]}", "${BUDGET[m2]}"]),
           "names": {"m1": "daemon", "m2": "daemon", "arbiter": "arbiter"},
           "stalled": "$STALLED", "early": $early == 1,
           "drain_s": per(["${DRAIN_S[m1]:-}", "${DRAIN_S[m2]:-}"]),
           "drain_rc": per(["${DRAIN_RC[m1]:-}", "${DRAIN_RC[m2]:-}"]),
           "exit": per(["${EXIT_RC[m1]:-}", "${EXIT_RC[m2]:-}"]),
           "foreign_ns": {k: v == "yes" for k, v in zip(keys, ["${FOREIGN[m1]:-}", "${FOREIGN[m2]:-}"])},
           "released": {k: v != "no" for k, v in zip(keys, ["${RELEASED[m1]:-}", "${RELEASED[m2]:-}"])},
           "umount_s": per(["${UMOUNT_S[m1]:-}", "${UMOUNT_S[m2]:-}"]),
           "daemon_exit_s": per(["${EXITED_S[m1]:-}", "${EXITED_S[m2]:-}"]),
           "fsck": per(["${FSCK_RC[m1]:-}", "${FSCK_RC[m2]:-}"]),
           "hung": "${HUNG[*]}".split(), "crashed": "${CRASHED[*]}".split(),
           "arbiter_same": $arb_same,
           "slow_requests": per(["${SLOW_REQ[m1]:-}", "${SLOW_REQ[m2]:-}"]),
           "kill": None if "$kill_at" == "" else {"mount": "m1", "at_min": num("$kill_at"),
                    "old_pid": num("${KILL_OLD_PID:-}"), "new_pid": num("${KILL_NEW_PID:-}"),
                    "remounted": "${KILLED:-}" == "yes", "down_s": num("${KILL_DOWN_S:-}"),
                    "replay": os.environ.get("KILL_REPLAY", "")},
           "arbiter_note": "pid $ARB_PID at the start, ${ARB_END:-not read} at the end",
           "load_end": open("/proc/loadavg").read().split()[:3]}, open(sys.argv[1], "w"))
EOF
	mkdir -p "$(dirname "$json")"
	python3 "$here/soak.py" report "$META" "$SAMPLES" "$STATS" "$MEDIA_STATE/check.json" "$json"
	rc=$?
	if [ $rc != 0 ]; then
		for f in "$MEDIA_STATE"/sm-*.log "$MEDIA_STATE"/*-[wr]?.log "$MEDIA_STATE"/fsck-*.log \
			"$MEDIA_STATE"/stall-*.txt "$SAMPLES".stall-*.txt; do
			[ -s "$f" ] && cp "$f" "${json%.json}.$(basename "$f")"
		done
	fi
	for f in "${SLOW_EXITS[@]}"; do cp "$f" "${json%.json}.$(basename "$f")"; done
	cp "$SAMPLES" "${json%.json}.samples.tsv"
	log "done in ${SECONDS}s"
	echo "JSON: $json (samples: ${json%.json}.samples.tsv; on failure the logs beside it)"
	exit $rc
}

# ---- the run ------------------------------------------------------------------

# spool_max= bounds what the journal holds past queue=: without it the
# writers, far faster than a head shared by two DVD-RAMs (~0.25 MB/s for
# the soak's scattered writes), queue ~100 MiB a mount, and the final drain
# takes longer than DRAIN_T.
if [ -n "$kill_at" ] && [[ ",$opts," != *",spool="* ]]; then
	opts+=,spool=$MEDIA_STATE/spool,spool_max=$KILL_SPOOL_MAX
fi
COMMIT=$(build_commit)
printf '# tests/bench/soak.sh %s   (SLOWMEDIA_BUILD=%s: commit %s)\n' "$cmdline" "$SLOWMEDIA_BUILD" "$COMMIT"
printf '# started %s; load: %s\n' "$(date -Iseconds)" "$(cat /proc/loadavg)"
media_install_traps
trap 'rc=$?; media_cleanup_all; printf "# exit %s at %s; load: %s\n" "$rc" "$(date -Iseconds)" "$(cat /proc/loadavg)"' EXIT
arb_prepare
rc=$?
[ $rc = 0 ] || exit $rc
T0=$(awk -v n="$EPOCHREALTIME" -v s="$SECONDS" 'BEGIN { printf "%.3f", n - s }')
QUEUE_BYTES=$(size_bytes "$(opt_value queue 64M)")
MAX_THREADS=$(opt_value max_threads 64)
MODEL=$MEDIA_STATE/model STATS=$MEDIA_STATE/stats SAMPLES=$MEDIA_STATE/samples.tsv
RO=$MEDIA_STATE/ro META=$MEDIA_STATE/meta.json
mkdir -p "$MODEL" "$STATS" "$RO"
ARB_IMG_MB=$img_mb
KEYS=(m1 m2)
# What the end of the run finds, by mount (see finish).
SLOW_EXITS=() HUNG=() CRASHED=() STALLED='' ARB_END=''
declare -A DRAIN_S=() DRAIN_RC=() EXIT_RC=() FSCK_RC=() UMOUNT_S=() EXITED_S=() FOREIGN=() SLOW_REQ=()
declare -A RELEASED=([m1]=yes [m2]=yes)
declare -A MNT=([m1]=$MEDIA_STATE/m1 [m2]=$MEDIA_STATE/m2)

log "soak: mode $mode, $minutes min; two dvdram images of $img_mb MiB on one head;" \
	"slowmedia -o $opts; seed $seed${kill_at:+; kill -9 of m1 at minute $kill_at}"
arb_bus_up "m1:dvdram:ext2:${MNT[m1]}" "m2:dvdram:ext2:${MNT[m2]}" || exit 1
declare -A BUDGET=()
for k in "${KEYS[@]}"; do
	avail=$(df -B1M --output=avail "${MNT[$k]}" | tail -1 | tr -d ' ')
	BUDGET[$k]=$((avail * BUDGET_PCT / 100 / WRITERS_PER_MOUNT))
done
for k in "${KEYS[@]}"; do
	smx_up "$k" "${MNT[$k]}" "$opts" || exit 1
done
# Whatever is left queued at an early exit drains at full speed.
media_on_exit fast "slowdev_ctl $ARB_BUS 'fast on' 2>/dev/null"
for k in "${KEYS[@]}"; do
	smx_wait_arbiter "$k" connected || exit 1
done
$SMCTL "$SLOWMEDIA_ARBITER_SOCKET" --all id,group,prio,weight,mountpoint | sed 's/^/  arbiter: /' >&2
[ "$($SMCTL "$SLOWMEDIA_ARBITER_SOCKET" --all group | sort -u | wc -l)" = 1 ] ||
	{ log "the two mounts are not in one arbiter group"; exit 1; }
ARB_PID=$(arb_pid) || { log "no arbiter answers on $SLOWMEDIA_ARBITER_SOCKET"; exit 1; }

# The daemons' pids as slowmediactl reports them, checked against ours.
STATUS_PIDS=$("$SLOWMEDIACTL" status --json | python3 -c '
import json, sys
for m in json.load(sys.stdin)["mounts"]:
    print(m["mountpoint"], m["pid"])')
for k in "${KEYS[@]}"; do
	p=$(awk -v m="${MNT[$k]}" '$1 == m { print $2 }' <<<"$STATUS_PIDS")
	[ "$p" = "${SMX_PID[$k]}" ] ||
		{ log "slowmediactl status gives pid '$p' for ${MNT[$k]}, not ${SMX_PID[$k]}"; exit 1; }
	log "$k: ${MNT[$k]}, daemon pid $p, writers' budget ${BUDGET[$k]} MiB each"
done
log "arbiter: pid $ARB_PID"

# Each writer's directory, through the mount.
t0=$EPOCHREALTIME
for k in "${KEYS[@]}"; do
	for ((i = 0; i < WRITERS_PER_MOUNT; i++)); do
		mkdir "${MNT[$k]}/w$i" && mkdir -p "$MODEL/$k/w$i" || exit 1
	done
done
log "$((WRITERS_PER_MOUNT * 2)) directories made in" \
	"$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }') s"

for k in "${KEYS[@]}"; do echo "${SMX_PID[$k]}" >"$MEDIA_STATE/pid-$k"; done
RUN_T0=$(awk -v n="$EPOCHREALTIME" 'BEGIN { printf "%.3f", n }')
RUN_END=$(awk -v t="$RUN_T0" -v m="$minutes" 'BEGIN { printf "%.3f", t + m * 60 }')
python3 "$here/soak.py" sample "$SAMPLES" "$T0" "$RUN_T0" "$minutes" "$SLOWMEDIACTL" "$STATS" \
	"m1=@$MEDIA_STATE/pid-m1:${MNT[m1]}:$MODEL/m1" "m2=@$MEDIA_STATE/pid-m2:${MNT[m2]}:$MODEL/m2" \
	"arbiter=$ARB_PID" &
SAMPLER=$!
media_on_exit sampler "kill $SAMPLER 2>/dev/null; wait $SAMPLER 2>/dev/null"

# The workers: writer K-wI owns MNT/wI (its model MODEL/K/wI), readers read
# any writer's files of their mount.
WORKERS=()
declare -A WORKER_NAME=()
media_on_exit workers kill_workers
n=0
for k in "${KEYS[@]}"; do
	for ((i = 0; i < WRITERS_PER_MOUNT; i++)); do
		w=$k-w$i
		n=$((n + 1))
		start_worker "$w" writer "${MNT[$k]}/w$i" "$MODEL/$k/w$i" "$((seed + n))" \
			"$RUN_END" "$STATS/$w.json" "${BUDGET[$k]}" "$MEDIA_STATE/down-$k"
	done
done
for k in "${KEYS[@]}"; do
	for ((i = 0; i < READERS_PER_MOUNT; i++)); do
		w=$k-r$i
		n=$((n + 1))
		start_worker "$w" reader "${MNT[$k]}" "$((seed + 100 + n))" "$RUN_END" "$STATS/$w.json" \
			"$MEDIA_STATE/down-$k"
	done
done
log "== ${#WORKERS[@]} workers started; load for $minutes min"

# Waits for the workers (each ends after its op in progress at the deadline).
# After the deadline, a medium that takes no byte for STALL_ABORT_S while
# workers still wait means the daemons are stuck: no drain could end.
limit=$(awk -v e="$RUN_END" -v g="$WORKER_GRACE_S" 'BEGIN { printf "%d", e + g }')
last_w=$(slowdev_stat "$ARB_BUS" write_bytes) last_t=$EPOCHSECONDS
KILL_T=
[ -n "$kill_at" ] && KILL_T=$(awk -v t="$RUN_T0" -v m="$kill_at" 'BEGIN { printf "%d", t + m * 60 }')
KILLED=
while alive_workers >/dev/null && [ "$EPOCHSECONDS" -lt "$limit" ]; do
	sleep 1
	if [ -n "$KILL_T" ] && [ -z "$KILLED" ] && [ "$EPOCHSECONDS" -ge "$KILL_T" ]; then
		kill_restart m1 || { KILLED=failed; log "the restart of m1 failed"; finish 1; }
		last_t=$EPOCHSECONDS
	fi
	w=$(slowdev_stat "$ARB_BUS" write_bytes)
	[ "$w" != "$last_w" ] && { last_w=$w last_t=$EPOCHSECONDS; }
	if [ "$EPOCHSECONDS" -gt "${RUN_END%.*}" ] && ((EPOCHSECONDS - last_t >= STALL_ABORT_S)); then
		STALLED="the medium took no byte for ${STALL_ABORT_S}s after the deadline, workers waiting"
		log "STALL: $STALLED"
		"$SLOWMEDIACTL" status >&2
		$SMCTL "$SLOWMEDIA_ARBITER_SOCKET" | sed 's/^/  arbiter: /' >&2
		for k in "${KEYS[@]}"; do stacks_to "$MEDIA_STATE/stall-$k.txt" "$k" "${SMX_PID[$k]}"; done
		break
	fi
done
for p in "${WORKERS[@]}"; do
	w=${WORKER_NAME[$p]}
	if running "$p"; then
		HUNG+=("$w")
		log "worker $w (pid $p) still busy after the deadline: wchan $(cat "/proc/$p/wchan" 2>/dev/null)"
	elif ! grep -q '"done": true' "$STATS/$w.json" 2>/dev/null; then
		CRASHED+=("$w")
		log "worker $w ended before it was done:"
		tail -5 "$MEDIA_STATE/$w.log" | sed 's/^/  /' >&2
	fi
done
if [ -n "$STALLED" ]; then
	ARB_END=$(arb_pid)
	MEDIA_DOWN_TIMEOUT_S=15 # nothing drains: the cleanup kills the daemons soon
	finish 1
fi
[ ${#HUNG[@]} = 0 ] || media_undo workers
media_forget workers
log "== workers done; draining"
"$SLOWMEDIACTL" status >&2
# FUSE requests past the daemons' req_bound= (noted, not judged: fsync and
# writes held by backpressure are not among them).
for k in "${KEYS[@]}"; do
	SLOW_REQ[$k]=$("$SLOWMEDIACTL" status "${MNT[$k]}" --json 2>/dev/null | python3 -c '
import json, sys
print(json.load(sys.stdin)["mounts"][0].get("slow_requests", "?"))')
	log "  $k: ${SLOW_REQ[$k]} FUSE requests took longer than req_bound= (this daemon's;" \
		"log lines: $(cat "$MEDIA_STATE"/sm-"$k"*.log 2>/dev/null | grep -c 'slow request:'))"
	cat "$MEDIA_STATE"/sm-"$k"*.log 2>/dev/null | grep 'slow request:' | tail -5 | sed 's/^/    /' >&2
done

DRAINERS=()
for k in "${KEYS[@]}"; do
	drain_one "$k" &
	DRAINERS+=($!)
done
wait "${DRAINERS[@]}"
for k in "${KEYS[@]}"; do
	read -r "DRAIN_RC[$k]" "DRAIN_S[$k]" <"$MEDIA_STATE/drain-$k"
	log "  $k drained in ${DRAIN_S[$k]} s (rc ${DRAIN_RC[$k]})"
done
# The sampler's next samples are the daemons at rest: nothing queued,
# nothing open.
printf '%s\tmark\tdrained\n' "$EPOCHREALTIME" >>"$SAMPLES"
sleep 2

for k in "${KEYS[@]}"; do sm_down "$k"; done
ARB_END=$(arb_pid)
sleep 1.5 # a last sample of the arbiter alone
media_undo sampler
media_undo arbiter
log "== daemons exited (m1 ${EXIT_RC[m1]}, m2 ${EXIT_RC[m2]}); checking the images"

# The images as the medium has them: the ext2 unmounted (and, once nothing
# holds its loop device, shut down: its last metadata written), then a new
# read-only loop device over each image (no cache of the old one), e2fsck,
# a read-only mount, and every file compared with the model.
slowdev_ctl "$ARB_BUS" "fast on"
CHECK_STATS=()
for f in "$STATS"/*-w*.json; do CHECK_STATS+=("$f"); done
for k in "${KEYS[@]}"; do
	loop=$(slowdev_loop "$ARB_BUS" "$k")
	umount "${MNT[$k]}" || { log "cannot unmount the ext2 of $k"; exit 1; }
	if ! wait_released "$loop"; then
		RELEASED[$k]=no
		log "  $k: $loop still held ${RELEASE_T}s after the ext2's umount; other mount" \
			"namespaces with it: $(foreign_holders "${MNT[$k]}" | tr '\n' ';'); checking the image anyway"
	fi
	dev=$(losetup --find --show --read-only --direct-io=on "$(slowdev_disk "$ARB_BUS" "$k")") ||
		{ log "no read-only loop device for $k"; exit 1; }
	media_on_exit "roloop:$k" "losetup -d $dev"
	e2fsck -fn "$dev" >"$MEDIA_STATE/fsck-$k.log" 2>&1
	FSCK_RC[$k]=$?
	[ "${FSCK_RC[$k]}" = 0 ] ||
		{ log "e2fsck -fn $k: rc ${FSCK_RC[$k]}"; head -30 "$MEDIA_STATE/fsck-$k.log" | sed 's/^/  /' >&2; }
	mkdir -p "$RO/$k"
	mount -t ext2 -o ro "$dev" "$RO/$k" || { log "cannot mount $dev read-only"; exit 1; }
	media_on_exit "ro:$k" "umount $RO/$k"
done
diffdir=${json%.json}.diffs
rm -rf "$diffdir"
python3 "$here/soak.py" check "$MODEL" "$RO" "$MEDIA_STATE/check.json" "$diffdir" "${CHECK_STATS[@]}"

finish 0
