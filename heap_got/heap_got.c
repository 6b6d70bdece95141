/* GOT patching: the heap hooks for a program linked against libsnapprof
 * that does not preload libsnapprof-heap.so (issue 27, way (b);
 * snapprof_heap_hooks_install() in <snapprof/heap.h>), in the manner of
 * async-profiler's native memory mode and Datadog's ddprof. Every loaded
 * module's JUMP_SLOT and GLOB_DAT relocations of the allocation functions
 * are found through dl_iterate_phdr() and its dynamic section, and their
 * GOT entries pointed at the hooks below, which call the functions
 * dlsym(RTLD_DEFAULT) gives (what the entries pointed at) and share the
 * preload's fast path (preload_heap/heap_hook_core.h). Full-RELRO pages are
 * made writable for the write and given their protection back.
 *
 * Modules loaded later are found by the sampling thread, once a tick
 * (snapprof__heap_tick()), and by each call of install; never from inside
 * an allocation (a fork child of a thread inside dl_iterate_phdr() would
 * inherit the loader's lock held: glibc 2.36 does not reset it).
 *
 * x86-64 and aarch64 (RELA relocations); elsewhere install returns
 * -ENOSYS. */
#include "heap_got/heap_got.h"

#include "common/proc_files.h"
#include "heap_got/heap_got_gate.h"

#include "heap/heap_hook_abi.h"
#include "heap/heap_sampler.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The thread's countdown and depth counter (heap_hook_abi.h): the GOT
 * hooks' own, apart from the preload's and the note functions'. */
static __thread snapprof__heap_hook_count_t hg_count __attribute__((tls_model("initial-exec")));
#define HK_COUNT hg_count
#define HK_DEPTH hg_count.depth
/* The sampler's shared state (its filter, gen and slow path): the
 * library's own, since install patches nothing when the preload's hooks
 * are loaded (their state is the shared one then). Named directly, not
 * through a pointer: one load less in every malloc. */
#define HK_SHARED snapprof__heap_own_hook

#include "preload_heap/heap_hook_core.h"

#include <snapprof/heap.h>

#if defined(__x86_64__)
#define HG_R_JUMP_SLOT R_X86_64_JUMP_SLOT
#define HG_R_GLOB_DAT R_X86_64_GLOB_DAT
#elif defined(__aarch64__)
#define HG_R_JUMP_SLOT R_AARCH64_JUMP_SLOT
#define HG_R_GLOB_DAT R_AARCH64_GLOB_DAT
#endif

/* ------------------------------------------------------------------------ */
/* The real functions and the hooks                                         */
/* ------------------------------------------------------------------------ */

/* Every hook's code in one section, whose bounds the drain is told
 * (snapprof__heap_set_hook_range()): a sampled allocation's frames start at
 * the program's call, not in a hook. */
#define HG_HOOK __attribute__((section("snapprof_got_hooks")))
extern const char __start_snapprof_got_hooks[] __attribute__((visibility("hidden")));
extern const char __stop_snapprof_got_hooks[] __attribute__((visibility("hidden")));

/* Set before any GOT entry points at a hook that uses them, never cleared. */
static hk_real_t hg_real;

/* The countdown did not take this malloc: the sampler's slow path. */
static HG_HOOK __attribute__((noinline)) void *hg_malloc_slow(size_t n)
{
    if (!hk_enter())
        return hg_real.malloc(n);
    void *p = hg_real.malloc(n);
    hk_note_alloc(p, n);
    hk_leave();
    return p;
}

static HG_HOOK void *hg_malloc(size_t n)
{
    /* The common case: the countdown takes n; a tail call. */
    if (HK_LIKELY(hk_take(n)))
        return hg_real.malloc(n);
    return hg_malloc_slow(n);
}

/* A free the filter did not rule out, by the outermost hook only. */
static HG_HOOK __attribute__((noinline)) void hg_free_slow(void *p)
{
    if (p != NULL && HK_DEPTH == 0)
        snapprof_heap_note_free(p);
    hg_real.free(p);
}

static HG_HOOK void hg_free(void *p)
{
    /* free(NULL) looks at bucket 0 like any pointer: no test for it on the
     * common path (the slow one has it). */
    if (HK_UNLIKELY(hk_free_maybe_sampled(p))) {
        hg_free_slow(p);
        return;
    }
    hg_real.free(p);
}

