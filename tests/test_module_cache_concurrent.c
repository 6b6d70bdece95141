/* module_cache_concurrent: finds and symbolizes from several threads while
 * another thread loads and unloads a library, whose constructor uses the
 * cache too (with the loader's lock held); nothing crashes, races or
 * deadlocks. */
#include "test.h"
#include "test_util.h"
#include "module_cache/module_cache.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define READERS 4
#define RUN_NS (1000ull * 1000 * 1000)

static atomic_int g_stop;
static atomic_uintptr_t g_lib_fn; /* an address in the library while loaded, else 0 */
static const snapprof_module_t **g_mods;
static size_t g_nmods;

static atomic_ulong g_ctor_calls;

/* Called by the test library's constructor, inside dlopen(): the cache must
 * find and name the constructor without deadlocking with the loader. */
__attribute__((noinline)) void mc_testlib_ctor_hook(void)
{
    uintptr_t ret = (uintptr_t)__builtin_return_address(0) - 1;
    const snapprof_module_t *m = snapprof_module_find(ret);
    ASSERT_NOT_NULL(m);
    ASSERT_CONTAINS(m->path, "module_cache_testlib");
    snapprof_frame_t frame = {.pc = ret, .module = m, .kind = SNAPPROF_FRAME_NATIVE};
    snapprof_symbol_t sym;
    ASSERT_EQ(snapprof_symbolize(&frame, &sym, 1), 1);
    ASSERT_STR_EQ(sym.name, "mc_testlib_ctor");
    atomic_fetch_add(&g_ctor_calls, 1);
}

static void *reader(void *arg)
{
    uint64_t seed = 0x9e3779b97f4a7c15ull * (uintptr_t)arg + 1;
    unsigned long finds = 0, hits = 0, names = 0;
    while (!atomic_load(&g_stop)) {
        uintptr_t addr;
        uint64_t r = tu_xorshift64(&seed);
        switch (r % 4) {
        case 0: { /* somewhere in a module known at the start */
            const snapprof_module_t *m = g_mods[(r >> 8) % g_nmods];
            addr = m->start + (uintptr_t)((r >> 24) % (m->limit - m->start));
            break;
        }
        case 1: /* in the library, if it is (or was just) loaded */
            addr = atomic_load(&g_lib_fn) + 2;
            break;
        case 2: /* a heap-ish address */
            addr = (uintptr_t)&seed + (uintptr_t)(r >> 40);
            break;
        default: /* anywhere */
            addr = (uintptr_t)(r >> 16);
            break;
        }
        const snapprof_module_t *m = snapprof_module_find(addr);
        finds++;
        if (m != NULL) {
            hits++;
            ASSERT(m->start <= addr && addr < m->limit);
            ASSERT(strlen(m->path) > 0);
            (void)__atomic_load_n(&m->is_loaded, __ATOMIC_RELAXED);
        }
        snapprof_frame_t frame = {.pc = addr, .module = m, .kind = SNAPPROF_FRAME_NATIVE};
        snapprof_symbol_t sym;
        int n = snapprof_symbolize(&frame, &sym, 1);
        ASSERT(n == 0 || n == 1);
        if (n == 1) {
            ASSERT(strlen(sym.name) > 0);
            names++;
        }
        if ((finds & 1023) == 0 && (r & 1))
            ASSERT_EQ(snapprof__module_cache_refresh(), 0);
    }
    printf("reader %lu: %lu finds, %lu hits, %lu names\n", (unsigned long)(uintptr_t)arg, finds,
           hits, names);
    return NULL;
}

static void *loader(void *arg)
{
    unsigned long cycles = 0;
    while (!atomic_load(&g_stop)) {
        void *h = dlopen(MC_TESTLIB_PATH, RTLD_NOW | RTLD_LOCAL);
        ASSERT_NOT_NULL(h);
        uintptr_t fn = (uintptr_t)dlsym(h, "mc_testlib_fn");
        ASSERT(fn != 0);
        atomic_store(&g_lib_fn, fn);
        const snapprof_module_t *m = snapprof_module_find(fn + 2);
        ASSERT_NOT_NULL(m);
        snapprof_frame_t frame = {.pc = fn + 2, .module = m, .kind = SNAPPROF_FRAME_NATIVE};
        snapprof_symbol_t sym;
        ASSERT_EQ(snapprof_symbolize(&frame, &sym, 1), 1);
        ASSERT_STR_EQ(sym.name, "mc_testlib_fn");
        atomic_store(&g_lib_fn, 0);
        ASSERT_EQ(dlclose(h), 0);
        cycles++;
    }
    printf("loader: %lu dlopen/dlclose cycles, %lu constructor hooks\n", cycles,
           atomic_load(&g_ctor_calls));
    ASSERT_UEQ(atomic_load(&g_ctor_calls), cycles);
    return NULL;
}

static void test_concurrent(void)
{
    ASSERT_EQ(snapprof__module_cache_refresh(), 0);
    size_t n = snapprof__module_cache_list(NULL, 0);
    g_mods = calloc(n, sizeof *g_mods);
    ASSERT_NOT_NULL(g_mods);
    n = snapprof__module_cache_list(g_mods, n);
    /* Only the loaded ones (listed first); they stay loaded. */
    while (g_nmods < n && g_mods[g_nmods]->is_loaded)
        g_nmods++;
    ASSERT_GT(g_nmods, 0);

    pthread_t readers[READERS], load;
    for (uintptr_t i = 0; i < READERS; i++)
        ASSERT_EQ(pthread_create(&readers[i], NULL, reader, (void *)i), 0);
    ASSERT_EQ(pthread_create(&load, NULL, loader, NULL), 0);
    uint64_t end = tu_mono_ns() + RUN_NS;
    while (tu_mono_ns() < end) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    atomic_store(&g_stop, 1);
    for (int i = 0; i < READERS; i++)
        ASSERT_EQ(pthread_join(readers[i], NULL), 0);
    ASSERT_EQ(pthread_join(load, NULL), 0);
    printf("%zu modules known at the end\n", snapprof__module_cache_list(NULL, 0));
    free(g_mods);
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"concurrent", test_concurrent},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
