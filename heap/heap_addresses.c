/* The set of live sampled addresses: lock-free open addressing (linear
 * probing over one word per slot), looked up on every free while it is not
 * empty. Chromium's LockFreeAddressHashSet is the model for what it must
 * do (a lock-free lookup on every free; growth by doubling from the
 * sampler, never from the hook; old tables leaked rather than freed under
 * a lookup); the code is ours and differs: inserts and removes are
 * lock-free too (compare-and-swap on the slot's word), since sampled
 * allocations on many threads insert without a lock.
 *
 * A slot holds EMPTY, an address, or TOMB (a removed address; slots never
 * go back to EMPTY while a table is in use, so a lookup may stop at the
 * first EMPTY). The set is a multiset: an address sampled again before its
 * free was seen is inserted again, and each free removes one entry. The
 * drain keeps the truth (its map of live blocks): an entry left over (a
 * free that went another way) makes some later free of that address a
 * free record the drain does not know, which it ignores.
 *
 * Growth. Tombstones accumulate, so a table that is half taken is
 * rebuilt by the sampling side into a fresh one, twice the size when more
 * than a quarter of it is live: the new table becomes the one inserts go
 * to (inserters announce themselves on the table they use, and the mover
 * waits until none is left on the old one), then every address of the
 * old table is copied into the new and only then tombstoned in the old.
 * A remove walks the chain of tables from the oldest still searched
 * (old -> new), so it finds an address before, during and after its move:
 * removers that find it in the old table win its slot there, and the
 * mover's copy is then tombstoned again. Tables are never freed: each size
 * has two, used in turn, so a remove that was preempted in an old table
 * stays memory-safe; emptying a table for reuse bumps a global count (a
 * seqlock), and a remove that did not find its address while it moved
 * looks again from the start of the chain. */
#include "heap/heap_internal.h"

#include <errno.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define EMPTY ((uintptr_t)0)
#define TOMB (~(uintptr_t)0)

typedef struct table {
    size_t cap; /* a power of two */
    unsigned shift;
    _Atomic size_t used;        /* slots no longer EMPTY */
    _Atomic uint32_t inserters; /* inserts running on this table */
    _Atomic(struct table *) next;
    _Atomic uintptr_t keys[];
} table_t;

/* Two tables per size, used in turn: log2 of the capacity indexes it. */
#define MIN_SHIFT 14 /* 16384 slots, 128 KiB */
#define MAX_SHIFT 30
static table_t *g_tables[MAX_SHIFT + 1][2];

static _Atomic(table_t *) g_search; /* the oldest table removes look in */
static _Atomic(table_t *) g_insert; /* the table inserts go to */
_Atomic long snapprof__heap_live;   /* entries in the set (heap_internal.h) */
#define g_live snapprof__heap_live
static _Atomic uint64_t g_recycles; /* odd while a table is emptied for reuse */

static size_t hash(const table_t *t, uintptr_t a)
{
    return (size_t)(((uint64_t)a * 0x9e3779b97f4a7c15ull) >> t->shift);
}

/* Inserts a when the table has room. Returns the slot, or -1. */
static long table_insert_limit(table_t *t, uintptr_t a, size_t limit)
{
    size_t mask = t->cap - 1;
    size_t i = hash(t, a);
    for (size_t n = 0; n < t->cap; n++, i = (i + 1) & mask) {
        uintptr_t k = atomic_load_explicit(&t->keys[i], memory_order_relaxed);
        if (k == TOMB) {
            if (atomic_compare_exchange_strong_explicit(&t->keys[i], &k, a, memory_order_release,
                                                        memory_order_relaxed))
                return (long)i;
        }
        if (k == EMPTY) {
            /* A new slot taken: refused past seven eighths, when probes
             * grow long; the sampling side rebuilds at one half. */
            if (atomic_load_explicit(&t->used, memory_order_relaxed) >= limit)
                return -1;
            if (atomic_compare_exchange_strong_explicit(&t->keys[i], &k, a, memory_order_release,
                                                        memory_order_relaxed)) {
                atomic_fetch_add_explicit(&t->used, 1, memory_order_relaxed);
                return (long)i;
            }
            if (k == TOMB && atomic_compare_exchange_strong_explicit(
                                 &t->keys[i], &k, a, memory_order_release, memory_order_relaxed))
                return (long)i;
        }
    }
    return -1;
}

static long table_insert(table_t *t, uintptr_t a)
{
    return table_insert_limit(t, a, t->cap - t->cap / 8);
}

/* Tombstones one entry of a. Returns 1 when it did. */
static int table_remove(table_t *t, uintptr_t a)
{
    size_t mask = t->cap - 1;
    size_t i = hash(t, a);
    for (size_t n = 0; n < t->cap; n++, i = (i + 1) & mask) {
        uintptr_t k = atomic_load_explicit(&t->keys[i], memory_order_acquire);
        if (k == EMPTY)
            return 0;
        if (k == a && atomic_compare_exchange_strong_explicit(
                          &t->keys[i], &k, TOMB, memory_order_acq_rel, memory_order_relaxed))
            return 1;
    }
    return 0;
}

