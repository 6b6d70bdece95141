/* Tests of the CFI table unwinder (unwinder/cfi_table*.c) against the
 * unwinders it stands in for, on the same stack copies: real stacks (deep
 * recursion without frame pointers through a second library, a library
 * whose CFI is only in .debug_frame, and libc) must come out frame for
 * frame as the libunwind chain finds them; one step from every pc of a set
 * of functions must agree with libunwind's; per-FDE tables must equal whole
 * ones; and an unloaded module's table must be freed. The workload is
 * built -O2 -fomit-frame-pointer (tests/unwinder.cmake). */
#include "test.h"
#include "test_util.h"
#include "unwind_copy.h"
#include "unwind_test_util.h"
#include "module_cache/module_cache.h"
#include "stack_copier/stack_copier.h"
#include "unwinder/cfi_table_unwinder.h"
#include "unwinder/cfi_engine.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef uint64_t (*lib_cb)(uint64_t);
uint64_t testlib_outer(uint64_t n, lib_cb cb);
uint64_t dflib_outer(uint64_t n, lib_cb cb);

static volatile uint64_t g_sink;
static uw_worker_t *g_worker;

/* ------------------------------------------------------------------------ */
/* The workload: recursion -> testlib -> recursion -> dflib -> qsort -> spin */
/* ------------------------------------------------------------------------ */

static int g_parked;           /* the comparator spins until the worker stops */
static atomic_int g_at_bottom; /* the comparator is spinning */

__attribute__((noinline)) static int spin_compare(const void *a, const void *b)
{
    uint64_t x = 3;
    atomic_store(&g_at_bottom, 1);
    while (!atomic_load_explicit(&g_worker->stop, memory_order_relaxed)) {
        x = x * 6364136223846793005u + 1;
        __asm__ volatile("" : "+r"(x));
    }
    g_sink += x;
    g_parked = 1;
    return (int)(*(const int *)a - *(const int *)b);
}

__attribute__((noinline)) static uint64_t in_dflib(uint64_t n)
{
    int v[4] = {4, 3, 2, 1};
    if (!g_parked)
        qsort(v, 4, sizeof v[0], spin_compare);
    __asm__ volatile("" ::: "memory");
    return n + (uint64_t)v[0];
}

UW_RECURSION(ct_recurse_b, dflib_outer(1, in_dflib))

__attribute__((noinline)) static uint64_t in_testlib(uint64_t n)
{
    /* testlib calls back more than once: only the first goes deep. */
    static int once;
    if (once++)
        return n;
    return ct_recurse_b(500);
}

UW_RECURSION(ct_recurse_a, testlib_outer(1, in_testlib))

