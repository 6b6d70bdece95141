/* Tests of wall mode without signals to blocked threads
 * (SNAPPROF_WALL_BLOCKED_PROC): threads asleep in nanosleep, a pipe read
 * and pthread_cond_timedwait beside a busy one are sampled every tick, with
 * their callers, and never woken early; a thread that blocks every signal
 * is sampled too; a thread that wakes while its stack is read is not
 * recorded with a torn stack; where /proc refuses, sleepers are still left
 * alone. */
#include "test.h"
#include "test_util.h"

#include "common/fault.h"
#include "stack_copier/stack_copier.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* The first KIND_COUNT kinds run side by side in test_sleepers; the
 * others are for single tests. */
typedef enum {
    NANOSLEEP,
    PIPE_READ,
    COND_WAIT,
    BUSY,
    KIND_COUNT,
    SYSCALLS = KIND_COUNT,
    SPIN_THEN_READ,
    ALL_KINDS
} kind_t;

static const char *const g_fn[ALL_KINDS] = {"sleeper_nanosleep", "sleeper_read", "sleeper_cond",
                                            "busy_loop",         "syscall_loop", "sleeper_read"};
static const char *const g_syscall[ALL_KINDS] = {
    "clock_nanosleep", "read", "futex", "", "", "read"};

typedef struct sleeper {
    kind_t kind;
    int block_all_signals;
    pthread_t th;
    pid_t tid;
    snapprof_thread_t *token;
    atomic_int ready, stop;
    atomic_int go_block; /* SPIN_THEN_READ: spin until it is set */
    atomic_int early;    /* waits that ended before their time */
    atomic_int wakeups;  /* bytes read (pipe) */
    int pipe_fd[2];
    pthread_mutex_t mu;
    pthread_cond_t cv;
} sleeper_t;

static uint64_t clock_now_ns(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

__attribute__((noinline)) static void sleeper_nanosleep(sleeper_t *s)
{
    while (!atomic_load(&s->stop)) {
        struct timespec ts = {0, 50000000};
        if (nanosleep(&ts, NULL) != 0 && errno == EINTR)
            atomic_fetch_add(&s->early, 1);
    }
}

__attribute__((noinline)) static void sleeper_read(sleeper_t *s)
{
    while (!atomic_load(&s->stop)) {
        char c;
        ssize_t n = read(s->pipe_fd[0], &c, 1);
        if (n < 0 && errno == EINTR)
            atomic_fetch_add(&s->early, 1);
        else if (n == 1)
            atomic_fetch_add(&s->wakeups, 1);
    }
}

__attribute__((noinline)) static void sleeper_cond(sleeper_t *s)
{
    pthread_mutex_lock(&s->mu);
    while (!atomic_load(&s->stop)) {
        uint64_t deadline = clock_now_ns(CLOCK_REALTIME) + 50000000u;
        struct timespec ts = {(time_t)(deadline / 1000000000u), (long)(deadline % 1000000000u)};
        int rc = pthread_cond_timedwait(&s->cv, &s->mu, &ts);
        /* Nobody signals the condition: a return before the deadline is a
         * wait ended early. */
        if (rc == 0 && clock_now_ns(CLOCK_REALTIME) < deadline && !atomic_load(&s->stop))
            atomic_fetch_add(&s->early, 1);
    }
    pthread_mutex_unlock(&s->mu);
}

__attribute__((noinline)) static void busy_loop(sleeper_t *s)
{
    while (!atomic_load(&s->stop))
        tu_burn_cpu_ns(1000000u);
}

/* Busy, mostly inside the kernel: reads of /dev/zero. Preempted there,
 * the thread shows a system call in /proc, yet it waits for a CPU. */
__attribute__((noinline)) static void syscall_loop(sleeper_t *s)
{
    enum { SIZE = 65536 };
    char *buf = malloc(SIZE);
    int fd = open("/dev/zero", O_RDONLY | O_CLOEXEC);
    ASSERT(buf && fd >= 0);
    while (!atomic_load(&s->stop))
        ASSERT(read(fd, buf, SIZE) > 0); /* a handshake's signal may cut it short */
    close(fd);
    free(buf);
}

__attribute__((noinline)) static void early_spin(sleeper_t *s)
{
    while (!atomic_load(&s->go_block))
        tu_burn_cpu_ns(100000u);
}

/* Spins (early_spin) until told to block, then waits in a pipe read. */
__attribute__((noinline)) static void late_read(sleeper_t *s)
{
    early_spin(s);
    sleeper_read(s);
}

static void *sleeper_main(void *arg)
{
    sleeper_t *s = arg;
    if (s->block_all_signals) {
        sigset_t all;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, NULL);
    }
    s->tid = (pid_t)syscall(SYS_gettid);
    ASSERT_OK(snapprof_thread_register(&s->token));
    atomic_store(&s->ready, 1);
    switch (s->kind) {
    case NANOSLEEP:
        sleeper_nanosleep(s);
        break;
    case PIPE_READ:
        sleeper_read(s);
        break;
    case COND_WAIT:
        sleeper_cond(s);
        break;
    case SYSCALLS:
        syscall_loop(s);
        break;
    case SPIN_THEN_READ:
        late_read(s);
        break;
    default:
        busy_loop(s);
        break;
    }
    return NULL;
}

static void start(sleeper_t *s, kind_t kind)
{
    s->kind = kind;
    ASSERT_EQ(pipe(s->pipe_fd), 0);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    tu_start_thread(&s->th, sleeper_main, s, &s->ready);
}

