/* The shared library the soak dlopen()s, calls and dlclose()s in a loop:
 * CPU work in a function of its own, so that samples land in a module that
 * comes and goes while the profiler runs, and (soak_heap) allocations made
 * by the library's own code. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* iters rounds of an LCG (work, not time: see soak_prog.c), calling poll
 * every 4096 rounds so that TSan gets to run the signals it deferred
 * (soak_poll in soak_prog.c). */
__attribute__((noinline)) uint64_t soak_lib_work(uint64_t iters, uint64_t x, void (*poll)(void))
{
    volatile uint64_t v = x;
    for (uint64_t i = 0; i < iters; i++) {
        v = v * 6364136223846793005u + 1442695040888963407u;
        if ((i & 4095) == 4095)
            poll();
    }
    return v;
}

/* Heap soak (soak_heap): allocations made by the library's own code, so
 * through its own GOT, which the heap hooks patch at once (install called
 * again after dlopen) or within a tick of the load (the sampling thread).
 * Sizes of 1 to 16 KiB, written to so that the pairs are not elided. */
__attribute__((noinline)) uint64_t soak_lib_alloc(uint64_t x)
{
    for (unsigned i = 0; i < 8; i++) {
        size_t size = (size_t)1 << (i + (unsigned)(x & 7));
        volatile char *p = malloc(size);
        if (!p)
            return x;
        p[0] = (char)x;
        p[size - 1] = (char)i;
        x = x * 31 + (uint64_t)p[0];
        free((void *)p);
    }
    return x;
}

/* A block allocated here that outlives the library: the caller frees it
 * after dlclose(), when the code (and GOT) that allocated it are gone. */
__attribute__((noinline)) void *soak_lib_keep(size_t size)
{
    char *p = malloc(size);
    if (p)
        memset(p, 0x5a, size);
    return p;
}