static void *deep_main(void *arg)
{
    uw_worker_t *w = arg;
    uw_worker_enter(w);
    g_sink += ct_recurse_a(1500);
    __asm__ volatile("" ::: "memory");
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Copies and chains                                                        */
/* ------------------------------------------------------------------------ */

enum { COPIES = 6, MAX_FRAMES = 4096 };

static void take_copies(uw_worker_t *w, uw_copy_t *copies, int n)
{
    ASSERT_OK(snapprof__stack_copier_install(SIGURG));
    for (int c = 0; c < n; c++) {
        snapprof_fail_reason_t why;
        ASSERT_OK(uw_copy_take(w->token, &copies[c], 20, &why));
        usleep(2000);
    }
}

typedef struct chain {
    snapprof_unwinder_t *u[4];
    size_t n;
} chain_t;

/* The libunwind chain (libunwind, .debug_frame, frame pointers), with the
 * CFI table unwinder in front when with_table. */
static chain_t make_chain(int with_table, int eager)
{
    chain_t c = {.n = 0};
    if (with_table)
        ASSERT_OK(snapprof__cfi_table_unwinder_create(eager, &c.u[c.n++]));
    ASSERT_OK(snapprof_libunwind_unwinder_create(&c.u[c.n++]));
    ASSERT_OK(snapprof_debug_frame_unwinder_create(&c.u[c.n++]));
    ASSERT_OK(snapprof_frame_pointer_unwinder_create(&c.u[c.n++]));
    for (size_t i = 0; i < c.n; i++)
        if (c.u[i]->ops->xUpdateModules)
            c.u[i]->ops->xUpdateModules(c.u[i]->user_data);
    return c;
}

static void chain_destroy(chain_t *c)
{
    for (size_t i = 0; i < c->n; i++)
        snapprof_unwinder_destroy(c->u[i]);
}

static void print_frames(const char *label, const snapprof_frame_t *f, size_t n)
{
    printf("%s: %zu frames\n", label, n);
    for (size_t i = 0; i < n; i++) {
        if (i == 12 && n > 24) {
            printf("  ...\n");
            i = n - 12;
        }
        if (f[i].kind == SNAPPROF_FRAME_MARKER)
            printf("  #%zu %s\n", i, f[i].name);
        else
            printf("  #%zu %#lx %s\n", i, (unsigned long)f[i].pc, uw_name(f[i].pc));
    }
}

/* ------------------------------------------------------------------------ */
/* Same frames as libunwind on real stacks                                  */
/* ------------------------------------------------------------------------ */

static snapprof_frame_t g_ref[MAX_FRAMES], g_got[MAX_FRAMES];

static void test_same_frames(void)
{
    uw_worker_t w;
    memset(&w, 0, sizeof w);
    w.entry = deep_main;
    w.stack_size = 8u << 20;
    g_worker = &w;
    uw_worker_start(&w);
    while (!atomic_load(&g_at_bottom))
        usleep(1000);
    uw_copy_t copies[COPIES];
    take_copies(&w, copies, COPIES);
    chain_t lu = make_chain(0, 0), ct = make_chain(1, 0);
    for (int c = 0; c < COPIES; c++) {
        snapprof__unwind_outcome_t o1, o2;
        size_t n1 = snapprof__unwind_chain(lu.u, lu.n, &copies[c].regs, &copies[c].stack, g_ref,
                                           MAX_FRAMES, &o1);
        size_t n2 = snapprof__unwind_chain(ct.u, ct.n, &copies[c].regs, &copies[c].stack, g_got,
                                           MAX_FRAMES, &o2);
        int same = n1 == n2;
        for (size_t i = 0; same && i < n1; i++)
            same = g_ref[i].pc == g_got[i].pc && g_ref[i].kind == g_got[i].kind &&
                   g_ref[i].module == g_got[i].module;
        if (!same) {
            print_frames("libunwind chain", g_ref, n1);
            print_frames("CFI table chain", g_got, n2);
            TEST_FAIL("copy %d: the CFI tables found other frames than libunwind", c);
        }
        /* The whole stack, through every kind of code. */
        if (!uw_complete(g_got, n2, &w)) {
            print_frames("CFI table chain", g_got, n2);
            TEST_FAIL("copy %d: incomplete stack", c);
        }
        ASSERT_GT(n2, 2000);
        static const char *const want[] = {"spin_compare", "in_dflib",   "dflib_outer",
                                           "ct_recurse_b", "in_testlib", "testlib_outer",
                                           "ct_recurse_a", "deep_main"};
        for (size_t k = 0; k < sizeof want / sizeof want[0]; k++)
            if (uw_find(g_got, n2, want[k]) < 0) {
                print_frames("CFI table chain", g_got, n2);
                TEST_FAIL("copy %d: no %s frame", c, want[k]);
            }
        /* libc's qsort between them (ASan's interceptor when it is there). */
        long cmp = uw_find(g_got, n2, "spin_compare"), dfl = uw_find(g_got, n2, "in_dflib");
        int qsort_seen = 0;
        for (long i = cmp + 1; i < dfl; i++)
            qsort_seen |= strstr(uw_name(g_got[i].pc), "qsort") != NULL;
        if (!qsort_seen) {
            print_frames("CFI table chain", g_got, n2);
            TEST_FAIL("copy %d: no qsort frame between the comparator and its caller", c);
        }
    }
    /* The tables really did the walk: the test library and the .debug_frame
     * library have tables, and libc's has rows libunwind must step. */
    const snapprof_module_t *mods[32];
    snapprof__cfi_table_t *tables[32];
    size_t n = snapprof__cfi_table_unwinder_tables(ct.u[0], mods, tables, 32);
    int have_eh = 0, have_df = 0;
    for (size_t i = 0; i < n && i < 32; i++) {
        snapprof__cfi_table_stats_t st;
        snapprof__cfi_table_stats(tables[i], &st);
        printf("table %s: %s, %zu of %zu FDEs compiled, %zu rows (%zu fallback), %zu bytes, "
               "%.3f ms\n",
               mods[i]->path,
               snapprof__cfi_table_source(tables[i]) == SNAPPROF__CFI_SOURCE_EH_FRAME
                   ? ".eh_frame"
                   : ".debug_frame",
               st.fdes_compiled, st.fdes, st.rows, st.fallback_rows, st.bytes,
               (double)st.build_ns / 1e6);
        if (strstr(mods[i]->path, "unwinder_testlib"))
            have_eh = st.rows > 0;
        if (strstr(mods[i]->path, "unwinder_dflib"))
            have_df = st.rows > 0 &&
                      snapprof__cfi_table_source(tables[i]) == SNAPPROF__CFI_SOURCE_DEBUG_FRAME;
    }
    ASSERT(have_eh);
    ASSERT(have_df);
    printf("%d copies of %zu frames: the same frames as libunwind's chain\n", COPIES,
           (size_t)0 + snapprof__unwind_chain(ct.u, ct.n, &copies[0].regs, &copies[0].stack, g_got,
                                              MAX_FRAMES, &(snapprof__unwind_outcome_t){0}));
    chain_destroy(&lu);
    chain_destroy(&ct);
    for (int c = 0; c < COPIES; c++)
        uw_copy_free(&copies[c]);
    uw_worker_stop(&w);
}

/* ------------------------------------------------------------------------ */
/* One step from every pc agrees with libunwind                             */
/* ------------------------------------------------------------------------ */

/* A synthetic copy: sp in the middle of a buffer whose words are return
 * addresses into code (so that the caller is walkable too) or stack
 * addresses, rbp pointing into it. Each pc of the functions below is
 * stepped twice by the table unwinder alone and by libunwind alone; where
 * the table steps, both must find the same two callers. */
static void test_rows_match_libunwind(void)
{
    static const uintptr_t funcs[] = {(uintptr_t)ct_recurse_a,  (uintptr_t)ct_recurse_b,
                                      (uintptr_t)in_dflib,      (uintptr_t)spin_compare,
                                      (uintptr_t)testlib_outer, (uintptr_t)dflib_outer,
                                      (uintptr_t)qsort,         (uintptr_t)malloc,
                                      (uintptr_t)free,          (uintptr_t)printf,
                                      (uintptr_t)snprintf,      (uintptr_t)memcpy,
                                      (uintptr_t)fopen,         (uintptr_t)snapprof_profiler_start};
    enum { SPAN = 384, WORDS = 512 };
    uintptr_t *buf = calloc(WORDS, sizeof *buf);
    ASSERT_NOT_NULL(buf);
    snapprof_unwinder_t *ct, *lu, *df;
    ASSERT_OK(snapprof_cfi_table_unwinder_create(&ct));
    ASSERT_OK(snapprof_libunwind_unwinder_create(&lu));
    ASSERT_OK(snapprof_debug_frame_unwinder_create(&df));
    ct->ops->xUpdateModules(ct->user_data);
    lu->ops->xUpdateModules(lu->user_data);
    df->ops->xUpdateModules(df->user_data);
    size_t stepped = 0, agreed = 0, handed = 0;
    for (size_t k = 0; k < sizeof funcs / sizeof funcs[0]; k++) {
        for (uintptr_t pc = funcs[k]; pc < funcs[k] + SPAN; pc++) {
            /* Words: stack addresses and return addresses into funcs[k]. */
            for (size_t i = 0; i < WORDS; i++)
                buf[i] = i % 3 == 0
                             ? (uintptr_t)&buf[(i + 24) % WORDS]
                             : funcs[(k + i) % (sizeof funcs / sizeof funcs[0])] + 5 + (i * 7) % 64;
            snapprof_stack_copy_t stack = {.bottom = (uintptr_t)buf,
                                           .top = (uintptr_t)(buf + WORDS),
                                           .orig_bottom = (uintptr_t)buf};
            snapprof_regs_t regs = {{0}};
            regs.r[SNAPPROF_REG_SP] = (uintptr_t)&buf[WORDS / 4];
            regs.r[SNAPPROF_REG_FP] = (uintptr_t)&buf[WORDS / 4 + 16];
            regs.r[SNAPPROF_REG_PC] = pc;
            snapprof_frame_t f0 = {
                .pc = pc, .kind = SNAPPROF_FRAME_NATIVE, .module = snapprof_module_find(pc)};
            if (!ct->ops->xCanUnwindFrom(ct->user_data, &f0))
                continue;
            /* Frame 0 and two callers, then the depth cap. */
            snapprof__unwind_outcome_t o1, o2;
            snapprof_unwinder_t *c1[] = {ct}, *c2[] = {lu, df};
            size_t n1 = snapprof__unwind_chain(c1, 1, &regs, &stack, g_got, 4, &o1);
            size_t n2 = snapprof__unwind_chain(c2, 2, &regs, &stack, g_ref, 4, &o2);
            stepped++;
            int same = n1 == n2;
            for (size_t i = 0; same && i < n1; i++)
                same = g_got[i].pc == g_ref[i].pc && g_got[i].kind == g_ref[i].kind;
            if (!same) {
                print_frames("CFI table", g_got, n1);
                print_frames("libunwind", g_ref, n2);
                TEST_FAIL("pc %#lx (%s + %lu): steps differ", (unsigned long)pc, uw_name(funcs[k]),
                          (unsigned long)(pc - funcs[k]));
            }
            agreed++;
            const snapprof__cfi_row_t *row = NULL;
            snapprof__cfi_table_t *tables[64];
            const snapprof_module_t *mods[64];
            size_t nt = snapprof__cfi_table_unwinder_tables(ct, mods, tables, 64);
            for (size_t i = 0; i < nt && i < 64; i++)
                if (mods[i] == f0.module)
                    row = snapprof__cfi_table_find(tables[i], pc);
            handed +=
                !row || (row->kind & SNAPPROF__CFI_ROW_KIND_MASK) == SNAPPROF__CFI_ROW_FALLBACK;
        }
    }
    printf("%zu pcs stepped twice by the tables (%zu of them handed to libunwind): all agree "
           "with libunwind\n",
           stepped, handed);
    ASSERT_GT(stepped, 2000);
    ASSERT_UEQ(agreed, stepped);
    snapprof_unwinder_destroy(ct);
    snapprof_unwinder_destroy(lu);
    snapprof_unwinder_destroy(df);
    free(buf);
}

/* ------------------------------------------------------------------------ */
/* Per-FDE tables equal whole ones                                          */
/* ------------------------------------------------------------------------ */

static void test_lazy_matches_whole(void)
{
    static const uintptr_t pcs[] = {(uintptr_t)qsort, (uintptr_t)ct_recurse_a,
                                    (uintptr_t)testlib_outer, (uintptr_t)dflib_outer};
    for (size_t k = 0; k < sizeof pcs / sizeof pcs[0]; k++) {
        const snapprof_module_t *m = snapprof_module_find(pcs[k]);
        ASSERT_NOT_NULL(m);
        snapprof__cfi_table_t *lazy, *whole;
        ASSERT_OK(snapprof__cfi_table_open(m, 0, &lazy));
        ASSERT_OK(snapprof__cfi_table_open(m, 1, &whole));
        snapprof__cfi_table_stats_t sl, sw;
        snapprof__cfi_table_stats(lazy, &sl);
        snapprof__cfi_table_stats(whole, &sw);
        ASSERT_UEQ(sl.fdes_compiled, 0);
        ASSERT_UEQ(sw.fdes_compiled, sw.fdes);
        size_t rows = 0;
        /* Every pc of the module's code. */
        for (uintptr_t pc = m->start; pc < m->limit; pc++) {
            const snapprof__cfi_row_t *a = snapprof__cfi_table_find(lazy, pc);
            snapprof__cfi_row_t ra = a ? *a : (snapprof__cfi_row_t){0};
            const snapprof__cfi_row_t *b = snapprof__cfi_table_find(whole, pc);
            /* Field by field: padding bytes may differ. */
            if (!a != !b || (a && (ra.start != b->start || ra.cfa_offset != b->cfa_offset ||
                                   ra.ra_offset != b->ra_offset || ra.rbp_offset != b->rbp_offset ||
                                   ra.cfa_reg != b->cfa_reg || ra.kind != b->kind)))
                TEST_FAIL("%s: pc %#lx: per-FDE and whole tables differ", m->path,
                          (unsigned long)pc);
            rows += a != NULL;
        }
        snapprof__cfi_table_stats(lazy, &sl);
        printf("%s: %zu FDEs, %zu rows, %zu pcs looked up alike\n", m->path, sw.fdes, sw.rows,
               rows);
        ASSERT_GT(rows, 0);
        ASSERT_UEQ(sl.rows, sw.rows);
        snapprof__cfi_table_destroy(lazy);
        snapprof__cfi_table_destroy(whole);
    }
}

/* ------------------------------------------------------------------------ */
/* An unloaded module's table is freed                                      */
/* ------------------------------------------------------------------------ */

static size_t tables_of(snapprof_unwinder_t *u, const char *needle)
{
    const snapprof_module_t *mods[64];
    snapprof__cfi_table_t *tables[64];
    size_t n = snapprof__cfi_table_unwinder_tables(u, mods, tables, 64), found = 0;
    for (size_t i = 0; i < n && i < 64; i++)
        found += strstr(mods[i]->path, needle) != NULL;
    return found;
}

static void test_dlclose_frees(void)
{
    snapprof_unwinder_t *ct;
    ASSERT_OK(snapprof_cfi_table_unwinder_create(&ct));
    ct->ops->xUpdateModules(ct->user_data);
    void *h = dlopen(SNAPPROF_TEST_DLLIB, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NOT_NULL(h);
    uintptr_t pc = (uintptr_t)dlsym(h, "dllib_outer");
    ASSERT(pc != 0);
    ASSERT_OK(snapprof__module_cache_update());
    ct->ops->xUpdateModules(ct->user_data);
    snapprof_frame_t f = {
        .pc = pc, .kind = SNAPPROF_FRAME_NATIVE, .module = snapprof_module_find(pc)};
    ASSERT(ct->ops->xCanUnwindFrom(ct->user_data, &f));
    ASSERT_UEQ(tables_of(ct, "unwinder_dllib"), 1);
    ASSERT_EQ(dlclose(h), 0);
    ASSERT_OK(snapprof__module_cache_update());
    ct->ops->xUpdateModules(ct->user_data);
    ASSERT_UEQ(tables_of(ct, "unwinder_dllib"), 0);
    printf("the unloaded library's table was freed\n");
    /* A copy taken before the dlclose and unwound after it has frames in
     * the kept entry: the table comes back from the file for it, and goes
     * again at the next update, though no object came or went since. */
    ASSERT(!__atomic_load_n(&f.module->is_loaded, __ATOMIC_RELAXED));
    ASSERT(ct->ops->xCanUnwindFrom(ct->user_data, &f));
    ASSERT_UEQ(tables_of(ct, "unwinder_dllib"), 1);
    ct->ops->xUpdateModules(ct->user_data);
    ASSERT_UEQ(tables_of(ct, "unwinder_dllib"), 0);
    printf("a frame of the unloaded library is claimed with its file's table, then freed\n");
    snapprof_unwinder_destroy(ct);
}

/* ------------------------------------------------------------------------ */
/* One table per module for the whole process                               */
/* ------------------------------------------------------------------------ */

/* The table of the module holding pc, as u sees it; NULL if none. */
static snapprof__cfi_table_t *table_for(snapprof_unwinder_t *u, uintptr_t pc)
{
    const snapprof_module_t *want = snapprof_module_find(pc), *mods[64];
    snapprof__cfi_table_t *tables[64];
    size_t n = snapprof__cfi_table_unwinder_tables(u, mods, tables, 64);
    for (size_t i = 0; i < n && i < 64; i++)
        if (mods[i] == want)
            return tables[i];
    return NULL;
}

typedef struct walker {
    snapprof_unwinder_t *u;
    atomic_int stop, rounds;
    size_t claimed;
} walker_t;

/* Asks u about every pc of libc's qsort and the test library, over and
 * over: most are row-cache misses, which look the tables up. */
static void *walk_loop(void *arg)
{
    walker_t *w = arg;
    static const uintptr_t funcs[] = {(uintptr_t)qsort, (uintptr_t)testlib_outer, (uintptr_t)malloc,
                                      (uintptr_t)snprintf};
    while (!atomic_load(&w->stop)) {
        for (size_t k = 0; k < sizeof funcs / sizeof funcs[0]; k++) {
            for (uintptr_t pc = funcs[k]; pc < funcs[k] + 256; pc++) {
                snapprof_frame_t f = {
                    .pc = pc, .kind = SNAPPROF_FRAME_NATIVE, .module = snapprof_module_find(pc)};
                w->claimed += (size_t)w->u->ops->xCanUnwindFrom(w->u->user_data, &f);
            }
        }
        w->u->ops->xUpdateModules(w->u->user_data);
        atomic_fetch_add(&w->rounds, 1);
    }
    return NULL;
}

/* Two profilers' unwinders share each module's table: compiled once, kept
 * while either lives, freed with the last. Then unwinders come and go
 * while another walks (the profiler serialises walks, not the creation and
 * destruction of unwinders; TSan checks the store's lock). */
static void test_tables_shared(void)
{
    snapprof_unwinder_t *a, *b;
    ASSERT_OK(snapprof_cfi_table_unwinder_create(&a));
    ASSERT_OK(snapprof_cfi_table_unwinder_create(&b));
    a->ops->xUpdateModules(a->user_data);
    b->ops->xUpdateModules(b->user_data);
    uintptr_t pc = (uintptr_t)testlib_outer;
    snapprof_frame_t f = {
        .pc = pc, .kind = SNAPPROF_FRAME_NATIVE, .module = snapprof_module_find(pc)};
    ASSERT(a->ops->xCanUnwindFrom(a->user_data, &f));
    snapprof__cfi_table_t *ta = table_for(a, pc);
    ASSERT_NOT_NULL(ta);
    snapprof__cfi_table_stats_t before, after;
    snapprof__cfi_table_stats(ta, &before);
    ASSERT_GT(before.fdes_compiled, 0);
    /* b has not looked at the library yet, and already has its table. */
    ASSERT(table_for(b, pc) == ta);
    ASSERT(b->ops->xCanUnwindFrom(b->user_data, &f));
    snapprof__cfi_table_stats(ta, &after);
    ASSERT_UEQ(after.fdes_compiled, before.fdes_compiled);
    printf("two unwinders, one table of the test library (%zu FDE compiled once)\n",
           after.fdes_compiled);
    snapprof_unwinder_destroy(a);
    ASSERT(table_for(b, pc) == ta);
    ASSERT(b->ops->xCanUnwindFrom(b->user_data, &f));
    snapprof_unwinder_destroy(b);
    ASSERT_OK(snapprof_cfi_table_unwinder_create(&a));
    ASSERT_NULL(table_for(a, pc));
    printf("freed with the last unwinder\n");

    walker_t w = {.u = a};
    pthread_t th;
    ASSERT_EQ(pthread_create(&th, NULL, walk_loop, &w), 0);
    /* At least 200 times, and while the walker makes two rounds (a loaded
     * machine may not run it at all during the first 200: CI saw 0). */
    int made = 0;
    for (; made < 200 || atomic_load(&w.rounds) < 2; made++) {
        ASSERT_OK(snapprof_cfi_table_unwinder_create(&b));
        b->ops->xUpdateModules(b->user_data);
        ASSERT(b->ops->xCanUnwindFrom(b->user_data, &f));
        snapprof_unwinder_destroy(b);
    }
    atomic_store(&w.stop, 1);
    pthread_join(th, NULL);
    ASSERT_GT(w.claimed, 0);
    printf("%d unwinders came and went while another claimed %zu frames\n", made, w.claimed);
    snapprof_unwinder_destroy(a);
}

/* ------------------------------------------------------------------------ */

static const test_case_t cases[] = {
    {"same_frames", test_same_frames},
    {"rows_match_libunwind", test_rows_match_libunwind},
    {"lazy_matches_whole", test_lazy_matches_whole},
    {"dlclose_frees", test_dlclose_frees},
    {"tables_shared", test_tables_shared},
};

TEST_MAIN_LINE_BUFFERED(cases)
