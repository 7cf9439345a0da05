#!/usr/bin/env bash
# fd leak: the daemon's open fds must not grow over 10,000 create/unlink cycles
# (with renames, links, symlinks, mkdir/rmdir and files unlinked while open).
# libfuse's per-thread splice pipes are counted apart: at most a pair per thread.
#   test-fd-leak.sh SLOWMEDIA MTOOL
ML_DAEMON=$1
MTOOL=$2
CYCLES=10000
FD_SLACK=5 # a handful of fds may come and go (worker threads, a cached dir)
source "${MOUNT_LIB:-$(dirname "$0")/../lib/mount-lib.sh}"

ml_scratch 256M
fs=$ML_FS mnt=$ML_MNT
ml_start "$fs/lower" "$mnt"

# Warm up (first requests start worker threads), then take the baseline.
mkdir "$mnt/work"
"$MTOOL" churn "$mnt/work" 20
before=$(ml_daemon_fds "$mnt")
ml_log "daemon fds before: $before"

ml_check "$CYCLES create/unlink cycles through the mount" "$MTOOL" churn "$mnt/work" $CYCLES

# Forgets reach the daemon asynchronously: give them a moment.
for ((i = 0; i < 50; i++)); do
	after=$(ml_daemon_fds "$mnt")
	((after <= before + FD_SLACK)) && break
	sleep 0.1
done
ml_log "daemon fds after: $after"
ml_check "daemon fds did not grow ($before -> $after)" test "$after" -le $((before + FD_SLACK))
ml_check "work dir is empty again" test -z "$(ls -A "$mnt/work")"

# Open directories and files are given back too.
for ((i = 0; i < 200; i++)); do
	ls "$mnt/work" >/dev/null
	: >"$mnt/work/x$i"
done
rm -f "$mnt"/work/x*
sleep 0.5
after=$(ml_daemon_fds "$mnt")
ml_check "daemon fds after readdirs: $after" test "$after" -le $((before + FD_SLACK))
pipes=$(ml_daemon_pipes "$mnt")
threads=$(ml_daemon_threads "$mnt")
ml_check "splice pipes ($pipes) bounded by worker threads ($threads)" \
	test "$pipes" -le $((2 * threads + 2))

ml_stop "$mnt"
ml_finish
