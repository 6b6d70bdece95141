/* Requests to the helper thread of the whole-process profile: it stops
 * the profile at its deadline, at exit and for terminating signals (which
 * cannot write it from a handler), flushes it for ProfilerFlush, and finds
 * threads that registered no other way. Signal handlers, _exit and
 * ProfilerFlush post their requests here, in one word (from a handler
 * without a lock); the thread itself runs the loop of preload_control.c,
 * which carries them out. This file calls nothing of the control code. */
#include "preload/preload_process.h"

#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* The helper thread and its requests (SNAPPROF__HELPER_*). */
static atomic_uint g_cmd;
static atomic_uint g_finish_done;
static atomic_int g_finish_signal;
static atomic_int g_helper_running;
static atomic_int g_helper_tid;  /* the helper thread, once it runs */
static atomic_ullong g_deadline; /* CLOCK_MONOTONIC ns; 0: none */
static atomic_int g_main_exited; /* the first thread called pthread_exit() */

/* Flushes asked of the helper: one at a time (g_flush_mutex), each a new
 * generation; the helper answers with the generation it served and its
 * result. */
static pthread_mutex_t g_flush_mutex = PTHREAD_MUTEX_INITIALIZER;
static atomic_uint g_flush_asked, g_flush_served;
static atomic_int g_flush_rc;

void snapprof__preload_futex_wake(atomic_uint *word)
{
    syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

void snapprof__preload_futex_wait(atomic_uint *word, unsigned expected, uint64_t timeout_ns)
{
    struct timespec ts = {(time_t)(timeout_ns / 1000000000u), (long)(timeout_ns % 1000000000u)};
    syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, expected, timeout_ns ? &ts : NULL, NULL, 0);
}

void snapprof__preload_helper_began(void)
{
    /* prctl, not pthread_setname_np, which is ours and takes our lock. */
    prctl(PR_SET_NAME, "snapprof-helper");
    atomic_store(&g_helper_tid, (int)gettid_());
}

unsigned snapprof__preload_helper_take(void)
{
    return atomic_exchange(&g_cmd, 0);
}

unsigned snapprof__preload_helper_flush_asked(void)
{
    return atomic_load(&g_flush_asked);
}

void snapprof__preload_helper_flush_served(unsigned gen, int rc)
{
    atomic_store(&g_flush_rc, rc);
    atomic_store(&g_flush_served, gen);
    snapprof__preload_futex_wake(&g_flush_served);
}

int snapprof__preload_helper_finish_signo(void)
{
    return atomic_load(&g_finish_signal);
}

void snapprof__preload_helper_finish_served(void)
{
    atomic_store(&g_finish_done, 1);
    snapprof__preload_futex_wake(&g_finish_done);
}

uint64_t snapprof__preload_helper_deadline(void)
{
    return atomic_load(&g_deadline);
}

void snapprof__preload_main_exiting(void)
{
    atomic_store(&g_main_exited, 1);
    atomic_fetch_or(&g_cmd, SNAPPROF__HELPER_WAKE);
    snapprof__preload_futex_wake(&g_cmd);
}

int snapprof__preload_main_exited(void)
{
    return atomic_load(&g_main_exited);
}

void snapprof__preload_helper_wait(uint64_t timeout_ns)
{
    snapprof__preload_futex_wait(&g_cmd, 0, timeout_ns);
}

int snapprof__preload_start_quiet_thread(pthread_t *th, const pthread_attr_t *attr,
                                         void *(*fn)(void *))
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
#if defined(SNAPPROF_SANITIZER_BUILD)
    /* Through the sanitizer's interceptor, which must know every thread
     * that runs instrumented code. */
    int rc = pthread_create(th, attr, fn, NULL);
#else
    int rc = snapprof__preload_real_pthread_create(th, attr, fn, NULL);
#endif
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

/* Starts the helper once per process; it blocks every signal, so it is
 * never a sampling target and never runs the program's handlers. */
