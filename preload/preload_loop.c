/* Rolling profiles (SNAPPROF_LOOP, `snapprof record --loop`): one file per
 * output per interval, BASE.INTERVAL EXT (file_names.h; INTERVAL the UTC
 * second the interval began), beside the whole run's. Each output has a
 * builder of its format attached to the profile for its interval
 * (snapprof_profiler_attach_builder()); at each boundary a thread of ours,
 * which blocks every signal and is never sampled, swaps in a fresh one
 * (snapprof_profiler_swap_builder(): every sample goes to exactly one
 * interval, so the intervals merged are the whole run's profile) and
 * writes the old one and frees it, so memory stays that of one interval.
 * The last interval ends with the profile: the stop completes it with the
 * others. The heap profiles (SNAPPROF_HEAP) have no interval files: what
 * is in use is the whole run's, written at the end. This file holds its own state and never takes
 * the preload lock (a stop waits for the thread under it). */
#include "preload/file_names.h"
#include "preload/preload_process.h"

#include <snapprof/heap.h>
#include <snapprof/profile_builder.h>
#include <snapprof/snapprof.h>

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

static struct {
    int running; /* the thread runs; joined at stop */
    pthread_t th;
    atomic_uint quit; /* futex word: the stop asks the thread to end */
    snapprof_profiler_t *profiler;
    const snapprof__preload_config_t *cfg; /* the profile's: fixed while it runs */
    snapprof_builder_t *cur[SNAPPROF_OUTPUTS_MAX];
    char name[32]; /* the current interval's INTERVAL part */
    int warned;    /* one line about files that could not be written */
} L;

/* "20261127T153200Z": the UTC second of realtime ns. */
static void interval_name(uint64_t real_ns, char *out, size_t size)
{
    time_t s = (time_t)(real_ns / 1000000000u);
    struct tm tm;
    gmtime_r(&s, &tm);
    strftime(out, size, "%Y%m%dT%H%M%SZ", &tm);
}

static uint64_t realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The builder of output i for the interval named name. */
static int make_builder(unsigned i, const char *name, snapprof_builder_t **out)
{
    const snapprof__output_spec_t *o = &L.cfg->outputs[i];
    char path[PATH_MAX];
    if (snapprof__name_file(o->family, NULL, name, L.cfg->child ? (int)getpid() : 0, path,
                            sizeof path) != 0)
        return -ENAMETOOLONG;
    switch (o->format) {
    case SNAPPROF__FORMAT_FOLDED:
        return snapprof_folded_builder_create(path, out);
    case SNAPPROF__FORMAT_TRACE:
        return snapprof_trace_builder_create(path, out);
    case SNAPPROF__FORMAT_GPERFTOOLS:
        return snapprof_gperftools_builder_create(path, out);
    default:
        return snapprof_pprof_builder_create(path, out);
    }
}

static void warn_once(unsigned i, const char *name, int rc)
{
    if (L.warned)
        return;
    L.warned = 1;
    snapprof__preload_warn("cannot write the interval profile %s of %s: %s (this interval's file "
                           "is missing; the whole run's has its samples)",
                           name, L.cfg->outputs[i].family, snapprof_strerror(rc));
}

int snapprof__preload_loop_attach(snapprof_profiler_t *p, const snapprof__preload_config_t *cfg)
{
    memset(&L.cur, 0, sizeof L.cur);
    L.profiler = p;
    L.cfg = cfg;
    L.warned = 0;
    interval_name(realtime_ns(), L.name, sizeof L.name);
    for (unsigned i = 0; i < cfg->n_outputs; i++) {
        if (snapprof__format_is_heap(cfg->outputs[i].format))
            continue; /* the whole run's only */
        int rc = make_builder(i, L.name, &L.cur[i]);
        if (rc == 0 && (rc = snapprof_profiler_attach_builder(p, L.cur[i])) != 0) {
            snapprof_builder_destroy(L.cur[i]);
            L.cur[i] = NULL;
        }
        if (rc != 0)
            warn_once(i, L.name, rc);
    }
    return 0;
}

