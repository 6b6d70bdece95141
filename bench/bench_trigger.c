/* bench_trigger: the workloads of issue 10's benchmark. bench_trigger.sh runs
 * them under perf, gperftools and snapprof; each prints the truth it measured
 * with its own thread CPU clocks as one machine-readable line on stdout.
 *
 * Usage: bench_trigger ratio --threads N (--cpu-seconds S | --iters N) [--floor HZ]
 *        bench_trigger eintr --busy N --cpu-seconds S
 *        bench_trigger churn --threads-total N --creators C --units U
 *        bench_trigger calibrate
 *        bench_trigger spin
 *
 * It links nothing of snapprof: every profiler sees the same plain program.
 * The hot functions keep frame pointers (the build's flags) and are never
 * inlined or cloned, so every profiler can name them. */
#include "bench_util.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

/* One unit of work is about 0.6 us on the project's VMs (the calibrate mode
 * says what it is here). The ratio program's hot_a, hot_b and hot_c do 5, 3
 * and 2 times RATIO_UNITS units per call (50/30/20; 0.6, 0.37 and 0.24 ms),
 * long next to the thread-CPU clock read between them (1.5 us here: a
 * syscall), whose cost the truth subtracts anyway. */
#define MIX_PER_UNIT 256u
#define RATIO_UNITS 200u
#define THREAD_MAX 1024

static void die(const char *what)
{
    fprintf(stderr, "bench_trigger: %s: %s\n", what, strerror(errno));
    exit(1);
}

static uint64_t thread_cpu_ns(void)
{
    return bench_clock_ns(CLOCK_THREAD_CPUTIME_ID);
}

static uint64_t tv_ns(struct timeval tv)
{
    return (uint64_t)tv.tv_sec * 1000000000u + (uint64_t)tv.tv_usec * 1000u;
}

/* The work itself: a chain of multiply-xorshift steps (murmur3's finalizer),
 * each depending on the last, so the CPU cannot skip or batch it. A macro,
 * not an inline function, so that debug info names no inlined frame below
 * the hot functions: their samples are theirs, whatever the symbolizer. */
#define MIX(x, n)                                                                                  \
    do {                                                                                           \
        for (uint64_t mix_i = 0; mix_i < (n); mix_i++) {                                           \
            (x) ^= (x) >> 33;                                                                      \
            (x) *= 0xff51afd7ed558ccdull;                                                          \
            (x) ^= (x) >> 29;                                                                      \
            (x) += mix_i;                                                                          \
        }                                                                                          \
    } while (0)

/* Results land here so the compiler keeps the work. */
static _Atomic uint64_t g_sink;

/* The three hot functions differ in their constants so that no compiler pass
 * folds them into one. Each publishes its result through a volatile store:
 * a function without side effects may be moved across the clock reads that
 * time it (GCC found them const and scheduled all three inside hot_a's
 * interval). noipa (GCC) also rules out inlining, cloning (hot_a.constprop.0)
 * and any other conclusion drawn from the body. */
#if defined(__clang__)
#define HOT __attribute__((noinline))
#else
#define HOT __attribute__((noipa))
#endif
static volatile uint64_t g_published;
/* GCC 12 sets up no frame record in a leaf that needs no stack, whatever
 * -mno-omit-leaf-frame-pointer says; taking the frame's address makes it. */
static void *volatile g_published_frame;
#define PUBLISH(x) (g_published = (x), g_published_frame = __builtin_frame_address(0))

HOT uint64_t hot_a(uint64_t x, uint64_t units);
HOT uint64_t hot_b(uint64_t x, uint64_t units);
HOT uint64_t hot_c(uint64_t x, uint64_t units);

uint64_t hot_a(uint64_t x, uint64_t units)
{
    x += 0xa;
    MIX(x, 5 * units * MIX_PER_UNIT);
    PUBLISH(x);
    return x;
}

uint64_t hot_b(uint64_t x, uint64_t units)
{
    x += 0xb;
    MIX(x, 3 * units * MIX_PER_UNIT);
    PUBLISH(x);
    return x;
}

uint64_t hot_c(uint64_t x, uint64_t units)
{
    x += 0xc;
    MIX(x, 2 * units * MIX_PER_UNIT);
    PUBLISH(x);
    return x;
}

