# Helpers for the arbiter mount tests (tests/mount/arbiter/*.sh), on the
# shared harness (tests/lib/mount-lib.sh: ml_* set-up, checks, teardown).
# Real mounts, a real slowdev and the real slowmedia-arbiterd: the harness
# points SLOWMEDIA_CTL_DIR and SLOWMEDIA_ARBITER_SOCKET into the test's temp
# dir, so a daemon with arbiter=auto starts its arbiter there, and the
# teardown kills it. The scripts take SLOWMEDIA (the daemon), ARBITERD
# (slowmedia-arbiterd) and SLOWDEV (the emulator; empty when not built: skip).
# Source this with those set, then:
#
#   a_setup [tool...]       root, /dev/fuse, losetup, mkfs.ext2, python3, slowdev
#                           and the tools (else exit 77), a private mount
#                           namespace, the temp dir and teardown; two ext2
#                           media behind one slowdev head (one group), images
#                           `a` and `b`, at $LA and $LB, each A_MB MiB, with
#                           `set $A_SD_SET` (small chunks); mount points $MA
#                           and $MB (not mounted). $A_SD names the slowdev.
#   a_start LOWER MNT OPTS  the daemon with -f -o OPTS, and its control socket
#                           up; $ML_PID, $ML_LOG as ml_start
#   a_ctl MNT LINE          one request to MNT's control socket (arbtool request):
#                           what it printed, exit 0 on ok
#   a_field MNT KEY         KEY of MNT's status `mount` line
#   a_wait_field MNT KEY VALUE SECS
#                           poll (every 50 ms) until KEY is VALUE; 1 if it never
#                           is; A_WAITED: the seconds it took
#   a_arb LINE              one request to the arbiter (arbtool request)
#   a_arbiters              pids of the slowmedia-arbiterd serving our socket
#   a_written IMG           bytes slowdev wrote to image IMG (IMG.write_bytes)
#   a_writer MNT FILE MB    a background writer of MB MiB (zeros) into MNT/FILE;
#                           its pid in A_WPID; killed at teardown
#   a_fast                  slowdev without delays (to drain and stop quickly)
#   a_end MNT...            the end of a script: each MNT's daemon is alive,
#                           writers killed, slowdev fast, each MNT stopped,
#                           then ml_finish
#   a_gen FILE MB           a file of MB MiB of random bytes
#   a_cold_file FILE MB     a_gen on a lower while slowdev is fast, synced and
#                           dropped from the page cache (every read through a
#                           mount then reaches slowdev); slowdev slow again
#   a_share X Y             X's share of X + Y in percent (one decimal)
#   a_window SECS [MNT...]  sample slowdev's a.write_bytes and b.write_bytes every
#                           A_SAMPLE_S for SECS: A_DA, A_DB (bytes in the window),
#                           A_GAP_A, A_GAP_B (the longest time without a write
#                           to that image, the window's edges included),
#                           A_INC_A, A_INC_B (samples that saw it grow), and
#                           for each MNT given, whether its queue held data at
#                           every sample: A_EMPTY (samples where one did not),
#                           A_SAMPLES

# shellcheck shell=bash
# shellcheck disable=SC2034 # LA..MB and the A_* results are for the scripts

# shellcheck source=../../lib/mount-lib.sh
source "${MOUNT_LIB:-$(dirname "${BASH_SOURCE[0]}")/../../lib/mount-lib.sh}"

A_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
A_TOOL=$A_DIR/arbtool.py
A_SOCKET_WAIT_S=5
# Each medium: 1 MB/s writes, so a chunk (latency= 100 ms by default) is
# about 100 KB and takes about 100 ms; reads 4 MB/s; a short seek.
A_MB=${A_MB:-48}
A_SD_SET=${A_SD_SET:-write_bw=1M read_bw=4M seek_ms=2}
A_QUEUE=${A_QUEUE:-2M}
declare -A A_WRITERS=() # pid -> 1 while it may run

a__python() {
	# One that the unprivileged test user can run too (not a shim under /root).
	local p
	for p in /usr/bin/python3 /usr/local/bin/python3 "$(command -v python3)"; do
		[ -x "$p" ] && { echo "$p"; return 0; }
	done
	return 1
}

