/* Signal-based stack copier: the tgkill/futex handshake described in
 * stack_copier.h, both its sides (the signal handler and the requester
 * that waits for it). What the sampling side does with the copy afterwards
 * is in stack_copier_rebase.c. */
#include "stack_copier/stack_copier.h"

#include "stack_copier/registers_x86_64.h"

#include "common/clock.h"
#include "common/fault.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Phases of the request, in the low two bits of the state word; the upper
 * 30 bits hold the request's sequence number. */
enum { PHASE_IDLE = 0, PHASE_PENDING = 1, PHASE_COPYING = 2, PHASE_DONE = 3 };
#define SEQ_MASK 0x3fffffffu
/* The signal payload: this tag in the upper 32 bits, the seq below. */
#define PAYLOAD_TAG 0x534e4150u /* "SNAP" */

/* The one request in flight. The handler reads it only after winning the
 * PENDING -> COPYING transition, which the requester published with a
 * release store after filling it in. */
static struct {
    _Atomic uint32_t state;
    _Atomic pid_t target_tid; /* whom the PENDING request waits for */
    snapprof__copy_request_t req;
    snapprof__copy_result_t res;
    int fail; /* -1, or the snapprof_fail_reason_t the handler found */
} g_slot;

static pthread_mutex_t g_request_lock = PTHREAD_MUTEX_INITIALIZER;
static uint32_t g_seq;

static pthread_mutex_t g_install_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t g_ids_once = PTHREAD_ONCE_INIT;
/* Our pid and uid, read once (and again in a forked child) so that neither
 * the handler nor the requester makes a syscall for them per sample. */
static volatile pid_t g_pid;
static uid_t g_uid;
static struct sigaction g_previous[NSIG];
static volatile sig_atomic_t g_installed[NSIG];

/* Depth of our handler on this thread (a test seam and a debug aid). */
static __thread int tls_in_handler __attribute__((tls_model("initial-exec")));
/* This thread's tid, read once; 0 until then and again in a forked child's
 * only thread, whose tid is new. */
static __thread pid_t tls_tid __attribute__((tls_model("initial-exec")));
/* The handler for signals that are not handshake requests but may be ours
 * (a thread's own CPU-clock trigger); set once, never cleared. */
static _Atomic(snapprof__signal_hook_fn) g_hook;

/* Defined in stack_copier_threads.c: the token registered on this thread. */
extern __thread struct snapprof_thread *snapprof__tls_self
    __attribute__((tls_model("initial-exec")));

/* Async-signal-safe. */
int snapprof__in_signal_handler(void)
{
    return tls_in_handler;
}

/* Async-signal-safe. */
pid_t snapprof__gettid_cached(void)
{
    if (tls_tid == 0)
        tls_tid = (pid_t)syscall(SYS_gettid);
    return tls_tid;
}

void snapprof__stack_copier_set_hook(snapprof__signal_hook_fn hook)
{
    atomic_store(&g_hook, hook);
}

