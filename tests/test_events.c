/* Zones, counters and instant events (events/): the API's error results,
 * the zone= and counter labels the handler captures, exact event times,
 * bounded buffers that count what they drop, the trace builder's tracks,
 * and the cost per call. */
#include "labels/labels.h"
#include "test.h"
#include "test_sample_log.h"
#include "test_util.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

static pid_t my_gettid(void)
{
    return (pid_t)syscall(SYS_gettid);
}

static size_t capture_here(snapprof__label_capture_t *c, snapprof_label_t *out)
{
    snapprof__labels_capture(c);
    return snapprof__labels_decode(c, out);
}

static const snapprof_label_t *find_label(const snapprof_label_t *l, size_t n, const char *key)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(l[i].key, key) == 0)
            return &l[i];
    return NULL;
}

/* The zone label the handler would capture on this thread now, or NULL. */
static const char *zone_now(snapprof__label_capture_t *c)
{
    snapprof_label_t l[SNAPPROF__LABELS_MAX];
    size_t n = capture_here(c, l);
    const snapprof_label_t *z = find_label(l, n, "zone");
    return z ? z->str : NULL;
}

/* ------------------------------------------------------------------------ */
/* misuse                                                                   */
/* ------------------------------------------------------------------------ */

/* Every wrong call gets its documented error and changes nothing. */
static void test_misuse(void)
{
    snapprof__label_capture_t c;
    ASSERT_EQ(snapprof_zone_end(), -ENOENT); /* no state on this thread yet */
    ASSERT_EQ(snapprof_zone_begin(NULL), -EINVAL);
    ASSERT_EQ(snapprof_zone_begin(""), -EINVAL);
    char name[SNAPPROF_EVENT_NAME_MAX + 1];
    memset(name, 'z', sizeof name);
    name[SNAPPROF_EVENT_NAME_MAX] = '\0';
    ASSERT_EQ(snapprof_zone_begin(name), -ENAMETOOLONG);
    ASSERT_EQ(snapprof_instant(name), -ENAMETOOLONG);
    ASSERT_EQ(snapprof_counter_set(name, 1), -ENAMETOOLONG);
    ASSERT_NULL(zone_now(&c));
    name[SNAPPROF_EVENT_NAME_MAX - 1] = '\0'; /* the longest name that fits */
    ASSERT_OK(snapprof_zone_begin(name));
    ASSERT_STR_EQ(zone_now(&c), name);
    ASSERT_OK(snapprof_zone_end());
    ASSERT_EQ(snapprof_zone_end(), -ENOENT);
    ASSERT_NULL(zone_now(&c));

    /* Too deep: -E2BIG, not a label, but it counts as open, so balanced
     * code closes nothing it did not open. */
    char zn[16];
    for (int i = 0; i < SNAPPROF_ZONE_DEPTH_MAX; i++) {
        snprintf(zn, sizeof zn, "z%d", i);
        ASSERT_OK(snapprof_zone_begin(zn));
    }
    ASSERT_EQ(snapprof_zone_begin("too_deep"), -E2BIG);
    ASSERT_EQ(snapprof_zone_begin("deeper"), -E2BIG);
    snprintf(zn, sizeof zn, "z%d", SNAPPROF_ZONE_DEPTH_MAX - 1);
    ASSERT_STR_EQ(zone_now(&c), zn);
    ASSERT_OK(snapprof_zone_end()); /* deeper */
    ASSERT_OK(snapprof_zone_end()); /* too_deep */
    ASSERT_STR_EQ(zone_now(&c), zn);
    for (int i = SNAPPROF_ZONE_DEPTH_MAX - 1; i >= 0; i--) {
        snprintf(zn, sizeof zn, "z%d", i);
        ASSERT_STR_EQ(zone_now(&c), zn);
        ASSERT_OK(snapprof_zone_end());
    }
    ASSERT_NULL(zone_now(&c));
    ASSERT_EQ(snapprof_zone_end(), -ENOENT);

    ASSERT_EQ(snapprof_instant(NULL), -EINVAL);
    ASSERT_EQ(snapprof_instant(""), -EINVAL);
    ASSERT_OK(snapprof_instant("mark"));
    ASSERT_EQ(snapprof_counter_set(NULL, 1), -EINVAL);
    ASSERT_EQ(snapprof_counter_set("c", NAN), -EINVAL);
    ASSERT_EQ(snapprof_counter_set("c", INFINITY), -EINVAL);
    ASSERT_OK(snapprof_counter_set("c", -1.5));

    ASSERT_EQ(snapprof_counter_attach(NULL, NULL, 1), -EINVAL);
    ASSERT_EQ(snapprof_counter_attach("zone", NULL, 1), -EINVAL);
    ASSERT_EQ(snapprof_counter_attach("frame", NULL, 1), -EINVAL);
    ASSERT_EQ(snapprof_counter_attach("c", NULL, 0), -EINVAL);
    ASSERT_EQ(snapprof_counter_attach("c", NULL, NAN), -EINVAL);
    char key[SNAPPROF_LABEL_KEY_MAX + 1];
    memset(key, 'k', sizeof key);
    key[SNAPPROF_LABEL_KEY_MAX] = '\0';
    ASSERT_EQ(snapprof_counter_attach(key, NULL, 1), -ENAMETOOLONG);
    ASSERT_EQ(snapprof_counter_attach("c", "a-unit-far-too-long", 1), -ENAMETOOLONG);
    ASSERT_OK(snapprof_counter_attach("c", NULL, 1));
    ASSERT_EQ(snapprof_counter_attach("c", "x", 2), -EEXIST);
    for (int i = 1; i < SNAPPROF_COUNTER_ATTACH_MAX; i++) {
        snprintf(zn, sizeof zn, "c%d", i);
        ASSERT_OK(snapprof_counter_attach(zn, NULL, 1));
    }
    ASSERT_EQ(snapprof_counter_attach("one_too_many", NULL, 1), -ENOSPC);

    /* "zone" is the library's own label key now. */
    ASSERT_EQ(snapprof_label_set_str(SNAPPROF_LABEL_THREAD, "zone", "x"), -EINVAL);
    ASSERT_EQ(snapprof_label_set_str(SNAPPROF_LABEL_PROCESS, "zone", "x"), -EINVAL);
}

