/* No allocation inside the signal handler: malloc and friends are
 * interposed and abort while the calling thread is inside our handler. The
 * target itself allocates in a loop, so a handler that allocated would meet
 * malloc's own lock held by the interrupted code. */
#include "stack_copier/stack_copier.h"
#include "test.h"
#include "test_util.h"

#include <pthread.h>
#include <string.h>
#include <stdatomic.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);
extern void *__libc_memalign(size_t, size_t);

static atomic_long g_calls;

static void check(void)
{
    atomic_fetch_add_explicit(&g_calls, 1, memory_order_relaxed);
    if (snapprof__in_signal_handler()) {
        static const char msg[] = "allocation inside the snapprof signal handler\n";
        write(2, msg, sizeof msg - 1);
        abort();
    }
}

void *malloc(size_t n)
{
    check();
    return __libc_malloc(n);
}
void *calloc(size_t a, size_t b)
{
    check();
    return __libc_calloc(a, b);
}
void *realloc(void *p, size_t n)
{
    check();
    return __libc_realloc(p, n);
}
void free(void *p)
{
    check();
    __libc_free(p);
}
int posix_memalign(void **out, size_t align, size_t n)
{
    check();
    *out = __libc_memalign(align, n);
    return *out ? 0 : 12;
}
void *aligned_alloc(size_t align, size_t n)
{
    check();
    return __libc_memalign(align, n);
}

static atomic_int g_stop;
static void *volatile g_block;
static snapprof_thread_t *g_token;
static atomic_int g_ready;

static void *allocating_target(void *arg)
{
    (void)arg;
    ASSERT_OK(snapprof_thread_register(&g_token));
    /* Samples also carry a zone and an attached counter, which the handler
     * reads too. */
    ASSERT_OK(snapprof_counter_attach("allocs", NULL, 1));
    ASSERT_OK(snapprof_zone_begin("allocating"));
    atomic_store(&g_ready, 1);
    for (int i = 0; !atomic_load(&g_stop); i++) {
        ASSERT_OK(snapprof_zone_begin("malloc_free"));
        /* Through a volatile: clang removes a malloc/free pair whose
         * pointer goes nowhere, and the interposer would count nothing. */
        g_block = malloc(64);
        free(g_block);
        ASSERT_OK(snapprof_counter_set("allocs", i));
        ASSERT_OK(snapprof_zone_end());
    }
    ASSERT_OK(snapprof_zone_end());
    return NULL;
}

/* Samples a thread that allocates in a loop, taking captures with trigger.
 * The CPU-clock triggers capture in the thread's own handler, the handshake
 * in the handler the sampling thread's signal runs. */
static void run(snapprof_trigger_t trigger)
{
    if (tu_sanitizer_build()) {
        printf("skipped: sanitizers interpose malloc themselves\n");
        exit(TEST_SKIP);
    }
    pthread_t th;
    tu_start_thread(&th, allocating_target, NULL, &g_ready);
    long before = atomic_load(&g_calls);
    tu_collector_t c = {0};
    snapprof_params_t params = tu_params(1000000);
    params.trigger = trigger;
    snapprof_profiler_t *p;
    ASSERT_OK(snapprof_profiler_create(&params, &g_token, 1, &p));
    ASSERT_OK(snapprof_profiler_add_builder(p, tu_collector_builder(&c)));
    ASSERT_OK(snapprof_profiler_start(p));
    snapprof_stats_t st;
    uint64_t deadline = tu_mono_ns() + 60000000000u;
    do { /* wait for samples, not for time: the host may stall us */
        usleep(10000);
        ASSERT_OK(snapprof_profiler_get_stats(p, &st));
    } while (st.samples_signalled < 300 && tu_mono_ns() < deadline);
    ASSERT_OK(snapprof_profiler_stop(p));
    atomic_store(&g_stop, 1);
    pthread_join(th, NULL);
    /* The interposer was live, and samples were taken while it was. */
    if (c.stats.threads_by_trigger[trigger] != 1) {
        printf("skipped: the %s trigger was refused (errno %d)\n", snapprof_trigger_name(trigger),
               c.stats.trigger_fallback_errno);
        ASSERT_NE(c.stats.trigger_fallback_errno, 0);
        exit(TEST_SKIP);
    }
    ASSERT_GT(atomic_load(&g_calls) - before, 1000);
    ASSERT_GE(c.stats.samples_signalled, 300);
    printf("%llu samples taken while the target allocated; no allocation in the handler\n",
           (unsigned long long)c.stats.samples_signalled);
    snapprof_profiler_destroy(p);
    snapprof_thread_release(g_token);
    tu_collector_free(&c);
}

static void test_in_handler(void)
{
    run(SNAPPROF_TRIGGER_HANDSHAKE);
}

/* The same with the thread capturing itself on its CPU-clock trigger. */
static void test_in_handler_perf(void)
{
    run(SNAPPROF_TRIGGER_PERF_EVENT);
}

static void test_in_handler_timer(void)
{
    run(SNAPPROF_TRIGGER_CPU_TIMER);
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"in_handler", test_in_handler},
        {"in_handler_perf", test_in_handler_perf},
        {"in_handler_timer", test_in_handler_timer},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
