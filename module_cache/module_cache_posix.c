/* Linux module cache: loaded modules from dl_iterate_phdr() and
 * /proc/self/maps, kept process-wide for the life of the process.
 *
 * NOT async-signal-safe: everything here allocates, takes g_lock, reads /proc
 * and calls dl_iterate_phdr() (which takes the loader's lock). It runs on the
 * sampling thread or a caller's thread, never in the signal handler.
 *
 * Lock order: g_lock, then the loader's lock (inside dl_iterate_phdr). The
 * dl_iterate_phdr() callbacks below only fill local buffers and never take
 * g_lock, so a thread inside the loader (e.g. running a constructor from
 * dlopen) that calls into the cache waits for g_lock without holding the
 * lock dl_iterate_phdr() needs (glibc's dl_load_write_lock is only held
 * while the link map list itself changes). */
#include "common/arena.h"
#include "common/clock.h"
#include "common/hash.h"
#include "module_cache/module_cache.h"

#include "module_cache/jit_regions.h"

#include <elf.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <time.h>
#include <unistd.h>

/* GNU build-ids are 20 bytes (sha1) or 16 (md5, uuid); allow some more. */
#define BUILD_ID_MAX_BYTES 64
#define BUILD_ID_HEX_SIZE (2 * BUILD_ID_MAX_BYTES + 1)

/* A lookup that misses may rescan /proc/self/maps this often at most, unless
 * the loader reports that objects were added or removed: frame-pointer
 * unwinding produces garbage addresses now and then, and each would cost a
 * read of /proc/self/maps otherwise. */
#define MISS_REFRESH_INTERVAL_NS (100ull * 1000 * 1000)

/* A lookup that hits asks the loader whether objects came or went at most
 * this often, so an entry of a library dlclose()d since the last refresh is
 * not handed out for longer than this even when nobody calls
 * snapprof__module_cache_update(). */
#define HIT_CHECK_INTERVAL_NS (10ull * 1000 * 1000)

typedef struct module_entry {
    snapprof_module_t pub; /* first member: handed out as snapprof_module_t * */
    const char *ident;     /* the source's own name: dlpi_name or the maps name */
    uint64_t inode;        /* maps-only modules: the mapping's inode */
    int from_maps;         /* 1 when only /proc/self/maps described it */
    unsigned seen;         /* the refresh generation that last saw it */
    /* CLOCK_MONOTONIC at the end of the scan of the refresh that made the
     * entry (it was mapped by then) and of the one that found it gone (it
     * was unmapped by then; 0 while loaded). A copy taken before
     * unloaded_ns may have frames in it: see snapprof__module_find_at(). */
    uint64_t loaded_ns, unloaded_ns;
    struct module_entry *next; /* every entry ever made, in creation order */
} module_entry_t;

/* A module as one refresh found it, before it is matched with an entry. */
typedef struct candidate {
    uintptr_t start, limit;
    uint64_t file_offset;
    uintptr_t load_bias;
    char *ident;      /* malloc'd */
    const char *path; /* display path; borrowed from ident, a map line or a constant */
    char build_id[BUILD_ID_HEX_SIZE];
    snapprof_module_kind_t kind;
    int is_main, from_maps;
    uint64_t inode;
} candidate_t;

typedef struct candidate_vec {
    candidate_t *v;
    size_t n, cap;
} candidate_vec_t;

/* One executable line of /proc/self/maps. */
typedef struct map_line {
    uintptr_t start, end;
    uint64_t offset, inode;
    char *name; /* malloc'd; "" for anonymous memory */
} map_line_t;

typedef struct map_vec {
    map_line_t *v;
    size_t n, cap;
} map_vec_t;

/* All state below is guarded by g_lock, except what init_once sets up. */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

static uintptr_t g_page_size;
static uintptr_t g_vdso_ehdr; /* AT_SYSINFO_EHDR, 0 without a vdso */
static char *g_exe_path;      /* realpath of /proc/self/exe, NULL if unknown */

static snapprof__arena_t g_arena; /* entries and interned strings */
static module_entry_t **g_loaded; /* loaded entries sorted by start, disjoint */
static size_t g_nloaded;
static module_entry_t *g_all_head, *g_all_tail; /* every entry, creation order */
static size_t g_nall;                           /* entries linked from g_all_head */
static module_entry_t *g_main;
static unsigned g_generation; /* of the latest refresh, also a failed one */
static int g_refreshed;       /* a refresh has succeeded once */
static unsigned long long g_dl_adds, g_dl_subs;
static uint64_t g_last_scan_ns;  /* when /proc/self/maps was last read */
static uint64_t g_last_probe_ns; /* when the loader's counters were last read */

