/* The process-wide table of arms (one per armed thread and profiler), the
 * dispatch of a trigger's signal to its arm, and what fork does to them. */
#include "trigger/trigger.h"

#include "common/clock.h"
#include "common/fault.h"
#include "common/fds.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

/* At most this many threads armed at once; more fall back to the handshake. */
#define ARM_MAX 65536u
/* Perf event fds are looked up by number below this. */
#define FD_MAX 65536
/* An fd table entry for an fd we closed: a late signal from it is ours,
 * for RETIRED_FOR after the close (g_fd_retired_at says when). A signal
 * already queued when the event went is delivered as soon as its thread
 * runs with the signal unblocked, so well within that; later, the number
 * may be a file of the program's that uses F_SETSIG with the same signal,
 * whose signals are the program's. (It used to be ours for good.) */
#define FD_RETIRED UINT32_MAX
/* In units of 2^20 ns (1.05 ms): about 2 s. */
#define RETIRED_FOR 2000u
/* Linked arms by tid: buckets of a chained hash, so that arming finds the
 * thread's other arms without a scan of the table. */
#define TID_BUCKETS 4096u
/* Timer payloads carry this tag in their upper 32 bits. */
#define TIMER_TAG 0x534e5054u /* "SNPT" */

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
/* Arms found BUSY for good by a disarm: their thread ended in the handler. */
static _Atomic uint64_t g_died_busy;
/* Both tables are mapped once and never unmapped, so the handler can read
 * them whatever the sampling side is doing. */
static snapprof__arm_t *_Atomic g_arms;
static _Atomic uint32_t *_Atomic g_fd_arm; /* fd -> arm index + 1 */
/* fd -> when it was retired, in units of 2^20 ns of the monotonic clock;
 * mapped with g_fd_arm, its second half. */
static _Atomic uint32_t *_Atomic g_fd_retired_at;
static uint32_t g_arms_used;                             /* arms ever handed out */
static uint32_t g_free_head = UINT32_MAX;                /* free list through next_free */
static uint32_t g_tid_bucket[TID_BUCKETS];               /* first linked arm, UINT32_MAX: none */
static const snapprof__trigger_seams_t *_Atomic g_seams; /* tests only */

const snapprof__trigger_ops_t *snapprof__trigger_ops(snapprof_trigger_t kind)
{
    switch (kind) {
    case SNAPPROF_TRIGGER_PERF_EVENT:
        return &snapprof__trigger_perf_event;
    case SNAPPROF_TRIGGER_CPU_TIMER:
        return &snapprof__trigger_cpu_timer;
    default:
        return NULL;
    }
}

void snapprof__trigger_set_seams(const snapprof__trigger_seams_t *seams)
{
    atomic_store_explicit(&g_seams, seams, memory_order_release);
}

/* Marks fd retired: a late signal from it is ours for RETIRED_FOR. */
static void retire_fd(int fd)
{
    _Atomic uint32_t *fds = atomic_load(&g_fd_arm);
    _Atomic uint32_t *at = atomic_load(&g_fd_retired_at);
    if (fd < 0 || fd >= FD_MAX || !fds || !at)
        return;
    atomic_store_explicit(&at[fd], (uint32_t)(snapprof__monotonic_ns() >> 20),
                          memory_order_relaxed);
    atomic_store_explicit(&fds[fd], FD_RETIRED, memory_order_release);
}

/* The child has none of the parent's threads: its copies of their perf fds
 * would only keep the parent's events alive (and a POSIX timer is not
 * inherited at all), so every arm is closed and freed here. The profilers
 * that owned them are not sampled in the child (sampling_thread.c). */
