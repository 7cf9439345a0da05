# arblib.sh: what the arbiter benchmarks share (same-channel.sh,
# arbiter-shares.sh, arbiter-overhead.sh). Sourced after tests/lib/media.sh
# and lib.sh, whose log, kv, rec, ratio, measure, drop_caches and
# settle_reads it uses.
#
#   arb_prepare          binaries, the slowdev library, the private control
#                        directory and arbiter socket (in $MEDIA_STATE), and
#                        the undo step that stops an arbiter a mount started
#   arb_bus_up NAME SPEC...  one slowdev, several images behind one head
#                        (slowdev_up_multi NAME $ARB_IMG_MB SPEC...), taken
#                        down at exit or by media_undo bus:NAME
#   smx_up KEY MNT OPTS [hold]   slowmedia over MNT in place, -f -o OPTS;
#                        "hold": a process keeps the lower directory as its
#                        cwd first, so smx_lower reaches the lower's files
#   smx_down KEY         unmount (it drains), wait for the daemon, bounded
#   smx_get KEY FIELDS   fields of the daemon's control-socket status line
#   arb_stop             stop the arbiter serving our socket, by its pid
#   pick_python          a python3 that has matplotlib, or nothing
#
# Every process is stopped by its own pid; nothing is looked up by name.
# shellcheck shell=bash

declare -A SMX_PID=() SMX_MNT=() SMX_HOLD=()

arb_prepare() {
	SMBIO=$SLOWMEDIA_BUILD/tests/bench/smbio
	if [ ! -x "$SMBIO" ]; then
		SMBIO=$MEDIA_STATE/smbio
		cc -O2 -pthread -D_GNU_SOURCE -o "$SMBIO" "$here/smbio.c" || {
			echo "$0: cannot build smbio" >&2
			return 1
		}
	fi
	SLOWMEDIA_BIN=$SLOWMEDIA_BUILD/fusefs/slowmedia
	SLOWDEV_BIN=$SLOWMEDIA_BUILD/tests/slowdev/slowdev
	ARBITERD_BIN=$SLOWMEDIA_BUILD/sched/slowmedia-arbiterd
	SMCTL="python3 $here/smctl.py"
	local b
	for b in "$SLOWMEDIA_BIN" "$SLOWDEV_BIN" "$ARBITERD_BIN"; do
		[ -x "$b" ] || { echo "$0: no $b (build with -Dbench=true, set SLOWMEDIA_BUILD)" >&2; return 77; }
	done
	[ -c /dev/fuse ] || { echo "$0: no /dev/fuse" >&2; return 77; }
	command -v mkfs.ext2 >/dev/null || { echo "$0: no mkfs.ext2" >&2; return 77; }
	# The daemons' control sockets and the arbiter they start live in our
	# state dir; the mounts start the build's arbiter, not an installed one.
	export SLOWMEDIA_CTL_DIR=$MEDIA_STATE/ctl SLOWMEDIA_ARBITER_SOCKET=$MEDIA_STATE/arbiter.sock
	export SLOWMEDIA_ARBITERD=$ARBITERD_BIN SLOWDEV_BIN
	# shellcheck source=../slowdev/slowdev-media.sh
	. "$top/tests/slowdev/slowdev-media.sh"
	media_on_exit arbiter arb_stop
	ARB_BUS_SEQ=0
}

# The pid in the arbiter's greeting, if it serves our socket and its command
# line names that socket (a pid is not trusted blindly).
arb_pid() {
	local pid
	[ -S "$SLOWMEDIA_ARBITER_SOCKET" ] || return 1
	pid=$($SMCTL "$SLOWMEDIA_ARBITER_SOCKET" --pid 2>/dev/null) || return 1
	[ -n "$pid" ] && tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null |
		grep -qxF -- "$SLOWMEDIA_ARBITER_SOCKET" || return 1
	echo "$pid"
}

arb_stop() {
	local pid i
	pid=$(arb_pid) || return 0
	kill -TERM "$pid" 2>/dev/null
	for ((i = 0; i < 50; i++)); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null
	return 0
}

# arb_bus_up SPEC...: sets ARB_BUS (the slowdev name).
arb_bus_up() {
	ARB_BUS=smarb-$$-$((++ARB_BUS_SEQ))
	media_on_exit "bus:$ARB_BUS" "arb_bus_down $ARB_BUS"
	slowdev_up_multi "$ARB_BUS" "$ARB_IMG_MB" "$@"
}

arb_bus_down() {
	media_forget "bus:$1"
	media_pending_wait
	slowdev_down "$1"
}

smx_mounted() {
	awk -v m="$1" '$2 == m && $3 == "fuse.slowmedia" { f = 1 } END { exit !f }' /proc/mounts
}

