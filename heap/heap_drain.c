/* From sampled allocations and frees to builders, on the sampling side:
 * the queue the frees wait in, the drain that unwinds each allocation's
 * stack copy and delivers allocations and frees in the order they
 * happened, and what it keeps of each live sampled block (its address,
 * size and an interned stack: frames, labels, thread) so that its free
 * comes out with the allocation's stack. */
#include "heap/heap_internal.h"

#include "common/clock.h"
#include "common/hash.h"
#include "module_cache/module_cache.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* The free queue                                                           */
/* ------------------------------------------------------------------------ */

/* Vyukov's bounded queue: a cell is the producers' when its turn equals
 * the ticket, the consumer's when it equals the ticket + 1. Lock-free. */
int snapprof__heap_free_push(const snapprof__heap_free_rec_t *rec)
{
    snapprof__heap_state_t *h = &snapprof__heap;
    if (!h->ring)
        return -1;
    uint64_t pos = atomic_load_explicit(&h->ring_tail, memory_order_relaxed);
    for (;;) {
        snapprof__heap_free_cell_t *c = &h->ring[pos & (SNAPPROF__HEAP_FREE_RING - 1)];
        uint64_t turn = atomic_load_explicit(&c->turn, memory_order_acquire);
        int64_t diff = (int64_t)(turn - pos);
        if (diff == 0) {
            if (atomic_compare_exchange_weak_explicit(&h->ring_tail, &pos, pos + 1,
                                                      memory_order_relaxed, memory_order_relaxed)) {
                c->rec = *rec;
                atomic_store_explicit(&c->turn, pos + 1, memory_order_release);
                uint64_t head = atomic_load_explicit(&h->ring_head, memory_order_relaxed);
                if (pos + 1 - head == SNAPPROF__HEAP_FREE_RING / 2 && h->pool.kick) {
                    /* Half full: the sampling thread comes now. */
                    atomic_fetch_add_explicit(h->pool.kick, 1, memory_order_release);
                    syscall(SYS_futex, h->pool.kick, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
                }
                return 0;
            }
        } else if (diff < 0) {
            return -1; /* full */
        } else {
            pos = atomic_load_explicit(&h->ring_tail, memory_order_relaxed);
        }
    }
}

/* Takes the next published free, or returns 0. The consumer's (sampler
 * lock). */
static int free_pop(snapprof__heap_free_rec_t *out)
{
    snapprof__heap_state_t *h = &snapprof__heap;
    uint64_t head = atomic_load_explicit(&h->ring_head, memory_order_relaxed);
    snapprof__heap_free_cell_t *c = &h->ring[head & (SNAPPROF__HEAP_FREE_RING - 1)];
    uint64_t turn = atomic_load_explicit(&c->turn, memory_order_acquire);
    if (turn != head + 1)
        return 0;
    *out = c->rec;
    atomic_store_explicit(&c->turn, head + SNAPPROF__HEAP_FREE_RING, memory_order_release);
    atomic_store_explicit(&h->ring_head, head + 1, memory_order_relaxed);
    return 1;
}

/* ------------------------------------------------------------------------ */
/* Interned stacks                                                          */
/* ------------------------------------------------------------------------ */

/* One stack as delivered: frames, flags, thread, labels; shared by every
 * live block allocated there, freed with the last. Its strings (frame
 * names, label keys and values, units) live in blob, which is also what
 * two stacks are compared by. */
typedef struct key {
    uint64_t hash;
    size_t refs;
    pid_t tid;
    unsigned flags;
    char name[16];
    snapprof_frame_t *frames;
    size_t frame_count;
    snapprof_label_t *labels;
    size_t label_count;
    size_t blob_len;
    unsigned char blob[];
} heap_key_t;

/* A live sampled block. */
typedef struct block {
    uintptr_t addr; /* 0: an empty slot */
    uint64_t bytes;
    heap_key_t *key;
} block_t;

static struct {
    heap_key_t **keys; /* open addressing by hash */
    size_t key_cap, key_count;
    block_t *blocks; /* open addressing by address */
    size_t block_cap, block_count;
    unsigned char *buf; /* a stack's serialization while it is made */
    size_t buf_cap;
    /* What one drain delivers, in order. */
    snapprof__capture_slot_t **allocs;
    snapprof__heap_free_rec_t *frees;
    size_t free_cap;
    /* Frees a drain that gave way left at the front of frees, in order,
     * for the next one (their allocations were delivered, or still sit in
     * their slots for it). */
    size_t free_kept;
    /* The last drain stopped before the end (gave way or spent its
     * budget): the next is due at once (snapprof__heap_due()). */
    int behind;
} g;

int snapprof__heap_drain_behind(void)
{
    return g.behind;
}

/* Appends n bytes to g.buf at *len. Returns 0 or -ENOMEM. */
static int put(size_t *len, const void *p, size_t n)
{
    if (*len + n > g.buf_cap) {
        size_t cap = g.buf_cap ? g.buf_cap : 1024;
        while (cap < *len + n)
            cap *= 2;
        unsigned char *b = realloc(g.buf, cap);
        if (!b)
            return -ENOMEM;
        g.buf = b;
        g.buf_cap = cap;
    }
    memcpy(g.buf + *len, p, n);
    *len += n;
    return 0;
}

static int put_str(size_t *len, const char *s)
{
    const char *v = s ? s : "";
    uint8_t present = s != NULL;
    if (put(len, &present, 1) != 0)
        return -ENOMEM;
    return put(len, v, strlen(v) + 1);
}

/* Reads back what put_str() wrote at *off. */
static const char *get_str(const unsigned char *b, size_t *off)
{
    uint8_t present = b[(*off)++];
    const char *s = (const char *)b + *off;
    *off += strlen(s) + 1;
    return present ? s : NULL;
}

/* Serializes a stack into g.buf. Returns its length, or 0 when out of
 * memory. */
static size_t serialize(const snapprof_frame_t *frames, size_t count, unsigned flags,
                        const snapprof_label_t *labels, size_t label_count)
{
    size_t len = 0;
    uint64_t n = count, l = label_count;
    int bad = put(&len, &n, sizeof n) | put(&len, &l, sizeof l) | put(&len, &flags, sizeof flags);
    for (size_t i = 0; i < count && !bad; i++) {
        uint64_t pc = frames[i].pc;
        uintptr_t mod = (uintptr_t)frames[i].module;
        int32_t kind = frames[i].kind;
        bad |= put(&len, &pc, sizeof pc) | put(&len, &mod, sizeof mod) |
               put(&len, &kind, sizeof kind) | put_str(&len, frames[i].name);
    }
    for (size_t i = 0; i < label_count && !bad; i++) {
        int64_t num = labels[i].num;
        bad |= put_str(&len, labels[i].key) | put_str(&len, labels[i].str) |
               put(&len, &num, sizeof num) | put_str(&len, labels[i].num_unit);
    }
    return bad ? 0 : len;
}

/* Makes a key from g.buf[0, len): the arrays point into its own blob. */
static heap_key_t *make_key(size_t len, uint64_t hash, pid_t tid, const char *name)
{
    const unsigned char *b = g.buf;
    uint64_t n, l;
    unsigned flags;
    memcpy(&n, b, sizeof n);
    memcpy(&l, b + sizeof n, sizeof l);
    memcpy(&flags, b + 2 * sizeof n, sizeof flags);
    heap_key_t *k = malloc(sizeof *k + len);
    snapprof_frame_t *frames = calloc(n ? n : 1, sizeof *frames);
    snapprof_label_t *labels = calloc(l ? l : 1, sizeof *labels);
    if (!k || !frames || !labels) {
        free(k);
        free(frames);
        free(labels);
        return NULL;
    }
    memcpy(k->blob, b, len);
    k->blob_len = len;
    k->hash = hash;
    k->refs = 0;
    k->tid = tid;
    k->flags = flags;
    memcpy(k->name, name, sizeof k->name);
    k->frames = frames;
    k->frame_count = n;
    k->labels = labels;
    k->label_count = l;
    size_t off = 2 * sizeof n + sizeof flags;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t pc;
        uintptr_t mod;
        int32_t kind;
        memcpy(&pc, k->blob + off, sizeof pc);
        off += sizeof pc;
        memcpy(&mod, k->blob + off, sizeof mod);
        off += sizeof mod;
        memcpy(&kind, k->blob + off, sizeof kind);
        off += sizeof kind;
        frames[i].pc = (uintptr_t)pc;
        frames[i].module = (const snapprof_module_t *)mod;
        frames[i].kind = (snapprof_frame_kind_t)kind;
        frames[i].name = get_str(k->blob, &off);
    }
    for (uint64_t i = 0; i < l; i++) {
        labels[i].key = get_str(k->blob, &off);
        labels[i].str = get_str(k->blob, &off);
        memcpy(&labels[i].num, k->blob + off, sizeof labels[i].num);
        off += sizeof labels[i].num;
        labels[i].num_unit = get_str(k->blob, &off);
    }
    return k;
}

