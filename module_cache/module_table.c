/* Linux module cache, the module table: loaded modules as the scan
 * (module_scan.c: dl_iterate_phdr() and /proc/self/maps) finds them,
 * matched with the entries already known, kept process-wide for the life
 * of the process; when to scan again; and the lookups by address. Above
 * the scan (which never calls back), below module_lookup.c.
 *
 * NOT async-signal-safe: everything here allocates, takes g_lock, reads /proc
 * and calls dl_iterate_phdr() (which takes the loader's lock). It runs on the
 * sampling thread or a caller's thread, never in the signal handler.
 *
 * Lock order: g_lock, then the loader's lock (inside dl_iterate_phdr). The
 * scan's dl_iterate_phdr() callbacks only fill local buffers and never take
 * g_lock, so a thread inside the loader (e.g. running a constructor from
 * dlopen) that calls into the cache waits for g_lock without holding the
 * lock dl_iterate_phdr() needs (glibc's dl_load_write_lock is only held
 * while the link map list itself changes). */
#include "common/arena.h"
#include "common/clock.h"
#include "common/hash.h"
#include "module_cache/module_cache.h"
#include "module_cache/module_scan.h"
#include "module_cache/module_table.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* A lookup that misses may rescan /proc/self/maps this often at most, unless
 * the loader reports that objects were added or removed: frame-pointer
 * unwinding produces garbage addresses now and then, and each would cost a
 * read of /proc/self/maps otherwise. */
#define MISS_REFRESH_INTERVAL_NS (100ull * 1000 * 1000)

/* A lookup that hits asks the loader whether objects came or went at most
 * this often, so an entry of a library dlclose()d since the last refresh is
 * not handed out for longer than this even when nobody calls
 * snapprof__module_cache_update(). Not for a stack copied before the last
 * refresh began: that refresh saw every module the copy can point into
 * (those unloaded since keep their entries, loaded_ns and unloaded_ns say
 * when), so a rescan would answer the same. Under TSan, with a library
 * dlopen()ed and dlclose()d in a loop, the sampler's unwinding of a
 * backlog rescanned at almost every lookup: 71 of the 106 rescans in a 3 s
 * soak, 0.21 s of its 0.55 s of CPU time (soak finding 9). */
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
    /* A maps-only entry of a file the loader listed in a later refresh at
     * the same place: dlopen() was half-way (the file mapped, not listed
     * yet) when /proc/self/maps was read. The loader's entry answers for
     * its whole time, so this one never does once unloaded. */
    int superseded;
    struct module_entry *next; /* every entry ever made, in creation order */
} module_entry_t;

/* All state below is guarded by g_lock, except what init_once sets up. */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

static snapprof__arena_t g_arena; /* entries and interned strings */
static module_entry_t **g_loaded; /* loaded entries sorted by start, disjoint */
static size_t g_nloaded;
static module_entry_t *g_all_head, *g_all_tail; /* every entry, creation order */
static size_t g_nall;                           /* entries linked from g_all_head */
static module_entry_t *g_main;
static unsigned g_generation; /* of the latest refresh, also a failed one */
static int g_refreshed;       /* a refresh has succeeded once */
static unsigned long long g_dl_adds, g_dl_subs;
static uint64_t g_last_scan_ns;     /* when /proc/self/maps was last read */
static uint64_t g_last_probe_ns;    /* when the loader's counters were last read */
static uint64_t g_refresh_began_ns; /* when the last refresh that worked began */

/* Interned strings (paths, build-ids, idents): a process that dlopens and
 * dlcloses the same library in a loop makes a new entry each time, but
 * should not copy its path each time. Open addressing; never shrinks. */
static const char **g_strings;
static size_t g_strings_cap, g_strings_n;

/* How many fork children started the cache afresh (a test seam). */
static atomic_uint g_fork_resets;

/* Refreshes that worked (a test seam). */
static atomic_uint g_refreshes;