smx_sock() {
	echo "$SLOWMEDIA_CTL_DIR/ctl-${SMX_PID[$1]}.sock"
}

smx_get() {
	$SMCTL "$(smx_sock "$1")" --get "$2"
}

smx_lower() {
	echo "/proc/${SMX_HOLD[$1]}/cwd/$2"
}

smx_up() {
	local key=$1 mnt=$2 opts=$3 hold=${4:-} i
	SMX_MNT[$key]=$mnt
	SMX_HOLD[$key]=
	media_on_exit "sm:$key" "smx_down $key"
	if [ "$hold" = hold ]; then
		(cd "$mnt" && exec sleep infinity) </dev/null >/dev/null 2>&1 &
		SMX_HOLD[$key]=$!
		for ((i = 0; i < 100; i++)); do
			[ "$(readlink "/proc/${SMX_HOLD[$key]}/cwd" 2>/dev/null)" = "$mnt" ] && break
			sleep 0.05
		done
	fi
	"$SLOWMEDIA_BIN" "$mnt" "$mnt" -f -o "$opts" </dev/null >"$MEDIA_STATE/sm-$key.log" 2>&1 &
	SMX_PID[$key]=$!
	# SMX_UP_WAIT_S: longer for a mount that replays a spool first
	for ((i = 0; i < ${SMX_UP_WAIT_S:-10} * 10; i++)); do
		smx_mounted "$mnt" && [ -S "$(smx_sock "$key")" ] && return 0
		kill -0 "${SMX_PID[$key]}" 2>/dev/null || break
		sleep 0.1
	done
	log "slowmedia did not mount on $mnt:"
	sed 's/^/  /' "$MEDIA_STATE/sm-$key.log" >&2
	media_undo "sm:$key"
	return 1
}

# Unmounts (busy while data is queued: then lazily, and the daemon drains
# and exits, which is what is waited for).
smx_umount() {
	local key=$1 mnt=${SMX_MNT[$1]} pid=${SMX_PID[$1]}
	if smx_mounted "$mnt"; then
		umount "$mnt" 2>/dev/null || umount -l "$mnt" || return 1
	fi
	while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
	wait "$pid" 2>/dev/null
	return 0
}

smx_down() {
	local key=$1 pid=${SMX_PID[$1]:-}
	media_forget "sm:$key"
	if [ -n "${SMX_HOLD[$key]:-}" ]; then
		kill "${SMX_HOLD[$key]}" 2>/dev/null
		wait "${SMX_HOLD[$key]}" 2>/dev/null
		SMX_HOLD[$key]=
	fi
	[ -n "$pid" ] || return 0
	media_bounded "$MEDIA_DOWN_TIMEOUT_S" smx_umount "$key"
	if [ "$MB_TIMEDOUT" = 1 ]; then
		log "slowmedia on ${SMX_MNT[$key]} did not exit; killing it"
		kill -KILL "$pid" 2>/dev/null
		smx_mounted "${SMX_MNT[$key]}" && umount -l "${SMX_MNT[$key]}"
		media_pending_add "$MB_PID"
	fi
	grep -qi error "$MEDIA_STATE/sm-$key.log" 2>/dev/null &&
		{ log "slowmedia log ($key):"; tail -5 "$MEDIA_STATE/sm-$key.log" | sed 's/^/  /' >&2; }
	SMX_PID[$key]=
	return 0
}

# Waits (at most 5 s) until the daemon of KEY says arbiter=WANT.
smx_wait_arbiter() {
	local key=$1 want=$2 i st
	for ((i = 0; i < 50; i++)); do
		st=$(smx_get "$key" arbiter 2>/dev/null)
		[ "$st" = "$want" ] && return 0
		sleep 0.1
	done
	log "  ${SMX_MNT[$key]}: arbiter=$st, not $want"
	return 1
}

# Starts WRITER_PID: dd of zeros into FILE until stopped (lib.sh's
# writer_stop ends it).
writer_to() {
	dd if=/dev/zero of="$1" bs=1M status=none 2>/dev/null &
	WRITER_PID=$!
	disown "$WRITER_PID"
	media_on_exit writer "writer_stop"
}

pick_python() {
	local p
	for p in python3 /usr/bin/python3; do
		command -v "$p" >/dev/null && "$p" -c 'import matplotlib' 2>/dev/null &&
			{ command -v "$p"; return 0; }
	done
	return 1
}

# median_of V...: the median of the numbers.
median_of() {
	printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END {
		if (NR == 0) exit 1
		if (NR % 2) print v[(NR + 1) / 2]; else printf "%.6g\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