/* The name table holds SNAPPROF_EVENT_NAMES_MAX names; past it new names
 * fail with -ENOSPC and the names already in still work. */
static void test_name_table_full(void)
{
    char n[32];
    int i = 0, err = 0;
    for (; i <= SNAPPROF_EVENT_NAMES_MAX && err == 0; i++) {
        snprintf(n, sizeof n, "name%d", i);
        err = snapprof_instant(n);
    }
    ASSERT_EQ(err, -ENOSPC);
    ASSERT_EQ(i - 1, SNAPPROF_EVENT_NAMES_MAX);
    ASSERT_EQ(snapprof_zone_begin("a new one"), -ENOSPC);
    ASSERT_EQ(snapprof_zone_end(), -ENOENT); /* the failed begin opened nothing */
    ASSERT_OK(snapprof_zone_begin("name7"));
    snapprof__label_capture_t c;
    ASSERT_STR_EQ(zone_now(&c), "name7");
    ASSERT_OK(snapprof_zone_end());
}

/* ------------------------------------------------------------------------ */
/* labels                                                                   */
/* ------------------------------------------------------------------------ */

/* The capture carries the innermost zone, and attached counters as
 * numeric labels: value * scale rounded half away from zero, saturated;
 * a counter that is not attached is no label. */
static void test_capture_labels(void)
{
    snapprof__label_capture_t c;
    snapprof_label_t l[SNAPPROF__LABELS_MAX];
    ASSERT_OK(snapprof_label_set_str(SNAPPROF_LABEL_THREAD, "request", "GET"));
    ASSERT_OK(snapprof_zone_begin("outer"));
    ASSERT_STR_EQ(zone_now(&c), "outer");
    ASSERT_OK(snapprof_zone_begin("inner"));
    ASSERT_STR_EQ(zone_now(&c), "inner");
    size_t n = capture_here(&c, l);
    ASSERT_NOT_NULL(find_label(l, n, "request")); /* labels stay */
    ASSERT_OK(snapprof_zone_end());
    ASSERT_STR_EQ(zone_now(&c), "outer");
    ASSERT_OK(snapprof_zone_end());
    ASSERT_NULL(zone_now(&c));

    ASSERT_OK(snapprof_counter_attach("queue_ms", "us", 1000));
    n = capture_here(&c, l);
    ASSERT_NULL(find_label(l, n, "queue_ms")); /* attached, never set */
    ASSERT_OK(snapprof_counter_set("not_attached", 5));
    ASSERT_OK(snapprof_counter_set("queue_ms", 2.0345));
    n = capture_here(&c, l);
    ASSERT_NULL(find_label(l, n, "not_attached"));
    const snapprof_label_t *q = find_label(l, n, "queue_ms");
    ASSERT_NOT_NULL(q);
    ASSERT_NULL(q->str);
    ASSERT_EQ(q->num, 2035);
    ASSERT_STR_EQ(q->num_unit, "us");
    ASSERT_OK(snapprof_counter_set("queue_ms", -0.0025));
    n = capture_here(&c, l);
    ASSERT_EQ(find_label(l, n, "queue_ms")->num, -3);
    ASSERT_OK(snapprof_counter_set("queue_ms", 1e300));
    n = capture_here(&c, l);
    ASSERT_EQ(find_label(l, n, "queue_ms")->num, INT64_MAX);
    ASSERT_OK(snapprof_counter_set("queue_ms", -1e300));
    n = capture_here(&c, l);
    ASSERT_EQ(find_label(l, n, "queue_ms")->num, INT64_MIN);
    ASSERT_OK(snapprof_label_remove(SNAPPROF_LABEL_THREAD, "request"));
}

