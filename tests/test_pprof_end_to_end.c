/* End-to-end tests through the real client, `go tool pprof`: a workload
 * with a known CPU split must be attributed within 3 percentage points, and
 * the demo's profile must name its hot functions with the binary gone. */
#include "test.h"
#include "test_util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

/* Each unit is the same loop; the functions run 5, 3 and 2 units per round.
 * A unit lasts about a millisecond: the truth is read from the thread CPU
 * clock between calls, and on these VMs reading it every few tens of
 * microseconds skews both the truth and the samples (measured: 59 % of
 * samples in clock_gettime for 4 % of the time), so the reads stay rare. */
#define BURN_UNITS(x, n)                                                                           \
    for (int i = 0; i < (n)*700001; i++)                                                           \
    *(x) = *(x)*6364136223846793005u + 1442695040888963407u
__attribute__((noinline)) void ratio_work_a(volatile uint64_t *x)
{
    BURN_UNITS(x, 5);
}
__attribute__((noinline)) void ratio_work_b(volatile uint64_t *x)
{
    BURN_UNITS(x, 3);
}
__attribute__((noinline)) void ratio_work_c(volatile uint64_t *x)
{
    BURN_UNITS(x, 2);
}

static atomic_int g_stop, g_ready, g_recording;
static snapprof_thread_t *g_token;
/* CPU time of every call made while the profile runs, per function. */
#define MAX_CALLS 100000
static uint64_t g_calls[3][MAX_CALLS];
static size_t g_ncalls[3];

static void record(int f, uint64_t ns)
{
    if (atomic_load(&g_recording) && g_ncalls[f] < MAX_CALLS)
        g_calls[f][g_ncalls[f]++] = ns;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void *ratio_worker(void *arg)
{
    (void)arg;
    ASSERT_OK(snapprof_thread_register(&g_token));
    atomic_store(&g_ready, 1);
    volatile uint64_t x = 1;
    uint64_t t0 = tu_thread_cpu_ns(), t1, t2, t3;
    while (!atomic_load(&g_stop)) {
        ratio_work_a(&x);
        t1 = tu_thread_cpu_ns();
        ratio_work_b(&x);
        t2 = tu_thread_cpu_ns();
        ratio_work_c(&x);
        t3 = tu_thread_cpu_ns();
        record(0, t1 - t0);
        record(1, t2 - t1);
        record(2, t3 - t2);
        t0 = t3;
    }
    return NULL;
}

/* Three leaf functions with a 50/30/20 split of CPU time, the truth taken
 * from the thread's CPU clock around each call, against pprof's flat %.
 *
 * The truth is each function's median CPU time per call times its number of
 * calls. On these VMs the thread CPU clock charges rare, huge outliers to
 * single calls (measured without any profiler: the summed split of a fixed
 * 5/3/2 workload swung between 30 % and 62 % for the first function across
 * 3-second windows, while the median-based split stayed at 50.0 +- 0.1 %).
 * For the same reason the check is on sample counts; the CPU-weighted view,
 * which carries those outliers, is printed for reference. */
static void test_known_ratio(void)
{
    pthread_t th;
    tu_start_thread(&th, ratio_worker, NULL, &g_ready);
    char *dir = tu_make_tmpdir("ratio");
    char path[512];
    snprintf(path, sizeof path, "%s/ratio.pb.gz", dir);
    snapprof_params_t params = tu_params(1000000u);
    snapprof_profiler_t *p;
    snapprof_builder_t *b;
    ASSERT_OK(snapprof_profiler_create(&params, &g_token, 1, &p));
    ASSERT_OK(snapprof_pprof_builder_create(path, &b));
    ASSERT_OK(snapprof_profiler_add_builder(p, b));
    /* Measure the true split over the profile's window only. */
    atomic_store(&g_recording, 1);
    ASSERT_OK(snapprof_profiler_start(p));
    snapprof_stats_t st;
    do {
        usleep(20000);
        ASSERT_OK(snapprof_profiler_get_stats(p, &st));
    } while (st.samples < 5000);
    ASSERT_OK(snapprof_profiler_stop(p));
    atomic_store(&g_recording, 0);
    atomic_store(&g_stop, 1);
    pthread_join(th, NULL);
    double truth[3], total = 0;
    for (int i = 0; i < 3; i++) {
        ASSERT_GT(g_ncalls[i], 10);
        qsort(g_calls[i], g_ncalls[i], sizeof(uint64_t), cmp_u64);
        truth[i] = (double)g_calls[i][g_ncalls[i] / 2] * (double)g_ncalls[i];
        total += truth[i];
    }
    const char *indices[2] = {"samples", "cpu"};
    const double limits[2] = {3.0, 100.0}; /* cpu: reported, not judged (see above) */
    for (int k = 0; k < 2; k++) {
        char extra[128];
        snprintf(extra, sizeof extra, "-sample_index=%s", indices[k]);
        tu_top_row_t *rows;
        char *raw;
        int n = tu_pprof_top(path, extra, &rows, &raw);
        const char *names[3] = {"ratio_work_a", "ratio_work_b", "ratio_work_c"};
        double measured[3], sum = 0;
        for (int i = 0; i < 3; i++) {
            const tu_top_row_t *r = tu_top_find(rows, n, names[i]);
            if (!r)
                TEST_FAIL("%s missing from pprof -top:\n%s", names[i], raw);
            measured[i] = r->flat_pct;
            sum += r->flat_pct;
        }
        printf("%s\n", raw);
        if (k == 0)
            ASSERT_GT(sum, 85.0); /* the three hold nearly all the samples */
        for (int i = 0; i < 3; i++) {
            double want = 100.0 * truth[i] / total, got = 100.0 * measured[i] / sum;
            printf("[%s] %s: true %.2f%% profiled %.2f%% (diff %+.2f pp)\n", indices[k], names[i],
                   want, got, got - want);
            if (got - want > limits[k] || want - got > limits[k])
                TEST_FAIL("%s off by more than %.0f points", names[i], limits[k]);
        }
        free(rows);
        free(raw);
    }
    snapprof_profiler_destroy(p);
    snapprof_thread_release(g_token);
    free(dir);
}

/* The demo, run from a copy of its binary that is deleted before pprof
 * reads the profile: names must come from the profile itself. */
static void test_demo_binary_moved(void)
{
    char *dir = tu_make_tmpdir("demo");
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "cp '%s/../examples/demo' '%s/demo-copy' && cd '%s' && ./demo-copy out.pb.gz 3000 && "
             "rm demo-copy",
             SNAPPROF_TEST_BINARY_DIR, dir, dir);
    int status;
    char *out = tu_run(cmd, &status);
    if (status != 0)
        TEST_FAIL("demo failed (%d):\n%s", status, out);
    printf("%s", out);
    char path[600];
    snprintf(path, sizeof path, "%s/out.pb.gz", dir);
    tu_top_row_t *rows;
    char *raw;
    int n = tu_pprof_top_print(path, "", &rows, &raw);
    ASSERT(strstr(raw, "unrecognized profile format") == NULL);
    const char *hot[3] = {"demo_hash_strings", "demo_matrix_multiply", "demo_count_primes"};
    for (int i = 0; i < 3; i++) {
        const tu_top_row_t *r = tu_top_find(rows, n, hot[i]);
        if (!r)
            TEST_FAIL("%s not shown by name", hot[i]);
        ASSERT_GT(r->flat_pct, 5.0);
    }
    free(rows);
    free(raw);
    free(out);
    free(dir);
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"known_ratio", test_known_ratio},
        {"demo_binary_moved", test_demo_binary_moved},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
