/* profile_builder_pprof_oom: each failed allocation is reported, leaks nothing, loses nothing. */
#include "test.h"
#include "test_profile_builder_util.h"
#include "test_util.h"

#include <snapprof/snapprof.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* An interposed allocator: counts live blocks and fails the Nth call from
 * when it is armed. Sanitizer builds bring their own allocator, which runs
 * before main and must not meet this one, so there it is not even
 * compiled and the test is skipped. */
#ifndef SNAPPROF_SANITIZER_BUILD
void *__libc_malloc(size_t size);
void *__libc_calloc(size_t n, size_t size);
void *__libc_realloc(void *p, size_t size);
void __libc_free(void *p);

static long live;
static long countdown; /* 0: disarmed; else fail when it reaches 0 */
static int injected;

static int should_fail(void)
{
    if (countdown > 0 && --countdown == 0) {
        injected = 1;
        errno = ENOMEM; /* as the real allocator does */
        return 1;
    }
    return 0;
}

void *malloc(size_t size)
{
    if (should_fail())
        return NULL;
    void *p = __libc_malloc(size);
    if (p != NULL)
        live++;
    return p;
}

void *calloc(size_t n, size_t size)
{
    if (should_fail())
        return NULL;
    void *p = __libc_calloc(n, size);
    if (p != NULL)
        live++;
    return p;
}

void *realloc(void *old, size_t size)
{
    if (should_fail())
        return NULL;
    void *p = __libc_realloc(old, size);
    if (p != NULL && old == NULL)
        live++;
    return p;
}

void free(void *p)
{
    if (p != NULL)
        live--;
    __libc_free(p);
}
#else
static long live;
static long countdown;
static int injected;
#endif

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
    Perftools__Profiles__Profile *p = pbt_load(path);
    pbt_check_valid(p);
    int64_t count = 0;
    for (size_t i = 0; i < p->n_sample; i++)
        count += p->sample[i]->value[0];
    ASSERT_EQ(count, accepted);
    perftools__profiles__profile__free_unpacked(p, NULL);
}

static void test_oom(void)
{
    if (tu_sanitizer_build()) {
        printf("skipped: sanitizers replace malloc, which this test interposes\n");
        exit(TEST_SKIP);
    }
    char *path = pbt_tmp_path("pb-oom", "oom.pb.gz");
    snapprof_stats_t stats;
    memset(&stats, 0, sizeof stats);
    stats.samples = ROUNDS;
    stats.failed[SNAPPROF_FAIL_TIMEOUT] = 1;

    /* A clean run first, so the module cache has made whatever it keeps
     * for the life of the process before blocks are counted. */
    snapprof_builder_t *b = pbt_create(path);
    ASSERT_EQ(feed(b), ROUNDS);
    ASSERT_OK(pbt_complete(b, SNAPPROF_MODE_CPU, &stats));
    snapprof_builder_destroy(b);
    check_output(path, ROUNDS);

    int failures = 0;
    for (long n = 1;; n++) {
        long before = live;
        injected = 0;
        countdown = n;
        b = NULL;
        int err = snapprof_pprof_builder_create(path, &b);
        if (err != 0) {
            ASSERT_EQ(err, -ENOMEM);
            ASSERT_NULL(b);
            countdown = 0;
            ASSERT_EQ(live, before);
            failures++;
            continue;
        }
        int accepted = feed(b);
        err = pbt_complete(b, SNAPPROF_MODE_CPU, &stats);
        countdown = 0;
        if (!injected) {
            /* The allocation count ran out before the failure point. */
            ASSERT_OK(err);
            ASSERT_EQ(accepted, ROUNDS);
            snapprof_builder_destroy(b);
            ASSERT_EQ(live, before);
            break;
        }
        failures++;
        if (err != 0)
            ASSERT_EQ(err, -ENOMEM);
        /* Whatever failed, the builder is intact: completing again writes
         * every sample that was accepted. */
        ASSERT_OK(pbt_complete(b, SNAPPROF_MODE_CPU, &stats));
        snapprof_builder_destroy(b);
        ASSERT_EQ(live, before);
        check_output(path, accepted);
        ASSERT_EQ(live, before);
    }
    printf("%d injected allocation failures, all handled\n", failures);
    ASSERT_GT(failures, 20);
    pbt_remove(path);
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"oom", test_oom},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
