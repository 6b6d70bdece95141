/* JIT code regions: what jit_regions.c (the snapshots, their tables and
 * the API) offers the files above it, jit_perf_map.c (the perf map reader)
 * and jit_lookup.c (lookups across both tables). Private to module_cache/;
 * jit_regions.c calls nothing in those two. */
#ifndef SNAPPROF_MODULE_CACHE_JIT_REGIONS_INTERNAL_H
#define SNAPPROF_MODULE_CACHE_JIT_REGIONS_INTERNAL_H

#include "common/arena.h"
#include "common/fork_resets.h"
#include "module_cache/jit_regions.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------------ */
/* Snapshots and tables (jit_regions.c)                                     */
/* ------------------------------------------------------------------------ */

typedef struct snapshot {
    size_t n_live, n_dead;
    uintptr_t dead_max_len;        /* the longest dead region: bounds a search */
    snapprof__jit_region_t **live; /* sorted by start, disjoint */
    snapprof__jit_region_t **dead; /* sorted by start; may overlap */
    struct snapshot *retired_next;
    uint64_t retired_epoch;
    snapprof__jit_region_t *slots[]; /* live, then dead */
} snapshot_t;

typedef struct table {
    _Atomic(snapshot_t *) current; /* NULL until the first change */
    pthread_mutex_t lock;          /* held by this table's writers only */
    snapprof__arena_t arena;       /* regions and names; under lock */
} table_t;

/* Retires old (already replaced, may be NULL) and frees what no reader can
 * reach any more. Never waits for readers. */
void snapprof__jit_retire(snapshot_t *old);

/* The region that went away from [start, limit) last: one of going (live
 * regions of s going away now, sorted by start, disjoint), else the newest
 * overlapping one in the graveyard of s. NULL when none. */
const snapprof__jit_region_t *snapprof__jit_predecessor(const snapshot_t *s,
                                                        snapprof__jit_region_t *const *going,
                                                        size_t n_going, uintptr_t start,
                                                        uintptr_t limit);

/* Builds the snapshot that follows old (may be NULL): its live regions
 * minus gone plus born, and its dead regions plus gone. NULL when out of
 * memory. */
snapshot_t *snapprof__jit_snapshot_next(const snapshot_t *old, snapprof__jit_region_t *const *gone,
                                        size_t n_gone, snapprof__jit_region_t *const *born,
                                        size_t n_born);

/* Makes next the table's snapshot. Under t->lock. */
void snapprof__jit_publish(table_t *t, snapshot_t *next);

/* A new live region, in t's arena; name is copied (name_len bytes). Under
 * t->lock. NULL when out of memory. */
snapprof__jit_region_t *snapprof__jit_region_new(table_t *t, uintptr_t start, uintptr_t limit,
                                                 const char *name, size_t name_len,
                                                 const char *path,
                                                 const snapprof_jit_layout_t *layout, uint64_t now);

/* Marks r as gone at when. */
void snapprof__jit_region_kill(snapprof__jit_region_t *r, uint64_t when);

/* Checks layout (NULL: frame pointer) and stores the one to use in out. */
int snapprof__jit_layout_check(const snapprof_jit_layout_t *layout, snapprof_jit_layout_t *out);

/* Registers the fork() child handler of the JIT tables' locks, once; called
 * before any of them is taken. */
void snapprof__jit_fork_watch(void);

/* Has the fork() child handler put table t right too: when the child finds
 * t->lock held, it takes it anew, calls reset (may be NULL) for what the
 * table's owner keeps under that lock, and counts note. Once per table,
 * before its lock is first taken. */
void snapprof__jit_table_watch(table_t *t, snapprof__fork_lock_t note, void (*reset)(void));

/* ------------------------------------------------------------------------ */
/* Lookups (jit_regions.c)                                                  */
/* ------------------------------------------------------------------------ */

/* Whether any table has ever held a region: one relaxed load, inline,
 * because snapprof__jit_find() asks for every frame of every sample. Out of
 * line (jit_lookup.c calling into jit_regions.c) it cost 11 instructions a
 * frame, 1.2 % of bench_unwind's unwinding (bench/bench_callgrind.sh). */
extern atomic_int snapprof__jit_any_flag;
static inline int snapprof__jit_any(void)
{
    return atomic_load_explicit(&snapprof__jit_any_flag, memory_order_relaxed);
}

/* The region of table t holding addr in a stack copied at when_ns (0:
 * now), as a module; NULL when none. Lock-free. */
const snapprof_module_t *snapprof__jit_table_lookup(table_t *t, uintptr_t addr, uint64_t when_ns);

/* The same in the table of regions registered through the API. */
const snapprof_module_t *snapprof__jit_api_find(uintptr_t addr, uint64_t when_ns);

/* How many regions table t holds live now. Lock-free. */
size_t snapprof__jit_table_live(table_t *t);

/* Fills the regions_* counters of out (the API's table). */
void snapprof__jit_api_stats(snapprof_jit_stats_t *out);

#endif
