/* The heap sampler's rule and hooks: each thread's byte countdown (a
 * Poisson process over the bytes it allocates, as Go's mallocgc and
 * Chromium's PoissonAllocationSampler keep it), the public note
 * functions, the thread-local guard that keeps the library's own threads
 * and code out, and turning sampling on and off for a profiler. */
#include "heap/heap_internal.h"

#include "common/clock.h"
#include "common/hash.h"

#include <snapprof/heap.h>

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

snapprof__heap_state_t snapprof__heap;

static atomic_int g_rule_only; /* snapprof__heap_set_seams() */

/* Per thread. Initial-exec TLS: no allocation on first use, valid until
 * the thread is gone (after its TLS destructors too). */
typedef struct heap_tls {
    uint64_t left;  /* bytes until the next sample (the note functions'); 0: not drawn */
    uint32_t guard; /* nesting of the library's own code on this thread */
    uint8_t muted;  /* one of the library's threads */
    uint64_t rng;   /* xorshift state; 0 until seeded */
} heap_tls_t;

static __thread heap_tls_t tls __attribute__((tls_model("initial-exec")));

/* The allocation hooks' shared state (heap_hook_abi.h), when their library
 * is loaded: defined there, found here when this library is relocated. */
extern snapprof__heap_hook_t snapprof__heap_hook_v1 __attribute__((weak, visibility("default")));

/* The filter and gen the set and the sessions keep: the hooks' own when
 * they are loaded (switched at this library's construction, before any
 * session), else this library's (the note functions called by a program's
 * own pools use the same filter). */
snapprof__heap_hook_t snapprof__heap_own_hook;
snapprof__heap_hook_t *snapprof__heap_hooks = &snapprof__heap_own_hook;

/* Sampling started or stopped: every thread's countdown in the hooks is
 * taken again by the slow path (which reads the interval), and a thread
 * draws a fresh countdown for a new session. Called after the interval is
 * stored. */
static void hooks_changed(void)
{
    atomic_fetch_add_explicit(&snapprof__heap_hooks->gen, 1, memory_order_release);
}

/* ------------------------------------------------------------------------ */
/* The sampling rule                                                        */
/* ------------------------------------------------------------------------ */

/* ln(x) for x > 0, to about 1e-9: no libm, no errno, nothing that could
 * allocate. x = m * 2^e with m in [1, 2); ln m = 2 atanh((m-1)/(m+1)), a
 * series in t <= 1/3. */
static double ln(double x)
{
    union {
        double d;
        uint64_t u;
    } v = {x};
    int e = (int)((v.u >> 52) & 0x7ff) - 1023;
    v.u = (v.u & 0x000fffffffffffffull) | 0x3ff0000000000000ull;
    double m = v.d, t = (m - 1) / (m + 1), t2 = t * t, sum = 0, term = t;
    for (int k = 1; k <= 19; k += 2) {
        sum += term / k;
        term *= t2;
    }
    return 2 * sum + e * 0.69314718055994530942;
}

static uint64_t next_rng(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545f4914f6cdd1dull;
}

/* An exponential draw of mean interval, at least 1 byte. */
int64_t snapprof__heap_draw(uint64_t *rng, size_t interval)
{
    if (*rng == 0)
        *rng = 0x9e3779b97f4a7c15ull;
    /* U uniform in (0, 1]: 53 random bits, never 0. */
    double u = (double)((next_rng(rng) >> 11) + 1) * (1.0 / 9007199254740992.0);
    double d = -ln(u) * (double)interval;
    if (d < 1)
        return 1;
    if (d > 4e18)
        return (int64_t)4e18;
    return (int64_t)d;
}

uint64_t snapprof__heap_seed(uint64_t raw)
{
    /* One step of splitmix64 from raw: threads seeded a few ns apart draw
     * unrelated intervals. 0 is xorshift's one fixed point. */
    uint64_t x = snapprof__splitmix64_next(&raw);
    return x ? x : 1;
}

