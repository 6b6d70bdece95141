/* Builders attached to a running profile for a stretch of it (a rolling
 * profile's interval, an HTTP request): the threads keep one trigger each,
 * and every sample delivered goes to the profile's builders and to every
 * builder attached at that moment. At each boundary the captures waiting
 * and each thread's "[kernel and unsampled]" remainder so far are
 * delivered to the builders attached before it, so that a builder's CPU
 * total is its stretch's (snapprof.h, snapprof_profiler_attach_builder()). */
#include "sampling_thread/profiler_internal.h"

#include "common/stats_text.h"
#include "heap/heap_sampler.h"
#include "profile_builder/profile_builder_calls.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static uint64_t realtime_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Delivers what the slots hold and every thread's remainder up to now to
 * the builders attached now, so that a boundary after this call splits
 * each thread's CPU time where its clock was read (what
 * snapprof_profiler_flush() delivers before it writes). The clocks are
 * read before the drain: the threads run on while it unwinds, and the
 * captures they take meanwhile wait in the slots for the next pass. Read
 * after it, a clock counted their time in the remainder here, and again
 * as samples once they were delivered (under TSan, whose drains are slow,
 * a stretch's CPU time then went to the stretch before it:
 * profiler_attach_stretch found no remainder left for the stretch in 2
 * of 8 runs). Lock held. */
void snapprof__deliver_so_far(snapprof_profiler_t *p)
{
    for (size_t i = 0; i < p->target_count; i++) {
        snapprof__target_t *t = p->targets[i];
        if (!t->dead)
            snapprof__thread_cpu_ns(t->thread->tid, &t->cpu_last);
    }
    /* The heap samples too: a builder written now (a /heap request, a
     * flush) must hold every allocation sampled so far. */
    snapprof__profiler_drain_all(p);
    snapprof__retire_removed(p);
    for (size_t i = 0; i < p->target_count; i++)
        snapprof__deliver_remainder(p, p->targets[i], 0);
    snapprof__deliver_unarmed(p);
}

/* Counters that are not counts (maxima, percentiles, levels): a stretch
 * reports the profile's. Every other U64 and FAIL counter is a count and
 * a stretch reports its own (a counter added to the table later is a count
 * unless named here). */
static const char *const k_levels[] = {
    "copy_bytes_max",    "pause_p50_ns",       "pause_p99_ns",
    "pause_max_ns",      "roundtrip_p50_ns",   "roundtrip_p99_ns",
    "unwind_p50_ns",     "unwind_p99_ns",      "unwind_frames_max",
    "unwind_max_ns",     "cfi_tables",         "cfi_table_bytes",
    "fds_held_max",      "large_buffer_bytes", "large_buffer_bytes_max",
    "fds_private_errno",
};

static int is_level(const char *name)
{
    for (size_t i = 0; i < sizeof k_levels / sizeof k_levels[0]; i++)
        if (strcmp(k_levels[i], name) == 0)
            return 1;
    return 0;
}

static uint64_t minus(uint64_t now, uint64_t then)
{
    return now > then ? now - then : 0;
}

