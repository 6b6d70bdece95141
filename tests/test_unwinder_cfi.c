/* Tests of CFI unwinding (the libunwind unwinder, the default chain and the
 * hybrid) on workloads built with -O2 -fomit-frame-pointer, sampled by the
 * real profiler through the real stack copier: attribution, libc frames in
 * the middle, a second library, alloca/VLA frames, deep stacks, the depth
 * cap, signal frames, dlclose, JIT hand-off, and corrupt copies. */
#include "test.h"
#include "test_util.h"
#include "unwind_fuzz.h"
#include "unwind_case.h"
#include "unwind_test_util.h"
#include "module_cache/module_cache.h"
#include "unwinder/cfi_engine.h"

#include <dlfcn.h>
#include <link.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef uint64_t (*testlib_cb)(uint64_t);
uint64_t testlib_outer(uint64_t n, testlib_cb cb);

static volatile uint64_t g_sink;

static uint64_t next_rand(uint64_t *s)
{
    *s = *s * 6364136223846793005u + 1442695040888963407u;
    return *s >> 17;
}

/* Loop iterations per microsecond of the spin loops, measured once. */
static uint64_t g_per_us = 300;

/* ------------------------------------------------------------------------ */
/* Known-ratio workload                                                     */
/* ------------------------------------------------------------------------ */

/* Three leaves that differ in their constants, so no pass folds them. */
__attribute__((noinline)) uint64_t ratio_leaf_a(uint64_t n)
{
    uint64_t x = n | 1;
    for (uint64_t i = 0; i < n; i++) {
        x = x * 6364136223846793005u + 1442695040888963407u;
        __asm__ volatile("" : "+r"(x));
    }
    return x;
}

__attribute__((noinline)) uint64_t ratio_leaf_b(uint64_t n)
{
    uint64_t x = n | 5;
    for (uint64_t i = 0; i < n; i++) {
        x = x * 2862933555777941757u + 3037000493u;
        __asm__ volatile("" : "+r"(x));
    }
    return x;
}

__attribute__((noinline)) uint64_t ratio_leaf_c(uint64_t n)
{
    uint64_t x = n | 7;
    for (uint64_t i = 0; i < n; i++) {
        x = x * 3202034522624059733u + 4354685564936845319u;
        __asm__ volatile("" : "+r"(x));
    }
    return x;
}

static const char *const ratio_names[3] = {"ratio_leaf_a", "ratio_leaf_b", "ratio_leaf_c"};
static uint64_t g_ratio_true_ns[3], g_ratio_stalled_calls;

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void calibrate(void)
{
    uint64_t t0 = tu_thread_cpu_ns();
    g_sink += ratio_leaf_a(2000000);
    uint64_t ns = tu_thread_cpu_ns() - t0;
    g_per_us = ns ? 2000000u * 1000u / ns : 300;
    if (g_per_us == 0)
        g_per_us = 1;
}

/* 50/30/20 % of calls, each 100-300 us long at random so that no sampling
 * phase lines up with a cycle; the true split is measured with the thread's
 * CPU clock around every call. */
__attribute__((noinline)) void ratio_body(uw_worker_t *w)
{
    uint64_t seed = 42;
    memset(g_ratio_true_ns, 0, sizeof g_ratio_true_ns);
    g_ratio_stalled_calls = 0;
    while (!atomic_load_explicit(&w->stop, memory_order_relaxed)) {
        uint64_t r = next_rand(&seed);
        int which = r % 10 < 5 ? 0 : r % 10 < 8 ? 1 : 2;
        uint64_t n = g_per_us * (100 + (r >> 8) % 200);
        uint64_t t0 = tu_thread_cpu_ns();
        if (which == 0)
            g_sink += ratio_leaf_a(n);
        else if (which == 1)
            g_sink += ratio_leaf_b(n);
        else
            g_sink += ratio_leaf_c(n);
        uint64_t spent = tu_thread_cpu_ns() - t0;
        /* The host can stall this VM's vCPU for up to a second, and the
         * guest charges that to whichever thread ran: such a call says
         * nothing about its leaf's cost, so it counts on neither side. */
        if (spent > 4 * (n * 1000u / g_per_us) + 1000000u)
            g_ratio_stalled_calls++;
        else
            g_ratio_true_ns[which] += spent;
    }
}