/* ------------------------------------------------------------------------ */
/* The floor: a per-thread perf CPU-clock overflow signal to an empty handler */
/* ------------------------------------------------------------------------ */

/* The least a signal-per-sample profiler timed by the thread's own CPU clock
 * can cost: the kernel's overflow, the signal delivery, a handler that only
 * counts, and the signal return. The event runs on its own, as snapprof's
 * does: no re-arming in the handler. */
static _Thread_local int t_floor_fd = -1;
static _Thread_local uint64_t t_floor_signals;

/* Async-signal-safe. */
static void floor_handler(int signo, siginfo_t *info, void *uc)
{
    (void)signo;
    (void)info;
    (void)uc;
    t_floor_signals++;
}

static int floor_signal(void)
{
    return SIGRTMIN + 4;
}

static void floor_install(void)
{
    if (bench_install_handler(floor_signal(), floor_handler) != 0)
        die("sigaction");
}

/* Opens and arms this thread's event: PERF_COUNT_SW_TASK_CLOCK counts the
 * thread's CPU time in ns, exclude_kernel makes it overflow only in user
 * mode, and the overflow signal goes to this thread (F_OWNER_TID). */
static void floor_arm(unsigned hz)
{
    struct perf_event_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.size = sizeof attr;
    attr.type = PERF_TYPE_SOFTWARE;
    attr.config = PERF_COUNT_SW_TASK_CLOCK;
    attr.sample_period = 1000000000u / hz;
    attr.disabled = 1;
    attr.exclude_kernel = 1;
    attr.exclude_hv = 1;
    int fd = (int)syscall(SYS_perf_event_open, &attr, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
    if (fd < 0)
        die("perf_event_open (the floor)");
    struct f_owner_ex owner = {F_OWNER_TID, (pid_t)syscall(SYS_gettid)};
    if (fcntl(fd, F_SETFL, O_ASYNC) != 0 || fcntl(fd, F_SETSIG, floor_signal()) != 0 ||
        fcntl(fd, F_SETOWN_EX, &owner) != 0)
        die("fcntl (the floor)");
    t_floor_fd = fd;
    if (ioctl(fd, PERF_EVENT_IOC_ENABLE, 0) != 0)
        die("PERF_EVENT_IOC_ENABLE (the floor)");
}

static uint64_t floor_disarm(void)
{
    int fd = t_floor_fd;
    ioctl(fd, PERF_EVENT_IOC_DISABLE, 0);
    t_floor_fd = -1;
    close(fd);
    return t_floor_signals;
}

/* ------------------------------------------------------------------------ */
/* ratio: threads split their CPU 50/30/20 between hot_a, hot_b and hot_c     */
/* ------------------------------------------------------------------------ */

typedef struct ratio_cfg {
    int threads;
    uint64_t budget_ns; /* each thread works until its CPU clock reaches this */
    uint64_t iters;     /* or for this many a-b-c rounds */
    unsigned floor_hz;
} ratio_cfg_t;

typedef struct ratio_out {
    uint64_t ns[3];  /* CPU time inside hot_a, hot_b, hot_c */
    uint64_t cpu_ns; /* the thread's whole CPU time */
    uint64_t iters;
    uint64_t floor_signals;
    uint64_t read_ns; /* one clock read, subtracted from each interval */
} ratio_out_t;

typedef struct ratio_arg {
    const ratio_cfg_t *cfg;
    ratio_out_t out;
} ratio_arg_t;

/* What one thread-CPU clock read costs this thread: the least of three
 * batches, so that a sample landing in one does not count. An interval
 * between two reads holds one whole read (the end of the first, the start of
 * the second), spent in clock_gettime, not in the function timed. */
static uint64_t clock_read_ns(void)
{
    uint64_t best = UINT64_MAX;
    for (int k = 0; k < 3; k++) {
        uint64_t t0 = thread_cpu_ns();
        for (int i = 0; i < 63; i++)
            thread_cpu_ns();
        uint64_t d = (thread_cpu_ns() - t0) / 64;
        if (d < best)
            best = d;
    }
    return best;
}

static void *ratio_thread(void *p)
{
    ratio_arg_t *arg = p;
    const ratio_cfg_t *cfg = arg->cfg;
    if (cfg->floor_hz)
        floor_arm(cfg->floor_hz);
    uint64_t read_ns = clock_read_ns();
    uint64_t x = (uint64_t)(uintptr_t)p, sum[3] = {0, 0, 0}, n = 0;
    uint64_t t0 = thread_cpu_ns(), start = t0;
    for (;;) {
        /* The clock read between two calls closes one and opens the next. */
        x = hot_a(x, RATIO_UNITS);
        uint64_t t1 = thread_cpu_ns();
        x = hot_b(x, RATIO_UNITS);
        uint64_t t2 = thread_cpu_ns();
        x = hot_c(x, RATIO_UNITS);
        uint64_t t3 = thread_cpu_ns();
        sum[0] += t1 - t0;
        sum[1] += t2 - t1;
        sum[2] += t3 - t2;
        n++;
        t0 = t3;
        if (cfg->iters ? n >= cfg->iters : t3 - start >= cfg->budget_ns)
            break;
    }
    if (cfg->floor_hz)
        arg->out.floor_signals = floor_disarm();
    atomic_fetch_add_explicit(&g_sink, x, memory_order_relaxed);
    for (int k = 0; k < 3; k++)
        arg->out.ns[k] = sum[k] > n * read_ns ? sum[k] - n * read_ns : 0;
    arg->out.read_ns = read_ns;
    arg->out.iters = n;
    arg->out.cpu_ns = thread_cpu_ns();
    return NULL;
}

/* The shared tail of every mode's line: the process's own CPU accounting. */
static void print_process(uint64_t wall_start)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf(" main_cpu_ns=%llu process_cpu_ns=%llu utime_ns=%llu stime_ns=%llu wall_ns=%llu\n",
           (unsigned long long)thread_cpu_ns(),
           (unsigned long long)bench_clock_ns(CLOCK_PROCESS_CPUTIME_ID),
           (unsigned long long)tv_ns(ru.ru_utime), (unsigned long long)tv_ns(ru.ru_stime),
           (unsigned long long)(bench_clock_ns(CLOCK_MONOTONIC) - wall_start));
}

