/* The test consumer of the heap hooks (test_preload_heap_consumer.c): a
 * stand-in for the heap sampler that defines snapprof_heap_note_alloc and
 * snapprof_heap_note_free, notes every call and answers the test programs.
 * Test-only, never shipped. Programs find its query functions with dlsym,
 * so that they also run where it is not loaded. */
#ifndef SNAPPROF_TESTS_TEST_PRELOAD_HEAP_CONSUMER_H
#define SNAPPROF_TESTS_TEST_PRELOAD_HEAP_CONSUMER_H

#include <stddef.h>
#include <stdint.h>

/* Sizes counted one by one: [0, HC_SMALL) and [HC_BASE, HC_BASE + HC_RANGE).
 * No library allocates in the second range in the programs' windows. */
#define HC_SMALL 64
#define HC_BASE 40000
#define HC_RANGE 4096

typedef struct hc_totals {
    uint64_t allocs;        /* note_alloc calls */
    uint64_t frees;         /* note_free calls */
    uint64_t bytes;         /* sizes noted by note_alloc */
    uint64_t doubles;       /* note_alloc of a pointer already live */
    uint64_t unknown_frees; /* note_free of a pointer never noted (or freed twice) */
    uint64_t nulls;         /* note_alloc(NULL, ...) or note_free(NULL) */
    uint64_t live;          /* noted and not freed */
} hc_totals_t;

/* test_heap_consumer_totals(&t) */
typedef void (*hc_totals_fn)(hc_totals_t *t);
/* test_heap_consumer_size(size, &allocs, &frees): counts of a counted
 * size (both 0 for other sizes); frees counts note_free of blocks noted
 * with that size. */
typedef void (*hc_size_fn)(size_t size, uint64_t *allocs, uint64_t *frees);

#endif
