/* `snapprof record` end to end: real programs (ours, python3, dash, gzip)
 * profiled with no recompilation, their profiles read back through
 * `go tool pprof`, and every kind of bad input refused before anything
 * starts. Attribution is judged on sample counts of fixed work, never on
 * wall time. */
#include "test_preload_util.h"

#include <dirent.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <unistd.h>

#define CLI SNAPPROF_CLI
#define PROG PRELOAD_PROG

/* In a fresh directory (tag), runs `snapprof record ARGS`, ARGS made from
 * fmt; returns its output and stores its exit status in *st. */
static char *record_v(const char *tag, int *st, const char *fmt, va_list ap)
{
    pl_setup(tag);
    char args[4096];
    vsnprintf(args, sizeof args, fmt, ap);
    return pl_run(st, "cd %s && %s record %s", pl_dir, CLI, args);
}

static char *record_in(const char *tag, int *st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static char *record_in(const char *tag, int *st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *text = record_v(tag, st, fmt, ap);
    va_end(ap);
    return text;
}

/* record_in() for a run that must succeed: the test fails unless `record`
 * exits 0 (its output is printed first when it does not). */
static char *record_ok(const char *tag, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static char *record_ok(const char *tag, const char *fmt, ...)
{
    int st;
    va_list ap;
    va_start(ap, fmt);
    char *text = record_v(tag, &st, fmt, ap);
    va_end(ap);
    if (st != 0)
        printf("%s", text);
    ASSERT_EQ(st, 0);
    return text;
}

static char *path_in(const char *name)
{
    return pl_path(pl_dir, name);
}

/* How many files in the test's directory are BASE.<pid>EXT, the name of
 * the output BASE EXT of a process other than the program itself. */
static int count_pid_files(const char *base, const char *ext)
{
    DIR *d = opendir(pl_dir);
    ASSERT_NOT_NULL(d);
    int n = 0;
    size_t b = strlen(base), e = strlen(ext);
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        const char *name = de->d_name;
        size_t len = strlen(name);
        if (len < b + 2 + e || strncmp(name, base, b) != 0 || name[b] != '.' ||
            strcmp(name + len - e, ext) != 0)
            continue;
        size_t digits = strspn(name + b + 1, "0123456789");
        n += b + 1 + digits == len - e && digits > 0;
    }
    closedir(d);
    return n;
}

/* The file of output BASE EXT of process pid. */
static char *pid_file(const char *base, int pid, const char *ext)
{
    static char buf[4][1024];
    static int i;
    char *p = buf[i++ % 4];
    snprintf(p, sizeof buf[0], "%s/%s.%d%s", pl_dir, base, pid, ext);
    return p;
}

/* ------------------------------------------------------------------------ */
/* Programs                                                                 */
/* ------------------------------------------------------------------------ */

/* The summary says what was lost, or that nothing was, in words a note
 * on the CPU time in no sample does not contradict ("nothing lost" beside
 * "15% of the threads' CPU time is not in any sample" read as one). */
static void expect_loss_words(const char *text)
{
    ASSERT(strstr(text, "nothing lost") == NULL);
    /* "...trigger perf; LOSSES; target pause p50 ...": LOSSES are the
     * words, or counts ("unwind_aborted 1"). */
    const char *end = strstr(text, "; target pause p50 ");
    ASSERT_NOT_NULL(end);
    const char *start = end;
    while (start > text && !(start[-2] == ';' && start[-1] == ' '))
        start--;
    ASSERT(start > text);
    const char *words = "no sample failed, was dropped or cut short";
    if (!((size_t)(end - start) == strlen(words) && strncmp(start, words, strlen(words)) == 0) &&
        strcspn(start, "0123456789") >= (size_t)(end - start))
        TEST_FAIL("no word on what was lost:\n%s", text);
}

/* Threads started from a constructor (before main), from main, and one
 * that exits early: each one's hot function is there, under its own
 * thread's name (the threads rename themselves after they start). */
static void test_threads(void)
{
    pl_skip_if_sanitized();
    pl_setup("rec-threads");
    const char *out = path_in("t.pb.gz");
    int st;
    char *text = pl_run(
        &st, "cd %s && PRELOAD_PROG_CTOR_MS=500 %s record -F 1000 -o t.pb.gz -- %s threads 500",
        pl_dir, CLI, PROG);
    ASSERT_EQ(st, 0);
    ASSERT_CONTAINS(text, "from 4 threads");
    /* The delivered rate against the requested one, and the trigger (the
     * default, auto: the perf event where this kernel allows it). */
    ASSERT_CONTAINS(text, tu_perf_event_allowed()
                              ? " Hz per CPU-second of 1000 Hz requested, trigger perf; "
                              : " Hz per CPU-second of 1000 Hz requested, trigger ");
    expect_loss_words(text);
    ASSERT_CONTAINS(text, "profile written to ");
    ASSERT_CONTAINS(text, "go tool pprof -http=: ");
    ASSERT_CONTAINS(text, out);
    const char *pairs[4][2] = {{"ctor-worker", "hot_ctor_thread"},
                               {"worker-one", "hot_worker_one"},
                               {"early-exit", "hot_early_exit"},
                               {"preload_prog", "hot_main_thread"}};
    for (int i = 0; i < 4; i++) {
        char focus[128];
        snprintf(focus, sizeof focus, "-tagfocus=thread_name=^%s$", pairs[i][0]);
        /* One sample proves the thread was found and named; more would
         * measure the machine (a loaded 2-core VM lets the sampler run
         * only a few dozen ticks in this run; see RUN_SERIAL). */
        pl_require_fn(out, focus, pairs[i][1], 1);
        /* and nobody else's */
        for (int j = 0; j < 4; j++)
            if (j != i && pl_samples_of(out, focus, pairs[j][1]) > 0)
                TEST_FAIL("%s's samples labelled %s", pairs[j][1], pairs[i][0]);
    }
    char *tags = tu_pprof_ok("-tags -sample_index=samples", out);
    printf("%s\n", tags);
    ASSERT_CONTAINS(tags, "thread_id: Total");
    pl_require_count(tags, "%): ", 8); /* 4 thread ids and 4 names */
    free(tags);
    free(text);
}

/* The Debian interpreter's evaluation loop, by name, from its .dynsym. */
static void test_python(void)
{
    pl_skip_if_sanitized();
    if (!pl_exists("/usr/bin/python3")) {
        printf("skipped: /usr/bin/python3 is not installed\n");
        exit(TEST_SKIP);
    }
    pl_setup("rec-python");
    const char *out = path_in("py.pb.gz");
    char *text = pl_run_ok("cd %s && %s record -F 1000 -o py.pb.gz -- /usr/bin/python3 -c "
                           "'x = 0\nfor i in range(4000000): x += i * i\nprint(x > 0)'",
                           pl_dir, CLI);
    ASSERT_CONTAINS(text, "True");
    ASSERT_CONTAINS(text, "python3 (pid ");
    pl_require_fn(out, "", "_PyEval_EvalFrameDefault", 20);
    /* On top of every function with a name: the rest of the binary is
     * stripped of its static functions, which pprof shows as
     * "[python3.11]". */
    tu_top_row_t *rows;
    char *raw;
    int n = tu_pprof_top_print(out, "-sample_index=samples", &rows, &raw);
    int i = 0;
    while (i < n && rows[i].name[0] == '[')
        i++;
    ASSERT_LT(i, n);
    ASSERT_STR_EQ(rows[i].name, "_PyEval_EvalFrameDefault");
    free(rows);
    free(raw);
    free(text);
}

/* A cgo program (tests/go_cgo_spin) whose goroutines spin in main.spinHot
 * while the runtime preempts them with SIGURG, snapprof's default signal,
 * many times a second. Go aborted on our handler without SA_ONSTACK; a
 * preemption signal lost behind one of ours left a goroutine that could
 * never be stopped (the program hung); the goroutines' stacks, not the
 * threads', made every sample a failure. Now: exit 0, the program's own
 * line, and main.spinHot on most samples. */
static void need_go(void)
{
    pl_skip_if_sanitized();
    if (GO_CGO_SPIN_PROG[0] == '\0' || !pl_exists(GO_CGO_SPIN_PROG)) {
        printf("skipped: no Go toolchain (golang-go) to build the cgo program with\n");
        exit(TEST_SKIP);
    }
}

/* ARGS: the program's own ("" or "12000 return"). */
static void go_cgo(int hz, const char *args_of_prog)
{
    need_go();
    int st;
    char *text =
        record_in("rec-go", &st, "-F %d -o g.pb.gz -- %s %s", hz, GO_CGO_SPIN_PROG, args_of_prog);
    printf("%s\n", text);
    ASSERT_EQ(st, 0);
    ASSERT_CONTAINS(text, "go_cgo_spin: 4 spinners done, cgo says 3, preempted: true\n");
    if (args_of_prog[0])
        ASSERT_CONTAINS(text, "its profile is the last checkpoint, written ");
    ASSERT(strstr(text, "fatal error") == NULL);
    char *top = tu_pprof_ok("-top -sample_index=samples", path_in("g.pb.gz"));
    printf("%s\n", top);
    const char *of = strstr(top, "Showing nodes accounting for ");
    double total = 0;
    ASSERT_NOT_NULL(of);
    of = strstr(of, "% of ");
    ASSERT_NOT_NULL(of);
    ASSERT_EQ(sscanf(of, "%% of %lf total", &total), 1);
    double hot = pl_samples_of(path_in("g.pb.gz"), "", "main.spinHot");
    printf("%d Hz: main.spinHot on %.0f of %.0f samples (%.1f%%)\n", hz, hot, total,
           total > 0 ? 100.0 * hot / total : 0.0);
    /* About 0.9 s of CPU: some 800 samples at 1 kHz with the perf trigger,
     * 200 with the timer (capped at the kernel's tick); the spinners hold
     * 97 % of them here. */
    ASSERT_GE(total, 100);
    ASSERT_GE(hot, total * 0.6);
    free(top);
    free(text);
}

static void test_go_cgo_1khz(void)
{
    go_cgo(1000, "");
}

static void test_go_cgo_4khz(void)
{
    go_cgo(4000, "");
}

/* The same program ending as most Go programs do, by returning from
 * main: Go's exit is a bare exit_group system call that runs no exit
 * handler, and such a run wrote no profile at all. A cgo program now gets
 * checkpoints (0.1 s after the start, then twice the gap each time, up to
 * 1 s), so the profile is the last one, main.spinHot on most samples, and
 * the summary says so. About 1.8 s of CPU: the first checkpoints come well
 * before the end, however busy the machine. */
static void test_go_cgo_return(void)
{
    go_cgo(1000, "12000 return");
}

/* With checkpoints turned off, the same run writes nothing and the
 * summary says why: what the test above would see without them. */
static void test_go_cgo_return_checkpoint_off(void)
{
    need_go();
    pl_setup("rec-go-off");
    int st;
    char *text =
        pl_run(&st, "cd %s && SNAPPROF_CHECKPOINT=0 %s record -o g.pb.gz -- %s 3000 return", pl_dir,
               CLI, GO_CGO_SPIN_PROG);
    printf("%s\n", text);
    ASSERT_EQ(st, 0);
    ASSERT_CONTAINS(text, "go_cgo_spin: 4 spinners done, cgo says 3, preempted: true\n");
    ASSERT_CONTAINS(text, "wrote no profile: it ended without running exit handlers");
    ASSERT(!pl_exists(path_in("g.pb.gz")));
    free(text);
}

/* A program whose hot loop is in a stripped library of the test's own:
 * the summary names the module, its share of the self time and says it is
 * not from a Debian package (dpkg -S finds no owner). Before, the frames
 * were a wall of [libpreload_stripped_lib.so] and the summary said
 * nothing. */
static void test_stripped_module(void)
{
    pl_skip_if_sanitized();
    char *text = record_ok("rec-stripped", "-F 1000 -o s.pb.gz -- %s", STRIPPED_PROG);
    char want[256];
    snprintf(want, sizeof want, "%% of the samples stop in %s, which has no symbols there",
             STRIPPED_LIB);
    const char *line = strstr(text, want);
    if (!line)
        TEST_FAIL("no line on the stripped module in:\n%s", text);
    /* The share: nearly all the work is the library's loop. On a loaded
     * machine much of the run's CPU can go unsampled (CI once: 48 %, at
     * 482 Hz of 1000): the hint is what this checks, its share only
     * roughly (the hint itself needs 5 %). */
    const char *p = line;
    while (p > text && p[-1] >= '0' && p[-1] <= '9')
        p--;
    int share = atoi(p);
    if (share < 25)
        TEST_FAIL("share %d%% of %s, expected most of the samples:\n%s", share, STRIPPED_LIB, text);
    ASSERT_CONTAINS(text, "(self time, as pprof -top shows it: [");
    if (system("dpkg --version >/dev/null 2>&1") == 0)
        ASSERT_CONTAINS(text, "it is not from a Debian package");
    else
        ASSERT_CONTAINS(text, "dpkg could not say which package owns it");
    free(text);
}

/* A shell that runs a dozen short programs, each with a few samples: the
 * summary lists the shell and the busiest few (not a line per process,
 * which was 80 lines for a pyenv shim), counts the rest, and names all the
 * files by a pattern. */
static void test_many_processes(void)
{
    pl_skip_if_sanitized();
    int st;
    char *text = record_in("rec-many", &st,
                           "-F 1000 -o m.pb.gz -- /bin/sh -c "
                           "'for i in 1 2 3 4 5 6 7 8 9 10 11; do %s burn hot_b 5; done; "
                           "%s burn hot_a 200'",
                           PROG, PROG);
    ASSERT_EQ(st, 0);
    ASSERT_CONTAINS(text, "13 processes");
    pl_require_count(text, "    -> ", 8); /* the detail lines: 8 processes */
    ASSERT_CONTAINS(text, "... and 5 more processes with ");
    ASSERT_CONTAINS(text, "  preload_prog (pid "); /* hot_a's: the busiest */
    char want[1200];
    snprintf(want, sizeof want, "go tool pprof -http=: %s '%s'.[0-9]*'.pb.gz'", path_in("m.pb.gz"),
             path_in("m"));
    ASSERT_CONTAINS(text, want);
    ASSERT_EQ(count_pid_files("m", ".pb.gz"), 12);
    free(text);
}

/* A shell shim that runs ten programs doing nothing (each exec'd by a
 * forked shell), five subshells (forked, no exec) and one busy program:
 * only the program itself and the busy one leave files, and the summary
 * has one line for all the rest. Before, every process wrote a file and
 * a line of its own: a python3 behind a shell shim made 41 files. 10 Hz,
 * so that none of the idle ones can take a sample (each uses far less
 * than 100 ms of CPU); the busy one burns until it has 5. */
static void test_no_sample_children(void)
{
    pl_skip_if_sanitized();
    int st;
    char *text = record_in("rec-nosample", &st,
                           "-F 10 -o m.pb.gz -- /bin/sh -c "
                           "'for i in 1 2 3 4 5 6 7 8 9 10; do /bin/true; done; "
                           "for i in 1 2 3 4 5; do (exit 0); done; %s burn hot_a 100 </dev/null'",
                           PROG);
    ASSERT_EQ(st, 0);
    /* The busy one, listed with its file. */
    const char *busy = strstr(text, "  preload_prog (pid ");
    ASSERT_NOT_NULL(busy);
    int pid = 0;
    ASSERT_EQ(sscanf(busy, "  preload_prog (pid %d)", &pid), 1);
    pl_require_fn(pid_file("m", pid, ".pb.gz"), "", "hot_a", 1);
    ASSERT_CONTAINS(text, pid_file("m", pid, ".pb.gz"));
    /* The program's own file, written also when the shell took no sample
     * (nearly always: forks cost it CPU time, more on a loaded machine),
     * and then a line says so. */
    ASSERT(pl_exists(path_in("m.pb.gz")));
    const char *sh = strstr(text, "  sh (pid ");
    ASSERT_NOT_NULL(sh);
    if (strstr(sh, "): 0 samples from ") == strchr(sh, ')'))
        ASSERT_CONTAINS(text, "no samples in this process itself; its file is written all the "
                              "same (the samples are in those of its child processes)");
    else
        ASSERT(strstr(text, "no samples in this process itself") == NULL);
    /* Exactly those two files. */
    char *list = pl_run(NULL, "ls -A %s", pl_dir);
    char want[64];
    snprintf(want, sizeof want, "m.%d.pb.gz\nm.pb.gz\n", pid);
    ASSERT_STR_EQ(list, want);
    free(list);
    /* One line for the others: the ten, and the subshells that were
     * profiled (a fork while the sampling thread held the loader's lock
     * goes unprofiled and says so). */
    pl_require_count(text, "with no samples", 1);
    ASSERT(strstr(text, "true (pid") == NULL);
    int total = 0, quiet = 0;
    const char *t = strstr(text, " processes, ");
    ASSERT_NOT_NULL(t);
    while (t > text && t[-1] >= '0' && t[-1] <= '9')
        t--;
    total = atoi(t);
    const char *q = strstr(text, "snapprof:   ");
    for (; q; q = strstr(q + 1, "snapprof:   "))
        if (sscanf(q, "snapprof:   %d more processes with no samples, so no files (", &quiet) == 1)
            break;
    ASSERT_NOT_NULL(q);
    ASSERT_EQ(quiet, total - 2);
    ASSERT(quiet >= 11);
    ASSERT_CONTAINS(q, "true x10");
    ASSERT_CONTAINS(q, "sh x");
    ASSERT(strstr(text, "... and ") == NULL);
    free(text);
}

/* A dash pipeline of our program and gzip: every process of it is
 * profiled, the shell into p.pb.gz and each child into p.<pid>.pb.gz
 * (gzip only when it took a sample). */
static void test_pipeline(void)
{
    pl_skip_if_sanitized();
    char *text = record_ok("rec-pipeline",
                           "-F 1000 -o p.pb.gz -- /bin/sh -c "
                           "'%s burn hot_a 300 | %s burn hot_b 300 | gzip -1 > out.gz'",
                           PROG, PROG);
    ASSERT_CONTAINS(text, "4 processes");
    ASSERT_CONTAINS(text, "  sh (pid ");
    ASSERT(pl_exists(path_in("p.pb.gz")));
    /* gzip of a few bytes may take no sample, and then writes no file. */
    if (strstr(text, "  gzip (pid ")) {
        ASSERT_EQ(count_pid_files("p", ".pb.gz"), 3);
    } else {
        ASSERT_CONTAINS(text, "1 more process with no samples, so no file (gzip x1)");
        ASSERT_EQ(count_pid_files("p", ".pb.gz"), 2);
    }
    /* Which child file holds which function: look at each. */
    int found_a = 0, found_b = 0;
    char *list = pl_run(NULL, "ls %s/p.[0-9]*.pb.gz", pl_dir);
    char *save = NULL;
    for (char *line = strtok_r(list, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char copy[1024];
        snprintf(copy, sizeof copy, "%s", line);
        found_a += pl_samples_of(copy, "", "hot_a") > 0;
        found_b += pl_samples_of(copy, "", "hot_b") > 0;
    }
    ASSERT_EQ(found_a, 1);
    ASSERT_EQ(found_b, 1);
    free(list);
    free(text);
}

/* A child that execs, a child that only forks, and the parent: three
 * profiles, each with its own hot function. */
static void test_fork_exec(void)
{
    pl_skip_if_sanitized();
    char *text = record_ok("rec-forkexec", "-F 1000 -o f.pb.gz -- %s forkexec 300", PROG);
    int execd, forked;
    const char *c = strstr(text, "children ");
    ASSERT_NOT_NULL(c);
    ASSERT_EQ(sscanf(c, "children %d %d", &execd, &forked), 2);
    char p1[1024], p2[1024];
    snprintf(p1, sizeof p1, "%s", pid_file("f", execd, ".pb.gz"));
    snprintf(p2, sizeof p2, "%s", pid_file("f", forked, ".pb.gz"));
    pl_require_fn(path_in("f.pb.gz"), "", "hot_fork_parent", 1);
    pl_require_fn(p1, "", "hot_exec", 1);
    pl_require_fn(p2, "", "hot_forked_child", 1);
    ASSERT_CONTAINS(text, "3 processes");
    free(text);
}

/* --fork stop: the children run unprofiled and write nothing. */
static void test_fork_stop(void)
{
    pl_skip_if_sanitized();
    char *text =
        record_ok("rec-forkstop", "-F 1000 --fork stop -o f.pb.gz -- %s forkexec 300", PROG);
    pl_require_fn(path_in("f.pb.gz"), "", "hot_fork_parent", 1);
    ASSERT_EQ(count_pid_files("f", ".pb.gz"), 0);
    ASSERT_EQ(pl_count_prefix(pl_dir, "f."), 1);
    ASSERT(strstr(text, "processes") == NULL);
    free(text);
}

/* fork() from a thread that is not main: the child's only thread runs on
 * that thread's stack, and is still sampled right. */
/* The one child's profile f.<pid>.pb.gz has samples in fn. */
static void require_child_fn(const char *fn)
{
    ASSERT_EQ(count_pid_files("f", ".pb.gz"), 1);
    char *child = pl_run(NULL, "ls %s/f.[0-9]*.pb.gz", pl_dir);
    child[strcspn(child, "\n")] = '\0';
    pl_require_fn(child, "", fn, 1);
    free(child);
}

static void test_fork_from_thread(void)
{
    pl_skip_if_sanitized();
    char *text = record_ok("rec-forkthread", "-F 1000 -o f.pb.gz -- %s fork_thread 300", PROG);
    require_child_fn("hot_thread_fork_child");
    ASSERT(strstr(text, "sp_out_of_range") == NULL);
    free(text);
}

/* Records PROG's mode (a thread ends with pthread_exit()) into out at
 * 1 kHz, stderr with stdout: `record` must exit 0 and the program's atexit
 * handlers must have run. */
static char *record_pthread_exit(const char *tag, const char *out, const char *mode)
{
    pl_skip_if_sanitized();
    char *text = record_ok(tag, "-F 1000 -o %s -- %s %s 200 2>&1", out, PROG, mode);
    printf("%s", text);
    ASSERT_CONTAINS(text, "atexit ran");
    return text;
}

/* The program's first thread calls pthread_exit() and its last thread ends
 * later: without a profiler the process then exits with status 0 and runs
 * its atexit handlers. The preload's own threads kept it alive for good,
 * and `record` waited with it (CPython's test_threading hung so under
 * bench/python_reliability.sh). It must end, and its profile be written. */
static void test_main_pthread_exit(void)
{
    char *text = record_pthread_exit("rec-mainexit", "m.pb.gz", "main_exit");
    ASSERT_CONTAINS(text, "exited with status 0");
    pl_require_fn(path_in("m.pb.gz"), "", "hot_after_main_exit", 1);
    free(text);
}

/* The same in a child forked from a thread: the child's only thread ends
 * with pthread_exit() (as a Python thread that forked and returns), and
 * its parent waits for it. */
static void test_fork_thread_pthread_exit(void)
{
    char *text = record_pthread_exit("rec-forkexit", "f.pb.gz", "fork_thread_exit");
    require_child_fn("hot_thread_fork_child");
    free(text);
}

/* fork() while another thread holds the dynamic loader's lock: glibc does
 * not reset that lock in the child, so a child profiler that enters the
 * loader (dl_iterate_phdr) would block on it for good, and the child's
 * _exit() would wait 10 s for a profile that never comes. The child must
 * end promptly, and either be profiled or say why it is not. */
static void test_fork_in_loader(void)
{
    pl_skip_if_sanitized();
    pl_setup("rec-forkloader");
    int st;
    /* 10 Hz: the parent's sampling thread seldom enters the loader (at its
     * ticks) in the moment the lock is held before the fork; when it does,
     * the fork waits for it and the child is made with the lock free. */
    char *text = pl_run(&st, "cd %s && %s record -F 10 -o f.pb.gz -- %s fork_in_loader 50 2>&1",
                        pl_dir, CLI, PROG);
    printf("%s", text);
    ASSERT_EQ(st, 0);
    unsigned long long ms;
    const char *c = strstr(text, "ended ");
    ASSERT_NOT_NULL(c);
    ASSERT_EQ(sscanf(c, "ended %llu ms", &ms), 1);
    /* 50 ms of work; 10 s when the _exit() path waits in vain. */
    ASSERT_LT(ms, 5000);
    /* Profiled (then its summary counts it; a file only with samples), or
     * a line says why not. */
    if (strstr(text, "2 processes") == NULL)
        ASSERT_CONTAINS(text, "the dynamic loader");
    else
        ASSERT(count_pid_files("f", ".pb.gz") == 1 || strstr(text, "with no samples") != NULL);
    free(text);
}

/* The program's exit status comes through, and so does death by signal. */
static void test_exit_status(void)
{
    pl_skip_if_sanitized();
    int st;
    char *text = record_in("rec-status", &st, "-o e.pb.gz -- %s exit 7", PROG);
    ASSERT_EQ(st, 7);
    ASSERT_CONTAINS(text, "exited with status 7");
    ASSERT(pl_exists(path_in("e.pb.gz")));
    free(text);
    text =
        pl_run(&st, "cd %s && %s record -o k.pb.gz -- /bin/sh -c 'kill -KILL $$'; echo \"st=$?\"",
               pl_dir, CLI);
    ASSERT_CONTAINS(text, "st=137");
    ASSERT_CONTAINS(text, "was killed by SIGKILL");
    ASSERT_CONTAINS(text, "wrote no profile");
    free(text);
}

/* Waits for the spinning program to write its pid file. */
static int wait_pidfile(const char *path)
{
    for (int i = 0; i < 3000; i++) {
        FILE *f = fopen(path, "r");
        if (f) {
            int pid = 0;
            int ok = fscanf(f, "%d", &pid) == 1;
            fclose(f);
            if (ok)
                return pid;
        }
        usleep(10000);
    }
    TEST_FAIL("%s never appeared", path);
}

/* SIGINT to a program that leaves it at the default: the profile is
 * written, then the program dies of SIGINT, and so does the command. */
static void test_sigint(void)
{
    pl_skip_if_sanitized();
    pl_setup("rec-sigint");
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "cd %s && (%s record -F 1000 -o s.pb.gz -- %s spin %s/pid > log 2>&1; echo st=$? >> "
             "log) & ",
             pl_dir, CLI, PROG, pl_dir);
    ASSERT_EQ(system(cmd), 0);
    int pid = wait_pidfile(path_in("pid"));
    ASSERT_EQ(kill(pid, SIGINT), 0);
    char *log = NULL;
    for (int i = 0; i < 3000; i++) {
        free(log);
        log = pl_run(NULL, "cat %s/log", pl_dir);
        if (strstr(log, "st="))
            break;
        usleep(10000);
    }
    ASSERT_CONTAINS(log, "st=130");
    ASSERT_CONTAINS(log, "was killed by SIGINT");
    ASSERT_CONTAINS(log, "profile written on SIGINT");
    pl_require_under(path_in("s.pb.gz"), "hot_spin", 1);
    free(log);
}

/* Runs spin under the command, sends signo to target ("cli" or "prog"),
 * and returns the log with "st=N" at its end. */
static char *spin_and_signal(const char *extra_arg, const char *target, int signo)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "cd %s && (%s record -F 1000 -o s.pb.gz -- %s spin %s/pid %s > log 2>&1 & echo $! > "
             "clipid; wait $!; echo st=$? >> log) > /dev/null 2>&1 &",
             pl_dir, CLI, PROG, pl_dir, extra_arg);
    ASSERT_EQ(system(cmd), 0);
    int pid = wait_pidfile(path_in("pid"));
    if (!strcmp(target, "cli"))
        pid = wait_pidfile(path_in("clipid"));
    ASSERT_EQ(kill(pid, signo), 0);
    char *log = NULL;
    for (int i = 0; i < 3000; i++) {
        free(log);
        log = pl_run(NULL, "cat %s/log", pl_dir);
        if (strstr(log, "st="))
            break;
        usleep(10000);
    }
    return log;
}

