/* `snapprof record --lines` and SNAPPROF_LINES: where source lines come
 * from. With "own" and with the default ("program") the program's own
 * DWARF still gives its lines, while libc's separate debug file
 * (libc6-dbg, which the set-up installs) gives names but no lines; with
 * "all" libc frames have lines too where libc6-dbg is installed. Bad values are refused by record
 * and ignored, with a warning, by the preload. */
#include "test.h"
#include "test_preload_util.h"
#include "test_util.h"

#include <stdlib.h>
#include <string.h>

#define CLI SNAPPROF_CLI
#define PROG PRELOAD_PROG

/* `go tool pprof -traces -lines` of the run's profile with --lines lines
 * (NULL: no option). */
static char *traces_with(const char *lines, const char *name)
{
    char opt[64] = "";
    if (lines)
        snprintf(opt, sizeof opt, "--lines %s", lines);
    char *text = pl_run_ok("cd %s && %s record -q -F 1000 %s -o %s -- %s burn hot_a 300 </dev/null",
                           pl_dir, CLI, opt, name, PROG);
    free(text);
    char *out = pl_path(pl_dir, name);
    return tu_pprof_ok("-traces -lines", out);
}

/* Would catch --lines own or the default dropping the program's own
 * lines, or still reading libc's debug file's DWARF (its lines show: the
 * first profile's write costs ~60 ms more), or --lines all not reading
 * it. */
static void test_own(void)
{
    pl_skip_if_sanitized();
    pl_setup("rec-lines");
    char *all = traces_with("all", "all.pb.gz");
    char *own = traces_with("own", "own.pb.gz");
    char *dflt = traces_with(NULL, "default.pb.gz");
    /* The program's frames keep their file:line in every setting. */
    ASSERT_CONTAINS(all, "test_preload_prog.c:");
    ASSERT_CONTAINS(own, "test_preload_prog.c:");
    ASSERT_CONTAINS(dflt, "test_preload_prog.c:");
    /* libc's frames: named in all three (libc6-dbg's symbol table names
     * the static ones); lines only with "all". */
    ASSERT_CONTAINS(own, "__libc_start_call_main");
    ASSERT_CONTAINS(dflt, "__libc_start_call_main");
    ASSERT(strstr(own, "libc_start_call_main.h") == NULL);
    ASSERT(strstr(dflt, "libc_start_call_main.h") == NULL);
    /* The tests pass without debug packages too (the README says so). */
    if (strstr(all, "libc_start_call_main.h") == NULL)
        printf("no lines for libc with --lines all: libc6-dbg is not installed here\n");
    free(all);
    free(own);
    free(dflt);
}

/* SNAPPROF_LINES=own without record: the same; a bad value is ignored
 * with one warning and the default kept. */
static void test_env(void)
{
    pl_skip_if_sanitized();
    pl_setup("rec-lines-env");
    char *text = pl_run_ok("cd %s && LD_PRELOAD=%s SNAPPROF_LINES=own SNAPPROF_OUTPUT=e.pb.gz "
                           "%s burn hot_a 300 </dev/null 2>&1",
                           pl_dir, SNAPPROF_PRELOAD_LIB, PROG);
    free(text);
    char *own = tu_pprof_ok("-traces -lines", pl_path(pl_dir, "e.pb.gz"));
    ASSERT_CONTAINS(own, "test_preload_prog.c:");
    ASSERT(strstr(own, "libc_start_call_main.h") == NULL);
    free(own);
    text = pl_run_ok("cd %s && LD_PRELOAD=%s SNAPPROF_LINES=some SNAPPROF_OUTPUT=b.pb.gz "
                     "%s burn hot_a 100 </dev/null 2>&1",
                     pl_dir, SNAPPROF_PRELOAD_LIB, PROG);
    ASSERT_CONTAINS(text, "ignoring SNAPPROF_LINES: 'some' is not a lines setting (program, all or "
                          "own); using the default (program)");
    pl_require_count(text, "SNAPPROF_LINES", 1);
    ASSERT(pl_exists(pl_path(pl_dir, "b.pb.gz")));
    free(text);
}

/* record refuses a bad value before it starts anything. */
static void test_bad(void)
{
    pl_setup("rec-lines-bad");
    int st;
    char *text = pl_run(&st, "cd %s && %s record --lines some -- touch MARKER", pl_dir, CLI);
    ASSERT_EQ(st, 2);
    ASSERT_CONTAINS(text, "bad --lines: 'some' is not a lines setting (program, all or own)");
    ASSERT(!pl_exists(pl_path(pl_dir, "MARKER")));
    free(text);
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"own", test_own},
        {"env", test_env},
        {"bad", test_bad},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