static HG_HOOK void *hg_calloc(size_t count, size_t size)
{
    if (!hk_enter())
        return hg_real.calloc(count, size);
    void *p = hg_real.calloc(count, size);
    hk_note_alloc(p, count * size); /* no overflow when p is not NULL */
    hk_leave();
    return p;
}

static HG_HOOK void *hg_realloc(void *old, size_t n)
{
    if (!hk_enter())
        return hg_real.realloc(old, n);
    void *p = hg_real.realloc(old, n);
    hk_note_realloc(old, p, n);
    hk_leave();
    return p;
}

static HG_HOOK void *hg_reallocarray(void *old, size_t count, size_t size)
{
    if (!hk_enter())
        return hg_real.reallocarray(old, count, size);
    void *p = hg_real.reallocarray(old, count, size);
    size_t n;
    if (!__builtin_mul_overflow(count, size, &n))
        hk_note_realloc(old, p, n);
    hk_leave();
    return p;
}

static HG_HOOK int hg_posix_memalign(void **out, size_t align, size_t n)
{
    if (!hk_enter())
        return hg_real.posix_memalign(out, align, n);
    int rc = hg_real.posix_memalign(out, align, n);
    if (rc == 0)
        hk_note_alloc(*out, n);
    hk_leave();
    return rc;
}

#define HG_ALIGNED(name)                                                                           \
    static HG_HOOK void *hg_##name(size_t align, size_t n)                                         \
    {                                                                                              \
        if (!hk_enter())                                                                           \
            return hg_real.name(align, n);                                                         \
        void *p = hg_real.name(align, n);                                                          \
        hk_note_alloc(p, n);                                                                       \
        hk_leave();                                                                                \
        return p;                                                                                  \
    }
HG_ALIGNED(aligned_alloc)
HG_ALIGNED(memalign)

#define HG_PAGE(name)                                                                              \
    static HG_HOOK void *hg_##name(size_t n)                                                       \
    {                                                                                              \
        if (!hk_enter())                                                                           \
            return hg_real.name(n);                                                                \
        void *p = hg_real.name(n);                                                                 \
        hk_note_alloc(p, n);                                                                       \
        hk_leave();                                                                                \
        return p;                                                                                  \
    }
HG_PAGE(valloc)
HG_PAGE(pvalloc)

/* The C++ operators, by their mangled names (as heap_preload_cxx.c). This
 * file is built with -fexceptions: a throwing operator new unwinds through
 * the hook, whose cleanup lowers the depth counter. */
static void hg_unwind(int *entered)
{
    if (*entered)
        hk_leave();
}

#define HG_CXX_NEW(XX)                                                                             \
    XX(0, _Znwm, (size_t n), (n))                                                                  \
    XX(1, _Znam, (size_t n), (n))                                                                  \
    XX(2, _ZnwmRKSt9nothrow_t, (size_t n, const void *nt), (n, nt))                                \
    XX(3, _ZnamRKSt9nothrow_t, (size_t n, const void *nt), (n, nt))                                \
    XX(4, _ZnwmSt11align_val_t, (size_t n, size_t al), (n, al))                                    \
    XX(5, _ZnamSt11align_val_t, (size_t n, size_t al), (n, al))                                    \
    XX(6, _ZnwmSt11align_val_tRKSt9nothrow_t, (size_t n, size_t al, const void *nt), (n, al, nt))  \
    XX(7, _ZnamSt11align_val_tRKSt9nothrow_t, (size_t n, size_t al, const void *nt), (n, al, nt))

#define HG_CXX_DELETE(XX)                                                                          \
    XX(8, _ZdlPv, (void *p), (p))                                                                  \
    XX(9, _ZdaPv, (void *p), (p))                                                                  \
    XX(10, _ZdlPvm, (void *p, size_t n), (p, n))                                                   \
    XX(11, _ZdaPvm, (void *p, size_t n), (p, n))                                                   \
    XX(12, _ZdlPvSt11align_val_t, (void *p, size_t al), (p, al))                                   \
    XX(13, _ZdaPvSt11align_val_t, (void *p, size_t al), (p, al))                                   \
    XX(14, _ZdlPvmSt11align_val_t, (void *p, size_t n, size_t al), (p, n, al))                     \
    XX(15, _ZdaPvmSt11align_val_t, (void *p, size_t n, size_t al), (p, n, al))                     \
    XX(16, _ZdlPvRKSt9nothrow_t, (void *p, const void *nt), (p, nt))                               \
    XX(17, _ZdaPvRKSt9nothrow_t, (void *p, const void *nt), (p, nt))                               \
    XX(18, _ZdlPvSt11align_val_tRKSt9nothrow_t, (void *p, size_t al, const void *nt), (p, al, nt)) \
    XX(19, _ZdaPvSt11align_val_tRKSt9nothrow_t, (void *p, size_t al, const void *nt), (p, al, nt))