static void stop(sleeper_t *s)
{
    atomic_store(&s->stop, 1);
    ASSERT_EQ(write(s->pipe_fd[1], "x", 1), 1);
    pthread_mutex_lock(&s->mu);
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->th, NULL);
    snapprof_thread_release(s->token);
    close(s->pipe_fd[0]);
    close(s->pipe_fd[1]);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
}

static snapprof_trigger_t g_trigger = SNAPPROF_TRIGGER_HANDSHAKE;

/* Two threads of the given kinds, started and given 20 ms to settle. */
static void start_two(sleeper_t s[2], kind_t first, kind_t second)
{
    memset(s, 0, 2 * sizeof *s);
    start(&s[0], first);
    start(&s[1], second);
    usleep(20000);
}

/* The end of a case: the profiler destroyed, its n threads stopped, the
 * collector freed. */
static void finish(snapprof_profiler_t *p, sleeper_t *s, int n, tu_collector_t *c)
{
    snapprof_profiler_destroy(p);
    for (int i = 0; i < n; i++)
        stop(&s[i]);
    tu_collector_free(c);
}

static snapprof_profiler_t *make(sleeper_t *s, int n, uint64_t interval, tu_collector_t *c)
{
    snapprof_params_t params = tu_params(interval);
    params.mode = SNAPPROF_MODE_WALL;
    params.wall_blocked = SNAPPROF_WALL_BLOCKED_PROC;
    params.trigger = g_trigger;
    snapprof_profiler_t *p;
    ASSERT_OK(snapprof_profiler_create(&params, NULL, 0, &p));
    for (int i = 0; i < n; i++)
        ASSERT_OK(snapprof_profiler_add_thread(p, s[i].token));
    ASSERT_OK(snapprof_profiler_add_builder(p, tu_collector_builder(c)));
    return p;
}

static void wait_ticks(snapprof_profiler_t *p, uint64_t n)
{
    snapprof_stats_t st;
    do {
        usleep(5000);
        ASSERT_OK(snapprof_profiler_get_stats(p, &st));
    } while (st.ticks < n);
}

/* Whether sample smp has a frame in function fn. */
static int has_fn(const tu_sample_t *smp, const char *fn)
{
    for (size_t f = 0; f < smp->frame_count && f < TU_MAX_FRAMES; f++)
        if (strcmp(tu_frame_name(&smp->frames[f]), fn) == 0)
            return 1;
    return 0;
}

/* Checks thread s's samples: how many, and that those taken while blocked
 * carry its wait's caller, up to the thread's entry, and its system call.
 * Returns its sample count. */
static size_t check_thread(const tu_collector_t *c, const sleeper_t *s, size_t *blocked_out)
{
    size_t n = 0, blocked = 0, with_caller = 0, running = 0;
    for (size_t i = 0; i < c->count; i++) {
        const tu_sample_t *smp = &c->samples[i];
        /* A trigger's captures stand for CPU time (no wall time): the
         * ticks' samples are the thread's wall profile. */
        if (smp->tid != s->tid || smp->wall_ns == 0)
            continue;
        n++;
        if (strcmp(smp->state, "blocked") == 0) {
            if (blocked++ == 0) { /* one stack, for the log */
                printf("  %s:", g_fn[s->kind]);
                for (size_t f = 0; f < smp->frame_count && f < TU_MAX_FRAMES; f++)
                    printf(" %s", tu_frame_name(&smp->frames[f]));
                printf("\n");
            }
            /* Up to the thread's entry: the frames between the wait and
             * it need the frame pointer the kernel does not report. */
            with_caller += has_fn(smp, g_fn[s->kind]) && has_fn(smp, "sleeper_main");
            ASSERT_STR_EQ(smp->syscall, g_syscall[s->kind]);
        } else {
            if (strcmp(smp->state, "runnable") != 0)
                ASSERT_STR_EQ(smp->state, "running");
            running++;
        }
    }
    printf("%-18s %zu samples: %zu blocked (%zu with the caller), %zu running; %d early, %d "
           "woken\n",
           g_fn[s->kind], n, blocked, with_caller, running, atomic_load(&s->early),
           atomic_load(&s->wakeups));
    /* Whole stacks: the wait with its caller, in at least 99 % of them. */
    ASSERT_GE(with_caller * 100, blocked * 99);
    if (blocked_out)
        *blocked_out = blocked;
    return n;
}

/* The ticks whose wall time tid's samples carry. */
static uint64_t ticks_covered(const tu_collector_t *c, pid_t tid, uint64_t interval_ns)
{
    uint64_t wall = 0;
    for (size_t i = 0; i < c->count; i++)
        if (c->samples[i].tid == tid)
            wall += c->samples[i].wall_ns;
    return wall / interval_ns;
}

/* Three kinds of sleeper beside a busy thread, 1 kHz wall mode: every tick
 * samples every thread, none wakes early, the sleepers' stacks are whole
 * and labelled, and every sample carries cpu and wall. */
