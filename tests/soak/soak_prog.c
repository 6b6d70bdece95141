/* The soak program (issue 14): everything at once that makes a profiler's
 * life hard, for --seconds N. It is linked to the preload library, so the
 * profiler starts from the environment (SNAPPROF_OUTPUT,
 * SNAPPROF_FREQUENCY, ...) exactly as under `snapprof record` or
 * LD_PRELOAD, and it runs under the sanitizers too (a sanitized library
 * cannot be preloaded into a program that is not). Five parts, each on a
 * thread of its own:
 *
 *   threads   short threads (about 100 us of work each) created and
 *             joined four at a time, and one detached thread a round
 *   dlopen    dlopen() the soak library (--lib), call soak_lib_work in it,
 *             dlclose() it
 *   fork      a child that works and _exit()s, then a child that execs
 *             this program (--exec-child) or /bin/true, in turn
 *   fibers    four ucontext fibers at a time, each on a malloc'd stack,
 *             switched round-robin and working between switches; then
 *             freed and made anew. Annotated for ASan and TSan.
 *   recurse   recursion SOAK_DEPTH deep, working at the bottom
 *
 * Everything it starts it joins or waits for. It prints one line of counts
 * and exits 0 only when every part ran and every child exited 0.
 *
 *   soak_prog --seconds N --lib PATH [--only PART,...]
 *   soak_prog --exec-child          (what the fork part execs)
 *
 * --only runs the parts named (and counts only theirs): to find which part
 * a failure needs.
 *
 * Work is counted in rounds of an LCG, not in time: the thread CPU clock
 * on these VMs jumps now and then, and sanitizers slow the loops. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SOAK_ASAN 1
#endif
#if __has_feature(thread_sanitizer)
#define SOAK_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(SOAK_ASAN)
#define SOAK_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__) && !defined(SOAK_TSAN)
#define SOAK_TSAN 1
#endif
#ifdef SOAK_ASAN
#include <sanitizer/common_interface_defs.h>
#endif
#ifdef SOAK_TSAN
#include <sanitizer/tsan_interface.h>
#endif

/* The functions the test looks for by name must keep it: no inlining and,
 * with GCC, no clones named soak_recurse.constprop.0. */
#if defined(__clang__)
#define SOAK_NOINLINE __attribute__((noinline))
#else
#define SOAK_NOINLINE __attribute__((noinline, noclone))
#endif

#define SOAK_DEPTH 2000
#define THREAD_ITERS 30000u   /* about 100 us */
#define LIB_ITERS 600000u     /* about 2 ms */
#define CHILD_ITERS 1500000u  /* about 5 ms */
#define FIBER_ITERS 15000u    /* about 50 us between switches */
#define BOTTOM_ITERS 1500000u /* about 5 ms at the bottom of the recursion */
#define FIBERS 4
#define FIBER_ROUNDS 50
#define FIBER_STACK (512 * 1024)
#define FORK_PAUSE_NS 100000000u /* between fork rounds: children write profiles */

static atomic_int g_stop;
static atomic_int g_failed;
static atomic_ullong g_threads, g_detached, g_detached_live, g_dlopens, g_forks, g_execs,
    g_fiber_switches, g_fibers, g_recursions;
static const char *g_lib;
static char g_self[4096];

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "soak: " __VA_ARGS__);                                                     \
        fprintf(stderr, "\n");                                                                     \
        atomic_store(&g_failed, 1);                                                                \
    } while (0)

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* TSan runs a signal handler only when the thread next enters its runtime
 * (an intercepted call), which a busy loop never does: every work loop
 * calls this now and then, so that its samples are taken while its frames
 * are still on the stack. An uncontended lock costs little elsewhere; it is
 * the thread's own, so a forked child never finds it held by a thread that
 * the fork left behind. */
void soak_poll(void)
{
    static _Thread_local pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&mu);
    pthread_mutex_unlock(&mu);
}

#define WORK(name)                                                                                 \
    SOAK_NOINLINE uint64_t name(uint64_t iters, uint64_t x)                                        \
    {                                                                                              \
        volatile uint64_t v = x;                                                                   \
        for (uint64_t i = 0; i < iters; i++) {                                                     \
            v = v * 6364136223846793005u + 1442695040888963407u;                                   \
            if ((i & 4095) == 4095)                                                                \
                soak_poll();                                                                       \
        }                                                                                          \
        return v;                                                                                  \
    }
