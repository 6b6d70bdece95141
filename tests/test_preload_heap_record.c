/* Heap profiles where users reach them (issue 27): `snapprof record --heap`
 * and SNAPPROF_HEAP=1 with the preload, end to end on a real program
 * (test_preload_heap_record_prog.c, which allocates known bytes from three
 * functions), the profiles read back through `go tool pprof`; and off by
 * default: without either, no heap library and no heap file. Sanitizers
 * own malloc, so every case skips there. */
#include "test_preload_util.h"

#include <dirent.h>
#include <math.h>
#include <unistd.h>

#define CLI SNAPPROF_CLI

static char g_dir[512];

static void setup(const char *tag)
{
    pl_skip_if_sanitized();
    pl_make_dir(g_dir, sizeof g_dir, tag);
}

static char *path_in(const char *name)
{
    return pl_path(g_dir, name);
}

/* How many files in the test's directory have "heap" in their name. */
static int count_heap_files(void)
{
    DIR *d = opendir(g_dir);
    ASSERT_NOT_NULL(d);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        n += strstr(de->d_name, "heap") != NULL;
    closedir(d);
    return n;
}

/* heap_big's share of heap_big + heap_small in index of profile (cum %:
 * the innermost frames are the allocation hooks'), both required there. */
static double big_share(const char *profile, const char *index)
{
    char extra[128];
    snprintf(extra, sizeof extra, "-sample_index=%s", index);
    double big = tu_top_cum_pct(profile, extra, "heap_big", 1);
    double small = tu_top_cum_pct(profile, extra, "heap_small", 0);
    if (big <= 0 || small <= 0)
        TEST_FAIL("%s (%s): heap_big %.2f%%, heap_small %.2f%%: want both", profile, index, big,
                  small);
    printf("%s: heap_big %.2f%% heap_small %.2f%% of %s: big's share %.3f (truth 0.75)\n", profile,
           big, small, index, big / (big + small));
    return big / (big + small);
}

/* The number in "snapprof: heap, N sampled allocations" of pprof's -top
 * header (the profile's comment). */
static long sampled_allocations(const char *profile)
{
    char args[1024];
    snprintf(args, sizeof args, "-top -nodecount=1 '%s'", profile);
    char *raw = tu_pprof(args, NULL);
    const char *p = strstr(raw, "snapprof: heap, ");
    long n = p ? strtol(p + strlen("snapprof: heap, "), NULL, 10) : -1;
    if (n < 0)
        TEST_FAIL("%s: no sample count in its comment:\n%s", profile, raw);
    free(raw);
    return n;
}

/* The estimates in the heap profile's comment ("an estimated A bytes
 * allocated, U in use"), and the truth the program printed ("truth:
 * heap_big B heap_small S heap_churn C bytes": B + S kept, C freed). */
static void estimates(const char *profile, double *alloc, double *inuse)
{
    char args[1024];
    snprintf(args, sizeof args, "-top -nodecount=1 '%s'", profile);
    char *raw = tu_pprof(args, NULL);
    const char *p = strstr(raw, "an estimated ");
    if (!p || sscanf(p, "an estimated %lf bytes allocated, %lf in use", alloc, inuse) != 2)
        TEST_FAIL("%s: no estimates in its comment:\n%s", profile, raw);
    free(raw);
}

static void truth(const char *out, double *alloc, double *inuse)
{
    const char *p = strstr(out, "truth: ");
    double big, small, churn;
    if (!p ||
        sscanf(p, "truth: heap_big %lf heap_small %lf heap_churn %lf", &big, &small, &churn) != 3)
        TEST_FAIL("no truth in the program's output");
    *alloc = big + small + churn;
    *inuse = big + small;
}

/* --heap --heap-interval 4096: the heap profile and the peak profile beside
 * the CPU profile, named by the scheme, listed by the summary; both name
 * the allocating functions with their shares of the bytes. */
