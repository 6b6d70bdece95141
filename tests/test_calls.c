/* Exact function timing through -finstrument-functions (this file is
 * built with it and linked with libsnapprof-instrument): call counts are
 * exact, self and total time add up, each thread aggregates its own calls,
 * the trace has the calls as nested slices, and go tool pprof reads the
 * calls profile. */
#include "test.h"
#include "test_util.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Not instrumented (no_instrument_function, which gcc and clang both
 * know): never timed, so its time is its callers' self time. */
__attribute__((noinline, no_instrument_function)) void calls_excluded_burn(uint64_t ns)
{
    tu_burn_cpu_ns(ns);
}

__attribute__((noinline)) int calls_fib(int n)
{
    return n < 2 ? n : calls_fib(n - 1) + calls_fib(n - 2);
}

__attribute__((noinline)) void calls_leaf(void)
{
    calls_excluded_burn(2000000u);
}

__attribute__((noinline)) void calls_outer(void)
{
    for (int i = 0; i < 5; i++)
        calls_leaf();
}

static void *worker(void *arg)
{
    int *result = arg;
    for (int i = 0; i < 3; i++)
        *result += calls_fib(12); /* 465 calls each */
    return NULL;
}

static double top_value(const char *path, const char *extra, const char *name, int cum, int print)
{
    return tu_top_value(path, extra, name, cum ? TU_TOP_CUM : TU_TOP_FLAT, -1, print);
}

static void test_profile(void)
{
    char *dir = tu_make_tmpdir("calls");
    char *calls_path = tu_path(dir, "calls.pb.gz"), *trace_path = tu_path(dir, "trace.json");
    snapprof_thread_t *self;
    snapprof_profiler_t *p = tu_profile_self(&self);
    snapprof_builder_t *cb, *tb;
    ASSERT_OK(snapprof_calls_builder_create(calls_path, &cb));
    ASSERT_OK(snapprof_profiler_add_builder(p, cb));
    ASSERT_OK(snapprof_trace_builder_create(trace_path, &tb));
    ASSERT_OK(snapprof_profiler_add_builder(p, tb));
    ASSERT_OK(snapprof_profiler_start(p));
    int r = calls_fib(15); /* 1973 calls */
    calls_outer();         /* 1 + 5 calls, 10 ms of CPU in the leaves */
    int wr = 0;
    pthread_t th;
    ASSERT_EQ(pthread_create(&th, NULL, worker, &wr), 0);
    ASSERT_EQ(pthread_join(th, NULL), 0);
    ASSERT_OK(snapprof_profiler_stop(p));
    snapprof_stats_t st;
    ASSERT_OK(snapprof_profiler_get_stats(p, &st));
    snapprof_profiler_destroy(p);
    snapprof_thread_release(self);
    ASSERT_EQ(r, 610);
    ASSERT_EQ(wr, 3 * 144);
    printf("events dropped %llu\n", (unsigned long long)st.events_dropped);

    /* Exact counts: fib(15) and 3 x fib(12) on another thread. */
    ASSERT_EQ(top_value(calls_path, "-nodefraction=0 -sample_index=calls", "calls_fib", 0, 1),
              1973 + 3 * 465);
    ASSERT_EQ(top_value(calls_path, "-nodefraction=0 -sample_index=calls", "calls_leaf", 0, 0), 5);
    ASSERT_EQ(top_value(calls_path, "-nodefraction=0 -sample_index=calls", "calls_outer", 0, 0), 1);
    ASSERT_EQ(top_value(calls_path,
                        "-nodefraction=0 -sample_index=calls -tagfocus=thread_id=1:1000000000",
                        "calls_excluded_burn", 0, 0),
              -1); /* excluded: never timed */
    /* Time: the leaves hold the excluded burn as self time (10 ms of CPU,
     * more in wall time), calls_outer little of its own but all of it in
     * total. */
    double leaf_self =
        top_value(calls_path, "-nodefraction=0 -sample_index=time -unit=ms", "calls_leaf", 0, 1);
    double outer_self =
        top_value(calls_path, "-nodefraction=0 -sample_index=time -unit=ms", "calls_outer", 0, 0);
    double outer_cum =
        top_value(calls_path, "-nodefraction=0 -sample_index=time -unit=ms", "calls_outer", 1, 0);
    printf("calls_leaf self %.2f ms; calls_outer self %.3f ms, total %.2f ms\n", leaf_self,
           outer_self, outer_cum);
    ASSERT_GE(leaf_self, 9.9);
    ASSERT_LT(outer_self, leaf_self / 10);
    ASSERT_GE(outer_cum, leaf_self);

    /* The trace: the checker accepts it, and the slices are named. */
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "python3 '%s/check_trace.py' '%s' && grep -c '\"cat\":\"function\"' '%s'",
             SNAPPROF_TEST_SOURCE_DIR, trace_path, trace_path);
    int status;
    char *out = tu_run(cmd, &status);
    printf("%s", out);
    ASSERT_EQ(status, 0);
    long slices = strtol(strrchr(out, '\n') ? strchr(out, '\n') + 1 : out, NULL, 10);
    free(out);
    snprintf(cmd, sizeof cmd,
             "grep -o '\"cat\":\"function\",\"name\":\"calls_outer\"' '%s' | wc -l", trace_path);
    out = tu_run(cmd, &status);
    ASSERT_EQ(strtol(out, NULL, 10), 1);
    free(out);
    /* Every call is a slice unless the buffer dropped some. */
    if (st.events_dropped == 0)
        ASSERT_EQ(slices, 1973 + 3 * 465 + 6 + 1); /* fib, outer and leaves, worker */
    unlink(calls_path);
    unlink(trace_path);
    rmdir(dir);
    free(calls_path);
    free(trace_path);
    free(dir);
}

/* Unbalanced exits: an exit of a function not being timed is -ENOENT and
 * changes nothing; an exit that skips calls (as after longjmp) ends them. */
static void test_unbalanced(void)
{
    /* main and this function are timed already (instrumented). */
    int a, b, c, never;
    ASSERT_EQ(snapprof_func_exit(&a), -ENOENT);
    ASSERT_OK(snapprof_func_enter(&a));
    ASSERT_OK(snapprof_func_enter(&b));
    ASSERT_OK(snapprof_func_enter(&c));
    ASSERT_EQ(snapprof_func_exit(&never), -ENOENT);
    ASSERT_OK(snapprof_func_exit(&a)); /* ends c and b too */
    ASSERT_EQ(snapprof_func_exit(&b), -ENOENT);
    /* Too deep: -E2BIG, matched by its exit. */
    int entered = 0, rc;
    while ((rc = snapprof_func_enter(&a)) == 0)
        entered++;
    ASSERT_EQ(rc, -E2BIG);
    ASSERT_EQ(entered, SNAPPROF_CALL_DEPTH_MAX - 2);
    ASSERT_EQ(snapprof_func_enter(&b), -E2BIG);
    ASSERT_OK(snapprof_func_exit(&b)); /* matched to the untimed b */
    ASSERT_OK(snapprof_func_exit(&a)); /* matched to the untimed a */
    for (int i = 0; i < entered; i++)
        ASSERT_OK(snapprof_func_exit(&a));
    ASSERT_EQ(snapprof_func_exit(&a), -ENOENT);
}

/* This file is built with -finstrument-functions, and unbalanced counts the
 * timed frames from main down: test_run_case* is excluded from the
 * instrumentation (events.cmake), so the dispatcher adds no timed frame. */
int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"profile", test_profile},
        {"unbalanced", test_unbalanced},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
