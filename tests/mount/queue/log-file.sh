#!/bin/bash
# Daemonized (no -f, as mount.fuse3 runs it) on a machine without a syslog,
# the daemon's reports go to a log file instead of vanishing: it says where on
# stderr before daemonizing, names the file again as the log's first line, and
# the lines of a write that fails for good (slowdev's `fail write`, as in
# eio.sh) are there, each with a timestamp, the ident and the daemon's pid.
# SLOWMEDIA_LOG_FILE keeps the test out of /var/log; the default file for root
# is checked under a private tmpfs on /var/log (our own mount namespace).
# usage: log-file.sh SLOWMEDIA QIO SLOWDEV SLOWMEDIACTL
SLOWMEDIA=$1 QIO=$2 SLOWDEV=${3:-} CTL=${4:-}
. "$(dirname "$0")/qlib.sh"
q_require_slowdev
[ -x "$CTL" ] || q_skip "needs slowmediactl"
q_init

SD=qt-logfile-$$ LOWER=$Q_TMP/lower MNT=$Q_TMP/mnt
LOGF=$Q_TMP/sm.log
STAMP='[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}[-+][0-9]{4}'
DPID=""

not_mounted() {
	! q_is_mounted "$1"
}

# The daemon's pid comes from its log (the parent we started has exited). A
# daemon that wrote no log is found by its command line, which holds our
# private temp dir: the pid is still one we started.
our_daemon_pid() {
	local f
	for f in /proc/[0-9]*/cmdline; do
		if tr '\0' ' ' <"$f" 2>/dev/null | grep -qF " $MNT "; then
			f=${f#/proc/}
			echo "${f%/cmdline}"
			return
		fi
	done
}
kill_daemon() {
	[ -n "$DPID" ] || DPID=$(our_daemon_pid)
	[ -n "$DPID" ] && kill -0 "$DPID" 2>/dev/null && kill -9 "$DPID"
}
q_on_exit kill_daemon

# start_daemonized LOGFILE STDERR [env...]: slowmedia without -f; waits for
# the mount and sets DPID from the log's first line.
start_daemonized() {
	local logf=$1 err=$2 i
	shift 2
	mkdir -p "$MNT"
	env "$@" "$SLOWMEDIA" "$LOWER" "$MNT" -o "queue=8M,drain_timeout=2,rescue=$Q_TMP/rescue" 2>"$err" </dev/null
	q_on_exit "q_is_mounted '$MNT' fuse.slowmedia && umount -l '$MNT'"
	for ((i = 0; i < 100; i++)); do
		q_is_mounted "$MNT" fuse.slowmedia && break
		sleep 0.05
	done
	DPID=$(sed -En '1s/.* slowmedia\[([0-9]+)\]: .*/\1/p' "$logf" 2>/dev/null)
	if ! q_is_mounted "$MNT" fuse.slowmedia || [ -z "$DPID" ]; then
		q_fail "the daemonized slowmedia did not mount with a log ($logf); stderr:"
		sed 's/^/  | /' "$err"
		return 1
	fi
}

# stop_daemon: unmount, then wait for the daemon to finish draining and exit.
stop_daemon() {
	local i
	# Busy while data is queued: then detach lazily, the daemon drains on.
	umount "$MNT" 2>/dev/null || umount -l "$MNT" || q_fail "umount failed"
	for ((i = 0; i < 300; i++)); do
		kill -0 "$DPID" 2>/dev/null || return 0
		sleep 0.1
	done
	q_fail "daemon $DPID still running 30 s after the unmount"
}

mkdir "$Q_TMP/src0" "$Q_TMP/mnt0"
rc=0
SLOWMEDIA_LOG_FILE=$Q_TMP/no/such/dir/x.log "$SLOWMEDIA" "$Q_TMP/src0" "$Q_TMP/mnt0" \
	>"$Q_TMP/err0" 2>&1 </dev/null || rc=$?
q_on_exit "q_is_mounted '$Q_TMP/mnt0' && umount -l '$Q_TMP/mnt0'"
sed 's/^/  | /' "$Q_TMP/err0"
q_check "a log file that cannot be opened: exit status non-zero ($rc)" [ "$rc" != 0 ]
q_check "  ... said on the terminal" grep -q "cannot open the log file $Q_TMP/no/such" "$Q_TMP/err0"
q_check "  ... and nothing is mounted" not_mounted "$Q_TMP/mnt0"

q_on_exit "slowdev_down $SD"
slowdev_up "$SD" 16 dvdram ext2 "$LOWER" || { echo "slowdev_up failed"; exit 1; }
slowdev_ctl "$SD" "fast on"

start_daemonized "$LOGF" "$Q_TMP/stderr" "SLOWMEDIA_LOG_FILE=$LOGF" || q_finish
echo "  stderr before daemonizing:"
sed 's/^/  | /' "$Q_TMP/stderr"
q_check "stderr names the log file, in one line" \
	grep -qx "slowmedia: logging to $LOGF" "$Q_TMP/stderr"
q_check "the log's first line names the file" \
	grep -Eq "^$STAMP slowmedia\[$DPID\]: logging to $LOGF\$" <(head -n 1 "$LOGF")

NAME=victim.dat
q_check "the victim file, allocated and synced" \
	"$QIO" create "$MNT/$NAME" write=ok 128K 19 fsync=ok close=ok
sync -f "$LOWER"
slowdev_ctl "$SD" "fail write 0 $((16 << 20))" || q_fail "slowdev refused the fault"
# Paused, so the close cannot race the flusher's failed chunk (which would
# make it return the file's EIO: seen once in CI, the medium failing in 1 ms).
"$CTL" pause "$MNT" >/dev/null || q_fail "pause"
q_check "the overwrite is queued" "$QIO" open "$MNT/$NAME" write=ok 64K 21 close=ok
"$CTL" resume "$MNT" >/dev/null || q_fail "resume"
for ((i = 0; i < 100; i++)); do
	grep -q "failed: " "$LOGF" && break
	sleep 0.1
done
# The fault stays: the drain at exit gives up and saves the bytes.
stop_daemon
echo "  the log:"
sed 's/^/  | /' "$LOGF"
q_check "the failed write is in the log, with stamp, ident and pid" \
	grep -Eq "^$STAMP slowmedia\[$DPID\]: write of $LOWER/$NAME failed: " "$LOGF"
q_check "the bytes not written are in the log, and where they went" grep -Eq \
	"^$STAMP slowmedia\[$DPID\]: $LOWER/$NAME: 65536 bytes are not on the medium .*saved in $Q_TMP/rescue/" \
	"$LOGF"

# Without the override, a root daemon with no syslog and no journal logs to
# /var/log/slowmedia.log (a private tmpfs here, in our own mount namespace).
if [ -e /dev/log ] || [ -e /run/systemd/journal/dev-log ] || [ -e /run/systemd/journal/socket ]; then
	q_log "a syslog or journal socket exists: the default log file is not checked"
else
	q_tmpfs /var/log
	slowdev_ctl "$SD" clear
	start_daemonized /var/log/slowmedia.log "$Q_TMP/stderr2" -u SLOWMEDIA_LOG_FILE || q_finish
	q_check "the default: stderr names /var/log/slowmedia.log" \
		grep -qx "slowmedia: logging to /var/log/slowmedia.log" "$Q_TMP/stderr2"
	q_check "the default: the log's first line names it" grep -Eq \
		"^$STAMP slowmedia\[$DPID\]: logging to /var/log/slowmedia.log\$" \
		<(head -n 1 /var/log/slowmedia.log)
	stop_daemon
fi
q_finish
