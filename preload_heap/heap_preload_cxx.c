/* The C++ operator new and delete families interposed by
 * libsnapprof-heap.so, by their mangled names (x86-64 and aarch64 Itanium
 * ABI: size_t is "m", std::align_val_t an enum of size_t passed as one,
 * std::nothrow_t const& a pointer). jemalloc and tcmalloc define their own
 * operators, which need not reach malloc, so each operator forwards to the
 * next definition of the same symbol; libstdc++'s reach malloc, where the
 * depth counter keeps them from being noted twice.
 *
 * Built with -fexceptions: a throwing operator new (std::bad_alloc, or a
 * new_handler's exception) unwinds through our frame, and the cleanup
 * below lowers the depth counter again on the way; without it the thread
 * would note nothing more. */
#include "preload_heap/heap_preload.h"

#include <stdint.h>

#include "preload_heap/heap_hook_core.h"

/* The next definition of one operator, looked up on its first call. A
 * process where there is none (a C++ library opened RTLD_LOCAL by a C
 * program, with a C++ runtime we cannot find) gets the C allocator. */
static void *hk_cxx_next(void **slot, const char *name)
{
    void *f = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    if (HK_LIKELY(f != NULL))
        return f;
    /* The C functions first: the next operator may call malloc at once. */
    snapprof__heap_preload_resolve();
    unsigned saved = HK_DEPTH;
    HK_DEPTH = 1; /* dlsym's own allocations are not the program's */
    f = snapprof__heap_preload_next(name);
    HK_DEPTH = saved;
    if (f != NULL)
        __atomic_store_n(slot, f, __ATOMIC_RELEASE);
    return f;
}

static void hk_cxx_unwind(int *entered)
{
    if (*entered)
        hk_leave();
}

/* XX(name, params, args, fallback): the operators new. The size is n, the
 * alignment al. */
#define HK_CXX_NEW(XX)                                                                             \
    XX(_Znwm, (size_t n), (n), snapprof__heap_preload_real_malloc(n))                              \
    XX(_Znam, (size_t n), (n), snapprof__heap_preload_real_malloc(n))                              \
    XX(_ZnwmRKSt9nothrow_t, (size_t n, const void *nt), (n, nt),                                   \
       snapprof__heap_preload_real_malloc(n))                                                      \
    XX(_ZnamRKSt9nothrow_t, (size_t n, const void *nt), (n, nt),                                   \
       snapprof__heap_preload_real_malloc(n))                                                      \
    XX(_ZnwmSt11align_val_t, (size_t n, size_t al), (n, al),                                       \
       snapprof__heap_preload_real_aligned(al, n))                                                 \
    XX(_ZnamSt11align_val_t, (size_t n, size_t al), (n, al),                                       \
       snapprof__heap_preload_real_aligned(al, n))                                                 \
    XX(_ZnwmSt11align_val_tRKSt9nothrow_t, (size_t n, size_t al, const void *nt), (n, al, nt),     \
       snapprof__heap_preload_real_aligned(al, n))                                                 \
    XX(_ZnamSt11align_val_tRKSt9nothrow_t, (size_t n, size_t al, const void *nt), (n, al, nt),     \
       snapprof__heap_preload_real_aligned(al, n))

/* The operators delete; the pointer is p. */
#define HK_CXX_DELETE(XX)                                                                          \
    XX(_ZdlPv, (void *p), (p))                                                                     \
    XX(_ZdaPv, (void *p), (p))                                                                     \
    XX(_ZdlPvm, (void *p, size_t n), (p, n))                                                       \
    XX(_ZdaPvm, (void *p, size_t n), (p, n))                                                       \
    XX(_ZdlPvSt11align_val_t, (void *p, size_t al), (p, al))                                       \
    XX(_ZdaPvSt11align_val_t, (void *p, size_t al), (p, al))                                       \
    XX(_ZdlPvmSt11align_val_t, (void *p, size_t n, size_t al), (p, n, al))                         \
    XX(_ZdaPvmSt11align_val_t, (void *p, size_t n, size_t al), (p, n, al))                         \
    XX(_ZdlPvRKSt9nothrow_t, (void *p, const void *nt), (p, nt))                                   \
    XX(_ZdaPvRKSt9nothrow_t, (void *p, const void *nt), (p, nt))                                   \
    XX(_ZdlPvSt11align_val_tRKSt9nothrow_t, (void *p, size_t al, const void *nt), (p, al, nt))     \
    XX(_ZdaPvSt11align_val_tRKSt9nothrow_t, (void *p, size_t al, const void *nt), (p, al, nt))

#define HK_NEW_DEF(name, params, args, fallback)                                                   \
    HK_EXPORT void *name params;                                                                   \
    HK_EXPORT void *name params                                                                    \
    {                                                                                              \
        static void *next;                                                                         \
        void *(*fn)params = (void *(*)params)hk_cxx_next(&next, #name);                            \
        __attribute__((cleanup(hk_cxx_unwind))) int entered = hk_enter();                          \
        void *r = fn != NULL ? fn args : fallback;                                                 \
        if (entered)                                                                               \
            hk_note_alloc(r, n);                                                                   \
        return r;                                                                                  \
    }
HK_CXX_NEW(HK_NEW_DEF)

#define HK_DELETE_DEF(name, params, args)                                                          \
    HK_EXPORT void name params;                                                                    \
    HK_EXPORT void name params                                                                     \
    {                                                                                              \
        static void *next;                                                                         \
        if (p == NULL)                                                                             \
            return;                                                                                \
        void(*fn) params = (void(*) params)hk_cxx_next(&next, #name);                              \
        int entered = hk_enter();                                                                  \
        if (entered)                                                                               \
            hk_note_free(p);                                                                       \
        if (fn != NULL)                                                                            \
            fn args;                                                                               \
        else                                                                                       \
            snapprof__heap_preload_real_free(p);                                                   \
        if (entered)                                                                               \
            hk_leave();                                                                            \
    }
HK_CXX_DELETE(HK_DELETE_DEF)
