# lib.sh: the sessions and probes of tests/bench/run. Sourced after
# tests/lib/media.sh.
#
# A session is one medium, one dirty-limit profile and one writer, run for
# each column in turn (raw, mitigation, slowmedia):
#
#   medium up, test files made at full speed, then the medium made slow
#   column entered (bdi knobs, or slowmedia mounted over the medium)
#   alone:  pause, then each alone probe BENCH_REPS times
#   writer: started, runs BENCH_WARM s, then each during probe BENCH_REPS
#           times while it runs, then the end probes (global sync while it
#           still runs, umount after it is stopped), each bounded
#   teardown: the slow device made fast (throttle rule removed, or slowdev
#           fast mode) so the backlog drains at full speed, writer's file
#           deleted (which drops its dirty pages), everything undone
#
# BENCH_SESSIONS sessions are run per column: quick mode runs one session
# and repeats each probe three times inside it; full mode runs three
# sessions of one repetition each, so its bounded end probes (sync, umount)
# get three runs too.
# shellcheck shell=bash

# A line of the harness among slowdev's requests, when it traces them (see
# slowdev-media.sh).
mark() {
	[ -n "${SLOWDEV_TRACE:-}" ] && printf '# %s %s\n' "$EPOCHREALTIME" "$*" >>"$SLOWDEV_TRACE"
	return 0
}

log() {
	printf '[%4ds] %s\n' "$SECONDS" "$*" >&2
	mark "$*"
}

first_of() {
	local s
	for s in $1; do
		has "$s" && { echo "$s"; return; }
	done
}

bench_params() {
	BENCH_MODE=$1
	# Both media emulate a DVD-RAM: 2 MB/s write, 4 MB/s read.
	BENCH_WBPS=2000000
	BENCH_RBPS=4000000
	BENCH_MIT_MAX_BYTES=$((16 * 1024 * 1024))
	BENCH_SMALL_DIRTY=50000000
	BENCH_SMALL_BG=25000000
	BENCH_RR_BSIZE=1024   # a "block" of the random reads, as on the old 1 KiB ext2
	BENCH_FSYNC_N=5       # 4 KiB write+fsync samples per repetition
	BENCH_SAMPLE_S=0.2
	if [ "$1" = quick ]; then
		BENCH_SESSIONS=1 BENCH_REPS=3 BENCH_FASTREAD_REPS=3
		BENCH_PAUSE=2 BENCH_WARM=2
		BENCH_FAST_MB=512 BENCH_FASTWRITE_MB=256 BENCH_CP_MB=512
		BENCH_IMG_MB=8192 BENCH_RR_MB=32 BENCH_RR_READS=20 BENCH_SEQ_MB=2 BENCH_DEV_MB=1
		BENCH_SYNC_T=6 BENCH_UMOUNT_T=6 BENCH_PROBE_T=30 BENCH_FASTWRITE_T=6
		BENCH_SD_IMG_MB=6144 BENCH_SD_READ_MB=1 BENCH_SD_PROBE_T=3
		BENCH_LAT_ALONE_S=1 BENCH_LAT_DURING_S=2 BENCH_SD_LAT_MB=16 BENCH_SD_WRITE_MB=1
		BENCH_COLD_REPS=1 # the cold 4 KiB read: one run (a smoke test here)
		BENCH_SETTLE_S=3  # behind a raw backlog, reads stay in flight for minutes
		BENCH_FLUSH_S=2 # = BENCH_WARM: the flush rate is taken during the warm-up
		BENCH_DBENCH_S=2 BENCH_BONNIE_MB=2 BENCH_BONNIE_T=20 BENCH_BONNIE_REPS=1
		: "${SLOWMEDIA_OPTS:=latency=100,queue=4M}"
	else
		BENCH_SESSIONS=3 BENCH_REPS=1 BENCH_FASTREAD_REPS=5
		BENCH_PAUSE=30 BENCH_WARM=30
		BENCH_FAST_MB=1024 BENCH_FASTWRITE_MB=1024 BENCH_CP_MB=2048
		BENCH_IMG_MB=12288 BENCH_RR_MB=256 BENCH_RR_READS=1000 BENCH_SEQ_MB=64 BENCH_DEV_MB=64
		BENCH_SYNC_T=60 BENCH_UMOUNT_T=120 BENCH_PROBE_T=180 BENCH_FASTWRITE_T=180
		BENCH_SD_IMG_MB=8192 BENCH_SD_READ_MB=20 BENCH_SD_PROBE_T=120
		BENCH_LAT_ALONE_S=20 BENCH_LAT_DURING_S=60 BENCH_SD_LAT_MB=64 BENCH_SD_WRITE_MB=64
		BENCH_COLD_REPS=$BENCH_REPS
		BENCH_SETTLE_S=10
		BENCH_FLUSH_S=20 # the last 20 s of the 30 s warm-up
		BENCH_DBENCH_S=30 BENCH_BONNIE_MB=512 BENCH_BONNIE_T=900 BENCH_BONNIE_REPS=1
		: "${SLOWMEDIA_OPTS:=latency=100,queue=64M}"
	fi
}

