/* bench_eintr_kernel: does a CPU-clock trigger that counts kernel time make
 * the program's own system calls fail with EINTR? (Issue 25, items 4 and 5.)
 *
 * Usage: bench_eintr_kernel all|a|b|c|d [--hz H] [--cpu-seconds S]
 *                           [--user-us U] [--signal N] [--quick]
 *
 * One thread runs a loop of system calls that do CPU work in the kernel and
 * then may sleep: poll and select over 300 idle sockets and a pipe (timeout
 * 1 ms, and poll with timeout 0), epoll_wait over the same set, a blocking
 * read of a pipe that a second thread writes at random intervals (50 us to
 * 1.5 ms), recv with SO_RCVTIMEO, nanosleep, a timed FUTEX_WAIT, write and
 * read of 64 KiB on a socketpair, mmap of 4 MiB with MAP_POPULATE and its
 * munmap, and madvise(MADV_DONTNEED) of 4 MiB it touched; with --user-us,
 * also U us of CPU in user code per cycle. It counts every EINTR and every
 * short read or write per call kind.
 *
 * The thread is signalled as snapprof's triggers signal it:
 *   a  perf task-clock, exclude_kernel=1 (trigger_perf_event.c today)
 *   b  perf task-clock, exclude_kernel=0 (counting kernel time)
 *   c  timer_create on the thread's CPU clock, SIGEV_THREAD_ID
 *      (trigger_cpu_timer.c)
 *   d  nothing
 * The perf event is made as trigger_perf_event.c makes it (software
 * task-clock, sample_period, wakeup_events 1, the first page mapped, O_ASYNC,
 * F_SETSIG, F_SETOWN_EX to the thread), with a fixed period; the handler,
 * installed with SA_RESTART as snapprof's, only counts. Each variant runs
 * until the thread used S CPU-seconds (the machine is noisy; CPU time, not
 * wall time, is what brings signals), at H Hz, or at 1000 and 4000 Hz when
 * --hz is not given.
 *
 * The handler also reads where the signal found the thread (x86-64): right
 * after a syscall instruction means it was delivered as a system call
 * returned, so it was raised while the thread ran kernel code; with the
 * returned value -EINTR, that call failed because of it. At a syscall
 * instruction means a call is being restarted (SA_RESTART did its job). A
 * variant that fails (perf_event_open refused: EACCES for an unprivileged
 * user at perf_event_paranoid 2 with exclude_kernel=0) prints its error as
 * its row and the others still run.
 *
 * It links nothing of snapprof. */
#include "bench_util.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <linux/perf_event.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#define IDLE_SOCKETS 300
#define BIG (4u << 20)
#define COPY (64u << 10)

static void die(const char *what, int err)
{
    fprintf(stderr, "bench_eintr_kernel: %s: %s\n", what, strerror(err));
    exit(1);
}

/* ---- the call kinds ---------------------------------------------------- */

enum {
    K_POLL,
    K_POLL0,
    K_SELECT,
    K_EPOLL,
    K_READ_PIPE,
    K_RECV_TIMEO,
    K_NANOSLEEP,
    K_FUTEX,
    K_WRITE64K,
    K_READ64K,
    K_MMAP,
    K_MUNMAP,
    K_MADVISE,
    K_TOUCH,
    K_COUNT
};

static const char *const kind_name[K_COUNT] = {
    "poll",      "poll(0)",    "select",    "epoll_wait", "read(pipe)", "recv(timeo)", "nanosleep",
    "futex(to)", "write(64K)", "read(64K)", "mmap(4M)",   "munmap",     "madvise",     "touch(4M)",
};

typedef struct kind_counts {
    uint64_t calls, eintr, other_err, short_io;
    uint64_t cpu_ns; /* the thread's CPU time inside the calls (kernel, nearly all) */
} kind_counts_t;

/* ---- the handler -------------------------------------------------------- */

static atomic_ulong sig_count;        /* signals handled */
static atomic_ulong sig_periods;      /* 1 + si_overrun of timer signals */
static atomic_ulong sig_at_sysret;    /* delivered as a system call returned */
static atomic_ulong sig_sysret_eintr; /* ... which returned -EINTR */
static atomic_ulong sig_at_restart;   /* delivered at a restarted system call */

