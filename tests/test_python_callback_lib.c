/* For python_frames_callback (tests/python/callback.py): a C thread that
 * first spins in native code, with no Python thread state, then calls back
 * into Python through a ctypes callback, which makes it one. Loaded by
 * ctypes; the frames' names are what the test looks for. */
#include <pthread.h>
#include <stdint.h>
#include <time.h>

typedef void (*callback_fn)(void);

static volatile uint64_t sink;

static double thread_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

__attribute__((noinline)) void callback_native_spin(double seconds)
{
    double end = thread_cpu_s() + seconds;
    while (thread_cpu_s() < end)
        for (int i = 0; i < 10000; i++)
            sink = sink * 6364136223846793005u + 1442695040888963407u;
}

__attribute__((noinline)) void callback_call_python(callback_fn cb)
{
    cb();
    __asm__ volatile("" ::: "memory"); /* not a tail call: this frame stays */
}

struct args {
    double native_s;
    callback_fn cb;
};

static void *run(void *p)
{
    struct args *a = p;
    callback_native_spin(a->native_s);
    callback_call_python(a->cb);
    return NULL;
}

/* Runs native_s CPU seconds of native code and then cb on a new thread,
 * and waits for it. Returns 0, or pthread_create's error. */
__attribute__((visibility("default"))) int callback_thread_run(double native_s, callback_fn cb)
{
    pthread_t t;
    struct args a = {native_s, cb};
    int rc = pthread_create(&t, NULL, run, &a);
    if (rc == 0)
        pthread_join(t, NULL);
    return rc;
}