static void seed(heap_tls_t *s)
{
    if (s->rng != 0)
        return;
    s->rng = snapprof__heap_seed(snapprof__monotonic_ns() ^ ((uint64_t)(uintptr_t)s << 16) ^
                                 ((uint64_t)snapprof__gettid_cached() << 40));
}

/* The rule on one countdown: *left is the bytes until the next sample, 0
 * when none was drawn. An allocation of size bytes that reaches it is
 * sampled and the next countdown drawn afresh (Go's mallocgc: no carry-over),
 * so each allocation of S bytes is sampled with probability 1 - exp(-S/R),
 * independently of the others. The note functions keep one countdown per
 * thread here, the hooks another in their own TLS (heap_hook_abi.h): each
 * a Poisson process over the bytes it is told of. */
static int apply_rule(uint64_t *left, uintptr_t addr, size_t size, size_t interval,
                      uintptr_t caller_pc)
{
    heap_tls_t *s = &tls;
    seed(s);
    /* A thread's first allocation draws its own interval (as every later
     * one is drawn), then is sampled by it like any other. */
    if (*left == 0)
        *left = (uint64_t)snapprof__heap_draw(&s->rng, interval);
    if (size < *left) {
        *left -= size;
        return 0;
    }
    *left = (uint64_t)snapprof__heap_draw(&s->rng, interval);
    if (s->guard || s->muted)
        return 0;
    if (atomic_load_explicit(&g_rule_only, memory_order_relaxed))
        return 1;
    s->guard++;
    int rc = snapprof__heap_capture(addr, size, caller_pc);
    s->guard--;
    return rc;
}

/* Not inlined into the callers: the fast path stays a compare and a
 * subtract. errno is the caller's afterwards (a capture may fail a system
 * call: /proc/self/maps at the fd limit), so that the allocation hooks need
 * not save it on every call. */
static __attribute__((noinline)) int slow_path(uintptr_t addr, size_t size, size_t interval,
                                               uintptr_t caller_pc)
{
    int e = errno;
    int rc = apply_rule(&tls.left, addr, size, interval, caller_pc);
    errno = e;
    return rc;
}

SNAPPROF_API __attribute__((noinline)) int snapprof_heap_note_alloc(void *ptr, size_t size)
{
    size_t interval = atomic_load_explicit(&snapprof__heap.interval, memory_order_relaxed);
    if (ptr == NULL)
        return -EINVAL;
    if (interval == 0)
        return 0;
    heap_tls_t *s = &tls;
    if (size < s->left) {
        s->left -= size;
        return 0;
    }
    return slow_path((uintptr_t)ptr, size, interval, (uintptr_t)__builtin_return_address(0));
}

/* The hooks' slow path (heap_hook_abi.h): their countdown c did not take
 * this allocation. gen is read before the interval, and a session's start
 * or stop stores the interval before it bumps gen: a countdown marked with
 * the new gen was set from the new interval. */
static int hook_alloc(void *ptr, size_t size, snapprof__heap_hook_count_t *c, uintptr_t caller_pc)
{
    int e = errno;
    uint32_t gen = atomic_load_explicit(&snapprof__heap_hooks->gen, memory_order_acquire);
    size_t interval = atomic_load_explicit(&snapprof__heap.interval, memory_order_relaxed);
    int rc = 0;
    if (interval == 0) {
        c->left = UINT64_MAX; /* no call until sampling starts (gen moves) */
    } else {
        if (c->gen != gen)
            c->left = 0; /* a new session: the thread draws its own */
        rc = apply_rule(&c->left, (uintptr_t)ptr, size, interval, caller_pc);
    }
    c->gen = gen;
    errno = e;
    return rc;
}

/* Attaches to the hooks' library when it is loaded: from now on its hooks
 * count down in their own TLS and call hook_alloc() only when a countdown
 * runs out, and frees look at the filter this library keeps. Runs before
 * any session can start. */
__attribute__((constructor)) static void attach_hooks(void)
{
    snapprof__heap_hook_t *h = &snapprof__heap_hook_v1;
    if (h == NULL) {
        /* No preload: the GOT hooks (heap_got/), if installed, count down
         * against this library's own state with the same slow path. */
        atomic_store(&snapprof__heap_own_hook.alloc_slow, hook_alloc);
        return;
    }
    snapprof__heap_hooks = h;
    atomic_store(&h->alloc_slow, hook_alloc);
    /* Raised by the hooks if they resolved before we got here. */
    snapprof__heap_filter_zero(h->filter);
    hooks_changed();
}