/* SIGTERM sent to the command goes on to the program. */
static void test_sigterm_forwarded(void)
{
    pl_skip_if_sanitized();
    pl_setup("rec-sigterm");
    char *log = spin_and_signal("", "cli", SIGTERM);
    ASSERT_CONTAINS(log, "st=143");
    ASSERT_CONTAINS(log, "was killed by SIGTERM");
    pl_require_under(path_in("s.pb.gz"), "hot_spin", 1);
    free(log);
}

/* A program with its own SIGTERM handler keeps it: the handler runs, the
 * program returns from main, the profile is written at exit. */
static void test_sigterm_program_handler(void)
{
    pl_skip_if_sanitized();
    pl_setup("rec-sigterm-handler");
    char *log = spin_and_signal("handler", "prog", SIGTERM);
    ASSERT_CONTAINS(log, "st=0");
    ASSERT_CONTAINS(log, "exited with status 0");
    pl_require_fn(path_in("s.pb.gz"), "", "hot_spin", 1);
    free(log);
}

/* The output directory is gone by the time the program exits: the profile
 * goes to /tmp/snapprof.<pid>.pb.gz and the summary says so. */
static void test_output_fallback(void)
{
    pl_skip_if_sanitized();
    pl_setup("rec-fallback");
    char sub[1024];
    snprintf(sub, sizeof sub, "%s/out", pl_dir);
    ASSERT_EQ(mkdir(sub, 0755), 0);
    char *text = pl_run_ok("cd %s && %s record -F 1000 -o out/x.pb.gz -- %s rmdir %s 300", pl_dir,
                           CLI, PROG, sub);
    ASSERT_CONTAINS(text, "could not write ");
    const char *p = strstr(text, "the profile is in ");
    ASSERT_NOT_NULL(p);
    char alt[1024];
    ASSERT_EQ(sscanf(p, "the profile is in %1023s", alt), 1);
    ASSERT(strstr(alt, "/snapprof.") != NULL);
    pl_require_fn(alt, "", "hot_a", 1);
    unlink(alt);
    free(text);
}

