/* A dlsym that allocates before it looks anything up, as glibc's did on a
 * thread's first call before 2.34 and does on every failure: preloaded
 * after libsnapprof-heap.so by the bootstrap test, it makes the hooks'
 * resolution of the allocator allocate while the allocator is not known,
 * which the hooks must serve from their bootstrap buffer. RTLD_NEXT is
 * looked up after this library rather than after the caller: the same
 * answer for the allocation functions, since the libraries in between
 * define none. Test-only. */
#include <dlfcn.h>
#include <stdlib.h>

typedef void *(*dlsym_fn)(void *, const char *);

static void *volatile sink_a, *volatile sink_b, *volatile sink_c;

/* A block of the first call (the hooks resolving: the bootstrap buffer's),
 * kept for the program to free after main has begun, when free goes
 * straight to the allocator unless the hooks remember that the buffer gave
 * blocks out (heap_preload.c, hk_call_free). */
static void *volatile kept;

__attribute__((visibility("default"))) void *test_heap_dlsym_kept(void)
{
    return kept;
}

__attribute__((visibility("default"))) void *dlsym(void *handle, const char *name)
{
    if (kept == NULL)
        kept = malloc(24);
    sink_a = malloc(40);
    sink_b = calloc(3, 8);
    sink_b = realloc(sink_b, 200);
    if (posix_memalign((void **)&sink_c, 64, 100) == 0)
        free(sink_c);
    free(sink_a);
    free(sink_b);
    static dlsym_fn real;
    dlsym_fn f = __atomic_load_n(&real, __ATOMIC_ACQUIRE);
    if (f == NULL) {
        f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
        if (f == NULL)
            f = (dlsym_fn)dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
        __atomic_store_n(&real, f, __ATOMIC_RELEASE);
    }
    return f ? f(handle, name) : NULL;
}