/* ------------------------------------------------------------------------ */
/* Profiles                                                                 */
/* ------------------------------------------------------------------------ */

/* A profiler of the calling thread that ticks rarely (each tick drains the
 * event buffers), with a sample log. */
static snapprof_profiler_t *start_profiler(sample_log_t *log, uint64_t interval_ns,
                                           uint64_t initial_delay_ns, snapprof_builder_t *extra,
                                           snapprof_thread_t **self)
{
    ASSERT_OK(snapprof_thread_register(self));
    snapprof_params_t params = tu_params(interval_ns);
    params.initial_delay_ns = initial_delay_ns;
    params.hitch_threshold_ns = 20000000u;
    snapprof_profiler_t *p;
    ASSERT_OK(snapprof_profiler_create(&params, self, 1, &p));
    ASSERT_OK(snapprof_profiler_add_builder(p, sl_builder(log)));
    if (extra)
        ASSERT_OK(snapprof_profiler_add_builder(p, extra));
    ASSERT_OK(snapprof_profiler_start(p));
    return p;
}

static void stop_profiler(snapprof_profiler_t *p, snapprof_thread_t *self)
{
    ASSERT_OK(snapprof_profiler_stop(p));
    snapprof_profiler_destroy(p);
    snapprof_thread_release(self);
}

static void *zone_and_exit(void *arg)
{
    pid_t *tid = arg;
    *tid = my_gettid();
    ASSERT_OK(snapprof_zone_begin("worker"));
    ASSERT_OK(snapprof_zone_begin("left_open"));
    return NULL; /* exits inside two zones */
}

/* Zones nest, with times read between the calls: every event lies between
 * the clock readings around its call, depths and names are right, and a
 * thread that exits inside zones has them ended at its exit. Zones open
 * before the profile started are labels but not events. */
