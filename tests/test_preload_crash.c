/* Crashing programs under `snapprof record`: a program that burns CPU in
 * burn_before_crash() and then dies of SIGSEGV, SIGBUS, SIGFPE, SIGILL or
 * SIGABRT leaves a profile with that function in it, and dies of its crash
 * as it would have alone; a program with a SIGSEGV handler of its own runs
 * as without snapprof; a crash inside malloc ends the process within the
 * crash wait, without a profile, never hangs. LD_PRELOAD: skipped in
 * sanitizer builds (whose runtimes own the fault signals anyway). */
#include "test_preload_util.h"

#include <signal.h>
#include <unistd.h>

#define CLI SNAPPROF_CLI

static char g_dir[512];

static void setup(const char *tag)
{
    pl_skip_if_sanitized();
    pl_make_dir(g_dir, sizeof g_dir, tag);
}

/* Runs the crash program in mode under the command, with env before it
 * (may be ""), no core files; returns the output, ending "st=N" with the
 * command's exit status. */
/* Where a profile must be written, the crashed thread waits for the
 * writer for 60 s rather than 2: a loaded machine may give the writer
 * less than its CPU time within 2 s. */
#define LONG_WAIT "SNAPPROF_TEST_CRASH_WAIT_MS=60000"

static char *run_mode(const char *env, const char *mode)
{
    return pl_run(NULL,
                  "cd %s && ulimit -c 0 && %s %s record -F 1000 -o c.pb.gz -- %s %s 300 2>&1; "
                  "echo st=$?",
                  g_dir, env, CLI, CRASH_PROG, mode);
}

static void require_status(const char *text, int status)
{
    char want[32];
    snprintf(want, sizeof want, "st=%d\n", status);
    ASSERT_CONTAINS(text, want);
}

/* The program dies of signo, exactly as without snapprof, and its profile
 * is written first, with the work before the crash in it. */
static void crash_writes_profile(const char *mode, int signo, const char *name)
{
    setup(mode);
    char *text = run_mode(LONG_WAIT, mode);
    require_status(text, 128 + signo);
    char out[1024];
    snprintf(out, sizeof out, "%s/c.pb.gz", g_dir);
    if (!pl_exists(out))
        TEST_FAIL("no profile at %s after %s", out, name);
    char line[128];
    snprintf(line, sizeof line, "was killed by %s\n", name);
    ASSERT_CONTAINS(text, line);
    snprintf(line, sizeof line, "profile written on %s\n", name);
    ASSERT_CONTAINS(text, line);
    pl_require_under(out, "burn_before_crash", 1);
    free(text);
}

static void test_segv(void)
{
    crash_writes_profile("segv", SIGSEGV, "SIGSEGV");
}

static void test_bus(void)
{
    crash_writes_profile("bus", SIGBUS, "SIGBUS");
}

static void test_fpe(void)
{
    crash_writes_profile("fpe", SIGFPE, "SIGFPE");
}

static void test_ill(void)
{
    crash_writes_profile("ill", SIGILL, "SIGILL");
}

static void test_abort(void)
{
    crash_writes_profile("abrt", SIGABRT, "SIGABRT");
}

/* sigaction(SIGSEGV, NULL, &old) shows the program SIG_DFL (what it left),
 * not our handler, and the crash still writes the profile. */
static void test_query_shows_default(void)
{
    crash_writes_profile("query", SIGSEGV, "SIGSEGV");
}

/* A handler that restores SIG_DFL and raises the signal again: the
 * program's handler runs first, then the profile is written. */
static void test_handler_reraises(void)
{
    crash_writes_profile("reraise", SIGSEGV, "SIGSEGV");
    char *log =
        pl_run(NULL, "cd %s && ulimit -c 0 && %s %s record -o r.pb.gz -- %s reraise 50 2>&1", g_dir,
               LONG_WAIT, CLI, CRASH_PROG);
    ASSERT_CONTAINS(log, "own handler\n");
    free(log);
}

/* The same with SA_RESETHAND, whose reset the kernel would make past us:
 * the handler sees SIG_DFL, raises the signal again, and the profile is
 * written. */
static void test_resethand_reraises(void)
{
    crash_writes_profile("resethand", SIGSEGV, "SIGSEGV");
    char *log =
        pl_run(NULL, "cd %s && ulimit -c 0 && %s %s record -o r.pb.gz -- %s resethand 50 2>&1",
               g_dir, LONG_WAIT, CLI, CRASH_PROG);
    ASSERT_CONTAINS(log, "oneshot handler, reset\n");
    free(log);
}

/* A program that recovers from its own faults with siglongjmp: its
 * handler gets every one, ours never acts, and it exits 0 with its profile
 * written at exit. */
static void test_own_handler_recovers(void)
{
    setup("recover");
    char *text = run_mode("", "recover");
    require_status(text, 0);
    ASSERT_CONTAINS(text, "recovered\n");
    ASSERT_CONTAINS(text, "exited with status 0");
    if (strstr(text, "profile written on SIGSEGV"))
        TEST_FAIL("the crash handler acted under the program's own handler");
    char out[1024];
    snprintf(out, sizeof out, "%s/c.pb.gz", g_dir);
    pl_require_fn(out, "", "burn_before_crash", 1);
    free(text);
}

/* A stack overflow where the program gave the thread an alternate signal
 * stack: our handler (SA_ONSTACK) runs there and the profile is written. */
static void test_overflow_altstack(void)
{
    crash_writes_profile("overflow_altstack", SIGSEGV, "SIGSEGV");
}

