/* Short-lived threads under `snapprof record` (issue 25, item 4): a
 * thread-per-task program (churn_prog.c: threads started 4 at a time,
 * each burning about 0.4 ms of CPU in churn_work()), whose threads each use
 * less than one sampling period. Each must still be sampled with
 * probability (its CPU time / period), so that churn_work() gets about
 * (its CPU time / period) samples and the profile's CPU time: before the
 * fix, 4 samples from 4001 threads and all their CPU time in
 * `[kernel and unsampled]`.
 *
 * Judged by counts: the program measures its threads' CPU time in
 * churn_work() around the call (W), so the expected number of samples on
 * it is W / period whatever the machine's load; the bounds leave more
 * than 3.5 standard deviations of the binomial count (4000 threads at
 * 100 Hz: about 160 samples, sd 12). The share of the whole profile
 * (with the threads' time in the kernel, which a user-mode trigger leaves
 * to `[kernel and unsampled]`) depends on how slow system calls are, so it
 * is the accuracy case, which wants a quiet machine. */
#include "test_preload_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>

#define CLI SNAPPROF_CLI

typedef struct {
    double work_ms;      /* the threads' CPU time in churn_work(), measured */
    double samples;      /* samples with churn_work() in their stack */
    double cpu_ms;       /* their CPU time in the profile */
    double total_ms;     /* the profile's CPU time */
    double remainder_ms; /* of which [kernel and unsampled] */
    double threads_ms;   /* the started threads' samples (under start_thread) */
} churn_run_t;

static double cum_of(const char *profile, const char *flags, const char *fn)
{
    return tu_top_value(profile, flags, fn, TU_TOP_CUM, 0, 0);
}

static void run_churn_env(int hz, int threads, const char *shorts, churn_run_t *out)
{
    pl_skip_if_sanitized();
    tu_need_perf_event(); /* the CPU timer is serviced at the tick */
    char *dir = tu_make_tmpdir("churn");
    int st;
    char *text =
        pl_run(&st, "cd %s && SNAPPROF_SHORT_THREADS=%s %s record -F %d -o c.pb.gz -- %s %d 4 400",
               dir, shorts, CLI, hz, CHURN_PROG, threads);
    ASSERT_EQ(st, 0);
    const char *w = strstr(text, " ms in churn_work");
    ASSERT_NOT_NULL(w);
    while (w > text && w[-1] != ' ')
        w--;
    out->work_ms = atof(w);
    ASSERT(out->work_ms > 0);
    char profile[1024];
    snprintf(profile, sizeof profile, "%s/c.pb.gz", dir);
    out->samples = cum_of(profile, "-sample_index=samples", "churn_work");
    out->cpu_ms = cum_of(profile, "-sample_index=cpu -unit=ms", "churn_work");
    out->remainder_ms = cum_of(profile, "-sample_index=cpu -unit=ms", "[kernel and unsampled]");
    out->threads_ms = cum_of(profile, "-sample_index=cpu -unit=ms", "start_thread");
    char args[1200];
    snprintf(args, sizeof args, "-top -nodecount=12 -sample_index=cpu -unit=ms '%s'", profile);
    char *top = tu_pprof(args, NULL);
    printf("%s\n", top);
    /* "Showing nodes accounting for X, Y% of TOTALms total" */
    const char *tot = strstr(top, "ms total");
    ASSERT_NOT_NULL(tot);
    while (tot > top && tot[-1] != ' ')
        tot--;
    out->total_ms = atof(tot);
    ASSERT(out->total_ms > 0);
    printf("%d Hz, %d threads: churn_work %.0f samples for %.1f ms measured (%.1f expected), "
           "%.1f ms of the profile's %.1f ms (%.1f %%; %.1f %% without [kernel and unsampled] "
           "%.1f ms)\n",
           hz, threads, out->samples, out->work_ms, out->work_ms * hz / 1000.0, out->cpu_ms,
           out->total_ms, 100.0 * out->cpu_ms / out->total_ms,
           100.0 * out->cpu_ms / (out->total_ms - out->remainder_ms), out->remainder_ms);
    free(top);
    free(text);
    free(dir);
}

static void run_churn(int hz, int threads, int odds, churn_run_t *out)
{
    char n[32];
    snprintf(n, sizeof n, "%d", odds);
    run_churn_env(hz, threads, n, out);
}

/* churn_work's CPU time in the profile is about what the program
 * measured, and nearly all of the started threads' sampled time. */
static void check_cpu(const churn_run_t *r)
{
    if (r->cpu_ms < 0.7 * r->work_ms || r->cpu_ms > 1.4 * r->work_ms)
        TEST_FAIL("churn_work has %.1f ms in the profile for %.1f ms measured", r->cpu_ms,
                  r->work_ms);
    /* Of the started threads' samples: the main thread's calibration
     * (churn_prog's "before it", 80-500 ms of CPU with the machine's load)
     * is not theirs. */
    if (r->cpu_ms < 0.9 * r->threads_ms)
        TEST_FAIL("churn_work has %.1f ms of the threads' %.1f ms in samples", r->cpu_ms,
                  r->threads_ms);
}

