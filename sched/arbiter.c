/*
 * DESIGN: the shared arbiter's policy. Mounts on one bus or head form a group;
 * before each chunk a mount's flusher asks for a grant, and a group has one
 * chunk in flight at a time, so a read on any of its media waits behind at
 * most one chunk (latency=). Groups are independent. This file decides who
 * gets the next grant; the daemon around it (sockets, libev timers) calls it
 * from its one loop thread, so there is no locking, and passes the time in.
 *
 * Invariants:
 * - a group has at most one holder (g->holder), and m->granted iff
 *   m->g->holder == m; the grant lasts until arb_done or arb_unregister;
 * - a grant goes only to a registered, unpaused mount with a request, in a
 *   group with no grant, no read in flight and read_grace passed since its
 *   last read, or whose read bound passed (rule 1);
 * - a mount has at most one request; asking again updates it in place;
 * - every unpaused request is granted at the latest when it has waited its
 *   aging bound (below), plus the chunk then in flight, plus one chunk per
 *   other mount of the group whose deadline came earlier, plus the time reads
 *   hold the group.
 *
 * Rules, in the order arb_next applies them within a free group:
 * 1. Reads first. Reads in flight on any mount of the group hold it; grants
 *    resume read_grace after the last one ended (as the mount's own read
 *    gate, sched/pacer.c). Aging does not override this; only a mount's read
 *    bound does (arb_read_bound: its writers wait for room, as the mount's
 *    own gate bounds its hold, policy_gate_hold): once a request has waited
 *    that long since the group's last grant ended, while reads hold it, the
 *    mounts whose bound passed compete for one grant by rules 2-4 as if no
 *    read were there (the idle class only when overdue), and the next hold
 *    counts from the end of that grant. Continuous reads then cost
 *    such a writer a chunk per bound, not everything.
 * 2. Aging (mq-deadline's prio_aging_expire, 10 s there too). A request's
 *    deadline is when it began waiting + PRIO_AGING_NS, or + URGENT_AGING_NS
 *    when urgent; for an idle-class request also the starvation deadline of
 *    rule 5 if that is earlier. Once a deadline passed, the request with the
 *    earliest deadline is served, whatever its prio or class: the most
 *    overdue first, which for requests of one kind is the oldest first.
 *    Paused time does not count as waiting.
 * 3. Strict priority between prio levels (0 first) among be requests; an
 *    idle-class mount's urgent request counts as be, at its prio.
 * 4. Within one prio, weighted fair sharing by bytes, as BFQ's B-WF2Q+
 *    charges service in sectors rather than time: a request's virtual start
 *    S = max(V, the mount's last finish) and finish F = S + bytes / weight;
 *    the smallest F is served and V becomes its S (the start-time rule of
 *    SFQ). A mount back from idle starts at V: no credit for its idle time.
 *    A chunk is charged what arb_done says it wrote. Each (class, prio) level
 *    of a group has its own V; a mount's last finish counts only in the level
 *    it was granted in (arb_set forgets it).
 * 5. The idle class (BFQ's, and CFQ's idle delay before it) is served only
 *    when no be mount of the group wants to flush (a request or a chunk in
 *    flight; paused mounts do not count) and neither be demand nor reads
 *    were seen in the group for IDLE_GRACE_NS: a be writer's gap between two
 *    chunks is not an invitation. The thin guarantee: BFQ serves the idle
 *    class when it was not served for BFQ_CL_IDLE_TIMEOUT (200 ms); here an
 *    idle request is due IDLE_STARVE_NS after it began waiting or after the
 *    group's last idle grant, whichever is later: one idle chunk per group at
 *    least every IDLE_STARVE_NS, shared among idle mounts by age (rule 2).
 *    Among idle requests, rules 3 and 4 again.
 * 6. Slices (BFQ's budgets, CFQ's time slices before it). Each switch from
 *    one mount to another costs the head a seek (tens of ms on optical and
 *    ZIP media, as much as a whole chunk), so the mount last granted keeps
 *    the group for a slice of consecutive grants while it asks again at
 *    once. Slices divide slice_ns among the mounts of the level that want
 *    to flush, by weight (as BFQ scales budgets by weight): two equal mounts
 *    take turns of slice_ns / 2, weights 300:100 of 3/4 and 1/4 of it, so a
 *    round of turns gives each mount its share and the head moves about
 *    twice per slice_ns, whatever the number of mounts. In its slice, a
 *    request of its own level goes after it unless it is urgent or overdue
 *    (rule 2); a request of a better level (rule 3) ends the slice at once;
 *    reads hold the group back as between any two grants. Shares still hold
 *    by bytes: the slice's chunks are charged as usual and do not move the
 *    level's virtual time (they went out of the fair order), so a mount
 *    that had a long slice waits its turn the longer. A read waits for one
 *    chunk as before, never for a slice.
 * Ties go to the older request, then the lower id.
 *
 * Leases. A grant to a mount alone in its group is a lease: the mount writes
 * chunk after chunk under it without a request and a done each, which would
 * cost it two round trips through this daemon per chunk and buy nothing, as
 * nobody else may be served. The lease ends when another mount registers in
 * the group, or the holder is paused: arb_next_revoke names the holder once,
 * the daemon sends it `revoke`, and its done (once its chunks in flight
 * ended) frees the group as any grant's. Meanwhile the group stays held, so
 * the newcomer's first chunk waits for the lease's last, as it would for any
 * chunk in flight. A lease is charged at most the chunk it was asked for:
 * the service given while alone took no other mount's share (the newcomer
 * starts at the level's virtual time anyway).
 *
 * Moved head: each grant says whether anything else used the group's head
 * since the mount's previous chunk (another mount's chunk, or a read of any
 * of its mounts): the client then prices its chunk as one that seeks
 * (pacer.c), so a neighbour's work is not taken for a slow medium.
 *
 * The client's contract (the order of a flusher's steps per chunk): wait for
 * its own rate= tokens (pacer_delay_ns) and its own read gate first, then
 * arb_request, and write the chunk at once when granted, then arb_done
 * (pacer_done). So a grant is never held while its mount waits for tokens:
 * a rate-capped mount would otherwise idle the whole group. The arbiter does
 * not know chunk durations and never takes a grant back: the daemon must
 * arb_unregister a client whose connection died.
 *
 * Errors come back as -errno before any state changes; see arbiter.h.
 */
