/* Test consumer of the heap hooks: defines the heap sampler's two entry
 * points and counts what the hooks tell it, in a lock-free table of live
 * pointers (no malloc, no lock: it runs inside malloc, in fork children
 * and in thread teardown). It sets errno on every call, as a sampler that
 * makes system calls would, and gives the caller its errno back as the
 * real sampler does (<snapprof/heap.h>): the program must see the
 * allocator's errno. Test-only (tests/), never shipped. */
#include "test_preload_heap_consumer.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

#define HC_SLOTS (1u << 21)
#define HC_TOMB ((uintptr_t)1)

typedef struct hc_slot {
    uintptr_t ptr; /* 0 empty, HC_TOMB removed */
    size_t size;
} hc_slot_t;

static hc_slot_t hc_table[HC_SLOTS];
static hc_totals_t hc_tot;
static uint64_t hc_small_allocs[HC_SMALL], hc_small_frees[HC_SMALL];
static uint64_t hc_range_allocs[HC_RANGE], hc_range_frees[HC_RANGE];

#define ADD(x, n) __atomic_fetch_add(&(x), (n), __ATOMIC_RELAXED)

static uint64_t *hc_counter(size_t size, int freed)
{
    if (size < HC_SMALL)
        return freed ? &hc_small_frees[size] : &hc_small_allocs[size];
    if (size >= HC_BASE && size - HC_BASE < HC_RANGE)
        return freed ? &hc_range_frees[size - HC_BASE] : &hc_range_allocs[size - HC_BASE];
    return NULL;
}

static size_t hc_hash(uintptr_t p)
{
    return (size_t)(((p >> 4) * 0x9e3779b97f4a7c15ull) >> 43) & (HC_SLOTS - 1);
}

static void hc_full(void)
{
    static const char msg[] = "test consumer: table full\n";
    if (write(2, msg, sizeof msg - 1) < 0)
        abort();
    abort();
}

/* Where each note begins: errno clobbered (the hooks must give the program
 * its own back), and a NULL counted and noted no further (1). */
static int hc_enter(void *ptr)
{
    errno = 4321;
    if (ptr != NULL)
        return 0;
    ADD(hc_tot.nulls, 1);
    return 1;
}

/* The operations on one pointer are ordered by the allocator (a block is
 * noted freed before it is freed, noted allocated after it is returned), so
 * only different pointers race, for free slots. */
static int hc_note_alloc(void *ptr, size_t size)
{
    if (hc_enter(ptr))
        return 0;
    uintptr_t p = (uintptr_t)ptr;
    ADD(hc_tot.allocs, 1);
    ADD(hc_tot.bytes, size);
    ADD(hc_tot.live, 1);
    uint64_t *c = hc_counter(size, 0);
    if (c)
        ADD(*c, 1);
    for (;;) {
        hc_slot_t *free_slot = NULL;
        size_t i = hc_hash(p);
        for (size_t n = 0; n < HC_SLOTS; n++, i = (i + 1) & (HC_SLOTS - 1)) {
            uintptr_t v = __atomic_load_n(&hc_table[i].ptr, __ATOMIC_ACQUIRE);
            if (v == p) {
                ADD(hc_tot.doubles, 1);
                ADD(hc_tot.live, -1);
                __atomic_store_n(&hc_table[i].size, size, __ATOMIC_RELAXED);
                return 0;
            }
            if (v == HC_TOMB && free_slot == NULL)
                free_slot = &hc_table[i];
            if (v == 0) {
                if (free_slot == NULL)
                    free_slot = &hc_table[i];
                break;
            }
        }
        if (free_slot == NULL)
            hc_full();
        uintptr_t expect = __atomic_load_n(&free_slot->ptr, __ATOMIC_RELAXED);
        if (expect > HC_TOMB)
            continue; /* taken meanwhile */
        if (__atomic_compare_exchange_n(&free_slot->ptr, &expect, p, 0, __ATOMIC_RELEASE,
                                        __ATOMIC_RELAXED)) {
            /* Read only by the note_free of p, which comes after us. */
            __atomic_store_n(&free_slot->size, size, __ATOMIC_RELAXED);
            return 0;
        }
    }
}

static int hc_note_free(void *ptr)
{
    if (hc_enter(ptr))
        return 0;
    uintptr_t p = (uintptr_t)ptr;
    ADD(hc_tot.frees, 1);
    size_t i = hc_hash(p);
    for (size_t n = 0; n < HC_SLOTS; n++, i = (i + 1) & (HC_SLOTS - 1)) {
        uintptr_t v = __atomic_load_n(&hc_table[i].ptr, __ATOMIC_ACQUIRE);
        if (v == p) {
            size_t size = __atomic_load_n(&hc_table[i].size, __ATOMIC_RELAXED);
            __atomic_store_n(&hc_table[i].ptr, HC_TOMB, __ATOMIC_RELEASE);
            ADD(hc_tot.live, -1);
            uint64_t *c = hc_counter(size, 1);
            if (c)
                ADD(*c, 1);
            return 0;
        }
        if (v == 0)
            break;
    }
    ADD(hc_tot.unknown_frees, 1);
    return 0;
}

EXPORT void test_heap_consumer_totals(hc_totals_t *t)
{
    t->allocs = __atomic_load_n(&hc_tot.allocs, __ATOMIC_RELAXED);
    t->frees = __atomic_load_n(&hc_tot.frees, __ATOMIC_RELAXED);
    t->bytes = __atomic_load_n(&hc_tot.bytes, __ATOMIC_RELAXED);
    t->doubles = __atomic_load_n(&hc_tot.doubles, __ATOMIC_RELAXED);
    t->unknown_frees = __atomic_load_n(&hc_tot.unknown_frees, __ATOMIC_RELAXED);
    t->nulls = __atomic_load_n(&hc_tot.nulls, __ATOMIC_RELAXED);
    t->live = __atomic_load_n(&hc_tot.live, __ATOMIC_RELAXED);
}

EXPORT void test_heap_consumer_size(size_t size, uint64_t *allocs, uint64_t *frees)
{
    uint64_t *a = hc_counter(size, 0), *f = hc_counter(size, 1);
    *allocs = a ? __atomic_load_n(a, __ATOMIC_RELAXED) : 0;
    *frees = f ? __atomic_load_n(f, __ATOMIC_RELAXED) : 0;
}

EXPORT int snapprof_heap_note_alloc(void *ptr, size_t size)
{
    int e = errno;
    int rc = hc_note_alloc(ptr, size);
    errno = e;
    return rc;
}

EXPORT int snapprof_heap_note_free(void *ptr)
{
    int e = errno;
    int rc = hc_note_free(ptr);
    errno = e;
    return rc;
}