static void free_key(heap_key_t *k)
{
    free(k->frames);
    free(k->labels);
    free(k);
}

static int keys_grow(void)
{
    size_t cap = g.key_cap ? g.key_cap * 2 : 256;
    heap_key_t **t = calloc(cap, sizeof *t);
    if (!t)
        return -ENOMEM;
    for (size_t i = 0; i < g.key_cap; i++) {
        heap_key_t *k = g.keys[i];
        if (!k)
            continue;
        size_t j = k->hash & (cap - 1);
        while (t[j])
            j = (j + 1) & (cap - 1);
        t[j] = k;
    }
    free(g.keys);
    g.keys = t;
    g.key_cap = cap;
    return 0;
}

/* The interned key of a stack (made if new), its count of users not yet
 * raised; NULL when out of memory. */
static heap_key_t *intern(const snapprof_frame_t *frames, size_t count, unsigned flags,
                          const snapprof_label_t *labels, size_t label_count, pid_t tid,
                          const char *name)
{
    size_t len = serialize(frames, count, flags, labels, label_count);
    if (len == 0)
        return NULL;
    char nm[16] = {0};
    size_t nl = strnlen(name, sizeof nm - 1);
    memcpy(nm, name, nl);
    uint64_t h = SNAPPROF_FNV1A64_BASIS;
    for (size_t i = 0; i < len; i++)
        h = (h ^ g.buf[i]) * SNAPPROF_FNV1A64_PRIME;
    for (size_t i = 0; i < sizeof nm; i++)
        h = (h ^ (unsigned char)nm[i]) * SNAPPROF_FNV1A64_PRIME;
    h = (h ^ (uint32_t)tid) * SNAPPROF_FNV1A64_PRIME;
    if ((g.key_count + 1) * 2 > g.key_cap && keys_grow() != 0)
        return NULL;
    size_t j = h & (g.key_cap - 1);
    for (; g.keys[j]; j = (j + 1) & (g.key_cap - 1)) {
        heap_key_t *k = g.keys[j];
        if (k->hash == h && k->blob_len == len && k->tid == tid &&
            memcmp(k->name, nm, sizeof nm) == 0 && memcmp(k->blob, g.buf, len) == 0)
            return k;
    }
    heap_key_t *k = make_key(len, h, tid, nm);
    if (!k)
        return NULL;
    g.keys[j] = k;
    g.key_count++;
    return k;
}