static void fork_child(void)
{
    /* The lock is not held across fork (that would order it before the
     * sampler lock, which is taken first everywhere else): whatever another
     * thread was doing to the table is redone here from the state words. */
    pthread_mutex_init(&g_lock, NULL);
    snapprof__arm_t *arms = atomic_load(&g_arms);
    g_free_head = UINT32_MAX;
    memset(g_tid_bucket, 0xff, sizeof g_tid_bucket);
    for (uint32_t i = g_arms_used; i-- > 0;) {
        snapprof__arm_t *a = &arms[i];
        if (atomic_load(&a->state) != SNAPPROF__ARM_FREE) {
            if (a->fd >= 0) {
                retire_fd(a->fd);
                /* The child's copy of the number: the program may have
                 * closed or replaced it before the fork, as in the parent. */
                if (!snapprof__trigger_fd_lost(a))
                    close(a->fd);
                snapprof__fd_release(SNAPPROF__FD_TRIGGER);
            }
            a->fd = -1;
            a->page = NULL; /* not mapped in the child: nothing to unmap */
            a->has_timer = 0;
            /* 12 bits, as put_arm() wraps it: the timer payload's field. */
            a->gen = (a->gen + 1) & 0xfffu;
            atomic_store(&a->state, SNAPPROF__ARM_FREE);
        }
        a->linked = 0;
        atomic_store(&a->next_sib, i);
        a->next_free = g_free_head;
        g_free_head = i;
    }
}

/* Maps the tables, once they can be: a refused mmap is tried again at the
 * next arm (it used to be a pthread_once, and one refusal left the whole
 * process without CPU-clock triggers for good). Lock held. */
