/* The real sigaction(), syscall() and prctl() behind our interposed ones,
 * and the lookup of the next definition of a symbol that finds them
 * (preload_process.h).
 *
 * Its own file because it is built without the sanitizers'
 * instrumentation (preload/CMakeLists.txt), as the files that call it are:
 * the TSan runtime calls sigaction() while it initialises itself, before
 * any instrumented code may run (its function-entry hook then faults).
 * In preload_process.c, which is instrumented, every program linked with
 * the preload library died of SIGSEGV at start in the TSan build. */
#include "preload/preload_process.h"

#include <dlfcn.h>

void *snapprof__preload_next_fn(void **slot, const char *name)
{
    void *fn = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    if (!fn) {
        fn = dlsym(RTLD_NEXT, name);
        __atomic_store_n(slot, fn, __ATOMIC_RELEASE);
    }
    return fn;
}

snapprof__preload_sigaction_fn snapprof__preload_real_sigaction(void)
{
    static void *real;
    return (snapprof__preload_sigaction_fn)snapprof__preload_next_fn(&real, "sigaction");
}

snapprof__preload_syscall_fn snapprof__preload_real_syscall(void)
{
    static void *real;
    return (snapprof__preload_syscall_fn)snapprof__preload_next_fn(&real, "syscall");
}

snapprof__preload_prctl_fn snapprof__preload_real_prctl(void)
{
    static void *real;
    return (snapprof__preload_prctl_fn)snapprof__preload_next_fn(&real, "prctl");
}
