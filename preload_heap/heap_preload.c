/* The C allocation functions interposed by libsnapprof-heap.so: malloc,
 * calloc, realloc, reallocarray, free, posix_memalign, aligned_alloc,
 * memalign, valloc and pvalloc. Each forwards to the next definition
 * (dlsym(RTLD_NEXT): glibc's, or jemalloc's or tcmalloc's when one of them
 * is loaded) and, in the outermost hook of the thread, tells the heap
 * sampler what came back (heap_hook_core.h). The pointer the program gets
 * is the allocator's own, so malloc_usable_size and every other call of
 * the allocator's work on it unchanged.
 *
 * Bootstrap: dlsym can allocate (its error string, its per-thread result
 * buffer) while the next malloc is not known yet. Allocations made while
 * this thread resolves come from a static buffer; frees of pointers inside
 * it are ignored, a realloc of one copies it out. */
#include "preload_heap/heap_preload.h"

#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

__thread snapprof__heap_hook_count_t snapprof__heap_preload_count
    __attribute__((tls_model("initial-exec")));

/* All zero as loaded (heap/heap_hook_abi.h): no filter kept, every free
 * told, until the sampler attaches (or resolve finds there is none). */
snapprof__heap_hook_t snapprof__heap_preload_shared;
extern snapprof__heap_hook_t snapprof__heap_hook_v1
    __attribute__((alias("snapprof__heap_preload_shared"), visibility("default")));

#include "preload_heap/heap_hook_core.h"

/* Written once per member by the first thread that resolves (others may
 * resolve at the same time and store the same values). malloc and free are
 * stored last: a non-NULL malloc (or free) means every member is known. */
static hk_real_t hk_real;

/* Set while this thread resolves: its allocations are dlsym's. */
static __thread int hk_resolving __attribute__((tls_model("initial-exec")));

#define HK_LOAD(member) __atomic_load_n(&hk_real.member, __ATOMIC_ACQUIRE)

/* What malloc and free call: the bootstrap's until the C functions are
 * resolved, then the real ones (set by the resolve), so that their fast
 * paths test no NULL. free's is never the allocator's own once a block of
 * the bootstrap buffer was given out (hk_free_boot_checked(), stored
 * before the block is returned; the resolve only replaces the initial
 * hk_free_booting(), by a compare-and-swap): so free itself need not check
 * every pointer against the buffer, and in a process where dlsym never
 * allocated (glibc 2.34 and later, when it finds what it looks for) it
 * does not. */
static void *hk_malloc_booting(size_t n);
static void hk_free_booting(void *p);
static void hk_free_boot_checked(void *p);
static void *(*hk_call_malloc)(size_t) = hk_malloc_booting;
static void (*hk_call_free)(void *) = hk_free_booting;

/* The bootstrap buffer. Each block has a 16-byte header holding its size,
 * for realloc. Never reused: a few hundred bytes are taken in a process's
 * life. */
#define HK_BOOT_SIZE (64 * 1024)
static _Alignas(64) unsigned char hk_boot[HK_BOOT_SIZE];
static size_t hk_boot_used;

static inline int hk_in_boot(const void *p)
{
    return (uintptr_t)p - (uintptr_t)hk_boot < HK_BOOT_SIZE;
}

static void *hk_boot_alloc(size_t align, size_t n)
{
    if (align < 16)
        align = 16;
    if (n > HK_BOOT_SIZE || (align & (align - 1)) != 0 || align > 4096) {
        errno = ENOMEM;
        return NULL;
    }
    size_t old = __atomic_load_n(&hk_boot_used, __ATOMIC_RELAXED);
    for (;;) {
        size_t start = (old + 16 + align - 1) & ~(align - 1);
        size_t end = start + ((n + 15) & ~(size_t)15);
        if (end > HK_BOOT_SIZE) {
            errno = ENOMEM;
            return NULL;
        }
        if (__atomic_compare_exchange_n(&hk_boot_used, &old, end, 1, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED)) {
            memcpy(hk_boot + start - sizeof(size_t), &n, sizeof n);
            /* Before the program can free the block. */
            __atomic_store_n(&hk_call_free, hk_free_boot_checked, __ATOMIC_RELEASE);
            return hk_boot + start; /* zero: the buffer is never reused */
        }
    }
}

static size_t hk_boot_size(const void *p)
{
    size_t n;
    memcpy(&n, (const unsigned char *)p - sizeof n, sizeof n);
    return n;
}

