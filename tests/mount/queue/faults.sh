#!/bin/bash
# The fault matrix: each fault of an emulated medium (slowdev, FSTYPE ext2 or
# vfat through fusefat) against the same checks, one daemon per fault over
# the one medium, the fault cleared between them:
#
#   write-eio     `fail write` on exactly a file's blocks, then it is overwritten
#   read-eio      `fail read` on a file that is not in any cache, then read
#   stall         `stall STALL_S` while writers fill the queue (the issue's
#                 30 s shortened: the checks need only that the medium serves
#                 nothing for a while, and a read stuck behind it fails at once)
#   full          the medium filled (on the lower, fast) but a little, then a
#                 write bigger than what is left
#   eject         `eject` while a file's fsync waits for its flush
#   eject-return  `eject` mid-flush, then `clear`: the medium comes back
#
# Checks ("-" where one does not apply; "lower" where the lower filesystem
# never reports the fault, so no daemon could: see each fault's lines):
#   error   the writer (the reader for read-eio) gets the error at write,
#           fsync or close; after a stall or a return, it completes without
#   others  other files of the mount keep working: a new file written,
#           fsynced and closed (during an eject: its write accepted)
#   fast    stat, readdir and reads of cached files, and a stat of the
#           fault's own file (queued, failing or unreadable data), answer
#           within 100 ms during the fault (a round of probes fails only if
#           the next one is slow too: a probe stuck behind the fault is slow
#           in both, a busy machine's hiccup is not)
#   log     the daemon's output names the failing file and its error
#           (read-eio: and a reader looping on the bad sector gets a few
#           lines, not one per read)
#   status  `slowmediactl status --json` shows the file failing with the
#           error during the fault (stall: status answers, no error;
#           read-eio: the refused reads counted, the last one named)
#   bound   no FUSE request took longer than BOUND_S (req_bound=) during
#           the fault, but the waits for the medium the caller asked for
#           (fsync, sync writes) and writes held by backpressure: read
#           from status at the end of the fault (slow_requests, which
#           counts every request past the bound, and the oldest in flight)
#   lost    every byte acknowledged without an error later (write, fsync,
#           close) is on the medium after the fault is cleared and the
#           daemon gone (read back once synced and dropped from the page
#           cache, and on vfat from the loop device's)
#   umount  the mount unmounts, the daemon exits 0 in time, no sanitizer
#           report
#
# It prints the table, and "matrix FSTYPE FAULT CHECK pass|FAIL|-|lower"
# lines for faults-table.sh (tests/run-tests.sh prints one table for both).
# The cached files' pages on the lower are pinned (qio pin) for the probes.
# usage: faults.sh SLOWMEDIA QIO SLOWDEV SLOWMEDIACTL FSTYPE
SLOWMEDIA=$1 QIO=$2 SLOWDEV=${3:-} CTL=${4:-} FSTYPE=${5:-ext2}
. "$(dirname "$0")/qlib.sh"
case $FSTYPE in
ext2) q_require_slowdev filefrag python3 timeout ;;
vfat) q_require_slowdev mkfs.vfat fusefat mshowfat minfo python3 timeout ;;
*) echo "usage: $0 SLOWMEDIA QIO SLOWDEV SLOWMEDIACTL ext2|vfat"; exit 2 ;;
esac
[ -x "$CTL" ] || q_skip "needs slowmediactl"
q_init

SD=qt-fm$FSTYPE-$$ LOWER=$Q_TMP/lower MNT=$Q_TMP/mnt
# A reader looping on a bad sector: LOOP_READS reads, at most READ_LOG_MAX
# log lines naming the file (the daemon lets 5 a minute through).
LOOP_READS=100 READ_LOG_MAX=5
# BOUND_S: the daemons' req_bound= (a request past it is counted in status)
STALL_S=4 PROBE_LIMIT_S=0.100 BOUND_S=3
OPTS=rate=1M,queue=2M,arbiter=off,drain_timeout=10,req_bound=$BOUND_S
# What the writer hears of a failed write and of a full medium: fusefat
# answers EPERM for both.
if [ "$FSTYPE" = ext2 ]; then E_IO=EIO E_FULL=ENOSPC; else E_IO=EPERM E_FULL=EPERM; fi
FAULTS=(write-eio read-eio stall full eject eject-return)
# FAULTS_ONLY="stall full": run those alone (by hand, to look at one)
read -ra RUN <<<"${FAULTS_ONLY:-${FAULTS[*]}}"
runs() { [[ " ${RUN[*]} " == *" $1 "* ]]; }
CHECKS=(error others fast log status bound lost umount)
declare -A RES=()
q_on_exit "slowdev_down $SD"
slowdev_up "$SD" 24 usbstick "$FSTYPE" "$LOWER" || { echo "slowdev_up failed"; exit 1; }
DISK=$(slowdev_disk "$SD")

