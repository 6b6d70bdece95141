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

#include <math.h>
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
    char *text = pl_run(&st, "cd %s && %s%s %s record -F %d -o c.pb.gz -- %s %d 4 400", dir,
                        shorts ? "SNAPPROF_SHORT_THREADS=" : "unset SNAPPROF_SHORT_THREADS;",
                        shorts ? shorts : "", CLI, hz, CHURN_PROG, threads);
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
static void check_run_counts(int hz, int odds, const churn_run_t *r0)
{
    const churn_run_t r = *r0;
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

static void check_counts(int hz, int threads, int odds)
{
    churn_run_t r;
    run_churn(hz, threads, odds, &r);
    check_run_counts(hz, odds, &r);
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

/* Off (0): threads that end before the sampler's next tick are never
 * armed, and their CPU time is in the remainder, as before short_threads.
 * Judged by counts: fewer than half the samples an armed run would have
 * (those alive at a tick are armed then: 13 % here). */
static void check_off(const char *shorts)
{
    churn_run_t r;
    run_churn_env(1000, 2000, shorts, &r);
    double expected = r.work_ms;
    if (r.samples > 0.5 * expected)
        TEST_FAIL("churn_work has %.0f samples with short_threads off, want few (of %.0f)",
                  r.samples, expected);
    ASSERT(r.remainder_ms > 0.5 * r.work_ms);
}

static void test_short_threads_off(void)
{
    check_off("0");
}

/* The preload's default, with SNAPPROF_SHORT_THREADS unset: off for now
 * (preload_control.c, SHORT_THREADS_DEFAULT says why). */
static void test_short_threads_default(void)
{
    check_off(NULL);
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

/* The target is at least 90 % of the whole profile on churn_work,
 * at 1 kHz and at 100 Hz, where the process's clocks put 84-93 % of its CPU
 * time there (churn_prog alone, busy to quiet machine here; the rest is
 * the threads' start and end in the kernel and the main thread). A profile
 * can only say what the clocks say, and a per-thread trigger samples each
 * thread on its own: the count on churn_work is binomial, so one run of
 * 4000 threads at 100 Hz (about 160 samples, 40 at one in 4) cannot tell
 * 90 % from 93 % (one standard error: 7 pp, 15 pp). So this judges what
 * can be judged: churn_work's CPU time in the profile against what the
 * threads measured around it, within 3.5 standard errors of the sample
 * count, with every thread armed as it starts and enough threads for a
 * tight bound (1 kHz: 8000 threads, about 3200 samples, 1.8 %; 100 Hz:
 * 16000 threads, about 640 samples, 4 %), and prints the share of the
 * profile beside the clocks' share. The measure counts the interrupts
 * taken inside churn_work(), the perf event's own timer among them (one a
 * sample, ~20 us on these VMs: about 2 % at 1 kHz), which a profile of
 * user time leaves to the remainder: at 1 kHz the profile comes out 0-4.5 %
 * under it (mean 1.8 % in 9 runs), at 100 Hz -3.5 to +7.2 %. Alone on the
 * machine: the threads' kernel time, the remainder, grows with the load. */
static void test_accuracy_short_threads_share(void)
{
    int rates[2] = {1000, 100}, threads[2] = {8000, 16000};
    for (int i = 0; i < 2; i++) {
        churn_run_t r;
        run_churn(rates[i], threads[i], 1, &r);
        double period_ms = 1000.0 / rates[i];
        double se = sqrt(r.work_ms * period_ms);
        printf("%d Hz: churn_work %.1f ms in the profile, %.1f ms measured (%+.1f %%, bound "
               "%.1f %%); %.1f %% of the profile, %.1f %% of the clocks\n",
               rates[i], r.cpu_ms, r.work_ms, 100.0 * (r.cpu_ms / r.work_ms - 1),
               350.0 * se / r.work_ms, 100.0 * r.cpu_ms / r.total_ms,
               100.0 * r.work_ms / r.total_ms);
        if (fabs(r.cpu_ms - r.work_ms) > 3.5 * se)
            TEST_FAIL("%d Hz: churn_work has %.1f ms in the profile for %.1f ms measured, more "
                      "than 3.5 standard errors (%.1f ms) apart",
                      rates[i], r.cpu_ms, r.work_ms, se);
    }
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"short_threads_1khz", test_short_threads_1khz},
        {"short_threads_100hz", test_short_threads_100hz},
        {"short_threads_one_in_4", test_short_threads_one_in_4},
        {"short_threads_default", test_short_threads_default},
        {"short_threads_off", test_short_threads_off},
        {"short_threads_timer_1khz", test_short_threads_timer_1khz},
        {"short_threads_timer_100hz", test_short_threads_timer_100hz},
        {"accuracy_short_threads_share", test_accuracy_short_threads_share},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