static void test_ratio(void)
{
    calibrate();
    uw_worker_t w;
    uw_collector_t c;
    uw_run_t run = {.kind = UW_DEFAULT,
                    .interval_ns = 1000000u,
                    .min_samples = 5000,
                    .timeout_ns = 90000000000u};
    uw_case_profile(&w, ratio_body, 0, &run, &c);

    double rate = uw_complete_rate(&c, &w, "default unwinder, -fomit-frame-pointer");
    /* Samples weigh the thread CPU time since the previous sample. One
     * whose interval took in a vCPU stall (or a sampler that was kept off
     * the CPU) weighs up to a second; which leaf runs when it ends is
     * unrelated to that lump, so such samples are left out, unbiased. */
    uint64_t *weights = calloc(c.count + 1, sizeof *weights);
    size_t nw = 0;
    for (size_t i = 0; i < c.count; i++)
        if (c.samples[i].tid == w.tid)
            weights[nw++] = c.samples[i].cpu_ns;
    qsort(weights, nw, sizeof *weights, cmp_u64);
    uint64_t limit = 10 * (nw ? weights[nw / 2] : 0);
    if (limit < 10 * run.interval_ns)
        limit = 10 * run.interval_ns;
    free(weights);
    double weight[3] = {0, 0, 0}, total = 0, total_sq = 0, true_total = 0;
    size_t dropped = 0;
    for (size_t i = 0; i < c.count; i++) {
        const uw_sample_t *s = &c.samples[i];
        if (s->tid != w.tid || s->count == 0)
            continue;
        if (s->cpu_ns > limit) {
            dropped++;
            continue;
        }
        for (int k = 0; k < 3; k++)
            if (uw_frame_is(&uw_frames(&c, s)[0], ratio_names[k])) {
                weight[k] += (double)s->cpu_ns;
                total += (double)s->cpu_ns;
                total_sq += (double)s->cpu_ns * (double)s->cpu_ns;
            }
    }
    /* Unequal weights make the estimate noisier than its sample count
     * says; this is the count of equal-weight samples it is worth. */
    double n_eff = total_sq > 0 ? total * total / total_sq : 0;
    printf("ticks %llu, missed %llu; samples over %llu ns left out: %zu; stalled calls: %llu; "
           "effective samples %.0f\n",
           (unsigned long long)c.stats.ticks, (unsigned long long)c.stats.ticks_missed,
           (unsigned long long)limit, dropped, (unsigned long long)g_ratio_stalled_calls, n_eff);
    if (rate < 99.0) {
        for (size_t i = 0, shown = 0; i < c.count && shown < 3; i++)
            if (!uw_complete(uw_frames(&c, &c.samples[i]), c.samples[i].count, &w)) {
                uw_print_sample(&c, &c.samples[i]);
                shown++;
            }
        TEST_FAIL("complete stacks %.2f %% < 99 %%", rate);
    }
    for (int k = 0; k < 3; k++)
        true_total += (double)g_ratio_true_ns[k];
    ASSERT(total > 0 && true_total > 0);
    if (n_eff < 2500) {
        /* +-3 points is 3.5 standard errors at 2500; with fewer the
         * comparison says more about the machine's load than about us. */
        printf("skipped: the machine is too loaded for a +-3 point check: %.0f effective "
               "samples in 90 s (2500 needed)\n",
               n_eff);
        exit(TEST_SKIP);
    }
    for (int k = 0; k < 3; k++) {
        double got = 100.0 * weight[k] / total, want = 100.0 * g_ratio_true_ns[k] / true_total;
        printf("%s: profile %.2f %%, thread CPU clock %.2f %%\n", ratio_names[k], got, want);
        if (got < want - 3.0 || got > want + 3.0)
            TEST_FAIL("%s off by more than 3 points", ratio_names[k]);
    }
    printf("stats: complete %llu, aborted %llu, unknown %llu, unwind p50 %llu ns p99 %llu ns\n",
           (unsigned long long)c.stats.unwind_complete, (unsigned long long)c.stats.unwind_aborted,
           (unsigned long long)c.stats.unwind_unknown, (unsigned long long)c.stats.unwind_p50_ns,
           (unsigned long long)c.stats.unwind_p99_ns);
    uw_collector_free(&c);
}

/* The same workload under every unwinder: the complete-stack rates. */
static void test_rates(void)
{
    calibrate();
    uw_worker_t w;
    run_worker(&w, ratio_body, 0);
    double rate[UW_KIND_COUNT];
    for (int k = 0; k < UW_KIND_COUNT; k++) {
        uw_collector_t c = {0};
        uw_run_t run = {.kind = (uw_kind_t)k,
                        .interval_ns = 1000000u,
                        .min_samples = 1000,
                        .timeout_ns = 25000000000u};
        uw_profile(&w, &run, &c);
        char label[64];
        snprintf(label, sizeof label, "-fomit-frame-pointer, %s", uw_kind_name((uw_kind_t)k));
        rate[k] = uw_complete_rate(&c, &w, label);
        printf("  unwind p50 %llu ns, p99 %llu ns\n", (unsigned long long)c.stats.unwind_p50_ns,
               (unsigned long long)c.stats.unwind_p99_ns);
        uw_collector_free(&c);
    }
    uw_worker_stop(&w);
    ASSERT_GE(rate[UW_DEFAULT], 99.0);
    ASSERT_GE(rate[UW_LIBUNWIND], 99.0);
    ASSERT_GE(rate[UW_HYBRID], 99.0);
    ASSERT_GE(rate[UW_CFI_TABLE], 99.0);
    /* The build really has no frame pointers: frame-pointer walking fails. */
    ASSERT_LT(rate[UW_FP], 50.0);
}

/* ------------------------------------------------------------------------ */
/* libc in the middle: qsort and bsearch comparators                        */
/* ------------------------------------------------------------------------ */

static uint64_t burn(uint64_t n, uint64_t x)
{
    for (uint64_t i = 0; i < n; i++) {
        x = x * 6364136223846793005u + 1;
        __asm__ volatile("" : "+r"(x));
    }
    return x;
}

__attribute__((noinline)) int qs_compare(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    g_sink += burn(40, x);
    return x < y ? -1 : x > y;
}

__attribute__((noinline)) int bs_compare(const void *key, const void *elem)
{
    uint32_t x = *(const uint32_t *)key, y = *(const uint32_t *)elem;
    g_sink += burn(40, y);
    return x < y ? -1 : x > y;
}

__attribute__((noinline)) void qs_sort(uint32_t *v, size_t n)
{
    qsort(v, n, sizeof *v, qs_compare);
    __asm__ volatile("" ::: "memory");
}

/* Called through a pointer so that libc's own bsearch runs (the header's
 * inline version would put no libc frame in between). */
static void *(*volatile g_bsearch)(const void *, const void *, size_t, size_t,
                                   int (*)(const void *, const void *)) = bsearch;

__attribute__((noinline)) void qs_search(const uint32_t *v, size_t n, uint64_t *seed)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t key = (uint32_t)next_rand(seed);
        g_sink += g_bsearch(&key, v, n, sizeof *v, bs_compare) != NULL;
    }
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void qs_body(uw_worker_t *w)
{
    enum { N = 2000 };
    static uint32_t v[N];
    uint64_t seed = 7;
    while (!atomic_load_explicit(&w->stop, memory_order_relaxed)) {
        for (size_t i = 0; i < N; i++)
            v[i] = (uint32_t)next_rand(&seed);
        qs_sort(v, N);
        qs_search(v, N, &seed);
    }
}

