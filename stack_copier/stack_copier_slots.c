/* Capture slots: a thread captures itself into a preallocated slot from its
 * own signal handler, and the sampling thread drains the slots (see
 * stack_copier_slots.h for the protocol). */
#include "stack_copier/stack_copier_slots.h"

#include "common/clock.h"
#include "common/fault.h"
#include "stack_copier/registers_x86_64.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Defined in stack_copier_threads.c: the token registered on this thread. */
extern __thread struct snapprof_thread *snapprof__tls_self
    __attribute__((tls_model("initial-exec")));

static size_t page_round(size_t n)
{
    return (n + 4095u) & ~(size_t)4095u;
}

int snapprof__capture_pool_init(snapprof__capture_pool_t *pool, size_t slot_count,
                                size_t slot_bytes, size_t extra_size, uint32_t *kick)
{
    memset(pool, 0, sizeof *pool);
    if (slot_count == 0)
        return -EINVAL;
    pool->slot_count = slot_count;
    pool->slot_bytes = page_round(slot_bytes);
    pool->slots = calloc(slot_count, sizeof *pool->slots);
    pool->memory = snapprof__fault(SNAPPROF__FAULT_MMAP)
                       ? MAP_FAILED
                       : mmap(NULL, slot_count * pool->slot_bytes, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (pool->memory == MAP_FAILED)
        pool->memory = NULL;
    /* Each area starts on a 64-byte boundary: any type the delegate keeps
     * there is aligned, and two slots never share a cache line. */
    pool->extra_size = (extra_size + 63u) & ~(size_t)63u;
    if (pool->extra_size)
        pool->extra = aligned_alloc(64, slot_count * pool->extra_size);
    if (!pool->slots || !pool->memory || (pool->extra_size && !pool->extra)) {
        snapprof__capture_pool_destroy(pool);
        return -ENOMEM;
    }
    for (size_t i = 0; i < slot_count; i++) {
        pool->slots[i].fail = -1;
        pool->slots[i].large = NULL;
        pool->slots[i].extra = pool->extra ? pool->extra + i * pool->extra_size : NULL;
    }
    pool->kick = (_Atomic uint32_t *)kick;
    pool->kick_at = (uint32_t)(slot_count / 2 > 0 ? slot_count / 2 : 1);
    return 0;
}

static void unmap_large(snapprof__capture_pool_t *pool, snapprof__large_buffer_t *l);

void snapprof__capture_pool_destroy(snapprof__capture_pool_t *pool)
{
    uint32_t count = atomic_load_explicit(&pool->large_count, memory_order_relaxed);
    for (uint32_t i = 0; i < count && i < SNAPPROF__POOL_LARGE_MAX; i++)
        if (pool->large[i].buf)
            unmap_large(pool, &pool->large[i]);
    free(pool->slots);
    free(pool->extra);
    if (pool->memory)
        munmap(pool->memory, pool->slot_count * pool->slot_bytes);
    memset(pool, 0, sizeof *pool);
}

/* Takes a free slot, or returns NULL. Async-signal-safe. */
static snapprof__capture_slot_t *take_slot(snapprof__capture_pool_t *pool)
{
    for (size_t i = 0; i < pool->slot_count; i++) {
        /* A plain load first: a compare-and-swap on every full slot would
         * take each one's cache line from the drainer for nothing. */
        if (atomic_load_explicit(&pool->slots[i].state, memory_order_relaxed) !=
            SNAPPROF__SLOT_FREE)
            continue;
        uint32_t expected = SNAPPROF__SLOT_FREE;
        if (atomic_compare_exchange_strong_explicit(&pool->slots[i].state, &expected,
                                                    SNAPPROF__SLOT_FILLING, memory_order_acquire,
                                                    memory_order_relaxed))
            return &pool->slots[i];
    }
    return NULL;
}

static void kick(snapprof__capture_pool_t *pool);

/* Publishes a filled slot and wakes the drainer when the pool fills up.
 * Async-signal-safe. */
static void publish(snapprof__capture_pool_t *pool, snapprof__capture_slot_t *slot)
{
    atomic_store_explicit(&slot->state, SNAPPROF__SLOT_FULL, memory_order_release);
    uint32_t full = atomic_fetch_add_explicit(&pool->full, 1, memory_order_relaxed) + 1;
    if (full == pool->kick_at)
        kick(pool);
}

/* Wakes the drainer. Async-signal-safe. */
static void kick(snapprof__capture_pool_t *pool)
{
    if (pool->kick) {
        atomic_fetch_add_explicit(pool->kick, 1, memory_order_release);
        syscall(SYS_futex, pool->kick, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
    }
}

/* Points slot at its own part of the pool's memory. Async-signal-safe. */
static void use_own_buffer(snapprof__capture_pool_t *pool, snapprof__capture_slot_t *slot)
{
    slot->buffer = pool->memory + (size_t)(slot - pool->slots) * pool->slot_bytes;
    slot->large = NULL;
}

/* Holds l for a capture of size bytes: returns 1 when it is free, holds a
 * buffer and it fits (l is then the caller's). Async-signal-safe. */
static int take_one(snapprof__large_buffer_t *l, size_t size)
{
    if (atomic_load_explicit(&l->busy, memory_order_relaxed) != 0)
        return 0;
    uint32_t idle = 0;
    if (!atomic_compare_exchange_strong_explicit(&l->busy, &idle, 1, memory_order_acquire,
                                                 memory_order_relaxed))
        return 0;
    if (l->buf && size <= atomic_load_explicit(&l->size, memory_order_relaxed))
        return 1;
    atomic_store_explicit(&l->busy, 0, memory_order_release);
    return 0;
}

/* Takes the pool's smallest free large buffer of at least size bytes (of
 * those, the first: buffers already written are taken again before ones
 * never used), so that a shallower thread leaves the larger ones to the
 * deeper; or returns NULL. Each is used only while held, since the
 * sampling side replaces them under the same flag; the sizes looked at
 * unheld are a hint, and when the one chosen was taken meanwhile, the
 * first free one that fits will do. Async-signal-safe. */
static snapprof__large_buffer_t *take_large(snapprof__capture_pool_t *pool, size_t size)
{
    uint32_t n = atomic_load_explicit(&pool->large_count, memory_order_acquire);
    if (n > SNAPPROF__POOL_LARGE_MAX)
        n = SNAPPROF__POOL_LARGE_MAX;
    uint32_t best = n;
    size_t best_size = SIZE_MAX;
    for (uint32_t i = 0; i < n; i++) {
        const snapprof__large_buffer_t *l = &pool->large[i];
        size_t s = atomic_load_explicit(&l->size, memory_order_relaxed);
        if (s >= size && s < best_size &&
            atomic_load_explicit(&l->busy, memory_order_relaxed) == 0) {
            best = i;
            best_size = s;
        }
    }
    if (best < n && take_one(&pool->large[best], size))
        return &pool->large[best];
    for (uint32_t i = 0; i < n; i++)
        if (take_one(&pool->large[i], size))
            return &pool->large[i];
    return NULL;
}

/* Copies [lo, lo + size) into the slot's own buffer or, when it does not
 * fit, into a free large buffer of the pool's; else the innermost slot_bytes,
 * marked truncated. Notes the size target wanted for the sampling side,
 * which provisions the pool's large buffers from it. Returns 1 when the copy is
 * truncated for want of a large buffer. Async-signal-safe. */
static int copy_stack(snapprof__capture_pool_t *pool, snapprof__capture_slot_t *slot,
                      snapprof__capture_target_t *target, uintptr_t lo, size_t size)
{
    int short_of_large = 0;
    use_own_buffer(pool, slot);
    slot->res.truncated = 0;
    /* Only this thread's handler writes it, one capture at a time. */
    if (size > atomic_load_explicit(&target->deepest, memory_order_relaxed))
        atomic_store_explicit(&target->deepest, size, memory_order_relaxed);
    if (pool->copy_max && size > pool->copy_max) {
        size = pool->copy_max; /* the innermost copy_max bytes */
        slot->res.truncated = 1;
    }
    if (size > pool->slot_bytes) {
        snapprof__large_buffer_t *l = take_large(pool, size);
        if (l) {
            slot->large = l;
            slot->buffer = l->buf;
        } else {
            atomic_fetch_add_explicit(&target->large_short, 1, memory_order_relaxed);
            atomic_store_explicit(&pool->large_asked, 1, memory_order_relaxed);
            size = pool->slot_bytes;
            slot->res.truncated = 1;
            short_of_large = 1;
        }
    }
    snapprof__copy_live_stack(slot->buffer, (const uint8_t *)lo, size);
    slot->res.copy_lo = lo;
    slot->res.copy_size = size;
    return short_of_large;
}

/* Counts a capture not taken, keeping the CPU time it stood for. Returns
 * -1. Async-signal-safe. */
static int drop(snapprof__capture_pool_t *pool, uint64_t weight_ns)
{
    atomic_fetch_add_explicit(&pool->dropped, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&pool->dropped_ns, weight_ns, memory_order_relaxed);
    return -1;
}

/* RUNS IN THE SIGNAL HANDLER. Async-signal-safe. */
int snapprof__capture_self(snapprof__capture_pool_t *pool, snapprof__capture_target_t *target,
                           const ucontext_t *uc, uint64_t weight_ns, uint64_t entry_ns)
{
    atomic_fetch_add_explicit(&target->fired, 1, memory_order_relaxed);
    if (target->on_thread && snapprof__tls_self == NULL) {
        /* The thread's exit destructor has let go of its TLS token (its
         * labels may be gone too): it is on its way out, not a recycled
         * tid (a perf event or CPU timer follows the task, not the tid
         * number). Dropped with its weight kept, not a failure: counted
         * tid_recycled, it failed profiler_thread_exits_auto under ASan. */
        return drop(pool, weight_ns);
    }
    snapprof__capture_slot_t *slot = take_slot(pool);
    if (!slot)
        return drop(pool, weight_ns);
    slot->target = target;
    slot->weight_ns = weight_ns;
    slot->fail = -1;
    memset(&slot->res, 0, sizeof slot->res);
    slot->res.timestamp_ns = entry_ns;
    if (pool->thread_cpu) {
        struct timespec ts;
        if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) == 0)
            slot->res.cpu_ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    }
    if (target->on_thread && snapprof__tls_self != target->thread) {
        slot->fail = SNAPPROF_FAIL_TID_RECYCLED;
        publish(pool, slot);
        return -1;
    }
    snapprof__regs_from_ucontext(uc, &slot->res.regs);
    uintptr_t sp = slot->res.regs.r[SNAPPROF_REG_SP];
    uintptr_t low = target->stack_low, base = target->stack_base;
    int short_of_large = 0;
    if (sp < low || sp >= base) {
        /* On a goroutine's stack, a fiber, a coroutine or a sigaltstack:
         * a window of it, as far as it can be read, into the slot's own
         * buffer (never a large one: where it ends is not known). */
        use_own_buffer(pool, slot);
        if (snapprof__copy_foreign_stack(sp, slot->buffer, pool->slot_bytes, &slot->res) != 0) {
            slot->fail = SNAPPROF_FAIL_SP_OUT_OF_RANGE;
            publish(pool, slot);
            return -1;
        }
    } else {
        uintptr_t lo = snapprof__copy_low(sp, low);
        short_of_large = copy_stack(pool, slot, target, lo, base - lo);
    }
    if (pool->delegate)
        pool->delegate->on_capture(pool->delegate->ctx, slot->extra);
    slot->res.pause_ns = snapprof__monotonic_ns() - entry_ns;
    /* Read before publishing: after it the slot is the drainer's. */
    int used_large = slot->large != NULL;
    if (used_large)
        atomic_fetch_add_explicit(&pool->large_full, 1, memory_order_relaxed);
    publish(pool, slot);
    /* A large buffer in use: the drainer gives it back within a
     * millisecond or so (snapprof__profiler_due). Short of one: the
     * sampling side provisions this thread at once. */
    if (used_large || short_of_large)
        kick(pool);
    return 0;
}

