/* GOT patching: the heap hooks for a program that links snapprof rather
 * than preloading libsnapprof-heap.so (heap_got.h), in the manner of
 * async-profiler's native memory mode and Datadog's ddprof. Every loaded
 * module's JUMP_SLOT and GLOB_DAT relocations of the allocation functions
 * are found through dl_iterate_phdr and its dynamic section, and their GOT
 * entries pointed at the hooks below, which call the functions
 * dlsym(RTLD_DEFAULT) gives (those the entries pointed at) and tell the
 * heap sampler (heap_hook_core.h). Full-RELRO pages are made writable for
 * the write and read-only again.
 *
 * x86-64 and aarch64 (RELA relocations); elsewhere install returns
 * -ENOSYS. */
#include "preload_heap/heap_got.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <link.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* The thread's depth counter (heap_hook_core.h) and its countdown to the
 * next check for modules loaded meanwhile, one TLS block. */
typedef struct hg_tls {
    unsigned depth;
    unsigned tick;
} hg_tls_t;
static __thread hg_tls_t hg_tls __attribute__((tls_model("initial-exec")));
#define HK_DEPTH hg_tls.depth

#include "preload_heap/heap_hook_core.h"

#define HG_POLL_EVERY 1024

#if defined(__x86_64__)
#define HG_R_JUMP_SLOT R_X86_64_JUMP_SLOT
#define HG_R_GLOB_DAT R_X86_64_GLOB_DAT
#elif defined(__aarch64__)
#define HG_R_JUMP_SLOT R_AARCH64_JUMP_SLOT
#define HG_R_GLOB_DAT R_AARCH64_GLOB_DAT
#endif

/* ---- The real functions and the hooks ------------------------------------ */

typedef struct hg_real {
    void *(*malloc)(size_t);
    void *(*calloc)(size_t, size_t);
    void *(*realloc)(void *, size_t);
    void *(*reallocarray)(void *, size_t, size_t);
    void (*free)(void *);
    int (*posix_memalign)(void **, size_t, size_t);
    void *(*aligned_alloc)(size_t, size_t);
    void *(*memalign)(size_t, size_t);
    void *(*valloc)(size_t);
    void *(*pvalloc)(size_t);
} hg_real_t;

/* Set before any GOT entry points at a hook that uses them, never cleared. */
static hg_real_t hg_real;

static int hg_installed; /* under hg_lock; read by the hooks' checks */
static void hg_poll(void);

/* In the outermost hook, after an allocation: the sampled ones, and every
 * HG_POLL_EVERY-th of the thread (its first one too), check for modules
 * loaded since the last look. */
static inline __attribute__((always_inline)) void hg_after_alloc(void)
{
    if (HK_UNLIKELY(hg_tls.tick-- == 0))
        hg_poll();
}

static void *hg_malloc(size_t n)
{
    if (!hk_enter())
        return hg_real.malloc(n);
    void *p = hg_real.malloc(n);
    hk_note_alloc(p, n);
    hg_after_alloc();
    hk_leave();
    return p;
}

static void hg_free(void *p)
{
    if (p == NULL)
        return;
    if (!hk_enter()) {
        hg_real.free(p);
        return;
    }
    hk_note_free(p);
    hg_real.free(p);
    hk_leave();
}

static void *hg_calloc(size_t count, size_t size)
{
    if (!hk_enter())
        return hg_real.calloc(count, size);
    void *p = hg_real.calloc(count, size);
    hk_note_alloc(p, count * size); /* no overflow when p is not NULL */
    hg_after_alloc();
    hk_leave();
    return p;
}

static void *hg_realloc(void *old, size_t n)
{
    if (!hk_enter())
        return hg_real.realloc(old, n);
    void *p = hg_real.realloc(old, n);
    hk_note_realloc(old, p, n);
    hg_after_alloc();
    hk_leave();
    return p;
}

static void *hg_reallocarray(void *old, size_t count, size_t size)
{
    if (!hk_enter())
        return hg_real.reallocarray(old, count, size);
    void *p = hg_real.reallocarray(old, count, size);
    size_t n;
    if (!__builtin_mul_overflow(count, size, &n))
        hk_note_realloc(old, p, n);
    hg_after_alloc();
    hk_leave();
    return p;
}

