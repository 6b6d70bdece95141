/* Labels end to end, read back by go tool pprof: -tagfocus picks each
 * thread's work by its labels, and hitch=true picks the slow app frames. */
#include "test.h"
#include "test_sample_log.h"
#include "test_util.h"

#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

/* Burns about ns of this thread's CPU time in the calling function itself
 * (a macro, so the samples land in the function that uses it). */
#define BURN(ns)                                                                                   \
    do {                                                                                           \
        uint64_t end_ = tu_thread_cpu_ns() + (ns);                                                 \
        volatile uint64_t x_ = 1;                                                                  \
        while (tu_thread_cpu_ns() < end_)                                                          \
            for (int i_ = 0; i_ < 200000; i_++)                                                    \
                x_ = x_ * 6364136223846793005u + 1442695040888963407u;                             \
    } while (0)

__attribute__((noinline)) void label_alpha_hot(void)
{
    BURN(2000000u);
}

__attribute__((noinline)) void label_beta_hot(void)
{
    BURN(2000000u);
}

__attribute__((noinline)) void hitch_fast_path(void)
{
    BURN(6000000u);
}

__attribute__((noinline)) void hitch_slow_path(void)
{
    BURN(60000000u);
}

typedef struct worker {
    tu_worker_t base;
    int which;
} worker_t;

/* The frame loop's frames so far: slow ones, and fast ones that took more
 * wall time than the hitch threshold all the same (a loaded machine or a
 * host stall kept the thread off the CPU: a hitch as real as any). */
#define HITCH_THRESHOLD_NS 30000000u
static atomic_uint_fast64_t g_slow_frames, g_fast_hitches;

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    tu_worker_enter(&w->base);
    if (w->which == 0) {
        ASSERT_OK(snapprof_label_set_str(SNAPPROF_LABEL_THREAD, "worker", "alpha"));
        ASSERT_OK(snapprof_label_set_num(SNAPPROF_LABEL_THREAD, "shard", 1, NULL));
    } else if (w->which == 1) {
        ASSERT_OK(snapprof_label_set_str(SNAPPROF_LABEL_THREAD, "worker", "beta"));
        ASSERT_OK(snapprof_label_set_num(SNAPPROF_LABEL_THREAD, "shard", 2, NULL));
    }
    atomic_store(&w->base.ready, 1);
    for (uint64_t f = 1; !atomic_load(&w->base.stop); f++) {
        if (w->which == 0) {
            label_alpha_hot();
        } else if (w->which == 1) {
            label_beta_hot();
        } else {
            /* A frame loop: every tenth frame is slow. */
            uint64_t t0 = tu_mono_ns();
            ASSERT_OK(snapprof_app_frame_begin(f));
            if (f % 10 == 0)
                hitch_slow_path();
            else
                hitch_fast_path();
            ASSERT_OK(snapprof_app_frame_end(f));
            if (f % 10 == 0)
                atomic_fetch_add(&g_slow_frames, 1);
            else if (tu_mono_ns() - t0 > HITCH_THRESHOLD_NS)
                atomic_fetch_add(&g_fast_hitches, 1);
        }
    }
    return NULL;
}

static void start_worker(worker_t *w, int which)
{
    w->which = which;
    tu_worker_start(&w->base, worker_main, w);
}

static void stop_worker(worker_t *w)
{
    tu_worker_stop(&w->base);
}

/* Profiles the workers into path until each has n samples. Waiting for
 * samples rather than time: this VM's host stalls vCPUs for up to ~1 s. */
static void run_profile(worker_t *ws, size_t nw, size_t n, const char *path)
{
    snapprof_thread_t *threads[4];
    for (size_t i = 0; i < nw; i++)
        threads[i] = ws[i].base.token;
    snapprof_params_t params = tu_params(1000000u);
    params.hitch_threshold_ns = HITCH_THRESHOLD_NS;
    snapprof_profiler_t *p;
    snapprof_builder_t *b;
    sample_log_t log = {0};
    ASSERT_OK(snapprof_profiler_create(&params, threads, nw, &p));
    ASSERT_OK(snapprof_pprof_builder_create(path, &b));
    ASSERT_OK(snapprof_profiler_add_builder(p, b));
    ASSERT_OK(snapprof_profiler_add_builder(p, sl_builder(&log)));
    ASSERT_OK(snapprof_profiler_start(p));
    uint64_t deadline = tu_mono_ns() + 150000000000u;
    for (size_t i = 0; i < nw; i++)
        while (sl_count_tid(&log, ws[i].base.tid) < n && tu_mono_ns() < deadline)
            usleep(10000);
    ASSERT_OK(snapprof_profiler_stop(p));
    for (size_t i = 0; i < nw; i++)
        ASSERT_GE(sl_count_tid(&log, ws[i].base.tid), n);
    snapprof_profiler_destroy(p);
    sl_free(&log);
}

/* Both -tagfocus tests below pass -relative_percentages to tu_top_cum_pct(),
 * so each cum% is a share of what the filter kept. */

/* Prints `go tool pprof -tags<extra>` of path and checks that it ran and
 * holds each of want (NULL-ended). */