static void test_sleepers(void)
{
    sleeper_t s[KIND_COUNT];
    memset(s, 0, sizeof s);
    for (int k = 0; k < KIND_COUNT; k++)
        start(&s[k], (kind_t)k);
    usleep(20000);
    tu_collector_t c = {0};
    snapprof_profiler_t *p = make(s, KIND_COUNT, 1000000u, &c);
    ASSERT_OK(snapprof_profiler_start(p));
    wait_ticks(p, 400);
    ASSERT_OK(snapprof_profiler_stop(p));
    const snapprof_stats_t *st = &c.stats;
    printf("ticks %llu (missed %llu) samples %llu failed %llu (timeouts %llu)\n",
           (unsigned long long)st->ticks, (unsigned long long)st->ticks_missed,
           (unsigned long long)st->samples, (unsigned long long)st->failed_total,
           (unsigned long long)st->failed[SNAPPROF_FAIL_TIMEOUT]);
    printf("ticks %llu samples %llu blocked %llu signalled %llu reused %llu raced %llu\n",
           (unsigned long long)st->ticks, (unsigned long long)st->samples,
           (unsigned long long)st->samples_blocked, (unsigned long long)st->samples_signalled,
           (unsigned long long)st->samples_reused, (unsigned long long)st->wall_copy_raced);
    ASSERT_EQ(st->wall_proc_errno, 0);
    for (int k = 0; k < KIND_COUNT; k++) {
        size_t blocked = 0;
        size_t n = check_thread(&c, &s[k], &blocked);
        /* Every tick samples it (a late sampler skips ticks, counted);
         * but a busy thread with a CPU-clock trigger has no stack until
         * its trigger's first capture, which needs CPU time: on a loaded
         * machine, several ticks. Those ticks' wall time goes with its
         * first sample (the wall totals below check it). */
        if (k == BUSY && g_trigger != SNAPPROF_TRIGGER_HANDSHAKE)
            ASSERT_GE(n * 2, st->ticks - st->ticks_missed);
        else if (g_trigger != SNAPPROF_TRIGGER_HANDSHAKE)
            /* A sleeper found between two waits before its first blocked
             * copy has no stack either (10 such ticks of 346 seen on a
             * loaded machine): those ticks ride on its first sample's wall
             * time. */
            ASSERT_GE(ticks_covered(&c, s[k].tid, 1000000u) + 2, st->ticks - st->ticks_missed);
        else
            ASSERT_GE(n + 2, st->ticks - st->ticks_missed);
        if (k != BUSY) {
            /* A blocked thread is never signalled. The handshake still
             * signals a thread it finds running, and on a loaded machine
             * the signal can land in its next wait; a perf event fires
             * only in user mode, inside no system call at all. */
            if (g_trigger == SNAPPROF_TRIGGER_PERF_EVENT)
                ASSERT_EQ(atomic_load(&s[k].early), 0);
            else
                ASSERT_LE((size_t)atomic_load(&s[k].early), n - blocked);
            /* Mostly blocked: a sleeper that woke counts as running
             * until it is back asleep, and a loaded machine (a TSan
             * build beside other jobs) can keep it waiting for a CPU. */
            ASSERT_GE(blocked * 3, n * 2);
        }
    }
    ASSERT_GE(st->samples_blocked, 3);
    /* Each thread's wall total is the ticks that passed, those the
     * sampler was too late for included (the next sample carries them). */
    uint64_t elapsed = (st->ticks + st->ticks_missed) * 1000000u, cpu = 0;
    for (int k = 0; k < KIND_COUNT; k++) {
        uint64_t wall = 0;
        for (size_t i = 0; i < c.count; i++)
            if (c.samples[i].tid == s[k].tid) {
                wall += c.samples[i].wall_ns;
                cpu += c.samples[i].cpu_ns;
            }
        printf("%-18s wall %.3f s of %.3f s\n", g_fn[k], wall / 1e9, elapsed / 1e9);
        ASSERT(wall <= elapsed);
        ASSERT(wall * 10 >= elapsed * 9);
    }
    ASSERT_GT(cpu, 0);
    if (g_trigger != SNAPPROF_TRIGGER_HANDSHAKE) {
        /* Nothing signalled but by the threads' own CPU clocks, and the
         * profile's CPU time is theirs: exactly, but that a thread's first
         * sample weighs the whole interval after a first period drawn in
         * (0, interval] (trigger_perf_event.c, draw_first()), so each
         * thread's samples may come to less than one interval more than
         * its clock. */
        ASSERT_UEQ(st->threads_by_trigger[g_trigger], KIND_COUNT);
        ASSERT(cpu >= st->cpu_ns_total);
        ASSERT(cpu - st->cpu_ns_total < KIND_COUNT * 1000000u);
    }
    finish(p, s, KIND_COUNT, &c);
}

/* The same with CPU-clock triggers: running threads' stacks come from their
 * own captures, so no thread is signalled by the sampler at all. */
static void test_sleepers_timer(void)
{
    g_trigger = SNAPPROF_TRIGGER_CPU_TIMER;
    test_sleepers();
}

static void test_sleepers_perf(void)
{
    tu_need_perf_event();
    g_trigger = SNAPPROF_TRIGGER_PERF_EVENT;
    test_sleepers();
}

/* Starts three threads of kind on CPU 0 and profiles them for 150 ticks
 * of 2 ms into c; the caller checks c, then calls one_cpu_done(). */
static snapprof_profiler_t *one_cpu_run(sleeper_t s[3], kind_t kind, tu_collector_t *c)
{
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(0, &one);
    memset(s, 0, 3 * sizeof *s);
    for (int i = 0; i < 3; i++) {
        start(&s[i], kind);
        ASSERT_EQ(pthread_setaffinity_np(s[i].th, sizeof one, &one), 0);
    }
    snapprof_profiler_t *p = make(s, 3, 2000000u, c);
    ASSERT_OK(snapprof_profiler_start(p));
    wait_ticks(p, 150);
    ASSERT_OK(snapprof_profiler_stop(p));
    return p;
}

