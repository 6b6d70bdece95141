/* GOT patching (heap_got/, issue 27 (b)): a program linked against the
 * library, without the preload, calls snapprof_heap_hooks_install() once
 * and its heap profile names the functions that allocate, in the program
 * and in its libraries (heap_got_lib, linked; heap_got_dl, dlopen()ed
 * later), with the bytes they asked for; libc's own NSS module is noticed;
 * uninstall after dlclose() writes nothing there; the allocator's answers
 * (errno, failures, realloc's edge cases) are what they are without us;
 * beside the preload's hooks install does nothing and nothing is counted
 * twice; a fork child of a process whose sampling thread scans never hangs
 * in the loader. */
#include "test.h"
#include "test_util.h"

#include "heap_got/heap_got.h"

#include <snapprof/heap.h>
#include <snapprof/profile_builder.h>

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <malloc.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

void got_lib_alloc(void **out, int n, size_t size);
void got_lib_free(void **blocks, int n);
void got_cxx_new(void **out, int n, size_t size);
void got_cxx_delete(void **blocks, int n);
int got_cxx_new_throws(size_t size);

/* glibc: the services of one database, instead of /etc/nsswitch.conf's. */
extern int __nss_configure_lookup(const char *db, const char *service_line);

/* ------------------------------------------------------------------------ */
/* A builder that keeps each heap sample's bytes and innermost frame       */
/* ------------------------------------------------------------------------ */

typedef struct got_sample {
    snapprof_sample_kind_t kind;
    uint64_t bytes;
    snapprof_frame_t frame; /* the innermost; its module lives for the process */
    int has_frame;
} got_sample_t;

typedef struct got_collector {
    pthread_mutex_t mu;
    got_sample_t *s;
    size_t count, cap;
} got_collector_t;

static int gc_sample(void *ud, const snapprof_sample_t *s)
{
    got_collector_t *c = ud;
    snapprof_sample_kind_t kind = SNAPPROF_SAMPLE_KIND(s);
    if (kind != SNAPPROF_SAMPLE_KIND_HEAP_ALLOC && kind != SNAPPROF_SAMPLE_KIND_HEAP_FREE)
        return 0;
    pthread_mutex_lock(&c->mu);
    if (c->count == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 1024;
        c->s = realloc(c->s, c->cap * sizeof *c->s);
        ASSERT_NOT_NULL(c->s);
    }
    got_sample_t *g = &c->s[c->count++];
    memset(g, 0, sizeof *g);
    g->kind = kind;
    g->bytes = s->bytes;
    if (s->frame_count > 0) {
        g->frame = s->frames[0];
        g->has_frame = 1;
    }
    pthread_mutex_unlock(&c->mu);
    return 0;
}

static const snapprof_builder_ops_t gc_ops = {
    .version = 2,
    .name = "heap_got_collector",
    .xOnSample = gc_sample,
};

/* The innermost frame's function name ("" when unknown). */
static const char *frame_name(const got_sample_t *g)
{
    snapprof_symbol_t sym[4];
    if (!g->has_frame || snapprof_symbolize(&g->frame, sym, 4) <= 0)
        return "";
    if (getenv("HEAP_GOT_DEBUG"))
        fprintf(stderr, "frame %s\n", sym[0].name);
    return sym[0].name;
}

/* Samples of kind whose innermost frame is fn: how many, and how many of
 * them had exactly size bytes (a free has its allocation's frames). */
static size_t count_named(got_collector_t *c, snapprof_sample_kind_t kind, const char *fn,
                          size_t size, size_t *right)
{
    size_t n = 0;
    *right = 0;
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->count; i++) {
        if (c->s[i].kind != kind)
            continue;
        /* fn, or a clone of it (fn.constprop.0). */
        const char *name = frame_name(&c->s[i]);
        size_t len = strlen(fn);
        if (strncmp(name, fn, len) || (name[len] != '\0' && name[len] != '.'))
            continue;
        n++;
        if (c->s[i].bytes == size)
            (*right)++;
    }
    pthread_mutex_unlock(&c->mu);
    return n;
}