/* The counters of a stretch: now less then for the counts. */
static void stretch_stats(snapprof_stats_t *now, const snapprof_stats_t *then)
{
#define STRETCH_U64(f)                                                                             \
    if (!is_level(#f))                                                                             \
        now->f = minus(now->f, then->f);
#define STRETCH_FAIL(f)                                                                            \
    for (size_t i = 0; i < sizeof now->f / sizeof now->f[0]; i++)                                  \
        now->f[i] = minus(now->f[i], then->f[i]);
#define STRETCH_TRIGGERS(f)
#define STRETCH_TRIGGER(f)
#define STRETCH_INT(f)
#define STRETCH_(kind, f) STRETCH_##kind(f)
    SNAPPROF__STATS_TABLE(STRETCH_)
#undef STRETCH_
#undef STRETCH_U64
#undef STRETCH_FAIL
#undef STRETCH_TRIGGERS
#undef STRETCH_TRIGGER
#undef STRETCH_INT
}

static int find(const snapprof_profiler_t *p, const snapprof_builder_t *b)
{
    for (size_t i = 0; i < p->attached_count; i++)
        if (p->attached[i].builder == b)
            return (int)i;
    return -1;
}

static int is_added(const snapprof_profiler_t *p, const snapprof_builder_t *b)
{
    for (size_t i = 0; i < p->builder_count; i++)
        if (p->builders[i] == b)
            return 1;
    return find(p, b) >= 0;
}

/* Starts b as attached at slot (now), with the lock held: xOnProfileStarted
 * with a start time of now. Returns its result; on success slot is b's. */
static int start_attached(snapprof_profiler_t *p, snapprof_builder_t *b, snapprof__attached_t *slot)
{
    snapprof__attached_t a = {.builder = b};
    a.start_mono = snapprof__monotonic_ns();
    a.start_real = realtime_now();
    snapprof__snapshot_stats(p, &a.stats0);
    a.app_frames0 = p->app_frame_count;
    a.events0 = p->events.count;
    snapprof_profile_info_t info = {
        .start_time_ns = a.start_real,
        .start_mono_ns = a.start_mono,
        .period_ns = p->params.interval_ns,
        .mode = p->params.mode,
    };
    int rc = snapprof__builder_started(b, &info);
    if (rc == 0)
        *slot = a;
    return rc;
}

/* What a detached builder completes with: its info, and copies of the app
 * frames and events of its stretch (the profile's arrays grow, and move,
 * while it completes without the lock). */
typedef struct ending {
    snapprof_builder_t *builder;
    snapprof_stats_t stats;
    snapprof_profile_info_t info;
    snapprof_app_frame_t *app_frames;
    snapprof_event_t *events;
} ending_t;

/* Ends attached slot a now (its stretch's last samples delivered), with the
 * lock held: fills e for completion outside the lock. */
static void end_attached(snapprof_profiler_t *p, const snapprof__attached_t *a, ending_t *e)
{
    memset(e, 0, sizeof *e);
    e->builder = a->builder;
    if (p->state == PROFILER_RUNNING) {
        snapprof__drain_app_frames(p);
        snapprof__event_reader_read(&p->events);
    }
    snapprof__snapshot_stats(p, &e->stats);
    stretch_stats(&e->stats, &a->stats0);
    size_t napp = p->app_frame_count > a->app_frames0 ? p->app_frame_count - a->app_frames0 : 0;
    size_t nev = p->events.count > a->events0 ? p->events.count - a->events0 : 0;
    if (napp && (e->app_frames = malloc(napp * sizeof *e->app_frames)))
        memcpy(e->app_frames, p->app_frames + a->app_frames0, napp * sizeof *e->app_frames);
    if (nev && (e->events = malloc(nev * sizeof *e->events)))
        memcpy(e->events, p->events.events + a->events0, nev * sizeof *e->events);
    e->info = (snapprof_profile_info_t){
        .start_time_ns = a->start_real,
        .start_mono_ns = a->start_mono,
        .duration_ns = snapprof__monotonic_ns() - a->start_mono,
        .period_ns = p->params.interval_ns,
        .mode = p->params.mode,
        .app_frames = e->app_frames,
        .app_frame_count = e->app_frames ? napp : 0,
        .events = e->events,
        .event_count = e->events ? nev : 0,
    };
}

/* Completes an ended builder, without the lock. */
static int complete_ending(ending_t *e)
{
    e->info.stats = &e->stats;
    int rc = snapprof__builder_completed(e->builder, &e->info);
    free(e->app_frames);
    free(e->events);
    return rc;
}

int snapprof_profiler_attach_builder(snapprof_profiler_t *p, snapprof_builder_t *b)
{
    if (!p || !b)
        return -EINVAL;
    snapprof__sampler_lock();
    int rc = 0;
    if (p->state != PROFILER_RUNNING && p->state != PROFILER_CREATED)
        rc = SNAPPROF_ESTATE;
    else if (p->handed_over)
        rc = SNAPPROF_ESTATE;
    else if (is_added(p, b))
        rc = -EEXIST;
    else if (p->attached_count == SNAPPROF_ATTACHED_MAX)
        rc = -ENOSPC;
    if (rc == 0 && p->state == PROFILER_CREATED) {
        /* It starts with the profile (snapprof__attached_start()). */
        p->attached[p->attached_count++] = (snapprof__attached_t){.builder = b};
    } else if (rc == 0) {
        /* On demand (params.arm_on_demand): the first one arms the
         * threads, before the boundary, so that what they did meanwhile is
         * delivered before it, as their remainders. */
        if (p->attached_count == 0)
            snapprof__unpark(p);
        snapprof__deliver_so_far(p);
        rc = start_attached(p, b, &p->attached[p->attached_count]);
        if (rc == 0)
            p->attached_count++;
        else if (p->attached_count == 0)
            snapprof__park(p);
    }
    snapprof__sampler_unlock();
    return rc;
}

/* Waits out a completion in progress (the builders complete without the
 * lock). Lock held. */
static void wait_completed(snapprof_profiler_t *p)
{
    while (p->handed_over && p->state != PROFILER_COMPLETED)
        snapprof__sampler_wait(p);
}

/* Detach and drop: the same removal; only detach completes the builder. */
static int remove_attached(snapprof_profiler_t *p, snapprof_builder_t *b, int complete)
{
    if (!p || !b)
        return -EINVAL;
    snapprof__sampler_lock();
    wait_completed(p);
    int i = find(p, b);
    if (i < 0) {
        snapprof__sampler_unlock();
        return -ENOENT;
    }
    snapprof__attached_t a = p->attached[i];
    ending_t e;
    int before_start = p->state == PROFILER_CREATED;
    if (before_start) {
        a.completed = 1; /* never started: nothing to complete */
        a.result = 0;
    } else if (!a.completed) {
        /* On demand, the last one stops the triggers first: its stretch
         * ends with their last captures and the remainders read after. */
        if (p->attached_count == 1 && p->state == PROFILER_RUNNING && !p->handed_over)
            snapprof__park(p);
        snapprof__deliver_so_far(p);
        if (complete)
            end_attached(p, &a, &e);
    }
    memmove(&p->attached[i], &p->attached[i + 1],
            (p->attached_count - (size_t)i - 1) * sizeof p->attached[0]);
    p->attached_count--;
    snapprof__sampler_unlock();
    if (a.completed)
        return complete ? a.result : 0;
    return complete ? complete_ending(&e) : 0;
}

int snapprof_profiler_detach_builder(snapprof_profiler_t *p, snapprof_builder_t *b)
{
    return remove_attached(p, b, 1);
}

int snapprof_profiler_drop_builder(snapprof_profiler_t *p, snapprof_builder_t *b)
{
    return remove_attached(p, b, 0);
}

int snapprof_profiler_swap_builder(snapprof_profiler_t *p, snapprof_builder_t *old,
                                   snapprof_builder_t *b, int *old_result)
{
    if (!p || !old || !b || old == b)
        return -EINVAL;
    snapprof__sampler_lock();
    int i = find(p, old), rc = 0;
    if (i < 0)
        rc = -ENOENT;
    else if (is_added(p, b))
        rc = -EEXIST;
    else if (p->state != PROFILER_RUNNING || p->handed_over)
        rc = SNAPPROF_ESTATE;
    ending_t e;
    if (rc == 0) {
        snapprof__deliver_so_far(p);
        snapprof__attached_t a = p->attached[i];
        rc = start_attached(p, b, &p->attached[i]);
        if (rc == 0)
            end_attached(p, &a, &e);
    }
    snapprof__sampler_unlock();
    if (rc != 0)
        return rc;
    int done = complete_ending(&e);
    if (old_result)
        *old_result = done;
    return 0;
}

int snapprof__attached_start(snapprof_profiler_t *p, const snapprof_profile_info_t *info)
{
    /* Before the profile runs: no sample, no counter, no lock needed (the
     * caller of start owns the profiler until it runs). */
    for (size_t i = 0; i < p->attached_count; i++) {
        snapprof__attached_t *a = &p->attached[i];
        *a = (snapprof__attached_t){.builder = a->builder};
        a->start_mono = info->start_mono_ns;
        a->start_real = info->start_time_ns;
        int rc = snapprof__builder_started(a->builder, info);
        if (rc != 0)
            return rc;
    }
    return 0;
}

void snapprof__attached_complete(snapprof_profiler_t *p, const snapprof_stats_t *stats)
{
    /* After the hand-over nothing changes the profile's arrays, and detach
     * waits for the completion to end: no lock and no copies needed. */
    for (size_t i = 0; i < p->attached_count; i++) {
        snapprof__attached_t *a = &p->attached[i];
        if (a->completed)
            continue;
        snapprof_stats_t st = *stats;
        stretch_stats(&st, &a->stats0);
        size_t napp = p->app_frame_count > a->app_frames0 ? p->app_frame_count - a->app_frames0 : 0;
        size_t nev = p->events.count > a->events0 ? p->events.count - a->events0 : 0;
        snapprof_profile_info_t info = {
            .start_time_ns = a->start_real,
            .start_mono_ns = a->start_mono,
            .duration_ns = p->end_mono > a->start_mono ? p->end_mono - a->start_mono : 0,
            .period_ns = p->params.interval_ns,
            .mode = p->params.mode,
            .stats = &st,
            .app_frames = napp ? p->app_frames + a->app_frames0 : NULL,
            .app_frame_count = napp,
            .events = nev ? p->events.events + a->events0 : NULL,
            .event_count = nev,
        };
        a->result = snapprof__builder_completed(a->builder, &info);
        a->completed = 1;
    }
}

void snapprof__attached_destroy(snapprof_profiler_t *p)
{
    for (size_t i = 0; i < p->attached_count; i++)
        snapprof_builder_destroy(p->attached[i].builder);
    p->attached_count = 0;
}

/* Whether p is still running (not completing or completed). */
static int still_running(snapprof_profiler_t *p)
{
    snapprof__sampler_lock();
    int running = p->state == PROFILER_RUNNING && !p->handed_over;
    snapprof__sampler_unlock();
    return running;
}

#define COLLECT_POLL_NS 20000000u /* how soon a stop ends a collect's wait */

int snapprof_profiler_collect(snapprof_profiler_t *p, uint64_t duration_ns, void **bytes,
                              size_t *size)
{
    if (!p || !bytes || !size || duration_ns == 0)
        return -EINVAL;
    *bytes = NULL;
    *size = 0;
    if (!still_running(p))
        return SNAPPROF_ESTATE;
    snapprof_builder_t *b;
    int rc = snapprof_pprof_builder_create_in_memory(&b);
    if (rc != 0)
        return rc;
    rc = snapprof_profiler_attach_builder(p, b);
    if (rc != 0) {
        snapprof_builder_destroy(b);
        return rc;
    }
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    uint64_t start = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        uint64_t t = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
        if (t - start >= duration_ns || !still_running(p))
            break;
        uint64_t left = duration_ns - (t - start);
        uint64_t step = left < COLLECT_POLL_NS ? left : COLLECT_POLL_NS;
        struct timespec ts = {(time_t)(step / 1000000000u), (long)(step % 1000000000u)};
        nanosleep(&ts, NULL);
    }
    rc = snapprof_profiler_detach_builder(p, b);
    if (rc == 0)
        rc = snapprof_pprof_builder_take_bytes(b, bytes, size);
    snapprof_builder_destroy(b);
    return rc;
}

int snapprof_profiler_write_builder(snapprof_profiler_t *p, snapprof_builder_t *b, const char *path)
{
    if (!p || !b || !path)
        return -EINVAL;
    snapprof__heap_guard_enter(); /* the builder's allocations are not the program's */
    snapprof__sampler_lock();
    while (p->state == PROFILER_COMPLETING)
        snapprof__sampler_wait(p);
    int own = 0;
    for (size_t i = 0; i < p->builder_count && !own; i++)
        own = p->builders[i] == b;
    int result;
    if (!own) {
        result = -ENOENT;
    } else if (p->state != PROFILER_RUNNING) {
        result = SNAPPROF_ESTATE;
    } else {
        /* As a flush (snapprof__info_now()), and under the lock as a
         * flush: no sample, flush or stop reaches the builder while its
         * output is the other path. */
        snapprof_stats_t stats;
        snapprof_profile_info_t info = snapprof__info_now(p, &stats);
        result = snapprof__builder_completed_to(b, &info, path);
    }
    snapprof__sampler_unlock();
    snapprof__heap_guard_leave();
    return result;
}
