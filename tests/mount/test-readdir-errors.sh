#!/usr/bin/env bash
# readdirplus must not drop names silently. With the daemon's RLIMIT_NOFILE
# lowered to just above what it uses, all but the first few lookups that
# readdirplus makes fail with EMFILE; a listing of a 2,000-file directory
# through the mount (ls -f, ls -la, find) must then be complete, or the command
# must report an error (exit status or stderr), never be short with success.
# The daemon survives, and once the limit is restored the directories list
# fully.
#   test-readdir-errors.sh SLOWMEDIA MTOOL
ML_DAEMON=$1
MTOOL=$2
FILES=2000
FD_SPARE=4 # free fds under the limit: opendir and a few lookups fit
source "${MOUNT_LIB:-$(dirname "$0")/../lib/mount-lib.sh}"

command -v prlimit >/dev/null || ml_skip "needs prlimit"
ml_scratch 128M
fs=$ML_FS mnt=$ML_MNT
for d in a b c; do
	mkdir "$fs/lower/$d"
	"$MTOOL" mkfiles "$fs/lower/$d" $FILES >/dev/null || { echo "mkfiles failed"; exit 1; }
done
# -d: libfuse names each request, so the log shows READDIRPLUS was used.
ml_start "$fs/lower" "$mnt" -d
pid=$ML_PID log=${ML_LOGS[$mnt]}

readdirplus_count() {
	grep -c 'opcode: READDIRPLUS' "$log"
}

# names MODE: the names in a listing of MODE (ls-f, ls-l, find) on stdin.
names() {
	case $1 in
	ls-f) cat ;;
	ls-l) awk 'NR > 1 { print $NF }' ;; # after "total N"
	find) sed -e "s|^$mnt/[abc]||" -e 's|^/||' -e 's|^$|.|' ;;
	esac
}

# check_listing MODE DIR CMD...: CMD lists DIR through the mount; its names must
# be the lower's, unless the command failed visibly.
check_listing() {
	local mode=$1 dir=$2 rc=0 out err want got
	shift 2
	out=$("$@" 2>"$ML_TMP/stderr") || rc=$?
	err=$(head -n 1 "$ML_TMP/stderr")
	want=$(ls -f "$fs/lower/$dir" | sort)
	[ "$mode" = find ] && want=$(grep -vx '\.\.' <<<"$want") # find shows no ..
	got=$(names "$mode" <<<"$out" | sort -u)
	if [ "$got" = "$want" ]; then
		echo "ok - $dir: '$*' lists all $(wc -l <<<"$want") names (exit $rc)"
	elif [ "$rc" != 0 ] || [ -n "$err" ]; then
		echo "ok - $dir: '$*' listed $(wc -l <<<"$got") of $(wc -l <<<"$want")" \
			"names and reported it (exit $rc: $err)"
	else
		ml_fail "$dir: '$*' silently listed $(wc -l <<<"$got") of $(wc -l <<<"$want") names"
	fi
}

orig=$(prlimit --pid "$pid" --nofile --noheadings --raw --output SOFT,HARD | tr -s ' ' ':')
orig=${orig#:}
ml_on_exit "[ -n \"\${ML_PIDS[$mnt]:-}\" ] && prlimit --pid $pid --nofile=$orig"

# limited MODE DIR CMD...: check_listing with the daemon's soft RLIMIT_NOFILE
# leaving FD_SPARE free fd numbers (a new fd takes the lowest free one below
# the limit). Lookups keep their fds, so the limit is set anew each time; the
# hard limit stays, so the soft one can be raised again.
limited() {
	local limit plus=$(readdirplus_count)
	stat "$mnt/$2" >/dev/null # its inode (and O_PATH fd) exist before the limit
	limit=$(ls "/proc/$pid/fd" | sort -n | awk -v spare=$FD_SPARE '
		{ while (l - n < spare && l < $1) l++; if (l - n == spare) exit; n++; l = $1 + 1 }
		END { while (l - n < spare) l++; print l }')
	ml_log "daemon: $(ls "/proc/$pid/fd" | wc -l) fds, soft RLIMIT_NOFILE ${orig%:*} -> $limit"
	prlimit --pid "$pid" --nofile="$limit:${orig#*:}" || { echo "prlimit failed"; exit 1; }
	check_listing "$@"
	prlimit --pid "$pid" --nofile="$orig" || ml_fail "cannot restore the limit"
	ml_check "daemon alive after '${*:3}'" kill -0 "$pid"
	ml_check "'${*:3}' used READDIRPLUS" test "$(readdirplus_count)" -gt "$plus"
}

limited ls-f a ls -f "$mnt/a"
# ls -l stats each batch before reading the next, so later batches are
# READDIRPLUS too, each starting where lookups fail.
limited ls-l b ls -la "$mnt/b"
limited find c find "$mnt/c"

for d in a b c; do
	ml_check "$d: ls -f complete after the limit" \
		diff <(ls -f "$mnt/$d" | sort) <(ls -f "$fs/lower/$d" | sort)
	ml_check "$d: find -type f sees $FILES files" \
		test "$(find "$mnt/$d" -type f | wc -l)" = $FILES
	ml_check "$d: stat of every file" \
		test "$(find "$mnt/$d" -type f -print0 | xargs -0 stat -c %s | wc -l)" = $FILES
done
ml_check "content of a/*" "$MTOOL" checkfiles "$mnt/a" $FILES

# ml_stop, but libfuse's -d lines for error replies (ENOENT, ENODATA) are
# expected: only other "error" output counts.
stop_daemon() {
	local rc=0 errs
	if ! umount "$mnt"; then
		ml_fail "umount $mnt failed"
		umount -l "$mnt"
	fi
	if ! ml_wait_exit "$pid" "$ML_EXIT_TIMEOUT_S"; then
		ml_fail "daemon $pid still running $ML_EXIT_TIMEOUT_S s after unmount"
		kill -9 "$pid"
	fi
	wait "$pid" || rc=$?
	unset "ML_PIDS[$mnt]"
	[ "$rc" = 0 ] || ml_fail "daemon exited with status $rc"
	errs=$(grep -i error "$log" | grep -Ev '^ *unique: [0-9]+, error: -[0-9]+ ')
	if [ -n "$errs" ]; then
		ml_fail "daemon printed errors:"
		head -n 20 <<<"$errs" | sed 's/^/  | /'
	fi
}
stop_daemon
ml_finish