/* Drops one user of k; the last one removes it (backward-shift deletion). */
static void key_release(heap_key_t *k)
{
    if (--k->refs > 0)
        return;
    size_t mask = g.key_cap - 1, i = k->hash & mask;
    while (g.keys[i] != k)
        i = (i + 1) & mask;
    g.keys[i] = NULL;
    for (size_t j = (i + 1) & mask; g.keys[j]; j = (j + 1) & mask) {
        size_t home = g.keys[j]->hash & mask;
        /* Moves back into the hole when its home is not in (i, j]. */
        if ((j > i && (home <= i || home > j)) || (j < i && (home <= i && home > j))) {
            g.keys[i] = g.keys[j];
            g.keys[j] = NULL;
            i = j;
        }
    }
    g.key_count--;
    free_key(k);
}

/* ------------------------------------------------------------------------ */
/* Live blocks                                                              */
/* ------------------------------------------------------------------------ */

static size_t addr_hash(uintptr_t a)
{
    return (size_t)(((uint64_t)a * 0x9e3779b97f4a7c15ull) >> 20);
}

static int blocks_grow(void)
{
    size_t cap = g.block_cap ? g.block_cap * 2 : 1024;
    block_t *t = calloc(cap, sizeof *t);
    if (!t)
        return -ENOMEM;
    for (size_t i = 0; i < g.block_cap; i++) {
        if (!g.blocks[i].addr)
            continue;
        size_t j = addr_hash(g.blocks[i].addr) & (cap - 1);
        while (t[j].addr)
            j = (j + 1) & (cap - 1);
        t[j] = g.blocks[i];
    }
    free(g.blocks);
    g.blocks = t;
    g.block_cap = cap;
    return 0;
}

