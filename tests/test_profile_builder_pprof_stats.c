/* profile_builder_pprof_stats: what a profile says about its own run. A
 * few short comment lines that pprof prints above every report, and every
 * counter in a hidden string-table entry that pprof accepts, never prints,
 * and drops when it merges. */
#include "common/stats_text.h"
#include "test.h"
#include "test_profile_builder_util.h"
#include "test_util.h"

#include <snapprof/snapprof.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static snapprof_frame_t jit(const char *name)
{
    snapprof_frame_t f = {pbt_jit_module.start + 0x100, &pbt_jit_module, SNAPPROF_FRAME_JIT, name};
    return f;
}

/* Writes a profile of a few samples in stats_hot and stats_cold with the
 * given counters; returns its path (free with pbt_remove). */
static char *write_profile(const char *name, snapprof_mode_t mode, const snapprof_stats_t *stats)
{
    char *path = pbt_tmp_path("pb-stats", name);
    snapprof_builder_t *b = pbt_create(path);
    snapprof_frame_t hot[] = {jit("stats_hot"), jit("stats_main")};
    snapprof_frame_t cold[] = {jit("stats_cold"), jit("stats_main")};
    for (int i = 0; i < 4; i++) {
        snapprof_sample_t s = {.frames = i < 3 ? hot : cold,
                               .frame_count = 2,
                               .cpu_ns = 10000000,
                               .wall_ns = 10000000,
                               .tid = 7,
                               .thread_name = "w"};
        pbt_sample(b, &s);
    }
    ASSERT_OK(pbt_complete(b, mode, stats));
    snapprof_builder_destroy(b);
    return path;
}

/* Fails unless the profile's comments are exactly want[0..n). */
static void expect_comments(const char *path, const char *const *want, int n)
{
    Snapprof__Pprof__Profile *p = pbt_load(path);
    pbt_check_valid(p);
    ASSERT_LE(p->n_comment, SNAPPROF__COMMENTS_MAX);
    ASSERT_EQ(p->n_comment, n);
    for (int i = 0; i < n; i++)
        ASSERT_STR_EQ(pbt_str(p, p->comment[i]), want[i]);
    snapprof__pprof__profile__free_unpacked(p, NULL);

    /* What a reader of `go tool pprof -top` sees above the table: these
     * lines and nothing else of ours. */
    char args[1200];
    snprintf(args, sizeof args, "-top '%s'", path);
    int status;
    char *top = tu_pprof(args, &status);
    printf("%s", top);
    ASSERT_EQ(status, 0);
    ASSERT(strstr(top, "snapprof-stats") == NULL);
    const char *table = strstr(top, "Type: ");
    ASSERT_NOT_NULL(table);
    int seen = 0;
    for (const char *line = top; line < table; line = strchr(line, '\n') + 1) {
        if (strncmp(line, "snapprof", 8) != 0)
            continue;
        size_t len = strcspn(line, "\n");
        if (seen >= n || strlen(want[seen]) != len || strncmp(line, want[seen], len) != 0)
            TEST_FAIL("unexpected line above the table: %.*s", (int)len, line);
        seen++;
    }
    ASSERT_EQ(seen, n);
    ASSERT_CONTAINS(top, "stats_hot");
    free(top);
}

/* Counters as a real run would leave them: 4012 samples standing for 41
 * s of the 41.75 s of CPU (98.2 Hz counted by weight) at 100 Hz, four perf
 * threads, nothing lost. */
static snapprof_stats_t clean_stats(void)
{
    snapprof_stats_t st;
    memset(&st, 0, sizeof st);
    st.ticks = 4100;
    st.samples = 4012;
    st.samples_signalled = 4012;
    st.cpu_ns_total = 41750000000ull;
    st.cpu_ns_sampled = 41000000000ull;
    st.threads_by_trigger[SNAPPROF_TRIGGER_PERF_EVENT] = 4;
    st.pause_p50_ns = 900;
    return st;
}