/* Async-signal-safe. */
snapprof__capture_slot_t *snapprof__capture_regs(snapprof__capture_pool_t *pool,
                                                 const snapprof_regs_t *regs, uintptr_t stack_low,
                                                 uintptr_t stack_base, uint64_t entry_ns)
{
    snapprof__capture_slot_t *slot = take_slot(pool);
    if (!slot) {
        drop(pool, 0);
        return NULL;
    }
    slot->target = NULL;
    slot->weight_ns = 0;
    slot->fail = -1;
    memset(&slot->res, 0, sizeof slot->res);
    slot->res.timestamp_ns = entry_ns;
    slot->res.regs = *regs;
    use_own_buffer(pool, slot);
    uintptr_t sp = regs->r[SNAPPROF_REG_SP];
    if (sp < stack_low || sp >= stack_base) {
        if (snapprof__copy_foreign_stack(sp, slot->buffer, pool->slot_bytes, &slot->res) != 0) {
            snapprof__capture_slot_abandon(slot);
            return NULL;
        }
    } else {
        /* Not memcpy: [stack_low, stack_base) is a mapping as
         * /proc/self/maps showed it (heap_capture.c's bounds()), and a
         * fiber's malloc'd stack shares its line with the anonymous
         * memory around it, which another thread may unmap while we copy
         * (soak finding 10: the copy above a fiber's sp faulted, plain and
         * TSan). The copy stops where the memory does. */
        uintptr_t lo = snapprof__copy_low(sp, stack_low);
        size_t size = stack_base - lo, want = size;
        slot->res.truncated = 0;
        if (size > pool->slot_bytes) {
            size = pool->slot_bytes; /* the innermost frames */
            slot->res.truncated = 1;
        }
        long got = snapprof__copy_readable(slot->buffer, lo, size);
        if (got < 0) {
            /* process_vm_readv refused (seccomp): the caller checked the
             * range readable (clamp_readable()), as before. */
            snapprof__copy_own_stack(lo, stack_base, slot->buffer, pool->slot_bytes, &slot->res);
        } else {
            size_t n = (size_t)got & ~(size_t)(sizeof(uintptr_t) - 1);
            if (n <= sp - lo) {
                snapprof__capture_slot_abandon(slot);
                return NULL; /* not even the word at sp: no stack */
            }
            slot->res.copy_lo = lo;
            slot->res.copy_size = n;
            if (n < want)
                slot->res.truncated = 1;
        }
    }
    if (pool->delegate)
        pool->delegate->on_capture(pool->delegate->ctx, slot->extra);
    slot->res.pause_ns = snapprof__monotonic_ns() - entry_ns;
    return slot;
}

