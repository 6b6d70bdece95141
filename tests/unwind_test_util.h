/* Helpers for the unwinder tests and the unwind benchmark: worker threads
 * with a known thread entry, a builder that keeps whole stacks, a profiler
 * run with a chosen unwinder, and symbol names by pc. */
#ifndef SNAPPROF_TESTS_UNWIND_TEST_UTIL_H
#define SNAPPROF_TESTS_UNWIND_TEST_UTIL_H

#include <snapprof/profile_builder.h>
#include <snapprof/unwinder.h>

#include <pthread.h>
#include <stdatomic.h>

/* UW_CFI_TABLE profiles with the default chain plus the CFI table unwinder
 * in front of libunwind (JIT, CFI tables, libunwind, .debug_frame, frame
 * pointers). With SNAPPROF_TEST_UNWINDER=cfi_table in the environment,
 * UW_DEFAULT runs that chain too, so that every test written for the
 * default chain can be run again with the tables (tests/unwinder.cmake). */
typedef enum {
    UW_DEFAULT = 0,
    UW_FP,
    UW_LIBUNWIND,
    UW_HYBRID,
    UW_CFI_TABLE,
    UW_KIND_COUNT
} uw_kind_t;

/* Defines NAME(depth), a recursion of depth frames (noinline, its result
 * kept live so that no frame is folded away) whose deepest frame returns
 * BOTTOM, an expression: the deep stacks of the tests' workloads, by name. */
#define UW_RECURSION(NAME, BOTTOM)                                                                 \
    __attribute__((noinline)) uint64_t NAME(int depth)                                             \
    {                                                                                              \
        if (depth == 0)                                                                            \
            return BOTTOM;                                                                         \
        uint64_t r = NAME(depth - 1);                                                              \
        __asm__ volatile("" : "+r"(r));                                                            \
        return r + 1;                                                                              \
    }

const char *uw_kind_name(uw_kind_t kind);
/* Creates the unwinder of that kind (UW_DEFAULT: none, returns NULL;
 * UW_CFI_TABLE: the CFI table unwinder alone). */
snapprof_unwinder_t *uw_create_unwinder(uw_kind_t kind);

/* A worker thread. Its entry function lives in the test's own file (so it
 * is compiled with the test's flags) and must call uw_worker_enter() first
 * and then run until w->stop. */
typedef struct uw_worker {
    pthread_t th;
    void *(*entry)(void *); /* gets the uw_worker_t */
    void *arg;              /* for the entry */
    size_t stack_size;      /* 0: default */
    snapprof_thread_t *token;
    pid_t tid;
    /* The thread's entry frames as caller pcs: [0] the outermost (clone3),
     * [1] the one it calls (start_thread). */
    uintptr_t entry_pc[2];
    atomic_int ready, stop;
} uw_worker_t;

void uw_worker_start(uw_worker_t *w);
void uw_worker_stop(uw_worker_t *w);
/* Registers the calling worker, finds its outermost frame, says ready. */
void uw_worker_enter(uw_worker_t *w);

/* A builder that keeps every sample's whole stack. */
typedef struct uw_sample {
    pid_t tid;
    unsigned flags;
    uint64_t cpu_ns;
    size_t first, count; /* frames[first .. first + count) of the collector */
} uw_sample_t;

typedef struct uw_collector {
    uw_sample_t *samples;
    size_t count, cap;
    snapprof_frame_t *frames;
    size_t frame_count, frame_cap;
    snapprof_stats_t stats; /* as completed */
    atomic_size_t live;     /* samples so far, readable while running */
} uw_collector_t;

snapprof_builder_t *uw_collector_builder(uw_collector_t *c);
void uw_collector_free(uw_collector_t *c);
static inline const snapprof_frame_t *uw_frames(const uw_collector_t *c, const uw_sample_t *s)
{
    return c->frames + s->first;
}

/* One profiler run over a worker. */
typedef struct uw_run {
    uw_kind_t kind;
    uint64_t interval_ns;       /* 0: 1 ms */
    size_t min_samples;         /* stop after this many samples ... */
    uint64_t timeout_ns;        /* ... or this long (0: 60 s, 15 s with sanitizers) */
    size_t max_frames;          /* 0: default */
    size_t stack_buffer_size;   /* 0: default */
    snapprof_unwinder_t *extra; /* appended after kind's unwinder; owned by the run */
    snapprof_trigger_t trigger; /* 0: the default (auto) */
} uw_run_t;

void uw_profile(uw_worker_t *w, const uw_run_t *run, uw_collector_t *out);

/* The function whose code holds pc (the outermost of its inline frames),
 * cached; "?" when unknown. */
const char *uw_name(uintptr_t pc);
int uw_frame_is(const snapprof_frame_t *f, const char *name);
/* Index of the first frame named name, or -1. */
long uw_find(const snapprof_frame_t *frames, size_t n, const char *name);

/* A complete stack: no marker, and its outermost frame is the thread's
 * entry (clone3, or start_thread where a walk can go no further). */
int uw_complete(const snapprof_frame_t *frames, size_t n, const uw_worker_t *w);
/* Share of the worker's samples that are complete, in percent; prints a
 * line with the label. */
double uw_complete_rate(const uw_collector_t *c, const uw_worker_t *w, const char *label);
/* Prints one sample, symbolized (for failures). */
void uw_print_sample(const uw_collector_t *c, const uw_sample_t *s);

#endif
