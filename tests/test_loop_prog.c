/* A program for the rolling-profile tests: it knows nothing of snapprof.
 * Two threads burn CPU, in loop_hot_a and loop_hot_b, and the main thread
 * in loop_hot_main, each until its own CPU clock has reached MS ms (CPU
 * time, not wall time: the machine may be loaded); then it sleeps SLEEP ms
 * (0 by default) and exits.
 *
 *   test_loop_prog MS [SLEEP] */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static uint64_t g_ms;

static uint64_t thread_cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

#define HOT(name)                                                                                  \
    __attribute__((noinline)) static void name(void)                                               \
    {                                                                                              \
        volatile uint64_t x = 1;                                                                   \
        while (thread_cpu_ms() < g_ms)                                                             \
            for (int i = 0; i < 100000; i++)                                                       \
                x = x * 6364136223846793005u + 1;                                                  \
    }
HOT(loop_hot_a)
HOT(loop_hot_b)
HOT(loop_hot_main)

static void *run_a(void *arg)
{
    (void)arg;
    loop_hot_a();
    return NULL;
}

static void *run_b(void *arg)
{
    (void)arg;
    loop_hot_b();
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_loop_prog MS [SLEEP]\n");
        return 2;
    }
    g_ms = strtoull(argv[1], NULL, 10);
    pthread_t a, b;
    pthread_create(&a, NULL, run_a, NULL);
    pthread_create(&b, NULL, run_b, NULL);
    loop_hot_main();
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    if (argc > 2) {
        uint64_t ms = strtoull(argv[2], NULL, 10);
        struct timespec ts = {(time_t)(ms / 1000u), (long)(ms % 1000u) * 1000000};
        nanosleep(&ts, NULL);
    }
    return 0;
}