/* The test-only fault seam (common/fault.h) through SNAPPROF_TEST_FAULTS:
 * triggers, mappings and signals refused at random, the program's threads
 * are still profiled and its exit status is its own; a value that does not
 * parse costs a line on stderr and nothing else; a profile that can never
 * be written is said so, and the program still exits as it would. */
static void test_faults_env(void)
{
    pl_skip_if_sanitized();
    tu_need_test_seams();
    pl_setup("rec-faults");
    const char *out = path_in("f.pb.gz");
    int st;
    char *text =
        pl_run(&st,
               "cd %s && SNAPPROF_TEST_FAULTS='perf_event_open=2,timer_create=2,mmap=3,"
               "rt_tgsigqueueinfo=3;seed=5' %s record -F 1000 -o f.pb.gz -- %s threads 300",
               pl_dir, CLI, PROG);
    printf("%s\n", text);
    ASSERT_EQ(st, 0);
    ASSERT_CONTAINS(text, "profile written to ");
    pl_require_fn(out, "", "hot_worker_one", 1);
    pl_require_fn(out, "", "hot_main_thread", 1);
    free(text);
    unlink(out);

    text = pl_run(
        &st, "cd %s && SNAPPROF_TEST_FAULTS='open=2,bogus=1' %s record -o f.pb.gz -- %s exit 3",
        pl_dir, CLI, PROG);
    printf("%s\n", text);
    ASSERT_EQ(st, 3);
    ASSERT_CONTAINS(text, "snapprof: SNAPPROF_TEST_FAULTS ignored: unknown site \"bogus\"");
    ASSERT_CONTAINS(text, "profile written to ");
    free(text);
    unlink(out);

    text = pl_run(&st, "cd %s && SNAPPROF_TEST_FAULTS=write=1 %s record -o f.pb.gz -- %s exit 3",
                  pl_dir, CLI, PROG);
    printf("%s\n", text);
    ASSERT_EQ(st, 3);
    ASSERT_CONTAINS(text, "No space left on device");
    ASSERT(!pl_exists(out));
    free(text);
}