unsigned snapprof__module_cache_refreshes(void)
{
    return atomic_load(&g_refreshes);
}

unsigned snapprof__module_cache_fork_resets(void)
{
    return atomic_load(&g_fork_resets);
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
    g_last_scan_ns = g_last_probe_ns = g_refresh_began_ns = 0;
    g_strings = NULL;
    g_strings_cap = g_strings_n = 0;
    atomic_fetch_add(&g_fork_resets, 1);
}

static void init_once(void)
{
    snapprof__module_scan_init(); /* the loader gate's fork() handlers first */
    pthread_atfork(NULL, NULL, fork_child);
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

/* e is found gone by the refresh that lists loaded[0..n). When e was a
 * maps-only sighting of a file that the loader now lists at an
 * overlapping place (made by this refresh), dlopen() was half-way when e
 * was made: the loader's entry takes e's time as its own (the file was
 * mapped there since), and e is superseded. Without this, a stack copied
 * between the two refreshes got e, which has no load bias and no
 * symbols, and its unwind stopped at that frame. */
static void supersede_half_loaded(module_entry_t *e, module_entry_t *const *loaded, size_t n)
{
    if (!e->from_maps || e->inode == 0 || e->pub.kind != SNAPPROF_MODULE_ANON)
        return;
    for (size_t i = 0; i < n; i++) {
        module_entry_t *l = loaded[i];
        int made_now = l->next == NULL && l != g_all_tail; /* not linked yet */
        if (!made_now || l->from_maps || l->pub.start >= e->pub.limit ||
            e->pub.start >= l->pub.limit || strcmp(l->pub.path, e->pub.path) != 0)
            continue;
        if (e->loaded_ns < l->loaded_ns)
            l->loaded_ns = e->loaded_ns;
        e->superseded = 1;
    }
}

static int refresh_locked(void)
{
    candidate_vec_t cv = {0};
    int maps_ok = 0;
    uint64_t began_ns = snapprof__monotonic_ns();
    unsigned long long dl_counts[2] = {g_dl_adds, g_dl_subs};
    int err = snapprof__module_scan(&cv, &maps_ok, dl_counts, intern);
    g_dl_adds = dl_counts[0];
    g_dl_subs = dl_counts[1];
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
        snapprof__module_candidates_free(&cv);
        return err;
    }
    for (size_t i = 0; i < g_nloaded; i++) {
        if (g_loaded[i]->seen != gen) {
            g_loaded[i]->unloaded_ns = scanned_ns;
            supersede_half_loaded(g_loaded[i], loaded, cv.n);
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
    g_refresh_began_ns = began_ns;
    atomic_fetch_add(&g_refreshes, 1);
    g_last_probe_ns = snapprof__monotonic_ns();
    if (maps_ok)
        g_last_scan_ns = g_last_probe_ns;
    snapprof__module_candidates_free(&cv);
    return 0;
}

/* Did the loader add or remove objects since the last refresh? One call
 * into the loader, no /proc read. */
static int dl_changed_locked(void)
{
    unsigned long long counts[3] = {0, 0, 0};
    if (!snapprof__module_loader_probe(counts))
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

int snapprof__module_loader_iterate(int (*cb)(struct dl_phdr_info *, size_t, void *), void *data)
{
    pthread_once(&g_once, init_once); /* the gate's fork() handlers */
    return snapprof__module_scan_iterate(cb, data);
}

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
        if (e->pub.is_loaded || e->superseded || addr < e->pub.start || addr >= e->pub.limit ||
            e->unloaded_ns < when_ns)
            continue;
        if (best == NULL || e->unloaded_ns < best->unloaded_ns)
            best = e;
    }
    return best;
}

const snapprof_module_t *snapprof__module_table_find(uintptr_t addr, uint64_t when_ns)
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
    } else if ((when_ns == 0 || when_ns >= g_refresh_began_ns) &&
               snapprof__monotonic_ns() - g_last_probe_ns >= HIT_CHECK_INTERVAL_NS &&
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