/* One boundary: every output's interval builder swapped for a fresh one,
 * then the old ones written and freed. */
static void next_interval(void)
{
    char name[32];
    interval_name(realtime_ns(), name, sizeof name);
    /* Names are to the second: an interval that would begin in the second
     * the current one began waits for the next second (a boundary that
     * came late, the loop just over a second). */
    if (strcmp(name, L.name) == 0)
        return;
    snapprof_builder_t *old[SNAPPROF_OUTPUTS_MAX] = {NULL};
    for (unsigned i = 0; i < L.cfg->n_outputs; i++) {
        if (!L.cur[i])
            continue;
        snapprof_builder_t *b;
        int rc = make_builder(i, name, &b);
        int written = 0;
        if (rc == 0) {
            rc = snapprof_profiler_swap_builder(L.profiler, L.cur[i], b, &written);
            if (rc != 0)
                snapprof_builder_destroy(b);
        }
        if (rc != 0) {
            /* The current interval goes on into the next one. */
            warn_once(i, name, rc);
            continue;
        }
        if (written != 0)
            warn_once(i, L.name, written);
        old[i] = L.cur[i];
        L.cur[i] = b;
    }
    memcpy(L.name, name, sizeof L.name);
    for (unsigned i = 0; i < L.cfg->n_outputs; i++)
        snapprof_builder_destroy(old[i]);
}

static void *loop_main(void *arg)
{
    (void)arg;
    prctl(PR_SET_NAME, "snapprof-loop");
    snapprof_heap_ignore_begin(); /* what it allocates is ours */
    uint64_t next = snapprof__monotonic_ns() + L.cfg->loop_ns;
    while (!atomic_load(&L.quit)) {
        uint64_t now = snapprof__monotonic_ns();
        if (now < next) {
            snapprof__preload_futex_wait(&L.quit, 0, next - now);
            continue;
        }
        char before[32];
        memcpy(before, L.name, sizeof before);
        next_interval();
        if (strcmp(before, L.name) == 0) {
            next = snapprof__monotonic_ns() + 50000000u; /* same second: soon again */
            continue;
        }
        /* On the grid of the loop, skipping boundaries long past. */
        while (next <= snapprof__monotonic_ns())
            next += L.cfg->loop_ns;
    }
    return NULL;
}

int snapprof__preload_loop_start(void)
{
    atomic_store(&L.quit, 0);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    /* It symbolizes (libdw) and compresses, as the helper does. */
    pthread_attr_setstacksize(&attr, 2u << 20);
    int rc = snapprof__preload_start_quiet_thread(&L.th, &attr, loop_main);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        snapprof__preload_warn("cannot start the thread of rolling profiles (%s): one interval "
                               "for the whole run",
                               strerror(rc));
        return -rc;
    }
    L.running = 1;
    return 0;
}

void snapprof__preload_loop_quit(void)
{
    if (!L.running)
        return;
    atomic_store(&L.quit, 1);
    snapprof__preload_futex_wake(&L.quit);
    pthread_join(L.th, NULL);
    L.running = 0;
}

void snapprof__preload_loop_detach(void)
{
    if (!L.profiler)
        return;
    for (unsigned i = 0; i < SNAPPROF_OUTPUTS_MAX; i++) {
        if (!L.cur[i])
            continue;
        /* Completed (written) by the stop, with the profile's builders. */
        int rc = snapprof_profiler_detach_builder(L.profiler, L.cur[i]);
        if (rc != 0)
            warn_once(i, L.name, rc);
        snapprof_builder_destroy(L.cur[i]);
        L.cur[i] = NULL;
    }
    L.profiler = NULL;
    L.cfg = NULL;
}

void snapprof__preload_loop_fork_child(void)
{
    /* The parent's thread did not come along; its builders are the
     * parent's profiler's, never freed here. */
    memset(&L, 0, sizeof L);
}
