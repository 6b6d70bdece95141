/* The perf map reader (jit_perf_map.c): what jit_lookup.c asks of it.
 * Private to module_cache/. Not async-signal-safe; any thread. */
#ifndef SNAPPROF_MODULE_CACHE_JIT_PERF_MAP_H
#define SNAPPROF_MODULE_CACHE_JIT_PERF_MAP_H

#include <snapprof/jit.h>

#include <stdint.h>

/* The perf map region holding addr when a stack copied at when_ns
 * (CLOCK_MONOTONIC, 0 = now) was taken, from the lines already read; on a
 * hit, the file is looked at again when it was not in the last 10 ms (a
 * JIT that reuses memory writes a new line for the same address). NULL
 * when none. */
const snapprof_module_t *snapprof__jit_perf_map_find(uintptr_t addr, uint64_t when_ns);

/* Fills perf_map_regions and the perf_map_* counters of out. */
void snapprof__jit_perf_map_stats(snapprof_jit_stats_t *out);

#endif
