/* Helper for symbols_e2e: a -O2 -g program whose hot loop is an
 * always-inline function. It profiles its own main thread until it has
 * the number of samples asked for, writes the pprof profile to argv[1],
 * and prints where the inlined code's call site is (for the test to
 * compare with pprof's -lines output). */
#include <snapprof/snapprof.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static volatile uint64_t g_sink;

/* The hot step: inlined into inline_outer_loop wherever it is called. */
static inline __attribute__((always_inline)) uint64_t inline_hot_step(uint64_t x, uint64_t i)
{
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x * 0x9e3779b97f4a7c15ull + i;
}

__attribute__((noinline)) uint64_t inline_outer_loop(uint64_t x, int n)
{
    for (int i = 0; i < n; i++)
        x = inline_hot_step(x, (uint64_t)i); /* INLINE_CALL_LINE */
    return x;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s OUT.pb.gz SAMPLES\n", argv[0]);
        return 2;
    }
    snapprof_thread_t *me;
    snapprof_params_t params;
    snapprof_params_init(&params);
    params.interval_ns = 1000000;
    snapprof_profiler_t *p;
    snapprof_builder_t *b;
    if (snapprof_thread_register(&me) != 0 || snapprof_profiler_create(&params, &me, 1, &p) != 0 ||
        snapprof_pprof_builder_create(argv[1], &b) != 0 ||
        snapprof_profiler_add_builder(p, b) != 0 || snapprof_profiler_start(p) != 0) {
        fprintf(stderr, "profiler set-up failed\n");
        return 1;
    }
    uint64_t want = strtoull(argv[2], NULL, 10);
    snapprof_stats_t st;
    uint64_t x = 1;
    do {
        x = inline_outer_loop(x, 2000000);
        g_sink = x;
        snapprof_profiler_get_stats(p, &st);
    } while (st.samples < want);
    int rc = snapprof_profiler_stop(p);
    snapprof_profiler_destroy(p);
    snapprof_thread_release(me);
    printf("samples=%llu rc=%d\n", (unsigned long long)st.samples, rc);
    return rc == 0 ? 0 : 1;
}