#define HG_NCXX 20
/* Written under hg_lock before the entries pointing at the hook are, never
 * cleared. */
static void *hg_cxx_real[HG_NCXX];

#define HG_NEW_DEF(i, name, params, args)                                                          \
    static HG_HOOK void *hg_##name params                                                          \
    {                                                                                              \
        void *(*fn)params = (void *(*)params)hg_cxx_real[i];                                       \
        __attribute__((cleanup(hg_unwind))) int entered = hk_enter();                              \
        void *r = fn args;                                                                         \
        if (entered)                                                                               \
            hk_note_alloc(r, n);                                                                   \
        return r;                                                                                  \
    }
HG_CXX_NEW(HG_NEW_DEF)

#define HG_DELETE_DEF(i, name, params, args)                                                       \
    static HG_HOOK void hg_##name params                                                           \
    {                                                                                              \
        void(*fn) params = (void(*) params)hg_cxx_real[i];                                         \
        if (p == NULL)                                                                             \
            return;                                                                                \
        int entered = hk_enter();                                                                  \
        if (entered)                                                                               \
            hk_note_free(p);                                                                       \
        fn args;                                                                                   \
        if (entered)                                                                               \
            hk_leave();                                                                            \
    }
HG_CXX_DELETE(HG_DELETE_DEF)

/* What is patched: the symbol, our hook, where the real function is kept. */
typedef struct hg_target {
    const char *name;
    void *hook;
    void **real;
} hg_target_t;

#define HG_C_TARGET(name) {#name, (void *)hg_##name, (void **)&hg_real.name},
#define HG_CXX_TARGET(i, name, params, args) {#name, (void *)hg_##name, &hg_cxx_real[i]},
static const hg_target_t hg_targets[] = {
    HG_C_TARGET(malloc) HG_C_TARGET(calloc) HG_C_TARGET(realloc) HG_C_TARGET(reallocarray)
        HG_C_TARGET(free) HG_C_TARGET(posix_memalign) HG_C_TARGET(aligned_alloc)
            HG_C_TARGET(memalign) HG_C_TARGET(valloc) HG_C_TARGET(pvalloc) HG_CXX_NEW(HG_CXX_TARGET)
                HG_CXX_DELETE(HG_CXX_TARGET)};
#define HG_NTARGETS (sizeof hg_targets / sizeof hg_targets[0])

static int hg_streq(const char *a, const char *b)
{
    while (*a != '\0' && *a == *b) {
        a++;
        b++;
    }
    return *a == *b;
}

