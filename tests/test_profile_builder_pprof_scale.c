/* profile_builder_pprof_scale: 100k samples over 5k distinct stacks aggregate correctly. */
#include "test.h"
#include "test_profile_builder_util.h"
#include "test_util.h"

#include <snapprof/snapprof.h>

#include <stdlib.h>
#include <string.h>

#define STACKS 5000
#define SAMPLES 100000
#define MAX_DEPTH 24
#define NATIVE_POOL 1000
#define JIT_POOL 200

static const snapprof_module_t lib = {
    .start = 0x30000000u,
    .limit = 0x31000000u,
    .path = "/nonexistent/snapprof/libscale.so",
    .build_id = "5ca1e",
    .kind = SNAPPROF_MODULE_NATIVE,
    .is_loaded = 1,
};

static char jit_names[JIT_POOL][32];

static uint64_t rng = 88172645463325252ull;
static uint64_t next_random(void)
{
    return tu_xorshift64(&rng);
}

/* Stack i: a leaf unique to it (so all 5000 differ), then frames drawn
 * from shared pools of native pcs and JIT functions, as real stacks share
 * their callers. */
static size_t make_stack(int i, snapprof_frame_t *frames)
{
    size_t depth = 4 + (size_t)(next_random() % (MAX_DEPTH - 4));
    frames[0] = (snapprof_frame_t){lib.start + 0x100000 + (uintptr_t)i * 16, &lib,
                                   SNAPPROF_FRAME_NATIVE, NULL};
    for (size_t d = 1; d < depth; d++) {
        uint64_t r = next_random();
        if (r % 3 == 0)
            frames[d] =
                (snapprof_frame_t){pbt_jit_module.start + (r >> 8) % 0x100000, &pbt_jit_module,
                                   SNAPPROF_FRAME_JIT, jit_names[(r >> 32) % JIT_POOL]};
        else
            frames[d] = (snapprof_frame_t){lib.start + ((r >> 16) % NATIVE_POOL) * 32, &lib,
                                           SNAPPROF_FRAME_NATIVE, NULL};
    }
    return depth;
}

static void test_scale(void)
{
    for (int i = 0; i < JIT_POOL; i++)
        snprintf(jit_names[i], sizeof jit_names[i], "jit_fn_%d", i);
    static snapprof_frame_t stacks[STACKS][MAX_DEPTH];
    static size_t depths[STACKS];
    for (int i = 0; i < STACKS; i++)
        depths[i] = make_stack(i, stacks[i]);

    char *path = pbt_tmp_path("pb-scale", "scale.pb.gz");
    snapprof_builder_t *b = pbt_create(path);
    uint64_t start = tu_mono_ns();
    for (int k = 0; k < SAMPLES; k++) {
        int i = k % STACKS;
        snapprof_sample_t s = {.frames = stacks[i],
                               .frame_count = depths[i],
                               .cpu_ns = (uint64_t)i + 1,
                               .wall_ns = 10,
                               .tid = 77,
                               .thread_name = "scale"};
        pbt_sample(b, &s);
    }
    ASSERT_OK(pbt_complete(b, SNAPPROF_MODE_CPU, NULL));
    snapprof_builder_destroy(b);
    printf("%d samples over %d stacks built and written in %.1f ms\n", SAMPLES, STACKS,
           (double)(tu_mono_ns() - start) / 1e6);

    Snapprof__Pprof__Profile *p = pbt_load(path);
    pbt_check_valid(p);
    ASSERT_EQ(p->n_sample, STACKS);
    /* Locations: the 5000 unique leaves, at most the pools besides. */
    ASSERT_GE(p->n_location, STACKS);
    ASSERT_LE(p->n_location, STACKS + NATIVE_POOL + JIT_POOL);
    int64_t count = 0, cpu = 0;
    static int seen[STACKS];
    for (size_t i = 0; i < p->n_sample; i++) {
        const Snapprof__Pprof__Sample *s = p->sample[i];
        ASSERT_EQ(s->value[0], SAMPLES / STACKS);
        count += s->value[0];
        cpu += s->value[1];
        /* Recover the stack from its leaf and compare it frame by frame. */
        const Snapprof__Pprof__Location *leaf = pbt_location(p, s->location_id[0]);
        int stack = (int)((leaf->address - lib.start - 0x100000) / 16);
        ASSERT(stack >= 0 && stack < STACKS);
        ASSERT_EQ(seen[stack]++, 0);
        ASSERT_EQ(s->n_location_id, depths[stack]);
        ASSERT_EQ(s->value[1], (int64_t)(SAMPLES / STACKS) * (stack + 1));
        for (size_t d = 0; d < depths[stack]; d++) {
            const snapprof_frame_t *f = &stacks[stack][d];
            const Snapprof__Pprof__Location *l = pbt_location(p, s->location_id[d]);
            if (f->kind == SNAPPROF_FRAME_JIT)
                ASSERT_STR_EQ(pbt_location_name(p, l->id), f->name);
            else
                ASSERT_UEQ(l->address, f->pc);
        }
    }
    ASSERT_EQ(count, SAMPLES);
    ASSERT_EQ(cpu, (int64_t)(SAMPLES / STACKS) * STACKS * (STACKS + 1) / 2);
    snapprof__pprof__profile__free_unpacked(p, NULL);

    /* The real client reads it too. */
    tu_top_row_t *rows;
    int n = tu_pprof_top(path, "-symbolize=none -sample_index=samples", &rows, NULL);
    ASSERT_GT(n, 0);
    free(rows);
    pbt_remove(path);
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"scale", test_scale},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
