/* JIT code regions inside the module cache: internal interface of
 * jit_regions.c (the tables and registered regions), jit_perf_map.c (the
 * perf map reader) and jit_lookup.c (lookups across both). The public part
 * is <snapprof/jit.h>.
 *
 * Lookups read an immutable snapshot without taking a lock and may run on
 * any thread, concurrently with registrations. None of this is
 * async-signal-safe (lookups may read the perf map; registrations allocate).
 */
#ifndef SNAPPROF_MODULE_CACHE_JIT_REGIONS_H
#define SNAPPROF_MODULE_CACHE_JIT_REGIONS_H

#include <snapprof/jit.h>

#include <stdint.h>

/* One JIT region as the module cache hands it out. Never freed or moved. */
typedef struct snapprof__jit_region {
    snapprof_module_t module; /* first member: handed out as a module of kind JIT */
    const char *name;         /* what its frames are called */
    snapprof_jit_layout_t layout;
    uint64_t live_from_ns; /* CLOCK_MONOTONIC when it was registered (or read) */
    uint64_t dead_from_ns; /* when it went away; UINT64_MAX while live. Atomic. */
    /* The region that last went away from (part of) this one's range before
     * it came, or NULL: the chain back in time at an address reused. */
    const struct snapprof__jit_region *prev;
} snapprof__jit_region_t;

/* A CPython perf trampoline (SNAPPROF_JIT_LAYOUT_CPYTHON_TRAMPOLINE): where
 * its frame is whole, where its call returns, and where its instructions
 * start. Offsets from its first byte. */
typedef struct snapprof__jit_trampoline {
    uint8_t size;        /* bytes, the whole region */
    uint8_t body;        /* from here to the ret: return address at [rsp + 8] */
    uint8_t call_return; /* just after `call *%rcx`: its callee's return address */
    uint8_t saves_fp;    /* the body keeps the caller's rbp at [rsp] */
    uint16_t starts;     /* bit i: an instruction starts at offset i */
} snapprof__jit_trampoline_t;

/* The trampoline shape of that size, or NULL when none has it. */
const snapprof__jit_trampoline_t *snapprof__jit_trampoline_shape(uintptr_t size);

/* The region behind a module of kind SNAPPROF_MODULE_JIT, else NULL. */
const snapprof__jit_region_t *snapprof__jit_region_of(const snapprof_module_t *module);

/* The JIT module holding addr when a stack copied at when_ns (CLOCK_MONOTONIC;
 * 0 means "now") was taken: registered regions first, then perf map regions
 * already read. No I/O. NULL when none. */
const snapprof_module_t *snapprof__jit_find(uintptr_t addr, uint64_t when_ns);

/* As snapprof__jit_find() for perf map regions, after reading lines the perf
 * map gained since it was last read (if it grew and was not checked in the
 * last millisecond). For addresses no native module holds. Defined in
 * jit_perf_map.c. */
const snapprof_module_t *snapprof__jit_find_after_miss(uintptr_t addr, uint64_t when_ns);

/* Fuzzing seams (fuzz/fuzz_perf_map.c). The first reads what the perf map
 * gained now, without the usual wait between looks. The second forgets the
 * perf map altogether, as if it had never been configured or read: its
 * regions, names and snapshots are freed, so that millions of perf maps can
 * be read in one process. Only while no other thread looks anything up or
 * holds a perf map region. */
void snapprof__jit_perf_map_refresh_now(void);
void snapprof__jit_perf_map_forget(void);

#endif
