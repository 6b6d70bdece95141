/* A program for the heap hooks' tests (tests/preload_heap.cmake), run with
 * LD_PRELOAD of libsnapprof-heap.so and, mostly, of the test consumer. It
 * keeps its own tally of what it allocates and compares it with what the
 * consumer was told; without the consumer it checks only that every call
 * behaves as the allocator's own. Modes (argv[1]):
 *   api      every C allocation function, errno, malloc_usable_size,
 *            failing and odd-sized calls
 *   boot     allocations before main (a constructor of ours, and of a
 *            library initialized before the hooks' own constructor)
 *   threads  8 threads allocating and freeing each other's blocks, exiting
 *            with blocks live and freeing in TLS destructors; a fork in the
 *            middle whose child allocates, with atfork handlers that do */
#include "test.h"
#include "test_preload_heap_consumer.h"

#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static hc_totals_fn totals_fn;
static hc_size_fn size_fn;

static void find_consumer(void)
{
    totals_fn = (hc_totals_fn)dlsym(RTLD_DEFAULT, "test_heap_consumer_totals");
    size_fn = (hc_size_fn)dlsym(RTLD_DEFAULT, "test_heap_consumer_size");
}

static hc_totals_t totals(void)
{
    hc_totals_t t = {0};
    if (totals_fn)
        totals_fn(&t);
    return t;
}

/* The program's own tally of the counted sizes. */
static uint64_t want_allocs[HC_RANGE], want_frees[HC_RANGE];
static uint64_t base_allocs[HC_RANGE], base_frees[HC_RANGE];

static void tally_start(void)
{
    for (size_t i = 0; size_fn && i < HC_RANGE; i++)
        size_fn(HC_BASE + i, &base_allocs[i], &base_frees[i]);
}

/* The consumer was told of exactly allocs allocations and frees frees of
 * size (when it is there). */
static void expect_size(size_t size, uint64_t allocs, uint64_t frees)
{
    if (!size_fn)
        return;
    uint64_t a, f;
    size_fn(size, &a, &f);
    if (a != allocs || f != frees)
        TEST_FAIL("size %zu: the consumer was told %llu allocations and %llu frees, not %llu and "
                  "%llu",
                  size, (unsigned long long)a, (unsigned long long)f, (unsigned long long)allocs,
                  (unsigned long long)frees);
}

static void tally_check(void)
{
    if (!size_fn)
        return;
    for (size_t i = 0; i < HC_RANGE; i++) {
        uint64_t a, f;
        size_fn(HC_BASE + i, &a, &f);
        if (a - base_allocs[i] != want_allocs[i] || f - base_frees[i] != want_frees[i])
            TEST_FAIL(
                "size %zu: the consumer was told %llu allocations and %llu frees, the program "
                "made %llu and %llu",
                (size_t)HC_BASE + i, (unsigned long long)(a - base_allocs[i]),
                (unsigned long long)(f - base_frees[i]), (unsigned long long)want_allocs[i],
                (unsigned long long)want_frees[i]);
    }
}

#define SZ(k) ((size_t)HC_BASE + 64 * (k)) /* a counted size, divisible by 64 */

static void want_alloc(size_t size)
{
    __atomic_fetch_add(&want_allocs[size - HC_BASE], 1, __ATOMIC_RELAXED);
}

static void want_free(size_t size)
{
    __atomic_fetch_add(&want_frees[size - HC_BASE], 1, __ATOMIC_RELAXED);
}

static void print_hooks(void)
{
    Dl_info info;
    void *m = dlsym(RTLD_DEFAULT, "malloc");
    if (m && dladdr(m, &info) && info.dli_fname)
        printf("malloc from: %s\n", info.dli_fname);
    printf("consumer: %s\n", totals_fn ? "yes" : "no");
}

static void check_aligned(const void *p, size_t align)
{
    if ((uintptr_t)p % align != 0)
        TEST_FAIL("%p is not aligned to %zu", p, align);
}

/* Allocations the compiler must not leave out (it may, when their result
 * is only compared or freed at once): their results go through sink. */
static void *volatile sink;
static void alloc_free(size_t size)
{
    sink = malloc(size);
    ASSERT(sink != NULL);
    free(sink);
}

