/* A library the GOT-patching test dlopen()s after install: it allocates
 * through its own GOT. Built with -fno-plt (GLOB_DAT entries, where the
 * program has JUMP_SLOT ones) and full RELRO (read-only after loading, so
 * patching needs mprotect). Test-only. */
#include <stdlib.h>

__attribute__((visibility("default"))) void *got_lib_alloc(size_t size)
{
    return malloc(size);
}

__attribute__((visibility("default"))) void *got_lib_calloc(size_t count, size_t size)
{
    return calloc(count, size);
}

__attribute__((visibility("default"))) void got_lib_free(void *p)
{
    free(p);
}