/* Async-signal-safe (clock_gettime is on the POSIX list). */
static uint64_t clock_ns(clockid_t clock)
{
    struct timespec ts;
    if (clock_gettime(clock, &ts) != 0)
        return 0;
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Async-signal-safe. */
static void futex_wake_all(_Atomic uint32_t *word)
{
    syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static void futex_wait(_Atomic uint32_t *word, uint32_t expected, uint64_t timeout_ns)
{
    struct timespec ts = {(time_t)(timeout_ns / 1000000000u), (long)(timeout_ns % 1000000000u)};
    syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, expected, &ts, NULL, 0);
}

/* Copies live stack memory. Sanitizers poison parts of live stacks (ASan's
 * redzones) and intercept memcpy, so those builds copy word by word through
 * a volatile pointer the compiler cannot turn back into a memcpy call.
 * Async-signal-safe. */
#if defined(SNAPPROF_SANITIZER_BUILD)
__attribute__((no_sanitize_address, no_sanitize_thread)) void
snapprof__copy_live_stack(uint8_t *dst, const uint8_t *src, size_t n)
{
    volatile uint64_t *d = (volatile uint64_t *)(void *)dst;
    const uint64_t *s = (const uint64_t *)(const void *)src;
    for (size_t i = 0; i < n / 8; i++)
        d[i] = s[i];
}
#else
void snapprof__copy_live_stack(uint8_t *dst, const uint8_t *src, size_t n)
{
    memcpy(dst, src, n);
}
#endif

/* Async-signal-safe. */
void snapprof__copy_own_stack(uintptr_t lo, uintptr_t base, uint8_t *buffer, size_t buffer_size,
                              snapprof__copy_result_t *res)
{
    size_t size = base - lo;
    res->truncated = 0;
    if (size > buffer_size) {
        size = buffer_size; /* the innermost frames */
        res->truncated = 1;
    }
    snapprof__copy_live_stack(buffer, (const uint8_t *)lo, size);
    res->copy_lo = lo;
    res->copy_size = size;
}

/* The work done while the target is stopped. RUNS IN THE SIGNAL HANDLER:
 * no allocation, no locks, no logging. Async-signal-safe. */
static void capture(const ucontext_t *uc)
{
    const snapprof__copy_request_t *req = &g_slot.req;
    snapprof__copy_result_t *res = &g_slot.res;
    uint64_t entry = clock_ns(CLOCK_MONOTONIC);

    res->timestamp_ns = entry;
    g_slot.fail = -1;
    /* The signal went to exactly this tid; a thread registered on itself
     * also names its token in TLS, which a recycled tid would not. A thread
     * already in its exit destructor has let go of its token too: that one
     * is exiting, not recycled (a handshake that landed there was counted
     * tid_recycled, and the thread's exit never thread_exited). */
    if (req->thread->on_thread && snapprof__tls_self != req->thread) {
        g_slot.fail = atomic_load_explicit(&req->thread->exiting, memory_order_relaxed)
                          ? SNAPPROF_FAIL_THREAD_EXITED
                          : SNAPPROF_FAIL_TID_RECYCLED;
        return;
    }
    snapprof__regs_from_ucontext(uc, &res->regs);

    if (req->buffer != NULL) {
        uintptr_t sp = res->regs.r[SNAPPROF_REG_SP];
        uintptr_t low = req->thread->stack_low, base = req->thread->stack_base;
        if (sp < low || sp >= base) {
            /* On a goroutine's stack, a fiber, a coroutine or a
             * sigaltstack: not the stack we know the bounds of. A window
             * of it, as far as it can be read. */
            if (snapprof__copy_foreign_stack(sp, req->buffer, req->buffer_size, res) != 0) {
                g_slot.fail = SNAPPROF_FAIL_SP_OUT_OF_RANGE;
                return;
            }
        } else {
            snapprof__copy_own_stack(snapprof__copy_low(sp, low), base, req->buffer,
                                     req->buffer_size, res);
        }
    }
    if (req->delegate)
        req->delegate->on_capture(req->delegate->ctx, req->extra);
    res->pause_ns = clock_ns(CLOCK_MONOTONIC) - entry;
}

/* Signals our handler leaves unblocked: faults are delivered when they
 * happen whatever the mask says, so blocking them would change nothing but
 * how the process dies. */
static const int g_fault_signals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS, SIGABRT};

/* Sets the mask the kernel would have set for the previous handler: the
 * one the thread had when the signal came, plus the handler's sa_mask, plus
 * the signal itself unless SA_NODEFER. Ours blocks nearly everything (see
 * snapprof__stack_copier_install), which a program's handler should not
 * inherit. Async-signal-safe. */
static void set_previous_mask(int signo, const struct sigaction *prev, const ucontext_t *uc)
{
    if (!uc)
        return;
    sigset_t m;
    sigorset(&m, &uc->uc_sigmask, &prev->sa_mask);
    if (!(prev->sa_flags & SA_NODEFER))
        sigaddset(&m, signo);
    pthread_sigmask(SIG_SETMASK, &m, NULL);
}

/* Passes a signal that is not ours to whoever had it before us.
 * Async-signal-safe. */