static int in_libc(const snapprof_frame_t *f)
{
    return f->module && strstr(f->module->path, "libc.so") != NULL;
}

/* Sanitizer runtimes interpose qsort and bsearch with frames of their own. */
static int in_sanitizer(const snapprof_frame_t *f)
{
    return f->module && (strstr(f->module->path, "libasan") || strstr(f->module->path, "libtsan"));
}

/* cmp, then libc frames (and a sanitizer's), then caller, further out. */
static int libc_between(const snapprof_frame_t *f, size_t n, const char *cmp, const char *caller)
{
    long a = uw_find(f, n, cmp), b = uw_find(f, n, caller);
    int libc = 0;
    if (a < 0 || b <= a + 1)
        return 0;
    for (long i = a + 1; i < b; i++) {
        if (!in_libc(&f[i]) && !in_sanitizer(&f[i]))
            return 0;
        libc |= in_libc(&f[i]) || in_sanitizer(&f[i]); /* it may call cmp itself */
    }
    return libc;
}

static void test_qsort_bsearch(void)
{
    uw_worker_t w;
    uw_collector_t c;
    uw_run_t run = {.kind = UW_DEFAULT, .interval_ns = 1000000u, .min_samples = 1500};
    uw_case_profile(&w, qs_body, 0, &run, &c);
    tally_t q = {0}, b = {0};
    int shown = 0;
    for (size_t i = 0; i < c.count; i++) {
        const uw_sample_t *s = &c.samples[i];
        const snapprof_frame_t *f = uw_frames(&c, s);
        if (s->tid != w.tid)
            continue;
        tally_t *t = uw_find(f, s->count, "qs_compare") >= 0   ? &q
                     : uw_find(f, s->count, "bs_compare") >= 0 ? &b
                                                               : NULL;
        if (!t)
            continue;
        t->seen++;
        int ok = uw_complete(f, s->count, &w) &&
                 (t == &q ? libc_between(f, s->count, "qs_compare", "qs_sort")
                          : libc_between(f, s->count, "bs_compare", "qs_search"));
        t->ok += ok;
        if (!ok && shown++ < 3)
            uw_print_sample(&c, s);
    }
    expect_shape(&q, "qsort comparator: libc frames, caller, complete", 50, 99.0);
    expect_shape(&b, "bsearch comparator: libc frames, caller, complete", 50, 99.0);
    uw_collector_free(&c);
}

/* ------------------------------------------------------------------------ */
/* A second shared library without frame pointers                          */
/* ------------------------------------------------------------------------ */

UW_CASE_CALLBACK_WORKLOAD(lib, testlib_outer)

static void test_shared_lib(void)
{
    uw_worker_t w;
    uw_collector_t c;
    uw_run_t run = {.kind = UW_DEFAULT, .interval_ns = 1000000u, .min_samples = 1500};
    uw_case_profile(&w, lib_body, 0, &run, &c);
    static const char *const in_lib[] = {"testlib_hot", "testlib_middle", "testlib_outer",
                                         "lib_caller",  "lib_body",       NULL};
    static const char *const callback[] = {"lib_callback_hot", "lib_callback", "testlib_middle",
                                           "testlib_outer",    "lib_caller",   NULL};
    int shown = 0;
    tally_t l = {0}, cb = {0};
    for (size_t i = 0; i < c.count; i++) {
        const uw_sample_t *s;
        const snapprof_frame_t *f = uw_case_worker_frames(&c, i, &w, &s);
        if (!f)
            continue;
        const char *const *want = uw_frame_is(&f[0], "testlib_hot")        ? in_lib
                                  : uw_frame_is(&f[0], "lib_callback_hot") ? callback
                                                                           : NULL;
        if (!want)
            continue;
        tally_t *t = want == in_lib ? &l : &cb;
        t->seen++;
        int ok = in_order(f, s->count, want) && uw_complete(f, s->count, &w);
        t->ok += ok;
        if (!ok && shown++ < 3)
            uw_print_sample(&c, s);
    }
    expect_shape(&l, "leaf in the library: its callers, complete", 50, 99.0);
    expect_shape(&cb, "callback from the library: complete", 50, 99.0);
    uw_collector_free(&c);
}

/* ------------------------------------------------------------------------ */
/* alloca and VLA frames                                                    */
/* ------------------------------------------------------------------------ */

__attribute__((noinline)) uint64_t vla_leaf(volatile char *p, size_t n)
{
    uint64_t x = n;
    for (size_t i = 0; i < 20000; i++) {
        x = x * 6364136223846793005u + (uint64_t)p[i % n];
        __asm__ volatile("" : "+r"(x));
    }
    return x;
}

__attribute__((noinline)) uint64_t vla_frame(size_t n)
{
    volatile char vla[n];
    vla[0] = 1;
    vla[n - 1] = 2;
    uint64_t r = vla_leaf(vla, n);
    return r + (uint64_t)vla[n / 2];
}

__attribute__((noinline)) uint64_t alloca_frame(size_t n)
{
    volatile char *p = __builtin_alloca(n);
    p[0] = 3;
    p[n - 1] = 4;
    uint64_t r = vla_frame(n / 2 + 1);
    return r + (uint64_t)p[n - 1];
}

__attribute__((noinline)) void alloca_body(uw_worker_t *w)
{
    uint64_t seed = 3;
    while (!atomic_load_explicit(&w->stop, memory_order_relaxed))
        g_sink += alloca_frame(16 + next_rand(&seed) % 8192);
}

