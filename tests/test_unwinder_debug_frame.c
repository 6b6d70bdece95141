/* Tests of the .debug_frame unwinder: a library whose CFI is only in
 * .debug_frame (unwinder_dflib.c: no .eh_frame FDE), sampled by the real
 * profiler with the default chain, with libunwind alone (which cannot do
 * it), with its .debug_frame in a separate debug file, and compiled into
 * the executable, whose .eh_frame_hdr covers its other code; and corrupt
 * copies that must never make the unwinder read outside the copy and the
 * loaded objects. */
#include "test.h"
#include "test_util.h"
#include "unwind_fuzz.h"
#define UW_CASE_WHAT_WIDTH 52
#include "unwind_case.h"
#include "unwind_test_util.h"
#include "unwinder/cfi_engine.h"

#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef uint64_t (*dflib_cb)(uint64_t);
uint64_t dflib_hot(uint64_t n);
uint64_t dflib_middle(uint64_t n, dflib_cb cb);
uint64_t dflib_outer(uint64_t n, dflib_cb cb);
uint64_t dfexe_hot(uint64_t n);
uint64_t dfexe_middle(uint64_t n, dflib_cb cb);
uint64_t dfexe_outer(uint64_t n, dflib_cb cb);

static volatile uint64_t g_sink;

/* ------------------------------------------------------------------------ */
/* The workload                                                             */
/* ------------------------------------------------------------------------ */

/* dflib_outer, or the split library's copy when that test set it. */
static uint64_t (*g_outer)(uint64_t, dflib_cb) = dflib_outer;

UW_CASE_CALLBACK_WORKLOAD(df, g_outer)

/* Profiles df_body with kind and sorts the worker's samples by leaf: in
 * the library (prefix "dflib" or "dfsplit") or in the callback. */
static void profile_and_tally(uw_kind_t kind, const char *prefix, size_t min_samples, tally_t *lib,
                              tally_t *cb, tally_t *lib_complete)
{
    char hot[64], middle[64], outer[64];
    snprintf(hot, sizeof hot, "%s_hot", prefix);
    snprintf(middle, sizeof middle, "%s_middle", prefix);
    snprintf(outer, sizeof outer, "%s_outer", prefix);
    const char *const in_lib[] = {hot, middle, outer, "df_caller", "df_body", NULL};
    const char *const callback[] = {"df_callback_hot", "df_callback", middle, outer,
                                    "df_caller",       "df_body",     NULL};
    uw_worker_t w;
    uw_collector_t c;
    uw_run_t run = {.kind = kind, .interval_ns = 1000000u, .min_samples = min_samples};
    uw_case_profile(&w, df_body, 0, &run, &c);
    int shown = 0;
    for (size_t i = 0; i < c.count; i++) {
        const uw_sample_t *s;
        const snapprof_frame_t *f = uw_case_worker_frames(&c, i, &w, &s);
        if (!f)
            continue;
        int complete = uw_complete(f, s->count, &w);
        if ((s->flags & SNAPPROF_SAMPLE_UNWIND_ABORTED) && shown++ < 3) {
            printf("aborted walk (not judged unless its leaf is below):\n");
            uw_print_sample(&c, s);
        }
        if (uw_frame_is(&f[0], hot)) {
            lib->seen++;
            lib->ok += in_order(f, s->count, in_lib) && complete;
            lib_complete->seen++;
            lib_complete->ok += complete;
            if (kind == UW_DEFAULT && !(in_order(f, s->count, in_lib) && complete) && shown++ < 3)
                uw_print_sample(&c, s);
        } else if (uw_frame_is(&f[0], "df_callback_hot")) {
            cb->seen++;
            int ok = in_order(f, s->count, callback) && complete;
            cb->ok += ok;
            if (kind == UW_DEFAULT && !ok && shown++ < 3)
                uw_print_sample(&c, s);
        }
    }
    printf("stats: complete %llu, unknown %llu, aborted %llu (no info %llu, memory %llu, "
           "bad frame %llu); unwind p50 %llu ns, p99 %llu ns, %.1f frames per sample\n",
           (unsigned long long)c.stats.unwind_complete, (unsigned long long)c.stats.unwind_unknown,
           (unsigned long long)c.stats.unwind_aborted,
           (unsigned long long)c.stats.unwind_aborted_no_info,
           (unsigned long long)c.stats.unwind_aborted_memory,
           (unsigned long long)c.stats.unwind_aborted_bad_frame,
           (unsigned long long)c.stats.unwind_p50_ns, (unsigned long long)c.stats.unwind_p99_ns,
           c.stats.samples ? (double)c.stats.unwind_frames_total / (double)c.stats.samples : 0.0);
    uw_collector_free(&c);
}

