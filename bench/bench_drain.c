/* bench_drain: a fixed drain run, for instruction counts under callgrind
 * (bench_callgrind.sh). The same stack copy goes into the capture slots
 * round after round, and the profiler's own drain (snapprof__profiler_drain)
 * rebases, unwinds it through the default unwinder chain and the module
 * cache, and delivers it to a pprof builder, as the sampling thread does
 * with a CPU-clock trigger's captures.
 *
 * Deterministic on the calling thread: one copy of a parked thread DEPTH
 * frames deep, taken once; the slots are filled with it under the sampler
 * lock, with fixed times, weights and pauses, so that the sampling thread
 * (which starts with the profile) never sees them and each round does the
 * same work. The target never runs, so its CPU timer never fires. Prints
 * what was delivered and judges nothing.
 *
 * White-box: it fills snapprof__capture_slot_t and calls the profiler's
 * internal drain, using only what both b588df0 (before the structure pass
 * of issue 26) and later trees have, so that bench_callgrind.sh can build
 * it against either.
 *
 * Usage: bench_drain [ROUNDS [SLOTS [DEPTH]]] (default 100 64 64); the
 * profile goes to $TMPDIR and is removed. */
#include "sampling_thread/profiler_internal.h"
#include "stack_copier/stack_copier.h"
#include "stack_copier/stack_copier_slots.h"

#include <snapprof/snapprof.h>

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define COPY_BYTES (1u << 20)

typedef struct target {
    int depth;
    snapprof_thread_t *token;
    atomic_int ready;
} target_t;

static volatile uint64_t g_sink;
static volatile int g_never; /* never set: the park is not an endless loop to the compiler */

/* Parks for good at the bottom: the copy is taken while it waits, and the
 * process exits with it still there. */
__attribute__((noinline)) static uint64_t recurse(target_t *t, int depth)
{
    if (depth > 1) {
        uint64_t r = recurse(t, depth - 1);
        g_sink += r; /* after the call: no sibling call */
        return r + 1;
    }
    atomic_store(&t->ready, 1);
    while (!g_never)
        pause();
    return 0;
}

static void *target_main(void *arg)
{
    target_t *t = arg;
    if (snapprof_thread_register(&t->token) != 0)
        abort();
    g_sink += recurse(t, t->depth);
    return NULL;
}

static int arg_or(int argc, char **argv, int i, int def)
{
    return argc > i ? atoi(argv[i]) : def;
}

int main(int argc, char **argv)
{
    int rounds = arg_or(argc, argv, 1, 100), nslots = arg_or(argc, argv, 2, 64),
        depth = arg_or(argc, argv, 3, 64);
    if (rounds < 1 || nslots < 1 || depth < 1) {
        fprintf(stderr, "usage: bench_drain [ROUNDS [SLOTS [DEPTH]]]\n");
        return 2;
    }
    static target_t tgt;
    tgt.depth = depth;
    pthread_t th;
    if (pthread_create(&th, NULL, target_main, &tgt) != 0)
        return 1;
    while (!atomic_load(&tgt.ready))
        usleep(1000);

    /* The profile: CPU mode with the CPU timer, so that it has capture
     * slots; a long interval, so that the sampling thread has little to
     * do meanwhile; the default unwinder chain; one pprof builder. */
    snapprof_params_t params;
    snapprof_params_init(&params);
    params.interval_ns = 200000000u;
    params.trigger = SNAPPROF_TRIGGER_CPU_TIMER;
    params.signal = SIGURG;
    char path[256];
    snprintf(path, sizeof path, "%s/bench_drain.%d.pb.gz",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
    snapprof_profiler_t *p;
    snapprof_builder_t *b;
    if (snapprof_profiler_create(&params, &tgt.token, 1, &p) != 0 ||
        snapprof_pprof_builder_create(path, &b) != 0 || snapprof_profiler_add_builder(p, b) != 0 ||
        snapprof_profiler_start(p) != 0) {
        fprintf(stderr, "bench_drain: cannot start the profile\n");
        return 1;
    }

    /* One copy of the parked thread (start installed the handler). */
    uint8_t *copy =
        mmap(NULL, COPY_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (copy == MAP_FAILED)
        return 1;
    snapprof__copy_request_t req = {.thread = tgt.token,
                                    .signo = SIGURG,
                                    .buffer = copy,
                                    .buffer_size = COPY_BYTES,
                                    .timeout_ns = 1000000000u};
    snapprof__copy_result_t res;
    snapprof_fail_reason_t why = SNAPPROF_FAIL_SEND;
    int rc = -1;
    for (int attempt = 0; rc != 0 && attempt < 10; attempt++)
        rc = snapprof__stack_copier_copy(&req, &res, &why);
    if (rc != 0) {
        fprintf(stderr, "bench_drain: copy failed: %s\n", snapprof_fail_reason_name(why));
        return 1;
    }
    /* Fixed figures where the copy had the clock's. */
    res.cpu_ns = 0;
    res.pause_ns = 1000;
    res.roundtrip_ns = 10000;

    snapprof__sampler_lock();
    snapprof__capture_pool_t *pool = &p->pool;
    snapprof__target_t *t = p->targets[0];
    if (!p->pool_ready || res.copy_size > pool->slot_bytes) {
        snapprof__sampler_unlock();
        fprintf(stderr, "bench_drain: no slots, or the copy (%zu B) does not fit one\n",
                res.copy_size);
        return 1;
    }
    size_t n = (size_t)nslots < pool->slot_count ? (size_t)nslots : pool->slot_count;
    uint64_t when = 1000000000u;
    for (int r = 0; r < rounds; r++) {
        for (size_t i = 0; i < n; i++) {
            snapprof__capture_slot_t *slot = &pool->slots[i];
            slot->target = &t->cap;
            slot->buffer = pool->memory + i * pool->slot_bytes;
            memcpy(slot->buffer, copy, res.copy_size);
            slot->res = res;
            slot->res.timestamp_ns = when++;
            slot->weight_ns = params.interval_ns;
            slot->fail = -1;
            if (slot->extra)
                memset(slot->extra, 0, pool->extra_size);
            atomic_fetch_add_explicit(&pool->full, 1, memory_order_relaxed);
            atomic_store_explicit(&slot->state, SNAPPROF__SLOT_FULL, memory_order_release);
        }
        snapprof__profiler_drain(p);
    }
    snapprof__sampler_unlock();

    snapprof_stats_t st;
    snapprof_profiler_get_stats(p, &st);
    printf("bench_drain: %d rounds x %zu slots, %zu B copies, %llu samples, %llu frames\n", rounds,
           n, res.copy_size, (unsigned long long)st.samples,
           (unsigned long long)st.unwind_frames_total);
    snapprof_profiler_stop(p);
    snapprof_profiler_destroy(p);
    unlink(path);
    snapprof_thread_release(tgt.token);
    munmap(copy, COPY_BYTES);
    return 0;
}
