/* Helper for symbols_e2e: a -O2 -g program whose hot loop is an
 * always-inline function. It profiles its own main thread until it has
 * the number of samples asked for, writes the pprof profile to argv[1],
 * and prints where the inlined code's call site is (for the test to
 * compare with pprof's -lines output). */
#include "symbols_prog.h"

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
    snapprof_thread_t *me;
    uint64_t want;
    snapprof_profiler_t *p = symbols_prog_start(argc, argv, &me, &want);
    snapprof_stats_t st;
    uint64_t x = 1;
    do {
        x = inline_outer_loop(x, 2000000);
        g_sink = x;
        snapprof_profiler_get_stats(p, &st);
    } while (st.samples < want);
    return symbols_prog_finish(p, me, &st);
}