static const hg_target_t *hg_find_target(const char *name)
{
    /* Every name we patch starts with one of these. */
    char c = name[0];
    if (c != 'm' && c != 'c' && c != 'r' && c != 'f' && c != 'p' && c != 'a' && c != 'v' &&
        c != '_')
        return NULL;
    for (size_t i = 0; i < HG_NTARGETS; i++)
        if (hg_targets[i].name[0] == c && hg_streq(hg_targets[i].name, name))
            return &hg_targets[i];
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* State                                                                    */
/* ------------------------------------------------------------------------ */

/* A module we patched: by load address and program headers (which tell it
 * from one loaded later at the same address only together with the
 * entry's content; see hg_uninstall). */
typedef struct hg_module {
    uintptr_t base;
    const void *phdr;
    char name[128]; /* its path, cut */
    int live;       /* loaded at the last look */
} hg_module_t;

/* One GOT entry we wrote: where, what it held, its module. */
typedef struct hg_patch {
    uintptr_t *slot;
    uintptr_t orig;
    uintptr_t hook;
    uint32_t module;
    int relro; /* on a page the loader made read-only */
} hg_patch_t;

#define HG_MAX_PATCHES 8192
#define HG_MAX_MODULES 1024

/* hg_lock: install, uninstall and the tick's scan; taken before the
 * loader's lock (dl_iterate_phdr), never inside it. */
static pthread_mutex_t hg_lock = PTHREAD_MUTEX_INITIALIZER;
static hg_patch_t hg_patches[HG_MAX_PATCHES];
static size_t hg_npatches;
static hg_module_t hg_modules[HG_MAX_MODULES];
static size_t hg_nmodules;
static int hg_installed; /* under hg_lock; read by the tick */
/* The loader's counts of loads and unloads at the last complete look. */
static unsigned long long hg_seen_adds, hg_seen_subs;
static snapprof_heap_hooks_stats_t hg_stats; /* counters, under hg_lock */

/* One look at every loaded module (hg_scan_cb). */
typedef struct hg_scan {
    int patch;      /* 1: patch; 0: only mark what is loaded */
    int patched;    /* entries written */
    int incomplete; /* a module not yet relocated: look again */
    int first;      /* the next callback is the first */
    unsigned long long adds, subs;
} hg_scan_t;

/* ------------------------------------------------------------------------ */
/* Across fork(): the loader's gate (heap_got_gate.c) and our own lock      */
/* ------------------------------------------------------------------------ */

#define hg_gate_lock snapprof__heap_got_gate_lock
#define hg_gate_trylock snapprof__heap_got_gate_trylock
#define hg_gate_unlock snapprof__heap_got_gate_unlock

/* The child has one thread: hg_lock comes back unheld (an entry the
 * parent's tick wrote and had not recorded yet stays patched in the child
 * at uninstall). */
static void hg_fork_child(void)
{
    snapprof__heap_got_gate_fork_child();
    pthread_mutex_init(&hg_lock, NULL);
}

static pthread_once_t hg_atfork_once = PTHREAD_ONCE_INIT;

static void hg_register_atfork(void)
{
    pthread_atfork(snapprof__heap_got_gate_fork_prepare, snapprof__heap_got_gate_fork_parent,
                   hg_fork_child);
}

/* ------------------------------------------------------------------------ */
/* Writing an entry                                                         */
/* ------------------------------------------------------------------------ */

static uintptr_t hg_page_size(void)
{
    static uintptr_t page;
    if (page == 0) {
        long ps = sysconf(_SC_PAGESIZE);
        page = ps > 0 ? (uintptr_t)ps : 4096;
    }
    return page;
}

/* The protection of the page at addr, from /proc/self/maps (common/'s
 * reader, its buffer static: this runs inside a dl_iterate_phdr()
 * callback, under hg_lock); -1 if not found. A module that another thread
 * is still relocating has its RELRO pages writable: they must stay so, or
 * the loader faults on its next write there. */
static int hg_page_prot(uintptr_t addr)
{
    static snapprof__proc_maps_t it;
    if (snapprof__proc_maps_open(&it) != 0)
        return -1;
    int prot = -1;
    snapprof__proc_map_t m;
    while (prot < 0 && snapprof__proc_maps_next(&it, &m) == 1)
        if (addr >= m.start && addr < m.end)
            prot = (m.perms[0] == 'r' ? PROT_READ : 0) | (m.perms[1] == 'w' ? PROT_WRITE : 0) |
                   (m.perms[2] == 'x' ? PROT_EXEC : 0);
    snapprof__proc_maps_close(&it);
    return prot;
}

/* Writes a GOT entry; one on a RELRO page through mprotect, with the page's
 * protection put back as it was. Returns 0, or -1 if mprotect refused (a
 * seccomp filter, an LSM): counted, the entry left alone. */
static int hg_write(uintptr_t *slot, uintptr_t value, int relro)
{
    if (!relro) {
        __atomic_store_n(slot, value, __ATOMIC_RELEASE);
        return 0;
    }
    uintptr_t page = (uintptr_t)slot & ~(hg_page_size() - 1);
    int prot = hg_page_prot(page);
    if (prot < 0)
        prot = PROT_READ;
    if (prot & PROT_WRITE) {
        __atomic_store_n(slot, value, __ATOMIC_RELEASE);
        return 0;
    }
    if (mprotect((void *)page, hg_page_size(), prot | PROT_WRITE) != 0)
        return -1;
    __atomic_store_n(slot, value, __ATOMIC_RELEASE);
    mprotect((void *)page, hg_page_size(), prot);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* The scan                                                                 */
/* ------------------------------------------------------------------------ */

/* String helpers of our own: the dl_iterate_phdr() callback reads module
 * names the loader wrote under its own lock, which a sanitizer's string
 * interceptors cannot see (TSan reported a race on strrchr of a name
 * strdup()ed by another thread's dlopen()); this file is not instrumented,
 * so plain loops are not checked. */
static const char *hg_basename(const char *path)
{
    const char *b = path;
    for (const char *s = path; *s != '\0'; s++)
        if (*s == '/')
            b = s + 1;
    return b;
}

static int hg_has_prefix(const char *s, const char *prefix)
{
    while (*prefix != '\0')
        if (*s++ != *prefix++)
            return 0;
    return 1;
}

/* Modules never patched: our own libraries (their allocations are ours, and
 * libsnapprof-heap.so's hooks would be hooked), the dynamic loader and the
 * vDSO (no allocation through a GOT), the sanitizer runtimes (their
 * interceptors are the allocator the entries point at), and in sanitizer
 * builds libc (below). The program's own libc is patched otherwise: its
 * own allocations (strdup, fopen, getpwnam's buffers) are the program's,
 * as the preload sees them. */
static int hg_skip_module(const char *name)
{
    static const char *const prefixes[] = {"libsnapprof", "ld-linux",   "ld64.so",   "ld.so",
                                           "linux-vdso",  "linux-gate", "libasan",   "libtsan",
                                           "libubsan",    "liblsan",    "libhwasan", "libmsan"};
    const char *b = hg_basename(name);
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++)
        if (hg_has_prefix(b, prefixes[i]))
            return 1;
#if defined(SNAPPROF_SANITIZER_BUILD)
    /* libc allocates through its GOT on threads the sanitizer runtime has
     * not set up yet (pthread_getattr_np, from TSan's own thread start):
     * the sampler, instrumented, cannot run there. */
    if (hg_has_prefix(b, "libc.so"))
        return 1;
#endif
    return 0;
}

static uintptr_t hg_addr(uintptr_t base, uintptr_t v)
{
    /* The loader rewrites most d_ptr values to run-time addresses; the
     * vDSO's and some loaders' are left as link-time offsets. */
    return v < base ? v + base : v;
}

/* The index of the module (base, phdr) in hg_modules, added if new;
 * UINT32_MAX when the table is full. */
static uint32_t hg_module_index(uintptr_t base, const void *phdr, const char *name)
{
    for (size_t i = 0; i < hg_nmodules; i++)
        if (hg_modules[i].live && hg_modules[i].base == base && hg_modules[i].phdr == phdr)
            return (uint32_t)i;
    if (hg_nmodules == HG_MAX_MODULES)
        return UINT32_MAX;
    hg_module_t *m = &hg_modules[hg_nmodules];
    m->base = base;
    m->phdr = phdr;
    m->live = 1;
    size_t k = 0;
    for (; k + 1 < sizeof m->name && name[k] != '\0'; k++)
        m->name[k] = name[k];
    m->name[k] = '\0';
    return (uint32_t)hg_nmodules++;
}

typedef struct hg_module_view {
    uintptr_t base, lo, hi, relro_lo, relro_hi;
    const void *phdr;
    const char *name;
    const ElfW(Sym) * symtab;
    const char *strtab;
    size_t strsz;
    uint32_t index; /* in hg_modules once an entry was patched */
} hg_module_view_t;

static void hg_patch_relocs(hg_scan_t *st, hg_module_view_t *m, const ElfW(Rela) * rel,
                            size_t count)
{
    for (size_t i = 0; i < count; i++) {
        unsigned type = (unsigned)ELF64_R_TYPE(rel[i].r_info);
        if (type != HG_R_JUMP_SLOT && type != HG_R_GLOB_DAT)
            continue;
        const ElfW(Sym) *sym = &m->symtab[ELF64_R_SYM(rel[i].r_info)];
        if (sym->st_name >= m->strsz)
            continue;
        const hg_target_t *t = hg_find_target(m->strtab + sym->st_name);
        if (t == NULL)
            continue;
        uintptr_t *slot = (uintptr_t *)(m->base + rel[i].r_offset);
        uintptr_t cur = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
        uintptr_t real = (uintptr_t)__atomic_load_n(t->real, __ATOMIC_ACQUIRE);
        if (real == 0 && cur != 0 && cur != (uintptr_t)t->hook && (cur < m->lo || cur >= m->hi) &&
            !(m->base != 0 && cur < m->hi - m->base)) {
            /* Not known at install (a C++ runtime dlopen()ed since): what
             * the loader bound this entry to, outside the module, is the
             * function (the tick calls no dlsym(), which waits for a
             * dlopen() in progress). */
            __atomic_store_n(t->real, (void *)cur, __ATOMIC_RELEASE);
            real = cur;
        }
        if (real == 0)
            continue; /* not defined anywhere (a C++ operator in a C process) */
        if (cur == (uintptr_t)t->hook)
            continue; /* ours already */
        if (cur == 0) {
            /* A weak reference to nothing; or, for a strong one, an entry
             * another thread's dlopen has not relocated yet. */
            if (ELF64_ST_BIND(sym->st_info) != STB_WEAK)
                st->incomplete = 1;
            continue;
        }
        if (m->base != 0 && cur < m->hi - m->base) {
            /* A link-time value (an offset in the module): not relocated
             * yet. */
            st->incomplete = 1;
            continue;
        }
        /* The entry points at the function everyone gets, or (lazy
         * binding) at its module's own PLT for an undefined symbol. Any
         * other target is a binding of the module's own (-Bsymbolic, an
         * allocator of its own, a sanitizer's): left alone. */
        if (cur != real && !(sym->st_shndx == SHN_UNDEF && cur >= m->lo && cur < m->hi)) {
            hg_stats.entries_foreign++;
            continue;
        }
        if (hg_npatches == HG_MAX_PATCHES) {
            hg_stats.entries_lost++;
            return;
        }
        if (m->index == UINT32_MAX) {
            m->index = hg_module_index(m->base, m->phdr, m->name);
            if (m->index == UINT32_MAX) {
                hg_stats.entries_lost++;
                return;
            }
        }
        int relro = (uintptr_t)slot >= m->relro_lo && (uintptr_t)slot < m->relro_hi;
        if (hg_write(slot, (uintptr_t)t->hook, relro) != 0) {
            hg_stats.mprotect_failed++;
            continue;
        }
        hg_patches[hg_npatches++] = (hg_patch_t){slot, cur, (uintptr_t)t->hook, m->index, relro};
        st->patched++;
    }
}

/* Patches one module. Runs under the loader's lock (dl_iterate_phdr): the
 * module cannot be unloaded meanwhile; only system calls and our own
 * tables here, no allocation and no lock. */
static void hg_patch_module(hg_scan_t *st, struct dl_phdr_info *info, const char *name)
{
#if defined(HG_R_JUMP_SLOT)
    hg_module_view_t m = {.base = info->dlpi_addr,
                          .lo = UINTPTR_MAX,
                          .phdr = info->dlpi_phdr,
                          .name = name,
                          .index = UINT32_MAX};
    const ElfW(Dyn) *dyn = NULL;
    uintptr_t page = hg_page_size();
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t start = m.base + ph->p_vaddr;
        if (ph->p_type == PT_DYNAMIC) {
            dyn = (const ElfW(Dyn) *)start;
        } else if (ph->p_type == PT_LOAD) {
            if (start < m.lo)
                m.lo = start;
            if (start + ph->p_memsz > m.hi)
                m.hi = start + ph->p_memsz;
        } else if (ph->p_type == PT_GNU_RELRO) {
            /* The loader protects the whole pages inside it. */
            m.relro_lo = start & ~(page - 1);
            m.relro_hi = (start + ph->p_memsz) & ~(page - 1);
        }
    }
    if (dyn == NULL)
        return;
    size_t pltrelsz = 0, relasz = 0;
    const ElfW(Rela) *jmprel = NULL, *rela = NULL;
    long pltrel = DT_RELA;
    for (const ElfW(Dyn) *d = dyn; d->d_tag != DT_NULL; d++) {
        switch (d->d_tag) {
        case DT_SYMTAB:
            m.symtab = (const ElfW(Sym) *)hg_addr(m.base, d->d_un.d_ptr);
            break;
        case DT_STRTAB:
            m.strtab = (const char *)hg_addr(m.base, d->d_un.d_ptr);
            break;
        case DT_STRSZ:
            m.strsz = d->d_un.d_val;
            break;
        case DT_JMPREL:
            jmprel = (const ElfW(Rela) *)hg_addr(m.base, d->d_un.d_ptr);
            break;
        case DT_PLTRELSZ:
            pltrelsz = d->d_un.d_val;
            break;
        case DT_PLTREL:
            pltrel = (long)d->d_un.d_val;
            break;
        case DT_RELA:
            rela = (const ElfW(Rela) *)hg_addr(m.base, d->d_un.d_ptr);
            break;
        case DT_RELASZ:
            relasz = d->d_un.d_val;
            break;
        }
    }
    if (m.symtab == NULL || m.strtab == NULL)
        return;
    if (jmprel != NULL && pltrel == DT_RELA)
        hg_patch_relocs(st, &m, jmprel, pltrelsz / sizeof(ElfW(Rela)));
    if (rela != NULL)
        hg_patch_relocs(st, &m, rela, relasz / sizeof(ElfW(Rela)));
#else
    (void)st;
    (void)info;
    (void)name;
#endif
}

