/* Tests of JIT code regions in the module cache: registering, moving and
 * unregistering through <snapprof/jit.h>, lookups as of a stack's capture
 * time, and writers racing readers. */
#include "test.h"
#include "test_jit_util.h"
#include "test_util.h"

#include "module_cache/jit_regions.h"
#include "module_cache/module_cache.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

/* The name a lookup of addr at when_ns gives, or NULL when no JIT module
 * holds it. */
static const char *name_at(uintptr_t addr, uint64_t when_ns)
{
    const snapprof__jit_region_t *r =
        snapprof__jit_region_of(snapprof__module_find_at(addr, when_ns));
    return r ? r->name : NULL;
}

static void sleep_a_little(void)
{
    /* Timestamps on either side of a change must differ. */
    struct timespec ts = {0, 100000};
    nanosleep(&ts, NULL);
}

static void test_register_lookup(void)
{
    uint8_t *code = tj_map(4096);
    uintptr_t a = (uintptr_t)code, b = a + 256;
    ASSERT_OK(snapprof_jit_region_register(a, 256, "js:alpha", NULL));
    snapprof_jit_layout_t fixed = tj_fixed_layout();
    ASSERT_OK(snapprof_jit_region_register(b, 128, "js:beta", &fixed));

    const snapprof_module_t *m = snapprof_module_find(a + 10);
    ASSERT_NOT_NULL(m);
    ASSERT_EQ(m->kind, SNAPPROF_MODULE_JIT);
    ASSERT_STR_EQ(m->path, "[jit]");
    ASSERT_STR_EQ(m->build_id, "");
    ASSERT_UEQ(m->start, a);
    ASSERT_UEQ(m->limit, a + 256);
    ASSERT_EQ(m->is_loaded, 1);
    ASSERT_STR_EQ(snapprof__jit_region_of(m)->name, "js:alpha");
    ASSERT_EQ(snapprof__jit_region_of(m)->layout.kind, SNAPPROF_JIT_LAYOUT_FRAME_POINTER);

    /* Edges: start is in, limit is out; the neighbour is itself. */
    ASSERT_STR_EQ(name_at(a, 0), "js:alpha");
    ASSERT_STR_EQ(name_at(a + 255, 0), "js:alpha");
    ASSERT_STR_EQ(name_at(b, 0), "js:beta");
    ASSERT_STR_EQ(name_at(b + 127, 0), "js:beta");
    ASSERT_NULL(name_at(b + 128, 0));
    ASSERT_NULL(name_at(a - 1, 0));
    const snapprof__jit_region_t *rb = snapprof__jit_region_of(snapprof_module_find(b));
    ASSERT_EQ(rb->layout.kind, SNAPPROF_JIT_LAYOUT_FIXED_FRAME);
    ASSERT_EQ(rb->layout.frame_size, 32);
    ASSERT_EQ(rb->layout.return_address_offset, 24);
    ASSERT_EQ(rb->layout.saved_fp_offset, 16);

    /* Frames in it are named by snapprof_symbolize, whatever their kind. */
    snapprof_frame_t f = {.pc = a + 3, .module = m, .kind = SNAPPROF_FRAME_NATIVE};
    ASSERT_STR_EQ(tu_frame_name(&f), "js:alpha");
    f.kind = SNAPPROF_FRAME_JIT;
    ASSERT_STR_EQ(tu_frame_name(&f), "js:alpha");

    snapprof_jit_stats_t st = tj_stats();
    ASSERT_UEQ(st.regions_live, 2);
    ASSERT_UEQ(st.regions_registered, 2);
}

