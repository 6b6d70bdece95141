/* The recursion of trigger_deep_stacks_two_threads, compiled on its own
 * with -O2 -fomit-frame-pointer (tests/trigger.cmake), as a distribution
 * builds its code: the unwinders need the CFI to walk it, and the copy
 * must hold the whole stack. About 670 bytes a frame: 2000 frames hold
 * about 1.3 MiB of live stack, the case of issue 25 item 2. bench_deep
 * runs the same recursion (bench/CMakeLists.txt builds it alike). The
 * thread around it and the tally of whole stacks live here too. */
#include "trigger_deep_work.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__attribute__((noinline)) uint64_t trigger_deep_recurse(int depth, atomic_int *at_bottom,
                                                        const atomic_int *stop)
{
    volatile char pad[640];
    pad[0] = (char)depth;
    pad[sizeof pad - 1] = (char)depth;
    /* The whole array escapes: clang otherwise kept only the two bytes
     * used (a 16-byte frame, 2000 frames in 32 KiB, no deep stack at all). */
    __asm__ volatile("" : : "r"(pad) : "memory");
    if (depth > 0)
        return trigger_deep_recurse(depth - 1, at_bottom, stop) + (uint64_t)pad[0];
    atomic_store(at_bottom, 1);
    uint64_t x = 1;
    while (!atomic_load_explicit(stop, memory_order_relaxed)) {
        for (int i = 0; i < 10000; i++)
            x = x * 6364136223846793005u + 1;
        __asm__ volatile("" : "+r"(x));
    }
    return x + (uint64_t)pad[sizeof pad - 1];
}

void *trigger_deep_main(void *arg)
{
    deep_thread_t *d = arg;
    if (snapprof_thread_register(&d->token) != 0) {
        fprintf(stderr, "trigger_deep_main: snapprof_thread_register failed\n");
        abort();
    }
    atomic_store(&d->registered, 1);
    d->result = trigger_deep_recurse(d->depth, &d->at_bottom, &d->stop);
    return NULL;
}

int trigger_deep_start(deep_thread_t *d, int n, int depth)
{
    memset(d, 0, (size_t)n * sizeof *d);
    for (int i = 0; i < n; i++) {
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, 8u << 20);
        d[i].depth = depth;
        int rc = pthread_create(&d[i].th, &attr, trigger_deep_main, &d[i]);
        pthread_attr_destroy(&attr);
        if (rc != 0)
            return -1;
    }
    return 0;
}

/* Sampling thread. */
static int deep_tally_sample(void *user_data, const snapprof_sample_t *s)
{
    deep_tally_t *t = user_data;
    /* A thread's "[kernel and unsampled]" remainder is CPU time no capture
     * placed, not a sample (stats.samples leaves it out too): counted, it
     * made 2 of ~4000 samples "incomplete" in bench_unwind. */
    if (s->flags & SNAPPROF_SAMPLE_REMAINDER)
        return 0;
    atomic_fetch_add(&t->samples, 1);
    if (s->frame_count > t->depth && s->frames[s->frame_count - 1].kind != SNAPPROF_FRAME_MARKER)
        atomic_fetch_add(&t->whole, 1);
    return 0;
}

const snapprof_builder_ops_t deep_tally_ops = {
    .version = 1, /* receives time samples only */
    .name = "deep_tally",
    .xOnSample = deep_tally_sample,
};