/* Samples on churn_work as its CPU time says, each weighing odds periods
 * (one thread in odds armed as it starts: snapprof_params_t.short_threads),
 * and nearly all the sampled CPU time on it. */
static void check_counts(int hz, int threads, int odds)
{
    churn_run_t r;
    run_churn(hz, threads, odds, &r);
    /* With odds > 1, threads not armed as they start but alive at the
     * sampler's next tick are armed then, their samples weighing one
     * period: more samples than work / (period * odds), never more than
     * work / period. */
    double expected = r.work_ms * hz / 1000.0 / odds;
    double most = odds > 1 ? r.work_ms * hz / 1000.0 : 1.4 * expected;
    if (r.samples < 0.7 * expected || r.samples > most)
        TEST_FAIL("churn_work has %.0f samples, want %.0f to %.0f", r.samples, 0.7 * expected,
                  most);
    check_cpu(&r);
}

static void test_short_threads_1khz(void)
{
    check_counts(1000, 2000, 1);
}

static void test_short_threads_100hz(void)
{
    check_counts(100, 4000, 1);
}

/* One in 4 armed as they start, their first samples weighing 4 periods:
 * a quarter of the samples, the same CPU time (4000 threads at 1 kHz:
 * about 400 samples, sd 20). */
static void test_short_threads_one_in_4(void)
{
    check_counts(1000, 4000, 4);
}

/* Off (the default): threads that end before the sampler's next tick are
 * never armed, and their CPU time is in the remainder, as before
 * short_threads. Judged by counts: fewer than half the samples an armed
 * run would have (those alive at a tick are armed then: 13 % here). */
static void test_short_threads_off(void)
{
    churn_run_t r;
    run_churn(1000, 2000, 0, &r);
    double expected = r.work_ms;
    if (r.samples > 0.5 * expected)
        TEST_FAIL("churn_work has %.0f samples with short_threads off, want few (of %.0f)",
                  r.samples, expected);
    ASSERT(r.remainder_ms > 0.5 * r.work_ms);
}

/* SNAPPROF_SHORT_THREADS=timer (snapprof_params_t.unarmed_timer): a
 * process-wide CPU timer samples the threads not yet armed, each of its
 * samples weighing (1 + overrun) periods, at no cost to the threads. Its
 * signal goes to the thread that was running since Linux 6.4 (before, it
 * is not made: skipped). Judged by CPU time, not counts: the kernel checks
 * the timer at its tick (250 Hz here), so at 1 kHz a sample stands for
 * several periods. 1.6 s of churn_work at 100 Hz: about 160 samples, sd
 * 13; the bounds are more than 3.5 sd. Before this setting, churn_work had
 * 4 samples of 4001 threads. */
static void check_timer(int hz, int threads)
{
    struct utsname u;
    unsigned major = 0, minor = 0;
    if (uname(&u) != 0 || sscanf(u.release, "%u.%u", &major, &minor) != 2 || major < 6 ||
        (major == 6 && minor < 4)) {
        printf("skipped: a process timer's signal goes to the running thread only since Linux "
               "6.4\n");
        exit(TEST_SKIP);
    }
    churn_run_t r;
    run_churn_env(hz, threads, "timer", &r);
    check_cpu(&r);
}

static void test_short_threads_timer_1khz(void)
{
    check_timer(1000, 4000);
}

static void test_short_threads_timer_100hz(void)
{
    check_timer(100, 4000);
}

/* The target (one in 4 armed as they start): at least 90 % of the whole profile on
 * churn_work, at 1 kHz and at 100 Hz (gperftools' process-wide timer: 93 %). */
static void test_accuracy_short_threads_share(void)
{
    int rates[2] = {1000, 100};
    for (int i = 0; i < 2; i++) {
        churn_run_t r;
        run_churn(rates[i], 4000, 4, &r);
        double share = r.cpu_ms / r.total_ms;
        if (share < 0.9)
            TEST_FAIL("%d Hz: churn_work has %.1f %% of the profile's CPU time, want 90 %%",
                      rates[i], 100.0 * share);
    }
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"short_threads_1khz", test_short_threads_1khz},
        {"short_threads_100hz", test_short_threads_100hz},
        {"short_threads_one_in_4", test_short_threads_one_in_4},
        {"short_threads_off", test_short_threads_off},
        {"short_threads_timer_1khz", test_short_threads_timer_1khz},
        {"short_threads_timer_100hz", test_short_threads_timer_100hz},
        {"accuracy_short_threads_share", test_accuracy_short_threads_share},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