# kill_qio PID: for the teardown, only while PID is still one of our qio runs.
kill_qio() {
	[ "$(cat "/proc/$1/comm" 2>/dev/null)" = queue-qio ] && kill -9 "$1"
}

ctl() {
	slowdev_ctl "$SD" "$1" || q_fail "slowdev ctl '$1' refused"
}

# res FAULT CHECK DESC CMD...: q_check, and the cell of the table.
res() {
	local f=$1 c=$2 desc=$3 failed=$Q_FAILED
	shift 3
	q_check "$f/$c: $desc" "$@"
	if [ "$Q_FAILED" = "$failed" ]; then
		RES[$f,$c]=${RES[$f,$c]:-pass}
	else
		RES[$f,$c]=FAIL
	fi
}
na() { RES[$1,$2]=-; }

# uncache FILE...: FILE's pages dropped, so reading it goes to the medium
# (they are clean: synced first). The cached files stay pinned.
uncache() {
	local f
	sync -f "$LOWER"
	for f in "$@"; do
		dd if="$f" iflag=nocache count=0 status=none
	done
	# fusefat reads and writes the loop device through its page cache
	[ "$FSTYPE" = ext2 ] || blockdev --flushbufs "$(slowdev_loop "$SD")"
}

# extents FILE: the medium's byte ranges ("start end") holding FILE's data.
extents() {
	if [ "$FSTYPE" = ext2 ]; then
		filefrag -v "$LOWER/$1" | awk -F: '
			/blocks of [0-9]+ bytes/ { bs = $0; sub(/.*blocks of /, "", bs); bs += 0 }
			$1 ~ /^ *[0-9]+$/ { split($3, p, /\.\./); printf "%d %d\n", p[1] * bs, (p[2] + 1) * bs }'
		return
	fi
	# vfat: the file's clusters (mshowfat, on the image) at the data area's
	# offset; fusefat's writes reach the image at the loop's writeback.
	local info spc bps first
	sync -f "$LOWER"
	blockdev --flushbufs "$(slowdev_loop "$SD")"
	# fusefat leaves the FAT's clean-shutdown bits cleared: mtools would refuse it
	export MTOOLS_SKIP_CHECK=1
	info=$(minfo -i "$DISK" ::)
	bps=$(awk '/^sector size:/ {print $3}' <<<"$info")
	spc=$(awk '/^cluster size:/ {print $3}' <<<"$info")
	first=$(awk -F= '/^(first data sector|dataStart)/ {print $2 + 0}' <<<"$info")
	[ -n "$first" ] || first=$(python3 - "$DISK" <<'PY'
import struct, sys
b = open(sys.argv[1], "rb").read(512)
bps, spc, rsv, nfat = struct.unpack_from("<HBHB", b, 11)
roots = struct.unpack_from("<H", b, 17)[0]
fsz = struct.unpack_from("<H", b, 22)[0] or struct.unpack_from("<I", b, 36)[0]
print(rsv + nfat * fsz + (roots * 32 + bps - 1) // bps)
PY
)
	mshowfat -i "$DISK" "::/$1" | sed -n 's/.*<\(.*\)>.*/\1/p' | tr ',' '\n' |
		awk -v bps="$bps" -v spc="$spc" -v first="$first" 'NF {
			n = split($1, r, "-"); a = r[1]; b = n > 1 ? r[2] : r[1]
			printf "%d %d\n", (first + (a - 2) * spc) * bps, (first + (b - 1) * spc) * bps }'
}

# Cached files for the probes: on the medium, their lower pages pinned.
mkdir -p "$LOWER/cached"
for i in 1 2; do
	"$QIO" gen "$LOWER/cached/c$i" 256K $((20 + i)) >/dev/null
done
sync -f "$LOWER/cached/c1"
"$QIO" pin "$LOWER/cached/c1" pin "$LOWER/cached/c2" sleep 3600000 >"$Q_TMP/pin.out" &
PIN_PID=$!
q_on_exit "kill_qio $PIN_PID"
for ((t = 0; t < 200 && $(grep -c 'rc=ok' "$Q_TMP/pin.out") < 2; t++)); do
	sleep 0.05