# ---- preparation ----------------------------------------------------------

note() { # note SCENARIO COLUMN|- REASON
	printf 'N\t%s\t%s\t%s\n' "$1" "$2" "$3" >>"$RES"
	log "skip: $1${2:+ [$2]}: $3"
}

rec() { # rec SCENARIO METRIC UNIT VALUE [TIMED_OUT]
	printf 'R\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$COL" "$4" "${5:-0}" >>"$RES"
}

ratio() { # ratio SCENARIO METRIC NUM_SCEN:NUM DEN_SCEN:DEN
	printf 'F\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$COL" "$3" "$4" >>"$RES"
}

# Reads key=value pairs from $MB_OUT: kv KEY
kv() {
	local w
	for w in $MB_OUT; do
		[ "${w%%=*}" = "$1" ] && { echo "${w#*=}"; return 0; }
	done
	return 1
}

bench_prepare() {
	SMBIO=$SLOWMEDIA_BUILD/tests/bench/smbio
	if [ ! -x "$SMBIO" ]; then
		SMBIO=$MEDIA_STATE/smbio
		cc -O2 -pthread -D_GNU_SOURCE -o "$SMBIO" "$here/smbio.c" || {
			echo "run: cannot build smbio" >&2
			return 1
		}
	fi
	SLOWMEDIA_BIN=$SLOWMEDIA_BUILD/fusefs/slowmedia
	# The daemon's control socket and the arbiter it starts stay in our
	# state dir; the arbiter is stopped with the daemon (slowmedia_down).
	export SLOWMEDIA_CTL_DIR=$MEDIA_STATE/ctl SLOWMEDIA_ARBITER_SOCKET=$MEDIA_STATE/arbiter.sock
	SLOWDEV_BIN=$SLOWMEDIA_BUILD/tests/slowdev/slowdev
	export SLOWDEV_BIN
	media_debugfs || log "debugfs not available: no per-device dirty figures"
	FAST=$MEDIA_STATE/fast
	mkdir -p "$FAST"
	log "making the fast-disk files (${BENCH_FAST_MB} MB read file, ${BENCH_CP_MB} MB cp source)"
	"$SMBIO" fill "$FAST/read.dat" "$BENCH_FAST_MB" &&
		"$SMBIO" fill "$FAST/cp.src" "$BENCH_CP_MB"
}

# Why COLUMN cannot run in this session, or nothing.
column_missing() {
	case $1 in
	slowmedia) [ -x "$SLOWMEDIA_BIN" ] || echo "no slowmedia binary at $SLOWMEDIA_BIN" ;;
	mitigation) compgen -G '/sys/class/bdi/*/max_bytes' >/dev/null ||
		echo "this kernel has no bdi max_bytes knob" ;;
	esac
}

MED_SD_SEQ=0

# ---- the medium -------------------------------------------------------------
# MED_KIND loop|slowdev; MED_MNT where the medium (and, in the slowmedia
# column, slowmedia over it) is mounted; MED_DEV its loop device.

medium_up() {
	MED_KIND=$1
	MED_MNT=$MEDIA_STATE/mnt
	if [ "$MED_KIND" = loop ]; then
		media_loop_up m "$BENCH_IMG_MB" "$MED_FSTYPE" "$MED_MNT" || return 1
		MED_DEV=${MEDIA_LOOP[m]}
	else
		MED_SD=smbench-$$-$((++MED_SD_SEQ))
		media_on_exit "slowdev" "slowdev_down $MED_SD"
		slowdev_up "$MED_SD" "$BENCH_SD_IMG_MB" dvdram ext2 "$MED_MNT" || return 1
		MED_DEV=$(slowdev_loop "$MED_SD")
		slowdev_ctl "$MED_SD" "fast on"
	fi
	MED_MM=$(lsblk -dno MAJ:MIN "$MED_DEV" | tr -d ' ')
}

medium_slow() {
	if [ "$MED_KIND" = loop ]; then
		media_throttle m "$BENCH_WBPS" "$BENCH_RBPS"
	else
		slowdev_ctl "$MED_SD" "fast off"
	fi
}

# Lets the backlog drain at full speed.
medium_fast() {
	if [ "$MED_KIND" = loop ]; then
		media_unthrottle m
	else
		slowdev_ctl "$MED_SD" "fast on" 2>/dev/null
	fi
}

medium_umount() {
	if [ "$MED_KIND" = loop ]; then
		media_loop_umount m
	else
		umount "$MED_MNT" && media_wait_released "$MED_DEV"
	fi
}

medium_down() {
	medium_fast
	if [ "$MED_KIND" = loop ]; then
		media_undo loop:m
	else
		media_pending_wait
		media_undo slowdev
	fi
}

