/* A tiny shared library that module_cache tests dlopen and dlclose. */
#include <dlfcn.h>
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

/* Runs inside dlopen(), with the loader's lock held: if the loading program
 * exports mc_testlib_ctor_hook, call it, so a test can use the module cache
 * from there (a library that starts profiling in its constructor). */
volatile int mc_testlib_ctor_runs;

__attribute__((constructor, noinline)) static void mc_testlib_ctor(void)
{
    void (*hook)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "mc_testlib_ctor_hook");
    if (hook != 0)
        hook();
    /* After the call, so that it is not a tail call: the hook looks for
     * its return address in this function. */
    mc_testlib_ctor_runs++;
}
