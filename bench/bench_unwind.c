/* bench_unwind: unwind cost per sample of the frame-pointer, libunwind and
 * hybrid unwinders on the same stack copies (depths 10, 100, 1000), next to
 * libunwind's local unw_backtrace() on the same live stacks, as ratios.
 *
 * A target thread recurses to the depth and times unw_backtrace() on its
 * own stack; while it spins at the bottom, the real stack copier takes
 * copies of it; then every unwinder walks every copy through the unwinder
 * chain, as the profiler would (module lookups per frame included). The
 * workload keeps frame pointers (the project's flags) so that all three
 * unwinders can walk it. Prints figures, judges nothing.
 *
 * Usage: bench_unwind [--quick]; BENCH_READS=1 also prints how many words
 * the CFI engine reads from the copy and from modules per sample. */
#include "stack_copier/stack_copier.h"
#include "unwinder/libunwind_internal.h"

#include <libunwind.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define COPIES 8
#define MAX_FRAMES 4096

/* Thread CPU time: the machine is shared, and what a sample costs is the
 * CPU it burns, not the time others held the core. */
static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

typedef struct target {
    int depth, reps;
    snapprof_thread_t *token;
    atomic_int ready, stop;
    uint64_t ref_ns; /* unw_backtrace per call, median of batches */
    int ref_frames;
} target_t;

static volatile uint64_t g_sink;

__attribute__((noinline)) static uint64_t bottom(target_t *t)
{
    void *pcs[MAX_FRAMES];
    int n = 0;
    for (int i = 0; i < 20; i++) /* fill libunwind's caches */
        n = unw_backtrace(pcs, MAX_FRAMES);
    enum { BATCHES = 9 };
    uint64_t batch[BATCHES];
    int per = t->reps / BATCHES + 1;
    for (int b = 0; b < BATCHES; b++) {
        uint64_t t0 = now_ns();
        for (int i = 0; i < per; i++)
            n = unw_backtrace(pcs, MAX_FRAMES);
        batch[b] = (now_ns() - t0) / (uint64_t)per;
    }
    qsort(batch, BATCHES, sizeof batch[0], cmp_u64);
    t->ref_ns = batch[BATCHES / 2];
    t->ref_frames = n;
    atomic_store(&t->ready, 1);
    uint64_t x = 1;
    while (!atomic_load_explicit(&t->stop, memory_order_relaxed)) {
        x = x * 6364136223846793005u + 1;
        __asm__ volatile("" : "+r"(x));
    }
    return x;
}

__attribute__((noinline)) static uint64_t recurse(target_t *t, int depth)
{
    if (depth == 0)
        return bottom(t);
    uint64_t r = recurse(t, depth - 1);
    __asm__ volatile("" : "+r"(r));
    return r + 1;
}

static void *target_main(void *arg)
{
    target_t *t = arg;
    if (snapprof_thread_register(&t->token) != 0)
        abort();
    g_sink += recurse(t, t->depth);
    return NULL;
}

typedef struct copy {
    uint8_t *buffer;
    size_t size;
    snapprof_regs_t regs;
    snapprof_stack_copy_t stack;
} copy_t;

static snapprof_unwinder_t *make_unwinder(int kind)
{
    snapprof_unwinder_t *u = NULL;
    int rc = kind == 0   ? snapprof_frame_pointer_unwinder_create(&u)
             : kind == 1 ? snapprof_libunwind_unwinder_create(&u)
                         : snapprof_hybrid_unwinder_create(&u);
    if (rc != 0) {
        fprintf(stderr, "unwinder: %s\n", snapprof_strerror(rc));
        exit(1);
    }
    return u;
}

typedef struct reads {
    size_t copy, module;
} reads_t;

static void count_read(void *ud, uintptr_t addr, size_t size, int from_copy)
{
    reads_t *r = ud;
    (void)addr, (void)size;
    if (from_copy)
        r->copy++;
    else
        r->module++;
}

