/* profile_builder_heap_oom: in the heap and peak builders, each failed allocation is reported,
 * leaks nothing, loses nothing. */
#include "test.h"
#include "test_profile_builder_util.h"
#include "test_util.h"

#include <snapprof/heap_profile.h>
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
    Perftools__Profiles__Profile *p = pbt_load(path);
    pbt_check_valid(p);
    int64_t allocs = 0, inuse = 0;
    for (size_t i = 0; i < p->n_sample; i++) {
        allocs += p->sample[i]->value[0];
        inuse += p->sample[i]->value[2];
    }
    ASSERT_EQ(allocs, accepted);
    ASSERT_EQ(inuse, accepted - frees);
    perftools__profiles__profile__free_unpacked(p, NULL);
}

static int create(int peak, const char *path, snapprof_builder_t **b)
{
    int err =
        peak ? snapprof_heap_peak_builder_create(path, b) : snapprof_heap_builder_create(path, b);
    if (err == 0)
        ASSERT_OK(snapprof_heap_builder_set_interval(*b, 1));
    return err;
}

static void test_oom(void)
{
    if (tu_sanitizer_build()) {
        printf("skipped: sanitizers replace malloc, which this test interposes\n");
        exit(TEST_SKIP);
    }
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

        int failures = 0;
        for (long n = 1;; n++) {
            long before = live;
            injected = 0;
            countdown = n;
            b = NULL;
            int err = create(peak, path, &b);
            if (err != 0) {
                ASSERT_EQ(err, -ENOMEM);
                ASSERT_NULL(b);
                countdown = 0;
                ASSERT_EQ(live, before);
                failures++;
                continue;
            }
            int accepted = feed(b, &frees);
            err = pbt_complete(b, SNAPPROF_MODE_CPU, NULL);
            countdown = 0;
            if (!injected) {
                ASSERT_OK(err);
                ASSERT_EQ(accepted, ROUNDS);
                snapprof_builder_destroy(b);
                ASSERT_EQ(live, before);
                break;
            }
            failures++;
            if (err != 0)
                ASSERT_EQ(err, -ENOMEM);
            /* Whatever failed, the builder is intact: completing again
             * writes every sample that was accepted. */
            ASSERT_OK(pbt_complete(b, SNAPPROF_MODE_CPU, NULL));
            snapprof_builder_destroy(b);
            ASSERT_EQ(live, before);
            if (!peak)
                check_output(path, accepted, frees);
            ASSERT_EQ(live, before);
        }
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
