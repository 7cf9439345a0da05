/*
 * DESIGN: a bound on every FUSE request, watched.
 *
 * Every op handler runs between reqtrack_begin and reqtrack_end (the wrappers
 * in ops.c). Each worker thread owns one slot, made at its first request and
 * given back when the thread exits (libfuse ends idle workers), then reused
 * by the next new thread. Begin and end are a few relaxed stores to the
 * thread's own slot under a sequence count: no lock and no shared cache line
 * on the hot path. Readers (status and the scan, on the control thread) walk
 * the slot list, which only grows (under lock, once per new thread, pushed at
 * its head), and read each slot again when its sequence moved meanwhile.
 *
 * The bound (req_bound=, REQ_BOUND_S_DEFAULT seconds): a request should be
 * answered within it, whatever the medium does. Left out are the waits the
 * caller asked for, which last as long as the medium needs for the data
 * (fsync, fdatasync, a sync write, close with sync_close, fallocate): their
 * handlers mark the slot (reqtrack_waits_medium). Writes held by
 * backpressure are not in a slot at all: they wait parked in the queue's
 * admitter thread, and the worker went back to serve others. Both kinds wake
 * with an error when the medium is gone. The age counts from the moment a
 * worker took the request: time spent in the kernel's queue before a worker
 * was free is not seen (with up to max_threads workers, rarely any).
 *
 * A request past the bound is counted and logged once: by the scan while it
 * is still in flight, else by reqtrack_end if it finished between two scans.
 * Which of the two claims it is settled by a compare-and-swap on the slot's
 * warned_gen (the highest request number of that slot already claimed).
 * Warnings go through a rate limit (a stalled medium may hold every worker).
 */
#include "reqtrack.h"

#include <glib.h>
#include <pthread.h>

#define WARN_BURST 10
#define WARN_INTERVAL_NS (60 * 1000000000ll)
#define READ_TRIES 16

struct req_slot {
	struct reqtrack *t;
	unsigned seq;	     /* odd while its owner writes; atomic */
	const char *op;	     /* static string; under seq */
	int64_t start_ns;    /* 0: idle; under seq */
	pid_t pid;	     /* under seq */
	bool waits_medium;   /* under seq */
	uint64_t gen;	     /* requests begun here; under seq */
	uint64_t warned_gen; /* see above; atomic */
	bool in_use;	     /* a thread owns it; under t->lock */
	struct req_slot *next; /* set before the slot is listed, then immutable */
};

struct reqtrack {
	pthread_key_t key;
	int64_t bound_ns;	 /* immutable */
	pthread_mutex_t lock;	 /* adding and giving back slots; the rate limit */
	struct req_slot *slots;	 /* list head; atomic */
	uint64_t slow;		 /* atomic */
	struct sm_ratelimit warn; /* under lock */
};

#define LOAD(p) __atomic_load_n(p, __ATOMIC_RELAXED)
#define STORE(p, v) __atomic_store_n(p, v, __ATOMIC_RELAXED)

static void slot_release(void *arg)
{
	struct req_slot *s = arg;

	pthread_mutex_lock(&s->t->lock);
	s->in_use = false;
	pthread_mutex_unlock(&s->t->lock);
}

struct reqtrack *reqtrack_new(int64_t bound_ns)
{
	struct reqtrack *t = g_new0(struct reqtrack, 1);

	if (pthread_key_create(&t->key, slot_release) != 0) {
		g_free(t);
		return NULL;
	}
	t->bound_ns = bound_ns;
	pthread_mutex_init(&t->lock, NULL);
	t->warn = (struct sm_ratelimit)SM_RATELIMIT_INIT(WARN_INTERVAL_NS, WARN_BURST);
	return t;
}

/* Called when every thread that used t is gone (the session loop ended). */
void reqtrack_free(struct reqtrack *t)
{
	struct req_slot *s, *next;

	if (!t)
		return;
	pthread_key_delete(t->key);
	for (s = t->slots; s; s = next) {
		next = s->next;
		g_free(s);
	}
	pthread_mutex_destroy(&t->lock);
	g_free(t);
}

/* The calling thread's slot: a free one of an exited thread, else a new one. */
static struct req_slot *my_slot(struct reqtrack *t)
{
	struct req_slot *s = pthread_getspecific(t->key);

	if (s)
		return s;
	pthread_mutex_lock(&t->lock);
	for (s = t->slots; s && s->in_use; s = s->next)
		;
	if (!s) {
		s = g_new0(struct req_slot, 1);
		s->t = t;
		s->next = t->slots;
		__atomic_store_n(&t->slots, s, __ATOMIC_RELEASE);
	}
	s->in_use = true;
	pthread_mutex_unlock(&t->lock);
	pthread_setspecific(t->key, s);
	return s;
}

static void write_begin(struct req_slot *s)
{
	STORE(&s->seq, s->seq + 1);
	__atomic_thread_fence(__ATOMIC_RELEASE);
}

