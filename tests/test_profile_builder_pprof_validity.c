/* profile_builder_pprof_validity: the builder's output satisfies every invariant pprof needs. */
#include "test.h"
#include "test_profile_builder_util.h"
#include "test_util.h"

#include "module_cache/module_cache.h"

#include <errno.h>
#include <snapprof/snapprof.h>

#include <stdlib.h>
#include <string.h>

/* A native module with no file behind it: nothing can symbolize it. */
#define FAKE_LIB                                                                                   \
    {                                                                                              \
        .start = 0x10000000u, .limit = 0x10100000u, .file_offset = 0x2000,                         \
        .load_bias = 0x0fffe000u, .path = "/nonexistent/snapprof/libfake.so",                      \
        .build_id = "0123456789abcdef0123456789abcdef01234567", .kind = SNAPPROF_MODULE_NATIVE,    \
        .is_loaded = 1,                                                                            \
    }
static const snapprof_module_t fake_lib = FAKE_LIB;

/* The same range described again by another struct: still one mapping. */
static const snapprof_module_t fake_lib_again = FAKE_LIB;

__attribute__((noinline)) int validity_native_fn(int x)
{
    return x * 3 + 1;
}

static const Snapprof__Pprof__Mapping *find_mapping_by_file(const Snapprof__Pprof__Profile *p,
                                                            const char *file)
{
    for (size_t i = 0; i < p->n_mapping; i++)
        if (strcmp(pbt_str(p, p->mapping[i]->filename), file) == 0)
            return p->mapping[i];
    return NULL;
}

static const Snapprof__Pprof__Location *find_location_by_name(const Snapprof__Pprof__Profile *p,
                                                              const char *name)
{
    for (size_t i = 0; i < p->n_location; i++)
        if (strcmp(pbt_location_name(p, p->location[i]->id), name) == 0)
            return p->location[i];
    return NULL;
}