static void init_tables(void)
{
    void *arms = snapprof__fault(SNAPPROF__FAULT_MMAP)
                     ? MAP_FAILED
                     : mmap(NULL, ARM_MAX * sizeof(snapprof__arm_t), PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    void *fds = mmap(NULL, 2 * FD_MAX * sizeof(uint32_t), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (arms == MAP_FAILED || fds == MAP_FAILED) {
        if (arms != MAP_FAILED)
            munmap(arms, ARM_MAX * sizeof(snapprof__arm_t));
        if (fds != MAP_FAILED)
            munmap(fds, 2 * FD_MAX * sizeof(uint32_t));
        return;
    }
    memset(g_tid_bucket, 0xff, sizeof g_tid_bucket);
    atomic_store(&g_fd_retired_at, (_Atomic uint32_t *)fds + FD_MAX);
    atomic_store(&g_fd_arm, (_Atomic uint32_t *)fds);
    atomic_store(&g_arms, (snapprof__arm_t *)arms);
    pthread_atfork(NULL, NULL, fork_child);
    snapprof__stack_copier_set_hook(snapprof__trigger_on_signal);
}

void snapprof__trigger_install_hook(void)
{
    snapprof__stack_copier_set_hook(snapprof__trigger_on_signal);
}

/* Takes a free arm. Lock held. */
static snapprof__arm_t *take_arm(snapprof__arm_t *arms)
{
    uint32_t i;
    if (g_free_head != UINT32_MAX) {
        i = g_free_head;
        g_free_head = arms[i].next_free;
    } else if (g_arms_used < ARM_MAX) {
        i = g_arms_used++;
        arms[i].index = i;
    } else {
        return NULL;
    }
    return &arms[i];
}

/* Gives an arm back. Lock held. */
static void put_arm(snapprof__arm_t *a)
{
    a->gen = (a->gen + 1) & 0xfffu;
    a->fd = -1;
    a->has_timer = 0;
    a->pool = NULL;
    a->target = NULL;
    atomic_store_explicit(&a->state, SNAPPROF__ARM_FREE, memory_order_release);
    a->next_free = g_free_head;
    g_free_head = a->index;
}

static uint32_t *tid_bucket(pid_t tid)
{
    return &g_tid_bucket[((uint32_t)tid * 2654435761u) % TID_BUCKETS];
}

/* Puts a in the ring of the arms on its thread, if there are others, and
 * in its tid's bucket. Lock held. */
static void link_arm(snapprof__arm_t *arms, snapprof__arm_t *a)
{
    atomic_store_explicit(&a->next_sib, a->index, memory_order_relaxed);
    uint32_t *head = tid_bucket(a->tid);
    for (uint32_t i = *head; i != UINT32_MAX; i = arms[i].tid_next) {
        snapprof__arm_t *b = &arms[i];
        if (b->tid == a->tid) { /* every arm in a bucket is linked */
            atomic_store_explicit(&a->next_sib, atomic_load(&b->next_sib), memory_order_relaxed);
            atomic_store_explicit(&b->next_sib, a->index, memory_order_release);
            break;
        }
    }
    a->tid_next = *head;
    *head = a->index;
    a->linked = 1;
}

/* Takes a out of its ring. A handler may still be reading a's link: it
 * stays pointing into the ring. Lock held. */
static void unlink_arm(snapprof__arm_t *arms, snapprof__arm_t *a)
{
    if (!a->linked)
        return;
    a->linked = 0;
    for (uint32_t *pp = tid_bucket(a->tid); *pp != UINT32_MAX; pp = &arms[*pp].tid_next) {
        if (*pp == a->index) {
            *pp = a->tid_next;
            break;
        }
    }
    uint32_t next = atomic_load(&a->next_sib);
    if (next == a->index)
        return;
    uint32_t i = next;
    for (uint32_t steps = 0; steps < g_arms_used; steps++) {
        uint32_t after = atomic_load(&arms[i].next_sib);
        if (after == a->index) {
            atomic_store_explicit(&arms[i].next_sib, next, memory_order_release);
            return;
        }
        i = after;
    }
}

uint64_t snapprof__trigger_timer_payload(const snapprof__arm_t *a)
{
    return ((uint64_t)TIMER_TAG << 32) | ((uint64_t)a->gen << 20) | a->index;
}

int snapprof__trigger_arm(const snapprof__trigger_ops_t *ops, snapprof__capture_pool_t *pool,
                          snapprof__capture_target_t *target, int signo, uint64_t period_ns,
                          unsigned flags, snapprof__arm_t **out)
{
    if (!atomic_load(&g_arms)) {
        pthread_mutex_lock(&g_lock);
        if (!atomic_load(&g_arms))
            init_tables();
        pthread_mutex_unlock(&g_lock);
    }
    snapprof__arm_t *arms = atomic_load(&g_arms);
    _Atomic uint32_t *fds = atomic_load(&g_fd_arm);
    if (!arms || !fds)
        return -ENOMEM;
    const snapprof__trigger_seams_t *seams = atomic_load_explicit(&g_seams, memory_order_acquire);
    int fail = seams && seams->xArmRefused ? seams->xArmRefused(seams->user_data, ops->kind) : 0;
    if (fail != 0)
        return fail < 0 ? fail : -fail;
    pthread_mutex_lock(&g_lock);
    snapprof__arm_t *a = take_arm(arms);
    pthread_mutex_unlock(&g_lock);
    if (!a)
        return -ENOSPC;
    a->ops = ops;
    a->signo = signo;
    a->fd = -1;
    atomic_store_explicit(&a->fd_lost, 0, memory_order_relaxed);
    atomic_store_explicit(&a->first_stuck, 0, memory_order_relaxed);
    a->first_ns = 0;
    a->page = NULL;
    a->flags = flags;
    a->has_timer = 0;
    a->pool = pool;
    a->target = target;
    a->first_period_ns = period_ns;
    a->period_ns = period_ns;
    a->cur_period_ns = period_ns;
    a->counted_cpu_ns = 0;
    a->tid = target->tid;
    int rc = ops->xCreate(a, signo, period_ns);
    if (rc == 0 && a->fd >= FD_MAX) {
        ops->xDestroy(a);
        rc = -EMFILE;
    }
    if (rc != 0) {
        pthread_mutex_lock(&g_lock);
        put_arm(a);
        pthread_mutex_unlock(&g_lock);
        return rc;
    }
    pthread_mutex_lock(&g_lock);
    link_arm(arms, a);
    pthread_mutex_unlock(&g_lock);
    /* Published before the kernel object starts: its first signal must
     * find the arm in force. */
    atomic_store_explicit(&a->state, SNAPPROF__ARM_ARMED, memory_order_release);
    if (a->fd >= 0)
        atomic_store_explicit(&fds[a->fd], a->index + 1, memory_order_release);
    rc = ops->xStart(a, period_ns);
    if (rc != 0) {
        snapprof__trigger_disarm(a, NULL);
        return rc;
    }
    *out = a;
    return 0;
}

/* 1 when the thread tid of this process is gone for good: a capture it
 * had begun will never end. */
static int thread_gone(pid_t tid)
{
    return tid > 0 && syscall(SYS_tgkill, getpid(), tid, 0) != 0 && errno == ESRCH;
}

uint64_t snapprof__trigger_died_busy(void)
{
    return atomic_load_explicit(&g_died_busy, memory_order_relaxed);
}

void snapprof__trigger_disarm(snapprof__arm_t *a, uint64_t *cpu_ns)
{
    /* Wait out a capture in progress: bounded work on the target thread,
     * though that thread may be descheduled in the middle of it. A thread
     * that ended inside the handler (a seccomp filter that kills the thread
     * for a call the handler makes) leaves the arm BUSY for good: once the
     * thread is gone, nothing is waited for (the stop that disarmed it
     * hung for ever). Only the thread's end is taken for that, never a
     * timeout: a live thread's capture still runs. */
    for (unsigned spins = 0;; spins++) {
        uint32_t expected = SNAPPROF__ARM_ARMED;
        if (atomic_compare_exchange_weak_explicit(&a->state, &expected, SNAPPROF__ARM_OFF,
                                                  memory_order_acquire, memory_order_relaxed))
            break;
        if (spins >= 64 && spins % 16 == 0 && a->target && thread_gone(a->target->tid)) {
            expected = SNAPPROF__ARM_BUSY;
            if (atomic_compare_exchange_strong_explicit(&a->state, &expected, SNAPPROF__ARM_OFF,
                                                        memory_order_acquire,
                                                        memory_order_relaxed)) {
                atomic_fetch_add_explicit(&g_died_busy, 1, memory_order_relaxed);
                break;
            }
        }
        if (spins < 64) {
            sched_yield();
        } else {
            struct timespec ts = {0, 100000};
            nanosleep(&ts, NULL);
        }
    }
    uint64_t ns;
    if (cpu_ns && a->ops->xReadCpu && a->ops->xReadCpu(a, &ns) == 0)
        *cpu_ns = ns;
    retire_fd(a->fd);
    a->ops->xDestroy(a);
    pthread_mutex_lock(&g_lock);
    unlink_arm(atomic_load(&g_arms), a);
    put_arm(a);
    pthread_mutex_unlock(&g_lock);
}

/* At most this many other arms are served by one signal. */
#define RING_MAX 16

/* Captures for arm a (BUSY, on this thread) if a period of the thread's
 * CPU time has passed since the time its captures stand for, give or take
 * a quarter period; the capture stands for the whole periods since. The
 * first capture takes the kernel's count. RUNS IN THE SIGNAL HANDLER.
 * Async-signal-safe. */
static void serve_if_due(snapprof__arm_t *a, uint64_t cpu_now, const ucontext_t *uc,
                         uint64_t periods, uint64_t entry)
{
    uint64_t period = a->period_ns ? a->period_ns : 1;
    if (a->counted_cpu_ns == 0) {
        a->counted_cpu_ns = cpu_now;
    } else {
        uint64_t ahead = cpu_now + period / 4;
        if (ahead < a->counted_cpu_ns + period)
            return; /* another arm's signal served it moments ago */
        periods = (ahead - a->counted_cpu_ns) / period;
        a->counted_cpu_ns += periods * period;
    }
    snapprof__capture_self(a->pool, a->target, uc, periods * period, entry);
}

/* The signal named arm a (BUSY), whose thread has other arms: serves a and
 * every other arm of this thread and signal that is due, each once: one
 * signal may stand for several triggers' expiries. Their weights come from
 * the thread's CPU clock, so an arm served by another's signal is not
 * counted again by its own. RUNS IN THE SIGNAL HANDLER. Async-signal-safe
 * (clock_gettime is). */
static void serve_ring(snapprof__arm_t *arms, snapprof__arm_t *a, uint32_t next, int signo,
                       pid_t self, const ucontext_t *uc, uint64_t periods, uint64_t entry)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) {
        snapprof__capture_self(a->pool, a->target, uc, periods * a->period_ns, entry);
        return;
    }
    uint64_t cpu_now = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    serve_if_due(a, cpu_now, uc, periods, entry);
    for (unsigned steps = 0; next != a->index && next < ARM_MAX && steps < RING_MAX; steps++) {
        snapprof__arm_t *b = &arms[next];
        next = atomic_load_explicit(&b->next_sib, memory_order_acquire);
        uint32_t expected = SNAPPROF__ARM_ARMED;
        if (!atomic_compare_exchange_strong_explicit(&b->state, &expected, SNAPPROF__ARM_BUSY,
                                                     memory_order_acquire, memory_order_relaxed))
            continue; /* being disarmed, free, or in another handler */
        if (b->signo == signo && b->target->tid == self)
            serve_if_due(b, cpu_now, uc, 1, entry);
        atomic_store_explicit(&b->state, SNAPPROF__ARM_ARMED, memory_order_release);
    }
}

