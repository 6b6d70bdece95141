/* Helpers for the profile_builder tests (see test_profile_builder_util.h). */
#include "test_profile_builder_util.h"
#include "common/stats_text.h"
#include "test.h"
#include "test_util.h"

#include <snapprof/snapprof.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

const snapprof_module_t pbt_jit_module = {
    .start = 0x7f0000000000u,
    .limit = 0x7f0000100000u,
    .path = "[jit]",
    .build_id = "",
    .kind = SNAPPROF_MODULE_JIT,
    .is_loaded = 1,
};

snapprof_builder_t *pbt_create(const char *path)
{
    snapprof_builder_t *b = NULL;
    ASSERT_OK(snapprof_pprof_builder_create(path, &b));
    ASSERT_NOT_NULL(b);
    ASSERT_NOT_NULL(b->ops);
    ASSERT_NOT_NULL(b->ops->xOnSample);
    ASSERT_NOT_NULL(b->ops->xOnProfileCompleted);
    return b;
}

void pbt_sample(snapprof_builder_t *b, const snapprof_sample_t *sample)
{
    ASSERT_OK(b->ops->xOnSample(b->user_data, sample));
}

void pbt_feed(snapprof_builder_t *b, const snapprof_frame_t *frames, size_t n, pid_t tid,
              const char *thread, const snapprof_label_t *labels, size_t n_labels, uint64_t cpu_ns,
              uint64_t wall_ns, int times)
{
    snapprof_sample_t s = {.frames = frames, .frame_count = n, .tid = tid, .thread_name = thread};
    s.labels = labels;
    s.label_count = n_labels;
    s.cpu_ns = cpu_ns;
    s.wall_ns = wall_ns;
    for (int i = 0; i < times; i++)
        pbt_sample(b, &s);
}

int pbt_complete(snapprof_builder_t *b, snapprof_mode_t mode, const snapprof_stats_t *stats)
{
    snapprof_profile_info_t info = {
        .start_time_ns = 1700000000000000000ull,
        .start_mono_ns = 1000,
        .duration_ns = 2000000000ull,
        .period_ns = 10000000ull,
        .mode = mode,
        .stats = stats,
    };
    return b->ops->xOnProfileCompleted(b->user_data, &info);
}

Snapprof__Pprof__Profile *pbt_load(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        TEST_FAIL("open %s: %s", path, strerror(errno));
    unsigned char magic[2] = {0, 0};
    ASSERT_EQ(fread(magic, 1, 2, f), 2);
    fclose(f);
    ASSERT_EQ(magic[0], 0x1f);
    ASSERT_EQ(magic[1], 0x8b);

    gzFile gz = gzopen(path, "rb");
    ASSERT_NOT_NULL(gz);
    size_t cap = 1 << 16, len = 0;
    unsigned char *buf = malloc(cap);
    ASSERT_NOT_NULL(buf);
    for (;;) {
        if (cap - len < (1 << 15)) {
            cap *= 2;
            buf = realloc(buf, cap);
            ASSERT_NOT_NULL(buf);
        }
        int n = gzread(gz, buf + len, (unsigned)(cap - len));
        ASSERT_GE(n, 0);
        if (n == 0)
            break;
        len += (size_t)n;
    }
    ASSERT_EQ(gzclose(gz), Z_OK);
    Snapprof__Pprof__Profile *p = snapprof__pprof__profile__unpack(NULL, len, buf);
    free(buf);
    if (p == NULL)
        TEST_FAIL("%s does not decode as perftools.profiles.Profile", path);
    return p;
}

const char *pbt_str(const Snapprof__Pprof__Profile *p, int64_t i)
{
    if (i < 0 || (uint64_t)i >= p->n_string_table)
        TEST_FAIL("string index %" PRId64 " out of range (%zu strings)", i, p->n_string_table);
    return p->string_table[i];
}

const Snapprof__Pprof__Location *pbt_location(const Snapprof__Pprof__Profile *p, uint64_t id)
{
    /* The builder numbers ids densely from 1; fall back to a scan otherwise. */
    if (id >= 1 && id <= p->n_location && p->location[id - 1]->id == id)
        return p->location[id - 1];
    for (size_t i = 0; i < p->n_location; i++)
        if (p->location[i]->id == id)
            return p->location[i];
    return NULL;
}

const Snapprof__Pprof__Function *pbt_function(const Snapprof__Pprof__Profile *p, uint64_t id)
{
    if (id >= 1 && id <= p->n_function && p->function[id - 1]->id == id)
        return p->function[id - 1];
    for (size_t i = 0; i < p->n_function; i++)
        if (p->function[i]->id == id)
            return p->function[i];
    return NULL;
}

const Snapprof__Pprof__Mapping *pbt_mapping(const Snapprof__Pprof__Profile *p, uint64_t id)
{
    if (id >= 1 && id <= p->n_mapping && p->mapping[id - 1]->id == id)
        return p->mapping[id - 1];
    for (size_t i = 0; i < p->n_mapping; i++)
        if (p->mapping[i]->id == id)
            return p->mapping[i];
    return NULL;
}

