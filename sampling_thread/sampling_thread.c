/* The one sampling thread shared by every profiler: sleeps until the next
 * profiler is due, samples it, skips (never bursts) ticks it missed. */
#include "sampling_thread/profiler_internal.h"

#include "common/own_thread.h"
#include "heap/heap_sampler.h"
#include "stack_copier/stack_copier.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_wake;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static snapprof_profiler_t *g_active;
static int g_thread_running;
/* Bumped (and futex-woken) by anything that wants the sampling thread
 * before its next deadline: a capture pool filling up in a signal
 * handler, where a condition variable cannot be signalled. */
static _Atomic uint32_t g_kick;
/* How many threads wait in snapprof__sampler_lock() (futex word). The
 * sampling thread lets them in before its next tick: when it is behind, one
 * profiler's drain follows another's with no sleep between, and a mutex is
 * not fair (profiler_sampler_behind: get_stats() waited for ever). */
static _Atomic uint32_t g_api_waiting;
/* Set while the sampling thread waits for them: only then does the last
 * one in wake it (one system call saved on every other call). */
static atomic_int g_giving_way;
/* Drains asked of the sampling thread (snapprof__sampler_drain_active_handoff)
 * and done by it, under g_lock; g_drain_done is also a futex word. */
static uint32_t g_drain_asked;
static _Atomic uint32_t g_drain_done;
static _Atomic pid_t g_sampler_tid; /* 0 until the sampling thread runs */

uint32_t *snapprof__sampler_kick_word(void)
{
    return (uint32_t *)&g_kick;
}

static void wake_sampler(void)
{
    atomic_fetch_add(&g_kick, 1);
    syscall(SYS_futex, &g_kick, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
    pthread_cond_signal(&g_wake);
}

/* As an API caller, counted in g_api_waiting: a sampling thread in a long
 * drain gives way to a fork() as to any other waiter (soak finding 8: under
 * TSan a heap drain held the lock for seconds while fork() waited, and the
 * preload's helper behind it). */
static void fork_prepare(void)
{
    snapprof__sampler_lock();
}

static void fork_parent(void)
{
    pthread_mutex_unlock(&g_lock);
}

static void init_wake(void)
{
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&g_wake, &attr);
    pthread_condattr_destroy(&attr);
}

/* The child has no sampling thread: profilers inherited from the parent are
 * no longer sampled, and a new start() makes a new thread. The condition
 * variable is made anew: the parent's sampling thread may have been
 * waiting on it, and glibc's condvar keeps count of its waiters, so the
 * child's first signals would wait forever for a waiter that does not
 * exist there (test profiler_start_in_fork_child). */
static void fork_child(void)
{
    g_active = NULL;
    g_thread_running = 0;
    atomic_store(&g_sampler_tid, 0);
    g_drain_asked = 0;
    atomic_store(&g_drain_done, 0);
    /* The parent's threads that waited for the lock are not here: counted,
     * they would make a new sampling thread wait for them at every pass
     * (profiler_fork_with_waiter). */
    atomic_store(&g_api_waiting, 0);
    atomic_store(&g_giving_way, 0);
    init_wake();
    pthread_mutex_unlock(&g_lock);
}

