/* Tests of the perf trigger's periods (trigger/trigger_perf_event.c), on an
 * arm this test makes itself: a worker thread armed through
 * snapprof__trigger_arm() with a capture pool of its own, whose delegate
 * (the pool's existing seam, run in the handler right after each capture)
 * notes the arm's cur_period_ns as the handler leaves it. The period in
 * force when a capture fired is then known exactly: the one noted after
 * the capture before it (the first: the arm's as made). So these checks
 * are exact, not statistical:
 *   - period_keeps_changing: over more than 2 x CHANGE_EVERY overflows the
 *     period changes every CHANGE_EVERY of them, not once and never again;
 *   - weight_is_period_in_force: every capture weighs the period in force
 *     when it fired, not the profile's nominal interval. */
#include "stack_copier/stack_copier.h"
#include "stack_copier/stack_copier_slots.h"
#include "trigger/trigger.h"

#include "test.h"
#include "test_util.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/syscall.h>
#include <unistd.h>

/* trigger_perf_event.c's CHANGE_EVERY: overflows between two changes. */
#define CHANGE_EVERY 128
/* The mean period: long enough to vary (at least twice the kernel's 10 us
 * least period), short enough that 600 overflows are 60 ms of CPU. */
#define INTERVAL_NS 100000u
/* Captures to look at: more than 4 x CHANGE_EVERY, fewer than the slots,
 * so none is dropped. */
#define CAPTURES 600
#define SLOTS 1024
#define SIGNO SIGURG

/* What the delegate notes in each capture's own area. */
typedef struct noted {
    uint64_t seq;       /* the capture's rank on its thread */
    uint64_t period_ns; /* the arm's cur_period_ns as the handler leaves it */
} noted_t;

typedef struct worker {
    pthread_t th;
    snapprof__capture_target_t target;
    atomic_int ready, go, stop;
} worker_t;

static snapprof__arm_t *_Atomic g_arm;
static _Atomic uint64_t g_seq;

/* The pool's delegate: RUNS IN THE SIGNAL HANDLER, on the worker, while
 * its arm is BUSY and after the re-arm. Async-signal-safe (loads and
 * stores only). */
static void note_period(void *ctx, void *extra)
{
    (void)ctx;
    noted_t *n = extra;
    snapprof__arm_t *a = atomic_load_explicit(&g_arm, memory_order_acquire);
    n->seq = atomic_fetch_add_explicit(&g_seq, 1, memory_order_relaxed);
    n->period_ns = a ? a->cur_period_ns : 0;
}

static __thread uint64_t g_sink;

/* The test's pool (its delegate notes periods). */
static snapprof__capture_pool_t g_pool;

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    /* Blocked until the arm is known to the delegate: a signal that came
     * first would have no arm to read. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGNO);
    ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &set, NULL), 0);
    pthread_attr_t attr;
    ASSERT_EQ(pthread_getattr_np(pthread_self(), &attr), 0);
    void *addr;
    size_t size;
    ASSERT_EQ(pthread_attr_getstack(&attr, &addr, &size), 0);
    pthread_attr_destroy(&attr);
    w->target.tid = (pid_t)syscall(SYS_gettid);
    w->target.stack_low = (uintptr_t)addr;
    w->target.stack_base = (uintptr_t)addr + size;
    atomic_store(&w->ready, 1);
    while (!atomic_load(&w->go))
        usleep(1000);
    ASSERT_EQ(pthread_sigmask(SIG_UNBLOCK, &set, NULL), 0);
    volatile uint64_t x = g_sink;
    while (!atomic_load(&w->stop)) {
        /* Enough: it stops using CPU time, so its trigger stops firing,
         * however late the test's thread looks (under TSan and a load it
         * was late by more than the 424 slots to spare: 254 dropped). */
        if (atomic_load(&g_pool.full) >= CAPTURES) {
            usleep(1000);
            continue;
        }
        for (int i = 0; i < 20000; i++)
            x = x * 6364136223846793005u + 1;
        /* A call TSan intercepts now and then: it runs the signals it
         * deferred there. */
        if (x % 7 == 0)
            sched_yield();
    }
    g_sink = x;
    return NULL;
}

