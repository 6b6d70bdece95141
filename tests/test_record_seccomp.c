/* `snapprof record` of a program started under a seccomp filter that kills
 * the process for perf_event_open and process_vm_readv, as systemd's
 * SystemCallFilter=@system-service does (tests/seccomp_exec.c installs it
 * and execs the program; common/seccomp.h). Before common/seccomp.c the
 * program died of SIGSYS at its profiler's first perf_event_open and no
 * profile was written. Now: the program exits as it would, its threads
 * are profiled with the CPU timer, and the summary says perf was refused. */
#include "test.h"
#include "test_preload_util.h"
#include "test_util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The program ran to its end under the filter: no SIGSYS, a profile with
 * both of its hot functions, and (when perf_refused and the machine lets
 * the perf trigger be made at all) the summary's line on the refused
 * perf trigger. Frees text, removes out. */
static void survived(int st, char *text, const char *out, int perf_refused)
{
    printf("%s\n", text);
    ASSERT_EQ(st, 0);
    ASSERT(strstr(text, "SIGSYS") == NULL);
    ASSERT_CONTAINS(text, "profile written to ");
    if (perf_refused && tu_perf_event_allowed())
        ASSERT_CONTAINS(text, "trigger perf was refused (Operation not permitted)");
    pl_require_fn(out, "", "hot_worker_one", 1);
    pl_require_fn(out, "", "hot_main_thread", 1);
    free(text);
    unlink(out);
}

/* `snapprof record -F 1000 -o s.pb.gz ARGS` (fmt) in a directory of its
 * own (tag), skipped in sanitizer builds as the other record tests: its
 * output, with the status in *st and the profile's path in *out. */
static char *record_in(const char *tag, int *st, const char **out, const char *fmt, ...)
{
    pl_skip_if_sanitized();
    pl_setup(tag);
    *out = pl_path(pl_dir, "s.pb.gz");
    char args[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    return pl_run(st, "cd %s && %s record -F 1000 -o s.pb.gz %s", pl_dir, SNAPPROF_CLI, args);
}

static void run(const char *action, const char *calls)
{
    const char *out;
    int st;
    /* Through a shell: record runs only programs the preload can load into,
     * and the launcher is static. */
    char *text = record_in("rec-seccomp", &st, &out, "-- /bin/sh -c 'exec %s %s %s %s threads 300'",
                           SECCOMP_EXEC, action, calls, PRELOAD_PROG);
    survived(st, text, out, strstr(calls, "perf_event_open") != NULL);
}

static void kill_both(void)
{
    run("kill", "perf_event_open,process_vm_readv");
}

static void kill_process_vm_readv(void)
{
    run("kill", "process_vm_readv");
}

static void trap_perf_event_open(void)
{
    run("trap", "perf_event_open");
}

/* A program that installs the killing filter itself once it runs (the
 * preload's prctl() and syscall() interposers check it on the installing
 * thread), then starts threads and allocates, sampled with --heap on the
 * allocating thread, which the filter holds (prog: "seccomp HOW"). Before
 * the interposers, both died of SIGSYS: the heap capture's
 * process_vm_readv on the main thread, or the next thread's arming. In
 * strict mode the thread that entered it died of SIGKILL in the sample
 * handler's next system call, and the sampling thread waited for its
 * capture for ever. */
static void installed(const char *how)
{
    const char *out;
    int st;
    char *text = record_in("rec-seccomp-installed", &st, &out,
                           "--heap-interval 4096 -- %s seccomp %s 300", PRELOAD_PROG, how);
    ASSERT_CONTAINS(text, "exited with status 0");
    if (!strcmp(how, "strict"))
        ASSERT_CONTAINS(text, "strict thread ran");
    survived(st, text, out, 1);
}

static void installed_prctl(void)
{
    installed("prctl");
}

static void installed_syscall(void)
{
    installed("syscall");
}

static void installed_strict(void)
{
    installed("strict");
}

static const test_case_t cases[] = {
    {"kill_both", kill_both},
    {"kill_process_vm_readv", kill_process_vm_readv},
    {"trap_perf_event_open", trap_perf_event_open},
    {"installed_prctl", installed_prctl},
    {"installed_syscall", installed_syscall},
    {"installed_strict", installed_strict},
};

int main(int argc, char **argv)
{
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