static void one_cpu_done(snapprof_profiler_t *p, sleeper_t s[3], tu_collector_t *c)
{
    finish(p, s, 3, c);
}

/* Three busy threads on one CPU wait for it two thirds of the time: /proc
 * says R for all of them, their schedstat tells running from runnable. */
static void test_runnable(void)
{
    sleeper_t s[3];
    tu_collector_t c = {0};
    snapprof_profiler_t *p = one_cpu_run(s, BUSY, &c);
    for (int i = 0; i < 3; i++) {
        size_t n = 0, runnable = 0;
        for (size_t k = 0; k < c.count; k++)
            if (c.samples[k].tid == s[i].tid && c.samples[k].wall_ns > 0) {
                n++;
                runnable += strcmp(c.samples[k].state, "runnable") == 0;
            }
        printf("busy thread %d: %zu of %zu samples runnable\n", i, runnable, n);
        ASSERT_GT(n, 50);
        ASSERT_GE(runnable * 3, n);
    }
    one_cpu_done(p, s, &c);
}

/* Three threads on one CPU that spend their time in read(2) of /dev/zero
 * are often preempted inside that system call. They wait for a CPU, not
 * for an event: never labelled blocked. (/proc/TID/syscall says "running"
 * for any task in state R, so nothing here should take them for waiting.) */
static void test_preempted_in_syscall(void)
{
    sleeper_t s[3];
    tu_collector_t c = {0};
    snapprof_profiler_t *p = one_cpu_run(s, SYSCALLS, &c);
    for (int i = 0; i < 3; i++) {
        size_t n = 0, blocked = 0, in_loop = 0;
        for (size_t k = 0; k < c.count; k++)
            if (c.samples[k].tid == s[i].tid && c.samples[k].wall_ns > 0) {
                n++;
                blocked += strcmp(c.samples[k].state, "blocked") == 0;
                in_loop += has_fn(&c.samples[k], "syscall_loop");
            }
        printf("syscall thread %d: %zu samples, %zu in syscall_loop, %zu blocked\n", i, n, in_loop,
               blocked);
        ASSERT_GT(n, 50);
        ASSERT_EQ(blocked, 0);
    }
    one_cpu_done(p, s, &c);
}

/* A thread that blocks every signal cannot answer the handshake; asleep,
 * it needs none. */
static void test_blocks_all_signals(void)
{
    sleeper_t s;
    memset(&s, 0, sizeof s);
    s.block_all_signals = 1;
    start(&s, NANOSLEEP);
    usleep(20000);
    tu_collector_t c = {0};
    snapprof_profiler_t *p = make(&s, 1, 2000000u, &c);
    ASSERT_OK(snapprof_profiler_start(p));
    wait_ticks(p, 100);
    ASSERT_OK(snapprof_profiler_stop(p));
    size_t blocked = 0;
    size_t n = check_thread(&c, &s, &blocked);
    ASSERT_GE(n + 2, c.stats.ticks - c.stats.ticks_missed);
    ASSERT_GE(blocked + 2, n);
    /* Caught between two sleeps (running, as the slack above allows), it
     * is signalled and cannot answer: a timeout. Under TSan, whose
     * nanosleep interceptor keeps it running longer, 1 in 101 ticks was. */
    ASSERT_LE(c.stats.failed[SNAPPROF_FAIL_TIMEOUT], 2);
    finish(p, &s, 1, &c);
}

/* The race, forced: right after a copy of the reader's stack, a byte wakes
 * it, and the copy is read back only after the thread ran. The copy must be
 * thrown away (counted), never recorded as a stack. */
static _Atomic pid_t g_race_tid;
static _Atomic int g_races_left;
static sleeper_t *g_race_sleeper;

static void race_hook(void *user_data, pid_t tid)
{
    (void)user_data;
    if (tid != atomic_load(&g_race_tid) || atomic_load(&g_races_left) <= 0)
        return;
    atomic_fetch_sub(&g_races_left, 1);
    int before = atomic_load(&g_race_sleeper->wakeups);
    ASSERT_EQ(write(g_race_sleeper->pipe_fd[1], "r", 1), 1);
    uint64_t t0 = tu_mono_ns();
    while (atomic_load(&g_race_sleeper->wakeups) == before && tu_mono_ns() - t0 < 2000000000u)
        usleep(100);
}

static const snapprof__stack_copier_seams_t race_seams = {.xAfterProcCopy = race_hook};

static void test_woken_during_copy(void)
{
    sleeper_t s;
    memset(&s, 0, sizeof s);
    start(&s, PIPE_READ);
    usleep(20000);
    g_race_sleeper = &s;
    atomic_store(&g_race_tid, s.tid);
    atomic_store(&g_races_left, 5);
    snapprof__stack_copier_set_seams(&race_seams);
    tu_collector_t c = {0};
    snapprof_profiler_t *p = make(&s, 1, 2000000u, &c);
    ASSERT_OK(snapprof_profiler_start(p));
    wait_ticks(p, 100);
    ASSERT_OK(snapprof_profiler_stop(p));
    snapprof__stack_copier_set_seams(NULL);
    printf("raced %llu, woken %d\n", (unsigned long long)c.stats.wall_copy_raced,
           atomic_load(&s.wakeups));
    ASSERT_EQ(atomic_load(&g_races_left), 0);
    ASSERT_GE(c.stats.wall_copy_raced, 5);
    /* Every stack recorded is whole: none of the thrown-away copies. */
    check_thread(&c, &s, NULL);
    finish(p, &s, 1, &c);
}

