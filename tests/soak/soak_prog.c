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
 * With --heap (soak_heap) it first calls snapprof_heap_hooks_install()
 * (GOT patching: works linked and in the sanitizer builds), and the parts
 * allocate in the ways the heap path must survive: a short thread's block
 * freed by the thread that joins it, a block freed by a thread-specific
 * destructor as its thread exits (detached ones too), realloc chains,
 * calloc and posix_memalign, allocations on fiber stacks and at the bottom
 * of the deep recursion, in the fork child before _exit() and in the
 * exec'd soak, and in the dlopen'd library: a block freed there and one
 * kept across dlclose() and freed after it. Every other dlopen round calls
 * install again, so that the library's GOT is patched at once; the others
 * leave it to the sampling thread, which races the dlclose().
 *
 * Everything it starts it joins or waits for. It prints one line of counts
 * and exits 0 only when every part ran and every child exited 0.
 *
 *   soak_prog --seconds N --lib PATH [--only PART,...] [--heap]
 *   soak_prog --exec-child [--heap] (what the fork part execs)
 *
 * --only runs the parts named (and counts only theirs): to find which part
 * a failure needs.
 *
 * Work is counted in rounds of an LCG, not in time: the thread CPU clock
 * on these VMs jumps now and then, and sanitizers slow the loops. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <snapprof/heap.h>
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
static int g_heap; /* --heap */
static pthread_key_t g_heap_key;
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
/* heap (--heap)                                                            */
/* ------------------------------------------------------------------------ */

/* Writes to a block, so that no malloc/free pair is elided. */
static void touch(void *p, size_t size)
{
    volatile char *c = p;
    for (size_t i = 0; i < size; i += 4096)
        c[i] = (char)i;
    c[size - 1] = 1;
}

/* A block of size bytes by one of malloc, calloc, posix_memalign and a
 * realloc of a smaller block, in turn; NULL when out of memory. */
SOAK_NOINLINE void *soak_heap_alloc(size_t size, unsigned how)
{
    void *p = NULL;
    switch (how % 4) {
    case 0:
        p = malloc(size);
        break;
    case 1:
        p = calloc(1, size);
        break;
    case 2:
        if (posix_memalign(&p, 64, size) != 0)
            p = NULL;
        break;
    default: {
        void *q = malloc(size / 2 + 1);
        if (q && !(p = realloc(q, size)))
            free(q);
    }
    }
    if (p)
        touch(p, size);
    return p;
}

/* A realloc chain: 16 bytes grown to 64 KiB by doubling (moves and grows
 * in place), then shrunk once, then freed. */
SOAK_NOINLINE void soak_heap_realloc_chain(unsigned seed)
{
    char *p = NULL;
    for (size_t size = 16 + (seed & 15); size <= 65536; size *= 2) {
        char *q = realloc(p, size);
        if (!q)
            break;
        p = q;
        touch(p, size);
    }
    char *q = realloc(p, 100);
    if (q)
        p = q;
    free(p);
}

/* A few blocks of each kind, freed in another order than made, and a
 * realloc chain: about 40 KiB, so some ten samples a call at 4096. */
SOAK_NOINLINE void soak_heap_churn(unsigned seed)
{
    if (!g_heap)
        return;
    void *b[8];
    for (unsigned i = 0; i < 8; i++)
        b[i] = soak_heap_alloc((size_t)64 << (i % 6), seed + i);
    for (unsigned i = 0; i < 8; i++)
        free(b[(i * 3 + seed) % 8]);
    soak_heap_realloc_chain(seed);
}

/* Frees a thread's block as it exits (a pthread_key destructor): the heap
 * path sees a free after the thread's own TLS may be gone. */
static void heap_key_free(void *p)
{
    free(p);
}

/* Gives the calling thread a block that its exit frees. */
static void heap_keep_until_exit(unsigned seed)
{
    if (g_heap)
        pthread_setspecific(g_heap_key, soak_heap_alloc(1024 + seed % 4096, seed));
}

/* ------------------------------------------------------------------------ */
/* threads                                                                  */
/* ------------------------------------------------------------------------ */

/* With --heap, returns a block that the joining thread frees. */
static void *short_thread(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    heap_keep_until_exit(seed);
    soak_heap_churn(seed);
    soak_thread_work(THREAD_ITERS, (uint64_t)(uintptr_t)arg);
    return g_heap ? soak_heap_alloc(4096 + 512 * seed, seed) : NULL;
}

