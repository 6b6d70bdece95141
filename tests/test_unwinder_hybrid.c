/* Tests of the unwinders on a frame-pointer build (-O2
 * -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer): the hybrid keeps
 * the hot leaf's caller that frame-pointer walking loses (GCC 12 gives
 * leaf functions no frame record even with those flags), and stacks
 * through libc (no frame pointers) stay complete. */
#include "test.h"
#include "test_util.h"
#include "unwind_test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile uint64_t g_sink;

/* Leaves: no calls, so GCC 12 sets up no frame record in them. */
__attribute__((noinline)) uint64_t hot_leaf_a(uint64_t n)
{
    uint64_t x = n | 1;
    for (uint64_t i = 0; i < n; i++) {
        x = x * 6364136223846793005u + 1442695040888963407u;
        __asm__ volatile("" : "+r"(x));
    }
    return x;
}

__attribute__((noinline)) uint64_t hot_leaf_b(uint64_t n)
{
    uint64_t x = n | 3;
    for (uint64_t i = 0; i < n; i++) {
        x = x * 2862933555777941757u + 3037000493u;
        __asm__ volatile("" : "+r"(x));
    }
    return x;
}

__attribute__((noinline)) uint64_t caller_a(uint64_t n)
{
    uint64_t r = hot_leaf_a(n);
    __asm__ volatile("" : "+r"(r));
    return r + 1;
}

__attribute__((noinline)) uint64_t caller_b(uint64_t n)
{
    uint64_t r = hot_leaf_b(n);
    __asm__ volatile("" : "+r"(r));
    return r + 2;
}

__attribute__((noinline)) int fp_compare(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* libc's qsort has no frame pointers: a frame in the middle. */
__attribute__((noinline)) void fp_sort(uint32_t *v, size_t n)
{
    qsort(v, n, sizeof *v, fp_compare);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void hybrid_body(uw_worker_t *w)
{
    enum { N = 512 };
    static uint32_t v[N];
    uint64_t seed = 11;
    while (!atomic_load_explicit(&w->stop, memory_order_relaxed)) {
        seed = seed * 6364136223846793005u + 1442695040888963407u;
        uint64_t r = seed >> 20;
        if (r % 3 == 0) {
            g_sink += caller_a(20000 + r % 20000);
        } else if (r % 3 == 1) {
            g_sink += caller_b(20000 + r % 20000);
        } else {
            for (size_t i = 0; i < N; i++)
                v[i] = (uint32_t)(seed >> (i % 32)) ^ (uint32_t)i;
            fp_sort(v, N);
        }
    }
}

static void *worker_main(void *arg)
{
    uw_worker_t *w = arg;
    uw_worker_enter(w);
    hybrid_body(w);
    __asm__ volatile("" ::: "memory");
    return NULL;
}

typedef struct result {
    double complete, caller;
    size_t leaf_samples;
    uint64_t p50, p99;
} result_t;

static result_t measure(uw_worker_t *w, uw_kind_t kind)
{
    uw_collector_t c = {0};
    uw_run_t run = {
        .kind = kind, .interval_ns = 1000000u, .min_samples = 1000, .timeout_ns = 25000000000u};
    uw_profile(w, &run, &c);
    char label[64];
    snprintf(label, sizeof label, "frame-pointer build, %s", uw_kind_name(kind));
    result_t r = {.complete = uw_complete_rate(&c, w, label)};
    size_t with_caller = 0, shown = 0;
    for (size_t i = 0; i < c.count; i++) {
        const uw_sample_t *s = &c.samples[i];
        const snapprof_frame_t *f = uw_frames(&c, s);
        if (s->tid != w->tid || s->count == 0)
            continue;
        const char *want = uw_frame_is(&f[0], "hot_leaf_a")   ? "caller_a"
                           : uw_frame_is(&f[0], "hot_leaf_b") ? "caller_b"
                                                              : NULL;
        if (!want)
            continue;
        r.leaf_samples++;
        int ok = s->count > 1 && uw_frame_is(&f[1], want);
        with_caller += ok;
        /* SHOW_FP=1 also shows what the other unwinders lose. */
        if (!ok && (kind == UW_HYBRID || kind == UW_CFI_TABLE || getenv("SHOW_FP")) && shown++ < 2)
            uw_print_sample(&c, s);
    }
    r.caller = r.leaf_samples ? 100.0 * (double)with_caller / (double)r.leaf_samples : 0;
    r.p50 = c.stats.unwind_p50_ns;
    r.p99 = c.stats.unwind_p99_ns;
    printf("  hot leaf's caller present in %zu of %zu leaf samples (%.2f %%); unwind p50 %llu "
           "ns, p99 %llu ns\n",
           with_caller, r.leaf_samples, r.caller, (unsigned long long)r.p50,
           (unsigned long long)r.p99);
    uw_collector_free(&c);
    return r;
}

static void test_leaf_caller(void)
{
    uw_worker_t w;
    memset(&w, 0, sizeof w);
    w.entry = worker_main;
    uw_worker_start(&w);
    result_t fp = measure(&w, UW_FP);
    result_t hy = measure(&w, UW_HYBRID);
    result_t ct = measure(&w, UW_CFI_TABLE);
    uw_worker_stop(&w);
    ASSERT_GE(hy.leaf_samples, 300);
    if (hy.caller < 99.0)
        TEST_FAIL("hybrid: hot leaf's caller in %.2f %% of samples < 99 %%", hy.caller);
    ASSERT_GE(ct.leaf_samples, 300);
    if (ct.caller < 99.0)
        TEST_FAIL("CFI tables: hot leaf's caller in %.2f %% of samples < 99 %%", ct.caller);
    printf("frame pointers alone keep it in %.2f %%\n", fp.caller);
}

static void test_rates(void)
{
    uw_worker_t w;
    memset(&w, 0, sizeof w);
    w.entry = worker_main;
    uw_worker_start(&w);
    result_t r[UW_KIND_COUNT];
    for (int k = 0; k < UW_KIND_COUNT; k++)
        r[k] = measure(&w, (uw_kind_t)k);
    uw_worker_stop(&w);
    ASSERT_GE(r[UW_DEFAULT].complete, 99.0);
    ASSERT_GE(r[UW_LIBUNWIND].complete, 99.0);
    ASSERT_GE(r[UW_HYBRID].complete, 99.0);
    ASSERT_GE(r[UW_CFI_TABLE].complete, 99.0);
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"leaf_caller", test_leaf_caller},
        {"rates", test_rates},
    };
    setvbuf(stdout, NULL, _IOLBF, 0);
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