static void test_zones_exact(void)
{
    ASSERT_OK(snapprof_zone_begin("before_start"));
    sample_log_t log = {0};
    snapprof_thread_t *self;
    snapprof_profiler_t *p = start_profiler(&log, 5000000u, 0, NULL, &self);
    uint64_t t[8];
    t[0] = tu_mono_ns();
    ASSERT_OK(snapprof_zone_begin("A"));
    t[1] = tu_mono_ns();
    ASSERT_OK(snapprof_zone_begin("B"));
    t[2] = tu_mono_ns();
    ASSERT_OK(snapprof_instant("mark"));
    t[3] = tu_mono_ns();
    ASSERT_OK(snapprof_counter_set("ctr", 1.25));
    t[4] = tu_mono_ns();
    ASSERT_OK(snapprof_zone_end()); /* B */
    t[5] = tu_mono_ns();
    ASSERT_OK(snapprof_zone_end()); /* A */
    t[6] = tu_mono_ns();
    pthread_t th;
    pid_t worker = 0;
    ASSERT_EQ(pthread_create(&th, NULL, zone_and_exit, &worker), 0);
    ASSERT_EQ(pthread_join(th, NULL), 0);
    t[7] = tu_mono_ns();
    ASSERT_OK(snapprof_zone_end()); /* before_start: not recorded */
    stop_profiler(p, self);

    pid_t me = my_gettid();
    const snapprof_event_t *mine[8], *theirs[8];
    size_t n_mine = 0, n_theirs = 0;
    for (size_t i = 0; i < log.event_count; i++) {
        const snapprof_event_t *e = &log.events[i];
        if (e->tid == me && n_mine < 8)
            mine[n_mine++] = e;
        else if (e->tid == worker && n_theirs < 8)
            theirs[n_theirs++] = e;
    }
    ASSERT_EQ(log.event_count, 10);
    ASSERT_EQ(n_mine, 6);
    struct {
        snapprof_event_kind_t kind;
        const char *name;
        uint32_t depth;
    } want[6] = {{SNAPPROF_EVENT_ZONE_BEGIN, "A", 2}, {SNAPPROF_EVENT_ZONE_BEGIN, "B", 3},
                 {SNAPPROF_EVENT_INSTANT, "mark", 0}, {SNAPPROF_EVENT_COUNTER, "ctr", 0},
                 {SNAPPROF_EVENT_ZONE_END, "B", 3},   {SNAPPROF_EVENT_ZONE_END, "A", 2}};
    for (int i = 0; i < 6; i++) {
        ASSERT_EQ(mine[i]->kind, want[i].kind);
        ASSERT_STR_EQ(mine[i]->name, want[i].name);
        ASSERT_EQ(mine[i]->depth, want[i].depth); /* before_start is level 1 */
        ASSERT_GE(mine[i]->time_ns, t[i]);
        ASSERT_LE(mine[i]->time_ns, t[i + 1]);
    }
    ASSERT_EQ(mine[3]->value * 4, 5); /* 1.25, exactly */
    ASSERT_EQ(n_theirs, 4);
    ASSERT_EQ(theirs[0]->kind, SNAPPROF_EVENT_ZONE_BEGIN);
    ASSERT_STR_EQ(theirs[1]->name, "left_open");
    ASSERT_EQ(theirs[2]->kind, SNAPPROF_EVENT_ZONE_END);
    ASSERT_STR_EQ(theirs[2]->name, "left_open");
    ASSERT_EQ(theirs[2]->depth, 2);
    ASSERT_STR_EQ(theirs[3]->name, "worker");
    ASSERT_EQ(theirs[3]->depth, 1);
    ASSERT_GE(theirs[3]->time_ns, t[6]);
    ASSERT_LE(theirs[3]->time_ns, t[7]);
    ASSERT_EQ(log.stats.events_dropped, 0);
    ASSERT_EQ(log.stats.events_lost, 0);
    printf("%zu events; zone A %.3f us, B %.3f us\n", log.event_count,
           (mine[5]->time_ns - mine[0]->time_ns) / 1e3,
           (mine[4]->time_ns - mine[1]->time_ns) / 1e3);
    sl_free(&log);
}

static void *calls_and_exit(void *arg)
{
    pid_t *tid = arg;
    *tid = my_gettid();
    ASSERT_OK(snapprof_func_enter((void *)test_zones_exact));
    ASSERT_OK(snapprof_func_enter((void *)calls_and_exit));
    return NULL; /* exits inside two timed calls */
}

/* Calls still open when a thread exits end at its exit, and their exit
 * events reach the profile before the thread's buffer goes away. */