done
# On vfat the reads are timed but not judged: fusefat drops its page cache at
# each open and reads the file again from the device, failing while the
# medium does (what slowmedia can promise is an answer, not one the lower
# cannot give). On ext2 the pinned pages answer, and must.
READ_EXPECT=verify=ok
[ "$FSTYPE" = ext2 ] || READ_EXPECT=verify
PROBE=()
for i in 1 2; do
	PROBE+=(stat=ok "$MNT/cached/c$i" readdir=ok "$MNT/cached" "$READ_EXPECT" "$MNT/cached/c$i" 256K $((20 + i)))
done

# probe_once [FILE...]: 1 when a probe failed or took longer than
# PROBE_LIMIT_S; the FILEs (of the mount) are stat'ed too. A probe stuck for
# longer than the daemons' req_bound= fails the bound column as well.
probe_once() {
	local out rc=0 f steps=("${PROBE[@]}")
	for f in "$@"; do steps+=(stat=ok "$f"); done
	out=$(timeout 10 "$QIO" "${steps[@]}" 2>&1) || rc=$?
	out=$(grep ' rc=' <<<"$out")
	PROBE_LAST=$(awk '{sub("secs=", "", $4); printf "%s %s %s, ", $1, $2, $4}' <<<"$out")
	# every step answered (on ext2: as expected), each within the limit
	[ "$(wc -l <<<"$out")" = $((6 + $#)) ] && { [ "$FSTYPE" != ext2 ] || [ "$rc" = 0 ]; } &&
		awk -v lim="$PROBE_LIMIT_S" '{sub("secs=", "", $4); if ($4 > lim) bad = 1} END {exit bad}' <<<"$out"
}
probe() { # FAULT [FILE...]: the fault's own files, stat'ed too
	local f=$1
	shift
	if probe_once "$@" || { sleep 0.2 && probe_once "$@"; }; then
		res "$f" fast "stat, readdir, cached reads within ${PROBE_LIMIT_S}s ($PROBE_LAST)" true
	else
		res "$f" fast "stat, readdir, cached reads within ${PROBE_LIMIT_S}s, twice slow ($PROBE_LAST)" false
	fi
}

# status_has FILE CODE: the mount's status names FILE failing with CODE.
status_has() {
	"$CTL" status "$MNT" --json 2>/dev/null | python3 -c '
import json, sys
m = json.load(sys.stdin)["mounts"][0]
sys.exit(not any(e["path"].endswith("/" + sys.argv[1]) and e["code"] == sys.argv[2]
                 for e in m["file_errors"]))' "$1" "$2"
}
wait_status() { # FILE CODE SECS
	local i
	for ((i = 0; i < $3 * 10; i++)); do
		status_has "$1" "$2" && return 0
		sleep 0.1
	done
	"$CTL" status "$MNT" 2>&1 | head -20 | sed 's/^/  status: /'
	return 1
}
wait_status_clear() { # SECS: no file failing any more
	local i
	for ((i = 0; i < $1 * 10; i++)); do
		"$CTL" status "$MNT" --json 2>/dev/null | python3 -c '
import json, sys
sys.exit(json.load(sys.stdin)["mounts"][0]["file_errors"] != [])' && return 0
		sleep 0.1
	done
	return 1
}
errmsg() { # ERRNAME: strerror's text
	case $1 in
	EIO) echo 'Input/output error' ;;
	ENOSPC) echo 'No space left on device' ;;
	EPERM) echo 'Operation not permitted' ;;
	esac
}
log_has() { # FILE CODE: a line with FILE and the error, by name or by message
	grep -F -- "$1" "$Q_LOG" | grep -qE -- "$2|$(errmsg "$2")"
}
# read_status_has FILE CODE N: status counts at least N refused reads, the
# last of FILE with CODE.
read_status_has() {
	"$CTL" status "$MNT" --json 2>/dev/null | python3 -c '
import json, sys
m = json.load(sys.stdin)["mounts"][0]
print("  status: read_errors=%s read_error_path=%s read_error_code=%s" %
      (m.get("read_errors"), m.get("read_error_path"), m.get("read_error_code")))
sys.exit(not (m.get("read_errors", 0) >= int(sys.argv[3]) and
              m.get("read_error_path", "").endswith("/" + sys.argv[1]) and
              m.get("read_error_code") == sys.argv[2]))' "$1" "$2" "$3"
}