static void test_shares(void)
{
    setup("heap-record");
    int st;
    char *out = pl_run_ok("cd %s && %s record --heap --heap-interval 4096 -o prof.pb.gz -- %s",
                          g_dir, CLI, HEAP_RECORD_PROG);
    ASSERT_NOT_NULL(strstr(out, "heap_lib=1"));
    const char *heap = path_in("prof.heap.pb.gz"), *peak = path_in("prof.heappeak.pb.gz");
    ASSERT(pl_exists(path_in("prof.pb.gz")));
    ASSERT(pl_exists(heap));
    ASSERT(pl_exists(peak));
    ASSERT_NOT_NULL(strstr(out, "heap profile written to "));
    ASSERT_NOT_NULL(strstr(out, heap));
    ASSERT_NOT_NULL(strstr(out, peak));
    ASSERT_NOT_NULL(strstr(out, "sampled allocations (one per 4096 bytes on average)"));
    double ta, tu;
    truth(out, &ta, &tu);
    free(out);

    /* 24 MiB at 4 KiB: ~6000 samples; well above what the shares need. */
    long n = sampled_allocations(heap);
    printf("%ld sampled allocations\n", n);
    ASSERT(n >= 2000);

    /* Shares only while most sampled allocations kept their stacks. On a
     * loaded machine the sampling thread can stay off its CPU for most of
     * this 0.1 s program (40-72 % of alloc_space without a slot in six
     * runs beside three other builds, with the old hooks as with the new),
     * and then the few stacks left are the first phase's, not a sample of
     * the run. The losses come in bursts, one phase more than another, so
     * the shares of what is left hold only while the losses are small: a
     * quiet run loses 17-23 % here; with 51 % lost (a CI run beside two
     * test suites) heap_big's share of the stacks left was 0.565 against
     * the truth's 0.75. Past 30 % lost, even a whole phase's losses keep
     * it within the bounds below only by chance. The totals below hold
     * either way. */
    double lost = tu_top_cum_pct(heap, "-sample_index=alloc_space", "[heap: no capture slot]", 0);
    int shares = lost <= 30;
    if (!shares)
        printf("share checks left out: %.0f%% of alloc_space went without a stack\n", lost);
    if (shares) {
        double a = big_share(heap, "alloc_space"), u = big_share(heap, "inuse_space");
        ASSERT(a >= 0.6 && a <= 0.9);
        ASSERT(u >= 0.6 && u <= 0.9);
    }
    /* Freed at once: in alloc_space, not in inuse_space. (Its share of
     * alloc_space is not checked: its loop is the tightest, and a burst of
     * samples finds no free capture slot more often there, counted in
     * heap_dropped_no_slot.) */
    double churn_alloc = tu_top_cum_pct(heap, "-sample_index=alloc_space", "heap_churn", 1);
    double churn_inuse = tu_top_cum_pct(heap, "-sample_index=inuse_space", "heap_churn", 1);
    /* Its loop is the tightest and runs last: on a loaded machine the
     * sampling thread can stay off its CPU for all of it, with every slot
     * still full of the others' samples (1 run in 8 beside the heap tests
     * at -j2). Then its samples are under "[heap: no capture slot]". */
    double no_slot =
        tu_top_cum_pct(heap, "-sample_index=alloc_space", "[heap: no capture slot]", 0);
    ASSERT(churn_alloc > 0 || no_slot > 0);
    /* The totals whatever the slots did (1000-1360 samples of ~5800 found
     * none here, and alloc_space came out 16 % short when they were
     * dropped). */
    double ea, eu;
    estimates(heap, &ea, &eu);
    printf("alloc_space %.0f of %.0f (%+.1f %%), inuse_space %.0f of %.0f (%+.1f %%), %.1f %% "
           "of alloc_space without a slot\n",
           ea, ta, 100 * (ea / ta - 1), eu, tu, 100 * (eu / tu - 1), no_slot);
    ASSERT(fabs(ea / ta - 1) <= 0.05);
    ASSERT(fabs(eu / tu - 1) <= 0.05);
    ASSERT(churn_inuse < 2);
    /* Our own threads' allocations (the helper writing the profiles) are
     * never the program's. */
    ASSERT(tu_top_cum_pct(heap, "-sample_index=alloc_space", "snapprof__preload_stop", 0) == 0);
    /* The peak: everything kept was in use at once. */
    if (shares) {
        double p = big_share(peak, "inuse_space");
        ASSERT(p >= 0.6 && p <= 0.9);
    }
    /* The leaves are the program's calls of the allocator, not the hook
     * that saw them: every stack's innermost frame used to be the
     * interposed malloc with its inlined hk_note_alloc, which held 100 %
     * flat. */
    char args[1024];
    snprintf(args, sizeof args, "-top -sample_index=alloc_space '%s'", heap);
    char *top = tu_pprof(args, &st);
    ASSERT_EQ(st, 0);
    printf("%s", top);
    ASSERT(strstr(top, "hk_note_alloc") == NULL);
    ASSERT(strstr(top, " malloc\n") == NULL);
    if (shares)
        ASSERT_NOT_NULL(strstr(top, " heap_big\n"));
    free(top);
}