/* ------------------------------------------------------------------------ */
/* Cases                                                                    */
/* ------------------------------------------------------------------------ */

/* The premise: no .eh_frame table covers the library's code, so the CFI
 * engine (libunwind's) does not claim it, while the .debug_frame unwinder
 * does, and not code that libunwind covers. */
static void test_no_eh_frame(void)
{
    snapprof_unwinder_t *df;
    ASSERT_OK(snapprof_debug_frame_unwinder_create(&df));
    snapprof__cfi_t *cfi = snapprof__cfi_of(df);
    ASSERT_NOT_NULL(cfi);
    df->ops->xUpdateModules(df->user_data);
    uintptr_t fns[] = {(uintptr_t)dflib_hot, (uintptr_t)dflib_middle, (uintptr_t)dflib_outer};
    for (size_t i = 0; i < 3; i++) {
        ASSERT(snapprof__cfi_in_code(cfi, fns[i] + 4));
        ASSERT(!snapprof__cfi_covers(cfi, fns[i] + 4));
        snapprof_frame_t f = {.pc = fns[i] + 4,
                              .module = snapprof_module_find(fns[i] + 4),
                              .kind = SNAPPROF_FRAME_NATIVE};
        ASSERT(df->ops->xCanUnwindFrom(df->user_data, &f));
    }
    snapprof_frame_t exe = {.pc = (uintptr_t)df_caller + 4,
                            .module = snapprof_module_find((uintptr_t)df_caller + 4),
                            .kind = SNAPPROF_FRAME_NATIVE};
    ASSERT(snapprof__cfi_covers(cfi, exe.pc));
    ASSERT(!df->ops->xCanUnwindFrom(df->user_data, &exe));
    /* The executable has a table, but no FDE for its code built without
     * unwind tables: coverage is decided per pc. */
    uintptr_t in_exe[] = {(uintptr_t)dfexe_hot, (uintptr_t)dfexe_middle, (uintptr_t)dfexe_outer};
    for (size_t i = 0; i < 3; i++) {
        ASSERT(!snapprof__cfi_covers(cfi, in_exe[i] + 4));
        snapprof_frame_t f = {.pc = in_exe[i] + 4,
                              .module = snapprof_module_find(in_exe[i] + 4),
                              .kind = SNAPPROF_FRAME_NATIVE};
        ASSERT(df->ops->xCanUnwindFrom(df->user_data, &f));
    }
    snapprof_unwinder_destroy(df);
}

static void test_default_chain(void)
{
    tally_t lib = {0}, cb = {0}, lib_complete = {0};
    profile_and_tally(UW_DEFAULT, "dflib", 1500, &lib, &cb, &lib_complete);
    expect_shape(&lib, "leaf in the .debug_frame library: callers, complete", 300, 99.0);
    expect_shape(&cb, "callback from the library: callers, complete", 200, 99.0);
}

/* Without the .debug_frame unwinder no stack whose leaf is in the library
 * is complete: this is what the fallback is for. */
