/* Symbols for the module cache: function names from .symtab and .dynsym
 * through libelf, file:line and inline frames from DWARF (symbols_dwarf.c),
 * C++ names demangled; loaded once per (path, build-id), kept for the life
 * of the process, and every answer cached per address.
 *
 * NOT async-signal-safe: it opens files, allocates and takes g_sym_lock.
 * g_sym_lock is never held while calling into module_table.c, so the
 * two locks are never nested. */
#include "common/arena.h"
#include "common/array.h"
#include "common/hash.h"
#include "module_cache/module_cache.h"
#include "module_cache/symbols_dwarf.h"

#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <link.h>
#include <libelf.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

/* One function: [value, end) in the ELF file's virtual addresses. */
typedef struct sym {
    uint64_t value, end;
    const char *name; /* in g_sym_arena */
} sym_t;

/* One address's answer, as handed out: syms[0..n), innermost first, with
 * start as an ELF virtual address (0 if unknown) since one table may serve
 * the same file loaded at different addresses. */
typedef struct cached {
    uint64_t vaddr;
    snapprof_symbol_t *syms; /* in g_sym_arena; NULL marks an empty slot */
    uint32_t n;
} cached_t;

/* The functions of one ELF object, sorted by value. count == 0 when the
 * file could not be read or is not the object the module describes. */
typedef struct symtab {
    struct symtab *next; /* hash chain */
    const char *path, *build_id;
    int is_main;
    sym_t *syms;
    size_t count;
    snapprof__dwarf_t *dwarf; /* NULL without debug information */
    Elf *keep;                /* the object's ELF when its DWARF is its own */
    cached_t *cache;          /* open addressing by vaddr; power-of-two capacity */
    size_t cache_cap, cache_n;
} symtab_t;

/* A symbol while the table is built: name points into the open ELF. */
typedef struct raw_sym {
    uint64_t value, size, section_end;
    const char *name; /* not NUL-terminated at name_len: may go on with "@VERSION" */
    size_t name_len;
    unsigned rank; /* lower is the better name for an address */
} raw_sym_t;

typedef struct raw_vec {
    raw_sym_t *v;
    size_t n, cap;
} raw_vec_t;

#define SYMTAB_BUCKETS 256

static pthread_mutex_t g_sym_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t g_sym_once = PTHREAD_ONCE_INIT;
static int g_elf_ok; /* elf_version() accepted our version */
static snapprof__arena_t g_sym_arena;
static symtab_t *g_buckets[SYMTAB_BUCKETS];

static atomic_uint g_fork_resets;

unsigned snapprof__symbols_fork_resets(void)
{
    return atomic_load(&g_fork_resets);
}

static void sym_fork_child(void);

static void sym_init_once(void)
{
    g_elf_ok = elf_version(EV_CURRENT) != EV_NONE;
    pthread_atfork(NULL, NULL, sym_fork_child);
}

/* FNV-1a over path, a 0xff separator and build_id, from the module
 * cache's basis (SNAPPROF_MODULE_HASH_BASIS). */
static uint64_t hash_key(const char *path, const char *build_id, int is_main)
{
    uint64_t h = snapprof__fnv1a64(SNAPPROF_MODULE_HASH_BASIS, path);
    h = (h ^ 0xff) * SNAPPROF_FNV1A64_PRIME;
    h = snapprof__fnv1a64(h, build_id);
    return h ^ (uint64_t)is_main;
}

/* Ranks aliases (several names for one address): global or weak before
 * local, .symtab before .dynsym, then the name with fewer leading
 * underscores, then the shorter one. Global and weak rank alike because
 * libraries often export the public name as the weak alias of an internal
 * strong one (glibc's getpid of __getpid, sanitizers' qsort of
 * __interceptor_qsort), and the public name is the one people know. */
