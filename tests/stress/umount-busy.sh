#!/usr/bin/env bash
# Unmount while readers keep the mount busy, CYCLES times; every daemon must
# exit 0. Not in the suite: the race it looks for (a worker reading
# ECONNABORTED from /dev/fuse as the kernel ends the connection) showed up
# once in 200 cycles, 7 minutes on 2 cores, before fusefs/devio.c took
# ECONNABORTED for the end of the connection.
#   tests/stress/umount-busy.sh [CYCLES]      (as root; builds into build/ first)
set -u
cycles=${1:-200}
top=$(cd "$(dirname "$0")/../.." && pwd)
[ "$(id -u)" = 0 ] || { echo "needs root"; exit 77; }
[ -c /dev/fuse ] || { echo "needs /dev/fuse"; exit 77; }
[ -x "$top/build/fusefs/slowmedia" ] || "$top/tests/build.sh" >/dev/null || exit 1
daemon=$top/build/fusefs/slowmedia
tmp=$(mktemp -d /tmp/slowmedia-umount-busy.XXXXXX)
readers=()
stop_readers() {
	[ ${#readers[@]} -gt 0 ] && kill "${readers[@]}" 2>/dev/null
	wait "${readers[@]}" 2>/dev/null
	readers=()
}
cleanup() {
	stop_readers
	mountpoint -q "$tmp/m" && umount -l "$tmp/m"
	rm -rf "$tmp"
}
trap cleanup EXIT
mkdir "$tmp/lower" "$tmp/m"
for i in $(seq 1 20); do echo "file $i" >"$tmp/lower/f$i"; done
bad=0
for c in $(seq 1 "$cycles"); do
	"$daemon" -f -o arbiter=off "$tmp/lower" "$tmp/m" 2>"$tmp/log" &
	pid=$!
	for _ in $(seq 1 40); do mountpoint -q "$tmp/m" && break; sleep 0.05; done
	for _ in 1 2 3 4; do
		(while :; do cat "$tmp"/m/f* >/dev/null 2>&1; done) &
		readers+=($!)
	done
	sleep 0.1
	until umount "$tmp/m" 2>/dev/null; do sleep 0.01; done
	wait "$pid"
	rc=$?
	stop_readers
	if [ "$rc" != 0 ]; then
		bad=$((bad + 1))
		echo "cycle $c: the daemon exited $rc: $(tr '\n' ' ' <"$tmp/log")"
	fi
done
echo "$cycles cycles, $bad daemons exited non-zero"
[ "$bad" = 0 ]