static void test_alloca_vla(void)
{
    uw_worker_t w;
    uw_collector_t c;
    uw_run_t run = {.kind = UW_DEFAULT, .interval_ns = 1000000u, .min_samples = 1000};
    uw_case_profile(&w, alloca_body, 0, &run, &c);
    static const char *const want[] = {"vla_leaf", "vla_frame", "alloca_frame", "alloca_body",
                                       NULL};
    tally_t t = {0};
    int shown = 0;
    for (size_t i = 0; i < c.count; i++) {
        const uw_sample_t *s = &c.samples[i];
        const snapprof_frame_t *f = uw_frames(&c, s);
        if (s->tid != w.tid || s->count == 0 || !uw_frame_is(&f[0], "vla_leaf"))
            continue;
        t.seen++;
        int ok = in_order(f, s->count, want) && uw_complete(f, s->count, &w);
        t.ok += ok;
        if (!ok && shown++ < 3)
            uw_print_sample(&c, s);
    }
    expect_shape(&t, "alloca and VLA frames: callers, complete", 100, 99.0);
    uw_collector_free(&c);
}

/* ------------------------------------------------------------------------ */
/* Deep stacks and the depth cap                                            */
/* ------------------------------------------------------------------------ */

static int g_depth, g_big_every;

__attribute__((noinline)) uint64_t deep_bottom(uw_worker_t *w)
{
    uint64_t x = 1;
    while (!atomic_load_explicit(&w->stop, memory_order_relaxed)) {
        x = burn(1000, x);
        __asm__ volatile("" : "+r"(x));
    }
    return x;
}

uint64_t deep_recurse(uw_worker_t *w, int depth);
uint64_t deep_big(uw_worker_t *w, int depth);

/* One frame per level: depth levels of deep_recurse or deep_big (every
 * g_big_every-th level, with 64 KiB of locals), then deep_bottom. */
static inline __attribute__((always_inline)) uint64_t deep_next(uw_worker_t *w, int depth)
{
    if (depth == 0)
        return deep_bottom(w);
    if (g_big_every && depth % g_big_every == 0)
        return deep_big(w, depth);
    return deep_recurse(w, depth);
}

__attribute__((noinline)) uint64_t deep_big(uw_worker_t *w, int depth)
{
    volatile char big[65536];
    big[0] = (char)depth;
    big[sizeof big - 1] = 1;
    uint64_t r = deep_next(w, depth - 1);
    return r + (uint64_t)big[0] + (uint64_t)big[sizeof big - 1];
}

__attribute__((noinline)) uint64_t deep_recurse(uw_worker_t *w, int depth)
{
    uint64_t r = deep_next(w, depth - 1);
    __asm__ volatile("" : "+r"(r));
    return r + 1;
}

__attribute__((noinline)) void deep_body(uw_worker_t *w)
{
    g_sink += deep_next(w, g_depth);
    __asm__ volatile("" ::: "memory");
}

static size_t count_named(const snapprof_frame_t *f, size_t n, const char *name)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += uw_frame_is(&f[i], name);
    return k;
}

static void test_deep_recursion(void)
{
    g_depth = 2000;
    g_big_every = 25;
    uw_worker_t w;
    run_worker(&w, deep_body, 16u << 20); /* the recursion needs about 5.3 MiB */
    uw_collector_t c = {0};
    /* Default parameters: 4096 frames, an 8 MiB buffer; the handshake,
     * which copies every stack whole. A CPU-clock trigger's first capture of
     * a deep thread is truncated until its buffer grows (test_trigger.c's
     * deep_stack). */
    uw_run_t run = {.kind = UW_DEFAULT,
                    .interval_ns = 10000000u,
                    .min_samples = 30,
                    .trigger = SNAPPROF_TRIGGER_HANDSHAKE};
    uw_profile(&w, &run, &c);
    uw_worker_stop(&w);
    tally_t t = {0};
    int shown = 0;
    size_t frames_max = 0;
    for (size_t i = 0; i < c.count; i++) {
        const uw_sample_t *s = &c.samples[i];
        const snapprof_frame_t *f = uw_frames(&c, s);
        if (s->tid != w.tid || s->count == 0 || uw_find(f, 3, "deep_bottom") < 0)
            continue;
        t.seen++;
        size_t levels =
            count_named(f, s->count, "deep_recurse") + count_named(f, s->count, "deep_big");
        int ok = levels == 2000 && uw_complete(f, s->count, &w) &&
                 !(s->flags & (SNAPPROF_SAMPLE_TRUNCATED_COPY | SNAPPROF_SAMPLE_TRUNCATED_DEPTH));
        t.ok += ok;
        if (s->count > frames_max)
            frames_max = s->count;
        if (!ok && shown++ < 2) {
            printf("levels %zu\n", levels);
            uw_print_sample(&c, s);
        }
    }
    printf("deepest stack %zu frames, largest copy %llu bytes, unwind p50 %llu ns p99 %llu ns\n",
           frames_max, (unsigned long long)c.stats.copy_bytes_max,
           (unsigned long long)c.stats.unwind_p50_ns, (unsigned long long)c.stats.unwind_p99_ns);
    expect_rate(&t, "2000-frame recursion complete to the thread entry", 10, 100.0);
    ASSERT_UEQ(c.stats.truncated_copy, 0);
    ASSERT_UEQ(c.stats.truncated_depth, 0);
    uw_collector_free(&c);
}