# ---- columns ----------------------------------------------------------------

column_enter() {
	COL_FUSE_MM=
	case $COL in
	mitigation) media_bdi_mitigate "$MED_MM" "$BENCH_MIT_MAX_BYTES" ;;
	slowmedia) slowmedia_up ;;
	esac
}

# Where a probe reaches a medium file under slowmedia's in-place mount: the
# working directory of a holder process that entered the medium before the
# mount (slowread sessions only: it would keep the medium busy for the
# umount probe). A process of its own, not an fd of this shell: every child
# of the shell would inherit that, and one left at teardown (a probe killed
# by a signal) kept the medium from unmounting.
lower_path() {
	if [ -n "${LOWER_HOLDER:-}" ]; then
		echo "/proc/$LOWER_HOLDER/cwd/$1"
	else
		echo "$MED_MNT/$1"
	fi
}

lower_hold() {
	local i
	(cd "$MED_MNT" && exec sleep infinity) </dev/null >/dev/null 2>&1 &
	LOWER_HOLDER=$!
	for ((i = 0; i < 100; i++)); do
		[ "$(readlink "/proc/$LOWER_HOLDER/cwd" 2>/dev/null)" = "$MED_MNT" ] && return 0
		sleep 0.05
	done
	log "the holder of the lower directory did not start"
	return 1
}

lower_release() {
	[ -n "${LOWER_HOLDER:-}" ] || return 0
	kill "$LOWER_HOLDER" 2>/dev/null
	wait "$LOWER_HOLDER" 2>/dev/null
	LOWER_HOLDER=
}

slowmedia_up() {
	local i
	if [ "$MEDIUM" = slowdev ]; then
		lower_hold || { lower_release; return 1; }
	fi
	"$SLOWMEDIA_BIN" "$MED_MNT" "$MED_MNT" -f -o "$SLOWMEDIA_OPTS" </dev/null \
		>"$MEDIA_STATE/slowmedia.log" 2>&1 &
	SM_PID=$!
	media_on_exit slowmedia "slowmedia_down"
	for ((i = 0; i < 100; i++)); do
		awk -v m="$MED_MNT" '$2 == m && $3 == "fuse.slowmedia" { f = 1 } END { exit !f }' \
			/proc/mounts && break
		kill -0 "$SM_PID" 2>/dev/null || break
		sleep 0.1
	done
	if ! awk -v m="$MED_MNT" '$2 == m && $3 == "fuse.slowmedia" { f = 1 } END { exit !f }' /proc/mounts; then
		log "slowmedia did not mount:"
		sed 's/^/  /' "$MEDIA_STATE/slowmedia.log" >&2
		media_undo slowmedia
		return 1
	fi
	COL_FUSE_MM=$(mountpoint -d "$MED_MNT")
}

slowmedia_mounted() {
	awk -v m="$MED_MNT" '$2 == m && $3 == "fuse.slowmedia" { f = 1 } END { exit !f }' /proc/mounts
}

# Unmounts slowmedia (its daemon drains the queue as it exits).
slowmedia_umount() {
	# Busy while data is queued (the daemon holds its mount): then detach
	# lazily; the daemon drains and exits, which is what is waited for.
	if slowmedia_mounted; then
		umount "$MED_MNT" 2>/dev/null || umount -l "$MED_MNT" || return 1
	fi
	while kill -0 "$SM_PID" 2>/dev/null; do sleep 0.05; done
	wait "$SM_PID" 2>/dev/null
	return 0
}

slowmedia_down() {
	media_forget slowmedia
	lower_release
	media_bounded "$MEDIA_DOWN_TIMEOUT_S" slowmedia_umount
	if [ "$MB_TIMEDOUT" = 1 ]; then
		log "slowmedia did not exit; killing it"
		kill -KILL "$SM_PID" 2>/dev/null
		slowmedia_mounted && umount -l "$MED_MNT"
		media_pending_add "$MB_PID"
	fi
	pkill -f -- "slowmedia-arbiterd --socket $SLOWMEDIA_ARBITER_SOCKET " 2>/dev/null
	[ -s "$MEDIA_STATE/slowmedia.log" ] && grep -qi error "$MEDIA_STATE/slowmedia.log" &&
		{ log "slowmedia log:"; sed 's/^/  /' "$MEDIA_STATE/slowmedia.log" | tail -5 >&2; }
	return 0
}

# The unmount a user sees: slowmedia first (drains), then the medium.
column_umount() {
	if [ "$COL" = slowmedia ]; then
		slowmedia_umount || return 1
	fi
	medium_umount
}

column_leave() {
	case $COL in
	mitigation) media_bdi_restore "$MED_MM" ;;
	slowmedia) media_undo slowmedia ;;
	esac
}

# ---- writer -----------------------------------------------------------------