/* Async-signal-safe. */
void snapprof__capture_slot_abandon(snapprof__capture_slot_t *slot)
{
    slot->buffer = NULL;
    atomic_store_explicit(&slot->state, SNAPPROF__SLOT_FREE, memory_order_release);
}

/* Async-signal-safe. */
void snapprof__capture_slot_publish(snapprof__capture_pool_t *pool, snapprof__capture_slot_t *slot)
{
    publish(pool, slot);
}

void snapprof__capture_slot_release(snapprof__capture_pool_t *pool, snapprof__capture_slot_t *slot)
{
    if (slot->large) {
        atomic_store_explicit(&slot->large->busy, 0, memory_order_release);
        atomic_fetch_sub_explicit(&pool->large_full, 1, memory_order_relaxed);
    }
    slot->large = NULL;
    slot->target = NULL;
    slot->buffer = NULL;
    atomic_fetch_sub_explicit(&pool->full, 1, memory_order_relaxed);
    atomic_store_explicit(&slot->state, SNAPPROF__SLOT_FREE, memory_order_release);
}

/* A mapping of size bytes faulted in now (MAP_POPULATE), so that the
 * handler's first copy into it takes no page faults; or NULL.
 *
 * Measured on these VMs (nested virtualization, stop 37): that is not the
 * whole cost. The first write to each new page still costs 6-7 us (the
 * hypervisor's fault), so the handler's first 1.3 MiB copy into a new
 * buffer takes 2.6 ms against 40 us for the next; in bench_deep's 0.8 s
 * run those first copies (one per buffer, 10-20 buffers) make the p99
 * pause 3-4 ms, where the 8 s run's is 150-300 us. Two remedies were
 * tried and dropped: writing every page here (3 ms a buffer on the
 * sampling thread) left the buffers late and 10-25 % of the first
 * second's captures truncated (complete 0.71-0.84), and warming them
 * afterwards, with the handler taking warm ones first, measured no
 * different from this side by side.
 *
 * Under load (stop 41, load average 11-22 on 2 cores, the test at nice
 * 19), trigger_deep_stacks_two_threads' ramp (first 1000 samples) was
 * 0.949-0.990 complete in 10 runs, and most truncated copies (0-94 of
 * 10-119 a run) were counted as refused by the budget: captures hold
 * their 1.6 MiB buffers until the late drainer gets to them, and the two
 * threads asked for 30 buffers (47 MiB, the large buffers' share of the
 * default 64 MiB). Lifting the budget to 256 MiB (6 runs) removed those
 * refusals and made the ramp worse, 0.815-0.988 (up to 64 buffers, 100
 * MiB, each new one mapped and populated on a loaded sampling thread and
 * first written in a handler), as stop 38 saw on a quiet machine. So the
 * budget only names the loss: what is short in the ramp is buffers that
 * are ready, and making more new memory makes fewer of them ready.
 *
 * Stop 43 (load 6-39, other sessions' builds and tests): a mapping made
 * here and then copied into twice (1.3 MiB) took 52-124 us for the first
 * copy and 56-79 us for the second, so the first-write cost above was not
 * seen that day. One list of buffers for the pool (a second deep thread
 * takes the first one's, written ones first, each thread's of its own
 * size) did not measurably mend the ramp: 20 runs each, interleaved with
 * the per-thread buffers of 53199a1, bench_deep's 0.8 s run was complete
 * >= 0.95 in 16 of 20 (0.807-0.997) against 14 of 20 (0.794-0.989), and
 * the test's first 1000 samples in 12 of 20 (0.841-0.995) against 11 of
 * 20 (0.815-0.990). Most cut copies were counted against the budget:
 * every buffer (29 of 1.6 MiB) held by captures that a sampling thread
 * starved for 20-60 ms had not yet unwound; the rest are the captures
 * before the sampling thread first saw how deep the thread is. */
