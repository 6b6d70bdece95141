/* Symbolization end to end, read back by go tool pprof with the binary
 * gone: file:line and inline frames of a -O2 -g program (-lines, -traces),
 * and demangled C++ names. */
#include "test.h"
#include "test_util.h"

#include <unistd.h>

/* Copies prog into a fresh directory, runs it there (it profiles itself
 * into out.pb.gz until it has `samples` samples), deletes the copy, and
 * returns the profile's path (malloc'd). */
static char *run_copy(const char *prog, const char *name, int samples, char **dir_out)
{
    char *dir = tu_make_tmpdir(name);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s/%s' && cd '%s' && ./%s out.pb.gz %d && rm %s", prog, dir,
             name, dir, name, samples, name);
    int status;
    char *out = tu_run(cmd, &status);
    printf("%s", out);
    if (status != 0)
        TEST_FAIL("%s failed (%d):\n%s", name, status, out);
    free(out);
    char bin[4200];
    snprintf(bin, sizeof bin, "%s/%s", dir, name);
    ASSERT(access(bin, F_OK) != 0); /* pprof cannot read the binary */
    char *path = malloc(strlen(dir) + 16);
    ASSERT_NOT_NULL(path);
    sprintf(path, "%s/out.pb.gz", dir);
    *dir_out = dir;
    return path;
}

static void cleanup(char *path, char *dir)
{
    unlink(path);
    rmdir(dir);
    free(path);
    free(dir);
}

/* The line of the source file that contains marker. */
static int source_line(const char *file, const char *marker)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", SNAPPROF_TEST_SOURCE_DIR, file);
    FILE *f = fopen(path, "r");
    ASSERT_NOT_NULL(f);
    char line[1024];
    int n = 0, found = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        n++;
        if (strstr(line, marker) != NULL) {
            found = n;
            break;
        }
    }
    fclose(f);
    ASSERT_GT(found, 0);
    return found;
}

/* -lines -top names the inlined function with its own file:line and the
 * caller with the line of the call; -traces shows the inlined frame above
 * its caller in the same stack. */
static void test_inline_binary_moved(void)
{
    char *dir;
    char *path = run_copy(SYMBOLS_INLINE_PROG, "inline-prog", 400, &dir);
    int call = source_line("symbols_inline_prog.c", "INLINE_CALL_LINE");

    tu_top_row_t *rows;
    char *raw;
    int n = tu_pprof_top(path, "-lines -sample_index=samples", &rows, &raw);
    printf("$ go tool pprof -lines -top\n%s\n", raw);
    ASSERT(strstr(raw, "unrecognized profile format") == NULL);
    double inline_flat = 0;
    int caller_row = 0;
    char want_caller[128];
    snprintf(want_caller, sizeof want_caller, "symbols_inline_prog.c:%d", call);
    for (int i = 0; i < n; i++) {
        if (strncmp(rows[i].name, "inline_hot_step ", 16) == 0) {
            ASSERT_CONTAINS(rows[i].name, "symbols_inline_prog.c:");
            inline_flat += rows[i].flat_pct;
        }
        if (strncmp(rows[i].name, "inline_outer_loop ", 18) == 0 &&
            strstr(rows[i].name, want_caller) != NULL)
            caller_row = 1;
    }
    printf("inline_hot_step: %.1f%% flat over its lines; inline_outer_loop at :%d %s\n",
           inline_flat, call, caller_row ? "present" : "MISSING");
    ASSERT_GT(inline_flat, 50.0);
    ASSERT(caller_row);
    free(rows);
    free(raw);

    char *traces = tu_pprof_ok("-traces -sample_index=samples", path);
    /* In a trace the inlined frame is printed on the line above its
     * caller: "inline_hot_step" then "inline_outer_loop". */
    const char *hit = strstr(traces, "inline_hot_step");
    ASSERT_NOT_NULL(hit);
    const char *next = strchr(hit, '\n');
    ASSERT_NOT_NULL(next);
    const char *eol = strchr(next + 1, '\n');
    if (strstr(next + 1, "inline_outer_loop") == NULL ||
        (eol && strstr(next + 1, "inline_outer_loop") > eol))
        TEST_FAIL("the inline frame is not directly above its caller:\n%s", traces);
    /* Print the first trace that shows it, for the record. */
    const char *start = hit;
    while (start > traces && !(start[-1] == '-' && start[0] == '\n'))
        start--;
    const char *end = strstr(hit, "-----------");
    printf("$ go tool pprof -traces (one trace)\n%.*s\n", (int)(end ? end - start : 400), start);
    free(traces);
    cleanup(path, dir);
}

/* A C++ program's profile shows demangled names (with the mangled ones
 * kept as system names), also with the binary gone. */
static void test_cxx_demangled(void)
{
    char *dir;
    char *path = run_copy(SYMBOLS_CXX_PROG, "cxx-prog", 300, &dir);
    tu_top_row_t *rows;
    char *raw;
    int n = tu_pprof_top(path, "-sample_index=samples", &rows, &raw);
    printf("$ go tool pprof -top\n%s\n", raw);
#if defined(__SANITIZE_THREAD__)
    /* TSan runs our handler only when the thread next enters its runtime,
     * with the context of the moment the signal came: the stack has moved
     * on by then, so the callers of TSan's __tsan_read8 come out as
     * garbage (CI: 263 of 300 stacks ended in [unknown]) and which of the
     * program's functions show up is luck. Left to check here: the names
     * that do show are demangled. */
    printf("TSan build: which functions show is not checked (TSan defers signals)\n");
    int tsan = 1;
#else
    int tsan = 0;
    const char *want[3] = {"snapprof_demo::Spinner::spin(int)",
                           "snapprof_demo::Spinner::operator+=(int)",
                           "snapprof_demo::Accumulator<double>::add_many(double, int)"};
    for (int i = 0; i < 3; i++)
        if (tu_top_find(rows, n, want[i]) == NULL)
            TEST_FAIL("%s not shown:\n%s", want[i], raw);
#endif
    for (int i = 0; i < n; i++)
        if (strncmp(rows[i].name, "_ZN13snapprof_demo", 18) == 0)
            TEST_FAIL("mangled name shown: %s", rows[i].name);
    free(rows);
    free(raw);
    /* -raw lists the functions with their system names. */
    char *text = tu_pprof_ok("-raw", path);
    if (!tsan)
        ASSERT_CONTAINS(text, "snapprof_demo::Spinner::spin(int)");
    free(text);
    cleanup(path, dir);
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"inline_binary_moved", test_inline_binary_moved},
        {"cxx_demangled", test_cxx_demangled},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
