#!/usr/bin/env bash
# POSIX ACLs through an allow_other mount: the same tree, with the same ACL
# entries, is built on a native directory and through the mount, on the same
# ext4. Then unprivileged users (plain ids through setpriv) do the same things
# in both, and the results (output and error message) must be the same: access
# granted or denied by ACL user entries, group entries and the mask, exec,
# directories, symlinks, and the ACLs and modes of what is created in a
# directory with a default ACL, under the caller's umask (which the native
# filesystem ignores under a default ACL: the daemon must apply it itself).
#   test-acl.sh SLOWMEDIA
ML_DAEMON=$1
USER_A=1234
NOBODY=65534
GROUP_G=4321
source "${MOUNT_LIB:-$(dirname "$0")/../lib/mount-lib.sh}"

ml_native_pair setpriv setfacl getfacl
setfacl -m u:$NOBODY:r "$native" 2>/dev/null || ml_skip "the lower ext4 has no ACLs"
setfacl -b "$native"

# The tree, built as root in DIR with setfacl (through the mount: setxattr).
populate() {
	cd "$1" || exit 1
	echo data >f-user-deny
	chmod 644 f-user-deny
	setfacl -m u:$NOBODY:--- f-user-deny
	echo data >f-user-allow
	chmod 600 f-user-allow
	setfacl -m u:$NOBODY:rw f-user-allow
	echo data >f-group
	chmod 600 f-group
	setfacl -m g:$GROUP_G:r f-group
	echo data >f-mask
	chmod 600 f-mask
	setfacl -m u:$NOBODY:rw,m::r f-mask
	printf '#!/bin/sh\necho ran\n' >x-user
	chmod 700 x-user
	setfacl -m u:$NOBODY:rx x-user
	mkdir d-deny
	echo inside >d-deny/file
	setfacl -m u:$NOBODY:--- d-deny
	mkdir -m 700 d-default
	setfacl -m u:$NOBODY:rwx,u:$USER_A:rx d-default
	setfacl -d -m u::rwx,u:$NOBODY:rwx,g::rx,g:$GROUP_G:rwx,m::rwx,o::rx d-default
	echo data >f-sgid
	chown $NOBODY:$GROUP_G f-sgid
	chmod 2775 f-sgid
	ln -s f-user-deny l-deny
	ln -s d-deny l-dir
	cd - >/dev/null
}
populate "$native"
ml_start "$lower" "$mnt" -o allow_other
populate "$mnt"

# run_as DIR UID GROUPS SCRIPT: SCRIPT's output and status, run in DIR as UID.
run_as() {
	local dir=$1 uid=$2 groups=--clear-groups
	[ "$3" = - ] || groups=--groups=$3
	(cd "$dir" && setpriv --reuid=$uid --regid=$uid $groups -- sh -c "$4" 2>&1
		echo "status $?")
}
# same DESC UID GROUPS SCRIPT: the mount answers as the native directory does.
same() {
	local n m
	n=$(run_as "$native" "$2" "$3" "$4")
	m=$(run_as "$mnt" "$2" "$3" "$4")
	if [ "$n" = "$m" ]; then
		echo "ok - $1"
		return
	fi
	ml_fail "$1"
	diff <(echo "$n") <(echo "$m") | sed 's/^/  | /'
}
# native_says DESC UID GROUPS SCRIPT MSG: the native answer holds MSG, so the
# parity checks do not pass on two equally wrong answers.
native_says() {
	ml_check "native: $1" grep -q "$5" <<<"$(run_as "$native" "$2" "$3" "$4")"
}

acl_of() { # FILE...: getfacl without the "# file:" line (the paths differ)
	getfacl -p "$@" 2>&1 | grep -v '^# file:'
}
ml_check "the ACLs set through the mount are the native ones" \
	test "$(cd "$native" && acl_of *)" = "$(cd "$mnt" && acl_of *)"
ml_check "... and they are on the medium" \
	test "$(cd "$native" && acl_of *)" = "$(cd "$lower" && acl_of *)"
same "getfacl -d of a directory with a default ACL" 0 - "getfacl -d d-default"

