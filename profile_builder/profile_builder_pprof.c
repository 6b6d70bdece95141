/* pprof profile builder: samples aggregated into a gzipped
 * perftools.profiles.Profile file, and the calls builder that writes
 * function timing the same way. This file: their life cycles. Interning is
 * profile_builder_pprof_intern.c, aggregation
 * profile_builder_pprof_aggregate.c, writing profile_builder_pprof_write.c;
 * the state they share is in profile_builder_pprof.h. */
#include "profile_builder/profile_builder_pprof.h"

#include "common/label_keys.h"
#include "events/events.h"
#include "module_cache/module_cache.h"

#include <errno.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* Lifecycle                                                                */
/* ------------------------------------------------------------------------ */

void snapprof__pprof_release(pprof_builder_t *b)
{
    snapprof__index_free(&b->string_index);
    snapprof__index_free(&b->mapping_index);
    snapprof__index_free(&b->location_index);
    snapprof__index_free(&b->function_index);
    snapprof__index_free(&b->sample_index);
    free(b->strings);
    free(b->mappings);
    free(b->locations);
    free(b->functions);
    free(b->samples);
    free(b->scratch_locations);
    free(b->scratch_labels);
    snapprof__arena_release(&b->arena);
    snapprof__output_free(&b->out);
}

static void pprof_destroy(void *user_data)
{
    pprof_builder_t *b = user_data;
    if (b == NULL)
        return;
    snapprof__pprof_release(b);
    free(b->mem);
    free(b);
}

static const snapprof_builder_ops_t pprof_ops = {
    .version = 1, /* receives time samples only */
    .name = "pprof",
    .xOnProfileStarted = NULL,
    .xOnSample = snapprof__pprof_on_sample,
    .xOnProfileCompleted = snapprof__pprof_on_profile_completed,
    .xDestroy = pprof_destroy,
};

/* The main executable's mapping becomes mapping[0]: pprof takes the first
 * mapping for the main binary. */
int snapprof__pprof_init(pprof_builder_t *b)
{
    if (snapprof__pprof_intern_string(b, "") != 0)
        return -ENOMEM;
    b->s_thread_id = snapprof__pprof_intern_string(b, snapprof__key_thread_id);
    b->s_thread_name = snapprof__pprof_intern_string(b, snapprof__key_thread_name);
    b->s_samples = snapprof__pprof_intern_string(b, "samples");
    b->s_count = snapprof__pprof_intern_string(b, "count");
    b->s_cpu = snapprof__pprof_intern_string(b, "cpu");
    b->s_wall = snapprof__pprof_intern_string(b, "wall");
    b->s_nanoseconds = snapprof__pprof_intern_string(b, "nanoseconds");
    if (b->s_thread_id < 0 || b->s_thread_name < 0 || b->s_samples < 0 || b->s_count < 0 ||
        b->s_cpu < 0 || b->s_wall < 0 || b->s_nanoseconds < 0)
        return -ENOMEM;
    const snapprof_module_t *main_module = snapprof__module_cache_main();
    if (main_module != NULL) {
        mapping_entry_t *unused;
        return snapprof__pprof_intern_mapping(b, main_module, &unused);
    }
    return 0;
}

int snapprof_pprof_builder_create(const char *path, snapprof_builder_t **out)
{
    if (out == NULL)
        return -EINVAL;
    *out = NULL;
    pprof_builder_t *b = calloc(1, sizeof *b);
    if (b == NULL)
        return -ENOMEM;
    int err = snapprof__output_resolve(path, &b->out);
    if (err == 0)
        err = snapprof__pprof_init(b);
    if (err == 0)
        err = snapprof_builder_create(&pprof_ops, b, out);
    if (err == 0)
        (*out)->output = &b->out;
    if (err != 0)
        pprof_destroy(b);
    return err;
}

int snapprof_pprof_builder_create_in_memory(snapprof_builder_t **out)
{
    if (out == NULL)
        return -EINVAL;
    *out = NULL;
    pprof_builder_t *b = calloc(1, sizeof *b);
    if (b == NULL)
        return -ENOMEM;
    b->in_memory = 1;
    int err = snapprof__pprof_init(b);
    if (err == 0)
        err = snapprof_builder_create(&pprof_ops, b, out);
    if (err != 0)
        pprof_destroy(b);
    return err;
}

