#!/usr/bin/env bash
# Mount test of slowdev: timing, queueing, faults, stats, and the
# slowdev-media.sh library over a real ext2 on a loop device.
#   test-slowdev.sh SLOWDEV_BIN PROBE_BIN
# Exit 77 (skip) without root, /dev/fuse or loop devices.
set -u

bin=${1:?usage: test-slowdev.sh SLOWDEV_BIN PROBE_BIN}
probe=${2:?usage: test-slowdev.sh SLOWDEV_BIN PROBE_BIN}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

skip() {
	echo "SKIP: $*"
	exit 77
}
[ "$(id -u)" -eq 0 ] || skip "needs root"
[ -c /dev/fuse ] || skip "no /dev/fuse"
command -v losetup >/dev/null || skip "no losetup"
[ -e /dev/loop-control ] || skip "no loop devices"

# The timing profile: 10 MB/s write, 20 MB/s read, 10 ms seek.
WBW=10000000
RBW=20000000
SEEK_NS=10000000
TOL_PCT=5

work=$(mktemp -d /var/tmp/slowdev-test.XXXXXX)
mnt=$work/m
libname=sdtest-$$
pid=
loops=()
failures=0

# shellcheck source=slowdev-media.sh
SLOWDEV_BIN=$bin
. "$here/slowdev-media.sh"

