/* `snapprof stats FILE`: the counters of a real profile read back equal
 * what snapprof_profiler_get_stats() said, gzip-compressed or not, in
 * --raw's "key value" lines and under the group headings after the
 * headline; the headline's words; files that are no snapprof profile are
 * refused with one clear line. */
#include "common/stats_text.h"
#include "test.h"
#include "test_preload_util.h"
#include "test_profile_builder_util.h"
#include "test_util.h"

#include <snapprof/snapprof.h>

#include <inttypes.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_dir[512];

static char *path_in(const char *name)
{
    return pl_path(g_dir, name);
}

/* Runs `snapprof stats ARGS` with stdout and stderr apart; returns stdout
 * (malloc'd), the status, and stderr in *err (malloc'd). */
static char *stats(int *status, char **err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static char *stats(int *status, char **err, const char *fmt, ...)
{
    char args[2048], cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "%s stats %s 2> '%s/stderr'", SNAPPROF_CLI, args, g_dir);
    printf("$ %s\n", cmd);
    char *out = tu_run(cmd, status);
    snprintf(cmd, sizeof cmd, "cat '%s/stderr'", g_dir);
    *err = tu_run(cmd, NULL);
    printf("%s%s[status %d]\n", out, *err, *status);
    return out;
}

__attribute__((noinline)) void stats_hot(uint64_t units)
{
    volatile uint64_t x = 1;
    for (uint64_t i = 0; i < units * 300000u; i++)
        x = x * 6364136223846793005u + 1442695040888963407u;
}

/* Profiles this thread until it has n samples; returns the counters the
 * profiler reports after stop, which the profile must carry. */
static snapprof_stats_t profile_self(const char *path, uint64_t n)
{
    snapprof_thread_t *me;
    snapprof_profiler_t *p = tu_profile_self(&me);
    snapprof_builder_t *b;
    ASSERT_OK(snapprof_pprof_builder_create(path, &b));
    ASSERT_OK(snapprof_profiler_add_builder(p, b));
    ASSERT_OK(snapprof_profiler_start(p));
    snapprof_stats_t st;
    do {
        stats_hot(10);
        ASSERT_OK(snapprof_profiler_get_stats(p, &st));
    } while (st.samples < n);
    ASSERT_OK(snapprof_profiler_stop(p));
    ASSERT_OK(snapprof_profiler_get_stats(p, &st));
    snapprof_profiler_destroy(p);
    snapprof_thread_release(me);
    return st;
}

/* Fails unless out is the profile's comments as "# " lines, then every
 * counter of want as "key value" lines, in the table's order. */
static void expect_output(const char *out, const char *profile, const snapprof_stats_t *want)
{
    static pbt_text_t t;
    t.len = 0;
    t.sep = " ";
    Snapprof__Pprof__Profile *p = pbt_load(profile);
    ASSERT_GE(p->n_comment, 1);
    for (size_t i = 0; i < p->n_comment; i++)
        t.len +=
            (size_t)snprintf(t.s + t.len, sizeof t.s - t.len, "# %s\n", pbt_str(p, p->comment[i]));
    snapprof__pprof__profile__free_unpacked(p, NULL);
    snapprof__stats_for_each(want, pbt_text_add_stat, &t);
    ASSERT_STR_EQ(out, t.s);
}

#define BUCKET_NOTE                                                                                \
    "           p50 and p99 (here and below) are histogram bucket upper bounds, at most 1/16 "     \
    "above the true value; max is exact\n"

/* Fails unless out, after its headline, has every counter of want (and
 * extra, "key value\n" lines of counters no field holds) once, as
 * "  key value" under the heading of the key's group, the groups in their
 * order, "other" last. */