/* Marks the module (base, phdr) as loaded now. */
static void hg_mark_loaded(uintptr_t base, const void *phdr)
{
    for (size_t i = 0; i < hg_nmodules; i++)
        if (hg_modules[i].base == base && hg_modules[i].phdr == phdr && hg_modules[i].live == 2)
            hg_modules[i].live = 1;
}

static int hg_scan_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    hg_scan_t *st = data;
    if (st->first) {
        st->first = 0;
        st->adds = info->dlpi_adds;
        st->subs = info->dlpi_subs;
    }
    hg_mark_loaded(info->dlpi_addr, info->dlpi_phdr);
    const char *name = info->dlpi_name ? info->dlpi_name : "";
    if (st->patch && !hg_skip_module(name))
        hg_patch_module(st, info, name);
    return 0;
}

/* One look at every module; with patch set, patches what is new. First
 * every known module is taken as gone (live 2) and marked back by the
 * callbacks: a module dlclose()d since is forgotten before a module loaded
 * at its address could be taken for it. Under hg_lock and hg_gate.
 * Returns the entries patched. */
static int hg_scan_locked(int patch)
{
    hg_scan_t st = {.patch = patch, .first = 1};
    for (size_t i = 0; i < hg_nmodules; i++)
        if (hg_modules[i].live)
            hg_modules[i].live = 2;
    dl_iterate_phdr(hg_scan_cb, &st);
    for (size_t i = 0; i < hg_nmodules; i++)
        if (hg_modules[i].live == 2)
            hg_modules[i].live = 0;
    if (!st.incomplete) {
        __atomic_store_n(&hg_seen_adds, st.adds, __ATOMIC_RELAXED);
        __atomic_store_n(&hg_seen_subs, st.subs, __ATOMIC_RELAXED);
    }
    hg_stats.scans++;
    return st.patched;
}

