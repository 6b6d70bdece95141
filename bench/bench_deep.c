/* bench_deep: deep stacks under a CPU-clock trigger (issue 25 item 2). Two
 * threads recurse 2000 frames deep without frame pointers, each holding
 * about 1.3 MiB of live stack, and are profiled at 1 kHz of their own CPU
 * time until they have run 0.8 and then 8 CPU-seconds together (a fresh
 * profiler and fresh threads for each run). Per run: the share of samples
 * that are whole stacks, the samples delivered per CPU-second against the
 * rate asked for, the target's pause in the handler (p50, p99, max), and
 * the memory the large buffers took.
 *
 * Usage: bench_deep [--quick] [--runs N]
 * Prints a table; it never judges the figures (see bench/README.md). */
#include "bench_util.h"
/* tests/trigger_deep_work.c, built without frame pointers (CMakeLists.txt):
 * the recursion, its thread and the whole-stack tally. */
#include "tests/trigger_deep_work.h"

#include <snapprof/profile_builder.h>
#include <snapprof/snapprof.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define THREADS 2
#define DEPTH 2000
#define HZ 1000u

static void run(double cpu_seconds)
{
    deep_thread_t d[THREADS];
    snapprof_thread_t *tokens[THREADS];
    if (trigger_deep_start(d, THREADS, DEPTH) != 0)
        exit(1);
    for (int i = 0; i < THREADS; i++) {
        while (!atomic_load(&d[i].at_bottom))
            usleep(1000);
        tokens[i] = d[i].token;
        pthread_getcpuclockid(d[i].th, &d[i].clock);
    }
    snapprof_params_t params;
    snapprof_params_init(&params);
    params.interval_ns = 1000000000u / HZ;
    snapprof_profiler_t *p;
    deep_tally_t t = {.depth = DEPTH};
    snapprof_builder_t *b;
    if (snapprof_profiler_create(&params, tokens, THREADS, &p) != 0 ||
        snapprof_builder_create(&deep_tally_ops, &t, &b) != 0 ||
        snapprof_profiler_add_builder(p, b) != 0)
        exit(1);
    bench_cpu_times_t m0 = bench_read_cpu_times();
    double cpu0 = 0, cpu1 = 0, wall0 = bench_clock_s(CLOCK_MONOTONIC);
    for (int i = 0; i < THREADS; i++)
        cpu0 += bench_clock_s(d[i].clock);
    if (snapprof_profiler_start(p) != 0)
        exit(1);
    /* Until the threads have run cpu_seconds together while profiled. */
    for (;;) {
        usleep(5000);
        cpu1 = 0;
        for (int i = 0; i < THREADS; i++)
            cpu1 += bench_clock_s(d[i].clock);
        if (cpu1 - cpu0 >= cpu_seconds)
            break;
    }
    double wall = bench_clock_s(CLOCK_MONOTONIC) - wall0;
    snapprof_profiler_stop(p);
    bench_cpu_times_t m1 = bench_read_cpu_times();
    snapprof_stats_t st;
    snapprof_profiler_get_stats(p, &st);
    snapprof_profiler_destroy(p);
    for (int i = 0; i < THREADS; i++) {
        atomic_store(&d[i].stop, 1);
        pthread_join(d[i].th, NULL);
        snapprof_thread_release(d[i].token);
    }
    size_t n = atomic_load(&t.samples), whole = atomic_load(&t.whole);
    double cpu = cpu1 - cpu0, requested = cpu * HZ;
    printf(
        "deep %5.1f CPU-s %6.2f %6.1f %7zu %7.0f %7.3f %7.3f %8llu %7.3f %8.0f %9.0f %9.0f %8.1f "
        "%8.1f\n",
        cpu_seconds, cpu, wall, n, requested, (double)n / requested,
        st.cpu_ns_total ? (double)st.cpu_ns_sampled / (double)st.cpu_ns_total : 0.0,
        (unsigned long long)st.truncated_copy, n ? (double)whole / (double)n : 0.0,
        st.pause_p50_ns / 1e3, st.pause_p99_ns / 1e3, st.pause_max_ns / 1e3,
        st.large_buffer_bytes_max / 1048576.0,
        st.samples ? st.sampler_cpu_ns / 1e3 / (double)st.samples : 0.0);
    bench_print_machine("machine during it", &m0, &m1);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    int quick = 0, runs = 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0)
            quick = 1;
        else if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc)
            runs = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_deep [--quick] [--runs N]\n");
            return 2;
        }
    }
    bench_print_banner("bench_deep", quick);
    printf("%d threads x %d frames (-fomit-frame-pointer, ~1.3 MiB of live stack each), %u Hz of "
           "thread CPU time, default trigger and capture memory\n",
           THREADS, DEPTH, HZ);
    printf("run      target  cpu(s)  wall(s) samples request    rate  rate.st truncated "
           "complete p50(us)   p99(us)   max(us) large MiB samp.us\n");
    static const double full[] = {0.8, 8.0}, brief[] = {0.2, 0.8};
    const double *targets = quick ? brief : full;
    for (int r = 0; r < runs; r++)
        for (int i = 0; i < 2; i++)
            run(targets[i]);
    return 0;
}