writer_start() {
	case $1 in
	dd) dd if=/dev/zero of="$MED_MNT/tmp" bs=1M status=none 2>/dev/null & ;;
	cp) cp "$FAST/cp.src" "$MED_MNT/tmp" 2>/dev/null & ;;
	esac
	WRITER_PID=$!
	disown "$WRITER_PID" # no "Killed" notice when it is stopped
	media_on_exit writer "writer_stop"
}

# SIGKILL: a writer blocked in a FUSE write (slowmedia's backpressure) does
# not act on SIGTERM until the request completes.
writer_stop() {
	media_forget writer
	kill -KILL "$WRITER_PID" 2>/dev/null
	media_bounded 10 wait_pid_gone "$WRITER_PID"
	[ "$MB_TIMEDOUT" = 1 ] && media_pending_add "$WRITER_PID"
	return 0
}

wait_pid_gone() {
	while kill -0 "$1" 2>/dev/null; do sleep 0.05; done
}

# Waits (at most BENCH_SETTLE_S) until no read of the medium is in flight: a
# sequential read leaves the lower's readahead queued behind it (up to the
# loop device's read_ahead_kb, seconds of a 4 MB/s medium), and the next
# probe would time it instead of its own read. Slowdev medium only.
settle_reads() {
	local i quiet=0 r w
	[ "$MEDIUM" = slowdev ] || return 0
	for ((i = 0; i < BENCH_SETTLE_S * 10 && quiet < 3; i++)); do
		read -r r w <"/sys/block/$(basename "$MED_DEV")/inflight"
		if [ "$r" = 0 ]; then
			quiet=$((quiet + 1))
		else
			quiet=0
		fi
		sleep 0.1
	done
	[ "$quiet" -ge 3 ] || log "  reads of the medium still in flight after ${BENCH_SETTLE_S} s"
	mark "settled: $i"
	return 0
}

sectors_written() {
	awk '{ print $7 }' "/sys/block/$(basename "$MED_DEV")/stat"
}

drop_caches() {
	echo 3 >/proc/sys/vm/drop_caches
}

# ---- session ------------------------------------------------------------------

# session MEDIUM PROFILE WRITER GROUP "ALONE PROBES" "DURING PROBES" "END PROBES"
session() {
	local medium=$1 profile=$2 writer=$3 group=$4 alone=$5 during=$6 ends=$7 s why
	SFX=
	[ "$profile" = small ] && SFX=_small
	PROFILE=$profile
	MEDIUM=$medium
	GROUP_WRITER=$writer
	if [ "$medium" = slowdev ]; then
		why=
		[ -f "$top/tests/slowdev/slowdev-media.sh" ] || why="no tests/slowdev/slowdev-media.sh"
		[ -z "$why" ] && [ ! -x "$SLOWDEV_BIN" ] && why="no slowdev binary at $SLOWDEV_BIN"
		if [ -n "$why" ]; then
			note "$group" - "$why"
			return
		fi
		# shellcheck source=../slowdev/slowdev-media.sh
		. "$top/tests/slowdev/slowdev-media.sh"
	fi
	for COL in $columns; do
		why=$(column_missing "$COL")
		if [ -n "$why" ]; then
			note "$group" "$COL" "$why"
			continue
		fi
		for ((s = 1; s <= BENCH_SESSIONS; s++)); do
			S_IDX=$s
			log "== $group ($medium, $profile, writer $writer) [$COL] session $s/$BENCH_SESSIONS"
			session_one "$medium" "$writer" "$group" "$alone" "$during" "$ends" ||
				note "$group" "$COL" "session failed (see log above)"
		done
	done
}

session_one() {
	local medium=$1 writer=$2 group=$3 alone=$4 during=$5 ends=$6 p
	medium_up "$medium" || { medium_down; return 1; }
	populate "$alone $during" || { medium_down; return 1; }
	medium_slow
	if ! column_enter; then
		medium_down
		return 1
	fi
	[ "$PROFILE" = small ] && media_sysctl_small "$BENCH_SMALL_DIRTY" "$BENCH_SMALL_BG"
	alone=$(alone_needed "$alone")
	if [ -n "$alone" ]; then
		[ -n "$during" ] && sleep "$BENCH_PAUSE"
		PHASE=alone
		for p in $alone; do "probe_$p"; done
	fi
	if [ "$writer" != none ]; then
		sampler_start
		writer_start "$writer"
		PHASE=during
		if [[ " $during " == *" flush "* ]]; then
			# The flush rate is taken over the end of the warm-up, before
			# any probe reads the medium.
			sleep "$((BENCH_WARM - BENCH_FLUSH_S))"
			probe_flush
		else
			sleep "$BENCH_WARM"
		fi
		for p in $during; do [ "$p" = flush ] || "probe_$p"; done
		for p in $ends; do "probe_$p"; done
		writer_stop
		sampler_stop "$group"
	fi
	session_teardown
}