SNAPPROF_API int snapprof_heap_note_free(void *ptr)
{
    /* One relaxed load of the filter's bucket for a block never sampled,
     * here rather than in the set's code so that a free of the program
     * pays no second call: the bucket was raised before the block's insert,
     * which happened before the program had its address, so a free of a
     * sampled block sees it above 0. */
    if (ptr == NULL || !snapprof__heap_filter_hit((uintptr_t)ptr))
        return 0;
    if (!snapprof__heap_set_remove((uintptr_t)ptr))
        return 0;
    int e = errno; /* the caller's, whatever the futex wake-up does */
    snapprof__heap_free_rec_t rec = {
        .gen = atomic_load_explicit(&snapprof__heap.gen, memory_order_relaxed),
        .seq = atomic_fetch_add_explicit(&snapprof__heap.seq, 1, memory_order_relaxed),
        .time_ns = snapprof__monotonic_ns(),
        .addr = (uintptr_t)ptr,
    };
    if (snapprof__heap_free_push(&rec) != 0)
        atomic_fetch_add_explicit(&snapprof__heap.frees_lost, 1, memory_order_relaxed);
    errno = e;
    return 1;
}

SNAPPROF_API void snapprof_heap_ignore_begin(void)
{
    tls.guard++;
}

SNAPPROF_API void snapprof_heap_ignore_end(void)
{
    if (tls.guard > 0)
        tls.guard--;
}

void snapprof__heap_set_seams(const snapprof__heap_seams_t *seams)
{
    size_t interval = seams ? seams->rule_only_interval : 0;
    atomic_store(&g_rule_only, interval != 0);
    atomic_store(&snapprof__heap.interval, interval);
    hooks_changed();
}

void snapprof__heap_mute_thread(void)
{
    tls.muted = 1;
}

void snapprof__heap_guard_enter(void)
{
    tls.guard++;
}

void snapprof__heap_guard_leave(void)
{
    if (tls.guard > 0)
        tls.guard--;
}

/* ------------------------------------------------------------------------ */
/* Sessions                                                                 */
/* ------------------------------------------------------------------------ */

/* The pool's delegate: the labels in force, as the signal handler takes
 * them. Async-signal-safe. */
static void on_capture(void *ctx, void *extra)
{
    snapprof__heap_state_t *h = ctx;
    snapprof__labels_capture(&((snapprof__heap_extra_t *)extra)->labels);
    void (*more)(void *) = atomic_load_explicit(&h->more, memory_order_relaxed);
    if (more)
        more((uint8_t *)extra + SNAPPROF__HEAP_TAIL_OFFSET);
}

/* The child of a fork() has no sampling thread: a profile inherited from
 * the parent is not drained there, so heap sampling stops in the child
 * (a profiler started there owns it anew). */
static void fork_child(void)
{
    atomic_store_explicit(&snapprof__heap.interval, 0, memory_order_relaxed);
    hooks_changed();
    snapprof__heap.owner = NULL;
}

static pthread_once_t g_fork_once = PTHREAD_ONCE_INIT;

static void fork_once(void)
{
    pthread_atfork(NULL, NULL, fork_child);
}

