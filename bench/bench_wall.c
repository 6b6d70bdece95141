/* bench_wall: the workloads of issue 11's benchmark (wall mode). bench_wall.sh
 * runs them under gperftools' wall mode and snapprof record --wall; each
 * prints what it measured itself as one machine-readable line on stdout.
 *
 * Usage: bench_wall sleepers --seconds S [--wait-us W] [--work-us U]
 *        bench_wall cost --threads N --seconds S (--blocked | --wait-us W) [--stack-kib K]
 *        bench_wall calibrate
 *
 * sleepers: three threads wait in nanosleep, a pipe read and
 * pthread_cond_timedwait (sleeper_nanosleep, sleeper_read, sleeper_cond),
 * each doing U us of CPU work after every W us wait, beside one busy thread,
 * for S seconds. Each counts its early returns: EINTR, or a timed wait that
 * returned before its deadline although nothing woke it. The line also
 * gives every thread's tid, elapsed time and CPU time, so that the driver
 * can hold a profile's per-thread wall totals against them.
 *
 * cost: N threads that either block in a read for the whole run (--blocked:
 * a wall profiler can reuse their stack on every tick) or wake every W us
 * and go straight back to sleep (a new copy on every tick), each with a
 * K KiB frame below the wait, so that the copy is about that size.
 *
 * calibrate: what the system calls a wall sample of a blocked thread is made
 * of cost on this machine, with no profiler: a bare one (getppid), a pread of
 * a sleeping thread's /proc/self/task/TID/syscall, a read of its CPU clock,
 * and a process_vm_readv of 16 KiB of its stack. A paravirtualized VM can
 * make every one of them several times dearer than on bare metal.
 *
 * It links nothing of snapprof: every profiler sees the same plain program. */
#include "bench_util.h"

#include <alloca.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define THREAD_MAX 256

static void die(const char *what, int err)
{
    fprintf(stderr, "bench_wall: %s: %s\n", what, strerror(err));
    exit(1);
}

static struct timespec ns_ts(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
    return ts;
}

/* Never inlined, cloned or merged, so every profiler can name them. */
#if defined(__clang__)
#define NAMED __attribute__((noinline))
#else
#define NAMED __attribute__((noipa))
#endif

/* Results land here so the compiler keeps the work. */
static _Atomic uint64_t g_sink;

/* Burns the calling thread's CPU clock for ns: a multiply-xorshift chain
 * (murmur3's finalizer) checked against the clock every few thousand steps. */
NAMED void work_for(uint64_t ns);
void work_for(uint64_t ns)
{
    uint64_t x = ns, end = bench_clock_ns(CLOCK_THREAD_CPUTIME_ID) + ns;
    do {
        for (int i = 0; i < 4096; i++) {
            x ^= x >> 33;
            x *= 0xff51afd7ed558ccdull;
            x ^= x >> 29;
            x += (uint64_t)i;
        }
    } while (bench_clock_ns(CLOCK_THREAD_CPUTIME_ID) < end);
    atomic_fetch_add_explicit(&g_sink, x, memory_order_relaxed);
}

/* ------------------------------------------------------------------------ */
/* sleepers                                                                 */
/* ------------------------------------------------------------------------ */

typedef struct sleepers_cfg {
    uint64_t run_ns, wait_ns, work_ns;
    uint64_t start; /* CLOCK_MONOTONIC */
    int pipe_rd, pipe_wr;
    pthread_mutex_t mu;
    pthread_cond_t cond; /* never signalled: every return is a timeout or early */
} sleepers_cfg_t;

typedef struct thread_out {
    const char *name;
    pid_t tid;
    uint64_t waits, early, elapsed_ns, cpu_ns;
} thread_out_t;

typedef struct sleeper_arg {
    sleepers_cfg_t *cfg;
    thread_out_t out;
} sleeper_arg_t;

static atomic_int g_stop;

static void thread_begin(thread_out_t *out, const char *name, uint64_t *t0)
{
    out->name = name;
    out->tid = (pid_t)syscall(SYS_gettid);
    pthread_setname_np(pthread_self(), name);
    *t0 = bench_clock_ns(CLOCK_MONOTONIC);
}

static void thread_end(thread_out_t *out, uint64_t t0)
{
    out->cpu_ns = bench_clock_ns(CLOCK_THREAD_CPUTIME_ID);
    out->elapsed_ns = bench_clock_ns(CLOCK_MONOTONIC) - t0;
}

/* Sleeps wait_ns at a time, works, and writes a byte to the pipe that
 * sleeper_read waits on, so that thread wakes at the same pace. An EINTR is
 * counted and the rest of the sleep slept (the pace stays the same). */
