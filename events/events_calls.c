/* Function timing: the snapprof_func_enter/_exit calls (instrument/'s
 * -finstrument-functions hooks) keep, per thread, a shadow stack and a
 * tree of call paths with calls and self time, beside the zones of
 * events.c and outside the event ring, so that no call is lost; the calls
 * builder walks the trees (snapprof__calls_visit()). A call's enter and
 * exit also go through the ring as events while a profiler reads, like a
 * zone's begin and end. */
#include "common/clock.h"
#include "events/events_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

/* A thread's calls aggregated by call path: node i is a function reached
 * through its parent's path; calls and self time add up on the node. The
 * owner adds nodes and counts; readers (the calls builder, under
 * the log's mutex) see the nodes below count, their counts as atomics. Nothing
 * here goes through the event ring, so a full ring loses no call. */
typedef struct call_node {
    uintptr_t fn;    /* set before the node is published */
    uint32_t parent; /* node index; 0 is the root (no function) */
    _Atomic uint64_t calls, self_ns;
} call_node_t;

typedef struct call_frame {
    uintptr_t fn;
    uint32_t node;
    uint8_t recorded; /* SNAPPROF__ZONE_* for its events */
    uint64_t enter_ns, child_ns;
} call_frame_t;

typedef struct snapprof__call_tree {
    _Atomic uint32_t count; /* published nodes, the root included */
    pid_t tid;
    _Atomic uint64_t unplaced;        /* calls timed into their caller: the tree was full */
    struct snapprof__call_tree *next; /* retired trees (under the log's mutex) */
    uint32_t depth, overflow;         /* owner: the shadow stack */
    call_frame_t stack[SNAPPROF_CALL_DEPTH_MAX];
    uint32_t hash[2 * SNAPPROF_CALL_NODES_MAX]; /* owner: 1 + node by (parent, fn) */
    call_node_t nodes[SNAPPROF_CALL_NODES_MAX];
} call_tree_t;

#define RETIRED_MAX 256
static call_tree_t *g_retired; /* trees of exited threads, under the log's mutex */
static size_t g_retired_count;
static _Atomic uint64_t g_retired_lost; /* calls of trees let go past RETIRED_MAX */

static uint32_t call_hash(uint32_t parent, uintptr_t fn)
{
    uint64_t h = ((uint64_t)fn ^ ((uint64_t)parent << 40)) * 0x9e3779b97f4a7c15u;
    return (uint32_t)(h >> 32) & (2 * SNAPPROF_CALL_NODES_MAX - 1);
}

/* The node of fn called from parent, added on first use; parent itself
 * when the tree is full (the call's time then counts as the caller's). */
#define UNPLACED UINT32_MAX

static uint32_t call_node(call_tree_t *c, uint32_t parent, uintptr_t fn)
{
    if (parent == UNPLACED)
        return UNPLACED; /* under a call the full tree could not place */
    uint32_t i = call_hash(parent, fn);
    for (;; i = (i + 1) & (2 * SNAPPROF_CALL_NODES_MAX - 1)) {
        uint32_t n = c->hash[i];
        if (n == 0)
            break;
        if (c->nodes[n - 1].fn == fn && c->nodes[n - 1].parent == parent)
            return n - 1;
    }
    uint32_t count = atomic_load_explicit(&c->count, memory_order_relaxed);
    if (count == SNAPPROF_CALL_NODES_MAX) {
        return UNPLACED;
    }
    c->nodes[count].fn = fn;
    c->nodes[count].parent = parent;
    c->hash[i] = count + 1;
    atomic_store_explicit(&c->count, count + 1, memory_order_release);
    return count;
}

static void add_relaxed(_Atomic uint64_t *a, uint64_t v)
{
    /* One writer: a load and a store, no locked instruction. */
    atomic_store_explicit(a, atomic_load_explicit(a, memory_order_relaxed) + v,
                          memory_order_relaxed);
}

/* Pops the innermost call at now. Owner. */
static void call_pop(snapprof__event_thread_t *t, call_tree_t *c, uint64_t now)
{
    call_frame_t *f = &c->stack[--c->depth];
    uint64_t dur = now > f->enter_ns ? now - f->enter_ns : 0;
    if (f->node != UNPLACED) {
        call_node_t *n = &c->nodes[f->node];
        add_relaxed(&n->calls, 1);
        add_relaxed(&n->self_ns, dur > f->child_ns ? dur - f->child_ns : 0);
        if (c->depth > 0)
            c->stack[c->depth - 1].child_ns += dur;
    } else {
        /* Its time stays in its caller's self time. */
        add_relaxed(&c->unplaced, 1);
    }
    if (f->recorded == SNAPPROF__ZONE_RECORDED) {
        t->reserved--;
        snapprof__event_push(t, t->reserved,
                             (snapprof__ring_event_t){.time_ns = now,
                                                      .kind = SNAPPROF_EVENT_FUNC_EXIT,
                                                      .depth = (uint16_t)(c->depth + 1),
                                                      .u.address = f->fn});
    } else if (f->recorded == SNAPPROF__ZONE_DROPPED) {
        snapprof__event_count_dropped();
    }
}

