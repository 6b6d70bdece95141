/* Zones end to end, read back by go tool pprof: samples taken inside a
 * zone carry zone=<name>, so -tagfocus=zone=X keeps exactly that zone's
 * functions, and an attached counter is a numeric label with its unit. */
#include "test.h"
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

__attribute__((noinline)) void zone_physics_hot(void)
{
    tu_burn_cpu_ns(2000000u);
    __asm__ volatile("" ::: "memory"); /* no tail call: keep this frame */
}

__attribute__((noinline)) void zone_render_hot(void)
{
    tu_burn_cpu_ns(2000000u);
    __asm__ volatile("" ::: "memory"); /* no tail call: keep this frame */
}

__attribute__((noinline)) void outside_any_zone(void)
{
    tu_burn_cpu_ns(1000000u);
    __asm__ volatile("" ::: "memory"); /* no tail call: keep this frame */
}

static void test_tagfocus_zone(void)
{
    char *dir = tu_make_tmpdir("zones-e2e");
    char path[512];
    snprintf(path, sizeof path, "%s/zones.pb.gz", dir);
    snapprof_thread_t *self;
    snapprof_profiler_t *p = tu_profile_self(&self);
    snapprof_builder_t *b;
    ASSERT_OK(snapprof_pprof_builder_create(path, &b));
    ASSERT_OK(snapprof_profiler_add_builder(p, b));
    ASSERT_OK(snapprof_counter_attach("queue", "items", 1));
    ASSERT_OK(snapprof_profiler_start(p));
    /* Waits for samples rather than time: the host stalls vCPUs. */
    uint64_t deadline = tu_mono_ns() + 150000000000u;
    snapprof_stats_t st = {0};
    for (int i = 0; st.samples < 900 && tu_mono_ns() < deadline; i++) {
        ASSERT_OK(snapprof_counter_set("queue", i % 2 ? 7 : 3));
        ASSERT_OK(snapprof_zone_begin("frame_work"));
        ASSERT_OK(snapprof_zone_begin("physics"));
        zone_physics_hot();
        ASSERT_OK(snapprof_zone_end());
        ASSERT_OK(snapprof_zone_begin("render"));
        zone_render_hot();
        ASSERT_OK(snapprof_zone_end());
        ASSERT_OK(snapprof_zone_end());
        outside_any_zone();
        ASSERT_OK(snapprof_profiler_get_stats(p, &st));
    }
    ASSERT_OK(snapprof_profiler_stop(p));
    ASSERT_GE(st.samples, 900);
    snapprof_profiler_destroy(p);
    snapprof_thread_release(self);

    char args[600];
    snprintf(args, sizeof args, "-tags '%s'", path);
    int status;
    char *tags = tu_pprof(args, &status);
    printf("$ go tool pprof -tags\n%s\n", tags);
    ASSERT_EQ(status, 0);
    ASSERT_CONTAINS(tags, "zone:");
    ASSERT_CONTAINS(tags, "physics");
    ASSERT_CONTAINS(tags, "render");
    ASSERT_CONTAINS(tags, "queue:");
    free(tags);
    /* -tags leaves out units it does not know; -raw shows them. */
    snprintf(args, sizeof args, "-raw '%s'", path);
    char *raw = tu_pprof(args, &status);
    ASSERT_EQ(status, 0);
    ASSERT_CONTAINS(raw, "queue:[3 items]");
    ASSERT_CONTAINS(raw, "queue:[7 items]");
    free(raw);

    const char *f = "-relative_percentages -sample_index=samples -tagfocus=zone=physics";
    double ph = tu_top_cum_pct(path, f, "zone_physics_hot", 1);
    double re = tu_top_cum_pct(path, f, "zone_render_hot", 0);
    double out = tu_top_cum_pct(path, f, "outside_any_zone", 0);
    printf("zone=physics: physics %.1f%%, render %.1f%%, outside %.1f%%\n", ph, re, out);
    ASSERT_GT(ph, 80.0);
    ASSERT_EQ(re, 0);
    ASSERT_EQ(out, 0);
    f = "-relative_percentages -sample_index=samples -tagfocus=zone=render";
    ph = tu_top_cum_pct(path, f, "zone_physics_hot", 0);
    re = tu_top_cum_pct(path, f, "zone_render_hot", 1);
    out = tu_top_cum_pct(path, f, "outside_any_zone", 0);
    printf("zone=render: physics %.1f%%, render %.1f%%, outside %.1f%%\n", ph, re, out);
    ASSERT_EQ(ph, 0);
    ASSERT_GT(re, 80.0);
    ASSERT_EQ(out, 0);
    /* Outside every zone: -tagignore=zone keeps only unlabeled samples. */
    f = "-relative_percentages -sample_index=samples -tagignore=zone=physics,render,frame_work";
    ph = tu_top_cum_pct(path, f, "zone_physics_hot", 0);
    out = tu_top_cum_pct(path, f, "outside_any_zone", 1);
    printf("no zone: physics %.1f%%, outside %.1f%%\n", ph, out);
    ASSERT_EQ(ph, 0);
    ASSERT_GT(out, 60.0);
    unlink(path);
    rmdir(dir);
    free(dir);
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"tagfocus_zone", test_tagfocus_zone},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