static void test_depth_cap(void)
{
    g_depth = 3000;
    g_big_every = 0;
    uw_worker_t w;
    uw_collector_t c;
    uw_run_t run = {
        .kind = UW_DEFAULT, .interval_ns = 10000000u, .min_samples = 20, .max_frames = 500};
    uw_case_profile(&w, deep_body, 16u << 20, &run, &c);
    size_t seen = 0;
    for (size_t i = 0; i < c.count; i++) {
        const uw_sample_t *s = &c.samples[i];
        const snapprof_frame_t *f = uw_frames(&c, s);
        long bottom = uw_find(f, 3, "deep_bottom");
        if (s->tid != w.tid || s->count == 0 || bottom < 0)
            continue;
        seen++;
        /* The cap holds the marker too: 499 frames and "[truncated]". */
        ASSERT_EQ(s->count, 500);
        ASSERT_EQ(f[s->count - 1].kind, SNAPPROF_FRAME_MARKER);
        ASSERT_STR_EQ(f[s->count - 1].name, "[truncated]");
        ASSERT(s->flags & SNAPPROF_SAMPLE_TRUNCATED_DEPTH);
        ASSERT_EQ(count_named(f, s->count, "deep_recurse"), 499 - (bottom + 1));
    }
    printf("capped samples %zu, truncated_depth %llu, unwind_complete %llu\n", seen,
           (unsigned long long)c.stats.truncated_depth,
           (unsigned long long)c.stats.unwind_complete);
    ASSERT_GE(seen, 10);
    ASSERT_GE(c.stats.truncated_depth, seen);
    uw_collector_free(&c);
}

/* ------------------------------------------------------------------------ */
/* Signal frames                                                            */
/* ------------------------------------------------------------------------ */

/* Interrupted pcs the handler saw (the victim loop has only a few). */
#define MAX_INTERRUPTED 64
static uintptr_t g_interrupted[MAX_INTERRUPTED];
static atomic_int g_interrupted_count;

__attribute__((noinline)) uint64_t sig_handler_burn(uint64_t n)
{
    uint64_t x = n | 11;
    for (uint64_t i = 0; i < n; i++) {
        x = x * 7664345821815920749u + 13;
        __asm__ volatile("" : "+r"(x));
    }
    return x;
}

__attribute__((noinline)) void sig_handler(int signo, siginfo_t *info, void *ucv)
{
    (void)signo, (void)info;
    const ucontext_t *uc = ucv;
    uintptr_t pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
    int n = atomic_load(&g_interrupted_count);
    int known = 0;
    for (int i = 0; i < n; i++)
        known |= g_interrupted[i] == pc;
    if (!known && n < MAX_INTERRUPTED) {
        g_interrupted[n] = pc;
        atomic_store(&g_interrupted_count, n + 1);
    }
    g_sink += sig_handler_burn(g_per_us * 1000); /* about 1 ms */
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void sig_victim_spin(uw_worker_t *w)
{
    uint64_t x = 5;
    while (!atomic_load_explicit(&w->stop, memory_order_relaxed)) {
        x = x * 6364136223846793005u + 17;
        __asm__ volatile("" : "+r"(x));
    }
    g_sink += x;
}

__attribute__((noinline)) void sig_body(uw_worker_t *w)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = sig_handler;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    ASSERT_EQ(sigaction(SIGUSR2, &sa, NULL), 0);
    /* Every 2 ms of this thread's CPU time, to this thread. */
    struct sigevent sev;
    memset(&sev, 0, sizeof sev);
    sev.sigev_notify = SIGEV_THREAD_ID;
    sev.sigev_signo = SIGUSR2;
    sev._sigev_un._tid = (pid_t)syscall(SYS_gettid);
    timer_t timer;
    ASSERT_EQ(timer_create(CLOCK_THREAD_CPUTIME_ID, &sev, &timer), 0);
    struct itimerspec its = {{0, 2000000}, {0, 2000000}};
    ASSERT_EQ(timer_settime(timer, 0, &its, NULL), 0);
    sig_victim_spin(w);
    timer_delete(timer);
    __asm__ volatile("" ::: "memory");
}

/* The sa_restorer glibc gave the kernel: __restore_rt, the trampoline. */
static uintptr_t kernel_restorer(int signo)
{
    struct {
        void *handler;
        unsigned long flags;
        void *restorer;
        uint64_t mask;
    } ksa;
    ASSERT_EQ(syscall(SYS_rt_sigaction, signo, NULL, &ksa, 8), 0);
    return (uintptr_t)ksa.restorer;
}

static void test_signal_handler(void)
{
    tu_skip_under_tsan("TSan runs signal handlers from its own runtime, not from the kernel's "
                       "signal frame");
    calibrate();
    atomic_store(&g_interrupted_count, 0);
    uw_worker_t w;
    run_worker(&w, sig_body, 0);
    uw_collector_t c = {0};
    /* Only a few percent of the samples land in the handler (79 of 1500
     * once in CI on a loaded machine): take enough for 50 of them. */
    uw_run_t run = {.kind = UW_DEFAULT, .interval_ns = 1000000u, .min_samples = 3000};
    uw_profile(&w, &run, &c);
    uintptr_t restorer = kernel_restorer(SIGUSR2);
    uw_worker_stop(&w);
    int n_interrupted = atomic_load(&g_interrupted_count);
    ASSERT_GT(n_interrupted, 0);
    ASSERT_LT(n_interrupted, MAX_INTERRUPTED);
    tally_t t = {0};
    int shown = 0;
    for (size_t i = 0; i < c.count; i++) {
        const uw_sample_t *s = &c.samples[i];
        const snapprof_frame_t *f = uw_frames(&c, s);
        if (s->tid != w.tid || s->count < 4 || !uw_frame_is(&f[0], "sig_handler_burn"))
            continue;
        t.seen++;
        /* handler_burn, handler, the trampoline at its exact address, then
         * the interrupted frame at the exact interrupted pc. */
        long h = uw_find(f, s->count, "sig_handler");
        int ok = h == 1 && (size_t)h + 2 < s->count && f[h + 1].pc == restorer &&
                 uw_frame_is(&f[h + 2], "sig_victim_spin") && uw_complete(f, s->count, &w);
        int exact = 0;
        for (int k = 0; ok && k < n_interrupted; k++)
            exact |= f[h + 2].pc == g_interrupted[k];
        ok = ok && exact;
        t.ok += ok;
        if (!ok && shown++ < 3) {
            printf("restorer %#lx\n", (unsigned long)restorer);
            uw_print_sample(&c, s);
        }
    }
    expect_rate(&t, "through the signal frame, exact pcs, complete", 50, 99.0);
    uw_collector_free(&c);
}

