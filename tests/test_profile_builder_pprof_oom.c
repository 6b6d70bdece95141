/* profile_builder_pprof_oom: each failed allocation is reported, leaks nothing, loses nothing. */
#include "test.h"
#include "test_builder_oom.h"
#include "test_profile_builder_util.h"
#include "test_util.h"

#include <snapprof/snapprof.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const snapprof_module_t lib = {
    .start = 0x40000000u,
    .limit = 0x40100000u,
    .path = "/nonexistent/snapprof/liboom.so",
    .build_id = "00",
    .kind = SNAPPROF_MODULE_NATIVE,
    .is_loaded = 1,
};

#define ROUNDS 40

/* Feeds ROUNDS samples with fresh names, pcs and labels (so each one needs
 * new strings, functions, locations and table growth); returns how many
 * were accepted. */
static int feed(snapprof_builder_t *b)
{
    int accepted = 0;
    for (int i = 0; i < ROUNDS; i++) {
        char name[32], label[32];
        snprintf(name, sizeof name, "fn_%d", i);
        snprintf(label, sizeof label, "value_%d", i % 7);
        snapprof_frame_t frames[] = {
            {lib.start + (uintptr_t)i * 8, &lib, SNAPPROF_FRAME_NATIVE, NULL},
            {pbt_jit_module.start + (uintptr_t)i, &pbt_jit_module, SNAPPROF_FRAME_JIT, name},
            {0, NULL, SNAPPROF_FRAME_MARKER, i % 2 ? "[truncated]" : "[unknown]"},
        };
        snapprof_label_t labels[] = {{.key = "k", .str = label}, {.key = "n", .num = i % 3}};
        snapprof_sample_t s = {.frames = frames,
                               .frame_count = 3,
                               .cpu_ns = 1,
                               .wall_ns = 1,
                               .tid = 1 + i % 3,
                               .thread_name = i % 2 ? "odd" : "even",
                               .labels = labels,
                               .label_count = 2};
        int err = b->ops->xOnSample(b->user_data, &s);
        if (err == 0)
            accepted++;
        else
            ASSERT_EQ(err, -ENOMEM);
    }
    return accepted;
}

static void check_output(const char *path, int accepted)
{
    Snapprof__Pprof__Profile *p = pbt_load(path);
    pbt_check_valid(p);
    int64_t count = 0;
    for (size_t i = 0; i < p->n_sample; i++)
        count += p->sample[i]->value[0];
    ASSERT_EQ(count, accepted);
    snapprof__pprof__profile__free_unpacked(p, NULL);
}

/* What the runs share: where they write, the stats they write. */
typedef struct run {
    char *path;
    snapprof_stats_t stats;
} run_t;

static int run_create(void *ctx, snapprof_builder_t **b)
{
    return snapprof_pprof_builder_create(((run_t *)ctx)->path, b);
}

static int run_feed(void *ctx, snapprof_builder_t *b)
{
    (void)ctx;
    return feed(b);
}

static int run_complete(void *ctx, snapprof_builder_t *b)
{
    return pbt_complete(b, SNAPPROF_MODE_CPU, &((run_t *)ctx)->stats);
}

static void run_check(void *ctx, int accepted)
{
    check_output(((run_t *)ctx)->path, accepted);
}

static void test_oom(void)
{
    builder_oom_skip_under_sanitizers();
    run_t run = {.path = pbt_tmp_path("pb-oom", "oom.pb.gz")};
    run.stats.samples = ROUNDS;
    run.stats.failed[SNAPPROF_FAIL_TIMEOUT] = 1;

    /* A clean run first, so the module cache has made whatever it keeps
     * for the life of the process before blocks are counted. */
    snapprof_builder_t *b = pbt_create(run.path);
    ASSERT_EQ(feed(b), ROUNDS);
    ASSERT_OK(pbt_complete(b, SNAPPROF_MODE_CPU, &run.stats));
    snapprof_builder_destroy(b);
    check_output(run.path, ROUNDS);

    static const builder_oom_case_t c = {ROUNDS, run_create, run_feed, run_complete, run_check};
    int failures = builder_oom_fail_each(&c, &run);
    printf("%d injected allocation failures, all handled\n", failures);
    ASSERT_GT(failures, 20);
    pbt_remove(run.path);
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"oom", test_oom},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