/* Median over batches of the per-sample time to unwind the copies. */
static uint64_t time_unwinder(snapprof_unwinder_t *u, copy_t *copies, int reps, size_t *frames_out)
{
    static snapprof_frame_t frames[MAX_FRAMES];
    snapprof__unwind_outcome_t out;
    if (u->ops->xUpdateModules)
        u->ops->xUpdateModules(u->user_data);
    size_t n = 0;
    for (int c = 0; c < COPIES; c++) /* warm the caches, as a running profile has */
        n = snapprof__unwind_chain(&u, 1, &copies[c].regs, &copies[c].stack, frames, MAX_FRAMES,
                                   &out);
    *frames_out = n;
    snapprof__cfi_t *cfi = snapprof__cfi_of(u);
    if (getenv("BENCH_READS") && cfi) {
        reads_t r = {0, 0};
        snapprof__cfi_hooks_t hooks = {.xOnRead = count_read, .user_data = &r};
        snapprof__cfi_set_hooks(cfi, &hooks);
        snapprof__unwind_chain(&u, 1, &copies[0].regs, &copies[0].stack, frames, MAX_FRAMES, &out);
        snapprof__cfi_set_hooks(cfi, NULL);
        printf("  (%s: %zu reads of the copy, %zu of modules per sample)\n", u->ops->name, r.copy,
               r.module);
    }
    enum { BATCHES = 9 };
    uint64_t batch[BATCHES];
    int per = reps / BATCHES / COPIES + 1;
    for (int b = 0; b < BATCHES; b++) {
        uint64_t t0 = now_ns();
        for (int i = 0; i < per; i++)
            for (int c = 0; c < COPIES; c++)
                snapprof__unwind_chain(&u, 1, &copies[c].regs, &copies[c].stack, frames, MAX_FRAMES,
                                       &out);
        batch[b] = (now_ns() - t0) / (uint64_t)(per * COPIES);
    }
    qsort(batch, BATCHES, sizeof batch[0], cmp_u64);
    return batch[BATCHES / 2];
}

int main(int argc, char **argv)
{
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    int reps = quick ? 200 : 5000;
    static const int depths[] = {10, 100, 1000};
    static const char *const names[] = {"frame-pointer", "libunwind", "hybrid"};
    if (snapprof__stack_copier_install(SIGURG) != 0) {
        fprintf(stderr, "cannot install the copier's signal handler\n");
        return 1;
    }
    /* What a frame costs the profiler besides the walk: the module lookup
     * snapprof_unwind_push_frame does for every frame. */
    uint64_t t0 = now_ns();
    for (int i = 0; i < 100000; i++)
        g_sink += (uintptr_t)snapprof_module_find((uintptr_t)&recurse + (uintptr_t)(i & 63));
    printf("module lookup: %.0f ns per frame (included below)\n", (double)(now_ns() - t0) / 1e5);
    printf("%-6s %-14s %8s %12s %10s %10s\n", "depth", "unwinder", "frames", "ns/sample",
           "ns/frame", "x unw_bt");
    for (size_t d = 0; d < sizeof depths / sizeof depths[0]; d++) {
        target_t t = {.depth = depths[d], .reps = reps};
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, 16u << 20);
        pthread_t th;
        if (pthread_create(&th, &attr, target_main, &t) != 0)
            return 1;
        pthread_attr_destroy(&attr);
        while (!atomic_load(&t.ready))
            usleep(1000);
        copy_t copies[COPIES];
        for (int c = 0; c < COPIES; c++) {
            copies[c].size = 1u << 20;
            copies[c].buffer = mmap(NULL, copies[c].size, PROT_READ | PROT_WRITE,
                                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            snapprof__copy_request_t req = {.thread = t.token,
                                            .signo = SIGURG,
                                            .buffer = copies[c].buffer,
                                            .buffer_size = copies[c].size,
                                            .timeout_ns = 1000000000u};
            snapprof__copy_result_t res;
            snapprof_fail_reason_t why = SNAPPROF_FAIL_SEND;
            int rc = copies[c].buffer == MAP_FAILED ? -1 : 1;
            /* A loaded machine can miss a timeout now and then: retry. */
            for (int attempt = 0; rc == 1 && attempt < 10; attempt++)
                if (snapprof__stack_copier_copy(&req, &res, &why) == 0)
                    rc = 0;
            if (rc != 0) {
                fprintf(stderr, "copy failed: %s\n", snapprof_fail_reason_name(why));
                return 1;
            }
            snapprof__stack_copier_rebase(&res, copies[c].buffer, &copies[c].regs,
                                          &copies[c].stack);
        }
        atomic_store(&t.stop, 1);
        pthread_join(th, NULL);
        snapprof_thread_release(t.token);
        printf("%-6d %-14s %8d %12llu %10.1f %10s\n", depths[d], "unw_backtrace", t.ref_frames,
               (unsigned long long)t.ref_ns, (double)t.ref_ns / t.ref_frames, "1.00");
        for (int k = 0; k < 3; k++) {
            snapprof_unwinder_t *u = make_unwinder(k);
            size_t frames;
            uint64_t ns = time_unwinder(u, copies, reps, &frames);
            printf("%-6d %-14s %8zu %12llu %10.1f %10.2f\n", depths[d], names[k], frames,
                   (unsigned long long)ns, frames ? (double)ns / (double)frames : 0.0,
                   t.ref_ns ? (double)ns / (double)t.ref_ns : 0.0);
            snapprof_unwinder_destroy(u);
        }
        for (int c = 0; c < COPIES; c++)
            munmap(copies[c].buffer, copies[c].size);
    }
    return 0;
}
