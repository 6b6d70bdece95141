/* The module cache's lookups as callers see them: snapprof__module_find_at()
 * and snapprof_module_find() (JIT regions first, then the module table,
 * then the perf map), and snapprof_symbolize(), which names a frame from
 * its JIT region or through the ELF symbolizer (symbols_elf.c). The top of
 * module_cache/: nothing here calls it.
 *
 * NOT async-signal-safe (see module_cache.h); any thread. */
#include "module_cache/jit_regions.h"
#include "module_cache/module_cache.h"
#include "module_cache/module_table.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

const snapprof_module_t *snapprof__module_find_at(uintptr_t addr, uint64_t when_ns)
{
    /* JIT regions first: they need no lock, and JIT code sits in anonymous
     * memory whose maps entry may be newer than the last scan, which would
     * cost a rescan here. */
    const snapprof_module_t *m = snapprof__jit_find(addr, when_ns);
    if (m != NULL)
        return m;
    m = snapprof__module_table_find(addr, when_ns);
    if (m != NULL && m->kind == SNAPPROF_MODULE_NATIVE)
        return m;
    /* Executable memory nobody described: perhaps a perf map names it. */
    const snapprof_module_t *jit = snapprof__jit_find_after_miss(addr, when_ns);
    return jit != NULL ? jit : m;
}

/* Pseudo modules (module_cache.h): published count last, read without a
 * lock. */
#define PSEUDO_MAX 4
static snapprof_module_t pseudo[PSEUDO_MAX];
static snapprof__pseudo_symbolize_cb pseudo_fn[PSEUDO_MAX];
static _Atomic size_t pseudo_count;
static pthread_mutex_t pseudo_lock = PTHREAD_MUTEX_INITIALIZER;

const snapprof_module_t *snapprof__module_pseudo_add(const char *path, uintptr_t start,
                                                     uintptr_t limit,
                                                     snapprof__pseudo_symbolize_cb symbolize)
{
    pthread_mutex_lock(&pseudo_lock);
    size_t n = atomic_load_explicit(&pseudo_count, memory_order_relaxed);
    const snapprof_module_t *m = NULL;
    if (n < PSEUDO_MAX) {
        pseudo[n] = (snapprof_module_t){.start = start,
                                        .limit = limit,
                                        .path = path,
                                        .build_id = "",
                                        .kind = SNAPPROF_MODULE_JIT,
                                        .is_loaded = 1};
        pseudo_fn[n] = symbolize;
        m = &pseudo[n];
        atomic_store_explicit(&pseudo_count, n + 1, memory_order_release);
    }
    pthread_mutex_unlock(&pseudo_lock);
    return m;
}

static snapprof__pseudo_symbolize_cb pseudo_of(const snapprof_module_t *m)
{
    size_t n = atomic_load_explicit(&pseudo_count, memory_order_acquire);
    for (size_t i = 0; i < n; i++)
        if (m == &pseudo[i])
            return pseudo_fn[i];
    return NULL;
}

SNAPPROF_API const snapprof_module_t *snapprof_module_find(uintptr_t addr)
{
    return snapprof__module_find_at(addr, 0);
}

SNAPPROF_API int snapprof_symbolize(const snapprof_frame_t *frame, snapprof_symbol_t *out,
                                    size_t max)
{
    if (frame == NULL || (out == NULL && max > 0))
        return -EINVAL;
    if (max == 0)
        return 0;
    const char *name = frame->name;
    switch (frame->kind) {
    case SNAPPROF_FRAME_JIT:
    case SNAPPROF_FRAME_MARKER:
        if (name == NULL && snapprof__jit_region_of(frame->module) != NULL)
            name = snapprof__jit_region_of(frame->module)->name;
        if (name == NULL)
            return 0;
        out[0] = (snapprof_symbol_t){.name = name, .system_name = name};
        return 1;
    case SNAPPROF_FRAME_NATIVE: {
        const snapprof_module_t *m = frame->module;
        snapprof__pseudo_symbolize_cb fn = m ? pseudo_of(m) : NULL;
        if (fn != NULL)
            return fn(frame->pc, out, max);
        if (m == NULL)
            m = snapprof_module_find(frame->pc);
        const snapprof__jit_region_t *region = snapprof__jit_region_of(m);
        if (region != NULL) {
            /* A frame made by hand in JIT code: its region names it. */
            out[0] = (snapprof_symbol_t){
                .name = region->name, .system_name = region->name, .start = region->module.start};
            return 1;
        }
        if (m == NULL || m->kind != SNAPPROF_MODULE_NATIVE)
            return 0;
        return snapprof__symbols_lookup(m, frame->pc, out, max);
    }
    }
    return -EINVAL;
}
