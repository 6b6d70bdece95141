/* Internal declarations shared by the files of libsnapprof-heap.so, the
 * preloadable library that interposes the allocation functions
 * (heap_preload.c: the C functions; heap_preload_cxx.c: operator new and
 * delete). Never installed. */
#ifndef SNAPPROF_PRELOAD_HEAP_HEAP_PRELOAD_H
#define SNAPPROF_PRELOAD_HEAP_HEAP_PRELOAD_H

#include <stddef.h>

#define HK_EXPORT __attribute__((visibility("default")))

#include "heap/heap_hook_abi.h"

/* The library's one reentry counter, its threads' byte countdowns, and
 * what it shares with the heap sampler (heap_hook_core.h). */
extern __thread snapprof__heap_hook_count_t snapprof__heap_preload_count
    __attribute__((tls_model("initial-exec")));
#define HK_COUNT snapprof__heap_preload_count
/* In the same TLS block as the countdown: one TLS offset for both. */
#define HK_DEPTH snapprof__heap_preload_count.depth
/* Exported as snapprof__heap_hook_v1 (heap_preload.c); this name is the
 * library's own, reached without the GOT. */
extern snapprof__heap_hook_t snapprof__heap_preload_shared __attribute__((visibility("hidden")));
#define HK_SHARED snapprof__heap_preload_shared

/* The next definitions of the C functions; resolves them (once, on the
 * first call of any thread) when they are not yet known. Never NULL for
 * malloc and free once it returned 0; -1 if dlsym found no malloc or free. */
int snapprof__heap_preload_resolve(void);

/* The C functions reached without a hook: for C++ operators whose next
 * definition cannot be found (see heap_preload_cxx.c). */
void *snapprof__heap_preload_real_malloc(size_t n);
void *snapprof__heap_preload_real_aligned(size_t align, size_t n);
void snapprof__heap_preload_real_free(void *p);

/* dlsym(RTLD_NEXT, name) for operator new/delete, falling back to a
 * libstdc++ loaded RTLD_LOCAL. May allocate (dlsym does): call it with the
 * depth counter raised. */
void *snapprof__heap_preload_next(const char *name);

#endif