/* The same race with a perf trigger: the copy is checked against the
 * perf event's schedule sequence instead of the thread's CPU clock. */
static void test_woken_during_copy_perf(void)
{
    tu_need_perf_event();
    g_trigger = SNAPPROF_TRIGGER_PERF_EVENT;
    test_woken_during_copy();
}

void snapprof__sampler_lock(void);
void snapprof__sampler_unlock(void);

/* Waits until thread tid is blocked in a read again, as /proc says. */
static void wait_back_in_read(pid_t tid)
{
    uint64_t t0 = tu_mono_ns();
    for (;;) {
        snapprof__blocked_t b;
        if (snapprof__proc_blocked_read(tid, &b) == 1 && b.nr == SYS_read)
            break;
        if (tu_mono_ns() - t0 > 30000000000u)
            TEST_FAIL("thread %d not back in its read after 30 s", (int)tid);
        usleep(200);
    }
}

/* The reads of one thread's CPU clock, counted through the copier's
 * seam. */
static _Atomic pid_t g_count_tid;
static _Atomic uint64_t g_counted;

static void count_cpu_read(void *user_data, pid_t tid)
{
    (void)user_data;
    if (tid != 0 && tid == atomic_load(&g_count_tid))
        atomic_fetch_add(&g_counted, 1);
}

static const snapprof__stack_copier_seams_t count_seams = {.xOnThreadCpuRead = count_cpu_read};

/* With a perf trigger, a blocked thread that ran since its last look is
 * copied again without a read of its CPU clock: the perf event's schedule
 * sequence stands for it. Each round wakes the thread while the sampler
 * lock keeps the ticks out, waits until it blocks in the same read again,
 * and then lets two ticks run: the first must make a new copy (the thread
 * was scheduled in) and read no clock of the thread. No timing is
 * involved: the thread is asleep through every tick of the rounds. */
static void test_new_copy_reads_no_clock_perf(void)
{
    enum { ROUNDS = 8 };
    tu_need_perf_event();
    g_trigger = SNAPPROF_TRIGGER_PERF_EVENT;
    sleeper_t s;
    memset(&s, 0, sizeof s);
    start(&s, PIPE_READ);
    wait_back_in_read(s.tid);
    tu_collector_t c = {0};
    snapprof_profiler_t *p = make(&s, 1, 2000000u, &c);
    ASSERT_OK(snapprof_profiler_start(p));
    wait_ticks(p, 10);
    snapprof_stats_t before, st;
    ASSERT_OK(snapprof_profiler_get_stats(p, &before));
    ASSERT_UEQ(before.threads_by_trigger[SNAPPROF_TRIGGER_PERF_EVENT], 1);
    atomic_store(&g_count_tid, s.tid);
    atomic_store(&g_counted, 0);
    snapprof__stack_copier_set_seams(&count_seams);
    for (int round = 0; round < ROUNDS; round++) {
        ASSERT_OK(snapprof_profiler_get_stats(p, &st));
        uint64_t ticks = st.ticks;
        snapprof__sampler_lock();
        int woken = atomic_load(&s.wakeups);
        ASSERT_EQ(write(s.pipe_fd[1], "r", 1), 1);
        uint64_t t0 = tu_mono_ns();
        while (atomic_load(&s.wakeups) == woken) {
            if (tu_mono_ns() - t0 > 30000000000u)
                TEST_FAIL("the sleeper did not wake in 30 s");
            usleep(100);
        }
        wait_back_in_read(s.tid);
        snapprof__sampler_unlock();
        wait_ticks(p, ticks + 2);
    }
    snapprof__stack_copier_set_seams(NULL);
    uint64_t clock_reads = atomic_load(&g_counted);
    ASSERT_OK(snapprof_profiler_get_stats(p, &st));
    ASSERT_OK(snapprof_profiler_stop(p));
    printf("%d rounds: %llu new copies, %llu raced, %llu reads of its CPU clock\n", ROUNDS,
           (unsigned long long)(st.samples_blocked - before.samples_blocked),
           (unsigned long long)(st.wall_copy_raced - before.wall_copy_raced),
           (unsigned long long)clock_reads);
    ASSERT_GE(st.samples_blocked - before.samples_blocked, ROUNDS);
    ASSERT_UEQ(clock_reads, 0);
    check_thread(&c, &s, NULL);
    finish(p, &s, 1, &c);
}

static sleeper_t *g_late;
static _Atomic pid_t g_late_trigger_tid;

/* Runs in the sampling thread while it copies the sleeper's stack, after
 * that tick's drain: the spinning thread gets CPU time (and trigger
 * captures) meanwhile, then blocks, so the next look finds it blocked
 * while captures older than that wait still sit in their slots. */
static void late_hook(void *user_data, pid_t tid)
{
    (void)user_data;
    if (tid != atomic_load(&g_late_trigger_tid))
        return;
    atomic_store(&g_late_trigger_tid, 0);
    /* 25 periods of its CPU time, however long a loaded machine takes to
     * give them (its trigger counts CPU time, not wall time). */
    clockid_t clock;
    ASSERT_EQ(pthread_getcpuclockid(g_late->th, &clock), 0);
    uint64_t cpu0 = clock_now_ns(clock), t0 = tu_mono_ns();
    while (clock_now_ns(clock) - cpu0 < 50000000u && tu_mono_ns() - t0 < 5000000000u)
        usleep(1000);
    atomic_store(&g_late->go_block, 1);
    t0 = tu_mono_ns();
    while (tu_thread_state(g_late->tid) != 'S' && tu_mono_ns() - t0 < 2000000000u)
        usleep(100);
}