native_says "an ACL user entry denies nobody" $NOBODY - "cat f-user-deny" "Permission denied"
same "user entry ---: nobody cannot read (mode says r)" $NOBODY - "cat f-user-deny"
same "user entry ---: user A can" $USER_A - "cat f-user-deny"
native_says "an ACL user entry lets nobody in" $NOBODY - "cat f-user-allow" "^data"
same "user entry rw: nobody reads (mode says ---)" $NOBODY - "cat f-user-allow"
same "user entry rw: nobody writes" $NOBODY - "echo more >>f-user-allow; cat f-user-allow"
same "user entry rw: user A cannot read" $USER_A - "cat f-user-allow"
same "group entry r: nobody in group $GROUP_G reads" $NOBODY $GROUP_G "cat f-group"
same "group entry r: ... but cannot write" $NOBODY $GROUP_G "echo x >>f-group"
same "group entry r: nobody without the group cannot read" $NOBODY - "cat f-group"
native_says "the mask limits a user entry" $NOBODY - "echo x >>f-mask" "Permission denied"
same "mask r: nobody's rw entry cannot write" $NOBODY - "echo x >>f-mask"
same "mask r: ... but reads" $NOBODY - "cat f-mask"
same "user entry rx: nobody runs the script" $NOBODY - "./x-user"
same "user entry rx: user A cannot" $USER_A - "./x-user"
same "dir user entry ---: nobody cannot list" $NOBODY - "ls d-deny"
same "dir user entry ---: nobody cannot reach a file in it" $NOBODY - "cat d-deny/file"
same "dir user entry ---: user A can" $USER_A - "ls d-deny; cat d-deny/file"
same "through a symlink: denied to nobody" $NOBODY - "cat l-deny"
same "through a symlink to the dir: denied to nobody" $NOBODY - "ls l-dir/"
same "getfacl follows a symlink" 0 - "getfacl -p l-deny l-dir"
same "nobody cannot change a root file's ACL" $NOBODY - "setfacl -m u:$NOBODY:rw f-user-deny"
native_says "an owner outside the group sets an ACL: setgid cleared" $NOBODY - \
	"setfacl -m u:$USER_A:r f-sgid; stat -c %A f-sgid" "^-rwxrwxr-x"
same "an owner outside the file's group sets an ACL: setgid cleared" $NOBODY - \
	"setfacl -m u:$USER_A:r f-sgid; stat -c %A f-sgid; getfacl -p f-sgid"
same "dir user entry rx: user A lists d-default, cannot create" $USER_A - \
	"ls d-default; touch d-default/a"

# Created in a directory with a default ACL: inherited ACL, mode, owner.
made_in_default() { # UMASK SUFFIX: create, then show what was made
	echo "umask $1; echo f >d-default/f$2; mkdir d-default/d$2; mkfifo d-default/p$2
		ln -s f$2 d-default/l$2
		getfacl -p d-default/f$2 d-default/d$2 d-default/p$2 | grep -v '^# file:'
		stat -c '%n %A %u:%g' d-default/f$2 d-default/d$2 d-default/p$2 d-default/l$2"
}
same "created under a default ACL with umask 000" $NOBODY - "$(made_in_default 000 -000)"
same "... then nobody narrows the ACL of its file" $NOBODY - \
	"setfacl -m u:$USER_A:r,g:$GROUP_G:- d-default/f-000; getfacl -p d-default/f-000 | grep -v '^# file:'"
same "... user A reads it through its own entry" $USER_A - "cat d-default/f-000"
same "... group $GROUP_G no longer writes it" $NOBODY $GROUP_G "echo x >>d-default/f-000"
same "... root's chmod moves the mask" 0 - \
	"chmod 640 d-default/f-000; getfacl -p d-default/f-000 | grep -v '^# file:'"
same "... which nobody's entry obeys" $NOBODY - "echo x >>d-default/f-000"

# With umask 022 the native ext4 ignores the umask under the default ACL
# (mask::rwx): the kernel must leave the umask to the daemon (DONT_MASK), which
# applies it per create, so the lower does the same.
n=$(run_as "$native" $NOBODY - "$(made_in_default 022 -022)")
ml_check "native: umask 022 ignored under a default ACL" grep -q '^mask::rwx' <<<"$n"
same "created under a default ACL with umask 022" $NOBODY - "$(made_in_default 022 -022b)"
same "created outside any default ACL with umask 027" $NOBODY - \
	"umask 027; echo f >f-um027; mkdir d-um027; stat -c '%n %A' f-um027 d-um027"
ml_stop "$mnt"
ml_finish
