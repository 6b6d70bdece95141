/* JIT code regions for the module cache: the tables of regions, published
 * to lock-free readers as copy-on-write snapshots, and the regions
 * registered through <snapprof/jit.h>. The perf map reader
 * (jit_perf_map.c) keeps its regions in a table of its own made here, and
 * jit_lookup.c looks in both; this file calls neither.
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
#include "common/arena.h"
#include "common/clock.h"
#include "common/fork_resets.h"
#include "module_cache/jit_regions.h"
#include "module_cache/jit_regions_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Regions that went away and are still searched for late unwinds, per
 * table. Unwinding follows the copy by microseconds, by a second at worst on
 * a stalled VM; 1024 covers that at any sane rate of code turnover. */
#define GRAVEYARD_MAX 1024

/* Every region's build_id points here, which tells our JIT modules from
 * ones that others made by hand (a distinct object, never merged with a
 * string literal). */
static const char k_region_build_id[1] = "";
static const char k_api_path[] = "[jit]";

/* ------------------------------------------------------------------------ */
/* Snapshots and their reclamation                                          */
/* ------------------------------------------------------------------------ */

static _Atomic uint64_t g_epoch;
static _Atomic uint64_t g_readers[2];
static pthread_mutex_t g_retire_lock = PTHREAD_MUTEX_INITIALIZER;
static snapshot_t *g_retired; /* under g_retire_lock */

/* Set once any table has held a region, so that processes without JIT code
 * pay one relaxed load per lookup (snapprof__jit_any() in the header). */
atomic_int snapprof__jit_any_flag;

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
void snapprof__jit_retire(snapshot_t *old)
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