static void chain(int signo, siginfo_t *info, void *uc)
{
    const struct sigaction *prev = &g_previous[signo];
    if (prev->sa_flags & SA_SIGINFO) {
        if (prev->sa_sigaction) {
            set_previous_mask(signo, prev, uc);
            prev->sa_sigaction(signo, info, uc);
        }
        return;
    }
    if (prev->sa_handler == SIG_IGN)
        return;
    if (prev->sa_handler == SIG_DFL) {
        if (signo == SIGURG || signo == SIGCHLD || signo == SIGWINCH || signo == SIGCONT)
            return; /* their default action is to do nothing */
        /* Act as the default would: restore it and let the signal, blocked
         * while we run, be delivered again when we return. */
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigaction(signo, &dfl, NULL);
        syscall(SYS_tgkill, getpid(), syscall(SYS_gettid), signo);
        return;
    }
    set_previous_mask(signo, prev, uc);
    prev->sa_handler(signo);
}

/* Takes the request whose state word is now (PENDING) to COPYING, copies
 * this thread's stack for it and wakes the sampling thread; does nothing if
 * the state moved on meanwhile (the request timed out). RUNS IN THE SIGNAL
 * HANDLER. Async-signal-safe. */
static void serve_request(uint32_t now, const ucontext_t *uc)
{
    uint32_t expected = now;
    if (!atomic_compare_exchange_strong_explicit(&g_slot.state, &expected,
                                                 (now & ~3u) | PHASE_COPYING, memory_order_acquire,
                                                 memory_order_relaxed))
        return;
    tls_in_handler++;
    capture(uc);
    tls_in_handler--;
    atomic_store_explicit(&g_slot.state, (now & ~3u) | PHASE_DONE, memory_order_release);
    futex_wake_all(&g_slot.state);
}

/* Serves the request in flight if it waits for this thread: a delivery of
 * another kind (a CPU-clock trigger's) may stand for its signal too, since
 * a standard signal pending for this thread drops the next one. Its own
 * signal, if it comes later, finds no request and is ignored. RUNS IN THE
 * SIGNAL HANDLER. Async-signal-safe. */
static void serve_waiting_request(const ucontext_t *uc)
{
    uint32_t now = atomic_load_explicit(&g_slot.state, memory_order_acquire);
    if ((now & 3u) == PHASE_PENDING &&
        atomic_load_explicit(&g_slot.target_tid, memory_order_relaxed) == snapprof__gettid_cached())
        serve_request(now, uc);
}

/* After a signal of ours: passes it on as well when it may stand for one
 * of the program's. SIGURG is a standard signal: one sent while another is
 * pending for the thread is dropped, so a SIGURG the program (or Go's
 * runtime, whose preemption signal it is) sent while one of ours waited
 * arrives as ours alone. Go clears its "preemption signal pending" flag
 * only in its own handler: lose one and that thread is never preempted
 * again, and a program that needs it (a garbage collection stopping a
 * goroutine that spins) hangs. So the program's SIGURG disposition runs
 * after every one of ours (its handler, if it has one; the default does
 * nothing). SIGURG is the signal for that, since a handler for it must
 * expect spurious ones (urgent data is polled for; Go's runtime tolerates
 * them by design). Other signals are not passed on: a spurious SIGPROF
 * would be a sample in another profiler. Async-signal-safe. */
static void pass_on_absorbed(int signo, siginfo_t *info, void *uc)
{
    if (signo == SIGURG)
        chain(signo, info, uc);
}

/* The signal handler. Async-signal-safe. */
static void on_signal(int signo, siginfo_t *info, void *uc)
{
    int saved_errno = errno;
    uintptr_t payload = info ? (uintptr_t)info->si_value.sival_ptr : 0;
    if (info && info->si_code == SI_QUEUE && info->si_pid == g_pid &&
        (uint32_t)(payload >> 32) == PAYLOAD_TAG) {
        uint32_t expected = (((uint32_t)payload & SEQ_MASK) << 2) | PHASE_PENDING;
        uint32_t now = atomic_load_explicit(&g_slot.state, memory_order_acquire);
        if (now != expected && (now & 3u) == PHASE_PENDING &&
            atomic_load_explicit(&g_slot.target_tid, memory_order_relaxed) ==
                snapprof__gettid_cached()) {
            /* A late signal for a request that timed out, while a newer one
             * waits for this same thread. That one's signal was dropped if
             * ours was still pending (one pending instance of a standard
             * signal), so ours must serve it. If the state moves on before
             * the exchange in serve_request, it fails and we do nothing. */
            expected = now;
        }
        /* A late signal when no request waits for this thread does
         * nothing. */
        serve_request(expected, (const ucontext_t *)uc);
        pass_on_absorbed(signo, info, uc);
    } else {
        snapprof__signal_hook_fn hook = atomic_load_explicit(&g_hook, memory_order_acquire);
        int handled = 0;
        if (hook && info) {
            tls_in_handler++;
            handled = hook(signo, info, uc);
            tls_in_handler--;
        }
        if (handled) {
            serve_waiting_request((const ucontext_t *)uc);
            pass_on_absorbed(signo, info, uc);
        } else {
            chain(signo, info, uc);
        }
    }
    errno = saved_errno;
}