session_teardown() {
	local t0=$SECONDS
	medium_fast
	# Drops the writer's dirty pages instead of writing them.
	[ -e "$MED_MNT/tmp" ] && media_bounded 60 rm -f "$MED_MNT/tmp"
	media_pending_wait
	column_leave
	[ "$PROFILE" = small ] && media_sysctl_restore
	medium_down
	((SECONDS - t0 > 10)) && log "  (teardown took $((SECONDS - t0))s)"
	return 0
}

# The alone fast-disk reads are shared by the sessions of a column that run
# with the same dirty limits (the small machine measures its own).
declare -A ALONE_SCEN=()
alone_needed() {
	local p out=
	for p in $1; do
		[ "$p" = fastread ] && [ -n "${ALONE_SCEN[$COL:$S_IDX$SFX]:-}" ] && continue
		out+=" $p"
	done
	echo "$out"
}

# Makes the medium's test files while it is still fast.
populate() {
	case " $1 " in
	*" randread "*) "$SMBIO" fill "$MED_MNT/rr.dat" "$BENCH_RR_MB" || return 1 ;;
	esac
	case " $1 " in
	*" seqread "*) "$SMBIO" fill "$MED_MNT/seq.dat" "$BENCH_SEQ_MB" || return 1 ;;
	esac
	case " $1 " in
	*" slowread "*) "$SMBIO" fill "$MED_MNT/sd.dat" "$((BENCH_SD_READ_MB > BENCH_SD_LAT_MB ? BENCH_SD_READ_MB : BENCH_SD_LAT_MB))" || return 1 ;;
	esac
	# smbio fsyncs, but fusefat's fsync leaves the data dirty in the block
	# device's cache: flush that too, or it drains under the throttle.
	sync -f "$MED_MNT" && sync "$MED_DEV"
}

sampler_start() {
	local bdis=$MED_MM
	[ -n "$COL_FUSE_MM" ] && bdis+=" $COL_FUSE_MM"
	SAMPLER_OUT=$MEDIA_STATE/peaks
	rm -f "$SAMPLER_OUT"
	# shellcheck disable=SC2086
	python3 "$here/sampler.py" "$SAMPLER_OUT" "$BENCH_SAMPLE_S" $bdis &
	SAMPLER_PID=$!
	media_on_exit sampler "kill $SAMPLER_PID 2>/dev/null; wait $SAMPLER_PID 2>/dev/null"
}

sampler_stop() {
	media_undo sampler
	has collateral && [ "$1" != cp ] || return 0
	[ "$1" = slowread ] && return 0
	MB_OUT=$(cat "$SAMPLER_OUT" 2>/dev/null)
	local mem bdi
	mem=$(kv meminfo_mb) && rec collateral "dirty_writeback_peak_mb$SFX" MB "$mem"
	bdi=$(kv bdi_mb) && [ "${bdi%%.*}" != -1 ] && rec collateral "medium_dirty_peak_mb$SFX" MB "$bdi"
}

# In quick mode a probe that hit its bound is not repeated: the next runs
# would hit it too, and the 5-minute budget cannot pay for them. Its figure
# is then one run, flagged as a lower bound.
quick_give_up() {
	[ "$MB_TIMEDOUT" = 1 ] && [ "$BENCH_MODE" = quick ]
}

# ---- probes -------------------------------------------------------------------
# Each probe runs BENCH_REPS times and records one run each time. PHASE is
# alone or during; SFX is "" or _small.

# CMD without its stderr (bonnie++ prints its human table there).
quiet() {
	"$@" 2>/dev/null
}

# Runs one bounded measurement; on timeout kills it (pending until the
# medium is fast again). Sets MB_*.
measure() {
	media_bounded "$@"
	[ "$MB_TIMEDOUT" = 1 ] && media_kill_bounded "$MB_PID"
	return 0
}

probe_fastread() {
	local i tag scen=fastread
	if [ "$PHASE" = alone ]; then
		tag=alone$SFX
		[ "$GROUP_WRITER" = cp ] && scen=cp
	elif [ "$GROUP_WRITER" = cp ]; then
		tag=cp scen=cp
	else
		tag=dd$SFX
	fi
	# A read takes half a second here, and the VM's host adds as much
	# noise to it as the 5% the target allows: several runs in each phase,
	# paired in order (the ratios are the i-th during over the i-th alone).
	for ((i = 0; i < BENCH_FASTREAD_REPS; i++)); do
		drop_caches
		measure "$BENCH_PROBE_T" dd if="$FAST/read.dat" of=/dev/null bs=1M status=none
		rec "$scen" "fast_read_${tag}_s" s "$MB_ELAPSED" "$MB_TIMEDOUT"
		quick_give_up && break
	done
	log "  fast read ($tag): last ${MB_ELAPSED}s"
	if [ "$PHASE" = alone ]; then
		ALONE_SCEN[$COL:$S_IDX$SFX]=$scen
	else
		ratio "$scen" "fast_read_factor_${tag}" "$scen:fast_read_${tag}_s" \
			"${ALONE_SCEN[$COL:$S_IDX$SFX]:-$scen}:fast_read_alone${SFX}_s"
	fi
}