static int run_ratio(const ratio_cfg_t *cfg)
{
    uint64_t wall = bench_clock_ns(CLOCK_MONOTONIC);
    if (cfg->floor_hz)
        floor_install();
    pthread_t tid[THREAD_MAX];
    static ratio_arg_t args[THREAD_MAX];
    for (int i = 0; i < cfg->threads; i++) {
        args[i].cfg = cfg;
        errno = pthread_create(&tid[i], NULL, ratio_thread, &args[i]);
        if (errno)
            die("pthread_create");
    }
    uint64_t ns[3] = {0, 0, 0}, cpu = 0, iters = 0, signals = 0, read_ns = 0;
    for (int i = 0; i < cfg->threads; i++) {
        pthread_join(tid[i], NULL);
        for (int k = 0; k < 3; k++)
            ns[k] += args[i].out.ns[k];
        cpu += args[i].out.cpu_ns;
        iters += args[i].out.iters;
        signals += args[i].out.floor_signals;
        read_ns += args[i].out.read_ns;
    }
    printf("BENCH_TRIGGER ratio threads=%d iters=%llu hot_a_ns=%llu hot_b_ns=%llu hot_c_ns=%llu "
           "workers_cpu_ns=%llu clock_read_ns=%llu floor_hz=%u floor_signals=%llu",
           cfg->threads, (unsigned long long)iters, (unsigned long long)ns[0],
           (unsigned long long)ns[1], (unsigned long long)ns[2], (unsigned long long)cpu,
           (unsigned long long)(read_ns / (uint64_t)cfg->threads), cfg->floor_hz,
           (unsigned long long)signals);
    print_process(wall);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* eintr: sleeping threads beside busy ones count their early returns        */
/* ------------------------------------------------------------------------ */

static atomic_int g_stop;

typedef struct sleeper {
    uint64_t calls, eintr;
} sleeper_t;

#define SLEEP_NS 1000000 /* each sleeper wakes every millisecond */

static void *sleep_nanosleep(void *p)
{
    sleeper_t *s = p;
    while (!atomic_load(&g_stop)) {
        struct timespec ts = {0, SLEEP_NS};
        s->calls++;
        if (nanosleep(&ts, NULL) != 0 && errno == EINTR)
            s->eintr++;
    }
    return NULL;
}

/* poll on a pipe that never becomes readable, with a 1 ms timeout. */
static void *sleep_poll(void *p)
{
    sleeper_t *s = p;
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0)
        die("pipe2");
    while (!atomic_load(&g_stop)) {
        struct pollfd pfd = {fds[0], POLLIN, 0};
        s->calls++;
        if (poll(&pfd, 1, SLEEP_NS / 1000000) < 0 && errno == EINTR)
            s->eintr++;
    }
    close(fds[0]);
    close(fds[1]);
    return NULL;
}