#include "arbiter.h"

#include <errno.h>
#include <glib.h>
#include <string.h>

#define NEVER INT64_MIN
#define LEVELS (2 * (SCHED_PRIO_MAX + 1))
/* Virtual time per byte at weight 1: the finest weight (SCHED_WEIGHT_MAX)
 * still moves it by 6 per byte. */
#define VT_PER_BYTE (1u << 16)
#define NO_LEVEL (-1)

/* 128 bits: at weight 1 a fast disk would wrap 64 bits within days. */
typedef unsigned __int128 vtime_t;

struct arb_group {
	char *name;
	GPtrArray *mounts;	  /* struct arb_mount *, in order of registration */
	struct arb_mount *holder; /* whose chunk is in flight; NULL: none */
	unsigned reads;		  /* reads in flight on its mounts */
	int64_t read_end_ns;	  /* when reads last dropped to none; NEVER */
	int64_t be_quiet_ns;	  /* when be demand last stopped; NEVER */
	int64_t idle_grant_ns;	  /* the last grant to the idle class; NEVER */
	int64_t free_ns;	  /* when its last grant ended; NEVER */
	struct arb_mount *slice;  /* the mount whose slice runs (rule 6); NULL */
	int64_t slice_end_ns;
	uint64_t uses;		  /* grants and reads so far: the head's moves */
	vtime_t vtime[LEVELS];	  /* per (class, prio): S of its last grant */
};

struct arb_mount {
	int id;
	struct arb_group *g;
	unsigned prio;
	enum sched_class cls;
	unsigned weight;
	bool paused;
	int64_t paused_ns; /* since when */
	unsigned reads;
	int64_t read_bound_ns; /* rule 1's bound; 0: none */
	uint64_t seen_uses;    /* g->uses after its last grant */
	bool moved;	       /* the last grant found the head moved */