static void test_bad_args(void)
{
    uint8_t *code = tj_map(4096);
    uintptr_t a = (uintptr_t)code;
    ASSERT_EQ(snapprof_jit_region_register(a, 0, "x", NULL), -EINVAL);
    ASSERT_EQ(snapprof_jit_region_register(UINTPTR_MAX - 10, 100, "x", NULL), -EINVAL);
    ASSERT_EQ(snapprof_jit_region_register(a, 16, NULL, NULL), -EINVAL);
    snapprof_jit_layout_t l;
    snapprof_jit_layout_init_fixed(&l, 32, 28); /* not a word offset */
    ASSERT_EQ(snapprof_jit_region_register(a, 16, "x", &l), -EINVAL);
    snapprof_jit_layout_init_fixed(&l, 16, 16); /* return address beyond the frame */
    ASSERT_EQ(snapprof_jit_region_register(a, 16, "x", &l), -EINVAL);
    snapprof_jit_layout_init_fixed(&l, 32, 24);
    l.saved_fp_offset = 32;
    ASSERT_EQ(snapprof_jit_region_register(a, 16, "x", &l), -EINVAL);
    l.kind = (snapprof_jit_layout_kind_t)7;
    ASSERT_EQ(snapprof_jit_region_register(a, 16, "x", &l), -EINVAL);

    ASSERT_OK(snapprof_jit_region_register(a + 64, 64, "x", NULL));
    /* Overlaps from below, inside, above, around. */
    ASSERT_EQ(snapprof_jit_region_register(a + 32, 33, "y", NULL), -EEXIST);
    ASSERT_EQ(snapprof_jit_region_register(a + 80, 8, "y", NULL), -EEXIST);
    ASSERT_EQ(snapprof_jit_region_register(a + 127, 8, "y", NULL), -EEXIST);
    ASSERT_EQ(snapprof_jit_region_register(a, 256, "y", NULL), -EEXIST);
    /* Touching is fine. */
    ASSERT_OK(snapprof_jit_region_register(a, 64, "below", NULL));
    ASSERT_OK(snapprof_jit_region_register(a + 128, 64, "above", NULL));

    ASSERT_EQ(snapprof_jit_region_unregister(a + 65), -ENOENT);
    ASSERT_EQ(snapprof_jit_region_move(a + 65, a + 1024), -ENOENT);
    ASSERT_EQ(snapprof_jit_region_move(a + 64, a + 100), -EEXIST);
    ASSERT_EQ(snapprof_jit_region_move(a + 64, UINTPTR_MAX - 8), -EINVAL);
    /* Moving onto part of its own old place is fine. */
    ASSERT_OK(snapprof_jit_region_unregister(a + 128));
    ASSERT_OK(snapprof_jit_region_move(a + 64, a + 96));
    ASSERT_STR_EQ(name_at(a + 100, 0), "x");
    ASSERT_STR_EQ(name_at(a + 159, 0), "x");
    ASSERT_NULL(name_at(a + 70, 0));
    ASSERT_EQ(snapprof_jit_get_stats(NULL), -EINVAL);
    ASSERT_EQ(snapprof_jit_perf_map_configure(NULL, &l), -EINVAL);
}

static void test_unregister_keeps_entry(void)
{
    uint8_t *code = tj_map(4096);
    uintptr_t a = (uintptr_t)code;
    ASSERT_OK(snapprof_jit_region_register(a, 100, "js:gone", NULL));
    const snapprof_module_t *m = snapprof_module_find(a + 1);
    ASSERT_NOT_NULL(m);
    ASSERT_OK(snapprof_jit_region_unregister(a));
    /* The entry a frame already points at stays sound, marked unloaded. */
    ASSERT_EQ(__atomic_load_n(&m->is_loaded, __ATOMIC_RELAXED), 0);
    ASSERT_STR_EQ(snapprof__jit_region_of(m)->name, "js:gone");
    snapprof_frame_t f = {.pc = a + 1, .module = m, .kind = SNAPPROF_FRAME_JIT};
    ASSERT_STR_EQ(tu_frame_name(&f), "js:gone");
    /* New lookups do not find it. */
    ASSERT_NULL(name_at(a + 1, 0));
    ASSERT_EQ(snapprof_jit_region_unregister(a), -ENOENT);
    snapprof_jit_stats_t st = tj_stats();
    ASSERT_UEQ(st.regions_live, 0);
    ASSERT_UEQ(st.regions_unregistered, 1);
}

/* Code replaced at the same address, and code moved: a stack copied at a
 * given time names what was there at that time. */
