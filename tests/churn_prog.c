/* A thread-per-task program: THREADS short threads, started BATCH at a
 * time and joined before the next batch, each burning about BURN_US of CPU
 * in churn_work() and nothing else. Its profile should have nearly all its
 * CPU time in churn_work(): each thread uses less than one sampling period
 * (1 ms at 1 kHz), so only a trigger whose first expiry is spread over one
 * period (and armed before the thread runs) samples it at all.
 *
 *   churn_prog [THREADS [BATCH [BURN_US]]]   (defaults 4000 4 400)
 *
 * The loop count for BURN_US is calibrated first (calibrate_spin(), about
 * 5 ms). It prints "churn: N threads in X ms (Y threads/s), T ms of CPU"
 * and "W ms in churn_work" on stdout: the wall time of the thread loop
 * alone (bench/bench_churn.sh compares it with and without a profiler),
 * the process's CPU time in it and the threads' CPU time in churn_work(),
 * measured around the call (so a profile's samples on it can be checked
 * against it: about W / period of them). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static volatile uint64_t g_sink;
static uint64_t g_loops;

static uint64_t ns_of(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t spin(uint64_t loops)
{
    uint64_t x = g_sink;
    for (uint64_t i = 0; i < loops; i++)
        x = x * 6364136223846793005ull + 1442695040888963407ull;
    return x;
}

/* Not the same code as churn_work(): GCC folds identical functions into
 * one (-fipa-icf), and perf and gperftools then named churn_work's samples
 * calibrate_spin. */
__attribute__((noinline)) static void calibrate_spin(uint64_t loops)
{
    g_sink = spin(loops) ^ 1;
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) static void churn_work(uint64_t loops)
{
    g_sink = spin(loops);
    __asm__ volatile("" ::: "memory");
}

static _Atomic uint64_t g_work_ns; /* CPU time spent in churn_work() */
static _Atomic uint64_t g_pre_ns;  /* threads' CPU time before their start routine */

static void *churn_thread(void *arg)
{
    (void)arg;
    uint64_t c0 = ns_of(CLOCK_THREAD_CPUTIME_ID);
    g_pre_ns += c0;
    churn_work(g_loops);
    g_work_ns += ns_of(CLOCK_THREAD_CPUTIME_ID) - c0;
    return NULL;
}

int main(int argc, char **argv)
{
    long threads = argc > 1 ? atol(argv[1]) : 4000;
    long batch = argc > 2 ? atol(argv[2]) : 4;
    long burn_us = argc > 3 ? atol(argv[3]) : 400;
    if (threads <= 0 || batch <= 0 || batch > 256 || burn_us <= 0) {
        fprintf(stderr, "usage: churn_prog [THREADS [BATCH [BURN_US]]]\n");
        return 2;
    }
    /* Loops per microsecond of CPU, from about 5 ms of it. */
    uint64_t loops = 100000, took = 0;
    for (;;) {
        uint64_t c0 = ns_of(CLOCK_THREAD_CPUTIME_ID);
        calibrate_spin(loops);
        took = ns_of(CLOCK_THREAD_CPUTIME_ID) - c0;
        if (took >= 5000000u || loops > (1ull << 40))
            break;
        loops *= 4;
    }
    g_loops = (uint64_t)((double)loops * (double)burn_us * 1000.0 / (double)(took ? took : 1));
    if (g_loops == 0)
        g_loops = 1;
    uint64_t cpu0 = ns_of(CLOCK_PROCESS_CPUTIME_ID);
    uint64_t t0 = ns_of(CLOCK_MONOTONIC);
    pthread_t tids[256];
    for (long done = 0; done < threads;) {
        long n = threads - done < batch ? threads - done : batch;
        for (long i = 0; i < n; i++) {
            if (pthread_create(&tids[i], NULL, churn_thread, NULL) != 0) {
                perror("pthread_create");
                return 1;
            }
        }
        for (long i = 0; i < n; i++)
            pthread_join(tids[i], NULL);
        done += n;
    }
    uint64_t wall = ns_of(CLOCK_MONOTONIC) - t0;
    uint64_t cpu = ns_of(CLOCK_PROCESS_CPUTIME_ID) - cpu0;
    printf("churn: %ld threads in %.1f ms (%.0f threads/s), %.1f ms of CPU, %.1f ms in churn_work, "
           "%.1f ms before it\n",
           threads, wall / 1e6, (double)threads * 1e9 / (double)(wall ? wall : 1), cpu / 1e6,
           (double)g_work_ns / 1e6, (double)g_pre_ns / 1e6);
    return 0;
}
