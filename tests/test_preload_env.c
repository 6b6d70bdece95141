/* The preload library without the command: LD_PRELOAD plus environment
 * (ours and gperftools' CPUPROFILE), bad values, a program that handles the
 * sampling signal itself, and the same library linked into a program
 * (which is how its logic runs under the sanitizers). */
#include "test_preload_util.h"

#include <unistd.h>

#define LIB SNAPPROF_PRELOAD_LIB
#define PROG PRELOAD_PROG

/* gperftools' variables alone: CPUPROFILE names the file, the frequency
 * sets the period (250 Hz: 4 ms). */
static void test_cpuprofile(void)
{
    pl_skip_if_sanitized();
    pl_setup("pre-cpuprofile");
    int st;
    char *text = pl_run(
        &st, "cd %s && LD_PRELOAD=%s CPUPROFILE=c.prof CPUPROFILE_FREQUENCY=250 %s burn hot_a 300",
        pl_dir, LIB, PROG);
    ASSERT_EQ(st, 0);
    ASSERT(strstr(text, "snapprof:") == NULL); /* nothing to say */
    const char *prof = pl_path(pl_dir, "c.prof");
    char args[1200];
    pl_require_fn(prof, "", "hot_a", 1);
    snprintf(args, sizeof args, "-raw '%s'", prof);
    char *raw = tu_pprof(args, &st);
    ASSERT_CONTAINS(raw, "Period: 4000000");
    free(raw);
    free(text);
}

/* Bad values: one line each, the default instead, and the program's own
 * behaviour (output, exit status) untouched. */
static void test_bad_env(void)
{
    pl_skip_if_sanitized();
    pl_setup("pre-badenv");
    int st;
    char *text = pl_run(&st,
                        "cd %s && LD_PRELOAD=%s SNAPPROF_OUTPUT=e.pb.gz SNAPPROF_FREQUENCY=abc "
                        "SNAPPROF_MODE=sideways SNAPPROF_SIGNAL=KILL SNAPPROF_DURATION=-1 "
                        "SNAPPROF_FORK=maybe SNAPPROF_FORMAT=svg SNAPPROF_CHECKPOINT=soon %s burn "
                        "hot_a 200; echo st=$?",
                        pl_dir, LIB, PROG);
    ASSERT_CONTAINS(text, "hot_a done");
    ASSERT_CONTAINS(text, "st=0");
    pl_require_count(text, "snapprof: ", 7);
    ASSERT_CONTAINS(text, "snapprof: ignoring SNAPPROF_FREQUENCY: 'abc' is not a whole number of "
                          "samples per second; sampling at 100 Hz\n");
    ASSERT_CONTAINS(text, "snapprof: ignoring SNAPPROF_MODE: 'sideways' is not a mode (cpu or "
                          "wall); sampling CPU time\n");
    ASSERT_CONTAINS(text, "snapprof: ignoring SNAPPROF_SIGNAL: SIGKILL cannot be the sampling "
                          "signal");
    ASSERT_CONTAINS(text, "snapprof: ignoring SNAPPROF_DURATION: -1 seconds is out of range");
    ASSERT_CONTAINS(text, "snapprof: ignoring SNAPPROF_FORK: 'maybe' is not a fork mode");
    ASSERT_CONTAINS(text, "snapprof: ignoring SNAPPROF_CHECKPOINT: 'soon' is not a number of "
                          "seconds; writing the profile only at the end\n");
    ASSERT_CONTAINS(text, "snapprof: ignoring SNAPPROF_FORMAT: 'svg' is not a format (pprof, "
                          "folded, trace or gperftools); choosing by the file names\n");
    const char *prof = pl_path(pl_dir, "e.pb.gz");
    char args[1200];
    snprintf(args, sizeof args, "-raw '%s'", prof);
    char *raw = tu_pprof(args, &st);
    ASSERT_EQ(st, 0);
    ASSERT_CONTAINS(raw, "Period: 10000000");
    free(raw);
    free(text);
}

/* SNAPPROF_ARM: a bad value is one line and the whole run armed (its file
 * written); demand alone (no record --http to ask) writes no CPU file and
 * leaves the program alone; demand under wall mode is one line and the
 * whole run armed. */