static void test_calls_end_at_exit(void)
{
    sample_log_t log = {0};
    snapprof_thread_t *self;
    snapprof_profiler_t *p = start_profiler(&log, 5000000u, 0, NULL, &self);
    pthread_t th;
    pid_t worker = 0;
    ASSERT_EQ(pthread_create(&th, NULL, calls_and_exit, &worker), 0);
    ASSERT_EQ(pthread_join(th, NULL), 0);
    stop_profiler(p, self);
    struct {
        snapprof_event_kind_t kind;
        void *fn;
        uint32_t depth;
    } want[4] = {{SNAPPROF_EVENT_FUNC_ENTER, (void *)test_zones_exact, 1},
                 {SNAPPROF_EVENT_FUNC_ENTER, (void *)calls_and_exit, 2},
                 {SNAPPROF_EVENT_FUNC_EXIT, (void *)calls_and_exit, 2},
                 {SNAPPROF_EVENT_FUNC_EXIT, (void *)test_zones_exact, 1}};
    size_t k = 0;
    for (size_t i = 0; i < log.event_count; i++) {
        const snapprof_event_t *e = &log.events[i];
        if (e->tid != worker)
            continue;
        ASSERT_LT(k, 4);
        ASSERT_EQ(e->kind, want[k].kind);
        ASSERT_PTR_EQ((void *)e->address, want[k].fn);
        ASSERT_EQ(e->depth, want[k].depth);
        k++;
    }
    ASSERT_EQ(k, 4);
    sl_free(&log);
}

/* Nobody drains for a long while (the first tick is an hour away): the
 * thread's buffer fills, later events are dropped and counted, the caller
 * is never blocked, what was kept is the oldest, and every kept begin has
 * its end. */
static void test_overflow_counts_drops(void)
{
    sample_log_t log = {0};
    snapprof_thread_t *self;
    char *dir = tu_make_tmpdir("events-drops");
    char path[512];
    snprintf(path, sizeof path, "%s/drops.json", dir);
    snapprof_builder_t *tb;
    ASSERT_OK(snapprof_trace_builder_create(path, &tb));
    snapprof_profiler_t *p = start_profiler(&log, 10000000u, 3600000000000u, tb, &self);
    const int pairs = 3 * SNAPPROF__EVENT_RING;
    char name[16];
    for (int i = 0; i < pairs; i++) {
        snprintf(name, sizeof name, "z%d", i % 100);
        ASSERT_OK(snapprof_zone_begin("outer"));
        ASSERT_OK(snapprof_zone_begin(name));
        ASSERT_OK(snapprof_zone_end());
        ASSERT_OK(snapprof_zone_end());
    }
    stop_profiler(p, self);
    printf("%d events made, %zu kept, %llu dropped, %llu lost\n", 4 * pairs, log.event_count,
           (unsigned long long)log.stats.events_dropped, (unsigned long long)log.stats.events_lost);
    ASSERT_LE(log.event_count, SNAPPROF__EVENT_RING);
    ASSERT_GT(log.event_count, SNAPPROF__EVENT_RING - 8);
    ASSERT_EQ(log.event_count + log.stats.events_dropped, (uint64_t)4 * pairs);
    ASSERT_EQ(log.stats.events_lost, 0);
    /* The oldest were kept, in order, and they pair up. */
    int depth = 0;
    for (size_t i = 0; i < log.event_count; i++) {
        const snapprof_event_t *e = &log.events[i];
        if (i < 4 * 100) {
            size_t k = i / 4;
            snprintf(name, sizeof name, "z%zu", k % 100);
            ASSERT_STR_EQ(e->name, i % 4 == 0 || i % 4 == 3 ? "outer" : name);
        }
        if (e->kind == SNAPPROF_EVENT_ZONE_BEGIN)
            depth++;
        else
            depth--;
        ASSERT_EQ((uint32_t)(e->kind == SNAPPROF_EVENT_ZONE_BEGIN ? depth : depth + 1), e->depth);
        ASSERT_GE(depth, 0);
    }
    ASSERT_EQ(depth, 0);
    /* The trace says what it lacks. */
    char cmd[1024], want[128];
    snprintf(cmd, sizeof cmd, "head -c 300 '%s'", path);
    int status;
    char *head = tu_run(cmd, &status);
    snprintf(want, sizeof want, "\"events_dropped\":%llu,\"events_lost\":0",
             (unsigned long long)log.stats.events_dropped);
    ASSERT_CONTAINS(head, want);
    free(head);
    unlink(path);
    rmdir(dir);
    free(dir);
    sl_free(&log);
}

__attribute__((noinline)) void events_physics_hot(uint64_t ns)
{
    tu_burn_cpu_ns(ns);
    __asm__ volatile("" ::: "memory"); /* no tail call: keep this frame */
}

__attribute__((noinline)) void events_render_hot(uint64_t ns)
{
    tu_burn_cpu_ns(ns);
    __asm__ volatile("" ::: "memory"); /* no tail call: keep this frame */
}

