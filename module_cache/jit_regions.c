/* JIT code regions for the module cache: regions registered through
 * <snapprof/jit.h> and regions read from a perf map, published to lock-free
 * readers as copy-on-write snapshots.
 *
 * Why copy-on-write snapshots and not a mutex around one table: lookups run
 * on the sampling thread for every frame, and registrations on the JIT's
 * threads. With a shared lock, a registration would wait for the sampler's
 * lookups and the sampler for a registration that copies a big table or a
 * perf map being parsed. Here writers take a mutex that only writers of the
 * same table take, build a new sorted array, and publish it with one atomic
 * exchange; readers never lock and never wait. (Unwinding runs after the
 * target resumed, so no sampled thread is ever stopped inside these calls:
 * the constraint is latency, not deadlock.)
 *
 * Old snapshots are freed once no reader can still hold them, by a two-slot
 * epoch scheme: a reader counts itself in g_readers[epoch & 1] (and checks
 * that the epoch did not move meanwhile) before loading a snapshot, and
 * leaves when done. A writer retires the snapshot it replaced, tagged with
 * the current epoch e, and only moves the epoch to e + 1 when no reader of
 * epoch e - 1 remains; at that moment nothing retired before epoch e can be
 * reached any more and is freed. Writers never wait for readers: a reader
 * that stalls merely delays frees (a handful of snapshots).
 *
 * Time: every region carries when it became live and when it went away
 * (CLOCK_MONOTONIC, the clock of sample timestamps). A stack copied at time
 * T is attributed to the region live at T, searched among the live regions,
 * the last GRAVEYARD_MAX regions that went away, and the chain of regions
 * that held the address before the live one; so unwinding a copy after the
 * JIT unregistered or replaced the code still names it right, and code put
 * at the same address later never takes the old name. When none was live
 * at T the frame gets no JIT module at all ("[unknown]") rather than a
 * name that may be wrong.
 */
#include "module_cache/jit_regions.h"
#include "module_cache/module_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Regions that went away and are still searched for late unwinds, per
 * table. Unwinding follows the copy by microseconds, by a second at worst on
 * a stalled VM; 1024 covers that at any sane rate of code turnover. */
#define GRAVEYARD_MAX 1024

/* A lookup of an address no module holds checks whether the perf map grew
 * at most this often; one that found a perf map region (whose line a JIT
 * reusing the memory may have superseded) less often, as that is every
 * sample of a JIT that names its code this way. A check is one stat(). */
#define PERF_MAP_MISS_CHECK_NS (1000ull * 1000)
#define PERF_MAP_HIT_CHECK_NS (10ull * 1000 * 1000)

/* Longer perf map lines are skipped and counted as bad. */
#define PERF_MAP_MAX_LINE (64u * 1024)

/* The perf map is read in pieces of at most this many bytes, each published
 * as one snapshot. */
#define PERF_MAP_CHUNK (16u * 1024 * 1024)

/* Every region's build_id points here, which tells our JIT modules from
 * ones that others made by hand (a distinct object, never merged with a
 * string literal). */
static const char k_region_build_id[1] = "";
static const char k_api_path[] = "[jit]";

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ------------------------------------------------------------------------ */
/* Snapshots and their reclamation                                          */
/* ------------------------------------------------------------------------ */

typedef struct snapshot {
    size_t n_live, n_dead;
    uintptr_t dead_max_len;        /* the longest dead region: bounds a search */
    snapprof__jit_region_t **live; /* sorted by start, disjoint */
    snapprof__jit_region_t **dead; /* sorted by start; may overlap */
    struct snapshot *retired_next;
    uint64_t retired_epoch;
    snapprof__jit_region_t *slots[]; /* live, then dead */
} snapshot_t;

static _Atomic uint64_t g_epoch;
static _Atomic uint64_t g_readers[2];
static pthread_mutex_t g_retire_lock = PTHREAD_MUTEX_INITIALIZER;
static snapshot_t *g_retired; /* under g_retire_lock */

/* Set once any table has held a region, so that processes without JIT code
 * pay one relaxed load per lookup. */
static atomic_int g_any;

static snapshot_t *snapshot_alloc(size_t n_live, size_t n_dead)
{
    /* Every slot is filled by the caller. */
    snapshot_t *s = malloc(sizeof *s + (n_live + n_dead) * sizeof s->slots[0]);
    if (s == NULL)
        return NULL;
    memset(s, 0, sizeof *s);
    s->n_live = n_live;
    s->n_dead = n_dead;
    s->live = s->slots;
    s->dead = s->slots + n_live;
    return s;
}

/* Enters a read-side section; returns the slot to leave with. */
static unsigned read_begin(void)
{
    for (;;) {
        unsigned slot = (unsigned)(atomic_load(&g_epoch) & 1);
        atomic_fetch_add(&g_readers[slot], 1);
        /* If the epoch moved between the load and the increment, a writer
         * may already have found this slot empty: count in the new slot. */
        if ((unsigned)(atomic_load(&g_epoch) & 1) == slot)
            return slot;
        atomic_fetch_sub(&g_readers[slot], 1);
    }
}