static int set_insert(uintptr_t a);

/* The filter (heap_hook_abi.h) counts the set's entries by bucket: raised
 * before an entry goes in, lowered after one went out, so that a remove
 * that finds its bucket at 0 may stop there. The move between tables
 * leaves it alone (an entry copied, then the original tombstoned). */
static void filter_add(uintptr_t a, int delta)
{
    _Atomic uint32_t *f = &snapprof__heap_hooks->filter[snapprof__heap_filter_index(a)];
    if (delta > 0)
        atomic_fetch_add_explicit(f, 1, memory_order_relaxed);
    else
        atomic_fetch_sub_explicit(f, 1, memory_order_relaxed);
}

int snapprof__heap_set_insert(uintptr_t a)
{
    if (a == EMPTY || a == TOMB)
        return -1;
    filter_add(a, 1);
    int rc = set_insert(a);
    if (rc != 0)
        filter_add(a, -1);
    return rc;
}

static int set_insert(uintptr_t a)
{
    for (;;) {
        table_t *t = atomic_load(&g_insert);
        if (!t)
            return -1;
        /* Announced before the table is checked again: the mover either
         * sees this insert running or this insert sees the new table
         * (both sequentially consistent). */
        atomic_fetch_add(&t->inserters, 1);
        if (atomic_load(&g_insert) != t) {
            atomic_fetch_sub(&t->inserters, 1);
            continue;
        }
        long rc = table_insert(t, a);
        if (rc >= 0)
            atomic_fetch_add_explicit(&g_live, 1, memory_order_relaxed);
        atomic_fetch_sub_explicit(&t->inserters, 1, memory_order_release);
        return rc >= 0 ? 0 : -1;
    }
}

int snapprof__heap_set_remove(uintptr_t a)
{
    /* The block's bucket was raised before its insert, which happened
     * before the program had its address, so a free of a sampled block
     * always sees it above 0. */
    if (a == EMPTY || a == TOMB || !snapprof__heap_filter_hit(a))
        return 0;
    int tries = 0;
restart:;
    /* Tables are reused (emptied, then filled anew): a remove that finds
     * nothing while one was reused looks again (a seqlock over all). */
    uint64_t g0 = atomic_load_explicit(&g_recycles, memory_order_acquire);
    if ((g0 & 1) && ++tries < 1000)
        goto restart;
    for (table_t *t = atomic_load_explicit(&g_search, memory_order_acquire); t;
         t = atomic_load_explicit(&t->next, memory_order_acquire)) {
        /* An entry of a is a sampled block at a, whichever table holds
         * it: removing it is right even in a table reused meanwhile. */
        if (table_remove(t, a)) {
            atomic_fetch_sub_explicit(&g_live, 1, memory_order_relaxed);
            filter_add(a, -1);
            return 1;
        }
    }
    atomic_thread_fence(memory_order_acquire);
    /* Bounded: a lookup interrupted by 8 reuses in a row (a thread
     * preempted again and again) gives up; its block stays in use. */
    if (atomic_load_explicit(&g_recycles, memory_order_relaxed) != g0 && ++tries < 8)
        goto restart;
    return 0;
}

int snapprof__heap_set_nearly_full(void)
{
    table_t *t = atomic_load_explicit(&g_insert, memory_order_acquire);
    return !t || atomic_load_explicit(&t->used, memory_order_relaxed) >= t->cap - t->cap / 8;
}

long snapprof__heap_set_count(void)
{
    return atomic_load(&g_live);
}

long snapprof__heap_set_entries(void)
{
    long n = 0;
    for (table_t *t = atomic_load(&g_search); t; t = atomic_load(&t->next))
        for (size_t i = 0; i < t->cap; i++) {
            uintptr_t k = atomic_load(&t->keys[i]);
            n += k != EMPTY && k != TOMB;
        }
    return n;
}

size_t snapprof__heap_set_capacity(void)
{
    table_t *t = atomic_load(&g_insert);
    return t ? t->cap : 0;
}

/* The table of 2^shift slots not in use now (mapped at first use),
 * emptied. NULL when out of memory. */
