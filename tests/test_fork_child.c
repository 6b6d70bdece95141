/* A fork() child must find usable every lock that another thread of the
 * parent held at the fork: the sample labels' and app frames' (labels/),
 * the event names' and the event log's (events/), and the JIT tables',
 * their retired snapshots' and their readers' counts (module_cache/jit*).
 * Each case runs threads that use those paths without pause, forks until
 * every lock of the case was found held in some child (counted by
 * common/fork_resets.h, so that the window is seen to be hit), and makes
 * each child use the same paths and exit; a child that does not exit in
 * 30 s hung on a lock held at the fork. */
#include "test.h"
#include "test_util.h"

#include "common/fork_resets.h"
#include "events/events.h"
#include "module_cache/jit_regions.h"

#include <snapprof/jit.h>
#include <snapprof/snapprof.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Forks at most this many times; a case stops sooner once every lock was
 * found held at least once (and MIN_FORKS were taken). */
#define MAX_FORKS 3000
#define MIN_FORKS 50
#define CHILD_STATUS_FAILED 100

static atomic_int g_stop;

/* ASan's allocator is not made fork-safe for a multi-threaded parent: a
 * child that calls malloc() while other threads of the parent malloc()
 * can hang in ASan itself (not in our locks), and these children do. */
static void skip_under_asan(void)
{
#if defined(__SANITIZE_ADDRESS__)
    printf("skipped: the children malloc() while the parent's threads do, which can hang in "
           "ASan's allocator\n");
    exit(TEST_SKIP);
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
    printf("skipped: the children malloc() while the parent's threads do, which can hang in "
           "ASan's allocator\n");
    exit(TEST_SKIP);
#endif
#endif
}

static void skip_under_sanitizers(void)
{
    tu_skip_under_tsan("TSan reports the parent's threads as leaked in a fork() child");
    skip_under_asan();
}

static pthread_t start(void *(*fn)(void *), void *arg)
{
    pthread_t th;
    ASSERT_EQ(pthread_create(&th, NULL, fn, arg), 0);
    return th;
}

static void stop_all(pthread_t *th, int n)
{
    atomic_store(&g_stop, 1);
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
    atomic_store(&g_stop, 0);
}

/* Forks while the case's threads run; child() (1 = it could use every
 * path) runs in each child. Fails on a child that hangs or fails; checks
 * that each of the n locks was found held in some child. */
static void fork_until_hit(const char *what, const snapprof__fork_lock_t *locks, int n,
                           int (*child)(void))
{
    int held[8] = {0}, forks = 0;
    ASSERT_LE(n, 8);
    for (; forks < MAX_FORKS; forks++) {
        int all = 1;
        for (int k = 0; k < n; k++)
            all &= held[k] > 0;
        if (all && forks >= MIN_FORKS)
            break;
        usleep(500);
        unsigned before[8];
        for (int k = 0; k < n; k++)
            before[k] = snapprof__fork_resets(locks[k]);
        pid_t pid = fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
            int ok = child();
            int bits = 0;
            for (int k = 0; k < n; k++)
                bits |= (snapprof__fork_resets(locks[k]) != before[k]) << k;
            _exit(ok ? bits : CHILD_STATUS_FAILED);
        }
        int status = 0;
        uint64_t deadline = tu_mono_ns() + 30000000000u;
        pid_t got;
        while ((got = waitpid(pid, &status, WNOHANG)) == 0 && tu_mono_ns() < deadline)
            usleep(500);
        if (got == 0) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            TEST_FAIL("%s: fork %d: the child hung on a lock held at the fork", what, forks);
        }
        ASSERT(WIFEXITED(status));
        ASSERT_NE(WEXITSTATUS(status), CHILD_STATUS_FAILED);
        for (int k = 0; k < n; k++)
            held[k] += (WEXITSTATUS(status) >> k) & 1;
    }
    printf("%s: %d forks; found held:", what, forks);
    for (int k = 0; k < n; k++)
        printf(" lock %d at %d", (int)locks[k], held[k]);
    printf("\n");
    /* Not vacuous: each lock's window was hit. */
    for (int k = 0; k < n; k++)
        ASSERT_GE(held[k], 1);
}