cleanup() {
	local l
	slowdev_down "$libname" >/dev/null 2>&1
	for l in "${loops[@]}"; do
		losetup -d "$l" 2>/dev/null
	done
	if slowdev__is_mounted "$mnt"; then
		umount "$mnt" 2>/dev/null || umount -l "$mnt"
	fi
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill "$pid"
		wait "$pid"
	fi
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

pass() {
	echo "ok   $*"
}

fail() {
	echo "FAIL $*"
	failures=$((failures + 1))
}

ctl() {
	printf '%s\n' "$*" >"$mnt/ctl"
}

stat_of() {
	awk -v k="$1" '$1 == k { print $2 }' "$mnt/stats"
}

# check_eq WHAT GOT WANT
check_eq() {
	if [ "$2" = "$3" ]; then pass "$1: $2"; else fail "$1: got '$2', want '$3'"; fi
}

# Timing: the model promises a lower bound (never answered early) and the
# host adds a little (reply, wake-ups). Other load on the machine can add a
# lot to one run, so a measurement is taken up to 3 times and the first run
# within tolerance counts; an early answer fails at once.
#   measure WHAT WANT_NS up|near CMD...   CMD prints the time in ns
# up: 0..+TOL_PCT%; near: +-TOL_PCT% (a difference of two clocks, where either
# side may wake a little late).
measure() {
	local what=$1 want=$2 mode=$3 got pct try ok=0
	shift 3
	for try in 1 2 3; do
		got=$("$@")
		# Not a number: the scenario did not come about (too much load).
		[[ $got =~ ^[0-9]+$ ]] || continue
		pct=$(awk -v g="$got" -v w="$want" 'BEGIN { printf "%+.2f", (g - w) * 100 / w }')
		if [ "$mode" = up ] && [ "$got" -lt "$want" ]; then
			fail "$what: $((got / 1000)) us, faster than the model's $((want / 1000)) us"
			return
		fi
		ok=$(awk -v p="$pct" -v t="$TOL_PCT" 'BEGIN { if (p < 0) p = -p; print (p <= t) }')
		[ "$ok" = 1 ] && break
	done
	if ! [[ $got =~ ^[0-9]+$ ]]; then
		fail "$what: $got"
		return
	fi
	what+=": $((got / 1000)) us, model $((want / 1000)) us ($pct%)"
	[ "$try" -gt 1 ] && what+=" [run $try]"
	if [ "$ok" = 1 ]; then pass "$what"; else fail "$what, allowed $TOL_PCT%"; fi
}

# Probe output fields: OP OFF LEN RESULT START_NS END_NS.
total_ns() {
	awk '{ t += $6 - $5 } END { print t }'
}

results() {
	awk '{ printf "%s%s", sep, $4; sep = " " } END { print "" }'
}

echo "# slowdev: write $WBW B/s, read $RBW B/s, seek $((SEEK_NS / 1000000)) ms"
truncate -s 64M "$work/image"
mkdir -p "$mnt"
# A profile and options that override all of it: the options must win.
"$bin" -f --profile zip --write-bw 10M --read-bw=20M --seek-ms 10 --trace "$work/trace" \
	"$work/image" "$mnt" 2>"$work/log" &
pid=$!
for _ in $(seq 50); do
	slowdev__is_mounted "$mnt" && break
	sleep 0.1
done
slowdev__is_mounted "$mnt" || {
	cat "$work/log"
	echo "FAIL slowdev did not mount"
	exit 1
}
check_eq "disk size" "$(stat -c %s "$mnt/disk")" $((64 * 1024 * 1024))
# Bad options: every problem named, nothing mounted.
mkdir -p "$work/bad"
err=$("$bin" -f --write-bw 0 --trace "$work/no/such/dir/trace" "$work/image" "$work/bad" 2>&1)
rc=$?
if [ $rc -ne 0 ] && grep -q -- "--write-bw: bad bandwidth '0'" <<<"$err" &&
	grep -q -- "--trace: $work/no/such/dir/trace: No such file or directory" <<<"$err" &&
	! slowdev__is_mounted "$work/bad"; then
	pass "bad options: both named, nothing mounted"
else
	fail "bad options: rc $rc, said: $err"
fi
check_eq "parameters" "$(stat_of write_bw) $(stat_of read_bw) $(stat_of seek_ms)" \
	"$WBW $RBW 10"

# Puts the head at OFF (> 0) without charging anything.
park() {
	ctl fast on
	"$probe" "$mnt/disk" "r:$(($1 - 1)):1" >/dev/null
	ctl fast off
}

# timed PARK OP...: park the head at PARK, zero the counters, run the ops;
# prints their total time in ns.
timed() {
	park "$1"
	shift
	ctl reset
	"$probe" "$mnt/disk" "$@" | total_ns
}

# (1) Sequential bandwidth: requests start at the head, no seek.
measure "sequential write 4 MB" $((4000000 * 1000000000 / WBW)) up \
	timed 4096 w:4096:4000000
check_eq "no seek charged for a sequential write" "$(stat_of seeks)" 0
measure "sequential read 4 MB" $((4000000 * 1000000000 / RBW)) up \
	timed 4096 r:4096:4000000
check_eq "no seek charged for a sequential read" "$(stat_of seeks)" 0

# (2) Seeks: ten scattered 4 KB reads each pay the seek; contiguous ones do not.
alone=$((SEEK_NS + 4096 * 1000000000 / RBW))
ops=()
for i in 0 5 1 7 3 9 2 8 4 6; do
	ops+=("r:$((20000000 + i * 1000000)):4096")
done
measure "10 random 4 KB reads" $((10 * alone)) up timed 4096 "${ops[@]}"
check_eq "seeks counted" "$(stat_of seeks)" 10
"$probe" "$mnt/disk" r:40000000:4096 r:40004096:4096 r:40008192:4096 >/dev/null
check_eq "contiguous reads: one seek (to the first)" "$(stat_of seeks)" 11

# (3) A read behind a big write waits for it. 1,000,000 bytes is one FUSE
# request (max_write is 1 MiB): 100 ms of writing plus a seek. The read,
# sent once the write is in the queue, must end one read service time after
# the write ends. Prints that time in ns.
read_behind_write() {
	local wres wend rout rres rstart rend wpid i
	park 4096
	ctl reset
	"$probe" "$mnt/disk" w:8000000:1000000 >"$work/writer" &
	wpid=$!
	for ((i = 0; i < 200; i++)); do
		[ "$(stat_of queue_depth)" -ge 1 ] && break
		sleep 0.005
	done
	rout=$("$probe" "$mnt/disk" r:30000000:4096)
	wait $wpid
	read -r _ _ _ wres _ wend <"$work/writer"
	read -r _ _ _ rres rstart rend <<<"$rout"
	if [ "$wres" != 1000000 ] || [ "$rres" != 4096 ]; then
		echo "write gave '$wres', read '$rres'"
	elif [ "$rstart" -ge "$wend" ]; then
		echo "the read came after the write ended: no queueing to see"
	elif [ "$rend" -lt "$wend" ]; then
		echo "the read overtook the write queued before it"
	else
		echo "queued read: latency $(((rend - rstart) / 1000)) us (alone $((alone / 1000)) us)" \
			>"$work/behind"
		echo $((rend - wend))
	fi
}
measure "read done after the write it queued behind" "$alone" near read_behind_write
cat "$work/behind" 2>/dev/null
check_eq "max_queue_depth" "$(stat_of max_queue_depth)" 2

# A stall holds the queue; the read after it pays stall + seek + transfer,
# less the time between the stall command and the read (a loaded machine
# takes tens of ms to start the probe): it ends 200 ms or more after the
# stall began, and waits at most the stall plus its own time.
t0=$(date +%s%N)
ctl "stall 0.2"
got=$("$probe" "$mnt/disk" r:50000000:4096 | total_ns)
since=$(($(date +%s%N) - t0))
if [ "$since" -ge 200000000 ] && [ "$got" -ge 100000000 ] &&
	[ "$got" -le $((200000000 + alone + 10000000)) ]; then
	pass "read during a 200 ms stall: $((got / 1000)) us ($((since / 1000)) us after the stall began)"
else
	fail "read during a 200 ms stall: $((got / 1000)) us ($((since / 1000)) us after the stall began)"
fi

# (4) Fault injection, in fast mode: it is about errors, not time.
ctl fast on
t0=$(date +%s%N)
out=$("$probe" "$mnt/disk" v:4096:4000000)
t1=$(date +%s%N)
check_eq "data written in (1) reads back" "$(results <<<"$out")" 4000000
if [ $((t1 - t0)) -lt 100000000 ]; then
	pass "fast mode: 4 MB in $(((t1 - t0) / 1000)) us"
else
	fail "fast mode: 4 MB took $(((t1 - t0) / 1000)) us"
fi
ctl reset
ctl "fail read 1M 2M"
ctl "fail write 3000000 4000000"
ctl "fail any 5M 6M"
out=$("$probe" "$mnt/disk" r:995904:4096 r:996000:4096 r:1999999:1 r:2000000:4096 \
	w:1500000:4096 w:2995904:4096 w:2995904:4097 r:3500000:4096 \
	r:5000000:1 w:5999999:1 w:6000000:4096)
check_eq "fault ranges" "$(results <<<"$out")" \
	"4096 EIO EIO 4096 4096 4096 EIO 4096 EIO EIO 4096"
check_eq "errors counted" "$(stat_of errors)" 5
ctl clear
out=$("$probe" "$mnt/disk" r:1500000:4096 w:3500000:4096 r:5500000:4096)
check_eq "clear restores" "$(results <<<"$out")" "4096 4096 4096"

# (5) Eject fails everything, including fsync; clear brings the medium back.
ctl eject
out=$("$probe" "$mnt/disk" r:0:4096 w:0:4096 s)
check_eq "ejected: read write fsync" "$(results <<<"$out")" "EIO EIO EIO"
ctl clear
out=$("$probe" "$mnt/disk" r:0:4096 s)
check_eq "after clear" "$(results <<<"$out")" "4096 0"

# A bad command fails the write with EINVAL and is logged.
if ctl "frobnicate" 2>/dev/null; then
	fail "bad ctl command accepted"
elif grep -q "frobnicate" "$work/log"; then
	pass "bad ctl command: EINVAL, logged"
else
	fail "bad ctl command not logged"
fi
ctl "set write_bw=2x" 2>/dev/null && fail "bad size accepted"

# (6) Counters match what was done (timed mode again).
ctl fast off
ctl reset
traced=$(wc -l <"$work/trace")
out=$("$probe" "$mnt/disk" w:10000000:5000 w:10005000:5000 r:10000000:10000 r:30000000:100 s)
ctl "fail read 0 1"
"$probe" "$mnt/disk" r:0:512 >/dev/null
ctl clear
check_eq "results" "$(results <<<"$out")" "5000 5000 10000 100 0"
# --trace: a line per request, in order, times that do not go back.
check_eq "trace" "$(tail -n +$((traced + 1)) "$work/trace" | awk '
	$2 < $1 || $3 < $2 { print "times out of order:", $0 }
	{ printf "%s:%s:%s:%s ", $4, $5, $6, $7 }')" \
	"write:10000000:5000:0 write:10005000:5000:0 read:10000000:10000:0 read:30000000:100:0 fsync:0:0:0 read:0:512:-5 "
got=""
for k in reads writes fsyncs read_bytes write_bytes seeks errors queue_depth model_ns; do
	got+="$k=$(stat_of $k) "
done
# seeks: the first write (head elsewhere), the read back, the far read.
want="reads=2 writes=2 fsyncs=1 read_bytes=10100 write_bytes=10000 seeks=3 errors=1"
want+=" queue_depth=0 model_ns=$((3 * SEEK_NS + 10000 * 1000000000 / WBW + 10100 * 1000000000 / RBW)) "
check_eq "stats" "$got" "$want"
busy=$(stat_of busy_ns)
model=$(stat_of model_ns)
if [ "$busy" -ge "$model" ]; then pass "busy_ns $busy >= model_ns"; else fail "busy_ns $busy < model_ns $model"; fi
up1=$(stat_of uptime_ns)
sleep 0.01
up2=$(stat_of uptime_ns)
if [ "$up2" -gt "$up1" ]; then pass "uptime_ns advances"; else fail "uptime_ns $up1 -> $up2"; fi

# Loop devices over disk, buffered and direct-io, in fast mode.
ctl fast on
for dio in off on; do
	l=$(losetup --find --show --direct-io=$dio "$mnt/disk") || {
		fail "losetup --direct-io=$dio"
		continue
	}
	loops+=("$l")
	dd if=/dev/urandom of="$work/blob" bs=64k count=16 status=none
	dd if="$work/blob" of="$l" bs=64k seek=100 oflag=direct conv=fsync status=none
	if dd if="$l" bs=64k skip=100 count=16 iflag=direct status=none | cmp -s - "$work/blob"; then
		pass "loop device, direct-io=$dio: data round trip"
	else
		fail "loop device, direct-io=$dio: data differs"
	fi
	losetup -d "$l" && loops=()
done

# The daemon stops cleanly on unmount.
umount "$mnt"
wait "$pid"
rc=$?
pid=
check_eq "slowdev exit status after umount" "$rc" 0
grep -v -e frobnicate -e "write_bw=2x" "$work/log" | grep . &&
	fail "unexpected messages in the log"

# (7) The library: ext2 on a loop device over slowdev, then all gone.
lmnt=$work/ext2
st=$(slowdev_dir "$libname")
if ! command -v mkfs.ext2 >/dev/null; then
	echo "skip library over ext2: no mkfs.ext2"
elif slowdev_up "$libname" 16 usbstick ext2 "$lmnt"; then
	check_eq "library: mounted fs" "$(findmnt -rn -o FSTYPE -M "$lmnt")" ext2
	check_eq "library: fast mode off after setup" "$(slowdev_stat "$libname" fast)" 0
	slowdev_ctl "$libname" reset
	dd if=/dev/urandom of="$work/blob" bs=64k count=16 status=none
	t0=$(date +%s%N)
	dd if="$work/blob" of="$lmnt/blob" bs=64k conv=fsync status=none
	t1=$(date +%s%N)
	wb=$(slowdev_stat "$libname" write_bytes)
	# usbstick writes 5 MB/s: at least the file's 1 MiB took its time.
	if [ "$wb" -ge 1048576 ] && [ $((t1 - t0)) -ge $((1048576 * 1000000000 / 5000000)) ]; then
		pass "library: 1 MiB to ext2 reached the medium: $wb bytes in $(((t1 - t0) / 1000000)) ms"
	else
		fail "library: write_bytes $wb after $(((t1 - t0) / 1000000)) ms"
	fi
	if dd if="$lmnt/blob" bs=64k iflag=direct status=none | cmp -s - "$work/blob"; then
		pass "library: read back through ext2 (O_DIRECT)"
	else
		fail "library: ext2 data differs"
	fi
	[ "$(slowdev_stat "$libname" reads)" -gt 0 ] || fail "library: no reads reached slowdev"
	loop=$(slowdev_loop "$libname")
	spid=$(cat "$st/slowdev.pid")
	slowdev_down "$libname" || fail "library: slowdev_down returned non-zero"
	slowdev__is_mounted "$lmnt" && fail "library: $lmnt still mounted"
	slowdev__is_mounted "$st/dev" && fail "library: slowdev still mounted"
	losetup -a | grep -q "slowmedia-$libname/" && fail "library: loop $loop still attached"
	kill -0 "$spid" 2>/dev/null && fail "library: slowdev $spid still running"
	[ -e "$st" ] && fail "library: $st left behind"
	[ -e "$lmnt" ] && fail "library: $lmnt (created by slowdev_up) left behind"
	slowdev_down "$libname" || fail "library: second slowdev_down failed"
	pass "library: slowdev_up/slowdev_down ext2"
else
	fail "library: slowdev_up failed"
fi

# vfat: without mkfs.vfat/mkfs.fat slowdev_up must say so and leave nothing.
if command -v mkfs.vfat >/dev/null || command -v mkfs.fat >/dev/null; then
	if slowdev_up "$libname" 16 usbstick vfat "$lmnt"; then
		check_eq "library: vfat mounted" "$(findmnt -rn -o FSTYPE -M "$lmnt")" fuse.fusefat
		echo hello >"$lmnt/hello.txt"
		check_eq "library: vfat file" "$(cat "$lmnt/hello.txt")" hello
		slowdev_down "$libname" || fail "library: slowdev_down vfat"
		[ -e "$st" ] && fail "library: $st left behind after vfat"
	else
		fail "library: slowdev_up vfat failed"
	fi
else
	msg=$(slowdev_up "$libname" 16 usbstick vfat "$lmnt" 2>&1) && fail "vfat without mkfs succeeded"
	if [[ $msg == *mkfs* ]] && [ ! -e "$st" ]; then
		pass "library: vfat without mkfs.vfat: clear message, nothing left"
	else
		fail "library: vfat without mkfs: '$msg'"
	fi
fi

if [ "$failures" -ne 0 ]; then
	echo "# $failures check(s) failed"
	exit 1
fi
echo "# all checks passed"