a_setup() {
	local lib
	ml_require mkfs.ext2 python3 "$@"
	[ -x "${SLOWMEDIA:-}" ] || { echo "SLOWMEDIA '${SLOWMEDIA:-}' is not executable"; exit 1; }
	[ -x "${ARBITERD:-}" ] || { echo "ARBITERD '${ARBITERD:-}' is not executable"; exit 1; }
	lib=$(cd "$A_DIR/../../slowdev" && pwd)/slowdev-media.sh
	if [ ! -x "${SLOWDEV:-}" ] || [ ! -f "$lib" ]; then
		ml_skip "needs the slowdev emulator (tests/slowdev)"
	fi
	[ -e /dev/loop-control ] || ml_skip "needs loop devices"
	ml_private_ns
	ml__init slowmedia-at
	export SLOWMEDIA_LOG_FILE=$ML_TMP/daemon-syslog.log
	# The daemons start this arbiter (arbiter=auto), not an installed one.
	export SLOWMEDIA_ARBITERD=$ARBITERD
	A_PY=$(a__python) || ml_skip "needs python3"
	export SLOWDEV_BIN=$SLOWDEV
	# shellcheck source=../../slowdev/slowdev-media.sh
	. "$lib"
	LA=$ML_TMP/la LB=$ML_TMP/lb MA=$ML_TMP/ma MB=$ML_TMP/mb
	A_SD=at-$$-$RANDOM
	ml_on_exit "slowdev_down $A_SD"
	slowdev_up_multi "$A_SD" "$A_MB" "a:usbstick:ext2:$LA" "b:usbstick:ext2:$LB" ||
		{ echo "slowdev_up_multi failed"; exit 1; }
	chmod 755 "$LA" "$LB"
	slowdev_ctl "$A_SD" "set $A_SD_SET" || { echo "slowdev: set $A_SD_SET refused"; exit 1; }
	ml_on_exit a_kill_writers
}

a_fast() {
	slowdev_ctl "$A_SD" "fast on"
}

a_end() {
	local m
	for m in "$@"; do ml_alive "$m"; done
	a_kill_writers
	a_fast
	for m in "$@"; do ml_stop "$m"; done
	ml_finish
}

a_start() {
	local lower=$1 mnt=$2 opts=$3 i sock
	mkdir -p "$mnt"
	ML_DAEMON=$SLOWMEDIA ml_start "$lower" "$mnt" -o "$opts"
	# Runs before this daemon is killed: no slow drain at teardown.
	ml_on_exit a_fast
	sock=$SLOWMEDIA_CTL_DIR/ctl-$ML_PID.sock
	for ((i = 0; i < A_SOCKET_WAIT_S * 20; i++)); do
		[ -S "$sock" ] && return 0
		sleep 0.05
	done
	echo "FAIL: no control socket $sock after $A_SOCKET_WAIT_S s; the daemon said:"
	ml_show_log "$mnt"
	exit 1
}

a_sock() {
	echo "$SLOWMEDIA_CTL_DIR/ctl-${ML_PIDS[$1]}.sock"
}

a_ctl() {
	"$A_PY" "$A_TOOL" request "$(a_sock "$1")" "$2" "${3:-5}"
}

a_arb() {
	"$A_PY" "$A_TOOL" request "$SLOWMEDIA_ARBITER_SOCKET" "$1" "${2:-5}"
}

a_field() {
	"$A_PY" "$A_TOOL" get "$(a_sock "$1")" "$2"
}

a_wait_field() {
	local mnt=$1 key=$2 want=$3 secs=$4 t0=$EPOCHREALTIME v
	while :; do
		v=$(a_field "$mnt" "$key")
		A_WAITED=$(ml_since "$t0")
		[ "$v" = "$want" ] && return 0
		awk -v a="$A_WAITED" -v b="$secs" 'BEGIN { exit !(a < b) }' || return 1
		sleep 0.05
	done
}

a_arbiters() {
	local p
	for p in $(pgrep -x slowmedia-arbit); do
		tr '\0' ' ' 2>/dev/null <"/proc/$p/cmdline" |
			grep -qF -- "--socket $SLOWMEDIA_ARBITER_SOCKET " && echo "$p"
	done
	return 0
}

