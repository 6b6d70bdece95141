/* A shared library linked with -s (no .symtab): its hot loop is a static
 * function, which only .symtab would name, so its frames have no name
 * (test_preload_record.c, case stripped_module). */
#include <stdint.h>

static __attribute__((noinline)) uint64_t stripped_spin(uint64_t n)
{
    uint64_t x = 1;
    for (uint64_t i = 0; i < n; i++) {
        x = x * 6364136223846793005ull + i;
        __asm__ volatile("" : "+r"(x));
    }
    return x;
}

__attribute__((visibility("default"))) uint64_t stripped_lib_run(uint64_t n)
{
    return stripped_spin(n) | 1;
}