probe_randread() {
	local i t b name=randread_s
	[ "$PHASE" = alone ] && name=randread_idle_s
	for ((i = 0; i < BENCH_REPS; i++)); do
		for t in 1 4 10; do
			for b in 4 8 16 32; do
				drop_caches
				measure "$BENCH_PROBE_T" "$SMBIO" randread "$MED_MNT/rr.dat" \
					"$BENCH_RR_READS" "$b" "$BENCH_RR_BSIZE" "$t"
				rec randread "${name}_T${t}_B${b}" s "$(kv seconds || echo "$MB_ELAPSED")" "$MB_TIMEDOUT"
				quick_give_up && break 3
			done
		done
	done
	log "  random reads ($PHASE): T10 B32 last ${MB_ELAPSED}s"
}

probe_seqread() {
	local i name=slow_seq_read_mb_s
	[ "$PHASE" = during ] && name=slow_seq_read_write_mb_s
	for ((i = 0; i < BENCH_REPS; i++)); do
		drop_caches
		measure "$BENCH_PROBE_T" "$SMBIO" seqread "$MED_MNT/seq.dat"
		if [ "$MB_TIMEDOUT" = 1 ]; then
			rec seqread "$name" MB/s "$(awk -v m="$BENCH_SEQ_MB" -v t="$MB_ELAPSED" 'BEGIN { printf "%.3f", m * 1.048576 / t }')" 1
		else
			rec seqread "$name" MB/s "$(kv mb_s)"
		fi
		quick_give_up && break
	done
	log "  sequential read ($PHASE): last $(kv mb_s) MB/s"
}

# Like hdparm -t: O_DIRECT reads of the block device itself.
probe_devread() {
	local i
	for ((i = 0; i < BENCH_REPS; i++)); do
		measure "$BENCH_PROBE_T" "$SMBIO" devread "$MED_DEV" "$BENCH_DEV_MB"
		[ "$MB_TIMEDOUT" = 0 ] && rec seqread slow_dev_read_mb_s MB/s "$(kv mb_s)"
	done
}