static int hg_posix_memalign(void **out, size_t align, size_t n)
{
    if (!hk_enter())
        return hg_real.posix_memalign(out, align, n);
    int rc = hg_real.posix_memalign(out, align, n);
    if (rc == 0)
        hk_note_alloc(*out, n);
    hg_after_alloc();
    hk_leave();
    return rc;
}

#define HG_ALIGNED(name)                                                                           \
    static void *hg_##name(size_t align, size_t n)                                                 \
    {                                                                                              \
        if (!hk_enter())                                                                           \
            return hg_real.name(align, n);                                                         \
        void *p = hg_real.name(align, n);                                                          \
        hk_note_alloc(p, n);                                                                       \
        hg_after_alloc();                                                                          \
        hk_leave();                                                                                \
        return p;                                                                                  \
    }
HG_ALIGNED(aligned_alloc)
HG_ALIGNED(memalign)

#define HG_PAGE(name)                                                                              \
    static void *hg_##name(size_t n)                                                               \
    {                                                                                              \
        if (!hk_enter())                                                                           \
            return hg_real.name(n);                                                                \
        void *p = hg_real.name(n);                                                                 \
        hk_note_alloc(p, n);                                                                       \
        hg_after_alloc();                                                                          \
        hk_leave();                                                                                \
        return p;                                                                                  \
    }
HG_PAGE(valloc)
HG_PAGE(pvalloc)

/* The C++ operators (mangled names as in heap_preload_cxx.c). This file is
 * built with -fexceptions: a throwing operator new unwinds through the
 * hook, whose cleanup lowers the depth counter. */
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
    static void *hg_##name params                                                                  \
    {                                                                                              \
        void *(*fn)params = (void *(*)params)hg_cxx_real[i];                                       \
        __attribute__((cleanup(hg_unwind))) int entered = hk_enter();                              \
        void *r = fn args;                                                                         \
        if (entered) {                                                                             \
            hk_note_alloc(r, n);                                                                   \
            hg_after_alloc();                                                                      \
        }                                                                                          \
        return r;                                                                                  \
    }
HG_CXX_NEW(HG_NEW_DEF)

#define HG_DELETE_DEF(i, name, params, args)                                                       \
    static void hg_##name params                                                                   \
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

static const hg_target_t *hg_find_target(const char *name)
{
    /* Every name we patch starts with one of these. */
    if (strchr("mcrfpav_", name[0]) == NULL)
        return NULL;
    for (size_t i = 0; i < HG_NTARGETS; i++)
        if (!strcmp(hg_targets[i].name, name))
            return &hg_targets[i];
    return NULL;
}

/* ---- Patching -------------------------------------------------------------- */

/* One GOT entry we wrote: where, what it held, and the module it is in
 * (by load address and program headers, which tell a module from one
 * loaded later at the same address only with the entry's content; see
 * hg_restore). */
typedef struct hg_patch {
    uintptr_t base;
    const void *phdr;
    uintptr_t *slot;
    uintptr_t orig;
    uintptr_t hook;
    int relro; /* the entry is on a page the loader made read-only */
    int live;  /* its module was loaded at the last look */
} hg_patch_t;

#define HG_MAX_PATCHES 8192
#define HG_MAX_MODULES 1024

static pthread_mutex_t hg_lock = PTHREAD_MUTEX_INITIALIZER;
static hg_patch_t hg_patches[HG_MAX_PATCHES];
static size_t hg_npatches;
/* The loader's counts of loads and unloads at the last complete look. */
static unsigned long long hg_seen_adds, hg_seen_subs;

typedef struct hg_module_id {
    uintptr_t base;
    const void *phdr;
} hg_module_id_t;

typedef struct hg_scan {
    int patch;           /* 1: patch; 0: only list the modules */
    int patched;         /* entries written */
    int mprotect_failed; /* modules mprotect refused */
    int incomplete;      /* a module not yet relocated: look again */
    int first;           /* the next callback is the first */
    unsigned long long adds, subs;
    hg_module_id_t modules[HG_MAX_MODULES];
    size_t nmodules;
} hg_scan_t;

static hg_scan_t hg_scan_state; /* under hg_lock */

static long hg_page_size(void)
{
    static long page;
    if (page == 0)
        page = sysconf(_SC_PAGESIZE);
    return page;
}

