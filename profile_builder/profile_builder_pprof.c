/* pprof profile builder: samples aggregated into a gzipped perftools.profiles.Profile file.
 * Interning lives in profile_builder_pprof_intern.c; the state both files
 * share in profile_builder_pprof.h. */
#include "profile_builder/profile_builder_pprof.h"

#include "events/events.h"
#include "module_cache/module_cache.h"
#include "profile_builder/stats_text.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#define ZLIB_CONST
#include <zlib.h>

/* ------------------------------------------------------------------------ */
/* Samples                                                                  */
/* ------------------------------------------------------------------------ */

typedef struct sample_key {
    const uint64_t *locations;
    size_t n_locations;
    const Perftools__Profiles__Label *labels;
    size_t n_labels;
} sample_key_t;

static int label_same(const Perftools__Profiles__Label *a, const Perftools__Profiles__Label *b)
{
    return a->key == b->key && a->str == b->str && a->num == b->num && a->num_unit == b->num_unit;
}

static int sample_eq(const void *owner, uint32_t index, const void *key)
{
    const pprof_builder_t *b = owner;
    const Perftools__Profiles__Sample *s = &b->samples[index]->msg;
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
        const Perftools__Profiles__Label *l = &k->labels[i];
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
    if (snapprof__index_reserve(&b->sample_index) < 0)
        return -ENOMEM;
    sample_entry_t **samples =
        reserve(b->samples, &b->cap_samples, b->n_samples + 1, sizeof *samples);
    if (samples == NULL)
        return -ENOMEM;
    b->samples = samples;
    sample_entry_t *e = arena_alloc(&b->arena, sizeof *e);
    uint64_t *locations = arena_alloc(&b->arena, k->n_locations * sizeof *locations);
    Perftools__Profiles__Label **labels = arena_alloc(&b->arena, k->n_labels * sizeof *labels);
    Perftools__Profiles__Label *storage = arena_alloc(&b->arena, k->n_labels * sizeof *storage);
    if (e == NULL || locations == NULL || labels == NULL || storage == NULL)
        return -ENOMEM;
    perftools__profiles__sample__init(&e->msg);
    if (k->n_locations != 0)
        memcpy(locations, k->locations, k->n_locations * sizeof *locations);
    for (size_t i = 0; i < k->n_labels; i++) {
        storage[i] = k->labels[i];
        labels[i] = &storage[i];
    }
    memcpy(e->values, values, sizeof e->values);
    e->msg.n_location_id = k->n_locations;
    e->msg.location_id = locations;
    e->msg.n_value = b->calls ? 2 : VALUE_COUNT;
    e->msg.value = e->values;
    e->msg.n_label = k->n_labels;
    e->msg.label = labels;
    b->samples[b->n_samples] = e;
    snapprof__index_insert(&b->sample_index, h, b->n_samples);
    b->n_samples++;
    return 0;
}

