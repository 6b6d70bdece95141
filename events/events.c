/* Zones, counters and instant events: per-thread zone stacks that the
 * signal handler reads for the zone= label, per-thread event rings that
 * the profilers drain, the process-wide name table and event log.
 *
 * Names. A name is interned once into g_names (append-only, never freed)
 * and found again through an open-addressing hash of atomic ids: a lookup
 * takes no lock, an insert takes g_names_lock (once per name). Events and
 * the handler's capture carry the 32-bit id; the strings they turn into
 * live as long as the process, so views of them never dangle.
 *
 * Zone stack. The owning thread writes the stack entry, then the depth; a
 * signal handler on the same thread reads the depth, then the entry, so it
 * sees either the zone before or after the call, never a half-written one
 * (relaxed atomics and signal fences: only the same thread reads them).
 *
 * Event ring. One writer (the thread) and one reader (whoever holds
 * g_log_lock): head and tail are atomics with release/acquire, the entries
 * plain memory ordered by them. When the ring has no room the event is
 * dropped and counted. Room is kept for the end of every recorded zone
 * that is open (reserved), so a recorded begin always gets its end and the
 * trace never shows a zone that seems to run on forever.
 *
 * Log. Whoever reads (a profiler on its tick, or a thread that exits)
 * moves the rings' events into g_log under g_log_lock; each profiler
 * copies the entries it has not seen from there. Threads write events only
 * while a profiler reads (snapprof__event_readers > 0). */
#include "common/clock.h"
#include "common/fork_resets.h"
#include "common/label_keys.h"
#include "events/events_internal.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* Names                                                                    */
/* ------------------------------------------------------------------------ */

#define NAME_HASH_SIZE (2 * SNAPPROF_EVENT_NAMES_MAX) /* power of two */

/* Id i (1-based) is g_names[i]; [0] stays "". */
static char g_names[SNAPPROF_EVENT_NAMES_MAX + 1][SNAPPROF_EVENT_NAME_MAX];
static _Atomic uint32_t g_name_hash[NAME_HASH_SIZE];
static uint32_t g_name_count; /* under g_names_lock */
static pthread_mutex_t g_names_lock = PTHREAD_MUTEX_INITIALIZER;

static pthread_once_t g_fork_once = PTHREAD_ONCE_INIT;
static void fork_once(void); /* registers fork_child(), below */

static uint32_t hash_name(const char *s, size_t len)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

/* The id of name (len bytes), or 0; *slot is where the probe stopped. */
static uint32_t find_name(const char *name, size_t len, uint32_t h, uint32_t *slot)
{
    for (uint32_t i = h & (NAME_HASH_SIZE - 1);; i = (i + 1) & (NAME_HASH_SIZE - 1)) {
        uint32_t id = atomic_load_explicit(&g_name_hash[i], memory_order_acquire);
        if (id == 0) {
            *slot = i;
            return 0;
        }
        if (memcmp(g_names[id], name, len + 1) == 0)
            return id;
    }
}

/* Checks a name and returns its id (interning it on first use), or a
 * negative error. */
static int64_t intern(const char *name)
{
    if (name == NULL || name[0] == '\0')
        return -EINVAL;
    size_t len = strnlen(name, SNAPPROF_EVENT_NAME_MAX);
    if (len == SNAPPROF_EVENT_NAME_MAX)
        return -ENAMETOOLONG;
    uint32_t h = hash_name(name, len), slot;
    uint32_t id = find_name(name, len, h, &slot);
    if (id != 0)
        return id;
    pthread_once(&g_fork_once, fork_once);
    pthread_mutex_lock(&g_names_lock);
    id = find_name(name, len, h, &slot); /* another thread may have added it */
    if (id == 0 && g_name_count < SNAPPROF_EVENT_NAMES_MAX) {
        id = ++g_name_count;
        memcpy(g_names[id], name, len + 1);
        atomic_store_explicit(&g_name_hash[slot], id, memory_order_release);
    }
    pthread_mutex_unlock(&g_names_lock);
    return id != 0 ? (int64_t)id : -ENOSPC;
}

/* ------------------------------------------------------------------------ */
/* Attached counters                                                        */
/* ------------------------------------------------------------------------ */

