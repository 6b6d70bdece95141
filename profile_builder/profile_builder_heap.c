/* Heap profile builders: sampled allocations and frees, scaled as Go's
 * scaleHeapSample scales them, into a pprof heap profile in Go's layout
 * (alloc_objects, alloc_space, inuse_objects, inuse_space); and the peak
 * builder, the same profile as it stood when the estimated bytes in use
 * were highest. The interning, aggregation by stack and labels, and writing
 * are the pprof builder's (profile_builder_pprof.h); this file keeps the
 * scaled values, which are fractional, beside its samples. The public side
 * is <snapprof/heap_profile.h>. */
#include "profile_builder/profile_builder_pprof.h"

#include "common/stats_text.h"

#include <snapprof/heap_profile.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* The profiler's default interval (Go's MemProfileRate, jemalloc's
 * lg_prof_sample 19). */
#define HEAP_DEFAULT_INTERVAL ((uint64_t)512 * 1024)

/* Scaled totals of one stack (and label set). */
typedef struct heap_totals {
    double alloc_objects, alloc_space, free_objects, free_space;
} heap_totals_t;

/* What the heap builders keep beside each pprof sample, by its index. */
typedef struct heap_entry {
    heap_totals_t now;
    heap_totals_t at_peak; /* the peak builder: the totals at the highest in-use */
    int dirty;             /* the peak builder: now changed since at_peak was taken */
} heap_entry_t;

typedef struct heap_builder {
    pprof_builder_t p; /* first: the pprof functions take it */
    int peak;
    uint64_t interval;
    uint64_t allocs, frees; /* heap samples received */
    heap_entry_t *entries;  /* n_entries == p.n_samples */
    size_t n_entries, cap_entries;
    double inuse; /* estimated bytes in use now, over every stack */
    /* The peak builder: the entries changed since the last maximum, the
     * maximum, and when it was reached. */
    uint32_t *dirty;
    size_t n_dirty, cap_dirty;
    double peak_inuse;
    uint64_t peak_ns;
    int64_t s_alloc_objects, s_alloc_space, s_inuse_objects, s_inuse_space, s_space, s_bytes;
} heap_builder_t;

/* How many allocations of this size one sample stands for: Go's
 * scaleHeapSample, 1/(1 - exp(-size/R)). An allocation of S bytes is
 * sampled with probability 1 - exp(-S/R), so this is the inverse. An
 * interval of 1 (every allocation recorded) scales nothing; a sample of no
 * bytes counts nothing, as in Go. */
static double heap_scale(uint64_t bytes, uint64_t interval)
{
    if (bytes == 0)
        return 0;
    if (interval <= 1)
        return 1;
    return 1 / (1 - exp(-(double)bytes / (double)interval));
}

/* The peak builder's snapshot: every entry changed since the last maximum
 * takes its current totals. Each change is copied at most once per
 * maximum, and each entry is on the list at most once, so the snapshots
 * cost no more than the samples did. */
static void heap_take_peak(heap_builder_t *h)
{
    for (size_t i = 0; i < h->n_dirty; i++) {
        heap_entry_t *e = &h->entries[h->dirty[i]];
        e->at_peak = e->now;
        e->dirty = 0;
    }
    h->n_dirty = 0;
}