static unsigned rank_of(unsigned char bind, int from_dynsym, const char *name)
{
    unsigned b = bind == STB_GLOBAL || bind == STB_WEAK ? 0 : 1;
    unsigned underscores = 0;
    while (name[underscores] == '_' && underscores < 7)
        underscores++;
    return (b << 4) | ((unsigned)from_dynsym << 3) | underscores;
}

static int raw_cmp(const void *a, const void *b)
{
    const raw_sym_t *x = a, *y = b;
    if (x->value != y->value)
        return x->value < y->value ? -1 : 1;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    if (x->name_len != y->name_len)
        return x->name_len < y->name_len ? -1 : 1;
    return memcmp(x->name, y->name, x->name_len);
}

/* Appends the functions of every SHT_SYMTAB and SHT_DYNSYM section. */
static int collect_syms(Elf *elf, raw_vec_t *rv)
{
    size_t shnum = 0;
    if (elf_getshdrnum(elf, &shnum) != 0)
        return 0;
    Elf_Scn *scn = NULL;
    while ((scn = elf_nextscn(elf, scn)) != NULL) {
        GElf_Shdr sh;
        if (gelf_getshdr(scn, &sh) == NULL)
            continue;
        if (sh.sh_type != SHT_SYMTAB && sh.sh_type != SHT_DYNSYM)
            continue;
        if (sh.sh_entsize == 0)
            continue;
        Elf_Data *data = elf_getdata(scn, NULL);
        if (data == NULL)
            continue;
        int from_dynsym = sh.sh_type == SHT_DYNSYM;
        size_t n = sh.sh_size / sh.sh_entsize;
        for (size_t i = 0; i < n; i++) {
            GElf_Sym s;
            if (gelf_getsym(data, (int)i, &s) == NULL)
                break;
            unsigned char type = GELF_ST_TYPE(s.st_info);
            if (type != STT_FUNC && type != STT_GNU_IFUNC)
                continue;
            if (s.st_value == 0 || s.st_shndx == SHN_UNDEF)
                continue;
            const char *name = elf_strptr(elf, sh.sh_link, s.st_name);
            if (name == NULL || name[0] == '\0')
                continue;
            /* A linked object's .symtab names versioned definitions
             * "clock_gettime@@GLIBC_2.17"; the name is what precedes the
             * version, as .dynsym (which keeps versions apart) has it. */
            size_t name_len = strcspn(name, "@");
            if (name_len == 0)
                continue;
            /* A symbol without a size reaches up to the next one, but never
             * past the end of its section. */
            uint64_t section_end = UINT64_MAX;
            if (s.st_shndx < SHN_LORESERVE && s.st_shndx < shnum) {
                GElf_Shdr ss;
                Elf_Scn *sscn = elf_getscn(elf, s.st_shndx);
                if (sscn != NULL && gelf_getshdr(sscn, &ss) != NULL)
                    section_end = ss.sh_addr + ss.sh_size;
            }
            raw_sym_t *v = snapprof__array_room(rv->v, &rv->cap, rv->n, sizeof *v, 1024);
            if (v == NULL)
                return -ENOMEM;
            rv->v = v;
            rv->v[rv->n++] = (raw_sym_t){
                .value = s.st_value,
                .size = s.st_size,
                .section_end = section_end,
                .name = name,
                .name_len = name_len,
                .rank = rank_of(GELF_ST_BIND(s.st_info), from_dynsym, name),
            };
        }
    }
    return 0;
}

/* Whether elf is the object t describes: an ELF file whose build-id, when
 * both have one, is t's. */
static int is_expected_object(const symtab_t *t, Elf *elf)
{
    if (elf_kind(elf) != ELF_K_ELF)
        return 0;
    if (t->build_id[0] != '\0') {
        char hex[2 * 64 + 1];
        snapprof__elf_build_id(elf, hex, sizeof hex);
        if (hex[0] != '\0' && strcmp(hex, t->build_id) != 0)
            return 0; /* replaced on disk since it was loaded */
    }
    return 1;
}

/* Builds t's sorted, deduplicated array from the ELF and, when there is
 * one, its separate debug file (whose .symtab names the local functions a
 * stripped object lost). Returns 0 or -ENOMEM. */