static void read_ids(void)
{
    g_pid = getpid();
    g_uid = getuid();
    tls_tid = 0;
}

/* The child of a fork() has one thread, the one that forked. A thread
 * that was in the middle of a handshake (the sampling thread, or any
 * thread registering another by tid: the preload library's rescan does
 * that outside the sampler lock) is not there, and its g_request_lock
 * would stay held for good: the child's first handshake would wait on it
 * for ever, with the sampler lock held. So the child takes both locks
 * anew, and the request in flight is forgotten (its target answers to no
 * one: a late signal finds the slot idle and does nothing).
 *
 * Why not hold them across fork() instead: the sampler's own prepare
 * handler takes the sampler lock, and the sampling thread holds that lock
 * while it waits for g_request_lock; a prepare handler of ours run before
 * the sampler's (pthread_atfork runs prepare handlers in the reverse order
 * of their registration, which no one here controls) would hold
 * g_request_lock and wait for the sampler lock: a deadlock. Nothing the
 * locks guard needs carrying over: g_seq only has to differ from the late
 * signals'. (g_install_lock is held for two sigaction() calls; a child
 * forked between the second and the flag that records it would install
 * again and take our handler for the previous one: a window of a few
 * hundred nanoseconds, left as it is.) */
static void fork_child(void)
{
    read_ids();
    pthread_mutex_init(&g_request_lock, NULL);
    pthread_mutex_init(&g_install_lock, NULL);
    atomic_store_explicit(&g_slot.target_tid, 0, memory_order_relaxed);
    atomic_store_explicit(&g_slot.state, PHASE_IDLE, memory_order_relaxed);
}

static void read_ids_once(void)
{
    read_ids();
    pthread_atfork(NULL, NULL, fork_child);
}

pid_t snapprof__process_ids(void)
{
    pthread_once(&g_ids_once, read_ids_once);
    return g_pid;
}

int snapprof__stack_copier_install(int signo)
{
    pthread_once(&g_ids_once, read_ids_once);
    if (signo <= 0 || signo >= NSIG || signo == SIGKILL || signo == SIGSTOP || signo == SIGSEGV ||
        signo == SIGBUS || signo == SIGFPE || signo == SIGILL || signo == SIGABRT ||
        signo == SIGTRAP)
        return SNAPPROF_ESIGNAL;
    int rc = 0;
    pthread_mutex_lock(&g_install_lock);
    if (!g_installed[signo]) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_signal;
        /* SA_ONSTACK: on a thread with an alternate signal stack the
         * handler runs there, never on the interrupted stack. Go's runtime
         * gives every thread one and aborts the process when a handler
         * without the flag runs on a goroutine's small stack (its own
         * handler, chained from ours, checks where it runs); a thread
         * without one is not affected. The capture reads the interrupted
         * sp from the context, not where the handler runs. */
        sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
        /* Every other signal waits until the copy is done. One handled on
         * top of ours would hold the sampler for as long as it runs, and a
         * handler that waits for the sampler (the preload library writes
         * the profile on SIGTERM) would wait for ever. */
        sigfillset(&sa.sa_mask);
        for (size_t i = 0; i < sizeof g_fault_signals / sizeof g_fault_signals[0]; i++)
            sigdelset(&sa.sa_mask, g_fault_signals[i]);
        if (sigaction(signo, NULL, &g_previous[signo]) != 0 || sigaction(signo, &sa, NULL) != 0)
            rc = SNAPPROF_ESIGNAL;
        else
            g_installed[signo] = 1;
    }
    pthread_mutex_unlock(&g_install_lock);
    return rc;
}

