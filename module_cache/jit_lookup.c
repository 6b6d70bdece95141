/* JIT lookups for the module cache: registered regions (jit_regions.c)
 * first, then the perf map's (jit_perf_map.c), and the statistics of both.
 * The top of the JIT part: it calls into both files, neither calls it.
 *
 * NOT async-signal-safe (a lookup may read the perf map); any thread. */
#include "module_cache/jit_perf_map.h"
#include "module_cache/jit_regions.h"
#include "module_cache/jit_regions_internal.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

const snapprof_module_t *snapprof__jit_find(uintptr_t addr, uint64_t when_ns)
{
    if (!snapprof__jit_any())
        return NULL;
    const snapprof_module_t *m = snapprof__jit_api_find(addr, when_ns);
    if (m != NULL)
        return m;
    return snapprof__jit_perf_map_find(addr, when_ns);
}

SNAPPROF_API int snapprof_jit_get_stats(snapprof_jit_stats_t *out)
{
    if (out == NULL)
        return -EINVAL;
    memset(out, 0, sizeof *out);
    snapprof__jit_api_stats(out);
    snapprof__jit_perf_map_stats(out);
    return 0;
}