/* Exported for the GOT patcher (heap_got.c), which patches nothing when
 * this library is loaded (it would note every allocation twice), and for
 * the tests: returns 1 and the bytes the bootstrap buffer gave out. */
HK_EXPORT int snapprof__heap_preload_info(size_t *boot_bytes)
{
    if (boot_bytes)
        *boot_bytes = __atomic_load_n(&hk_boot_used, __ATOMIC_RELAXED);
    return 1;
}

static void *hk_next(const char *name)
{
    return dlsym(RTLD_NEXT, name);
}

int snapprof__heap_preload_resolve(void)
{
    if (HK_LOAD(malloc) != NULL && HK_LOAD(free) != NULL)
        return 0;
    /* Raised for the whole resolution: the allocations dlsym makes on this
     * thread come from the bootstrap buffer and are never noted. */
    unsigned saved = HK_DEPTH;
    HK_DEPTH = 1;
    hk_resolving = 1;
    int e = errno;
#define HK_RESOLVE(member)                                                                         \
    __atomic_store_n(&hk_real.member, (__typeof__(hk_real.member))hk_next(#member),                \
                     __ATOMIC_RELEASE)
    HK_RESOLVE(calloc);
    HK_RESOLVE(realloc);
    HK_RESOLVE(reallocarray);
    HK_RESOLVE(posix_memalign);
    HK_RESOLVE(aligned_alloc);
    HK_RESOLVE(memalign);
    HK_RESOLVE(valloc);
    HK_RESOLVE(pvalloc);
    /* A sampler that has not attached (a stand-in that knows only the
     * public note functions, or libsnapprof.so before its constructor,
     * which zeroes this again) is told of every free (heap_hook_abi.h).
     * Once, before malloc and free are published. */
    static int filled;
    if (!hk_no_sampler() && atomic_load(&HK_SHARED.alloc_slow) == NULL &&
        !__atomic_exchange_n(&filled, 1, __ATOMIC_RELAXED)) {
        for (size_t i = 0; i < SNAPPROF__HEAP_FILTER_SIZE; i++)
            atomic_store_explicit(&HK_SHARED.filter[i], 1, memory_order_relaxed);
    }
    HK_RESOLVE(free);
    HK_RESOLVE(malloc);
#undef HK_RESOLVE
    if (HK_LOAD(malloc) != NULL && HK_LOAD(free) != NULL) {
        void (*booting)(void *) = hk_free_booting;
        __atomic_compare_exchange_n(&hk_call_free, &booting, hk_real.free, 0, __ATOMIC_RELEASE,
                                    __ATOMIC_RELAXED);
        __atomic_store_n(&hk_call_malloc, hk_real.malloc, __ATOMIC_RELEASE);
    }
    errno = e;
    hk_resolving = 0;
    HK_DEPTH = saved;
    return HK_LOAD(malloc) != NULL && HK_LOAD(free) != NULL ? 0 : -1;
}

/* Early, so that the first allocation of a program rarely resolves (it
 * still may: another library's constructor can run before ours). */
__attribute__((constructor(101))) static void hk_init(void)
{
    snapprof__heap_preload_resolve();
}

/* Calls of the C functions before they are resolved, or while this thread
 * resolves them: from the bootstrap buffer, without noting. */
static int hk_booting(void)
{
    if (hk_resolving)
        return 1;
    return snapprof__heap_preload_resolve() != 0;
}

void *snapprof__heap_preload_real_malloc(size_t n)
{
    if (hk_booting())
        return hk_boot_alloc(16, n);
    return hk_real.malloc(n);
}

void *snapprof__heap_preload_real_aligned(size_t align, size_t n)
{
    if (hk_booting())
        return hk_boot_alloc(align, n);
    return hk_real.memalign(align, n);
}

void snapprof__heap_preload_real_free(void *p)
{
    if (p == NULL || hk_in_boot(p))
        return;
    if (hk_booting())
        return;
    hk_real.free(p);
}

/* The countdown did not take this malloc (hk_take()): the sampler's slow
 * path, or no sampler (then no call on this thread again). */
static __attribute__((noinline)) void *hk_malloc_slow(size_t n)
{
    void *(*fn)(size_t) = __atomic_load_n(&hk_call_malloc, __ATOMIC_ACQUIRE);
    if (!hk_enter()) {
        if (hk_no_sampler())
            hk_disarm();
        return fn(n);
    }
    void *p = fn(n);
    /* Never a block of the bootstrap buffer: its free is ignored. */
    if (!hk_in_boot(p))
        hk_note_alloc(p, n);
    hk_leave();
    return p;
}

HK_EXPORT void *malloc(size_t n)
{
    /* The common case: the countdown takes n, and the allocator is reached
     * by a tail call, one jump through hk_call_malloc (read where it is
     * used: a load of it beside the countdown's would be an instruction
     * more). Relaxed: the function it names needs no data of the thread
     * that stored it (the bootstrap's reads what it needs with acquire). */
    if (HK_LIKELY(hk_take(n)))
        return __atomic_load_n(&hk_call_malloc, __ATOMIC_RELAXED)(n);
    return hk_malloc_slow(n);
}

/* What malloc calls before the C functions are known (hk_call_malloc), or
 * while this thread resolves them: the bootstrap buffer; after resolving,
 * the allocator's malloc. malloc has counted n already. */
static __attribute__((noinline)) void *hk_malloc_booting(size_t n)
{
    if (hk_booting())
        return hk_boot_alloc(16, n);
    return hk_real.malloc(n);
}

/* A free the filter did not rule out: told to the sampler, by the
 * outermost hook only (operator delete reaching free has told it), then
 * freed (fn is hk_call_free's: it ignores blocks of the bootstrap buffer,
 * which are never told). The depth counter is not raised: neither the
 * sampler's note_free (which never allocates) nor the allocator's free
 * calls a hook of ours. */
static __attribute__((noinline)) void hk_free_slow(void *p)
{
    void (*fn)(void *) = __atomic_load_n(&hk_call_free, __ATOMIC_ACQUIRE);
    if (p != NULL && !hk_in_boot(p) && HK_DEPTH == 0 && snapprof_heap_note_free != NULL)
        snapprof_heap_note_free(p);
    fn(p);
}

/* free before the C functions are known (hk_call_free), or while this
 * thread resolves them: nothing of theirs can be freed yet; after
 * resolving, the allocator's free. The filter was looked at already. */
static __attribute__((noinline)) void hk_free_booting(void *p)
{
    if (hk_in_boot(p) || hk_booting())
        return;
    hk_real.free(p);
}

/* free once a block of the bootstrap buffer was given out: its blocks are
 * not the allocator's, and freeing them does nothing. */
static void hk_free_boot_checked(void *p)
{
    if (hk_in_boot(p))
        return;
    if (HK_UNLIKELY(HK_LOAD(free) == NULL)) {
        hk_free_booting(p);
        return;
    }
    hk_real.free(p);
}

HK_EXPORT void free(void *p)
{
    /* The common case: no sampled block in p's filter bucket, and the
     * allocator is reached by a tail call, one jump through hk_call_free
     * (relaxed, as malloc's). free(NULL) goes on to the allocator's, which
     * does nothing either; a block of the bootstrap buffer to
     * hk_call_free's, which ignores it. A thread freeing such a block got
     * it from the thread that allocated it, after that thread stored
     * hk_free_boot_checked(): the relaxed load sees that store or a later
     * one. */
    if (HK_UNLIKELY(hk_free_maybe_sampled(p))) {
        hk_free_slow(p);
        return;
    }
    __atomic_load_n(&hk_call_free, __ATOMIC_RELAXED)(p);
}

HK_EXPORT void *calloc(size_t count, size_t size)
{
    void *(*fn)(size_t, size_t) = HK_LOAD(calloc);
    if (HK_UNLIKELY(HK_LOAD(malloc) == NULL)) {
        if (hk_booting()) {
            size_t n;
            if (__builtin_mul_overflow(count, size, &n)) {
                errno = ENOMEM;
                return NULL;
            }
            return hk_boot_alloc(16, n);
        }
        fn = hk_real.calloc;
    }
    if (!hk_enter())
        return fn(count, size);
    void *p = fn(count, size);
    /* A non-NULL p means count * size did not overflow. */
    hk_note_alloc(p, count * size);
    hk_leave();
    return p;
}

/* realloc of a block from the bootstrap buffer: copied into a block of the
 * real allocator (through malloc, so noted like one). */
static void *hk_realloc_boot(void *old, size_t n)
{
    void *p = malloc(n);
    if (p != NULL) {
        size_t had = hk_boot_size(old);
        memcpy(p, old, had < n ? had : n);
    }
    return p;
}

HK_EXPORT void *realloc(void *old, size_t n)
{
    void *(*fn)(void *, size_t) = HK_LOAD(realloc);
    if (HK_UNLIKELY(old != NULL && hk_in_boot(old)))
        return hk_realloc_boot(old, n);
    if (HK_UNLIKELY(HK_LOAD(malloc) == NULL)) {
        if (hk_booting())
            return hk_boot_alloc(16, n); /* old is NULL: nothing allocated yet */
        fn = hk_real.realloc;
    }
    if (!hk_enter())
        return fn(old, n);
    void *p = fn(old, n);
    hk_note_realloc(old, p, n);
    hk_leave();
    return p;
}

HK_EXPORT void *reallocarray(void *old, size_t count, size_t size)
{
    void *(*fn)(void *, size_t, size_t) = HK_LOAD(reallocarray);
    size_t n;
    int overflow = __builtin_mul_overflow(count, size, &n);
    if (HK_UNLIKELY(old != NULL && hk_in_boot(old))) {
        if (overflow) {
            errno = ENOMEM;
            return NULL;
        }
        return hk_realloc_boot(old, n);
    }
    if (HK_UNLIKELY(HK_LOAD(malloc) == NULL)) {
        if (hk_booting()) {
            if (overflow) {
                errno = ENOMEM;
                return NULL;
            }
            return hk_boot_alloc(16, n);
        }
        fn = hk_real.reallocarray;
    }
    if (fn == NULL) {
        /* A libc older than 2.26 has none: realloc does it. */
        if (overflow) {
            errno = ENOMEM;
            return NULL;
        }
        return realloc(old, n);
    }
    if (!hk_enter())
        return fn(old, count, size);
    void *p = fn(old, count, size);
    if (!overflow)
        hk_note_realloc(old, p, n);
    hk_leave();
    return p;
}

HK_EXPORT int posix_memalign(void **out, size_t align, size_t n)
{
    int (*fn)(void **, size_t, size_t) = HK_LOAD(posix_memalign);
    if (HK_UNLIKELY(HK_LOAD(malloc) == NULL)) {
        if (hk_booting()) {
            if (align < sizeof(void *) || (align & (align - 1)) != 0)
                return EINVAL;
            void *p = hk_boot_alloc(align, n);
            if (p == NULL)
                return ENOMEM;
            *out = p;
            return 0;
        }
        fn = hk_real.posix_memalign;
    }
    if (!hk_enter())
        return fn(out, align, n);
    int rc = fn(out, align, n);
    if (rc == 0)
        hk_note_alloc(*out, n);
    hk_leave();
    return rc;
}

/* aligned_alloc, memalign: (alignment, size). */
#define HK_ALIGNED(name)                                                                           \
    HK_EXPORT void *name(size_t align, size_t n)                                                   \
    {                                                                                              \
        void *(*fn)(size_t, size_t) = HK_LOAD(name);                                               \
        if (HK_UNLIKELY(HK_LOAD(malloc) == NULL)) {                                                \
            if (hk_booting())                                                                      \
                return hk_boot_alloc(align, n);                                                    \
            fn = hk_real.name;                                                                     \
        }                                                                                          \
        if (!hk_enter())                                                                           \
            return fn(align, n);                                                                   \
        void *p = fn(align, n);                                                                    \
        hk_note_alloc(p, n);                                                                       \
        hk_leave();                                                                                \
        return p;                                                                                  \
    }
HK_ALIGNED(aligned_alloc)
HK_ALIGNED(memalign)

/* valloc, pvalloc: page-aligned; the size noted is the one asked for
 * (pvalloc rounds it up to whole pages). */
#define HK_PAGE(name)                                                                              \
    HK_EXPORT void *name(size_t n)                                                                 \
    {                                                                                              \
        void *(*fn)(size_t) = HK_LOAD(name);                                                       \
        if (HK_UNLIKELY(HK_LOAD(malloc) == NULL)) {                                                \
            if (hk_booting())                                                                      \
                return hk_boot_alloc(4096, n);                                                     \
            fn = hk_real.name;                                                                     \
        }                                                                                          \
        if (!hk_enter())                                                                           \
            return fn(n);                                                                          \
        void *p = fn(n);                                                                           \
        hk_note_alloc(p, n);                                                                       \
        hk_leave();                                                                                \
        return p;                                                                                  \
    }
HK_PAGE(valloc)
HK_PAGE(pvalloc)

void *snapprof__heap_preload_next(const char *name)
{
    void *f = dlsym(RTLD_NEXT, name);
    if (f == NULL) {
        /* A C program that dlopen()ed a C++ library with RTLD_LOCAL: its
         * libstdc++ is not in the global scope, but its references to
         * operator new bound to ours. */
        void *h = dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_NOLOAD);
        if (h != NULL) {
            f = dlsym(h, name);
            dlclose(h);
        }
    }
    return f;
}
