/* Module cache: which loaded module holds an address, and its symbols.
 * Internal interface; the public part is snapprof_module_find() and
 * snapprof_symbolize() in <snapprof/snapprof.h>.
 *
 * The cache is process-wide and lives as long as the process. It is filled
 * from dl_iterate_phdr() and /proc/self/maps on the sampling thread (or any
 * caller thread), never in the signal handler. Entries are never freed:
 * unloaded modules are marked is_loaded = 0 and keep answering for frames
 * that already point at them. */
#ifndef SNAPPROF_MODULE_CACHE_H
#define SNAPPROF_MODULE_CACHE_H

#include <snapprof/snapprof.h>

/* Rescans the loaded modules now. Returns 0 or a negative errno. */
int snapprof__module_cache_refresh(void);

/* Stores up to max pointers to known modules (loaded and unloaded, in
 * address order of the loaded ones first) in out; returns the total count. */
size_t snapprof__module_cache_list(const snapprof_module_t **out, size_t max);

/* The main executable's module, or NULL if it could not be found. */
const snapprof_module_t *snapprof__module_cache_main(void);

#endif