/* Counts the signal and where it found the thread. Async-signal-safe. */
static void on_signal(int signo, siginfo_t *si, void *uc_)
{
    (void)signo;
    int saved = errno;
    atomic_fetch_add_explicit(&sig_count, 1, memory_order_relaxed);
    unsigned long periods = 1;
    if (si->si_code == SI_TIMER && si->si_overrun > 0)
        periods += (unsigned long)si->si_overrun;
    atomic_fetch_add_explicit(&sig_periods, periods, memory_order_relaxed);
#if defined(__x86_64__)
    const ucontext_t *uc = uc_;
    uintptr_t ip = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
    /* Only bytes on ip's own page are read: ip is mapped, its page too. */
    if ((ip & 0xfff) >= 2 && (ip & 0xfff) <= 0xffe) {
        const unsigned char *p = (const unsigned char *)ip;
        if (p[-2] == 0x0f && p[-1] == 0x05) {
            atomic_fetch_add_explicit(&sig_at_sysret, 1, memory_order_relaxed);
            if ((long long)uc->uc_mcontext.gregs[REG_RAX] == -EINTR)
                atomic_fetch_add_explicit(&sig_sysret_eintr, 1, memory_order_relaxed);
        } else if (p[0] == 0x0f && p[1] == 0x05) {
            atomic_fetch_add_explicit(&sig_at_restart, 1, memory_order_relaxed);
        }
    }
#else
    (void)uc_;
#endif
    errno = saved;
}

/* ---- the triggers ------------------------------------------------------- */

enum { V_PERF_USER, V_PERF_KERNEL, V_CPU_TIMER, V_NONE, V_COUNT };
static const char *const variant_name[V_COUNT] = {
    "a perf excl_kernel=1",
    "b perf excl_kernel=0",
    "c cpu-timer",
    "d none",
};

typedef struct trigger {
    int fd;
    void *page;
    timer_t timer;
    int has_timer;
} trigger_t;

/* Arms variant v on thread tid: 0 or -errno. */
static int trigger_start(trigger_t *t, int v, pid_t tid, int signo, uint64_t period_ns)
{
    memset(t, 0, sizeof *t);
    t->fd = -1;
    if (v == V_PERF_USER || v == V_PERF_KERNEL) {
        struct perf_event_attr attr;
        memset(&attr, 0, sizeof attr);
        attr.size = sizeof attr;
        attr.type = PERF_TYPE_SOFTWARE;
        attr.config = PERF_COUNT_SW_TASK_CLOCK;
        attr.sample_period = period_ns;
        attr.disabled = 1;
        attr.exclude_kernel = v == V_PERF_USER;
        attr.exclude_hv = 1;
        attr.wakeup_events = 1;
        int fd = (int)syscall(SYS_perf_event_open, &attr, tid, -1, -1, PERF_FLAG_FD_CLOEXEC);
        if (fd < 0)
            return -errno;
        struct f_owner_ex owner = {F_OWNER_TID, tid};
        if (fcntl(fd, F_SETFL, O_ASYNC) != 0 || fcntl(fd, F_SETSIG, signo) != 0 ||
            fcntl(fd, F_SETOWN_EX, &owner) != 0) {
            int err = errno;
            close(fd);
            return -err;
        }
        /* As the trigger does: the first page only, no ring buffer. */
        void *page = mmap(NULL, (size_t)sysconf(_SC_PAGESIZE), PROT_READ, MAP_SHARED, fd, 0);
        t->page = page == MAP_FAILED ? NULL : page;
        t->fd = fd;
        if (ioctl(fd, PERF_EVENT_IOC_ENABLE, 0) != 0)
            return -errno;
        return 0;
    }
    if (v == V_CPU_TIMER) {
        struct sigevent sev;
        memset(&sev, 0, sizeof sev);
        sev.sigev_notify = SIGEV_THREAD_ID;
        sev.sigev_signo = signo;
        sev._sigev_un._tid = tid;
        /* As glibc's pthread_getcpuclockid: ~tid << 3 | PERTHREAD | SCHED. */
        clockid_t clock = (clockid_t)(((unsigned int)~tid << 3) | 4u | 2u);
        if (timer_create(clock, &sev, &t->timer) != 0)
            return -errno;
        t->has_timer = 1;
        struct itimerspec its = {
            .it_interval = {(time_t)(period_ns / 1000000000u), (long)(period_ns % 1000000000u)},
            .it_value = {(time_t)(period_ns / 1000000000u), (long)(period_ns % 1000000000u)},
        };
        if (timer_settime(t->timer, 0, &its, NULL) != 0)
            return -errno;
    }
    return 0;
}

