#!/usr/bin/env bash
# Writes, truncates and chowns kill privileges as on a native filesystem:
# a write or truncate by a user without CAP_FSETID clears setuid, and setgid
# when the group may execute; every write or truncate removes the file's
# capabilities (security.capability); chown clears setuid. The daemon writes
# the medium as root and its queue lands the data later, so the kernel's
# FUSE_HANDLE_KILLPRIV_V2 leaves this to the daemon: the medium must show it
# as soon as the call returns, not only after a flush. Each case is run on a
# native directory and through an allow_other mount of the same ext4, and the
# mode and capabilities of the file must be the same there and on the medium.
#   test-killpriv.sh SLOWMEDIA
ML_DAEMON=$1
NOBODY=65534
source "${MOUNT_LIB:-$(dirname "$0")/../lib/mount-lib.sh}"

ml_native_pair setpriv setcap getcap
touch "$native/probe"
setcap cap_net_raw+ep "$native/probe" 2>/dev/null || ml_skip "no security.capability on the ext4"
rm "$native/probe"
ml_start "$lower" "$mnt" -o allow_other

# show FILE: its mode and its capabilities (none: "-").
show() {
	local caps
	caps=$(getcap "$1" 2>/dev/null | awk '{print $2}')
	echo "$(stat -c %A "$1") ${caps:--}"
}
# as UID SCRIPT: SCRIPT run in the current directory as UID (0: root itself).
as() {
	if [ "$1" = 0 ]; then
		sh -c "$2"
	else
		setpriv --reuid="$1" --regid="$1" --clear-groups -- sh -c "$2"
	fi
}
n=0
# kills DESC SETUP UID OP EXPECT: in the native directory and through the
# mount, root runs SETUP on a new file f<N> (as "$f"), then UID runs OP on it.
# The native result must be EXPECT (so that parity cannot pass on two wrong
# answers) and the mount and the medium must show the same, the medium right
# after OP returns.
kills() {
	local desc=$1 setup=$2 uid=$3 op=$4 expect=$5 d r=() f
	n=$((n + 1))
	f=f$n
	for d in "$native" "$mnt"; do
		(cd "$d" && f=$f && export f && as 0 "$setup" && as "$uid" "$op") ||
			ml_fail "$desc: the commands failed in $d"
		r+=("$(show "$d/$f")")
		[ "$d" = "$mnt" ] && r+=("$(show "$lower/$f")")
	done
	if [ "${r[0]}" = "$expect" ] && [ "${r[1]}" = "$expect" ] && [ "${r[2]}" = "$expect" ]; then
		echo "ok - $desc ($expect)"
	else
		ml_fail "$desc: expected $expect; native ${r[0]}, mount ${r[1]}, medium ${r[2]}"
	fi
}

kills "nobody's write clears setuid and setgid (group exec)" \
	'echo x >$f; chmod 6777 $f' $NOBODY 'echo y >>$f' "-rwxrwxrwx -"
kills "nobody's write clears setgid without group exec (not in the group)" \
	'echo x >$f; chmod 6766 $f' $NOBODY 'echo y >>$f' "-rwxrw-rw- -"
kills "nobody's write keeps setgid without group exec when in the group" \
	"echo x >\$f; chgrp $NOBODY \$f; chmod 6766 \$f" $NOBODY 'echo y >>$f' "-rwxrwSrw- -"
kills "root's write keeps setuid and setgid" \
	'echo x >$f; chmod 6777 $f' 0 'echo y >>$f' "-rwsrwsrwx -"
kills "nobody's truncate clears setuid and setgid" \
	'echo x >$f; chmod 6777 $f' $NOBODY 'truncate -s 1 $f' "-rwxrwxrwx -"
kills "root's truncate keeps them" \
	'echo x >$f; chmod 6777 $f' 0 'truncate -s 1 $f' "-rwsrwsrwx -"
kills "nobody's open(O_TRUNC) clears them" \
	'echo x >$f; chmod 6777 $f' $NOBODY ': >$f' "-rwxrwxrwx -"
kills "nobody's write to a file of its own clears them" \
	"echo x >\$f; chown $NOBODY:$NOBODY \$f; chmod 6755 \$f" $NOBODY 'echo y >>$f' "-rwxr-xr-x -"
kills "nobody's fallocate clears them" \
	'echo x >$f; chmod 6777 $f' $NOBODY 'fallocate -l 8192 $f' "-rwxrwxrwx -"
kills "root's fallocate keeps them" \
	'echo x >$f; chmod 6777 $f' 0 'fallocate -l 8192 $f' "-rwsrwsrwx -"
kills "root's chown clears setuid and setgid (group exec)" \
	'echo x >$f; chmod 6755 $f' 0 "chown $NOBODY \$f" "-rwxr-xr-x -"
kills "root's write removes the capabilities" \
	'echo x >$f; chmod 755 $f; setcap cap_net_raw+ep $f' 0 'echo y >>$f' "-rwxr-xr-x -"
kills "nobody's write removes them too" \
	'echo x >$f; chmod 777 $f; setcap cap_net_raw+ep $f' $NOBODY 'echo y >>$f' "-rwxrwxrwx -"
kills "root's truncate removes them" \
	'echo x >$f; chmod 755 $f; setcap cap_net_raw+ep $f' 0 'truncate -s 0 $f' "-rwxr-xr-x -"
kills "root's chown removes them" \
	'echo x >$f; chmod 755 $f; setcap cap_net_raw+ep $f' 0 "chown $NOBODY \$f" "-rwxr-xr-x -"
kills "capabilities set again after a write are seen by the next write" \
	'echo x >$f; chmod 755 $f; echo y >>$f; setcap cap_net_raw+ep $f' 0 'echo z >>$f' \
	"-rwxr-xr-x -"
kills "capabilities not touched by a write stay" \
	'echo x >$f; chmod 755 $f; setcap cap_net_raw+ep $f' 0 'cat $f >/dev/null' \
	"-rwxr-xr-x cap_net_raw=ep"

# And once the queue has landed everything on the medium.
ml_stop "$mnt"
for i in $(seq 1 $n); do
	ml_check "f$i on the medium after the unmount as natively" \
		test "$(show "$lower/f$i")" = "$(show "$native/f$i")"
done

# setcap while the file's data is still queued: the data lands on the medium
# later, and the medium's own write would then remove what setcap set (seen
# once in CI). Natively the write comes first, so the capabilities stay.
# rate=64K keeps 256 KiB queued for about 4 s.
ml_start "$lower" "$mnt" -o rate=64K
for d in "$native" "$mnt"; do
	head -c 256K /dev/urandom >"$d/late" &&
		setcap cap_net_raw+ep "$d/late" || ml_fail "write then setcap in $d"
done
sync "$mnt/late" # its data on the medium
ml_check "capabilities set while the file's data was queued stay, through the mount" \
	test "$(show "$mnt/late")" = "$(show "$native/late")"
ml_check "... and on the medium once the data has landed" \
	test "$(show "$lower/late")" = "$(show "$native/late")"
ml_log "native: $(show "$native/late"); mount: $(show "$mnt/late"); medium: $(show "$lower/late")"
ml_stop "$mnt"
ml_finish
