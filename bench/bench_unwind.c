/* bench_unwind: unwind cost per sample of the frame-pointer, libunwind,
 * hybrid and CFI table unwinders on the same stack copies (depths 10, 100,
 * 1000, 2000), next to libunwind's local unw_backtrace() on the same live
 * stacks, as ratios; on three workloads: the project's frame-pointer build,
 * -O2 without frame pointers, and a shared library whose CFI is only in
 * .debug_frame.
 *
 * A target thread recurses to the depth and times unw_backtrace() on its
 * own stack; while it spins at the bottom, the real stack copier takes
 * copies of it; then every unwinder walks every copy through the unwinder
 * chain, as the profiler would (module lookups per frame included). The
 * CFI unwinders run in the chains a profiler would give them: libunwind
 * and the CFI tables each followed by the .debug_frame and frame-pointer
 * unwinders. "same" is the share of copies whose frames equal the
 * libunwind chain's, pc for pc. Then the CFI tables of the modules met are
 * built whole, to time and size them; and two threads recursing 2000 deep
 * without frame pointers are profiled at 1 kHz with the default chain and
 * with the tables in front of it, for the share of requested samples
 * delivered. Prints figures, judges nothing.
 *
 * Usage: bench_unwind [--quick]; BENCH_READS=1 also prints how many words
 * the CFI engine reads from the copy and from modules per sample. */
#include "bench_util.h"
#include "stack_copier/stack_copier.h"
#include "tests/trigger_deep_work.h"
#include "tests/unwind_copy.h"
#include "unwinder/cfi_table_unwinder.h"
#include "unwinder/cfi_engine.h"

#include <snapprof/jit.h>
#include <snapprof/profile_builder.h>

#include <libunwind.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define COPIES 8
#define MAX_FRAMES 4096

/* The workloads' recursions (bench_unwind_work.c, built three ways). */
typedef uint64_t (*work_fn)(void *arg, int depth, uint64_t (*bottom)(void *));
uint64_t bench_work_fp(void *arg, int depth, uint64_t (*bottom)(void *));
uint64_t bench_work_nofp(void *arg, int depth, uint64_t (*bottom)(void *));
uint64_t bench_work_debug_frame(void *arg, int depth, uint64_t (*bottom)(void *));

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
    work_fn work;
    snapprof_thread_t *token;
    atomic_int ready, stop;
    uint64_t ref_ns; /* unw_backtrace per call, median of batches */
    int ref_frames;
} target_t;

static volatile uint64_t g_sink;
static volatile int
    g_never; /* never set: keeps the compiler from deciding bottom() never returns */

__attribute__((noinline)) static uint64_t bottom(void *arg)
{
    target_t *t = arg;
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
    /* Park until the process exits: a thread that used unw_backtrace runs
     * libunwind's trace-cache destructor when it exits, and under TSan that
     * destructor locks a mutex after TSan has let go of the thread. */
    while (!g_never)
        pause();
    return x;
}

static void *target_main(void *arg)
{
    target_t *t = arg;
    if (snapprof_thread_register(&t->token) != 0)
        abort();
    g_sink += t->work(t, t->depth, bottom);
    return NULL;
}

enum { U_FP, U_LIBUNWIND, U_HYBRID, U_TABLE, U_COUNT };
static const char *const g_names[U_COUNT] = {"frame-pointer", "libunwind", "hybrid", "cfi-table"};

typedef struct chain {
    snapprof_unwinder_t *u[4];
    size_t n;
} chain_t;

static void add(chain_t *c, int rc, snapprof_unwinder_t *u)
{
    if (rc != 0) {
        fprintf(stderr, "unwinder: %s\n", snapprof_strerror(rc));
        exit(1);
    }
    c->u[c->n++] = u;
}

/* The chain a profiler would run each unwinder in: the CFI ones before the
 * .debug_frame and frame-pointer unwinders (the default chain's order). */
