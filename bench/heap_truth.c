/* heap_truth: the accuracy workload of issue 27's heap benchmark
 * (bench_heap.sh). Three call paths allocate known shares of the bytes, each
 * through its own allocation functions, with block sizes from 16 B to 64 KiB
 * (a fixed-seed distribution), keep a known fraction of their blocks until
 * exit and free the rest at once; at exit the program prints the truth each
 * profiler is read against, one machine-readable line per path and one for
 * the totals:
 *
 *   truth path_malloc alloc_bytes=B alloc_objects=N inuse_bytes=B inuse_objects=N
 *   truth total ...
 *   truth run mode=full cpu_s=S maxrss_kib=K
 *
 * Sizes are what the program asked for; a realloc is the free of the old
 * block and an allocation of the whole new size (issue 27's rule, and
 * jemalloc's, tcmalloc's and heaptrack's). In use = still allocated at exit.
 *
 * Usage: heap_truth [--small] [--mib N] [--check]
 *   (default)  3 GiB allocated: >= 5000 samples at a 512 KiB mean interval
 *   --small    48 MiB, for the tests
 *   --mib N    N MiB allocated
 *   --check    after printing the truth, check that every block counted in
 *              use is live: its tags are intact, malloc_usable_size() holds
 *              its size, and freeing them all takes at least their bytes
 *              off glibc's in-use total (mallinfo2); exit 1 if not
 *
 * It links nothing of snapprof: every profiler sees the same plain program.
 * The path functions are never inlined or cloned and keep frame pointers
 * (the build's flags), so every profiler can name them. The program's own
 * book-keeping (the table of blocks kept) comes from mmap, never from
 * malloc, so that it is in no profile. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "bench_util.h" /* bench_rand: inline, nothing linked */

#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>

/* noipa (GCC) rules out inlining, cloning (path_malloc.constprop.0) and any
 * conclusion drawn from the body; clang has only noinline. */
#if defined(__clang__)
#define NOINLINE __attribute__((noinline))
#else
#define NOINLINE __attribute__((noinline, noipa))
#endif

enum { PATH_MALLOC, PATH_CALLOC_REALLOC, PATH_MEMALIGN, NPATHS };

static const char *const path_names[NPATHS] = {"path_malloc", "path_calloc_realloc",
                                               "path_memalign"};
/* Each path's share of the bytes allocated, and the fraction of its blocks
 * (by count) it keeps until exit. */
static const double path_share[NPATHS] = {0.50, 0.30, 0.20};
static const double path_keep[NPATHS] = {0.10, 0.20, 0.25};

typedef struct {
    uint64_t alloc_bytes, alloc_objects, inuse_bytes, inuse_objects;
    uint64_t rng;
} path_t;

static path_t paths[NPATHS];

/* A block kept until exit: where, how big, and the tag written into it. */
typedef struct {
    void *ptr;
    size_t size;
} kept_t;

static kept_t *kept;
static size_t kept_n, kept_cap;

/* Every block's address goes through here, so the compiler can neither drop
 * a malloc/free pair nor the stores into a block. */
void *volatile heap_truth_sink;

/* 16 B to 64 KiB - 1, about log-uniform: a power of two 16 << e, e in 0..11,
 * then uniform within [16 << e, 32 << e). */
static size_t draw_size(uint64_t *s)
{
    unsigned e = (unsigned)(bench_rand(s) % 12);
    size_t lo = (size_t)16 << e;
    return lo + (size_t)(bench_rand(s) % lo);
}

static int draw_keep(uint64_t *s, double frac)
{
    return (double)(bench_rand(s) >> 11) * 0x1.0p-53 < frac;
}