/* RUNS IN THE SIGNAL HANDLER. Async-signal-safe. */
int snapprof__trigger_on_signal(int signo, siginfo_t *info, void *uc)
{
    /* The process-wide timer's (trigger_process.c), which needs no arm. */
    if (info->si_code == SI_TIMER &&
        snapprof__process_timer_on_signal(info, (const ucontext_t *)uc))
        return 1;
    snapprof__arm_t *arms = atomic_load_explicit(&g_arms, memory_order_acquire);
    _Atomic uint32_t *fds = atomic_load_explicit(&g_fd_arm, memory_order_acquire);
    if (!arms || !fds)
        return 0;
    uint32_t index, gen = UINT32_MAX;
    int fd = -1;
    uint64_t periods = 1;
    if (info->si_code == SI_TIMER) {
        uint64_t payload = (uint64_t)(uintptr_t)info->si_value.sival_ptr;
        if ((uint32_t)(payload >> 32) != TIMER_TAG)
            return 0;
        index = (uint32_t)payload & 0xfffffu;
        gen = ((uint32_t)payload >> 20) & 0xfffu;
        if (info->si_overrun > 0)
            periods += (uint64_t)info->si_overrun;
    } else if (info->si_code == POLL_HUP || info->si_code == POLL_IN) {
        fd = info->si_fd;
        if (fd < 0 || fd >= FD_MAX)
            return 0;
        uint32_t v = atomic_load_explicit(&fds[fd], memory_order_acquire);
        if (v == 0)
            return 0;
        if (v == FD_RETIRED) {
            /* A late signal from an event we closed, if it was closed
             * lately; else the number's signal is the program's. */
            _Atomic uint32_t *at = atomic_load_explicit(&g_fd_retired_at, memory_order_relaxed);
            uint32_t since = (uint32_t)(snapprof__monotonic_ns() >> 20) -
                             atomic_load_explicit(&at[fd], memory_order_relaxed);
            return since < RETIRED_FOR;
        }
        index = v - 1;
    } else {
        return 0;
    }
    if (index >= ARM_MAX)
        return 0;
    snapprof__arm_t *a = &arms[index];
    uint32_t expected = SNAPPROF__ARM_ARMED;
    if (!atomic_compare_exchange_strong_explicit(&a->state, &expected, SNAPPROF__ARM_BUSY,
                                                 memory_order_acquire, memory_order_relaxed))
        return 1; /* being disarmed, or not in force any more: drop it */
    /* snapprof__monotonic_ns() is async-signal-safe (clock_gettime only). */
    uint64_t entry = snapprof__monotonic_ns();
    pid_t self = snapprof__gettid_cached();
    if (a->signo == signo && (gen == UINT32_MAX || a->gen == gen) && (fd < 0 || a->fd == fd) &&
        a->target->tid == self) {
        /* What the period that just ended stands for, taken before the
         * re-arm starts the next; the re-arm comes first so that the
         * capture's pause counts it. */
        uint64_t weight = periods * a->cur_period_ns;
        if (a->ops->xRearm)
            a->ops->xRearm(a);
        uint32_t next = atomic_load_explicit(&a->next_sib, memory_order_acquire);
        if (next == index) {
            /* Alone on its thread, the usual case: no clock to read. */
            snapprof__capture_self(a->pool, a->target, (const ucontext_t *)uc, weight, entry);
        } else {
            serve_ring(arms, a, next, signo, self, (const ucontext_t *)uc, periods, entry);
        }
    }
    atomic_store_explicit(&a->state, SNAPPROF__ARM_ARMED, memory_order_release);
    return 1;
}
