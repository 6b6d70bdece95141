/* A program written for gperftools' CPU profiler: it includes
 * <gperftools/profiler.h> and calls ProfilerStart/Stop, and is built
 * against snapprof's compatibility library instead. Exits 0 when every
 * call behaved as gperftools documents, else prints why and exits 1.
 *
 *   basic FILE            ProfilerStart(FILE), burn in gperf_hot, Stop
 *   state FILE            the state calls, a second Start, Stop, Start again
 *   flush FILE            ProfilerFlush writes FILE while profiling goes on
 *   existing FILE         threads started before ProfilerStart are sampled
 *   vfork_thread FILE     a thread held in vfork() through ProfilerStart (it
 *                         cannot answer the scan) is sampled once it returns
 *   bad_path FILE         ProfilerStart on an unwritable path returns 0
 *   signal_taken FILE     SIGURG has the program's handler before Start;
 *                         expect_start=0 in the environment: Start must fail
 *   env FILE              CPUPROFILE started a profile at load: Start fails
 *   stack_trace FILE      ProfilerGetStackTrace from code and from a handler
 *   state_cost FILE       prints what one ProfilerGetCurrentState costs (CPU
 *                         ns), and checks the sample counter gperftools'
 *                         own test finds after the name's NUL
 *   fork_env FILE         under CPUPROFILE: a forked child, and one that
 *                         execs this program ("burn"), each write a file of
 *                         their own; prints their pids
 *   burn FILE             burns in gperf_cold until 20 samples, exits
 *   flush_many FILE       ProfilerFlush until the flushes used 100 ms of
 *                         the process's CPU; prints it
 *   realtime_threads FILE (with CPUPROFILE_REALTIME=1) profiler_unittest's
 *                         shape: the main thread burns, flushes, starts two
 *                         threads that take turns at a mutex, burns again;
 *                         prints each thread's wall time in its function
 *                         ("thread TID wall_ms W") */
#include <gperftools/profiler.h>

#include <pthread.h>
#include <signal.h>
#include <ucontext.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#include "test_prog.h"

HOT(gperf_hot)
HOT(gperf_cold)
HOT(gperf_pre_a)
HOT(gperf_pre_b)

/* Burns until the profile holds at least n samples (ProfilerGetCurrentState
 * counts them), so a stalled host cannot leave it empty; but no more than
 * 60 s of CPU time, so that a process that is not sampled at all (a fork
 * child in a sanitizer build) ends and its test fails instead of hanging. */
static void burn_until_samples(void (*fn)(uint64_t), int n)
{
    struct ProfilerState st;
    clock_t end = clock() + 60 * CLOCKS_PER_SEC;
    do {
        fn(20);
        ProfilerGetCurrentState(&st);
    } while (st.samples_gathered < n && clock() < end);
}

static int mode_basic(const char *file)
{
    CHECK(ProfilerStart(file) != 0);
    burn_until_samples(gperf_hot, 100);
    gperf_cold(10);
    ProfilerStop();
    struct stat st;
    CHECK(stat(file, &st) == 0 && st.st_size > 0);
    return 0;
}

static int mode_state(const char *file)
{
    struct ProfilerState st;
    CHECK(!ProfilingIsEnabledForAllThreads());
    ProfilerGetCurrentState(&st);
    CHECK(st.enabled == 0 && st.profile_name[0] == '\0');
    CHECK(ProfilerStart(file) != 0);
    CHECK(ProfilingIsEnabledForAllThreads());
    CHECK(ProfilerStart(file) == 0); /* one at a time, as in gperftools */
    ProfilerRegisterThread();        /* no-op: every thread is sampled */
    ProfilerEnable();                /* deprecated no-ops */
    ProfilerDisable();
    burn_until_samples(gperf_hot, 20);
    ProfilerGetCurrentState(&st);
    CHECK(st.enabled == 1 && st.samples_gathered >= 20 && st.start_time > 0);
    const char *base = strrchr(file, '/') ? strrchr(file, '/') + 1 : file;
    CHECK(strstr(st.profile_name, base) != NULL);
    ProfilerStop();
    CHECK(!ProfilingIsEnabledForAllThreads());
    ProfilerStop(); /* stopping twice is harmless */
    ProfilerFlush();
    /* Start again: a new profile replaces the file. */
    CHECK(ProfilerStart(file) != 0);
    burn_until_samples(gperf_cold, 10);
    ProfilerStop();
    return 0;
}

