/* The perf CPU-clock trigger: a per-thread PERF_COUNT_SW_TASK_CLOCK event
 * that counts the thread's CPU time and, every period, signals that thread
 * (O_ASYNC + F_SETSIG + F_SETOWN_EX/F_OWNER_TID). With exclude_kernel the
 * overflow fires only while the thread runs its own code, so the signal is
 * delivered at once and never interrupts a system call. The event runs
 * on its own: every overflow queues the signal, and nothing in the handler
 * re-arms it. (It used to stop after each overflow, PERF_EVENT_IOC_REFRESH
 * with a limit of one, re-armed by the handler, as async-profiler does. A
 * standard signal does not queue, so when two profilers' events on one
 * thread overflowed together one signal stood for both, and the event it
 * did not name stayed stopped for good.)
 *
 * Periods vary around the profile's interval, drawn uniformly between half
 * and one and a half of it. With a fixed period, a thread whose loop takes
 * about a whole number of periods, or a simple fraction of one more, is
 * found at the same few points of its loop sample after sample, and the
 * profile gives those points' functions shares that are pp off and move
 * from run to run: 2-3 pp at 10 000 samples on bench_trigger's ratio
 * program, nearly every sample in one function for a loop in step with
 * the thread's clock. The first period is drawn when the event is made
 * (for a thread armed as it starts, uniform in (0, interval]:
 * draw_first(), and its handler starts one drawn as the others); then
 * every CHANGE_EVERY overflows the handler starts a period of a length
 * drawn anew (PERF_EVENT_IOC_PERIOD, which restarts the count from the
 * moment of the call and reprograms the timer: 13-14 us in the handler on
 * these VMs, 3 us in a loop, so only 1 sample in CHANGE_EVERY pays it).
 * Draws come in pairs that add up to twice the interval, so the rate does
 * not wander with them. The CPU time between the overflow and the call
 * (the timer interrupt, the signal's delivery: about 30 us here, 0.02 % of
 * CHANGE_EVERY periods at 1 kHz) is in no period: it goes to the thread's
 * remainder. (It used to be read from the event's count and given back,
 * but that read() is what the event's fd must never get; see below.)
 * Each capture weighs the period in force when it fired, but the first,
 * which weighs the interval (draw_first() says why); the sampling side
 * repays the difference from the thread's next samples.
 *
 * The event's fd is a number in the program's fd table, and the program
 * may close it (daemons that close every fd, closefrom) or dup2 one of its
 * own files over it. So the number is never trusted: the event's id
 * (PERF_EVENT_IOC_ID), kept at creation, is asked for before every ioctl
 * and before the close, and a number that answers with another id, or
 * not at all, is not touched again: the arm's fd is lost, counted
 * (snapprof__fd_lost(), stats fds_lost) and not closed. Nothing ever
 * read()s the fd (a read() of a pipe put in its place would block, or eat
 * the program's bytes): the count comes from the event's first page,
 * mapped at creation, which also keeps the event alive, still timing the
 * thread, after the program closed the fd.
 *
 * What remains is the moment between the id check and the call. Another
 * thread of the program would have to put a file at exactly this number
 * then: not by open, socket, pipe or accept (the kernel gives the lowest
 * free number, and ours sit at the top of the range, above the program's
 * use: common/fds.h), only by dup2 or dup3 onto it. Then: an ioctl of
 * perf's own magic ('$') on anything but a perf event fails with ENOTTY
 * and cannot block; only a perf event of the program's own, dup2'd there
 * in those microseconds, would get our period change or be closed. No
 * read() is left to hang or to eat its data. */
#include "trigger/trigger.h"

#include "common/clock.h"
#include "common/fault.h"
#include "common/fds.h"
#include "common/hash.h"
#include "common/seccomp.h"

