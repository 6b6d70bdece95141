/* What every allocation hook does around the allocator it forwards to: the
 * reentry guard, the thread's byte countdown, the filter of frees, and the
 * calls into the heap sampler. Included by the interposing library
 * (heap_preload.c, heap_preload_cxx.c); internal, never installed.
 *
 * The includer defines first: HK_DEPTH, the name of its own initial-exec
 * TLS depth counter (one per library, shared by every hook of that
 * library, so that operator new reaching malloc, or reallocarray reaching
 * realloc, notes once: only the outermost hook notes); HK_COUNT, its
 * initial-exec TLS countdown (a snapprof__heap_hook_count_t); HK_SHARED,
 * its snapprof__heap_hook_t (heap/heap_hook_abi.h), which the sampler
 * attaches to. Initial-exec TLS lives in the thread's static TLS block
 * until the thread is gone, so frees that run in thread teardown, after
 * every TLS destructor, still find it; the hooks keep no TLS destructor and
 * no per-thread allocation of their own.
 *
 * The common case costs no call: an allocation the countdown takes (a
 * compare and a subtract in the hook), a free whose filter bucket is 0.
 * Only a countdown that runs out (or was never drawn, or belongs to a
 * session that ended) calls the sampler's slow path, and only a free whose
 * bucket is raised calls snapprof_heap_note_free(). A sampler that did not
 * attach (a stand-in that defines only the two public functions) is told
 * of every allocation and every free, as the hooks always did. */
#ifndef SNAPPROF_PRELOAD_HEAP_HEAP_HOOK_CORE_H
#define SNAPPROF_PRELOAD_HEAP_HEAP_HOOK_CORE_H

#include "heap/heap_hook_abi.h"

#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The allocator's own C functions, as each way in finds them (the
 * preload: dlsym(RTLD_NEXT); the GOT hooks: what the entries held). */
typedef struct hk_real {
    void *(*malloc)(size_t);
    void *(*calloc)(size_t, size_t);
    void *(*realloc)(void *, size_t);
    void *(*reallocarray)(void *, size_t, size_t);
    void (*free)(void *);
    int (*posix_memalign)(void **, size_t, size_t);
    void *(*aligned_alloc)(size_t, size_t);
    void *(*memalign)(size_t, size_t);
    void *(*valloc)(size_t);
    void *(*pvalloc)(size_t);
} hk_real_t;

#if !defined(HK_DEPTH) || !defined(HK_COUNT) || !defined(HK_SHARED)
#error "define HK_DEPTH, HK_COUNT and HK_SHARED before including heap_hook_core.h"
#endif

/* The heap sampler's two entry points (include/snapprof/heap.h, in
 * libsnapprof.so). Weak: a process where no loaded object defines them (the
 * hooks preloaded without the library) runs with hooks that only forward.
 * They are resolved when the hooks' object is relocated, from every object
 * loaded at that time (the preloads and their dependencies), which is
 * before the first allocation can reach a hook. */
extern int snapprof_heap_note_alloc(void *ptr, size_t size)
    __attribute__((weak, visibility("default")));
extern int snapprof_heap_note_free(void *ptr) __attribute__((weak, visibility("default")));

#define HK_LIKELY(x) __builtin_expect(!!(x), 1)
#define HK_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* Enter/leave the outermost hook of this thread. hk_enter() returns 0 when
 * a hook of ours is already running on this thread, or when there is no
 * sampler to tell (then the caller only forwards, as a tail call). */
static inline __attribute__((always_inline)) int hk_enter(void)
{
    if (HK_UNLIKELY(snapprof_heap_note_alloc == NULL || snapprof_heap_note_free == NULL))
        return 0;
    if (HK_UNLIKELY(HK_DEPTH != 0))
        return 0;
    HK_DEPTH = 1;
    return 1;
}

static inline __attribute__((always_inline)) void hk_leave(void)
{
    HK_DEPTH = 0;
}

/* No sampler in the process: the countdown is set so that this thread's
 * allocations never leave the fast path (2^64 bytes). */
static inline __attribute__((always_inline)) int hk_no_sampler(void)
{
    return snapprof_heap_note_alloc == NULL || snapprof_heap_note_free == NULL;
}