/* ---- api ---------------------------------------------------------------- */

static void mode_api(void)
{
    hc_totals_t t0 = totals();
    tally_start();
    uint64_t made = 0, freed = 0; /* every successful allocation and free */
    /* Hidden from the compiler, which refuses such sizes in plain sight. */
    static volatile size_t huge_v = SIZE_MAX - 4096, half_v = SIZE_MAX / 2;
    const size_t huge = huge_v, half = half_v;

    for (int round = 0; round < 5; round++) {
        void *p;

        errno = 1234;
        p = malloc(SZ(0));
        ASSERT(p != NULL);
        ASSERT_EQ(errno, 1234);
        ASSERT(malloc_usable_size(p) >= SZ(0));
        memset(p, 1, SZ(0));
        want_alloc(SZ(0)), made++;
        free(p);
        ASSERT_EQ(errno, 1234);
        want_free(SZ(0)), freed++;

        p = calloc(16, SZ(1) / 16);
        ASSERT(p != NULL);
        ASSERT_EQ(errno, 1234);
        for (size_t i = 0; i < SZ(1); i++)
            ASSERT(((unsigned char *)p)[i] == 0);
        want_alloc(SZ(1)), made++;

        /* realloc: a free of the old block and an allocation of the new. */
        void *q = realloc(p, SZ(2));
        ASSERT(q != NULL);
        ASSERT_EQ(errno, 1234);
        want_free(SZ(1)), freed++;
        want_alloc(SZ(2)), made++;
        ASSERT(malloc_usable_size(q) >= SZ(2));
        /* realloc(p, 0): glibc frees p and returns NULL. */
        p = realloc(q, 0);
        ASSERT(p == NULL);
        ASSERT_EQ(errno, 1234);
        want_free(SZ(2)), freed++;
        /* realloc(NULL, n) is malloc(n). */
        p = realloc(NULL, SZ(3));
        ASSERT(p != NULL);
        want_alloc(SZ(3)), made++;
        q = reallocarray(p, 4, SZ(4) / 4);
        ASSERT(q != NULL);
        ASSERT_EQ(errno, 1234);
        want_free(SZ(3)), freed++;
        want_alloc(SZ(4)), made++;
        /* Failing: NULL, ENOMEM, the old block still live, nothing noted. */
        errno = 0;
        ASSERT((sink = realloc(q, huge)) == NULL);
        ASSERT_EQ(errno, ENOMEM);
        errno = 0;
        ASSERT((sink = reallocarray(q, half, 3)) == NULL);
        ASSERT_EQ(errno, ENOMEM);
        memset(q, 2, SZ(4));
        free(q);
        want_free(SZ(4)), freed++;

        errno = 1234;
        ASSERT_EQ(posix_memalign(&p, 256, SZ(5)), 0);
        ASSERT_EQ(errno, 1234);
        check_aligned(p, 256);
        want_alloc(SZ(5)), made++;
        free(p);
        want_free(SZ(5)), freed++;
        ASSERT_EQ(posix_memalign(&p, 3, SZ(5)), EINVAL);
        ASSERT_EQ(posix_memalign(&p, 64, huge), ENOMEM); /* errno: glibc sets it too */

        p = aligned_alloc(128, SZ(6));
        ASSERT(p != NULL);
        check_aligned(p, 128);
        want_alloc(SZ(6)), made++;
        free(p);
        want_free(SZ(6)), freed++;

        p = memalign(512, SZ(7));
        ASSERT(p != NULL);
        check_aligned(p, 512);
        want_alloc(SZ(7)), made++;
        free(p);
        want_free(SZ(7)), freed++;

        long page = sysconf(_SC_PAGESIZE);
        p = valloc(SZ(8));
        ASSERT(p != NULL);
        check_aligned(p, (size_t)page);
        want_alloc(SZ(8)), made++;
        free(p);
        want_free(SZ(8)), freed++;

        p = pvalloc(SZ(9));
        ASSERT(p != NULL);
        check_aligned(p, (size_t)page);
        ASSERT(malloc_usable_size(p) >= SZ(9));
        want_alloc(SZ(9)), made++;
        free(p);
        want_free(SZ(9)), freed++;

        /* Zero sizes: a block all the same, noted with size 0. */
        p = malloc(0);
        ASSERT(p != NULL);
        made++;
        free(p);
        freed++;

        /* Failing allocations: NULL and ENOMEM to the program, nothing
         * noted. */
        errno = 0;
        ASSERT((sink = malloc(huge)) == NULL);
        ASSERT_EQ(errno, ENOMEM);
        errno = 0;
        ASSERT((sink = calloc(half, 3)) == NULL);
        ASSERT_EQ(errno, ENOMEM);
        errno = 0;
        ASSERT((sink = aligned_alloc(64, huge)) == NULL);
        ASSERT_EQ(errno, ENOMEM);
        errno = 0;
        ASSERT((sink = memalign(64, huge)) == NULL);
        ASSERT_EQ(errno, ENOMEM);
        errno = 0;
        ASSERT((sink = valloc(huge)) == NULL);
        ASSERT_EQ(errno, ENOMEM);
        errno = 0;
        ASSERT((sink = pvalloc(huge)) == NULL);
        ASSERT_EQ(errno, ENOMEM);

        errno = 1234;
        free(NULL);
        ASSERT_EQ(errno, 1234);
    }

    hc_totals_t t1 = totals();
    tally_check();
    if (totals_fn) {
        ASSERT_EQ(t1.allocs - t0.allocs, made);
        ASSERT_EQ(t1.frees - t0.frees, freed);
        ASSERT_EQ(t1.doubles, 0);
        ASSERT_EQ(t1.nulls, 0);
        ASSERT_EQ(t1.unknown_frees - t0.unknown_frees, 0);
        printf("noted %llu allocations and %llu frees, as made\n", (unsigned long long)made,
               (unsigned long long)freed);
    }
}