static void read_end(unsigned slot)
{
    atomic_fetch_sub(&g_readers[slot], 1);
}

/* Retires old (already replaced, may be NULL) and frees what no reader can
 * reach any more. Never waits for readers. */
static void retire(snapshot_t *old)
{
    pthread_mutex_lock(&g_retire_lock);
    uint64_t e = atomic_load(&g_epoch);
    if (old != NULL) {
        old->retired_epoch = e;
        old->retired_next = g_retired;
        g_retired = old;
    }
    /* Readers of epoch e - 1 count in slot (e + 1) & 1. Once they are gone,
     * every reader entered in epoch e or later, after every snapshot retired
     * before epoch e had been replaced. */
    if (atomic_load(&g_readers[(e + 1) & 1]) == 0) {
        snapshot_t **link = &g_retired;
        while (*link != NULL) {
            snapshot_t *s = *link;
            if (s->retired_epoch < e) {
                *link = s->retired_next;
                free(s);
            } else {
                link = &s->retired_next;
            }
        }
        atomic_store(&g_epoch, e + 1);
    }
    pthread_mutex_unlock(&g_retire_lock);
}

/* ------------------------------------------------------------------------ */
/* Tables                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct table {
    _Atomic(snapshot_t *) current; /* NULL until the first change */
    pthread_mutex_t lock;          /* held by this table's writers only */
    snapprof__arena_t arena;       /* regions and names; under lock */
} table_t;

static table_t g_api = {.lock = PTHREAD_MUTEX_INITIALIZER};
static table_t g_perf = {.lock = PTHREAD_MUTEX_INITIALIZER};

static _Atomic uint64_t g_registered, g_unregistered, g_moved;
static _Atomic uint64_t g_perf_reads, g_perf_lines, g_perf_bad, g_perf_replaced;

static uint64_t dead_from(const snapprof__jit_region_t *r)
{
    return __atomic_load_n(&r->dead_from_ns, __ATOMIC_RELAXED);
}

static int alive_at(const snapprof__jit_region_t *r, uint64_t when)
{
    return r->live_from_ns <= when && when < dead_from(r);
}

/* The live region holding addr, or NULL. */
static snapprof__jit_region_t *find_live(const snapshot_t *s, uintptr_t addr)
{
    size_t lo = 0, hi = s->n_live;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->live[mid]->module.limit <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < s->n_live && s->live[lo]->module.start <= addr)
        return s->live[lo];
    return NULL;
}

/* The dead region that held addr at time when, or NULL. Regions live at
 * one time never overlap, so there is at most one. */