static void *detached_thread(void *arg)
{
    heap_keep_until_exit(7);
    soak_heap_churn(7);
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
        for (int i = 0; i < n; i++) {
            void *block = NULL;
            pthread_join(th[i], &block);
            free(block); /* allocated on the thread just joined */
        }
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
    for (unsigned round = 0; !atomic_load(&g_stop); round++) {
        void *h = dlopen(g_lib, RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            FAIL("dlopen %s: %s", g_lib, dlerror());
            return NULL;
        }
        void *kept = NULL;
        if (g_heap) {
            if (round % 2 == 0 && snapprof_heap_hooks_install() < 0)
                FAIL("snapprof_heap_hooks_install after dlopen failed");
            uint64_t (*lib_alloc)(uint64_t) = (uint64_t(*)(uint64_t))dlsym(h, "soak_lib_alloc");
            void *(*lib_keep)(size_t) = (void *(*)(size_t))dlsym(h, "soak_lib_keep");
            if (!lib_alloc || !lib_keep) {
                FAIL("dlsym soak_lib_alloc, soak_lib_keep: %s", dlerror());
                dlclose(h);
                return NULL;
            }
            x = lib_alloc(x);
            kept = lib_keep(2048 + (round % 8) * 1024);
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
        free(kept); /* allocated by a library gone now */
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
            /* The child allocates, but not under ASan or TSan: GCC 12's
             * sanitizer allocators do not hold their size-class region
             * locks across fork(), so a child forked while another thread
             * was inside malloc() of a size class blocks for good in its
             * own first malloc() of that class (gdb on hung soak_heap
             * children: realloc -> SizeClassAllocator64::GetFromAllocator,
             * ASan, and TSan at h-tsan; README.md, findings 5 and 10). A
             * sanitizer build does not profile the child anyway; what it
             * execs allocates with --heap. */
#if !defined(SOAK_ASAN) && !defined(SOAK_TSAN)
            soak_heap_churn(round);
#endif
            soak_child_work(CHILD_ITERS, round);
#if !defined(SOAK_ASAN) && !defined(SOAK_TSAN)
            soak_heap_churn(round + 1);
#endif
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
                execl(g_self, g_self, "--exec-child", g_heap ? "--heap" : (char *)NULL,
                      (char *)NULL);
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
        if (r % 8 == 0)
            soak_heap_churn((unsigned)r); /* on a malloc'd stack */
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
    if (depth == 0) {
        soak_heap_churn((unsigned)x); /* a stack 2000 frames deep */
        return soak_bottom(BOTTOM_ITERS, pad[0]);
    }
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
    fprintf(stderr,
            "usage: %s --seconds N --lib PATH [--only PART,...] [--heap] | --exec-child [--heap]\n",
            argv0);
    return 2;
}

int main(int argc, char **argv)
{
    double seconds = 0;
    const char *only = NULL;
    int exec_child = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--exec-child")) {
            exec_child = 1;
        } else if (!strcmp(argv[i], "--heap")) {
            g_heap = 1;
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
    if (g_heap) {
        int patched = snapprof_heap_hooks_install();
        if (patched <= 0) {
            fprintf(stderr, "soak: snapprof_heap_hooks_install: %d\n", patched);
            return 1;
        }
        if (pthread_key_create(&g_heap_key, heap_key_free) != 0) {
            fprintf(stderr, "soak: pthread_key_create failed\n");
            return 1;
        }
    }
    if (exec_child) {
        soak_heap_churn(7);
        soak_child_work(CHILD_ITERS, 7);
        soak_heap_churn(8);
        return 0;
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
    if (g_heap) {
        snapprof_heap_hooks_stats_t hs = {.size = sizeof hs};
        if (snapprof_heap_hooks_get_stats(&hs) != 0 || !hs.installed || hs.entries == 0) {
            printf("\n");
            fprintf(stderr, "soak: the heap hooks are not installed\n");
            return 1;
        }
        printf(" heap_entries=%llu heap_modules=%llu heap_scans=%llu heap_mprotect_failed=%llu",
               (unsigned long long)hs.entries, (unsigned long long)hs.modules,
               (unsigned long long)hs.scans, (unsigned long long)hs.mprotect_failed);
    }
    printf("\n");
    if (missing)
        fprintf(stderr, "soak: a part never completed a round\n");
    if (atomic_load(&g_failed) || missing)
        return 1;
    printf("soak: ok\n");
    return 0;
}
