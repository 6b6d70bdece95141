/* A tiny shared library that module_cache tests dlopen and dlclose. */
#include <stdint.h>

/* Big enough that pointers a few bytes into them stay inside. */
__attribute__((noinline)) uint64_t mc_testlib_fn(uint64_t x)
{
    for (int i = 0; i < 8; i++)
        x = x * 6364136223846793005u + 1442695040888963407u;
    return x;
}

__attribute__((noinline)) uint64_t mc_testlib_other(uint64_t x)
{
    return mc_testlib_fn(x ^ 0x5555u) + 3;
}