typedef struct attached {
    uint32_t name; /* written before the slot is published */
    double scale;
    char unit[SNAPPROF_LABEL_UNIT_MAX];
    _Atomic int64_t value;
    _Atomic int set; /* value holds a set value */
} attached_t;

static attached_t g_attached[SNAPPROF_COUNTER_ATTACH_MAX];
static _Atomic uint32_t g_attached_count; /* published slots */
/* By name id: 1 + the attached slot, 0 when not attached. */
static _Atomic uint8_t g_name_attach[SNAPPROF_EVENT_NAMES_MAX + 1];

int snapprof_counter_attach(const char *name, const char *unit, double scale)
{
    if (name == NULL || name[0] == '\0' || snapprof__label_key_reserved(name) || !isfinite(scale) ||
        scale == 0)
        return -EINVAL;
    if (strnlen(name, SNAPPROF_LABEL_KEY_MAX) == SNAPPROF_LABEL_KEY_MAX ||
        (unit != NULL && strnlen(unit, SNAPPROF_LABEL_UNIT_MAX) == SNAPPROF_LABEL_UNIT_MAX))
        return -ENAMETOOLONG;
    int64_t id = intern(name);
    if (id < 0)
        return (int)id;
    /* g_names_lock serializes attaches; neither the handler nor a set ever
     * takes it. */
    pthread_once(&g_fork_once, fork_once);
    pthread_mutex_lock(&g_names_lock);
    int err = 0;
    uint32_t n = atomic_load_explicit(&g_attached_count, memory_order_relaxed);
    if (atomic_load_explicit(&g_name_attach[id], memory_order_relaxed) != 0) {
        err = -EEXIST;
    } else if (n == SNAPPROF_COUNTER_ATTACH_MAX) {
        err = -ENOSPC;
    } else {
        attached_t *a = &g_attached[n];
        a->name = (uint32_t)id;
        a->scale = scale;
        memset(a->unit, 0, sizeof a->unit);
        if (unit != NULL)
            memcpy(a->unit, unit, strlen(unit));
        atomic_store_explicit(&g_attached_count, n + 1, memory_order_release);
        atomic_store_explicit(&g_name_attach[id], (uint8_t)(n + 1), memory_order_release);
    }
    pthread_mutex_unlock(&g_names_lock);
    return err;
}

/* value * scale as an integer label: rounded to nearest, saturated. */
static int64_t to_label(double value, double scale)
{
    double v = value * scale;
    if (!(v < 9.2233720368547748e18))
        return INT64_MAX;
    if (!(v > -9.2233720368547748e18))
        return INT64_MIN;
    /* Half away from zero, as llround() does (without needing libm). */
    return v >= 0 ? (int64_t)(v + 0.5) : -(int64_t)(-v + 0.5);
}

/* ------------------------------------------------------------------------ */
/* Per-thread state                                                         */
/* ------------------------------------------------------------------------ */

enum { EV_BEGIN = SNAPPROF_EVENT_ZONE_BEGIN, EV_END = SNAPPROF_EVENT_ZONE_END };

__thread _Atomic(snapprof__event_thread_t *) snapprof__event_tls
    __attribute__((tls_model("initial-exec")));

static pthread_key_t g_state_key;
static pthread_once_t g_state_key_once = PTHREAD_ONCE_INIT;
static int g_state_key_ok;

_Atomic int snapprof__event_readers;
static _Atomic uint64_t g_dropped; /* events thread rings had no room for */
static pthread_mutex_t g_log_lock = PTHREAD_MUTEX_INITIALIZER;
static snapprof__event_thread_t *g_threads; /* registry, under g_log_lock */

static void drain_ring_locked(snapprof__event_thread_t *t);
static void close_open_zones(snapprof__event_thread_t *t);

static void free_state(void *p)
{
    snapprof__event_thread_t *t = p;
    /* Zones and calls still open end at the thread's exit; what the ring
     * holds then goes to the log before the ring goes away. */
    close_open_zones(t);
    pthread_mutex_lock(&g_log_lock);
    snapprof__calls_retire_locked(t);
    drain_ring_locked(t);
    if (t->prev)
        t->prev->next = t->next;
    else
        g_threads = t->next;
    if (t->next)
        t->next->prev = t->prev;
    pthread_mutex_unlock(&g_log_lock);
    /* A signal that arrives from here on finds no state. */
    atomic_store_explicit(&snapprof__event_tls, NULL, memory_order_relaxed);
    atomic_signal_fence(memory_order_seq_cst);
    free(t);
}

