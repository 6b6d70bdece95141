/* profile_builder_pprof_roundtrip: synthetic samples read back by the real go tool pprof. */
#include "test.h"
#include "test_profile_builder_util.h"
#include "test_util.h"

#include <snapprof/snapprof.h>

#include <stdlib.h>
#include <string.h>

static snapprof_frame_t jit(const char *name, uintptr_t offset)
{
    snapprof_frame_t f = {pbt_jit_module.start + offset, &pbt_jit_module, SNAPPROF_FRAME_JIT, name};
    return f;
}

static snapprof_frame_t marker(const char *name)
{
    snapprof_frame_t f = {0, NULL, SNAPPROF_FRAME_MARKER, name};
    return f;
}

/* 6 samples in hot_fn, 3 in warm_fn, 1 in cold_fn, all called from
 * main_loop. CPU time per sample is 1, 3 and 5 ms so the cpu view (30/45/25)
 * differs from the count and wall views (60/30/10). */
static void feed(snapprof_builder_t *b)
{
    snapprof_frame_t hot[] = {jit("hot_fn", 0x100), jit("main_loop", 0x900)};
    snapprof_frame_t warm[] = {jit("warm_fn", 0x200), jit("main_loop", 0x910)};
    snapprof_frame_t cold[] = {jit("cold_fn", 0x300), jit("main_loop", 0x920),
                               marker("[truncated]")};
    snapprof_label_t request = {.key = "request", .str = "GET /index"};
    snapprof_label_t bytes = {.key = "bytes_in", .num = 4096, .num_unit = "bytes"};
    for (int i = 0; i < 6; i++) {
        snapprof_sample_t s = {.frames = hot,
                               .frame_count = 2,
                               .timestamp_ns = 1000 + (uint64_t)i,
                               .cpu_ns = 1000000,
                               .wall_ns = 10000000,
                               .tid = 4242,
                               .thread_name = "worker",
                               .labels = i < 2 ? &request : NULL,
                               .label_count = i < 2 ? 1 : 0};
        pbt_sample(b, &s);
    }
    pbt_feed(b, warm, 2, 4242, "worker", &bytes, 1, 3000000, 10000000, 3);
    snapprof_sample_t s = {.frames = cold,
                           .frame_count = 3,
                           .cpu_ns = 5000000,
                           .wall_ns = 10000000,
                           .tid = 4343,
                           .thread_name = "io",
                           .flags = SNAPPROF_SAMPLE_TRUNCATED_DEPTH};
    pbt_sample(b, &s);
}

static void expect_pct(const tu_top_row_t *rows, int n, const char *name, double flat_pct,
                       double cum_pct, const char *raw)
{
    const tu_top_row_t *r = tu_top_find(rows, n, name);
    if (r == NULL)
        TEST_FAIL("%s missing from -top:\n%s", name, raw);
    if (r->flat_pct < flat_pct - 0.01 || r->flat_pct > flat_pct + 0.01 ||
        r->cum_pct < cum_pct - 0.01 || r->cum_pct > cum_pct + 0.01)
        TEST_FAIL("%s: flat %.2f%% cum %.2f%%, want %.2f%% %.2f%%:\n%s", name, r->flat_pct,
                  r->cum_pct, flat_pct, cum_pct, raw);
}

static void check_top(const char *path, const char *extra, double hot, double warm, double cold)
{
    tu_top_row_t *rows;
    char *raw;
    int n = tu_pprof_top(path, extra, &rows, &raw);
    expect_pct(rows, n, "hot_fn", hot, hot, raw);
    expect_pct(rows, n, "warm_fn", warm, warm, raw);
    expect_pct(rows, n, "cold_fn", cold, cold, raw);
    expect_pct(rows, n, "main_loop", 0, 100, raw);
    expect_pct(rows, n, "[truncated]", 0, cold, raw);
    free(rows);
    free(raw);
}

/* Fails unless a, b, c appear in this order within one block of text. */
static void expect_order(const char *text, const char *a, const char *b, const char *c)
{
    const char *pa = strstr(text, a);
    ASSERT_CONTAINS(text, a);
    const char *pb = strstr(pa, b);
    if (pb == NULL)
        TEST_FAIL("\"%s\" not after \"%s\":\n%s", b, a, text);
    if (c != NULL && strstr(pb, c) == NULL)
        TEST_FAIL("\"%s\" not after \"%s\":\n%s", c, b, text);
}