/* Interned strings (paths, build-ids, idents): a process that dlopens and
 * dlcloses the same library in a loop makes a new entry each time, but
 * should not copy its path each time. Open addressing; never shrinks. */
static const char **g_strings;
static size_t g_strings_cap, g_strings_n;

/* How many fork children started the cache afresh (a test seam). */
static atomic_uint g_fork_resets;

unsigned snapprof__module_cache_fork_resets(void)
{
    return atomic_load(&g_fork_resets);
}

/* The loader's lock across fork(). glibc (2.36) does not reset its
 * dl_load_write_lock in a fork child: a child forked while one of our
 * threads was inside dl_iterate_phdr() inherits that lock held, and its
 * own first refresh waits for it for ever (seen in
 * profiler_fork_during_module_cache once g_lock itself was fixed). So our
 * calls into the loader go through g_dl_gate, which fork() holds: the
 * prepare handler waits for the call in progress (microseconds; it needs
 * only the loader's lock, which a forking thread never holds in its
 * prepare handlers) and keeps the next one out until the fork is done.
 *
 * Callers only try the gate, never wait for it: they hold g_lock and may
 * hold the sampler lock, which the forking thread may wait for after the
 * gate (prepare handlers run in an order no one here controls). One that
 * finds the gate closed does without the loader this once: a refresh
 * fails (the modules known so far stay) and a probe says "no change"
 * without noting the time, so the next call asks again. Threads that call
 * the loader themselves (the program's own, libunwind's) are not gated:
 * the preload library checks the loader in a child before profiling it. */
static pthread_mutex_t g_dl_gate = PTHREAD_MUTEX_INITIALIZER;
static int g_dl_gate_held; /* by the forking thread, between prepare and parent */

static void dl_gate_prepare(void)
{
    /* Bounded, for a fork() from a signal handler that interrupted our own
     * call into the loader on the same thread. */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 1;
    g_dl_gate_held = pthread_mutex_timedlock(&g_dl_gate, &ts) == 0;
}

static void dl_gate_parent(void)
{
    if (g_dl_gate_held)
        pthread_mutex_unlock(&g_dl_gate);
}

static void dl_gate_child(void)
{
    pthread_mutex_init(&g_dl_gate, NULL);
}

/* dl_iterate_phdr() through the gate; 0 without calling it when a fork()
 * is in progress. */
static int gated_dl_iterate_phdr(int (*cb)(struct dl_phdr_info *, size_t, void *), void *data)
{
    if (pthread_mutex_trylock(&g_dl_gate) != 0)
        return 0;
    dl_iterate_phdr(cb, data);
    pthread_mutex_unlock(&g_dl_gate);
    return 1;
}

/* The child of a fork() has one thread. When another held g_lock at the
 * fork (a builder symbolizing its profile, a tick's update: they take it
 * outside the sampler lock, or inside it on the sampling thread, which is
 * not in the child either), the lock would stay held for good and the
 * state it guards may be half-changed. The child then starts the cache
 * afresh: a new lock, and nothing known, so that the next call reads the
 * modules again. What the old state holds is left allocated, not freed:
 * it may be inconsistent, and profilers inherited from the parent keep
 * pointers to its entries (modules live as long as the process).
 *
 * A prepare handler that held g_lock across fork() would keep the state
 * whole, but the order in which pthread_atfork() runs prepare handlers is
 * the reverse of their registration, which no one controls: ours before
 * the sampler's would hold g_lock and wait for the sampler lock, while the
 * sampling thread holds that and waits for g_lock (drain() updates the
 * cache under the sampler lock). A deadlock in the parent is worse than a
 * refresh in the child. */
static void fork_child(void)
{
    if (pthread_mutex_trylock(&g_lock) == 0) {
        pthread_mutex_unlock(&g_lock); /* free at the fork: the state is whole */
        return;
    }
    pthread_mutex_init(&g_lock, NULL);
    memset(&g_arena, 0, sizeof g_arena);
    g_loaded = NULL;
    g_nloaded = 0;
    g_all_head = g_all_tail = NULL;
    g_nall = 0;
    g_main = NULL;
    g_generation++;
    g_refreshed = 0;
    g_dl_adds = g_dl_subs = 0;
    g_last_scan_ns = g_last_probe_ns = 0;
    g_strings = NULL;
    g_strings_cap = g_strings_n = 0;
    atomic_fetch_add(&g_fork_resets, 1);
}