/* A frame loop profiled into a trace: the checker accepts it, zones sit
 * on their own tracks inside their app frames, every counter value and
 * instant is there, and each hitch frame's zone times name physics as
 * the zone that grew. */
static void test_trace_tracks(void)
{
    char *dir = tu_make_tmpdir("events-trace");
    char path[512];
    snprintf(path, sizeof path, "%s/trace.json", dir);
    snapprof_builder_t *tb;
    ASSERT_OK(snapprof_trace_builder_create(path, &tb));
    sample_log_t log = {0};
    snapprof_thread_t *self;
    snapprof_profiler_t *p = start_profiler(&log, 1000000u, 0, tb, &self);
    const int frames = 40;
    for (int f = 1; f <= frames; f++) {
        int hitch = f % 10 == 0;
        ASSERT_OK(snapprof_app_frame_begin((uint64_t)f));
        ASSERT_OK(snapprof_zone_begin("update"));
        ASSERT_OK(snapprof_zone_begin("physics"));
        events_physics_hot(hitch ? 25000000u : 1000000u);
        ASSERT_OK(snapprof_zone_end());
        ASSERT_OK(snapprof_zone_end());
        ASSERT_OK(snapprof_zone_begin("render"));
        events_render_hot(1000000u);
        ASSERT_OK(snapprof_counter_set("draw_calls", 100 + f));
        ASSERT_OK(snapprof_zone_end());
        if (f % 8 == 0)
            ASSERT_OK(snapprof_instant("gc"));
        ASSERT_OK(snapprof_app_frame_end((uint64_t)f));
    }
    stop_profiler(p, self);
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "python3 '%s/check_trace.py' '%s' --frames %d --zones %d --instants %d "
             "--counter draw_calls:%d --zones-in-frames --hitch-zone physics:%d",
             SNAPPROF_TEST_SOURCE_DIR, path, frames, 3 * frames, frames / 8, frames, frames / 10);
    int status;
    char *out = tu_run(cmd, &status);
    printf("%s", out);
    free(out);
    ASSERT_EQ(status, 0);
    unlink(path);
    rmdir(dir);
    free(dir);
    sl_free(&log);
}

static void *churn_thread(void *arg)
{
    (void)arg;
    for (int i = 0; i < 2000; i++) {
        ASSERT_OK(snapprof_zone_begin("churn"));
        ASSERT_OK(snapprof_counter_set("churn_count", i));
        ASSERT_OK(snapprof_zone_end());
    }
    ASSERT_OK(snapprof_zone_begin("exiting"));
    return NULL; /* exits inside it: the exit ends it and hands over the ring */
}

/* Threads that make events and exit while a profiler drains every
 * millisecond: every event made is kept or counted as dropped, and each
 * thread's zones pair up, the one left open ended by the exit. */
static void test_threads_churn(void)
{
    sample_log_t log = {0};
    snapprof_thread_t *self;
    snapprof_profiler_t *p = start_profiler(&log, 1000000u, 0, NULL, &self);
    enum { ROUNDS = 8, THREADS = 3 };
    for (int r = 0; r < ROUNDS; r++) {
        pthread_t th[THREADS];
        for (int i = 0; i < THREADS; i++)
            ASSERT_EQ(pthread_create(&th[i], NULL, churn_thread, NULL), 0);
        for (int i = 0; i < THREADS; i++)
            ASSERT_EQ(pthread_join(th[i], NULL), 0);
    }
    stop_profiler(p, self);
    uint64_t made = (uint64_t)ROUNDS * THREADS * (3 * 2000 + 2);
    printf("%llu events made, %zu kept, %llu dropped, %llu lost\n", (unsigned long long)made,
           log.event_count, (unsigned long long)log.stats.events_dropped,
           (unsigned long long)log.stats.events_lost);
    /* Every event is kept or counted: dropped (a thread's full ring) or
     * lost (the shared log overran before the sampling thread read it,
     * which a loaded machine that stalls the sampler for most of a second
     * does: 1 run in 20 beside two busy loops). */
    ASSERT_EQ(log.event_count + log.stats.events_dropped + log.stats.events_lost, made);
    if (log.stats.events_lost != 0) {
        printf("the log overran: its nesting is not whole, not checked\n");
        sl_free(&log);
        return;
    }
    /* Per thread (tids may be reused, so in order): depth never below 0,
     * 0 at the end. */
    int depth[65536] = {0};
    size_t exits = 0;
    for (size_t i = 0; i < log.event_count; i++) {
        const snapprof_event_t *e = &log.events[i];
        int *d = &depth[e->tid & 0xffff];
        if (e->kind == SNAPPROF_EVENT_ZONE_BEGIN)
            ASSERT_EQ(++*d, (int)e->depth);
        else if (e->kind == SNAPPROF_EVENT_ZONE_END)
            ASSERT_EQ((*d)--, (int)e->depth);
        ASSERT_GE(*d, 0);
        exits += e->kind == SNAPPROF_EVENT_ZONE_END && strcmp(e->name, "exiting") == 0;
    }
    for (size_t i = 0; i < 65536; i++)
        ASSERT_EQ(depth[i], 0);
    if (log.stats.events_dropped == 0)
        ASSERT_EQ(exits, ROUNDS * THREADS);
    sl_free(&log);
}

