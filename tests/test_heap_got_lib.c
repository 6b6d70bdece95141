/* A library linked into test_heap_got: its allocations reach malloc and
 * free through its own GOT, which snapprof_heap_hooks_install() patches. */
#include <stddef.h>
#include <stdlib.h>

__attribute__((noinline)) void got_lib_alloc(void **out, int n, size_t size)
{
    for (int i = 0; i < n; i++)
        out[i] = malloc(size);
    __asm__ volatile("" ::: "memory"); /* not a tail call: our frame stays */
}

__attribute__((noinline)) void got_lib_free(void **blocks, int n)
{
    for (int i = 0; i < n; i++)
        free(blocks[i]);
}