static void test_comments(void)
{
    /* Nothing lost: one line. */
    snapprof_stats_t st = clean_stats();
    char *path = write_profile("clean.pb.gz", SNAPPROF_MODE_CPU, &st);
    const char *clean[] = {
        "snapprof: 4012 samples, 98.2 Hz per CPU-second of 100 Hz requested, trigger perf"};
    expect_comments(path, clean, 1);
    pbt_remove(path);

    /* Losses, and threads on two triggers (the better one refused for one
     * of them: that stays in the hidden entry). */
    pbt_add_losses(&st);
    st.trigger_fallback_from = SNAPPROF_TRIGGER_PERF_EVENT;
    st.trigger_fallback_errno = EACCES;
    path = write_profile("lossy.pb.gz", SNAPPROF_MODE_CPU, &st);
    const char *lossy[] = {
        "snapprof: 4012 samples, 98.2 Hz per CPU-second of 100 Hz requested, triggers perf "
        "(3 threads), handshake (1)",
        "snapprof: failed 12 (thread_exited 2, timeout 10), samples_dropped 3, truncated_copy 1, "
        "truncated_depth 4, unwind_aborted 5"};
    expect_comments(path, lossy, 2);
    Snapprof__Pprof__Profile *p = pbt_load(path);
    pbt_expect_stats(p, &st);
    snapprof__pprof__profile__free_unpacked(p, NULL);
    pbt_remove(path);

    /* A quarter of the CPU time in no sample: the third line, and the
     * samples weigh a quarter less than the rate asked for. */
    st.cpu_ns_sampled = st.cpu_ns_total / 4 * 3;
    path = write_profile("unplaced.pb.gz", SNAPPROF_MODE_CPU, &st);
    const char *unplaced[] = {
        "snapprof: 4012 samples, 75.0 Hz per CPU-second of 100 Hz "
        "requested, triggers perf (3 threads), handshake (1)",
        lossy[1],
        "snapprof: 25% of the threads' CPU time is in no sample: time in the kernel and "
        "after each thread's last sample, 3 dropped captures (pprof: "
        "[kernel and unsampled])"};
    expect_comments(path, unplaced, 3);
    pbt_remove(path);

    /* The same quarter of a program that barely ran (40 ms of CPU, 10 ms
     * unplaced: under 10 periods of 10 ms) is not worth the line: `record
     * --wall -- sleep 0.5` said "100% of the threads' CPU time is not in
     * any sample" of its 1 ms. */
    st.cpu_ns_total = 40000000;
    st.cpu_ns_sampled = 30000000;
    path = write_profile("barely.pb.gz", SNAPPROF_MODE_CPU, &st);
    Snapprof__Pprof__Profile *barely = pbt_load(path);
    for (size_t i = 0; i < barely->n_comment; i++)
        if (strstr(pbt_str(barely, barely->comment[i]), "is in no sample"))
            TEST_FAIL("comment: %s", pbt_str(barely, barely->comment[i]));
    snapprof__pprof__profile__free_unpacked(barely, NULL);
    pbt_remove(path);

    /* Too little CPU time for a rate; one sample. */
    st = clean_stats();
    st.samples = 1;
    st.cpu_ns_total = 250000;
    st.cpu_ns_sampled = 250000;
    path = write_profile("short.pb.gz", SNAPPROF_MODE_CPU, &st);
    const char *brief[] = {
        "snapprof: 1 sample, only 0.2 ms of CPU time, 100 Hz requested, trigger perf"};
    expect_comments(path, brief, 1);
    pbt_remove(path);

    /* Wall time: no rate per CPU-second. */
    st = clean_stats();
    st.threads_by_trigger[SNAPPROF_TRIGGER_PERF_EVENT] = 0;
    st.threads_by_trigger[SNAPPROF_TRIGGER_HANDSHAKE] = 2;
    path = write_profile("wall.pb.gz", SNAPPROF_MODE_WALL, &st);
    const char *wall[] = {
        "snapprof: 4012 samples, 100 Hz of wall time requested, trigger handshake"};
    expect_comments(path, wall, 1);
    pbt_remove(path);

    /* The timer trigger: what its samples are, right below the rate it
     * held back. Not in wall mode, where the tick is the rate asked. */
    st = clean_stats();
    st.threads_by_trigger[SNAPPROF_TRIGGER_PERF_EVENT] = 0;
    st.threads_by_trigger[SNAPPROF_TRIGGER_CPU_TIMER] = 4;
    st.samples_dropped = 3;
    path = write_profile("timer.pb.gz", SNAPPROF_MODE_CPU, &st);
    const char *timer[] = {
        "snapprof: 4012 samples, 98.2 Hz per CPU-second of 100 Hz requested, trigger timer",
        "snapprof: the timer trigger fires at the kernel's tick: at most CONFIG_HZ samples per "
        "CPU-second, each weighing the periods since the last, and code in step with the tick "
        "can get more or fewer samples than its share (the perf trigger has neither limit)",
        "snapprof: samples_dropped 3"};
    expect_comments(path, timer, 3);
    pbt_remove(path);
    path = write_profile("timer_wall.pb.gz", SNAPPROF_MODE_WALL, &st);
    const char *timer_wall[] = {
        "snapprof: 4012 samples, 100 Hz of wall time requested, trigger timer",
        "snapprof: samples_dropped 3"};
    expect_comments(path, timer_wall, 2);
    pbt_remove(path);

    /* A run shorter than the perf trigger's period change: one drawn
     * period, 6.6 ms, stood for the whole run, so 45 samples in 0.3 s of
     * CPU. Counted one by one that read "150.0 Hz per CPU-second of 100 Hz
     * requested"; by their weight it is the rate asked for, less the CPU
     * time no sample placed. */
    st = clean_stats();
    st.samples = st.samples_signalled = 45;
    st.cpu_ns_total = 300000000u;
    st.cpu_ns_sampled = 45 * 6600000u;
    path = write_profile("short_run.pb.gz", SNAPPROF_MODE_CPU, &st);
    const char *short_run[] = {
        "snapprof: 45 samples, 99.0 Hz per CPU-second of 100 Hz requested, trigger perf"};
    expect_comments(path, short_run, 1);
    pbt_remove(path);
}

