/* The harness of the builders' allocation-failure tests (test_builder_oom.h). */
#include "test_builder_oom.h"

#include "test.h"
#include "test_util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

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

void builder_oom_skip_under_sanitizers(void)
{
    if (tu_sanitizer_build()) {
        printf("skipped: sanitizers replace malloc, which this test interposes\n");
        exit(TEST_SKIP);
    }
}

int builder_oom_fail_each(const builder_oom_case_t *c, void *ctx)
{
    int failures = 0;
    for (long n = 1;; n++) {
        long before = live;
        injected = 0;
        countdown = n;
        snapprof_builder_t *b = NULL;
        int err = c->create(ctx, &b);
        if (err != 0) {
            ASSERT_EQ(err, -ENOMEM);
            ASSERT_NULL(b);
            countdown = 0;
            ASSERT_EQ(live, before);
            failures++;
            continue;
        }
        int accepted = c->feed(ctx, b);
        err = c->complete(ctx, b);
        countdown = 0;
        if (!injected) {
            /* The allocation count ran out before the failure point. */
            ASSERT_OK(err);
            ASSERT_EQ(accepted, c->rounds);
            snapprof_builder_destroy(b);
            ASSERT_EQ(live, before);
            break;
        }
        failures++;
        if (err != 0)
            ASSERT_EQ(err, -ENOMEM);
        /* Whatever failed, the builder is intact: completing again writes
         * every sample that was accepted. */
        ASSERT_OK(c->complete(ctx, b));
        snapprof_builder_destroy(b);
        ASSERT_EQ(live, before);
        if (c->check)
            c->check(ctx, accepted);
        ASSERT_EQ(live, before);
    }
    return failures;
}