# Flush throughput while nothing reads the medium: sectors the medium's
# block device completed over a quiet interval of the writer, against the
# medium's nominal write bandwidth.
probe_flush() {
	local s0 s1 t0 t1 mbs scen=collateral
	[ "$MEDIUM" = slowdev ] && scen=slowread
	s0=$(sectors_written) t0=$EPOCHREALTIME
	sleep "$BENCH_FLUSH_S"
	s1=$(sectors_written) t1=$EPOCHREALTIME
	mbs=$(awk -v s="$((s1 - s0))" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", s * 512 / 1e6 / (b - a) }')
	rec "$scen" "flush_mb_s$SFX" MB/s "$mbs"
	rec "$scen" "flush_vs_bw$SFX" x "$(awk -v m="$mbs" -v b="$BENCH_WBPS" 'BEGIN { printf "%.3f", m * 1e6 / b }')"
	log "  flush with nothing reading: $mbs MB/s (nominal $(awk -v b="$BENCH_WBPS" 'BEGIN { print b / 1e6 }'))"
}

probe_fsync4k() {
	local i name=fast_fsync_4k${SFX}_ms
	[ "$PHASE" = alone ] && name=fast_fsync_4k_idle${SFX}_ms
	for ((i = 0; i < BENCH_REPS; i++)); do
		measure "$BENCH_PROBE_T" "$SMBIO" fsync4k "$FAST/f4k" "$BENCH_FSYNC_N" 50
		if [ "$MB_TIMEDOUT" = 1 ]; then
			rec collateral "$name" ms "$(awk -v t="$MB_ELAPSED" 'BEGIN { print t * 1000 }')" 1
		else
			rec collateral "$name" ms "$(kv p50_ms)"
		fi
	done
	rm -f "$FAST/f4k"
	log "  4 KiB write+fsync ($PHASE): last p50 $(kv p50_ms) ms"
	[ "$PHASE" = during ] && ratio collateral "fast_fsync_4k_factor$SFX" \
		"collateral:$name" "collateral:fast_fsync_4k_idle${SFX}_ms"
}

probe_fastwrite() {
	local i name=fast_write_1g${SFX}_s
	[ "$PHASE" = alone ] && name=fast_write_1g_idle${SFX}_s
	for ((i = 0; i < BENCH_REPS; i++)); do
		measure "$BENCH_FASTWRITE_T" "$SMBIO" write "$FAST/w.dat" "$BENCH_FASTWRITE_MB"
		rec collateral "$name" s "$(kv seconds || echo "$MB_ELAPSED")" "$MB_TIMEDOUT"
		rm -f "$FAST/w.dat"
		quick_give_up && break
	done
	log "  fast write ${BENCH_FASTWRITE_MB} MB + fsync ($PHASE): last ${MB_ELAPSED}s"
	[ "$PHASE" = during ] && ratio collateral "fast_write_1g_factor$SFX" \
		"collateral:$name" "collateral:fast_write_1g_idle${SFX}_s"
}

# A global sync while the writer runs: may hang for as long as the backlog
# takes (not killable), so it is left pending and reaped at teardown.
probe_sync() {
	media_bounded "$BENCH_SYNC_T" sync
	[ "$MB_TIMEDOUT" = 1 ] && media_stray_add "$MB_PID"
	rec collateral "global_sync${SFX}_s" s "$MB_ELAPSED" "$MB_TIMEDOUT"
	log "  global sync: ${MB_ELAPSED}s$([ "$MB_TIMEDOUT" = 1 ] && echo ' (timed out)')"
}

probe_umount() {
	writer_stop
	media_bounded "$BENCH_UMOUNT_T" column_umount
	[ "$MB_TIMEDOUT" = 1 ] && media_pending_add "$MB_PID"
	if [ "$MB_TIMEDOUT" = 0 ] && [ "$MB_RC" != 0 ]; then
		log "  umount failed (rc $MB_RC): not recorded"
		return 1
	fi
	rec collateral "umount${SFX}_s" s "$MB_ELAPSED" "$MB_TIMEDOUT"
	log "  umount after the writer stopped: ${MB_ELAPSED}s$([ "$MB_TIMEDOUT" = 1 ] && echo ' (timed out)')"
}

# slowread: reading a file of the medium itself (the reports' 20 MB read).
probe_slowread() {
	local i tag=idle
	[ "$PHASE" = during ] && tag=write
	for ((i = 0; i < BENCH_REPS; i++)); do
		settle_reads
		drop_caches
		measure "$BENCH_SD_PROBE_T" dd if="$MED_MNT/sd.dat" of=/dev/null bs=1M \
			count="$BENCH_SD_READ_MB" status=none
		rec slowread "slow_read_20mb_${tag}_s" s "$MB_ELAPSED" "$MB_TIMEDOUT"
		quick_give_up && break
	done
	log "  medium read ${BENCH_SD_READ_MB} MB ($PHASE): last ${MB_ELAPSED}s"
	[ "$tag" = write ] && ratio slowread slow_read_20mb_factor \
		slowread:slow_read_20mb_write_s slowread:slow_read_20mb_idle_s
}

probe_latread() {
	local budget=$BENCH_LAT_ALONE_S p50=slow_read_idle_p50_ms p99=slow_read_idle_p99_ms
	[ "$PHASE" = during ] && { budget=$BENCH_LAT_DURING_S p50=slow_read_p50_ms p99=slow_read_p99_ms; }
	# The file's data leaves the caches (through slowmedia a lower page could
	# serve a read), its block map is brought in, untimed: ext2 reaches most
	# of a 64 MiB file through indirect blocks, and a read that has to fetch
	# one makes two or three accesses of the medium; with them cached each
	# read is one access, as on the reports' drives once a file is in use.
	settle_reads
	"$SMBIO" evict "$(lower_path sd.dat)"
	measure "$BENCH_SD_PROBE_T" filefrag "$(lower_path sd.dat)"
	# smbio's own watchdog ends it (budget + 2 s); the bound is a safety net.
	measure "$(awk -v a="$budget" -v b="$BENCH_SD_PROBE_T" 'BEGIN { print a + b }')" "$SMBIO" latread "$MED_MNT/sd.dat" 65536 100000 "$budget" direct opened
	if kv p50_ms >/dev/null; then
		rec slowread "$p50" ms "$(kv p50_ms)" "$(kv censored)"
		rec slowread "$p99" ms "$(kv p99_ms)" "$(kv censored)"
		log "  64 KiB random reads ($PHASE): $(kv n) reads, p50 $(kv p50_ms) ms, p99 $(kv p99_ms) ms"
	else
		# Not even the watchdog answered: the first read is still stuck.
		rec slowread "$p50" ms "$(awk -v t="$MB_ELAPSED" 'BEGIN { print t * 1000 }')" 1
		rec slowread "$p99" ms "$(awk -v t="$MB_ELAPSED" 'BEGIN { print t * 1000 }')" 1
		log "  64 KiB random reads ($PHASE): none done in ${MB_ELAPSED}s"
	fi
}

# One 4 KiB O_DIRECT read, as in the reports: their idle figure (0.085 s,
# one access of a DVD-RAM) is a read whose metadata was cached. The file's
# data is evicted, the file opened untimed, and the read is in its first 48 KiB,
# which ext2 maps from the inode itself, so the timed read is one access of
# the medium. The cold variant times open and read with every cache dropped.
probe_direct4k() {
	local i name=slow_read_4k_direct_idle_ms cold=slow_read_4k_direct_cold_idle_ms
	[ "$PHASE" = during ] && { name=slow_read_4k_direct_ms cold=slow_read_4k_direct_cold_ms; }
	for ((i = 0; i < BENCH_REPS; i++)); do
		settle_reads
		# Only the file's data leaves the caches (through slowmedia a lower
		# page could serve the read). Dropping every cache would also throw
		# away the writer's block map and bitmaps, clean once the metadata
		# was flushed, and the flusher's next chunks would read them back,
		# one access at a time, in front of whatever comes: a cost of the
		# drop, not of this read, and no real reader comes after one.
		"$SMBIO" evict "$(lower_path sd.dat)"
		mark "direct4k $PHASE $i"
		measure "$BENCH_SD_PROBE_T" "$SMBIO" latread "$MED_MNT/sd.dat" 4096 1 "$BENCH_SD_PROBE_T" \
			direct opened within=49152
		mark "direct4k $PHASE $i done: $(kv max_ms) ms"
		direct4k_rec "$name"
		quick_give_up && break
	done
	log "  one 4 KiB O_DIRECT read ($PHASE): last $(kv max_ms || echo ">$MB_ELAPSED s") ms"
	for ((i = 0; i < BENCH_COLD_REPS; i++)); do
		settle_reads
		drop_caches
		mark "direct4k cold $PHASE $i"
		measure "$BENCH_SD_PROBE_T" "$SMBIO" latread "$MED_MNT/sd.dat" 4096 1 "$BENCH_SD_PROBE_T" direct
		mark "direct4k cold $PHASE $i done: $(kv max_ms) ms"
		direct4k_rec "$cold"
		quick_give_up && break
	done
	log "  open + one 4 KiB O_DIRECT read, all caches cold ($PHASE): last $(kv max_ms || echo ">$MB_ELAPSED s") ms"
}

direct4k_rec() {
	if kv max_ms >/dev/null; then
		rec slowread "$1" ms "$(kv max_ms)" "$(kv censored)"
	else
		rec slowread "$1" ms "$(awk -v t="$MB_ELAPSED" 'BEGIN { print t * 1000 }')" 1
	fi
}

# A bounded writer (dd + fsync) against the medium's nominal write speed.
probe_writer() {
	local i ideal
	ideal=$(awk -v m="$BENCH_SD_WRITE_MB" -v b="$BENCH_WBPS" 'BEGIN { print m * 1048576 / b }')
	for ((i = 0; i < BENCH_REPS; i++)); do
		settle_reads
		measure "$(awk -v t="$ideal" 'BEGIN { printf "%d", t * 4 + 10 }')" \
			dd if=/dev/zero of="$MED_MNT/w.dat" bs=1M count="$BENCH_SD_WRITE_MB" conv=fsync status=none
		rec slowread writer_elapsed_vs_ideal x "$(awk -v e="$MB_ELAPSED" -v i="$ideal" 'BEGIN { printf "%.3f", e / i }')" "$MB_TIMEDOUT"
		rm -f "$MED_MNT/w.dat"
	done
	log "  writer ${BENCH_SD_WRITE_MB} MB + fsync: last ${MB_ELAPSED}s (ideal ${ideal}s)"
}

probe_dbench() {
	local i tp
	for ((i = 0; i < BENCH_REPS; i++)); do
		mkdir -p "$MED_MNT/dbench"
		measure "$((BENCH_DBENCH_S * 3 + 30))" quiet dbench -D "$MED_MNT/dbench" -t "$BENCH_DBENCH_S" 2
		tp=$(printf '%s\n' "$MB_OUT" | awk '/^Throughput/ { print $2 }')
		[ -n "$tp" ] && rec dbench dbench_mb_s MB/s "$tp" "$MB_TIMEDOUT"
		media_bounded 60 rm -rf "$MED_MNT/dbench"
	done
	log "  dbench: last ${tp:-?} MB/s"
}

# bonnie++ has a fixed cost of several seconds per run (its seek phase), so
# quick mode runs it once.
probe_bonnie() {
	local i kb
	for ((i = 0; i < BENCH_BONNIE_REPS; i++)); do
		mkdir -p "$MED_MNT/bonnie"
		measure "$BENCH_BONNIE_T" quiet bonnie++ -q -d "$MED_MNT/bonnie" -s "$BENCH_BONNIE_MB" \
			-r "$((BENCH_BONNIE_MB / 2))" -n 0 -f -u root
		# CSV: ...,putc,putc_cpu,put_block,... (put_block is the 12th field)
		kb=$(printf '%s\n' "$MB_OUT" | awk -F, 'NF > 12 && $12 ~ /^[0-9]+$/ { print $12 }' | tail -1)
		[ -n "$kb" ] && rec dbench bonnie_block_write_kb_s KB/s "$kb"
		media_bounded 60 rm -rf "$MED_MNT/bonnie"
		quick_give_up && break
	done
	log "  bonnie++ block write: last ${kb:-?} KB/s"
}
