/* Whole-process profile from inside a program: every thread, the ones that
 * run before the start and the ones created after it, with one call and no
 * per-thread registration. It uses libsnapprof-preload's gperftools API
 * (linked, not preloaded: its pthread_create registers each new thread, as
 * under LD_PRELOAD), which the README's "Embedding" section leads with.
 * Settings come from the environment (SNAPPROF_FREQUENCY, SNAPPROF_MODE,
 * SNAPPROF_TRIGGER, ...; CPUPROFILE_FREQUENCY too). Build it with
 *   cc whole_process.c $(pkg-config --cflags --libs snapprof-gperftools) -lpthread
 * Usage: whole_process [OUTPUT]  (default whole.prof, gperftools' own
 * format; SNAPPROF_FORMAT=pprof for our pprof), then
 *   go tool pprof -top whole_process whole.prof
 * shows work_before, work_after and work_main: the three threads. */
#include <gperftools/profiler.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static atomic_int g_go;

/* A fixed amount of CPU work, a fifth of a second of this thread's own
 * CPU time, so that each thread has samples however busy the machine is
 * and whatever the compiler makes of the loop (clang folds 8 steps of it
 * into one); inlined, so that the samples land in the work_* function
 * that calls it. */
static inline __attribute__((always_inline)) uint64_t spin(uint64_t seed)
{
    uint64_t h = seed;
    struct timespec t0, t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
    do {
        for (int i = 0; i < 100000; i++)
            h = h * 6364136223846793005u + 1442695040888963407u;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 200000000L);
    return h;
}

__attribute__((noinline)) static uint64_t work_before(void)
{
    return spin(1);
}

__attribute__((noinline)) static uint64_t work_after(void)
{
    return spin(2);
}

__attribute__((noinline)) static uint64_t work_main(void)
{
    return spin(3);
}

/* A thread of the host that exists before profiling starts, and works
 * only once it runs. */
static void *before_thread(void *arg)
{
    (void)arg;
    while (!atomic_load(&g_go))
        usleep(1000);
    return (void *)(uintptr_t)work_before();
}

static void *after_thread(void *arg)
{
    (void)arg;
    return (void *)(uintptr_t)work_after();
}

int main(int argc, char **argv)
{
    const char *out = argc > 1 ? argv[1] : "whole.prof";
    pthread_t before, after;
    if (pthread_create(&before, NULL, before_thread, NULL) != 0)
        return 1;
    /* Every thread of the process from now on, until ProfilerStop(). */
    if (!ProfilerStart(out))
        return 1; /* the reason is on stderr */
    atomic_store(&g_go, 1);
    /* A thread created while the profile runs is sampled from its start. */
    if (pthread_create(&after, NULL, after_thread, NULL) != 0)
        return 1;
    volatile uint64_t sink = work_main();
    (void)sink;
    pthread_join(before, NULL);
    pthread_join(after, NULL);
    struct ProfilerState state;
    ProfilerGetCurrentState(&state);
    ProfilerStop(); /* writes the profile */
    printf("%d samples written to %s\n", state.samples_gathered, out);
    return 0;
}
