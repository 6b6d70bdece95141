/* Target threads: registration, stack bounds, exit and tid-reuse
 * detection, names, and their CPU clocks. Stack bounds are computed here,
 * outside the signal handler, once. Nothing here runs in a signal handler
 * (the handler only reads snapprof__tls_self). */
#include "stack_copier/stack_copier.h"

#include "common/proc_files.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* The token registered on this thread; the handler compares it with the
 * request's to tell a recycled tid. Initial-exec TLS is safe to read in a
 * signal handler (no lazy allocation). */
__thread struct snapprof_thread *snapprof__tls_self __attribute__((tls_model("initial-exec")));

static pthread_key_t g_exit_key;
static pthread_once_t g_exit_key_once = PTHREAD_ONCE_INIT;

static void thread_release(struct snapprof_thread *t)
{
    if (t && atomic_fetch_sub(&t->refs, 1) == 1)
        free(t);
}

/* Runs when a registered thread exits: the thread's own reference goes. */
static void on_thread_exit(void *arg)
{
    struct snapprof_thread *t = arg;
    atomic_store(&t->exiting, 1);
    snapprof__tls_self = NULL;
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) == 0)
        atomic_store(&t->cpu_at_exit, (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec);
    atomic_store(&t->exited, 1);
    thread_release(t);
}

static void make_exit_key(void)
{
    pthread_key_create(&g_exit_key, on_thread_exit);
}

int snapprof__thread_blocks_signal(pid_t tid, int signo)
{
    return snapprof__proc_task_sigset_has(tid, "SigBlk", signo);
}

const struct snapprof_thread *snapprof__thread_self(void)
{
    return snapprof__tls_self;
}

int snapprof__find_mapping(uintptr_t addr, uintptr_t *start, uintptr_t *end)
{
    snapprof__proc_maps_t it;
    int rc = snapprof__proc_maps_open(&it);
    if (rc != 0)
        return rc;
    snapprof__proc_map_t m;
    rc = -ENOENT;
    while (snapprof__proc_maps_next(&it, &m) > 0) {
        if (addr == 0 ? strstr(m.path, "[stack]") != NULL : (addr >= m.start && addr < m.end)) {
            *start = m.start;
            *end = m.end;
            rc = 0;
            break;
        }
    }
    snapprof__proc_maps_close(&it);
    return rc;
}

/* The main thread's stack grows down from the end of "[stack]" as far as
 * RLIMIT_STACK allows; pthread_getattr_np is avoided because it fails in
 * forked children (Chromium's reason to skip the main thread). */
