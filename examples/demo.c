/* Demo host program: profiles its own three worker threads for two seconds
 * and writes a pprof profile (default demo.pb.gz). Open it with
 *   go tool pprof -top demo.pb.gz
 * Usage: demo [OUTPUT [MIN_SAMPLES]]; with MIN_SAMPLES it profiles until it
 * has that many samples instead of for two seconds. */
#include <snapprof/snapprof.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static atomic_int g_stop;
static snapprof_thread_t *g_threads[3];
static pthread_barrier_t g_registered;

/* Three kinds of work so that the profile has three hot functions. */
/* Formats "key-<seed>-<i>" by hand and hashes it (FNV-1a). */
__attribute__((noinline)) uint64_t demo_hash_strings(uint64_t seed)
{
    char buf[64];
    uint64_t h = 1469598103934665603u;
    for (int i = 0; i < 2000; i++) {
        int n = 0;
        buf[n++] = 'k';
        buf[n++] = '-';
        for (uint64_t v = seed * 2654435761u + (uint64_t)i; v; v /= 10)
            buf[n++] = (char)('0' + v % 10);
        for (int j = 0; j < n; j++)
            h = (h ^ (unsigned char)buf[j]) * 1099511628211u;
    }
    return h;
}

__attribute__((noinline)) double demo_matrix_multiply(int n)
{
    static double a[48][48], b[48][48], c[48][48];
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            a[i][j] = i + j;
            b[i][j] = i - j;
        }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int k = 0; k < n; k++)
                s += a[i][k] * b[k][j];
            c[i][j] = s;
        }
    return c[n / 2][n / 2];
}

__attribute__((noinline)) int demo_count_primes(int limit)
{
    int count = 0;
    for (int i = 2; i < limit; i++) {
        int prime = 1;
        for (int d = 2; d * d <= i; d++)
            if (i % d == 0) {
                prime = 0;
                break;
            }
        count += prime;
    }
    return count;
}

static void *worker(void *arg)
{
    int kind = (int)(intptr_t)arg;
    if (snapprof_thread_register(&g_threads[kind]) != 0)
        g_threads[kind] = NULL;
    pthread_barrier_wait(&g_registered);
    volatile double sink = 0;
    uint64_t i = 0;
    while (!atomic_load(&g_stop)) {
        switch (kind) {
        case 0:
            sink += (double)demo_hash_strings(i++);
            break;
        case 1:
            sink += demo_matrix_multiply(48);
            break;
        default:
            sink += demo_count_primes(20000);
            break;
        }
    }
    (void)sink;
    return NULL;
}

int main(int argc, char **argv)
{
    const char *out = argc > 1 ? argv[1] : "demo.pb.gz";
    unsigned long long min_samples = argc > 2 ? strtoull(argv[2], NULL, 10) : 0;
    pthread_t th[3];
    pthread_barrier_init(&g_registered, NULL, 4);
    for (int k = 0; k < 3; k++)
        pthread_create(&th[k], NULL, worker, (void *)(intptr_t)k);
    pthread_barrier_wait(&g_registered);

    snapprof_params_t params;
    snapprof_params_init(&params);
    params.interval_ns = 1000000; /* 1 kHz */
    params.duration_ns = min_samples ? 0 : 2000000000u;
    snapprof_profiler_t *prof = NULL;
    snapprof_builder_t *pprof = NULL;
    int rc = snapprof_profiler_create(&params, g_threads, 3, &prof);
    if (rc == 0)
        rc = snapprof_pprof_builder_create(out, &pprof);
    if (rc == 0)
        rc = snapprof_profiler_add_builder(prof, pprof);
    if (rc == 0)
        rc = snapprof_profiler_start(prof);
    if (rc == 0) {
        struct timespec ts = {2, 100000000};
        snapprof_stats_t now;
        if (min_samples == 0)
            nanosleep(&ts, NULL);
        else
            do {
                ts = (struct timespec){0, 20000000};
                nanosleep(&ts, NULL);
            } while (snapprof_profiler_get_stats(prof, &now) == 0 && now.samples < min_samples);
        rc = snapprof_profiler_stop(prof);
    }
    snapprof_stats_t st;
    if (prof && snapprof_profiler_get_stats(prof, &st) == 0)
        fprintf(stderr,
                "demo: %llu samples, %llu failed, pause p50 %llu ns p99 %llu ns, wrote %s\n",
                (unsigned long long)st.samples, (unsigned long long)st.failed_total,
                (unsigned long long)st.pause_p50_ns, (unsigned long long)st.pause_p99_ns, out);
    snapprof_profiler_destroy(prof);
    atomic_store(&g_stop, 1);
    for (int k = 0; k < 3; k++) {
        pthread_join(th[k], NULL);
        snapprof_thread_release(g_threads[k]);
    }
    if (rc != 0) {
        fprintf(stderr, "demo: %s\n", snapprof_strerror(rc));
        return 1;
    }
    return 0;
}
