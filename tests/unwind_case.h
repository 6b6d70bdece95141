/* What the CFI unwinder tests (test_unwinder_cfi.c, test_unwinder_debug_frame.c)
 * share and must compile with their own flags (-O2 without frame pointers):
 * the worker's entry, shares of samples judged against a threshold, frame
 * order, and the workload of a library that calls back into the test. A
 * header of static functions, included by one test file each. Define
 * UW_CASE_WHAT_WIDTH before including it to set the width of the labels. */
#ifndef SNAPPROF_TESTS_UNWIND_CASE_H
#define SNAPPROF_TESTS_UNWIND_CASE_H

#include "test.h"
#include "test_util.h"
#include "unwind_fuzz.h"
#include "unwind_test_util.h"
#include "unwinder/cfi_engine.h"

#include <stdio.h>
#include <string.h>

#ifndef UW_CASE_WHAT_WIDTH
#define UW_CASE_WHAT_WIDTH 48
#endif

/* The one worker entry: register, then run the body given as arg. */
static inline void *worker_main(void *arg)
{
    uw_worker_t *w = arg;
    uw_worker_enter(w);
    void (*body)(uw_worker_t *) = (void (*)(uw_worker_t *))w->arg;
    body(w);
    __asm__ volatile("" ::: "memory"); /* not a tail call: keep this frame */
    return NULL;
}

static inline void run_worker(uw_worker_t *w, void (*body)(uw_worker_t *), size_t stack_size)
{
    memset(w, 0, sizeof *w);
    w->entry = worker_main;
    w->arg = (void *)body;
    w->stack_size = stack_size;
    uw_worker_start(w);
}

/* Starts a worker on body (stack_size 0: the default), profiles it with
 * run into c (zeroed first) and stops it. */
static inline void uw_case_profile(uw_worker_t *w, void (*body)(uw_worker_t *), size_t stack_size,
                                   const uw_run_t *run, uw_collector_t *c)
{
    run_worker(w, body, stack_size);
    memset(c, 0, sizeof *c);
    uw_profile(w, run, c);
    uw_worker_stop(w);
}

/* The frames of the i-th sample of c when it is a stack of w's, else
 * NULL; *s is the sample. */
static inline const snapprof_frame_t *uw_case_worker_frames(const uw_collector_t *c, size_t i,
                                                            const uw_worker_t *w,
                                                            const uw_sample_t **s)
{
    *s = &c->samples[i];
    if ((*s)->tid != w->tid || (*s)->count == 0)
        return NULL;
    return uw_frames(c, *s);
}

/* Counts of samples whose frames pass a check. */
typedef struct tally {
    size_t seen, ok;
} tally_t;

static inline void expect_rate(const tally_t *t, const char *what, size_t min_seen, double min_pct)
{
    double pct = t->seen ? 100.0 * (double)t->ok / (double)t->seen : 0;
    printf("%-*s %zu of %zu (%.2f %%)\n", UW_CASE_WHAT_WIDTH, what, t->ok, t->seen, pct);
    /* Sanitizer runs are slower and cut short (see uw_profile), and on a
     * loaded machine they may see only a handful of such samples: then a
     * few, all right, still show the path works. */
    size_t need = min_seen;
    if (tu_sanitizer_build())
        need = min_seen / 20 > 5 ? min_seen / 20 : 5;
    ASSERT_GE(t->seen, need);
    if (pct < min_pct)
        TEST_FAIL("%s: %.2f %% < %.2f %%", what, pct, min_pct);
}

/* The shape of stacks taken while the thread runs. TSan defers signals:
 * our handler runs later with the registers of the moment the signal
 * came, while the stack has moved on, so the copy and the registers
 * disagree. There the run still exercises the unwinders on those
 * inconsistent copies (which must be safe), but shapes are not judged. */
