/* What every allocation hook does around the allocator it forwards to: the
 * reentry guard, errno, and the two calls into the heap sampler. Included
 * by the interposing library (heap_preload.c, heap_preload_cxx.c) and by
 * the GOT patcher (heap_got.c); internal, never installed.
 *
 * The includer defines HK_DEPTH first: the name of its own initial-exec
 * TLS counter (one per library, shared by every hook of that library, so
 * that operator new reaching malloc, or reallocarray reaching realloc,
 * notes once: only the outermost hook notes). Initial-exec TLS lives in
 * the thread's static TLS block until the thread is gone, so frees that run
 * in thread teardown, after every TLS destructor, still find it; the hooks
 * keep no TLS destructor and no per-thread allocation of their own. */
#ifndef SNAPPROF_PRELOAD_HEAP_HEAP_HOOK_CORE_H
#define SNAPPROF_PRELOAD_HEAP_HEAP_HOOK_CORE_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#ifndef HK_DEPTH
#error "define HK_DEPTH (the includer's TLS depth counter) before including heap_hook_core.h"
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

/* After an allocation of n requested bytes returned p; only between
 * hk_enter() returning 1 (the sampler is there) and hk_leave(). errno is
 * the allocator's, whatever the sampler does. */
static inline __attribute__((always_inline)) void hk_note_alloc(void *p, size_t n)
{
    if (p != NULL) {
        int *ep = &errno;
        int e = *ep;
        snapprof_heap_note_alloc(p, n);
        *ep = e;
    }
}

/* Before p is freed (or after a realloc freed it); as hk_note_alloc(). */
static inline __attribute__((always_inline)) void hk_note_free(void *p)
{
    if (p != NULL) {
        int *ep = &errno;
        int e = *ep;
        snapprof_heap_note_free(p);
        *ep = e;
    }
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