/* Sampler lock held. */
int snapprof__heap_start(const void *owner, size_t interval, uint32_t *kick,
                         const snapprof__heap_more_t *more)
{
    snapprof__heap_state_t *h = &snapprof__heap;
    if (h->owner && h->owner != owner)
        return -EBUSY;
    pthread_once(&g_fork_once, fork_once);
    if (!h->ready) {
        /* 128 slots of 64 KiB (8 MiB of address space, resident only as
         * far as copies reach): a sampled allocation every 512 KiB is rare
         * next to CPU captures, and a burst beyond them is dropped and
         * counted, never waited for. */
        size_t tail = more && more->capture ? more->tail_size : 0;
        int rc = snapprof__capture_pool_init(
            &h->pool, 128, 64u << 10,
            tail ? SNAPPROF__HEAP_TAIL_OFFSET + tail : sizeof(snapprof__heap_extra_t), kick);
        if (rc != 0)
            return rc;
        h->ring = calloc(SNAPPROF__HEAP_FREE_RING, sizeof *h->ring);
        if (!h->ring) {
            snapprof__capture_pool_destroy(&h->pool);
            return -ENOMEM;
        }
        for (uint64_t i = 0; i < SNAPPROF__HEAP_FREE_RING; i++)
            atomic_store_explicit(&h->ring[i].turn, i, memory_order_relaxed);
        h->delegate = (snapprof__capture_delegate_t){.on_capture = on_capture, .ctx = h};
        h->pool.delegate = &h->delegate;
        h->tail_size = tail;
        h->ready = 1;
    }
    int rc = snapprof__heap_set_maintain();
    if (rc != 0)
        return rc;
    /* Entries left by a hook that raced the last session's end. */
    snapprof__heap_set_clear();
    h->owner = owner;
    /* The slots were made once: a tail they have no room for is left out. */
    atomic_store(&h->more,
                 more && more->capture && more->tail_size <= h->tail_size ? more->capture : NULL);
    atomic_fetch_add(&h->gen, 1);
    atomic_store(&h->dropped_set_full, 0);
    atomic_store(&h->dropped_no_stack, 0);
    atomic_store(&h->frees_lost, 0);
    atomic_store(&h->dropped_no_slot, 0);
    atomic_store(&h->stack_lookups, 0);
    atomic_store(&h->interval, interval);
    hooks_changed();
    return 0;
}

void snapprof__heap_pause(const void *owner)
{
    if (snapprof__heap.owner == owner) {
        atomic_store(&snapprof__heap.interval, 0);
        hooks_changed();
    }
}

int snapprof__heap_owned_by(const void *owner)
{
    return owner != NULL && snapprof__heap.owner == owner;
}

int snapprof__heap_due(const void *owner)
{
    snapprof__heap_state_t *h = &snapprof__heap;
    if (!snapprof__heap_owned_by(owner))
        return 0;
    if (atomic_load_explicit(&h->pool.full, memory_order_relaxed) >= h->pool.kick_at)
        return 1;
    if (snapprof__heap_drain_behind())
        return 1;
    uint64_t tail = atomic_load_explicit(&h->ring_tail, memory_order_relaxed);
    if (tail - atomic_load_explicit(&h->ring_head, memory_order_relaxed) >=
        SNAPPROF__HEAP_FREE_RING / 2)
        return 1;
    return snapprof__heap_set_nearly_full();
}

void snapprof__heap_stats(const void *owner, snapprof_stats_t *out)
{
    snapprof__heap_state_t *h = &snapprof__heap;
    if (!snapprof__heap_owned_by(owner))
        return;
    out->heap_dropped_no_slot = atomic_load(&h->dropped_no_slot);
    out->heap_dropped_set_full = atomic_load(&h->dropped_set_full);
    out->heap_dropped_no_stack = atomic_load(&h->dropped_no_stack);
    out->heap_frees_lost = atomic_load(&h->frees_lost);
    out->heap_stack_lookups = atomic_load(&h->stack_lookups);
}

snapprof__heap_hook_t *snapprof__heap_hook_shared(void)
{
    return snapprof__heap_hooks;
}

int snapprof__heap_hooks_preloaded(void)
{
    return &snapprof__heap_hook_v1 != NULL;
}

/* The GOT patcher's look for modules loaded or unloaded (heap_got/). */
static _Atomic(snapprof__heap_tick_fn) g_tick;

void snapprof__heap_set_tick(snapprof__heap_tick_fn fn)
{
    atomic_store_explicit(&g_tick, fn, memory_order_release);
}

void snapprof__heap_tick(void)
{
    snapprof__heap_tick_fn fn = atomic_load_explicit(&g_tick, memory_order_acquire);
    if (fn != NULL)
        fn();
}