/* ------------------------------------------------------------------------ */
/* dlclose while profiling                                                  */
/* ------------------------------------------------------------------------ */

#define MAX_RANGES 16
static struct {
    uintptr_t start, end;
} g_dl_ranges[MAX_RANGES];
static atomic_int g_dl_range_count;
static atomic_int g_dl_cycles;
/* The library's dllib_* functions, as ELF virtual addresses (the same at
 * every load): frames elsewhere in it are its start-up and tear-down code
 * (_init, PLT stubs, __do_global_dtors_aux), met in samples taken inside
 * dlopen() and dlclose(), which must resolve to the library too but are
 * not named dllib_*. */
static struct {
    uintptr_t start, end;
} g_dl_fns[2];
static atomic_int g_dl_fns_known;

static void note_dllib_fn(void *fn, int i)
{
    Dl_info info;
    const ElfW(Sym) *sym = NULL;
    ASSERT(dladdr1(fn, &info, (void **)&sym, RTLD_DL_SYMENT) != 0 && sym != NULL);
    g_dl_fns[i].start = (uintptr_t)sym->st_value;
    g_dl_fns[i].end = (uintptr_t)(sym->st_value + sym->st_size);
}

static int note_dllib(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size, (void)data;
    if (!strstr(info->dlpi_name, "unwinder_dllib"))
        return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
            continue;
        uintptr_t start = info->dlpi_addr + ph->p_vaddr, end = start + ph->p_memsz;
        int n = atomic_load(&g_dl_range_count), known = 0;
        for (int k = 0; k < n; k++)
            known |= g_dl_ranges[k].start == start;
        if (!known && n < MAX_RANGES) {
            g_dl_ranges[n].start = start;
            g_dl_ranges[n].end = end;
            atomic_store(&g_dl_range_count, n + 1);
        }
    }
    return 0;
}

__attribute__((noinline)) uint64_t dl_caller(uint64_t (*outer)(uint64_t), uint64_t n)
{
    uint64_t r = outer(n);
    __asm__ volatile("" : "+r"(r));
    return r;
}

__attribute__((noinline)) void dl_body(uw_worker_t *w)
{
    while (!atomic_load_explicit(&w->stop, memory_order_relaxed)) {
        void *h = dlopen(SNAPPROF_TEST_DLLIB, RTLD_NOW | RTLD_LOCAL);
        ASSERT_NOT_NULL(h);
        uint64_t (*outer)(uint64_t) = (uint64_t(*)(uint64_t))dlsym(h, "dllib_outer");
        ASSERT_NOT_NULL(outer);
        dl_iterate_phdr(note_dllib, NULL);
        if (!atomic_load(&g_dl_fns_known)) {
            note_dllib_fn((void *)outer, 0);
            note_dllib_fn(dlsym(h, "dllib_hot"), 1);
            atomic_store(&g_dl_fns_known, 1);
        }
        uint64_t end = tu_thread_cpu_ns() + 20000000u;
        while (tu_thread_cpu_ns() < end)
            g_sink += dl_caller(outer, 20000);
        ASSERT_EQ(dlclose(h), 0);
        atomic_fetch_add(&g_dl_cycles, 1);
    }
}

static int in_dl_ranges(uintptr_t pc)
{
    int n = atomic_load(&g_dl_range_count);
    for (int k = 0; k < n; k++)
        if (pc >= g_dl_ranges[k].start && pc < g_dl_ranges[k].end)
            return 1;
    return 0;
}

static void test_dlclose(void)
{
    uw_worker_t w;
    uw_collector_t c;
    uw_run_t run = {.kind = UW_DEFAULT, .interval_ns = 1000000u, .min_samples = 2000};
    uw_case_profile(&w, dl_body, 0, &run, &c);
    /* The library is unloaded now. */
    void *probe = dlopen(SNAPPROF_TEST_DLLIB, RTLD_NOW | RTLD_NOLOAD);
    ASSERT_NULL(probe);
    /* The cache learns of an unload at its next update (each tick, or a
     * miss), and the profile has stopped: update it, as the next tick
     * would. A library reloaded at the same place between two updates is
     * one entry, so without this the frames of the last few cycles keep
     * an entry marked loaded (CI saw 11 % of frames so on a loaded
     * machine). */
    ASSERT_EQ(snapprof__module_cache_update(), 0);
    printf("load/unload cycles: %d\n", atomic_load(&g_dl_cycles));
    /* Sanitizer runs are slow and short: fewer cycles and samples. */
    int san = tu_sanitizer_build();
    ASSERT_GE(atomic_load(&g_dl_cycles), san ? 3 : 10);
    ASSERT(atomic_load(&g_dl_fns_known));
    tally_t frames = {0}, stacks = {0};
    size_t other_code = 0;
    for (size_t i = 0; i < c.count; i++) {
        const uw_sample_t *s = &c.samples[i];
        const snapprof_frame_t *f = uw_frames(&c, s);
        if (s->tid != w.tid)
            continue;
        int in_lib = 0;
        for (size_t k = 0; k < s->count; k++) {
            if (f[k].kind == SNAPPROF_FRAME_MARKER || !in_dl_ranges(f[k].pc))
                continue;
            in_lib = 1;
            frames.seen++;
            /* The module the frame got during the run is still there, now
             * marked unloaded, and still symbolizes the frame (the module
             * cache reads the file, not the unmapped memory). */
            const snapprof_module_t *m = f[k].module;
            snapprof_symbol_t sym[4];
            int n = m ? snapprof_symbolize(&f[k], sym, 4) : 0;
            int in_fn = 0;
            for (int j = 0; m && j < 2; j++)
                in_fn |= f[k].pc - m->load_bias >= g_dl_fns[j].start &&
                         f[k].pc - m->load_bias < g_dl_fns[j].end;
            other_code += m && !in_fn;
            /* The loader's entry, never a maps-only one made while
             * dlopen() was half-way: that has no load bias or symbols. */
            int ok = m && strstr(m->path, "unwinder_dllib") && !m->is_loaded &&
                     m->kind == SNAPPROF_MODULE_NATIVE && f[k].pc >= m->start &&
                     f[k].pc < m->limit &&
                     (!in_fn || (n > 0 && strncmp(sym[0].name, "dllib_", 6) == 0));
            frames.ok += ok;
            if (!ok && frames.seen - frames.ok <= 3)
                printf("frame %zu of %zu, pc %#lx: module %s [%#lx, %#lx) loaded %d; symbol %s\n",
                       k, s->count, (unsigned long)f[k].pc, m ? m->path : "none",
                       m ? (unsigned long)m->start : 0, m ? (unsigned long)m->limit : 0,
                       m ? m->is_loaded : -1, n > 0 ? sym[0].name : "none");
        }
        if (in_lib) {
            stacks.seen++;
            stacks.ok += uw_find(f, s->count, "dl_caller") >= 0 && uw_complete(f, s->count, &w);
        }
    }
    printf("%zu of the frames are in its start-up or tear-down code\n", other_code);
    expect_rate(&frames, "frames in the unloaded library resolve to it", 100, 99.0);
    /* A sample whose library went away between the copy and the unwind
     * cannot be unwound through it; that must be rare, and safe. */
    expect_shape(&stacks, "stacks through the library complete", 100, 95.0);
    uw_collector_free(&c);
}