static const snapprof__stack_copier_seams_t late_seams = {.xAfterProcCopy = late_hook};

/* A thread's trigger captured it running; it blocked before that capture
 * was drained and was then copied blocked. The capture, drained at the
 * next tick, is older than the wait: the ticks it sleeps through must
 * repeat the wait's stack, not the capture's. (Before the fix the drained
 * capture became the stack repeated, so CPU work showed as state=blocked
 * syscall=clock_gettime on CI's loaded machine.) */
static void test_capture_older_than_wait(void)
{
    sleeper_t s[2];
    start_two(s, NANOSLEEP, SPIN_THEN_READ);
    g_late = &s[1];
    atomic_store(&g_late_trigger_tid, s[0].tid);
    snapprof__stack_copier_set_seams(&late_seams);
    /* The perf event where the kernel allows it: its captures come every
     * period of CPU time. (A CPU timer's expiries, serviced at the
     * scheduler tick, can merge into very few on a loaded machine.) */
    g_trigger = SNAPPROF_TRIGGER_AUTO;
    tu_collector_t c = {0};
    snapprof_profiler_t *p = make(s, 2, 2000000u, &c);
    ASSERT_OK(snapprof_profiler_start(p));
    wait_ticks(p, 60);
    ASSERT_OK(snapprof_profiler_stop(p));
    snapprof__stack_copier_set_seams(NULL);
    ASSERT_EQ(atomic_load(&g_late_trigger_tid), 0); /* the hook ran */
    size_t blocked = 0, blocked_spinning = 0, cpu_spinning = 0;
    for (size_t i = 0; i < c.count; i++) {
        const tu_sample_t *smp = &c.samples[i];
        if (smp->tid != s[1].tid)
            continue;
        if (smp->wall_ns == 0 && smp->cpu_ns > 0)
            cpu_spinning += has_fn(smp, "early_spin");
        if (smp->wall_ns > 0 && strcmp(smp->state, "blocked") == 0) {
            blocked++;
            if (has_fn(smp, "early_spin") && blocked_spinning++ == 0) {
                /* What it was: the capture's stack (no read at its leaf),
                 * or the wait's stack with a wrong guess above read. */
                printf("a blocked sample in early_spin:");
                for (size_t f = 0; f < smp->frame_count && f < TU_MAX_FRAMES; f++)
                    printf(" %s", tu_frame_name(&smp->frames[f]));
                printf("\n");
            }
        }
    }
    printf("trigger captures in early_spin %zu; blocked samples %zu, %zu of them in early_spin\n",
           cpu_spinning, blocked, blocked_spinning);
    if (cpu_spinning == 0) {
        /* The race this test stages did not happen: nothing to judge. */
        printf("skipped: no trigger capture while the thread spun\n");
        exit(77);
    }
    ASSERT_GT(blocked, 10);
    ASSERT_EQ(blocked_spinning, 0);
    check_thread(&c, &s[1], NULL);
    finish(p, s, 2, &c);
}

/* /proc/self/task/TID/syscall refused with g_proc_errno, through the
 * copier's seam; proc_fail(0) lets it be read again. */
static _Atomic int g_proc_errno;

static int proc_refused(void *user_data, pid_t tid)
{
    (void)user_data;
    (void)tid;
    return atomic_load(&g_proc_errno);
}

static const snapprof__stack_copier_seams_t proc_fail_seams = {.xProcRefused = proc_refused};

static void proc_fail(int err)
{
    atomic_store(&g_proc_errno, err);
    snapprof__stack_copier_set_seams(err != 0 ? &proc_fail_seams : NULL);
}

/* A sleeper (s[0]) and a busy thread (s[1]) profiled at 500 Hz into c with
 * /proc failing with err (the seam), for ticks ticks; the profiler runs on
 * and /proc still fails. */
static snapprof_profiler_t *start_proc_failing(sleeper_t *s, int err, tu_collector_t *c,
                                               uint64_t ticks)
{
    start_two(s, NANOSLEEP, BUSY);
    proc_fail(err);
    snapprof_profiler_t *p = make(s, 2, 2000000u, c);
    ASSERT_OK(snapprof_profiler_start(p));
    wait_ticks(p, ticks);
    return p;
}

/* /proc refused (the seam stands in for a hardened /proc): said once in
 * the stats; sleepers are still not signalled, the busy thread is. */
static void test_proc_refused(void)
{
    sleeper_t s[2];
    tu_collector_t c = {0};
    snapprof_profiler_t *p = start_proc_failing(s, EACCES, &c, 100);
    ASSERT_OK(snapprof_profiler_stop(p));
    proc_fail(0);
    printf("errno %d, signalled %llu, early %d\n", c.stats.wall_proc_errno,
           (unsigned long long)c.stats.samples_signalled, atomic_load(&s[0].early));
    ASSERT_EQ(c.stats.wall_proc_errno, EACCES);
    ASSERT_EQ(c.stats.samples_blocked, 0);
    /* Asleep, it is never signalled; but /proc/TID/stat can say R just as
     * it wakes (every 50 ms), and the signal then lands in its next wait:
     * once in a loaded ASan run. Signalled each tick, it would be ~100. */
    ASSERT_LE(atomic_load(&s[0].early), 2);
    ASSERT_GE(tu_collector_count_tid(&c, s[1].tid), 10);
    finish(p, s, 2, &c);
}