/* ---- boot --------------------------------------------------------------- */

#define BOOT_SIZE SZ(20)
#define EARLY_SIZE SZ(21) /* test_preload_heap_early.c */

static void *boot_block;

__attribute__((constructor(101))) static void boot_ctor(void)
{
    /* The program's first allocation of its own, before main. */
    alloc_free(BOOT_SIZE);
    boot_block = malloc(BOOT_SIZE);
}

static void mode_boot(void)
{
    ASSERT(boot_block != NULL);
    free(boot_block);
    /* With the allocating dlsym: a block of the bootstrap buffer, freed
     * now (the allocator's free would abort on it). */
    void *(*dlsym_kept)(void) = (void *(*)(void))dlsym(RTLD_DEFAULT, "test_heap_dlsym_kept");
    if (dlsym_kept != NULL) {
        void *kept = dlsym_kept();
        ASSERT(kept != NULL);
        free(kept);
        printf("freed a block of the bootstrap buffer\n");
    }
    if (!size_fn)
        return;
    expect_size(BOOT_SIZE, 2, 2);
    expect_size(EARLY_SIZE, 1, 1);
    size_t (*boot_bytes)(void) = (size_t(*)(void))dlsym(RTLD_DEFAULT, "test_heap_early_boot");
    ASSERT(boot_bytes != NULL);
    printf("bootstrap buffer: %zu bytes\n", boot_bytes());
    hc_totals_t t = totals();
    ASSERT_EQ(t.doubles, 0);
    ASSERT_EQ(t.nulls, 0);
}

/* ---- threads ------------------------------------------------------------ */

#define NTHREADS 8
#define PER_THREAD 3000
#define KEPT 100 /* each thread exits with its last KEPT blocks live */

static void *slots[NTHREADS][PER_THREAD];
static pthread_key_t key;

static void key_dtor(void *p)
{
    /* A free in thread teardown, after the thread's other TLS is gone. */
    free(p);
}

static size_t thread_size(int i)
{
    return SZ(30 + i);
}

static void child_after_fork(void);
static volatile int forked;