int snapprof_func_enter(void *fn)
{
    int err = 0;
    snapprof__event_thread_t *t = snapprof__event_thread(&err);
    if (t == NULL)
        return err;
    call_tree_t *c = atomic_load_explicit(&t->calls, memory_order_relaxed);
    if (c == NULL) {
        c = calloc(1, sizeof *c);
        if (c == NULL)
            return -ENOMEM;
        c->tid = t->tid;
        atomic_store_explicit(&c->count, 1, memory_order_release); /* the root */
        atomic_store_explicit(&t->calls, c, memory_order_release);
    }
    if (c->depth == SNAPPROF_CALL_DEPTH_MAX) {
        c->overflow++;
        return -E2BIG;
    }
    uint32_t parent = c->depth > 0 ? c->stack[c->depth - 1].node : 0;
    call_frame_t *f = &c->stack[c->depth];
    f->fn = (uintptr_t)fn;
    f->node = call_node(c, parent, (uintptr_t)fn);
    f->child_ns = 0;
    f->recorded = SNAPPROF__ZONE_UNRECORDED;
    f->enter_ns = snapprof__monotonic_ns();
    if (snapprof__events_recording()) {
        int ok = snapprof__event_push(t, t->reserved + 1,
                                      (snapprof__ring_event_t){.time_ns = f->enter_ns,
                                                               .kind = SNAPPROF_EVENT_FUNC_ENTER,
                                                               .depth = (uint16_t)(c->depth + 1),
                                                               .u.address = (uintptr_t)fn});
        f->recorded = ok ? SNAPPROF__ZONE_RECORDED : SNAPPROF__ZONE_DROPPED;
        t->reserved += (uint32_t)ok;
    }
    c->depth++;
    return 0;
}

int snapprof_func_exit(void *fn)
{
    snapprof__event_thread_t *t = atomic_load_explicit(&snapprof__event_tls, memory_order_relaxed);
    call_tree_t *c = t ? atomic_load_explicit(&t->calls, memory_order_relaxed) : NULL;
    if (c == NULL)
        return -ENOENT;
    if (c->overflow > 0) {
        c->overflow--;
        return 0;
    }
    /* Calls that longjmp() or an unwinder skipped end here too. */
    uint32_t d = c->depth;
    while (d > 0 && c->stack[d - 1].fn != (uintptr_t)fn)
        d--;
    if (d == 0)
        return -ENOENT;
    uint64_t now = snapprof__monotonic_ns();
    while (c->depth >= d)
        call_pop(t, c, now);
    return 0;
}

void snapprof__calls_retire_locked(snapprof__event_thread_t *t)
{
    call_tree_t *c = atomic_load_explicit(&t->calls, memory_order_relaxed);
    if (c == NULL)
        return;
    atomic_store_explicit(&t->calls, NULL, memory_order_relaxed);
    uint64_t now = snapprof__monotonic_ns();
    c->overflow = 0;
    while (c->depth > 0)
        call_pop(t, c, now);
    if (g_retired_count == RETIRED_MAX) {
        /* Bounded: the oldest retired tree goes, its calls counted. */
        call_tree_t **pp = &g_retired;
        while ((*pp)->next != NULL)
            pp = &(*pp)->next;
        call_tree_t *old = *pp;
        uint32_t n = atomic_load_explicit(&old->count, memory_order_relaxed);
        uint64_t calls = 0;
        for (uint32_t i = 1; i < n; i++)
            calls += atomic_load_explicit(&old->nodes[i].calls, memory_order_relaxed);
        atomic_fetch_add_explicit(&g_retired_lost, calls, memory_order_relaxed);
        *pp = NULL;
        free(old);
        g_retired_count--;
    }
    c->next = g_retired;
    g_retired = c;
    g_retired_count++;
}

static void visit_tree(call_tree_t *c, snapprof__calls_visit_cb cb, void *ud)
{
    uint32_t n = atomic_load_explicit(&c->count, memory_order_acquire);
    uintptr_t path[SNAPPROF_CALL_DEPTH_MAX];
    for (uint32_t i = 1; i < n; i++) {
        size_t depth = 0;
        for (uint32_t k = i; k != 0 && depth < SNAPPROF_CALL_DEPTH_MAX; k = c->nodes[k].parent)
            path[depth++] = c->nodes[k].fn;
        uint64_t calls = atomic_load_explicit(&c->nodes[i].calls, memory_order_relaxed);
        uint64_t self = atomic_load_explicit(&c->nodes[i].self_ns, memory_order_relaxed);
        if (calls > 0)
            cb(ud, c->tid, path, depth, calls, self);
    }
}

uint64_t snapprof__calls_visit(snapprof__calls_visit_cb cb, void *ud)
{
    snapprof__event_log_lock();
    uint64_t unplaced = atomic_load_explicit(&g_retired_lost, memory_order_relaxed);
    for (snapprof__event_thread_t *t = snapprof__event_threads_locked(); t != NULL; t = t->next) {
        call_tree_t *c = atomic_load_explicit(&t->calls, memory_order_acquire);
        if (c != NULL) {
            visit_tree(c, cb, ud);
            unplaced += atomic_load_explicit(&c->unplaced, memory_order_relaxed);
        }
    }
    for (call_tree_t *c = g_retired; c != NULL; c = c->next) {
        visit_tree(c, cb, ud);
        unplaced += atomic_load_explicit(&c->unplaced, memory_order_relaxed);
    }
    snapprof__event_log_unlock();
    return unplaced;
}

void snapprof__calls_fork_forget(void)
{
    g_retired = NULL;
    g_retired_count = 0;
}