/* Totals survive bursts (issue 27): a sampled allocation that finds every
 * capture slot taken (1000-1360 of ~5800 samples in heap_churn's tight
 * loop on a loaded machine) still counts, without its stack, so the scaled
 * totals stay within 5 % of the truth (they came out 16 % short). Made
 * certain here: SNAPPROF_TEST_FAULTS=heap_slot=3 gives about one sampled
 * allocation in three no slot. The profile names those "[heap: no capture
 * slot]"; the shares of the stacks that were taken stay as they were. */
static void test_totals_no_slot(void)
{
    setup("heap-noslot");
    tu_need_test_seams();
    char *out = pl_run_ok("cd %s && SNAPPROF_TEST_FAULTS='heap_slot=3;seed=5' %s record --heap "
                          "--heap-interval 4096 -o prof.pb.gz -- %s",
                          g_dir, CLI, HEAP_RECORD_PROG);
    ASSERT_NOT_NULL(strstr(out, "heap_lib=1"));
    /* The summary says how many went without a stack, and where. */
    ASSERT_NOT_NULL(strstr(out, "without a stack (no free capture slot: under \"[heap: no capture "
                                "slot]\")"));
    double ta, tu;
    truth(out, &ta, &tu);
    free(out);
    const char *heap = path_in("prof.heap.pb.gz");
    double ea, eu;
    estimates(heap, &ea, &eu);
    printf("alloc_space %.0f of %.0f (%+.1f %%), inuse_space %.0f of %.0f (%+.1f %%)\n", ea, ta,
           100 * (ea / ta - 1), eu, tu, 100 * (eu / tu - 1));
    ASSERT(fabs(ea / ta - 1) <= 0.05);
    ASSERT(fabs(eu / tu - 1) <= 0.05);
    /* Not vacuous: samples went without a slot, about a third of them (the
     * seam refuses one in three); more when the sampling thread falls
     * behind on a loaded machine (over 60 % once in a full -j2 suite), so
     * no upper bound: the totals above are what the test is about. */
    double noslot = tu_top_cum_pct(heap, "-sample_index=alloc_space", "[heap: no capture slot]", 1);
    ASSERT(noslot >= 20);
    /* The shares of the stacks taken: only while most were taken. When the
     * sampling thread falls behind for most of this 0.1 s program (a
     * loaded machine, and since the hooks got 4x cheaper the program
     * allocates faster: 52-94 % without a slot in 12 runs here), the slots
     * fill in the program's first phase and the few stacks left are that
     * phase's, not a sample of the run. */
    if (noslot > 70) {
        printf("share check left out: %.0f%% went without a stack\n", noslot);
        return;
    }
    double big = big_share(heap, "inuse_space");
    ASSERT(big >= 0.6 && big <= 0.9);
}

/* The library's own allocations are never the program's: the helper
 * thread's (here writing checkpoints every 50 ms) and those of the start
 * in the program's constructor. Sampled at 256 bytes, so that they would
 * show. */
static void test_own_threads(void)
{
    setup("heap-own");
    char *out = pl_run_ok("cd %s && SNAPPROF_CHECKPOINT=0.05 %s record --heap --heap-interval 256 "
                          "-o prof.pb.gz -- %s 1000",
                          g_dir, CLI, HEAP_RECORD_PROG);
    free(out);
    char args[1024];
    snprintf(args, sizeof args, "-traces -sample_index=alloc_space '%s'",
             path_in("prof.heap.pb.gz"));
    char *traces = tu_pprof(args, NULL);
    ASSERT_NOT_NULL(strstr(traces, "heap_big"));
    if (strstr(traces, "snapprof__") || strstr(traces, "snapprof-helper") ||
        strstr(traces, "helper_main"))
        TEST_FAIL("the library's own allocations are in the heap profile:\n%s", traces);
    free(traces);
}