WORK(soak_thread_work)
WORK(soak_child_work)
WORK(soak_fiber_work)
WORK(soak_bottom)

/* ------------------------------------------------------------------------ */
/* threads                                                                  */
/* ------------------------------------------------------------------------ */

static void *short_thread(void *arg)
{
    soak_thread_work(THREAD_ITERS, (uint64_t)(uintptr_t)arg);
    return NULL;
}

static void *detached_thread(void *arg)
{
    soak_thread_work(THREAD_ITERS, (uint64_t)(uintptr_t)arg);
    atomic_fetch_sub(&g_detached_live, 1);
    return NULL;
}

static void *part_threads(void *arg)
{
    (void)arg;
    pthread_attr_t detached;
    pthread_attr_init(&detached);
    pthread_attr_setdetachstate(&detached, PTHREAD_CREATE_DETACHED);
    while (!atomic_load(&g_stop)) {
        pthread_t th[4];
        int n = 0;
        for (; n < 4; n++)
            if (pthread_create(&th[n], NULL, short_thread, (void *)(uintptr_t)n) != 0)
                break;
        atomic_fetch_add(&g_detached_live, 1);
        pthread_t d;
        if (pthread_create(&d, &detached, detached_thread, NULL) == 0)
            atomic_fetch_add(&g_detached, 1);
        else
            atomic_fetch_sub(&g_detached_live, 1);
        for (int i = 0; i < n; i++)
            pthread_join(th[i], NULL);
        atomic_fetch_add(&g_threads, (unsigned)n);
        if (n < 4) { /* out of threads for now: the detached ones end soon */
            sleep_ns(1000000u);
        }
    }
    pthread_attr_destroy(&detached);
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* dlopen                                                                   */
/* ------------------------------------------------------------------------ */

static void *part_dlopen(void *arg)
{
    (void)arg;
    uint64_t x = 1;
    while (!atomic_load(&g_stop)) {
        void *h = dlopen(g_lib, RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            FAIL("dlopen %s: %s", g_lib, dlerror());
            return NULL;
        }
        uint64_t (*work)(uint64_t, uint64_t, void (*)(void)) =
            (uint64_t(*)(uint64_t, uint64_t, void (*)(void)))dlsym(h, "soak_lib_work");
        if (!work) {
            FAIL("dlsym soak_lib_work: %s", dlerror());
            dlclose(h);
            return NULL;
        }
        x = work(LIB_ITERS, x, soak_poll);
        if (dlclose(h) != 0) {
            FAIL("dlclose: %s", dlerror());
            return NULL;
        }
        atomic_fetch_add(&g_dlopens, 1);
    }
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* fork and exec                                                            */
/* ------------------------------------------------------------------------ */

static int wait_ok(pid_t pid, const char *what)
{
    int st;
    while (waitpid(pid, &st, 0) < 0) {
        if (errno != EINTR) {
            FAIL("waitpid %s: %s", what, strerror(errno));
            return 0;
        }
    }
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
        return 1;
    if (WIFSIGNALED(st))
        FAIL("%s child %d: signal %d", what, (int)pid, WTERMSIG(st));
    else
        FAIL("%s child %d: exit status %d", what, (int)pid, WEXITSTATUS(st));
    return 0;
}

static void *part_fork(void *arg)
{
    (void)arg;
    for (unsigned round = 0; !atomic_load(&g_stop); round++) {
        pid_t pid = fork();
        if (pid < 0) {
            FAIL("fork: %s", strerror(errno));
            return NULL;
        }
        if (pid == 0) {
            soak_child_work(CHILD_ITERS, round);
            _exit(0);
        }
        if (!wait_ok(pid, "forked"))
            return NULL;
        atomic_fetch_add(&g_forks, 1);

        pid = fork();
        if (pid < 0) {
            FAIL("fork: %s", strerror(errno));
            return NULL;
        }
        if (pid == 0) {
            if (round % 2 == 0)
                execl(g_self, g_self, "--exec-child", (char *)NULL);
            else
                execl("/bin/true", "true", (char *)NULL);
            _exit(127);
        }
        if (!wait_ok(pid, round % 2 == 0 ? "exec self" : "exec /bin/true"))
            return NULL;
        atomic_fetch_add(&g_execs, 1);
        sleep_ns(FORK_PAUSE_NS);
    }
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* fibers                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct fiber {
    ucontext_t ctx;
    char *stack;
    void *tsan; /* TSan's fiber, or NULL */
    int done;
} fiber_t;

/* The scheduler's context and stack. Only the fibers thread and the
 * fibers it runs touch these. */
static ucontext_t g_sched_ctx;
static void *g_sched_tsan;
static const void *g_sched_bottom;
static size_t g_sched_size;
static fiber_t *g_current;

/* Switches from the running context to `to`, telling the sanitizers:
 * ASan which stack comes next (and, when the one we leave is gone for
 * good, that it may drop its fake stack), TSan which fiber. */
static void fiber_switch(ucontext_t *from, ucontext_t *to, void *to_tsan, const void *to_bottom,
                         size_t to_size, int leaving_for_good)
{
#ifdef SOAK_ASAN
    void *fake = NULL;
    __sanitizer_start_switch_fiber(leaving_for_good ? NULL : &fake, to_bottom, to_size);
#else
    (void)to_bottom;
    (void)to_size;
    (void)leaving_for_good;
#endif
#ifdef SOAK_TSAN
    __tsan_switch_to_fiber(to_tsan, 0);
#else
    (void)to_tsan;
#endif
    if (swapcontext(from, to) != 0)
        FAIL("swapcontext: %s", strerror(errno));
#ifdef SOAK_ASAN
    __sanitizer_finish_switch_fiber(fake, NULL, NULL);
#endif
}

static void fiber_main(void)
{
#ifdef SOAK_ASAN
    /* First entry: learn the scheduler's stack, to switch back to it. */
    __sanitizer_finish_switch_fiber(NULL, &g_sched_bottom, &g_sched_size);
#endif
    fiber_t *f = g_current;
    for (int r = 0; r < FIBER_ROUNDS; r++) {
        soak_fiber_work(FIBER_ITERS, (uint64_t)r);
        fiber_switch(&f->ctx, &g_sched_ctx, g_sched_tsan, g_sched_bottom, g_sched_size, 0);
    }
    f->done = 1;
    fiber_switch(&f->ctx, &g_sched_ctx, g_sched_tsan, g_sched_bottom, g_sched_size, 1);
    FAIL("a finished fiber was resumed");
    abort();
}

/* A fiber ready to start at fiber_main; 0, or -1 when out of memory.
 * Its own function: getcontext returns twice, which would make every
 * local of the caller suspect (-Wclobbered). */
static int fiber_make(fiber_t *f)
{
    memset(f, 0, sizeof *f);
    f->stack = malloc(FIBER_STACK);
    if (!f->stack || getcontext(&f->ctx) != 0) {
        free(f->stack);
        return -1;
    }
    f->ctx.uc_stack.ss_sp = f->stack;
    f->ctx.uc_stack.ss_size = FIBER_STACK;
    f->ctx.uc_link = NULL; /* fibers never return: they switch back */
    makecontext(&f->ctx, fiber_main, 0);
#ifdef SOAK_TSAN
    f->tsan = __tsan_create_fiber(0);
#endif
    return 0;
}

static void *part_fibers(void *arg)
{
    (void)arg;
#ifdef SOAK_TSAN
    g_sched_tsan = __tsan_get_current_fiber();
#endif
    while (!atomic_load(&g_stop)) {
        fiber_t fs[FIBERS];
        int made = 0;
        while (made < FIBERS && fiber_make(&fs[made]) == 0)
            made++;
        if (made < FIBERS)
            FAIL("fiber %d: no stack or no context", made);
        for (int live = made; live > 0;) {
            for (int i = 0; i < made; i++) {
                fiber_t *f = &fs[i];
                if (f->done)
                    continue;
                g_current = f;
                fiber_switch(&g_sched_ctx, &f->ctx, f->tsan, f->stack, FIBER_STACK, 0);
                atomic_fetch_add(&g_fiber_switches, 1);
                if (f->done)
                    live--;
            }
        }
        for (int i = 0; i < made; i++) {
#ifdef SOAK_TSAN
            __tsan_destroy_fiber(fs[i].tsan);
#endif
            free(fs[i].stack);
            atomic_fetch_add(&g_fibers, 1);
        }
        if (made < FIBERS)
            return NULL;
    }
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* recursion                                                                */
/* ------------------------------------------------------------------------ */

SOAK_NOINLINE uint64_t soak_recurse(int depth, uint64_t x)
{
    volatile uint64_t pad[2] = {x, (uint64_t)depth};
    if (depth == 0)
        return soak_bottom(BOTTOM_ITERS, pad[0]);
    /* Used after the call: not a tail call, so every level keeps a frame. */
    return soak_recurse(depth - 1, pad[0] + 1) ^ pad[1];
}

static void *part_recurse(void *arg)
{
    (void)arg;
    uint64_t x = 0;
    while (!atomic_load(&g_stop)) {
        x = soak_recurse(SOAK_DEPTH, x);
        atomic_fetch_add(&g_recursions, 1);
    }
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* main                                                                     */
/* ------------------------------------------------------------------------ */

static int usage(const char *argv0)
{
    fprintf(stderr, "usage: %s --seconds N --lib PATH | --exec-child\n", argv0);
    return 2;
}

int main(int argc, char **argv)
{
    double seconds = 0;
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--exec-child")) {
            soak_child_work(CHILD_ITERS, 7);
            return 0;
        } else if (!strcmp(argv[i], "--seconds") && i + 1 < argc) {
            seconds = strtod(argv[++i], NULL);
        } else if (!strcmp(argv[i], "--only") && i + 1 < argc) {
            only = argv[++i];
        } else if (!strcmp(argv[i], "--lib") && i + 1 < argc) {
            g_lib = argv[++i];
        } else {
            return usage(argv[0]);
        }
    }
    if (!(seconds > 0) || !g_lib)
        return usage(argv[0]);
    ssize_t n = readlink("/proc/self/exe", g_self, sizeof g_self - 1);
    if (n <= 0) {
        perror("readlink /proc/self/exe");
        return 2;
    }
    g_self[n] = '\0';

    static const struct {
        const char *name;
        void *(*fn)(void *);
    } parts[] = {{"threads", part_threads},
                 {"dlopen", part_dlopen},
                 {"fork", part_fork},
                 {"fibers", part_fibers},
                 {"recurse", part_recurse}};
    enum { NPARTS = sizeof parts / sizeof parts[0] };
    pthread_t th[NPARTS];
    int run[NPARTS];
    uint64_t t0 = mono_ns();
    for (int i = 0; i < NPARTS; i++) {
        run[i] = !only || strstr(only, parts[i].name) != NULL;
        if (run[i] && pthread_create(&th[i], NULL, parts[i].fn, NULL) != 0) {
            fprintf(stderr, "soak: cannot start %s\n", parts[i].name);
            return 2;
        }
    }
    uint64_t end = t0 + (uint64_t)(seconds * 1e9);
    for (uint64_t now; (now = mono_ns()) < end && !atomic_load(&g_failed);)
        sleep_ns(end - now < 100000000u ? end - now : 100000000u);
    atomic_store(&g_stop, 1);
    for (int i = 0; i < NPARTS; i++)
        if (run[i])
            pthread_join(th[i], NULL);
    while (atomic_load(&g_detached_live) > 0)
        sleep_ns(1000000u);
    double took = (double)(mono_ns() - t0) / 1e9;

    unsigned long long counts[] = {g_threads, g_detached,       g_dlopens, g_forks,
                                   g_execs,   g_fiber_switches, g_fibers,  g_recursions};
    static const char *const names[] = {"threads", "detached",       "dlopens", "forks",
                                        "execs",   "fiber_switches", "fibers",  "recursions"};
    int missing = 0;
    printf("soak: pid=%d seconds=%.1f", (int)getpid(), took);
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        printf(" %s=%llu", names[i], counts[i]);
        missing |= counts[i] == 0 && !only;
    }
    printf("\n");
    if (missing)
        fprintf(stderr, "soak: a part never completed a round\n");
    if (atomic_load(&g_failed) || missing)
        return 1;
    printf("soak: ok\n");
    return 0;
}