static int build_table(symtab_t *t, Elf *elf, Elf *debug_elf)
{
    raw_vec_t rv = {0};
    int err = collect_syms(elf, &rv);
    if (err == 0 && debug_elf != NULL)
        err = collect_syms(debug_elf, &rv);
    if (err != 0 || rv.n == 0) {
        free(rv.v);
        return err;
    }
    qsort(rv.v, rv.n, sizeof *rv.v, raw_cmp);
    size_t ndistinct = 0;
    for (size_t i = 0; i < rv.n; i++)
        ndistinct += i == 0 || rv.v[i].value != rv.v[i - 1].value;
    sym_t *syms = snapprof__arena_alloc(&g_sym_arena, ndistinct * sizeof *syms, _Alignof(sym_t));
    if (syms == NULL) {
        free(rv.v);
        return -ENOMEM;
    }
    size_t n = 0;
    for (size_t i = 0; i < rv.n;) {
        /* rv.v[i] is the best name for its address; aliases follow it. */
        size_t j = i;
        uint64_t size = 0, section_end = UINT64_MAX;
        for (; j < rv.n && rv.v[j].value == rv.v[i].value; j++) {
            if (rv.v[j].size > size)
                size = rv.v[j].size;
            if (rv.v[j].section_end < section_end)
                section_end = rv.v[j].section_end;
        }
        char *name = snapprof__arena_alloc(&g_sym_arena, rv.v[i].name_len + 1, 1);
        if (name != NULL)
            memcpy(name, rv.v[i].name, rv.v[i].name_len); /* zeroed: terminated */
        if (name == NULL) {
            free(rv.v);
            return -ENOMEM;
        }
        uint64_t value = rv.v[i].value, end;
        if (size > 0) {
            end = value + size;
        } else {
            end = j < rv.n ? rv.v[j].value : section_end;
            if (end > section_end)
                end = section_end;
            if (end == UINT64_MAX || end <= value)
                end = value + 1;
        }
        syms[n++] = (sym_t){.value = value, .end = end, .name = name};
        i = j;
    }
    free(rv.v);
    t->syms = syms;
    t->count = n;
    return 0;
}

/* Loads t from the file at path (what to open: maybe /proc/self/exe or a
 * map_files link), which is the object found at obj_path (where to look
 * for its .gnu_debuglink file). */
static int load_from_file(symtab_t *t, const char *path, const char *obj_path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0; /* gone: no symbols, not an error */
    Elf *elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
    if (elf == NULL || !is_expected_object(t, elf)) {
        if (elf != NULL)
            elf_end(elf);
        close(fd);
        return 0;
    }
    Elf *debug_elf = NULL;
    snapprof__dwarf_t *dwarf = snapprof__dwarf_open(elf, obj_path, t->build_id, &debug_elf);
    int err = build_table(t, elf, debug_elf);
    t->dwarf = dwarf;
    if (dwarf == NULL && debug_elf != NULL)
        elf_end(debug_elf); /* read for its .symtab only (SNAPPROF_LINES_OWN) */
    if (dwarf != NULL && debug_elf == NULL) {
        /* The DWARF is the object's own: keep its ELF (mapped, so the
         * descriptor is not needed; see symbols_dwarf.c). */
        elf_cntl(elf, ELF_C_FDDONE);
        t->keep = elf;
    } else {
        elf_end(elf);
    }
    close(fd);
    return err;
}

/* The vdso has no file: read its symbols from the image the kernel mapped.
 * It is copied first because libelf may write to an image it converts. */