static void make_state_key(void)
{
    g_state_key_ok = pthread_key_create(&g_state_key, free_state) == 0;
}

/* The calling thread's state, made on first use; NULL with *err set when
 * it cannot be. */
snapprof__event_thread_t *snapprof__event_thread(int *err)
{
    snapprof__event_thread_t *t = atomic_load_explicit(&snapprof__event_tls, memory_order_relaxed);
    if (t != NULL)
        return t;
    pthread_once(&g_state_key_once, make_state_key);
    if (!g_state_key_ok) {
        *err = -EAGAIN;
        return NULL;
    }
    t = calloc(1, sizeof *t);
    if (t == NULL) {
        *err = -ENOMEM;
        return NULL;
    }
    if (pthread_setspecific(g_state_key, t) != 0) {
        free(t);
        *err = -ENOMEM;
        return NULL;
    }
    t->tid = (pid_t)syscall(SYS_gettid);
    pthread_once(&g_fork_once, fork_once);
    pthread_mutex_lock(&g_log_lock);
    t->next = g_threads;
    if (g_threads)
        g_threads->prev = t;
    g_threads = t;
    pthread_mutex_unlock(&g_log_lock);
    atomic_store_explicit(&snapprof__event_tls, t, memory_order_relaxed);
    return t;
}

int snapprof__event_push(snapprof__event_thread_t *t, uint32_t keep, snapprof__ring_event_t ev)
{
    uint64_t head = atomic_load_explicit(&t->head, memory_order_relaxed);
    uint64_t tail = atomic_load_explicit(&t->tail, memory_order_acquire);
    if (SNAPPROF__EVENT_RING - (head - tail) <= keep) {
        atomic_fetch_add_explicit(&g_dropped, 1, memory_order_relaxed);
        return 0;
    }
    t->ring[head % SNAPPROF__EVENT_RING] = ev;
    atomic_store_explicit(&t->head, head + 1, memory_order_release);
    return 1;
}

static int push(snapprof__event_thread_t *t, uint32_t keep, uint16_t kind, uint16_t depth,
                uint32_t name, uint64_t time_ns, double value)
{
    return snapprof__event_push(
        t, keep,
        (snapprof__ring_event_t){
            .time_ns = time_ns, .name = name, .kind = kind, .depth = depth, .u.value = value});
}

void snapprof__event_count_dropped(void)
{
    atomic_fetch_add_explicit(&g_dropped, 1, memory_order_relaxed);
}

void snapprof__event_log_lock(void)
{
    pthread_once(&g_fork_once, fork_once);
    pthread_mutex_lock(&g_log_lock);
}

void snapprof__event_log_unlock(void)
{
    pthread_mutex_unlock(&g_log_lock);
}

snapprof__event_thread_t *snapprof__event_threads_locked(void)
{
    return g_threads;
}

/* Pops the zone at depth d (> 0) off t: records its end at now (0: the
 * clock's time, read only then) when its begin was recorded, counts it
 * dropped when its begin was. Owner. */
static void end_zone(snapprof__event_thread_t *t, uint32_t d, uint64_t now)
{
    atomic_store_explicit(&t->depth, d - 1, memory_order_relaxed);
    if (t->recorded[d - 1] == SNAPPROF__ZONE_RECORDED) {
        t->reserved--;
        push(t, t->reserved, EV_END, (uint16_t)d,
             atomic_load_explicit(&t->stack[d - 1], memory_order_relaxed),
             now != 0 ? now : snapprof__monotonic_ns(), 0);
    } else if (t->recorded[d - 1] == SNAPPROF__ZONE_DROPPED) {
        atomic_fetch_add_explicit(&g_dropped, 1, memory_order_relaxed);
    }
}

/* Ends every zone still open on t now (thread exit). Owner. */
static void close_open_zones(snapprof__event_thread_t *t)
{
    uint64_t now = snapprof__monotonic_ns();
    t->overflow = 0;
    for (uint32_t d = atomic_load_explicit(&t->depth, memory_order_relaxed); d > 0; d--)
        end_zone(t, d, now);
}

/* The calling thread's state and the id of name, for a call that records
 * name; NULL with *err set when either fails. */
