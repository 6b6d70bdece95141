/* Heap profiles in linked mode: a program that calls snapprof_heap_note_alloc()
 * and _note_free() around its own malloc and free, with a profiler whose
 * heap_interval is set, gets its sampled allocations and their frees at
 * its builders, with the allocating function's frames, the allocation's
 * bytes, thread and labels, as many as the Poisson rule says. */
#include "test.h"
#include "test_util.h"

#include "common/fault.h"

#include <snapprof/heap.h>
#include <snapprof/profile_builder.h>

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* A builder of ops version 2 that keeps what heap samples it gets          */
/* ------------------------------------------------------------------------ */

#define HS_FRAMES 8

typedef struct heap_sample {
    snapprof_sample_kind_t kind;
    uint64_t bytes, cpu_ns, wall_ns, timestamp_ns;
    pid_t tid;
    size_t frame_count;
    snapprof_frame_t frames[HS_FRAMES];
    char who[16];    /* its "who" label, "" if none */
    char name[16];   /* its thread's name */
    char marker[32]; /* the innermost frame's name when a marker ("" if not): the
                        names live only as long as the callback */
} heap_sample_t;

typedef struct heap_collector {
    heap_sample_t *s;
    size_t count, cap;
    size_t time_samples, others;
    int reenter;         /* call note_alloc from xOnSample */
    int reenter_sampled; /* how many of those said sampled */
} heap_collector_t;

static int hc_sample(void *ud, const snapprof_sample_t *s)
{
    heap_collector_t *c = ud;
    if (c->reenter) {
        /* Our own code on our own thread: never sampled. */
        void *p = malloc(64);
        if (snapprof_heap_note_alloc(p, 1 << 20) != 0)
            c->reenter_sampled++;
        snapprof_heap_note_free(p);
        free(p);
    }
    snapprof_sample_kind_t kind = SNAPPROF_SAMPLE_KIND(s);
    if (kind == SNAPPROF_SAMPLE_KIND_TIME) {
        c->time_samples++;
        return 0;
    }
    if (kind != SNAPPROF_SAMPLE_KIND_HEAP_ALLOC && kind != SNAPPROF_SAMPLE_KIND_HEAP_FREE) {
        c->others++;
        return 0;
    }
    if (c->count == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 1024;
        c->s = realloc(c->s, c->cap * sizeof *c->s);
        ASSERT_NOT_NULL(c->s);
    }
    heap_sample_t *h = &c->s[c->count++];
    memset(h, 0, sizeof *h);
    h->kind = kind;
    h->bytes = s->bytes;
    h->cpu_ns = s->cpu_ns;
    h->wall_ns = s->wall_ns;
    h->timestamp_ns = s->timestamp_ns;
    h->tid = s->tid;
    snprintf(h->name, sizeof h->name, "%s", s->thread_name ? s->thread_name : "");
    h->frame_count = s->frame_count < HS_FRAMES ? s->frame_count : HS_FRAMES;
    memcpy(h->frames, s->frames, h->frame_count * sizeof *h->frames);
    if (s->frame_count > 0 && s->frames[0].kind == SNAPPROF_FRAME_MARKER && s->frames[0].name)
        snprintf(h->marker, sizeof h->marker, "%s", s->frames[0].name);
    for (size_t i = 0; i < s->label_count; i++)
        if (!strcmp(s->labels[i].key, "who") && s->labels[i].str)
            snprintf(h->who, sizeof h->who, "%s", s->labels[i].str);
    return 0;
}

static const snapprof_builder_ops_t hc_ops_v2 = {
    .version = 2,
    .name = "heap_collector",
    .xOnSample = hc_sample,
};

/* The same callbacks, as a builder written before heap samples (version 1). */
static const snapprof_builder_ops_t hc_ops_v1 = {
    .version = 1,
    .name = "heap_collector_v1",
    .xOnSample = hc_sample,
};

static snapprof_builder_t *hc_builder(heap_collector_t *c, const snapprof_builder_ops_t *ops)
{
    snapprof_builder_t *b;
    ASSERT_OK(snapprof_builder_create(ops, c, &b));
    return b;
}

/* A profiler of no thread (no CPU sample) with heap sampling at interval
 * R, feeding the builders given. */
