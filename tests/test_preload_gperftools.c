/* The gperftools drop-in: a program written for gperftools' CPU profiler,
 * built against snapprof's <gperftools/profiler.h> and library, checks the
 * API's promises itself; here its profiles are read back through
 * `go tool pprof`. These run under the sanitizers too: nothing is
 * preloaded. */
#include "test_preload_util.h"

#include <unistd.h>

#define PROG GPERFTOOLS_PROG

static char g_dir[512], g_prof[1024];

static void setup(const char *tag)
{
    char *d = tu_make_tmpdir(tag);
    snprintf(g_dir, sizeof g_dir, "%s", d);
    snprintf(g_prof, sizeof g_prof, "%s/x.prof", d);
    free(d);
}

/* ProfilerStart("x.prof") ... ProfilerStop(): the hot function on top. */
static void test_start_stop(void)
{
    setup("gperf-basic");
    int st;
    char *text = pl_run(&st, "cd %s && %s basic x.prof", g_dir, PROG);
    ASSERT_EQ(st, 0);
    ASSERT(strstr(text, "snapprof:") == NULL);
    tu_top_row_t *rows;
    char *raw;
    int n = tu_pprof_top(g_prof, "-sample_index=samples", &rows, &raw);
    printf("%s\n", raw);
    ASSERT_GT(n, 0);
    ASSERT_STR_EQ(rows[0].name, "gperf_hot");
    ASSERT_GE(rows[0].flat, 50);
    free(rows);
    free(raw);
    free(text);
}

/* ProfilingIsEnabledForAllThreads, ProfilerGetCurrentState, a second
 * start refused, the deprecated and no-op calls, start after stop. */
static void test_state(void)
{
    setup("gperf-state");
    int st;
    char *text = pl_run(&st, "cd %s && %s state x.prof", g_dir, PROG);
    ASSERT_EQ(st, 0);
    pl_require_fn(g_prof, "", "gperf_cold", 5); /* the second profile replaced the first */
    ASSERT_EQ(pl_samples_of(g_prof, "", "gperf_hot"), 0);
    free(text);
}

/* ProfilerFlush writes a complete profile while profiling goes on. */
static void test_flush(void)
{
    setup("gperf-flush");
    int st;
    char *text = pl_run(&st, "cd %s && %s flush x.prof", g_dir, PROG);
    ASSERT_EQ(st, 0);
    char flushed[1200];
    snprintf(flushed, sizeof flushed, "%s.flushed", g_prof);
    pl_require_fn(flushed, "", "gperf_hot", 20);
    ASSERT_EQ(pl_samples_of(flushed, "", "gperf_cold"), 0);
    pl_require_fn(g_prof, "", "gperf_hot", 20);
    pl_require_fn(g_prof, "", "gperf_cold", 20);
    free(text);
}

/* Threads that ran before ProfilerStart are found and sampled. */
static void test_existing_threads(void)
{
    setup("gperf-existing");
    int st;
    char *text = pl_run(&st, "cd %s && %s existing x.prof", g_dir, PROG);
    ASSERT_EQ(st, 0);
    pl_require_fn(g_prof, "", "gperf_pre_a", 20);
    pl_require_fn(g_prof, "", "gperf_pre_b", 20);
    free(text);
}

/* A thread that cannot answer the scan at ProfilerStart (held in vfork()
 * for its child) is retried, and sampled once it can answer. Under TSan
 * vfork() is a fork(): the thread is never held. */
static void test_vfork_thread(void)
{
    tu_skip_under_tsan("TSan turns vfork() into fork()");
    setup("gperf-vfork");
    int st;
    char *text = pl_run(&st, "cd %s && %s vfork_thread x.prof", g_dir, PROG);
    ASSERT_EQ(st, 0);
    pl_require_fn(g_prof, "", "gperf_pre_a", 50);
    free(text);
}

/* An unwritable path: ProfilerStart returns 0 and says why in one line. */
static void test_bad_path(void)
{
    setup("gperf-badpath");
    int st;
    char *text = pl_run(&st, "%s bad_path /nonexistent-dir/x.prof", PROG);
    ASSERT_EQ(st, 0);
    pl_require_count(text, "\n", 1);
    ASSERT_CONTAINS(text, "snapprof: ProfilerStart(\"/nonexistent-dir/x.prof\"): cannot write "
                          "/nonexistent-dir/x.prof: No such file or directory");
    free(text);
}