# ACK[file]=bytes acknowledged by writes that no later error covered
declare -A ACK=() SEEDS=()
# acked FILE SEED OUTFILE: from a qio run's output, record what it
# acknowledged without a later error.
acked() {
	local n
	# A write refused at once (ENOSPC) takes back only itself; an EIO, or
	# an error at fsync or close, may stand for earlier writes too.
	if grep -qE "^((fsync|close) rc=E|write rc=$E_IO)" "$3"; then
		q_log "$1: the writer saw a deferred error; nothing of it is promised"
		return
	fi
	n=$(awk '$1 == "write" {sub("bytes=", "", $3); s += $3} END {print s + 0}' "$3")
	ACK[$1]=$n SEEDS[$1]=$2
}

start() {
	ACK=() SEEDS=()
	q_start "$LOWER" "$MNT" "$OPTS${1:+,$1}"
}

# bound_check FAULT: from status, no request past BOUND_S so far (but the
# waits for the medium), and none older in flight now.
bound_check() {
	local f=$1 slow op ms n
	read -r slow op ms n < <("$CTL" status "$MNT" --json 2>/dev/null | python3 -c '
import json, sys
m = json.load(sys.stdin)["mounts"][0]
print(m["slow_requests"], m["oldest_request"] or "-", m["oldest_request_ms"], m["requests"])')
	res "$f" bound "no request past ${BOUND_S} s but waits for the medium: ${slow:-?} past it; $n in flight, the oldest $op, $ms ms" \
		[ "${slow:-x}" = 0 -a "${ms:-999999}" -le $((BOUND_S * 1000)) ]
	grep -F 'over the bound' "$Q_LOG" | sed 's/^/  daemon: /'
}

# finish FAULT: clear the fault, unmount, judge the exit; the medium cycled;
# then every acknowledged file whole on it.
finish() {
	local f=$1 t0 bad=0 name
	bound_check "$f"
	ctl clear
	umount "$MNT" 2>/dev/null || umount -l "$MNT"
	t0=$(q_now)
	q_wait_daemon_any "$MNT"
	local rc=$? exited=$Q_RC
	res "$f" umount "unmounted, the daemon exited $exited after $(q_since "$t0") s" \
		[ "$rc" = 0 -a "$exited" = 0 ]
	grep -qE '(ERROR|WARNING): [A-Za-z]+Sanitizer|runtime error:' "$Q_LOG" && RES[$f,umount]=FAIL
	# A metadata write that failed in the fault leaves an error on the
	# medium's block device for the next fsync of any file: taken here, so
	# that the next fault starts clean.
	sync -f "$LOWER" 2>/dev/null || q_log "syncfs of the medium after the fault: an error, as expected after a failed write"
	for name in "${!ACK[@]}"; do
		uncache "$LOWER/$name"
		"$QIO" verify=ok "$LOWER/$name" "${ACK[$name]}" "${SEEDS[$name]}" >/dev/null 2>&1 || {
			bad=$((bad + 1))
			q_log "$name: ${ACK[$name]} bytes acknowledged, not all on the medium"
		}
	done
	res "$f" lost "${#ACK[@]} files acknowledged without an error, $bad not whole on the medium" \
		[ "$bad" = 0 ]
	rm -f "$LOWER"/w-* "$LOWER"/o-* "$LOWER"/fill
	sed 's/^/  daemon: /' "$Q_LOG" | head -n 30
}

# other FAULT NAME [expect]: another file written and fsynced meanwhile.
other() {
	local f=$1 n=$2
	timeout 20 "$QIO" create "$MNT/$n" write=ok 128K 31 fsync=ok close=ok >"$Q_TMP/$n.out" 2>&1
	res "$f" others "another file ($n) written, fsynced and closed: $(tr '\n' ' ' <"$Q_TMP/$n.out")" \
		grep -q '^close rc=ok' "$Q_TMP/$n.out"
	acked "$n" 31 "$Q_TMP/$n.out"
}

got_error() { # OUTFILE CODE
	grep -qE "^(write|fsync|close) rc=$2" "$1"
}

# --- write-eio: the file's own blocks refuse writes -------------------------
if runs write-eio; then
	F=write-eio
	echo "== $F"
	start
	"$QIO" create "$MNT/w-v" write=ok 512K 40 fsync=ok close=ok >/dev/null
	sync -f "$LOWER"
	extents w-v >"$Q_TMP/ext"
	q_log "w-v on the medium at: $(tr '\n' ' ' <"$Q_TMP/ext")"
	[ -s "$Q_TMP/ext" ] || q_fail "no extents found for w-v"
	while read -r s e; do ctl "fail write $s $e"; done <"$Q_TMP/ext"
	timeout 30 "$QIO" open "$MNT/w-v" write 512K 41 fsync close >"$Q_TMP/w.out" 2>&1
	probe $F "$MNT/w-v"
	other $F o-1
	if [ "$FSTYPE" = ext2 ]; then
		res $F error "the overwrite's writer got $E_IO: $(tr '\n' ' ' <"$Q_TMP/w.out")" got_error "$Q_TMP/w.out" $E_IO
		res $F log "the log names w-v with $E_IO" log_has w-v $E_IO
		res $F status "status: w-v failing, $E_IO" wait_status w-v $E_IO 5
	else
		# fusefat writes file data into the loop device's page cache and
		# never syncs it: the device's refusal reaches nobody, slowmedia
		# included (nor does a read-back through those pages show it).
		q_log "vfat: the overwrite: $(tr '\n' ' ' <"$Q_TMP/w.out") (fusefat does not report the device's write errors)"
		for c in error log status lost; do RES[$F,$c]=lower; done
	fi
	finish $F
	[ "$FSTYPE" = ext2 ] || RES[$F,lost]=lower
fi

# --- read-eio: a file not in any cache, its blocks refuse reads -------------
if runs read-eio; then
	F=read-eio
	echo "== $F"
	"$QIO" gen "$LOWER/w-r" 256K 42 >/dev/null
	uncache "$LOWER/w-r"
	extents w-r >"$Q_TMP/ext"
	start
	while read -r s e; do ctl "fail read $s $e"; done <"$Q_TMP/ext"
	timeout 30 "$QIO" verify "$MNT/w-r" 256K 42 >"$Q_TMP/r.out" 2>&1
	res $F error "the reader got $E_IO: $(tr '\n' ' ' <"$Q_TMP/r.out")" grep -q "^verify rc=$E_IO" "$Q_TMP/r.out"
	probe $F "$MNT/w-r"
	other $F o-1
	res $F log "the log names w-r with $E_IO" log_has w-r $E_IO
	res $F status "status: a read of w-r refused with $E_IO" read_status_has w-r $E_IO 1
	# A reader looping on the bad sector: every failure counted, few logged.
	loop=()
	for ((i = 0; i < LOOP_READS; i++)); do loop+=(verify "$MNT/w-r" 4K 42); done
	timeout 60 "$QIO" "${loop[@]}" >"$Q_TMP/rl.out" 2>&1
	nfail=$(grep -c "^verify rc=$E_IO" "$Q_TMP/rl.out")
	nlog=$(grep -F -- w-r "$Q_LOG" | grep -cE -- "$E_IO|$(errmsg $E_IO)")
	res $F log "a reader looping on it: $nfail of $LOOP_READS reads refused, $nlog log lines (at most $READ_LOG_MAX)" \
		[ "$nfail" = "$LOOP_READS" -a "$nlog" -le "$READ_LOG_MAX" ]
	res $F status "status counts every refused read (at least $((LOOP_READS + 1)))" \
		read_status_has w-r $E_IO $((LOOP_READS + 1))
	finish $F
fi

# --- stall: writers fill the queue while the head serves nothing ------------
if runs stall; then
	F=stall
	echo "== $F"
	start
	# Made before the stall: an ext2 create may read a bitmap from the medium.
	: >"$MNT/w-s"
	sync -f "$LOWER"
	ctl "stall $STALL_S"
	t0=$(q_now)
	"$QIO" open "$MNT/w-s" write=ok 3M 44 fsync=ok close=ok >"$Q_TMP/s.out" 2>&1 &
	SPID=$!
	q_on_exit "kill_qio $SPID"
	sleep 1
	q_check "$F: the writer waits (backpressure)" kill -0 $SPID
	probe $F "$MNT/w-s"
	res $F status "status answers during the stall, no error" \
		timeout 2 python3 -c 'import json,sys; m=json.load(sys.stdin)["mounts"][0]; sys.exit(m["errors"] != 0)' \
		< <("$CTL" status "$MNT" --json)
	q_between "$(q_since "$t0")" 0 "$((STALL_S - 1))" || q_log "(the stall was nearly over before the probes)"
	timeout 40 tail --pid=$SPID -f /dev/null
	res $F error "after the stall the writer completes without an error: $(tr '\n' ' ' <"$Q_TMP/s.out")" \
		grep -q '^close rc=ok' "$Q_TMP/s.out"
	acked w-s 44 "$Q_TMP/s.out"
	other $F o-s
	na $F log
	finish $F
fi

# --- full: a write bigger than what is left ---------------------------------
if runs full; then
	F=full
	echo "== $F"
	ctl "fast on"
	avail=$(($(stat -f -c '%f * %S' "$LOWER"))) # root's daemon may take the reserve
	head -c $((avail - (768 << 10))) /dev/zero >"$LOWER/fill" 2>/dev/null
	sync -f "$LOWER"
	ctl "fast off"
	q_log "the medium has $(($(stat -f -c '%f * %S' "$LOWER") >> 10)) KiB free"
	start
	timeout 30 "$QIO" create "$MNT/w-f" write 2M 45 fsync close >"$Q_TMP/f.out" 2>&1
	res $F error "the writer got $E_FULL: $(tr '\n' ' ' <"$Q_TMP/f.out")" got_error "$Q_TMP/f.out" $E_FULL
	probe $F "$MNT/w-f"
	rm -f "$MNT/fill"
	other $F o-f
	res $F log "the log names w-f with $E_FULL" log_has w-f $E_FULL
	na $F status
	finish $F
fi

# --- eject: while a file's fsync waits for its flush ------------------------
if runs eject; then
	F=eject
	echo "== $F"
	start
	"$QIO" create "$MNT/w-e" write 1536K 43 fsync close >"$Q_TMP/e.out" 2>&1 &
	EPID=$!
	q_on_exit "kill_qio $EPID"
	sleep 0.7
	ctl eject
	probe $F "$MNT/w-e"
	timeout 20 "$QIO" create "$MNT/o-e" write=ok 64K 32 close >"$Q_TMP/oe.out" 2>&1
	res $F others "another file accepted (queued) during the eject: $(tr '\n' ' ' <"$Q_TMP/oe.out")" \
		grep -q '^write rc=ok' "$Q_TMP/oe.out"
	timeout 30 tail --pid=$EPID -f /dev/null
	res $F error "the writer got $E_IO: $(tr '\n' ' ' <"$Q_TMP/e.out")" got_error "$Q_TMP/e.out" $E_IO
	acked w-e 43 "$Q_TMP/e.out"
	res $F log "the log names w-e with $E_IO" log_has w-e $E_IO
	res $F status "status: w-e failing, $E_IO" wait_status w-e $E_IO 5
	finish $F
fi

# --- eject-return: the medium comes back ------------------------------------
if runs eject-return; then
	F=eject-return
	echo "== $F"
	start
	"$QIO" create "$MNT/w-b" write=ok 1M 46 close >"$Q_TMP/b.out" 2>&1
	acked w-b 46 "$Q_TMP/b.out"
	sleep 0.3
	ctl eject
	probe $F "$MNT/w-b"
	res $F status "status: w-b failing, $E_IO, during the eject" wait_status w-b $E_IO 5
	res $F log "the log names w-b with $E_IO" log_has w-b $E_IO
	ctl clear
	"$QIO" open "$MNT/w-b" fsync close >"$Q_TMP/b2.out" 2>&1
	q_log "w-b's fsync and close at the return: $(tr '\n' ' ' <"$Q_TMP/b2.out")"
	# Until a retry (after its backoff) succeeds, the file's error stands and
	# its writes are refused with it; then the file must work again.
	res $F error "the queued data lands once the medium is back (status clear in 10 s)" \
		wait_status_clear 10
	timeout 30 "$QIO" open "$MNT/w-b" write=ok 1M 46 fsync=ok close=ok >"$Q_TMP/b3.out" 2>&1
	res $F error "then the file takes new data: $(tr '\n' ' ' <"$Q_TMP/b3.out")" \
		grep -q '^close rc=ok' "$Q_TMP/b3.out"
	ACK[w-b]=$((1 << 20)) SEEDS[w-b]=46
	other $F o-b
	finish $F
fi

# --- the table --------------------------------------------------------------
printf '\nfault matrix, %s on slowdev (stall %s s)\n%-13s' "$FSTYPE" "$STALL_S" fault
printf ' %-7s' "${CHECKS[@]}"
echo
for f in "${RUN[@]}"; do
	printf '%-13s' "$f"
	for c in "${CHECKS[@]}"; do
		printf ' %-7s' "${RES[$f,$c]:-FAIL}"
	done
	echo
done
for f in "${RUN[@]}"; do
	for c in "${CHECKS[@]}"; do
		echo "matrix $FSTYPE $f $c ${RES[$f,$c]:-FAIL}"
	done
done
q_finish
