/* A library preloaded after libsnapprof-heap.so by the heap hooks'
 * bootstrap test: the loader runs its constructor before the hooks' own
 * (preloads are initialized last first), so its allocation is the first of
 * the process to reach the hooks, which resolve the allocator from inside
 * it. Test-only. */
#include <dlfcn.h>
#include <stdlib.h>

#define EARLY_SIZE (40000 + 64 * 21) /* SZ(21) of test_preload_heap_prog.c */

static size_t boot_bytes;
static void *volatile sink; /* or the compiler leaves malloc and free out */

__attribute__((constructor)) static void early_ctor(void)
{
    sink = malloc(EARLY_SIZE);
    free(sink);
    int (*info)(size_t *) = (int (*)(size_t *))dlsym(RTLD_DEFAULT, "snapprof__heap_preload_info");
    if (info)
        info(&boot_bytes);
}

/* The bytes the hooks' bootstrap buffer had given out by the end of our
 * constructor. */
__attribute__((visibility("default"))) size_t test_heap_early_boot(void)
{
    return boot_bytes;
}