static int load_vdso(symtab_t *t)
{
    uintptr_t base = (uintptr_t)getauxval(AT_SYSINFO_EHDR);
    if (base == 0)
        return 0;
    const ElfW(Ehdr) *eh = (const ElfW(Ehdr) *)base;
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0)
        return 0;
    /* The image holds everything up to the section headers' end. */
    size_t size = (size_t)eh->e_shoff + (size_t)eh->e_shnum * eh->e_shentsize;
    const ElfW(Phdr) *ph = (const ElfW(Phdr) *)(base + eh->e_phoff);
    for (int i = 0; i < eh->e_phnum; i++) {
        if (ph[i].p_type == PT_LOAD && ph[i].p_offset + ph[i].p_filesz > size)
            size = ph[i].p_offset + ph[i].p_filesz;
    }
    if (size < sizeof *eh || size > (64u << 20))
        return 0;
    char *copy = malloc(size);
    if (copy == NULL)
        return -ENOMEM;
    memcpy(copy, (const void *)base, size);
    int err = 0;
    Elf *elf = elf_memory(copy, size);
    if (elf != NULL) {
        if (is_expected_object(t, elf))
            err = build_table(t, elf, NULL);
        elf_end(elf);
    }
    free(copy);
    return err;
}

/* Finds or loads the table for module. Called with g_sym_lock held.
 * Returns NULL when out of memory. */
static symtab_t *get_table_locked(const snapprof_module_t *m)
{
    const char *path = m->path ? m->path : "";
    const char *build_id = m->build_id ? m->build_id : "";
    int is_main = m->is_main_executable != 0;
    uint64_t h = hash_key(path, build_id, is_main) % SYMTAB_BUCKETS;
    for (symtab_t *t = g_buckets[h]; t != NULL; t = t->next) {
        if (t->is_main == is_main && strcmp(t->path, path) == 0 &&
            strcmp(t->build_id, build_id) == 0)
            return t;
    }
    symtab_t *t = snapprof__arena_alloc(&g_sym_arena, sizeof *t, _Alignof(symtab_t));
    if (t == NULL)
        return NULL;
    t->path = snapprof__arena_strdup(&g_sym_arena, path);
    t->build_id = t->path ? snapprof__arena_strdup(&g_sym_arena, build_id) : NULL;
    if (t->build_id == NULL)
        return NULL;
    t->is_main = is_main;
    int err = 0;
    if (!g_elf_ok) {
        err = 0;
    } else if (strcmp(path, "[vdso]") == 0) {
        err = load_vdso(t);
    } else if (is_main) {
        /* /proc/self/exe is the running binary even when its path was
         * replaced or deleted. */
        err = load_from_file(t, "/proc/self/exe", path);
    } else if (path[0] == '/') {
        err = load_from_file(t, path, path);
        if (err == 0 && t->count == 0 && t->dwarf == NULL &&
            __atomic_load_n(&m->is_loaded, __ATOMIC_RELAXED)) {
            /* A deleted or replaced file is still reachable through the
             * mapping itself. */
            char mf[64];
            snprintf(mf, sizeof mf, "/proc/self/map_files/%lx-%lx", (unsigned long)m->start,
                     (unsigned long)m->limit);
            err = load_from_file(t, mf, path);
        }
    }
    if (err != 0)
        return NULL; /* not cached: a later call tries again */
    t->next = g_buckets[h];
    g_buckets[h] = t;
    return t;
}

/* The symbol holding vaddr, or NULL. */
static const sym_t *table_find(const symtab_t *t, uint64_t vaddr)
{
    size_t lo = 0, hi = t->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->syms[mid].value <= vaddr)
            lo = mid + 1;
        else
            hi = mid;
    }
    /* lo is one past the last symbol starting at or before vaddr. A few
     * steps back cover a small function nested in a larger one. */
    for (size_t k = lo, steps = 0; k > 0 && steps < 8; k--, steps++) {
        if (vaddr < t->syms[k - 1].end)
            return &t->syms[k - 1];
    }
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Names, and the per-address cache                                         */
/* ------------------------------------------------------------------------ */

/* libstdc++'s demangler (the library links libstdc++; see CMakeLists.txt).
 * Declared here so that this file stays C. */
extern char *__cxa_demangle(const char *mangled, char *buf, size_t *len, int *status);