/* ------------------------------------------------------------------------ */
/* labels/                                                                  */
/* ------------------------------------------------------------------------ */

static void *process_labeller(void *arg)
{
    (void)arg;
    for (int64_t i = 0; !atomic_load(&g_stop); i++)
        snapprof_label_set_num(SNAPPROF_LABEL_PROCESS, "fork_proc", i, NULL);
    return NULL;
}

static void *framer(void *arg)
{
    (void)arg;
    for (uint64_t i = 0; !atomic_load(&g_stop); i++) {
        snapprof_app_frame_begin(i);
        snapprof_app_frame_end(i);
    }
    return NULL;
}

static int labels_child(void)
{
    return snapprof_label_set_num(SNAPPROF_LABEL_PROCESS, "fork_child", 1, NULL) == 0 &&
           snapprof_label_set_num(SNAPPROF_LABEL_PROCESS, "fork_proc", -1, NULL) == 0 &&
           snapprof_app_frame_begin(UINT64_MAX - 1) == 0 &&
           snapprof_app_frame_end(UINT64_MAX - 1) == 0;
}

static void test_labels(void)
{
    /* Neither the children nor the parent's threads allocate here: ASan
     * runs it. */
    tu_skip_under_tsan("TSan reports the parent's threads as leaked in a fork() child");
    pthread_t th[2] = {start(process_labeller, NULL), start(framer, NULL)};
    static const snapprof__fork_lock_t locks[] = {SNAPPROF__FORK_LABELS_PROCESS,
                                                  SNAPPROF__FORK_APP_FRAMES};
    fork_until_hit("labels", locks, 2, labels_child);
    stop_all(th, 2);
}

/* ------------------------------------------------------------------------ */
/* events/                                                                  */
/* ------------------------------------------------------------------------ */

static void *attacher(void *arg)
{
    (void)arg;
    while (!atomic_load(&g_stop))
        snapprof_counter_attach("fork_counter", NULL, 1.0); /* -EEXIST, under the lock */
    return NULL;
}

static void *instants(void *arg)
{
    (void)arg;
    while (!atomic_load(&g_stop))
        snapprof_instant("fork_instant");
    return NULL;
}

static void *log_reader(void *arg)
{
    snapprof__event_reader_t *r = arg;
    while (!atomic_load(&g_stop)) {
        snapprof__event_reader_read(r);
        r->count = 0; /* keep the copy small: the lock is what matters */
    }
    return NULL;
}

static void *child_instant(void *arg)
{
    (void)arg;
    snapprof_instant("fork_child_thread"); /* registers this thread */
    return NULL;
}

static int events_child(void)
{
    int rc = snapprof_counter_attach("fork_child_counter", NULL, 1.0);
    if (rc != 0 && rc != -ENOSPC)
        return 0;
    snapprof__event_reader_t r = {0};
    if (snapprof__event_reader_open(&r) != 0 || snapprof_instant("fork_child_instant") != 0)
        return 0;
    pthread_t th;
    if (pthread_create(&th, NULL, child_instant, NULL) != 0)
        return 0;
    pthread_join(th, NULL);
    snapprof__event_reader_read(&r);
    int seen = 0;
    for (size_t i = 0; i < r.count; i++)
        seen += strcmp(r.events[i].name, "fork_child_instant") == 0 ||
                strcmp(r.events[i].name, "fork_child_thread") == 0;
    snapprof__event_reader_free(&r);
    return seen == 2;
}