static uint64_t tag_of(void *p, size_t size)
{
    return ((uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ULL) ^ size;
}

static void die(const char *what)
{
    perror(what);
    exit(2);
}

static void keep_block(path_t *path, void *p, size_t size)
{
    if (kept_n == kept_cap) {
        size_t cap = kept_cap ? kept_cap * 2 : 65536;
        void *m =
            kept ? mremap(kept, kept_cap * sizeof(kept_t), cap * sizeof(kept_t), MREMAP_MAYMOVE)
                 : mmap(NULL, cap * sizeof(kept_t), PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED)
            die("heap_truth: mmap");
        kept = m;
        kept_cap = cap;
    }
    /* Tags at both ends: --check finds them intact at exit. */
    uint64_t tag = tag_of(p, size);
    memcpy(p, &tag, sizeof(tag));
    memcpy((char *)p + size - sizeof(tag), &tag, sizeof(tag));
    kept[kept_n].ptr = p;
    kept[kept_n].size = size;
    kept_n++;
    path->inuse_bytes += size;
    path->inuse_objects++;
}

/* A block just allocated: counted, touched, kept or freed at once. */
static void settle(path_t *path, double keep, void *p, size_t size)
{
    if (!p)
        die("heap_truth: allocation failed");
    heap_truth_sink = p;
    if (draw_keep(&path->rng, keep)) {
        keep_block(path, p, size);
    } else {
        memset(p, 0x5a, size < 64 ? size : 64);
        free(p);
    }
}

/* The paths. Each allocates until it has allocated `budget` more bytes. */

NOINLINE void path_malloc(uint64_t budget)
{
    path_t *path = &paths[PATH_MALLOC];
    uint64_t start = path->alloc_bytes;
    while (path->alloc_bytes - start < budget) {
        size_t size = draw_size(&path->rng);
        void *p = malloc(size);
        path->alloc_bytes += size;
        path->alloc_objects++;
        settle(path, path_keep[PATH_MALLOC], p, size);
    }
}

/* calloc of about two thirds of the size, then realloc to the whole: two
 * allocations (the calloc'd block is freed by the realloc). */
NOINLINE void path_calloc_realloc(uint64_t budget)
{
    path_t *path = &paths[PATH_CALLOC_REALLOC];
    uint64_t start = path->alloc_bytes;
    while (path->alloc_bytes - start < budget) {
        size_t size = draw_size(&path->rng);
        size_t n = size * 2 / 3 / 16;
        if (n == 0)
            n = 1;
        char *p = calloc(n, 16);
        if (!p)
            die("heap_truth: calloc");
        heap_truth_sink = p;
        p[0] = 1;
        path->alloc_bytes += n * 16;
        path->alloc_objects++;
        char *q = realloc(p, size);
        path->alloc_bytes += size;
        path->alloc_objects++;
        settle(path, path_keep[PATH_CALLOC_REALLOC], q, size);
    }
}

/* posix_memalign and aligned_alloc in turn, alignments 16 to 4096 B; the
 * size is a multiple of the alignment (C11's aligned_alloc asks it). */
NOINLINE void path_memalign(uint64_t budget)
{
    path_t *path = &paths[PATH_MEMALIGN];
    uint64_t start = path->alloc_bytes;
    while (path->alloc_bytes - start < budget) {
        size_t size = draw_size(&path->rng);
        size_t align = (size_t)16 << (bench_rand(&path->rng) % 9);
        size = (size + align - 1) & ~(align - 1);
        if (size > 65536)
            size = 65536;
        void *p = NULL;
        if (path->alloc_objects & 1) {
            p = aligned_alloc(align, size);
        } else if (posix_memalign(&p, align, size) != 0) {
            p = NULL;
        }
        path->alloc_bytes += size;
        path->alloc_objects++;
        settle(path, path_keep[PATH_MEMALIGN], p, size);
    }
}

static void print_truth(const char *name, const path_t *p)
{
    printf("truth %s alloc_bytes=%llu alloc_objects=%llu inuse_bytes=%llu inuse_objects=%llu\n",
           name, (unsigned long long)p->alloc_bytes, (unsigned long long)p->alloc_objects,
           (unsigned long long)p->inuse_bytes, (unsigned long long)p->inuse_objects);
}

/* --check: every block counted in use is live. Returns the number of
 * failures. */
static int check_live(uint64_t inuse_bytes)
{
    size_t tags_ok = 0, usable_ok = 0;
    uint64_t usable_sum = 0;
    for (size_t i = 0; i < kept_n; i++) {
        uint64_t tag = tag_of(kept[i].ptr, kept[i].size), a, b;
        memcpy(&a, kept[i].ptr, sizeof(a));
        memcpy(&b, (char *)kept[i].ptr + kept[i].size - sizeof(b), sizeof(b));
        tags_ok += a == tag && b == tag;
        size_t usable = malloc_usable_size(kept[i].ptr);
        usable_ok += usable >= kept[i].size;
        usable_sum += usable;
    }
    /* glibc's count of bytes in use (arena chunks and mmapped ones) before
     * and after freeing the kept blocks: the difference is what they held.
     * Chunks freed into the tcache still count as in use, so the difference
     * can only be short of the blocks' chunks by what the tcache holds (at
     * most 7 chunks of each size up to 1032 B); it must reach their bytes. */
    struct mallinfo2 before = mallinfo2();
    for (size_t i = 0; i < kept_n; i++)
        free(kept[i].ptr);
    struct mallinfo2 after = mallinfo2();
    uint64_t held = (uint64_t)(before.uordblks + before.hblkhd) - (after.uordblks + after.hblkhd);
    int mallinfo_ok;
    const char *mallinfo_how;
#ifdef SNAPPROF_SANITIZER_BUILD
    /* A sanitizer's allocator is not glibc's: mallinfo2 says nothing of it. */
    mallinfo_ok = 1;
    mallinfo_how = "skipped(sanitizer)";
#else
    mallinfo_ok = held >= inuse_bytes && held <= usable_sum + 16 * (uint64_t)kept_n;
    mallinfo_how = mallinfo_ok ? "ok" : "FAILED";
#endif
    printf("check kept=%zu tags_ok=%zu usable_ok=%zu usable_bytes=%llu mallinfo_freed=%llu "
           "inuse_bytes=%llu mallinfo=%s\n",
           kept_n, tags_ok, usable_ok, (unsigned long long)usable_sum, (unsigned long long)held,
           (unsigned long long)inuse_bytes, mallinfo_how);
    int failures = (tags_ok != kept_n) + (usable_ok != kept_n) + !mallinfo_ok;
    kept_n = 0;
    return failures;
}

int main(int argc, char **argv)
{
    uint64_t mib = 3072;
    const char *mode = "full";
    int check = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--small") == 0) {
            mib = 48;
            mode = "small";
        } else if (strcmp(argv[i], "--mib") == 0 && i + 1 < argc) {
            mib = strtoull(argv[++i], NULL, 10);
            mode = "mib";
        } else if (strcmp(argv[i], "--check") == 0) {
            check = 1;
        } else {
            fprintf(stderr, "usage: heap_truth [--small] [--mib N] [--check]\n");
            return 2;
        }
    }
    if (mib == 0) {
        fprintf(stderr, "heap_truth: --mib must be > 0\n");
        return 2;
    }
    for (int i = 0; i < NPATHS; i++)
        paths[i].rng = 0x243F6A8885A308D3ULL + 0x9E3779B97F4A7C15ULL * (uint64_t)(i + 1);

    /* Rounds over the paths in turn, so that no path owns one phase of the
     * run (the heap's growth, a profiler's start-up). */
    const int rounds = 64;
    uint64_t total = mib << 20;
    for (int r = 0; r < rounds; r++) {
        path_malloc((uint64_t)(total * path_share[PATH_MALLOC] / rounds));
        path_calloc_realloc((uint64_t)(total * path_share[PATH_CALLOC_REALLOC] / rounds));
        path_memalign((uint64_t)(total * path_share[PATH_MEMALIGN] / rounds));
    }

    path_t sum = {0};
    for (int i = 0; i < NPATHS; i++) {
        print_truth(path_names[i], &paths[i]);
        sum.alloc_bytes += paths[i].alloc_bytes;
        sum.alloc_objects += paths[i].alloc_objects;
        sum.inuse_bytes += paths[i].inuse_bytes;
        sum.inuse_objects += paths[i].inuse_objects;
    }
    print_truth("total", &sum);
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("truth run mode=%s mib=%llu cpu_s=%.3f maxrss_kib=%ld\n", mode, (unsigned long long)mib,
           (double)ts.tv_sec + ts.tv_nsec / 1e9, ru.ru_maxrss);
    fflush(stdout);
    if (check) {
        size_t n = kept_n;
        int failures = check_live(sum.inuse_bytes);
        if (n != sum.inuse_objects)
            failures++;
        return failures ? 1 : 0;
    }
    /* The kept blocks stay allocated: in use at exit. */
    return 0;
}