static inline __attribute__((always_inline)) void hk_disarm(void)
{
    HK_COUNT.gen = atomic_load_explicit(&HK_SHARED.gen, memory_order_relaxed);
    HK_COUNT.left = UINT64_MAX;
}

/* The fast path of an allocation of n bytes, taken before the allocator is
 * called (so that malloc reaches it by a tail call): returns 1 when the
 * hook only forwards: the countdown took n. Then the countdown is n less even if the
 * allocation fails; the distribution does not change (an exponential
 * countdown has no memory: what is left of it after any bytes is drawn
 * from the same law). Returns 0 when the caller goes the slow way (also
 * in an inner hook of this thread: the outer one notes). Little-endian. */
static inline __attribute__((always_inline)) int hk_take(size_t n)
{
    snapprof__heap_hook_count_t *c = &HK_COUNT;
    /* gen and depth in one load: equal to the shared gen only when no hook
     * of ours runs on this thread (an inner hook goes the slow way, which
     * only forwards). */
    uint64_t key;
    memcpy(&key, &c->gen, sizeof key);
    if (HK_LIKELY(key == atomic_load_explicit(&HK_SHARED.gen, memory_order_relaxed) &&
                  n < c->left)) {
        c->left -= n;
        return 1;
    }
    return 0;
}

/* The countdown did not take an allocation of n bytes at p: the sampler's
 * slow path (which draws, samples, and sets the countdown), or, for a
 * sampler that did not attach, snapprof_heap_note_alloc() for every one.
 * Between hk_enter() returning 1 and hk_leave(). Not inlined: a call only
 * on the rare path. */
static __attribute__((noinline, cold)) void hk_alloc_slow(void *p, size_t n)
{
    snapprof__heap_hook_alloc_fn fn =
        atomic_load_explicit(&HK_SHARED.alloc_slow, memory_order_acquire);
    if (fn != NULL)
        fn(p, n, &HK_COUNT, (uintptr_t)__builtin_return_address(0));
    else
        snapprof_heap_note_alloc(p, n);
}

/* After an allocation of n requested bytes returned p; only between
 * hk_enter() returning 1 (the sampler is there) and hk_leave(). errno stays
 * the allocator's: the sampler's functions leave it as they found it
 * (<snapprof/heap.h>), so the hooks do not save it on every call. */
static inline __attribute__((always_inline)) void hk_note_alloc(void *p, size_t n)
{
    if (p == NULL)
        return;
    snapprof__heap_hook_count_t *c = &HK_COUNT;
    if (HK_LIKELY(c->gen == atomic_load_explicit(&HK_SHARED.gen, memory_order_relaxed) &&
                  n < c->left)) {
        c->left -= n;
        return;
    }
    hk_alloc_slow(p, n);
}

/* 1 when a free of p must be told to the sampler: its filter bucket is
 * raised (p may be a live sampled block; every bucket is, for a sampler
 * that did not attach). */
static inline __attribute__((always_inline)) int hk_free_maybe_sampled(const void *p)
{
    return atomic_load_explicit(&HK_SHARED.filter[snapprof__heap_filter_index((uintptr_t)p)],
                                memory_order_relaxed) != 0;
}

/* Before p is freed (or after a realloc freed it); as hk_note_alloc(). */
static inline __attribute__((always_inline)) void hk_note_free(void *p)
{
    if (p != NULL && HK_UNLIKELY(hk_free_maybe_sampled(p)))
        snapprof_heap_note_free(p);
}

/* realloc's rule, for realloc and reallocarray: the old block is freed
 * when a new one came back, and by glibc's realloc(p, 0) returning NULL;
 * a failing realloc (NULL for n > 0) leaves the old block live and notes
 * nothing. The old block is noted as freed after the allocator returned,
 * since only then is it known whether it was: a sampled block another
 * thread gets at the same address in between is then dropped from the
 * in-use set (a narrow race, an under-count of one sample; the other order
 * would forget every sampled block whose realloc failed). */
static inline __attribute__((always_inline)) void hk_note_realloc(void *old, void *p, size_t n)
{
    if (p != NULL) {
        hk_note_free(old);
        hk_note_alloc(p, n);
    } else if (n == 0) {
        hk_note_free(old);
    }
}

#endif
