/* The recursion of trigger_deep_stacks_two_threads, compiled on its own
 * with -O2 -fomit-frame-pointer (tests/trigger.cmake), as a distribution
 * builds its code: the unwinders need the CFI to walk it, and the copy
 * must hold the whole stack. About 670 bytes a frame: 2000 frames hold
 * about 1.3 MiB of live stack, the case of issue 25 item 2. bench_deep
 * runs the same recursion (bench/CMakeLists.txt builds it alike). */
#include <stdatomic.h>
#include <stdint.h>

uint64_t trigger_deep_recurse(int depth, atomic_int *at_bottom, const atomic_int *stop);

__attribute__((noinline)) uint64_t trigger_deep_recurse(int depth, atomic_int *at_bottom,
                                                        const atomic_int *stop)
{
    volatile char pad[640];
    pad[0] = (char)depth;
    pad[sizeof pad - 1] = (char)depth;
    if (depth > 0)
        return trigger_deep_recurse(depth - 1, at_bottom, stop) + (uint64_t)pad[0];
    atomic_store(at_bottom, 1);
    uint64_t x = 1;
    while (!atomic_load_explicit(stop, memory_order_relaxed)) {
        for (int i = 0; i < 10000; i++)
            x = x * 6364136223846793005u + 1;
        __asm__ volatile("" : "+r"(x));
    }
    return x + (uint64_t)pad[sizeof pad - 1];
}