#include <errno.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Whether arm->fd is still the arm's event: its id, asked of the kernel,
 * is the one kept at creation. An fd the program closed fails (EBADF);
 * one it replaced fails (ENOTTY: the ioctl is perf's own) or answers with
 * another event's id. Async-signal-safe (one ioctl). */
static int is_ours(const snapprof__arm_t *arm)
{
    uint64_t id;
    return arm->fd >= 0 && ioctl(arm->fd, PERF_EVENT_IOC_ID, &id) == 0 && id == arm->event_id;
}

/* Overflows between two changes of the period. At 8 the profiles were as
 * right (the ratio program within 0.83 pp in 9 runs, against 2.08 pp for
 * the worst of 9 at 128), but the target's pause p99 was 14.8 us. */
#define CHANGE_EVERY 128
/* The kernel's least period for a CPU-clock event. */
#define PERIOD_MIN_NS 10000u
/* The least first period (draw_first()). */
#define FIRST_MIN_NS 50000u

/* A period uniform in [mean / 2, mean * 3 / 2), in pairs: a draw x (by
 * splitmix64 on the arm's own state), then 2 * mean - x. Two changes in a
 * row then last exactly twice CHANGE_EVERY means, so the rate over a
 * short profile does not wander with the draws. RUNS IN THE SIGNAL
 * HANDLER. Async-signal-safe. */
static uint64_t draw_period(snapprof__arm_t *arm)
{
    uint64_t mean = arm->period_ns;
    if (arm->partner_ns != 0) {
        uint64_t x = arm->partner_ns;
        arm->partner_ns = 0;
        return x;
    }
    uint64_t z = snapprof__splitmix64_next(&arm->rng);
    uint64_t x = mean / 2 + z % mean;
    arm->partner_ns = 2 * mean - x;
    return x;
}

/* The first period: uniform in (0, mean], as Go's runtime draws each
 * thread's first expiry (golang/go#35057), not in [mean / 2, mean * 3 / 2)
 * as the others. A thread is armed as it starts (the preload registers it
 * before its start routine) and its first signal comes after this much of
 * its CPU time. So a thread that ends with c < mean of CPU time is sampled
 * with probability c / mean: most threads of a thread-per-task program use
 * less than one period, and with a first period of at least mean / 2 those
 * under it were never sampled (a held-out program of 4000 threads of 0.4
 * ms each: 4 samples at 1 kHz, all their CPU time in the remainder).
 *
 * The first sample weighs mean, not the u it ended, and that is what
 * keeps the weights unbiased. With a first expiry u uniform in (0, P] and
 * then periods X_2, X_3, ... (drawn independently of u, each of mean P,
 * each sample weighing its own X_k), a thread that uses c of CPU time gets
 * W = w_1 * [u <= c] + sum over k >= 2 of X_k * [u + X_2 + ... + X_k <= c].
 * For c below u + X_2 (at least P / 2 after u; every thread shorter than
 * P / 2) only the first can fire: E[W] = w_1 * P(u <= c) = w_1 * c / P,
 * which is c exactly when w_1 = P, and for no other w_1. Weighing it u
 * would give E[W] = c^2 / (2P): a 0.4 ms thread at 1 kHz would count for
 * half its time. For fixed periods (X_k = P) the same holds for every c:
 * E[W] = c + (w_1 - P) * P(u <= c). With periods that vary, a long thread
 * gets E[W] = c - Var(X) / (2P) = c - P / 24 (the age at its end is size-
 * biased), a constant per thread. A single thread's samples may so add up
 * to more than its clock (up to P - u more): the sampling side repays
 * P - u from its next samples (profiler.c drain_some()), so a thread that
 * lives a few periods is weighed by the periods it ended, as before, and
 * only a thread that ends first keeps an excess, which the profile nets
 * against the remainder of the threads that ended unsampled
 * (settle_final()), so its total stays the threads' clocks.
 *
 * A first period shorter than FIRST_MIN_NS runs as FIRST_MIN_NS: a thread
 * of less CPU time than that is not sampled (c / P it should have been, at
 * most 5 % at 1 kHz); from there on the probability is c / P exactly. Why:
 * the event's timer is the kernel's hrtimer, and on these VMs a period of
 * 10-12 us (the kernel's least) kept a thread in its timer interrupts for
 * 0.5-1.8 s of system time before its first signal, 15 us for 120 ms, in a
 * program that arms 300 threads this way; 30 and 50 us were fine in 1500.
 * Sampling side, before the arm is published. */
static uint64_t draw_first(snapprof__arm_t *arm)
{
    uint64_t z = snapprof__splitmix64_next(&arm->rng);
    uint64_t u = 1 + z % arm->period_ns;
    uint64_t least = FIRST_MIN_NS < arm->period_ns / 2 ? FIRST_MIN_NS : arm->period_ns / 2;
    return u < least ? least : u;
}

static int perf_create(snapprof__arm_t *arm, int signo, uint64_t period_ns)
{
    struct perf_event_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.size = sizeof attr;
    attr.type = PERF_TYPE_SOFTWARE;
    attr.config = PERF_COUNT_SW_TASK_CLOCK;
    pid_t tid = arm->target->tid;
    arm->rng = snapprof__monotonic_ns() ^ ((uint64_t)(uint32_t)tid << 32) ^
               ((uint64_t)arm->gen << 20) ^ arm->index;
    arm->partner_ns = 0;
    /* An interval too short to vary keeps its one period for good. */
    int varies = period_ns >= 2 * PERIOD_MIN_NS;
    int spread = varies && (arm->flags & SNAPPROF__ARM_FIRST_SPREAD);
    uint64_t first;
    if (spread) {
        /* The first signal weighs the interval, not the (shorter) first
         * period: see draw_first(). Its handler then starts a period drawn
         * as all the others (perf_rearm()). */
        first = draw_first(arm);
        arm->cur_period_ns = period_ns;
        arm->first_ns = first;
        arm->until_change = 1;
    } else {
        /* The first period is drawn as the others, so that a thread with
         * fewer samples than CHANGE_EVERY, and threads started together,
         * do not keep step. An interval too short to vary keeps its one
         * period for good. */
        first = varies ? draw_period(arm) : period_ns;
        arm->cur_period_ns = first;
        arm->first_ns = 0;
        arm->until_change = varies ? CHANGE_EVERY : 0;
    }
    atomic_store_explicit(&arm->fd_lost, 0, memory_order_relaxed);
    attr.sample_period = first;
    attr.disabled = 1;
    attr.exclude_kernel = 1;
    attr.exclude_hv = 1;
    attr.wakeup_events = 1;
    int fd;
    if (!snapprof__fd_room(SNAPPROF__FD_TRIGGER))
        return -EMFILE; /* past the budget: no fd at all, not even a low one for a moment */
    if (snapprof__fault(SNAPPROF__FAULT_PERF_EVENT_OPEN)) {
        errno = EMFILE;
        fd = -1;
    } else if (!snapprof__seccomp_allowed(SNAPPROF__SECCOMP_PERF_EVENT_OPEN)) {
        errno = EPERM; /* a seccomp filter would kill the process for it */
        fd = -1;
    } else {
        fd = (int)syscall(SYS_perf_event_open, &attr, tid, -1, -1, PERF_FLAG_FD_CLOEXEC);
    }
    if (fd < 0)
        return -errno;
    /* To the top of the range, within the budget (common/fds.h): past it,
     * -EMFILE, and the thread gets the CPU timer, which needs no fd. */
    int high = snapprof__fd_place(fd, SNAPPROF__FD_TRIGGER);
    if (high < 0) {
        close(fd);
        return high;
    }
    fd = high;
    struct f_owner_ex owner = {F_OWNER_TID, tid};
    if (ioctl(fd, PERF_EVENT_IOC_ID, &arm->event_id) != 0 || fcntl(fd, F_SETFL, O_ASYNC) != 0 ||
        fcntl(fd, F_SETSIG, signo) != 0 || fcntl(fd, F_SETOWN_EX, &owner) != 0) {
        int err = errno;
        close(fd);
        snapprof__fd_release(SNAPPROF__FD_TRIGGER);
        return -err;
    }
    arm->fd = fd;
    /* Only the first page (no ring buffer: nothing is read from it but the
     * count and the lock word, and an overflow record that finds no room
     * is only counted as lost by the kernel). Without it the thread's
     * periods stay as first drawn, its final count is not read, and wall
     * mode reads the thread's clock instead of the lock word. */
    if (arm->flags & SNAPPROF__ARM_NO_PAGE) {
        /* Not asked for (trigger.h): the periods change all the same. */
        arm->page = NULL;
        if (arm->first_ns)
            arm->first_period_ns = arm->first_ns;
        return 0;
    }
    void *page = snapprof__fault(SNAPPROF__FAULT_MMAP)
                     ? MAP_FAILED
                     : mmap(NULL, (size_t)sysconf(_SC_PAGESIZE), PROT_READ, MAP_SHARED, fd, 0);
    arm->page = page != MAP_FAILED ? page : NULL;
    if (!arm->page && arm->until_change != 0) {
        /* Without it the period stays as it is made (as it always did):
         * the interval, not the short first one (the event is disabled
         * still, so this is its first period). */
        arm->until_change = 0;
        arm->first_ns = 0;
        if (ioctl(fd, PERF_EVENT_IOC_PERIOD, &period_ns) != 0)
            arm->cur_period_ns = first; /* each sample weighs what it ends */
    }
    /* What the first signal stands for in the thread's CPU time: the
     * sampling side repays the rest of its interval's weight from the
     * thread's next samples (profiler.c, drain_some()). */
    if (arm->first_ns)
        arm->first_period_ns = arm->first_ns;
    return 0;
}

static int perf_start(snapprof__arm_t *arm, uint64_t period_ns)
{
    (void)period_ns;
    if (!is_ours(arm))
        return -EBADF; /* closed by the program already */
    return ioctl(arm->fd, PERF_EVENT_IOC_ENABLE, 0) == 0 ? 0 : -errno;
}

/* After an overflow: every CHANGE_EVERY of them, starts a period of a
 * length drawn anew. The arm is BUSY, so its fd is not closed meanwhile by
 * us, but the program may have closed or replaced it: its id is checked
 * first (see the top of the file for what remains), and an fd found lost
 * stops the changes for good (the event, kept alive by its page, still
 * fires every period in force). RUNS IN THE SIGNAL HANDLER.
 * Async-signal-safe (ioctl is a plain system call; the caller keeps
 * errno). */
static void perf_rearm(snapprof__arm_t *arm)
{
    if (arm->until_change == 0 || --arm->until_change > 0)
        return;
    arm->until_change = CHANGE_EVERY;
    uint64_t first = arm->first_ns;
    arm->first_ns = 0;
    if (!is_ours(arm)) {
        atomic_store_explicit(&arm->fd_lost, 1, memory_order_relaxed);
        arm->until_change = 0;
        /* Stuck at the short first period: each later sample weighs that
         * (the sampling side makes a new event: profiler.c check_armed). */
        if (first != 0) {
            arm->cur_period_ns = first;
            atomic_store_explicit(&arm->first_stuck, 1, memory_order_relaxed);
        }
        return;
    }
    uint64_t period = draw_period(arm);
    if (ioctl(arm->fd, PERF_EVENT_IOC_PERIOD, &period) != 0) {
        if (first != 0) {
            arm->cur_period_ns = first;
            atomic_store_explicit(&arm->first_stuck, 1, memory_order_relaxed);
        }
        return;
    }
    arm->cur_period_ns = period;
}

/* The event's count as of the kernel's last update of its page: at each
 * schedule-in of the thread, so behind by at most what the thread ran
 * since (a few ms on a busy CPU); for a thread that exited, its count up to
 * its last schedule-in. Never a read() of the fd. */
static int perf_read_cpu(snapprof__arm_t *arm, uint64_t *ns)
{
    const volatile struct perf_event_mmap_page *pg = arm->page;
    if (!pg)
        return -ENODATA;
    for (int tries = 0; tries < 1000; tries++) {
        uint32_t seq = pg->lock;
        atomic_signal_fence(memory_order_acquire);
        int64_t count = pg->offset;
        atomic_signal_fence(memory_order_acquire);
        if (!(seq & 1) && pg->lock == seq) {
            *ns = count > 0 ? (uint64_t)count : 0;
            return 0;
        }
    }
    return -EAGAIN;
}

/* Closes the event if its fd is still ours; else leaves the number alone
 * and counts it lost. The page goes last: with the fd closed it holds the
 * event's last reference, so after munmap no signal comes from it. */
static void perf_destroy(snapprof__arm_t *arm)
{
    if (arm->fd >= 0) {
        if (!atomic_load_explicit(&arm->fd_lost, memory_order_relaxed) && is_ours(arm)) {
            close(arm->fd);
        } else {
            atomic_store_explicit(&arm->fd_lost, 1, memory_order_relaxed);
            snapprof__fd_lost();
        }
        snapprof__fd_release(SNAPPROF__FD_TRIGGER);
    }
    arm->fd = -1;
    if (arm->page)
        munmap((void *)arm->page, (size_t)sysconf(_SC_PAGESIZE));
    arm->page = NULL;
}

int snapprof__trigger_map_page(snapprof__arm_t *arm)
{
    if (arm->ops != &snapprof__trigger_perf_event || !(arm->flags & SNAPPROF__ARM_NO_PAGE))
        return 0;
    arm->flags &= ~(unsigned)SNAPPROF__ARM_NO_PAGE;
    if (arm->fd < 0 || arm->page)
        return 0;
    /* An fd the program closed or replaced is not mapped: that would be
     * its file. */
    if (atomic_load_explicit(&arm->fd_lost, memory_order_relaxed) || !is_ours(arm))
        return -EBADF;
    if (snapprof__fault(SNAPPROF__FAULT_MMAP))
        return -ENOMEM;
    void *page = mmap(NULL, (size_t)sysconf(_SC_PAGESIZE), PROT_READ, MAP_SHARED, arm->fd, 0);
    if (page == MAP_FAILED)
        return -errno;
    arm->page = page;
    return 0;
}

int snapprof__trigger_fd_lost(snapprof__arm_t *arm)
{
    if (arm->ops != &snapprof__trigger_perf_event || arm->fd < 0)
        return 0;
    if (!atomic_load_explicit(&arm->fd_lost, memory_order_relaxed) && !is_ours(arm))
        atomic_store_explicit(&arm->fd_lost, 1, memory_order_relaxed);
    return atomic_load_explicit(&arm->fd_lost, memory_order_relaxed);
}

const snapprof__trigger_ops_t snapprof__trigger_perf_event = {
    .version = 1,
    .kind = SNAPPROF_TRIGGER_PERF_EVENT,
    .xCreate = perf_create,
    .xStart = perf_start,
    .xRearm = perf_rearm,
    .xReadCpu = perf_read_cpu,
    .xDestroy = perf_destroy,
};

int snapprof__trigger_sched_seq(const snapprof__arm_t *arm, uint32_t *seq)
{
    if (!arm || !arm->page || !(arm->flags & SNAPPROF__ARM_SCHED_SEQ))
        return -1;
    /* The kernel bumps the lock word (twice) in perf_event_update_userpage(),
     * which the task clock's add callback calls at every schedule-in. */
    const volatile struct perf_event_mmap_page *pg = arm->page;
    *seq = pg->lock;
    return 0;
}
