/* The process-wide CPU timer for threads not yet armed
 * (snapprof_params_t.unarmed_timer): one POSIX timer on the process's CPU
 * clock, its signal the profile's, so that a thread that ends before the
 * sampler's next tick arms it is still sampled with probability (its CPU
 * time / period) at no cost of its own. Go's runtime pairs its per-thread
 * timers with setitimer(ITIMER_PROF) the same way (validSIGPROF: a thread
 * with its own timer ignores the process's).
 *
 * Since Linux 6.4 (bcb7ee79029d, "posix-timers: Prefer delivery of
 * signals to the current thread") a process timer's signal goes to the
 * thread that was running when it expired, so which thread gets it follows
 * the CPU time. Before, it went to the thread-group leader when that
 * could take it: the main thread, which is armed, so older kernels are
 * refused (-ENOTSUP) rather than profiled wrongly.
 *
 * A thread the profile has not armed yet publishes a capture target of its
 * own in its registration (snapprof_thread.unarmed_ct); the handler
 * captures into it, weighing (1 + overrun) periods. On any other thread
 * (armed, or not the profile's) the signal is counted and dropped. Handlers
 * on several threads may run at once: each counts itself in users, which
 * the sampling side waits to see at 0 before it frees what a handler could
 * hold.
 *
 * The clock counts kernel time too, and a signal is delivered on the
 * return to user mode: CPU time threads spend in the kernel where they do
 * not return to user mode soon (starting and ending) can come out on the
 * next user-mode code to run, as with setitimer(ITIMER_PROF). The
 * process's user-time clock (CPUCLOCK_VIRT) would avoid that, but on
 * these VMs its tick-sampled user time put 0.4-0.8 of churn_work's CPU
 * time in the profile, where this clock put 0.9-1.1 (1.2-1.5 when another
 * thread's kernel time was large). */
#include "trigger/trigger.h"

#include "common/clock.h"
#include "stack_copier/stack_copier.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#define PROCESS_TAG 0x534e5050u /* "SNPP" */

static snapprof__process_timer_t *_Atomic g_owner;
static pthread_once_t g_fork_once = PTHREAD_ONCE_INIT;

/* A forked child has no timer (timers are not inherited): its profiles
 * may make one of their own. */
static void fork_child(void)
{
    atomic_store(&g_owner, NULL);
}

static void install_fork_handler(void)
{
    pthread_atfork(NULL, NULL, fork_child);
}

int snapprof__process_timer_kernel_ok(const char *release)
{
    unsigned major = 0, minor = 0;
    if (sscanf(release, "%u.%u", &major, &minor) != 2)
        return 0;
    return major > 6 || (major == 6 && minor >= 4);
}

int snapprof__process_timer_start(snapprof__process_timer_t *pt, snapprof__capture_pool_t *pool,
                                  int signo, uint64_t period_ns)
{
    struct utsname u;
    if (uname(&u) != 0 || !snapprof__process_timer_kernel_ok(u.release))
        return -ENOTSUP;
    memset(pt, 0, sizeof *pt);
    pt->pool = pool;
    pt->period_ns = period_ns;
    pt->signo = signo;
    pt->pid = getpid();
    snapprof__process_timer_t *none = NULL;
    if (!atomic_compare_exchange_strong(&g_owner, &none, pt))
        return -EBUSY; /* another profile has it */
    pthread_once(&g_fork_once, install_fork_handler);
    /* The signal hook, in case no thread has been armed yet. */
    snapprof__trigger_install_hook();
    struct sigevent sev;
    memset(&sev, 0, sizeof sev);
    sev.sigev_notify = SIGEV_SIGNAL;
    sev.sigev_signo = signo;
    sev.sigev_value.sival_ptr = (void *)(uintptr_t)((uint64_t)PROCESS_TAG << 32);
    atomic_store(&pt->on, 1);
    if (timer_create(CLOCK_PROCESS_CPUTIME_ID, &sev, &pt->timer) != 0) {
        int err = errno;
        atomic_store(&pt->on, 0);
        atomic_store(&g_owner, NULL);
        return -err;
    }
    struct itimerspec its = {
        .it_interval = {(time_t)(period_ns / 1000000000u), (long)(period_ns % 1000000000u)},
        .it_value = {(time_t)(period_ns / 1000000000u), (long)(period_ns % 1000000000u)},
    };
    if (timer_settime(pt->timer, 0, &its, NULL) != 0) {
        int err = errno;
        timer_delete(pt->timer);
        atomic_store(&pt->on, 0);
        atomic_store(&g_owner, NULL);
        return -err;
    }
    pt->has_timer = 1;
    return 0;
}

int snapprof__process_timer_signo(void)
{
    snapprof__process_timer_t *pt = atomic_load(&g_owner);
    return pt && atomic_load(&pt->on) ? pt->signo : 0;
}

void snapprof__process_timer_quiesce(snapprof__process_timer_t *pt)
{
    for (unsigned spins = 0; atomic_load(&pt->users) != 0; spins++) {
        if (spins < 64) {
            sched_yield();
        } else {
            struct timespec ts = {0, 100000};
            nanosleep(&ts, NULL);
        }
    }
}

void snapprof__process_timer_stop(snapprof__process_timer_t *pt)
{
    if (!pt->has_timer)
        return;
    atomic_store(&pt->on, 0);
    /* Only in the process that made it: a forked child has no such timer,
     * and the id may name a timer of the child's own. */
    if (getpid() == pt->pid)
        timer_delete(pt->timer);
    pt->has_timer = 0;
    snapprof__process_timer_quiesce(pt);
    snapprof__process_timer_t *self = pt;
    atomic_compare_exchange_strong(&g_owner, &self, NULL);
}

/* RUNS IN THE SIGNAL HANDLER. Async-signal-safe. */
int snapprof__process_timer_on_signal(const siginfo_t *info, const ucontext_t *uc)
{
    uint64_t payload = (uint64_t)(uintptr_t)info->si_value.sival_ptr;
    if ((uint32_t)(payload >> 32) != PROCESS_TAG)
        return 0;
    snapprof__process_timer_t *pt = atomic_load_explicit(&g_owner, memory_order_acquire);
    if (!pt)
        return 1; /* a late signal of a timer deleted since */
    atomic_fetch_add_explicit(&pt->users, 1, memory_order_acq_rel);
    if (!atomic_load_explicit(&pt->on, memory_order_acquire)) {
        atomic_fetch_sub_explicit(&pt->users, 1, memory_order_release);
        return 1;
    }
    uint64_t periods = 1 + (info->si_overrun > 0 ? (uint64_t)info->si_overrun : 0);
    const struct snapprof_thread *self = snapprof__thread_self();
    snapprof__capture_target_t *ct =
        self ? atomic_load_explicit(&((struct snapprof_thread *)self)->unarmed_ct,
                                    memory_order_acquire)
             : NULL;
    if (ct && ct->tid == snapprof__gettid_cached()) {
        /* The clock only for a capture: most of these signals reach
         * armed threads and are passed over. */
        uint64_t entry = snapprof__monotonic_ns();
        atomic_fetch_add_explicit(&pt->captured, 1, memory_order_relaxed);
        snapprof__capture_self(pt->pool, ct, uc, periods * pt->period_ns, entry);
    } else {
        /* An armed thread (its own trigger counts its time), or one the
         * profile does not sample. */
        atomic_fetch_add_explicit(&pt->passed, 1, memory_order_relaxed);
    }
    atomic_fetch_sub_explicit(&pt->users, 1, memory_order_release);
    return 1;
}