static void ensure_helper(void *(*serve)(void *))
{
    if (atomic_load(&g_helper_running))
        return;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    /* It symbolizes (libdw) and compresses for ProfilerFlush too, which
     * sanitizer runtimes make deeper: address space, not memory. */
    pthread_attr_setstacksize(&attr, 2u << 20);
    pthread_t th;
    int rc = snapprof__preload_start_quiet_thread(&th, &attr, serve);
    pthread_attr_destroy(&attr);
    if (rc == 0) {
        atomic_store(&g_helper_running, 1);
    } else {
        snapprof__preload_warn("cannot start the helper thread (%s): no profile on SIGINT/SIGTERM, "
                               "no --duration",
                               strerror(rc));
    }
}

void snapprof__preload_helper_arm(uint64_t deadline, void *(*serve)(void *))
{
    ensure_helper(serve);
    atomic_store(&g_deadline, deadline);
    /* Always: the new profile's deadline, rescans and checkpoints
     * (SNAPPROF_CHECKPOINT) are the helper's to schedule. */
    atomic_fetch_or(&g_cmd, SNAPPROF__HELPER_WAKE);
    snapprof__preload_futex_wake(&g_cmd);
}

void snapprof__preload_helper_disarm(void)
{
    atomic_store(&g_deadline, 0);
}

void snapprof__preload_helper_gone(void)
{
    atomic_store(&g_helper_running, 0);
}

int snapprof__preload_helper_flush(int *rc)
{
    if (!atomic_load(&g_helper_running) || atomic_load(&g_helper_tid) == gettid_())
        return 0;
    pthread_mutex_lock(&g_flush_mutex);
    unsigned gen = atomic_fetch_add(&g_flush_asked, 1) + 1;
    atomic_fetch_or(&g_cmd, SNAPPROF__HELPER_FLUSH);
    snapprof__preload_futex_wake(&g_cmd);
    unsigned served;
    while ((served = atomic_load(&g_flush_served)) != gen)
        snapprof__preload_futex_wait(&g_flush_served, served, 0);
    *rc = atomic_load(&g_flush_rc);
    pthread_mutex_unlock(&g_flush_mutex);
    return 1;
}

void snapprof__preload_helper_fork_child(void)
{
    pthread_mutex_init(&g_flush_mutex, NULL);
    atomic_store(&g_helper_running, 0);
    atomic_store(&g_helper_tid, 0);
    atomic_store(&g_cmd, 0);
    atomic_store(&g_deadline, 0);
    atomic_store(&g_main_exited, 0); /* the child's first thread is the one that forked */
}

void snapprof__preload_finish_on_signal(int signo)
{
    /* A terminating signal the program leaves at the default, or _exit:
     * the program is not broken, so the writer may take its time. */
    snapprof__preload_finish_within(signo, 10000000000u);
}

int snapprof__preload_finish_within(int signo, uint64_t timeout_ns)
{
    /* getpid() is a system call: right in vfork() children too, which
     * share our memory and must leave it alone. */
    if (!atomic_load(&snapprof__preload_tracking_on) || !atomic_load(&g_helper_running) ||
        atomic_load(&snapprof__preload_owner_pid) != getpid())
        return SNAPPROF__FINISH_NOTHING;
    /* The writer needs the preload lock: if this very thread holds it,
     * waiting would never end; nor would the helper's wait for itself. */
    pid_t self = gettid_();
    if (snapprof__preload_lock_holder() == self)
        return SNAPPROF__FINISH_OWN_LOCK;
    if (atomic_load(&g_helper_tid) == self)
        return SNAPPROF__FINISH_NOTHING;
    int expected = 0;
    atomic_compare_exchange_strong(&g_finish_signal, &expected, signo > 0 ? signo : -1);
    atomic_fetch_or(&g_cmd, SNAPPROF__HELPER_FINISH);
    snapprof__preload_futex_wake(&g_cmd);
    uint64_t t0 = snapprof__monotonic_ns();
    while (!atomic_load(&g_finish_done)) {
        uint64_t waited = snapprof__monotonic_ns() - t0;
        if (waited >= timeout_ns)
            return SNAPPROF__FINISH_TIMED_OUT; /* a thread this signal stopped holds what the
                                                 writer needs */
        uint64_t left = timeout_ns - waited;
        snapprof__preload_futex_wait(&g_finish_done, 0, left < 100000000u ? left : 100000000u);
    }
    return SNAPPROF__FINISH_DONE;
}