	bool requesting; /* the request */
	bool urgent;
	uint64_t bytes;
	int64_t asked_ns; /* when it was made */
	int64_t age_ns;	  /* its wait began, paused time left out */
	vtime_t start, finish;

	bool granted; /* the grant, as it was given */
	bool lease;   /* ... to a mount alone in its group (only while granted) */
	bool revoked; /* the lease must end (arb_next_revoke tells) */
	bool revoke_told;
	uint64_t grant_bytes; /* the chunk asked for */
	int64_t granted_ns;
	int64_t chunk_ns; /* how long its last chunk took (grant to done) */
	bool grant_be;
	int grant_level;
	unsigned grant_weight;
	vtime_t grant_start;

	int last_level; /* the level last_finish belongs to; NO_LEVEL */
	vtime_t last_finish;

	uint64_t grants, granted_bytes;
	int64_t wait_total_ns;
};

struct arb {
	struct arb_params p;
	GHashTable *mounts; /* id -> struct arb_mount *, owns them */
	GHashTable *groups; /* name -> struct arb_group *, owns them */
};

void arb_params_default(struct arb_params *p)
{
	*p = (struct arb_params){.prio_aging_ns = PRIO_AGING_NS,
				 .urgent_aging_ns = URGENT_AGING_NS,
				 .idle_grace_ns = IDLE_GRACE_NS,
				 .idle_starve_ns = IDLE_STARVE_NS,
				 .read_grace_ns = ARB_READ_GRACE_NS,
				 .slice_ns = ARB_SLICE_NS};
}

static void group_free(gpointer data)
{
	struct arb_group *g = data;

	g_ptr_array_free(g->mounts, TRUE);
	g_free(g->name);
	g_free(g);
}

struct arb *arb_new(const struct arb_params *p)
{
	struct arb *a;

	if (p && (p->prio_aging_ns < 0 || p->urgent_aging_ns < 0 ||
		  p->idle_grace_ns < 0 || p->idle_starve_ns < 0 || p->read_grace_ns < 0 ||
		  p->slice_ns < 0))
		return NULL;
	a = g_new0(struct arb, 1);
	if (p)
		a->p = *p;
	else
		arb_params_default(&a->p);
	a->mounts = g_hash_table_new_full(g_direct_hash, g_direct_equal, NULL, g_free);
	a->groups = g_hash_table_new_full(g_str_hash, g_str_equal, NULL, group_free);
	return a;
}

void arb_free(struct arb *a)
{
	if (!a)
		return;
	g_hash_table_destroy(a->mounts);
	g_hash_table_destroy(a->groups);
	g_free(a);
}

/* since + span, NEVER staying NEVER and no overflow. */
static int64_t after(int64_t since, int64_t span)
{
	if (since == NEVER)
		return NEVER;
	return since > INT64_MAX - span ? INT64_MAX : since + span;
}

static struct arb_mount *find(const struct arb *a, int id)
{
	return id > 0 ? g_hash_table_lookup(a->mounts, GINT_TO_POINTER(id)) : NULL;
}

static bool args_ok(unsigned prio, enum sched_class cls, unsigned weight)
{
	return prio <= SCHED_PRIO_MAX &&
	       (cls == SCHED_CLASS_BE || cls == SCHED_CLASS_IDLE) && weight >= 1 &&
	       weight <= SCHED_WEIGHT_MAX;
}

/* The class the request is served in: an urgent idle one counts as be. */
static enum sched_class req_class(const struct arb_mount *m)
{
	return m->requesting && m->urgent ? SCHED_CLASS_BE : m->cls;
}

static int req_level(const struct arb_mount *m)
{
	return (int)req_class(m) * (SCHED_PRIO_MAX + 1) + (int)m->prio;
}

/* Be demand: a be request the mount may be granted, or a be chunk in flight. */
static bool wants_be(const struct arb_mount *m)
{
	return (m->requesting && !m->paused && req_class(m) == SCHED_CLASS_BE) ||
	       (m->granted && m->grant_be);
}

/* After a change to m: if it ended the mount's be demand, the idle grace starts. */
static void note_be(struct arb_mount *m, bool wanted_be, int64_t now_ns)
{
	if (wanted_be && !wants_be(m))
		m->g->be_quiet_ns = now_ns;
}

