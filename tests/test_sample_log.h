/* A builder for tests that keeps every sample with copies of its labels and
 * its leaf pcs, and the app frames, events (zones, counters, instants) and
 * counters handed over at completion. Read it after
 * the profiler stopped. */
#ifndef SNAPPROF_TESTS_TEST_SAMPLE_LOG_H
#define SNAPPROF_TESTS_TEST_SAMPLE_LOG_H

#include <snapprof/profile_builder.h>

#include <stdatomic.h>

#define SL_MAX_LABELS 48
#define SL_MAX_FRAMES 16

typedef struct sl_label {
    char key[SNAPPROF_LABEL_KEY_MAX];
    char str[SNAPPROF_LABEL_STR_MAX];
    char unit[SNAPPROF_LABEL_UNIT_MAX];
    int is_str;
    int64_t num;
} sl_label_t;

typedef struct sl_sample {
    pid_t tid;
    unsigned flags;
    uint64_t timestamp_ns;
    size_t frame_count;
    snapprof_frame_t frames[SL_MAX_FRAMES]; /* innermost first */
    size_t label_count;
    sl_label_t labels[SL_MAX_LABELS];
} sl_sample_t;

typedef struct sample_log {
    sl_sample_t *samples;
    size_t count, cap;
    struct {
        atomic_int tid;
        atomic_size_t n;
    } per_tid[16]; /* sample counts by thread, readable while the profile runs */
    snapprof_app_frame_t *app_frames;
    size_t app_frame_count;
    snapprof_event_t *events; /* names point into the process's name table */
    size_t event_count;
    snapprof_stats_t stats;
    atomic_int completed;
} sample_log_t;

/* A builder feeding log (exits the test on failure). */
snapprof_builder_t *sl_builder(sample_log_t *log);

/* The label of s with key, or NULL. */
const sl_label_t *sl_label(const sl_sample_t *s, const char *key);

/* Samples of tid so far (safe while the profile runs). */
size_t sl_count_tid(sample_log_t *log, pid_t tid);

void sl_free(sample_log_t *log);

#endif
