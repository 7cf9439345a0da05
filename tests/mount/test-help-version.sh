#!/usr/bin/env bash
# --help and --version (and -h, -V) print and exit 0 without mounting anything.
#   test-help-version.sh SLOWMEDIA
ML_DAEMON=$1
source "${MOUNT_LIB:-$(dirname "$0")/../lib/mount-lib.sh}"

[ -x "$ML_DAEMON" ] || { echo "no daemon '$ML_DAEMON'"; exit 1; }
ml_init

run() { # NAME ARGS...: output in $ML_TMP/NAME.out, status in $rc
	local name=$1
	shift
	rc=0
	timeout 10 "$ML_DAEMON" "$@" >"$ML_TMP/$name.out" 2>&1 </dev/null || rc=$?
}

# help_entry_has KEY TEXT: the "-o KEY=" entry of the help, with its
# continuation lines, contains TEXT.
help_entry_has() {
	awk -v key="-o $1=" -v text="$2" '
		/^    -o / { inside = index($0, key) == 5 }
		/^    [^ ]/ && !/^    -o / { inside = 0 }
		inside && index($0, text) { found = 1 }
		END { exit !found }' "$ML_TMP/help.out"
}

for flag in --help -h; do
	run help "$flag"
	ml_check "$flag exits 0 (got $rc)" test "$rc" = 0
	ml_check "$flag shows usage" grep -q "usage: slowmedia SOURCE MOUNTPOINT" "$ML_TMP/help.out"
	for opt in prio= class= weight= group= rate= queue= spool= spool_max= spool_sync= \
		drain_timeout= rescue= latency= read_grace= flushers= sync_close arbiter= fstype= \
		allow_other; do
		grep -q -- "$opt" "$ML_TMP/help.out" || ml_fail "$flag does not mention $opt"
	done
	ml_check "$flag says no error" ml_not grep -qi error "$ML_TMP/help.out"
	# Every option works now: none may say it does nothing.
	for opt in prio class weight group arbiter rate queue spool spool_max spool_sync \
		drain_timeout rescue latency read_grace flushers; do
		ml_check "$flag does not say $opt= lacks effect" \
			ml_not help_entry_has "$opt" "no effect yet"
	done
done
# With SOURCE and MOUNTPOINT given, --help still only prints.
mkdir "$ML_TMP/src" "$ML_TMP/mnt"
ml_on_exit "ml_is_mounted '$ML_TMP/mnt' && umount -l '$ML_TMP/mnt'"
run help2 "$ML_TMP/src" "$ML_TMP/mnt" --help
ml_check "--help with paths exits 0 (got $rc)" test "$rc" = 0
ml_check "--help with paths shows usage" grep -q "usage:" "$ML_TMP/help2.out"
ml_check "--help with paths mounts nothing" ml_not ml_is_mounted "$ML_TMP/mnt"

for flag in --version -V; do
	run version "$flag"
	ml_check "$flag exits 0 (got $rc)" test "$rc" = 0
	ml_check "$flag names slowmedia and a version" \
		grep -Eq "slowmedia.*[0-9]+\.[0-9]+\.[0-9]+" "$ML_TMP/version.out"
	ml_check "$flag names the FUSE library version" grep -qi "fuse" "$ML_TMP/version.out"
done
# Through a pipe stdout is fully buffered, and libfuse's fusermount3 child
# writes its version line straight to the pipe: ours must still come first.
"$ML_DAEMON" --version 2>&1 </dev/null | cat >"$ML_TMP/piped.out"
sed 's/^/  | /' "$ML_TMP/piped.out"
ml_check "--version | cat: slowmedia's line comes first" \
	grep -q "^slowmedia version" <(head -n 1 "$ML_TMP/piped.out")
ml_finish
