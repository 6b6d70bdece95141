/* A CPU-clock trigger's capture of a thread whose stack pointer lies
 * outside its known stack and cannot be read even there: the capture
 * fails as sp_out_of_range, never as tid_recycled (which says the signal
 * reached another thread). The handshake's reason for the same case was
 * tested (stack_copier, profiler foreign_stack_*); the trigger path's
 * (stack_copier_slots.c, snapprof__capture_self()) was not, and counting
 * it as tid_recycled passed the whole suite.
 *
 * The thread runs, as a fiber does, on a stack of its own making: a
 * mapping whose top page is PROT_NONE, with rsp set to the start of that
 * page by a loop in assembly that touches no memory. The kernel writes
 * each signal frame below rsp, into the readable part; the capture finds
 * rsp outside the thread's stack, and not even the word at rsp readable
 * (snapprof__copy_foreign_stack() fails). Cases: perf, timer (the trigger
 * forced). x86-64 only. */
#include "test.h"
#include "test_util.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define STACK_BYTES (1u << 20) /* below the unreadable page: room for signal frames */

static atomic_int g_stop, g_running;
static snapprof_thread_t *g_token;
static uintptr_t g_sp; /* the start of the unreadable page */

#if defined(__x86_64__)
/* iters turns of a loop that touches no memory, with rsp at sp; rsp is
 * put back before the return. A signal that comes meanwhile gets its frame
 * below sp. */
static void spin_at(uintptr_t sp, uint64_t iters)
{
    __asm__ volatile("mov %%rsp, %%r12\n\t"
                     "mov %[sp], %%rsp\n\t"
                     "1:\n\t"
                     "dec %[n]\n\t"
                     "jnz 1b\n\t"
                     "mov %%r12, %%rsp\n\t"
                     : [n] "+r"(iters)
                     : [sp] "r"(sp)
                     : "r12", "cc", "memory");
}
#endif

static void *spinner_main(void *arg)
{
    (void)arg;
    ASSERT_OK(snapprof_thread_register(&g_token));
    atomic_store(&g_running, 1);
    while (!atomic_load(&g_stop)) {
#if defined(__x86_64__)
        spin_at(g_sp, 1000000);
#endif
        /* A call TSan intercepts: it runs the signals it deferred (with
         * the context they came in, rsp at g_sp). */
        sched_yield();
    }
    return NULL;
}

static int failed_enough(const snapprof_stats_t *st, void *arg)
{
    return st->failed[SNAPPROF_FAIL_SP_OUT_OF_RANGE] + st->failed[SNAPPROF_FAIL_TID_RECYCLED] >= 20;
}

static void run(snapprof_trigger_t trigger)
{
#if !defined(__x86_64__)
    printf("skipped: the spin at a chosen rsp is x86-64 assembly\n");
    exit(TEST_SKIP);
#endif
    if (trigger == SNAPPROF_TRIGGER_PERF_EVENT)
        tu_need_perf_event();
    long page = sysconf(_SC_PAGESIZE);
    uint8_t *map = mmap(NULL, STACK_BYTES + (size_t)page, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT(map != MAP_FAILED);
    ASSERT_EQ(mprotect(map + STACK_BYTES, (size_t)page, PROT_NONE), 0);
    g_sp = (uintptr_t)(map + STACK_BYTES);
    atomic_store(&g_stop, 0);
    atomic_store(&g_running, 0);
    pthread_t th;
    tu_start_thread(&th, spinner_main, NULL, &g_running);

    snapprof_params_t params = tu_params(1000000u);
    params.trigger = trigger;
    snapprof_profiler_t *p;
    ASSERT_OK(snapprof_profiler_create(&params, &g_token, 1, &p));
    ASSERT_OK(snapprof_profiler_start(p));
    /* 20 failed captures of either kind (a timeout on a loaded machine
     * is neither, and fails below). */
    snapprof_stats_t st;
    tu_wait_stats(p, &st, failed_enough, NULL);
    ASSERT_OK(snapprof_profiler_stop(p));
    ASSERT_OK(snapprof_profiler_get_stats(p, &st));
    atomic_store(&g_stop, 1);
    pthread_join(th, NULL);
    printf("trigger %s: %llu samples, %llu signalled; sp_out_of_range %llu, tid_recycled %llu, "
           "failed %llu, foreign copies %llu\n",
           snapprof_trigger_name(trigger), (unsigned long long)st.samples,
           (unsigned long long)st.samples_signalled,
           (unsigned long long)st.failed[SNAPPROF_FAIL_SP_OUT_OF_RANGE],
           (unsigned long long)st.failed[SNAPPROF_FAIL_TID_RECYCLED],
           (unsigned long long)st.failed_total, (unsigned long long)st.foreign_stack_copies);
    /* The thread was the trigger's, and its captures went through it. */
    ASSERT_UEQ(st.threads_by_trigger[trigger], 1);
    ASSERT_GE(st.failed[SNAPPROF_FAIL_SP_OUT_OF_RANGE], 20);
    ASSERT_UEQ(st.failed[SNAPPROF_FAIL_TID_RECYCLED], 0);
    snapprof_profiler_destroy(p);
    snapprof_thread_release(g_token);
    munmap(map, STACK_BYTES + (size_t)page);
}

static void test_perf(void)
{
    run(SNAPPROF_TRIGGER_PERF_EVENT);
}

static void test_timer(void)
{
    run(SNAPPROF_TRIGGER_CPU_TIMER);
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"perf", test_perf},
        {"timer", test_timer},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