static void test_lookup_by_time(void)
{
    uint8_t *code = tj_map(8192);
    uintptr_t x = (uintptr_t)code, y = x + 4096;
    uint64_t t0 = tu_mono_ns();
    sleep_a_little();
    ASSERT_OK(snapprof_jit_region_register(x, 200, "old", NULL));
    sleep_a_little();
    uint64_t t_old = tu_mono_ns();
    sleep_a_little();
    ASSERT_OK(snapprof_jit_region_unregister(x));
    sleep_a_little();
    uint64_t t_gap = tu_mono_ns();
    sleep_a_little();
    ASSERT_OK(snapprof_jit_region_register(x, 100, "new", NULL));
    sleep_a_little();
    uint64_t t_new = tu_mono_ns();

    ASSERT_STR_EQ(name_at(x + 50, t_old), "old");
    ASSERT_STR_EQ(name_at(x + 150, t_old), "old");
    ASSERT_STR_EQ(name_at(x + 50, t_new), "new");
    ASSERT_STR_EQ(name_at(x + 50, 0), "new");
    ASSERT_NULL(name_at(x + 150, t_new)); /* beyond the new code */
    ASSERT_NULL(name_at(x + 150, t_gap));
    /* Between the two, and before the first, nothing was registered: no
     * name rather than a wrong one. */
    ASSERT_NULL(name_at(x + 50, t_gap));
    ASSERT_NULL(name_at(x + 50, t0));

    /* A move: before it the code was at x, after it at y. */
    sleep_a_little();
    ASSERT_OK(snapprof_jit_region_move(x, y));
    sleep_a_little();
    uint64_t t_moved = tu_mono_ns();
    ASSERT_STR_EQ(name_at(x + 50, t_new), "new");
    ASSERT_NULL(name_at(x + 50, t_moved));
    ASSERT_STR_EQ(name_at(y + 50, t_moved), "new");
    ASSERT_STR_EQ(name_at(y + 50, 0), "new");
    const snapprof_module_t *moved = snapprof_module_find(y);
    ASSERT_UEQ(moved->start, y);
    ASSERT_UEQ(moved->limit, y + 100);
    snapprof_jit_stats_t st = tj_stats();
    ASSERT_UEQ(st.regions_moved, 1);
}

/* Only the last 1024 regions that went away answer for old copies. */
static void test_graveyard_cap(void)
{
    enum { N = 1500 };
    uint8_t *code = tj_map(N * 16);
    uintptr_t base = (uintptr_t)code;
    static uint64_t alive_at[N];
    for (int i = 0; i < N; i++) {
        char name[32];
        snprintf(name, sizeof name, "gen%d", i);
        ASSERT_OK(snapprof_jit_region_register(base + (uintptr_t)i * 16, 16, name, NULL));
        alive_at[i] = tu_mono_ns();
        ASSERT_OK(snapprof_jit_region_unregister(base + (uintptr_t)i * 16));
    }
    int found_old = 0;
    for (int i = 0; i < N; i++) {
        const char *n = name_at(base + (uintptr_t)i * 16 + 3, alive_at[i]);
        char want[32];
        snprintf(want, sizeof want, "gen%d", i);
        if (i >= N - 1024) {
            ASSERT_STR_EQ(n, want);
        } else {
            /* Forgotten, not misnamed. */
            ASSERT(n == NULL || strcmp(n, want) == 0);
            found_old += n != NULL;
        }
    }
    ASSERT_EQ(found_old, 0);
    ASSERT_NULL(name_at(base + 3, 0));

    /* Code replaced at one address is found by time even after the
     * graveyard forgot it: each region remembers what it replaced. */
    uintptr_t x = (uintptr_t)tj_map(4096);
    enum { GENS = 5 };
    uint64_t when[GENS];
    for (int g = 0; g < GENS; g++) {
        char name[32];
        snprintf(name, sizeof name, "reused%d", g);
        /* Shrinking: each covers the start of the one before. */
        ASSERT_OK(snapprof_jit_region_register(x, 200 - (size_t)g * 20, name, NULL));
        when[g] = tu_mono_ns();
        if (g < GENS - 1)
            ASSERT_OK(snapprof_jit_region_unregister(x));
    }
    for (int i = 0; i < 1100; i++) { /* turnover elsewhere */
        ASSERT_OK(snapprof_jit_region_register(base + (uintptr_t)i * 16, 16, "churn", NULL));
        ASSERT_OK(snapprof_jit_region_unregister(base + (uintptr_t)i * 16));
    }
    for (int g = 0; g < GENS; g++) {
        char want[32];
        snprintf(want, sizeof want, "reused%d", g);
        ASSERT_STR_EQ(name_at(x + 5, when[g]), want);
        /* Beyond the live region's end the chain does not reach. */
        if (g < GENS - 1)
            ASSERT_NULL(name_at(x + 190 - (uintptr_t)g * 20, when[g]));
    }
}

/* ------------------------------------------------------------------------ */
/* Writers racing readers                                                   */
/* ------------------------------------------------------------------------ */

#define SLOTS 64
#define SLOT_SIZE 256
/* Fewer under sanitizers: TSan makes every atomic and lock a call. */
#define WRITES_PER_WRITER (tu_sanitizer_build() ? 1000 : 5000)
static uintptr_t g_base;
static atomic_int g_stop;
static atomic_ulong g_lookups, g_hits, g_writes;

/* Writer w owns slots w, w + 4, ...; a region in slot s is always named
 * "s<slot>-..." so a reader can check it got the right one. */