int snapprof_pprof_builder_take_bytes(snapprof_builder_t *builder, void **bytes, size_t *size)
{
    if (builder == NULL || builder->ops != &pprof_ops || bytes == NULL || size == NULL)
        return -EINVAL;
    pprof_builder_t *b = builder->user_data;
    if (!b->in_memory)
        return -EINVAL;
    if (b->mem == NULL)
        return -ENODATA;
    *bytes = b->mem;
    *size = b->mem_len;
    b->mem = NULL;
    b->mem_len = 0;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* The calls builder                                                        */
/* ------------------------------------------------------------------------ */

typedef struct calls_visit {
    pprof_builder_t *b;
    int err;
    snapprof_frame_t frames[SNAPPROF_CALL_DEPTH_MAX];
} calls_visit_t;

/* One call path becomes one sample: its functions (innermost first) as
 * locations, its calls and self time as values. */
static void calls_add_path(void *ud, pid_t tid, const uintptr_t *path, size_t depth, uint64_t calls,
                           uint64_t self_ns)
{
    calls_visit_t *v = ud;
    if (v->err != 0)
        return;
    for (size_t i = 0; i < depth; i++)
        v->frames[i] = (snapprof_frame_t){
            .pc = path[i], .module = snapprof_module_find(path[i]), .kind = SNAPPROF_FRAME_NATIVE};
    pprof_builder_t *b = v->b;
    uint64_t *locations =
        reserve(b->scratch_locations, &b->cap_scratch_locations, depth + 1, sizeof *locations);
    if (locations == NULL) {
        v->err = -ENOMEM;
        return;
    }
    b->scratch_locations = locations;
    Snapprof__Pprof__Label *label =
        reserve(b->scratch_labels, &b->cap_scratch_labels, 1, sizeof *label);
    if (label == NULL) {
        v->err = -ENOMEM;
        return;
    }
    b->scratch_labels = label;
    for (size_t i = 0; i < depth && v->err == 0; i++)
        v->err = snapprof__pprof_intern_location(b, &v->frames[i], &locations[i]);
    snapprof_label_t thread_id = {.key = snapprof__key_thread_id, .num = tid};
    if (v->err == 0)
        v->err = snapprof__pprof_make_label(b, &label[0], &thread_id);
    if (v->err != 0)
        return;
    sample_key_t key = {locations, depth, label, 1};
    int64_t values[VALUE_COUNT] = {(int64_t)calls, (int64_t)self_ns};
    int index = snapprof__pprof_count_sample(b, &key, values);
    v->err = index < 0 ? index : 0;
}

static int calls_on_sample(void *user_data, const snapprof_sample_t *sample)
{
    (void)user_data;
    (void)sample;
    return 0; /* the calls come from the function timing, not from samples */
}

static int calls_on_profile_completed(void *user_data, const snapprof_profile_info_t *info)
{
    pprof_builder_t *b = user_data;
    if (info == NULL)
        return -EINVAL;
    /* The totals so far, afresh at every completion. */
    snapprof__index_free(&b->sample_index);
    memset(&b->sample_index, 0, sizeof b->sample_index);
    b->n_samples = 0;
    calls_visit_t *v = calloc(1, sizeof *v);
    if (v == NULL)
        return -ENOMEM;
    v->b = b;
    snapprof__calls_visit(calls_add_path, v);
    int err = v->err;
    free(v);
    return err != 0 ? err : snapprof__pprof_on_profile_completed(b, info);
}

static const snapprof_builder_ops_t calls_ops = {
    .version = 1, /* receives time samples only */
    .name = "calls",
    .xOnProfileStarted = NULL,
    .xOnSample = calls_on_sample,
    .xOnProfileCompleted = calls_on_profile_completed,
    .xDestroy = pprof_destroy,
};

int snapprof_calls_builder_create(const char *path, snapprof_builder_t **out)
{
    if (out == NULL)
        return -EINVAL;
    *out = NULL;
    pprof_builder_t *b = calloc(1, sizeof *b);
    if (b == NULL)
        return -ENOMEM;
    b->calls = 1;
    int err = snapprof__output_resolve(path, &b->out);
    if (err == 0)
        err = snapprof__pprof_init(b);
    if (err == 0) {
        b->s_calls = snapprof__pprof_intern_string(b, "calls");
        b->s_time = snapprof__pprof_intern_string(b, "time");
        if (b->s_calls < 0 || b->s_time < 0)
            err = -ENOMEM;
    }
    if (err == 0)
        err = snapprof_builder_create(&calls_ops, b, out);
    if (err == 0)
        (*out)->output = &b->out;
    if (err != 0)
        pprof_destroy(b);
    return err;
}

int snapprof_pprof_builder_set_path(snapprof_builder_t *builder, const char *path)
{
    if (builder == NULL || builder->ops != &pprof_ops)
        return -EINVAL;
    return snapprof_builder_set_path(builder, path);
}
