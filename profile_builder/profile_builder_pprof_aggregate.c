/* pprof profile builder, aggregation: each sample's stack and labels become
 * a key, and samples with equal keys add up their values in one Sample
 * message; app-frame verdicts join the samples as labels at completion. */
#include "profile_builder/profile_builder_pprof.h"

#include "common/label_keys.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int label_same(const Snapprof__Pprof__Label *a, const Snapprof__Pprof__Label *b)
{
    return a->key == b->key && a->str == b->str && a->num == b->num && a->num_unit == b->num_unit;
}

static int sample_eq(const void *owner, uint32_t index, const void *key)
{
    const pprof_builder_t *b = owner;
    const Snapprof__Pprof__Sample *s = &b->samples[index]->msg;
    const sample_key_t *k = key;
    if (s->n_location_id != k->n_locations || s->n_label != k->n_labels)
        return 0;
    if (k->n_locations != 0 &&
        memcmp(s->location_id, k->locations, k->n_locations * sizeof *k->locations) != 0)
        return 0;
    for (size_t i = 0; i < k->n_labels; i++)
        if (!label_same(s->label[i], &k->labels[i]))
            return 0;
    return 1;
}

static uint64_t sample_hash(const sample_key_t *k)
{
    uint64_t h = hash_word(0, k->n_locations);
    for (size_t i = 0; i < k->n_locations; i++)
        h = hash_word(h, k->locations[i]);
    for (size_t i = 0; i < k->n_labels; i++) {
        const Snapprof__Pprof__Label *l = &k->labels[i];
        h = hash_word(h, (uint64_t)l->key);
        h = hash_word(h, (uint64_t)l->str);
        h = hash_word(h, (uint64_t)l->num);
        h = hash_word(h, (uint64_t)l->num_unit);
    }
    return hash_finish(h);
}

/* Adds a sample that has no equal yet, copying its key into the arena. */
static int add_sample(pprof_builder_t *b, const sample_key_t *k, uint64_t h, const int64_t *values)
{
    if (b->n_samples >= INT32_MAX || snapprof__index_reserve(&b->sample_index) < 0)
        return -ENOMEM;
    sample_entry_t **samples =
        reserve(b->samples, &b->cap_samples, b->n_samples + 1, sizeof *samples);
    if (samples == NULL)
        return -ENOMEM;
    b->samples = samples;
    sample_entry_t *e = arena_alloc(&b->arena, sizeof *e);
    uint64_t *locations = arena_alloc(&b->arena, k->n_locations * sizeof *locations);
    Snapprof__Pprof__Label **labels = arena_alloc(&b->arena, k->n_labels * sizeof *labels);
    Snapprof__Pprof__Label *storage = arena_alloc(&b->arena, k->n_labels * sizeof *storage);
    if (e == NULL || locations == NULL || labels == NULL || storage == NULL)
        return -ENOMEM;
    snapprof__pprof__sample__init(&e->msg);
    if (k->n_locations != 0)
        memcpy(locations, k->locations, k->n_locations * sizeof *locations);
    for (size_t i = 0; i < k->n_labels; i++) {
        storage[i] = k->labels[i];
        labels[i] = &storage[i];
    }
    memcpy(e->values, values, sizeof e->values);
    e->msg.n_location_id = k->n_locations;
    e->msg.location_id = locations;
    e->msg.n_value = VALUE_COUNT; /* the layout sets the count written */
    e->msg.value = e->values;
    e->msg.n_label = k->n_labels;
    e->msg.label = labels;
    b->samples[b->n_samples] = e;
    snapprof__index_insert(&b->sample_index, h, b->n_samples);
    return (int)b->n_samples++;
}

int snapprof__pprof_make_label(pprof_builder_t *b, Snapprof__Pprof__Label *label,
                               const snapprof_label_t *in)
{
    snapprof__pprof__label__init(label);
    label->key = snapprof__pprof_intern_string(b, in->key);
    if (label->key < 0)
        return -ENOMEM;
    if (in->str != NULL) {
        label->str = snapprof__pprof_intern_string(b, in->str);
        if (label->str < 0)
            return -ENOMEM;
    } else {
        label->num = in->num;
        if (in->num_unit != NULL && in->num_unit[0] != '\0') {
            label->num_unit = snapprof__pprof_intern_string(b, in->num_unit);
            if (label->num_unit < 0)
                return -ENOMEM;
        }
    }
    return 0;
}

/* A sample's nanoseconds as a pprof value: int64, so at most INT64_MAX. */
static int64_t clamp_value(uint64_t ns)
{
    return ns > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)ns;
}

int snapprof__pprof_count_sample(pprof_builder_t *b, const sample_key_t *key, const int64_t *values)
{
    uint64_t h = sample_hash(key);
    uint32_t found = snapprof__index_find(&b->sample_index, h, sample_eq, b, key);
    if (!found)
        return add_sample(b, key, h, values);
    sample_entry_t *e = b->samples[found - 1];
    /* Values are never negative (snapprof__pprof_on_sample clamps them);
     * a sum that would pass INT64_MAX (292 years of nanoseconds, or a
     * builder fed nonsense) stays there instead of overflowing. */
    for (int i = 0; i < VALUE_COUNT; i++)
        e->values[i] = values[i] > INT64_MAX - e->values[i] ? INT64_MAX : e->values[i] + values[i];
    return (int)(found - 1);
}

