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

for flag in --help -h; do
	run help "$flag"
	ml_check "$flag exits 0 (got $rc)" test "$rc" = 0
	ml_check "$flag shows usage" grep -q "usage: slowmedia SOURCE MOUNTPOINT" "$ML_TMP/help.out"
	for opt in prio= class= weight= group= rate= queue= spool= spool_max= latency= \
		read_grace= flushers= sync_close arbiter= fstype= allow_other; do
		grep -q -- "$opt" "$ML_TMP/help.out" || ml_fail "$flag does not mention $opt"
	done
	ml_check "$flag says no error" ml_not grep -qi error "$ML_TMP/help.out"
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
ml_finish