static int mode_flush(const char *file)
{
    CHECK(ProfilerStart(file) != 0);
    burn_until_samples(gperf_hot, 50);
    struct stat st;
    CHECK(stat(file, &st) != 0); /* nothing written yet */
    ProfilerFlush();
    CHECK(stat(file, &st) == 0 && st.st_size > 0);
    printf("flushed %lld bytes\n", (long long)st.st_size);
    fflush(stdout);
    /* The flushed copy stays for the test to read while we go on. */
    char copy[4096];
    snprintf(copy, sizeof copy, "%s.flushed", file);
    CHECK(link(file, copy) == 0);
    /* Counted from after the flush: writing the profile burns CPU too (a
     * lot under TSan), and its samples are not the cold function's. With a
     * CPU-clock trigger this thread's own captures during the flush wait
     * in their slots until the sampling thread drains them, after the
     * flush: under TSan, 33 of the next 50 samples in one run. A pause
     * lets them in first, and the cold function gets 100 more. */
    usleep(100000);
    struct ProfilerState now;
    ProfilerGetCurrentState(&now);
    burn_until_samples(gperf_cold, now.samples_gathered + 100);
    ProfilerStop();
    return 0;
}

static atomic_int g_stop;

static void *pre_thread(void *arg)
{
    void (*fn)(uint64_t) = (void (*)(uint64_t))arg;
    while (!atomic_load(&g_stop))
        fn(5);
    return NULL;
}

static int mode_existing(const char *file)
{
    pthread_t a, b;
    CHECK(pthread_create(&a, NULL, pre_thread, (void *)gperf_pre_a) == 0);
    CHECK(pthread_create(&b, NULL, pre_thread, (void *)gperf_pre_b) == 0);
    usleep(20000);
    CHECK(ProfilerStart(file) != 0);
    struct ProfilerState st;
    do {
        usleep(20000);
        ProfilerGetCurrentState(&st);
    } while (st.samples_gathered < 200);
    ProfilerStop();
    atomic_store(&g_stop, 1);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    return 0;
}

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static atomic_int g_vfork_tid, g_vfork_release;
static _Atomic uint64_t g_vfork_returned_ns;

static void *vfork_thread(void *arg)
{
    (void)arg;
    atomic_store(&g_vfork_tid, (int)syscall(SYS_gettid));
    pid_t pid = vfork();
    if (pid == 0) {
        /* The parent thread waits in vfork(), unable to take a signal, until
         * we exit: the way posix_spawn() holds a thread until exec. We share
         * its memory, so main can tell us when (at most 60 s). */
        for (int i = 0; i < 6000 && !atomic_load(&g_vfork_release); i++) {
            struct timespec ts = {0, 10000000};
            syscall(SYS_nanosleep, &ts, NULL);
        }
        _exit(0);
    }
    atomic_store(&g_vfork_returned_ns, mono_ns());
    CHECK(pid > 0);
    int status;
    CHECK(waitpid(pid, &status, 0) == pid);
    while (!atomic_load(&g_stop))
        gperf_pre_a(5);
    return NULL;
}

static int mode_vfork_thread(const char *file)
{
    pthread_t a;
    CHECK(pthread_create(&a, NULL, vfork_thread, NULL) == 0);
    /* Wait until it sleeps in vfork() (state D) for its child. */
    uint64_t give_up = mono_ns() + 30000000000u;
    while (!atomic_load(&g_vfork_tid) || tp_thread_state(atomic_load(&g_vfork_tid)) != 'D') {
        CHECK(mono_ns() < give_up);
        usleep(1000);
    }
    uint64_t t0 = mono_ns();
    CHECK(ProfilerStart(file) != 0);
    uint64_t started = mono_ns();
    printf("ProfilerStart took %.3f s\n", (double)(started - t0) / 1e9);
    fflush(stdout);
    /* The thread was in vfork() for all of ProfilerStart: the scan's
     * handshakes cannot have been answered. Now let it go. */
    CHECK(atomic_load(&g_vfork_returned_ns) == 0);
    atomic_store(&g_vfork_release, 1);
    while (atomic_load(&g_vfork_returned_ns) == 0)
        usleep(20000);
    /* From here only the thread burns: these samples are (nearly) its. */
    struct ProfilerState st;
    ProfilerGetCurrentState(&st);
    int want = st.samples_gathered + 100;
    do {
        usleep(20000);
        ProfilerGetCurrentState(&st);
    } while (st.samples_gathered < want);
    ProfilerStop();
    atomic_store(&g_stop, 1);
    pthread_join(a, NULL);
    return 0;
}

/* ProfilerGetStackTrace from code: result[0] in the caller, result[1]
 * its return address; skip_count 1 starts there. */
static void *volatile g_ra;

__attribute__((noinline)) static int st_inner(void **out, int max, int skip)
{
    int n = ProfilerGetStackTrace(out, max, skip, NULL);
    g_ra = __builtin_return_address(0);
    __asm__ volatile("" ::: "memory");
    return n;
}

__attribute__((noinline)) static int st_outer(void **out, int max, int skip)
{
    int n = st_inner(out, max, skip);
    __asm__ volatile("" ::: "memory");
    return n;
}

