/* The hooks' fast path against the attaching stand-in sampler
 * (test_preload_heap_attach.c, whose countdowns are always HA_INTERVAL
 * bytes): run with LD_PRELOAD="libsnapprof-heap.so
 * libtest_preload_heap_attach.so". Checks, by the stand-in's counts, that
 * the hooks hand it exactly a thread's first allocation and each one that
 * reaches the countdown (malloc's pre-subtracted path and calloc/realloc's
 * noting path sharing one countdown), that a sampled block's countdown is
 * drawn afresh, that a new gen makes the next allocation draw, that a new
 * thread's first allocation draws its own, and that frees are told for
 * sampled blocks and for nothing else. Prints "ok fast" on success. */
#include "test_preload_heap_attach.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 1000
#define SIZE 100 /* HA_INTERVAL / SIZE allocations per sample */

static ha_totals_fn totals_fn;
static int failed;

#define CHECK_EQ(what, got, want)                                                                  \
    do {                                                                                           \
        unsigned long long g_ = (got), w_ = (want);                                                \
        if (g_ != w_) {                                                                            \
            printf("FAIL %s: %llu, want %llu\n", what, g_, w_);                                    \
            failed = 1;                                                                            \
        }                                                                                          \
    } while (0)

static ha_totals_t totals(void)
{
    ha_totals_t t;
    totals_fn(&t);
    return t;
}

static void *g_blocks[N];

/* One allocation in a thread that never allocated: the hooks' countdown of
 * that thread is new, so the slow path draws it. */
static void *first_alloc(void *arg)
{
    ha_totals_t *before = arg;
    *before = totals();
    void *p = malloc(1);
    ha_totals_t after = totals();
    CHECK_EQ("a new thread's first allocation: slow path calls", after.slow - before->slow, 1);
    CHECK_EQ("a new thread's first allocation: draws", after.draws - before->draws, 1);
    free(p);
    return NULL;
}

int main(void)
{
    totals_fn = (ha_totals_fn)dlsym(RTLD_DEFAULT, "test_heap_attach_totals");
    ha_bump_fn bump = (ha_bump_fn)dlsym(RTLD_DEFAULT, "test_heap_attach_bump");
    if (!totals_fn || !bump) {
        printf("the attaching stand-in is not loaded\n");
        return 2;
    }
    /* A new gen: this thread's next allocation draws, whatever it had. */
    bump();
    ha_totals_t t0 = totals();
    /* N blocks of SIZE bytes, kept: malloc, calloc and realloc(NULL, n)
     * in turn, one countdown. The first draws (HA_INTERVAL, then takes
     * SIZE); every (HA_INTERVAL / SIZE)-th after reaches it. */
    for (int i = 0; i < N; i++) {
        switch (i % 3) {
        case 0:
            g_blocks[i] = malloc(SIZE);
            break;
        case 1:
            g_blocks[i] = calloc(1, SIZE);
            break;
        default:
            g_blocks[i] = realloc(NULL, SIZE);
            break;
        }
        if (!g_blocks[i])
            return 2;
    }
    ha_totals_t t1 = totals();
    uint64_t want_samples = N / (HA_INTERVAL / SIZE);
    CHECK_EQ("draws", t1.draws - t0.draws, 1);
    CHECK_EQ("samples", t1.samples - t0.samples, want_samples);
    CHECK_EQ("sampled bytes", t1.sampled_bytes - t0.sampled_bytes, want_samples * SIZE);
    /* Only the first and the crossings: a countdown left at 0 or not
     * drawn afresh after a sample would call the slow path more often. */
    CHECK_EQ("slow path calls", t1.slow - t0.slow, 1 + want_samples);
    CHECK_EQ("note_alloc calls once attached", t1.legacy_allocs - t0.legacy_allocs, 0);

    /* realloc of a block to a new size: a free of the old one (told only
     * if it was sampled) and an allocation of the full new size. Every
     * block grows by SIZE: the same count of samples again. */
    for (int i = 0; i < N; i++) {
        void *p = realloc(g_blocks[i], 2 * SIZE);
        if (!p)
            return 2;
        g_blocks[i] = p;
    }
    ha_totals_t t2 = totals();
    CHECK_EQ("frees of sampled blocks told by realloc", t2.sampled_frees - t1.sampled_frees,
             want_samples);
    CHECK_EQ("samples of realloc", t2.samples - t1.samples, 2 * want_samples);
    CHECK_EQ("draws during realloc", t2.draws - t1.draws, 0);

    /* A new gen in the middle of a countdown: the next allocation draws. */
    bump();
    void *q = malloc(SIZE);
    ha_totals_t t3 = totals();
    CHECK_EQ("draws after a new gen", t3.draws - t2.draws, 1);
    CHECK_EQ("slow calls after a new gen", t3.slow - t2.slow, 1);
    free(q);

    /* Frees: exactly the sampled ones are told. The blocks lie within a
     * few hundred KiB, so no unsampled one shares a filter bucket with a
     * sampled one. */
    for (int i = 0; i < N; i++)
        free(g_blocks[i]);
    ha_totals_t t4 = totals();
    CHECK_EQ("frees of sampled blocks told", t4.sampled_frees - t3.sampled_frees,
             t3.samples - t2.samples + 2 * want_samples);
    CHECK_EQ("frees of other blocks told", t4.other_frees - t1.other_frees, 0);

    /* A thread's first allocation draws its own countdown. */
    for (int k = 0; k < 4; k++) {
        pthread_t th;
        ha_totals_t before;
        if (pthread_create(&th, NULL, first_alloc, &before) != 0)
            return 2;
        pthread_join(th, NULL);
    }
    if (failed)
        return 1;
    printf("ok fast\n");
    return 0;
}
