/* profile_builder_pprof_native: native frames named in-process by the real snapprof_symbolize. */
#include "test.h"
#include "test_profile_builder_util.h"
#include "test_util.h"

#include "module_cache/module_cache.h"

#include <snapprof/snapprof.h>

#include <stdlib.h>
#include <string.h>

/* Real functions of this binary; their addresses are the synthetic pcs.
 * Each has a body of some size so pc + 4 stays inside it. */
volatile int sink;

__attribute__((noinline)) void pb_native_hot(void)
{
    for (int i = 0; i < 100; i++)
        sink += i * 7;
}

__attribute__((noinline)) void pb_native_warm(void)
{
    for (int i = 0; i < 100; i++)
        sink ^= i * 13;
}

__attribute__((noinline)) void pb_native_cold(void)
{
    for (int i = 0; i < 100; i++)
        sink -= i * 3;
}

__attribute__((noinline)) void pb_native_caller(void)
{
    pb_native_hot();
    pb_native_warm();
    pb_native_cold();
}

static snapprof_frame_t native(void (*fn)(void))
{
    uintptr_t pc = (uintptr_t)fn + 4;
    const snapprof_module_t *m = snapprof_module_find(pc);
    ASSERT_NOT_NULL(m);
    snapprof_frame_t f = {pc, m, SNAPPROF_FRAME_NATIVE, NULL};
    return f;
}

static void add(snapprof_builder_t *b, void (*leaf)(void), int count)
{
    snapprof_frame_t frames[] = {native(leaf), native(pb_native_caller)};
    pbt_feed(b, frames, 2, 5, "native", NULL, 0, 1000000, 1000000, count);
}

static void expect_row(const tu_top_row_t *rows, int n, const char *name, double flat, double cum,
                       const char *raw)
{
    const tu_top_row_t *r = tu_top_find(rows, n, name);
    if (r == NULL)
        TEST_FAIL("%s missing from -top:\n%s", name, raw);
    if (r->flat_pct < flat - 0.01 || r->flat_pct > flat + 0.01 || r->cum_pct < cum - 0.01 ||
        r->cum_pct > cum + 0.01)
        TEST_FAIL("%s: flat %.2f%% cum %.2f%%, want %.2f%% %.2f%%:\n%s", name, r->flat_pct,
                  r->cum_pct, flat, cum, raw);
}

static void test_native(void)
{
    pb_native_caller();
    char *path = pbt_tmp_path("pb-native", "native.pb.gz");
    snapprof_builder_t *b = pbt_create(path);
    add(b, pb_native_hot, 7);
    add(b, pb_native_warm, 2);
    add(b, pb_native_cold, 1);
    ASSERT_OK(pbt_complete(b, SNAPPROF_MODE_CPU, NULL));
    snapprof_builder_destroy(b);

    Snapprof__Pprof__Profile *p = pbt_load(path);
    pbt_check_valid(p);
    /* The functions are in the main executable, which is mapping[0], and
     * it now truthfully claims function names. */
    const snapprof_module_t *main_module = snapprof__module_cache_main();
    ASSERT_NOT_NULL(main_module);
    ASSERT_PTR_EQ(snapprof_module_find((uintptr_t)pb_native_hot), main_module);
    ASSERT_UEQ(p->mapping[0]->memory_start, main_module->start);
    ASSERT(p->mapping[0]->has_functions);
    ASSERT_EQ(p->n_location, 4);
    for (size_t i = 0; i < p->n_location; i++) {
        ASSERT_UEQ(p->location[i]->mapping_id, p->mapping[0]->id);
        ASSERT_GE(p->location[i]->n_line, 1);
    }
    snapprof__pprof__profile__free_unpacked(p, NULL);

    /* -symbolize=none: the names come from the profile itself, not from
     * pprof reading the binary. */
    tu_top_row_t *rows;
    char *raw;
    int n = tu_pprof_top(path, "-symbolize=none -sample_index=samples", &rows, &raw);
    expect_row(rows, n, "pb_native_hot", 70, 70, raw);
    expect_row(rows, n, "pb_native_warm", 20, 20, raw);
    expect_row(rows, n, "pb_native_cold", 10, 10, raw);
    expect_row(rows, n, "pb_native_caller", 0, 100, raw);
    free(rows);
    free(raw);
    pbt_remove(path);
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"native", test_native},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