static void init_once(void)
{
    init_wake();
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

void snapprof__sampler_lock(void)
{
    pthread_once(&g_once, init_once);
    atomic_fetch_add(&g_api_waiting, 1);
    pthread_mutex_lock(&g_lock);
    if (atomic_fetch_sub(&g_api_waiting, 1) == 1 && atomic_load(&g_giving_way))
        syscall(SYS_futex, &g_api_waiting, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

int snapprof__sampler_api_waiting(void)
{
    return atomic_load_explicit(&g_api_waiting, memory_order_relaxed) != 0;
}

void snapprof__sampler_unlock(void)
{
    pthread_mutex_unlock(&g_lock);
}

void snapprof__sampler_kick(void)
{
    wake_sampler();
}

void snapprof__sampler_drain_active(void)
{
    for (snapprof_profiler_t *p = g_active; p; p = p->next_active)
        snapprof__profiler_drain(p);
}

int snapprof__sampler_active_have_captures_of(const struct snapprof_thread *thread)
{
    for (snapprof_profiler_t *p = g_active; p; p = p->next_active)
        if (snapprof__profiler_has_captures_of(p, thread))
            return 1;
    return 0;
}

/* Delivers what the slots hold if a caller asked for it. Lock held. */
static void serve_drain_asked(void)
{
    if (atomic_load(&g_drain_done) == g_drain_asked)
        return;
    snapprof__sampler_drain_active();
    atomic_store(&g_drain_done, g_drain_asked);
    syscall(SYS_futex, &g_drain_done, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

#define HANDOFF_WAIT_NS 100000000u

/* Hand-offs that timed out and drained on the caller (a test seam). */
static atomic_uint g_handoff_fallbacks;

unsigned snapprof__sampler_handoff_fallbacks(void)
{
    return atomic_load(&g_handoff_fallbacks);
}

void snapprof__sampler_drain_active_handoff(void)
{
    if (!g_thread_running || atomic_load(&g_sampler_tid) == snapprof__gettid_cached()) {
        snapprof__sampler_drain_active();
        return;
    }
    uint32_t want = ++g_drain_asked;
    wake_sampler();
    uint64_t deadline = snapprof__monotonic_ns() + HANDOFF_WAIT_NS;
    for (;;) {
        uint32_t done = atomic_load(&g_drain_done);
        if ((int32_t)(done - want) >= 0)
            return;
        uint64_t now = snapprof__monotonic_ns();
        if (now >= deadline) {
            /* The sampling thread is held up (a stalled host, a builder
             * writing a file): what it would have done, done here. */
            atomic_fetch_add(&g_handoff_fallbacks, 1);
            snapprof__sampler_drain_active();
            return;
        }
        uint64_t left = deadline - now;
        struct timespec ts = {(time_t)(left / 1000000000u), (long)(left % 1000000000u)};
        pthread_mutex_unlock(&g_lock);
        syscall(SYS_futex, &g_drain_done, FUTEX_WAIT_PRIVATE, done, &ts, NULL, 0);
        snapprof__sampler_lock();
    }
}

void snapprof__sampler_wait(snapprof_profiler_t *p)
{
    /* Not a condition variable: pthread_cond_wait() takes the lock back
     * inside glibc, uncounted, and a sampling thread that is behind would
     * not give way to it (profiler_stop_while_completing_behind). */
    uint32_t seq = atomic_load(&p->done_seq);
    pthread_mutex_unlock(&g_lock);
    struct timespec ts = {0, 100000000};
    syscall(SYS_futex, &p->done_seq, FUTEX_WAIT_PRIVATE, seq, &ts, NULL, 0);
    snapprof__sampler_lock();
}

void snapprof__sampler_done(snapprof_profiler_t *p)
{
    atomic_fetch_add(&p->done_seq, 1);
    syscall(SYS_futex, &p->done_seq, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* Sleeps until when_ns (CLOCK_MONOTONIC) or a kick, without the lock. */
static void sleep_until(uint64_t when_ns)
{
    uint32_t kick = atomic_load(&g_kick);
    struct timespec ts = {(time_t)(when_ns / 1000000000u), (long)(when_ns % 1000000000u)};
    pthread_mutex_unlock(&g_lock);
    syscall(SYS_futex, &g_kick, FUTEX_WAIT_BITSET_PRIVATE, kick, &ts, NULL, FUTEX_BITSET_MATCH_ANY);
    pthread_mutex_lock(&g_lock);
}

/* Lets the threads waiting for the lock take it, each once, before the
 * sampling thread goes on; gives up after a while so that a stream of
 * callers cannot stop the sampling either. */
static void give_way(void)
{
    if (atomic_load(&g_api_waiting) == 0)
        return;
    pthread_mutex_unlock(&g_lock);
    /* Set before the count is read: a caller that leaves after the read
     * sees the flag and wakes us, or changed the count the futex compares. */
    atomic_store(&g_giving_way, 1);
    uint64_t until = snapprof__monotonic_ns() + 100000000u;
    for (uint32_t w; (w = atomic_load(&g_api_waiting)) != 0 && snapprof__monotonic_ns() < until;) {
        struct timespec ts = {0, 5000000};
        syscall(SYS_futex, &g_api_waiting, FUTEX_WAIT_PRIVATE, w, &ts, NULL, 0);
    }
    atomic_store(&g_giving_way, 0);
    pthread_mutex_lock(&g_lock);
}

/* The sampling thread blocks every signal but the process-wide timer's
 * while one is in force (snapprof__process_timer_signo(): taken here, its
 * handler does nothing on this thread, rather than sent to a thread of
 * the program's, maybe asleep). *cur is the one it lets in now, 0: none. */
static void follow_process_timer(int *cur)
{
    int signo = snapprof__process_timer_signo();
    if (signo == *cur)
        return;
    sigset_t mask;
    sigfillset(&mask);
    if (signo > 0)
        sigdelset(&mask, signo);
    pthread_sigmask(SIG_SETMASK, &mask, NULL);
    *cur = signo;
}

static void *sampler_main(void *arg)
{
    (void)arg;
    snapprof__heap_mute_thread(); /* its allocations are never the program's */
    atomic_store(&g_sampler_tid, snapprof__gettid_cached());
    int timer_signo = 0;
    pthread_mutex_lock(&g_lock);
    for (;;) {
        follow_process_timer(&timer_signo);
        give_way();
        serve_drain_asked();
        if (!g_active) {
            pthread_cond_wait(&g_wake, &g_lock);
            continue;
        }
        uint64_t now = snapprof__monotonic_ns();
        uint64_t earliest = UINT64_MAX;
        for (snapprof_profiler_t *p = g_active; p; p = p->next_active) {
            uint64_t due = snapprof__profiler_due(p, now);
            if (due < earliest)
                earliest = due;
        }
        if (earliest > now) {
            sleep_until(earliest);
            continue;
        }
        snapprof_profiler_t *finished = NULL;
        for (snapprof_profiler_t *p = g_active, *next; p; p = next) {
            next = p->next_active;
            if (snapprof__profiler_due(p, now) > now)
                continue;
            if (snapprof__profiler_tick(p, now)) {
                snapprof__sampler_deactivate(p);
                p->state = PROFILER_COMPLETING;
                p->end_mono = snapprof__monotonic_ns();
                p->next_active = finished;
                finished = p;
            }
        }
        /* Builders complete outside the lock: writing a file may be slow
         * and must not hold up other profilers or stop(). */
        while (finished) {
            snapprof_profiler_t *p = finished;
            finished = p->next_active;
            p->next_active = NULL;
            pthread_mutex_unlock(&g_lock);
            snapprof__profiler_complete(p);
            pthread_mutex_lock(&g_lock);
        }
    }
    return NULL;
}

int snapprof__sampler_activate(snapprof_profiler_t *p)
{
    if (!g_thread_running) {
        /* The sampling thread takes no signals: it must never be stopped by
         * our own handshake or anyone else's. */
        int rc = snapprof__own_thread_start(sampler_main, NULL, 0, "snapprof");
        if (rc != 0)
            return -rc;
        g_thread_running = 1;
    }
    p->next_active = g_active;
    g_active = p;
    wake_sampler();
    return 0;
}

void snapprof__sampler_deactivate(snapprof_profiler_t *p)
{
    for (snapprof_profiler_t **pp = &g_active; *pp; pp = &(*pp)->next_active) {
        if (*pp == p) {
            *pp = p->next_active;
            p->next_active = NULL;
            return;
        }
    }
}