NAMED void *sleeper_nanosleep(void *p);
void *sleeper_nanosleep(void *p)
{
    sleeper_arg_t *a = p;
    sleepers_cfg_t *cfg = a->cfg;
    uint64_t t0;
    thread_begin(&a->out, "sleep_nanosleep", &t0);
    while (!atomic_load(&g_stop)) {
        struct timespec ts = ns_ts(cfg->wait_ns), rem;
        a->out.waits++;
        while (nanosleep(&ts, &rem) != 0 && errno == EINTR) {
            a->out.early++;
            ts = rem;
        }
        work_for(cfg->work_ns);
        char c = 1;
        if (write(cfg->pipe_wr, &c, 1) != 1)
            die("write", errno);
    }
    close(cfg->pipe_wr); /* sleeper_read's last read returns 0 */
    thread_end(&a->out, t0);
    return NULL;
}

/* Waits for sleeper_nanosleep's byte. A handler installed with SA_RESTART
 * restarts a pipe read in the kernel; one without returns EINTR. */
NAMED void *sleeper_read(void *p);
void *sleeper_read(void *p)
{
    sleeper_arg_t *a = p;
    sleepers_cfg_t *cfg = a->cfg;
    uint64_t t0;
    thread_begin(&a->out, "sleep_read", &t0);
    for (;;) {
        char c;
        a->out.waits++;
        ssize_t n = read(cfg->pipe_rd, &c, 1);
        if (n == 0)
            break;
        if (n < 0) {
            if (errno != EINTR)
                die("read", errno);
            a->out.early++;
            continue;
        }
        work_for(cfg->work_ns);
    }
    thread_end(&a->out, t0);
    return NULL;
}

/* Waits wait_ns on a condition variable nobody signals: a return before the
 * deadline is an early one (glibc returns 0 when a signal ends its futex
 * wait). */
NAMED void *sleeper_cond(void *p);
void *sleeper_cond(void *p)
{
    sleeper_arg_t *a = p;
    sleepers_cfg_t *cfg = a->cfg;
    uint64_t t0;
    thread_begin(&a->out, "sleep_cond", &t0);
    pthread_mutex_lock(&cfg->mu);
    while (!atomic_load(&g_stop)) {
        uint64_t deadline = bench_clock_ns(CLOCK_REALTIME) + cfg->wait_ns;
        struct timespec ts = ns_ts(deadline);
        a->out.waits++;
        int rc = pthread_cond_timedwait(&cfg->cond, &cfg->mu, &ts);
        if (rc != ETIMEDOUT && bench_clock_ns(CLOCK_REALTIME) < deadline)
            a->out.early++;
        pthread_mutex_unlock(&cfg->mu);
        work_for(cfg->work_ns);
        pthread_mutex_lock(&cfg->mu);
    }
    pthread_mutex_unlock(&cfg->mu);
    thread_end(&a->out, t0);
    return NULL;
}

/* Works without a pause until the run's time is up. */
NAMED void *busy(void *p);
void *busy(void *p)
{
    sleeper_arg_t *a = p;
    uint64_t t0;
    thread_begin(&a->out, "busy", &t0);
    while (bench_clock_ns(CLOCK_MONOTONIC) - a->cfg->start < a->cfg->run_ns)
        work_for(1000000);
    atomic_store(&g_stop, 1);
    thread_end(&a->out, t0);
    return NULL;
}

static void print_thread(const thread_out_t *o, const char *key)
{
    printf(" %s_tid=%d %s_waits=%llu %s_early=%llu %s_elapsed_ns=%llu %s_cpu_ns=%llu", key,
           (int)o->tid, key, (unsigned long long)o->waits, key, (unsigned long long)o->early, key,
           (unsigned long long)o->elapsed_ns, key, (unsigned long long)o->cpu_ns);
}