/* Gives every counter its own value, through the table's own keys. */
static int set_distinct(void *arg, const char *key, const char *value)
{
    (void)value;
    static int i;
    snapprof_stats_t *st = arg;
    char v[32];
    snprintf(v, sizeof v, "%d", 1000 + i++);
    int rc = snapprof__stats_set(st, key, v);
    if (rc == -EINVAL)
        rc = snapprof__stats_set(st, key, "timer"); /* trigger_fallback_from */
    ASSERT_OK(rc);
    return 0;
}

/* 1 when string index s is used by any message of p. */
static int referenced(const Snapprof__Pprof__Profile *p, int64_t s)
{
    for (size_t i = 0; i < p->n_sample_type; i++)
        if (p->sample_type[i]->type == s || p->sample_type[i]->unit == s)
            return 1;
    for (size_t i = 0; i < p->n_sample; i++)
        for (size_t k = 0; k < p->sample[i]->n_label; k++) {
            const Snapprof__Pprof__Label *l = p->sample[i]->label[k];
            if (l->key == s || l->str == s || l->num_unit == s)
                return 1;
        }
    for (size_t i = 0; i < p->n_mapping; i++)
        if (p->mapping[i]->filename == s || p->mapping[i]->build_id == s)
            return 1;
    for (size_t i = 0; i < p->n_function; i++)
        if (p->function[i]->name == s || p->function[i]->system_name == s ||
            p->function[i]->filename == s)
            return 1;
    for (size_t i = 0; i < p->n_comment; i++)
        if (p->comment[i] == s)
            return 1;
    return p->drop_frames == s || p->keep_frames == s || p->default_sample_type == s ||
           (p->period_type && (p->period_type->type == s || p->period_type->unit == s));
}

/* Every counter goes into one entry that nothing refers to; completing
 * again (a flush) replaces it rather than adding a second one. */