/* ------------------------------------------------------------------------ */
/* Hand-off to and from a JIT unwinder                                      */
/* ------------------------------------------------------------------------ */

static uint8_t *g_jit;
static const size_t g_jit_size = 4096;

__attribute__((noinline)) uint64_t jit_callee(uint64_t n)
{
    uint64_t x = n | 13;
    for (uint64_t i = 0; i < n; i++) {
        x = x * 3935559000370003845u + 1;
        __asm__ volatile("" : "+r"(x));
    }
    return x;
}

/* push rbp; mov rbp, rsp; movabs rax, jit_callee; call rax; pop rbp; ret */
static void make_jit(void)
{
    g_jit = mmap(NULL, g_jit_size, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS,
                 -1, 0);
    ASSERT(g_jit != MAP_FAILED);
    uint8_t code[] = {0x55, 0x48, 0x89, 0xe5, 0x48, 0xb8, 0,    0,    0,
                      0,    0,    0,    0,    0,    0xff, 0xd0, 0x5d, 0xc3};
    uintptr_t target = (uintptr_t)jit_callee;
    memcpy(&code[6], &target, 8);
    memcpy(g_jit, code, sizeof code);
    __builtin___clear_cache((char *)g_jit, (char *)g_jit + sizeof code);
}

__attribute__((noinline)) uint64_t jit_caller(uint64_t n)
{
    uint64_t (*fn)(uint64_t) = (uint64_t(*)(uint64_t))(void *)g_jit;
    uint64_t r = fn(n);
    __asm__ volatile("" : "+r"(r));
    return r + 1;
}

__attribute__((noinline)) void jit_body(uw_worker_t *w)
{
    while (!atomic_load_explicit(&w->stop, memory_order_relaxed))
        g_sink += jit_caller(20000);
}

/* A JIT unwinder as a host would write one: its code keeps frame records. */
static int jit_can_unwind_from(void *ud, const snapprof_frame_t *f)
{
    (void)ud;
    return f->kind != SNAPPROF_FRAME_MARKER && f->pc >= (uintptr_t)g_jit &&
           f->pc < (uintptr_t)g_jit + g_jit_size;
}

static snapprof_unwind_result_t jit_try_unwind(void *ud, snapprof_unwind_ctx_t *ctx)
{
    (void)ud;
    uintptr_t fp = ctx->regs.r[SNAPPROF_REG_FP];
    if (fp < ctx->stack->bottom || fp > ctx->stack->top - 16 || fp % 8) {
        ctx->abort_reason = "jit: bad frame pointer";
        return SNAPPROF_UNWIND_ABORTED;
    }
    const uintptr_t *rec = (const uintptr_t *)fp;
    ctx->frames[ctx->frame_count - 1].kind = SNAPPROF_FRAME_JIT;
    ctx->frames[ctx->frame_count - 1].name = "jit_stub";
    if (snapprof_unwind_push_frame(ctx, rec[1] - 1, SNAPPROF_FRAME_NATIVE, NULL) != 0)
        return SNAPPROF_UNWIND_ABORTED;
    /* rbx, r12-r15 are untouched by the stub: keep what the previous
     * unwinder left. */
    ctx->regs.r[SNAPPROF_REG_SP] = fp + 16;
    ctx->regs.r[SNAPPROF_REG_FP] = rec[0];
    ctx->regs.r[SNAPPROF_REG_PC] = rec[1];
    return SNAPPROF_UNWIND_UNRECOGNIZED_FRAME;
}

static const snapprof_unwinder_ops_t jit_ops = {
    .version = SNAPPROF_UNWINDER_OPS_VERSION,
    .name = "test-jit",
    .xCanUnwindFrom = jit_can_unwind_from,
    .xTryUnwind = jit_try_unwind,
};

