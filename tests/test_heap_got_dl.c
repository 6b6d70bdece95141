/* A library that test_heap_got dlopen()s after install: its GOT is patched
 * by the sampling thread's tick, then it is dlclose()d while patched. */
#include <stddef.h>
#include <stdlib.h>

__attribute__((noinline)) void got_dl_alloc(void **out, int n, size_t size)
{
    for (int i = 0; i < n; i++)
        out[i] = malloc(size);
    __asm__ volatile("" ::: "memory"); /* not a tail call: our frame stays */
}

__attribute__((noinline)) void got_dl_free(void **blocks, int n)
{
    for (int i = 0; i < n; i++)
        free(blocks[i]);
}
