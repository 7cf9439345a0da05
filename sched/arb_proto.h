/*
 * The arbiter's wire protocol: the line codec of ctl_proto.h (a word, then
 * key=value fields with %XX escapes; lines of at most CTL_LINE_MAX bytes),
 * with these messages. Written down here, used by sched/arbiterd.c (the
 * daemon) and sched/arb_client.c (the mount's side).
 *
 * Socket: ARB_SOCKET_DEFAULT (arbiter=PATH overrides it). The arbiter greets
 *     slowmedia-arbiter version=1 pid=PID
 * A mount's connection (one per mount) then sends, in this order:
 *     register group=G prio=0..7 class=be|idle weight=1..10000 rate=BPS
 *              medium=DEV mountpoint=PATH (status shows its first 1024 bytes)
 *                  -> registered id=N prio=P peers=N
 *                     (prio may come back lowered: only root, and users the
 *                     config allows, may take a prio above the default)
 * and from then on, in any order:
 *     request bytes=N urgent=0|1 [hold_ms=N]
 *                                  ask for one chunk (one outstanding; a new
 *                                  one updates it); hold_ms: reads in the
 *                                  group may hold it back at most this long
 *                                  after the group's last grant ended (its
 *                                  writers wait for room; 0, the default: as
 *                                  long as they last; at most ARB_HOLD_MAX_MS)
 *                                  -> later: grant moved=0|1 [lease=1]
 *                                  (moved=1: another mount's chunk or a read
 *                                  used the head since this mount's last
 *                                  chunk; lease=1: the mount is alone in its
 *                                  group and may write chunk after chunk
 *                                  without asking, until `revoke`)
 *     done bytes=N                 the granted chunk ended (N written); after
 *                                  a lease: all its chunks ended, N their
 *                                  bytes (a client that ignores lease=1
 *                                  ends it with its first chunk's done)
 *     rate bps=N                   its rate= changed (status shows it)
 *     reads active=0|1             its reads began / all ended (edges only;
 *                                  sent only while peers > 0)
 *     ping                         -> pong
 * The arbiter also sends `revoke` when a lease must end (another mount
 * joined the group, or the holder was paused): the mount starts no more
 * chunks and sends its done once those in flight ended;
 * `peers n=N` whenever the number of other mounts in
 * the group changes, `rate bps=N` when a control client set the mount's
 * rate= (the mount applies it to its own token bucket), and `paused on=0|1`
 * when one paused or resumed it (no grants meanwhile; its status says so). A control connection (any other first message) may send
 *     status                       -> mount id=N group=G prio=P class=C
 *                                     weight=W paused=0|1 requesting=0|1
 *                                     holds_grant=0|1 lease=0|1 grants=N bytes=N
 *                                     waiting_ms=N rate=BPS uid=U
 *                                     mountpoint=PATH
 *                                     (one line per mount it may see) ... ok
 *     set id=N [prio=P] [class=C] [weight=W] [rate=BPS]  -> ok | error
 *     pause id=N | resume id=N                    -> ok | error
 * (a mount's own connection may send these too, for itself). Only root and
 * the uid that registered a mount may change it; a non-root user sees only
 * their own mounts. Any line that breaks the framing, an unknown word, a
 * field out of range or a message out of order (request before register,
 * done without a grant, a second register) closes that connection, logged
 * once; everybody else is served on. A silent connection costs an fd only.
 */
#pragma once
#include "ctl_proto.h"

#define ARB_VERSION 1
#define ARB_SOCKET_DEFAULT CTL_ROOT_DIR "/arbiter.sock"
#define ARB_CLIENTS_MAX 256
#define ARB_HOLD_MAX_MS 60000
/* A mount that hears nothing for this long after a ping goes on alone. */
#define ARB_PING_INTERVAL_MS 300
#define ARB_DEAD_MS 1000
/* How often a mount without an arbiter tries to reach one again. */
#define ARB_RETRY_MS 1000