/* Children (a shell's, exec'd) write BASE.heap.PID.pb.gz, by the scheme,
 * also when they took no CPU sample (1 Hz here): their allocations are
 * what the heap profile is for. The summary opens them together. */
static void test_children(void)
{
    setup("heap-children");
    char *out =
        pl_run_ok("cd %s && %s record --heap --heap-interval 4096 -F 1 -o prof.pb.gz -- sh -c "
                  "'%s 1000; %s 1000; true'",
                  g_dir, CLI, HEAP_RECORD_PROG, HEAP_RECORD_PROG);
    ASSERT_NOT_NULL(strstr(out, "their heap profiles together: go tool pprof"));
    free(out);
    DIR *d = opendir(g_dir);
    ASSERT_NOT_NULL(d);
    int heap = 0, peak = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        int pid;
        char rest[64];
        if (sscanf(de->d_name, "prof.heap.%d%63s", &pid, rest) == 2 && !strcmp(rest, ".pb.gz")) {
            heap++;
            ASSERT(tu_top_cum_pct(path_in(de->d_name), "-sample_index=alloc_space", "heap_big", 1) >
                   0);
        }
        if (sscanf(de->d_name, "prof.heappeak.%d%63s", &pid, rest) == 2 && !strcmp(rest, ".pb.gz"))
            peak++;
    }
    closedir(d);
    ASSERT_EQ(heap, 2);
    ASSERT_EQ(peak, 2);
    ASSERT(pl_exists(path_in("prof.heap.pb.gz"))); /* the shell's own, as asked */
}

/* Off by default: no --heap, no heap library loaded, no heap file, the
 * CPU profile as ever; SNAPPROF_HEAP in the caller's environment does not
 * leak through `record` without --heap. */
static void test_off(void)
{
    setup("heap-off");
    char *out = pl_run_ok("cd %s && SNAPPROF_HEAP=1 %s record -o prof.pb.gz -- %s", g_dir, CLI,
                          HEAP_RECORD_PROG);
    ASSERT_NOT_NULL(strstr(out, "heap_lib=0"));
    ASSERT_NULL(strstr(out, "heap profile"));
    ASSERT(pl_exists(path_in("prof.pb.gz")));
    ASSERT_EQ(count_heap_files(), 0);
    free(out);
}

/* The preload alone: SNAPPROF_HEAP=1 with a bad SNAPPROF_HEAP_INTERVAL
 * says so, samples at the default interval and names the heap files after
 * the first output whatever its format (.folded here). */
static void test_env_bad_interval(void)
{
    setup("heap-env");
    int st;
    char *out =
        pl_run(&st,
               "cd %s && LD_PRELOAD='%s %s' SNAPPROF_OUTPUT=%s SNAPPROF_HEAP=1 "
               "SNAPPROF_HEAP_INTERVAL=4k %s",
               g_dir, HEAP_LIB, SNAPPROF_PRELOAD_LIB, path_in("prof.folded"), HEAP_RECORD_PROG);
    printf("%s", out);
    ASSERT_EQ(st, 0);
    ASSERT_NOT_NULL(strstr(out, "heap_lib=1"));
    ASSERT_NOT_NULL(strstr(out, "ignoring SNAPPROF_HEAP_INTERVAL"));
    free(out);
    ASSERT(pl_exists(path_in("prof.folded")));
    ASSERT(pl_exists(path_in("prof.heap.pb.gz")));
    ASSERT(pl_exists(path_in("prof.heappeak.pb.gz")));
    /* 24 MiB at the default 512 KiB: some 48 samples. */
    long n = sampled_allocations(path_in("prof.heap.pb.gz"));
    ASSERT(n >= 10 && n <= 150);
}

/* A bad SNAPPROF_HEAP value is said and changes nothing; a bad
 * --heap-interval is refused before anything starts. */
