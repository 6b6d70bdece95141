/* profile_builder_create: the generic builder wrapper checks its ops and owns user_data. */
#include "test.h"
#include "test_util.h"

#include "profile_builder/profile_builder_calls.h"
#include "profile_builder/profile_builder_internal.h"

#include <errno.h>
#include <snapprof/profile_builder.h>

static int destroyed;
static void *destroyed_with;

static int on_sample(void *user_data, const snapprof_sample_t *sample)
{
    (void)user_data;
    (void)sample;
    return 0;
}

static int samples_seen;
static snapprof_sample_kind_t last_kind;

static int count_sample(void *user_data, const snapprof_sample_t *sample)
{
    (void)user_data;
    samples_seen++;
    last_kind = SNAPPROF_SAMPLE_KIND(sample);
    return 0;
}

static void on_destroy(void *user_data)
{
    destroyed++;
    destroyed_with = user_data;
}

static void test_create(void)
{
    int token;
    snapprof_builder_ops_t ops = {
        .version = SNAPPROF_BUILDER_OPS_VERSION,
        .name = "test",
        .xOnSample = on_sample,
        .xDestroy = on_destroy,
    };
    snapprof_builder_t *b = NULL;

    ASSERT_EQ(snapprof_builder_create(NULL, &token, &b), -EINVAL);
    ASSERT_EQ(snapprof_builder_create(&ops, &token, NULL), -EINVAL);

    /* Versions below 1 are not a layout we know; a failed create never
     * calls xDestroy. */
    snapprof_builder_ops_t old = ops;
    old.version = 0;
    ASSERT_EQ(snapprof_builder_create(&old, &token, &b), SNAPPROF_EVERSION);
    ASSERT_NULL(b);
    old.version = -3;
    ASSERT_EQ(snapprof_builder_create(&old, &token, &b), SNAPPROF_EVERSION);

    /* xOnSample is required. */
    snapprof_builder_ops_t no_sample = ops;
    no_sample.xOnSample = NULL;
    ASSERT_EQ(snapprof_builder_create(&no_sample, &token, &b), -EINVAL);
    ASSERT_NULL(b);
    ASSERT_EQ(destroyed, 0);

    /* A newer version is accepted: members are append-only. */
    snapprof_builder_ops_t newer = ops;
    newer.version = SNAPPROF_BUILDER_OPS_VERSION + 1;
    ASSERT_OK(snapprof_builder_create(&newer, &token, &b));
    snapprof_builder_destroy(b);
    ASSERT_EQ(destroyed, 1);

    ASSERT_OK(snapprof_builder_create(&ops, &token, &b));
    ASSERT_NOT_NULL(b);
    ASSERT_PTR_EQ(b->ops, &ops);
    ASSERT_PTR_EQ(b->user_data, &token);
    snapprof_builder_destroy(b);
    ASSERT_EQ(destroyed, 2);
    ASSERT_PTR_EQ(destroyed_with, &token);

    /* Optional members may be NULL, xDestroy included. */
    snapprof_builder_ops_t minimal = {.version = 1, .xOnSample = on_sample};
    ASSERT_OK(snapprof_builder_create(&minimal, NULL, &b));
    snapprof_builder_destroy(b);
    ASSERT_EQ(destroyed, 2);

    snapprof_builder_destroy(NULL);
}

/* The sample record's versions: a builder of ops version 1 never sees a
 * heap sample (it would weigh it as time); one of version 2 sees every
 * kind; a record made before 0.7.0 (size 0) is a time sample. */
static void test_sample_kinds_by_version(void)
{
    snapprof_builder_ops_t v1 = {.version = 1, .xOnSample = count_sample};
    snapprof_builder_ops_t v2 = {.version = 2, .xOnSample = count_sample};
    snapprof_builder_t *b1 = NULL, *b2 = NULL;
    ASSERT_OK(snapprof_builder_create(&v1, NULL, &b1));
    ASSERT_OK(snapprof_builder_create(&v2, NULL, &b2));

    snapprof_frame_t f = {.kind = SNAPPROF_FRAME_MARKER, .name = "x"};
    snapprof_sample_t old = {.frames = &f, .frame_count = 1, .tid = 1, .thread_name = "t"};
    snapprof_sample_t heap = old;
    heap.size = sizeof heap;
    heap.kind = SNAPPROF_SAMPLE_KIND_HEAP_ALLOC;
    heap.bytes = 4096;

    samples_seen = 0;
    ASSERT_EQ(snapprof__builder_sample(b1, &old), 0);
    ASSERT_EQ(samples_seen, 1);
    ASSERT_EQ(last_kind, SNAPPROF_SAMPLE_KIND_TIME);
    ASSERT_EQ(snapprof__builder_sample(b1, &heap), 0);
    ASSERT_EQ(samples_seen, 1);
    ASSERT_EQ(snapprof__builder_sample(b2, &heap), 0);
    ASSERT_EQ(samples_seen, 2);
    ASSERT_EQ(last_kind, SNAPPROF_SAMPLE_KIND_HEAP_ALLOC);

    /* A size that stops short of `kind` hides it. */
    heap.size = offsetof(snapprof_sample_t, size) + sizeof heap.size;
    ASSERT_EQ(SNAPPROF_SAMPLE_KIND(&heap), SNAPPROF_SAMPLE_KIND_TIME);

    ASSERT_STR_EQ(snapprof_sample_kind_name(SNAPPROF_SAMPLE_KIND_HEAP_FREE), "heap_free");
    ASSERT_STR_EQ(snapprof_sample_kind_name((snapprof_sample_kind_t)99), "unknown");
    snapprof_builder_destroy(b1);
    snapprof_builder_destroy(b2);
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"create", test_create},
        {"sample_kinds_by_version", test_sample_kinds_by_version},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