static void expect_grouped(const char *out, const snapprof_stats_t *want, const char *extra)
{
    static pbt_text_t t;
    t.sep = " ";
    t.len = (size_t)snprintf(t.s, sizeof t.s, "\n");
    snapprof__stats_for_each(want, pbt_text_add_stat, &t);
    t.len += (size_t)snprintf(t.s + t.len, sizeof t.s - t.len, "%s", extra);
    /* The headline ends at the first blank line; no counter is above it. */
    const char *body = strstr(out, "\n\n");
    ASSERT_NOT_NULL(body);
    ASSERT(strstr(out, "\n  ticks ") > body);
    body += 2;
    int group = -1, lines = 0;
    char copy[8192];
    ASSERT_LT(strlen(body), sizeof copy);
    strcpy(copy, body);
    for (char *save = NULL, *line = strtok_r(copy, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        if (line[0] != ' ') {
            /* A heading: a group after the one before. */
            size_t n = strlen(line);
            ASSERT(n > 1 && line[n - 1] == ':');
            line[n - 1] = '\0';
            int g = group + 1;
            while (snapprof__stats_group(g) != NULL && strcmp(snapprof__stats_group(g), line))
                g++;
            if (snapprof__stats_group(g) == NULL)
                TEST_FAIL("heading '%s' is no group, or out of order", line);
            group = g;
            continue;
        }
        ASSERT(group >= 0);
        ASSERT(strncmp(line, "  ", 2) == 0);
        char key[SNAPPROF__STATS_KEY_MAX], value[SNAPPROF__STATS_VALUE_MAX];
        ASSERT_EQ(sscanf(line, " %63s %31s", key, value), 2);
        ASSERT_STR_EQ(snapprof__stats_group_of(key), snapprof__stats_group(group));
        char want_line[128];
        snprintf(want_line, sizeof want_line, "\n%s %s\n", key, value);
        char *at = strstr(t.s, want_line);
        if (at == NULL)
            TEST_FAIL("'%s' is not a counter or not its value, or twice", line);
        at[1] = '-'; /* seen */
        lines++;
    }
    for (char *p = t.s + 1; *p; p = strchr(p, '\n') + 1)
        if (*p != '-')
            TEST_FAIL("a counter missing: %.*s", (int)strcspn(p, "\n"), p);
    ASSERT_GT(lines, 40);
}

/* A real profile: every counter, as snapprof_profiler_get_stats() gave
 * it; the same from the uncompressed file. */
static void test_roundtrip(void)
{
    tu_skip_under_tsan("TSan defers the handshake's signal; samples arrive too slowly to wait for");
    const char *path = path_in("self.pb.gz");
    snapprof_stats_t st = profile_self(path, 30);
    ASSERT_GE(st.samples, 30);
    ASSERT_GT(st.cpu_ns_total, 0);
    int status;
    char *err;
    char *out = stats(&status, &err, "--raw '%s'", path);
    ASSERT_EQ(status, 0);
    ASSERT_STR_EQ(err, "");
    ASSERT_CONTAINS(out, "# snapprof: ");
    /* The default trigger (auto): the best one this machine allows ran on
     * the one thread, and the summary names it. */
    snapprof_trigger_t ran = SNAPPROF_TRIGGER_AUTO;
    for (int k = SNAPPROF_TRIGGER_PERF_EVENT; k < SNAPPROF_TRIGGER_COUNT; k++)
        if (st.threads_by_trigger[k] == 1)
            ran = (snapprof_trigger_t)k;
    ASSERT(ran != SNAPPROF_TRIGGER_AUTO);
    char want[96];
    snprintf(want, sizeof want, " Hz per CPU-second of 1000 Hz requested, trigger %s\n",
             snapprof_trigger_name(ran));
    ASSERT_CONTAINS(out, want);
    expect_output(out, path, &st);
    /* Read back through the table: the same struct. */
    snapprof_stats_t got;
    memset(&got, 0, sizeof got);
    got.size = sizeof got; /* not a counter: the table does not carry it */
    int lines = 0;
    for (char *save = NULL, *line = strtok_r(out, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        if (line[0] == '#')
            continue;
        char *space = strchr(line, ' ');
        ASSERT_NOT_NULL(space);
        *space = '\0';
        ASSERT_OK(snapprof__stats_set(&got, line, space + 1));
        lines++;
    }
    ASSERT_UEQ(got.samples, st.samples);
    ASSERT_UEQ(got.cpu_ns_total, st.cpu_ns_total);
    ASSERT_UEQ(got.threads_by_trigger[ran], 1);
    ASSERT_EQ(memcmp(&got, &st, sizeof st), 0);
    ASSERT_GT(lines, 40);
    free(out);
    free(err);

    char cmd[2048];
    snprintf(cmd, sizeof cmd, "gzip -dc '%s' > '%s'", path, path_in("plain.pb"));
    ASSERT_EQ(system(cmd), 0);
    out = stats(&status, &err, "--raw '%s'", path_in("plain.pb"));
    ASSERT_EQ(status, 0);
    expect_output(out, path, &st);
    free(out);
    free(err);

    /* Without --raw: the headline first, then every counter once, with
     * the value --raw gave, under its group's heading, the groups in
     * their order. */
    out = stats(&status, &err, "'%s'", path);
    ASSERT_EQ(status, 0);
    ASSERT_STR_EQ(err, "");
    char head[160];
    snprintf(head, sizeof head, "samples    %" PRIu64 ", ", st.samples);
    ASSERT(strncmp(out, head, strlen(head)) == 0);
    snprintf(head, sizeof head,
             " Hz per CPU-second of 1000 Hz requested\ntrigger    %s (1 thread)\n",
             snapprof_trigger_name(ran));
    ASSERT_CONTAINS(out, head);
    ASSERT_CONTAINS(out, "\nlost       ");
    ASSERT_CONTAINS(out, "\npause      target p50 ");
    ASSERT_CONTAINS(out, BUCKET_NOTE);
    expect_grouped(out, &st, "");
    free(out);
    free(err);
}

static void expect_refused(int want_status, const char *want_message, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void expect_refused(int want_status, const char *want_message, const char *fmt, ...)
{
    char args[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    int status;
    char *err;
    char *out = stats(&status, &err, "%s", args);
    ASSERT_EQ(status, want_status);
    ASSERT_STR_EQ(out, "");
    ASSERT(strncmp(err, "snapprof: ", 10) == 0);
    ASSERT_CONTAINS(err, want_message);
    ASSERT_EQ(strchr(err, '\n') - err + 1, (int64_t)strlen(err)); /* one line */
    free(out);
    free(err);
}

/* A profile whose only stats-looking string is a function name. */
static void profile_named(const char *path, const char *name)
{
    static const snapprof_module_t jit = {
        .start = 0x1000, .limit = 0x2000, .path = "[jit]", .build_id = "", .kind = 1};
    snapprof_frame_t f = {0x1100, &jit, SNAPPROF_FRAME_JIT, name};
    snapprof_sample_t s = {.frames = &f, .frame_count = 1, .tid = 1, .thread_name = "t"};
    snapprof_builder_t *b = pbt_create(path);
    pbt_sample(b, &s);
    ASSERT_OK(pbt_complete(b, SNAPPROF_MODE_CPU, NULL));
    snapprof_builder_destroy(b);
}

/* Every way a file can fail to be a snapprof profile: one line, status 2,
 * nothing on stdout. */
static void test_bad_file(void)
{
    expect_refused(2, "no profile to read", "%s", "");
    expect_refused(2, "stats takes one profile", "a b");
    expect_refused(2, "cannot read /nonexistent-snapprof.pb.gz: No such file or directory",
                   "/nonexistent-snapprof.pb.gz");
    expect_refused(2, ": Is a directory", "'%s'", g_dir);
    FILE *f = fopen(path_in("empty"), "w");
    ASSERT_NOT_NULL(f);
    fclose(f);
    expect_refused(2, "empty is not a pprof profile", "'%s'", path_in("empty"));
    expect_refused(2, "/etc/passwd is not a pprof profile", "/etc/passwd");

    const char *good = path_in("good.pb.gz");
    snapprof_stats_t st;
    memset(&st, 0, sizeof st);
    st.samples = 1;
    snapprof_builder_t *b = pbt_create(good);
    ASSERT_OK(pbt_complete(b, SNAPPROF_MODE_CPU, &st));
    snapprof_builder_destroy(b);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "head -c 60 '%s' > '%s'", good, path_in("cut.pb.gz"));
    ASSERT_EQ(system(cmd), 0);
    expect_refused(2, "the gzip stream is cut short", "'%s'", path_in("cut.pb.gz"));

    /* The entry is found by its tag: a newer version is refused, a bad one
     * too (here a function name plays the entry). */
    profile_named(path_in("v2.pb.gz"), "snapprof-stats/2 samples=1");
    expect_refused(2,
                   "in a format newer than this snapprof reads (snapprof-stats/2; this one "
                   "reads snapprof-stats/1)",
                   "'%s'", path_in("v2.pb.gz"));
    profile_named(path_in("bad.pb.gz"), "snapprof-stats/1 samples=many");
    expect_refused(2, "its snapprof counters are malformed", "'%s'", path_in("bad.pb.gz"));
}

/* pprof's merge keeps the comments and drops the counters: stats prints
 * the comments and says so, with status 1. */
static void test_merged(void)
{
    const char *a = path_in("a.pb.gz"), *b = path_in("b.pb.gz"), *m = path_in("m.pb.gz");
    snapprof_stats_t st = {.samples = 70,
                           .cpu_ns_total = 700000000,
                           .cpu_ns_sampled = 700000000,
                           .threads_by_trigger[SNAPPROF_TRIGGER_HANDSHAKE] = 1};
    profile_named(a, "merged_fn");
    snapprof_builder_t *bb = pbt_create(b);
    ASSERT_OK(pbt_complete(bb, SNAPPROF_MODE_CPU, &st));
    snapprof_builder_destroy(bb);
    char args[4096];
    snprintf(args, sizeof args, "-proto '%s' '%s' > '%s'", a, b, m);
    int status;
    char *out = tu_pprof(args, &status);
    ASSERT_EQ(status, 0);
    free(out);
    char *err;
    out = stats(&status, &err, "'%s'", m);
    ASSERT_EQ(status, 1);
    ASSERT_STR_EQ(out, "# snapprof: 70 samples, 100.0 Hz per CPU-second of 100 Hz requested, "
                       "trigger handshake\n");
    ASSERT_CONTAINS(err, "carries no snapprof counters");
    free(out);
    free(err);
}

/* The headline of counters with every kind of loss: each with its share,
 * the CPU time in no sample said to be no loss, the bucket bounds. */
static void test_headline(void)
{
    snapprof_stats_t st;
    memset(&st, 0, sizeof st);
    st.samples = 4012;
    pbt_add_losses(&st);
    st.events_lost = 2;
    st.cpu_ns_total = 41750000000ull;
    st.cpu_ns_sampled = st.cpu_ns_total / 4 * 3;
    st.pause_p50_ns = 900;
    st.pause_p99_ns = 20479;
    st.pause_max_ns = 23000;
    const char *path = path_in("headline.pb.gz");
    snapprof_builder_t *b = pbt_create(path);
    ASSERT_OK(pbt_complete(b, SNAPPROF_MODE_CPU, &st));
    snapprof_builder_destroy(b);
    int status;
    char *err;
    char *out = stats(&status, &err, "'%s'", path);
    ASSERT_EQ(status, 0);
    ASSERT_STR_EQ(err, "");
    const char *want =
        "samples    4012, 75.0 Hz per CPU-second of 100 Hz requested\n"
        "triggers   perf (3 threads), handshake (1)\n"
        "lost       failed 12 (0.3% of captures: thread_exited 2, timeout 10)\n"
        "           samples_dropped 3 (0.1% of captures: no slot free)\n"
        "cut short  truncated_copy 1 (<0.1% of samples), truncated_depth 4 (0.1%), "
        "unwind_aborted 5 (0.1%)\n"
        "also lost  events_lost 2\n"
        "unsampled  25% of the threads' CPU time is in no sample: time in the kernel and after "
        "each thread's last sample, 3 dropped captures (pprof: [kernel and unsampled])\n"
        "pause      target p50 0.9 us, p99 20.5 us, max 23.0 us\n" BUCKET_NOTE
        "\nsamples and CPU time:\n"
        "  ticks                          0\n";
    ASSERT(strncmp(out, want, strlen(want)) == 0);
    ASSERT_CONTAINS(out, "\nunwind:\n  truncated_depth                4\n");
    expect_grouped(out, &st, "");
    free(out);
    free(err);

    /* Nothing lost: said so, and the CPU time in no sample is not called a
     * loss. */
    memset(&st, 0, sizeof st);
    st.samples = 4100;
    st.cpu_ns_total = 41000000000ull;
    st.cpu_ns_sampled = 41000000000ull - 400000000ull;
    st.threads_by_trigger[SNAPPROF_TRIGGER_PERF_EVENT] = 1;
    b = pbt_create(path);
    ASSERT_OK(pbt_complete(b, SNAPPROF_MODE_CPU, &st));
    snapprof_builder_destroy(b);
    out = stats(&status, &err, "'%s'", path);
    ASSERT_EQ(status, 0);
    want = "samples    4100, 99.0 Hz per CPU-second of 100 Hz requested\n"
           "trigger    perf (1 thread)\n"
           "lost       none: no sample failed, was dropped or cut short\n"
           "unsampled  1.0% of the threads' CPU time is in no sample: time in the kernel and "
           "after each thread's last sample (pprof: [kernel and unsampled])\n"
           "pause      target p50 0.0 us, p99 0.0 us, max 0.0 us\n" BUCKET_NOTE "\n";
    ASSERT(strncmp(out, want, strlen(want)) == 0);
    free(out);
    free(err);
}

/* A counter of a newer snapprof (or one no group claims) is under
 * "other", last; --raw prints it as it did. */
static void test_other(void)
{
    const char *path = path_in("newer.pb.gz");
    profile_named(path, "snapprof-stats/1 samples=5 zz_newer_counter=7");
    int status;
    char *err;
    char *out = stats(&status, &err, "'%s'", path);
    ASSERT_EQ(status, 0);
    ASSERT(strncmp(out, "samples    5, no CPU time seen, 100 Hz requested\n", 49) == 0);
    size_t n = strlen(out);
    const char *tail = "\nother:\n  zz_newer_counter               7\n";
    ASSERT(n > strlen(tail) && strcmp(out + n - strlen(tail), tail) == 0);
    snapprof_stats_t st;
    memset(&st, 0, sizeof st);
    st.samples = 5;
    expect_grouped(out, &st, "zz_newer_counter 7\n");
    free(out);
    free(err);
    out = stats(&status, &err, "--raw '%s'", path);
    ASSERT_EQ(status, 0);
    ASSERT(strncmp(out, "samples ", 8) != 0); /* table order: ticks first */
    ASSERT_CONTAINS(out, "\nsamples 5\n");
    n = strlen(out);
    tail = "\nzz_newer_counter 7\n";
    ASSERT(n > strlen(tail) && strcmp(out + n - strlen(tail), tail) == 0);
    free(out);
    free(err);
}

static void make_dir(void)
{
    pl_make_dir(g_dir, sizeof g_dir, "cli-stats");
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"roundtrip", test_roundtrip}, {"bad_file", test_bad_file}, {"merged", test_merged},
        {"headline", test_headline},   {"other", test_other},
    };
    return test_run_case_setup(cases, sizeof cases / sizeof cases[0], make_dir, argc, argv);
}