static void test_roundtrip(void)
{
    char *path = pbt_tmp_path("pb-roundtrip", "cpu.pb.gz");
    snapprof_builder_t *b = pbt_create(path);
    feed(b);
    snapprof_stats_t stats;
    memset(&stats, 0, sizeof stats);
    stats.samples = 10;
    stats.ticks = 12;
    stats.ticks_missed = 1;
    stats.failed[SNAPPROF_FAIL_TIMEOUT] = 2;
    stats.failed_total = 2;
    stats.truncated_depth = 1;
    stats.pause_p50_ns = 12345;
    stats.pause_p99_ns = 67890;
    stats.pause_max_ns = 99999;
    stats.unwind_complete = 6;
    stats.unwind_unknown = 1;
    stats.unwind_aborted = 2;
    stats.unwind_aborted_no_info = 2;
    stats.unwind_frames_total = 321;
    stats.unwind_frames_max = 77;
    stats.unwind_p50_ns = 1500;
    stats.unwind_p99_ns = 9000;
    stats.unwind_max_ns = 12000;
    ASSERT_OK(pbt_complete(b, SNAPPROF_MODE_CPU, &stats));
    snapprof_builder_destroy(b);

    /* The default sample type of a CPU profile is cpu; -sample_index picks
     * the other. There is no wall: a CPU profile carries only what it
     * measured (before 0.6.0 its "wall" was samples times the period). */
    check_top(path, NULL, 30, 45, 25);
    check_top(path, "-sample_index=cpu", 30, 45, 25);
    check_top(path, "-sample_index=samples", 60, 30, 10);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "-top -sample_index=wall '%s'", path);
    int status = 0;
    char *out = tu_pprof(cmd, &status);
    printf("-sample_index=wall: %s", out);
    ASSERT_NE(status, 0);
    free(out);

    /* Stacks are leaf first: pprof prints each trace from the leaf out. */
    char *traces = tu_pprof_ok("-traces", path);
    expect_order(traces, "hot_fn", "main_loop", NULL);
    expect_order(traces, "cold_fn", "main_loop", "[truncated]");
    expect_order(traces, "thread_name:", "worker", NULL);
    free(traces);

    char *raw = tu_pprof_ok("-raw", path);
    ASSERT_CONTAINS(raw, "PeriodType: cpu nanoseconds");
    ASSERT_CONTAINS(raw, "Period: 10000000");
    ASSERT_CONTAINS(raw, "Duration: 2s");
    ASSERT_CONTAINS(raw, "samples/count cpu/nanoseconds[dflt]\n");
    free(raw);

    /* pprof prints the comments above every report: a few short lines,
     * the losses only because there were some. */
    char *comments = tu_pprof_ok("-comments", path);
    ASSERT_STR_EQ(comments,
                  "snapprof: 10 samples, no CPU time seen, 100 Hz requested\n"
                  "snapprof: failed 2 (timeout 2), truncated_depth 1, unwind_aborted 2\n");
    free(comments);
    /* Every counter is in the hidden entry, which pprof never prints:
     * the ones that happened, those that did not, unwinding in detail. */
    Snapprof__Pprof__Profile *cpu = pbt_load(path);
    pbt_expect_stats(cpu, &stats);
    ASSERT_CONTAINS(pbt_stats_entry(cpu), " failed.timeout=2 ");
    ASSERT_CONTAINS(pbt_stats_entry(cpu), " failed.send=0 ");
    ASSERT_CONTAINS(pbt_stats_entry(cpu), " unwind_aborted_no_info=2 ");
    ASSERT_CONTAINS(pbt_stats_entry(cpu), " unwind_max_ns=12000 ");
    snapprof__pprof__profile__free_unpacked(cpu, NULL);
    raw = tu_pprof_ok("-raw", path);
    ASSERT(strstr(raw, "snapprof-stats") == NULL);
    free(raw);

    /* Thread labels on every sample, plus the samples' own labels; counted
     * in samples so the split is exact. */
    char *tags = tu_pprof_ok("-tags -sample_index=samples", path);
    ASSERT_CONTAINS(tags, "thread_id");
    ASSERT_CONTAINS(tags, "9.0 (90.00%): 4242");
    ASSERT_CONTAINS(tags, "1.0 (10.00%): 4343");
    ASSERT_CONTAINS(tags, "thread_name");
    ASSERT_CONTAINS(tags, "9.0 (90.00%): worker");
    ASSERT_CONTAINS(tags, "1.0 (10.00%): io");
    ASSERT_CONTAINS(tags, "2.0 (  100%): GET /index");
    ASSERT_CONTAINS(tags, "3.0 (  100%): 4kB");
    free(tags);

    /* -tagfocus narrows to one thread (percentages stay of the total). */
    tu_top_row_t *rows;
    char *top;
    int n = tu_pprof_top(path, "-sample_index=samples -tagfocus=thread_name=io", &rows, &top);
    ASSERT_NULL(tu_top_find(rows, n, "hot_fn"));
    expect_pct(rows, n, "cold_fn", 10, 10, top);
    free(rows);
    free(top);

    /* A wall-clock profile defaults to the wall values and says so in its
     * period type. */
    char *wall_path = pbt_tmp_path("pb-roundtrip", "wall.pb.gz");
    b = pbt_create(wall_path);
    feed(b);
    ASSERT_OK(pbt_complete(b, SNAPPROF_MODE_WALL, NULL));
    snapprof_builder_destroy(b);
    check_top(wall_path, NULL, 60, 30, 10);
    check_top(wall_path, "-sample_index=cpu", 30, 45, 25);
    raw = tu_pprof_ok("-raw", wall_path);
    ASSERT_CONTAINS(raw, "PeriodType: wall nanoseconds");
    free(raw);

    Snapprof__Pprof__Profile *p = pbt_load(wall_path);
    pbt_check_valid(p);
    ASSERT_STR_EQ(pbt_str(p, p->default_sample_type), "wall");
    ASSERT_EQ(p->n_comment, 0); /* no counters given: no comments, no hidden entry */
    ASSERT_NULL(pbt_stats_entry(p));
    snapprof__pprof__profile__free_unpacked(p, NULL);
    p = pbt_load(path);
    pbt_check_valid(p);
    ASSERT_STR_EQ(pbt_str(p, p->default_sample_type), "cpu");
    ASSERT_EQ(p->time_nanos, 1700000000000000000ll);
    ASSERT_EQ(p->duration_nanos, 2000000000ll);
    snapprof__pprof__profile__free_unpacked(p, NULL);

    pbt_remove(path);
    pbt_remove(wall_path);
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"roundtrip", test_roundtrip},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