static block_t *block_find(uintptr_t a)
{
    if (!g.block_cap)
        return NULL;
    size_t mask = g.block_cap - 1;
    for (size_t i = addr_hash(a) & mask; g.blocks[i].addr; i = (i + 1) & mask)
        if (g.blocks[i].addr == a)
            return &g.blocks[i];
    return NULL;
}

static void block_remove(block_t *b)
{
    size_t mask = g.block_cap - 1, i = (size_t)(b - g.blocks);
    g.blocks[i].addr = 0;
    for (size_t j = (i + 1) & mask; g.blocks[j].addr; j = (j + 1) & mask) {
        size_t home = addr_hash(g.blocks[j].addr) & mask;
        if ((j > i && (home <= i || home > j)) || (j < i && (home <= i && home > j))) {
            g.blocks[i] = g.blocks[j];
            g.blocks[j].addr = 0;
            i = j;
        }
    }
    g.block_count--;
}

/* ------------------------------------------------------------------------ */
/* The drain                                                                */
/* ------------------------------------------------------------------------ */

static void deliver(const snapprof__heap_sink_t *sink, const heap_key_t *k,
                    snapprof_sample_kind_t kind, uint64_t bytes, uint64_t time_ns)
{
    snapprof_sample_t s = {
        .frames = k->frames,
        .frame_count = k->frame_count,
        .timestamp_ns = time_ns,
        .cpu_ns = 0,
        .wall_ns = 0,
        .tid = k->tid,
        .thread_name = k->name,
        .labels = k->labels,
        .label_count = k->label_count,
        .flags = k->flags,
        .size = sizeof(snapprof_sample_t),
        .kind = kind,
        .bytes = bytes,
    };
    sink->deliver(sink->ctx, &s);
    if (kind == SNAPPROF_SAMPLE_KIND_HEAP_ALLOC)
        sink->stats->heap_samples++;
    else
        sink->stats->heap_frees++;
}

/* The free of a live block b at time_ns. */
static void deliver_free(const snapprof__heap_sink_t *sink, block_t *b, uint64_t time_ns)
{
    heap_key_t *k = b->key;
    deliver(sink, k, SNAPPROF_SAMPLE_KIND_HEAP_FREE, b->bytes, time_ns);
    block_remove(b);
    key_release(k);
}

/* The code range of the allocation hooks' library (libsnapprof-heap.so,
 * preload_heap/), found once by the symbol it exports for that; [0, 0)
 * when it is not loaded. Drain side only. */
static uintptr_t g_hooks_start, g_hooks_limit;
static int g_hooks_looked;
/* The GOT hooks' code (heap_got/), set at their install. */
static _Atomic uintptr_t g_got_start, g_got_limit;

static int in_hooks(uintptr_t pc)
{
    if (!g_hooks_looked) {
        g_hooks_looked = 1;
        void *sym = dlsym(RTLD_DEFAULT, "snapprof__heap_preload_info");
        const snapprof_module_t *m = sym ? snapprof__module_find_at((uintptr_t)sym, 0) : NULL;
        if (m) {
            g_hooks_start = m->start;
            g_hooks_limit = m->limit;
        }
    }
    return (pc >= g_hooks_start && pc < g_hooks_limit) ||
           (pc >= atomic_load_explicit(&g_got_start, memory_order_relaxed) &&
            pc < atomic_load_explicit(&g_got_limit, memory_order_relaxed));
}

void snapprof__heap_set_hook_range(uintptr_t start, uintptr_t limit)
{
    atomic_store_explicit(&g_got_limit, limit, memory_order_relaxed);
    atomic_store_explicit(&g_got_start, start, memory_order_relaxed);
}

/* The frames of the allocation's caller on: the stack was taken inside
 * the library (heap_capture.c), and the first frame of the caller's is
 * the one at its return address less one (the call). When that caller is
 * an allocation hook of libsnapprof-heap.so (the interposed malloc or
 * operator new, with its inlined hk_note_alloc), its frames go too: the
 * program called the allocator, and the leaf is the program's call. When
 * the caller is not among the first few frames (an unwind that failed
 * early), the stack stays whole. */
static size_t skip_own(const snapprof_frame_t *frames, size_t count, uintptr_t caller_pc)
{
    for (size_t i = 0; i < count && i < 8; i++)
        if (frames[i].pc == caller_pc - 1) {
            while (i + 1 < count && frames[i].kind == SNAPPROF_FRAME_NATIVE &&
                   in_hooks(frames[i].pc))
                i++;
            return i;
        }
    return 0;
}