/* One capture as the test reads it back. */
typedef struct capture {
    noted_t noted;
    uint64_t weight_ns; /* what the capture stands for (its slot's weight_ns) */
} capture_t;

typedef struct run {
    size_t n;
    uint64_t first_ns; /* the arm's cur_period_ns as made */
    capture_t c[SLOTS];
} run_t;

static int by_seq(const void *a, const void *b)
{
    const capture_t *x = a, *y = b;
    return (x->noted.seq > y->noted.seq) - (x->noted.seq < y->noted.seq);
}

/* Arms a burning worker's perf trigger at INTERVAL_NS with flags
 * (snapprof__trigger_arm()) and collects CAPTURES captures or more, in the
 * order they were taken. */
/* The test's worker, started (its signal blocked until go) and armed with
 * flags. */
static worker_t g_w;

static snapprof__arm_t *arm_worker(unsigned flags)
{
    tu_need_perf_event();
    ASSERT_OK(snapprof__stack_copier_install(SIGNO));
    memset(&g_pool, 0, sizeof g_pool);
    ASSERT_OK(snapprof__capture_pool_init(&g_pool, SLOTS, 4096, sizeof(noted_t), NULL));
    static const snapprof__capture_delegate_t delegate = {.on_capture = note_period};
    g_pool.delegate = &delegate;
    memset(&g_w, 0, sizeof g_w);
    tu_start_thread(&g_w.th, worker_main, &g_w, &g_w.ready);
    snapprof__arm_t *a = NULL;
    ASSERT_OK(snapprof__trigger_arm(snapprof__trigger_ops(SNAPPROF_TRIGGER_PERF_EVENT), &g_pool,
                                    &g_w.target, SIGNO, INTERVAL_NS, flags, &a));
    return a;
}

static void collect_flags(run_t *r, unsigned flags)
{
    snapprof__arm_t *a = arm_worker(flags);
    /* Not asked for, it is not mapped, and its periods change all the
     * same (threads armed as they start). */
    if (flags & SNAPPROF__ARM_NO_PAGE)
        ASSERT_NULL(a->page);
    /* A page that could not be mapped leaves the period as made (by
     * design): nothing to test then. */
    else if (a->page == NULL) {
        printf("skipped: the perf event's page could not be mapped\n");
        exit(TEST_SKIP);
    }
    r->first_ns = a->cur_period_ns;
    atomic_store_explicit(&g_arm, a, memory_order_release);
    atomic_store(&g_w.go, 1);
    /* Bounded by wall time only as a last resort; the count is what
     * matters (60 ms of the worker's CPU). */
    uint64_t deadline = tu_mono_ns() + 120000000000u;
    while (atomic_load(&g_pool.full) < CAPTURES && tu_mono_ns() < deadline)
        usleep(2000);
    snapprof__trigger_disarm(a, NULL);
    atomic_store(&g_w.stop, 1);
    pthread_join(g_w.th, NULL);
    printf("%u captures, %llu fired, %llu dropped; first period %llu ns\n",
           (unsigned)atomic_load(&g_pool.full), (unsigned long long)atomic_load(&g_w.target.fired),
           (unsigned long long)atomic_load(&g_pool.dropped), (unsigned long long)r->first_ns);
    ASSERT_GE(atomic_load(&g_pool.full), CAPTURES);
    ASSERT_UEQ(atomic_load(&g_pool.dropped), 0);
    /* Every capture's weight and note, in the order they were taken. */
    size_t n = 0;
    for (size_t i = 0; i < g_pool.slot_count; i++) {
        snapprof__capture_slot_t *s = &g_pool.slots[i];
        if (atomic_load_explicit(&s->state, memory_order_acquire) != SNAPPROF__SLOT_FULL)
            continue;
        ASSERT_EQ(s->fail, -1);
        r->c[n].noted = *(const noted_t *)s->extra;
        r->c[n].weight_ns = s->weight_ns;
        n++;
    }
    qsort(r->c, n, sizeof r->c[0], by_seq);
    for (size_t i = 0; i < n; i++)
        ASSERT_UEQ(r->c[i].noted.seq, i); /* none missing */
    r->n = n;
    atomic_store(&g_arm, NULL);
    snapprof__capture_pool_destroy(&g_pool);
}

