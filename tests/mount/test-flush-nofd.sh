#!/usr/bin/env bash
# close() through the mount when the daemon has no fd to spare: the flush's
# check of the lower close (a dup of the lower fd) cannot run, and the
# caller's close must not fail for that (it used to close(-1) and answer
# EBADF). The daemon's soft RLIMIT_NOFILE is lowered to its lowest free fd
# number, so no new fd can be had, then put back.
#   test-flush-nofd.sh SLOWMEDIA
ML_DAEMON=$1
source "${MOUNT_LIB:-$(dirname "$0")/../lib/mount-lib.sh}"

ml_require_root_fuse
command -v prlimit >/dev/null || ml_skip "needs prlimit"
command -v python3 >/dev/null || ml_skip "needs python3"
ml_init
# tmpfs: its inodes keep their fds (no handles), so no fd is freed meanwhile.
ML_FS=$ML_TMP/fs ML_MNT=$ML_TMP/mnt
ml_tmpfs "$ML_FS"
mkdir -m 755 "$ML_FS/lower" "$ML_MNT"
ml_start "$ML_FS/lower" "$ML_MNT"
pid=$ML_PID
soft=$(prlimit --pid "$pid" --nofile --noheadings --output SOFT)
hard=$(prlimit --pid "$pid" --nofile --noheadings --output HARD)
ml_on_exit "prlimit --pid $pid --nofile=$soft:$hard"

lowest_free_fd() {
	local n=0
	while [ -e "/proc/$pid/fd/$n" ]; do
		n=$((n + 1))
	done
	echo "$n"
}

out=$(python3 - "$ML_MNT/f" "$pid" "$hard" <<'PY'
import os, subprocess, sys
path, pid, hard = sys.argv[1], sys.argv[2], sys.argv[3]
fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
os.write(fd, b"data")
n = 0
while os.path.exists("/proc/%s/fd/%d" % (pid, n)):
    n += 1
subprocess.run(["prlimit", "--pid", pid, "--nofile=%d:%s" % (n, hard)], check=True)
try:
    os.close(fd)
    print("close ok")
except OSError as e:
    print("close failed:", e.strerror)
PY
)
prlimit --pid "$pid" --nofile="$soft:$hard"
echo "  $out"
ml_check "close succeeds when the daemon has no fd to spare" [ "$out" = "close ok" ]
ml_check "the daemon still serves" test -f "$ML_MNT/f"
ml_check "the data reached the lower file" test "$(cat "$ML_FS/lower/f")" = data
ml_stop "$ML_MNT"
ml_finish
