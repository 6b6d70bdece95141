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

/* One view of the profile by its zone labels: the function that must hold
 * more than min_pct of it, and those that must hold none. */
typedef struct zone_view {
    const char *filter, *hot;
    double min_pct;
    const char *none[2];
} zone_view_t;

static const zone_view_t k_views[] = {
    {"-tagfocus=zone=physics", "zone_physics_hot", 80.0, {"zone_render_hot", "outside_any_zone"}},
    {"-tagfocus=zone=render", "zone_render_hot", 80.0, {"zone_physics_hot", "outside_any_zone"}},
    /* Outside every zone: -tagignore=zone keeps only unlabeled samples. */
    {"-tagignore=zone=physics,render,frame_work", "outside_any_zone", 60.0, {"zone_physics_hot"}},
};

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

    char *tags = tu_pprof_ok("-tags", path);
    printf("$ go tool pprof -tags\n%s\n", tags);
    ASSERT_CONTAINS(tags, "zone:");
    ASSERT_CONTAINS(tags, "physics");
    ASSERT_CONTAINS(tags, "render");
    ASSERT_CONTAINS(tags, "queue:");
    free(tags);
    /* -tags leaves out units it does not know; -raw shows them. */
    char *raw = tu_pprof_ok("-raw", path);
    ASSERT_CONTAINS(raw, "queue:[3 items]");
    ASSERT_CONTAINS(raw, "queue:[7 items]");
    free(raw);

    for (size_t i = 0; i < sizeof k_views / sizeof k_views[0]; i++) {
        const zone_view_t *v = &k_views[i];
        char f[256];
        snprintf(f, sizeof f, "-relative_percentages -sample_index=samples %s", v->filter);
        double hot = tu_top_cum_pct(path, f, v->hot, 1);
        printf("%s: %s %.1f%%\n", v->filter, v->hot, hot);
        ASSERT_GT(hot, v->min_pct);
        for (size_t k = 0; k < 2 && v->none[k] != NULL; k++) {
            double pct = tu_top_cum_pct(path, f, v->none[k], 0);
            printf("%s: %s %.1f%%\n", v->filter, v->none[k], pct);
            ASSERT_EQ(pct, 0);
        }
    }
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