static vtime_t cost(uint64_t bytes, unsigned weight)
{
	return (vtime_t)bytes * VT_PER_BYTE / weight;
}

/* Virtual start and finish of m's request; keep_start: the request keeps its
 * place in its level and only its size or weight changed. */
static void tag(struct arb_mount *m, bool keep_start)
{
	int lv = req_level(m);

	if (!keep_start) {
		vtime_t v = m->g->vtime[lv];

		m->start = m->last_level == lv && m->last_finish > v ? m->last_finish : v;
	}
	m->finish = m->start + cost(m->bytes, m->weight);
}

static int64_t deadline(const struct arb *a, const struct arb_mount *m)
{
	int64_t aging = m->urgent ? a->p.urgent_aging_ns : a->p.prio_aging_ns;
	int64_t d = after(m->age_ns, aging);

	if (req_class(m) == SCHED_CLASS_IDLE)
		d = MIN(d,
			after(MAX(m->age_ns, m->g->idle_grant_ns), a->p.idle_starve_ns));
	return d;
}

static bool older(const struct arb_mount *x, const struct arb_mount *y)
{
	return x->asked_ns != y->asked_ns ? x->asked_ns < y->asked_ns : x->id < y->id;
}

/* Rules 3 and 4: strict prio, then the smallest virtual finish. */
static bool fairer(const struct arb_mount *x, const struct arb_mount *y)
{
	if (x->prio != y->prio)
		return x->prio < y->prio;
	if (x->finish != y->finish)
		return x->finish < y->finish;
	return older(x, y);
}

/* The candidates of a free group, sorted out in one pass. */
struct pick {
	bool any;	       /* an unpaused request */
	struct arb_mount *due; /* overdue, the earliest deadline */
	int64_t due_at;
	struct arb_mount *be;	/* the best be request */
	struct arb_mount *idle; /* the best idle request */
	int64_t next_due;	/* the earliest deadline still to come */
};

/* Rule 1's bound: whether reads may no longer hold m's request back; if not
 * yet, *wake lowered to when they may not. */
static bool bound_passed(const struct arb_group *g, const struct arb_mount *m, int64_t now_ns,
			 int64_t *wake)
{
	int64_t at;

	if (!m->read_bound_ns)
		return false;
	at = after(MAX(g->free_ns, m->asked_ns), m->read_bound_ns);
	if (now_ns >= at)
		return true;
	*wake = MIN(*wake, at);
	return false;
}

/* held: reads hold the group; only requests past their read bound count. */
static void scan(const struct arb *a, const struct arb_group *g, int64_t now_ns, bool held,
		 int64_t *wake, struct pick *pk)
{
	*pk = (struct pick){.next_due = INT64_MAX};
	for (guint i = 0; i < g->mounts->len; i++) {
		struct arb_mount *m = g_ptr_array_index(g->mounts, i);
		struct arb_mount **best;
		int64_t d;

		if (!m->requesting || m->paused)
			continue;
		pk->any = true;
		if (held && !bound_passed(g, m, now_ns, wake))
			continue;
		d = deadline(a, m);
		if (d <= now_ns) {
			if (!pk->due || d < pk->due_at ||
			    (d == pk->due_at && older(m, pk->due))) {
				pk->due = m;
				pk->due_at = d;
			}
		} else {
			pk->next_due = MIN(pk->next_due, d);
		}
		best = req_class(m) == SCHED_CLASS_BE ? &pk->be : &pk->idle;
		if (!*best || fairer(m, *best))
			*best = m;
	}
}

/* Rule 6: whether g's slice owner goes before best. */
static bool slice_goes_first(const struct arb_group *g, const struct arb_mount *best,
			     const struct pick *pk, bool held, int64_t now_ns)
{
	const struct arb_mount *s = g->slice;
	int64_t ignored = INT64_MAX;

	/* A chunk that would end past the slice by more than half goes to the
	 * next turn: slices end near their length, not a chunk late. */
	if (!s || s == best || after(now_ns, s->chunk_ns / 2) > g->slice_end_ns ||
	    !s->requesting || s->paused)
		return false;
	if (held && !bound_passed(g, s, now_ns, &ignored))
		return false;
	return best != pk->due && !best->urgent && req_level(s) == req_level(best);
}