/* Writes a GOT entry, through a writable mapping of its page if the loader
 * made it read-only (full RELRO). Returns 0, or -1 if mprotect refused. */
static int hg_write(uintptr_t *slot, uintptr_t value, int relro)
{
    if (!relro) {
        __atomic_store_n(slot, value, __ATOMIC_RELEASE);
        return 0;
    }
    uintptr_t page = (uintptr_t)slot & ~(uintptr_t)(hg_page_size() - 1);
    if (mprotect((void *)page, (size_t)hg_page_size(), PROT_READ | PROT_WRITE) != 0)
        return -1;
    __atomic_store_n(slot, value, __ATOMIC_RELEASE);
    mprotect((void *)page, (size_t)hg_page_size(), PROT_READ);
    return 0;
}

static const char *hg_basename(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* Modules never patched: the dynamic loader and the vDSO (no allocation
 * calls through a GOT), the sanitizer runtimes, whose interceptors are the
 * allocator the program's entries point at, and in sanitizer builds libc. */
static int hg_skip_module(const char *name)
{
    static const char *const prefixes[] = {"ld-linux",   "ld64.so",   "ld.so",   "linux-vdso",
                                           "linux-gate", "libasan",   "libtsan", "libubsan",
                                           "liblsan",    "libhwasan", "libmsan"};
    const char *b = hg_basename(name);
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++)
        if (!strncmp(b, prefixes[i], strlen(prefixes[i])))
            return 1;
#if defined(SNAPPROF_SANITIZER_BUILD)
    /* libc allocates through its GOT on threads the sanitizer runtime has
     * not set up yet (pthread_getattr_np, from TSan's own thread start):
     * the sampler, instrumented, cannot run there. */
    if (!strncmp(b, "libc.so", 7))
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

static void hg_patch_relocs(hg_scan_t *st, uintptr_t base, const void *phdr, const ElfW(Rela) * rel,
                            size_t count, const ElfW(Sym) * symtab, const char *strtab,
                            size_t strsz, uintptr_t lo, uintptr_t hi, uintptr_t relro_lo,
                            uintptr_t relro_hi, int *refused)
{
    for (size_t i = 0; i < count; i++) {
        unsigned type = (unsigned)ELF64_R_TYPE(rel[i].r_info);
        if (type != HG_R_JUMP_SLOT && type != HG_R_GLOB_DAT)
            continue;
        const ElfW(Sym) *sym = &symtab[ELF64_R_SYM(rel[i].r_info)];
        if (sym->st_name >= strsz)
            continue;
        const hg_target_t *t = hg_find_target(strtab + sym->st_name);
        if (t == NULL)
            continue;
        uintptr_t real = (uintptr_t)__atomic_load_n(t->real, __ATOMIC_ACQUIRE);
        if (real == 0)
            continue; /* not defined anywhere (a C++ operator in a C process) */
        uintptr_t *slot = (uintptr_t *)(base + rel[i].r_offset);
        uintptr_t cur = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
        if (cur == (uintptr_t)t->hook || cur == 0)
            continue; /* ours already; or a weak reference to nothing */
        if (base != 0 && cur < hi - base) {
            /* A link-time value (an offset in the module): not relocated
             * yet, by another thread's dlopen. */
            st->incomplete = 1;
            continue;
        }
        /* The entry points at the function everyone gets, or (lazy
         * binding) at its module's own PLT for an undefined symbol. Any
         * other target is a binding of the module's own (-Bsymbolic, a
         * local allocator), left alone. */
        if (cur != real && !(sym->st_shndx == SHN_UNDEF && cur >= lo && cur < hi))
            continue;
        if (hg_npatches == HG_MAX_PATCHES)
            return;
        int relro = (uintptr_t)slot >= relro_lo && (uintptr_t)slot < relro_hi;
        if (hg_write(slot, (uintptr_t)t->hook, relro) != 0) {
            *refused = 1;
            continue;
        }
        hg_patches[hg_npatches++] =
            (hg_patch_t){base, phdr, slot, cur, (uintptr_t)t->hook, relro, 1};
        st->patched++;
    }
}

static int hg_scan_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    hg_scan_t *st = data;
    if (st->first) {
        st->first = 0;
        st->adds = info->dlpi_adds;
        st->subs = info->dlpi_subs;
    }
    if (st->nmodules < HG_MAX_MODULES)
        st->modules[st->nmodules++] = (hg_module_id_t){info->dlpi_addr, info->dlpi_phdr};
    if (!st->patch || hg_skip_module(info->dlpi_name ? info->dlpi_name : ""))
        return 0;
#if defined(HG_R_JUMP_SLOT)
    uintptr_t base = info->dlpi_addr;
    const ElfW(Dyn) *dyn = NULL;
    uintptr_t lo = UINTPTR_MAX, hi = 0, relro_lo = 0, relro_hi = 0;
    uintptr_t page = (uintptr_t)hg_page_size();
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_DYNAMIC)
            dyn = (const ElfW(Dyn) *)(base + ph->p_vaddr);
        else if (ph->p_type == PT_LOAD) {
            if (base + ph->p_vaddr < lo)
                lo = base + ph->p_vaddr;
            if (base + ph->p_vaddr + ph->p_memsz > hi)
                hi = base + ph->p_vaddr + ph->p_memsz;
        } else if (ph->p_type == PT_GNU_RELRO) {
            /* The loader protects the whole pages inside it. */
            relro_lo = (base + ph->p_vaddr) & ~(page - 1);
            relro_hi = (base + ph->p_vaddr + ph->p_memsz) & ~(page - 1);
        }
    }
    if (dyn == NULL)
        return 0;
    const ElfW(Sym) *symtab = NULL;
    const char *strtab = NULL;
    size_t strsz = 0, pltrelsz = 0, relasz = 0;
    const ElfW(Rela) *jmprel = NULL, *rela = NULL;
    long pltrel = DT_RELA;
    for (const ElfW(Dyn) *d = dyn; d->d_tag != DT_NULL; d++) {
        switch (d->d_tag) {
        case DT_SYMTAB:
            symtab = (const ElfW(Sym) *)hg_addr(base, d->d_un.d_ptr);
            break;
        case DT_STRTAB:
            strtab = (const char *)hg_addr(base, d->d_un.d_ptr);
            break;
        case DT_STRSZ:
            strsz = d->d_un.d_val;
            break;
        case DT_JMPREL:
            jmprel = (const ElfW(Rela) *)hg_addr(base, d->d_un.d_ptr);
            break;
        case DT_PLTRELSZ:
            pltrelsz = d->d_un.d_val;
            break;
        case DT_PLTREL:
            pltrel = (long)d->d_un.d_val;
            break;
        case DT_RELA:
            rela = (const ElfW(Rela) *)hg_addr(base, d->d_un.d_ptr);
            break;
        case DT_RELASZ:
            relasz = d->d_un.d_val;
            break;
        }
    }
    if (symtab == NULL || strtab == NULL)
        return 0;
    int refused = 0;
    if (jmprel != NULL && pltrel == DT_RELA)
        hg_patch_relocs(st, base, info->dlpi_phdr, jmprel, pltrelsz / sizeof(ElfW(Rela)), symtab,
                        strtab, strsz, lo, hi, relro_lo, relro_hi, &refused);
    if (rela != NULL)
        hg_patch_relocs(st, base, info->dlpi_phdr, rela, relasz / sizeof(ElfW(Rela)), symtab,
                        strtab, strsz, lo, hi, relro_lo, relro_hi, &refused);
    st->mprotect_failed += refused;