static void check_jit(uw_kind_t kind)
{
    uw_worker_t w;
    run_worker(&w, jit_body, 0);
    uw_collector_t c = {0};
    snapprof_unwinder_t *jit;
    ASSERT_OK(snapprof_unwinder_create(&jit_ops, NULL, &jit));
    uw_run_t run = {.kind = kind, .interval_ns = 1000000u, .min_samples = 1000, .extra = jit};
    uw_profile(&w, &run, &c);
    uw_worker_stop(&w);
    tally_t t = {0};
    int shown = 0;
    for (size_t i = 0; i < c.count; i++) {
        const uw_sample_t *s = &c.samples[i];
        const snapprof_frame_t *f = uw_frames(&c, s);
        if (s->tid != w.tid || s->count < 3 || !uw_frame_is(&f[0], "jit_callee"))
            continue;
        t.seen++;
        int ok = f[1].kind == SNAPPROF_FRAME_JIT && uw_frame_is(&f[2], "jit_caller") &&
                 uw_complete(f, s->count, &w);
        t.ok += ok;
        if (!ok && shown++ < 3)
            uw_print_sample(&c, s);
    }
    char what[96];
    snprintf(what, sizeof what, "%s -> JIT unwinder -> %s, complete", uw_kind_name(kind),
             uw_kind_name(kind));
    expect_shape(&t, what, 100, 99.0);
    uw_collector_free(&c);
}

static void test_jit_handoff(void)
{
    make_jit();
    check_jit(UW_LIBUNWIND);
    check_jit(UW_HYBRID);
    check_jit(UW_CFI_TABLE);
    munmap(g_jit, g_jit_size);
}

/* ------------------------------------------------------------------------ */
/* Corrupt copies                                                           */
/* ------------------------------------------------------------------------ */

/* Random stacks and wild registers through each unwinder alone and the
 * default chain: no crash, no read outside the copy or a loaded object. */
static void test_corrupted_copy(void)
{
    snapprof_unwinder_t *u[4];
    u[0] = uw_create_unwinder(UW_LIBUNWIND);
    u[1] = uw_create_unwinder(UW_HYBRID);
    u[2] = uw_create_unwinder(UW_FP);
    u[3] = uw_create_unwinder(UW_CFI_TABLE);
    static const uintptr_t code[] = {(uintptr_t)ratio_leaf_a, (uintptr_t)qs_compare,
                                     (uintptr_t)deep_recurse, (uintptr_t)sig_handler,
                                     (uintptr_t)memcpy,       (uintptr_t)qsort,
                                     (uintptr_t)malloc,       (uintptr_t)snapprof_profiler_start};
    static const uintptr_t start[] = {(uintptr_t)ratio_leaf_a};
    uw_fuzz_spec_t spec = {
        .code = code,
        .code_count = 8,
        .code_span = 512,
        .start_pcs = start,
        .start_count = 1,
        .start_span = 64,
        .start_pc_percent = 50, /* mostly start in real code, so CFI runs */
        .chains = {{u[0]}, {u[1]}, {u[0], u[2]}, {u[2]}, {u[3]}, {u[3], u[0], u[2]}},
        .chain_len = {1, 1, 2, 1, 1, 3},
        .chain_count = 6,
    };
    uw_fuzz_result_t r = uw_case_fuzz(spec, u);
    ASSERT_GT(r.module_reads, 100);
}

/* ------------------------------------------------------------------------ */
/* Reads of object memory are cached                                       */
/* ------------------------------------------------------------------------ */

static int note_eh_frame_hdrs(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    uintptr_t *hdrs = data;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        if (info->dlpi_phdr[i].p_type != PT_GNU_EH_FRAME || hdrs[0] >= 63)
            continue;
        hdrs[++hdrs[0]] = info->dlpi_addr + info->dlpi_phdr[i].p_vaddr;
    }
    return 0;
}

/* The CFI tables of every object are read-only and read again and again;
 * the second read of the same bytes must come from the engine's cache,
 * not a system call. Each object's read-only segments lie next to its
 * writable one, and merging those ranges made whole objects uncacheable
 * (libpython's unwinds took 300 us instead of 60). */
static void test_object_reads_cached(void)
{
    snapprof__cfi_t *c;
    ASSERT_OK(snapprof__cfi_create(&c));
    snapprof__cfi_update_modules(c);
    uintptr_t hdrs[64] = {0};
    dl_iterate_phdr(note_eh_frame_hdrs, hdrs);
    ASSERT_GE(hdrs[0], 3); /* the executable, libc, the test library... */
    uint64_t dummy = 0;
    snapprof_stack_copy_t none = {
        .bottom = (uintptr_t)&dummy, .top = (uintptr_t)&dummy, .orig_bottom = (uintptr_t)&dummy};
    for (uintptr_t i = 1; i <= hdrs[0]; i++) {
        uintptr_t a, b;
        ASSERT_EQ(snapprof__cfi_read_word(c, &none, hdrs[i], &a), 0);
        unsigned long long before = snapprof__cfi_raw_reads(c);
        ASSERT_EQ(snapprof__cfi_read_word(c, &none, hdrs[i], &b), 0);
        ASSERT_EQ(a, b);
        if (snapprof__cfi_raw_reads(c) != before)
            TEST_FAIL("object %zu: the .eh_frame_hdr at %#lx is read from the kernel every time",
                      (size_t)i, (unsigned long)hdrs[i]);
    }
    printf("%zu objects: second reads of .eh_frame_hdr all cached\n", (size_t)hdrs[0]);
    snapprof__cfi_destroy(c);
}

/* ------------------------------------------------------------------------ */

static const test_case_t cases[] = {
    {"ratio", test_ratio},
    {"rates", test_rates},
    {"qsort_bsearch", test_qsort_bsearch},
    {"shared_lib", test_shared_lib},
    {"alloca_vla", test_alloca_vla},
    {"deep_recursion", test_deep_recursion},
    {"depth_cap", test_depth_cap},
    {"signal_handler", test_signal_handler},
    {"dlclose", test_dlclose},
    {"jit_handoff", test_jit_handoff},
    {"corrupted_copy", test_corrupted_copy},
    {"object_reads_cached", test_object_reads_cached},
};

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