static int heap_on_sample(void *user_data, const snapprof_sample_t *sample)
{
    heap_builder_t *h = user_data;
    if (sample == NULL)
        return -EINVAL;
    snapprof_sample_kind_t kind = SNAPPROF_SAMPLE_KIND(sample);
    if (kind != SNAPPROF_SAMPLE_KIND_HEAP_ALLOC && kind != SNAPPROF_SAMPLE_KIND_HEAP_FREE)
        return 0; /* time samples belong to the CPU profile */
    sample_key_t key;
    int err = snapprof__pprof_sample_key(&h->p, sample, &key);
    if (err < 0)
        return err;
    /* Room for a new entry first, so that a sample that fails leaves
     * nothing half-counted. */
    heap_entry_t *entries =
        reserve(h->entries, &h->cap_entries, h->p.n_samples + 1, sizeof *entries);
    if (entries == NULL)
        return -ENOMEM;
    h->entries = entries;
    if (h->peak) {
        uint32_t *dirty = reserve(h->dirty, &h->cap_dirty, h->p.n_samples + 1, sizeof *dirty);
        if (dirty == NULL)
            return -ENOMEM;
        h->dirty = dirty;
    }
    int64_t none[VALUE_COUNT] = {0};
    int index = snapprof__pprof_count_sample(&h->p, &key, none);
    if (index < 0)
        return index;
    while (h->n_entries < h->p.n_samples)
        memset(&h->entries[h->n_entries++], 0, sizeof *h->entries);

    heap_entry_t *e = &h->entries[index];
    /* A record that stops before `bytes` says nothing of its size, and
     * counts nothing. */
    uint64_t bytes = SNAPPROF_SAMPLE_HAS(sample, bytes) ? sample->bytes : 0;
    double objects = heap_scale(bytes, h->interval);
    double space = objects * (double)bytes;
    if (kind == SNAPPROF_SAMPLE_KIND_HEAP_ALLOC) {
        e->now.alloc_objects += objects;
        e->now.alloc_space += space;
        h->inuse += space;
        h->allocs++;
    } else {
        e->now.free_objects += objects;
        e->now.free_space += space;
        h->inuse -= space;
        h->frees++;
    }
    if (h->peak) {
        if (!e->dirty) {
            e->dirty = 1;
            h->dirty[h->n_dirty++] = (uint32_t)index;
        }
        /* Only an allocation raises the total, so only one can make a new
         * maximum. */
        if (kind == SNAPPROF_SAMPLE_KIND_HEAP_ALLOC && h->inuse > h->peak_inuse) {
            heap_take_peak(h);
            h->peak_inuse = h->inuse;
            h->peak_ns = sample->timestamp_ns;
        }
    }
    return 0;
}

/* A scaled total as a pprof value: rounded (the sums are of fractional
 * estimates), never negative (a free whose allocation this builder did not
 * see), at most INT64_MAX. */
static int64_t heap_value(double v)
{
    if (!(v > 0))
        return 0;
    if (v >= 9.2e18)
        return INT64_MAX;
    return llround(v);
}

static int heap_on_profile_completed(void *user_data, const snapprof_profile_info_t *info)
{
    heap_builder_t *h = user_data;
    if (info == NULL)
        return -EINVAL;
    double alloc_space = 0;
    for (size_t i = 0; i < h->n_entries; i++) {
        const heap_totals_t *t = h->peak ? &h->entries[i].at_peak : &h->entries[i].now;
        int64_t *v = h->p.samples[i]->values;
        v[0] = heap_value(t->alloc_objects);
        v[1] = heap_value(t->alloc_space);
        v[2] = heap_value(t->alloc_objects - t->free_objects);
        v[3] = heap_value(t->alloc_space - t->free_space);
        alloc_space += t->alloc_space;
    }

    /* One line above every report: what the estimates rest on. */
    char line[SNAPPROF__COMMENT_MAX];
    const char *lines[1] = {line};
    if (h->peak) {
        double at_s = h->allocs != 0 && h->peak_ns >= info->start_mono_ns
                          ? (double)(h->peak_ns - info->start_mono_ns) / 1e9
                          : 0;
        snprintf(line, sizeof line,
                 "snapprof: heap peak, an estimated %.0f bytes in use at %.3f s, "
                 "one sample per %llu bytes",
                 h->peak_inuse > 0 ? h->peak_inuse : 0, at_s, (unsigned long long)h->interval);
    } else {
        snprintf(line, sizeof line,
                 "snapprof: heap, %llu sampled allocations and %llu frees, one sample per %llu "
                 "bytes: an estimated %.0f bytes allocated, %.0f in use",
                 (unsigned long long)h->allocs, (unsigned long long)h->frees,
                 (unsigned long long)h->interval, alloc_space, h->inuse > 0 ? h->inuse : 0);
    }
    /* Go's runtime/pprof heap layout (protomem.go); merging needs these
     * names, units and order, so never change them. */
    pprof_layout_t layout = {
        .n_types = 4,
        .type_names = {h->s_alloc_objects, h->s_alloc_space, h->s_inuse_objects, h->s_inuse_space},
        .type_units = {h->p.s_count, h->s_bytes, h->p.s_count, h->s_bytes},
        .period_type = h->s_space,
        .period_unit = h->s_bytes,
        .period = h->interval > INT64_MAX ? INT64_MAX : (int64_t)h->interval,
        .default_type = h->s_inuse_space,
        .comments = lines,
        .n_comments = 1,
        /* Stacks first seen after the peak had nothing then; a zero-byte
         * sample counts nothing (Go's rule). */
        .skip_empty = 1,
    };
    return snapprof__pprof_write(&h->p, info, &layout);
}