static chain_t make_chain(int kind, int eager)
{
    chain_t c = {.n = 0};
    snapprof_unwinder_t *u = NULL;
    int rc;
    if (kind == U_FP || kind == U_HYBRID) {
        rc = kind == U_FP ? snapprof_frame_pointer_unwinder_create(&u)
                          : snapprof_hybrid_unwinder_create(&u);
        add(&c, rc, u);
        return c;
    }
    if (kind == U_TABLE) {
        rc = snapprof__cfi_table_unwinder_create(eager, &u);
        add(&c, rc, u);
    }
    rc = snapprof_libunwind_unwinder_create(&u);
    add(&c, rc, u);
    rc = snapprof_debug_frame_unwinder_create(&u);
    add(&c, rc, u);
    rc = snapprof_frame_pointer_unwinder_create(&u);
    add(&c, rc, u);
    return c;
}

static void chain_destroy(chain_t *c)
{
    for (size_t i = 0; i < c->n; i++)
        snapprof_unwinder_destroy(c->u[i]);
}

static void chain_update(chain_t *c)
{
    for (size_t i = 0; i < c->n; i++)
        if (c->u[i]->ops->xUpdateModules)
            c->u[i]->ops->xUpdateModules(c->u[i]->user_data);
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

/* The libunwind chain's frames for each copy, to compare with. */
static snapprof_frame_t g_ref[COPIES][MAX_FRAMES];
static size_t g_ref_n[COPIES];

/* Median over batches of the per-sample time to unwind the copies; *same
 * gets how many copies came out as in g_ref (when have_ref). */
static uint64_t time_chain(chain_t *ch, uw_copy_t *copies, int reps, int have_ref,
                           size_t *frames_out, int *same)
{
    static snapprof_frame_t frames[MAX_FRAMES];
    snapprof__unwind_outcome_t out;
    chain_update(ch);
    size_t n = 0;
    *same = 0;
    for (int c = 0; c < COPIES; c++) { /* warm the caches, as a running profile has */
        n = snapprof__unwind_chain(ch->u, ch->n, &copies[c].regs, &copies[c].stack, frames,
                                   MAX_FRAMES, &out);
        if (!have_ref) {
            memcpy(g_ref[c], frames, n * sizeof frames[0]);
            g_ref_n[c] = n;
        }
        int eq = n == g_ref_n[c];
        for (size_t i = 0; eq && i < n; i++)
            eq = frames[i].pc == g_ref[c][i].pc && frames[i].kind == g_ref[c][i].kind;
        *same += eq;
    }
    *frames_out = n;
    snapprof__cfi_t *cfi = snapprof__cfi_of(ch->u[0]);
    if (getenv("BENCH_READS") && cfi) {
        reads_t r = {0, 0};
        snapprof__cfi_seams_t seams = {.xOnRead = count_read, .user_data = &r};
        snapprof__cfi_set_seams(cfi, &seams);
        snapprof__unwind_chain(ch->u, ch->n, &copies[0].regs, &copies[0].stack, frames, MAX_FRAMES,
                               &out);
        snapprof__cfi_set_seams(cfi, NULL);
        printf("  (%s: %zu reads of the copy, %zu of modules per sample)\n", ch->u[0]->ops->name,
               r.copy, r.module);
    }
    enum { BATCHES = 9 };
    uint64_t batch[BATCHES];
    int per = reps / BATCHES / COPIES + 1;
    for (int b = 0; b < BATCHES; b++) {
        uint64_t t0 = now_ns();
        for (int i = 0; i < per; i++)
            for (int c = 0; c < COPIES; c++)
                snapprof__unwind_chain(ch->u, ch->n, &copies[c].regs, &copies[c].stack, frames,
                                       MAX_FRAMES, &out);
        batch[b] = (now_ns() - t0) / (uint64_t)(per * COPIES);
    }
    qsort(batch, BATCHES, sizeof batch[0], cmp_u64);
    return batch[BATCHES / 2];
}

/* The copies of one target's stack. */
static int take_copies(target_t *tp, uw_copy_t *copies)
{
    for (int c = 0; c < COPIES; c++) {
        snapprof_fail_reason_t why;
        int rc = uw_copy_take(tp->token, &copies[c], 10, &why);
        if (rc != 0) {
            fprintf(stderr, "copy failed: %s\n",
                    rc == -ENOMEM ? "no memory for the buffer" : snapprof_fail_reason_name(why));
            return -1;
        }
    }
    return 0;
}

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* What the first sample of a new profiler costs with tables compiled per
 * FDE on first use, against whole tables: the cold walk of one copy. */
static void first_sample(uw_copy_t *copy, const char *label)
{
    static snapprof_frame_t frames[MAX_FRAMES];
    snapprof__unwind_outcome_t out;
    for (int eager = 0; eager <= 1; eager++) {
        chain_t ch = make_chain(U_TABLE, eager);
        chain_update(&ch);
        uint64_t t0 = now_ns();
        size_t n =
            snapprof__unwind_chain(ch.u, ch.n, &copy->regs, &copy->stack, frames, MAX_FRAMES, &out);
        uint64_t cold = now_ns() - t0;
        t0 = now_ns();
        snapprof__unwind_chain(ch.u, ch.n, &copy->regs, &copy->stack, frames, MAX_FRAMES, &out);
        uint64_t warm = now_ns() - t0;
        printf("first sample (%s, %s): %zu frames, cold %.3f ms, then %.3f ms\n", label,
               eager ? "whole tables" : "per-FDE tables", n, (double)cold / 1e6,
               (double)warm / 1e6);
        chain_destroy(&ch);
    }
}

/* Builds the whole table of every module the table unwinder met (and of
 * libc), and prints time and memory per module. */
static void table_report(snapprof_unwinder_t *u)
{
    const snapprof_module_t *mods[64];
    snapprof__cfi_table_t *tables[64];
    size_t n = snapprof__cfi_table_unwinder_tables(u, mods, tables, 64);
    if (n > 64)
        n = 64;
    printf("\n%-28s %-12s %7s %8s %9s %10s %10s\n", "module (whole table)", "source", "FDEs",
           "rows", "fallback", "KiB", "build ms");
    for (size_t i = 0; i < n; i++) {
        snapprof__cfi_table_t *t;
        if (snapprof__cfi_table_open(mods[i], 1, &t) != 0)
            continue;
        snapprof__cfi_table_stats_t st;
        snapprof__cfi_table_stats(t, &st);
        printf("%-28s %-12s %7zu %8zu %9zu %10.1f %10.2f\n", base_name(mods[i]->path),
               snapprof__cfi_table_source(t) == SNAPPROF__CFI_SOURCE_EH_FRAME ? ".eh_frame"
                                                                              : ".debug_frame",
               st.fdes, st.rows, st.fallback_rows, (double)st.bytes / 1024.0,
               (double)st.build_ns / 1e6);
        snapprof__cfi_table_destroy(t);
    }
}

/* ------------------------------------------------------------------------ */
/* The deep-recursion profile                                               */
/* ------------------------------------------------------------------------ */

/* Two threads recursing 2000 deep without frame pointers, profiled at
 * 1 kHz with a CPU-clock trigger: how many of the requested samples the
 * sampling thread delivers, and how many of them are whole stacks, with
 * the default chain and with the CFI tables in front of it. */
typedef struct spinner {
    snapprof_thread_t *token;
    pthread_t th;
    atomic_int ready, stop;
    clockid_t clock;
    uint64_t result; /* the recursion's, so that no pass drops it */
} spinner_t;

static uint64_t spin_bottom(void *arg)
{
    spinner_t *s = arg;
    atomic_store(&s->ready, 1);
    uint64_t x = 1;
    while (!atomic_load_explicit(&s->stop, memory_order_relaxed)) {
        x = x * 6364136223846793005u + 1;
        __asm__ volatile("" : "+r"(x));
    }
    return x;
}

static void *spinner_main(void *arg)
{
    spinner_t *s = arg;
    if (snapprof_thread_register(&s->token) != 0)
        abort();
    /* Each thread keeps its own result: the two would race on g_sink. */
    s->result = bench_work_nofp(s, 2000, spin_bottom);
    return NULL;
}

static void deep_profile(int with_table, double seconds)
{
    enum { THREADS = 2 };
    spinner_t sp[THREADS];
    snapprof_thread_t *tokens[THREADS];
    memset(sp, 0, sizeof sp);
    for (int i = 0; i < THREADS; i++) {
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, 16u << 20);
        if (pthread_create(&sp[i].th, &attr, spinner_main, &sp[i]) != 0)
            exit(1);
        pthread_attr_destroy(&attr);
        while (!atomic_load(&sp[i].ready))
            usleep(1000);
        tokens[i] = sp[i].token;
        pthread_getcpuclockid(sp[i].th, &sp[i].clock);
    }
    snapprof_params_t params;
    snapprof_params_init(&params);
    params.interval_ns = 1000000u;
    params.trigger = SNAPPROF_TRIGGER_AUTO;
    snapprof_profiler_t *p;
    deep_tally_t t = {.depth = 2000};
    snapprof_builder_t *b;
    if (snapprof_profiler_create(&params, tokens, THREADS, &p) != 0 ||
        snapprof_builder_create(&deep_tally_ops, &t, &b) != 0 ||
        snapprof_profiler_add_builder(p, b) != 0)
        exit(1);
    /* The libunwind chain (the default chain before issue 16), with the
     * tables in front of libunwind or without. */
    snapprof_unwinder_t *u[5];
    size_t n_u = 0;
    int rc = snapprof_jit_unwinder_create(&u[n_u++]);
    if (rc == 0 && with_table)
        rc = snapprof_cfi_table_unwinder_create(&u[n_u++]);
    rc = rc ? rc : snapprof_libunwind_unwinder_create(&u[n_u++]);
    rc = rc ? rc : snapprof_debug_frame_unwinder_create(&u[n_u++]);
    rc = rc ? rc : snapprof_frame_pointer_unwinder_create(&u[n_u++]);
    for (size_t i = 0; rc == 0 && i < n_u; i++)
        rc = snapprof_profiler_add_unwinder(p, u[i]);
    if (rc != 0)
        exit(1);
    double cpu0 = 0, cpu1 = 0;
    for (int i = 0; i < THREADS; i++)
        cpu0 += bench_clock_s(sp[i].clock);
    if (snapprof_profiler_start(p) != 0)
        exit(1);
    usleep((useconds_t)(seconds * 1e6));
    /* Requested: what the threads ran while the profile ran. Stopping
     * drains the captures still waiting to be unwound, which with a slow
     * unwinder takes long; the threads keep running meanwhile. */
    for (int i = 0; i < THREADS; i++)
        cpu1 += bench_clock_s(sp[i].clock);
    snapprof_profiler_stop(p);
    snapprof_stats_t st;
    snapprof_profiler_get_stats(p, &st);
    snapprof_profiler_destroy(p);
    for (int i = 0; i < THREADS; i++) {
        atomic_store(&sp[i].stop, 1);
        pthread_join(sp[i].th, NULL);
        g_sink += sp[i].result;
        snapprof_thread_release(sp[i].token);
    }
    size_t n = atomic_load(&t.samples), whole = atomic_load(&t.whole);
    double requested = (cpu1 - cpu0) * 1000.0;
    printf("%-34s %8zu %10.0f %10.3f %9.2f%% %9llu\n",
           with_table ? "jit, cfi-table, libunwind, df, fp" : "jit, libunwind, df, fp", n,
           requested, requested > 0 ? (double)n / requested : 0.0,
           n ? 100.0 * (double)whole / (double)n : 0.0, (unsigned long long)st.unwind_p50_ns);
}