/* Demangled names by the address of their mangled string (strings here
 * never move, so the pointer is the key): a function sampled at many pcs
 * is demangled once. Open addressing, guarded by g_sym_lock. */
typedef struct demangled {
    const char *mangled, *name;
} demangled_t;
static demangled_t *g_demangled;
static size_t g_demangled_cap, g_demangled_n;

/* The child of a fork() has one thread. When another held g_sym_lock at
 * the fork (a builder symbolizing its profile: it can take a while for a
 * large library's DWARF), the lock would stay held for good and the tables
 * may be half-made. The child then forgets every table: a new lock, empty
 * buckets, the demangled names forgotten; what they held stays allocated
 * (the parent's profiles, inherited, may point into it) and the child loads
 * what it asks for again. Not held across fork() by a prepare handler: a
 * fork() would wait for the slowest table load, and that handler's place
 * in the order of prepare handlers (the reverse of their registration)
 * could not be fixed relative to the sampler lock's (see
 * module_table.c). */
static void sym_fork_child(void)
{
    if (pthread_mutex_trylock(&g_sym_lock) == 0) {
        pthread_mutex_unlock(&g_sym_lock);
        return;
    }
    pthread_mutex_init(&g_sym_lock, NULL);
    memset(&g_sym_arena, 0, sizeof g_sym_arena);
    memset(g_buckets, 0, sizeof g_buckets);
    g_demangled = NULL;
    g_demangled_cap = g_demangled_n = 0;
    atomic_fetch_add(&g_fork_resets, 1);
}

/* The display name of raw: demangled when it is an Itanium C++ name
 * ("_Z..."), else raw itself. Never NULL. */
static const char *display_name(const char *raw)
{
    if (raw == NULL || raw[0] != '_' || raw[1] != 'Z')
        return raw ? raw : "";
    if (g_demangled_n * 2 >= g_demangled_cap) {
        size_t cap = g_demangled_cap ? g_demangled_cap * 2 : 1024;
        demangled_t *t = calloc(cap, sizeof *t);
        if (t == NULL)
            return raw;
        for (size_t i = 0; i < g_demangled_cap; i++) {
            if (g_demangled[i].mangled == NULL)
                continue;
            size_t j = ((uintptr_t)g_demangled[i].mangled >> 3) * 0x9e3779b97f4a7c15ull >> 20;
            for (j &= cap - 1; t[j].mangled != NULL; j = (j + 1) & (cap - 1))
                ;
            t[j] = g_demangled[i];
        }
        free(g_demangled);
        g_demangled = t;
        g_demangled_cap = cap;
    }
    size_t j = ((uintptr_t)raw >> 3) * 0x9e3779b97f4a7c15ull >> 20;
    for (j &= g_demangled_cap - 1; g_demangled[j].mangled != NULL;
         j = (j + 1) & (g_demangled_cap - 1))
        if (g_demangled[j].mangled == raw)
            return g_demangled[j].name;
    int status = 0;
    char *dm = __cxa_demangle(raw, NULL, NULL, &status);
    const char *name = raw;
    if (dm != NULL && status == 0) {
        const char *copy = snapprof__arena_strdup(&g_sym_arena, dm);
        if (copy != NULL)
            name = copy;
    }
    free(dm);
    g_demangled[j] = (demangled_t){raw, name};
    g_demangled_n++;
    return name;
}

/* The deepest inline chain kept per address (innermost frames first). */
#define MAX_CHAIN 64
/* Addresses cached per object at most; beyond that answers are computed
 * each time (still correct, only slower). */
#define CACHE_MAX ((size_t)1 << 22)

static size_t cache_slot(uint64_t vaddr, size_t cap)
{
    return (size_t)((vaddr * 0x9e3779b97f4a7c15ull) >> 17) & (cap - 1);
}