static void *writer(void *arg)
{
    int w = (int)(intptr_t)arg;
    unsigned seed = (unsigned)w * 7919u + 1;
    int live[SLOTS] = {0};
    uintptr_t at[SLOTS] = {0};
    unsigned long writes;
    for (writes = 0; writes < (unsigned long)WRITES_PER_WRITER; writes++) {
        int s = w + 4 * (int)(rand_r(&seed) % (SLOTS / 4));
        uintptr_t slot = g_base + (uintptr_t)s * SLOT_SIZE;
        if (!live[s]) {
            char name[48];
            snprintf(name, sizeof name, "s%d-%lu", s, writes);
            size_t size = 16 + rand_r(&seed) % 100;
            at[s] = slot + (rand_r(&seed) % 8) * 16;
            ASSERT_OK(snapprof_jit_region_register(at[s], size, name, NULL));
            live[s] = 1;
        } else if (rand_r(&seed) % 3 == 0) {
            /* Within its slot: it may overlap its old place, nothing else. */
            uintptr_t to = slot + (rand_r(&seed) % 8) * 16;
            ASSERT_OK(snapprof_jit_region_move(at[s], to));
            at[s] = to;
        } else {
            ASSERT_OK(snapprof_jit_region_unregister(at[s]));
            live[s] = 0;
        }
    }
    for (int s = 0; s < SLOTS; s++)
        if (live[s])
            ASSERT_OK(snapprof_jit_region_unregister(at[s]));
    atomic_fetch_add(&g_writes, writes);
    return NULL;
}

static void *reader(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    unsigned long lookups = 0, hits = 0;
    while (!atomic_load(&g_stop)) {
        uintptr_t addr = g_base + rand_r(&seed) % (SLOTS * SLOT_SIZE);
        uint64_t when = rand_r(&seed) % 2 ? 0 : tu_mono_ns() - rand_r(&seed) % 1000000;
        const snapprof_module_t *m = snapprof__module_find_at(addr, when);
        const snapprof__jit_region_t *r = snapprof__jit_region_of(m);
        lookups++;
        if (r == NULL)
            continue;
        hits++;
        ASSERT(m->start <= addr && addr < m->limit);
        int slot = (int)((addr - g_base) / SLOT_SIZE), named = -1;
        ASSERT_EQ(sscanf(r->name, "s%d-", &named), 1);
        ASSERT_EQ(named, slot);
    }
    atomic_fetch_add(&g_lookups, lookups);
    atomic_fetch_add(&g_hits, hits);
    return NULL;
}

static void test_concurrent(void)
{
    g_base = (uintptr_t)tj_map(SLOTS * SLOT_SIZE);
    pthread_t w[4], r[2];
    for (int i = 0; i < 4; i++)
        ASSERT_OK(pthread_create(&w[i], NULL, writer, (void *)(intptr_t)i));
    for (int i = 0; i < 2; i++)
        ASSERT_OK(pthread_create(&r[i], NULL, reader, (void *)(intptr_t)(i + 1)));
    /* Long enough for many epochs: counted in writes, not time. */
    for (int i = 0; i < 4; i++)
        pthread_join(w[i], NULL);
    atomic_store(&g_stop, 1);
    for (int i = 0; i < 2; i++)
        pthread_join(r[i], NULL);
    snapprof_jit_stats_t st = tj_stats();
    printf("%lu writes, %lu lookups (%lu hits); %llu registered, %llu moved, %llu unregistered\n",
           atomic_load(&g_writes), atomic_load(&g_lookups), atomic_load(&g_hits),
           (unsigned long long)st.regions_registered, (unsigned long long)st.regions_moved,
           (unsigned long long)st.regions_unregistered);
    ASSERT_UEQ(st.regions_live, 0);
    ASSERT_UEQ(atomic_load(&g_writes), 4 * WRITES_PER_WRITER);
    ASSERT_GT(atomic_load(&g_hits), 0);
}

/* Keeps any perf map of a recycled pid out of these tests. */
static void no_perf_map(void)
{
    ASSERT_OK(snapprof_jit_perf_map_configure("", NULL));
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"register_lookup", test_register_lookup},
        {"bad_args", test_bad_args},
        {"unregister_keeps_entry", test_unregister_keeps_entry},
        {"lookup_by_time", test_lookup_by_time},
        {"graveyard_cap", test_graveyard_cap},
        {"concurrent", test_concurrent},
    };
    return test_run_case_setup(cases, sizeof cases / sizeof cases[0], no_perf_map, argc, argv);
}