/* --duration: sampling stops, the program runs on to its end. */
static void test_duration(void)
{
    pl_skip_if_sanitized();
    char *text =
        record_ok("rec-duration", "-F 1000 --duration 0.2 -o d.pb.gz -- %s burn hot_a 1500", PROG);
    ASSERT_CONTAINS(text, "hot_a done");
    ASSERT_CONTAINS(text, "sampling stopped after --duration");
    pl_require_fn(path_in("d.pb.gz"), "", "hot_a", 1);
    free(text);
}

/* --trigger timer: the summary and the profile say that its samples come
 * at the kernel's tick. */
static void test_trigger_timer(void)
{
    pl_skip_if_sanitized();
    char *text =
        record_ok("rec-timer", "--trigger timer -F 1000 -o t.pb.gz -- %s burn hot_a 300", PROG);
    ASSERT_CONTAINS(text, " Hz per CPU-second of 1000 Hz requested, trigger timer; ");
    ASSERT_CONTAINS(text, "snapprof:   the timer trigger fires at the kernel's tick: ");
    free(text);
    pl_require_fn(path_in("t.pb.gz"), "", "hot_a", 1);
    char *comments = tu_pprof_ok("-comments", path_in("t.pb.gz"));
    ASSERT_CONTAINS(comments, "snapprof: the timer trigger fires at the kernel's tick: ");
    free(comments);
}