static uint8_t *map_large(size_t size)
{
    if (snapprof__fault(SNAPPROF__FAULT_MMAP))
        return NULL;
    void *buf =
        mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    return buf == MAP_FAILED ? NULL : buf;
}

static void add_large_bytes(snapprof__capture_pool_t *pool, size_t add, size_t sub)
{
    pool->large_bytes = pool->large_bytes - sub + add;
    if (pool->large_bytes > pool->large_bytes_max)
        pool->large_bytes_max = pool->large_bytes;
}

/* Unmaps l's buffer (held, or no handler can reach the pool). */
static void unmap_large(snapprof__capture_pool_t *pool, snapprof__large_buffer_t *l)
{
    munmap(l->buf, l->size);
    pool->large_bytes -= l->size;
    l->buf = NULL;
    l->size = 0;
}

/* Holds l for the sampling side, or returns 0 when a capture has it. */
static int hold_large(snapprof__large_buffer_t *l)
{
    uint32_t idle = 0;
    return atomic_compare_exchange_strong_explicit(&l->busy, &idle, 1, memory_order_acquire,
                                                   memory_order_relaxed);
}

static void unhold_large(snapprof__large_buffer_t *l)
{
    atomic_store_explicit(&l->busy, 0, memory_order_release);
}

void snapprof__capture_target_plan(snapprof__capture_pool_t *pool,
                                   snapprof__capture_target_t *target)
{
    /* What the captures drained after this provisioning were taken under;
     * a thread whose copies fit a slot was never refused a buffer. */
    size_t deepest = atomic_load_explicit(&target->deepest, memory_order_relaxed);
    target->large_refused = deepest > pool->slot_bytes && pool->large_refused;
    if (deepest <= pool->slot_bytes)
        return;
    /* What a copy of this thread can be at most: the copy limit, and its
     * stack's size. */
    size_t limit = pool->copy_max ? page_round(pool->copy_max) : SIZE_MAX;
    if (target->stack_base > target->stack_low &&
        page_round(target->stack_base - target->stack_low) < limit)
        limit = page_round(target->stack_base - target->stack_low);
    size_t need = deepest < limit ? deepest : limit;
    /* A quarter more than its deepest, so that a thread that goes a little
     * deeper does not need new buffers at once. */
    size_t size = page_round(need + need / 4);
    if (size > limit)
        size = limit;
    uint64_t shorts = atomic_load_explicit(&target->large_short, memory_order_relaxed);
    if (target->large_want == 0) {
        target->large_want = SNAPPROF__TARGET_LARGE_FIRST;
    } else if (shorts != target->large_short_seen && pool->large_ready) {
        /* Its captures found every buffer in use (the drainer was late),
         * not merely some not yet made: half as many again. */
        target->large_want += (target->large_want + 1) / 2;
        if (target->large_want > SNAPPROF__TARGET_LARGE_MAX)
            target->large_want = SNAPPROF__TARGET_LARGE_MAX;
    }
    target->large_short_seen = shorts;
    /* Into the class whose buffers would fit it and be no more than a
     * quarter too large (one size serves both), else a class of its own,
     * else (every class taken) the deepest one. */
    uint32_t c = 0;
    while (c < pool->plan_count && !(pool->plan[c].size >= need && size >= pool->plan[c].need))
        c++;
    if (c == pool->plan_count) {
        if (c < SNAPPROF__PLAN_CLASSES) {
            pool->plan_count++;
            pool->plan[c].want = 0;
            pool->plan[c].need = pool->plan[c].size = 0;
        } else {
            for (uint32_t i = c = 0; i < pool->plan_count; i++)
                if (pool->plan[i].size > pool->plan[c].size)
                    c = i;
        }
    }
    pool->plan[c].want += target->large_want;
    if (need > pool->plan[c].need)
        pool->plan[c].need = need;
    if (size > pool->plan[c].size)
        pool->plan[c].size = size;
}