static int main_thread_bounds(uintptr_t *low, uintptr_t *base)
{
    uintptr_t s, e;
    int rc = snapprof__find_mapping(0, &s, &e);
    if (rc != 0)
        return rc;
    struct rlimit rl;
    uintptr_t limit = 8u << 20;
    if (getrlimit(RLIMIT_STACK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        limit = (uintptr_t)rl.rlim_cur;
    else if (getrlimit(RLIMIT_STACK, &rl) == 0)
        limit = (uintptr_t)1 << 30;
    *base = e;
    *low = e - s > limit ? s : (e > limit ? e - limit : 0);
    return 0;
}

int snapprof_thread_register(snapprof_thread_t **out)
{
    return snapprof_thread_register_ex(0, out);
}

int snapprof_thread_register_ex(unsigned flags, snapprof_thread_t **out)
{
    if (!out || (flags & ~(unsigned)SNAPPROF_REGISTER_AT_START))
        return -EINVAL;
    /* Each one a system call less: a thread that registers as it starts
     * (the preload does, for every thread) pays for every one. */
    pid_t pid = snapprof__process_ids();
    pid_t tid = snapprof__gettid_cached();
    /* In the child of a fork() the TLS still names the parent's token, whose
     * tid is the parent thread's: that one is stale, not ours. */
    if (snapprof__tls_self && snapprof__tls_self->tid == tid) {
        atomic_fetch_add(&snapprof__tls_self->refs, 1);
        *out = snapprof__tls_self;
        return 0;
    }
    struct snapprof_thread *t = calloc(1, sizeof *t);
    if (!t)
        return -ENOMEM;
    t->tid = tid;
    t->on_thread = 1;
    int rc = -ENOENT;
    if (t->tid == pid)
        rc = main_thread_bounds(&t->stack_low, &t->stack_base);
    /* tid == pid also holds in the child of a fork() made by another thread
     * than main, but that child runs on the forking thread's stack: trust the
     * "[stack]" bounds only when this very frame lies inside them. */
    uintptr_t here = (uintptr_t)__builtin_frame_address(0);
    if (rc != 0 || here < t->stack_low || here >= t->stack_base) {
        pthread_attr_t attr;
        void *addr;
        size_t size;
        rc = -pthread_getattr_np(pthread_self(), &attr);
        if (rc == 0) {
            rc = -pthread_attr_getstack(&attr, &addr, &size);
            pthread_attr_destroy(&attr);
            t->stack_low = (uintptr_t)addr;
            t->stack_base = (uintptr_t)addr + size;
            /* glibc keeps the thread descriptor (and static TLS below it)
             * at the top of the range it reports; the stack proper starts
             * below the descriptor, so copying stops there. */
            uintptr_t self = (uintptr_t)pthread_self();
            if (self > t->stack_low && self < t->stack_base)
                t->stack_base = self & ~(uintptr_t)15;
        }
    }
    if (rc != 0) {
        free(t);
        return rc;
    }
    if (flags & SNAPPROF_REGISTER_AT_START) {
        atomic_store(&t->newborn, 1);
        atomic_store(&t->name_pending, 1);
    } else if (prctl(PR_GET_NAME, t->name) != 0)
        t->name[0] = '\0';
    pthread_once(&g_exit_key_once, make_exit_key);
    /* One reference for the caller, one for the thread itself (dropped by
     * the exit destructor, which the main thread never runs). */
    atomic_store(&t->refs, 2);
    if (pthread_setspecific(g_exit_key, t) != 0) {
        free(t);
        return -ENOMEM;
    }
    snapprof__tls_self = t;
    *out = t;
    return 0;
}

int snapprof_thread_register_tid(pid_t tid, snapprof_thread_t **out)
{
    return snapprof_thread_register_tid_ex(tid, SIGURG, out);
}

int snapprof_thread_register_tid_ex(pid_t tid, int signo, snapprof_thread_t **out)
{
    if (!out || tid <= 0 || signo <= 0 || signo >= NSIG)
        return -EINVAL;
    uint64_t cpu;
    if (snapprof__thread_cpu_ns(tid, &cpu) != 0)
        return -ESRCH; /* not a thread of this process */
    if (tid == (pid_t)syscall(SYS_gettid))
        return snapprof_thread_register(out);
    struct snapprof_thread *t = calloc(1, sizeof *t);
    if (!t)
        return -ENOMEM;
    t->tid = tid;
    atomic_store(&t->refs, 1);
    int rc;
    if (tid == getpid()) {
        rc = main_thread_bounds(&t->stack_low, &t->stack_base);
    } else {
        /* Ask the thread where its stack pointer is (registers only), then
         * take the bounds of the mapping that holds it. */
        rc = snapprof__stack_copier_install(signo);
        if (rc == 0) {
            snapprof__copy_request_t req = {.thread = t, .signo = signo, .timeout_ns = 200000000u};
            snapprof__copy_result_t res;
            snapprof_fail_reason_t reason;
            t->stack_low = 0;
            t->stack_base = UINTPTR_MAX;
            /* Up to five tries of 200 ms: a host stall or a busy CPU can
             * keep a thread off it that long. Between tries a running
             * profiler may take its turn at the copier; a signal still
             * pending from a try answers the next one. */
            rc = -ETIMEDOUT;
            for (int i = 0; i < 5 && rc == -ETIMEDOUT; i++) {
                if (snapprof__stack_copier_copy(&req, &res, &reason) != 0)
                    rc = reason == SNAPPROF_FAIL_THREAD_EXITED      ? -ESRCH
                         : reason == SNAPPROF_FAIL_HANDLER_REPLACED ? SNAPPROF_ESIGNAL
                                                                    : -ETIMEDOUT;
                else
                    rc = snapprof__find_mapping(res.regs.r[SNAPPROF_REG_SP], &t->stack_low,
                                                &t->stack_base);
            }
        }
    }
    if (rc != 0) {
        free(t);
        return rc;
    }
    snapprof__proc_task_comm(tid, t->name);
    *out = t;
    return 0;
}

void snapprof__thread_resolve_name(struct snapprof_thread *t)
{
    if (atomic_load(&t->name_pending) && !atomic_load(&t->exited)) {
        /* On the thread itself (armed as it starts) one system call, not
         * the open, read and close of its comm file. */
        if (t->tid != snapprof__gettid_cached() || prctl(PR_GET_NAME, t->name) != 0)
            snapprof__proc_task_comm(t->tid, t->name);
        atomic_store(&t->name_pending, 0);
    }
}

void snapprof_thread_release(snapprof_thread_t *thread)
{
    thread_release(thread);
}

pid_t snapprof_thread_tid(const snapprof_thread_t *thread)
{
    return thread ? thread->tid : -1;
}

/* Internal: another reference (profilers hold their own). */
void snapprof__thread_retain(struct snapprof_thread *t)
{
    atomic_fetch_add(&t->refs, 1);
}

static const snapprof__stack_copier_seams_t *_Atomic g_seams; /* tests only */

void snapprof__stack_copier_set_seams(const snapprof__stack_copier_seams_t *seams)
{
    atomic_store_explicit(&g_seams, seams, memory_order_release);
}

const snapprof__stack_copier_seams_t *snapprof__stack_copier_seams(void)
{
    return atomic_load_explicit(&g_seams, memory_order_acquire);
}

int snapprof__thread_cpu_ns(pid_t tid, uint64_t *out)
{
    const snapprof__stack_copier_seams_t *seams = snapprof__stack_copier_seams();
    if (seams && seams->xOnThreadCpuRead)
        seams->xOnThreadCpuRead(seams->user_data, tid);
    /* The kernel's per-thread CPU clock id, as glibc's pthread_getcpuclockid
     * makes it: ~tid << 3 | CPUCLOCK_PERTHREAD_MASK | CPUCLOCK_SCHED. */
    clockid_t clock = (clockid_t)(((unsigned int)~tid << 3) | 4u | 2u);
    struct timespec ts;
    if (clock_gettime(clock, &ts) != 0)
        return -errno;
    *out = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    return 0;
}