/* Delivers an allocation of bytes at addr with the (interned) stack k and
 * keeps it as live until its free. */
static void add_block(const snapprof__heap_sink_t *sink, heap_key_t *k, uintptr_t addr,
                      uint64_t bytes, uint64_t time_ns)
{
    k->refs++;
    deliver(sink, k, SNAPPROF_SAMPLE_KIND_HEAP_ALLOC, bytes, time_ns);
    if ((g.block_count + 1) * 2 > g.block_cap && blocks_grow() != 0) {
        key_release(k);
        return;
    }
    size_t mask = g.block_cap - 1, i = addr_hash(addr) & mask;
    while (g.blocks[i].addr)
        i = (i + 1) & mask;
    g.blocks[i] = (block_t){.addr = addr, .bytes = bytes, .key = k};
    g.block_count++;
}

static void deliver_alloc(const snapprof__heap_sink_t *sink, snapprof__capture_slot_t *slot)
{
    snapprof__heap_extra_t *x = slot->extra;
    const snapprof_frame_t *frames;
    unsigned flags = 0;
    const void *tail =
        snapprof__heap.tail_size ? (const uint8_t *)slot->extra + SNAPPROF__HEAP_TAIL_OFFSET : NULL;
    size_t count = sink->unwind(sink->ctx, &slot->res, slot->buffer, tail, &frames, &flags);
    size_t skip = skip_own(frames, count, x->caller_pc);
    snapprof_label_t views[SNAPPROF__LABELS_MAX];
    size_t label_count = snapprof__labels_decode(&x->labels, views);
    block_t *old = block_find(x->addr);
    if (old) {
        /* Sampled again before its free was seen: an address holds one
         * block at a time, so the older one was freed by now. */
        deliver_free(sink, old, slot->res.timestamp_ns);
    }
    if (count <= skip)
        return; /* nothing unwound: counted by the sink */
    heap_key_t *k = intern(frames + skip, count - skip, flags, views, label_count, x->tid, x->name);
    if (!k)
        return;
    add_block(sink, k, x->addr, x->bytes, slot->res.timestamp_ns);
}

/* A sampled allocation that found no free capture slot (heap_capture.c):
 * the same as one that did, with the one frame "[heap: no capture slot]"
 * for a stack, its thread's id and no name or labels. */
static void deliver_alloc_no_slot(const snapprof__heap_sink_t *sink,
                                  const snapprof__heap_free_rec_t *r)
{
    static const snapprof_frame_t marker = {
        .kind = SNAPPROF_FRAME_MARKER,
        .name = "[heap: no capture slot]",
    };
    block_t *old = block_find(r->addr);
    if (old)
        deliver_free(sink, old, r->time_ns); /* as in deliver_alloc() */
    heap_key_t *k = intern(&marker, 1, 0, NULL, 0, r->tid, "");
    if (!k) {
        atomic_fetch_add(&snapprof__heap.dropped_no_slot, 1);
        return;
    }
    sink->stats->heap_samples_no_slot++;
    add_block(sink, k, r->addr, r->bytes, r->time_ns);
}

static int by_seq(const void *a, const void *b)
{
    const snapprof__heap_extra_t *x = (*(snapprof__capture_slot_t *const *)a)->extra;
    const snapprof__heap_extra_t *y = (*(snapprof__capture_slot_t *const *)b)->extra;
    return (x->seq > y->seq) - (x->seq < y->seq);
}

