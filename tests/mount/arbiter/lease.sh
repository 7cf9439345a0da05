#!/bin/bash
# Leases on real mounts: a mount alone in its group writes under a lease
# (status arbiter_lease=1, the arbiter's status lease=1), chunk after chunk
# without a request each. A second mount of the group ends it: within
# REVOKE_S the first mount's lease is gone, both media are written in a
# window of WINDOW_S (the newcomer is not starved by the lease, nor the
# holder after it), and no mount holds a lease while both are there. When
# the second one leaves, the first is alone again and takes a lease again.
# usage: lease.sh SLOWMEDIA ARBITERD SLOWDEV
SLOWMEDIA=$1 ARBITERD=$2 SLOWDEV=${3:-}
. "$(dirname "$0")/alib.sh"
a_setup

LEASE_S=5 REVOKE_S=3 WINDOW_S=3 WRITE_MB=16

a_start "$LA" "$MA" "queue=$A_QUEUE"
a_writer "$MA" f "$WRITE_MB"
ml_check_here "A alone takes a lease" a_wait_field "$MA" arbiter_lease 1 "$LEASE_S"
ida=$(a_field "$MA" arbiter_id)
st=$(a_arb status)
ml_check "the arbiter shows A's grant as a lease" \
	grep -q "^mount id=$ida .*holds_grant=1 lease=1 " <<<"$st"

a_start "$LB" "$MB" "queue=$A_QUEUE"
a_writer "$MB" g "$WRITE_MB"
ml_check_here "B's arrival ends A's lease" a_wait_field "$MA" arbiter_lease 0 "$REVOKE_S"
ml_log "A's lease ended $A_WAITED s after B was up"
a_window "$WINDOW_S"
ml_log "window of $WINDOW_S s: A wrote $A_DA, B wrote $A_DB bytes"
ml_check "both media are written while both mounts flush (A $A_DA, B $A_DB bytes)" \
	[ "$A_DA" -gt 0 -a "$A_DB" -gt 0 ]
st=$(a_arb status)
ml_check "no lease while the group has two mounts" \
	[ -z "$(grep "^mount .* lease=1 " <<<"$st")" -a "$(a_field "$MB" arbiter_lease)" = 0 ]

a_kill_writers
a_fast
ml_stop "$MB"
slowdev_ctl "$A_SD" "fast off"
a_writer "$MA" h "$WRITE_MB"
ml_check_here "alone again, A takes a lease again" a_wait_field "$MA" arbiter_lease 1 "$LEASE_S"
a_end "$MA"