static const cached_t *cache_find(const symtab_t *t, uint64_t vaddr)
{
    if (t->cache_cap == 0)
        return NULL;
    for (size_t j = cache_slot(vaddr, t->cache_cap);; j = (j + 1) & (t->cache_cap - 1)) {
        const cached_t *c = &t->cache[j];
        if (c->syms == NULL)
            return NULL;
        if (c->vaddr == vaddr)
            return c;
    }
}

/* Remembers an answer; a failure to grow only costs the caching. */
static void cache_put(symtab_t *t, uint64_t vaddr, snapprof_symbol_t *syms, uint32_t n)
{
    if (t->cache_n >= CACHE_MAX)
        return;
    if ((t->cache_n + 1) * 2 > t->cache_cap) {
        size_t cap = t->cache_cap ? t->cache_cap * 2 : 256;
        cached_t *c = calloc(cap, sizeof *c);
        if (c == NULL)
            return;
        for (size_t i = 0; i < t->cache_cap; i++) {
            if (t->cache[i].syms == NULL)
                continue;
            size_t j = cache_slot(t->cache[i].vaddr, cap);
            while (c[j].syms != NULL)
                j = (j + 1) & (cap - 1);
            c[j] = t->cache[i];
        }
        free(t->cache);
        t->cache = c;
        t->cache_cap = cap;
    }
    size_t j = cache_slot(vaddr, t->cache_cap);
    while (t->cache[j].syms != NULL)
        j = (j + 1) & (t->cache_cap - 1);
    t->cache[j] = (cached_t){.vaddr = vaddr, .syms = syms, .n = n};
    t->cache_n++;
}

/* Works out the symbols at vaddr into out[0..MAX_CHAIN): DWARF frames when
 * the debug information covers vaddr, else the ELF symbol. Returns the
 * count. */
static int resolve(symtab_t *t, uint64_t vaddr, snapprof_symbol_t *out)
{
    const sym_t *s = table_find(t, vaddr);
    snapprof__dwarf_frame_t df[MAX_CHAIN];
    int n = t->dwarf ? snapprof__dwarf_lookup(t->dwarf, vaddr, df, MAX_CHAIN) : 0;
    if (n <= 0) {
        if (s == NULL)
            return 0;
        out[0] = (snapprof_symbol_t){
            .name = display_name(s->name), .system_name = s->name, .start = (uintptr_t)s->value};
        return 1;
    }
    for (int i = 0; i < n; i++) {
        const char *raw = df[i].name;
        uintptr_t start = 0;
        if (df[i].entry != 0) {
            /* The function the code belongs to. When the ELF symbol holding
             * vaddr starts where it does, it is the same function, and the
             * symbol table's choice among aliases (getpid over __getpid,
             * foo.constprop.0 for a clone) is the name people know. */
            start = (uintptr_t)df[i].entry;
            if (s != NULL && s->value == df[i].entry)
                raw = s->name;
        } else if (i == n - 1 && s != NULL) {
            start = (uintptr_t)s->value;
        }
        out[i] = (snapprof_symbol_t){.name = display_name(raw),
                                     .system_name = raw,
                                     .file = df[i].file,
                                     .line = df[i].line > 0 ? df[i].line : 0,
                                     .start = start};
    }
    return n;
}

Elf *snapprof__symbols_open_frame_elf(const char *path, const char *build_id)
{
    pthread_once(&g_sym_once, sym_init_once);
    if (!g_elf_ok)
        return NULL;
    pthread_mutex_lock(&g_sym_lock);
    Elf *elf = snapprof__dwarf_open_frame_elf(path, build_id);
    pthread_mutex_unlock(&g_sym_lock);
    return elf;
}

int snapprof__symbols_set_debug_dirs(const char *dirs)
{
    pthread_once(&g_sym_once, sym_init_once);
    pthread_mutex_lock(&g_sym_lock);
    snapprof__dwarf_set_debug_dirs(dirs);
    pthread_mutex_unlock(&g_sym_lock);
    return 0;
}

