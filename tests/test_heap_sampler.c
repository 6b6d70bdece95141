/* The heap sampler's parts alone: the sampling rule (each allocation of S
 * bytes sampled with probability 1 - exp(-S/R), a thread's first one
 * too, so that Go's scaleHeapSample estimate of the bytes is unbiased)
 * and the lock-free set of live addresses (concurrent inserts, removes
 * and lookups while the sampling side grows it). */
#include "test.h"
#include "test_util.h"

#include "heap/heap_internal.h"

#include <snapprof/heap.h>

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

/* A fake block address: the rule never touches it. */
#define FAKE ((void *)0x1000)

static uint64_t rng_state = 88172645463325252ull;

static uint64_t rnd(void)
{
    return tu_xorshift64(&rng_state);
}

/* Heap sampling's rule alone, through the sampler's seam (0: off). */
static void rule_only(size_t interval)
{
    static snapprof__heap_seams_t seams;
    if (interval == 0) {
        snapprof__heap_set_seams(NULL);
        return;
    }
    seams.rule_only_interval = interval;
    snapprof__heap_set_seams(&seams);
}

/* Sizes 16 B to 64 KiB, log-uniform; the bytes are estimated per sample
 * as Go's pprof does (scale = 1 / (1 - exp(-size/R))), overall and in
 * four size bands, against the truth. */
static void rule_scaled_estimate(void)
{
    const size_t R = 4096;
    rule_only(R);
    /* vest: the variance of each band's estimate, sum of s^2 (1-p)/p: the
     * test allows 5 standard errors (2.6 % of band 0 at this count; a
     * fixed 5 % failed 1 run in a few dozen). */
    double truth[4] = {0}, est[4] = {0}, vest[4] = {0}, expect = 0, var = 0;
    uint64_t samples = 0, per_band[4] = {0};
    for (int i = 0; i < 400000; i++) {
        /* 2^4 .. 2^16 */
        double e = 4 + 12 * (double)(rnd() >> 11) / 9007199254740992.0;
        size_t size = (size_t)pow(2, e);
        int band = size < 256 ? 0 : size < 4096 ? 1 : size < 16384 ? 2 : 3;
        double p = 1 - exp(-(double)size / R);
        truth[band] += (double)size;
        vest[band] += (double)size * (double)size * (1 - p) / p;
        expect += p;
        var += p * (1 - p);
        int rc = snapprof_heap_note_alloc(FAKE, size);
        ASSERT(rc == 0 || rc == 1);
        if (rc == 1) {
            samples++;
            per_band[band]++;
            est[band] += (double)size / p;
        }
    }
    rule_only(0);
    ASSERT_EQ(snapprof_heap_note_alloc(FAKE, 1u << 20), 0); /* off again */
    double t = 0, s = 0;
    for (int b = 0; b < 4; b++) {
        t += truth[b];
        s += est[b];
        printf("band %d: %" PRIu64 " samples, estimate/truth %.4f (+- %.4f)\n", b, per_band[b],
               est[b] / truth[b], sqrt(vest[b]) / truth[b]);
        ASSERT_GT(per_band[b], 2000);
        ASSERT(fabs(est[b] - truth[b]) < 5 * sqrt(vest[b]));
    }
    printf("samples %" PRIu64 ", expected %.0f +- %.0f; estimate/truth %.4f\n", samples, expect,
           sqrt(var), s / t);
    ASSERT(fabs((double)samples - expect) < 5 * sqrt(var));
    double vt = vest[0] + vest[1] + vest[2] + vest[3];
    ASSERT(fabs(s - t) < 5 * sqrt(vt));
}

static atomic_int first_sampled;

static void *first_alloc(void *arg)
{
    size_t size = (size_t)(uintptr_t)arg;
    if (snapprof_heap_note_alloc(FAKE, size) == 1)
        atomic_fetch_add(&first_sampled, 1);
    return NULL;
}

