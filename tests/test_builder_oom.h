/* The harness of the builders' allocation-failure tests
 * (profile_builder_pprof_oom, profile_builder_heap_oom): an interposed
 * allocator that counts live blocks and fails the Nth allocation from when
 * it is armed, and the loop that fails each allocation of a builder's
 * create, feed and write in turn. A test that links test_builder_oom.c
 * interposes malloc for its whole executable, so it is an executable of
 * its own. Sanitizer builds bring their own allocator, which runs before
 * main and must not meet this one: there it is not even compiled, and
 * builder_oom_skip_under_sanitizers() skips the test. */
#ifndef SNAPPROF_TESTS_TEST_BUILDER_OOM_H
#define SNAPPROF_TESTS_TEST_BUILDER_OOM_H

#include <snapprof/snapprof.h>

/* What a test does with its builder; ctx is passed to each. */
typedef struct builder_oom_case {
    int rounds; /* how many samples feed offers */
    /* Creates the builder: 0, or a negative errno with *b left NULL. */
    int (*create)(void *ctx, snapprof_builder_t **b);
    /* Feeds it rounds samples; returns how many it accepted (a sample
     * refused must be refused with -ENOMEM). */
    int (*feed)(void *ctx, snapprof_builder_t *b);
    /* Completes the profile (writes it): 0 or a negative errno. */
    int (*complete)(void *ctx, snapprof_builder_t *b);
    /* Checks the file written holds the accepted samples; NULL: none. */
    void (*check)(void *ctx, int accepted);
} builder_oom_case_t;

/* Exits with TEST_SKIP (saying why) in a sanitizer build. */
void builder_oom_skip_under_sanitizers(void);

/* Fails the 1st, 2nd, ... allocation from the builder's creation on, one
 * run each, until a run needs no more allocations than that: each failure
 * must come back as -ENOMEM, leak nothing, and leave the builder intact
 * (completing again writes every sample accepted, which check sees).
 * Returns how many runs had a failure injected. */
int builder_oom_fail_each(const builder_oom_case_t *c, void *ctx);

#endif