static void expect_tags(const char *path, const char *extra, const char *const *want)
{
    char args[600];
    snprintf(args, sizeof args, "-tags%s '%s'", extra, path);
    int status;
    char *tags = tu_pprof(args, &status);
    printf("$ go tool pprof -tags%s\n%s\n", extra, tags);
    ASSERT_EQ(status, 0);
    for (const char *const *w = want; *w; w++)
        ASSERT_CONTAINS(tags, *w);
    free(tags);
}

/* The cum% of fn_a and fn_b in the samples -tagfocus=focus keeps, printed
 * as "focus: what_a A%, what_b B%"; print_a: print the top for fn_a. */
static void focus_shares(const char *path, const char *focus, const char *fn_a, int print_a,
                         const char *fn_b, const char *what_a, const char *what_b, double *a,
                         double *b)
{
    char extra[128];
    snprintf(extra, sizeof extra, "-relative_percentages -sample_index=samples -tagfocus=%s",
             focus);
    *a = tu_top_cum_pct(path, extra, fn_a, print_a);
    *b = tu_top_cum_pct(path, extra, fn_b, 0);
    printf("%s: %s %.1f%%, %s %.1f%%\n", focus, what_a, *a, what_b, *b);
}

/* Two threads with different labels: -tagfocus on a string label and on a
 * numeric one selects each thread's hot function and never the other's. */
static void test_tagfocus_threads(void)
{
    worker_t ws[2] = {0};
    start_worker(&ws[0], 0);
    start_worker(&ws[1], 1);
    char *dir = tu_make_tmpdir("labels-e2e");
    char path[512];
    snprintf(path, sizeof path, "%s/labels.pb.gz", dir);
    run_profile(ws, 2, 500, path);
    stop_worker(&ws[0]);
    stop_worker(&ws[1]);

    static const char *const want[] = {"worker", "alpha", "beta", "shard", NULL};
    expect_tags(path, "", want);

    double a, b;
    focus_shares(path, "worker=alpha", "label_alpha_hot", 1, "label_beta_hot", "label_alpha_hot",
                 "label_beta_hot", &a, &b);
    ASSERT_GT(a, 80.0);
    ASSERT_EQ(b, 0);
    focus_shares(path, "worker=beta", "label_alpha_hot", 0, "label_beta_hot", "label_alpha_hot",
                 "label_beta_hot", &a, &b);
    ASSERT_EQ(a, 0);
    ASSERT_GT(b, 80.0);
    focus_shares(path, "shard=2", "label_alpha_hot", 0, "label_beta_hot", "label_alpha_hot",
                 "label_beta_hot", &a, &b);
    ASSERT_EQ(a, 0);
    ASSERT_GT(b, 80.0);
    unlink(path);
    rmdir(dir);
    free(dir);
}

/* A frame loop whose every tenth frame takes 60 ms instead of 6 ms, with a
 * 30 ms threshold: hitch=true selects the slow path, hitch=false the fast
 * one. */
static void test_hitch_frames(void)
{
    worker_t w = {0};
    start_worker(&w, 2);
    char *dir = tu_make_tmpdir("hitch-e2e");
    char path[512];
    snprintf(path, sizeof path, "%s/hitch.pb.gz", dir);
    uint64_t slow0 = atomic_load(&g_slow_frames), fast0 = atomic_load(&g_fast_hitches);
    run_profile(&w, 1, 1500, path);
    stop_worker(&w);
    /* What hitch=true should hold: every slow frame (60 ms of CPU each)
     * and the fast ones (6 ms each) that were hitches anyway, by the
     * thread's own clock. CI once saw 35 % fast samples among the hitches,
     * on a machine that stretched most fast frames past 30 ms. */
    double n_slow = (double)(atomic_load(&g_slow_frames) - slow0);
    double n_fast = (double)(atomic_load(&g_fast_hitches) - fast0);
    double want_fast = 100.0 * 6 * n_fast / (6 * n_fast + 60 * n_slow);
    printf("frames in the profile: %.0f slow, %.0f fast ones over %u ms: %.1f%% fast expected "
           "among the hitches\n",
           n_slow, n_fast, HITCH_THRESHOLD_NS / 1000000u, want_fast);
    ASSERT_GE(n_slow, 10);

    static const char *const want[] = {"hitch", "true", "false", NULL};
    expect_tags(path, " -tagfocus=hitch", want);

    double slow, fast;
    focus_shares(path, "hitch=true", "hitch_slow_path", 1, "hitch_fast_path", "slow", "fast", &slow,
                 &fast);
    /* Shares of about 1000 samples: one standard error is under 1.6
     * points; frames near the threshold may be judged either way. */
    ASSERT_GT(slow, 100.0 - want_fast - 10.0);
    ASSERT_LT(fast, want_fast + 10.0);
    focus_shares(path, "hitch=false", "hitch_slow_path", 0, "hitch_fast_path", "slow", "fast",
                 &slow, &fast);
    ASSERT_EQ(slow, 0); /* a 60 ms frame is never under 30 ms */
    ASSERT_GT(fast, 80.0);
    unlink(path);
    rmdir(dir);
    free(dir);
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"tagfocus_threads", test_tagfocus_threads},
        {"hitch_frames", test_hitch_frames},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