/* A thread's first allocation draws its own interval: of S = R bytes,
 * sampled with probability 1 - 1/e, not always (a countdown starting at
 * zero) nor never. */
static void rule_first_allocation(void)
{
    const size_t R = 65536;
    const int n = 400;
    rule_only(R);
    for (int i = 0; i < n; i++) {
        pthread_t th;
        ASSERT_OK(pthread_create(&th, NULL, first_alloc, (void *)(uintptr_t)R));
        ASSERT_OK(pthread_join(th, NULL));
    }
    rule_only(0);
    double p = 1 - exp(-1.0), got = (double)atomic_load(&first_sampled) / n;
    double sd = sqrt(p * (1 - p) / n);
    printf("first allocations sampled: %.3f, expected %.3f +- %.3f\n", got, p, sd);
    ASSERT(fabs(got - p) < 5 * sd);
}

/* The library's own code on a thread, and snapprof_heap_ignore_begin(),
 * keep its allocations out; the rule still runs. */
static void rule_ignored_inside(void)
{
    rule_only(1); /* every allocation of 64 B: p = 1 - e^-64 */
    ASSERT_EQ(snapprof_heap_note_alloc(FAKE, 64), 1);
    snapprof_heap_ignore_begin();
    snapprof_heap_ignore_begin();
    for (int i = 0; i < 100; i++)
        ASSERT_EQ(snapprof_heap_note_alloc(FAKE, 64), 0);
    snapprof_heap_ignore_end();
    ASSERT_EQ(snapprof_heap_note_alloc(FAKE, 64), 0);
    snapprof_heap_ignore_end();
    ASSERT_EQ(snapprof_heap_note_alloc(FAKE, 64), 1);
    snapprof__heap_guard_enter();
    ASSERT_EQ(snapprof_heap_note_alloc(FAKE, 64), 0);
    snapprof__heap_guard_leave();
    ASSERT_EQ(snapprof_heap_note_alloc(NULL, 64), -EINVAL);
    rule_only(0);
    ASSERT_EQ(snapprof_heap_note_alloc(FAKE, 64), 0);
}

/* Cost of an unsampled note_alloc: the thread-local countdown. Printed,
 * and bounded loosely (a loaded machine is slow, never 1 us a call). */
static void rule_unsampled_cost(void)
{
    const int n = 20000000;
    rule_only((size_t)1 << 40);
    uint64_t t0 = tu_thread_cpu_ns();
    int s = 0;
    for (int i = 0; i < n; i++)
        s += snapprof_heap_note_alloc(FAKE, 32);
    uint64_t t1 = tu_thread_cpu_ns();
    rule_only(0);
    uint64_t t2 = tu_thread_cpu_ns();
    for (int i = 0; i < n; i++)
        s += snapprof_heap_note_alloc(FAKE, 32);
    uint64_t t3 = tu_thread_cpu_ns();
    for (int i = 0; i < n; i++)
        s += snapprof_heap_note_free(FAKE);
    uint64_t t4 = tu_thread_cpu_ns();
    printf("note_alloc unsampled: %.2f ns; heap off: %.2f ns; note_free, set empty: %.2f ns "
           "(%d sampled)\n",
           (double)(t1 - t0) / n, (double)(t3 - t2) / n, (double)(t4 - t3) / n, s);
    ASSERT_LT((t1 - t0) / n, 1000);
}

/* ------------------------------------------------------------------------ */
/* The set                                                                  */
/* ------------------------------------------------------------------------ */

static pthread_mutex_t maintain_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int set_done;
static pthread_barrier_t set_barrier; /* all inserted before any removes */