static void trigger_stop(trigger_t *t)
{
    if (t->fd >= 0) {
        ioctl(t->fd, PERF_EVENT_IOC_DISABLE, 0);
        if (t->page)
            munmap(t->page, (size_t)sysconf(_SC_PAGESIZE));
        close(t->fd);
    }
    if (t->has_timer)
        timer_delete(t->timer);
    t->fd = -1;
    t->has_timer = 0;
}

/* ---- the workload ------------------------------------------------------- */

typedef struct run {
    int variant, signo;
    uint64_t period_ns, cpu_budget_ns, user_ns;
    /* Results. */
    int err;
    kind_counts_t k[K_COUNT];
    uint64_t cycles, cpu_ns, wall_ns;
    double user_s, sys_s;
    unsigned long signals, periods, at_sysret, sysret_eintr, at_restart;
} run_t;

typedef struct fds {
    int idle[IDLE_SOCKETS]; /* one end of a socketpair each; nothing is ever sent */
    int idle_peer[IDLE_SOCKETS];
    int ready[2]; /* pipe: the feeder writes, the waits watch the read end (non-blocking) */
    int block[2]; /* pipe: the feeder writes, the worker reads it blocking */
    int timeo[2]; /* socketpair: recv with SO_RCVTIMEO on [0]; nothing is sent */
    int copy[2];  /* socketpair: 64 KiB written to [0], read from [1] */
    int ep;
    int maxfd;
} fds_t;

static atomic_int feeder_stop;

static void *feeder(void *arg)
{
    const fds_t *f = arg;
    uint64_t rng = 0x9e3779b97f4a7c15ULL ^ bench_clock_ns(CLOCK_MONOTONIC);
    char b = 'x';
    while (!atomic_load_explicit(&feeder_stop, memory_order_relaxed)) {
        uint64_t us = 50 + bench_rand(&rng) % 1450;
        struct timespec ts = {0, (long)(us * 1000)};
        nanosleep(&ts, NULL);
        if (write(f->ready[1], &b, 1) < 0 && errno != EAGAIN)
            die("write(ready)", errno);
        if (write(f->block[1], &b, 1) < 0 && errno != EAGAIN)
            die("write(block)", errno);
    }
    /* One more byte, so a worker blocked in its read gets out. */
    if (write(f->block[1], &b, 1) < 0 && errno != EAGAIN)
        die("write(block)", errno);
    return NULL;
}