static void *volatile g_uc_pc, *volatile g_handler_pc0;
static volatile int g_handler_n;

static void on_usr1(int signo, siginfo_t *si, void *uc)
{
    (void)signo;
    (void)si;
    void *r[32];
    g_handler_n = ProfilerGetStackTrace(r, 32, 0, uc);
    g_handler_pc0 = g_handler_n > 0 ? r[0] : NULL;
    g_uc_pc = (void *)((ucontext_t *)uc)->uc_mcontext.gregs[REG_RIP];
}

static int mode_stack_trace(void)
{
    void *r[64];
    int n = st_outer(r, 64, 0);
    printf("depth %d: %p %p, st_inner at %p, return address %p\n", n, r[0], n > 1 ? r[1] : NULL,
           (void *)st_inner, g_ra);
    CHECK(n >= 3);
    CHECK((char *)r[0] > (char *)st_inner && (char *)r[0] < (char *)st_inner + 4096);
    CHECK(r[1] == g_ra);
    n = st_outer(r, 64, 1);
    CHECK(n >= 2 && r[0] == g_ra);
    CHECK(st_outer(r, 1, 0) == 1);
    CHECK(ProfilerGetStackTrace(r, 0, 0, NULL) == 0);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_usr1;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
    raise(SIGUSR1);
    printf("handler: depth %d, pc %p, interrupted at %p\n", g_handler_n, g_handler_pc0, g_uc_pc);
    CHECK(g_handler_n >= 2 && g_handler_pc0 == g_uc_pc);
    return 0;
}