/* /proc short of descriptors for a while (EMFILE: the program's own files
 * took them all) is not /proc refused: those ticks are counted, sleepers
 * are not signalled, and once descriptors are back blocked threads are
 * read through /proc again. Before this test, one EMFILE switched /proc
 * off for the rest of the profile. */
static void test_proc_transient(void)
{
    sleeper_t s[2];
    tu_collector_t c = {0};
    snapprof_profiler_t *p = start_proc_failing(s, EMFILE, &c, 50);
    snapprof_stats_t mid;
    ASSERT_OK(snapprof_profiler_get_stats(p, &mid));
    proc_fail(0);
    wait_ticks(p, 100);
    ASSERT_OK(snapprof_profiler_stop(p));
    printf("transient %llu, errno %d, blocked %llu then %llu, early %d\n",
           (unsigned long long)c.stats.wall_proc_transient, c.stats.wall_proc_errno,
           (unsigned long long)mid.samples_blocked, (unsigned long long)c.stats.samples_blocked,
           atomic_load(&s[0].early));
    ASSERT_EQ(c.stats.wall_proc_errno, 0);
    ASSERT_GT(c.stats.wall_proc_transient, 0);
    ASSERT_UEQ(mid.samples_blocked, 0);
    /* The sleeper had no stack yet: the first tick that can read /proc
     * copies it (then reuses it until it wakes, every 50 ms). */
    ASSERT_GT(c.stats.samples_blocked, 0);
    /* As in proc_refused: asleep it is never signalled. */
    ASSERT_LE(atomic_load(&s[0].early), 2);
    finish(p, s, 2, &c);
}

/* The same through the fault seam (issue 14): every open of a thread's
 * /proc/self/task/TID/syscall refused with EMFILE, then none. Each
 * refusal is one transient; none turns /proc off. */
static void test_proc_open_fault(void)
{
    sleeper_t s[2];
    start_two(s, NANOSLEEP, BUSY);
    tu_collector_t c = {0};
    snapprof_profiler_t *p = make(s, 2, 2000000u, &c);
    uint64_t before = tu_fault_injected(SNAPPROF__FAULT_OPEN);
    tu_fault_set(SNAPPROF__FAULT_OPEN, 1, 1);
    ASSERT_OK(snapprof_profiler_start(p));
    wait_ticks(p, 50);
    snapprof_stats_t mid;
    ASSERT_OK(snapprof_profiler_get_stats(p, &mid));
    tu_fault_clear();
    wait_ticks(p, 100);
    ASSERT_OK(snapprof_profiler_stop(p));
    /* Read once every tick is over: one under way at the clear may still
     * have been refused. */
    uint64_t injected = tu_fault_injected(SNAPPROF__FAULT_OPEN) - before;
    printf("injected %llu, transient %llu then %llu, errno %d, blocked %llu then %llu\n",
           (unsigned long long)injected, (unsigned long long)mid.wall_proc_transient,
           (unsigned long long)c.stats.wall_proc_transient, c.stats.wall_proc_errno,
           (unsigned long long)mid.samples_blocked, (unsigned long long)c.stats.samples_blocked);
    ASSERT_GT(injected, 0);
    ASSERT_UEQ(c.stats.wall_proc_transient, injected);
    ASSERT_EQ(c.stats.wall_proc_errno, 0);
    ASSERT_UEQ(mid.samples_blocked, 0);
    ASSERT_GT(c.stats.samples_blocked, 0);
    finish(p, s, 2, &c);
}

/* The same with the perf trigger, where a thread scheduled in since its
 * last look is looked at through /proc before its CPU clock: still one
 * transient per refusal, not one per attempt. */
static void test_proc_open_fault_perf(void)
{
    tu_need_perf_event();
    g_trigger = SNAPPROF_TRIGGER_PERF_EVENT;
    test_proc_open_fault();
}

/* process_vm_readv refused (a seccomp filter, a kernel without it) is
 * /proc refused, not a thread that exited: it is said once in the stats
 * (wall_proc_errno), and a sleeper keeps its last stack, one sample a tick
 * as a running thread has, where the README promises it. It used to be
 * counted as thread_exited at every tick the sleeper's clock had moved
 * since its last copy, and that tick's wall time was dropped: after its
 * first wake (every 50 ms) every tick. */
static void test_proc_copy_refused(void)
{
    sleeper_t s[2];
    start_two(s, NANOSLEEP, BUSY);
    tu_collector_t c = {0};
    snapprof_profiler_t *p = make(s, 2, 2000000u, &c);
    ASSERT_OK(snapprof_profiler_start(p));
    /* Until the sleeper has a stack of its own. */
    snapprof_stats_t mid;
    do {
        wait_ticks(p, 10);
        ASSERT_OK(snapprof_profiler_get_stats(p, &mid));
    } while (mid.samples_blocked == 0);
    uint64_t before = tu_fault_injected(SNAPPROF__FAULT_PROCESS_VM_READV);
    tu_fault_set(SNAPPROF__FAULT_PROCESS_VM_READV, 1, 1);
    wait_ticks(p, mid.ticks + 150);
    ASSERT_OK(snapprof_profiler_stop(p));
    tu_fault_clear();
    uint64_t injected = tu_fault_injected(SNAPPROF__FAULT_PROCESS_VM_READV) - before;
    size_t sleeper = tu_collector_count_tid(&c, s[0].tid),
           busy = tu_collector_count_tid(&c, s[1].tid);
    printf("injected %llu, errno %d, thread_exited %llu, ticks %llu, samples: sleeper %zu busy "
           "%zu, early %d\n",
           (unsigned long long)injected, c.stats.wall_proc_errno,
           (unsigned long long)c.stats.failed[SNAPPROF_FAIL_THREAD_EXITED],
           (unsigned long long)c.stats.ticks, sleeper, busy, atomic_load(&s[0].early));
    ASSERT_GT(injected, 0);
    ASSERT_EQ(c.stats.wall_proc_errno, EPERM);
    ASSERT_UEQ(c.stats.failed[SNAPPROF_FAIL_THREAD_EXITED], 0);
    /* One sample a tick each (wall mode); before the fix the sleeper lost
     * all but the ticks of its first 50 ms under the fault. */
    ASSERT_GE(sleeper * 10, busy * 9);
    ASSERT_LE(atomic_load(&s[0].early), 2); /* as in proc_refused */
    finish(p, s, 2, &c);
}

