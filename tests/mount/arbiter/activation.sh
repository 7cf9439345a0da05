#!/bin/bash
# The arbiter as systemd starts it, and its config. systemd-socket-activate
# (systemd's tool for testing socket activation) listens on the harness's
# arbiter socket and starts slowmedia-arbiterd on the first connection with
# the socket as fd 3 (LISTEN_FDS, LISTEN_PID), as slowmedia-arbiterd.socket
# does: nothing runs before a mount connects; then a mount with
# arbiter=auto registers with it (and starts no arbiter of its own), and it
# serves status. The arbiter gets --config with [prio] allow_users=nobody:
# user nobody may then register at a prio above the default (abuse.sh checks
# the refusal without a config), and a user it does not list may not.
# usage: activation.sh SLOWMEDIA ARBITERD SLOWDEV
SLOWMEDIA=$1 ARBITERD=$2 SLOWDEV=${3:-}
. "$(dirname "$0")/alib.sh"
a_setup systemd-socket-activate setpriv
SOCK=$SLOWMEDIA_ARBITER_SOCKET

# comm PID: the process's name (empty once it is gone).
comm() { cat "/proc/$1/comm" 2>/dev/null; }

printf '[prio]\nallow_users=nobody\n' >"$ML_TMP/arbiter.conf"
systemd-socket-activate -l "$SOCK" "$ARBITERD" -f --config "$ML_TMP/arbiter.conf" \
	>"$ML_TMP/activate.log" 2>&1 &
act=$!
ml_on_exit "kill $act 2>/dev/null; wait $act 2>/dev/null"
for _ in $(seq 50); do [ -S "$SOCK" ] && break; sleep 0.1; done
ml_check "systemd-socket-activate listens on $SOCK" [ -S "$SOCK" ]
ml_check "no arbiter runs before the first connection ($(comm $act))" \
	[ "$(comm $act)" = systemd-socket- ] # (comm keeps 15 characters)
# As the unit's SocketMode=0666: anyone may connect (the arbiter checks uids).
chmod 0666 "$SOCK"
chmod 0755 "$ML_TMP"

a_start "$LA" "$MA" "prio=2,queue=$A_QUEUE"
ml_check_here "the mount registered with the activated arbiter" a_wait_field "$MA" arbiter connected 5
ml_check "the activated process is the arbiter now ($(comm $act))" \
	[ "$(comm $act)" = slowmedia-arbit ]
ml_check "the arbiter's fd 3 is the listening socket" \
	bash -c "readlink /proc/$act/fd/3 | grep -q '^socket:'"
others=$(pgrep -x slowmedia-arbit | grep -vx "$act" | while read -r p; do
	tr '\0' ' ' <"/proc/$p/cmdline" | grep -qF -- "$SOCK" && echo "$p"; done)
ml_check "the mount started no arbiter of its own (${others:-none})" [ -z "$others" ]
st=$(a_arb status)
ml_check "the arbiter lists the mount, at prio 2 (root may)" \
	grep -q "^mount id=[0-9]* .* prio=2 .*mountpoint=${MA//\//\\/}\$" <<<"$st"

# The config: nobody is allowed a prio above 4, another user is not.
cp "$A_TOOL" "$ML_TMP/arbtool.py"
chmod 0644 "$ML_TMP/arbtool.py"
as_user() {
	local u=$1
	shift
	setpriv --reuid="$u" --regid=nogroup --clear-groups "$A_PY" "$ML_TMP/arbtool.py" "$@"
}
out=$(as_user nobody session "$SOCK" 1 \
	"register group=nobody-$$ prio=1 class=be weight=100 rate=0 medium=0:0 mountpoint=/n" \
	"set id={id} prio=0" "status")
ml_log "nobody's session: $(tr '\n' ';' <<<"$out")"
ml_check "nobody (allow_users) registers at prio 1" grep -q '^registered id=[0-9]* prio=1 ' <<<"$out"
ml_check "nobody (allow_users) may raise its mount to prio 0" \
	[ "$(grep -c '^ok' <<<"$out")" -ge 2 ]
ml_check "nobody sees its mount at prio 0" grep -q '^mount .* prio=0 .*mountpoint=/n$' <<<"$out"
if id daemon >/dev/null 2>&1; then
	out=$(as_user daemon session "$SOCK" 1 \
		"register group=daemon-$$ prio=1 class=be weight=100 rate=0 medium=0:0 mountpoint=/d")
	ml_check "user daemon (not listed) is registered at prio 4" \
		grep -q '^registered id=[0-9]* prio=4 ' <<<"$out"
fi
ml_check "the arbiter still runs ($(comm $act))" [ "$(comm $act)" = slowmedia-arbit ]
ml_stop "$MA"
ml_finish
