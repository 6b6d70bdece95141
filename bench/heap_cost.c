/* heap_cost: the cost workload of issue 27's heap benchmark (bench_heap.sh).
 * Two threads (by default) each make a fixed number of allocations of 16 to
 * 256 B (a fixed-seed draw); 15 of 16 are freed at once, the 16th takes the
 * place of one of 256 blocks the thread holds (and that one is freed). At
 * exit it prints one line:
 *
 *   heap_cost threads=2 iters=N cpu_s=S wall_s=W maxrss_kib=K ns_per_pair=P
 *
 * cpu_s is the process's CPU time (CLOCK_PROCESS_CPUTIME_ID: every thread,
 * a profiler's own threads too), ns_per_pair that over the malloc+free
 * pairs made. It links nothing of snapprof.
 *
 * heap_cost_got is the same program linked against libsnapprof: before its
 * threads start it calls snapprof_heap_hooks_install() (issue 27's way in
 * (b), GOT patching), and its line ends with got_entries=N, the entries
 * patched (a negative errno when install failed: the run goes on, its
 * mallocs unhooked, and the driver says so). Whether the heap is sampled is
 * up to the profiler in the process (libsnapprof-preload.so with
 * SNAPPROF_HEAP=1); without one the hooks only count down and forward.
 *
 * Usage: heap_cost [--iters N] [--threads T]   (N per thread, default 10000000) */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "bench_util.h" /* bench_rand: inline, nothing linked */

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#if defined(HEAP_COST_GOT)
#include <snapprof/heap.h>
#endif

#define HOLD 256

static uint64_t iters = 10000000;

void *volatile heap_cost_sink;

__attribute__((noinline)) static void *cost_worker(void *arg)
{
    uint64_t rng = 0x9E3779B97F4A7C15ULL * ((uint64_t)(uintptr_t)arg + 1);
    char *held[HOLD] = {0};
    for (uint64_t i = 0; i < iters; i++) {
        uint64_t r = bench_rand(&rng);
        size_t size = 16 + (size_t)(r % 241);
        char *p = malloc(size);
        if (!p) {
            perror("heap_cost: malloc");
            exit(2);
        }
        p[0] = (char)i;
        heap_cost_sink = p;
        if (((r >> 32) & 15) == 0) {
            unsigned slot = (unsigned)(r >> 40) % HOLD;
            free(held[slot]);
            held[slot] = p;
        } else {
            free(p);
        }
    }
    for (int i = 0; i < HOLD; i++)
        free(held[i]);
    return NULL;
}

static double clock_s(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    unsigned nthreads = 2;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
            iters = strtoull(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            nthreads = (unsigned)strtoul(argv[++i], NULL, 10);
        } else {
            fprintf(stderr, "usage: heap_cost [--iters N] [--threads T]\n");
            return 2;
        }
    }
    if (iters == 0 || nthreads == 0 || nthreads > 64) {
        fprintf(stderr, "heap_cost: --iters and --threads (1-64) must be > 0\n");
        return 2;
    }
#if defined(HEAP_COST_GOT)
    int got_entries = snapprof_heap_hooks_install();
#endif
    double wall0 = clock_s(CLOCK_MONOTONIC);
    pthread_t t[64];
    for (unsigned i = 0; i < nthreads; i++) {
        if (pthread_create(&t[i], NULL, cost_worker, (void *)(uintptr_t)i) != 0) {
            fprintf(stderr, "heap_cost: pthread_create failed\n");
            return 2;
        }
    }
    for (unsigned i = 0; i < nthreads; i++)
        pthread_join(t[i], NULL);
    double wall = clock_s(CLOCK_MONOTONIC) - wall0;
    double cpu = clock_s(CLOCK_PROCESS_CPUTIME_ID);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("heap_cost threads=%u iters=%llu cpu_s=%.3f wall_s=%.3f maxrss_kib=%ld ns_per_pair=%.1f",
           nthreads, (unsigned long long)iters, cpu, wall, ru.ru_maxrss,
           cpu * 1e9 / ((double)iters * nthreads));
#if defined(HEAP_COST_GOT)
    printf(" got_entries=%d", got_entries);
#endif
    printf("\n");
    return 0;
}