/* --wall reaches the program's profile: wall time is its sample type, and
 * a program that only sleeps is sampled all the same. */
static void test_wall(void)
{
    pl_skip_if_sanitized();
    char *text = record_ok("rec-wall", "--wall -F 200 -o w.pb.gz -- sleep 0.5");
    ASSERT_CONTAINS(text, " samples from 1 thread in ");
    /* The trigger that ran (the default signals blocked threads too). */
    ASSERT_CONTAINS(text, ", 200 Hz of wall time requested, trigger ");
    expect_loss_words(text);
    if (strstr(text, "is in no sample"))
        TEST_FAIL("a note on unplaced CPU time of a program that slept:\n%s", text);
    char *raw = tu_pprof_ok("-raw", path_in("w.pb.gz"));
    ASSERT_CONTAINS(raw, "PeriodType: wall nanoseconds");
    ASSERT_CONTAINS(raw, "wall/nanoseconds[dflt]");
    ASSERT_CONTAINS(raw, "thread_name:[sleep]");
    free(raw);
    free(text);
}

/* --wall --wall-blocked proc: sleepers are never woken early, and one
 * profile answers both questions: where the wall time went (their waits,
 * with callers, labelled blocked and by system call) and where the CPU
 * went. */
static void test_wall_proc(void)
{
    pl_skip_if_sanitized();
    char *text = record_ok("rec-wall-proc",
                           "--wall --wall-blocked proc --trigger auto -F 1000 -o "
                           "w.pb.gz -- %s sleepers 600",
                           PROG);
    /* With a perf event timing the running threads' captures nothing
     * signals a thread inside a system call; a CPU timer's signal (where
     * perf_event_open is refused) can fall in one. */
    if (strstr(text, "trigger perf"))
        ASSERT_CONTAINS(text, "early returns: 0\n");
    const char *prof = path_in("w.pb.gz");
    pl_require_under(prof, "sleeper_nanosleep", 1);
    pl_require_under(prof, "sleeper_read", 1);
    pl_require_under(prof, "sleeper_cond", 1);
    char *tags = tu_pprof_ok("-tags", prof);
    ASSERT_CONTAINS(tags, "blocked");
    ASSERT_CONTAINS(tags, "running");
    ASSERT_CONTAINS(tags, "clock_nanosleep");
    ASSERT_CONTAINS(tags, "futex");
    free(tags);
    /* Only the waits under -tagfocus=state=blocked; cpu is a value too. */
    char *top = tu_pprof_ok("-top -tagfocus=state=blocked -sample_index=cpu", prof);
    ASSERT_CONTAINS(top, "Type: cpu");
    free(top);
    top = tu_pprof_ok("-top -cum -tagfocus=state=blocked", prof);
    ASSERT_CONTAINS(top, "sleeper_read");
    ASSERT(strstr(top, "work_a_little") == NULL);
    free(top);
    free(text);
}

/* ------------------------------------------------------------------------ */
/* The program's fds                                                        */
/* ------------------------------------------------------------------------ */

/* The value of key in `snapprof stats FILE`, or -1. */
static long long stat_of(const char *profile, const char *key)
{
    int st;
    char *text = pl_run(&st, "%s stats --raw '%s'", CLI, profile);
    long long v = -1;
    char needle[128];
    snprintf(needle, sizeof needle, "%s ", key); /* "key value" lines */
    for (const char *at = strstr(text, needle); at; at = strstr(at + 1, needle))
        if (at == text || at[-1] == '\n') {
            v = atoll(at + strlen(needle));
            break;
        }
    free(text);
    return v;
}

/* A thread blocked in read() under a frame-pointer function whose
 * uninitialised locals hold stale frame records (wall_stale_prog.c): its
 * blocked samples' stacks (pc and sp from /proc, rbp guessed) must be
 * read, waiter, thread_main and on out, with none of the stale functions.
 * The guess took the first plausible record above read's frame: the
 * stack came out "read waiter stale3 stale2 stale1 stale0 thread_main". */
static void test_wall_stale_records(void)
{
    pl_skip_if_sanitized();
    char *text =
        record_ok("rec-wall-stale", "--wall --wall-blocked proc -F 100 -o s.pb.gz -- %s 1000",
                  WALL_STALE_PROG);
    ASSERT_CONTAINS(text, "wall_stale_prog: done");
    const char *prof = path_in("s.pb.gz");
    char *traces = tu_pprof_ok("-traces -tagfocus=syscall=read", prof);
    printf("%s\n", traces);
    ASSERT_CONTAINS(traces, "waiter");
    ASSERT_CONTAINS(traces, "thread_main");
    for (int i = 0; i <= 5; i++) {
        char name[16];
        snprintf(name, sizeof name, "stale%d", i);
        if (strstr(traces, name))
            TEST_FAIL("a blocked stack holds %s, a call made before the wait", name);
    }
    free(traces);
    free(text);
}

/* A program that closes every fd it did not open (closeall), or dup2s a
 * pipe over each (dup2: one pipe holds its bytes, the other is empty),
 * mid-profile, then runs on: the fds were ours (perf events; /proc files
 * in wall mode). Nothing of ours may read, ioctl or close the program's
 * files then: stop() used to block in read() on the empty pipe (the
 * program's alarm, exit 142, or the ctest timeout), or eat 8 of its
 * bytes. The program checks its pipe's bytes itself; the profile is
 * written, its threads were sampled, and the lost fds are counted. */