static void fds_open(fds_t *f)
{
    memset(f, 0, sizeof *f);
    for (int i = 0; i < IDLE_SOCKETS; i++) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
            die("socketpair", errno);
        f->idle[i] = sv[0];
        f->idle_peer[i] = sv[1];
    }
    if (pipe2(f->ready, O_CLOEXEC | O_NONBLOCK) != 0 || pipe2(f->block, O_CLOEXEC) != 0)
        die("pipe2", errno);
    /* The feeder must never block on the pipe the worker reads blocking. */
    if (fcntl(f->block[1], F_SETFL, O_NONBLOCK) != 0)
        die("fcntl", errno);
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, f->timeo) != 0 ||
        socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, f->copy) != 0)
        die("socketpair", errno);
    struct timeval tv = {0, 200};
    if (setsockopt(f->timeo[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0)
        die("SO_RCVTIMEO", errno);
    int buf = 1 << 20;
    setsockopt(f->copy[0], SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
    setsockopt(f->copy[1], SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
    f->ep = epoll_create1(EPOLL_CLOEXEC);
    if (f->ep < 0)
        die("epoll_create1", errno);
    struct epoll_event ev = {.events = EPOLLIN};
    for (int i = 0; i < IDLE_SOCKETS; i++) {
        ev.data.fd = f->idle[i];
        if (epoll_ctl(f->ep, EPOLL_CTL_ADD, f->idle[i], &ev) != 0)
            die("epoll_ctl", errno);
    }
    ev.data.fd = f->ready[0];
    if (epoll_ctl(f->ep, EPOLL_CTL_ADD, f->ready[0], &ev) != 0)
        die("epoll_ctl", errno);
    f->maxfd = f->ready[0];
    for (int i = 0; i < IDLE_SOCKETS; i++)
        if (f->idle[i] > f->maxfd)
            f->maxfd = f->idle[i];
    if (f->maxfd >= FD_SETSIZE)
        die("select: fds past FD_SETSIZE", EMFILE);
}

static void fds_close(fds_t *f)
{
    for (int i = 0; i < IDLE_SOCKETS; i++) {
        close(f->idle[i]);
        close(f->idle_peer[i]);
    }
    int *all[] = {f->ready, f->block, f->timeo, f->copy};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        close(all[i][0]);
        close(all[i][1]);
    }
    close(f->ep);
}

/* Counts one call's outcome: r < 0 with errno err is a failure, a
 * transfer of fewer than want bytes (want > 0) a short one; and the CPU
 * time since cpu0, the thread's clock when the call began. The thread's
 * user/kernel split from getrusage is a sample at the scheduler tick (250
 * Hz here, tick accounting), which a loop of sleeps can be in step with;
 * the time inside the calls is the kernel time measured. */
static void note(run_t *r, int kind, long ret, int err, long want, uint64_t cpu0)
{
    kind_counts_t *k = &r->k[kind];
    k->cpu_ns += bench_clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0;
    k->calls++;
    if (ret < 0) {
        if (err == EINTR)
            k->eintr++;
        else if (!(kind == K_RECV_TIMEO && (err == EAGAIN || err == EWOULDBLOCK)) &&
                 !(kind == K_FUTEX && (err == ETIMEDOUT || err == EAGAIN)))
            k->other_err++;
    } else if (want > 0 && ret < want) {
        k->short_io++;
    }
}

static void drain_ready(const fds_t *f)
{
    char buf[256];
    while (read(f->ready[0], buf, sizeof buf) > 0)
        ;
}

static void one_cycle(run_t *r, const fds_t *f, struct pollfd *pfd, char *copybuf, char *big)
{
    long ret;
    uint64_t c0;
    int n = IDLE_SOCKETS + 1;

    c0 = bench_clock_ns(CLOCK_THREAD_CPUTIME_ID);
    ret = poll(pfd, (nfds_t)n, 1);
    note(r, K_POLL, ret, errno, 0, c0);
    drain_ready(f);

    c0 = bench_clock_ns(CLOCK_THREAD_CPUTIME_ID);

    ret = poll(pfd, (nfds_t)n, 0);
    note(r, K_POLL0, ret, errno, 0, c0);
    drain_ready(f);

    fd_set set;
    FD_ZERO(&set);
    for (int i = 0; i < IDLE_SOCKETS; i++)
        FD_SET(f->idle[i], &set);
    FD_SET(f->ready[0], &set);
    struct timeval tv = {0, 1000};
    c0 = bench_clock_ns(CLOCK_THREAD_CPUTIME_ID);
    ret = select(f->maxfd + 1, &set, NULL, NULL, &tv);
    note(r, K_SELECT, ret, errno, 0, c0);
    drain_ready(f);

    struct epoll_event evs[8];
    c0 = bench_clock_ns(CLOCK_THREAD_CPUTIME_ID);
    ret = epoll_wait(f->ep, evs, 8, 1);
    note(r, K_EPOLL, ret, errno, 0, c0);
    drain_ready(f);

    char b[256];
    c0 = bench_clock_ns(CLOCK_THREAD_CPUTIME_ID);
    ret = read(f->block[0], b, sizeof b);
    note(r, K_READ_PIPE, ret, errno, 0, c0);

    c0 = bench_clock_ns(CLOCK_THREAD_CPUTIME_ID);

    ret = recv(f->timeo[0], b, sizeof b, 0);
    note(r, K_RECV_TIMEO, ret, errno, 0, c0);

    struct timespec ts = {0, 50000};
    c0 = bench_clock_ns(CLOCK_THREAD_CPUTIME_ID);
    ret = nanosleep(&ts, NULL);
    note(r, K_NANOSLEEP, ret, errno, 0, c0);

    static uint32_t word;
    c0 = bench_clock_ns(CLOCK_THREAD_CPUTIME_ID);
    ret = syscall(SYS_futex, &word, FUTEX_WAIT_PRIVATE, 0u, &ts, NULL, 0);
    note(r, K_FUTEX, ret, errno, 0, c0);

    c0 = bench_clock_ns(CLOCK_THREAD_CPUTIME_ID);

    ret = write(f->copy[0], copybuf, COPY);
    note(r, K_WRITE64K, ret, errno, COPY, c0);
    long have = ret > 0 ? ret : 0;
    while (have > 0) {
        c0 = bench_clock_ns(CLOCK_THREAD_CPUTIME_ID);
        ret = read(f->copy[1], copybuf, (size_t)have);
        note(r, K_READ64K, ret, errno, have, c0);
        if (ret <= 0 && errno != EINTR)
            die("read(copy)", ret == 0 ? EPIPE : errno);
        if (ret > 0)
            have -= ret;
    }

    c0 = bench_clock_ns(CLOCK_THREAD_CPUTIME_ID);
    void *m =
        mmap(NULL, BIG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    note(r, K_MMAP, m == MAP_FAILED ? -1 : 0, errno, 0, c0);
    if (m != MAP_FAILED) {
        c0 = bench_clock_ns(CLOCK_THREAD_CPUTIME_ID);
        ret = munmap(m, BIG);
        note(r, K_MUNMAP, ret, errno, 0, c0);
    }

    c0 = bench_clock_ns(CLOCK_THREAD_CPUTIME_ID);
    for (size_t i = 0; i < BIG; i += 4096)
        big[i] = (char)i; /* a page fault each: kernel CPU outside any call */
    note(r, K_TOUCH, 0, 0, 0, c0);
    c0 = bench_clock_ns(CLOCK_THREAD_CPUTIME_ID);
    ret = madvise(big, BIG, MADV_DONTNEED);
    note(r, K_MADVISE, ret, errno, 0, c0);

    if (r->user_ns) {
        /* User CPU only: the clock is read through the vDSO. */
        uint64_t until = bench_clock_ns(CLOCK_MONOTONIC) + r->user_ns;
        volatile uint64_t x = 0;
        while (bench_clock_ns(CLOCK_MONOTONIC) < until)
            for (int i = 0; i < 1000; i++)
                x = x * 31 + (uint64_t)i;
    }
}

static void *worker(void *arg)
{
    run_t *r = arg;
    fds_t f;
    fds_open(&f);
    struct pollfd pfd[IDLE_SOCKETS + 1];
    for (int i = 0; i < IDLE_SOCKETS; i++)
        pfd[i] = (struct pollfd){.fd = f.idle[i], .events = POLLIN};
    pfd[IDLE_SOCKETS] = (struct pollfd){.fd = f.ready[0], .events = POLLIN};
    static char copybuf[COPY];
    char *big = mmap(NULL, BIG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (big == MAP_FAILED)
        die("mmap", errno);

    atomic_store(&feeder_stop, 0);
    pthread_t feed;
    if (pthread_create(&feed, NULL, feeder, &f) != 0)
        die("pthread_create", EAGAIN);

    atomic_store(&sig_count, 0);
    atomic_store(&sig_periods, 0);
    atomic_store(&sig_at_sysret, 0);
    atomic_store(&sig_sysret_eintr, 0);
    atomic_store(&sig_at_restart, 0);
    struct rusage ru0, ru1;
    getrusage(RUSAGE_THREAD, &ru0);
    uint64_t cpu0 = bench_clock_ns(CLOCK_THREAD_CPUTIME_ID);
    uint64_t wall0 = bench_clock_ns(CLOCK_MONOTONIC);
    trigger_t t;
    r->err = trigger_start(&t, r->variant, (pid_t)syscall(SYS_gettid), r->signo, r->period_ns);
    if (r->err == 0) {
        while (bench_clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0 < r->cpu_budget_ns) {
            one_cycle(r, &f, pfd, copybuf, big);
            r->cycles++;
        }
    }
    trigger_stop(&t);
    r->cpu_ns = bench_clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0;
    r->wall_ns = bench_clock_ns(CLOCK_MONOTONIC) - wall0;
    getrusage(RUSAGE_THREAD, &ru1);
    r->user_s = (double)(ru1.ru_utime.tv_sec - ru0.ru_utime.tv_sec) +
                (double)(ru1.ru_utime.tv_usec - ru0.ru_utime.tv_usec) / 1e6;
    r->sys_s = (double)(ru1.ru_stime.tv_sec - ru0.ru_stime.tv_sec) +
               (double)(ru1.ru_stime.tv_usec - ru0.ru_stime.tv_usec) / 1e6;
    /* A signal still on its way lands now, before the counts are read. */
    struct timespec settle = {0, 20000000};
    nanosleep(&settle, NULL);
    r->signals = atomic_load(&sig_count);
    r->periods = atomic_load(&sig_periods);
    r->at_sysret = atomic_load(&sig_at_sysret);
    r->sysret_eintr = atomic_load(&sig_sysret_eintr);
    r->at_restart = atomic_load(&sig_at_restart);

    atomic_store(&feeder_stop, 1);
    pthread_join(feed, NULL);
    munmap(big, BIG);
    fds_close(&f);
    return NULL;
}

/* ---- the report --------------------------------------------------------- */

static double per_k(uint64_t n, uint64_t of)
{
    return of ? 1000.0 * (double)n / (double)of : 0.0;
}

/* The thread's CPU time inside the calls and the page faults: kernel time,
 * but for the few instructions of each wrapper and clock read. */
static uint64_t in_calls_ns(const run_t *r)
{
    uint64_t ns = 0;
    for (int k = 0; k < K_COUNT; k++)
        ns += r->k[k].cpu_ns;
    return ns;
}

static double kernel_pct(const run_t *r)
{
    return r->cpu_ns ? 100.0 * (double)in_calls_ns(r) / (double)r->cpu_ns : 0.0;
}

static void print_run(const run_t *r, uint64_t hz)
{
    const char *v = variant_name[r->variant];
    if (r->err) {
        printf("row %-20s %5llu Hz: not armed: %s\n", v, (unsigned long long)hz, strerror(-r->err));
        return;
    }
    double cpu = (double)r->cpu_ns / 1e9;
    uint64_t eintr = 0;
    for (int k = 0; k < K_COUNT; k++)
        eintr += r->k[k].eintr;
    printf("row %-20s %5llu Hz: signals %lu (%.0f per CPU-s, periods %lu), CPU %.2f s in %.1f s "
           "wall, in calls and faults %.2f s (%.0f %%), getrusage user %.2f kernel %.2f s (%.0f "
           "%%, tick-sampled), %llu cycles; signals at syscall exit %lu (%.0f %%), of them "
           "-EINTR %lu; at restart %lu; EINTR %llu (%.1f per 1000 signals)\n",
           v, (unsigned long long)hz, r->signals, cpu > 0 ? (double)r->signals / cpu : 0.0,
           r->periods, cpu, (double)r->wall_ns / 1e9, (double)in_calls_ns(r) / 1e9, kernel_pct(r),
           r->user_s, r->sys_s,
           r->user_s + r->sys_s > 0 ? 100.0 * r->sys_s / (r->user_s + r->sys_s) : 0.0,
           (unsigned long long)r->cycles, r->at_sysret,
           r->signals ? 100.0 * (double)r->at_sysret / (double)r->signals : 0.0, r->sysret_eintr,
           r->at_restart, (unsigned long long)eintr, per_k(eintr, r->signals));
    printf("  %-12s %8s %7s %6s %6s %12s %12s %8s %6s\n", "call", "calls", "EINTR", "short",
           "errors", "EINTR/1k sig", "EINTR/1k call", "CPU s", "CPU %");
    for (int k = 0; k < K_COUNT; k++) {
        const kind_counts_t *c = &r->k[k];
        printf("  %-12s %8llu %7llu %6llu %6llu %12.2f %12.2f %8.3f %6.1f\n", kind_name[k],
               (unsigned long long)c->calls, (unsigned long long)c->eintr,
               (unsigned long long)c->short_io, (unsigned long long)c->other_err,
               per_k(c->eintr, r->signals), per_k(c->eintr, c->calls), (double)c->cpu_ns / 1e9,
               r->cpu_ns ? 100.0 * (double)c->cpu_ns / (double)r->cpu_ns : 0.0);
    }
}

int main(int argc, char **argv)
{
    const char *mode = bench_mode(
        argc, argv,
        "usage: bench_eintr_kernel all|a|b|c|d [--hz H] [--cpu-seconds S] [--user-us U] "
        "[--signal N] [--quick]\n"
        "  a perf task-clock exclude_kernel=1, b exclude_kernel=0, c CPU-time timer, d none\n");
    uint64_t hz = 0, cpu_ns = 4000000000u, signo = SIGURG, quick = 0, user_us = 0;
    int hz_given = 0, cpu_given = 0;
    bench_opt_t opts[] = {
        {"--hz", bench_positive, &hz, &hz_given},
        {"--cpu-seconds", bench_seconds_ns, &cpu_ns, &cpu_given},
        {"--user-us", bench_number, &user_us, NULL},
        {"--signal", bench_positive, &signo, NULL},
        {"--quick", NULL, &quick, NULL},
    };
    bench_parse_opts(argc, argv, 2, opts, sizeof opts / sizeof opts[0]);
    int want[V_COUNT] = {0};
    if (strcmp(mode, "all") == 0) {
        for (int v = 0; v < V_COUNT; v++)
            want[v] = 1;
    } else if (strlen(mode) == 1 && mode[0] >= 'a' && mode[0] < 'a' + V_COUNT) {
        want[mode[0] - 'a'] = 1;
    } else {
        bench_usage();
    }
    if (quick && !cpu_given)
        cpu_ns = 200000000u;
    if (signo >= (uint64_t)SIGRTMAX + 1 || signo == SIGKILL || signo == SIGSTOP)
        bench_usage();
    bench_print_banner("bench_eintr_kernel", (int)quick);
    FILE *pf = fopen("/proc/sys/kernel/perf_event_paranoid", "r");
    int paranoid = -99;
    if (pf) {
        if (fscanf(pf, "%d", &paranoid) != 1)
            paranoid = -99;
        fclose(pf);
    }
    printf("uid %d euid %d, perf_event_paranoid %d, signal %d, %.2f CPU-s per row, %llu us of "
           "user CPU per cycle\n",
           (int)getuid(), (int)geteuid(), paranoid, (int)signo, (double)cpu_ns / 1e9,
           (unsigned long long)user_us);
    if (bench_install_handler((int)signo, on_signal) != 0)
        die("sigaction", errno);

    uint64_t rates[2] = {1000, 4000};
    size_t nrates = 2;
    if (hz_given) {
        rates[0] = hz;
        nrates = 1;
    }
    static run_t runs[V_COUNT][2];
    for (size_t h = 0; h < nrates; h++) {
        for (int v = 0; v < V_COUNT; v++) {
            if (!want[v])
                continue;
            run_t *r = &runs[v][h];
            memset(r, 0, sizeof *r);
            r->variant = v;
            r->signo = (int)signo;
            r->period_ns = 1000000000u / rates[h];
            r->cpu_budget_ns = cpu_ns;
            r->user_ns = user_us * 1000u;
            bench_cpu_times_t m0 = bench_read_cpu_times();
            pthread_t th;
            if (pthread_create(&th, NULL, worker, r) != 0)
                die("pthread_create", EAGAIN);
            pthread_join(th, NULL);
            bench_cpu_times_t m1 = bench_read_cpu_times();
            print_run(r, rates[h]);
            bench_print_machine("  machine", &m0, &m1);
        }
    }

    /* The summary: EINTR per 1000 signals, per call kind that ever failed. */
    printf("summary: EINTR per 1000 signals (calls that never failed left out)\n");
    printf("  %-20s %5s %8s %7s", "variant", "Hz", "signals", "kern%");
    int shown[K_COUNT] = {0};
    for (size_t h = 0; h < nrates; h++)
        for (int v = 0; v < V_COUNT; v++)
            for (int k = 0; k < K_COUNT; k++)
                if (runs[v][h].k[k].eintr)
                    shown[k] = 1;
    for (int k = 0; k < K_COUNT; k++)
        if (shown[k])
            printf(" %11s", kind_name[k]);
    printf(" %8s\n", "all");
    for (size_t h = 0; h < nrates; h++) {
        for (int v = 0; v < V_COUNT; v++) {
            const run_t *r = &runs[v][h];
            if (!want[v])
                continue;
            if (r->err) {
                printf("  %-20s %5llu  not armed: %s\n", variant_name[v],
                       (unsigned long long)rates[h], strerror(-r->err));
                continue;
            }
            printf("  %-20s %5llu %8lu %6.0f%%", variant_name[v], (unsigned long long)rates[h],
                   r->signals, kernel_pct(r));
            uint64_t all = 0;
            for (int k = 0; k < K_COUNT; k++) {
                all += r->k[k].eintr;
                if (shown[k])
                    printf(" %11.2f", per_k(r->k[k].eintr, r->signals));
            }
            printf(" %8.2f\n", per_k(all, r->signals));
        }
    }
    return 0;
}