/* ------------------------------------------------------------------------ */
/* cost                                                                     */
/* ------------------------------------------------------------------------ */

static int sort_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* ns per call of `which` over batches small enough for the buffer, while
 * a profiler records and drains every millisecond; the median batch. */
static double cost(int which, int batches)
{
    enum { BATCH = 1000 };
    double *v = malloc((size_t)batches * sizeof *v);
    ASSERT_NOT_NULL(v);
    for (int b = 0; b < batches; b++) {
        uint64_t t0 = tu_mono_ns();
        for (int i = 0; i < BATCH; i++) {
            switch (which) {
            case 0:
                snapprof_zone_begin("physics");
                snapprof_zone_end();
                break;
            case 1:
                snapprof_instant("gc");
                break;
            case 2:
                snapprof_counter_set("draw_calls", i);
                break;
            case 3:
                snapprof_counter_set("attached", i);
                break;
            case 4:
                snapprof_func_enter((void *)cost);
                snapprof_func_exit((void *)cost);
                break;
            default:
                snapprof_label_set_str(SNAPPROF_LABEL_THREAD, "request", (i & 1) ? "a" : "b");
                break;
            }
        }
        v[b] = (double)(tu_mono_ns() - t0) / BATCH / (which == 0 || which == 4 ? 2 : 1);
        usleep(2000); /* a tick drains the buffer */
    }
    qsort(v, (size_t)batches, sizeof *v, sort_double);
    double median = v[batches / 2];
    free(v);
    return median;
}

/* The calls are meant for every zone of every frame: no syscall, no lock.
 * Prints the median per call (beside a label set) and checks it stays far
 * below a microsecond. */
static void test_cost(void)
{
    sample_log_t log = {0};
    snapprof_thread_t *self;
    snapprof_profiler_t *p = start_profiler(&log, 1000000u, 0, NULL, &self);
    ASSERT_OK(snapprof_counter_attach("attached", NULL, 1));
    const char *what[6] = {"zone_begin/zone_end (per call)",
                           "instant",
                           "counter_set",
                           "counter_set (attached)",
                           "func_enter/func_exit (per call)",
                           "label_set_str (thread)"};
    int batches = tu_sanitizer_build() ? 20 : 200;
    for (int which = 0; which < 6; which++) {
        double ns = cost(which, batches);
        printf("%s: %.1f ns median\n", what[which], ns);
        ASSERT_LT(ns, tu_sanitizer_build() ? 20000 : 1000);
    }
    stop_profiler(p, self);
    printf("events kept %zu, dropped %llu\n", log.event_count,
           (unsigned long long)log.stats.events_dropped);
    ASSERT_GT(log.event_count, 0);
    sl_free(&log);
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"misuse", test_misuse},
        {"name_table_full", test_name_table_full},
        {"capture_labels", test_capture_labels},
        {"zones_exact", test_zones_exact},
        {"overflow_counts_drops", test_overflow_counts_drops},
        {"trace_tracks", test_trace_tracks},
        {"calls_end_at_exit", test_calls_end_at_exit},
        {"threads_churn", test_threads_churn},
        {"cost", test_cost},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