static table_t g_api = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* The other tables the fork() child handler puts right (the perf map's),
 * in the order they were watched: table is stored last, so a child
 * forked half-way through snapprof__jit_table_watch() sees NULL there (and
 * that table's lock was not taken yet). */
#define WATCHED_MAX 4
static struct {
    _Atomic(table_t *) table;
    snapprof__fork_lock_t note;
    void (*reset)(void);
} g_watched[WATCHED_MAX];
static atomic_size_t g_n_watched;

/* ------------------------------------------------------------------------ */
/* fork()                                                                   */
/* ------------------------------------------------------------------------ */

/* Takes t's lock anew in a fork() child that found it held by a thread
 * that is not there (fork_resets.h). The published snapshot is whole (it
 * changes by one exchange); the arena may be half-way through an
 * allocation, so the child starts a new one and leaves the old allocated
 * (the snapshot's regions live in it). Returns 1 when it was held. */
static int table_fork_child(table_t *t)
{
    if (pthread_mutex_trylock(&t->lock) == 0) {
        pthread_mutex_unlock(&t->lock);
        return 0;
    }
    pthread_mutex_init(&t->lock, NULL);
    memset(&t->arena, 0, sizeof t->arena);
    return 1;
}

/* The child has only the thread that forked, which is not inside a lookup:
 * readers that other threads counted in an epoch never leave, and would
 * keep every later snapshot from being freed; the counts start from 0. A
 * retirement cut short by the fork may have left g_retired half-changed:
 * the child forgets it (those snapshots stay allocated). */
static void fork_child(void)
{
    if (table_fork_child(&g_api))
        snapprof__fork_reset_note(SNAPPROF__FORK_JIT_API);
    size_t n_watched = atomic_load(&g_n_watched);
    for (size_t i = 0; i < n_watched && i < WATCHED_MAX; i++) {
        table_t *t = atomic_load(&g_watched[i].table);
        if (t != NULL && table_fork_child(t)) {
            if (g_watched[i].reset != NULL)
                g_watched[i].reset();
            snapprof__fork_reset_note(g_watched[i].note);
        }
    }
    if (pthread_mutex_trylock(&g_retire_lock) == 0) {
        pthread_mutex_unlock(&g_retire_lock);
    } else {
        pthread_mutex_init(&g_retire_lock, NULL);
        g_retired = NULL;
        snapprof__fork_reset_note(SNAPPROF__FORK_JIT_RETIRE);
    }
    if (atomic_load(&g_readers[0]) != 0 || atomic_load(&g_readers[1]) != 0) {
        atomic_store(&g_readers[0], 0);
        atomic_store(&g_readers[1], 0);
        snapprof__fork_reset_note(SNAPPROF__FORK_JIT_READERS);
    }
}

static pthread_once_t g_fork_once = PTHREAD_ONCE_INIT;

static void fork_once(void)
{
    pthread_atfork(NULL, NULL, fork_child);
}

void snapprof__jit_fork_watch(void)
{
    pthread_once(&g_fork_once, fork_once);
}

void snapprof__jit_table_watch(table_t *t, snapprof__fork_lock_t note, void (*reset)(void))
{
    snapprof__jit_fork_watch();
    size_t i = atomic_fetch_add(&g_n_watched, 1);
    if (i >= WATCHED_MAX)
        abort(); /* a new table: make WATCHED_MAX larger */
    g_watched[i].note = note;
    g_watched[i].reset = reset;
    atomic_store(&g_watched[i].table, t);
}

static _Atomic uint64_t g_registered, g_unregistered, g_moved;

static uint64_t dead_from(const snapprof__jit_region_t *r)
{
    return __atomic_load_n(&r->dead_from_ns, __ATOMIC_RELAXED);
}

static int alive_at(const snapprof__jit_region_t *r, uint64_t when)
{
    return r->live_from_ns <= when && when < dead_from(r);
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

/* The live region holding addr, or NULL. */
static snapprof__jit_region_t *find_live(const snapshot_t *s, uintptr_t addr)
{
    size_t i = live_index(s, addr);
    return i < s->n_live && s->live[i]->module.start <= addr ? s->live[i] : NULL;
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
const snapprof__jit_region_t *snapprof__jit_predecessor(const snapshot_t *s,
                                                        snapprof__jit_region_t *const *going,
                                                        size_t n_going, uintptr_t start,
                                                        uintptr_t limit)
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
snapshot_t *snapprof__jit_snapshot_next(const snapshot_t *old, snapprof__jit_region_t *const *gone,
                                        size_t n_gone, snapprof__jit_region_t *const *born,
                                        size_t n_born)
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
void snapprof__jit_publish(table_t *t, snapshot_t *next)
{
    atomic_store(&snapprof__jit_any_flag, 1);
    snapprof__jit_retire(atomic_exchange(&t->current, next));
}

/* A new live region, in t's arena; name is copied (name_len bytes). Under
 * t->lock. NULL when out of memory. */
snapprof__jit_region_t *snapprof__jit_region_new(table_t *t, uintptr_t start, uintptr_t limit,
                                                 const char *name, size_t name_len,
                                                 const char *path,
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

void snapprof__jit_region_kill(snapprof__jit_region_t *r, uint64_t when)
{
    __atomic_store_n(&r->dead_from_ns, when, __ATOMIC_RELAXED);
    __atomic_store_n(&r->module.is_loaded, 0, __ATOMIC_RELAXED);
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

/* A layout of this kind and nothing else (saved fp unchanged). */
static void layout_init(snapprof_jit_layout_t *layout, snapprof_jit_layout_kind_t kind)
{
    memset(layout, 0, sizeof *layout);
    layout->kind = kind;
    layout->saved_fp_offset = SNAPPROF_JIT_FP_UNCHANGED;
}

SNAPPROF_API void snapprof_jit_layout_init_frame_pointer(snapprof_jit_layout_t *layout)
{
    if (layout != NULL)
        layout_init(layout, SNAPPROF_JIT_LAYOUT_FRAME_POINTER);
}

SNAPPROF_API void snapprof_jit_layout_init_fixed(snapprof_jit_layout_t *layout, uint32_t frame_size,
                                                 uint32_t return_address_offset)
{
    if (layout == NULL)
        return;
    layout_init(layout, SNAPPROF_JIT_LAYOUT_FIXED_FRAME);
    layout->frame_size = frame_size;
    layout->return_address_offset = return_address_offset;
}

SNAPPROF_API void snapprof_jit_layout_init_cpython(snapprof_jit_layout_t *layout)
{
    if (layout != NULL)
        layout_init(layout, SNAPPROF_JIT_LAYOUT_CPYTHON_TRAMPOLINE);
}

/* CPython's Python/asm_trampoline.S on x86-64, as copied for each code
 * object by Python/perf_trampoline.c; the perf map line gives the size of
 * one copy. A leading endbr64 (4 bytes) when CPython was built for CET. */
static const snapprof__jit_trampoline_t k_trampolines[] = {
    /* sub $8,%rsp (4); call *%rcx (2); add $8,%rsp (4); ret */
    {11, 4, 6, 0, 1u << 0 | 1u << 4 | 1u << 6 | 1u << 10},
    {15, 8, 10, 0, 1u << 0 | 1u << 4 | 1u << 8 | 1u << 10 | 1u << 14},
    /* push %rbp; mov %rsp,%rbp (3); call *%rcx (2); pop %rbp; ret */
    {8, 1, 6, 1, 1u << 0 | 1u << 1 | 1u << 4 | 1u << 6 | 1u << 7},
    {12, 5, 10, 1, 1u << 0 | 1u << 4 | 1u << 5 | 1u << 8 | 1u << 10 | 1u << 11},
};

const snapprof__jit_trampoline_t *snapprof__jit_trampoline_shape(uintptr_t size)
{
    for (size_t i = 0; i < sizeof k_trampolines / sizeof k_trampolines[0]; i++)
        if (k_trampolines[i].size == size)
            return &k_trampolines[i];
    return NULL;
}

/* Checks layout (NULL: frame pointer) and stores the one to use in out. */
int snapprof__jit_layout_check(const snapprof_jit_layout_t *layout, snapprof_jit_layout_t *out)
{
    if (layout == NULL) {
        snapprof_jit_layout_init_frame_pointer(out);
        return 0;
    }
    if (layout->kind == SNAPPROF_JIT_LAYOUT_FRAME_POINTER) {
        snapprof_jit_layout_init_frame_pointer(out);
        return 0;
    }
    if (layout->kind == SNAPPROF_JIT_LAYOUT_CPYTHON_TRAMPOLINE) {
        snapprof_jit_layout_init_cpython(out);
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
    if (size == 0 || start > UINTPTR_MAX - size || name == NULL ||
        snapprof__jit_layout_check(layout, &lay) != 0 ||
        (lay.kind == SNAPPROF_JIT_LAYOUT_CPYTHON_TRAMPOLINE &&
         snapprof__jit_trampoline_shape(size) == NULL))
        return -EINVAL;
    snapprof__jit_fork_watch();
    pthread_mutex_lock(&g_api.lock);
    snapshot_t *old = atomic_load(&g_api.current);
    int rc = 0;
    if (overlaps(old, start, start + size, NULL)) {
        rc = -EEXIST;
    } else {
        snapprof__jit_region_t *r =
            snapprof__jit_region_new(&g_api, start, start + size, name, strlen(name), k_api_path,
                                     &lay, snapprof__monotonic_ns());
        if (r != NULL)
            r->prev = snapprof__jit_predecessor(old, NULL, 0, start, start + size);
        snapshot_t *next = r ? snapprof__jit_snapshot_next(old, NULL, 0, &r, 1) : NULL;
        if (next == NULL)
            rc = -ENOMEM;
        else
            snapprof__jit_publish(&g_api, next);
    }
    pthread_mutex_unlock(&g_api.lock);
    if (rc == 0)
        atomic_fetch_add(&g_registered, 1);
    return rc;
}

/* Takes the live region that starts at start out of the table and, with
 * to, puts a copy of it at *to (a move; without, an unregister); counts
 * the call in *done when it succeeds. The old region dies when the copy
 * is born, or at the time it is taken out. */
static int take_region(uintptr_t start, const uintptr_t *to, _Atomic uint64_t *done)
{
    snapprof__jit_fork_watch();
    pthread_mutex_lock(&g_api.lock);
    snapshot_t *old = atomic_load(&g_api.current);
    snapprof__jit_region_t *r = live_at_start(old, start);
    snapprof__jit_region_t *moved = NULL;
    uint64_t now = 0;
    int rc = 0;
    if (r == NULL) {
        rc = -ENOENT;
    } else if (to != NULL) {
        uintptr_t size = r->module.limit - r->module.start;
        if (*to > UINTPTR_MAX - size) {
            rc = -EINVAL;
        } else if (overlaps(old, *to, *to + size, r)) {
            rc = -EEXIST;
        } else {
            now = snapprof__monotonic_ns();
            moved = snapprof__jit_region_new(&g_api, *to, *to + size, r->name, strlen(r->name),
                                             k_api_path, &r->layout, now);
            if (moved == NULL)
                rc = -ENOMEM;
            else
                moved->prev = snapprof__jit_predecessor(old, &r, 1, *to, *to + size);
        }
    }
    if (rc == 0) {
        snapshot_t *next = snapprof__jit_snapshot_next(old, &r, 1, &moved, moved != NULL);
        if (next == NULL) {
            rc = -ENOMEM;
        } else {
            snapprof__jit_region_kill(r, now != 0 ? now : snapprof__monotonic_ns());
            snapprof__jit_publish(&g_api, next);
        }
    }
    pthread_mutex_unlock(&g_api.lock);
    if (rc == 0)
        atomic_fetch_add(done, 1);
    return rc;
}

SNAPPROF_API int snapprof_jit_region_move(uintptr_t from, uintptr_t to)
{
    return take_region(from, &to, &g_moved);
}

SNAPPROF_API int snapprof_jit_region_unregister(uintptr_t start)
{
    return take_region(start, NULL, &g_unregistered);
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

const snapprof_module_t *snapprof__jit_table_lookup(table_t *t, uintptr_t addr, uint64_t when_ns)
{
    unsigned slot = read_begin();
    snapprof__jit_region_t *r = table_find(t, addr, when_ns);
    read_end(slot);
    return r ? &r->module : NULL;
}

const snapprof_module_t *snapprof__jit_api_find(uintptr_t addr, uint64_t when_ns)
{
    return snapprof__jit_table_lookup(&g_api, addr, when_ns);
}

size_t snapprof__jit_table_live(table_t *t)
{
    unsigned slot = read_begin();
    snapshot_t *s = atomic_load(&t->current);
    size_t n = s ? s->n_live : 0;
    read_end(slot);
    return n;
}

void snapprof__jit_api_stats(snapprof_jit_stats_t *out)
{
    out->regions_live = snapprof__jit_table_live(&g_api);
    out->regions_registered = atomic_load(&g_registered);
    out->regions_unregistered = atomic_load(&g_unregistered);
    out->regions_moved = atomic_load(&g_moved);
}
