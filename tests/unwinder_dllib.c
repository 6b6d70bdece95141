/* A library the dlclose test loads and unloads over and over while the
 * profiler samples code inside it. Built with -O2 -fomit-frame-pointer. */
#include <stdint.h>

__attribute__((noinline)) uint64_t dllib_hot(uint64_t n)
{
    uint64_t x = n | 3;
    for (uint64_t i = 0; i < n; i++) {
        x = x * 3935559000370003845u + 2691343689449507681u;
        __asm__ volatile("" : "+r"(x));
    }
    return x;
}

__attribute__((noinline)) uint64_t dllib_outer(uint64_t n)
{
    uint64_t r = dllib_hot(n);
    __asm__ volatile("" : "+r"(r));
    return r + 1;
}