/* Fills label with key and either a string or a number (with its unit). */
static int make_label(pprof_builder_t *b, Perftools__Profiles__Label *label,
                      const snapprof_label_t *in)
{
    perftools__profiles__label__init(label);
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

static int pprof_on_sample(void *user_data, const snapprof_sample_t *sample)
{
    pprof_builder_t *b = user_data;
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
    Perftools__Profiles__Label *labels =
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
    snapprof_label_t thread_id = {.key = "thread_id", .num = sample->tid};
    snapprof_label_t thread_name = {.key = "thread_name",
                                    .str = sample->thread_name ? sample->thread_name : ""};
    int err = make_label(b, &labels[0], &thread_id);
    if (err == 0)
        err = make_label(b, &labels[1], &thread_name);
    for (size_t i = 0; err == 0 && i < sample->label_count; i++)
        err = make_label(b, &labels[i + 2], &sample->labels[i]);
    if (err < 0)
        return err;

    sample_key_t key = {locations, sample->frame_count, labels, n_labels};
    int64_t values[VALUE_COUNT] = {1, (int64_t)sample->cpu_ns, (int64_t)sample->wall_ns};
    uint64_t h = sample_hash(&key);
    uint32_t found = snapprof__index_find(&b->sample_index, h, sample_eq, b, &key);
    if (!found)
        return add_sample(b, &key, h, values);
    sample_entry_t *e = b->samples[found - 1];
    for (int i = 0; i < VALUE_COUNT; i++)
        e->values[i] += values[i];
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Writing the file                                                         */
/* ------------------------------------------------------------------------ */

#define GZIP_CHUNK ((size_t)64 * 1024)

/* Compresses data into fd as one gzip member (what pprof expects on disk). */
static int gzip_to_fd(int fd, const uint8_t *data, size_t len)
{
    unsigned char *out = malloc(GZIP_CHUNK);
    if (out == NULL)
        return -ENOMEM;
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    /* windowBits 15 + 16 asks zlib for a gzip header and trailer. */
    int zr = deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
    if (zr != Z_OK) {
        free(out);
        return zr == Z_MEM_ERROR ? -ENOMEM : SNAPPROF_EENCODE;
    }
    int err = 0;
    int flush;
    do {
        /* avail_in is 32 bits wide: feed large profiles in pieces. */
        size_t take = len > GZIP_CHUNK ? GZIP_CHUNK : len;
        zs.next_in = data;
        zs.avail_in = (uInt)take;
        data += take;
        len -= take;
        flush = len == 0 ? Z_FINISH : Z_NO_FLUSH;
        do {
            zs.next_out = out;
            zs.avail_out = (uInt)GZIP_CHUNK;
            if (deflate(&zs, flush) == Z_STREAM_ERROR) {
                err = SNAPPROF_EENCODE;
                break;
            }
            err = snapprof__output_write_all(fd, out, GZIP_CHUNK - zs.avail_out);
        } while (err == 0 && zs.avail_out == 0);
    } while (err == 0 && flush != Z_FINISH);
    deflateEnd(&zs);
    free(out);
    return err;
}

/* Writes data, gzip-compressed, to the output path atomically (see
 * snapprof__output_commit). On failure no temporary file is left behind. */
static int write_atomically(const pprof_builder_t *b, const uint8_t *data, size_t len)
{
    char *tmp;
    int fd = snapprof__output_open_temp(&b->out, &tmp);
    if (fd < 0)
        return fd;
    return snapprof__output_commit(&b->out, fd, tmp, gzip_to_fd(fd, data, len));
}

/* ------------------------------------------------------------------------ */
/* Completing the profile                                                   */
/* ------------------------------------------------------------------------ */

/* Sets has_functions, has_filenames, has_line_numbers and has_inline_frames
 * of each mapping: true when any of its locations carries that, which is
 * how pprof's own symbolizer sets them. pprof symbolizes a mapping itself
 * (from the binary on disk) only when the first three are all false, and
 * then replaces every Line of it: so they must be true wherever we gave
 * names (or one address without a symbol, a PLT stub, would cost all the
 * others theirs), and false where we had nothing, so that pprof can try. */
static void finish_mappings(pprof_builder_t *b)
{
    for (size_t i = 0; i < b->n_mappings; i++) {
        mapping_entry_t *m = b->mappings[i];
        m->msg.has_functions = m->msg.has_filenames = m->msg.has_line_numbers = 0;
        m->msg.has_inline_frames = 0;
    }
    for (size_t i = 0; i < b->n_locations; i++) {
        const location_entry_t *e = b->locations[i];
        mapping_entry_t *m = e->mapping;
        if (m == NULL)
            continue;
        size_t n_lines = e->msg.n_line;
        for (size_t k = 0; k < n_lines; k++) {
            const Perftools__Profiles__Function *f = b->functions[e->msg.line[k]->function_id - 1];
            m->msg.has_functions |= f->name != 0;
            m->msg.has_filenames |= f->filename != 0;
            m->msg.has_line_numbers |= e->msg.line[k]->line > 0;
        }
        m->msg.has_inline_frames |= n_lines > 1;
    }
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

/* Adds hitch=true or hitch=false to every sample whose "frame" label names
 * an app frame the profiler judged (info->app_frames): the verdict is known
 * only once a frame ends, after its samples arrived. Samples of frames that
 * were still open keep no verdict. Idempotent, so a retried completion
 * adds nothing twice. Returns 0 or -ENOMEM. */
static int apply_hitches(pprof_builder_t *b, const snapprof_profile_info_t *info)
{
    if (info->app_frame_count == 0 || info->app_frames == NULL)
        return 0;
    int64_t s_frame = snapprof__pprof_find_string(b, "frame");
    if (s_frame < 0)
        return 0; /* no sample was taken during an app frame */
    int64_t s_hitch = snapprof__pprof_intern_string(b, "hitch");
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
        Perftools__Profiles__Sample *s = &b->samples[i]->msg;
        const Perftools__Profiles__Label *frame = NULL;
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
        Perftools__Profiles__Label **labels =
            arena_alloc(&b->arena, (s->n_label + 1) * sizeof *labels);
        Perftools__Profiles__Label *hitch = arena_alloc(&b->arena, sizeof *hitch);
        if (labels == NULL || hitch == NULL) {
            err = -ENOMEM;
            break;
        }
        perftools__profiles__label__init(hitch);
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

/* The strings a completion adds after the interned ones: the comment
 * lines and the hidden stats entry. They are made afresh for every
 * completion and never interned, so a flush with newer counters leaves no
 * stale copies in the table. */
typedef struct run_strings {
    char lines[SNAPPROF__COMMENTS_MAX][SNAPPROF__COMMENT_MAX];
    int n_lines;
    char *stats; /* malloc'd "snapprof-stats/1 ...", or NULL */
} run_strings_t;

/* A few short comment lines (pprof prints every comment above every
 * report), and every counter in the hidden entry: a string-table entry no
 * message refers to, which pprof accepts and never shows (stats_text.h
 * has the format; `snapprof stats FILE` reads it). Returns 0 or -ENOMEM. */
static int make_run_strings(const snapprof_profile_info_t *info, run_strings_t *out)
{
    out->n_lines = 0;
    out->stats = NULL;
    if (info->stats == NULL)
        return 0;
    out->n_lines = snapprof__stats_comments(info->stats, info->period_ns,
                                            info->mode == SNAPPROF_MODE_WALL, out->lines);
    out->stats = snapprof__stats_encode(info->stats);
    return out->stats != NULL ? 0 : -ENOMEM;
}

/* Builds the Profile message from what was collected and writes it. The
 * collected data is left as it was, so a failed write loses nothing and a
 * second call simply tries again. */
static int pprof_on_profile_completed(void *user_data, const snapprof_profile_info_t *info)
{
    pprof_builder_t *b = user_data;
    if (info == NULL)
        return -EINVAL;
    int wall = info->mode == SNAPPROF_MODE_WALL;

    int err = snapprof__pprof_symbolize_locations(b);
    if (err == 0)
        err = apply_hitches(b, info);
    if (err < 0)
        return err;
    run_strings_t run;
    err = make_run_strings(info, &run);
    if (err < 0)
        return err;
    finish_mappings(b);

    /* The order and names are the Go runtime's CPU convention plus wall
     * time; profiles only merge when these stay the same, so never
     * reorder them. */
    Perftools__Profiles__ValueType types[VALUE_COUNT], period_type;
    Perftools__Profiles__ValueType *type_ptrs[VALUE_COUNT];
    int64_t type_names[VALUE_COUNT] = {b->s_samples, b->s_cpu, b->s_wall};
    int64_t type_units[VALUE_COUNT] = {b->s_count, b->s_nanoseconds, b->s_nanoseconds};
    int n_types = VALUE_COUNT;
    if (b->calls) {
        /* Function timing: calls and self time per call path. */
        type_names[0] = b->s_calls;
        type_names[1] = b->s_time;
        n_types = 2;
    }
    for (int i = 0; i < n_types; i++) {
        perftools__profiles__value_type__init(&types[i]);
        types[i].type = type_names[i];
        types[i].unit = type_units[i];
        type_ptrs[i] = &types[i];
    }
    perftools__profiles__value_type__init(&period_type);
    period_type.type = b->calls ? b->s_time : wall ? b->s_wall : b->s_cpu;
    period_type.unit = b->s_nanoseconds;

    Perftools__Profiles__Profile profile = PERFTOOLS__PROFILES__PROFILE__INIT;
    profile.n_sample_type = (size_t)n_types;
    profile.sample_type = type_ptrs;
    /* The entries start with their messages; protobuf-c wants arrays of
     * message pointers, made here for this one pack. */
    Perftools__Profiles__Sample **samples = malloc((b->n_samples + 1) * sizeof *samples);
    Perftools__Profiles__Mapping **mappings = malloc((b->n_mappings + 1) * sizeof *mappings);
    Perftools__Profiles__Location **locations = malloc((b->n_locations + 1) * sizeof *locations);
    size_t n_run = (size_t)run.n_lines + (run.stats != NULL);
    char **strings = malloc((b->n_strings + n_run) * sizeof *strings);
    int64_t comments[SNAPPROF__COMMENTS_MAX];
    uint8_t *buf = NULL;
    if (samples == NULL || mappings == NULL || locations == NULL || strings == NULL) {
        err = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < b->n_samples; i++)
        samples[i] = &b->samples[i]->msg;
    for (size_t i = 0; i < b->n_mappings; i++)
        mappings[i] = &b->mappings[i]->msg;
    for (size_t i = 0; i < b->n_locations; i++)
        locations[i] = &b->locations[i]->msg;
    profile.n_sample = b->n_samples;
    profile.sample = samples;
    profile.n_mapping = b->n_mappings;
    profile.mapping = mappings;
    profile.n_location = b->n_locations;
    profile.location = locations;
    profile.n_function = b->n_functions;
    profile.function = b->functions;
    memcpy(strings, b->strings, b->n_strings * sizeof *strings);
    size_t n_strings = b->n_strings;
    for (int i = 0; i < run.n_lines; i++) {
        comments[i] = (int64_t)n_strings;
        strings[n_strings++] = run.lines[i];
    }
    if (run.stats != NULL)
        strings[n_strings++] = run.stats;
    profile.n_string_table = n_strings;
    profile.string_table = strings;
    profile.time_nanos = (int64_t)info->start_time_ns;
    profile.duration_nanos = (int64_t)info->duration_ns;
    profile.period_type = &period_type;
    profile.period = b->calls ? 1 : (int64_t)info->period_ns;
    profile.n_comment = (size_t)run.n_lines;
    profile.comment = comments;
    profile.default_sample_type = b->calls ? b->s_time : wall ? b->s_wall : b->s_cpu;

    size_t len = perftools__profiles__profile__get_packed_size(&profile);
    buf = malloc(len ? len : 1);
    if (buf == NULL) {
        err = -ENOMEM;
        goto out;
    }
    if (perftools__profiles__profile__pack(&profile, buf) != len)
        err = SNAPPROF_EENCODE;
    if (err == 0)
        err = write_atomically(b, buf, len);
out:
    free(buf);
    free(strings);
    free(run.stats);
    free(samples);
    free(mappings);
    free(locations);
    return err;
}

/* ------------------------------------------------------------------------ */
/* Lifecycle                                                                */
/* ------------------------------------------------------------------------ */

static void pprof_destroy(void *user_data)
{
    pprof_builder_t *b = user_data;
    if (b == NULL)
        return;
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
    free(b);
}

static const snapprof_builder_ops_t pprof_ops = {
    .version = SNAPPROF_BUILDER_OPS_VERSION,
    .name = "pprof",
    .xOnProfileStarted = NULL,
    .xOnSample = pprof_on_sample,
    .xOnProfileCompleted = pprof_on_profile_completed,
    .xDestroy = pprof_destroy,
};

/* Interns the strings every profile uses, "" first, and the main
 * executable's mapping so that it becomes mapping[0] (pprof takes the first
 * mapping for the main binary). */
static int pprof_init(pprof_builder_t *b)
{
    if (snapprof__pprof_intern_string(b, "") != 0)
        return -ENOMEM;
    b->s_thread_id = snapprof__pprof_intern_string(b, "thread_id");
    b->s_thread_name = snapprof__pprof_intern_string(b, "thread_name");
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
        err = pprof_init(b);
    if (err == 0)
        err = snapprof_builder_create(&pprof_ops, b, out);
    if (err == 0)
        (*out)->output = &b->out;
    if (err != 0)
        pprof_destroy(b);
    return err;
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
    Perftools__Profiles__Label *label =
        reserve(b->scratch_labels, &b->cap_scratch_labels, 1, sizeof *label);
    if (label == NULL) {
        v->err = -ENOMEM;
        return;
    }
    b->scratch_labels = label;
    for (size_t i = 0; i < depth && v->err == 0; i++)
        v->err = snapprof__pprof_intern_location(b, &v->frames[i], &locations[i]);
    snapprof_label_t thread_id = {.key = "thread_id", .num = tid};
    if (v->err == 0)
        v->err = make_label(b, &label[0], &thread_id);
    if (v->err != 0)
        return;
    sample_key_t key = {locations, depth, label, 1};
    int64_t values[VALUE_COUNT] = {(int64_t)calls, (int64_t)self_ns, 0};
    uint64_t h = sample_hash(&key);
    uint32_t found = snapprof__index_find(&b->sample_index, h, sample_eq, b, &key);
    if (!found) {
        v->err = add_sample(b, &key, h, values);
        return;
    }
    sample_entry_t *e = b->samples[found - 1];
    for (int i = 0; i < VALUE_COUNT; i++)
        e->values[i] += values[i];
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
    return err != 0 ? err : pprof_on_profile_completed(b, info);
}

static const snapprof_builder_ops_t calls_ops = {
    .version = SNAPPROF_BUILDER_OPS_VERSION,
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
        err = pprof_init(b);
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