int snapprof_symbols_set_lines(snapprof_lines_t lines)
{
    if (lines != SNAPPROF_LINES_ALL && lines != SNAPPROF_LINES_OWN &&
        lines != SNAPPROF_LINES_PROGRAM)
        return -EINVAL;
    pthread_once(&g_sym_once, sym_init_once);
    pthread_mutex_lock(&g_sym_lock);
    snapprof__dwarf_set_lines((int)lines);
    pthread_mutex_unlock(&g_sym_lock);
    return 0;
}

int snapprof__symbols_lookup(const snapprof_module_t *module, uintptr_t pc, snapprof_symbol_t *out,
                             size_t max)
{
    if (module == NULL || (out == NULL && max > 0))
        return -EINVAL;
    if (max == 0)
        return 0;
    pthread_once(&g_sym_once, sym_init_once);
    pthread_mutex_lock(&g_sym_lock);
    symtab_t *t = get_table_locked(module);
    if (t == NULL) {
        pthread_mutex_unlock(&g_sym_lock);
        return -ENOMEM;
    }
    uint64_t vaddr = (uint64_t)(pc - module->load_bias);
    const cached_t *c = cache_find(t, vaddr);
    snapprof_symbol_t tmp[MAX_CHAIN];
    const snapprof_symbol_t *syms;
    size_t n;
    if (c != NULL) {
        syms = c->syms;
        n = c->n;
    } else {
        n = (size_t)resolve(t, vaddr, tmp);
        syms = tmp;
        /* Misses are cached too (n == 0): garbage pcs recur. */
        snapprof_symbol_t *keep = snapprof__arena_alloc(&g_sym_arena, (n ? n : 1) * sizeof *keep,
                                                        _Alignof(snapprof_symbol_t));
        if (keep != NULL) {
            memcpy(keep, tmp, n * sizeof *keep);
            cache_put(t, vaddr, keep, (uint32_t)n);
        }
    }
    if (n > max)
        n = max; /* keep the innermost */
    for (size_t i = 0; i < n; i++) {
        out[i] = syms[i];
        if (out[i].start != 0)
            out[i].start += module->load_bias;
    }
    pthread_mutex_unlock(&g_sym_lock);
    return (int)n;
}

int snapprof__symbols_fuzz_file(const char *path, const char *build_id, const uint64_t *vaddrs,
                                size_t n, void (*check)(const snapprof_symbol_t *sym, void *arg),
                                void *arg)
{
    pthread_once(&g_sym_once, sym_init_once);
    if (!g_elf_ok)
        return -ENOSYS;
    pthread_mutex_lock(&g_sym_lock);
    /* Everything this builds goes to a private arena and demangling table,
     * freed at the end; the process-wide ones stay as they were. */
    snapprof__arena_t saved_arena = g_sym_arena;
    demangled_t *saved_demangled = g_demangled;
    size_t saved_cap = g_demangled_cap, saved_n = g_demangled_n;
    memset(&g_sym_arena, 0, sizeof g_sym_arena);
    g_demangled = NULL;
    g_demangled_cap = g_demangled_n = 0;

    symtab_t t = {.path = path, .build_id = build_id ? build_id : ""};
    int found = load_from_file(&t, path, path);
    snapprof_symbol_t out[MAX_CHAIN];
    for (size_t i = 0; found >= 0 && i < n + 256; i++) {
        uint64_t vaddr;
        if (i < n)
            vaddr = vaddrs[i];
        else if (i - n < t.count)
            vaddr = t.syms[i - n].value;
        else
            break;
        int k = resolve(&t, vaddr, out);
        for (int j = 0; j < k; j++)
            check(&out[j], arg);
        found += k;
    }
    snapprof__dwarf_close(t.dwarf);
    if (t.keep != NULL)
        elf_end(t.keep);
    free(t.cache);
    snapprof__arena_release(&g_sym_arena);
    free(g_demangled);
    g_sym_arena = saved_arena;
    g_demangled = saved_demangled;
    g_demangled_cap = saved_cap;
    g_demangled_n = saved_n;
    pthread_mutex_unlock(&g_sym_lock);
    return found;
}
