/* The attaching stand-in for the heap sampler (test_preload_heap_attach.c):
 * it speaks the hooks' fast-path protocol (heap/heap_hook_abi.h) with a
 * fixed countdown instead of a random one, so that a program knows exactly
 * which of its allocations cross it, and counts what the hooks ask of it.
 * Test-only, never shipped. Programs find its functions with dlsym. */
#ifndef SNAPPROF_TESTS_TEST_PRELOAD_HEAP_ATTACH_H
#define SNAPPROF_TESTS_TEST_PRELOAD_HEAP_ATTACH_H

#include <stdint.h>

/* Every countdown it draws is this many bytes. */
#define HA_INTERVAL 10000

typedef struct ha_totals {
    uint64_t slow;          /* calls of its slow path */
    uint64_t draws;         /* countdowns drawn for a thread's first allocation
                               (or the first of a new gen) */
    uint64_t samples;       /* allocations that crossed a countdown */
    uint64_t sampled_bytes; /* their sizes */
    uint64_t legacy_allocs; /* snapprof_heap_note_alloc calls (none once attached) */
    uint64_t sampled_frees; /* note_free of a live sampled block */
    uint64_t other_frees;   /* note_free of anything else (the filter let it by) */
} ha_totals_t;

/* test_heap_attach_totals(&t) */
typedef void (*ha_totals_fn)(ha_totals_t *t);
/* test_heap_attach_bump(): a session starts anew (gen moves). */
typedef void (*ha_bump_fn)(void);

#endif
