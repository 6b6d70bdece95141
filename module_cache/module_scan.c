/* The module cache's scan: what is loaded now, as candidates for the module
 * table (module_table.c), from dl_iterate_phdr() (with each object's
 * build-id read from its in-memory notes) and the executable lines of
 * /proc/self/maps; and the loader's add/remove counters, through a gate
 * that fork() holds. It keeps no table and calls nothing in module_table.c.
 *
 * NOT async-signal-safe: it allocates, reads /proc and calls
 * dl_iterate_phdr() (which takes the loader's lock). Callers hold
 * module_table.c's g_lock; the dl_iterate_phdr() callbacks here only fill
 * local buffers and never take it (see the lock order there). */
#include "common/proc_files.h"
#include "module_cache/module_scan.h"

#include <elf.h>
#include <errno.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <time.h>
#include <unistd.h>

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

/* Set once by snapprof__module_scan_init(). */
static uintptr_t g_page_size;
static uintptr_t g_vdso_ehdr; /* AT_SYSINFO_EHDR, 0 without a vdso */
static char *g_exe_path;      /* realpath of /proc/self/exe, NULL if unknown */

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

int snapprof__module_scan_iterate(int (*cb)(struct dl_phdr_info *, size_t, void *), void *data)
{
    return gated_dl_iterate_phdr(cb, data);
}

void snapprof__module_scan_init(void)
{
    pthread_atfork(dl_gate_prepare, dl_gate_parent, dl_gate_child);
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

void snapprof__module_candidates_free(candidate_vec_t *cv)
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
 * errno of a failed open (callers go on without maps then). A read that
 * fails part way ends the list where it is, as the end of the file would. */
static int read_maps(map_vec_t *mv)
{
    snapprof__proc_maps_t it;
    int rc = snapprof__proc_maps_open(&it);
    if (rc != 0)
        return rc;
    it.exec_only = 1;
    snapprof__proc_map_t pm;
    int err = 0;
    while (snapprof__proc_maps_next(&it, &pm) > 0) {
        if (pm.perms[2] != 'x' || pm.end <= pm.start)
            continue;
        /* A name's trailing blanks are dropped, as the kernel pads. */
        size_t nl = strlen(pm.path);
        while (nl > 0 && pm.path[nl - 1] == ' ')
            nl--;
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
        m->name = strndup(pm.path, nl);
        if (m->name == NULL) {
            err = -ENOMEM;
            break;
        }
        m->start = pm.start;
        m->end = pm.end;
        m->offset = pm.offset;
        m->inode = pm.inode;
        mv->n++;
    }
    snapprof__proc_maps_close(&it);
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

int snapprof__module_scan(candidate_vec_t *cv, int *maps_ok, unsigned long long dl_counts[2],
                          const char *(*keep)(const char *))
{
    dl_ctx_t ctx = {.cv = cv};
    if (!gated_dl_iterate_phdr(collect_cb, &ctx))
        return -EAGAIN; /* a fork() in progress */
    if (ctx.err != 0)
        return ctx.err;
    if (ctx.have_counts) {
        dl_counts[0] = ctx.adds;
        dl_counts[1] = ctx.subs;
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
            const char *p = keep(cv->v[i].path);
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
/* Probing the loader                                                       */
/* ------------------------------------------------------------------------ */

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

int snapprof__module_loader_probe(unsigned long long counts[3])
{
    return gated_dl_iterate_phdr(probe_cb, counts);
}