static snapprof_profiler_t *heap_profiler(size_t R, snapprof_builder_t *b1, snapprof_builder_t *b2)
{
    snapprof_params_t params = tu_params(1000000); /* ticks drain the slots: 1 ms */
    params.heap_interval = R;
    snapprof_profiler_t *p;
    ASSERT_OK(snapprof_profiler_create(&params, NULL, 0, &p));
    ASSERT_OK(snapprof_profiler_add_builder(p, b1));
    if (b2)
        ASSERT_OK(snapprof_profiler_add_builder(p, b2));
    ASSERT_OK(snapprof_profiler_start(p));
    return p;
}

/* The same for frees: the queue they wait in is bounded too. */
static void wait_frees(snapprof_profiler_t *p, uint64_t freed)
{
    uint64_t deadline = tu_mono_ns() + 60000000000ull;
    for (;;) {
        snapprof_stats_t st;
        ASSERT_OK(snapprof_profiler_get_stats(p, &st));
        if (st.heap_frees + st.heap_frees_lost >= freed)
            return;
        if (tu_mono_ns() > deadline)
            TEST_FAIL("the drain did not keep up with frees: %" PRIu64 " of %" PRIu64,
                      st.heap_frees, freed);
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
}

/* ------------------------------------------------------------------------ */
/* Two threads, each allocating in its own function, each freeing the      */
/* other's blocks                                                           */
/* ------------------------------------------------------------------------ */

#define R_BYTES 4096
#define A_COUNT 32768 /* 1 KiB blocks: 32 MiB */
#define A_SIZE 1024
#define B_COUNT 16384 /* 2 KiB blocks: 32 MiB */
#define B_SIZE 2048

static snapprof_profiler_t *g_prof;
static void **g_a_blocks, **g_b_blocks;
static atomic_uint_fast64_t g_recorded; /* note_alloc said 1 */
static pthread_barrier_t g_barrier;
static pid_t g_tid_a, g_tid_b;
static uint64_t g_freed_sampled;

static __attribute__((noinline)) void *alloc_in_a(size_t size)
{
    void *p = malloc(size);
    ASSERT_NOT_NULL(p);
    int rc = snapprof_heap_note_alloc(p, size);
    ASSERT(rc == 0 || rc == 1);
    if (rc == 1)
        atomic_fetch_add(&g_recorded, 1);
    __asm__ volatile("" ::: "memory"); /* not a tail call */
    return p;
}

static __attribute__((noinline)) void *alloc_in_b(size_t size)
{
    void *p = malloc(size);
    ASSERT_NOT_NULL(p);
    int rc = snapprof_heap_note_alloc(p, size);
    ASSERT(rc == 0 || rc == 1);
    if (rc == 1)
        atomic_fetch_add(&g_recorded, 1);
    __asm__ volatile("" ::: "memory");
    return p;
}

static void free_blocks(void **blocks, int n)
{
    for (int i = 0; i < n; i++) {
        int rc = snapprof_heap_note_free(blocks[i]);
        ASSERT(rc == 0 || rc == 1);
        __atomic_fetch_add(&g_freed_sampled, (uint64_t)rc, __ATOMIC_RELAXED);
        free(blocks[i]);
        if (i % 256 == 255)
            wait_frees(g_prof, __atomic_load_n(&g_freed_sampled, __ATOMIC_RELAXED));
    }
}

/* Thread a (arg not NULL) or b: allocates its blocks in its own function,
 * then frees the other's. */
static void *ab_thread(void *arg)
{
    int is_a = arg != NULL;
    *(is_a ? &g_tid_a : &g_tid_b) = (pid_t)syscall(SYS_gettid);
    /* Named as it starts, by the kernel only: each thread's own name, read
     * for its own samples (heap_capture.c caches it per thread). */
    prctl(PR_SET_NAME, is_a ? "heap-a" : "heap-b");
    snapprof_label_set_str(SNAPPROF_LABEL_THREAD, "who", is_a ? "a" : "b");
    void **mine = is_a ? g_a_blocks : g_b_blocks;
    for (int i = 0; i < (is_a ? A_COUNT : B_COUNT); i++) {
        mine[i] = is_a ? alloc_in_a(A_SIZE) : alloc_in_b(B_SIZE);
        if (i % 128 == 127)
            tu_heap_wait_drained(g_prof, atomic_load(&g_recorded));
    }
    pthread_barrier_wait(&g_barrier);
    if (is_a)
        free_blocks(g_b_blocks, B_COUNT); /* B's blocks, freed here */
    else
        free_blocks(g_a_blocks, A_COUNT);
    return NULL;
}

static void profile_two_threads(void)
{
    heap_collector_t c = {0};
    g_a_blocks = calloc(A_COUNT, sizeof *g_a_blocks);
    g_b_blocks = calloc(B_COUNT, sizeof *g_b_blocks);
    pthread_barrier_init(&g_barrier, NULL, 2);
    g_prof = heap_profiler(R_BYTES, hc_builder(&c, &hc_ops_v2), NULL);
    pthread_t a, b;
    ASSERT_OK(pthread_create(&a, NULL, ab_thread, (void *)1));
    ASSERT_OK(pthread_create(&b, NULL, ab_thread, NULL));
    ASSERT_OK(pthread_join(a, NULL));
    ASSERT_OK(pthread_join(b, NULL));
    ASSERT_OK(snapprof_profiler_stop(g_prof));
    snapprof_stats_t st;
    ASSERT_OK(snapprof_profiler_get_stats(g_prof, &st));
    printf("recorded %" PRIu64 ", heap_samples %" PRIu64 ", heap_frees %" PRIu64
           ", freed sampled %" PRIu64 ", dropped: no slot %" PRIu64 ", set full %" PRIu64
           ", no stack %" PRIu64 ", frees lost %" PRIu64 ", no frames %" PRIu64 "\n",
           (uint64_t)atomic_load(&g_recorded), st.heap_samples, st.heap_frees, g_freed_sampled,
           st.heap_dropped_no_slot, st.heap_dropped_set_full, st.heap_dropped_no_stack,
           st.heap_frees_lost, st.failed[SNAPPROF_FAIL_NO_FRAMES]);

    /* The Poisson rule: each block of S bytes sampled with probability
     * 1 - exp(-S/R), independently; the dropped ones were sampled too. */
    double pa = 1 - exp(-(double)A_SIZE / R_BYTES), pb = 1 - exp(-(double)B_SIZE / R_BYTES);
    double expect = A_COUNT * pa + B_COUNT * pb;
    double sd = sqrt(A_COUNT * pa * (1 - pa) + B_COUNT * pb * (1 - pb));
    uint64_t sampled = atomic_load(&g_recorded) + st.heap_dropped_no_slot +
                       st.heap_dropped_set_full + st.heap_dropped_no_stack;
    printf("sampled %" PRIu64 ", expected %.1f +- %.1f (%.2f sd)\n", sampled, expect, sd,
           ((double)sampled - expect) / sd);
    ASSERT(fabs((double)sampled - expect) < 5 * sd);
    ASSERT(st.heap_dropped_no_slot + st.heap_dropped_set_full + st.heap_dropped_no_stack <
           sampled / 100);

    /* Every recorded block is delivered, and its free, with its frames. */
    ASSERT_UEQ(st.heap_samples + st.failed[SNAPPROF_FAIL_NO_FRAMES], atomic_load(&g_recorded));
    ASSERT_UEQ(g_freed_sampled, atomic_load(&g_recorded));
    ASSERT_UEQ(st.heap_frees, st.heap_samples);
    ASSERT_EQ(st.heap_frees_lost, 0);
    ASSERT_EQ(c.others, 0);
    ASSERT_UEQ(c.count, st.heap_samples + st.heap_frees);
    size_t allocs[2] = {0}, frees[2] = {0}, named[2] = {0};
    size_t live = 0;
    uint64_t last_ts = 0;
    (void)last_ts;
    for (size_t i = 0; i < c.count; i++) {
        heap_sample_t *h = &c.s[i];
        ASSERT_EQ(h->cpu_ns, 0);
        ASSERT_EQ(h->wall_ns, 0);
        ASSERT_GT(h->frame_count, 0);
        int is_a = h->bytes == A_SIZE;
        ASSERT(is_a || h->bytes == B_SIZE);
        /* The allocation's thread and labels, for its free too. */
        ASSERT_EQ(h->tid, is_a ? g_tid_a : g_tid_b);
        ASSERT_STR_EQ(h->who, is_a ? "a" : "b");
        ASSERT_STR_EQ(h->name, is_a ? "heap-a" : "heap-b");
        const char *leaf = tu_frame_name(&h->frames[0]);
        /* (GCC may name a specialised copy alloc_in_a.constprop.0.) */
        if (!strncmp(leaf, is_a ? "alloc_in_a" : "alloc_in_b", 10))
            named[is_a ? 0 : 1]++;
        else if (i < 20)
            printf("sample %zu: leaf %s\n", i, leaf);
        if (h->kind == SNAPPROF_SAMPLE_KIND_HEAP_ALLOC) {
            allocs[is_a ? 0 : 1]++;
            live++;
        } else {
            ASSERT_EQ(h->kind, SNAPPROF_SAMPLE_KIND_HEAP_FREE);
            frees[is_a ? 0 : 1]++;
            ASSERT_GT(live, 0); /* never before its allocation */
            live--;
        }
    }
    printf("A: %zu allocs, %zu frees; B: %zu allocs, %zu frees; leaf named: %zu, %zu\n", allocs[0],
           frees[0], allocs[1], frees[1], named[0], named[1]);
    ASSERT_EQ(live, 0);
    ASSERT_EQ(allocs[0], frees[0]);
    ASSERT_EQ(allocs[1], frees[1]);
    ASSERT_GT(allocs[0], 1000);
    ASSERT_GT(allocs[1], 1000);
    /* The innermost frame is the allocating function, frees included. */
    ASSERT_EQ(named[0], allocs[0] + frees[0]);
    ASSERT_EQ(named[1], allocs[1] + frees[1]);
    snapprof_profiler_destroy(g_prof);
    free(c.s);
    free(g_a_blocks);
    free(g_b_blocks);
}

/* ------------------------------------------------------------------------ */
/* Bursts: samples that find no free capture slot still count              */
/* ------------------------------------------------------------------------ */

#define NS_COUNT 8192 /* per thread, every one sampled (R = 1) */
#define NS_BATCH 1024 /* between waits: the free queue never fills */
#define NS_SIZE_A 256
#define NS_SIZE_B 512

static void *ns_thread(void *arg)
{
    int is_a = arg != NULL;
    void **mine = is_a ? g_a_blocks : g_b_blocks, **theirs = is_a ? g_b_blocks : g_a_blocks;
    *(is_a ? &g_tid_a : &g_tid_b) = (pid_t)syscall(SYS_gettid);
    snapprof_label_set_str(SNAPPROF_LABEL_THREAD, "who", is_a ? "a" : "b");
    for (int i = 0; i < NS_COUNT; i++) {
        mine[i] = is_a ? alloc_in_a(NS_SIZE_A) : alloc_in_b(NS_SIZE_B);
        if (i % NS_BATCH == NS_BATCH - 1)
            tu_heap_wait_drained(g_prof, atomic_load(&g_recorded));
    }
    pthread_barrier_wait(&g_barrier);
    for (int i = 0; i < NS_COUNT; i++) {
        int rc = snapprof_heap_note_free(theirs[i]);
        ASSERT_EQ(rc, 1);
        __atomic_fetch_add(&g_freed_sampled, 1, __ATOMIC_RELAXED);
        free(theirs[i]);
        if (i % NS_BATCH == NS_BATCH - 1)
            wait_frees(g_prof, __atomic_load_n(&g_freed_sampled, __ATOMIC_RELAXED));
    }
    return NULL;
}

/* Two threads allocate in bursts of 1024 sampled blocks (far more than the
 * 128 capture slots, and one capture in two told there is no slot by the
 * fault seam), then free each other's. Every sampled allocation is
 * delivered, those that found no slot under the one frame "[heap: no
 * capture slot]" with their bytes and thread, and every free after its
 * allocation: nothing is dropped, the totals are exact at R = 1 and
 * nothing stays in use. (The slots' samples were dropped before, and
 * alloc_space came out 16 % short in heap_churn's burst.) */
static void profile_no_slot_burst(void)
{
    heap_collector_t c = {0};
    g_a_blocks = calloc(NS_COUNT, sizeof *g_a_blocks);
    g_b_blocks = calloc(NS_COUNT, sizeof *g_b_blocks);
    atomic_store(&g_recorded, 0);
    g_freed_sampled = 0;
    pthread_barrier_init(&g_barrier, NULL, 2);
    tu_fault_set(SNAPPROF__FAULT_HEAP_SLOT, 2, 11);
    g_prof = heap_profiler(1, hc_builder(&c, &hc_ops_v2), NULL);
    pthread_t a, b;
    ASSERT_OK(pthread_create(&a, NULL, ns_thread, (void *)1));
    ASSERT_OK(pthread_create(&b, NULL, ns_thread, NULL));
    ASSERT_OK(pthread_join(a, NULL));
    ASSERT_OK(pthread_join(b, NULL));
    ASSERT_OK(snapprof_profiler_stop(g_prof));
    tu_fault_clear();
    snapprof_stats_t st;
    ASSERT_OK(snapprof_profiler_get_stats(g_prof, &st));
    printf("recorded %" PRIu64 ", heap_samples %" PRIu64 " (no slot %" PRIu64
           "), heap_frees %" PRIu64 ", dropped: no slot %" PRIu64 ", set full %" PRIu64
           ", frees lost %" PRIu64 ", no frames %" PRIu64 "\n",
           (uint64_t)atomic_load(&g_recorded), st.heap_samples, st.heap_samples_no_slot,
           st.heap_frees, st.heap_dropped_no_slot, st.heap_dropped_set_full, st.heap_frees_lost,
           st.failed[SNAPPROF_FAIL_NO_FRAMES]);
    ASSERT_UEQ(atomic_load(&g_recorded), 2 * NS_COUNT);
    ASSERT_EQ(st.heap_dropped_no_slot, 0);
    ASSERT_EQ(st.heap_dropped_set_full, 0);
    ASSERT_EQ(st.heap_frees_lost, 0);
    ASSERT_UEQ(st.heap_samples + st.failed[SNAPPROF_FAIL_NO_FRAMES], 2 * NS_COUNT);
    ASSERT_UEQ(st.heap_frees, st.heap_samples);
    /* About half by the seam, more when the drain fell behind. */
    ASSERT(st.heap_samples_no_slot >= 2 * NS_COUNT * 4 / 10);
    ASSERT(st.heap_samples_no_slot < st.heap_samples);
    uint64_t bytes[2] = {0}, live = 0, marked = 0;
    for (size_t i = 0; i < c.count; i++) {
        heap_sample_t *h = &c.s[i];
        int is_a = h->bytes == NS_SIZE_A;
        ASSERT(is_a || h->bytes == NS_SIZE_B);
        ASSERT_EQ(h->tid, is_a ? g_tid_a : g_tid_b);
        ASSERT_GT(h->frame_count, 0);
        if (h->frames[0].kind == SNAPPROF_FRAME_MARKER) {
            ASSERT_STR_EQ(h->marker, "[heap: no capture slot]");
            ASSERT_EQ(h->frame_count, 1);
            marked += h->kind == SNAPPROF_SAMPLE_KIND_HEAP_ALLOC;
        } else {
            const char *leaf = tu_frame_name(&h->frames[0]);
            ASSERT(!strncmp(leaf, is_a ? "alloc_in_a" : "alloc_in_b", 10));
            ASSERT_STR_EQ(h->who, is_a ? "a" : "b");
        }
        if (h->kind == SNAPPROF_SAMPLE_KIND_HEAP_ALLOC) {
            bytes[is_a ? 0 : 1] += h->bytes;
            live++;
        } else {
            ASSERT_GT(live, 0);
            live--;
        }
    }
    printf("bytes allocated a %" PRIu64 ", b %" PRIu64 "; %" PRIu64 " allocations marked\n",
           bytes[0], bytes[1], marked);
    ASSERT_EQ(live, 0);
    ASSERT_UEQ(marked, st.heap_samples_no_slot);
    /* R = 1: every allocation, its own bytes (a stack that could not be
     * unwound at all is counted in failed, not delivered). */
    if (st.failed[SNAPPROF_FAIL_NO_FRAMES] == 0) {
        ASSERT_UEQ(bytes[0], (uint64_t)NS_COUNT * NS_SIZE_A);
        ASSERT_UEQ(bytes[1], (uint64_t)NS_COUNT * NS_SIZE_B);
    }
    snapprof_profiler_destroy(g_prof);
    free(c.s);
    free(g_a_blocks);
    free(g_b_blocks);
}

/* errno: a sampled allocation whose capture fails a system call leaves the
 * caller's errno as it was (the allocation hooks no longer save it around
 * every call). A thread the library does not know reads /proc/self/maps
 * for its stack bounds at its first sampled allocation: with every fd
 * taken, that open fails with EMFILE. */
static void *errno_thread(void *arg)
{
    (void)arg;
    void *p = malloc(64);
    ASSERT_NOT_NULL(p);
    errno = 777;
    int rc = snapprof_heap_note_alloc(p, 64); /* R = 1: sampled */
    int e = errno;
    errno = 778;
    snapprof_heap_note_free(p);
    int e2 = errno;
    free(p);
    printf("note_alloc %d, errno after %d (want 777), after note_free %d (want 778)\n", rc, e, e2);
    ASSERT_EQ(e, 777);
    ASSERT_EQ(e2, 778);
    return NULL;
}

static void profile_errno_kept(void)
{
    heap_collector_t c = {0};
    snapprof_profiler_t *p = heap_profiler(1, hc_builder(&c, &hc_ops_v2), NULL);
    /* No new fd at all while the thread runs: a limit of 0 makes every
     * open fail with EMFILE. (Filling the table up to a limit raced with
     * the profile's own thread, which closes the fds it reads /proc
     * through: an fd it closed let the capture's open succeed.) */
    struct rlimit old, none;
    ASSERT_OK(getrlimit(RLIMIT_NOFILE, &old));
    none = old;
    none.rlim_cur = 0;
    ASSERT_OK(setrlimit(RLIMIT_NOFILE, &none));
    errno = 0;
    ASSERT_EQ(dup(0), -1);
    ASSERT_EQ(errno, EMFILE);
    pthread_t t;
    ASSERT_OK(pthread_create(&t, NULL, errno_thread, NULL));
    ASSERT_OK(pthread_join(t, NULL));
    ASSERT_OK(setrlimit(RLIMIT_NOFILE, &old));
    ASSERT_OK(snapprof_profiler_stop(p));
    snapprof_stats_t st;
    ASSERT_OK(snapprof_profiler_get_stats(p, &st));
    printf("dropped for want of stack bounds: %" PRIu64 "\n", st.heap_dropped_no_stack);
    /* Not vacuous: the capture did fail its open. */
    ASSERT_GT(st.heap_dropped_no_stack, 0);
    snapprof_profiler_destroy(p);
    free(c.s);
}

/* ------------------------------------------------------------------------ */
/* Off, old builders, reentrancy, one owner                                 */
/* ------------------------------------------------------------------------ */

static __attribute__((noinline)) int churn(int n, size_t size)
{
    int sampled = 0;
    for (int i = 0; i < n; i++) {
        void *p = malloc(size);
        int rc = snapprof_heap_note_alloc(p, size);
        ASSERT(rc == 0 || rc == 1);
        sampled += rc;
        ASSERT(snapprof_heap_note_free(p) == rc);
        free(p);
    }
    return sampled;
}

/* heap_interval 0 (the default): nothing is sampled, nothing delivered. */
static void profile_interval_zero(void)
{
    heap_collector_t c = {0};
    snapprof_params_t params;
    snapprof_params_init(&params);
    ASSERT_EQ(params.heap_interval, 0);
    snapprof_profiler_t *p = heap_profiler(0, hc_builder(&c, &hc_ops_v2), NULL);
    ASSERT_EQ(churn(20000, 4096), 0);
    ASSERT_OK(snapprof_profiler_stop(p));
    snapprof_stats_t st;
    ASSERT_OK(snapprof_profiler_get_stats(p, &st));
    ASSERT_EQ(st.heap_samples, 0);
    ASSERT_EQ(c.count, 0);
    snapprof_profiler_destroy(p);
    free(c.s);
    /* No profiler at all: the same. */
    ASSERT_EQ(churn(20000, 4096), 0);
}

/* A builder of ops version 1 gets no heap sample; one of version 2 beside
 * it gets them all. */
static void profile_v1_builder(void)
{
    heap_collector_t c1 = {0}, c2 = {0};
    snapprof_profiler_t *p =
        heap_profiler(4096, hc_builder(&c1, &hc_ops_v1), hc_builder(&c2, &hc_ops_v2));
    int sampled = 0;
    for (int i = 0; i < 40; i++) {
        sampled += churn(50, 4096);
        tu_heap_wait_drained(p, (uint64_t)sampled);
    }
    ASSERT_OK(snapprof_profiler_stop(p));
    snapprof_stats_t st;
    ASSERT_OK(snapprof_profiler_get_stats(p, &st));
    printf("sampled %d, delivered %" PRIu64 " allocs %" PRIu64 " frees\n", sampled, st.heap_samples,
           st.heap_frees);
    ASSERT_GT(sampled, 500);
    ASSERT_GT(st.heap_samples, 0);
    ASSERT_EQ(c1.count, 0);
    ASSERT_UEQ(c2.count, st.heap_samples + st.heap_frees);
    snapprof_profiler_destroy(p);
    free(c1.s);
    free(c2.s);
}

/* note_alloc called inside a builder callback (the sampling thread, or the
 * thread that stops the profile) records nothing, and neither do the
 * builders' own allocations. */
static void profile_reentrancy(void)
{
    heap_collector_t c = {.reenter = 1};
    snapprof_profiler_t *p = heap_profiler(1, hc_builder(&c, &hc_ops_v2), NULL);
    int sampled = 0;
    for (int i = 0; i < 10; i++) {
        /* R = 1 byte: every allocation; 20 at a time, as slots free up */
        sampled += churn(20, 64);
        tu_heap_wait_drained(p, (uint64_t)sampled);
    }
    ASSERT_EQ(sampled, 200);
    ASSERT_OK(snapprof_profiler_stop(p));
    snapprof_stats_t st;
    ASSERT_OK(snapprof_profiler_get_stats(p, &st));
    printf("reentrant calls sampled: %d; samples %" PRIu64 "\n", c.reenter_sampled,
           st.heap_samples);
    ASSERT_EQ(c.reenter_sampled, 0);
    ASSERT_EQ(st.heap_samples, 200);
    ASSERT_EQ(st.heap_frees, 200);
    snapprof_profiler_destroy(p);
    free(c.s);
}

/* One profiler at a time samples the heap: a second start is -EBUSY; after
 * the first stops, it may. */
static void profile_one_owner(void)
{
    heap_collector_t c1 = {0}, c2 = {0};
    snapprof_profiler_t *p1 = heap_profiler(4096, hc_builder(&c1, &hc_ops_v2), NULL);
    snapprof_params_t params;
    snapprof_params_init(&params);
    params.heap_interval = 4096;
    snapprof_profiler_t *p2;
    ASSERT_OK(snapprof_profiler_create(&params, NULL, 0, &p2));
    ASSERT_OK(snapprof_profiler_add_builder(p2, hc_builder(&c2, &hc_ops_v2)));
    ASSERT_EQ(snapprof_profiler_start(p2), -EBUSY);
    ASSERT_OK(snapprof_profiler_stop(p1));
    ASSERT_OK(snapprof_profiler_start(p2));
    ASSERT_GT(churn(2000, 4096), 0);
    ASSERT_OK(snapprof_profiler_stop(p2));
    snapprof_profiler_destroy(p1);
    snapprof_profiler_destroy(p2);
    free(c1.s);
    free(c2.s);
}

static const test_case_t cases[] = {
    {"two_threads", profile_two_threads}, {"interval_zero", profile_interval_zero},
    {"v1_builder", profile_v1_builder},   {"reentrancy", profile_reentrancy},
    {"one_owner", profile_one_owner},     {"no_slot_burst", profile_no_slot_burst},
    {"errno_kept", profile_errno_kept},
};

int main(int argc, char **argv)
{
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