/* Without an alternate stack no handler can run: not covered. The process
 * still dies of SIGSEGV at once, and the summary says why there is no
 * profile. */
static void test_overflow_not_covered(void)
{
    setup("overflow");
    char *text = run_mode("", "overflow");
    require_status(text, 128 + SIGSEGV);
    ASSERT_CONTAINS(text, "was killed by SIGSEGV");
    ASSERT_CONTAINS(text, "wrote no profile: it died of SIGSEGV where snapprof could not act");
    free(text);
}

/* glibc aborts inside free() with the malloc arena's lock held, and every
 * thread allocates from that arena: the writer blocks. The crashed thread
 * gives up after the crash wait (2 s), and the process dies of SIGABRT;
 * the summary says the profile was not finished. Judged from the moment
 * the program crashed, with a wide margin: a hang would be forever. */
static void test_inside_malloc_bounded(void)
{
    setup("heap");
    char *text = run_mode("GLIBC_TUNABLES=glibc.malloc.tcache_count=0:glibc.malloc.arena_max=1",
                          "heap_abort");
    uint64_t end = tu_mono_ns();
    require_status(text, 128 + SIGABRT);
    ASSERT_CONTAINS(text, "double free or corruption");
    ASSERT_CONTAINS(text, "was killed by SIGABRT");
    ASSERT_CONTAINS(text, "died of SIGABRT, and its profile was not finished within 2 s");
    const char *at = strstr(text, "crashing at ");
    ASSERT_NOT_NULL(at);
    uint64_t crashed = strtoull(at + strlen("crashing at "), NULL, 10);
    ASSERT_GT(crashed, 0);
    int64_t ms = (int64_t)(end - crashed) / 1000000;
    printf("from the crash to the command's end: %lld ms\n", (long long)ms);
    ASSERT_GE(ms, 1900); /* it did wait for the writer */
    ASSERT_LT(ms, 8000);
    free(text);
}

/* --crash off (and SNAPPROF_CRASH=0 with LD_PRELOAD): no handler of ours
 * on the fault signals, so a crash writes no profile and the program dies
 * of its signal with the status it has alone. */
static void test_off(void)
{
    setup("off");
    static const struct {
        const char *mode;
        int signo;
    } crashes[] = {{"segv", SIGSEGV}, {"abrt", SIGABRT}};
    for (size_t i = 0; i < sizeof crashes / sizeof crashes[0]; i++) {
        const char *mode = crashes[i].mode;
        char *alone = pl_run(NULL, "cd %s && ulimit -c 0 && %s %s 300 2>&1; echo st=$?", g_dir,
                             CRASH_PROG, mode);
        require_status(alone, 128 + crashes[i].signo);
        char *text = pl_run(NULL,
                            "cd %s && ulimit -c 0 && %s %s record --crash off -F 1000 -o c.pb.gz "
                            "-- %s %s 300 2>&1; echo st=$?",
                            g_dir, LONG_WAIT, CLI, CRASH_PROG, mode);
        require_status(text, 128 + crashes[i].signo);
        ASSERT_CONTAINS(text, "wrote no profile: it died of SIG");
        ASSERT_CONTAINS(text, "(--crash off)\n");
        char *env = pl_run(NULL,
                           "cd %s && ulimit -c 0 && %s SNAPPROF_CRASH=0 SNAPPROF_OUTPUT=%s/e.pb.gz "
                           "LD_PRELOAD=%s %s %s 300 2>&1; echo st=$?",
                           g_dir, LONG_WAIT, g_dir, SNAPPROF_PRELOAD_LIB, CRASH_PROG, mode);
        require_status(env, 128 + crashes[i].signo);
        if (strstr(text, "profile written on") || strstr(env, "profile written on"))
            TEST_FAIL("%s: the crash handler acted with crashes off:\n%s\n%s", mode, text, env);
        if (strstr(env, "ignoring SNAPPROF_CRASH"))
            TEST_FAIL("SNAPPROF_CRASH=0 was not understood:\n%s", env);
        char out[1024];
        snprintf(out, sizeof out, "%s/c.pb.gz", g_dir);
        if (pl_exists(out))
            TEST_FAIL("%s: record --crash off wrote %s", mode, out);
        snprintf(out, sizeof out, "%s/e.pb.gz", g_dir);
        if (pl_exists(out))
            TEST_FAIL("%s: SNAPPROF_CRASH=0 wrote %s", mode, out);
        printf("%s: alone, under record --crash off and with SNAPPROF_CRASH=0: st=%d, no "
               "profile\n",
               mode, 128 + crashes[i].signo);
        free(alone);
        free(text);
        free(env);
    }
    /* A bad value is said and the default kept. */
    char *bad =
        pl_run(NULL, "cd %s && %s record --crash maybe -- true 2>&1; echo st=$?", g_dir, CLI);
    ASSERT_CONTAINS(bad, "bad --crash");
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"segv", test_segv},
        {"bus", test_bus},
        {"fpe", test_fpe},
        {"ill", test_ill},
        {"abort", test_abort},
        {"query_shows_default", test_query_shows_default},
        {"handler_reraises", test_handler_reraises},
        {"resethand_reraises", test_resethand_reraises},
        {"own_handler_recovers", test_own_handler_recovers},
        {"overflow_altstack", test_overflow_altstack},
        {"overflow_not_covered", test_overflow_not_covered},
        {"inside_malloc_bounded", test_inside_malloc_bounded},
        {"off", test_off},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