static inline void expect_shape(const tally_t *t, const char *what, size_t min_seen, double min_pct)
{
#if defined(__SANITIZE_THREAD__)
    printf("%-*s %zu of %zu (not judged under TSan)\n", UW_CASE_WHAT_WIDTH, what, t->ok, t->seen);
    (void)min_seen, (void)min_pct;
#else
    expect_rate(t, what, min_seen, min_pct);
#endif
}

/* Whether f[0..n) contains names[0], then names[1] further out, ... */
static inline int in_order(const snapprof_frame_t *f, size_t n, const char *const *names)
{
    size_t i = 0;
    for (const char *const *name = names; *name; name++) {
        while (i < n && !uw_frame_is(&f[i], *name))
            i++;
        if (i == n)
            return 0;
        i++;
    }
    return 1;
}

/* Fills u as uw_case_fuzz() takes it: u[0] and u[1] the two unwinders
 * whose CFI engines it watches (the test's own), u[2] the frame-pointer
 * unwinder and u[3] the CFI table unwinder, which the chains add. */
static inline void uw_case_fuzz_unwinders(snapprof_unwinder_t *u[4], snapprof_unwinder_t *first,
                                          snapprof_unwinder_t *second)
{
    u[0] = first;
    u[1] = second;
    u[2] = uw_create_unwinder(UW_FP);
    u[3] = uw_create_unwinder(UW_CFI_TABLE);
}

/* Runs spec over 3000 corrupt copies with the CFI engines of u[0], u[1]
 * and u[3] (uw_case_fuzz_unwinders()) watched: no read may fall outside the copy and the loaded
 * objects, and more than 1000 must read the copy. Destroys the four
 * unwinders; returns the result for the caller's further checks. */
static inline uw_fuzz_result_t uw_case_fuzz(uw_fuzz_spec_t spec, snapprof_unwinder_t *u[4])
{
    spec.seeds = 3000;
    spec.engines[0] = snapprof__cfi_of(u[0]);
    spec.engines[1] = snapprof__cfi_of(u[1]);
    spec.engines[2] = snapprof__cfi_of(u[3]);
    spec.engine_count = 3;
    uw_fuzz_result_t r;
    uw_fuzz_corrupt_copies(&spec, &r);
    ASSERT_UEQ(r.bad_reads, 0);
    ASSERT_GT(r.copy_reads, 1000);
    for (int i = 0; i < 4; i++)
        snapprof_unwinder_destroy(u[i]);
    return r;
}

/* Defines the workload of a library's code between two of the test's
 * frames: P##_body loops on P##_caller, which calls OUTER(n, P##_callback)
 * (a function of the library, or a pointer to one), which calls back
 * P##_callback and its leaf P##_callback_hot. The tests judge the stacks
 * by these names. */
#define UW_CASE_CALLBACK_WORKLOAD(P, OUTER)                                                        \
    __attribute__((noinline)) uint64_t P##_callback_hot(uint64_t n)                                \
    {                                                                                              \
        uint64_t x = n | 9;                                                                        \
        for (uint64_t i = 0; i < n; i++) {                                                         \
            x = x * 1181783497276652981u + 7;                                                      \
            __asm__ volatile("" : "+r"(x));                                                        \
        }                                                                                          \
        return x;                                                                                  \
    }                                                                                              \
    __attribute__((noinline)) uint64_t P##_callback(uint64_t n)                                    \
    {                                                                                              \
        uint64_t r = P##_callback_hot(n);                                                          \
        __asm__ volatile("" : "+r"(r));                                                            \
        return r ^ 1;                                                                              \
    }                                                                                              \
    __attribute__((noinline)) uint64_t P##_caller(uint64_t n)                                      \
    {                                                                                              \
        uint64_t r = OUTER(n, P##_callback);                                                       \
        __asm__ volatile("" : "+r"(r));                                                            \
        return r + 3;                                                                              \
    }                                                                                              \
    __attribute__((noinline)) void P##_body(uw_worker_t *w)                                        \
    {                                                                                              \
        while (!atomic_load_explicit(&w->stop, memory_order_relaxed))                              \
            g_sink += P##_caller(20000);                                                           \
    }

#endif
