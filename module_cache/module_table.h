/* The module table (module_table.c): what module_lookup.c asks of it.
 * Private to module_cache/. Not async-signal-safe; any thread. */
#ifndef SNAPPROF_MODULE_CACHE_MODULE_TABLE_H
#define SNAPPROF_MODULE_CACHE_MODULE_TABLE_H

#include <snapprof/snapprof.h>

#include <stdint.h>

/* The loaded object (or executable mapping) holding addr in a stack copied
 * at when_ns (CLOCK_MONOTONIC, 0 = now), or an unloaded one that may still
 * have been mapped then; NULL when none. Rescans when a miss or the
 * loader's counters call for it. JIT regions are not looked at. */
const snapprof_module_t *snapprof__module_table_find(uintptr_t addr, uint64_t when_ns);

#endif