static snapprof__jit_region_t *find_dead(const snapshot_t *s, uintptr_t addr, uint64_t when)
{
    size_t lo = 0, hi = s->n_dead;
    while (lo < hi) { /* the first region that starts above addr */
        size_t mid = lo + (hi - lo) / 2;
        if (s->dead[mid]->module.start <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    while (lo > 0) {
        snapprof__jit_region_t *r = s->dead[--lo];
        if (addr - r->module.start >= s->dead_max_len)
            break; /* every region further down ends below addr */
        if (addr < r->module.limit && alive_at(r, when))
            return r;
    }
    return NULL;
}

/* The region of table t for addr in a stack copied at when (0: now).
 * Inside a read-side section. */
static snapprof__jit_region_t *table_find(table_t *t, uintptr_t addr, uint64_t when)
{
    snapshot_t *s = atomic_load(&t->current);
    if (s == NULL)
        return NULL;
    snapprof__jit_region_t *r = find_live(s, addr);
    if (when == 0 || (r != NULL && alive_at(r, when)))
        return r;
    snapprof__jit_region_t *d = find_dead(s, addr, when);
    if (d != NULL)
        return d;
    /* Gone from the graveyard (a JIT turning over lots of code elsewhere)
     * but replaced at this address: back along the chain, in time. */
    const snapprof__jit_region_t *p = r ? r->prev : NULL;
    for (int steps = 0; p != NULL && steps < 64; p = p->prev, steps++) {
        if (when >= dead_from(p))
            break; /* gone before the copy, and so were those before it */
        if (p->live_from_ns <= when)
            return addr >= p->module.start && addr < p->module.limit ? (snapprof__jit_region_t *)p
                                                                     : NULL;
    }
    return NULL;
}

/* The region that went away from [start, limit) last: one of going (live
 * regions of s going away now, sorted by start, disjoint), else the newest
 * overlapping one in the graveyard of s. NULL when none. */
static const snapprof__jit_region_t *predecessor(const snapshot_t *s,
                                                 snapprof__jit_region_t *const *going,
                                                 size_t n_going, uintptr_t start, uintptr_t limit)
{
    size_t lo = 0, hi = n_going;
    while (lo < hi) { /* the first that ends above start */
        size_t mid = lo + (hi - lo) / 2;
        if (going[mid]->module.limit <= start)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < n_going && going[lo]->module.start < limit)
        return going[lo];
    if (s == NULL)
        return NULL;
    lo = 0, hi = s->n_dead;
    while (lo < hi) { /* the first that starts at or above limit */
        size_t mid = lo + (hi - lo) / 2;
        if (s->dead[mid]->module.start < limit)
            lo = mid + 1;
        else
            hi = mid;
    }
    const snapprof__jit_region_t *best = NULL;
    while (lo > 0) {
        const snapprof__jit_region_t *d = s->dead[--lo];
        if (d->module.limit > start && (best == NULL || dead_from(d) > dead_from(best)))
            best = d;
        if (d->module.start < start && start - d->module.start >= s->dead_max_len)
            break; /* every region further down ends at or below start */
    }
    return best;
}

static int cmp_start(const void *a, const void *b)
{
    const snapprof__jit_region_t *x = *(snapprof__jit_region_t *const *)a;
    const snapprof__jit_region_t *y = *(snapprof__jit_region_t *const *)b;
    return x->module.start < y->module.start ? -1 : x->module.start > y->module.start;
}

static int cmp_newest_first(const void *a, const void *b)
{
    uint64_t x = dead_from(*(snapprof__jit_region_t *const *)a);
    uint64_t y = dead_from(*(snapprof__jit_region_t *const *)b);
    return x > y ? -1 : x < y;
}

/* Builds the snapshot that follows old (may be NULL): its live regions
 * minus gone (each one of them, sorted by start) plus born (sorted by start,
 * overlapping nothing that stays), and its dead regions plus gone, keeping
 * the GRAVEYARD_MAX that went away last. NULL when out of memory. */
static snapshot_t *snapshot_next(const snapshot_t *old, snapprof__jit_region_t *const *gone,
                                 size_t n_gone, snapprof__jit_region_t *const *born, size_t n_born)
{
    size_t old_live = old ? old->n_live : 0, old_dead = old ? old->n_dead : 0;
    size_t n_live = old_live - n_gone + n_born;
    size_t n_dead = old_dead + n_gone;
    /* A few over the cap (one unregistration): evict the oldest one by one.
     * Many (a perf map rewritten): sort by age. */
    size_t excess = n_dead > GRAVEYARD_MAX ? n_dead - GRAVEYARD_MAX : 0;
    int few = excess > 0 && excess <= 8;
    snapprof__jit_region_t **dead = NULL;
    if (excess > 0) {
        dead = malloc(n_dead * sizeof *dead);
        if (dead == NULL)
            return NULL;
    }
    snapshot_t *s = snapshot_alloc(n_live, n_dead > GRAVEYARD_MAX ? GRAVEYARD_MAX : n_dead);
    if (s == NULL) {
        free(dead);
        return NULL;
    }
    /* Live: a merge of (old minus gone) with born. */
    size_t i = 0, g = 0, b = 0, w = 0;
    while (i < old_live || b < n_born) {
        if (i < old_live && g < n_gone && old->live[i] == gone[g]) {
            i++, g++;
            continue;
        }
        if (b == n_born || (i < old_live && old->live[i]->module.start < born[b]->module.start))
            s->live[w++] = old->live[i++];
        else
            s->live[w++] = born[b++];
    }
    /* Dead: a merge of two sorted lists; when too many, keep the newest. */
    snapprof__jit_region_t **out = dead ? dead : s->dead;
    i = 0, g = 0, w = 0;
    while (i < old_dead || g < n_gone) {
        if (g == n_gone || (i < old_dead && old->dead[i]->module.start <= gone[g]->module.start))
            out[w++] = old->dead[i++];
        else
            out[w++] = gone[g++];
    }
    if (few) {
        for (size_t k = 0; k < excess; k++, w--) {
            size_t oldest = 0;
            for (size_t j = 1; j < w; j++)
                if (dead_from(dead[j]) < dead_from(dead[oldest]))
                    oldest = j;
            memmove(&dead[oldest], &dead[oldest + 1], (w - oldest - 1) * sizeof *dead);
        }
        memcpy(s->dead, dead, GRAVEYARD_MAX * sizeof *dead);
        free(dead);
    } else if (dead != NULL) {
        qsort(dead, n_dead, sizeof *dead, cmp_newest_first);
        memcpy(s->dead, dead, GRAVEYARD_MAX * sizeof *dead);
        qsort(s->dead, GRAVEYARD_MAX, sizeof *dead, cmp_start);
        free(dead);
    }
    for (size_t k = 0; k < s->n_dead; k++) {
        uintptr_t len = s->dead[k]->module.limit - s->dead[k]->module.start;
        if (len > s->dead_max_len)
            s->dead_max_len = len;
    }
    return s;
}

/* Makes next the table's snapshot. Under t->lock. */
static void publish(table_t *t, snapshot_t *next)
{
    atomic_store(&g_any, 1);
    retire(atomic_exchange(&t->current, next));
}

/* A new live region, in t's arena; name is copied (name_len bytes). Under
 * t->lock. NULL when out of memory. */
static snapprof__jit_region_t *region_new(table_t *t, uintptr_t start, uintptr_t limit,
                                          const char *name, size_t name_len, const char *path,
                                          const snapprof_jit_layout_t *layout, uint64_t now)
{
    snapprof__jit_region_t *r =
        snapprof__arena_alloc(&t->arena, sizeof *r, _Alignof(snapprof__jit_region_t));
    char *copy = r ? snapprof__arena_alloc(&t->arena, name_len + 1, 1) : NULL;
    if (copy == NULL)
        return NULL; /* the arena keeps what it gave out; nothing points at it */
    memcpy(copy, name, name_len);
    copy[name_len] = '\0';
    r->module.start = start;
    r->module.limit = limit;
    r->module.path = path;
    r->module.build_id = k_region_build_id;
    r->module.kind = SNAPPROF_MODULE_JIT;
    r->module.is_loaded = 1;
    r->name = copy;
    r->layout = *layout;
    r->live_from_ns = now;
    r->dead_from_ns = UINT64_MAX;
    return r;
}

static void region_kill(snapprof__jit_region_t *r, uint64_t when)
{
    __atomic_store_n(&r->dead_from_ns, when, __ATOMIC_RELAXED);
    __atomic_store_n(&r->module.is_loaded, 0, __ATOMIC_RELAXED);
}

/* Index of the first live region that ends above addr. */
static size_t live_index(const snapshot_t *s, uintptr_t addr)
{
    size_t lo = 0, hi = s ? s->n_live : 0;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->live[mid]->module.limit <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Whether [start, limit) overlaps a live region other than except. */
static int overlaps(const snapshot_t *s, uintptr_t start, uintptr_t limit,
                    const snapprof__jit_region_t *except)
{
    for (size_t i = live_index(s, start); s && i < s->n_live; i++) {
        if (s->live[i]->module.start >= limit)
            return 0;
        if (s->live[i] != except)
            return 1;
    }
    return 0;
}

/* The live region that starts exactly at start, or NULL. */
static snapprof__jit_region_t *live_at_start(const snapshot_t *s, uintptr_t start)
{
    size_t i = live_index(s, start);
    return s && i < s->n_live && s->live[i]->module.start == start ? s->live[i] : NULL;
}

/* ------------------------------------------------------------------------ */
/* Public API: layouts and regions                                          */
/* ------------------------------------------------------------------------ */

SNAPPROF_API void snapprof_jit_layout_init_frame_pointer(snapprof_jit_layout_t *layout)
{
    if (layout == NULL)
        return;
    memset(layout, 0, sizeof *layout);
    layout->kind = SNAPPROF_JIT_LAYOUT_FRAME_POINTER;
    layout->saved_fp_offset = SNAPPROF_JIT_FP_UNCHANGED;
}

SNAPPROF_API void snapprof_jit_layout_init_fixed(snapprof_jit_layout_t *layout, uint32_t frame_size,
                                                 uint32_t return_address_offset)
{
    if (layout == NULL)
        return;
    memset(layout, 0, sizeof *layout);
    layout->kind = SNAPPROF_JIT_LAYOUT_FIXED_FRAME;
    layout->frame_size = frame_size;
    layout->return_address_offset = return_address_offset;
    layout->saved_fp_offset = SNAPPROF_JIT_FP_UNCHANGED;
}

/* Checks layout (NULL: frame pointer) and stores the one to use in out. */
static int layout_check(const snapprof_jit_layout_t *layout, snapprof_jit_layout_t *out)
{
    if (layout == NULL) {
        snapprof_jit_layout_init_frame_pointer(out);
        return 0;
    }
    if (layout->kind == SNAPPROF_JIT_LAYOUT_FRAME_POINTER) {
        snapprof_jit_layout_init_frame_pointer(out);
        return 0;
    }
    if (layout->kind != SNAPPROF_JIT_LAYOUT_FIXED_FRAME)
        return -EINVAL;
    /* Stack slots are 8-byte words; the return address lies inside the
     * frame, and so does a saved rbp. */
    if (layout->frame_size % 8 != 0 || layout->return_address_offset % 8 != 0 ||
        layout->return_address_offset > UINT32_MAX - 8 ||
        layout->return_address_offset + 8 > layout->frame_size)
        return -EINVAL;
    if (layout->saved_fp_offset != SNAPPROF_JIT_FP_UNCHANGED &&
        (layout->saved_fp_offset < 0 || layout->saved_fp_offset % 8 != 0 ||
         (uint32_t)layout->saved_fp_offset + 8 > layout->frame_size))
        return -EINVAL;
    *out = *layout;
    return 0;
}

SNAPPROF_API int snapprof_jit_region_register(uintptr_t start, size_t size, const char *name,
                                              const snapprof_jit_layout_t *layout)
{
    snapprof_jit_layout_t lay;
    if (size == 0 || start > UINTPTR_MAX - size || name == NULL || layout_check(layout, &lay) != 0)
        return -EINVAL;
    pthread_mutex_lock(&g_api.lock);
    snapshot_t *old = atomic_load(&g_api.current);
    int rc = 0;
    if (overlaps(old, start, start + size, NULL)) {
        rc = -EEXIST;
    } else {
        snapprof__jit_region_t *r = region_new(&g_api, start, start + size, name, strlen(name),
                                               k_api_path, &lay, mono_ns());
        if (r != NULL)
            r->prev = predecessor(old, NULL, 0, start, start + size);
        snapshot_t *next = r ? snapshot_next(old, NULL, 0, &r, 1) : NULL;
        if (next == NULL)
            rc = -ENOMEM;
        else
            publish(&g_api, next);
    }
    pthread_mutex_unlock(&g_api.lock);
    if (rc == 0)
        atomic_fetch_add(&g_registered, 1);
    return rc;
}

SNAPPROF_API int snapprof_jit_region_move(uintptr_t from, uintptr_t to)
{
    pthread_mutex_lock(&g_api.lock);
    snapshot_t *old = atomic_load(&g_api.current);
    snapprof__jit_region_t *r = live_at_start(old, from);
    int rc = 0;
    if (r == NULL) {
        rc = -ENOENT;
    } else {
        uintptr_t size = r->module.limit - r->module.start;
        if (to > UINTPTR_MAX - size) {
            rc = -EINVAL;
        } else if (overlaps(old, to, to + size, r)) {
            rc = -EEXIST;
        } else {
            uint64_t now = mono_ns();
            snapprof__jit_region_t *moved = region_new(
                &g_api, to, to + size, r->name, strlen(r->name), k_api_path, &r->layout, now);
            if (moved != NULL)
                moved->prev = predecessor(old, &r, 1, to, to + size);
            snapshot_t *next = moved ? snapshot_next(old, &r, 1, &moved, 1) : NULL;
            if (next == NULL) {
                rc = -ENOMEM;
            } else {
                region_kill(r, now);
                publish(&g_api, next);
            }
        }
    }
    pthread_mutex_unlock(&g_api.lock);
    if (rc == 0)
        atomic_fetch_add(&g_moved, 1);
    return rc;
}

SNAPPROF_API int snapprof_jit_region_unregister(uintptr_t start)
{
    pthread_mutex_lock(&g_api.lock);
    snapshot_t *old = atomic_load(&g_api.current);
    snapprof__jit_region_t *r = live_at_start(old, start);
    int rc = 0;
    if (r == NULL) {
        rc = -ENOENT;
    } else {
        snapshot_t *next = snapshot_next(old, &r, 1, NULL, 0);
        if (next == NULL) {
            rc = -ENOMEM;
        } else {
            region_kill(r, mono_ns());
            publish(&g_api, next);
        }
    }
    pthread_mutex_unlock(&g_api.lock);
    if (rc == 0)
        atomic_fetch_add(&g_unregistered, 1);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Perf maps                                                                */
/* ------------------------------------------------------------------------ */

/* All of it under g_perf.lock, except g_perf_checked_ns. */
static struct {
    int configured; /* snapprof_jit_perf_map_configure() was called */
    int enabled;    /* 0 after configure("") */
    char *path;     /* configured path (malloc'd), NULL: the default */
    snapprof_jit_layout_t layout;
    const char *module_path; /* path of the file in use, in g_perf.arena */
    pid_t pid;               /* getpid() when the default path was made */
    int have_file;
    dev_t dev;
    ino_t ino;
    uint64_t offset;  /* bytes consumed: up to the last newline read */
    int skipping;     /* inside an overlong line */
    uint64_t seen_ns; /* when the file last held nothing unread */
} g_pm;
static _Atomic uint64_t g_perf_checked_ns; /* last check, mono ns; 0: check at once */

typedef struct pm_line {
    uintptr_t start, limit;
    const char *name;
    size_t name_len;
    size_t seq; /* 0 for a region already in the table, else the line's order */
    snapprof__jit_region_t *old;
    int dead;
} pm_line_t;

typedef struct pm_vec {
    pm_line_t *v;
    size_t n, cap;
} pm_vec_t;

static int pm_push(pm_vec_t *pv, const pm_line_t *l)
{
    if (pv->n == pv->cap) {
        size_t cap = pv->cap ? pv->cap * 2 : 256;
        pm_line_t *v = realloc(pv->v, cap * sizeof *v);
        if (v == NULL)
            return -ENOMEM;
        pv->v = v;
        pv->cap = cap;
    }
    pv->v[pv->n++] = *l;
    return 0;
}

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Parses hex at *p (0x optional) up to a blank; advances *p. */
static int parse_hex(const char **p, const char *end, uintptr_t *out)
{
    const char *s = *p;
    if (end - s >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
        s += 2;
    uintptr_t v = 0;
    const char *digits = s;
    for (; s < end && hex_digit(*s) >= 0; s++) {
        if (v > (UINTPTR_MAX >> 4))
            return -1;
        v = (v << 4) | (uintptr_t)hex_digit(*s);
    }
    if (s == digits || (s < end && *s != ' ' && *s != '\t'))
        return -1;
    *p = s;
    *out = v;
    return 0;
}

/* Parses one line (without its newline) "START SIZE name". */
static int parse_line(const char *s, size_t len, pm_line_t *out)
{
    const char *end = s + len;
    if (len > 0 && end[-1] == '\r')
        end--;
    if (memchr(s, '\0', (size_t)(end - s)) != NULL)
        return -1;
    uintptr_t start, size;
    while (s < end && (*s == ' ' || *s == '\t'))
        s++;
    if (parse_hex(&s, end, &start) != 0)
        return -1;
    while (s < end && (*s == ' ' || *s == '\t'))
        s++;
    if (parse_hex(&s, end, &size) != 0 || size == 0 || start > UINTPTR_MAX - size)
        return -1;
    while (s < end && (*s == ' ' || *s == '\t'))
        s++;
    while (end > s && (end[-1] == ' ' || end[-1] == '\t'))
        end--;
    if (s == end)
        return -1;
    memset(out, 0, sizeof *out);
    out->start = start;
    out->limit = start + size;
    out->name = s;
    out->name_len = (size_t)(end - s);
    return 0;
}

static int cmp_line(const void *a, const void *b)
{
    const pm_line_t *x = a, *y = b;
    if (x->start != y->start)
        return x->start < y->start ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Puts the parsed lines into the table: a line replaces every older region
 * or line it overlaps (what a JIT that reuses memory means by writing it).
 * With reset, every region in the table goes. Under g_perf.lock. */
static int pm_apply(pm_vec_t *lines, int reset, uint64_t boundary)
{
    snapshot_t *old = atomic_load(&g_perf.current);
    size_t n_new = lines->n;
    if (!reset && old != NULL) {
        for (size_t i = 0; i < old->n_live; i++) {
            snapprof__jit_region_t *r = old->live[i];
            pm_line_t l = {.start = r->module.start, .limit = r->module.limit, .old = r};
            if (pm_push(lines, &l) != 0)
                return -ENOMEM;
        }
    }
    pm_line_t *v = lines->v;
    size_t n = lines->n;
    if (n > 0) /* v is NULL then, which qsort must not be given */
        qsort(v, n, sizeof *v, cmp_line);
    /* The regions overlapping v[i] from above start below its limit; of
     * every overlapping pair the older one goes. Overlaps are rare, so this
     * is linear in practice. */
    uint64_t replaced = 0;
    for (size_t i = 0; i < n; i++) {
        for (size_t j = i + 1; j < n && v[j].start < v[i].limit; j++) {
            pm_line_t *older = v[i].seq < v[j].seq ? &v[i] : &v[j];
            replaced += !older->dead;
            older->dead = 1;
        }
    }
    size_t n_gone = 0, n_born = 0;
    for (size_t i = 0; i < n; i++) {
        if (v[i].old != NULL)
            n_gone += v[i].dead;
        else
            n_born += !v[i].dead;
    }
    if (reset && old != NULL)
        n_gone = old->n_live;
    snapprof__jit_region_t **gone = malloc((n_gone + n_born + 1) * sizeof *gone);
    if (gone == NULL)
        return -ENOMEM;
    snapprof__jit_region_t **born = gone + n_gone;
    size_t g = 0, b = 0;
    if (reset && old != NULL)
        for (; g < old->n_live; g++)
            gone[g] = old->live[g];
    for (size_t i = 0; i < n; i++) {
        if (v[i].old != NULL) {
            if (v[i].dead)
                gone[g++] = v[i].old;
        } else if (!v[i].dead) {
            born[b] = region_new(&g_perf, v[i].start, v[i].limit, v[i].name, v[i].name_len,
                                 g_pm.module_path, &g_pm.layout, boundary);
            if (born[b] == NULL) {
                free(gone);
                return -ENOMEM;
            }
            b++;
        }
    }
    /* Predecessors once every region going away is known (gone is in start
     * order, as the old regions came in v). */
    for (size_t k = 0; k < n_born; k++)
        born[k]->prev =
            predecessor(old, gone, n_gone, born[k]->module.start, born[k]->module.limit);
    snapshot_t *next = snapshot_next(old, gone, n_gone, born, n_born);
    if (next == NULL) {
        free(gone);
        return -ENOMEM;
    }
    for (size_t k = 0; k < n_gone; k++)
        region_kill(gone[k], boundary);
    free(gone);
    publish(&g_perf, next);
    atomic_fetch_add(&g_perf_lines, n_new);
    atomic_fetch_add(&g_perf_replaced, replaced);
    return 0;
}

/* Drops every perf map region. Under g_perf.lock. */
static void pm_drop_all(uint64_t now)
{
    pm_vec_t none = {0};
    if (atomic_load(&g_perf.current) != NULL)
        pm_apply(&none, 1, now);
    free(none.v);
    g_pm.have_file = 0;
    g_pm.offset = 0;
    g_pm.skipping = 0;
}

/* Parses the complete lines of buf[0, len) into lines; returns how many
 * bytes it consumed (through the last newline, or all of an overlong line
 * being skipped). */
static size_t pm_parse(const char *buf, size_t len, pm_vec_t *lines, uint64_t *bad, int *nomem)
{
    size_t at = 0;
    while (at < len) {
        const char *nl = memchr(buf + at, '\n', len - at);
        if (g_pm.skipping) {
            if (nl == NULL)
                return len;
            g_pm.skipping = 0;
            at = (size_t)(nl - buf) + 1;
            continue;
        }
        if (nl == NULL) {
            if (len - at > PERF_MAP_MAX_LINE) {
                (*bad)++;
                g_pm.skipping = 1;
                return len;
            }
            break; /* a line still being written */
        }
        size_t line_len = (size_t)(nl - (buf + at));
        pm_line_t l;
        if (line_len > PERF_MAP_MAX_LINE || parse_line(buf + at, line_len, &l) != 0) {
            (*bad)++;
        } else {
            l.seq = lines->n + 1;
            if (pm_push(lines, &l) != 0) {
                *nomem = 1;
                return at;
            }
        }
        at = (size_t)(nl - buf) + 1;
    }
    return at;
}

/* Reads what the perf map gained since it was last read. Under
 * g_perf.lock. */
static void pm_refresh_locked(void)
{
    uint64_t now = mono_ns();
    atomic_store(&g_perf_checked_ns, now);
    if (!g_pm.enabled)
        return;
    char def[64];
    const char *path = g_pm.path;
    if (path == NULL) {
        pid_t pid = getpid();
        if (g_pm.have_file && pid != g_pm.pid)
            pm_drop_all(now); /* a forked child: its parent's map is not ours */
        g_pm.pid = pid;
        snprintf(def, sizeof def, "/tmp/perf-%d.map", (int)pid);
        path = def;
    }
    struct stat st;
    if (g_pm.have_file && stat(path, &st) == 0 && st.st_dev == g_pm.dev && st.st_ino == g_pm.ino &&
        (uint64_t)st.st_size == g_pm.offset) {
        g_pm.seen_ns = now; /* the usual case: nothing new, one syscall */
        return;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) != 0) {
        /* Not there (yet, or any more): what was read still describes the
         * code that was there. */
        if (fd >= 0)
            close(fd);
        g_pm.seen_ns = now;
        return;
    }
    int reset = 0;
    if (g_pm.have_file &&
        (st.st_dev != g_pm.dev || st.st_ino != g_pm.ino || (uint64_t)st.st_size < g_pm.offset)) {
        /* Replaced or truncated: start over with what it says now. */
        reset = atomic_load(&g_perf.current) != NULL;
        g_pm.offset = 0;
        g_pm.skipping = 0;
    }
    if (!g_pm.have_file || g_pm.module_path == NULL || strcmp(g_pm.module_path, path) != 0) {
        const char *mp = snapprof__arena_strdup(&g_perf.arena, path);
        if (mp == NULL) {
            close(fd);
            return;
        }
        g_pm.module_path = mp;
    }
    /* Lines read now were written after the last look found nothing new:
     * that is when their code (and the end of what they replace) is dated
     * from. Before the first look, from the start. */
    uint64_t boundary = g_pm.seen_ns;
    g_pm.have_file = 1;
    g_pm.dev = st.st_dev;
    g_pm.ino = st.st_ino;
    if ((uint64_t)st.st_size == g_pm.offset && !reset) {
        close(fd);
        g_pm.seen_ns = now;
        return;
    }
    int did_read = 0;
    char *buf = NULL;
    size_t buf_size = 0;
    for (;;) {
        size_t want = PERF_MAP_CHUNK;
        if ((uint64_t)st.st_size > g_pm.offset && (uint64_t)st.st_size - g_pm.offset < want)
            want = (size_t)((uint64_t)st.st_size - g_pm.offset) + 1;
        /* Only as much as there is to read: a JIT adds a few lines at a
         * time, and a 16 MiB buffer for each look costs a fresh mapping
         * (and, under ASan, 2 MiB of shadow to poison). */
        if (want > buf_size) {
            free(buf);
            if ((buf = malloc(want)) == NULL)
                break;
            buf_size = want;
        }
        size_t got = 0;
        while (got < want) {
            ssize_t r = pread(fd, buf + got, want - got, (off_t)(g_pm.offset + got));
            if (r < 0 && errno == EINTR)
                continue;
            if (r <= 0)
                break;
            got += (size_t)r;
        }
        pm_vec_t lines = {0};
        uint64_t bad = 0;
        int nomem = 0, skipping = g_pm.skipping;
        size_t used = pm_parse(buf, got, &lines, &bad, &nomem);
        int rc = (lines.n > 0 || reset) ? pm_apply(&lines, reset, boundary) : 0;
        free(lines.v);
        if (rc != 0) {
            /* Nothing consumed: the same lines are read on the next try,
             * and counted then. */
            g_pm.skipping = skipping;
            break;
        }
        atomic_fetch_add(&g_perf_bad, bad);
        reset = 0;
        did_read |= used > 0;
        g_pm.offset += used;
        if (nomem || used == 0 || got < want)
            break;
    }
    free(buf);
    close(fd);
    if (did_read)
        atomic_fetch_add(&g_perf_reads, 1);
    g_pm.seen_ns = now;
}

/* Reads new perf map lines if the last check is older than interval_ns. */
static void pm_maybe_refresh(uint64_t interval_ns)
{
    if (mono_ns() - atomic_load(&g_perf_checked_ns) < interval_ns)
        return;
    pthread_mutex_lock(&g_perf.lock);
    if (!g_pm.configured) {
        g_pm.configured = 1;
        g_pm.enabled = 1;
        snapprof_jit_layout_init_frame_pointer(&g_pm.layout);
    }
    if (mono_ns() - atomic_load(&g_perf_checked_ns) >= interval_ns)
        pm_refresh_locked();
    pthread_mutex_unlock(&g_perf.lock);
}

SNAPPROF_API int snapprof_jit_perf_map_configure(const char *path,
                                                 const snapprof_jit_layout_t *layout)
{
    snapprof_jit_layout_t lay;
    if (layout_check(layout, &lay) != 0)
        return -EINVAL;
    char *copy = NULL;
    if (path != NULL && path[0] != '\0' && (copy = strdup(path)) == NULL)
        return -ENOMEM;
    pthread_mutex_lock(&g_perf.lock);
    pm_drop_all(mono_ns());
    free(g_pm.path);
    g_pm.path = copy;
    g_pm.configured = 1;
    g_pm.enabled = path == NULL || path[0] != '\0';
    g_pm.layout = lay;
    g_pm.seen_ns = 0;
    atomic_store(&g_perf_checked_ns, 0);
    pthread_mutex_unlock(&g_perf.lock);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Lookups and statistics                                                   */
/* ------------------------------------------------------------------------ */

const snapprof__jit_region_t *snapprof__jit_region_of(const snapprof_module_t *module)
{
    if (module == NULL || module->kind != SNAPPROF_MODULE_JIT ||
        module->build_id != k_region_build_id)
        return NULL;
    return (const snapprof__jit_region_t *)module;
}

static const snapprof_module_t *find_in(table_t *t, uintptr_t addr, uint64_t when_ns)
{
    unsigned slot = read_begin();
    snapprof__jit_region_t *r = table_find(t, addr, when_ns);
    read_end(slot);
    return r ? &r->module : NULL;
}

const snapprof_module_t *snapprof__jit_find(uintptr_t addr, uint64_t when_ns)
{
    if (!atomic_load_explicit(&g_any, memory_order_relaxed))
        return NULL;
    const snapprof_module_t *m = find_in(&g_api, addr, when_ns);
    if (m != NULL)
        return m;
    m = find_in(&g_perf, addr, when_ns);
    if (m != NULL && mono_ns() - atomic_load(&g_perf_checked_ns) >= PERF_MAP_HIT_CHECK_NS) {
        /* A JIT that reuses memory writes a new line for the same address:
         * a hit is worth a look at the file too, now and then. */
        pm_maybe_refresh(PERF_MAP_HIT_CHECK_NS);
        m = find_in(&g_perf, addr, when_ns);
    }
    return m;
}

const snapprof_module_t *snapprof__jit_find_after_miss(uintptr_t addr, uint64_t when_ns)
{
    pm_maybe_refresh(PERF_MAP_MISS_CHECK_NS);
    if (!atomic_load_explicit(&g_any, memory_order_relaxed))
        return NULL;
    return find_in(&g_perf, addr, when_ns);
}

void snapprof__jit_perf_map_refresh_now(void)
{
    pthread_mutex_lock(&g_perf.lock);
    pm_refresh_locked();
    pthread_mutex_unlock(&g_perf.lock);
}

void snapprof__jit_perf_map_forget(void)
{
    pthread_mutex_lock(&g_perf.lock);
    free(atomic_exchange(&g_perf.current, NULL));
    /* With no reader about, two rounds free every snapshot retired so far. */
    retire(NULL);
    retire(NULL);
    snapprof__arena_release(&g_perf.arena);
    free(g_pm.path);
    memset(&g_pm, 0, sizeof g_pm);
    atomic_store(&g_perf_checked_ns, 0);
    pthread_mutex_unlock(&g_perf.lock);
}

SNAPPROF_API int snapprof_jit_get_stats(snapprof_jit_stats_t *out)
{
    if (out == NULL)
        return -EINVAL;
    memset(out, 0, sizeof *out);
    unsigned slot = read_begin();
    snapshot_t *a = atomic_load(&g_api.current), *p = atomic_load(&g_perf.current);
    out->regions_live = a ? a->n_live : 0;
    out->perf_map_regions = p ? p->n_live : 0;
    read_end(slot);
    out->regions_registered = atomic_load(&g_registered);
    out->regions_unregistered = atomic_load(&g_unregistered);
    out->regions_moved = atomic_load(&g_moved);
    out->perf_map_reads = atomic_load(&g_perf_reads);
    out->perf_map_lines = atomic_load(&g_perf_lines);
    out->perf_map_bad_lines = atomic_load(&g_perf_bad);
    out->perf_map_replaced = atomic_load(&g_perf_replaced);
    return 0;
}