static void hg_resolve_reals(void)
{
    for (size_t i = 0; i < HG_NTARGETS; i++) {
        if (__atomic_load_n(hg_targets[i].real, __ATOMIC_ACQUIRE) != NULL)
            continue;
        void *f = dlsym(RTLD_DEFAULT, hg_targets[i].name);
        if (f != NULL)
            __atomic_store_n(hg_targets[i].real, f, __ATOMIC_RELEASE);
    }
}

static int hg_counts_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    unsigned long long *c = data;
    c[0] = info->dlpi_adds;
    c[1] = info->dlpi_subs;
    return 1;
}

/* The sampling thread's tick (snapprof__heap_tick()): a look at the
 * loader's counts of loads and unloads, and a scan when they moved. Never
 * waits: a fork on its way (the gate) or an install or uninstall in
 * progress (hg_lock) makes it try again next tick. The sampling thread's
 * own allocations (dlsym's) are never sampled. */
static void hg_tick(void)
{
    if (!__atomic_load_n(&hg_installed, __ATOMIC_ACQUIRE))
        return;
    if (pthread_mutex_trylock(&hg_lock) != 0)
        return;
    if (hg_installed && hg_gate_trylock() == 0) {
        unsigned long long c[2] = {0, 0};
        dl_iterate_phdr(hg_counts_cb, c);
        if (c[0] != hg_seen_adds || c[1] != hg_seen_subs)
            hg_scan_locked(1);
        hg_gate_unlock();
    }
    pthread_mutex_unlock(&hg_lock);
}