static uint64_t cpu_ns(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int mode_state_cost(const char *file)
{
    /* gperftools' profiler_unittest takes the counter during static
     * initialisation, before any profile runs: it must be there. */
    struct ProfilerState early;
    memset(&early, 0, sizeof early);
    ProfilerGetCurrentState(&early);
    const volatile int *early_ticks;
    memcpy(&early_ticks, early.profile_name + 1, sizeof early_ticks);
    CHECK(early.enabled == 0 && early.profile_name[0] == '\0');
    CHECK(ProfilerStart(file) != 0);
    burn_until_samples(gperf_hot, 20);
    struct ProfilerState st;
    enum { CALLS = 200000 };
    uint64_t t0 = cpu_ns(CLOCK_THREAD_CPUTIME_ID);
    for (int i = 0; i < CALLS; i++)
        ProfilerGetCurrentState(&st);
    uint64_t t1 = cpu_ns(CLOCK_THREAD_CPUTIME_ID);
    printf("state_ns %.1f\n", (double)(t1 - t0) / CALLS);
    CHECK(st.enabled && st.samples_gathered >= 20);
    CHECK(early_ticks != NULL);
    /* gperftools' profiler_unittest reads its tick count through a
     * pointer after the name's NUL. */
    size_t len = strlen(st.profile_name);
    const volatile int *ticks;
    CHECK(len + 1 + sizeof ticks <= sizeof st.profile_name);
    memcpy(&ticks, st.profile_name + len + 1, sizeof ticks);
    /* gperftools' test reads it as a plain volatile int; a relaxed atomic
     * load is the same read, and says so to TSan (our write is atomic). */
    CHECK(ticks == early_ticks && __atomic_load_n(ticks, __ATOMIC_RELAXED) >= st.samples_gathered);
    int want = __atomic_load_n(ticks, __ATOMIC_RELAXED) + 10;
    while (__atomic_load_n(ticks, __ATOMIC_RELAXED) < want)
        gperf_hot(5);
    ProfilerStop();
    fflush(stdout);
    return 0;
}

static int mode_burn(void)
{
    CHECK(ProfilingIsEnabledForAllThreads());
    burn_until_samples(gperf_cold, 20);
    return 0;
}

static int mode_fork_env(const char *self)
{
    CHECK(ProfilingIsEnabledForAllThreads()); /* CPUPROFILE did it */
    burn_until_samples(gperf_hot, 10);
    pid_t a = fork();
    CHECK(a >= 0);
    if (a == 0) {
        burn_until_samples(gperf_pre_a, 20);
        exit(0);
    }
    int status;
    CHECK(waitpid(a, &status, 0) == a && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    fflush(stdout);
    pid_t b = fork();
    CHECK(b >= 0);
    if (b == 0) {
        execl(self, self, "burn", "-", (char *)NULL);
        _exit(127);
    }
    CHECK(waitpid(b, &status, 0) == b && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    printf("forked %d exec %d\n", (int)a, (int)b);
    fflush(stdout);
    return 0;
}

static int mode_flush_many(const char *file)
{
    CHECK(ProfilerStart(file) != 0);
    burn_until_samples(gperf_hot, 50);
    uint64_t used = 0;
    int flushes = 0;
    while (used < 100000000u && flushes < 2000) {
        uint64_t t0 = cpu_ns(CLOCK_PROCESS_CPUTIME_ID);
        ProfilerFlush();
        used += cpu_ns(CLOCK_PROCESS_CPUTIME_ID) - t0;
        flushes++;
    }
    printf("flushes %d cpu_ms %.1f\n", flushes, used / 1e6);
    fflush(stdout);
    struct ProfilerState now;
    ProfilerGetCurrentState(&now);
    burn_until_samples(gperf_cold, now.samples_gathered + 20);
    ProfilerStop();
    return 0;
}

static void burn_cpu_ms(void (*fn)(uint64_t), uint64_t ms)
{
    uint64_t end = cpu_ns(CLOCK_THREAD_CPUTIME_ID) + ms * 1000000u;
    while (cpu_ns(CLOCK_THREAD_CPUTIME_ID) < end)
        fn(1);
}

static pthread_mutex_t g_turns = PTHREAD_MUTEX_INITIALIZER;

static void *realtime_other(void *arg)
{
    (void)arg;
    uint64_t t0 = mono_ns();
    ProfilerRegisterThread();
    pthread_mutex_lock(&g_turns);
    burn_cpu_ms(gperf_cold, 200);
    pthread_mutex_unlock(&g_turns);
    printf("thread %ld wall_ms %.1f\n", (long)syscall(SYS_gettid), (mono_ns() - t0) / 1e6);
    return NULL;
}

static int mode_realtime_threads(const char *file)
{
    uint64_t t0 = mono_ns();
    CHECK(ProfilerStart(file) != 0);
    burn_cpu_ms(gperf_hot, 200);
    /* Symbolizes what was sampled so far: the sampler is held up for that
     * long (100-400 ms here), and the threads start right after. */
    ProfilerFlush();
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        CHECK(pthread_create(&t[i], NULL, realtime_other, NULL) == 0);
    for (int i = 0; i < 2; i++)
        CHECK(pthread_join(t[i], NULL) == 0);
    burn_cpu_ms(gperf_hot, 200);
    ProfilerStop();
    printf("thread %ld wall_ms %.1f\n", (long)getpid(), (mono_ns() - t0) / 1e6);
    fflush(stdout);
    return 0;
}

static atomic_int g_urgs;

static void on_urg(int signo)
{
    (void)signo;
    atomic_fetch_add(&g_urgs, 1);
}

static int mode_signal_taken(const char *file)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_urg;
    sigemptyset(&sa.sa_mask);
    CHECK(sigaction(SIGURG, &sa, NULL) == 0);
    const char *expect = getenv("expect_start");
    int started = ProfilerStart(file);
    if (expect && !strcmp(expect, "0")) {
        CHECK(started == 0);
        return 0;
    }
    CHECK(started != 0);
    burn_until_samples(gperf_hot, 50);
    raise(SIGURG);
    raise(SIGURG);
    ProfilerStop();
    CHECK(atomic_load(&g_urgs) == 2); /* the program's handler kept its signal */
    struct sigaction cur;
    CHECK(sigaction(SIGURG, NULL, &cur) == 0 && cur.sa_handler == on_urg);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODE FILE\n", argv[0]);
        return 2;
    }
    const char *mode = argv[1], *file = argv[2];
    if (!strcmp(mode, "basic"))
        return mode_basic(file);
    if (!strcmp(mode, "state"))
        return mode_state(file);
    if (!strcmp(mode, "flush"))
        return mode_flush(file);
    if (!strcmp(mode, "existing"))
        return mode_existing(file);
    if (!strcmp(mode, "vfork_thread"))
        return mode_vfork_thread(file);
    if (!strcmp(mode, "bad_path")) {
        CHECK(ProfilerStart(file) == 0);
        CHECK(!ProfilingIsEnabledForAllThreads());
        return 0;
    }
    if (!strcmp(mode, "signal_taken"))
        return mode_signal_taken(file);
    if (!strcmp(mode, "stack_trace"))
        return mode_stack_trace();
    if (!strcmp(mode, "state_cost"))
        return mode_state_cost(file);
    if (!strcmp(mode, "burn"))
        return mode_burn();
    if (!strcmp(mode, "fork_env"))
        return mode_fork_env(argv[0]);
    if (!strcmp(mode, "flush_many"))
        return mode_flush_many(file);
    if (!strcmp(mode, "realtime_threads"))
        return mode_realtime_threads(file);
    if (!strcmp(mode, "env")) {
        CHECK(ProfilingIsEnabledForAllThreads()); /* CPUPROFILE did it */
        CHECK(ProfilerStart(file) == 0);
        burn_until_samples(gperf_hot, 50);
        return 0; /* written at exit, as gperftools does */
    }
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
}
