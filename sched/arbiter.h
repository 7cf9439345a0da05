/*
 * The shared arbiter's scheduling policy: which mount of a group may write its
 * next chunk, and when. Pure logic: no sockets, threads or clock; every call
 * that can change a decision takes the time (monotonic ns). No locking: one
 * thread (the arbiter daemon's loop) makes all calls. See the DESIGN comment
 * in arbiter.c for the rules and the contract a client must follow.
 *
 * Errors: -ENOENT for an id (or group) not registered, -EINVAL for an argument
 * out of range or a call the mount's state does not allow, -EEXIST for an id
 * registered twice.
 */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "pacer.h"
#include "sched_opts.h"

/* A request that waited this long gets the next grant of its group,
 * whatever its prio (as mq-deadline's prio_aging_expire). */
#define PRIO_AGING_NS (10 * NSEC_PER_SEC)
/* The same for a request an fsync waits on. */
#define URGENT_AGING_NS NSEC_PER_SEC
/* The idle class flushes only once the group's be mounts and reads have been
 * quiet this long. */
#define IDLE_GRACE_NS (200 * NSEC_PER_MSEC)
/* ... and gets a chunk at least this often whatever the rest of the group does. */
#define IDLE_STARVE_NS (5 * NSEC_PER_SEC)
/* No grant in a group until this long after its last read (read_grace=). */
#define ARB_READ_GRACE_NS ((int64_t)SCHED_READ_GRACE_DEFAULT_MS * NSEC_PER_MSEC)

/* The mount last granted keeps its group this long while it asks again at
 * once (rule 6 in arbiter.c): a switch costs a seek. */
#define ARB_SLICE_NS (500 * NSEC_PER_MSEC)

struct arb_params {
	int64_t prio_aging_ns;
	int64_t urgent_aging_ns;
	int64_t idle_grace_ns;
	int64_t idle_starve_ns;
	int64_t read_grace_ns;
	int64_t slice_ns; /* 0: no slices, the fairest request every time */
};

/* Fills p with the defaults above. */
void arb_params_default(struct arb_params *p);

struct arb;

/* A new arbiter with no mounts; p NULL: the defaults. NULL if a parameter is
 * negative. */
struct arb *arb_new(const struct arb_params *p);
void arb_free(struct arb *a);

/*
 * Mount id (> 0, chosen by the caller, e.g. per connection) joins group (1 to
 * SCHED_GROUP_NAME_MAX characters; created on first use) with prio 0 (highest)
 * to SCHED_PRIO_MAX, class cls and weight 1 to SCHED_WEIGHT_MAX. 0, -EINVAL,
 * or -EEXIST if id is registered already.
 */
int arb_register(struct arb *a, int id, const char *group, unsigned prio,
		 enum sched_class cls, unsigned weight, int64_t now_ns);
/*
 * Id is gone (disconnected, dead, unmounted), whatever state it was in: its
 * grant is released, its request and its reads in flight are forgotten (its
 * reads count as ended now). A group is forgotten with its last mount. Later
 * calls for id get -ENOENT until it registers again, afresh.
 */
int arb_unregister(struct arb *a, int id, int64_t now_ns);
/* New prio, class and weight for id (ranges as for arb_register). A chunk in
 * flight is charged at the weight it was granted with. */
int arb_set(struct arb *a, int id, unsigned prio, enum sched_class cls, unsigned weight,
	    int64_t now_ns);
/* A paused mount keeps its request but gets no grant; its aging clock stops
 * while paused. A chunk in flight goes on. */
int arb_pause(struct arb *a, int id, bool paused, int64_t now_ns);

/*
 * Id wants to write one chunk of about bytes (> 0); urgent: somebody (an
 * fsync) waits on it. One request per mount: a second call before the grant
 * replaces bytes and urgent but keeps its place and its waiting time. A mount
 * may ask while its own chunk is in flight; the request waits for the group
 * as any other.
 */
int arb_request(struct arb *a, int id, uint64_t bytes, bool urgent, int64_t now_ns);
/* Id's granted chunk ended, bytes_written of it reached the medium (what it
 * is charged; a lease is charged at most the chunk it was asked for); the
 * group's grant is free. -EINVAL if id holds no grant. */
int arb_done(struct arb *a, int id, uint64_t bytes_written, int64_t now_ns);

/*
 * Leases. A grant to the only mount of its group is a lease: the mount may
 * write chunk after chunk (its own flushers= at most) without asking, until
 * the lease is revoked and it reports arb_done. A lease is revoked when
 * another mount registers in the group or the holder is paused. Returns the
 * id of a mount whose lease was revoked since the last call (each once), or
 * 0: the daemon tells it, and the group is granted again only after its done.
 */
int arb_next_revoke(struct arb *a);

/* A read (or a metadata op that goes to the medium) began on id: no new grant
 * in id's group until all its reads ended and read_grace passed. */
int arb_read_begin(struct arb *a, int id, int64_t now_ns);
/* Reads may hold id's requests back at most bound_ns after its group's last
 * grant ended (0: as long as they last; the default): a mount whose writers
 * wait for room sets it, as its own read gate bounds its hold. */
int arb_read_bound(struct arb *a, int id, int64_t bound_ns);
/* One of id's reads ended. -EINVAL if none was in flight. */
int arb_read_end(struct arb *a, int id, int64_t now_ns);

/*
 * The next grant: the id of a mount that may write its chunk now (the grant is
 * recorded: its group has that chunk in flight until arb_done or
 * arb_unregister), or 0 when nobody may. Call it until it returns 0; that
 * call sets *wake_ns (if not NULL) to the earliest time a grant may become due
 * without any other call (grace, idle and aging timers), INT64_MAX if none.
 * A call that grants sets *wake_ns to now_ns.
 */
int arb_next(struct arb *a, int64_t now_ns, int64_t *wake_ns);

struct arb_mount_info {
	const char *group; /* valid until id unregisters */
	unsigned prio;
	enum sched_class cls;
	unsigned weight;
	bool paused;
	bool requesting;	/* a request waits for a grant */
	bool urgent;		/* ... and an fsync waits on it */
	bool holds_grant;	/* its chunk is in flight */
	bool lease;		/* ... and the grant is a lease */
	unsigned reads;		/* its reads in flight */
	uint64_t grants;	/* grants so far */
	uint64_t granted_bytes; /* bytes its grants wrote (from arb_done) */
	int64_t wait_total_ns;	/* time its granted requests waited */
	int64_t waiting_ns;	/* how long the request in wait has waited; 0: none */
	int64_t read_bound_ns;	/* arb_read_bound's */
	bool moved;		/* its last grant: the head did something else
				 * since its chunk before (a chunk of another
				 * mount, a read in the group) */
};
/* Id's state and totals, waiting_ns as of now_ns. */
int arb_mount_info(const struct arb *a, int id, int64_t now_ns,
		   struct arb_mount_info *out);

struct arb_group_info {
	int holder;	 /* the mount whose chunk is in flight; 0: none */
	unsigned mounts; /* registered in the group */
	unsigned reads;	 /* reads in flight on its mounts */
};
/* Group's state; -ENOENT if no mount is registered in it. */
int arb_group_info(const struct arb *a, const char *group, struct arb_group_info *out);