/* ------------------------------------------------------------------------ */
/* The API                                                                  */
/* ------------------------------------------------------------------------ */

SNAPPROF_API int snapprof_heap_hooks_install(void)
{
#if !defined(HG_R_JUMP_SLOT)
    return -ENOSYS;
#else
    /* The preload's hooks see every allocation already: both would note
     * each one. The shared state is the library's own (HK_SHARED) whenever
     * they are not loaded; the second test says what the hooks rely on. */
    if (snapprof__heap_hooks_preloaded() ||
        snapprof__heap_hook_shared() != &snapprof__heap_own_hook)
        return -EEXIST;
    pthread_once(&hg_atfork_once, hg_register_atfork);
    pthread_mutex_lock(&hg_lock);
    hg_resolve_reals();
    if (hg_real.malloc == NULL || hg_real.free == NULL || hg_real.calloc == NULL ||
        hg_real.realloc == NULL) {
        pthread_mutex_unlock(&hg_lock);
        return -ENOSYS;
    }
    snapprof__heap_set_hook_range((uintptr_t)__start_snapprof_got_hooks,
                                  (uintptr_t)__stop_snapprof_got_hooks);
    uint64_t refused = hg_stats.mprotect_failed;
    /* Waits for a fork in progress (its prepare handler holds the gate). */
    hg_gate_lock();
    int n = hg_scan_locked(1);
    hg_gate_unlock();
    refused = hg_stats.mprotect_failed - refused;
    if (!hg_installed) {
        __atomic_store_n(&hg_installed, 1, __ATOMIC_RELEASE);
        snapprof__heap_set_tick(hg_tick);
    }
    int any = 0;
    for (size_t i = 0; i < hg_npatches && !any; i++)
        any = hg_modules[hg_patches[i].module].live != 0;
    pthread_mutex_unlock(&hg_lock);
    if (!any && refused > 0)
        return -EPERM;
    return n;
#endif
}