static void test_libunwind_alone(void)
{
    tally_t lib = {0}, cb = {0}, lib_complete = {0};
    profile_and_tally(UW_LIBUNWIND, "dflib", 1000, &lib, &cb, &lib_complete);
    printf("%-52s %zu of %zu\n", "libunwind alone, leaf in the library: complete", lib_complete.ok,
           lib_complete.seen);
    printf("%-52s %zu of %zu\n", "libunwind alone, callback: callers, complete", cb.ok, cb.seen);
    size_t need = tu_sanitizer_build() ? 5 : 200;
    ASSERT_GE(lib_complete.seen, need);
    ASSERT_UEQ(lib_complete.ok, 0);
    ASSERT_UEQ(cb.ok, 0);
}

/* The same library, stripped, with its .debug_frame in a separate file
 * that its .gnu_debuglink names (next to it). */
static void test_separate_debug_file(void)
{
    void *h = dlopen(SNAPPROF_TEST_DFLIB_SPLIT, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NOT_NULL(h);
    g_outer = (uint64_t(*)(uint64_t, dflib_cb))dlsym(h, "dfsplit_outer");
    ASSERT_NOT_NULL(g_outer);
    tally_t lib = {0}, cb = {0}, lib_complete = {0};
    profile_and_tally(UW_DEFAULT, "dfsplit", 1500, &lib, &cb, &lib_complete);
    expect_shape(&lib, "separate debug file, leaf in the library: complete", 300, 99.0);
    expect_shape(&cb, "separate debug file, callback: complete", 200, 99.0);
    g_outer = dflib_outer;
    dlclose(h);
}

/* The same code compiled into the executable, which has an .eh_frame_hdr
 * for the rest of its code: libunwind hands these frames over. */
static void test_executable(void)
{
    g_outer = dfexe_outer;
    tally_t lib = {0}, cb = {0}, lib_complete = {0};
    profile_and_tally(UW_DEFAULT, "dfexe", 1500, &lib, &cb, &lib_complete);
    expect_shape(&lib, "in the executable, leaf without FDE: complete", 300, 99.0);
    expect_shape(&cb, "in the executable, callback: complete", 200, 99.0);
    g_outer = dflib_outer;
}

/* ------------------------------------------------------------------------ */
/* Corrupt copies                                                           */
/* ------------------------------------------------------------------------ */

/* Random stacks and wild registers, mostly starting in code that only
 * .debug_frame describes, through the .debug_frame unwinder alone and the
 * default chain: no crash, no read outside the copy or a loaded object. */
static void test_corrupted_copy(void)
{
    snapprof_unwinder_t *df, *u[4];
    ASSERT_OK(snapprof_debug_frame_unwinder_create(&df));
    uw_case_fuzz_unwinders(u, df, uw_create_unwinder(UW_LIBUNWIND));
    static const uintptr_t code[] = {(uintptr_t)dflib_hot,       (uintptr_t)dflib_middle,
                                     (uintptr_t)dflib_outer,     (uintptr_t)df_caller,
                                     (uintptr_t)df_callback,     (uintptr_t)memcpy,
                                     (uintptr_t)df_callback_hot, (uintptr_t)malloc};
    static const uintptr_t start[] = {(uintptr_t)dflib_hot,    (uintptr_t)dflib_middle,
                                      (uintptr_t)dflib_outer,  (uintptr_t)dfexe_hot,
                                      (uintptr_t)dfexe_middle, (uintptr_t)dfexe_outer};
    uw_fuzz_spec_t spec = {
        UW_FUZZ_CODE(code, 256),
        UW_FUZZ_STARTS(start, 96, 75),
        .sp_in_copy = 1, /* so that the CFI rules read the copy */
        .chains = {{u[0]}, {u[1], u[0], u[2]}, {u[3]}, {u[3], u[0], u[2]}},
        .chain_len = {1, 3, 1, 3},
        .chain_count = 4,
    };
    uw_case_fuzz(spec, u);
}

/* ------------------------------------------------------------------------ */

static const test_case_t cases[] = {
    {"no_eh_frame", test_no_eh_frame},         {"default_chain", test_default_chain},
    {"libunwind_alone", test_libunwind_alone}, {"separate_debug_file", test_separate_debug_file},
    {"executable", test_executable},           {"corrupted_copy", test_corrupted_copy},
};

TEST_MAIN_LINE_BUFFERED(cases)
