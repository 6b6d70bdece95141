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
 *   env FILE              CPUPROFILE started a profile at load: Start fails */
#include <gperftools/profiler.h>

#include <pthread.h>
#include <signal.h>
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

#define ITERS_PER_MS 300000u
#define HOT(name)                                                                                  \
    __attribute__((noinline)) void name(uint64_t ms)                                               \
    {                                                                                              \
        volatile uint64_t x = 1;                                                                   \
        for (uint64_t i = 0; i < ms * ITERS_PER_MS; i++)                                           \
            x = x * 6364136223846793005u + 1442695040888963407u;                                   \
    }
HOT(gperf_hot)
HOT(gperf_cold)
HOT(gperf_pre_a)
HOT(gperf_pre_b)

/* Burns until the profile holds at least n samples (ProfilerGetCurrentState
 * counts them), so a stalled host cannot leave it empty. */
static void burn_until_samples(void (*fn)(uint64_t), int n)
{
    struct ProfilerState st;
    do {
        fn(20);
        ProfilerGetCurrentState(&st);
    } while (st.samples_gathered < n);
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

/* The one-letter state of thread tid, from /proc/self/task/tid/stat. */
static char thread_state(int tid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", tid);
    FILE *f = fopen(path, "re");
    if (!f)
        return '?';
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    return p && p[1] == ' ' ? p[2] : '?';
}

static int mode_vfork_thread(const char *file)
{
    pthread_t a;
    CHECK(pthread_create(&a, NULL, vfork_thread, NULL) == 0);
    /* Wait until it sleeps in vfork() (state D) for its child. */
    uint64_t give_up = mono_ns() + 30000000000u;
    while (!atomic_load(&g_vfork_tid) || thread_state(atomic_load(&g_vfork_tid)) != 'D') {
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
    if (!strcmp(mode, "env")) {
        CHECK(ProfilingIsEnabledForAllThreads()); /* CPUPROFILE did it */
        CHECK(ProfilerStart(file) == 0);
        burn_until_samples(gperf_hot, 50);
        return 0; /* written at exit, as gperftools does */
    }
    fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
}