/* A thread found blocked that wakes, runs for less than the idle threshold
 * (100 us) and blocks again somewhere else has run: its CPU clock moved,
 * so its old stack is no longer where it waits. Wall mode must look again,
 * not reuse the first wait's stack for the rest of the run. */
typedef struct mover {
    int first[2], second[2];
    atomic_int ready, moved;
    pid_t tid;
    snapprof_thread_t *token;
} mover_t;

__attribute__((noinline)) static void mover_wait_first(mover_t *m)
{
    char c;
    while (read(m->first[0], &c, 1) < 0 && errno == EINTR) {
    }
}

__attribute__((noinline)) static void mover_wait_second(mover_t *m)
{
    char c;
    while (read(m->second[0], &c, 1) < 0 && errno == EINTR) {
    }
}

static void *mover_main(void *arg)
{
    mover_t *m = arg;
    m->tid = (pid_t)syscall(SYS_gettid);
    ASSERT_OK(snapprof_thread_register(&m->token));
    atomic_store(&m->ready, 1);
    mover_wait_first(m);
    atomic_store(&m->moved, 1); /* a few us of CPU between the two waits */
    mover_wait_second(m);
    return NULL;
}

static void test_moved_wait(void)
{
    mover_t m;
    memset(&m, 0, sizeof m);
    ASSERT_EQ(pipe(m.first), 0);
    ASSERT_EQ(pipe(m.second), 0);
    pthread_t th;
    tu_start_thread(&th, mover_main, &m, &m.ready);
    usleep(20000);
    tu_collector_t c = {0};
    snapprof_params_t params = tu_params(1000000u);
    params.mode = SNAPPROF_MODE_WALL;
    params.wall_blocked = SNAPPROF_WALL_BLOCKED_PROC;
    snapprof_profiler_t *p;
    ASSERT_OK(snapprof_profiler_create(&params, NULL, 0, &p));
    ASSERT_OK(snapprof_profiler_add_thread(p, m.token));
    ASSERT_OK(snapprof_profiler_add_builder(p, tu_collector_builder(&c)));
    ASSERT_OK(snapprof_profiler_start(p));
    wait_ticks(p, 50);
    ASSERT_EQ(write(m.first[1], "x", 1), 1);
    while (!atomic_load(&m.moved))
        usleep(1000);
    uint64_t moved = tu_mono_ns();
    snapprof_stats_t st;
    ASSERT_OK(snapprof_profiler_get_stats(p, &st));
    wait_ticks(p, st.ticks + 100);
    ASSERT_OK(snapprof_profiler_stop(p));
    /* From 20 ms after the move on, the thread waits in the second read. */
    size_t first = 0, second = 0, after = 0;
    for (size_t i = 0; i < c.count; i++) {
        const tu_sample_t *smp = &c.samples[i];
        /* A remainder ("[kernel and unsampled]", CPU time no capture
         * placed, delivered at the stop) has no stack to check. */
        if (smp->tid != m.tid || (smp->flags & SNAPPROF_SAMPLE_REMAINDER))
            continue;
        if (smp->timestamp_ns < moved + 20000000u) {
            first += has_fn(smp, "mover_wait_first");
            continue;
        }
        after++;
        second += has_fn(smp, "mover_wait_second");
    }
    printf("before the move: %zu in the first wait; after: %zu samples, %zu in the second wait\n",
           first, after, second);
    ASSERT_GT(first, 0);
    ASSERT_GT(after, 10);
    ASSERT_EQ(second, after);
    snapprof_profiler_destroy(p);
    ASSERT_EQ(write(m.second[1], "x", 1), 1);
    pthread_join(th, NULL);
    snapprof_thread_release(m.token);
    close(m.first[0]);
    close(m.first[1]);
    close(m.second[0]);
    close(m.second[1]);
    tu_collector_free(&c);
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"sleepers", test_sleepers},
        {"sleepers_timer", test_sleepers_timer},
        {"sleepers_perf", test_sleepers_perf},
        {"runnable", test_runnable},
        {"preempted_in_syscall", test_preempted_in_syscall},
        {"blocks_all_signals", test_blocks_all_signals},
        {"woken_during_copy", test_woken_during_copy},
        {"woken_during_copy_perf", test_woken_during_copy_perf},
        {"new_copy_reads_no_clock_perf", test_new_copy_reads_no_clock_perf},
        {"capture_older_than_wait", test_capture_older_than_wait},
        {"proc_refused", test_proc_refused},
        {"proc_transient", test_proc_transient},
        {"proc_open_fault", test_proc_open_fault},
        {"proc_open_fault_perf", test_proc_open_fault_perf},
        {"proc_copy_refused", test_proc_copy_refused},
        {"moved_wait", test_moved_wait},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
