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
 * the thread's clock. The first period is drawn when the event is made;
 * then every CHANGE_EVERY overflows the handler starts a period of a length
 * drawn anew (PERF_EVENT_IOC_PERIOD, which restarts the count from the
 * moment of the call and reprograms the timer: 13-14 us in the handler on
 * these VMs, 3 us in a loop, so only 1 sample in CHANGE_EVERY pays it).
 * Draws come in pairs that add up to twice the interval, so the rate does
 * not wander with them. The CPU time between the overflow and the call
 * (the timer interrupt, the signal's delivery: about 30 us here) is taken
 * off the periods until the next change, so the rate stays what was asked.
 * Each capture weighs the period in force when it fired (the first after a
 * change, that time too), so a thread's samples never add up to more than
 * its clock. */
#include "trigger/trigger.h"

#include "common/clock.h"
#include "common/fault.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Event fds are moved at or above this, out of the range select() can use
 * and where programs that assume small fds keep theirs. */
#define FD_FLOOR 1024

/* Moves fd above FD_FLOOR when the limit allows it (close-on-exec either
 * way). Returns the fd to use. */
static int move_high(int fd)
{
    struct rlimit rl;
    if (fd >= FD_FLOOR || getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur <= FD_FLOOR + 16)
        return fd;
    int high = fcntl(fd, F_DUPFD_CLOEXEC, FD_FLOOR);
    if (high < 0)
        return fd;
    close(fd);
    return high;
}

/* Overflows between two changes of the period. At 8 the profiles were as
 * right (the ratio program within 0.83 pp in 9 runs, against 2.08 pp for
 * the worst of 9 at 128), but the target's pause p99 was 14.8 us. */
#define CHANGE_EVERY 128
/* The kernel's least period for a CPU-clock event. */
#define PERIOD_MIN_NS 10000u

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
    uint64_t z = (arm->rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    uint64_t x = mean / 2 + z % mean;
    arm->partner_ns = 2 * mean - x;
    return x;
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
    /* The first period is drawn too, so that a thread with fewer samples
     * than CHANGE_EVERY, and threads started together, do not keep step.
     * An interval too short to vary keeps its one period for good. */
    int varies = period_ns >= 2 * PERIOD_MIN_NS;
    uint64_t first = varies ? draw_period(arm) : period_ns;
    arm->cur_period_ns = first;
    arm->due_count = first; /* the count starts at 0 when enabled */
    arm->carry_ns = 0;
    arm->until_change = varies ? CHANGE_EVERY : 0;
    attr.sample_period = first;
    attr.disabled = 1;
    attr.exclude_kernel = 1;
    attr.exclude_hv = 1;
    attr.wakeup_events = 1;
    int fd;
    if (snapprof__fault(SNAPPROF__FAULT_PERF_EVENT_OPEN)) {
        errno = EMFILE;
        fd = -1;
    } else {
        fd = (int)syscall(SYS_perf_event_open, &attr, tid, -1, -1, PERF_FLAG_FD_CLOEXEC);
    }
    if (fd < 0)
        return -errno;
    fd = move_high(fd);
    struct f_owner_ex owner = {F_OWNER_TID, tid};
    if (fcntl(fd, F_SETFL, O_ASYNC) != 0 || fcntl(fd, F_SETSIG, signo) != 0 ||
        fcntl(fd, F_SETOWN_EX, &owner) != 0) {
        int err = errno;
        close(fd);
        return -err;
    }
    arm->fd = fd;
    arm->page = NULL;
    if (arm->flags & SNAPPROF__ARM_SCHED_SEQ) {
        /* Only the first page (no ring buffer: nothing is read from it
         * but the lock word, and an overflow record that finds no room is
         * only counted as lost by the kernel). Without it the caller reads
         * the thread's clock instead. */
        void *page = snapprof__fault(SNAPPROF__FAULT_MMAP)
                         ? MAP_FAILED
                         : mmap(NULL, (size_t)sysconf(_SC_PAGESIZE), PROT_READ, MAP_SHARED, fd, 0);
        if (page != MAP_FAILED)
            arm->page = page;
    }
    return 0;
}

static int perf_start(snapprof__arm_t *arm, uint64_t period_ns)
{
    (void)period_ns;
    return ioctl(arm->fd, PERF_EVENT_IOC_ENABLE, 0) == 0 ? 0 : -errno;
}

/* After an overflow: every CHANGE_EVERY of them, starts a period of a
 * length drawn anew. The arm is BUSY, so its fd is still the event's.
 * RUNS IN THE SIGNAL HANDLER. Async-signal-safe (read and ioctl are plain
 * system calls; the caller keeps errno). */
static void perf_rearm(snapprof__arm_t *arm)
{
    if (arm->until_change == 0 || --arm->until_change > 0)
        return;
    arm->until_change = CHANGE_EVERY;
    uint64_t count;
    if (read(arm->fd, &count, sizeof count) != (ssize_t)sizeof count)
        return;
    /* Overflows fall every cur_period_ns of the count after due_count
     * (also those the kernel let pass while the thread was in the
     * kernel), so this is how long ago the last one fell. */
    uint64_t late = count > arm->due_count ? (count - arm->due_count) % arm->cur_period_ns : 0;
    /* The new period holds for the next CHANGE_EVERY overflows, so each
     * gives back its share of the time lost to this change: together they
     * and that time last CHANGE_EVERY times the drawn period. */
    uint64_t period = draw_period(arm), give = late / CHANGE_EVERY;
    period = period > give + PERIOD_MIN_NS ? period - give : PERIOD_MIN_NS;
    if (ioctl(arm->fd, PERF_EVENT_IOC_PERIOD, &period) != 0)
        return;
    arm->due_count = count + period;
    arm->cur_period_ns = period;
    arm->carry_ns = late;
}

static int perf_read_cpu(snapprof__arm_t *arm, uint64_t *ns)
{
    uint64_t count;
    if (read(arm->fd, &count, sizeof count) != (ssize_t)sizeof count)
        return -errno;
    *ns = count;
    return 0;
}

static void perf_destroy(snapprof__arm_t *arm)
{
    if (arm->page)
        munmap((void *)arm->page, (size_t)sysconf(_SC_PAGESIZE));
    arm->page = NULL;
    if (arm->fd >= 0) {
        ioctl(arm->fd, PERF_EVENT_IOC_DISABLE, 0);
        close(arm->fd);
    }
    arm->fd = -1;
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
    if (!arm || !arm->page)
        return -1;
    /* The kernel bumps the lock word (twice) in perf_event_update_userpage(),
     * which the task clock's add callback calls at every schedule-in. */
    const volatile struct perf_event_mmap_page *pg = arm->page;
    *seq = pg->lock;
    return 0;
}
