/* A stand-in for the heap sampler that attaches to the hooks as
 * libsnapprof.so does (heap/heap_hook_abi.h): its slow path keeps every
 * thread's countdown in the hooks' TLS, always drawn as HA_INTERVAL bytes,
 * and it keeps the hooks' filter for the blocks it samples. So a program
 * knows which of its allocations the hooks must hand to the slow path (a
 * thread's first, and each one that reaches the countdown) and which frees
 * they must tell (exactly those of sampled blocks), and checks it. Runs
 * inside malloc: no malloc, no lock. Test-only (tests/), never shipped. */
#include "test_preload_heap_attach.h"

#include "heap/heap_hook_abi.h"

#include <stdatomic.h>
#include <stddef.h>

#define EXPORT __attribute__((visibility("default")))

extern snapprof__heap_hook_t snapprof__heap_hook_v1 __attribute__((weak));

static ha_totals_t ha_tot;

/* The live sampled blocks: few (the programs keep them under HA_LIVE). */
#define HA_LIVE 4096
static _Atomic uintptr_t ha_live[HA_LIVE];

#define ADD(x, n) __atomic_fetch_add(&(x), (n), __ATOMIC_RELAXED)

static void ha_remember(uintptr_t p)
{
    for (size_t i = 0; i < HA_LIVE; i++) {
        uintptr_t expect = 0;
        if (atomic_compare_exchange_strong(&ha_live[i], &expect, p))
            return;
    }
}

static int ha_forget(uintptr_t p)
{
    for (size_t i = 0; i < HA_LIVE; i++) {
        uintptr_t expect = p;
        if (atomic_compare_exchange_strong(&ha_live[i], &expect, 0))
            return 1;
    }
    return 0;
}

static int ha_slow(void *ptr, size_t size, snapprof__heap_hook_count_t *c, uintptr_t caller_pc)
{
    (void)caller_pc;
    snapprof__heap_hook_t *h = &snapprof__heap_hook_v1;
    uint32_t gen = atomic_load(&h->gen);
    ADD(ha_tot.slow, 1);
    if (c->gen != gen || c->left == 0) {
        ADD(ha_tot.draws, 1);
        c->left = HA_INTERVAL;
    }
    c->gen = gen;
    if (size < c->left) {
        c->left -= size;
        return 0;
    }
    c->left = HA_INTERVAL; /* drawn afresh after a sample */
    ADD(ha_tot.samples, 1);
    ADD(ha_tot.sampled_bytes, size);
    uintptr_t p = (uintptr_t)ptr;
    /* Raised before the program has the block, as the sampler does. */
    atomic_fetch_add(&h->filter[snapprof__heap_filter_index(p)], 1);
    ha_remember(p);
    return 1;
}

/* Defined so that the hooks see a sampler; once attached they should call
 * note_alloc never, and note_free only for raised buckets. */
EXPORT int snapprof_heap_note_alloc(void *ptr, size_t size)
{
    (void)ptr;
    (void)size;
    ADD(ha_tot.legacy_allocs, 1);
    return 0;
}

EXPORT int snapprof_heap_note_free(void *ptr)
{
    uintptr_t p = (uintptr_t)ptr;
    if (ha_forget(p)) {
        atomic_fetch_sub(&snapprof__heap_hook_v1.filter[snapprof__heap_filter_index(p)], 1);
        ADD(ha_tot.sampled_frees, 1);
    } else {
        ADD(ha_tot.other_frees, 1);
    }
    return 0;
}

EXPORT void test_heap_attach_totals(ha_totals_t *t)
{
    *t = (ha_totals_t){
        .slow = __atomic_load_n(&ha_tot.slow, __ATOMIC_RELAXED),
        .draws = __atomic_load_n(&ha_tot.draws, __ATOMIC_RELAXED),
        .samples = __atomic_load_n(&ha_tot.samples, __ATOMIC_RELAXED),
        .sampled_bytes = __atomic_load_n(&ha_tot.sampled_bytes, __ATOMIC_RELAXED),
        .legacy_allocs = __atomic_load_n(&ha_tot.legacy_allocs, __ATOMIC_RELAXED),
        .sampled_frees = __atomic_load_n(&ha_tot.sampled_frees, __ATOMIC_RELAXED),
        .other_frees = __atomic_load_n(&ha_tot.other_frees, __ATOMIC_RELAXED),
    };
}

EXPORT void test_heap_attach_bump(void)
{
    atomic_fetch_add(&snapprof__heap_hook_v1.gen, 1);
}

/* Attached as libsnapprof.so attaches: the slow path, then the filter,
 * then a new gen so that countdowns set before are taken again. */
__attribute__((constructor)) static void ha_attach(void)
{
    snapprof__heap_hook_t *h = &snapprof__heap_hook_v1;
    if (h == NULL)
        return;
    atomic_store(&h->alloc_slow, ha_slow);
    snapprof__heap_filter_zero(h->filter);
    atomic_fetch_add(&h->gen, 1);
}