int snapprof__heap_drain(const void *owner, const snapprof__heap_sink_t *sink)
{
    snapprof__heap_state_t *h = &snapprof__heap;
    if (!snapprof__heap_owned_by(owner))
        return 0;
    snapprof__heap_set_maintain();
    uint64_t gen = atomic_load(&h->gen);
    /* The frees first, then the slots: a free's allocation was published
     * before the program had the block's address, so every free read here
     * finds its allocation among the slots read after (or delivered
     * earlier), or before it in the queue (an allocation that found no
     * slot: the queue is read in order, up to the first entry not yet
     * published). */
    size_t nfree = g.free_kept;
    g.free_kept = 0;
    g.behind = 0;
    for (snapprof__heap_free_rec_t rec; free_pop(&rec);) {
        if (rec.gen != gen)
            continue; /* a free of an earlier session's block */
        if (nfree == g.free_cap) {
            size_t cap = g.free_cap ? g.free_cap * 2 : 256;
            snapprof__heap_free_rec_t *f = realloc(g.frees, cap * sizeof *f);
            if (!f) {
                atomic_fetch_add(rec.alloc ? &h->dropped_no_slot : &h->frees_lost, 1);
                continue;
            }
            g.frees = f;
            g.free_cap = cap;
        }
        g.frees[nfree++] = rec;
    }
    if (!g.allocs && !(g.allocs = calloc(h->pool.slot_count, sizeof *g.allocs))) {
        g.free_kept = nfree;
        return 0;
    }
    size_t nalloc = 0;
    for (size_t i = 0; i < h->pool.slot_count; i++) {
        snapprof__capture_slot_t *slot = &h->pool.slots[i];
        if (atomic_load_explicit(&slot->state, memory_order_acquire) != SNAPPROF__SLOT_FULL)
            continue;
        if (((snapprof__heap_extra_t *)slot->extra)->gen != gen) {
            snapprof__capture_slot_release(&h->pool, slot); /* an earlier session's */
            continue;
        }
        g.allocs[nalloc++] = slot;
    }
    qsort(g.allocs, nalloc, sizeof *g.allocs, by_seq);
    if (nalloc > 0 && sink->prepare)
        sink->prepare(sink->ctx);
    /* The frees (and allocations without a slot) are in queue order,
     * which is their seq order but for pushes that raced each other (a few
     * places): ordered too. */
    for (size_t i = 1; i < nfree; i++) {
        snapprof__heap_free_rec_t r = g.frees[i];
        size_t j = i;
        for (; j > 0 && g.frees[j - 1].seq > r.seq; j--)
            g.frees[j] = g.frees[j - 1];
        g.frees[j] = r;
    }
    size_t a = 0, f = 0;
    uint64_t until = sink->budget_ns ? snapprof__monotonic_ns() + sink->budget_ns : 0;
    while (a < nalloc || f < nfree) {
        /* Under TSan a delivery takes a millisecond or more, and a drain
         * of thousands held the sampler lock for seconds: fork() (and so
         * the preload helper behind it, which finds TSan's threads) waited
         * throughout, and the CPU profile starved (soak finding 8). And
         * with nobody waiting, one drain of 128 slots and thousands of
         * queued frees held up the sampling thread's ticks (3 ticks in a
         * 3 s TSan run at 4 kHz), and so the handshake's CPU samples and
         * the draining of the CPU captures, whose slots then filled. */
        int give = (a > 0 || f > 0) && sink->give_way && sink->give_way(sink->ctx);
        if (give || ((a > 0 || f > 0) && until && snapprof__monotonic_ns() >= until)) {
            /* The allocations left stay in their slots, found again. */
            if (nfree > f) /* g.frees is NULL until a free came */
                memmove(g.frees, g.frees + f, (nfree - f) * sizeof *g.frees);
            g.free_kept = nfree - f;
            g.behind = 1;
            return give;
        }
        int take_alloc =
            f == nfree ||
            (a < nalloc && ((snapprof__heap_extra_t *)g.allocs[a]->extra)->seq < g.frees[f].seq);
        if (take_alloc) {
            deliver_alloc(sink, g.allocs[a]);
            snapprof__capture_slot_release(&h->pool, g.allocs[a]);
            a++;
        } else if (g.frees[f].alloc) {
            deliver_alloc_no_slot(sink, &g.frees[f]);
            f++;
        } else {
            block_t *b = block_find(g.frees[f].addr);
            /* Not found: an entry the set kept of a block whose free went
             * another way, or of a dropped capture. Nothing to deliver. */
            if (b)
                deliver_free(sink, b, g.frees[f].time_ns);
            f++;
        }
    }
    return 0;
}

void snapprof__heap_end(const void *owner)
{
    snapprof__heap_state_t *h = &snapprof__heap;
    if (!snapprof__heap_owned_by(owner))
        return;
    atomic_store(&h->interval, 0);
    /* The hooks' countdowns are taken again by the slow path, which finds
     * sampling off (heap_hook_abi.h). */
    atomic_fetch_add_explicit(&snapprof__heap_hooks->gen, 1, memory_order_release);
    snapprof__heap_set_clear();
    for (size_t i = 0; i < g.key_cap; i++)
        if (g.keys[i])
            free_key(g.keys[i]);
    free(g.keys);
    free(g.blocks);
    free(g.buf);
    free(g.allocs);
    free(g.frees);
    memset(&g, 0, sizeof g);
    h->owner = NULL;
}