static void run_hostile_env(const char *env, const char *mode, const char *flags)
{
    pl_skip_if_sanitized();
    pl_setup("rec-fds");
    const char *out = path_in("f.pb.gz");
    char *text = pl_run_ok("cd %s && %s %s record %s -F 1000 -o f.pb.gz -- %s %s", pl_dir, env, CLI,
                           flags, FDS_PROG, mode);
    ASSERT_CONTAINS(text, "fds_prog: pipe data intact");
    ASSERT_CONTAINS(text, "profile written to ");
    pl_require_under(out, "burn_ns", 1);
    long long lost = stat_of(out, "fds_lost");
    printf("fds_lost %lld\n", lost);
    /* Each perf event's fd at least (three threads), where there were any. */
    if (strstr(text, "trigger perf"))
        ASSERT_GE(lost, 3);
    free(text);
}

static void run_hostile(const char *mode, const char *flags)
{
    run_hostile_env("", mode, flags);
}

static void test_fds_closeall(void)
{
    run_hostile("closeall", "");
}

/* closeall with the threads armed as they start (SNAPPROF_SHORT_THREADS):
 * their perf events are made without a page (SNAPPROF__ARM_NO_PAGE), which
 * the sampling thread maps at the first tick it finds them
 * (snapprof__check_armed()), so that the events outlive the program's
 * close of their fds, as the main thread's does. No thread is armed again:
 * three perf arms (main and the two busy threads), where without that
 * mapping the two busy threads' events died with their fds and, once 50
 * periods had passed with no capture, were made anew (5 perf arms, 745-791
 * Hz of 1000 against 915 in one run each). */
static void test_fds_closeall_short_threads(void)
{
    run_hostile_env("SNAPPROF_SHORT_THREADS=1", "closeall", "");
    long long perf = stat_of(path_in("f.pb.gz"), "threads_by_trigger.perf");
    printf("threads_by_trigger.perf %lld\n", perf);
    ASSERT_GE(perf, 0);
    ASSERT_LE(perf, 3);
}

static void test_fds_dup2(void)
{
    run_hostile("dup2", "");
}

static void test_fds_dup2_wall(void)
{
    run_hostile("dup2", "--wall --wall-blocked proc --trigger auto");
}

/* 2000 threads that sleep and burn a little, and main opens 900 files
 * under a limit of 1024 fds: without snapprof, 0 opens fail and the
 * highest fd is 902 or so. Under `record` the program's opens must do
 * exactly as well: the same count, no failure, the same highest fd (our
 * fds sit at the top of the range within 1/16 of it, and threads past
 * that budget get the CPU timer). It used to lose 96-140 opens in CPU mode
 * and 568-871 in wall mode. */
static void run_budget(int nthreads, const char *flags, int slack)
{
    pl_skip_if_sanitized();
    pl_setup("rec-fdbudget");
    int st;
    char *alone = pl_run(&st, "%s budget %d 900", FDS_PROG, nthreads);
    printf("alone: %s\n", alone);
    ASSERT_EQ(st, 0);
    const char *line = strstr(alone, "threads=");
    ASSERT_NOT_NULL(line);
    int threads, opened, failed, highest, others;
    ASSERT_EQ(sscanf(line, "threads=%d opened=%d failed=%d highest=%d others=%d", &threads, &opened,
                     &failed, &highest, &others),
              5);
    ASSERT_EQ(failed, 0);
    ASSERT_EQ(threads, nthreads);
    char *text = pl_run(&st, "cd %s && %s record %s -o b.pb.gz -- %s budget %d 900", pl_dir, CLI,
                        flags, FDS_PROG, nthreads);
    printf("%s\n", text);
    ASSERT_EQ(st, 0);
    line = strstr(text, "threads=");
    ASSERT_NOT_NULL(line);
    int r_threads, r_opened, r_failed, r_highest, r_others;
    ASSERT_EQ(sscanf(line, "threads=%d opened=%d failed=%d highest=%d others=%d", &r_threads,
                     &r_opened, &r_failed, &r_highest, &r_others),
              5);
    ASSERT_EQ(r_threads, threads);
    ASSERT_EQ(r_failed, 0);
    ASSERT_EQ(r_opened, opened);
    /* The very same numbers: nothing of ours keeps a low number (libunwind's
     * pipe is moved up: test_fds_same_numbers), but a moment of one
     * (common/fds.h) can be the program's last open: slack. */
    ASSERT_GE(r_highest, highest);
    ASSERT_LE(r_highest, highest + slack);
    ASSERT_CONTAINS(text, "profile written to ");
    const char *out = path_in("b.pb.gz");
    long long held = stat_of(out, "fds_held_max");
    long long perf = stat_of(out, "threads_by_trigger.perf");
    long long timer = stat_of(out, "threads_by_trigger.timer");
    long long handshake = stat_of(out, "threads_by_trigger.handshake");
    printf("%d threads: failed opens %d alone, %d under record; highest fd %d alone, %d under "
           "record; snapprof held at most %lld fds (the program saw %d not its own at the end); "
           "threads by trigger: perf %lld, timer %lld, handshake %lld\n",
           nthreads, failed, r_failed, highest, r_highest, held, r_others, perf, timer, handshake);
    ASSERT_LE(held, 1024 / 16);
    free(alone);
    free(text);
}

/* The fd the program's first open() gets, alone and under record (CPU and
 * wall mode): the same. libunwind's first call (the CFI unwinder's engine,
 * as the profile starts, before main) makes a pipe at the two lowest free
 * numbers and keeps it; it used to leave the program's first fd at 5
 * instead of 3, and every later one 2 higher. */
static void run_same_numbers(const char *flags)
{
    pl_skip_if_sanitized();
    pl_setup("rec-fdlow");
    int st;
    char *alone = pl_run_ok("%s lowest", FDS_PROG);
    int lowest = -1, r_lowest = -1;
    const char *line = strstr(alone, "lowest=");
    ASSERT_NOT_NULL(line);
    ASSERT_EQ(sscanf(line, "lowest=%d", &lowest), 1);
    /* Up to 3 runs: an fd we keep low shows in every run, but one of our
     * threads can hold a /proc file at the lowest free number for a moment
     * before moving it up (open() cannot choose the number), and a program
     * that opens at that moment gets the next one (wall mode: 1 run in
     * about 60 here). */
    for (int run = 0; run < 3 && r_lowest != lowest; run++) {
        char *text = pl_run(&st, "cd %s && %s record %s -o l.pb.gz -- %s lowest", pl_dir, CLI,
                            flags, FDS_PROG);
        printf("%s\n", text);
        ASSERT_EQ(st, 0);
        line = strstr(text, "lowest=");
        ASSERT_NOT_NULL(line);
        ASSERT_EQ(sscanf(line, "lowest=%d", &r_lowest), 1);
        printf("run %d: first fd %d alone, %d under record %s\n", run + 1, lowest, r_lowest, flags);
        free(text);
    }
    ASSERT_EQ(r_lowest, lowest);
    free(alone);
}

static void test_fds_same_numbers(void)
{
    run_same_numbers("");
}

static void test_fds_same_numbers_wall(void)
{
    run_same_numbers("--wall --wall-blocked proc --trigger auto");
}

/* CPU mode keeps fds only to arm a thread, 46 perf events here, mostly
 * before the program's opens: no slack. The files it opens for a moment (a
 * handshake thread's /proc stat at each tick, a module's ELF file) can
 * meet the program's last open(): with threads armed as they start, one
 * full run in about seven did (common/fd_private.h moves them out of the
 * program's table; off by default). */
static void test_fds_budget_cpu(void)
{
    run_budget(2000, "-F 100", 0);
}

/* Wall mode opens a /proc file, for a moment, for every thread that ran
 * since its last look and is not in the cache (16 files for 2000 threads):
 * hundreds a tick, so the program's last open may fall in one (+0 to +2
 * in the runs so far). */
static void test_fds_budget_wall(void)
{
    run_budget(2000, "--wall --wall-blocked proc --trigger auto -F 100", 6);
}

/* The brief's case: 5000 threads at a limit of 1024 fds, five times the
 * fds there are. */
static void test_fds_budget_5000_cpu(void)
{
    run_budget(5000, "-F 100", 0);
}

static void test_fds_budget_5000_wall(void)
{
    run_budget(5000, "--wall --wall-blocked proc --trigger auto -F 100", 6);
}