static void test_arm_env(void)
{
    pl_skip_if_sanitized();
    pl_setup("pre-armenv");
    int st;
    char *text = pl_run(&st,
                        "cd %s && LD_PRELOAD=%s SNAPPROF_OUTPUT=a.pb.gz SNAPPROF_ARM=sometimes %s "
                        "burn hot_a 200; echo st=$?",
                        pl_dir, LIB, PROG);
    ASSERT_CONTAINS(text, "hot_a done");
    ASSERT_CONTAINS(text, "st=0");
    pl_require_count(text, "snapprof: ", 1);
    ASSERT_CONTAINS(text, "snapprof: ignoring SNAPPROF_ARM: 'sometimes' is not when to arm (always "
                          "or demand); armed for the whole run\n");
    const char *prof = pl_path(pl_dir, "a.pb.gz");
    ASSERT_EQ(access(prof, F_OK), 0); /* the run's file, as without it */
    free(text);

    text = pl_run(&st,
                  "cd %s && LD_PRELOAD=%s SNAPPROF_OUTPUT=d.pb.gz SNAPPROF_ARM=Demand %s burn "
                  "hot_a 200; echo st=$?",
                  pl_dir, LIB, PROG);
    ASSERT_CONTAINS(text, "hot_a done");
    ASSERT_CONTAINS(text, "st=0");
    ASSERT(strstr(text, "snapprof:") == NULL);
    prof = pl_path(pl_dir, "d.pb.gz");
    ASSERT(access(prof, F_OK) != 0);
    free(text);

    text = pl_run(&st,
                  "cd %s && LD_PRELOAD=%s SNAPPROF_OUTPUT=w.pb.gz SNAPPROF_ARM=demand "
                  "SNAPPROF_MODE=wall %s burn hot_a 200; echo st=$?",
                  pl_dir, LIB, PROG);
    ASSERT_CONTAINS(text, "st=0");
    pl_require_count(text, "snapprof: ", 1);
    ASSERT_CONTAINS(text, "snapprof: ignoring SNAPPROF_ARM=demand with SNAPPROF_MODE=wall; armed "
                          "for the whole run\n");
    prof = pl_path(pl_dir, "w.pb.gz");
    ASSERT_EQ(access(prof, F_OK), 0);
    free(text);
}

/* An output directory that does not exist: one line, and the profile goes
 * to /tmp/snapprof.<pid>.pb.gz instead. */
static void test_output_dir_missing(void)
{
    pl_skip_if_sanitized();
    pl_setup("pre-nodir");
    char *text = pl_run_ok("cd %s && LD_PRELOAD=%s SNAPPROF_OUTPUT=/nonexistent-dir/x.pb.gz "
                           "SNAPPROF_FREQUENCY=1000 %s burn hot_a 300",
                           pl_dir, LIB, PROG);
    pl_require_count(text, "snapprof: ", 1);
    ASSERT_CONTAINS(text, "snapprof: cannot write the profile to /nonexistent-dir/x.pb.gz (No such "
                          "file or directory); writing ");
    const char *p = strstr(text, "; writing ");
    char alt[1024];
    ASSERT_EQ(sscanf(p, "; writing %1023s", alt), 1);
    ASSERT(strncmp(alt, "/tmp/snapprof.", 14) == 0);
    pl_require_fn(alt, "", "hot_a", 1);
    unlink(alt);
    free(text);
}

/* SNAPPROF_OUTPUT lists several files, each in the format its name says
 * (empty entries skipped); SNAPPROF_FORMAT names formats for one base
 * name, or one per file; formats that do not pair with the files cost one
 * line and the names decide. CPUPROFILE is one file in gperftools' format,
 * whatever its name. */