static void collect(run_t *r)
{
    collect_flags(r, 0);
}

/* The period changes every CHANGE_EVERY overflows, again and again: each
 * run of equal periods (as the handler left them) is at most CHANGE_EVERY
 * long, and 600 captures see at least 4 changes. Each period the handler
 * drew lies in [INTERVAL / 2, INTERVAL * 3 / 2), and the draws come in
 * pairs that add up to twice the interval (the first period, made with
 * the arm, is left out of both checks: how it is drawn may differ). A
 * trigger that changed its period once and never again passed
 * trigger_perf_forced and every other test: nothing watched the draws. */
static void check_keeps_changing(unsigned flags)
{
    static run_t r;
    collect_flags(&r, flags);
    uint64_t prev = r.first_ns;
    size_t run = 0, changes = 0, longest = 0;
    uint64_t drawn[SLOTS];
    size_t nd = 0;
    for (size_t i = 0; i < r.n; i++) {
        uint64_t p = r.c[i].noted.period_ns;
        run++;
        if (p != prev) {
            changes++;
            if (run > longest)
                longest = run;
            run = 0;
            drawn[nd++] = p;
            ASSERT_GE(p, INTERVAL_NS / 2);
            ASSERT_LT(p, INTERVAL_NS * 3 / 2);
        }
        prev = p;
    }
    printf("%zu captures: %zu changes of the period, longest run %zu\n", r.n, changes, longest);
    ASSERT_LE(longest, CHANGE_EVERY);
    ASSERT_LE(run, CHANGE_EVERY); /* the last run too */
    ASSERT_GE(changes, r.n / CHANGE_EVERY);
    ASSERT_GE(changes, 4);
    /* Draws in pairs, x then 2 * INTERVAL - x: pairs start at the first
     * draw, or at the second where the first period was such a draw. */
    int paired[2] = {1, 1};
    for (size_t a = 0; a < 2; a++)
        for (size_t i = a; i + 1 < nd; i += 2)
            paired[a] &= drawn[i] + drawn[i + 1] == 2u * INTERVAL_NS;
    if (!paired[0] && !paired[1])
        TEST_FAIL("the periods drawn do not come in pairs that add up to %u ns", 2 * INTERVAL_NS);
}

static void test_period_keeps_changing(void)
{
    check_keeps_changing(0);
}

/* An arm made without its page, as a thread armed as it starts is
 * (SNAPPROF__ARM_NO_PAGE with SNAPPROF__ARM_FIRST_SPREAD): its periods
 * change as a mapped one's do. (A missing page used to mean a period
 * kept for good, which for a spread arm is its short first one.) */
static void test_period_keeps_changing_no_page(void)
{
    check_keeps_changing(SNAPPROF__ARM_NO_PAGE | SNAPPROF__ARM_FIRST_SPREAD);
}

/* An arm made without its page (a thread armed as it starts) gets one
 * from the sampling side once the thread outlives the first tick
 * (snapprof__trigger_map_page()), once; from then on the program may
 * close the event's fd, as a daemon that closes every fd does, and the
 * event keeps firing, kept alive by its page. Without that mapping it
 * died with its fd: 0 captures after the close (checked by leaving the
 * call out). */