static void heap_destroy(void *user_data)
{
    heap_builder_t *h = user_data;
    if (h == NULL)
        return;
    snapprof__pprof_release(&h->p);
    free(h->entries);
    free(h->dirty);
    free(h);
}

static const snapprof_builder_ops_t heap_ops = {
    .version = 2, /* receives heap samples */
    .name = "heap",
    .xOnProfileStarted = NULL,
    .xOnSample = heap_on_sample,
    .xOnProfileCompleted = heap_on_profile_completed,
    .xDestroy = heap_destroy,
};

static const snapprof_builder_ops_t heap_peak_ops = {
    .version = 2,
    .name = "heap_peak",
    .xOnProfileStarted = NULL,
    .xOnSample = heap_on_sample,
    .xOnProfileCompleted = heap_on_profile_completed,
    .xDestroy = heap_destroy,
};

static int heap_init(heap_builder_t *h)
{
    int err = snapprof__pprof_init(&h->p);
    if (err != 0)
        return err;
    h->s_alloc_objects = snapprof__pprof_intern_string(&h->p, "alloc_objects");
    h->s_alloc_space = snapprof__pprof_intern_string(&h->p, "alloc_space");
    h->s_inuse_objects = snapprof__pprof_intern_string(&h->p, "inuse_objects");
    h->s_inuse_space = snapprof__pprof_intern_string(&h->p, "inuse_space");
    h->s_space = snapprof__pprof_intern_string(&h->p, "space");
    h->s_bytes = snapprof__pprof_intern_string(&h->p, "bytes");
    if (h->s_alloc_objects < 0 || h->s_alloc_space < 0 || h->s_inuse_objects < 0 ||
        h->s_inuse_space < 0 || h->s_space < 0 || h->s_bytes < 0)
        return -ENOMEM;
    return 0;
}

static int heap_create(const snapprof_builder_ops_t *ops, const char *path,
                       snapprof_builder_t **out)
{
    if (out == NULL)
        return -EINVAL;
    *out = NULL;
    heap_builder_t *h = calloc(1, sizeof *h);
    if (h == NULL)
        return -ENOMEM;
    h->peak = ops == &heap_peak_ops;
    h->interval = HEAP_DEFAULT_INTERVAL;
    int err = snapprof__output_resolve(path, &h->p.out);
    if (err == 0)
        err = heap_init(h);
    if (err == 0)
        err = snapprof_builder_create(ops, h, out);
    if (err == 0)
        (*out)->output = &h->p.out;
    if (err != 0)
        heap_destroy(h);
    return err;
}

int snapprof_heap_builder_create(const char *path, snapprof_builder_t **out)
{
    return heap_create(&heap_ops, path, out);
}

int snapprof_heap_peak_builder_create(const char *path, snapprof_builder_t **out)
{
    return heap_create(&heap_peak_ops, path, out);
}

int snapprof_heap_builder_set_interval(snapprof_builder_t *builder, uint64_t bytes)
{
    if (builder == NULL || (builder->ops != &heap_ops && builder->ops != &heap_peak_ops) ||
        bytes == 0)
        return -EINVAL;
    heap_builder_t *h = builder->user_data;
    if (h->allocs != 0 || h->frees != 0)
        return SNAPPROF_ESTATE;
    h->interval = bytes;
    return 0;
}