static int handler_still_ours(int signo)
{
    struct sigaction cur;
    if (sigaction(signo, NULL, &cur) != 0)
        return 0;
    return (cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_signal;
}

int snapprof__stack_copier_handler_ours(int signo)
{
    return handler_still_ours(signo);
}

static int send_request(const snapprof__copy_request_t *req, uint32_t seq)
{
    siginfo_t info;
    memset(&info, 0, sizeof info);
    info.si_signo = req->signo;
    info.si_code = SI_QUEUE;
    info.si_pid = g_pid;
    info.si_uid = g_uid;
    info.si_value.sival_ptr = (void *)(((uintptr_t)PAYLOAD_TAG << 32) | seq);
    if (snapprof__fault(SNAPPROF__FAULT_SIGQUEUE)) {
        errno = EAGAIN; /* as when RLIMIT_SIGPENDING is reached */
        return -1;
    }
    return (int)syscall(SYS_rt_tgsigqueueinfo, g_pid, req->thread->tid, req->signo, &info);
}

int snapprof__stack_copier_copy(const snapprof__copy_request_t *req, snapprof__copy_result_t *res,
                                snapprof_fail_reason_t *reason)
{
    int rc = 0;
    pthread_mutex_lock(&g_request_lock);
    g_seq = (g_seq + 1) & SEQ_MASK;
    if (g_seq == 0)
        g_seq = 1;
    uint32_t seq = g_seq;
    g_slot.req = *req;
    memset(&g_slot.res, 0, sizeof g_slot.res);
    g_slot.fail = -1;
    atomic_store_explicit(&g_slot.target_tid, req->thread->tid, memory_order_relaxed);
    uint32_t pending = (seq << 2) | PHASE_PENDING;
    atomic_store_explicit(&g_slot.state, pending, memory_order_release);

    uint64_t sent = snapprof__monotonic_ns();
    if (send_request(req, seq) != 0) {
        int err = errno;
        atomic_store_explicit(&g_slot.state, PHASE_IDLE, memory_order_relaxed);
        *reason = err == ESRCH ? SNAPPROF_FAIL_THREAD_EXITED : SNAPPROF_FAIL_SEND;
        rc = -1;
        goto out;
    }
    uint64_t deadline = sent + req->timeout_ns;
    for (;;) {
        uint32_t s = atomic_load_explicit(&g_slot.state, memory_order_acquire);
        if (s == ((seq << 2) | PHASE_DONE))
            break;
        uint64_t now = snapprof__monotonic_ns();
        if (s == pending && now >= deadline) {
            uint32_t expected = pending;
            if (atomic_compare_exchange_strong(&g_slot.state, &expected, PHASE_IDLE)) {
                *reason = handler_still_ours(req->signo) ? SNAPPROF_FAIL_TIMEOUT
                                                         : SNAPPROF_FAIL_HANDLER_REPLACED;
                rc = -1;
                goto out;
            }
            continue; /* the handler just started copying: wait for it */
        }
        /* While COPYING the handler is bounded work; wait in short steps. */
        futex_wait(&g_slot.state, s, s == pending ? deadline - now : 1000000u);
    }
    if (g_slot.fail >= 0) {
        *reason = (snapprof_fail_reason_t)g_slot.fail;
        rc = -1;
    } else {
        *res = g_slot.res;
        res->roundtrip_ns = snapprof__monotonic_ns() - sent;
        /* Read here rather than in the handler: the thread has only just
         * resumed, and the target is spared a syscall while stopped. */
        if (snapprof__thread_cpu_ns(req->thread->tid, &res->cpu_ns) != 0)
            res->cpu_ns = 0;
    }
    atomic_store_explicit(&g_slot.state, PHASE_IDLE, memory_order_relaxed);
out:
    pthread_mutex_unlock(&g_request_lock);
    return rc;
}

pid_t snapprof__stack_copier_pending_tid(void)
{
    uint32_t s = atomic_load_explicit(&g_slot.state, memory_order_acquire);
    return (s & 3u) == PHASE_PENDING ? atomic_load(&g_slot.target_tid) : 0;
}
