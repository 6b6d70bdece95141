/* A fake renderer's frame loop, marked up the way frame profilers expect:
 * app frames, nested zones, a counter, an instant, and a hitch every 20th
 * frame (its physics takes ten times as long). Profiles itself and writes
 * a pprof profile and a Chrome trace-event file:
 *   frame_loop [PREFIX [FRAMES]]   -> PREFIX.pb.gz, PREFIX.trace.json
 * (default PREFIX frame_loop, 120 frames). Then
 *   go tool pprof -tags frame_loop.pb.gz
 *   go tool pprof -tagfocus=zone=physics -top frame_loop.pb.gz
 * and open frame_loop.trace.json in ui.perfetto.dev. */
#include <snapprof/snapprof.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CHECK(call)                                                                                \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ < 0) {                                                                             \
            fprintf(stderr, "%s: %s\n", #call, snapprof_strerror(rc_));                            \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static uint64_t cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Burns about ns of CPU in the calling function (a macro, so the samples
 * land in the function that uses it). */
#define BURN(ns)                                                                                   \
    do {                                                                                           \
        uint64_t end_ = cpu_ns() + (ns);                                                           \
        volatile uint64_t x_ = 1;                                                                  \
        while (cpu_ns() < end_)                                                                    \
            for (int i_ = 0; i_ < 20000; i_++)                                                     \
                x_ = x_ * 6364136223846793005u + 1442695040888963407u;                             \
    } while (0)

__attribute__((noinline)) void step_physics(int hitch)
{
    BURN(hitch ? 30000000u : 3000000u);
}

__attribute__((noinline)) void think_ai(void)
{
    BURN(1500000u);
}

__attribute__((noinline)) void upload_buffers(void)
{
    BURN(1000000u);
}

__attribute__((noinline)) int draw_scene(uint64_t frame)
{
    BURN(2500000u);
    return 400 + (int)(frame % 7) * 10;
}

int main(int argc, char **argv)
{
    const char *prefix = argc > 1 ? argv[1] : "frame_loop";
    uint64_t frames = argc > 2 ? strtoull(argv[2], NULL, 10) : 120;
    char pprof_path[512], trace_path[512];
    snprintf(pprof_path, sizeof pprof_path, "%s.pb.gz", prefix);
    snprintf(trace_path, sizeof trace_path, "%s.trace.json", prefix);

    snapprof_thread_t *self;
    CHECK(snapprof_thread_register(&self));
    snapprof_params_t params;
    snapprof_params_init(&params);
    params.interval_ns = 1000000u;         /* 1 kHz */
    params.hitch_threshold_ns = 20000000u; /* a frame over 20 ms is a hitch */
    snapprof_profiler_t *profiler;
    snapprof_builder_t *pprof, *trace;
    CHECK(snapprof_profiler_create(&params, &self, 1, &profiler));
    CHECK(snapprof_pprof_builder_create(pprof_path, &pprof));
    CHECK(snapprof_profiler_add_builder(profiler, pprof));
    CHECK(snapprof_trace_builder_create(trace_path, &trace));
    CHECK(snapprof_profiler_add_builder(profiler, trace));
    /* Samples carry the draw call count as the label draw_calls=N. */
    CHECK(snapprof_counter_attach("draw_calls", "calls", 1));
    CHECK(snapprof_profiler_start(profiler));

    for (uint64_t f = 1; f <= frames; f++) {
        int hitch = f % 20 == 0;
        CHECK(snapprof_app_frame_begin(f));
        CHECK(snapprof_zone_begin("update"));
        CHECK(snapprof_zone_begin("physics"));
        step_physics(hitch);
        CHECK(snapprof_zone_end());
        CHECK(snapprof_zone_begin("ai"));
        think_ai();
        CHECK(snapprof_zone_end());
        CHECK(snapprof_zone_end()); /* update */
        CHECK(snapprof_zone_begin("render"));
        CHECK(snapprof_zone_begin("upload"));
        upload_buffers();
        CHECK(snapprof_zone_end());
        CHECK(snapprof_counter_set("draw_calls", draw_scene(f)));
        CHECK(snapprof_zone_end()); /* render */
        if (f % 50 == 0)
            CHECK(snapprof_instant("gc"));
        CHECK(snapprof_app_frame_end(f));
    }

    CHECK(snapprof_profiler_stop(profiler));
    snapprof_stats_t stats;
    CHECK(snapprof_profiler_get_stats(profiler, &stats));
    printf("%llu samples, %llu events dropped, %llu lost; wrote %s and %s\n",
           (unsigned long long)stats.samples, (unsigned long long)stats.events_dropped,
           (unsigned long long)stats.events_lost, pprof_path, trace_path);
    snapprof_profiler_destroy(profiler);
    snapprof_thread_release(self);
    return 0;
}