/* Who in g gets the grant now, or NULL; *wake lowered to when that may change. */
static struct arb_mount *choose(const struct arb *a, const struct arb_group *g,
				int64_t now_ns, int64_t *wake, bool *in_slice)
{
	struct pick pk;
	struct arb_mount *best = NULL;
	int64_t grace_end, idle_at;
	bool held;

	if (g->holder)
		return NULL; /* only a call ends this */
	grace_end = after(g->read_end_ns, a->p.read_grace_ns);
	held = g->reads || now_ns < grace_end;
	scan(a, g, now_ns, held, wake, &pk);
	if (held && pk.any && !g->reads)
		*wake = MIN(*wake, grace_end);
	if (pk.due)
		best = pk.due;
	else if (pk.be)
		best = pk.be;
	else if (pk.idle && !held) {
		idle_at = MAX(after(g->be_quiet_ns, a->p.idle_grace_ns),
			      after(g->read_end_ns, a->p.idle_grace_ns));
		if (now_ns >= idle_at)
			best = pk.idle;
		else
			*wake = MIN(*wake, MIN(idle_at, pk.next_due));
	} else if (pk.idle) {
		*wake = MIN(*wake, pk.next_due);
	}
	*in_slice = best && slice_goes_first(g, best, &pk, held, now_ns);
	return *in_slice ? g->slice : best;
}

/* Rule 6: m's share of slice_ns among the mounts of its level that want to
 * flush (m, just granted, included). */
static int64_t slice_of(const struct arb_mount *m, int64_t slice_ns)
{
	const struct arb_group *g = m->g;
	int lv = m->grant_level;
	uint64_t sum = 0;

	for (guint i = 0; i < g->mounts->len; i++) {
		const struct arb_mount *o = g_ptr_array_index(g->mounts, i);
		if (o == m || (o->requesting && !o->paused && req_level(o) == lv) ||
		    (o->granted && o->grant_level == lv))
			sum += o->weight;
	}
	return (int64_t)((unsigned __int128)slice_ns * m->weight / sum);
}

static void grant(struct arb_mount *m, int64_t slice_ns, bool in_slice, int64_t now_ns)
{
	struct arb_group *g = m->g;
	int lv = req_level(m);

	m->granted = true;
	m->lease = g->mounts->len == 1;
	m->revoked = m->revoke_told = false;
	m->grant_bytes = m->bytes;
	m->granted_ns = now_ns;
	m->grant_be = req_class(m) == SCHED_CLASS_BE;
	m->grant_level = lv;
	m->grant_weight = m->weight;
	m->grant_start = m->start;
	/* A grant out of the fair order (its slice) does not move the level's
	 * virtual time: the mounts it went before keep their place. */
	if (!in_slice && g->vtime[lv] < m->start)
		g->vtime[lv] = m->start;
	m->last_level = lv;
	m->last_finish = m->finish; /* corrected by arb_done */
	if (!m->grant_be)
		g->idle_grant_ns = now_ns;
	m->grants++;
	m->wait_total_ns += MAX(now_ns - m->asked_ns, 0);
	m->requesting = false;
	m->urgent = false;
	m->moved = m->seen_uses != g->uses;
	m->seen_uses = ++g->uses;
	g->holder = m;
	if (g->slice != m || now_ns >= g->slice_end_ns) {
		g->slice = m;
		g->slice_end_ns = after(now_ns, slice_of(m, slice_ns));
	}
}

int arb_next(struct arb *a, int64_t now_ns, int64_t *wake_ns)
{
	GHashTableIter it;
	gpointer value;
	int64_t wake = INT64_MAX;

	g_hash_table_iter_init(&it, a->groups);
	while (g_hash_table_iter_next(&it, NULL, &value)) {
		bool in_slice = false;
		struct arb_mount *m = choose(a, value, now_ns, &wake, &in_slice);

		if (m) {
			grant(m, a->p.slice_ns, in_slice, now_ns);
			if (wake_ns)
				*wake_ns = now_ns;
			return m->id;
		}
	}
	if (wake_ns)
		*wake_ns = wake;
	return 0;
}