/* The sampling side: grows the set as it fills, as the drain does. */
static void *maintainer(void *arg)
{
    (void)arg;
    while (!atomic_load(&set_done)) {
        pthread_mutex_lock(&maintain_lock);
        ASSERT_OK(snapprof__heap_set_maintain());
        pthread_mutex_unlock(&maintain_lock);
        /* Far more often than the drain (every 20 ms at most). */
        struct timespec ts = {0, 500000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

typedef struct worker {
    int id;
    int rounds, per_round, retry;
    uint64_t inserted, removed, refused, false_hits;
} worker_t;

/* Inserts its own addresses a round at a time, looks up addresses no one
 * inserted, and removes its own: each of its own is found exactly once. */
static void *worker_main(void *arg)
{
    worker_t *w = arg;
    uintptr_t base = ((uintptr_t)(w->id + 1) << 32);
    for (int r = 0; r < w->rounds; r++) {
        for (int i = 0; i < w->per_round; i++) {
            uintptr_t a = base + ((uintptr_t)r << 20) + (uintptr_t)i * 16;
            int rc;
            /* Refused while the sampling side has not grown it yet: with
             * retry, everything goes in (set_grows); without, some. */
            uint64_t give_up = tu_mono_ns() + 2000000000ull;
            while ((rc = snapprof__heap_set_insert(a)) != 0 && w->retry && tu_mono_ns() < give_up)
                sched_yield();
            if (rc == 0)
                w->inserted++;
            else
                w->refused++;
        }
        if (w->retry)
            pthread_barrier_wait(&set_barrier);
        for (int i = 0; i < w->per_round; i++) {
            uintptr_t other = ((uintptr_t)(w->id + 101) << 32) + (uintptr_t)i * 16;
            w->false_hits += (uint64_t)snapprof__heap_set_remove(other);
        }
        for (int i = 0; i < w->per_round; i++) {
            uintptr_t a = base + ((uintptr_t)r << 20) + (uintptr_t)i * 16;
            w->removed += (uint64_t)snapprof__heap_set_remove(a);
        }
    }
    return NULL;
}

static void set_run(int threads, int rounds, int per_round, int retry)
{
    pthread_barrier_init(&set_barrier, NULL, (unsigned)threads);
    pthread_mutex_lock(&maintain_lock);
    ASSERT_OK(snapprof__heap_set_maintain());
    snapprof__heap_set_clear();
    pthread_mutex_unlock(&maintain_lock);
    ASSERT_EQ(snapprof__heap_set_count(), 0);
    size_t cap0 = snapprof__heap_set_capacity();
    atomic_store(&set_done, 0);
    pthread_t m;
    ASSERT_OK(pthread_create(&m, NULL, maintainer, NULL));
    worker_t w[8];
    pthread_t th[8];
    for (int i = 0; i < threads; i++) {
        w[i] = (worker_t){.id = i, .rounds = rounds, .per_round = per_round, .retry = retry};
        ASSERT_OK(pthread_create(&th[i], NULL, worker_main, &w[i]));
    }
    uint64_t inserted = 0, removed = 0, refused = 0;
    for (int i = 0; i < threads; i++) {
        ASSERT_OK(pthread_join(th[i], NULL));
        ASSERT_EQ(w[i].false_hits, 0);
        ASSERT_UEQ(w[i].removed, w[i].inserted);
        inserted += w[i].inserted;
        removed += w[i].removed;
        refused += w[i].refused;
    }
    atomic_store(&set_done, 1);
    ASSERT_OK(pthread_join(m, NULL));
    printf("%d threads: %" PRIu64 " inserted, %" PRIu64 " removed, %" PRIu64
           " refused; capacity %zu -> %zu\n",
           threads, inserted, removed, refused, cap0, snapprof__heap_set_capacity());
    ASSERT_EQ(snapprof__heap_set_entries(), 0);
    ASSERT_EQ(snapprof__heap_set_count(), 0);
    ASSERT_GT(inserted, 0);
}

/* Many short rounds: tombstones pile up and the set is rebuilt under the
 * threads' feet, again and again. */
static void set_concurrent(void)
{
    set_run(4, tu_tsan_build() ? 20 : 200, 2000, 0);
}

/* Rounds larger than the first table: the set doubles while inserts and
 * removes go on, and every address is still found once. */
static void set_grows(void)
{
    pthread_mutex_lock(&maintain_lock);
    ASSERT_OK(snapprof__heap_set_maintain());
    pthread_mutex_unlock(&maintain_lock);
    size_t cap0 = snapprof__heap_set_capacity();
    /* Without the sampling side, an insert past seven eighths is refused. */
    uint64_t ok = 0;
    for (uintptr_t i = 0; i < cap0; i++)
        ok += snapprof__heap_set_insert(0x7000000000 + i * 16) == 0;
    ASSERT_LT(ok, cap0);
    ASSERT_GE(ok, cap0 / 2);
    pthread_mutex_lock(&maintain_lock);
    snapprof__heap_set_clear();
    pthread_mutex_unlock(&maintain_lock);
    /* With it (here between inserts, as the drain does between hooks),
     * 40000 live addresses all go in: the set doubles, and each is
     * found once. */
    for (uintptr_t i = 0; i < 40000; i++) {
        if (i % 1000 == 0) {
            pthread_mutex_lock(&maintain_lock);
            ASSERT_OK(snapprof__heap_set_maintain());
            ASSERT_OK(snapprof__heap_set_maintain()); /* a move left to finish */
            pthread_mutex_unlock(&maintain_lock);
        }
        ASSERT_OK(snapprof__heap_set_insert(0x7100000000 + i * 16));
    }
    ASSERT_GE(snapprof__heap_set_capacity(), 4 * cap0);
    for (uintptr_t i = 0; i < 40000; i++)
        ASSERT_EQ(snapprof__heap_set_remove(0x7100000000 + i * 16), 1);
    ASSERT_EQ(snapprof__heap_set_remove(0x7100000000 + 16), 0);
    ASSERT_EQ(snapprof__heap_set_entries(), 0);
    ASSERT_EQ(snapprof__heap_set_count(), 0);
    printf("capacity %zu -> %zu\n", cap0, snapprof__heap_set_capacity());
}

/* 1 when every bucket of the filter reads 0. */
static int filter_empty(void)
{
    for (size_t i = 0; i < SNAPPROF__HEAP_FILTER_SIZE; i++)
        if (atomic_load(&snapprof__heap_hooks->filter[i]) != 0)
            return 0;
    return 1;
}

/* The filter a free looks at before the set (heap_hook_abi.h): a remove
 * stops at a bucket that reads 0, so every live entry must keep its
 * bucket raised: beside another address of the same bucket, as a
 * duplicate entry, through the table's growth and moves; and a clear or
 * the last remove lowers it again (or every free would look in the set
 * for good). Bugs it catches: a bucket lowered by a failed remove or by a
 * move (a sampled block's free then missed), one never lowered. */
static void set_filter(void)
{
    pthread_mutex_lock(&maintain_lock);
    ASSERT_OK(snapprof__heap_set_maintain());
    snapprof__heap_set_clear();
    pthread_mutex_unlock(&maintain_lock);
    ASSERT(filter_empty());
    const uintptr_t a = 0x7200000000, b = a + ((uintptr_t)16 << SNAPPROF__HEAP_FILTER_BITS);
    ASSERT_EQ(snapprof__heap_filter_index(a), snapprof__heap_filter_index(b));
    ASSERT(!snapprof__heap_filter_hit(a));
    ASSERT_EQ(snapprof__heap_set_remove(a), 0);
    ASSERT(filter_empty());
    ASSERT_OK(snapprof__heap_set_insert(a));
    ASSERT(snapprof__heap_filter_hit(a));
    ASSERT_OK(snapprof__heap_set_insert(b));
    ASSERT_EQ(snapprof__heap_set_remove(a), 1);
    ASSERT_EQ(snapprof__heap_set_remove(a), 0); /* a failed remove lowers nothing */
    ASSERT(snapprof__heap_filter_hit(b));
    ASSERT_EQ(snapprof__heap_set_remove(b), 1);
    ASSERT(filter_empty());
    /* A duplicate: two entries, two removes. */
    ASSERT_OK(snapprof__heap_set_insert(a));
    ASSERT_OK(snapprof__heap_set_insert(a));
    ASSERT_EQ(snapprof__heap_set_remove(a), 1);
    ASSERT(snapprof__heap_filter_hit(a));
    ASSERT_EQ(snapprof__heap_set_remove(a), 1);
    ASSERT(filter_empty());
    /* Through growth and moves: 40000 addresses, every one still raised. */
    const uintptr_t base = 0x7300000000;
    for (uintptr_t i = 0; i < 40000; i++) {
        if (i % 1000 == 0) {
            pthread_mutex_lock(&maintain_lock);
            ASSERT_OK(snapprof__heap_set_maintain());
            ASSERT_OK(snapprof__heap_set_maintain());
            pthread_mutex_unlock(&maintain_lock);
        }
        ASSERT_OK(snapprof__heap_set_insert(base + i * 48));
    }
    for (uintptr_t i = 0; i < 40000; i++)
        ASSERT(snapprof__heap_filter_hit(base + i * 48));
    for (uintptr_t i = 0; i < 20000; i++)
        ASSERT_EQ(snapprof__heap_set_remove(base + i * 48), 1);
    for (uintptr_t i = 20000; i < 40000; i++)
        ASSERT(snapprof__heap_filter_hit(base + i * 48));
    /* A clear lowers what it removes. */
    pthread_mutex_lock(&maintain_lock);
    snapprof__heap_set_clear();
    pthread_mutex_unlock(&maintain_lock);
    ASSERT(filter_empty());
    ASSERT_EQ(snapprof__heap_set_count(), 0);
}

/* The draws from fixed seeds, against values recorded from the code
 * before its seed mixing became common/hash.h's splitmix64: a thread's
 * first state (snapprof__heap_seed()) and the countdowns drawn from it
 * stay bit-identical. Catches a change of the mixing (a gamma added
 * after rather than before, a constant or a shift mistyped, the state
 * advanced twice) and of the draw itself. */
#define SEED_DRAWS 4
static void rule_seed_fixed(void)
{
    static const struct {
        uint64_t raw, seeded;
        int64_t draws[SEED_DRAWS];
    } want[] = {
        {0x0ull, 0xe220a8397b1dcdafull, {381166, 73532, 185322, 68952}},
        {0x1ull, 0x910a2dec89025cc1ull, {641737, 89361, 519276, 767925}},
        {0x123456789abcdefull, 0x157a3807a48faa9dull, {230794, 255413, 34773, 47433}},
        {0xffffffffffffffffull, 0xe4d971771b652c20ull, {1843047, 1297970, 860817, 72401}},
        {0x61c8864680b583ebull, 0x1ull, {665839, 209076, 167990, 625096}}, /* x + gamma == 0 */
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        uint64_t rng = snapprof__heap_seed(want[i].raw);
        int row_bad = rng != want[i].seeded;
        printf("        {%#" PRIx64 "ull, %#" PRIx64 "ull, {", want[i].raw, rng);
        for (int k = 0; k < SEED_DRAWS; k++) {
            int64_t d = snapprof__heap_draw(&rng, 524288);
            row_bad |= d != want[i].draws[k];
            printf("%s%" PRId64, k ? ", " : "", d);
        }
        printf("}},%s\n", row_bad ? " /* differs */" : "");
        bad += row_bad;
    }
    ASSERT_EQ(bad, 0);
}

static const test_case_t cases[] = {
    {"rule_seed_fixed", rule_seed_fixed},
    {"rule_scaled_estimate", rule_scaled_estimate},
    {"rule_first_allocation", rule_first_allocation},
    {"rule_ignored_inside", rule_ignored_inside},
    {"rule_unsampled_cost", rule_unsampled_cost},
    {"set_concurrent", set_concurrent},
    {"set_grows", set_grows},
    {"set_filter", set_filter},
};

int main(int argc, char **argv)
{
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