static void test_output_list(void)
{
    pl_skip_if_sanitized();
    pl_setup("pre-outputs");
    int st;
    char *text = pl_run_ok("cd %s && LD_PRELOAD=%s SNAPPROF_OUTPUT=l.pb.gz,,l.txt, "
                           "SNAPPROF_FREQUENCY=1000 %s burn hot_a 300",
                           pl_dir, LIB, PROG);
    ASSERT(strstr(text, "snapprof:") == NULL);
    char path[1024];
    snprintf(path, sizeof path, "%s/l.pb.gz", pl_dir);
    pl_require_fn(path, "", "hot_a", 1);
    free(text);
    text = pl_run(&st, "grep -c ';hot_a [0-9]*$' %s/l.txt", pl_dir);
    ASSERT_EQ(st, 0);
    free(text);

    text = pl_run(&st,
                  "cd %s && LD_PRELOAD=%s SNAPPROF_OUTPUT=base SNAPPROF_FORMAT=folded,trace "
                  "SNAPPROF_FREQUENCY=1000 %s burn hot_b 300 && ls",
                  pl_dir, LIB, PROG);
    ASSERT_EQ(st, 0);
    ASSERT(strstr(text, "snapprof:") == NULL);
    ASSERT_CONTAINS(text, "base.folded\n");
    ASSERT_CONTAINS(text, "base.json\n");
    free(text);

    text = pl_run(&st,
                  "cd %s && LD_PRELOAD=%s SNAPPROF_OUTPUT=m.pb.gz,m.folded,m.json "
                  "SNAPPROF_FORMAT=trace,folded SNAPPROF_FREQUENCY=1000 %s burn hot_c 300 && ls",
                  pl_dir, LIB, PROG);
    ASSERT_EQ(st, 0);
    pl_require_count(text, "snapprof: ", 1);
    ASSERT_CONTAINS(text, "snapprof: ignoring SNAPPROF_FORMAT: 3 outputs and 2 formats: ");
    ASSERT_CONTAINS(text, "; choosing by the file names\n");
    snprintf(path, sizeof path, "%s/m.pb.gz", pl_dir);
    pl_require_fn(path, "", "hot_c", 1);
    ASSERT_CONTAINS(text, "m.folded\n");
    ASSERT_CONTAINS(text, "m.json\n");
    free(text);

    text = pl_run(&st,
                  "cd %s && env -u SNAPPROF_OUTPUT LD_PRELOAD=%s CPUPROFILE=c.txt "
                  "CPUPROFILE_FREQUENCY=1000 %s burn hot_a 300",
                  pl_dir, LIB, PROG);
    ASSERT_EQ(st, 0);
    snprintf(path, sizeof path, "%s/c.txt", pl_dir);
    pl_require_fn(path, "", "hot_a", 1);
    free(text);
}

/* No SNAPPROF_OUTPUT nor CPUPROFILE: the library stays silent and idle. */
static void test_not_asked(void)
{
    pl_skip_if_sanitized();
    pl_setup("pre-idle");
    int st;
    char *text = pl_run(&st,
                        "cd %s && env -u CPUPROFILE -u SNAPPROF_OUTPUT LD_PRELOAD=%s %s exit 5; "
                        "echo st=$?; ls",
                        pl_dir, LIB, PROG);
    ASSERT_CONTAINS(text, "st=5");
    ASSERT(strstr(text, "snapprof") == NULL);
    free(text);
}

/* The program installs its own SIGURG handler after the library took
 * SIGURG for sampling: its handler gets every one of its own signals (and
 * ours passed on, see stack_copier_signal.c), the profile still fills,
 * and one line says the signal is shared. */
static void test_program_signal_handler(void)
{
    pl_skip_if_sanitized();
    pl_setup("pre-sigurg");
    int st;
    char *text = pl_run(
        &st, "cd %s && LD_PRELOAD=%s SNAPPROF_OUTPUT=u.pb.gz SNAPPROF_FREQUENCY=1000 %s sigurg 300",
        pl_dir, LIB, PROG);
    ASSERT_EQ(st, 0);
    ASSERT_CONTAINS(text, "own handler saw its 5 SIGURG");
    pl_require_count(text, "snapprof: ", 1);
    ASSERT_CONTAINS(text, "snapprof: the program installed a handler for SIGURG, which snapprof "
                          "samples with; both work");
    const char *prof = pl_path(pl_dir, "u.pb.gz");
    pl_require_fn(prof, "", "hot_a", 1);
    free(text);
}

/* The library linked into the program instead of preloaded: the same
 * constructor, threads and exit path, and the case that runs under ASan,
 * UBSan and TSan. */
static void test_linked_threads(void)
{
    pl_setup("pre-linked");
    char *text = pl_run_ok("cd %s && PRELOAD_PROG_CTOR_MS=500 SNAPPROF_OUTPUT=l.pb.gz "
                           "SNAPPROF_FREQUENCY=1000 %s threads 500",
                           pl_dir, PRELOAD_PROG_LINKED);
    ASSERT(strstr(text, "snapprof:") == NULL);
    const char *prof = pl_path(pl_dir, "l.pb.gz");
#if defined(__SANITIZE_THREAD__)
    /* TSan delivers a signal only when the thread next enters its runtime,
     * which a busy loop never does: its threads' samples cannot be judged.
     * What is left to check here: no race report, and a valid profile. */
    printf("TSan build: attribution not checked (TSan defers signals)\n");
    char args[1200];
    snprintf(args, sizeof args, "-top '%s'", prof);
    int st;
    free(tu_pprof(args, &st));
    ASSERT_EQ(st, 0);
    free(text);
    return;
#endif
    /* Each thread's function is there (one sample proves the thread was
     * registered; more would measure the machine), and all of worker-one's
     * samples carry its name. */
    const char *fns[4] = {"hot_ctor_thread", "hot_worker_one", "hot_early_exit", "hot_main_thread"};
    for (int i = 0; i < 4; i++)
        pl_require_fn(prof, "", fns[i], 1);
    double all = pl_samples_of(prof, "", "hot_worker_one");
    double named = pl_samples_of(prof, "-tagfocus=thread_name=^worker-one$", "hot_worker_one");
    if (named != all)
        TEST_FAIL("%.0f of hot_worker_one's %.0f samples are labelled worker-one", named, all);
    free(text);
}

