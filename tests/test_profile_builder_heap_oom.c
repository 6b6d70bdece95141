/* profile_builder_heap_oom: in the heap and peak builders, each failed allocation is reported,
 * leaks nothing, loses nothing. */
#include "test.h"
#include "test_builder_oom.h"
#include "test_profile_builder_util.h"
#include "test_util.h"

#include <snapprof/heap_profile.h>
#include <snapprof/snapprof.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ROUNDS 40

/* Feeds ROUNDS heap samples (allocations, every third one freed) at fresh
 * stacks and labels, so each needs new strings, locations and table
 * growth; returns how many allocations were accepted (a free that fails is
 * simply not counted, as an allocation that failed is not). */
static int feed(snapprof_builder_t *b, int *frees)
{
    int accepted = 0;
    *frees = 0;
    for (int i = 0; i < ROUNDS; i++) {
        char name[32], label[32];
        snprintf(name, sizeof name, "alloc_fn_%d", i / 2);
        snprintf(label, sizeof label, "value_%d", i % 7);
        snapprof_frame_t frames[] = {
            {pbt_jit_module.start + (uintptr_t)i, &pbt_jit_module, SNAPPROF_FRAME_JIT, name},
            {0, NULL, SNAPPROF_FRAME_MARKER, "[truncated]"},
        };
        snapprof_label_t labels[] = {{.key = "k", .str = label}};
        snapprof_sample_t s = {.frames = frames,
                               .frame_count = 2,
                               .tid = 1,
                               .thread_name = "t",
                               .labels = labels,
                               .label_count = 1,
                               .size = sizeof s,
                               .kind = SNAPPROF_SAMPLE_KIND_HEAP_ALLOC,
                               .bytes = 100};
        int err = b->ops->xOnSample(b->user_data, &s);
        if (err != 0) {
            ASSERT_EQ(err, -ENOMEM);
            continue;
        }
        accepted++;
        if (i % 3 == 0) {
            s.kind = SNAPPROF_SAMPLE_KIND_HEAP_FREE;
            err = b->ops->xOnSample(b->user_data, &s);
            if (err == 0)
                ++*frees;
            else
                ASSERT_EQ(err, -ENOMEM);
        }
    }
    return accepted;
}

/* With an interval of 1 nothing is scaled: the values are the counts. */
static void check_output(const char *path, int accepted, int frees)
{
    Snapprof__Pprof__Profile *p = pbt_load(path);
    pbt_check_valid(p);
    int64_t allocs = 0, inuse = 0;
    for (size_t i = 0; i < p->n_sample; i++) {
        allocs += p->sample[i]->value[0];
        inuse += p->sample[i]->value[2];
    }
    ASSERT_EQ(allocs, accepted);
    ASSERT_EQ(inuse, accepted - frees);
    snapprof__pprof__profile__free_unpacked(p, NULL);
}

static int create(int peak, const char *path, snapprof_builder_t **b)
{
    int err =
        peak ? snapprof_heap_peak_builder_create(path, b) : snapprof_heap_builder_create(path, b);
    if (err == 0)
        ASSERT_OK(snapprof_heap_builder_set_interval(*b, 1));
    return err;
}

/* What the runs share: the builder, where it writes, the frees of the
 * last feed. */
typedef struct run {
    int peak;
    char *path;
    int frees;
} run_t;

static int run_create(void *ctx, snapprof_builder_t **b)
{
    run_t *r = ctx;
    return create(r->peak, r->path, b);
}

static int run_feed(void *ctx, snapprof_builder_t *b)
{
    run_t *r = ctx;
    return feed(b, &r->frees);
}

static int run_complete(void *ctx, snapprof_builder_t *b)
{
    (void)ctx;
    return pbt_complete(b, SNAPPROF_MODE_CPU, NULL);
}

static void run_check(void *ctx, int accepted)
{
    run_t *r = ctx;
    if (!r->peak)
        check_output(r->path, accepted, r->frees);
}

static void test_oom(void)
{
    builder_oom_skip_under_sanitizers();
    char *path = pbt_tmp_path("pb-heap-oom", "oom.heap.pb.gz");
    for (int peak = 0; peak < 2; peak++) {
        /* A clean run first, so the module cache has made whatever it keeps
         * for the life of the process before blocks are counted. In the
         * peak builder's clean run nothing is freed before the end, so its
         * peak is the end. */
        snapprof_builder_t *b = NULL;
        ASSERT_OK(create(peak, path, &b));
        int frees;
        ASSERT_EQ(feed(b, &frees), ROUNDS);
        ASSERT_OK(pbt_complete(b, SNAPPROF_MODE_CPU, NULL));
        snapprof_builder_destroy(b);
        if (!peak)
            check_output(path, ROUNDS, frees);

        run_t run = {.peak = peak, .path = path};
        static const builder_oom_case_t c = {ROUNDS, run_create, run_feed, run_complete, run_check};
        int failures = builder_oom_fail_each(&c, &run);
        printf("%s: %d injected allocation failures, all handled\n", peak ? "peak" : "heap",
               failures);
        ASSERT_GT(failures, 20);
    }
    pbt_remove(path);
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"oom", test_oom},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