static void init_once(void)
{
    pthread_atfork(dl_gate_prepare, dl_gate_parent, dl_gate_child);
    pthread_atfork(NULL, NULL, fork_child);
    long ps = sysconf(_SC_PAGESIZE);
    g_page_size = ps > 0 ? (uintptr_t)ps : 4096;
    g_vdso_ehdr = (uintptr_t)getauxval(AT_SYSINFO_EHDR);
    /* realpath() allocates; the result lives as long as the process. If it
     * fails (the binary was deleted), readlink still names it. */
    g_exe_path = realpath("/proc/self/exe", NULL);
    if (g_exe_path == NULL) {
        char buf[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
        if (n > 0) {
            buf[n] = '\0';
            g_exe_path = strdup(buf);
        }
    }
}

/* FNV-1a from this module cache's own basis (SNAPPROF_MODULE_HASH_BASIS). */
static uint64_t hash_str(const char *s)
{
    return snapprof__fnv1a64(SNAPPROF_MODULE_HASH_BASIS, s);
}

/* Returns the arena's copy of s, or NULL when out of memory. */
static const char *intern(const char *s)
{
    if (g_strings_n * 2 >= g_strings_cap) {
        size_t cap = g_strings_cap ? g_strings_cap * 2 : 256;
        const char **t = calloc(cap, sizeof *t);
        if (t == NULL)
            return NULL;
        for (size_t i = 0; i < g_strings_cap; i++) {
            if (g_strings[i] == NULL)
                continue;
            size_t j = hash_str(g_strings[i]) & (cap - 1);
            while (t[j] != NULL)
                j = (j + 1) & (cap - 1);
            t[j] = g_strings[i];
        }
        free(g_strings);
        g_strings = t;
        g_strings_cap = cap;
    }
    size_t j = hash_str(s) & (g_strings_cap - 1);
    while (g_strings[j] != NULL) {
        if (strcmp(g_strings[j], s) == 0)
            return g_strings[j];
        j = (j + 1) & (g_strings_cap - 1);
    }
    const char *copy = snapprof__arena_strdup(&g_arena, s);
    if (copy == NULL)
        return NULL;
    g_strings[j] = copy;
    g_strings_n++;
    return copy;
}

/* ------------------------------------------------------------------------ */
/* Collecting candidates                                                    */
/* ------------------------------------------------------------------------ */

static candidate_t *candidate_push(candidate_vec_t *cv)
{
    if (cv->n == cv->cap) {
        size_t cap = cv->cap ? cv->cap * 2 : 64;
        candidate_t *v = realloc(cv->v, cap * sizeof *v);
        if (v == NULL)
            return NULL;
        cv->v = v;
        cv->cap = cap;
    }
    candidate_t *c = &cv->v[cv->n++];
    memset(c, 0, sizeof *c);
    return c;
}

static void candidate_vec_free(candidate_vec_t *cv)
{
    for (size_t i = 0; i < cv->n; i++)
        free(cv->v[i].ident);
    free(cv->v);
    memset(cv, 0, sizeof *cv);
}

static void map_vec_free(map_vec_t *mv)
{
    for (size_t i = 0; i < mv->n; i++)
        free(mv->v[i].name);
    free(mv->v);
    memset(mv, 0, sizeof *mv);
}

/* Writes the hex GNU build-id found in the object's in-memory PT_NOTE
 * segments into hex ("" when there is none). Notes are read where the loader
 * mapped them, so no file is opened. */
static void read_build_id(const struct dl_phdr_info *info, char *hex)
{
    hex[0] = '\0';
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_NOTE || ph->p_filesz == 0)
            continue;
        /* Notes in a segment aligned to 8 (e.g. .note.gnu.property) pad
         * name and descriptor to 8 bytes; classic notes to 4. */
        size_t align = ph->p_align == 8 ? 8 : 4;
        const unsigned char *p = (const unsigned char *)(info->dlpi_addr + ph->p_vaddr);
        size_t len = ph->p_filesz, off = 0;
        while (len - off >= sizeof(ElfW(Nhdr))) {
            ElfW(Nhdr) nh;
            memcpy(&nh, p + off, sizeof nh);
            off += sizeof nh;
            size_t namesz = ((size_t)nh.n_namesz + align - 1) & ~(align - 1);
            size_t descsz = ((size_t)nh.n_descsz + align - 1) & ~(align - 1);
            if (namesz > len - off || descsz > len - off - namesz)
                break;
            if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 &&
                memcmp(p + off, "GNU", 4) == 0 && nh.n_descsz > 0 &&
                nh.n_descsz <= BUILD_ID_MAX_BYTES) {
                static const char digits[] = "0123456789abcdef";
                const unsigned char *d = p + off + namesz;
                for (size_t k = 0; k < nh.n_descsz; k++) {
                    hex[2 * k] = digits[d[k] >> 4];
                    hex[2 * k + 1] = digits[d[k] & 15];
                }
                hex[2 * nh.n_descsz] = '\0';
                return;
            }
            off += namesz + descsz;
        }
    }
}