static void test_no_page_mapped_later(void)
{
    snapprof__arm_t *a = arm_worker(SNAPPROF__ARM_NO_PAGE | SNAPPROF__ARM_FIRST_SPREAD);
    ASSERT_NULL(a->page);
    ASSERT_OK(snapprof__trigger_map_page(a));
    if (a->page == NULL) {
        printf("skipped: the perf event's page could not be mapped\n");
        exit(TEST_SKIP);
    }
    const volatile void *page = a->page;
    ASSERT_OK(snapprof__trigger_map_page(a)); /* once: nothing more */
    ASSERT_PTR_EQ(a->page, page);
    ASSERT_EQ(close(a->fd), 0); /* the program's close */
    atomic_store_explicit(&g_arm, a, memory_order_release);
    atomic_store(&g_w.go, 1);
    /* 100 captures are 10 ms of the worker's CPU; wall time only bounds a
     * run that gets none. */
    uint64_t deadline = tu_mono_ns() + 60000000000u;
    while (atomic_load(&g_pool.full) < 100 && tu_mono_ns() < deadline)
        usleep(2000);
    unsigned got = (unsigned)atomic_load(&g_pool.full);
    snapprof__trigger_disarm(a, NULL);
    atomic_store(&g_w.stop, 1);
    pthread_join(g_w.th, NULL);
    printf("%u captures after the program closed the event's fd\n", got);
    ASSERT_GE(got, 100);
    atomic_store(&g_arm, NULL);
    snapprof__capture_pool_destroy(&g_pool);
}

/* Every capture weighs the period in force when it fired: the first the
 * period the arm was made with, each later one the period the handler
 * left before it. A capture weighed by the nominal interval instead
 * (trigger_perf_forced saw that only when the first draw happened to be
 * below the interval, about 6 runs in 10) fails at its first capture. */
static void test_weight_is_period_in_force(void)
{
    static run_t r;
    collect(&r);
    size_t nominal = 0;
    for (size_t i = 0; i < r.n; i++) {
        uint64_t in_force = i == 0 ? r.first_ns : r.c[i - 1].noted.period_ns;
        nominal += in_force == INTERVAL_NS;
        if (r.c[i].weight_ns != in_force)
            TEST_FAIL("capture %zu of %zu weighs %llu ns; the period in force was %llu ns "
                      "(the interval %u ns)",
                      i, r.n, (unsigned long long)r.c[i].weight_ns, (unsigned long long)in_force,
                      INTERVAL_NS);
    }
    printf("%zu captures, each weighing the period in force; %zu periods were the interval\n", r.n,
           nominal);
    /* Not vacuous: the periods in force were not the interval (a draw is
     * exactly the interval about once in INTERVAL_NS draws). */
    ASSERT_LE(nominal * 2, r.n);
}

static void *disarm_main(void *arg)
{
    snapprof__trigger_disarm(arg, NULL);
    return NULL;
}

/* A thread that ends inside the handler (a seccomp filter that kills the
 * thread for a call the handler makes) leaves its arm BUSY for good; the
 * disarm waited for it for ever, and so the stop that disarmed it. Here
 * the arm is made BUSY as the handler would, and the thread ends. */
static void test_disarm_thread_ended_busy(void)
{
    snapprof__arm_t *a = arm_worker(0);
    uint32_t expected = SNAPPROF__ARM_ARMED;
    ASSERT(atomic_compare_exchange_strong(&a->state, &expected, SNAPPROF__ARM_BUSY));
    uint64_t before = snapprof__trigger_died_busy();
    atomic_store(&g_w.stop, 1);
    atomic_store(&g_w.go, 1);
    pthread_join(g_w.th, NULL);
    pthread_t th;
    ASSERT_OK(pthread_create(&th, NULL, disarm_main, a));
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 60;
    int rc = pthread_timedjoin_np(th, NULL, &until);
    if (rc != 0)
        TEST_FAIL("the disarm still waits after 60 s for a thread that has ended (%d)", rc);
    printf("disarmed; arms found BUSY with their thread gone: %llu\n",
           (unsigned long long)(snapprof__trigger_died_busy() - before));
    ASSERT_UEQ(snapprof__trigger_died_busy() - before, 1);
    snapprof__capture_pool_destroy(&g_pool);
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"period_keeps_changing", test_period_keeps_changing},
        {"period_keeps_changing_no_page", test_period_keeps_changing_no_page},
        {"no_page_mapped_later", test_no_page_mapped_later},
        {"weight_is_period_in_force", test_weight_is_period_in_force},
        {"disarm_thread_ended_busy", test_disarm_thread_ended_busy},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