static void *thread_main(void *arg)
{
    int me = (int)(intptr_t)arg;
    int next = (me + 1) % NTHREADS;
    size_t size = thread_size(me);
    void *last = malloc(SZ(40));
    ASSERT(last != NULL);
    ASSERT_EQ(pthread_setspecific(key, last), 0);
    int took = 0;
    for (int j = 0; j < PER_THREAD; j++) {
        void *p = malloc(size);
        ASSERT(p != NULL);
        __atomic_store_n(&slots[me][j], p, __ATOMIC_RELEASE);
        /* Free the next thread's blocks as they come, all but its last
         * KEPT, which outlive their thread. */
        while (took < PER_THREAD - KEPT && took <= j) {
            void *q = __atomic_exchange_n(&slots[next][took], NULL, __ATOMIC_ACQ_REL);
            if (q == NULL)
                break;
            free(q);
            took++;
        }
        if (me == 0 && j == PER_THREAD / 2) {
            pid_t pid = fork();
            ASSERT(pid >= 0);
            if (pid == 0)
                child_after_fork();
            int status;
            ASSERT_EQ(waitpid(pid, &status, 0), pid);
            if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                TEST_FAIL("fork child: status %d", status);
            forked = 1;
        }
    }
    while (took < PER_THREAD - KEPT) {
        void *q = __atomic_exchange_n(&slots[next][took], NULL, __ATOMIC_ACQ_REL);
        if (q == NULL) {
            sched_yield();
            continue;
        }
        free(q);
        took++;
    }
    return NULL;
}

#define ATFORK_PREPARE SZ(50)
#define ATFORK_PARENT SZ(51)
#define ATFORK_CHILD SZ(52)
#define CHILD_SIZE SZ(53)

static void atfork_prepare(void)
{
    alloc_free(ATFORK_PREPARE);
}

static void atfork_parent(void)
{
    alloc_free(ATFORK_PARENT);
}

static void atfork_child(void)
{
    alloc_free(ATFORK_CHILD);
}

static void child_after_fork(void)
{
    void *p = malloc(CHILD_SIZE);
    ASSERT(p != NULL);
    free(p);
    expect_size(CHILD_SIZE, 1, 1);
    expect_size(ATFORK_CHILD, 1, 1);
    exit(0);
}

static void mode_threads(void)
{
    hc_totals_t t0 = totals();
    ASSERT_EQ(pthread_key_create(&key, key_dtor), 0);
    ASSERT_EQ(pthread_atfork(atfork_prepare, atfork_parent, atfork_child), 0);
    tally_start();
    pthread_t th[NTHREADS];
    for (int i = 0; i < NTHREADS; i++)
        ASSERT_EQ(pthread_create(&th[i], NULL, thread_main, (void *)(intptr_t)i), 0);
    for (int i = 0; i < NTHREADS; i++)
        ASSERT_EQ(pthread_join(th[i], NULL), 0);
    ASSERT(forked);
    /* The blocks that outlived their threads. */
    for (int i = 0; i < NTHREADS; i++) {
        for (int j = 0; j < PER_THREAD; j++) {
            ASSERT(j >= PER_THREAD - KEPT || slots[i][j] == NULL);
            free(slots[i][j]);
        }
        want_allocs[thread_size(i) - HC_BASE] = PER_THREAD;
        want_frees[thread_size(i) - HC_BASE] = PER_THREAD;
    }
    want_allocs[SZ(40) - HC_BASE] = NTHREADS;
    want_frees[SZ(40) - HC_BASE] = NTHREADS;
    want_allocs[ATFORK_PREPARE - HC_BASE] = want_frees[ATFORK_PREPARE - HC_BASE] = 1;
    want_allocs[ATFORK_PARENT - HC_BASE] = want_frees[ATFORK_PARENT - HC_BASE] = 1;
    tally_check();
    hc_totals_t t1 = totals();
    if (totals_fn) {
        ASSERT_EQ(t1.doubles, 0);
        ASSERT_EQ(t1.nulls, 0);
        ASSERT_EQ(t1.unknown_frees - t0.unknown_frees, 0);
        printf("threads: %d blocks each, noted as made\n", PER_THREAD);
    }
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    find_consumer();
    print_hooks();
    fflush(stdout); /* a fork child's exit() must not print it again */
    if (!strcmp(mode, "api"))
        mode_api();
    else if (!strcmp(mode, "boot"))
        mode_boot();
    else if (!strcmp(mode, "threads"))
        mode_threads();
    else
        TEST_FAIL("unknown mode '%s'", mode);
    printf("ok %s\n", mode);
    return 0;
}