/* ------------------------------------------------------------------------ */
/* Formats                                                                  */
/* ------------------------------------------------------------------------ */

static char *slurp(const char *path)
{
    char *text = pl_run(NULL, "cat '%s'", path);
    return text;
}

/* Fails unless path holds folded stacks, "root;...;leaf count" lines, one
 * of which has fn as its leaf with at least one sample. */
static void require_folded(const char *path, const char *fn)
{
    ASSERT(pl_exists(path));
    char *text = slurp(path);
    int lines = 0, found = 0;
    char *save = NULL;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        const char *space = strrchr(line, ' ');
        if (space == NULL || space == line || atol(space + 1) < 1 ||
            strspn(space + 1, "0123456789") != strlen(space + 1))
            TEST_FAIL("%s: not a folded line: %s", path, line);
        lines++;
        size_t n = strlen(fn);
        if ((size_t)(space - line) > n && !strncmp(space - n, fn, n) && space[-(long)n - 1] == ';')
            found = 1;
    }
    if (!found)
        TEST_FAIL("%s: no stack ends in %s", path, fn);
    printf("%s: %d folded lines, %s among the leaves\n", path, lines, fn);
    free(text);
}

/* Fails unless path is trace-event JSON that tests/check_trace.py accepts
 * (the checker of the builder tests) and that names fn. */
static void require_trace(const char *path, const char *fn)
{
    int st;
    char *out = pl_run_ok("python3 '%s/check_trace.py' '%s'", SNAPPROF_TEST_SOURCE_DIR, path);
    free(out);
    out = pl_run(&st, "grep -c '\"name\":\"%s\"' '%s'", fn, path);
    ASSERT_EQ(st, 0);
    free(out);
}

/* -o NAME.folded (or .txt): folded stacks, and the summary says how to
 * view them. */
static void test_format_folded(void)
{
    pl_skip_if_sanitized();
    int st;
    char *text = record_ok("rec-folded", "-F 1000 -o f.folded -- %s burn hot_a 300", PROG);
    ASSERT_CONTAINS(text, "folded stacks written to ");
    ASSERT(strstr(text, "go tool pprof") == NULL);
    require_folded(path_in("f.folded"), "hot_a");
    free(text);
    text =
        pl_run(&st, "cd %s && %s record -F 1000 -o f.txt -- %s burn hot_b 300", pl_dir, CLI, PROG);
    ASSERT_EQ(st, 0);
    require_folded(path_in("f.txt"), "hot_b");
    free(text);
}

/* -o NAME.json: trace events a viewer reads. */
static void test_format_trace(void)
{
    pl_skip_if_sanitized();
    char *text = record_ok("rec-trace", "-F 1000 -o t.json -- %s burn hot_a 300", PROG);
    ASSERT_CONTAINS(text, "trace events written to ");
    require_trace(path_in("t.json"), "hot_a");
    free(text);
}

/* --format names the formats; one -o names the files after it. */
static void test_format_list(void)
{
    pl_skip_if_sanitized();
    int st;
    char *text = record_ok("rec-formats",
                           "-F 1000 --format pprof,folded --format=trace -o prof "
                           "-- %s burn hot_a 300",
                           PROG);
    pl_require_fn(path_in("prof.pb.gz"), "", "hot_a", 1);
    require_folded(path_in("prof.folded"), "hot_a");
    require_trace(path_in("prof.json"), "hot_a");
    ASSERT(!pl_exists(path_in("prof")));
    free(text);
    /* One format for one -o: whatever its name says. */
    text = pl_run(&st,
                  "cd %s && %s record -F 1000 --format folded -o plain.pb.gz -- %s burn hot_b 300",
                  pl_dir, CLI, PROG);
    ASSERT_EQ(st, 0);
    require_folded(path_in("plain.pb.gz"), "hot_b");
    free(text);
}

/* Several outputs from one run, and a child of fork() writes BASE.<pid>EXT
 * for each of them (a.<pid>.pb.gz, b.<pid>.folded, c.<pid>.json). */
static void test_several_outputs_fork(void)
{
    pl_skip_if_sanitized();
    char *text = record_ok("rec-several",
                           "-F 1000 -o a.pb.gz -o b.folded -o c.json -- %s "
                           "forkexec 300",
                           PROG);
    ASSERT_CONTAINS(text, "3 processes");
    int execd, forked;
    const char *c = strstr(text, "children ");
    ASSERT_NOT_NULL(c);
    ASSERT_EQ(sscanf(c, "children %d %d", &execd, &forked), 2);
    pl_require_fn(path_in("a.pb.gz"), "", "hot_fork_parent", 1);
    require_folded(path_in("b.folded"), "hot_fork_parent");
    require_trace(path_in("c.json"), "hot_fork_parent");
    char p[1024];
    snprintf(p, sizeof p, "%s", pid_file("a", forked, ".pb.gz"));
    pl_require_fn(p, "", "hot_forked_child", 1);
    snprintf(p, sizeof p, "%s", pid_file("b", forked, ".folded"));
    require_folded(p, "hot_forked_child");
    snprintf(p, sizeof p, "%s", pid_file("c", execd, ".json"));
    require_trace(p, "hot_exec");
    ASSERT_EQ(count_pid_files("a", ".pb.gz"), 2);
    ASSERT_EQ(count_pid_files("b", ".folded"), 2);
    ASSERT_EQ(count_pid_files("c", ".json"), 2);
    /* Only the pprof files open together in pprof. */
    ASSERT_CONTAINS(text, "all processes together: go tool pprof -http=: ");
    const char *together = strstr(text, "all processes together");
    ASSERT(strstr(together, ".folded") == NULL);
    free(text);
}

/* The output directory is gone by the time the program exits: every
 * output goes to its own file in /tmp, and the summary says where. */
static void test_output_fallback_formats(void)
{
    pl_skip_if_sanitized();
    pl_setup("rec-fallback-formats");
    char sub[1024];
    snprintf(sub, sizeof sub, "%s/out", pl_dir);
    ASSERT_EQ(mkdir(sub, 0755), 0);
    char *text =
        pl_run_ok("cd %s && %s record -F 1000 -o out/x.pb.gz -o out/x.folded -- %s rmdir %s "
                  "300",
                  pl_dir, CLI, PROG, sub);
    pl_require_count(text, "the profile is in ", 2);
    char alt[2][1024];
    const char *p = text;
    for (int i = 0; i < 2; i++) {
        p = strstr(p, "the profile is in ") + 18;
        ASSERT_EQ(sscanf(p, "%1023s", alt[i]), 1);
        ASSERT(strstr(alt[i], "/snapprof-") != NULL); /* snapprof-<i>.<pid><ext> */
    }
    ASSERT(strcmp(alt[0], alt[1]) != 0);
    pl_require_fn(alt[0], "", "hot_a", 1);
    require_folded(alt[1], "hot_a");
    unlink(alt[0]);
    unlink(alt[1]);
    free(text);
}

/* ------------------------------------------------------------------------ */
/* Bad input: one line, status 2 (127/126 for the program), nothing run    */
/* ------------------------------------------------------------------------ */

static void bad_input(const char *args, int want_status, const char *want_message)
{
    pl_setup("rec-bad");
    int st;
    char *text = pl_run(&st, "cd %s && %s %s", pl_dir, CLI, args);
    ASSERT_EQ(st, want_status);
    ASSERT_CONTAINS(text, want_message);
    pl_require_count(text, "\n", 1); /* one line */
    ASSERT(strncmp(text, "snapprof: ", 10) == 0);
    ASSERT(!pl_exists(path_in("MARKER"))); /* the program never started */
    free(text);
}

static void test_unknown_option(void)
{
    bad_input("record --bogus -- touch MARKER", 2, "unknown option '--bogus'");
}

static void test_unknown_command(void)
{
    bad_input("recrod -- touch MARKER", 2, "unknown command 'recrod'");
}

