/* The shared library the soak dlopen()s, calls and dlclose()s in a loop:
 * CPU work in a function of its own, so that samples land in a module that
 * comes and goes while the profiler runs. */
#include <stdint.h>

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
