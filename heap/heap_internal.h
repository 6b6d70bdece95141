/* What the files of heap/ share: the process-wide state of the heap
 * sampler, the set of live sampled addresses (heap_addresses.c), the
 * capture of a sampled allocation (heap_capture.c) and the queue of frees
 * the drain reads (heap_drain.c). Private to heap/. */
#ifndef SNAPPROF_HEAP_INTERNAL_H
#define SNAPPROF_HEAP_INTERNAL_H

#include "heap/heap_hook_abi.h"
#include "heap/heap_sampler.h"
#include "labels/labels.h"
#include "stack_copier/stack_copier_slots.h"

#include <stdatomic.h>
#include <sys/types.h>

/* What a sampled allocation leaves in its capture slot beside the stack
 * (the slot's delegate area). */
typedef struct snapprof__heap_extra {
    snapprof__label_capture_t labels; /* filled by the pool's delegate */
    uint64_t gen;                     /* the session it was taken in */
    uint64_t seq;                     /* its place among allocations and frees */
    uint64_t bytes;
    uintptr_t addr;
    uintptr_t caller_pc; /* return address into the caller of note_alloc */
    pid_t tid;
    char name[16];
} snapprof__heap_extra_t;

/* Where the owner's tail (snapprof__heap_more_t) starts in a slot's
 * extra area. */
#define SNAPPROF__HEAP_TAIL_OFFSET ((sizeof(snapprof__heap_extra_t) + 63u) & ~(size_t)63u)

/* A free of a sampled block, queued for the drain; or a sampled
 * allocation that found no free capture slot, queued without its stack
 * (alloc 1: its bytes and thread), so that it still counts in the totals
 * and in use until its free. */
typedef struct snapprof__heap_free_rec {
    uint64_t gen, seq, time_ns;
    uintptr_t addr;
    uint64_t bytes; /* an allocation's */
    pid_t tid;      /* an allocation's */
    uint32_t alloc; /* 1: an allocation without its stack; 0: a free */
} snapprof__heap_free_rec_t;

/* The free queue: a bounded multi-producer queue (Vyukov's), one
 * consumer at a time (the drain, under the sampler lock). It also carries
 * the allocations that found no capture slot, in the order of the frees. */
#define SNAPPROF__HEAP_FREE_RING 16384u
typedef struct snapprof__heap_free_cell {
    _Atomic uint64_t turn;
    snapprof__heap_free_rec_t rec;
} snapprof__heap_free_cell_t;

typedef struct snapprof__heap_state {
    _Atomic size_t interval; /* mean bytes between samples; 0: off */
    _Atomic uint64_t gen;    /* the session; bumped at every start */
    _Atomic uint64_t seq;    /* orders allocations and frees */
    const void *owner;       /* the profiler that owns it (sampler lock) */
    int ready;               /* pool and ring made */
    snapprof__capture_pool_t pool;
    snapprof__capture_delegate_t delegate;
    size_t tail_size; /* room for the owner's tail in each slot, set when the pool is made */
    /* The session's tail capture (snapprof__heap_more_t), NULL for none:
     * read by the allocating threads' captures. */
    void (*_Atomic more)(void *tail);
    snapprof__heap_free_cell_t *ring;
    _Atomic uint64_t ring_tail; /* producers */
    _Atomic uint64_t ring_head; /* the consumer's; producers only look */
    /* Hook-side counters, since the session started. */
    _Atomic uint64_t dropped_set_full, dropped_no_stack, frees_lost;
    /* Sampled allocations that found no free capture slot and could not
     * be queued without their stack either (the queue or the set full). */
    _Atomic uint64_t dropped_no_slot;
    /* Reads of /proc/self/maps for a stack's bounds (heap_capture.c). */
    _Atomic uint64_t stack_lookups;
} snapprof__heap_state_t;

extern snapprof__heap_state_t snapprof__heap;

/* ------------------------------------------------------------------------ */
/* The set of live sampled addresses (heap_addresses.c)                     */
/* ------------------------------------------------------------------------ */

/* Entries in the set. Read relaxed; the set's own. */
extern _Atomic long snapprof__heap_live;

/* The filter and gen shared with the allocation hooks (heap_hook_abi.h):
 * theirs when their library is loaded, else this library's own. Set at
 * construction, before any session. */
extern snapprof__heap_hook_t *snapprof__heap_hooks;

/* 1 when addr may be in the set (its filter bucket is raised): what a free
 * looks at first. One relaxed load. */
static inline int snapprof__heap_filter_hit(uintptr_t addr)
{
    return atomic_load_explicit(&snapprof__heap_hooks->filter[snapprof__heap_filter_index(addr)],
                                memory_order_relaxed) != 0;
}

/* Adds addr. Returns 0, or -1 when the set is too full (the caller drops
 * the sample). Lock-free; no allocation. */
int snapprof__heap_set_insert(uintptr_t addr);
/* Removes one entry of addr. Returns 1 when there was one, 0 when not.
 * One relaxed load when addr's filter bucket is 0; else lock-free. */
int snapprof__heap_set_remove(uintptr_t addr);
/* 1 when an insert would find the set too full (a cheap look before the
 * capture). */
int snapprof__heap_set_nearly_full(void);
/* Sampling side (sampler lock): makes the first table; grows (or
 * rebuilds, to shed tombstones) the set before it fills. Returns 0 or
 * -ENOMEM. */
int snapprof__heap_set_maintain(void);
/* Sampling side: removes every entry (the session ended). */
void snapprof__heap_set_clear(void);
/* Entries in the set as counted (what the fast path of a remove reads),
 * and as found in the tables (test seams). */
long snapprof__heap_set_count(void);
long snapprof__heap_set_entries(void);
/* Test seam: the set's current table capacity. */
size_t snapprof__heap_set_capacity(void);

/* ------------------------------------------------------------------------ */
/* The free queue (heap_drain.c)                                            */
/* ------------------------------------------------------------------------ */

/* Queues a free. Returns 0, or -1 when the queue is full (counted).
 * Lock-free; no allocation. */
int snapprof__heap_free_push(const snapprof__heap_free_rec_t *rec);

/* ------------------------------------------------------------------------ */
/* The calling thread's capture (heap_capture.c)                            */
/* ------------------------------------------------------------------------ */

/* Captures the calling thread for a sampled allocation of size bytes at
 * addr, whose caller returns to caller_pc, and records addr as live. When
 * no capture slot is free, queues the allocation without its stack
 * instead. Returns 1, or 0 when the sample was dropped (counted). The
 * thread's guard is held by the caller. */
int snapprof__heap_capture(uintptr_t addr, size_t size, uintptr_t caller_pc);

/* Test seam: the sampling rule alone. Draws the next countdown of a
 * thread-independent state for interval bytes from *rng. */
int64_t snapprof__heap_draw(uint64_t *rng, size_t interval);

/* A thread's first rng state, from raw bits of its own (the clock, its
 * tid, its TLS address): mixed so that threads seeded a few ns apart draw
 * unrelated intervals; never 0. Test seam too (the draws from a fixed
 * seed are fixed). */
uint64_t snapprof__heap_seed(uint64_t raw);

#endif