typedef struct dl_ctx {
    candidate_vec_t *cv;
    int index;
    int err;
    int have_counts;
    unsigned long long adds, subs;
} dl_ctx_t;

/* dl_iterate_phdr() callback: runs with the loader's lock held, so it only
 * fills ctx and never takes g_lock or calls back into the cache. */
static int collect_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    dl_ctx_t *ctx = arg;
    int index = ctx->index++;
    if (index == 0 && size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
        ctx->have_counts = 1;
        ctx->adds = info->dlpi_adds;
        ctx->subs = info->dlpi_subs;
    }
    const char *name = info->dlpi_name ? info->dlpi_name : "";
    int is_vdso = strncmp(name, "linux-vdso", 10) == 0 || strncmp(name, "linux-gate", 10) == 0;
    if (!is_vdso && g_vdso_ehdr != 0) {
        const ElfW(Ehdr) *eh = (const ElfW(Ehdr) *)g_vdso_ehdr;
        is_vdso = (uintptr_t)info->dlpi_phdr == g_vdso_ehdr + eh->e_phoff;
    }
    /* glibc lists the main program first, with an empty name. */
    int is_main = !is_vdso && index == 0 && name[0] == '\0';
    char build_id[BUILD_ID_HEX_SIZE];
    int have_build_id = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X) || ph->p_memsz == 0)
            continue;
        if (!have_build_id) {
            read_build_id(info, build_id);
            have_build_id = 1;
        }
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
        uintptr_t start = lo & ~(g_page_size - 1);
        uintptr_t limit = (lo + ph->p_memsz + g_page_size - 1) & ~(g_page_size - 1);
        candidate_t *c = candidate_push(ctx->cv);
        if (c == NULL) {
            ctx->err = -ENOMEM;
            return 1;
        }
        c->start = start;
        c->limit = limit;
        c->file_offset = ph->p_offset >= lo - start ? ph->p_offset - (lo - start) : 0;
        c->load_bias = info->dlpi_addr;
        c->ident = strdup(is_vdso ? "[vdso]" : name);
        if (c->ident == NULL) {
            ctx->cv->n--;
            ctx->err = -ENOMEM;
            return 1;
        }
        c->path = is_vdso ? "[vdso]" : NULL;
        memcpy(c->build_id, build_id, sizeof build_id);
        c->kind = SNAPPROF_MODULE_NATIVE;
        c->is_main = is_main;
    }
    return 0;
}

/* Reads the executable lines of /proc/self/maps. Returns 0, -ENOMEM, or the
 * errno of a failed open (callers go on without maps then). */
static int read_maps(map_vec_t *mv)
{
    FILE *f = fopen("/proc/self/maps", "re");
    if (f == NULL)
        return -errno;
    char *line = NULL;
    size_t line_cap = 0;
    int err = 0;
    while (getline(&line, &line_cap, f) > 0) {
        uintptr_t start, end;
        uint64_t offset, inode;
        char perms[8];
        unsigned dev_major, dev_minor;
        int name_at = 0;
        if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %7s %" SCNx64 " %x:%x %" SCNu64 " %n", &start,
                   &end, perms, &offset, &dev_major, &dev_minor, &inode, &name_at) < 7 ||
            name_at == 0)
            continue;
        if (strlen(perms) < 3 || perms[2] != 'x' || end <= start)
            continue;
        char *name = line + name_at;
        size_t nl = strlen(name);
        while (nl > 0 && (name[nl - 1] == '\n' || name[nl - 1] == ' '))
            name[--nl] = '\0';
        if (mv->n == mv->cap) {
            size_t cap = mv->cap ? mv->cap * 2 : 64;
            map_line_t *v = realloc(mv->v, cap * sizeof *v);
            if (v == NULL) {
                err = -ENOMEM;
                break;
            }
            mv->v = v;
            mv->cap = cap;
        }
        map_line_t *m = &mv->v[mv->n];
        m->name = strdup(name);
        if (m->name == NULL) {
            err = -ENOMEM;
            break;
        }
        m->start = start;
        m->end = end;
        m->offset = offset;
        m->inode = inode;
        mv->n++;
    }
    free(line);
    fclose(f);
    return err;
}