int main(int argc, char **argv)
{
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    static const int depths[] = {10, 100, 1000, 2000};
    enum { DEPTHS = sizeof depths / sizeof depths[0] };
    static const struct {
        const char *name;
        work_fn work;
    } works[] = {
        {"fp", bench_work_fp}, {"nofp", bench_work_nofp}, {"debug_frame", bench_work_debug_frame}};
    enum { WORKS = sizeof works / sizeof works[0] };
    if (snapprof__stack_copier_install(SIGURG) != 0) {
        fprintf(stderr, "cannot install the copier's signal handler\n");
        return 1;
    }
    /* What a frame costs the profiler besides the walk: the module lookup
     * snapprof_unwind_push_frame does for every frame. */
    uint64_t t0 = now_ns();
    for (int i = 0; i < 100000; i++)
        g_sink += (uintptr_t)snapprof_module_find((uintptr_t)&bench_work_fp + (uintptr_t)(i & 63));
    printf("module lookup: %.0f ns per frame (included below)\n", (double)(now_ns() - t0) / 1e5);
    printf("%-12s %-6s %-14s %8s %12s %10s %10s %10s %6s\n", "workload", "depth", "unwinder",
           "frames", "ns/sample", "ns/frame", "x unw_bt", "x per fr", "same");
    snapprof_unwinder_t *report_u = NULL;
    chain_t report_chain = {.n = 0};
    for (size_t w = 0; w < WORKS; w++) {
        for (size_t d = 0; d < DEPTHS; d++) {
            /* Each target parks for good, so it keeps its own slot. */
            static target_t targets[WORKS][DEPTHS];
            target_t *tp = &targets[w][d];
            tp->depth = depths[d];
            /* About the same time per row at every depth. */
            tp->reps = quick ? 100 : 200000 / depths[d] > 200 ? 200000 / depths[d] : 200;
            tp->work = works[w].work;
            pthread_attr_t attr;
            pthread_attr_init(&attr);
            pthread_attr_setstacksize(&attr, 16u << 20);
            pthread_t th;
            if (pthread_create(&th, &attr, target_main, tp) != 0)
                return 1;
            pthread_attr_destroy(&attr);
            while (!atomic_load(&tp->ready))
                usleep(1000);
            uw_copy_t copies[COPIES];
            int rc = take_copies(tp, copies);
            atomic_store(&tp->stop, 1);
            pthread_detach(th);
            snapprof_thread_release(tp->token);
            if (rc != 0)
                return 1;
            printf("%-12s %-6d %-14s %8d %12llu %10.1f %10s %10s %6s\n", works[w].name, depths[d],
                   "unw_backtrace", tp->ref_frames, (unsigned long long)tp->ref_ns,
                   (double)tp->ref_ns / tp->ref_frames, "1.00", "1.00", "");
            double ref_per_frame = (double)tp->ref_ns / tp->ref_frames;
            /* libunwind first: the others are compared with its frames. */
            static const int order[U_COUNT] = {U_LIBUNWIND, U_FP, U_HYBRID, U_TABLE};
            for (int k = 0; k < U_COUNT; k++) {
                chain_t ch = make_chain(order[k], 0);
                size_t frames;
                int same;
                uint64_t ns = time_chain(&ch, copies, tp->reps, k > 0, &frames, &same);
                double per_frame = frames ? (double)ns / (double)frames : 0.0;
                printf("%-12s %-6d %-14s %8zu %12llu %10.1f %10.2f %10.2f %5d%%\n", works[w].name,
                       depths[d], g_names[order[k]], frames, (unsigned long long)ns, per_frame,
                       tp->ref_ns ? (double)ns / (double)tp->ref_ns : 0.0,
                       ref_per_frame > 0 ? per_frame / ref_per_frame : 0.0, same * 100 / COPIES);
                if (order[k] == U_TABLE && w == WORKS - 1 && d == DEPTHS - 1) {
                    report_chain = ch; /* kept for the table report */
                    report_u = ch.u[0];
                } else {
                    chain_destroy(&ch);
                }
            }
            if (w == 1 && d == DEPTHS - 1)
                first_sample(&copies[0], "nofp 2000");
            for (int c = 0; c < COPIES; c++)
                uw_copy_free(&copies[c]);
        }
    }
    if (report_u) {
        /* libc too, whether or not a walk went through it. */
        snapprof_frame_t f = {.pc = (uintptr_t)&memcpy,
                              .kind = SNAPPROF_FRAME_NATIVE,
                              .module = snapprof_module_find((uintptr_t)&memcpy)};
        report_u->ops->xCanUnwindFrom(report_u->user_data, &f);
        table_report(report_u);
    }
    chain_destroy(&report_chain);
    printf("\n2 threads x 2000 frames, -fomit-frame-pointer, 1 kHz of thread CPU time, "
           "CPU-clock trigger, %.1f s each\n",
           quick ? 0.5 : 5.0);
    printf("%-34s %8s %10s %10s %10s %9s\n", "chain", "samples", "requested", "delivered",
           "complete", "unwind p50");
    /* The smoke run skips the libunwind chain: stopping it drains hundreds
     * of queued 2000-frame captures at milliseconds each, minutes under
     * the sanitizers. */
    for (int with_table = quick; with_table <= 1; with_table++)
        deep_profile(with_table, quick ? 0.5 : 5.0);
    return 0;
}