const char *pbt_location_name(const Snapprof__Pprof__Profile *p, uint64_t id)
{
    const Snapprof__Pprof__Location *l = pbt_location(p, id);
    ASSERT_NOT_NULL(l);
    if (l->n_line == 0)
        return "";
    const Snapprof__Pprof__Function *f = pbt_function(p, l->line[l->n_line - 1]->function_id);
    ASSERT_NOT_NULL(f);
    return pbt_str(p, f->name);
}

const Snapprof__Pprof__Label *pbt_label(const Snapprof__Pprof__Profile *p,
                                        const Snapprof__Pprof__Sample *s, const char *key)
{
    for (size_t i = 0; i < s->n_label; i++)
        if (strcmp(pbt_str(p, s->label[i]->key), key) == 0)
            return s->label[i];
    return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Fails unless ids[0..n) are all nonzero and distinct; sorts them. */
static void check_ids(uint64_t *ids, size_t n, const char *what)
{
    qsort(ids, n, sizeof *ids, cmp_u64);
    for (size_t i = 0; i < n; i++) {
        if (ids[i] == 0)
            TEST_FAIL("a %s has id 0", what);
        if (i > 0 && ids[i] == ids[i - 1])
            TEST_FAIL("two %ss share id %" PRIu64, what, ids[i]);
    }
}

static int has_id(const uint64_t *sorted, size_t n, uint64_t id)
{
    return bsearch(&id, sorted, n, sizeof *sorted, cmp_u64) != NULL;
}

void pbt_check_valid(const Snapprof__Pprof__Profile *p)
{
    ASSERT_GE(p->n_string_table, 1);
    ASSERT_STR_EQ(p->string_table[0], "");
    for (size_t i = 0; i < p->n_string_table; i++)
        ASSERT_NOT_NULL(p->string_table[i]);

    /* Sample types and the period in the order merging relies on: wall
     * time only in a wall profile (a CPU profile carries only what it
     * measured). */
    int wall = strcmp(pbt_str(p, p->default_sample_type), "wall") == 0;
    /* A heap profile has Go's heap layout (include/snapprof/heap_profile.h). */
    int heap = strcmp(pbt_str(p, p->default_sample_type), "inuse_space") == 0;
    ASSERT_EQ(p->n_sample_type, heap ? 4 : wall ? 3 : 2);
    static const char *const types[3][2] = {
        {"samples", "count"}, {"cpu", "nanoseconds"}, {"wall", "nanoseconds"}};
    static const char *const heap_types[4][2] = {{"alloc_objects", "count"},
                                                 {"alloc_space", "bytes"},
                                                 {"inuse_objects", "count"},
                                                 {"inuse_space", "bytes"}};
    for (int i = 0; i < (int)p->n_sample_type; i++) {
        ASSERT_STR_EQ(pbt_str(p, p->sample_type[i]->type), heap ? heap_types[i][0] : types[i][0]);
        ASSERT_STR_EQ(pbt_str(p, p->sample_type[i]->unit), heap ? heap_types[i][1] : types[i][1]);
    }
    ASSERT_NOT_NULL(p->period_type);
    pbt_str(p, p->period_type->type);
    ASSERT_STR_EQ(pbt_str(p, p->period_type->unit), heap ? "bytes" : "nanoseconds");
    pbt_str(p, p->default_sample_type);
    pbt_str(p, p->drop_frames);
    pbt_str(p, p->keep_frames);
    for (size_t i = 0; i < p->n_comment; i++)
        pbt_str(p, p->comment[i]);

    uint64_t *mapping_ids = malloc((p->n_mapping + 1) * sizeof *mapping_ids);
    uint64_t *location_ids = malloc((p->n_location + 1) * sizeof *location_ids);
    uint64_t *function_ids = malloc((p->n_function + 1) * sizeof *function_ids);
    ASSERT(mapping_ids && location_ids && function_ids);
    for (size_t i = 0; i < p->n_mapping; i++)
        mapping_ids[i] = p->mapping[i]->id;
    for (size_t i = 0; i < p->n_location; i++)
        location_ids[i] = p->location[i]->id;
    for (size_t i = 0; i < p->n_function; i++)
        function_ids[i] = p->function[i]->id;
    check_ids(mapping_ids, p->n_mapping, "mapping");
    check_ids(location_ids, p->n_location, "location");
    check_ids(function_ids, p->n_function, "function");

    for (size_t i = 0; i < p->n_function; i++) {
        const Snapprof__Pprof__Function *f = p->function[i];
        pbt_str(p, f->name);
        pbt_str(p, f->system_name);
        pbt_str(p, f->filename);
    }
    for (size_t i = 0; i < p->n_location; i++) {
        const Snapprof__Pprof__Location *l = p->location[i];
        if (l->mapping_id != 0 && !has_id(mapping_ids, p->n_mapping, l->mapping_id))
            TEST_FAIL("location %" PRIu64 " has no mapping %" PRIu64, l->id, l->mapping_id);
        for (size_t j = 0; j < l->n_line; j++)
            if (!has_id(function_ids, p->n_function, l->line[j]->function_id))
                TEST_FAIL("location %" PRIu64 " line %zu: no function %" PRIu64, l->id, j,
                          l->line[j]->function_id);
    }

    /* The has_* flags say whether any location of the mapping carries
     * that (pprof's own meaning: it symbolizes a mapping from disk only
     * when none is set, and then replaces all its Lines). */
    for (size_t m = 0; m < p->n_mapping; m++) {
        const Snapprof__Pprof__Mapping *mp = p->mapping[m];
        pbt_str(p, mp->filename);
        pbt_str(p, mp->build_id);
        int any_function = 0, any_file = 0, any_line = 0, any_inline = 0;
        for (size_t i = 0; i < p->n_location; i++) {
            const Snapprof__Pprof__Location *l = p->location[i];
            if (l->mapping_id != mp->id)
                continue;
            any_inline |= l->n_line > 1;
            for (size_t j = 0; j < l->n_line; j++) {
                const Snapprof__Pprof__Function *f = pbt_function(p, l->line[j]->function_id);
                any_function |= f->name != 0;
                any_file |= f->filename != 0;
                any_line |= l->line[j]->line > 0;
            }
        }
        ASSERT_EQ(mp->has_functions, any_function);
        ASSERT_EQ(mp->has_filenames, any_file);
        ASSERT_EQ(mp->has_line_numbers, any_line);
        ASSERT_EQ(mp->has_inline_frames, any_inline);
    }

    for (size_t i = 0; i < p->n_sample; i++) {
        const Snapprof__Pprof__Sample *s = p->sample[i];
        ASSERT_EQ(s->n_value, p->n_sample_type);
        for (size_t j = 0; j < s->n_location_id; j++)
            if (!has_id(location_ids, p->n_location, s->location_id[j]))
                TEST_FAIL("sample %zu refers to missing location %" PRIu64, i, s->location_id[j]);
        for (size_t j = 0; j < s->n_label; j++) {
            const Snapprof__Pprof__Label *l = s->label[j];
            ASSERT_NE(l->key, 0);
            pbt_str(p, l->key);
            pbt_str(p, l->str);
            pbt_str(p, l->num_unit);
            /* A label is a string or a number, never both. */
            if (l->str != 0)
                ASSERT(l->num == 0 && l->num_unit == 0);
        }
    }
    free(mapping_ids);
    free(location_ids);
    free(function_ids);
}

const char *pbt_stats_entry(const Snapprof__Pprof__Profile *p)
{
    for (size_t i = p->n_string_table; i-- > 0;)
        if (snapprof__stats_is_entry(p->string_table[i]))
            return p->string_table[i];
    return NULL;
}

int pbt_text_add_stat(void *arg, const char *key, const char *value)
{
    pbt_text_t *t = arg;
    int n = snprintf(t->s + t->len, sizeof t->s - t->len, "%s%s%s\n", key, t->sep, value);
    ASSERT(n > 0 && (size_t)n < sizeof t->s - t->len);
    t->len += (size_t)n;
    return 0;
}

void pbt_expect_stats(const Snapprof__Pprof__Profile *p, const snapprof_stats_t *want)
{
    const char *entry = pbt_stats_entry(p);
    if (entry == NULL)
        TEST_FAIL("the profile has no snapprof-stats entry");
    snapprof_stats_t got;
    ASSERT_OK(snapprof__stats_decode(entry, &got, NULL, NULL));
    static pbt_text_t a, b;
    a.len = b.len = 0;
    a.sep = b.sep = "=";
    snapprof__stats_for_each(want, pbt_text_add_stat, &a);
    snapprof__stats_for_each(&got, pbt_text_add_stat, &b);
    if (strcmp(a.s, b.s) != 0)
        TEST_FAIL("hidden stats differ:\nwant:\n%s\ngot:\n%s\nentry: %s", a.s, b.s, entry);
}

char *pbt_tmp_path(const char *tag, const char *name)
{
    char *dir = tu_make_tmpdir(tag);
    size_t len = strlen(dir) + strlen(name) + 2;
    char *path = malloc(len);
    ASSERT_NOT_NULL(path);
    snprintf(path, len, "%s/%s", dir, name);
    free(dir);
    return path;
}

void pbt_remove(char *path)
{
    unlink(path);
    char *slash = strrchr(path, '/');
    ASSERT_NOT_NULL(slash);
    *slash = '\0';
    rmdir(path);
    free(path);
}

void pbt_add_losses(snapprof_stats_t *st)
{
    st->failed[SNAPPROF_FAIL_THREAD_EXITED] = 2;
    st->failed[SNAPPROF_FAIL_TIMEOUT] = 10;
    st->failed_total = 12;
    st->samples_dropped = 3;
    st->truncated_copy = 1;
    st->truncated_depth = 4;
    st->unwind_aborted = 5;
    st->threads_by_trigger[SNAPPROF_TRIGGER_PERF_EVENT] = 3;
    st->threads_by_trigger[SNAPPROF_TRIGGER_HANDSHAKE] = 1;
}