/* read on a timerfd that expires every millisecond. A handler installed with
 * SA_RESTART restarts this read in the kernel; one without returns EINTR. */
static void *sleep_read(void *p)
{
    sleeper_t *s = p;
    int fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);
    if (fd < 0)
        die("timerfd_create");
    struct itimerspec its = {{0, SLEEP_NS}, {0, SLEEP_NS}};
    if (timerfd_settime(fd, 0, &its, NULL) != 0)
        die("timerfd_settime");
    while (!atomic_load(&g_stop)) {
        uint64_t expirations;
        s->calls++;
        if (read(fd, &expirations, sizeof expirations) < 0 && errno == EINTR)
            s->eintr++;
    }
    close(fd);
    return NULL;
}

static void *busy_thread(void *p)
{
    uint64_t budget = *(const uint64_t *)p, x = 1;
    uint64_t start = thread_cpu_ns();
    while (thread_cpu_ns() - start < budget)
        x = hot_a(x, RATIO_UNITS);
    atomic_fetch_add_explicit(&g_sink, x, memory_order_relaxed);
    return NULL;
}

static int run_eintr(int busy, uint64_t budget_ns)
{
    uint64_t wall = bench_clock_ns(CLOCK_MONOTONIC);
    static sleeper_t sl[3];
    void *(*fn[3])(void *) = {sleep_nanosleep, sleep_poll, sleep_read};
    pthread_t stid[3], btid[THREAD_MAX];
    for (int i = 0; i < 3; i++) {
        errno = pthread_create(&stid[i], NULL, fn[i], &sl[i]);
        if (errno)
            die("pthread_create");
    }
    for (int i = 0; i < busy; i++) {
        errno = pthread_create(&btid[i], NULL, busy_thread, &budget_ns);
        if (errno)
            die("pthread_create");
    }
    for (int i = 0; i < busy; i++)
        pthread_join(btid[i], NULL);
    atomic_store(&g_stop, 1);
    for (int i = 0; i < 3; i++)
        pthread_join(stid[i], NULL);
    printf("BENCH_TRIGGER eintr busy=%d nanosleep_calls=%llu nanosleep_eintr=%llu "
           "poll_calls=%llu poll_eintr=%llu read_calls=%llu read_eintr=%llu",
           busy, (unsigned long long)sl[0].calls, (unsigned long long)sl[0].eintr,
           (unsigned long long)sl[1].calls, (unsigned long long)sl[1].eintr,
           (unsigned long long)sl[2].calls, (unsigned long long)sl[2].eintr);
    print_process(wall);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* churn: create and join short threads                                      */
/* ------------------------------------------------------------------------ */

typedef struct churn_cfg {
    uint64_t per_creator; /* threads each creator starts, one at a time */
    uint64_t units;       /* work per thread */
} churn_cfg_t;

static _Atomic uint64_t g_churn_work_ns;

static void *churn_thread(void *p)
{
    const churn_cfg_t *cfg = p;
    /* hot_c does 2 units per unit asked, so ask half. */
    uint64_t x = hot_c((uint64_t)(uintptr_t)p, cfg->units / 2);
    atomic_fetch_add_explicit(&g_sink, x, memory_order_relaxed);
    atomic_fetch_add_explicit(&g_churn_work_ns, thread_cpu_ns(), memory_order_relaxed);
    return NULL;
}

static void *churn_creator(void *p)
{
    const churn_cfg_t *cfg = p;
    for (uint64_t i = 0; i < cfg->per_creator; i++) {
        pthread_t t;
        errno = pthread_create(&t, NULL, churn_thread, p);
        if (errno)
            die("pthread_create");
        pthread_join(t, NULL);
    }
    return NULL;
}

static int run_churn(uint64_t total, int creators, uint64_t units)
{
    uint64_t wall = bench_clock_ns(CLOCK_MONOTONIC);
    churn_cfg_t cfg = {(total + (uint64_t)creators - 1) / (uint64_t)creators, units};
    pthread_t tid[THREAD_MAX];
    for (int i = 0; i < creators; i++) {
        errno = pthread_create(&tid[i], NULL, churn_creator, &cfg);
        if (errno)
            die("pthread_create");
    }
    for (int i = 0; i < creators; i++)
        pthread_join(tid[i], NULL);
    printf("BENCH_TRIGGER churn threads=%llu creators=%d units=%llu work_cpu_ns=%llu",
           (unsigned long long)(cfg.per_creator * (uint64_t)creators), creators,
           (unsigned long long)units, (unsigned long long)atomic_load(&g_churn_work_ns));
    print_process(wall);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* calibrate, spin                                                           */
/* ------------------------------------------------------------------------ */

/* The CPU time of one unit of work here: the median of 11 timed calls. */
static int run_calibrate(void)
{
    uint64_t v[11], x = 1;
    const uint64_t units = 1000;
    for (int i = 0; i < 11; i++) {
        uint64_t t0 = thread_cpu_ns();
        x = hot_c(x, units / 2);
        v[i] = thread_cpu_ns() - t0;
    }
    for (int i = 1; i < 11; i++)
        for (int k = i; k > 0 && v[k - 1] > v[k]; k--) {
            uint64_t t = v[k];
            v[k] = v[k - 1];
            v[k - 1] = t;
        }
    atomic_fetch_add_explicit(&g_sink, x, memory_order_relaxed);
    printf("BENCH_TRIGGER calibrate unit_ns=%.1f\n", (double)v[5] / (double)units);
    return 0;
}

/* A busy process beside the program (the driver starts and kills it). */
static void run_spin(void) __attribute__((noreturn));
static void run_spin(void)
{
    uint64_t x = 1;
    for (;;) {
        x = hot_a(x, RATIO_UNITS);
        atomic_store_explicit(&g_sink, x, memory_order_relaxed);
    }
}

/* ------------------------------------------------------------------------ */
/* Main                                                                     */
/* ------------------------------------------------------------------------ */

int main(int argc, char **argv)
{
    const char *mode = bench_mode(
        argc, argv,
        "usage: bench_trigger ratio --threads N (--cpu-seconds S | --iters N) [--floor HZ]\n"
        "       bench_trigger eintr --busy N --cpu-seconds S\n"
        "       bench_trigger churn --threads-total N --creators C --units U\n"
        "       bench_trigger calibrate\n"
        "       bench_trigger spin\n");
    uint64_t threads = 0, iters = 0, budget = 0, floor_hz = 0, busy = 0, total = 0, creators = 0,
             units = 0;
    const bench_opt_t opts[] = {
        {"--threads", bench_positive, &threads, NULL},
        {"--iters", bench_positive, &iters, NULL},
        {"--cpu-seconds", bench_seconds_ns, &budget, NULL},
        {"--floor", bench_positive, &floor_hz, NULL},
        {"--busy", bench_positive, &busy, NULL},
        {"--threads-total", bench_positive, &total, NULL},
        {"--creators", bench_positive, &creators, NULL},
        {"--units", bench_positive, &units, NULL},
    };
    bench_parse_opts(argc, argv, 2, opts, sizeof opts / sizeof opts[0]);
    if (strcmp(mode, "ratio") == 0) {
        if (threads == 0 || threads > THREAD_MAX || (!iters == !budget) || floor_hz > 100000)
            bench_usage();
        ratio_cfg_t cfg = {(int)threads, budget, iters, (unsigned)floor_hz};
        return run_ratio(&cfg);
    }
    if (strcmp(mode, "eintr") == 0) {
        if (busy == 0 || busy > THREAD_MAX || budget == 0)
            bench_usage();
        return run_eintr((int)busy, budget);
    }
    if (strcmp(mode, "churn") == 0) {
        if (total == 0 || creators == 0 || creators > THREAD_MAX || units < 2)
            bench_usage();
        return run_churn(total, (int)creators, units);
    }
    if (strcmp(mode, "calibrate") == 0)
        return run_calibrate();
    if (strcmp(mode, "spin") == 0)
        run_spin();
    bench_usage();
}