int snapprof__pprof_sample_key(pprof_builder_t *b, const snapprof_sample_t *sample,
                               sample_key_t *key)
{
    if (sample == NULL || (sample->frame_count != 0 && sample->frames == NULL) ||
        (sample->label_count != 0 && sample->labels == NULL))
        return -EINVAL;
    for (size_t i = 0; i < sample->label_count; i++)
        if (sample->labels[i].key == NULL || sample->labels[i].key[0] == '\0')
            return -EINVAL;
    if (sample->label_count > SIZE_MAX / 2)
        return -EINVAL;

    uint64_t *locations = reserve(b->scratch_locations, &b->cap_scratch_locations,
                                  sample->frame_count, sizeof *locations);
    if (locations == NULL)
        return -ENOMEM;
    b->scratch_locations = locations;
    size_t n_labels = sample->label_count + 2;
    Snapprof__Pprof__Label *labels =
        reserve(b->scratch_labels, &b->cap_scratch_labels, n_labels, sizeof *labels);
    if (labels == NULL)
        return -ENOMEM;
    b->scratch_labels = labels;

    for (size_t i = 0; i < sample->frame_count; i++) {
        int err = snapprof__pprof_intern_location(b, &sample->frames[i], &locations[i]);
        if (err < 0)
            return err;
    }

    /* Every sample says which thread it came from, so threads can be told
     * apart with -tags, -tagfocus and -tagroot. */
    snapprof_label_t thread_id = {.key = snapprof__key_thread_id, .num = sample->tid};
    snapprof_label_t thread_name = {.key = snapprof__key_thread_name,
                                    .str = sample->thread_name ? sample->thread_name : ""};
    int err = snapprof__pprof_make_label(b, &labels[0], &thread_id);
    if (err == 0)
        err = snapprof__pprof_make_label(b, &labels[1], &thread_name);
    for (size_t i = 0; err == 0 && i < sample->label_count; i++)
        err = snapprof__pprof_make_label(b, &labels[i + 2], &sample->labels[i]);
    if (err < 0)
        return err;

    *key = (sample_key_t){locations, sample->frame_count, labels, n_labels};
    return 0;
}

int snapprof__pprof_on_sample(void *user_data, const snapprof_sample_t *sample)
{
    pprof_builder_t *b = user_data;
    /* A CPU or wall profile weighs time only. Its ops say version 1, so
     * the profiler never hands it another kind; a caller driving the ops
     * directly gets the same. */
    if (sample != NULL && SNAPPROF_SAMPLE_KIND(sample) != SNAPPROF_SAMPLE_KIND_TIME)
        return 0;
    sample_key_t key;
    int err = snapprof__pprof_sample_key(b, sample, &key);
    if (err < 0)
        return err;
    int64_t values[VALUE_COUNT] = {1, clamp_value(sample->cpu_ns), clamp_value(sample->wall_ns)};
    err = snapprof__pprof_count_sample(b, &key, values);
    return err < 0 ? err : 0;
}

typedef struct frame_verdict {
    uint64_t id;
    int hitch;
} frame_verdict_t;

static int verdict_cmp(const void *a, const void *b)
{
    const frame_verdict_t *x = a, *y = b;
    return x->id < y->id ? -1 : x->id > y->id;
}

int snapprof__pprof_apply_hitches(pprof_builder_t *b, const snapprof_profile_info_t *info)
{
    if (info->app_frame_count == 0 || info->app_frames == NULL)
        return 0;
    int64_t s_frame = snapprof__pprof_find_string(b, snapprof__key_frame);
    if (s_frame < 0)
        return 0; /* no sample was taken during an app frame */
    int64_t s_hitch = snapprof__pprof_intern_string(b, snapprof__key_hitch);
    int64_t s_true = snapprof__pprof_intern_string(b, "true");
    int64_t s_false = snapprof__pprof_intern_string(b, "false");
    if (s_hitch < 0 || s_true < 0 || s_false < 0)
        return -ENOMEM;
    size_t n = info->app_frame_count;
    frame_verdict_t *v = malloc(n * sizeof *v);
    if (v == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        v[i] = (frame_verdict_t){info->app_frames[i].id, info->app_frames[i].hitch};
    qsort(v, n, sizeof *v, verdict_cmp);
    int err = 0;
    for (size_t i = 0; i < b->n_samples && err == 0; i++) {
        Snapprof__Pprof__Sample *s = &b->samples[i]->msg;
        const Snapprof__Pprof__Label *frame = NULL;
        int judged = 0;
        for (size_t k = 0; k < s->n_label; k++) {
            if (s->label[k]->key == s_frame && s->label[k]->str == 0)
                frame = s->label[k];
            judged |= s->label[k]->key == s_hitch;
        }
        if (frame == NULL || judged)
            continue;
        frame_verdict_t key = {(uint64_t)frame->num, 0};
        const frame_verdict_t *hit = bsearch(&key, v, n, sizeof *v, verdict_cmp);
        if (hit == NULL)
            continue;
        Snapprof__Pprof__Label **labels = arena_alloc(&b->arena, (s->n_label + 1) * sizeof *labels);
        Snapprof__Pprof__Label *hitch = arena_alloc(&b->arena, sizeof *hitch);
        if (labels == NULL || hitch == NULL) {
            err = -ENOMEM;
            break;
        }
        snapprof__pprof__label__init(hitch);
        hitch->key = s_hitch;
        hitch->str = hit->hitch ? s_true : s_false;
        if (s->n_label != 0)
            memcpy(labels, s->label, s->n_label * sizeof *labels);
        labels[s->n_label] = hitch;
        s->label = labels;
        s->n_label++;
    }
    free(v);
    return err;
}