/* Waits (at most ms milliseconds) until want samples of kind name fn;
 * returns how many there are. Polls the names themselves: other samples
 * (the symbolizer's own allocations, made on this thread) come too. */
static size_t wait_named(got_collector_t *c, snapprof_sample_kind_t kind, const char *fn,
                         size_t size, size_t want, uint64_t ms)
{
    uint64_t deadline = tu_mono_ns() + ms * 1000000ull;
    size_t right, n;
    while ((n = count_named(c, kind, fn, size, &right)) < want && tu_mono_ns() < deadline) {
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
    return n;
}

static size_t count_allocs(got_collector_t *c, const char *fn, size_t size, size_t *right)
{
    return count_named(c, SNAPPROF_SAMPLE_KIND_HEAP_ALLOC, fn, size, right);
}

static __attribute__((unused)) size_t count_kind(got_collector_t *c, snapprof_sample_kind_t kind)
{
    size_t n = 0;
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->count; i++)
        n += c->s[i].kind == kind;
    pthread_mutex_unlock(&c->mu);
    return n;
}

/* A profiler of no thread, sampling the heap every R bytes on average,
 * ticking every millisecond (its ticks drain, and look for new modules). */
static snapprof_profiler_t *heap_profiler(size_t R, got_collector_t *c)
{
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    snapprof_params_t params = tu_params(1000000);
    params.heap_interval = R;
    snapprof_profiler_t *p;
    ASSERT_OK(snapprof_profiler_create(&params, NULL, 0, &p));
    snapprof_builder_t *b;
    ASSERT_OK(snapprof_builder_create(&gc_ops, c, &b));
    ASSERT_OK(snapprof_profiler_add_builder(p, b));
    ASSERT_OK(snapprof_profiler_start(p));
    return p;
}

/* Waits until the drain delivered want heap samples (allocations and
 * frees), for at most ms milliseconds; returns how many came. */