#endif
    return 0;
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

/* Marks the patches of modules no longer loaded. Under hg_lock. */
static void hg_mark_live(const hg_scan_t *st)
{
    for (size_t i = 0; i < hg_npatches; i++) {
        hg_patch_t *p = &hg_patches[i];
        if (!p->live)
            continue;
        int found = 0;
        for (size_t m = 0; m < st->nmodules && !found; m++)
            found = st->modules[m].base == p->base && st->modules[m].phdr == p->phdr;
        p->live = found;
    }
}

/* One look at every module; patches what is new. Under hg_lock. */
static int hg_scan_locked(void)
{
    hg_scan_t *st = &hg_scan_state;
    memset(st, 0, sizeof *st);
    st->patch = 1;
    st->first = 1;
    hg_resolve_reals();
    /* dlclose()d modules first: a module loaded at the same address since
     * then must not be taken for them. */
    dl_iterate_phdr(hg_scan_cb, st);
    hg_mark_live(st);
    if (!st->incomplete) {
        __atomic_store_n(&hg_seen_adds, st->adds, __ATOMIC_RELAXED);
        __atomic_store_n(&hg_seen_subs, st->subs, __ATOMIC_RELAXED);
    }
    return st->patched;
}

static int hg_counts_cb(struct dl_phdr_info *info, size_t size, void *data)
{
    unsigned long long *c = data;
    c[0] = info->dlpi_adds;
    c[1] = info->dlpi_subs;
    return 1;
}