static void write_end(struct req_slot *s)
{
	__atomic_store_n(&s->seq, s->seq + 1, __ATOMIC_RELEASE);
}

void reqtrack_begin(struct reqtrack *t, const char *op, pid_t pid, int64_t now_ns)
{
	struct req_slot *s = my_slot(t);

	write_begin(s);
	STORE(&s->op, op);
	STORE(&s->pid, pid);
	STORE(&s->waits_medium, false);
	STORE(&s->gen, s->gen + 1);
	STORE(&s->start_ns, now_ns ? now_ns : 1);
	write_end(s);
}

void reqtrack_waits_medium(struct reqtrack *t)
{
	struct req_slot *s = pthread_getspecific(t->key);

	if (!s)
		return;
	write_begin(s);
	STORE(&s->waits_medium, true);
	write_end(s);
}

/* Claim request gen of s for the count and the log: true once per request. */
static bool claim(struct req_slot *s, uint64_t gen)
{
	uint64_t prev = __atomic_load_n(&s->warned_gen, __ATOMIC_ACQUIRE);

	while (prev < gen)
		if (__atomic_compare_exchange_n(&s->warned_gen, &prev, gen, false,
						__ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
			return true;
	return false;
}

static bool warn_allowed(struct reqtrack *t, int64_t now_ns, uint64_t *missed)
{
	bool ok;

	pthread_mutex_lock(&t->lock);
	ok = sm_ratelimit_pass(&t->warn, now_ns, missed);
	pthread_mutex_unlock(&t->lock);
	return ok;
}

static void warn(struct reqtrack *t, const struct req_view *v, bool done, int64_t now_ns)
{
	uint64_t missed = 0;

	__atomic_add_fetch(&t->slow, 1, __ATOMIC_RELAXED);
	if (!warn_allowed(t, now_ns, &missed))
		return;
	sm_warn("slow request: %s of pid %d %s %.1f s, over the bound of %.0f s (req_bound=)%s",
		v->op, (int)v->pid, done ? "took" : "has been waiting", v->age_ns / 1e9,
		t->bound_ns / 1e9, missed ? "; more such warnings were held back" : "");
}

bool reqtrack_end(struct reqtrack *t, int64_t now_ns)
{
	struct req_slot *s = pthread_getspecific(t->key);
	struct req_view v;
	bool waited;

	if (!s)
		return false;
	v.op = s->op; /* our own slot: nobody else writes it */
	v.pid = s->pid;
	v.gen = s->gen;
	v.age_ns = now_ns - s->start_ns;
	waited = s->waits_medium;
	write_begin(s);
	STORE(&s->start_ns, 0);
	write_end(s);
	if (waited || v.age_ns <= t->bound_ns || !claim(s, v.gen))
		return false;
	warn(t, &v, true, now_ns);
	return true;
}

/* A consistent view of s; false when idle, waiting for the medium, or busy
 * being written each time we looked. */
static bool slot_read(struct req_slot *s, int64_t now_ns, struct req_view *v)
{
	for (int i = 0; i < READ_TRIES; i++) {
		unsigned a = __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE), b;
		int64_t start;
		bool waits;

		if (a & 1)
			continue;
		start = LOAD(&s->start_ns);
		waits = LOAD(&s->waits_medium);
		v->op = LOAD(&s->op);
		v->pid = LOAD(&s->pid);
		v->gen = LOAD(&s->gen);
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		b = LOAD(&s->seq);
		if (a != b)
			continue;
		if (!start || waits)
			return false;
		v->age_ns = now_ns - start;
		return true;
	}
	return false;
}

unsigned reqtrack_oldest(struct reqtrack *t, int64_t now_ns, struct req_view *oldest)
{
	struct req_view v;
	unsigned n = 0;

	oldest->op = NULL;
	oldest->age_ns = 0;
	for (struct req_slot *s = __atomic_load_n(&t->slots, __ATOMIC_ACQUIRE); s; s = s->next) {
		if (!slot_read(s, now_ns, &v))
			continue;
		n++;
		if (!oldest->op || v.age_ns > oldest->age_ns)
			*oldest = v;
	}
	return n;
}

unsigned reqtrack_scan(struct reqtrack *t, int64_t now_ns)
{
	struct req_view v;
	unsigned n = 0;

	for (struct req_slot *s = __atomic_load_n(&t->slots, __ATOMIC_ACQUIRE); s; s = s->next) {
		if (!slot_read(s, now_ns, &v) || v.age_ns <= t->bound_ns || !claim(s, v.gen))
			continue;
		warn(t, &v, false, now_ns);
		n++;
	}
	return n;
}

uint64_t reqtrack_slow(struct reqtrack *t)
{
	return __atomic_load_n(&t->slow, __ATOMIC_RELAXED);
}

int64_t reqtrack_bound_ns(const struct reqtrack *t)
{
	return t->bound_ns;
}