static int run_sleepers(uint64_t run_ns, uint64_t wait_ns, uint64_t work_ns)
{
    static sleepers_cfg_t cfg;
    uint64_t t0 = bench_clock_ns(CLOCK_MONOTONIC);
    cfg.run_ns = run_ns;
    cfg.wait_ns = wait_ns;
    cfg.work_ns = work_ns;
    cfg.start = t0;
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0)
        die("pipe2", errno);
    cfg.pipe_rd = fds[0];
    cfg.pipe_wr = fds[1];
    pthread_mutex_init(&cfg.mu, NULL);
    pthread_cond_init(&cfg.cond, NULL);
    static sleeper_arg_t arg[4];
    void *(*fn[4])(void *) = {sleeper_nanosleep, sleeper_read, sleeper_cond, busy};
    const char *key[4] = {"nanosleep", "read", "cond", "busy"};
    pthread_t tid[4];
    for (int i = 0; i < 4; i++) {
        arg[i].cfg = &cfg;
        int err = pthread_create(&tid[i], NULL, fn[i], &arg[i]);
        if (err)
            die("pthread_create", err);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(tid[i], NULL);
    close(cfg.pipe_rd);
    printf("BENCH_WALL sleepers wait_us=%llu work_us=%llu", (unsigned long long)(wait_ns / 1000),
           (unsigned long long)(work_ns / 1000));
    for (int i = 0; i < 4; i++)
        print_thread(&arg[i].out, key[i]);
    printf(" main_tid=%d main_elapsed_ns=%llu main_cpu_ns=%llu process_cpu_ns=%llu\n",
           (int)getpid(), (unsigned long long)(bench_clock_ns(CLOCK_MONOTONIC) - t0),
           (unsigned long long)bench_clock_ns(CLOCK_THREAD_CPUTIME_ID),
           (unsigned long long)bench_clock_ns(CLOCK_PROCESS_CPUTIME_ID));
    return 0;
}

/* ------------------------------------------------------------------------ */
/* cost                                                                     */
/* ------------------------------------------------------------------------ */

typedef struct cost_cfg {
    uint64_t wait_ns; /* 0: block in a read until the end */
    size_t stack_bytes;
    int pipe_rd;
} cost_cfg_t;

static _Atomic uint64_t g_cost_waits;

/* The wait, below the frame that holds the stack. */
NAMED void cost_wait(const cost_cfg_t *cfg);
void cost_wait(const cost_cfg_t *cfg)
{
    uint64_t waits = 0;
    if (cfg->wait_ns == 0) {
        char c;
        /* Blocks until main closes the write end. */
        while (read(cfg->pipe_rd, &c, 1) < 0 && errno == EINTR)
            waits++;
    } else {
        while (!atomic_load(&g_stop)) {
            struct timespec ts = ns_ts(cfg->wait_ns);
            nanosleep(&ts, NULL);
            waits++;
        }
    }
    atomic_fetch_add_explicit(&g_cost_waits, waits, memory_order_relaxed);
}

/* A frame of stack_bytes, touched, so that a copy from the wait's sp up to
 * the stack's base holds about that much. */
NAMED void *cost_thread(void *p);
void *cost_thread(void *p)
{
    const cost_cfg_t *cfg = p;
    volatile char *frame = alloca(cfg->stack_bytes);
    for (size_t i = 0; i < cfg->stack_bytes; i += 64)
        frame[i] = (char)i;
    cost_wait(cfg);
    frame[0] = 1;
    return NULL;
}

static int run_cost(int threads, uint64_t run_ns, uint64_t wait_ns, uint64_t stack_kib)
{
    static cost_cfg_t cfg;
    uint64_t t0 = bench_clock_ns(CLOCK_MONOTONIC);
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0)
        die("pipe2", errno);
    cfg.wait_ns = wait_ns;
    cfg.stack_bytes = stack_kib * 1024;
    cfg.pipe_rd = fds[0];
    pthread_t tid[THREAD_MAX];
    for (int i = 0; i < threads; i++) {
        int err = pthread_create(&tid[i], NULL, cost_thread, &cfg);
        if (err)
            die("pthread_create", err);
    }
    /* The main thread waits in a join, a futex wait glibc restarts. */
    struct timespec ts = ns_ts(run_ns);
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
    atomic_store(&g_stop, 1);
    close(fds[1]);
    for (int i = 0; i < threads; i++)
        pthread_join(tid[i], NULL);
    close(fds[0]);
    printf("BENCH_WALL cost threads=%d wait_us=%llu stack_kib=%llu waits=%llu elapsed_ns=%llu "
           "process_cpu_ns=%llu\n",
           threads, (unsigned long long)(wait_ns / 1000), (unsigned long long)stack_kib,
           (unsigned long long)atomic_load(&g_cost_waits),
           (unsigned long long)(bench_clock_ns(CLOCK_MONOTONIC) - t0),
           (unsigned long long)bench_clock_ns(CLOCK_PROCESS_CPUTIME_ID));
    return 0;
}

/* ------------------------------------------------------------------------ */
/* calibrate                                                                */
/* ------------------------------------------------------------------------ */

#define CAL_KIB 16

typedef struct cal_target {
    atomic_int ready;
    pid_t tid;
    volatile char stack[CAL_KIB * 1024];
    int pipe_rd;
} cal_target_t;

static void *cal_thread(void *p)
{
    cal_target_t *t = p;
    t->tid = (pid_t)syscall(SYS_gettid);
    for (size_t i = 0; i < sizeof t->stack; i += 64)
        t->stack[i] = (char)i;
    atomic_store(&t->ready, 1);
    char c;
    while (read(t->pipe_rd, &c, 1) < 0 && errno == EINTR) {
    }
    return NULL;
}