/* From a hook (depth raised): a look at the loader's counts of loads and
 * unloads, and a scan if they moved. Never waits for the lock: another
 * thread that holds it is scanning. */
static void hg_poll(void)
{
    hg_tls.tick = HG_POLL_EVERY - 1;
    if (!__atomic_load_n(&hg_installed, __ATOMIC_ACQUIRE))
        return;
    unsigned long long c[2] = {0, 0};
    dl_iterate_phdr(hg_counts_cb, c);
    if (c[0] == __atomic_load_n(&hg_seen_adds, __ATOMIC_RELAXED) &&
        c[1] == __atomic_load_n(&hg_seen_subs, __ATOMIC_RELAXED))
        return;
    if (pthread_mutex_trylock(&hg_lock) != 0)
        return;
    if (__atomic_load_n(&hg_installed, __ATOMIC_RELAXED))
        hg_scan_locked();
    pthread_mutex_unlock(&hg_lock);
}

/* A fork child of a process where another thread held the patcher's lock
 * (scanning) gets the lock back unheld: that thread is not in the child.
 * Its scan may have patched an entry it had not recorded yet, which the
 * child's uninstall then leaves patched. Not taken across fork() (a
 * prepare handler): sanitizer runtimes lock their allocator before the
 * handlers run, and a scanning thread that allocates in their
 * dl_iterate_phdr would never give the lock up. */
static void hg_atfork_child(void)
{
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    memcpy(&hg_lock, &fresh, sizeof fresh);
}

static pthread_once_t hg_atfork_once = PTHREAD_ONCE_INIT;

static void hg_register_atfork(void)
{
    pthread_atfork(NULL, NULL, hg_atfork_child);
}

int snapprof_heap_hooks_install(void)
{
#if !defined(HG_R_JUMP_SLOT)
    return -ENOSYS;
#else
    /* The preload's hooks see every allocation already. */
    if (dlsym(RTLD_DEFAULT, "snapprof__heap_preload_info") != NULL)
        return 0;
    pthread_once(&hg_atfork_once, hg_register_atfork);
    pthread_mutex_lock(&hg_lock);
    hg_resolve_reals();
    if (hg_real.malloc == NULL || hg_real.free == NULL || hg_real.calloc == NULL ||
        hg_real.realloc == NULL) {
        pthread_mutex_unlock(&hg_lock);
        return -ENOSYS;
    }
    __atomic_store_n(&hg_installed, 1, __ATOMIC_RELEASE);
    int n = hg_scan_locked();
    int refused = hg_scan_state.mprotect_failed;
    pthread_mutex_unlock(&hg_lock);
    if (n == 0 && refused > 0)
        return -EPERM;
    return n;
#endif
}

int snapprof_heap_hooks_uninstall(void)
{
    pthread_mutex_lock(&hg_lock);
    __atomic_store_n(&hg_installed, 0, __ATOMIC_RELEASE);
    hg_scan_t *st = &hg_scan_state;
    memset(st, 0, sizeof *st);
    st->first = 1;
    dl_iterate_phdr(hg_scan_cb, st); /* lists the modules loaded now */
    hg_mark_live(st);
    int restored = 0;
    /* Last patched first: an entry patched twice (its module unloaded and
     * loaded again) gets its first value back last. */
    for (size_t i = hg_npatches; i-- > 0;) {
        hg_patch_t *p = &hg_patches[i];
        if (!p->live)
            continue;
        if (__atomic_load_n(p->slot, __ATOMIC_ACQUIRE) != p->hook)
            continue;
        if (hg_write(p->slot, p->orig, p->relro) == 0)
            restored++;
    }
    hg_npatches = 0;
    __atomic_store_n(&hg_seen_adds, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&hg_seen_subs, 0, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&hg_lock);
    return restored;
}