static size_t wait_delivered_for(got_collector_t *c, size_t want, uint64_t ms)
{
    uint64_t deadline = tu_mono_ns() + ms * 1000000ull;
    for (;;) {
        pthread_mutex_lock(&c->mu);
        size_t n = c->count;
        pthread_mutex_unlock(&c->mu);
        if (n >= want || tu_mono_ns() > deadline)
            return n;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

/* The same, failing after a minute. */
static void wait_delivered(got_collector_t *c, size_t want)
{
    size_t n = wait_delivered_for(c, want, 60000);
    if (n < want)
        TEST_FAIL("only %zu of %zu heap samples delivered", n, want);
}

/* Waits until the GOT entries patched in modules named prefix* reach at
 * least want (the sampling thread's tick patches new modules). */
static int wait_module_entries(const char *prefix, int want)
{
    uint64_t deadline = tu_mono_ns() + 30000000000ull;
    int n;
    while ((n = snapprof__heap_got_module_entries(prefix)) < want && tu_mono_ns() < deadline) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    return n;
}

static snapprof_heap_hooks_stats_t hooks_stats(void)
{
    snapprof_heap_hooks_stats_t st = {.size = sizeof st};
    ASSERT_OK(snapprof_heap_hooks_get_stats(&st));
    return st;
}

/* ------------------------------------------------------------------------ */
/* The program's own allocating functions                                   */
/* ------------------------------------------------------------------------ */

#define R_BYTES 4096 /* blocks of 32 KiB and more are sampled with p > 0.9996 */

static __attribute__((noinline)) void alloc_here_calloc(void **out, int n, size_t size)
{
    for (int i = 0; i < n; i++)
        out[i] = calloc(1, size);
    __asm__ volatile("" ::: "memory");
}

static __attribute__((noinline)) void alloc_here_memalign(void **out, int n, size_t size)
{
    for (int i = 0; i < n; i++)
        ASSERT_EQ(posix_memalign(&out[i], 64, size), 0);
    __asm__ volatile("" ::: "memory");
}

/* What the program's GOT holds for malloc now (a PIE takes a function's
 * address from its GOT). */
static __attribute__((noinline)) void *malloc_entry(void)
{
    void *(*volatile f)(size_t) = malloc;
    return (void *)f;
}

/* ------------------------------------------------------------------------ */
/* Cases                                                                    */
/* ------------------------------------------------------------------------ */

#define LIB_N 64
#define LIB_SIZE 65536
#define CAL_N 32
#define CAL_SIZE 49152
#define AL_N 16
#define AL_SIZE 32768

/* After one call, the profile names the functions that allocate, in the
 * program (calloc, posix_memalign) and in a library linked to it (malloc
 * through the library's own GOT), each sample with the bytes asked for, and
 * their frees. Catches: a module's GOT not patched, a hook's frame left at
 * the top of the stack, sizes noted wrong, frees not seen. */
static void got_profile(void)
{
    got_collector_t c;
    snapprof_profiler_t *p = heap_profiler(R_BYTES, &c);
    int n = snapprof_heap_hooks_install();
    ASSERT_GT(n, 0);
    ASSERT_GT(snapprof__heap_got_module_entries("libheap_got_lib"), 0);
    void *lib[LIB_N], *cal[CAL_N], *al[AL_N];
    got_lib_alloc(lib, LIB_N, LIB_SIZE);
    alloc_here_calloc(cal, CAL_N, CAL_SIZE);
    alloc_here_memalign(al, AL_N, AL_SIZE);
    /* All of them, almost surely (each is missed with p < 0.0004): up to
     * 10 s for the last ones, which may still be in the drain. */
    wait_delivered(&c, LIB_N + CAL_N + AL_N - 2);
    wait_named(&c, SNAPPROF_SAMPLE_KIND_HEAP_ALLOC, "got_lib_alloc", LIB_SIZE, LIB_N, 10000);
    wait_named(&c, SNAPPROF_SAMPLE_KIND_HEAP_ALLOC, "alloc_here_calloc", CAL_SIZE, CAL_N, 10000);
    wait_named(&c, SNAPPROF_SAMPLE_KIND_HEAP_ALLOC, "alloc_here_memalign", AL_SIZE, AL_N, 10000);
    size_t right;
    ASSERT_EQ(count_allocs(&c, "got_lib_alloc", LIB_SIZE, &right), LIB_N);
    ASSERT_EQ(right, LIB_N);
    size_t k = count_allocs(&c, "alloc_here_calloc", CAL_SIZE, &right);
    ASSERT_GE(k, CAL_N - 1);
    ASSERT_EQ(right, k);
    k = count_allocs(&c, "alloc_here_memalign", AL_SIZE, &right);
    ASSERT_GE(k, AL_N - 1);
    ASSERT_EQ(right, k);
    pthread_mutex_lock(&c.mu);
    size_t now = c.count;
    pthread_mutex_unlock(&c.mu);
    size_t cal_n = count_allocs(&c, "alloc_here_calloc", CAL_SIZE, &right);
    size_t al_n = count_allocs(&c, "alloc_here_memalign", AL_SIZE, &right);
    got_lib_free(lib, LIB_N);
    for (int i = 0; i < CAL_N; i++)
        free(cal[i]);
    for (int i = 0; i < AL_N; i++)
        free(al[i]);
    /* Each sampled block's free, with its allocation's frames and bytes. */
    wait_delivered(&c, now + LIB_N + cal_n + al_n);
    wait_named(&c, SNAPPROF_SAMPLE_KIND_HEAP_FREE, "got_lib_alloc", LIB_SIZE, LIB_N, 60000);
    wait_named(&c, SNAPPROF_SAMPLE_KIND_HEAP_FREE, "alloc_here_calloc", CAL_SIZE, cal_n, 60000);
    wait_named(&c, SNAPPROF_SAMPLE_KIND_HEAP_FREE, "alloc_here_memalign", AL_SIZE, al_n, 60000);
    ASSERT_EQ(count_named(&c, SNAPPROF_SAMPLE_KIND_HEAP_FREE, "got_lib_alloc", LIB_SIZE, &right),
              LIB_N);
    ASSERT_EQ(right, LIB_N);
    ASSERT_EQ(
        count_named(&c, SNAPPROF_SAMPLE_KIND_HEAP_FREE, "alloc_here_calloc", CAL_SIZE, &right),
        cal_n);
    ASSERT_EQ(
        count_named(&c, SNAPPROF_SAMPLE_KIND_HEAP_FREE, "alloc_here_memalign", AL_SIZE, &right),
        al_n);
    ASSERT_OK(snapprof_profiler_stop(p));
    ASSERT_GT(snapprof_heap_hooks_uninstall(), 0);
    snapprof_profiler_destroy(p);
    free(c.s);
}

/* A library dlopen()ed after install is patched within a tick, its
 * allocations are sampled under its function's name; dlclose()d while
 * patched, then uninstall writes nothing into it (a write into its unmapped
 * GOT would kill the test). Catches: modules loaded later never noticed, a
 * closed module's entries restored. */
static void got_dlopen_later(void)
{
    got_collector_t c;
    snapprof_profiler_t *p = heap_profiler(R_BYTES, &c);
    ASSERT_GT(snapprof_heap_hooks_install(), 0);
    ASSERT_EQ(snapprof__heap_got_module_entries("libheap_got_dl"), 0);
    void *h = dlopen(HEAP_GOT_DL, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NOT_NULL(h);
    ASSERT_GT(wait_module_entries("libheap_got_dl", 2), 1);
    void (*dl_alloc)(void **, int, size_t) =
        (void (*)(void **, int, size_t))dlsym(h, "got_dl_alloc");
    void (*dl_free)(void **, int) = (void (*)(void **, int))dlsym(h, "got_dl_free");
    ASSERT_NOT_NULL(dl_alloc);
    ASSERT_NOT_NULL(dl_free);
    void *blocks[LIB_N];
    dl_alloc(blocks, LIB_N, LIB_SIZE);
    wait_named(&c, SNAPPROF_SAMPLE_KIND_HEAP_ALLOC, "got_dl_alloc", LIB_SIZE, LIB_N, 60000);
    size_t right;
    ASSERT_EQ(count_allocs(&c, "got_dl_alloc", LIB_SIZE, &right), LIB_N);
    ASSERT_EQ(right, LIB_N);
    dl_free(blocks, LIB_N);
    wait_named(&c, SNAPPROF_SAMPLE_KIND_HEAP_FREE, "got_dl_alloc", LIB_SIZE, LIB_N, 60000);
    ASSERT_OK(snapprof_profiler_stop(p));
    snapprof_heap_hooks_stats_t before = hooks_stats();
    int dl_entries = snapprof__heap_got_module_entries("libheap_got_dl");
    ASSERT_EQ(dlclose(h), 0);
    /* Gone from the process (no other reference holds it). */
    ASSERT_NULL(dlopen(HEAP_GOT_DL, RTLD_NOW | RTLD_NOLOAD));
    /* Every entry but the closed module's is restored. */
    int restored = snapprof_heap_hooks_uninstall();
    ASSERT_UEQ((uint64_t)restored, before.entries - (uint64_t)dl_entries);
    ASSERT_EQ(hooks_stats().entries, 0);
    /* Loaded again after uninstall: nothing of ours is left in the way. */
    h = dlopen(HEAP_GOT_DL, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NOT_NULL(h);
    dl_alloc = (void (*)(void **, int, size_t))dlsym(h, "got_dl_alloc");
    dl_free = (void (*)(void **, int))dlsym(h, "got_dl_free");
    dl_alloc(blocks, 4, 100);
    dl_free(blocks, 4);
    ASSERT_EQ(snapprof__heap_got_module_entries("libheap_got_dl"), 0);
    dlclose(h);
    snapprof_profiler_destroy(p);
    free(c.s);
}

/* getpwnam() with the "compat" service makes libc load libnss_compat.so.2
 * itself (no dlopen of the program's): its GOT is patched within a tick,
 * and the lookups before and after go through without harm. Catches:
 * libc's own loads never noticed; a crash in a module being loaded. */
static void got_nss_module(void)
{
    void *probe = dlopen("libnss_compat.so.2", RTLD_LAZY | RTLD_NOLOAD);
    if (probe != NULL) {
        dlclose(probe);
        TEST_FAIL("libnss_compat is loaded before the test");
    }
    probe = dlopen("libnss_compat.so.2", RTLD_LAZY);
    if (probe == NULL) {
        fprintf(stderr, "skip: no libnss_compat.so.2 here\n");
        exit(TEST_SKIP);
    }
    dlclose(probe);
    ASSERT_OK(__nss_configure_lookup("passwd", "compat"));
    got_collector_t c;
    snapprof_profiler_t *p = heap_profiler(R_BYTES, &c);
    ASSERT_GT(snapprof_heap_hooks_install(), 0);
    uint64_t modules = hooks_stats().modules;
    struct passwd *pw = getpwnam("root");
    ASSERT_NOT_NULL(pw);
    ASSERT_EQ(pw->pw_uid, 0);
    ASSERT_GT(wait_module_entries("libnss_compat", 1), 0);
    ASSERT_GT(hooks_stats().modules, modules);
    for (int i = 0; i < 100; i++) {
        pw = getpwnam("root");
        ASSERT_NOT_NULL(pw);
        ASSERT_EQ(pw->pw_uid, 0);
    }
    ASSERT_OK(snapprof_profiler_stop(p));
    ASSERT_GT(snapprof_heap_hooks_uninstall(), 0);
    ASSERT_EQ(snapprof__heap_got_module_entries("libnss_compat"), 0);
    snapprof_profiler_destroy(p);
    free(c.s);
}

/* Install twice: the second patches nothing new and changes nothing;
 * uninstall gives the program's GOT its malloc back; a second uninstall
 * does nothing; install again works. Catches: hooking our own hook (the
 * real function lost), entries not restored, a double restore. */
static void got_install_twice(void)
{
    void *orig = malloc_entry();
    int n = snapprof_heap_hooks_install();
    ASSERT_GT(n, 0);
    ASSERT_PTR_NE(malloc_entry(), orig);
    snapprof_heap_hooks_stats_t st = hooks_stats();
    ASSERT_EQ(st.installed, 1);
    ASSERT_EQ(st.preloaded, 0);
    ASSERT_EQ(snapprof_heap_hooks_install(), 0);
    snapprof_heap_hooks_stats_t st2 = hooks_stats();
    ASSERT_UEQ(st2.entries, st.entries);
    ASSERT_UEQ(st2.modules, st.modules);
    void *p = malloc(100);
    ASSERT_NOT_NULL(p);
    free(p);
    ASSERT_UEQ((uint64_t)snapprof_heap_hooks_uninstall(), st.entries);
    ASSERT_PTR_EQ(malloc_entry(), orig);
    ASSERT_EQ(snapprof_heap_hooks_uninstall(), 0);
    ASSERT_EQ(hooks_stats().installed, 0);
    ASSERT_GT(snapprof_heap_hooks_install(), 0);
    ASSERT_PTR_NE(malloc_entry(), orig);
    ASSERT_GT(snapprof_heap_hooks_uninstall(), 0);
    ASSERT_PTR_EQ(malloc_entry(), orig);
    snapprof_heap_hooks_stats_t bad = {.size = 0};
    ASSERT_EQ(snapprof_heap_hooks_get_stats(&bad), -EINVAL);
    ASSERT_EQ(snapprof_heap_hooks_get_stats(NULL), -EINVAL);
}

/* The allocator's answers through the hooks, with every allocation sampled
 * (R = 1 byte): realloc(NULL, n), realloc(p, 0), free(NULL),
 * malloc_usable_size, errno left alone on success, failing calls (NULL and
 * ENOMEM, EINVAL) unchanged and never sampled. Catches: a hook that
 * clobbers errno (the sampler's slow path makes system calls), notes a
 * failed allocation, or changes what realloc returns. */
static void got_libc_semantics(void)
{
    got_collector_t c;
    snapprof_profiler_t *p = heap_profiler(1, &c);
    ASSERT_GT(snapprof_heap_hooks_install(), 0);
    errno = 4321;
    void *a = realloc(NULL, 100);
    ASSERT_NOT_NULL(a);
    ASSERT_EQ(errno, 4321);
    ASSERT_GE(malloc_usable_size(a), 100);
    a = realloc(a, 5000);
    ASSERT_NOT_NULL(a);
    ASSERT_GE(malloc_usable_size(a), 5000);
    ASSERT_EQ(errno, 4321);
    /* glibc's realloc(p, 0) frees p and returns NULL. */
    ASSERT_NULL(realloc(a, 0));
    free(NULL);
    ASSERT_EQ(errno, 4321);
    wait_delivered(&c, 4); /* two allocations, two frees */
#if !defined(SNAPPROF_SANITIZER_BUILD)
    /* Sanitizer runtimes abort on these unless told otherwise. */
    void *al = NULL;
    ASSERT_EQ(posix_memalign(&al, 3, 64), EINVAL);
    ASSERT_NULL(al);
    ASSERT_EQ(errno, 4321);
    size_t before = count_kind(&c, SNAPPROF_SAMPLE_KIND_HEAP_ALLOC);
    volatile size_t huge = SIZE_MAX / 2, many = SIZE_MAX / 4; /* not known to the compiler */
    for (int i = 0; i < 10; i++) {
        errno = 0;
        ASSERT_NULL(malloc(huge));
        ASSERT_EQ(errno, ENOMEM);
        errno = 0;
        ASSERT_NULL(calloc(many, 8));
        ASSERT_EQ(errno, ENOMEM);
        void *keep = malloc(32);
        errno = 0;
        ASSERT_NULL(realloc(keep, huge));
        ASSERT_EQ(errno, ENOMEM);
        free(keep); /* a failed realloc leaves it live */
    }
    /* The 10 small blocks and their frees are all that came. */
    wait_delivered(&c, 4 + 20);
    ASSERT_OK(snapprof_profiler_stop(p));
    ASSERT_EQ(count_kind(&c, SNAPPROF_SAMPLE_KIND_HEAP_ALLOC), before + 10);
    pthread_mutex_lock(&c.mu);
    for (size_t i = 0; i < c.count; i++)
        ASSERT(c.s[i].bytes < SIZE_MAX / 4);
    pthread_mutex_unlock(&c.mu);
#else
    ASSERT_OK(snapprof_profiler_stop(p));
#endif
    ASSERT_GT(snapprof_heap_hooks_uninstall(), 0);
    snapprof_profiler_destroy(p);
    free(c.s);
}

/* Beside the preload's hooks (the case re-runs itself with
 * libsnapprof-heap.so preloaded): install says -EEXIST and patches
 * nothing, and each allocation is sampled once. Catches: hooking twice
 * (each block counted twice), or the check gone (entries patched). */
static void got_preload_present(void)
{
#if defined(SNAPPROF_SANITIZER_BUILD)
    fprintf(stderr, "skip: the preload cannot load under a sanitizer runtime\n");
    exit(TEST_SKIP);
#else
    if (getenv("HEAP_GOT_PRELOADED") == NULL) {
        pid_t pid = fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
            setenv("HEAP_GOT_PRELOADED", "1", 1);
            setenv("LD_PRELOAD", HEAP_GOT_PRELOAD, 1);
            execl("/proc/self/exe", "heap_got", "preload_present", (char *)NULL);
            _exit(127);
        }
        int status;
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        ASSERT(WIFEXITED(status));
        ASSERT_EQ(WEXITSTATUS(status), 0);
        return;
    }
    ASSERT_NOT_NULL(dlsym(RTLD_DEFAULT, "snapprof__heap_hook_v1"));
    got_collector_t c;
    snapprof_profiler_t *p = heap_profiler(R_BYTES, &c);
    void *orig = malloc_entry();
    ASSERT_EQ(snapprof_heap_hooks_install(), -EEXIST);
    ASSERT_PTR_EQ(malloc_entry(), orig);
    snapprof_heap_hooks_stats_t st = hooks_stats();
    ASSERT_EQ(st.preloaded, 1);
    ASSERT_EQ(st.installed, 0);
    ASSERT_EQ(st.entries, 0);
    void *lib[LIB_N];
    got_lib_alloc(lib, LIB_N, LIB_SIZE);
    wait_named(&c, SNAPPROF_SAMPLE_KIND_HEAP_ALLOC, "got_lib_alloc", LIB_SIZE, LIB_N, 60000);
    /* Let a second copy of each arrive, if there were one. */
    struct timespec ts = {0, 200000000};
    nanosleep(&ts, NULL);
    size_t right;
    ASSERT_EQ(count_allocs(&c, "got_lib_alloc", LIB_SIZE, &right), LIB_N);
    ASSERT_EQ(right, LIB_N);
    got_lib_free(lib, LIB_N);
    ASSERT_OK(snapprof_profiler_stop(p));
    ASSERT_EQ(snapprof_heap_hooks_uninstall(), 0);
    snapprof_profiler_destroy(p);
    free(c.s);
#endif
}

/* A thread scans every module in a loop (install again and again: each
 * call walks the loader's list); the main thread forks meanwhile, and each
 * child calls into the loader (dl_iterate_phdr, dlopen) and exits. (Not
 * dlopen in the loop: glibc's own child of a fork during another thread's
 * dlopen trips over the loader's state.) Catches: a
 * child forked while our scan held the loader's lock (glibc leaves it held
 * in the child), which hangs (the alarm kills the test). */
static atomic_int g_stop;

static void *scan_churn(void *arg)
{
    (void)arg;
    while (!atomic_load(&g_stop))
        ASSERT_GE(snapprof_heap_hooks_install(), 0); /* a scan of every module */
    return NULL;
}

static int count_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)info;
    (void)size;
    (*(int *)data)++;
    return 0;
}

static void got_fork_while_scanning(void)
{
#if defined(SNAPPROF_SANITIZER_BUILD)
    /* TSan's fork() takes its runtime's locks before the atfork handlers
     * run, and TSan's dl_iterate_phdr() wrapper needs them: a scan in
     * progress cannot finish, the gate's prepare handler gives up after a
     * second, and the child inherits the loader's lock (seen: the child in
     * dl_iterate_phdr, the scanning thread at its unlock once the fork was
     * done). A limit of the sanitizer runtime, for module_cache/'s gate
     * too. */
    fprintf(stderr, "skip: a sanitizer's fork() holds its locks over the atfork handlers\n");
    exit(TEST_SKIP);
#endif
    got_collector_t c;
    snapprof_profiler_t *p = heap_profiler(R_BYTES, &c);
    ASSERT_GT(snapprof_heap_hooks_install(), 0);
    pthread_t t;
    ASSERT_OK(pthread_create(&t, NULL, scan_churn, NULL));
    uint64_t scans0 = hooks_stats().scans;
    for (int i = 0; i < 200; i++) {
        pid_t pid = fork();
        ASSERT_GE(pid, 0);
        if (pid == 0) {
            alarm(10);
            int n = 0;
            dl_iterate_phdr(count_cb, &n);
            void *h = dlopen(HEAP_GOT_DL, RTLD_NOW | RTLD_LOCAL);
            void *m = malloc(100);
            free(m);
            if (h)
                dlclose(h);
            _exit(n > 0 ? 0 : 3);
        }
        int status;
        ASSERT_EQ(waitpid(pid, &status, 0), pid);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            TEST_FAIL("fork child %d: status %#x (a hang ends in SIGALRM)", i, status);
    }
    atomic_store(&g_stop, 1);
    ASSERT_OK(pthread_join(t, NULL));
    /* The scans did run alongside the forks. */
    ASSERT_GT(hooks_stats().scans, scans0);
    ASSERT_OK(snapprof_profiler_stop(p));
    snapprof_heap_hooks_uninstall();
    snapprof_profiler_destroy(p);
    free(c.s);
}

/* The C++ operators: new[] in a C++ library is sampled once per block (its
 * own GOT's operator new[], and libstdc++'s operator new reaching malloc
 * through libstdc++'s GOT: the depth counter notes the outermost only),
 * named after the library's function, with the bytes asked for, and its
 * delete[] is seen; an operator new that throws unwinds through the hook
 * and the thread goes on being sampled. Catches: operators not patched, a
 * block noted twice, a depth counter left raised by the exception. */
static void got_cxx_operators(void)
{
    got_collector_t c;
    snapprof_profiler_t *p = heap_profiler(R_BYTES, &c);
    ASSERT_GT(snapprof_heap_hooks_install(), 0);
    ASSERT_GT(snapprof__heap_got_module_entries("libheap_got_cxx"), 0);
    void *b[LIB_N];
#if !defined(SNAPPROF_SANITIZER_BUILD)
    /* Sanitizer runtimes abort instead of throwing. */
    ASSERT_EQ(got_cxx_new_throws(SIZE_MAX / 2), 1);
#endif
    got_cxx_new(b, LIB_N, LIB_SIZE);
    ASSERT_EQ(
        wait_named(&c, SNAPPROF_SAMPLE_KIND_HEAP_ALLOC, "got_cxx_new", LIB_SIZE, LIB_N, 60000),
        LIB_N);
    got_cxx_delete(b, LIB_N);
    ASSERT_EQ(wait_named(&c, SNAPPROF_SAMPLE_KIND_HEAP_FREE, "got_cxx_new", LIB_SIZE, LIB_N, 60000),
              LIB_N);
    /* No second copy of any block (by malloc inside operator new). */
    struct timespec ts = {0, 100000000};
    nanosleep(&ts, NULL);
    size_t right;
    ASSERT_EQ(count_allocs(&c, "got_cxx_new", LIB_SIZE, &right), LIB_N);
    ASSERT_EQ(right, LIB_N);
    ASSERT_OK(snapprof_profiler_stop(p));
    ASSERT_GT(snapprof_heap_hooks_uninstall(), 0);
    snapprof_profiler_destroy(p);
    free(c.s);
}

static const test_case_t cases[] = {
    {"cxx_operators", got_cxx_operators},     {"profile", got_profile},
    {"dlopen_later", got_dlopen_later},       {"nss_module", got_nss_module},
    {"install_twice", got_install_twice},     {"libc_semantics", got_libc_semantics},
    {"preload_present", got_preload_present}, {"fork_while_scanning", got_fork_while_scanning},
};

int main(int argc, char **argv)
{
    return test_run_case(cases, sizeof cases / sizeof cases[0], argc, argv);
}