a_written() {
	slowdev_stat "$A_SD" "$1.write_bytes"
}

# a_written_ab: "A B", both images' bytes from one snapshot of the stats.
a_written_ab() {
	awk '$1 == "a.write_bytes" { a = $2 } $1 == "b.write_bytes" { b = $2 }
		END { print a + 0, b + 0 }' "$(slowdev_dir "$A_SD")/dev/stats"
}

a_writer() {
	local mnt=$1 file=$2 mb=$3
	dd if=/dev/zero of="$mnt/$file" bs=64k count=$((mb * 16)) status=none 2>/dev/null &
	A_WPID=$!
	A_WRITERS[$A_WPID]=1
}

a_kill_writers() {
	local p
	for p in "${!A_WRITERS[@]}"; do
		kill -9 "$p" 2>/dev/null
	done
	for p in "${!A_WRITERS[@]}"; do
		wait "$p" 2>/dev/null
	done
	A_WRITERS=()
}

# a_wait_writer PID SECS: 0 when the writer ended in time, with status 0.
a_wait_writer() {
	local pid=$1 rc=0
	ml_wait_exit "$pid" "$2" || return 1
	wait "$pid" || rc=$?
	unset "A_WRITERS[$pid]"
	return $rc
}

a_gen() {
	head -c "$(($2 << 20))" /dev/urandom >"$1"
}

a_cold_file() {
	a_fast
	a_gen "$1" "$2"
	sync -f "$(dirname "$1")"
	"$A_PY" -c 'import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$1"
	slowdev_ctl "$A_SD" "fast off"
}

a_share() {
	awk -v x="$1" -v y="$2" 'BEGIN { printf "%.1f", (x + y) ? 100 * x / (x + y) : 0 }'
}

A_SAMPLE_S=${A_SAMPLE_S:-0.2}
a_window() {
	local secs=$1 t0 t a b la lb lta=0 ltb=0 m q empty
	shift
	t0=$EPOCHREALTIME
	read -r la lb < <(a_written_ab)
	local a0=$la b0=$lb
	A_GAP_A=0 A_GAP_B=0 A_INC_A=0 A_INC_B=0 A_EMPTY=0 A_SAMPLES=0
	while :; do
		sleep "$A_SAMPLE_S"
		t=$(ml_since "$t0")
		read -r a b < <(a_written_ab)
		if [ "$a" != "$la" ]; then
			A_GAP_A=$(awk -v t="$t" -v l="$lta" -v g="$A_GAP_A" 'BEGIN { print (t - l > g) ? t - l : g }')
			la=$a lta=$t A_INC_A=$((A_INC_A + 1))
		fi
		if [ "$b" != "$lb" ]; then
			A_GAP_B=$(awk -v t="$t" -v l="$ltb" -v g="$A_GAP_B" 'BEGIN { print (t - l > g) ? t - l : g }')
			lb=$b ltb=$t A_INC_B=$((A_INC_B + 1))
		fi
		empty=0
		for m in "$@"; do
			q=$(a_field "$m" queued_bytes)
			[ "${q:-0}" -gt 0 ] || empty=1
		done
		A_EMPTY=$((A_EMPTY + empty)) A_SAMPLES=$((A_SAMPLES + 1))
		a_ge "$t" "$secs" && break
	done
	A_GAP_A=$(awk -v t="$t" -v l="$lta" -v g="$A_GAP_A" 'BEGIN { printf "%.2f", (t - l > g) ? t - l : g }')
	A_GAP_B=$(awk -v t="$t" -v l="$ltb" -v g="$A_GAP_B" 'BEGIN { printf "%.2f", (t - l > g) ? t - l : g }')
	A_DA=$((la - a0)) A_DB=$((lb - b0)) A_SECS=$t
}

# a_ge X Y / a_le X Y: decimals.
a_ge() { awk -v x="$1" -v y="$2" 'BEGIN { exit !(x >= y) }'; }
a_le() { awk -v x="$1" -v y="$2" 'BEGIN { exit !(x <= y) }'; }
