# Shared by run-overhead.sh and dbench-ops.sh (sourced, after the caller
# sets prog, examples and MOUNT_WAIT_TENTHS): the checks for what they need,
# passthrough_ll built from the libfuse3-dev examples, daemons started and
# waited for, and the clean-up of everything they create.
# shellcheck shell=bash disable=SC2154,SC2034 # prog, examples: the caller's; pid_of: for it

skip() {
	echo "$prog: skipped: $*" >&2
	exit 77
}

# What both need to compare a daemon with passthrough_ll (exit 77 without).
require_fuse_bench() {
	[ "$(id -u)" = 0 ] || skip "needs root (loop devices, mounts, drop_caches)"
	[ -c /dev/fuse ] || skip "no /dev/fuse"
	command -v cc >/dev/null || skip "needs cc"
	pkg-config --exists fuse3 || skip "needs fuse3.pc (libfuse3-dev)"
	ls "$examples"/passthrough_ll.c* >/dev/null 2>&1 || skip "no $examples/passthrough_ll.c"
}

# dbench's client.txt, or nothing.
dbench_loadfile() {
	local f
	f=$(dpkg -L dbench 2>/dev/null | grep '/client\.txt$' | head -1) || true
	[ -n "$f" ] || f=/usr/share/dbench/client.txt
	[ -r "$f" ] && echo "$f"
	return 0
}

# --- clean-up state: everything created is recorded here and undone on exit
tmp=
loopdev=
lower_mounts=() # ext4/tmpfs mountpoints
fuse_mounts=()	# FUSE mountpoints
daemon_pids=()
declare -A pid_of # daemon name -> pid
tool_pid=	# the benchmark tool running now, leader of its own process group

cleanup() {
	local m p
	set +e
	# dbench and fio fork their clients and jobs: end the whole group.
	[ -n "$tool_pid" ] && kill -TERM -- "-$tool_pid" 2>/dev/null
	for m in "${fuse_mounts[@]}"; do
		mountpoint -q "$m" && umount -l "$m"
	done
	for p in "${daemon_pids[@]}"; do
		kill "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	done
	for m in "${lower_mounts[@]}"; do
		mountpoint -q "$m" && umount -l "$m"
	done
	[ -n "$loopdev" ] && losetup -d "$loopdev"
	[ -n "$tmp" ] && rm -rf "$tmp"
}

# make_tmp NAME: the run's temporary directory, removed (with all the rest)
# on every exit.
make_tmp() {
	trap cleanup EXIT
	trap 'exit 130' INT TERM
	tmp=$(mktemp -d "${TMPDIR:-/var/tmp}/slowmedia-$1.XXXXXX")
}

# mount_lower ext4|tmpfs DIR MIB: a fresh filesystem of MIB at DIR; ext4 is
# an image in $tmp on a direct-I/O loop device ($loopdev).
mount_lower() {
	local fs=$1 dir=$2 mib=$3
	mkdir -p "$dir"
	lower_mounts+=("$dir")
	case $fs in
	ext4)
		truncate -s "${mib}M" "$tmp/ext4.img"
		# No lazy init: a background inode-table writer would skew the first runs.
		mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$tmp/ext4.img"
		loopdev=$(losetup --find --show --direct-io=on "$tmp/ext4.img")
		mount "$loopdev" "$dir"
		;;
	tmpfs)
		mount -t tmpfs -o "size=${mib}M" tmpfs "$dir"
		;;
	esac
}

# run_tool OUT CMD...: CMD's standard output to OUT, its exit status returned. CMD
# runs in a process group of its own (job control on for its start), so
# that cleanup can end it with everything it forked (dbench's clients,
# fio's jobs), wherever the script is stopped.
run_tool() {
	local out=$1 rc=0
	shift
	set -m
	"$@" >"$out" &
	tool_pid=$!
	set +m
	wait "$tool_pid" || rc=$?
	tool_pid=
	return "$rc"
}

build_passthrough_ll() {
	local f
	for f in passthrough_ll.c passthrough_helpers.h; do
		if [ -e "$examples/$f" ]; then
			cp "$examples/$f" "$tmp/$f"
		elif [ -e "$examples/$f.gz" ]; then
			gunzip -c "$examples/$f.gz" >"$tmp/$f"
		fi
	done
	# shellcheck disable=SC2046 # pkg-config output is meant to split
	cc -O2 -o "$tmp/passthrough_ll" "$tmp/passthrough_ll.c" \
		$(pkg-config --cflags --libs fuse3) ||
		skip "cannot build passthrough_ll from $examples"
}

# Waits until MOUNTPOINT is a FUSE mount; fails if the daemon PID dies first.
wait_mount() {
	local mnt=$1 pid=$2 i
	for ((i = 0; i < MOUNT_WAIT_TENTHS; i++)); do
		if findmnt -n -o FSTYPE --mountpoint "$mnt" 2>/dev/null | grep -q '^fuse'; then
			return 0
		fi
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	echo "$prog: daemon $pid did not mount $mnt" >&2
	return 1
}

# start_daemon NAME MOUNTPOINT CMD...: runs CMD in the background, waits for it.
start_daemon() {
	local name=$1 mnt=$2 pid
	shift 2
	mkdir -p "$mnt"
	"$@" >"$tmp/$name.log" 2>&1 &
	pid=$!
	daemon_pids+=("$pid")
	fuse_mounts+=("$mnt")
	wait_mount "$mnt" "$pid" || { cat "$tmp/$name.log" >&2; exit 1; }
	pid_of[$name]=$pid
}