static int by_value(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* The median over 15 batches of 200 calls of what one call costs the
 * calling thread's CPU clock, in ns. */
#define CAL_MEDIAN(out, call)                                                                      \
    do {                                                                                           \
        uint64_t v_[15];                                                                           \
        for (int b_ = 0; b_ < 15; b_++) {                                                          \
            uint64_t t0_ = bench_clock_ns(CLOCK_THREAD_CPUTIME_ID);                                \
            for (int i_ = 0; i_ < 200; i_++) {                                                     \
                call;                                                                              \
            }                                                                                      \
            v_[b_] = (bench_clock_ns(CLOCK_THREAD_CPUTIME_ID) - t0_) / 200;                        \
        }                                                                                          \
        qsort(v_, 15, sizeof v_[0], by_value);                                                     \
        (out) = v_[7];                                                                             \
    } while (0)

static int run_calibrate(void)
{
    static cal_target_t t;
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0)
        die("pipe2", errno);
    t.pipe_rd = fds[0];
    pthread_t th;
    int err = pthread_create(&th, NULL, cal_thread, &t);
    if (err)
        die("pthread_create", err);
    while (!atomic_load(&t.ready))
        sched_yield();
    struct timespec ms = {0, 20000000};
    nanosleep(&ms, NULL); /* until it waits in its read */
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/self/task/%d/syscall", (int)t.tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        die(path, errno);
    clockid_t cid;
    err = pthread_getcpuclockid(th, &cid);
    if (err)
        die("pthread_getcpuclockid", err);
    static char copy[CAL_KIB * 1024];
    struct iovec local = {copy, sizeof copy}, remote = {(void *)t.stack, sizeof copy};
    pid_t pid = getpid();
    uint64_t bare, proc, cpu, vm;
    CAL_MEDIAN(bare, syscall(SYS_getppid));
    CAL_MEDIAN(proc, if (pread(fd, buf, sizeof buf, 0) <= 0) die("pread", errno));
    CAL_MEDIAN(cpu, bench_clock_ns(cid));
    CAL_MEDIAN(vm, if (process_vm_readv(pid, &local, 1, &remote, 1, 0) != (ssize_t)sizeof copy)
                       die("process_vm_readv", errno));
    close(fd);
    close(fds[1]);
    pthread_join(th, NULL);
    close(fds[0]);
    printf(
        "BENCH_WALL calibrate syscall_ns=%llu proc_syscall_pread_ns=%llu thread_cpu_clock_ns=%llu "
        "process_vm_readv_16k_ns=%llu\n",
        (unsigned long long)bare, (unsigned long long)proc, (unsigned long long)cpu,
        (unsigned long long)vm);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Main                                                                     */
/* ------------------------------------------------------------------------ */

int main(int argc, char **argv)
{
    const char *mode =
        bench_mode(argc, argv,
                   "usage: bench_wall sleepers --seconds S [--wait-us W] [--work-us U]\n"
                   "       bench_wall cost --threads N --seconds S (--blocked | --wait-us W) "
                   "[--stack-kib K]\n"
                   "       bench_wall calibrate\n");
    uint64_t run_ns = 0, wait_us = 2000, work_us = 300, threads = 0, stack_kib = 0, blocked = 0;
    int wait_given = 0;
    const bench_opt_t opts[] = {
        {"--seconds", bench_seconds_ns, &run_ns, NULL},
        {"--wait-us", bench_number, &wait_us, &wait_given},
        {"--work-us", bench_number, &work_us, NULL},
        {"--threads", bench_number, &threads, NULL},
        {"--stack-kib", bench_number, &stack_kib, NULL},
        {"--blocked", NULL, &blocked, NULL},
    };
    bench_parse_opts(argc, argv, 2, opts, sizeof opts / sizeof opts[0]);
    if (strcmp(mode, "calibrate") == 0)
        return run_calibrate();
    if (run_ns == 0)
        bench_usage();
    if (strcmp(mode, "sleepers") == 0) {
        if (wait_us == 0)
            bench_usage();
        return run_sleepers(run_ns, wait_us * 1000, work_us * 1000);
    }
    if (strcmp(mode, "cost") == 0) {
        if (threads == 0 || threads > THREAD_MAX || !blocked == !wait_given || stack_kib > 4096 ||
            (!blocked && wait_us == 0))
            bench_usage();
        return run_cost((int)threads, run_ns, blocked ? 0 : wait_us * 1000, stack_kib);
    }
    bench_usage();
}