static void test_frequency_zero(void)
{
    bad_input("record -F 0 -- touch MARKER", 2, "bad frequency: 0 Hz is out of range (1-4000 Hz)");
}

static void test_frequency_too_high(void)
{
    bad_input("record --frequency=4001 -- touch MARKER", 2,
              "bad frequency: 4001 Hz is out of range (1-4000 Hz)");
}

static void test_frequency_not_number(void)
{
    bad_input("record -F fast -- touch MARKER", 2,
              "bad frequency: 'fast' is not a whole number of samples per second");
}

static void test_wall_blocked_bad(void)
{
    bad_input("record --wall --wall-blocked ptrace -- touch MARKER", 2,
              "bad --wall-blocked: 'ptrace' is not a way to sample blocked threads (signal or "
              "proc)");
}

static void test_output_dir_missing(void)
{
    bad_input("record -o /nonexistent-dir/x.pb.gz -- touch MARKER", 2,
              "cannot write the profile to /nonexistent-dir/x.pb.gz: No such file or directory");
}

static void test_output_dir_unwritable(void)
{
    /* /proc/self takes no new files, not even from root. */
    bad_input("record -o /proc/self/x.pb.gz -- touch MARKER", 2,
              "cannot write the profile to /proc/self/x.pb.gz: ");
}

static void test_output_is_directory(void)
{
    bad_input("record -o . -- touch MARKER", 2, "Is a directory");
}

static void test_missing_program(void)
{
    bad_input("record -- no-such-program-snapprof MARKER", 127,
              "no-such-program-snapprof: command not found");
    bad_input("record -- ./no-such-program MARKER", 127,
              "./no-such-program: No such file or directory");
}

static void test_not_executable(void)
{
    pl_setup("rec-noexec");
    char f[1024];
    snprintf(f, sizeof f, "%s/script", pl_dir);
    FILE *fp = fopen(f, "w");
    ASSERT_NOT_NULL(fp);
    fprintf(fp, "#!/bin/sh\ntouch MARKER\n");
    fclose(fp);
    chmod(f, 0644);
    char args[2048];
    snprintf(args, sizeof args, "record -- %s", f);
    bad_input(args, 126, "script: Permission denied");
}

static void test_no_command(void)
{
    bad_input("record -F 10", 2, "no command to run");
    bad_input("record -F 10 --", 2, "no command to run");
}

static void test_bad_signal(void)
{
    bad_input("record --signal KILL -- touch MARKER", 2,
              "bad signal: SIGKILL cannot be the sampling signal");
    bad_input("record --signal SIGFOO -- touch MARKER", 2, "bad signal: 'SIGFOO' is not a signal");
}

static void test_bad_duration(void)
{
    bad_input("record --duration 0 -- touch MARKER", 2, "bad duration: 0 seconds is out of range");
    bad_input("record --duration soon -- touch MARKER", 2,
              "bad duration: 'soon' is not a number of seconds");
}

static void test_bad_fork_mode(void)
{
    bad_input("record --fork sometimes -- touch MARKER", 2,
              "bad --fork: 'sometimes' is not a fork mode (follow or stop)");
}

static void test_missing_value(void)
{
    bad_input("record -o", 2, "-o needs a value");
}

static void test_bad_format(void)
{
    bad_input("record --format svg -- touch MARKER", 2,
              "bad --format: 'svg' is not a format (pprof, folded, trace or gperftools)");
    bad_input("record --format pprof, -- touch MARKER", 2, "bad --format: '' is not a format");
    bad_input("record -o a.pb.gz -o b.pb.gz -o c.json --format pprof,folded -- touch MARKER", 2,
              "3 outputs and 2 formats: give one format per output, or one output for several "
              "formats");
    bad_input("record -o a.pb.gz -o ./a.pb.gz -- touch MARKER", 2,
              "a.pb.gz would be written twice");
    bad_input("record -o a,b.pb.gz -- touch MARKER", 2,
              "output path a,b.pb.gz has a ',', which snapprof cannot pass on");
    bad_input("record -o 1 -o 2 -o 3 -o 4 -o 5 -- touch MARKER", 2, "more than 4 outputs");
    bad_input("record -o /nonexistent-dir/x.folded -o ok.pb.gz -- touch MARKER", 2,
              "cannot write the profile to /nonexistent-dir/x.folded: No such file or directory");
}

static void test_static_program(void)
{
    /* ldconfig is static-pie on Debian: no dynamic loader, no LD_PRELOAD. */
    char *readelf = pl_run(NULL, "readelf -l /sbin/ldconfig 2>&1 | grep -c INTERP");
    int has_interp = atoi(readelf);
    free(readelf);
    if (!pl_exists("/sbin/ldconfig") || has_interp) {
        printf("skipped: no statically linked /sbin/ldconfig here\n");
        exit(TEST_SKIP);
    }
    bad_input("record -- /sbin/ldconfig -p", 2,
              "/sbin/ldconfig is statically linked: the preload library cannot be loaded into it");
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"threads", test_threads},
        {"go_cgo_1khz", test_go_cgo_1khz},
        {"go_cgo_return", test_go_cgo_return},
        {"go_cgo_return_checkpoint_off", test_go_cgo_return_checkpoint_off},
        {"go_cgo_4khz", test_go_cgo_4khz},
        {"many_processes", test_many_processes},
        {"no_sample_children", test_no_sample_children},
        {"python", test_python},
        {"stripped_module", test_stripped_module},
        {"pipeline", test_pipeline},
        {"fork_exec", test_fork_exec},
        {"fork_stop", test_fork_stop},
        {"fork_from_thread", test_fork_from_thread},
        {"main_pthread_exit", test_main_pthread_exit},
        {"fork_thread_pthread_exit", test_fork_thread_pthread_exit},
        {"fork_in_loader", test_fork_in_loader},
        {"exit_status", test_exit_status},
        {"sigint", test_sigint},
        {"sigterm_forwarded", test_sigterm_forwarded},
        {"sigterm_program_handler", test_sigterm_program_handler},
        {"output_fallback", test_output_fallback},
        {"faults_env", test_faults_env},
        {"fds_closeall", test_fds_closeall},
        {"fds_closeall_short_threads", test_fds_closeall_short_threads},
        {"fds_dup2", test_fds_dup2},
        {"fds_dup2_wall", test_fds_dup2_wall},
        {"wall_stale_records", test_wall_stale_records},
        {"fds_same_numbers", test_fds_same_numbers},
        {"fds_same_numbers_wall", test_fds_same_numbers_wall},
        {"fds_budget_cpu", test_fds_budget_cpu},
        {"fds_budget_wall", test_fds_budget_wall},
        {"fds_budget_5000_cpu", test_fds_budget_5000_cpu},
        {"fds_budget_5000_wall", test_fds_budget_5000_wall},
        {"duration", test_duration},
        {"trigger_timer", test_trigger_timer},
        {"wall", test_wall},
        {"wall_proc", test_wall_proc},
        {"wall_blocked_bad", test_wall_blocked_bad},
        {"unknown_option", test_unknown_option},
        {"unknown_command", test_unknown_command},
        {"frequency_zero", test_frequency_zero},
        {"frequency_too_high", test_frequency_too_high},
        {"frequency_not_number", test_frequency_not_number},
        {"output_dir_missing", test_output_dir_missing},
        {"output_dir_unwritable", test_output_dir_unwritable},
        {"output_is_directory", test_output_is_directory},
        {"missing_program", test_missing_program},
        {"not_executable", test_not_executable},
        {"no_command", test_no_command},
        {"bad_signal", test_bad_signal},
        {"bad_duration", test_bad_duration},
        {"bad_fork_mode", test_bad_fork_mode},
        {"missing_value", test_missing_value},
        {"static_program", test_static_program},
        {"format_folded", test_format_folded},
        {"format_trace", test_format_trace},
        {"format_list", test_format_list},
        {"several_outputs_fork", test_several_outputs_fork},
        {"output_fallback_formats", test_output_fallback_formats},
        {"bad_format", test_bad_format},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
