/* bench_jit_regions: what a JIT region's registration, lookup and
 * unregistration cost with up to N regions live, and a lookup of a region
 * gone since (one of the last 1024, found for stacks copied before it
 * went). Thread CPU time: this VM's stalls would swamp wall time. Prints
 * figures and judges none; it exits 1 only when a call fails or a lookup
 * misses, which the smoke test (bench_jit_regions_smoke) catches. This was
 * the jit_regions_cost test, which could not fail on what it named.
 *
 * Usage: bench_jit_regions [--quick] (2000 regions instead of 10000; the
 * count under sanitizers too). White-box: snapprof__module_find_at(). */
#include "module_cache/module_cache.h"

#include <snapprof/jit.h>
#include <snapprof/snapprof.h>

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static uint64_t clock_ns(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int fail(const char *what, int i)
{
    fprintf(stderr, "bench_jit_regions: %s failed for region %d\n", what, i);
    return 1;
}

int main(int argc, char **argv)
{
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
#ifdef SNAPPROF_SANITIZER_BUILD
    quick = 1;
#endif
    const int N = quick ? 2000 : 10000;
    /* Keep any perf map of a recycled pid out of the lookups. */
    if (snapprof_jit_perf_map_configure("", NULL) != 0)
        return fail("snapprof_jit_perf_map_configure", 0);
    void *map =
        mmap(NULL, (size_t)N * 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED)
        return fail("mmap", 0);
    uintptr_t base = (uintptr_t)map;
    uint64_t t0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    for (int i = 0; i < N; i++)
        if (snapprof_jit_region_register(base + (uintptr_t)i * 16, 16, "f", NULL) != 0)
            return fail("register", i);
    uint64_t t1 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    for (int i = 0; i < N; i++)
        if (snapprof_module_find(base + (uintptr_t)i * 16 + 5) == NULL)
            return fail("lookup", i);
    uint64_t t2 = clock_ns(CLOCK_THREAD_CPUTIME_ID), when = clock_ns(CLOCK_MONOTONIC);
    for (int i = 0; i < N; i++)
        if (snapprof_jit_region_unregister(base + (uintptr_t)i * 16) != 0)
            return fail("unregister", i);
    uint64_t t3 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    /* The last 1024 gone are still found for copies made before. */
    for (int i = N - 1024; i < N; i++)
        if (snapprof__module_find_at(base + (uintptr_t)i * 16 + 5, when) == NULL)
            return fail("lookup of a region gone since", i);
    uint64_t t4 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    printf("%d regions: register %.2f us, lookup %.3f us, unregister %.2f us, "
           "lookup of a region gone since %.3f us (averages, CPU time)\n",
           N, (double)(t1 - t0) / N / 1000, (double)(t2 - t1) / N / 1000,
           (double)(t3 - t2) / N / 1000, (double)(t4 - t3) / 1024 / 1000);
    return 0;
}