static table_t *spare_table(unsigned shift)
{
    table_t *cur = atomic_load(&g_insert);
    for (int i = 0; i < 2; i++) {
        table_t *t = g_tables[shift][i];
        if (t && (t == cur || t == atomic_load(&g_search)))
            continue;
        size_t cap = (size_t)1 << shift;
        if (!t) {
            size_t bytes = sizeof(table_t) + cap * sizeof(uintptr_t);
            void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (m == MAP_FAILED)
                return NULL;
            t = m;
            g_tables[shift][i] = t;
            t->cap = cap;
            t->shift = 64 - shift;
        } else {
            /* A seqlock's write: removes that looked meanwhile look again. */
            atomic_fetch_add_explicit(&g_recycles, 1, memory_order_relaxed);
            atomic_thread_fence(memory_order_release);
            for (size_t k = 0; k < cap; k++)
                atomic_store_explicit(&t->keys[k], EMPTY, memory_order_relaxed);
            atomic_store_explicit(&t->next, NULL, memory_order_relaxed);
            atomic_fetch_add_explicit(&g_recycles, 1, memory_order_release);
        }
        /* inserters is left as it is: an insert that found this table
         * retired may still be taking its announcement back. */
        atomic_store_explicit(&t->used, 0, memory_order_relaxed);
        atomic_store_explicit(&t->next, NULL, memory_order_relaxed);
        return t;
    }
    return NULL;
}

static unsigned shift_of(const table_t *t)
{
    return 64 - t->shift;
}

/* Waits (sampling side, a few ms at most) until no insert runs on t.
 * Returns 1 when none does. A fork child may count an insert of a thread
 * it does not have: never. */
static int inserters_gone(table_t *t)
{
    for (int i = 0; i < 2000; i++) {
        if (atomic_load(&t->inserters) == 0)
            return 1;
        if (i < 100) {
            sched_yield();
        } else {
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
        }
    }
    return 0;
}

/* Moves every address of old into new (see the file's comment). Returns
 * 0, or -1 when new had no room for one (old stays searched). */
static int move_all(table_t *old, table_t *new_)
{
    int rc = 0;
    for (size_t i = 0; i < old->cap; i++) {
        uintptr_t k = atomic_load_explicit(&old->keys[i], memory_order_acquire);
        if (k == EMPTY || k == TOMB)
            continue;
        const uintptr_t addr = k;
        /* The mover may fill the last eighth the hooks leave free. */
        long j = table_insert_limit(new_, addr, new_->cap);
        if (j < 0) {
            rc = -1; /* new is at most half full: only at the largest size */
            continue;
        }
        atomic_fetch_add_explicit(&g_live, 1, memory_order_relaxed);
        if (atomic_compare_exchange_strong_explicit(&old->keys[i], &k, TOMB, memory_order_acq_rel,
                                                    memory_order_relaxed)) {
            atomic_fetch_sub_explicit(&g_live, 1, memory_order_relaxed);
        } else {
            /* Its free won the old slot first: the copy goes too (k now
             * holds what the failed exchange found, not the address). */
            uintptr_t c = addr;
            if (atomic_compare_exchange_strong_explicit(&new_->keys[j], &c, TOMB,
                                                        memory_order_acq_rel, memory_order_relaxed))
                atomic_fetch_sub_explicit(&g_live, 1, memory_order_relaxed);
        }
    }
    return rc;
}

/* Finishes a move begun earlier: once no insert runs on the old table any
 * more, what it still holds moves, and removes start at the new one. */
static void finish_move(void)
{
    table_t *old = atomic_load(&g_search), *cur = atomic_load(&g_insert);
    if (old == cur || !inserters_gone(old))
        return;
    if (move_all(old, cur) == 0)
        atomic_store_explicit(&g_search, cur, memory_order_release);
}

int snapprof__heap_set_maintain(void)
{
    table_t *cur = atomic_load(&g_insert);
    if (!cur) {
        table_t *t = spare_table(MIN_SHIFT);
        if (!t)
            return -ENOMEM;
        atomic_store(&g_search, t);
        atomic_store(&g_insert, t);
        return 0;
    }
    if (atomic_load(&g_search) != cur) {
        finish_move();
        return 0;
    }
    size_t used = atomic_load(&cur->used);
    if (used < cur->cap / 2)
        return 0;
    long live = atomic_load(&g_live);
    unsigned shift = shift_of(cur);
    if (live > (long)(cur->cap / 4) && shift < MAX_SHIFT)
        shift++;
    table_t *t = spare_table(shift);
    if (!t)
        return -ENOMEM;
    atomic_store_explicit(&cur->next, t, memory_order_release);
    atomic_store(&g_insert, t);
    finish_move();
    return 0;
}

void snapprof__heap_set_clear(void)
{
    for (table_t *t = atomic_load(&g_search); t; t = atomic_load(&t->next)) {
        for (size_t i = 0; i < t->cap; i++) {
            uintptr_t k = atomic_load_explicit(&t->keys[i], memory_order_acquire);
            if (k != EMPTY && k != TOMB &&
                atomic_compare_exchange_strong_explicit(&t->keys[i], &k, TOMB, memory_order_acq_rel,
                                                        memory_order_relaxed)) {
                atomic_fetch_sub_explicit(&g_live, 1, memory_order_relaxed);
                filter_add(k, -1);
            }
        }
    }
}