static snapprof__event_thread_t *named_call(const char *name, uint32_t *id, int *err)
{
    int64_t n = intern(name);
    if (n < 0) {
        *err = (int)n;
        return NULL;
    }
    *id = (uint32_t)n;
    return snapprof__event_thread(err);
}

/* ------------------------------------------------------------------------ */
/* Public API                                                               */
/* ------------------------------------------------------------------------ */

int snapprof_zone_begin(const char *name)
{
    uint32_t id;
    int err = 0;
    snapprof__event_thread_t *t = named_call(name, &id, &err);
    if (t == NULL)
        return err;
    uint32_t d = atomic_load_explicit(&t->depth, memory_order_relaxed);
    if (d == SNAPPROF_ZONE_DEPTH_MAX) {
        t->overflow++;
        return -E2BIG;
    }
    /* Recorded only with room for this begin, its end and the ends owed. */
    t->recorded[d] = SNAPPROF__ZONE_UNRECORDED;
    if (snapprof__events_recording()) {
        int ok =
            push(t, t->reserved + 1, EV_BEGIN, (uint16_t)(d + 1), id, snapprof__monotonic_ns(), 0);
        t->recorded[d] = ok ? SNAPPROF__ZONE_RECORDED : SNAPPROF__ZONE_DROPPED;
        t->reserved += (uint32_t)ok;
    }
    atomic_store_explicit(&t->stack[d], id, memory_order_relaxed);
    atomic_signal_fence(memory_order_release);
    atomic_store_explicit(&t->depth, d + 1, memory_order_relaxed);
    return 0;
}

int snapprof_zone_end(void)
{
    snapprof__event_thread_t *t = atomic_load_explicit(&snapprof__event_tls, memory_order_relaxed);
    if (t == NULL)
        return -ENOENT;
    if (t->overflow > 0) {
        t->overflow--;
        return 0;
    }
    uint32_t d = atomic_load_explicit(&t->depth, memory_order_relaxed);
    if (d == 0)
        return -ENOENT;
    end_zone(t, d, 0);
    return 0;
}

int snapprof_instant(const char *name)
{
    uint32_t id;
    int err = 0;
    snapprof__event_thread_t *t = named_call(name, &id, &err);
    if (t == NULL)
        return err;
    if (snapprof__events_recording())
        push(t, t->reserved, SNAPPROF_EVENT_INSTANT, 0, id, snapprof__monotonic_ns(), 0);
    return 0;
}