static void test_validity(void)
{
    char *path = pbt_tmp_path("pb-validity", "v.pb.gz");
    snapprof_builder_t *b = pbt_create(path);

    uintptr_t own_pc = (uintptr_t)&validity_native_fn + 1;
    const snapprof_module_t *own_module = snapprof_module_find(own_pc);
    snapprof_frame_t frames[] = {
        {0x10000100u, &fake_lib, SNAPPROF_FRAME_NATIVE, NULL},
        {0x10000200u, &fake_lib_again, SNAPPROF_FRAME_NATIVE, NULL},
        {0x12345678u, NULL, SNAPPROF_FRAME_NATIVE, NULL},
        {own_pc, own_module, SNAPPROF_FRAME_NATIVE, NULL},
        {pbt_jit_module.start + 0x40, &pbt_jit_module, SNAPPROF_FRAME_JIT, "jit_fn"},
        {pbt_jit_module.start + 0x80, &pbt_jit_module, SNAPPROF_FRAME_JIT, NULL},
        {0, NULL, SNAPPROF_FRAME_MARKER, "[unwind error]"},
        {0, NULL, SNAPPROF_FRAME_MARKER, NULL},
    };
    const size_t n_frames = sizeof frames / sizeof frames[0];
    snapprof_label_t labels[] = {
        {.key = "span", .str = "checkout"},
        {.key = "bytes", .num = 1 << 20, .num_unit = "bytes"},
        {.key = "attempt", .num = 3},
    };
    /* A sample with no frames at all is still a valid (empty) stack, also
     * as the very first sample. */
    snapprof_sample_t empty = {.tid = 100, .thread_name = "even", .cpu_ns = 5, .wall_ns = 5};
    pbt_sample(b, &empty);

    /* Every suffix of the frame list, so each frame kind is a leaf once. */
    for (size_t i = 0; i < n_frames; i++) {
        snapprof_sample_t s = {.frames = frames + i,
                               .frame_count = n_frames - i,
                               .cpu_ns = 1000 * (i + 1),
                               .wall_ns = 10000,
                               .tid = (pid_t)(100 + i % 2),
                               .thread_name = i % 2 ? "odd" : "even",
                               .labels = labels,
                               .label_count = i % 4};
        pbt_sample(b, &s);
    }
    /* Bad input is refused and changes nothing. */
    ASSERT_EQ(b->ops->xOnSample(b->user_data, NULL), -EINVAL);
    snapprof_label_t keyless = {.key = NULL, .str = "x"};
    snapprof_sample_t bad = {.frames = frames,
                             .frame_count = 1,
                             .thread_name = "x",
                             .labels = &keyless,
                             .label_count = 1};
    ASSERT_EQ(b->ops->xOnSample(b->user_data, &bad), -EINVAL);
    bad.labels = NULL;
    ASSERT_EQ(b->ops->xOnSample(b->user_data, &bad), -EINVAL);
    bad.frames = NULL;
    bad.label_count = 0;
    ASSERT_EQ(b->ops->xOnSample(b->user_data, &bad), -EINVAL);
    ASSERT_EQ(b->ops->xOnProfileCompleted(b->user_data, NULL), -EINVAL);

    ASSERT_OK(pbt_complete(b, SNAPPROF_MODE_CPU, NULL));
    snapprof_builder_destroy(b);

    Snapprof__Pprof__Profile *p = pbt_load(path);
    pbt_check_valid(p);
    ASSERT_EQ(p->n_sample, n_frames + 1);
    ASSERT_STR_EQ(pbt_str(p, p->period_type->type), "cpu");
    ASSERT_EQ(p->period, 10000000);

    /* mapping[0] is the main executable when the module cache knows it. */
    const snapprof_module_t *main_module = snapprof__module_cache_main();
    if (main_module != NULL) {
        ASSERT_GE(p->n_mapping, 1);
        ASSERT_UEQ(p->mapping[0]->memory_start, main_module->start);
        ASSERT_UEQ(p->mapping[0]->memory_limit, main_module->limit);
        ASSERT_UEQ(p->mapping[0]->file_offset, main_module->file_offset);
        ASSERT_STR_EQ(pbt_str(p, p->mapping[0]->filename), main_module->path);
        ASSERT_STR_EQ(pbt_str(p, p->mapping[0]->build_id), main_module->build_id);
    } else {
        printf("note: the module cache found no main executable\n");
    }

    /* The unsymbolizable module: one mapping for both descriptions, its
     * addresses kept, and it claims no names so pprof may try itself. */
    const Snapprof__Pprof__Mapping *lib = find_mapping_by_file(p, fake_lib.path);
    ASSERT_NOT_NULL(lib);
    ASSERT_UEQ(lib->memory_start, fake_lib.start);
    ASSERT_UEQ(lib->memory_limit, fake_lib.limit);
    ASSERT_UEQ(lib->file_offset, fake_lib.file_offset);
    ASSERT_STR_EQ(pbt_str(p, lib->build_id), fake_lib.build_id);
    ASSERT(!lib->has_functions && !lib->has_filenames && !lib->has_line_numbers);
    size_t lib_locations = 0;
    for (size_t i = 0; i < p->n_location; i++) {
        const Snapprof__Pprof__Location *l = p->location[i];
        if (l->mapping_id != lib->id)
            continue;
        lib_locations++;
        ASSERT(l->address == 0x10000100u || l->address == 0x10000200u);
    }
    ASSERT_EQ(lib_locations, 2);

    /* JIT frames: named, in the JIT mapping, which has functions. */
    const Snapprof__Pprof__Mapping *jm = find_mapping_by_file(p, "[jit]");
    ASSERT_NOT_NULL(jm);
    ASSERT(jm->has_functions);
    const Snapprof__Pprof__Location *jl = find_location_by_name(p, "jit_fn");
    ASSERT_NOT_NULL(jl);
    ASSERT_UEQ(jl->mapping_id, jm->id);
    ASSERT_UEQ(jl->address, pbt_jit_module.start + 0x40);
    ASSERT_EQ(jl->n_line, 1);
    const Snapprof__Pprof__Location *unnamed_jit = find_location_by_name(p, "[jit]");
    ASSERT_NOT_NULL(unnamed_jit);
    ASSERT_UEQ(unnamed_jit->mapping_id, jm->id);

    /* Markers: named, no mapping, so pprof never tries to symbolize them. */
    const Snapprof__Pprof__Location *ml = find_location_by_name(p, "[unwind error]");
    ASSERT_NOT_NULL(ml);
    ASSERT_EQ(ml->mapping_id, 0);
    ASSERT_EQ(ml->n_line, 1);
    ASSERT_NOT_NULL(find_location_by_name(p, "[unknown]"));

    /* Every sample carries its thread, as a number and as a name, and its
     * own labels; the stack is leaf first. */
    for (size_t i = 0; i < p->n_sample; i++) {
        const Snapprof__Pprof__Sample *s = p->sample[i];
        const Snapprof__Pprof__Label *tid = pbt_label(p, s, "thread_id");
        const Snapprof__Pprof__Label *name = pbt_label(p, s, "thread_name");
        ASSERT_NOT_NULL(tid);
        ASSERT_NOT_NULL(name);
        ASSERT_EQ(tid->str, 0);
        ASSERT(tid->num == 100 || tid->num == 101);
        ASSERT_STR_EQ(pbt_str(p, name->str), tid->num == 100 ? "even" : "odd");
        const Snapprof__Pprof__Label *bytes = pbt_label(p, s, "bytes");
        if (bytes != NULL) {
            ASSERT_EQ(bytes->num, 1 << 20);
            ASSERT_STR_EQ(pbt_str(p, bytes->num_unit), "bytes");
            ASSERT_EQ(bytes->str, 0);
        }
        const Snapprof__Pprof__Label *attempt = pbt_label(p, s, "attempt");
        if (attempt != NULL)
            ASSERT(attempt->num == 3 && attempt->num_unit == 0 && attempt->str == 0);
        const Snapprof__Pprof__Label *span = pbt_label(p, s, "span");
        if (span != NULL)
            ASSERT_STR_EQ(pbt_str(p, span->str), "checkout");
        if (s->n_location_id == n_frames) {
            ASSERT_EQ(s->value[0], 1);
            ASSERT_EQ(s->value[1], 1000);
            ASSERT_EQ(s->n_value, 2); /* a CPU profile: no wall value */
            ASSERT_STR_EQ(pbt_location_name(p, s->location_id[n_frames - 2]), "[unwind error]");
            ASSERT_STR_EQ(pbt_location_name(p, s->location_id[n_frames - 1]), "[unknown]");
        }
    }

    /* And the real client accepts it without complaint. */
    char *raw = tu_pprof_ok("-raw -symbolize=none", path);
    ASSERT_CONTAINS(raw, "jit_fn");
    ASSERT_CONTAINS(raw, "[unwind error]");
    free(raw);

    snapprof__pprof__profile__free_unpacked(p, NULL);
    pbt_remove(path);
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"validity", test_validity},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