/* The library exports the gperftools API and what it interposes, and
 * nothing of its own insides. */
static void test_exports(void)
{
    char *text = pl_run_ok("nm -D --defined-only %s | awk '$2 ~ /^[TDBRVW]$/ {print $3}' | sed "
                           "'s/@.*//' | sort | tr '\\n' ' '",
                           LIB);
    const char *want = "Profiler";
    ASSERT_CONTAINS(text, want);
    static const char *const allowed[] = {"ProfilerDisable",
                                          "ProfilerEnable",
                                          "ProfilerFlush",
                                          "ProfilerGetCurrentState",
                                          "ProfilerGetStackTrace",
                                          "ProfilerRegisterThread",
                                          "ProfilerStart",
                                          "ProfilerStartWithOptions",
                                          "ProfilerStop",
                                          "ProfilingIsEnabledForAllThreads",
                                          "_Exit",
                                          "_exit",
                                          "_fini",
                                          "_init",
                                          "fork",
                                          "initgroups",
                                          "pipe2",
                                          "prctl",
                                          "pthread_create",
                                          "pthread_exit",
                                          "pthread_setname_np",
                                          "setegid",
                                          "seteuid",
                                          "setgid",
                                          "setgroups",
                                          "setregid",
                                          "setresgid",
                                          "setresuid",
                                          "setreuid",
                                          "setuid",
                                          "sigaction",
                                          "signal",
                                          "syscall"};
    int n = 0;
    for (char *sym = strtok(text, " "); sym; sym = strtok(NULL, " ")) {
        int ok = 0;
        for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++)
            ok |= !strcmp(sym, allowed[i]);
        if (!ok)
            TEST_FAIL("libsnapprof-preload.so exports %s", sym);
        n++;
    }
    ASSERT_GE(n, 16);
    free(text);
}

/* The summary `snapprof record` reads (SNAPPROF_SUMMARY_DIR) names the
 * stripped library that holds the leaves without names (preload_unnamed.c),
 * with the preload linked in, so the builder runs under the sanitizers. */
static void test_linked_unnamed(void)
{
    pl_setup("pre-unnamed");
    char *text = pl_run_ok("cd %s && mkdir sum && SNAPPROF_OUTPUT=u.pb.gz SNAPPROF_FREQUENCY=1000 "
                           "SNAPPROF_SUMMARY_DIR=%s/sum %s && cat sum/*.summary",
                           pl_dir, pl_dir, STRIPPED_PROG_LINKED);
    ASSERT_CONTAINS(text, "samples=");
#if defined(__SANITIZE_THREAD__)
    /* TSan defers signals in a busy loop (see linked_threads): no race
     * report and a summary are what is checked. */
    printf("TSan build: the share is not checked\n");
    free(text);
    return;
#endif
    const char *line = strstr(text, "unnamed.0=");
    if (!line)
        TEST_FAIL("no unnamed.0 key in:\n%s", text);
    double share = atof(line + strlen("unnamed.0="));
    const char *end = line + strcspn(line, "\n");
    const char *lib = "/libpreload_stripped_lib.so";
    if (share < 0.5 || (size_t)(end - line) < strlen(lib) ||
        strncmp(end - strlen(lib), lib, strlen(lib)) != 0)
        TEST_FAIL("expected most of the samples in %s: %.*s", lib, (int)(end - line), line);
    free(text);
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"cpuprofile", test_cpuprofile},
        {"bad_env", test_bad_env},
        {"arm_env", test_arm_env},
        {"output_dir_missing", test_output_dir_missing},
        {"not_asked", test_not_asked},
        {"program_signal_handler", test_program_signal_handler},
        {"linked_threads", test_linked_threads},
        {"linked_unnamed", test_linked_unnamed},
        {"exports", test_exports},
        {"output_list", test_output_list},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