static void test_bad_values(void)
{
    setup("heap-bad");
    int st;
    char *out =
        pl_run(&st, "cd %s && LD_PRELOAD='%s %s' SNAPPROF_OUTPUT=%s SNAPPROF_HEAP=yes %s", g_dir,
               HEAP_LIB, SNAPPROF_PRELOAD_LIB, path_in("prof.pb.gz"), HEAP_RECORD_PROG);
    printf("%s", out);
    ASSERT_EQ(st, 0);
    ASSERT_NOT_NULL(strstr(out, "ignoring SNAPPROF_HEAP=yes"));
    ASSERT(pl_exists(path_in("prof.pb.gz")));
    ASSERT_EQ(count_heap_files(), 0);
    free(out);
    const char *bad[] = {"0", "-1", "4k", "", "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        out = pl_run(&st, "cd %s && %s record --heap-interval '%s' -o x.pb.gz -- %s", g_dir, CLI,
                     bad[i], HEAP_RECORD_PROG);
        printf("%s", out);
        ASSERT_EQ(st, 2 /* SNAPPROF_EXIT_USAGE */);
        ASSERT_NOT_NULL(strstr(out, "bad --heap-interval"));
        ASSERT_NULL(strstr(out, "heap_lib="));
        free(out);
    }
    ASSERT_EQ(count_heap_files(), 0);
}

/* SNAPPROF_PRELOAD_LIB naming another build's preload (as bench_continuous
 * does to serve a plain program from a sanitizer build's record): --heap
 * loads the heap hooks of that build too (its preload_heap/), not those
 * beside record. Before, record took its own build's: an ASan record put
 * ASan-built hooks into a plain program, which died at start ("ASan runtime
 * does not come first"). The program prints its own maps. */
static void test_lib_of_preload_build(void)
{
    setup("heap-other-build");
    pl_run_ok("mkdir -p %s/other/preload %s/other/preload_heap && cp '%s' %s/other/preload/ && "
              "cp '%s' %s/other/preload_heap/",
              g_dir, g_dir, SNAPPROF_PRELOAD_LIB, g_dir, HEAP_LIB, g_dir);
    const char *pre = strrchr(SNAPPROF_PRELOAD_LIB, '/') + 1;
    const char *heap = strrchr(HEAP_LIB, '/') + 1;
    char *out = pl_run_ok("cd %s && SNAPPROF_PRELOAD_LIB=%s/other/preload/%s %s record -q --heap "
                          "-o x.pb.gz -- /bin/cat /proc/self/maps",
                          g_dir, g_dir, pre, CLI);
    char want[1200];
    snprintf(want, sizeof want, "%s/other/preload_heap/%s", g_dir, heap);
    if (!strstr(out, want))
        printf("%s\nwanted %s\n", out, want);
    ASSERT_NOT_NULL(strstr(out, want));
    ASSERT_NULL(strstr(out, HEAP_LIB));
    free(out);
}

/* The preload linked into the program (the case that runs under the
 * sanitizers), SNAPPROF_HEAP=1 without the hooks: heap sampling starts, a
 * bad interval is said, and the heap files are written, valid, with no
 * allocation in them (nothing reports one). */
static void test_linked_no_hooks(void)
{
    char *d = tu_make_tmpdir("heap-linked");
    snprintf(g_dir, sizeof g_dir, "%s", d);
    free(d);
    int st;
    char *out = pl_run_ok("cd %s && SNAPPROF_OUTPUT=l.pb.gz SNAPPROF_HEAP=1 "
                          "SNAPPROF_HEAP_INTERVAL=-5 %s threads 200",
                          g_dir, PRELOAD_PROG_LINKED);
    ASSERT_NOT_NULL(strstr(out, "ignoring SNAPPROF_HEAP_INTERVAL"));
    free(out);
    const char *files[] = {"l.pb.gz", "l.heap.pb.gz", "l.heappeak.pb.gz"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char args[1200];
        snprintf(args, sizeof args, "-top '%s'", path_in(files[i]));
        char *top = tu_pprof(args, &st);
        printf("%s\n", top);
        ASSERT_EQ(st, 0);
        if (i > 0)
            ASSERT_NOT_NULL(strstr(top, "one sample per 524288 bytes"));
        free(top);
    }
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"shares", test_shares},
        {"totals_no_slot", test_totals_no_slot},
        {"own_threads", test_own_threads},
        {"children", test_children},
        {"off", test_off},
        {"env_bad_interval", test_env_bad_interval},
        {"bad_values", test_bad_values},
        {"linked_no_hooks", test_linked_no_hooks},
        {"lib_of_preload_build", test_lib_of_preload_build},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
