/* CPython's perf trampolines end to end: jit_cpython_prog, a C stand-in for
 * `python -X perf` (trampolines of CPython's shapes in executable memory,
 * named in /tmp/perf-<pid>.map), profiled by `snapprof record` and read
 * back with `go tool pprof -traces`. Samples in the C function that two
 * trampolines call into must show the whole stack down to main, with the
 * trampolines named after their Python functions; --jit-layout and
 * SNAPPROF_JIT_LAYOUT must reach the profiled program. */
#include "test_jit_util.h"
#include "test_preload_util.h"

#include <unistd.h>

/* The stack of every sample in jit_cpython_burn, leaf first. */
static const char *const k_stack[] = {"jit_cpython_burn",
                                      "py::inner_hot:jit_cpython_prog.py",
                                      "jit_cpython_call",
                                      "jit_cpython_eval_outer",
                                      "py::outer:jit_cpython_prog.py",
                                      "jit_cpython_call",
                                      "jit_cpython_run",
                                      "main"};
#define DEPTH (sizeof k_stack / sizeof k_stack[0])

/* Ways to start the program, formats of the command and the program:
 * `snapprof record`, with or without an option, or the preload library
 * alone (which skips the command). */
#define RECORD "%s record -F 1000 -o p.pb.gz -- %s"
#define RECORD_FP "%s record -F 1000 -o p.pb.gz --jit-layout py::=fp -- %s"
#define PRELOAD_FP                                                                                 \
    "LD_PRELOAD=" SNAPPROF_PRELOAD_LIB " SNAPPROF_OUTPUT=p.pb.gz SNAPPROF_FREQUENCY=1000 "         \
    "SNAPPROF_JIT_LAYOUT=py::=fp %.0s%s"

typedef struct shares {
    double samples; /* all of them */
    double burn;    /* with jit_cpython_burn as the leaf */
    double whole;   /* of those, with the whole stack */
    double errors;  /* samples whose walk ended in [unwind error] */
} shares_t;

/* Prints the first trace of a -traces report that goes through name. */
static void print_trace_through(const char *report, const char *name)
{
    const char *at = strstr(report, name);
    if (at == NULL)
        return;
    const char *sep = "-----------+";
    const char *start = report, *p;
    while ((p = strstr(start, sep)) != NULL && p < at)
        start = p + strlen(sep);
    const char *end = strstr(at, sep);
    printf("a trace through %s:\n%.*s\n", name, (int)(end ? end - start : (long)strlen(start)),
           start);
}

/* Runs the program for 0.6 CPU-seconds in a new directory, started by
 * how (a printf format that takes the command, then the program; it writes
 * p.pb.gz), with trampolines of the shape given; checks that it removed
 * its perf map, and counts its samples. */
static shares_t measure(const char *how, const char *shape)
{
    pl_skip_if_sanitized();
    char *dir = tu_make_tmpdir("jit-cpython");
    char cmd[1024];
    snprintf(cmd, sizeof cmd, how, SNAPPROF_CLI, JIT_CPYTHON_PROG);
    int st;
    char *text = pl_run_ok("cd %s && %s 0.6 %s", dir, cmd, shape);
    const char *pid = strstr(text, "pid ");
    ASSERT_NOT_NULL(pid);
    char map[64];
    snprintf(map, sizeof map, "/tmp/perf-%d.map", atoi(pid + 4));
    ASSERT(!pl_exists(map));
    free(text);

    char args[1024];
    snprintf(args, sizeof args, "-traces -sample_index=samples '%s/p.pb.gz'", dir);
    char *report = tu_pprof(args, &st);
    if (st != 0)
        TEST_FAIL("go tool pprof %s failed:\n%s", args, report);
    print_trace_through(report, "py::inner_hot");
    tj_trace_t *traces;
    size_t n = tj_parse_traces(report, &traces);
    shares_t s = {0, 0, 0, 0};
    for (size_t i = 0; i < n; i++) {
        const tj_trace_t *t = &traces[i];
        s.samples += t->value;
        if (t->n > 0 && strcmp(t->names[t->n - 1], "[unwind error]") == 0)
            s.errors += t->value;
        if (t->n == 0 || strcmp(t->names[0], k_stack[0]) != 0)
            continue;
        s.burn += t->value;
        if (tj_trace_starts_with(t, k_stack, DEPTH))
            s.whole += t->value;
    }
    printf("%.0f samples, %.0f in jit_cpython_burn, %.0f of them whole (%.1f %%), %.0f end in "
           "[unwind error]\n",
           s.samples, s.burn, s.whole, s.burn > 0 ? 100 * s.whole / s.burn : 0, s.errors);
    tj_free_traces(traces, n);
    free(report);
    free(dir);
    /* The burn function holds nearly all the CPU time: 0.6 s at 1 kHz is
     * about 600 samples, of which a loaded machine may drop many. */
    ASSERT_GE(s.burn, 50);
    return s;
}

/* Whole stacks through the trampolines, with no setting. */
static void check_whole(shares_t s)
{
    ASSERT_GE(s.whole, 0.9 * s.burn);
}

/* CPython 3.12's trampolines: sub $8,%rsp, no frame record. */
static void test_record(void)
{
    check_whole(measure(RECORD, "sub"));
}

/* The same after an endbr64, as a CPython built for CET has them. */
static void test_record_endbr(void)
{
    check_whole(measure(RECORD, "endbr"));
}

/* The push %rbp form. */
static void test_record_push(void)
{
    check_whole(measure(RECORD, "push"));
}

/* --jit-layout reaches the program: py:: code walked by frame pointers (as
 * all perf map code was before the CPython layout) loses the stack below
 * the first trampoline; a bad value stops record before it starts. */
static void test_layout_option(void)
{
    shares_t s = measure(RECORD_FP, "sub");
    ASSERT_LE(s.whole, 0.1 * s.burn);
    ASSERT_GE(s.errors, 0.5 * s.burn);
    int st;
    char *text = pl_run(&st, "%s record --jit-layout py::=frames -- %s 0.01", SNAPPROF_CLI,
                        JIT_CPYTHON_PROG);
    ASSERT_EQ(st, 2);
    ASSERT_CONTAINS(text, "bad --jit-layout: 'frames' is not a JIT layout");
    ASSERT(strstr(text, "pid ") == NULL); /* nothing started */
    free(text);
}

/* SNAPPROF_JIT_LAYOUT, read by the preload library: the same; a bad value
 * is one warning, and the default layouts stay. */
static void test_layout_env(void)
{
    shares_t s = measure(PRELOAD_FP, "sub");
    ASSERT_LE(s.whole, 0.1 * s.burn);
    pl_skip_if_sanitized();
    char *dir = tu_make_tmpdir("jit-cpython-env");
    char *text = pl_run_ok("cd %s && LD_PRELOAD=%s SNAPPROF_OUTPUT=e.pb.gz "
                           "SNAPPROF_JIT_LAYOUT=py::=fixed:12 %s 0.01",
                           dir, SNAPPROF_PRELOAD_LIB, JIT_CPYTHON_PROG);
    pl_require_count(text, "snapprof: ", 1);
    ASSERT_CONTAINS(text, "snapprof: ignoring SNAPPROF_JIT_LAYOUT: 'fixed:12' is not a JIT layout");
    free(text);
    free(dir);
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"record", test_record},           {"record_endbr", test_record_endbr},
        {"record_push", test_record_push}, {"layout_option", test_layout_option},
        {"layout_env", test_layout_env},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