int snapprof_counter_set(const char *name, double value)
{
    if (!isfinite(value))
        return -EINVAL;
    uint32_t id;
    int err = 0;
    snapprof__event_thread_t *t = named_call(name, &id, &err);
    if (t == NULL)
        return err;
    uint8_t a = atomic_load_explicit(&g_name_attach[id], memory_order_acquire);
    if (a != 0) {
        attached_t *c = &g_attached[a - 1];
        atomic_store_explicit(&c->value, to_label(value, c->scale), memory_order_relaxed);
        atomic_store_explicit(&c->set, 1, memory_order_release);
    }
    if (snapprof__events_recording())
        push(t, t->reserved, SNAPPROF_EVENT_COUNTER, 0, id, snapprof__monotonic_ns(), value);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Capture (signal handler) and decoding (sampler)                          */
/* ------------------------------------------------------------------------ */

/* Async-signal-safe. */
void snapprof__events_capture(snapprof__event_capture_t *out)
{
    out->zone = 0;
    out->counter_count = 0;
    snapprof__event_thread_t *t = atomic_load_explicit(&snapprof__event_tls, memory_order_relaxed);
    if (t != NULL) {
        uint32_t d = atomic_load_explicit(&t->depth, memory_order_relaxed);
        atomic_signal_fence(memory_order_acquire);
        if (d > 0 && d <= SNAPPROF_ZONE_DEPTH_MAX)
            out->zone = atomic_load_explicit(&t->stack[d - 1], memory_order_relaxed);
    }
    uint32_t n = atomic_load_explicit(&g_attached_count, memory_order_acquire);
    for (uint32_t i = 0; i < n && i < SNAPPROF_COUNTER_ATTACH_MAX; i++) {
        attached_t *a = &g_attached[i];
        if (!atomic_load_explicit(&a->set, memory_order_acquire))
            continue;
        out->counters[out->counter_count].name = a->name;
        out->counters[out->counter_count].attach = i;
        out->counters[out->counter_count].value =
            atomic_load_explicit(&a->value, memory_order_relaxed);
        out->counter_count++;
    }
}

size_t snapprof__events_decode(const snapprof__event_capture_t *c, snapprof_label_t *out)
{
    size_t n = 0;
    if (c->zone != 0 && c->zone <= SNAPPROF_EVENT_NAMES_MAX) {
        out[n] = (snapprof_label_t){.key = snapprof__key_zone, .str = g_names[c->zone]};
        n++;
    }
    uint32_t count = c->counter_count <= SNAPPROF_COUNTER_ATTACH_MAX ? c->counter_count
                                                                     : SNAPPROF_COUNTER_ATTACH_MAX;
    for (uint32_t i = 0; i < count; i++) {
        uint32_t name = c->counters[i].name, attach = c->counters[i].attach;
        if (name == 0 || name > SNAPPROF_EVENT_NAMES_MAX || attach >= SNAPPROF_COUNTER_ATTACH_MAX)
            continue;
        const char *unit = g_attached[attach].unit;
        out[n] = (snapprof_label_t){
            .key = g_names[name], .num = c->counters[i].value, .num_unit = unit[0] ? unit : NULL};
        n++;
    }
    return n;
}

/* ------------------------------------------------------------------------ */
/* The log and its readers                                                  */
/* ------------------------------------------------------------------------ */

typedef struct log_event {
    snapprof__ring_event_t e;
    pid_t tid;
} log_event_t;

static log_event_t *g_log; /* SNAPPROF__EVENT_LOG entries, under g_log_lock */
static uint64_t g_log_head;

/* Moves t's events into the log (dropping them when nobody reads).
 * g_log_lock held: the ring's only reader. */
static void drain_ring_locked(snapprof__event_thread_t *t)
{
    uint64_t head = atomic_load_explicit(&t->head, memory_order_acquire);
    uint64_t tail = atomic_load_explicit(&t->tail, memory_order_relaxed);
    if (g_log != NULL) {
        for (uint64_t i = tail; i < head; i++) {
            log_event_t *l = &g_log[g_log_head % SNAPPROF__EVENT_LOG];
            l->e = t->ring[i % SNAPPROF__EVENT_RING];
            l->tid = t->tid;
            g_log_head++;
        }
    }
    atomic_store_explicit(&t->tail, head, memory_order_release);
}

static void drain_all_locked(void)
{
    for (snapprof__event_thread_t *t = g_threads; t != NULL; t = t->next)
        drain_ring_locked(t);
}

/* Copies the log's entries r has not seen. g_log_lock held. */
static void copy_locked(snapprof__event_reader_t *r)
{
    if (g_log_head - r->cursor > SNAPPROF__EVENT_LOG) {
        r->lost += g_log_head - SNAPPROF__EVENT_LOG - r->cursor;
        r->cursor = g_log_head - SNAPPROF__EVENT_LOG;
    }
    size_t want = (size_t)(g_log_head - r->cursor);
    if (r->count + want > r->cap && r->cap < SNAPPROF__EVENTS_PROFILE_MAX) {
        size_t cap = r->cap ? r->cap : 1024;
        while (cap < r->count + want && cap < SNAPPROF__EVENTS_PROFILE_MAX)
            cap *= 2;
        snapprof_event_t *n = realloc(r->events, cap * sizeof *n);
        if (n != NULL) {
            r->events = n;
            r->cap = cap;
        }
    }
    for (; r->cursor < g_log_head; r->cursor++) {
        if (r->count == r->cap) {
            r->lost += g_log_head - r->cursor;
            r->cursor = g_log_head;
            break;
        }
        const log_event_t *l = &g_log[r->cursor % SNAPPROF__EVENT_LOG];
        uint32_t name = l->e.name <= SNAPPROF_EVENT_NAMES_MAX ? l->e.name : 0;
        r->events[r->count++] = (snapprof_event_t){
            .kind = (snapprof_event_kind_t)l->e.kind,
            .tid = l->tid,
            .depth = l->e.depth,
            .time_ns = l->e.time_ns,
            .name = g_names[name],
        };
        snapprof_event_t *e = &r->events[r->count - 1];
        if (e->kind == SNAPPROF_EVENT_FUNC_ENTER || e->kind == SNAPPROF_EVENT_FUNC_EXIT)
            e->address = (uintptr_t)l->e.u.address;
        else
            e->value = l->e.u.value;
    }
}

int snapprof__event_reader_open(snapprof__event_reader_t *r)
{
    if (r->open)
        return 0;
    pthread_once(&g_fork_once, fork_once);
    pthread_mutex_lock(&g_log_lock);
    if (g_log == NULL) {
        g_log = malloc(SNAPPROF__EVENT_LOG * sizeof *g_log);
        if (g_log == NULL) {
            pthread_mutex_unlock(&g_log_lock);
            return -ENOMEM;
        }
    }
    /* What threads left from an earlier profile is not this one's. */
    drain_all_locked();
    r->cursor = g_log_head;
    r->count = 0; /* a retried start begins afresh */
    r->lost = 0;
    r->dropped_base = atomic_load_explicit(&g_dropped, memory_order_relaxed);
    r->open = 1;
    atomic_fetch_add_explicit(&snapprof__event_readers, 1, memory_order_relaxed);
    pthread_mutex_unlock(&g_log_lock);
    return 0;
}

void snapprof__event_reader_read(snapprof__event_reader_t *r)
{
    if (!r->open)
        return;
    pthread_mutex_lock(&g_log_lock);
    drain_all_locked();
    copy_locked(r);
    pthread_mutex_unlock(&g_log_lock);
}

void snapprof__event_reader_close(snapprof__event_reader_t *r)
{
    if (!r->open)
        return;
    snapprof__event_reader_read(r);
    r->dropped_base = atomic_load_explicit(&g_dropped, memory_order_relaxed) - r->dropped_base;
    r->open = 0;
    atomic_fetch_sub_explicit(&snapprof__event_readers, 1, memory_order_relaxed);
}

uint64_t snapprof__event_reader_dropped(const snapprof__event_reader_t *r)
{
    /* Once closed, dropped_base holds the final count. */
    return r->open ? atomic_load_explicit(&g_dropped, memory_order_relaxed) - r->dropped_base
                   : r->dropped_base;
}

void snapprof__event_reader_free(snapprof__event_reader_t *r)
{
    snapprof__event_reader_close(r);
    free(r->events);
    r->events = NULL;
    r->count = r->cap = 0;
}

/* ------------------------------------------------------------------------ */
/* fork()                                                                   */
/* ------------------------------------------------------------------------ */

/* The child of a fork() has only the thread that forked; a lock another
 * thread held at the fork would stay held for good (fork_resets.h).
 *
 * g_names_lock (a thread interning a name or attaching a counter): taken
 * anew. A name cut short was counted but not yet published in the hash,
 * an attach cut short not yet published in the count: either is as if it
 * had not happened, bar an id never used.
 *
 * g_log_lock (a thread registering itself or exiting, a profiler's tick
 * draining the rings, the calls builder): taken anew, and what it guards
 * may be half-changed. The registry is started again with the forking
 * thread's own state alone (the other threads are not in the child; their
 * states are left allocated, as the retired call trees are, which are
 * forgotten). The log itself stays: its head only grows, and an entry cut
 * short is one event with a stale value. */
static void fork_child(void)
{
    if (pthread_mutex_trylock(&g_names_lock) == 0) {
        pthread_mutex_unlock(&g_names_lock);
    } else {
        pthread_mutex_init(&g_names_lock, NULL);
        snapprof__fork_reset_note(SNAPPROF__FORK_EVENT_NAMES);
    }
    if (pthread_mutex_trylock(&g_log_lock) == 0) {
        pthread_mutex_unlock(&g_log_lock);
    } else {
        pthread_mutex_init(&g_log_lock, NULL);
        snapprof__event_thread_t *self =
            atomic_load_explicit(&snapprof__event_tls, memory_order_relaxed);
        if (self != NULL)
            self->next = self->prev = NULL;
        g_threads = self;
        snapprof__calls_fork_forget();
        snapprof__fork_reset_note(SNAPPROF__FORK_EVENT_LOG);
    }
}

static void fork_once(void)
{
    pthread_atfork(NULL, NULL, fork_child);
}
