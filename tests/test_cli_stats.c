/* `snapprof stats FILE`: the counters of a real profile read back equal
 * what snapprof_profiler_get_stats() said, gzip-compressed or not; files
 * that are no snapprof profile are refused with one clear line. */
#include "profile_builder/stats_text.h"
#include "test.h"
#include "test_profile_builder_util.h"
#include "test_util.h"

#include <snapprof/snapprof.h>

#include <stdarg.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_dir[512];

static char *path_in(const char *name)
{
    static char buf[4][1024];
    static int i;
    char *p = buf[i++ % 4];
    snprintf(p, sizeof buf[0], "%s/%s", g_dir, name);
    return p;
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
    ASSERT_OK(snapprof_thread_register(&me));
    snapprof_params_t params;
    snapprof_params_init(&params);
    params.interval_ns = 1000000u;
    snapprof_profiler_t *p;
    snapprof_builder_t *b;
    ASSERT_OK(snapprof_profiler_create(&params, &me, 1, &p));
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

typedef struct text {
    char s[8192];
    size_t len;
} text_t;

static int add_line(void *arg, const char *key, const char *value)
{
    text_t *t = arg;
    int n = snprintf(t->s + t->len, sizeof t->s - t->len, "%s %s\n", key, value);
    ASSERT(n > 0 && (size_t)n < sizeof t->s - t->len);
    t->len += (size_t)n;
    return 0;
}

/* Fails unless out is the profile's comments as "# " lines, then every
 * counter of want as "key value" lines, in the table's order. */
static void expect_output(const char *out, const char *profile, const snapprof_stats_t *want)
{
    static text_t t;
    t.len = 0;
    Perftools__Profiles__Profile *p = pbt_load(profile);
    ASSERT_GE(p->n_comment, 1);
    for (size_t i = 0; i < p->n_comment; i++)
        t.len +=
            (size_t)snprintf(t.s + t.len, sizeof t.s - t.len, "# %s\n", pbt_str(p, p->comment[i]));
    perftools__profiles__profile__free_unpacked(p, NULL);
    snapprof__stats_for_each(want, add_line, &t);
    ASSERT_STR_EQ(out, t.s);
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
    char *out = stats(&status, &err, "'%s'", path);
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
    out = stats(&status, &err, "'%s'", path_in("plain.pb"));
    ASSERT_EQ(status, 0);
    expect_output(out, path, &st);
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
    snapprof_stats_t st;
    memset(&st, 0, sizeof st);
    st.samples = 70;
    st.cpu_ns_total = 700000000;
    st.cpu_ns_sampled = 700000000;
    st.threads_by_trigger[SNAPPROF_TRIGGER_HANDSHAKE] = 1;
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

static void make_dir(void)
{
    char *d = tu_make_tmpdir("cli-stats");
    snprintf(g_dir, sizeof g_dir, "%s", d);
    free(d);
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"roundtrip", test_roundtrip},
        {"bad_file", test_bad_file},
        {"merged", test_merged},
    };
    return test_run_case_setup(cases, sizeof cases / sizeof cases[0], make_dir, argc, argv);
}