static void test_hidden_entry(void)
{
    snapprof_stats_t first, st;
    memset(&first, 0, sizeof first);
    first.samples = 1;
    memset(&st, 0, sizeof st);
    snapprof__stats_for_each(&st, set_distinct, &st);
    ASSERT_NE(st.trigger_fallback_from, 0);
    ASSERT_NE(st.failed[SNAPPROF_FAIL_COUNT - 1], 0);
    ASSERT_NE(st.threads_by_trigger[SNAPPROF_TRIGGER_COUNT - 1], 0);
    ASSERT_NE(st.samples_dropped, 0);

    char *path = pbt_tmp_path("pb-stats", "hidden.pb.gz");
    snapprof_builder_t *b = pbt_create(path);
    snapprof_frame_t f[] = {jit("stats_hot")};
    snapprof_sample_t s = {.frames = f, .frame_count = 1, .tid = 7, .thread_name = "w"};
    pbt_sample(b, &s);
    ASSERT_OK(pbt_complete(b, SNAPPROF_MODE_CPU, &first));
    ASSERT_OK(pbt_complete(b, SNAPPROF_MODE_CPU, &st));
    snapprof_builder_destroy(b);

    Snapprof__Pprof__Profile *p = pbt_load(path);
    pbt_check_valid(p);
    int entries = 0;
    for (size_t i = 0; i < p->n_string_table; i++)
        entries += snapprof__stats_is_entry(p->string_table[i]);
    ASSERT_EQ(entries, 1);
    int64_t last = (int64_t)p->n_string_table - 1;
    ASSERT(snapprof__stats_is_entry(p->string_table[last]));
    ASSERT(!referenced(p, last));
    pbt_expect_stats(p, &st);
    printf("%s\n", p->string_table[last]);
    snapprof__pprof__profile__free_unpacked(p, NULL);

    /* pprof reads the file and shows none of it. */
    int status;
    char args[1200];
    snprintf(args, sizeof args, "-raw '%s'", path);
    char *raw = tu_pprof(args, &status);
    ASSERT_EQ(status, 0);
    ASSERT(strstr(raw, "snapprof-stats") == NULL);
    free(raw);
    pbt_remove(path);

    /* Readers: a newer version is refused, unknown keys of this one are
     * kept, a missing key reads as 0, a bad value is an error. */
    snapprof_stats_t got;
    ASSERT_EQ(snapprof__stats_decode("snapprof-stats/2 samples=1", &got, NULL, NULL),
              -EPROTONOSUPPORT);
    ASSERT_OK(
        snapprof__stats_decode("snapprof-stats/1 samples=5 future_counter=9", &got, NULL, NULL));
    ASSERT_UEQ(got.samples, 5);
    ASSERT_UEQ(got.ticks, 0);
    ASSERT_EQ(snapprof__stats_decode("snapprof-stats/1 samples=x", &got, NULL, NULL), -EINVAL);
    ASSERT_EQ(snapprof__stats_decode("snapprof-stats/1 samples", &got, NULL, NULL), -EINVAL);
    ASSERT_EQ(snapprof__stats_decode("snapprof: samples=1", &got, NULL, NULL), -EINVAL);
}

/* `go tool pprof -proto a b` merges two of our profiles: the result opens,
 * holds both profiles' samples and both sets of short comments. */
static void test_merge(void)
{
    snapprof_stats_t st = clean_stats();
    char *a = write_profile("a.pb.gz", SNAPPROF_MODE_CPU, &st);
    st.samples = 17;
    st.failed_total = st.failed[SNAPPROF_FAIL_TIMEOUT] = 1;
    char *b = write_profile("b.pb.gz", SNAPPROF_MODE_CPU, &st);
    char merged[1200], args[4096];
    snprintf(merged, sizeof merged, "%s.merged.pb.gz", a);
    snprintf(args, sizeof args, "-proto '%s' '%s' > '%s'", a, b, merged);
    int status;
    char *out = tu_pprof(args, &status);
    printf("%s", out);
    ASSERT_EQ(status, 0);
    free(out);

    tu_top_row_t *rows;
    char *raw;
    int n = tu_pprof_top(merged, "-sample_index=samples", &rows, &raw);
    printf("%s", raw);
    const tu_top_row_t *hot = tu_top_find(rows, n, "stats_hot");
    ASSERT_NOT_NULL(hot);
    ASSERT(hot->flat == 6); /* 3 from each */
    ASSERT_CONTAINS(raw, "snapprof: 4012 samples, 98.2 Hz per CPU-second");
    ASSERT_CONTAINS(raw, "snapprof: 17 samples, ");
    ASSERT_CONTAINS(raw, "snapprof: failed 1 (timeout 1)");
    free(rows);
    free(raw);

    Snapprof__Pprof__Profile *p = pbt_load(merged);
    ASSERT_LE(p->n_comment, 2 * SNAPPROF__COMMENTS_MAX);
    snapprof__pprof__profile__free_unpacked(p, NULL);
    unlink(merged);
    pbt_remove(a);
    pbt_remove(b);
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"comments", test_comments},
        {"hidden_entry", test_hidden_entry},
        {"merge", test_merge},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
