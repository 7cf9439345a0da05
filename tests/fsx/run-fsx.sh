#!/bin/bash
# Run fsx against real slowmedia mounts in a fresh temp dir under /var/tmp.
#
#   run-fsx.sh FSX SLOWMEDIA [fsx options...]
#
# fsx mounts SLOWMEDIA once per configuration (-c OPTS, default: the three of
# `fsx --help`) over TMP/cN/lower at TMP/cN/mnt, runs the ops, then checks the
# lower files after unmount (drain) and the files through a second mount.
# Skips (77) unless root with /dev/fuse. Whatever happens, the trap unmounts
# (lazily), stops the daemon fsx started (its pid is in TMP/daemon.pid) and
# removes TMP.
#
# Environment:
#   FSX_SEED=N     seed (default: random, printed first and on failure)
#   FSX_OPS=N      ops per configuration, overriding the test's count; for a
#                  long (benchmark) run, e.g.
#                    FSX_OPS=1000000 meson test -C build --suite mount \
#                        --timeout-multiplier 0 fsx-queue1M
#   FSX_TMPDIR=DIR where the temp dir goes (default /var/tmp: a fast disk)
#   FSX_KEEP=1     keep the temp dir (lower files, daemon logs) for a look
#   FSX_VERBOSE=1  print every op (a replayable log: fsx --replay FILE)
#
# `--spool-root TMP` puts the configurations' spools in a tmpfs at TMP/spool.

fsx=$1
daemon=$2
shift 2 || { echo "usage: $0 FSX SLOWMEDIA [fsx options...]"; exit 2; }

[ "$(id -u)" = 0 ] || { echo "SKIP: fsx needs root"; exit 77; }
[ -c /dev/fuse ] || { echo "SKIP: fsx needs /dev/fuse"; exit 77; }
[ -x "$fsx" ] && [ -x "$daemon" ] || { echo "no executable '$fsx' or '$daemon'"; exit 1; }

tmp=$(mktemp -d "${FSX_TMPDIR:-/var/tmp}/slowmedia-fsx.XXXXXX") || exit 1
# The daemon's control socket and the arbiter it starts live in tmp.
export SLOWMEDIA_CTL_DIR=$tmp/ctl SLOWMEDIA_ARBITER_SOCKET=$tmp/arbiter.sock

stop_daemon() {
	local pid i
	[ -f "$tmp/daemon.pid" ] || return 0
	read -r pid <"$tmp/daemon.pid"
	# Only the daemon fsx started: the pid must still be a slowmedia.
	[ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = slowmedia ] || return 0
	kill "$pid" 2>/dev/null
	for ((i = 0; i < 50; i++)); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.1
	done
	kill -9 "$pid" 2>/dev/null
}

fsx_pid=""

# fsx itself detaches its mount and stops its daemon on SIGTERM.
stop_fsx() {
	local i
	[ -n "$fsx_pid" ] || return 0
	kill "$fsx_pid" 2>/dev/null
	for ((i = 0; i < 50; i++)); do
		kill -0 "$fsx_pid" 2>/dev/null || return 0
		sleep 0.1
	done
	kill -9 "$fsx_pid" 2>/dev/null
}

cleanup() {
	local m
	stop_fsx
	for m in "$tmp"/c*/mnt; do
		awk -v m="$m" '$2 == m {f = 1} END {exit !f}' /proc/mounts && umount -l "$m"
	done
	stop_daemon
	if awk -v m="$tmp/spool" '$2 == m {f = 1} END {exit !f}' /proc/mounts; then
		umount "$tmp/spool" || umount -l "$tmp/spool"
	fi
	pkill -f -- "slowmedia-arbiterd --socket $SLOWMEDIA_ARBITER_SOCKET " 2>/dev/null
	if [ -n "${FSX_KEEP:-}" ]; then
		echo "# kept $tmp"
	else
		rm -rf "$tmp"
	fi
}
trap 'rc=$?; cleanup; exit $rc' EXIT
trap 'exit 130' INT TERM HUP

# --spool-root TMP: a spool directory of the run's own, a tmpfs under tmp
# (slowmedia refuses a spool on the lower's filesystem).
args=()
for a in "$@"; do
	if [ "$a" = TMP ] && [ "${args[-1]:-}" = --spool-root ]; then
		mkdir -m 700 "$tmp/spool" &&
			mount -t tmpfs -o mode=0700,size=2G fsx-spool "$tmp/spool" || exit 1
		a=$tmp/spool
	fi
	args+=("$a")
done
[ -n "${FSX_SEED:-}" ] && args+=(--seed "$FSX_SEED")
[ -n "${FSX_OPS:-}" ] && args+=(--ops "$FSX_OPS")
[ -n "${FSX_VERBOSE:-}" ] && args+=(--verbose)

# In the background: bash runs a trap only once the foreground command is done,
# while `wait` returns at once on a signal.
"$fsx" --daemon "$daemon" --tmp "$tmp" "${args[@]}" &
fsx_pid=$!
wait "$fsx_pid"
rc=$?
fsx_pid=""
exit "$rc"
