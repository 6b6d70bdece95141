/* What the allocation hooks (libsnapprof-heap.so, preload_heap/) and the
 * heap sampler (libsnapprof.so, heap/) share so that an allocation that is
 * not sampled, and the free of a block that never was, cost the hooks a
 * few instructions and no call: the per-thread byte countdown kept in the
 * hooks' own TLS, and a filter of the addresses that may be sampled blocks.
 * Internal, never installed.
 *
 * The hooks' library defines one snapprof__heap_hook_t, exported as
 * snapprof__heap_hook_v1 (the version is in the name: a sampler and hooks
 * from different trees that disagree on the layout never meet; the struct
 * stays all zero as loaded, in .bss, rather than carry a version field
 * that would put its 256 KiB in .data); the sampler refers to it weakly and, when it is
 * there, attaches to it (heap_sampler.c): it installs its slow path, keeps
 * the filter, and bumps gen whenever sampling starts or stops. */
#ifndef SNAPPROF_HEAP_HEAP_HOOK_ABI_H
#define SNAPPROF_HEAP_HEAP_HOOK_ABI_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* One thread's countdown, in the hooks' initial-exec TLS (there until the
 * thread is gone, also in its teardown). The hooks take an allocation of n
 * bytes without a call when gen equals the shared gen and n < left, and
 * then subtract n; otherwise (the countdown crossed, was never drawn, or
 * sampling started or stopped since) they call alloc_slow. */
typedef struct snapprof__heap_hook_count {
    uint64_t left; /* bytes until the next sample; 0: none drawn */
    /* gen then depth: the hooks compare both in one 64-bit load (depth 0,
     * gen current) on little-endian machines. */
    uint32_t gen;   /* the shared gen that left belongs to */
    uint32_t depth; /* the hooks' own reentry counter; the sampler leaves it */
} snapprof__heap_hook_count_t;

_Static_assert(offsetof(snapprof__heap_hook_count_t, depth) ==
                   offsetof(snapprof__heap_hook_count_t, gen) + 4,
               "gen and depth are read as one word");

/* The filter: a counter per bucket of addresses, the number of sampled
 * blocks in the sampler's live set whose address falls in it. A free whose
 * bucket counts 0 was never sampled (or was freed already); only the others
 * look in the set. The sampler raises a bucket before the address goes into
 * the set (so before the program has it) and lowers it after the entry
 * left, so a free of a live sampled block always sees it above 0.
 *
 * A stand-in sampler that defines only the public note functions (and so
 * never attaches) is told of every free: the hooks set every bucket to 1
 * when they resolve the allocator and find no slow path installed. The
 * sampler zeroes them when it attaches, before any session starts (two
 * threads resolving and attaching at once could leave them raised: then
 * every free looks in the set, slower but still right). */
#define SNAPPROF__HEAP_FILTER_BITS 16
#define SNAPPROF__HEAP_FILTER_SIZE ((size_t)1 << SNAPPROF__HEAP_FILTER_BITS)

/* Blocks are 16-byte aligned: the low 4 bits say nothing, the next 16 pick
 * the bucket (two instructions in the hooks). Small blocks, the common
 * case, lie densely and spread over all buckets; big page-aligned blocks
 * share fewer buckets, but their frees cost a system call anyway. */
static inline size_t snapprof__heap_filter_index(uintptr_t a)
{
    return (size_t)(a >> 4) & (SNAPPROF__HEAP_FILTER_SIZE - 1);
}

/* Zeroes the filter (an attaching sampler; see above). */
static inline void snapprof__heap_filter_zero(_Atomic uint32_t *filter)
{
    for (size_t i = 0; i < SNAPPROF__HEAP_FILTER_SIZE; i++)
        atomic_store_explicit(&filter[i], 0, memory_order_relaxed);
}

/* The sampler's slow path for an allocation of size bytes at ptr that the
 * countdown c did not take (see above): applies the rule on c (draws it when
 * it belongs to another gen or was never drawn, samples and draws afresh
 * when size crosses it, sets it so that no sampling means no call), and
 * records a sample. caller_pc: a return address inside the hooks, whose
 * frames the drain cuts. Leaves errno as it found it. Returns 1 when
 * sampled. */
typedef int (*snapprof__heap_hook_alloc_fn)(void *ptr, size_t size, snapprof__heap_hook_count_t *c,
                                            uintptr_t caller_pc);

typedef struct snapprof__heap_hook {
    _Atomic uint32_t filter[SNAPPROF__HEAP_FILTER_SIZE]; /* first: no offset to add */
    _Atomic uint32_t gen; /* bumped by the sampler at every start and stop */
    _Atomic(snapprof__heap_hook_alloc_fn) alloc_slow; /* NULL until attached */
} snapprof__heap_hook_t;

#endif