static int candidate_cmp(const void *a, const void *b)
{
    const candidate_t *x = a, *y = b;
    if (x->start != y->start)
        return x->start < y->start ? -1 : 1;
    return x->limit < y->limit ? -1 : x->limit > y->limit;
}

/* The exec map line holding addr, or NULL. Lines are sorted and disjoint. */
static const map_line_t *map_find(const map_vec_t *mv, uintptr_t addr)
{
    size_t lo = 0, hi = mv->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (mv->v[mid].end <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < mv->n && mv->v[lo].start <= addr ? &mv->v[lo] : NULL;
}

/* Adds a maps-only module for [start, limit) of map line m. */
static int add_map_candidate(candidate_vec_t *cv, const map_line_t *m, uintptr_t start,
                             uintptr_t limit)
{
    candidate_t *c = candidate_push(cv);
    if (c == NULL)
        return -ENOMEM;
    c->ident = strdup(m->name[0] ? m->name : "[anon]");
    if (c->ident == NULL) {
        cv->n--;
        return -ENOMEM;
    }
    c->path = c->ident;
    c->start = start;
    c->limit = limit;
    c->inode = m->inode;
    c->from_maps = 1;
    if (strcmp(m->name, "[vdso]") == 0 && g_vdso_ehdr >= m->start && g_vdso_ehdr < m->end) {
        /* The loader did not list the vdso (a static binary): it is still
         * an ELF image, linked at 0, so its symbols can be read. */
        c->kind = SNAPPROF_MODULE_NATIVE;
        c->load_bias = g_vdso_ehdr;
        c->file_offset = start - g_vdso_ehdr;
    } else {
        /* Executable memory the loader does not know: JIT code, a memfd,
         * a file someone mapped by hand. Its layout is unknown, so it is
         * not symbolized. */
        c->kind = SNAPPROF_MODULE_ANON;
        c->file_offset = m->inode != 0 ? m->offset + (start - m->start) : 0;
    }
    return 0;
}

/* Collects the current modules into cv, sorted by start and disjoint. */
static int collect(candidate_vec_t *cv, int *maps_ok)
{
    dl_ctx_t ctx = {.cv = cv};
    if (!gated_dl_iterate_phdr(collect_cb, &ctx))
        return -EAGAIN; /* a fork() in progress */
    if (ctx.err != 0)
        return ctx.err;
    if (ctx.have_counts) {
        g_dl_adds = ctx.adds;
        g_dl_subs = ctx.subs;
    }
    qsort(cv->v, cv->n, sizeof *cv->v, candidate_cmp);
    /* Two executable segments sharing a page would overlap once rounded to
     * pages; clip so the search array stays disjoint. */
    size_t w = 0;
    for (size_t i = 0; i < cv->n; i++) {
        candidate_t *c = &cv->v[i];
        if (w > 0 && c->start < cv->v[w - 1].limit)
            c->start = cv->v[w - 1].limit;
        if (c->start >= c->limit) {
            free(c->ident);
            continue;
        }
        cv->v[w++] = *c;
    }
    cv->n = w;

    map_vec_t mv = {0};
    int err = read_maps(&mv);
    *maps_ok = err == 0;
    if (err == -ENOMEM) {
        map_vec_free(&mv);
        return err;
    }
    size_t ndl = cv->n;
    /* Loader objects get the kernel's name for their file: the loader's
     * may be relative or go through a symlink (/lib -> /usr/lib). */
    for (size_t i = 0; i < ndl; i++) {
        candidate_t *c = &cv->v[i];
        if (c->path != NULL)
            continue;
        const map_line_t *m = map_find(&mv, c->start);
        if (m != NULL && m->name[0] == '/')
            c->path = m->name;
        else if (c->is_main && g_exe_path != NULL)
            c->path = g_exe_path;
        else if (c->ident[0] != '\0')
            c->path = c->ident;
        else
            c->path = "[unknown]";
    }
    /* Executable mappings, or parts of them, that no loader object covers. */
    for (size_t k = 0; k < mv.n && err == 0; k++) {
        const map_line_t *m = &mv.v[k];
        uintptr_t at = m->start;
        for (size_t i = 0; i < ndl && at < m->end; i++) {
            /* Copies: add_map_candidate() may move cv->v. */
            uintptr_t c_start = cv->v[i].start, c_limit = cv->v[i].limit;
            if (c_limit <= at || c_start >= m->end)
                continue;
            if (c_start > at)
                err = add_map_candidate(cv, m, at, c_start);
            at = c_limit;
            if (err != 0)
                break;
        }
        if (err == 0 && at < m->end)
            err = add_map_candidate(cv, m, at, m->end);
    }
    if (err == 0) {
        /* Paths borrowed from map lines must outlive mv: intern them now,
         * while everything else is still undone. */
        for (size_t i = 0; i < ndl; i++) {
            const char *p = intern(cv->v[i].path);
            if (p == NULL) {
                err = -ENOMEM;
                break;
            }
            cv->v[i].path = p;
        }
    }
    map_vec_free(&mv);
    if (err != 0)
        return err;
    qsort(cv->v, cv->n, sizeof *cv->v, candidate_cmp);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Matching candidates with entries                                         */
/* ------------------------------------------------------------------------ */

/* The loaded entry holding addr, or NULL. */
static module_entry_t *lookup_locked(uintptr_t addr)
{
    size_t lo = 0, hi = g_nloaded;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (g_loaded[mid]->pub.limit <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < g_nloaded && g_loaded[lo]->pub.start <= addr)
        return g_loaded[lo];
    return NULL;
}

static int same_module(const module_entry_t *e, const candidate_t *c)
{
    return e->pub.start == c->start && e->pub.limit == c->limit &&
           e->pub.file_offset == c->file_offset && e->pub.load_bias == c->load_bias &&
           e->pub.kind == c->kind && e->pub.is_main_executable == c->is_main &&
           e->from_maps == c->from_maps && e->inode == c->inode &&
           strcmp(e->ident, c->ident) == 0 && strcmp(e->pub.build_id, c->build_id) == 0;
}

static module_entry_t *new_entry(const candidate_t *c, uint64_t scanned_ns)
{
    const char *ident = intern(c->ident);
    const char *path = ident ? intern(c->path) : NULL;
    const char *build_id = path ? intern(c->build_id) : NULL;
    if (build_id == NULL)
        return NULL;
    module_entry_t *e = snapprof__arena_alloc(&g_arena, sizeof *e, _Alignof(module_entry_t));
    if (e == NULL)
        return NULL;
    e->pub.start = c->start;
    e->pub.limit = c->limit;
    e->pub.file_offset = c->file_offset;
    e->pub.load_bias = c->load_bias;
    e->pub.path = path;
    e->pub.build_id = build_id;
    e->pub.kind = c->kind;
    e->pub.is_main_executable = c->is_main;
    e->pub.is_loaded = 1;
    e->loaded_ns = scanned_ns;
    e->ident = ident;
    e->inode = c->inode;
    e->from_maps = c->from_maps;
    return e;
}

static int refresh_locked(void)
{
    candidate_vec_t cv = {0};
    int maps_ok = 0;
    int err = collect(&cv, &maps_ok);
    uint64_t scanned_ns = snapprof__monotonic_ns();
    module_entry_t **loaded = NULL;
    if (err == 0 && cv.n > 0) {
        loaded = malloc(cv.n * sizeof *loaded);
        if (loaded == NULL)
            err = -ENOMEM;
    }
    /* New entries are made before anything visible changes, so a failure
     * leaves the cache as it was (the arena keeps what it handed out). The
     * generation moves on even then, so marks left by a failed attempt
     * cannot be mistaken for the next one's. */
    unsigned gen = ++g_generation;
    for (size_t i = 0; i < cv.n && err == 0; i++) {
        const candidate_t *c = &cv.v[i];
        module_entry_t *e = lookup_locked(c->start);
        if (e != NULL && e->seen != gen && same_module(e, c)) {
            e->seen = gen;
        } else {
            e = new_entry(c, scanned_ns);
            if (e == NULL) {
                err = -ENOMEM;
                break;
            }
            e->seen = gen;
        }
        loaded[i] = e;
    }
    if (err != 0) {
        /* Entries made for this refresh stay unlinked, unused arena memory:
         * nothing can find them, and the cache is as it was. */
        free(loaded);
        candidate_vec_free(&cv);
        return err;
    }
    for (size_t i = 0; i < g_nloaded; i++) {
        if (g_loaded[i]->seen != gen) {
            g_loaded[i]->unloaded_ns = scanned_ns;
            __atomic_store_n(&g_loaded[i]->pub.is_loaded, 0, __ATOMIC_RELAXED);
        }
    }
    g_main = NULL;
    for (size_t i = 0; i < cv.n; i++) {
        module_entry_t *e = loaded[i];
        if (e->next == NULL && e != g_all_tail) {
            /* A new entry (old ones are linked, or the tail): append it to
             * the list of every entry. */
            if (g_all_tail)
                g_all_tail->next = e;
            else
                g_all_head = e;
            g_all_tail = e;
            g_nall++;
        }
        if (g_main == NULL && e->pub.is_main_executable)
            g_main = e;
    }
    free(g_loaded);
    g_loaded = loaded;
    g_nloaded = cv.n;
    g_refreshed = 1;
    g_last_probe_ns = snapprof__monotonic_ns();
    if (maps_ok)
        g_last_scan_ns = g_last_probe_ns;
    candidate_vec_free(&cv);
    return 0;
}

static int probe_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    unsigned long long *counts = arg;
    if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
        counts[0] = info->dlpi_adds;
        counts[1] = info->dlpi_subs;
        counts[2] = 1;
    }
    return 1; /* the first object carries the counters; stop there */
}