int snapprof__capture_pool_provision(snapprof__capture_pool_t *pool, size_t budget)
{
    /* The classes, deepest first (a few: insertion sort). */
    uint32_t classes = pool->plan_count;
    pool->plan_count = 0;
    for (uint32_t i = 1; i < classes; i++)
        for (uint32_t k = i; k > 0 && pool->plan[k].need > pool->plan[k - 1].need; k--) {
            snapprof__plan_class_t t = pool->plan[k];
            pool->plan[k] = pool->plan[k - 1];
            pool->plan[k - 1] = t;
        }
    uint32_t count = atomic_load_explicit(&pool->large_count, memory_order_relaxed);
    if (classes == 0 && count == 0) {
        pool->large_refused = 0;
        pool->large_ready = 1;
        return 0; /* no deep thread: the common case, nothing to look at */
    }
    /* Each class takes the buffers there that fit it, up to its count,
     * deepest class first, those in use first (they cannot be given back
     * now anyway); wanted[c] is then what it still lacks. */
    uint8_t taken[SNAPPROF__POOL_LARGE_MAX] = {0};
    uint32_t wanted[SNAPPROF__PLAN_CLASSES], total = 0;
    for (uint32_t c = 0; c < classes; c++) {
        uint32_t want = pool->plan[c].want;
        if (want > SNAPPROF__POOL_LARGE_MAX - total)
            want = SNAPPROF__POOL_LARGE_MAX - total;
        total += want;
        for (int in_use = 1; in_use >= 0; in_use--)
            for (uint32_t i = 0; i < count && want > 0; i++) {
                const snapprof__large_buffer_t *l = &pool->large[i];
                if (!taken[i] && l->buf && l->size >= pool->plan[c].need &&
                    (!in_use || atomic_load_explicit(&l->busy, memory_order_relaxed) != 0)) {
                    taken[i] = 1;
                    want--;
                }
            }
        wanted[c] = want;
    }
    /* Free ones no class took are given back, so that their bytes can go
     * to the buffers lacking; one in use waits for a later call. */
    for (uint32_t i = 0; i < count; i++) {
        snapprof__large_buffer_t *l = &pool->large[i];
        if (taken[i] || !l->buf || !hold_large(l))
            continue;
        unmap_large(pool, l);
        unhold_large(l);
    }
    /* Then new ones, deepest class first: into entries given back, then
     * new entries. */
    int rc = 0, refused = 0, ready = 1;
    uint32_t next = 0;
    for (uint32_t c = 0; c < classes && rc == 0; c++) {
        /* A class refused by the budget does not stop a shallower one,
         * whose smaller buffers may still fit. */
        size_t size = pool->plan[c].size;
        int class_refused = 0;
        while (wanted[c] > 0 && rc == 0 && !class_refused) {
            while (next < count && pool->large[next].buf)
                next++;
            if (next >= SNAPPROF__POOL_LARGE_MAX)
                break;
            snapprof__large_buffer_t *l = &pool->large[next];
            int fresh = next >= count;
            /* An entry given back may be held by a handler looking at it
             * (it finds no buffer there and lets go): a later call. */
            if (!fresh && !hold_large(l)) {
                next++;
                continue;
            }
            uint8_t *buf = NULL;
            if (pool->large_bytes + size > budget)
                class_refused = refused = 1;
            else if (!(buf = map_large(size)))
                rc = -ENOMEM;
            if (buf) {
                add_large_bytes(pool, size, 0);
                l->buf = buf;
                l->size = size;
                wanted[c]--;
            }
            if (fresh) {
                if (!buf)
                    break; /* no entry to show the handler */
                atomic_store_explicit(&l->busy, 0, memory_order_relaxed);
                /* Filled before the handler can see it. */
                atomic_store_explicit(&pool->large_count, next + 1, memory_order_release);
                count = next + 1;
            } else {
                unhold_large(l);
            }
        }
        ready &= wanted[c] == 0;
    }
    for (uint32_t c = 0; c < classes; c++)
        ready &= wanted[c] == 0;
    pool->large_refused = refused;
    pool->large_ready = ready;
    return rc;
}

void snapprof__capture_target_free_large(snapprof__capture_pool_t *pool,
                                         snapprof__capture_target_t *target)
{
    (void)pool;
    target->large_want = 0;
    target->large_short_seen = 0;
    atomic_store_explicit(&target->deepest, 0, memory_order_relaxed);
    atomic_store_explicit(&target->large_short, 0, memory_order_relaxed);
}
