/* profile_builder_create: the generic builder wrapper checks its ops and owns user_data. */
#include "test.h"
#include "test_util.h"

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

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"create", test_create},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
