/* snapprof profile builder interface: receives samples, makes a profile.
 *
 * A builder is told when the profile starts (on the thread that calls
 * snapprof_profiler_start()), gets every sample after the target has
 * resumed, and is told when the profile completes (on the thread that
 * called snapprof_profiler_stop() or _destroy(), or on the sampling thread
 * when a duration or sample cap ended it) and again at every
 * snapprof_profiler_flush() (on the thread that called it, while sampling
 * pauses). Samples (xOnSample) come mostly from the sampling thread, but
 * not only: the captures still waiting when a profile completes or is
 * flushed, and each thread's "[kernel and unsampled]" remainder, reach
 * the builders on the thread that completes or flushes it; a thread that
 * calls snapprof_profiler_remove_thread() on a running profile without
 * capture slots (the handshake trigger, or wall mode with
 * SNAPPROF_WALL_BLOCKED_SIGNAL) delivers the removed thread's remainder
 * itself; and a thread that calls snapprof_thread_update_name() delivers
 * the waiting captures itself when the sampling thread has not taken them
 * within 100 ms. Every callback runs under the
 * profiler's lock or with sampling stopped, so callbacks of one builder
 * never run concurrently. They
 * must not call back into the profiler that drives them; of the rest of the
 * API they may call snapprof_symbolize(), snapprof_module_find() and the
 * name functions (snapprof_strerror() and the *_name() ones), nothing
 * else.
 *
 * The ops struct is versioned like SQLite's sqlite3_io_methods: version
 * first, members grouped by the version that added them, append-only.
 *
 * Weights. A sample stands for a stretch of its thread's time, and a
 * builder weighs it by that, never by counting it: in a CPU profile
 * (info->mode SNAPPROF_MODE_CPU) by snapprof_sample_t.cpu_ns, in a wall
 * profile by wall_ns. A CPU-clock trigger's periods vary (the perf trigger
 * draws them between half and one and a half intervals, one draw for many
 * overflows, so in a short run one drawn period stands for a whole
 * thread), and a thread's "[kernel and unsampled]" remainder
 * (SNAPPROF_SAMPLE_REMAINDER) stands for all the CPU time no sample
 * placed: counted one by one, two threads of equal work once came out
 * 66/34 where their CPU time said 49/49. The pprof builder writes the
 * weights as its cpu (and in wall mode wall) values, the folded builder as
 * microseconds, the trace builder as each sample's "weight" and the length
 * of its slices, so the three give every function the same share. The
 * weights were members of snapprof_sample_t already, so the struct did not
 * change in 0.6.0, only what builders make of it: a builder that counted
 * samples keeps working and should weigh them instead.
 */
#ifndef SNAPPROF_PROFILE_BUILDER_H
#define SNAPPROF_PROFILE_BUILDER_H

#include <snapprof/snapprof.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct snapprof_profile_info {
    uint64_t start_time_ns; /* CLOCK_REALTIME at start, ns since the epoch */
    uint64_t start_mono_ns; /* CLOCK_MONOTONIC at start (sample timestamps' clock) */
    uint64_t duration_ns;   /* 0 in xOnProfileStarted */
    uint64_t period_ns;     /* sampling interval */
    snapprof_mode_t mode;
    const snapprof_stats_t *stats; /* final counters; NULL in xOnProfileStarted */
    /* The app frames that ended while the profile ran (snapprof_app_frame_begin
     * and _end), oldest first, with their hitch verdicts; samples name their
     * frame in the numeric label "frame". NULL and 0 in xOnProfileStarted. */
    const snapprof_app_frame_t *app_frames;
    size_t app_frame_count;
    /* Zones, counters and instants recorded while the profile ran, in the
     * order each thread made them (threads interleave; sort by time_ns for
     * a timeline). A zone begun before the profile started has no begin
     * event here. NULL and 0 in xOnProfileStarted. */
    const snapprof_event_t *events;
    size_t event_count;
} snapprof_profile_info_t;

/* Version 2 (0.7.0) adds no member: a builder that says 2 or more reads
 * snapprof_sample_t.size and .kind and receives samples of every kind
 * (heap allocations and frees as well as time); a builder that says 1
 * receives only SNAPPROF_SAMPLE_KIND_TIME samples. */
#define SNAPPROF_BUILDER_OPS_VERSION 2

typedef struct snapprof_builder_ops {
    int version;      /* SNAPPROF_BUILDER_OPS_VERSION the implementation was built for */
    const char *name; /* for statistics and debugging */
    /* -- version 1 -- */
    /* The profile starts. A nonzero return fails snapprof_profiler_start()
     * with that value. Each call begins the profile afresh: when a start
     * fails after this ran (a later builder's xOnProfileStarted failed, or
     * sampling could not start), no sample was delivered and no completion
     * follows, and a retried start calls it again. May be NULL. */
    int (*xOnProfileStarted)(void *user_data, const snapprof_profile_info_t *info);
    /* One sample. A negative return is counted as SNAPPROF_FAIL_BUILDER and
     * sampling goes on. Required. */
    int (*xOnSample)(void *user_data, const snapprof_sample_t *sample);
    /* The profile is complete, or flushed: write out everything received
     * so far. Runs when the profile completes and again at every
     * snapprof_profiler_flush(), before or after the profile completed, so
     * it may run several times, with samples in between while the profile
     * runs: keep what was collected. The return value is what
     * snapprof_profiler_stop() or snapprof_profiler_flush() reports. May be
     * NULL. */
    int (*xOnProfileCompleted)(void *user_data, const snapprof_profile_info_t *info);
    /* Frees user_data. May be NULL. */
    void (*xDestroy)(void *user_data);
} snapprof_builder_ops_t;

/* Wraps ops and user_data into a builder. ops must outlive it. Returns 0;
 * -EINVAL when ops or out is NULL or xOnSample is NULL; SNAPPROF_EVERSION
 * when ops->version is below 1 (not an ops struct this library can read; a
 * newer version is accepted and only the members this library knows are
 * used); -ENOMEM. On failure xDestroy is not called. */
SNAPPROF_API int snapprof_builder_create(const snapprof_builder_ops_t *ops, void *user_data,
                                         snapprof_builder_t **out);

#ifdef __cplusplus
}
#endif

#endif /* SNAPPROF_PROFILE_BUILDER_H */