/* SIGURG already handled by the program at ProfilerStart: another signal
 * is picked, that is said, and the program's handler keeps its signals. */
static void test_signal_taken(void)
{
    setup("gperf-sigtaken");
    int st;
    char *text = pl_run(&st, "cd %s && env -u SNAPPROF_SIGNAL %s signal_taken x.prof", g_dir, PROG);
    ASSERT_EQ(st, 0);
    pl_require_count(text, "snapprof: ", 1);
    ASSERT_CONTAINS(text, "snapprof: SIGURG already has a handler in this program; sampling with "
                          "SIGRTMAX-1 instead");
    pl_require_fn(g_prof, "", "gperf_hot", 20);
    free(text);
}

/* ... and when SIGURG was asked for by name, the profiler refuses. */
static void test_signal_taken_explicit(void)
{
    setup("gperf-sigexplicit");
    int st;
    char *text = pl_run(
        &st, "cd %s && SNAPPROF_SIGNAL=SIGURG expect_start=0 %s signal_taken x.prof", g_dir, PROG);
    ASSERT_EQ(st, 0);
    pl_require_count(text, "\n", 1);
    ASSERT_CONTAINS(text, "SIGURG already has a handler in this program; not profiling (choose "
                          "another signal with SNAPPROF_SIGNAL");
    ASSERT(!pl_exists(g_prof));
    free(text);
}

/* ProfilerStart() takes its trigger as the preloaded start does: the
 * default (auto: the perf event where this kernel allows it) unless
 * SNAPPROF_TRIGGER names another. It once zeroed its settings and so
 * always ran "auto", whatever the variable said. */
static void trigger_of_start(const char *env, const char *want)
{
    setup("gperf-trigger");
    int st;
    char *text = pl_run(&st, "cd %s && %s %s basic x.prof", g_dir, env, PROG);
    ASSERT_EQ(st, 0);
    char args[1200];
    snprintf(args, sizeof args, "-comments %s", g_prof);
    char *comments = tu_pprof(args, &st);
    printf("%s", comments);
    ASSERT_EQ(st, 0);
    /* "trigger perf", or "triggers perf (1 thread), handshake (1)" where a
     * thread of the runtime's own (TSan's, which starts with every signal
     * blocked) is registered too and keeps its signal blocked. */
    char plural[64];
    snprintf(plural, sizeof plural, "triggers %s (", want + strlen("trigger "));
    ASSERT(strstr(comments, want) != NULL || strstr(comments, plural) != NULL);
    free(comments);
    free(text);
}

static void test_trigger_setting(void)
{
    if (tu_perf_event_allowed())
        trigger_of_start("", "trigger perf");
    trigger_of_start("SNAPPROF_TRIGGER=timer", "trigger timer");
    trigger_of_start("SNAPPROF_TRIGGER=handshake", "trigger handshake");
}

/* CPUPROFILE set for a program linked with the library: profiling starts
 * at load (so ProfilerStart reports one is running) and the file is
 * written at exit. */
static void test_cpuprofile_at_load(void)
{
    setup("gperf-env");
    int st;
    char *text = pl_run(&st, "cd %s && CPUPROFILE=env.prof CPUPROFILE_FREQUENCY=500 %s env x.prof",
                        g_dir, PROG);
    ASSERT_EQ(st, 0);
    char prof[1200];
    snprintf(prof, sizeof prof, "%s/env.prof", g_dir);
    pl_require_fn(prof, "", "gperf_hot", 20);
    ASSERT(!pl_exists(g_prof));
    free(text);
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"start_stop", test_start_stop},
        {"state", test_state},
        {"flush", test_flush},
        {"existing_threads", test_existing_threads},
        {"vfork_thread", test_vfork_thread},
        {"bad_path", test_bad_path},
        {"signal_taken", test_signal_taken},
        {"signal_taken_explicit", test_signal_taken_explicit},
        {"cpuprofile_at_load", test_cpuprofile_at_load},
        {"trigger_setting", test_trigger_setting},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