static struct arb_group *group_get(struct arb *a, const char *name)
{
	struct arb_group *g = g_hash_table_lookup(a->groups, name);

	if (g)
		return g;
	g = g_new0(struct arb_group, 1);
	g->name = g_strdup(name);
	g->mounts = g_ptr_array_new();
	g->read_end_ns = g->be_quiet_ns = g->idle_grant_ns = g->free_ns = NEVER;
	g_hash_table_insert(a->groups, g->name, g);
	return g;
}

int arb_register(struct arb *a, int id, const char *group, unsigned prio,
		 enum sched_class cls, unsigned weight, int64_t now_ns)
{
	struct arb_mount *m;
	size_t len = group ? strlen(group) : 0;

	if (id <= 0 || len == 0 || len > SCHED_GROUP_NAME_MAX ||
	    !args_ok(prio, cls, weight))
		return -EINVAL;
	if (find(a, id))
		return -EEXIST;
	m = g_new0(struct arb_mount, 1);
	*m = (struct arb_mount){
	    .id = id, .prio = prio, .cls = cls, .weight = weight, .last_level = NO_LEVEL,
	    .seen_uses = UINT64_MAX}; /* its first grant: the head is elsewhere */
	m->g = group_get(a, group);
	if (m->g->holder && m->g->holder->lease)
		m->g->holder->revoked = true; /* not alone any more */
	g_ptr_array_add(m->g->mounts, m);
	g_hash_table_insert(a->mounts, GINT_TO_POINTER(id), m);
	return 0;
}

int arb_unregister(struct arb *a, int id, int64_t now_ns)
{
	struct arb_mount *m = find(a, id);
	struct arb_group *g;

	if (!m)
		return -ENOENT;
	g = m->g;
	if (wants_be(m))
		g->be_quiet_ns = now_ns;
	if (m->granted) {
		g->holder = NULL;
		g->free_ns = now_ns;
	}
	if (g->slice == m)
		g->slice = NULL;
	if (m->reads) {
		g->reads -= m->reads;
		if (!g->reads)
			g->read_end_ns = now_ns;
	}
	g_ptr_array_remove(g->mounts, m);
	if (!g->mounts->len)
		g_hash_table_remove(a->groups, g->name);
	g_hash_table_remove(a->mounts, GINT_TO_POINTER(id));
	return 0;
}

int arb_set(struct arb *a, int id, unsigned prio, enum sched_class cls, unsigned weight,
	    int64_t now_ns)
{
	struct arb_mount *m = find(a, id);
	bool wanted_be, moved;

	if (!m)
		return -ENOENT;
	if (!args_ok(prio, cls, weight))
		return -EINVAL;
	wanted_be = wants_be(m);
	moved = prio != m->prio || cls != m->cls;
	m->prio = prio;
	m->cls = cls;
	m->weight = weight;
	if (moved)
		m->last_level = NO_LEVEL;
	if (m->requesting)
		tag(m, !moved);
	note_be(m, wanted_be, now_ns);
	return 0;
}

int arb_pause(struct arb *a, int id, bool paused, int64_t now_ns)
{
	struct arb_mount *m = find(a, id);
	bool wanted_be;

	if (!m)
		return -ENOENT;
	if (paused == m->paused)
		return 0;
	wanted_be = wants_be(m);
	if (paused) {
		m->paused_ns = now_ns;
		if (m->lease)
			m->revoked = true; /* its chunk in flight goes on, no more */
	} else if (m->requesting) {
		m->age_ns += MAX(now_ns - MAX(m->age_ns, m->paused_ns), 0);
	}
	m->paused = paused;
	note_be(m, wanted_be, now_ns);
	return 0;
}

