/* A sample-keeping builder for tests (see test_sample_log.h). */
#include "test_sample_log.h"
#include "test.h"
#include "test_util.h"

#include <stdlib.h>
#include <string.h>

static int sl_on_sample(void *ud, const snapprof_sample_t *s)
{
    sample_log_t *log = ud;
    if (log->count == log->cap) {
        /* Readers touch samples[] only after the profile completed;
         * while it runs they read the per-thread counts. */
        size_t cap = log->cap ? log->cap * 2 : 1024;
        sl_sample_t *n = realloc(log->samples, cap * sizeof *n);
        ASSERT_NOT_NULL(n);
        log->samples = n;
        log->cap = cap;
    }
    sl_sample_t *d = &log->samples[log->count];
    memset(d, 0, sizeof *d);
    d->tid = s->tid;
    d->flags = s->flags;
    d->timestamp_ns = s->timestamp_ns;
    d->frame_count = s->frame_count < SL_MAX_FRAMES ? s->frame_count : SL_MAX_FRAMES;
    memcpy(d->frames, s->frames, d->frame_count * sizeof *s->frames);
    ASSERT_LE(s->label_count, SL_MAX_LABELS);
    d->label_count = s->label_count;
    for (size_t i = 0; i < s->label_count; i++) {
        const snapprof_label_t *l = &s->labels[i];
        sl_label_t *c = &d->labels[i];
        ASSERT_NOT_NULL(l->key);
        ASSERT_LT(strlen(l->key), sizeof c->key);
        strcpy(c->key, l->key);
        c->is_str = l->str != NULL;
        if (l->str) {
            ASSERT_LT(strlen(l->str), sizeof c->str);
            strcpy(c->str, l->str);
        }
        if (l->num_unit) {
            ASSERT_LT(strlen(l->num_unit), sizeof c->unit);
            strcpy(c->unit, l->num_unit);
        }
        c->num = l->num;
    }
    log->count++;
    for (int i = 0; i < 16; i++) {
        int tid = atomic_load(&log->per_tid[i].tid);
        if (tid == 0)
            atomic_store(&log->per_tid[i].tid, tid = s->tid);
        if (tid == s->tid) {
            atomic_fetch_add(&log->per_tid[i].n, 1);
            break;
        }
    }
    return 0;
}

static int sl_on_completed(void *ud, const snapprof_profile_info_t *info)
{
    sample_log_t *log = ud;
    log->app_frame_count = info->app_frame_count;
    if (info->app_frame_count > 0) {
        log->app_frames = malloc(info->app_frame_count * sizeof *log->app_frames);
        ASSERT_NOT_NULL(log->app_frames);
        memcpy(log->app_frames, info->app_frames, info->app_frame_count * sizeof *log->app_frames);
    }
    free(log->events);
    log->events = NULL;
    log->event_count = info->event_count;
    if (info->event_count > 0) {
        log->events = malloc(info->event_count * sizeof *log->events);
        ASSERT_NOT_NULL(log->events);
        memcpy(log->events, info->events, info->event_count * sizeof *log->events);
    }
    if (info->stats != NULL)
        log->stats = *info->stats;
    atomic_store(&log->completed, 1);
    return 0;
}

static const snapprof_builder_ops_t sl_ops = {
    .version = 1, /* receives time samples only */
    .name = "test-sample-log",
    .xOnSample = sl_on_sample,
    .xOnProfileCompleted = sl_on_completed,
};

snapprof_builder_t *sl_builder(sample_log_t *log)
{
    return tu_builder(&sl_ops, log);
}

const sl_label_t *sl_label(const sl_sample_t *s, const char *key)
{
    for (size_t i = 0; i < s->label_count; i++)
        if (strcmp(s->labels[i].key, key) == 0)
            return &s->labels[i];
    return NULL;
}

size_t sl_count_tid(sample_log_t *log, pid_t tid)
{
    for (int i = 0; i < 16; i++)
        if (atomic_load(&log->per_tid[i].tid) == tid)
            return atomic_load(&log->per_tid[i].n);
    return 0;
}

void sl_free(sample_log_t *log)
{
    free(log->samples);
    free(log->app_frames);
    free(log->events);
    memset(log, 0, sizeof *log);
}
