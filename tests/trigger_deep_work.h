/* The deep-stack workload that trigger_deep_stacks_two_threads and
 * bench_deep share, and the builder that tells whole stacks from cut ones
 * (bench_unwind's deep profile uses it too). trigger_deep_work.c. */
#ifndef SNAPPROF_TESTS_TRIGGER_DEEP_WORK_H
#define SNAPPROF_TESTS_TRIGGER_DEEP_WORK_H

#include <snapprof/profile_builder.h>
#include <snapprof/snapprof.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* Recurses depth frames of about 670 bytes, sets *at_bottom and spins
 * until *stop. */
uint64_t trigger_deep_recurse(int depth, atomic_int *at_bottom, const atomic_int *stop);

/* A thread for trigger_deep_main: it registers (token, registered), then
 * recurses depth frames (at_bottom) until stop. clock is the caller's. */
typedef struct deep_thread {
    pthread_t th;
    snapprof_thread_t *token;
    clockid_t clock;
    int depth;
    atomic_int registered, at_bottom, stop;
    uint64_t result;
} deep_thread_t;

/* The thread's start routine (arg: its deep_thread_t); aborts when it
 * cannot register. */
void *trigger_deep_main(void *arg);

/* Zeroes d[0..n) and starts a trigger_deep_main thread for each, depth
 * frames deep, on an 8 MiB stack. Returns 0, or -1 when a thread could
 * not start. */
int trigger_deep_start(deep_thread_t *d, int n, int depth);

/* deep_tally_ops' user data: set depth, zero the counts. samples counts
 * the samples (a thread's remainder of CPU time no capture placed is not
 * one), whole those past depth frames and not ended by a marker
 * ("[truncated]" and the like). */
typedef struct deep_tally {
    size_t depth;
    atomic_size_t samples, whole;
} deep_tally_t;

extern const snapprof_builder_ops_t deep_tally_ops;

#endif