int arb_request(struct arb *a, int id, uint64_t bytes, bool urgent, int64_t now_ns)
{
	struct arb_mount *m = find(a, id);
	bool wanted_be;
	int level;

	if (!m)
		return -ENOENT;
	if (!bytes)
		return -EINVAL;
	wanted_be = wants_be(m);
	if (!m->requesting) {
		m->requesting = true;
		m->asked_ns = m->age_ns = now_ns;
		m->bytes = bytes;
		m->urgent = urgent;
		tag(m, false);
	} else {
		level = req_level(m);
		m->bytes = bytes;
		m->urgent = urgent;
		tag(m, req_level(m) == level);
	}
	note_be(m, wanted_be, now_ns);
	return 0;
}

int arb_done(struct arb *a, int id, uint64_t bytes_written, int64_t now_ns)
{
	struct arb_mount *m = find(a, id);
	uint64_t charged;
	bool wanted_be;

	if (!m)
		return -ENOENT;
	if (!m->granted)
		return -EINVAL;
	wanted_be = wants_be(m);
	/* A lease is charged at most the chunk it asked for. */
	charged = m->lease ? MIN(bytes_written, m->grant_bytes) : bytes_written;
	if (m->last_level == m->grant_level)
		m->last_finish = m->grant_start + cost(charged, m->grant_weight);
	m->granted = false;
	m->lease = m->revoked = m->revoke_told = false;
	m->chunk_ns = MAX(now_ns - m->granted_ns, 0);
	m->g->holder = NULL;
	m->g->free_ns = now_ns;
	m->granted_bytes += bytes_written;
	if (m->requesting)
		tag(m, false); /* it asked during its chunk: from the corrected finish */
	note_be(m, wanted_be, now_ns);
	return 0;
}

int arb_next_revoke(struct arb *a)
{
	GHashTableIter it;
	gpointer value;

	g_hash_table_iter_init(&it, a->mounts);
	while (g_hash_table_iter_next(&it, NULL, &value)) {
		struct arb_mount *m = value;

		/* Set only on a lease in flight, cleared by its done. */
		if (m->revoked && !m->revoke_told) {
			m->revoke_told = true;
			return m->id;
		}
	}
	return 0;
}

int arb_read_begin(struct arb *a, int id, int64_t now_ns)
{
	struct arb_mount *m = find(a, id);

	if (!m)
		return -ENOENT;
	m->reads++;
	m->g->reads++;
	m->g->uses++;
	return 0;
}

int arb_read_bound(struct arb *a, int id, int64_t bound_ns)
{
	struct arb_mount *m = find(a, id);

	if (!m)
		return -ENOENT;
	if (bound_ns < 0)
		return -EINVAL;
	m->read_bound_ns = bound_ns;
	return 0;
}

int arb_read_end(struct arb *a, int id, int64_t now_ns)
{
	struct arb_mount *m = find(a, id);

	if (!m)
		return -ENOENT;
	if (!m->reads)
		return -EINVAL;
	m->reads--;
	if (!--m->g->reads)
		m->g->read_end_ns = now_ns;
	return 0;
}

int arb_mount_info(const struct arb *a, int id, int64_t now_ns,
		   struct arb_mount_info *out)
{
	const struct arb_mount *m = find(a, id);

	if (!m)
		return -ENOENT;
	*out = (struct arb_mount_info){
	    .group = m->g->name,
	    .prio = m->prio,
	    .cls = m->cls,
	    .weight = m->weight,
	    .paused = m->paused,
	    .requesting = m->requesting,
	    .urgent = m->requesting && m->urgent,
	    .holds_grant = m->granted,
	    .lease = m->lease,
	    .reads = m->reads,
	    .grants = m->grants,
	    .granted_bytes = m->granted_bytes,
	    .wait_total_ns = m->wait_total_ns,
	    .waiting_ns = m->requesting ? MAX(now_ns - m->asked_ns, 0) : 0,
	    .read_bound_ns = m->read_bound_ns,
	    .moved = m->moved,
	};
	return 0;
}

int arb_group_info(const struct arb *a, const char *group, struct arb_group_info *out)
{
	const struct arb_group *g = group ? g_hash_table_lookup(a->groups, group) : NULL;

	if (!g)
		return -ENOENT;
	*out = (struct arb_group_info){.holder = g->holder ? g->holder->id : 0,
				       .mounts = g->mounts->len,
				       .reads = g->reads};
	return 0;
}