static void test_events(void)
{
    skip_under_sanitizers();
    ASSERT_OK(snapprof_counter_attach("fork_counter", NULL, 1.0));
    snapprof__event_reader_t r = {0};
    ASSERT_OK(snapprof__event_reader_open(&r));
    pthread_t th[3] = {start(attacher, NULL), start(instants, NULL), start(log_reader, &r)};
    static const snapprof__fork_lock_t locks[] = {SNAPPROF__FORK_EVENT_NAMES,
                                                  SNAPPROF__FORK_EVENT_LOG};
    fork_until_hit("events", locks, 2, events_child);
    stop_all(th, 3);
    snapprof__event_reader_free(&r);
}

/* ------------------------------------------------------------------------ */
/* module_cache/jit*                                                        */
/* ------------------------------------------------------------------------ */

#define JIT_BASE ((uintptr_t)0x6f0000000000ull)
#define PERF_BASE ((uintptr_t)0x6f1000000000ull)
#define PERF_LINES 2000

static char g_maps[2][4096];

static void *registrar(void *arg)
{
    (void)arg;
    while (!atomic_load(&g_stop)) {
        snapprof_jit_region_register(JIT_BASE, 4096, "fork_region", NULL);
        snapprof_jit_region_unregister(JIT_BASE);
    }
    return NULL;
}

/* Switching files drops every perf map region; the refresh then parses
 * PERF_LINES lines under the table's lock. */
static void *perf_reader(void *arg)
{
    (void)arg;
    for (int i = 0; !atomic_load(&g_stop); i++) {
        snapprof_jit_perf_map_configure(g_maps[i & 1], NULL);
        snapprof__jit_perf_map_refresh_now();
    }
    return NULL;
}

static void *jit_finder(void *arg)
{
    (void)arg;
    for (uintptr_t i = 0; !atomic_load(&g_stop); i++)
        snapprof__jit_find(PERF_BASE + (i % PERF_LINES) * 64 + 1, 0);
    return NULL;
}

static int jit_child(void)
{
    uintptr_t mine = JIT_BASE + 0x100000;
    if (snapprof_jit_region_register(mine, 4096, "fork_child_region", NULL) != 0)
        return 0;
    const snapprof_module_t *m = snapprof__jit_find(mine + 8, 0);
    if (m == NULL || snapprof_jit_region_unregister(mine) != 0)
        return 0;
    snapprof__jit_perf_map_refresh_now(); /* what the reset left, read on */
    if (snapprof_jit_perf_map_configure(g_maps[0], NULL) != 0)
        return 0;
    snapprof__jit_perf_map_refresh_now();
    snapprof_jit_stats_t st;
    return snapprof__jit_find(PERF_BASE + 1, 0) != NULL && snapprof_jit_get_stats(&st) == 0 &&
           st.perf_map_regions == PERF_LINES;
}

static void test_jit(void)
{
    skip_under_sanitizers();
    char *dir = tu_make_tmpdir("fork_jit");
    for (int f = 0; f < 2; f++) {
        snprintf(g_maps[f], sizeof g_maps[f], "%s/perf-%d.map", dir, f);
        FILE *out = fopen(g_maps[f], "w");
        ASSERT_NOT_NULL(out);
        for (int i = 0; i < PERF_LINES; i++)
            fprintf(out, "%lx 40 fork_perf_%d_%d\n", (unsigned long)(PERF_BASE + (uintptr_t)i * 64),
                    f, i);
        ASSERT_EQ(fclose(out), 0);
    }
    pthread_t th[3] = {start(registrar, NULL), start(perf_reader, NULL), start(jit_finder, NULL)};
    static const snapprof__fork_lock_t locks[] = {
        SNAPPROF__FORK_JIT_API, SNAPPROF__FORK_JIT_PERF_MAP, SNAPPROF__FORK_JIT_RETIRE,
        SNAPPROF__FORK_JIT_READERS};
    fork_until_hit("jit", locks, 4, jit_child);
    stop_all(th, 3);
    for (int f = 0; f < 2; f++)
        unlink(g_maps[f]);
    rmdir(dir);
    free(dir);
}

int main(int argc, char **argv)
{
    static const test_case_t cases[] = {
        {"labels", test_labels},
        {"events", test_events},
        {"jit", test_jit},
    };
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