SNAPPROF_API int snapprof_heap_hooks_uninstall(void)
{
    pthread_mutex_lock(&hg_lock);
    if (!hg_installed) {
        pthread_mutex_unlock(&hg_lock);
        return 0;
    }
    __atomic_store_n(&hg_installed, 0, __ATOMIC_RELEASE);
    snapprof__heap_set_tick(NULL);
    /* Which modules are loaded now, and the writes, under the loader's
     * lock: a module cannot be unloaded between the look and the write.
     * A dlclose()d module's pages are gone or another module's: never
     * written. Last patched first: an entry patched twice (its module
     * unloaded and loaded again) gets its first value back last. */
    hg_gate_lock();
    hg_scan_t st = {.first = 1};
    for (size_t i = 0; i < hg_nmodules; i++)
        if (hg_modules[i].live)
            hg_modules[i].live = 2;
    dl_iterate_phdr(hg_scan_cb, &st);
    for (size_t i = 0; i < hg_nmodules; i++)
        if (hg_modules[i].live == 2)
            hg_modules[i].live = 0;
    int restored = 0;
    for (size_t i = hg_npatches; i-- > 0;) {
        hg_patch_t *p = &hg_patches[i];
        if (!hg_modules[p->module].live)
            continue;
        if (__atomic_load_n(p->slot, __ATOMIC_ACQUIRE) != p->hook)
            continue;
        if (hg_write(p->slot, p->orig, p->relro) == 0)
            restored++;
        else
            hg_stats.mprotect_failed++;
    }
    hg_gate_unlock();
    hg_npatches = 0;
    hg_nmodules = 0;
    hg_seen_adds = hg_seen_subs = 0;
    pthread_mutex_unlock(&hg_lock);
    return restored;
}

SNAPPROF_API int snapprof_heap_hooks_get_stats(snapprof_heap_hooks_stats_t *out)
{
    if (out == NULL || out->size < sizeof(size_t))
        return -EINVAL;
    size_t size = out->size < sizeof *out ? out->size : sizeof *out;
    snapprof_heap_hooks_stats_t s;
    pthread_mutex_lock(&hg_lock);
    s = hg_stats;
    s.installed = hg_installed;
    s.preloaded = snapprof__heap_hooks_preloaded();
    s.entries = 0;
    s.modules = 0;
    for (size_t i = 0; i < hg_npatches; i++)
        if (hg_modules[hg_patches[i].module].live)
            s.entries++;
    for (size_t m = 0; m < hg_nmodules; m++) {
        if (!hg_modules[m].live)
            continue;
        for (size_t i = 0; i < hg_npatches; i++)
            if (hg_patches[i].module == m) {
                s.modules++;
                break;
            }
    }
    pthread_mutex_unlock(&hg_lock);
    s.size = size;
    memcpy(out, &s, size);
    return 0;
}

int snapprof__heap_got_module_entries(const char *basename_prefix)
{
    int n = 0;
    pthread_mutex_lock(&hg_lock);
    for (size_t i = 0; i < hg_npatches; i++) {
        const hg_module_t *m = &hg_modules[hg_patches[i].module];
        if (m->live && hg_has_prefix(hg_basename(m->name), basename_prefix))
            n++;
    }
    pthread_mutex_unlock(&hg_lock);
    return n;
}
