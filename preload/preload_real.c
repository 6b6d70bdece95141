/* The real sigaction() behind our interposed one (preload_process.h).
 *
 * Its own file because it is built without the sanitizers'
 * instrumentation (preload/CMakeLists.txt), as the files that call it are:
 * the TSan runtime calls sigaction() while it initialises itself, before
 * any instrumented code may run (its function-entry hook then faults).
 * In preload_process.c, which is instrumented, every program linked with
 * the preload library died of SIGSEGV at start in the TSan build. */
#include "preload/preload_process.h"

#include <dlfcn.h>

snapprof__preload_sigaction_fn snapprof__preload_real_sigaction(void)
{
    static snapprof__preload_sigaction_fn real;
    snapprof__preload_sigaction_fn fn = __atomic_load_n(&real, __ATOMIC_ACQUIRE);
    if (!fn) {
        fn = (snapprof__preload_sigaction_fn)dlsym(RTLD_NEXT, "sigaction");
        __atomic_store_n(&real, fn, __ATOMIC_RELEASE);
    }
    return fn;
}