/* Did the loader add or remove objects since the last refresh? One call
 * into the loader, no /proc read. */
static int dl_changed_locked(void)
{
    unsigned long long counts[3] = {0, 0, 0};
    if (!gated_dl_iterate_phdr(probe_cb, counts))
        return 0; /* a fork() in progress: ask next time */
    g_last_probe_ns = snapprof__monotonic_ns();
    return !counts[2] || counts[0] != g_dl_adds || counts[1] != g_dl_subs;
}

/* After a miss: is a rescan worth it? Yes when the loader's counters moved,
 * or when /proc/self/maps was last read long enough ago to catch new JIT or
 * hand-mapped code. */
static int miss_refresh_due_locked(void)
{
    if (dl_changed_locked())
        return 1;
    return g_last_probe_ns - g_last_scan_ns >= MISS_REFRESH_INTERVAL_NS;
}

/* Takes g_lock and makes sure a first refresh has run. Returns 0 with the
 * lock held, or a negative errno without it. */
static int lock_ready(void)
{
    pthread_once(&g_once, init_once);
    pthread_mutex_lock(&g_lock);
    if (!g_refreshed) {
        int err = refresh_locked();
        if (err != 0) {
            pthread_mutex_unlock(&g_lock);
            return err;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Interface                                                                */
/* ------------------------------------------------------------------------ */

int snapprof__module_cache_refresh(void)
{
    pthread_once(&g_once, init_once);
    pthread_mutex_lock(&g_lock);
    int err = refresh_locked();
    pthread_mutex_unlock(&g_lock);
    return err;
}

int snapprof__module_cache_update(void)
{
    int err = lock_ready();
    if (err != 0)
        return err;
    err = dl_changed_locked() ? refresh_locked() : 0;
    pthread_mutex_unlock(&g_lock);
    return err;
}

/* The unloaded entry that held addr at when_ns, if one may have: it was
 * found gone by a scan that ended at or after when_ns, so it may still
 * have been mapped then. Of several, the one found gone first: entries
 * at one address follow each other, and that one is the oldest that can
 * still have been there. NULL when none. Lock held. */
static module_entry_t *unloaded_at_locked(uintptr_t addr, uint64_t when_ns)
{
    module_entry_t *best = NULL;
    for (module_entry_t *e = g_all_head; e != NULL; e = e->next) {
        if (e->pub.is_loaded || addr < e->pub.start || addr >= e->pub.limit ||
            e->unloaded_ns < when_ns)
            continue;
        if (best == NULL || e->unloaded_ns < best->unloaded_ns)
            best = e;
    }
    return best;
}

/* The object (or executable mapping) holding addr at when_ns (0 = now),
 * or NULL. */
static const snapprof_module_t *find_loaded(uintptr_t addr, uint64_t when_ns)
{
    if (lock_ready() != 0)
        return NULL;
    module_entry_t *e = lookup_locked(addr);
    if (e == NULL || (e->from_maps && e->inode != 0)) {
        /* A miss, or a file mapping the loader did not list: that may be a
         * library half-way through dlopen() or dlclose() when /proc/self/maps
         * was read, so it is worth a rescan under the same limits. */
        if (miss_refresh_due_locked() && refresh_locked() == 0)
            e = lookup_locked(addr);
    } else if (snapprof__monotonic_ns() - g_last_probe_ns >= HIT_CHECK_INTERVAL_NS &&
               dl_changed_locked() && refresh_locked() == 0) {
        e = lookup_locked(addr);
    }
    /* A stack copied before a dlclose() that a refresh has seen since can
     * point into the unloaded object: its kept entry answers, unless the
     * loaded one was certainly mapped already when the copy was taken. */
    if (when_ns != 0 && (e == NULL || e->loaded_ns > when_ns)) {
        module_entry_t *gone = unloaded_at_locked(addr, when_ns);
        if (gone != NULL)
            e = gone;
    }
    pthread_mutex_unlock(&g_lock);
    return e ? &e->pub : NULL;
}

const snapprof_module_t *snapprof__module_find_at(uintptr_t addr, uint64_t when_ns)
{
    /* JIT regions first: they need no lock, and JIT code sits in anonymous
     * memory whose maps entry may be newer than the last scan, which would
     * cost a rescan here. */
    const snapprof_module_t *m = snapprof__jit_find(addr, when_ns);
    if (m != NULL)
        return m;
    m = find_loaded(addr, when_ns);
    if (m != NULL && m->kind == SNAPPROF_MODULE_NATIVE)
        return m;
    /* Executable memory nobody described: perhaps a perf map names it. */
    const snapprof_module_t *jit = snapprof__jit_find_after_miss(addr, when_ns);
    return jit != NULL ? jit : m;
}

SNAPPROF_API const snapprof_module_t *snapprof_module_find(uintptr_t addr)
{
    return snapprof__module_find_at(addr, 0);
}

size_t snapprof__module_cache_list(const snapprof_module_t **out, size_t max)
{
    if (lock_ready() != 0)
        return 0;
    size_t n = 0;
    for (size_t i = 0; i < g_nloaded && n < max; i++)
        out[n++] = &g_loaded[i]->pub;
    for (module_entry_t *e = g_all_head; e != NULL && n < max; e = e->next) {
        /* Only refreshes under g_lock change is_loaded; the loaded ones are
         * listed above. */
        if (!e->pub.is_loaded)
            out[n++] = &e->pub;
    }
    size_t total = g_nall;
    pthread_mutex_unlock(&g_lock);
    return total;
}

const snapprof_module_t *snapprof__module_cache_main(void)
{
    if (lock_ready() != 0)
        return NULL;
    module_entry_t *e = g_main;
    pthread_mutex_unlock(&g_lock);
    return e ? &e->pub : NULL;
}

SNAPPROF_API int snapprof_symbolize(const snapprof_frame_t *frame, snapprof_symbol_t *out,
                                    size_t max)
{
    if (frame == NULL || (out == NULL && max > 0))
        return -EINVAL;
    if (max == 0)
        return 0;
    const char *name = frame->name;
    switch (frame->kind) {
    case SNAPPROF_FRAME_JIT:
    case SNAPPROF_FRAME_MARKER:
        if (name == NULL && snapprof__jit_region_of(frame->module) != NULL)
            name = snapprof__jit_region_of(frame->module)->name;
        if (name == NULL)
            return 0;
        out[0] = (snapprof_symbol_t){.name = name, .system_name = name};
        return 1;
    case SNAPPROF_FRAME_NATIVE: {
        const snapprof_module_t *m = frame->module;
        if (m == NULL)
            m = snapprof_module_find(frame->pc);
        const snapprof__jit_region_t *region = snapprof__jit_region_of(m);
        if (region != NULL) {
            /* A frame made by hand in JIT code: its region names it. */
            out[0] = (snapprof_symbol_t){
                .name = region->name, .system_name = region->name, .start = region->module.start};
            return 1;
        }
        if (m == NULL || m->kind != SNAPPROF_MODULE_NATIVE)
            return 0;
        return snapprof__symbols_lookup(m, frame->pc, out, max);
    }
    }
    return -EINVAL;
}
