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

/* Defined in thread_posix.c: the token registered on this thread. */
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
        pool->slots[i].large = -1;
        pool->slots[i].extra = pool->extra ? pool->extra + i * pool->extra_size : NULL;
    }
    pool->kick = (_Atomic uint32_t *)kick;
    pool->kick_at = (uint32_t)(slot_count / 2 > 0 ? slot_count / 2 : 1);
    return 0;
}

void snapprof__capture_pool_destroy(snapprof__capture_pool_t *pool)
{
    for (int i = 0; i < SNAPPROF__LARGE_MAX; i++)
        if (pool->large[i].buf)
            munmap(pool->large[i].buf, pool->large[i].size);
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

/* Takes a free large buffer of at least size bytes, or returns -1. Each is
 * looked at only while held, since the sampling side replaces them under
 * the same flag. Async-signal-safe. */
static int take_large(snapprof__capture_pool_t *pool, size_t size)
{
    for (int i = 0; i < SNAPPROF__LARGE_MAX; i++) {
        snapprof__large_buffer_t *l = &pool->large[i];
        uint32_t idle = 0;
        if (!atomic_compare_exchange_strong_explicit(&l->busy, &idle, 1, memory_order_acquire,
                                                     memory_order_relaxed))
            continue;
        if (l->buf && size <= l->size)
            return i;
        atomic_store_explicit(&l->busy, 0, memory_order_release);
    }
    return -1;
}

/* Copies [lo, lo + size) into the slot's own buffer or, when it does not
 * fit, into a free large buffer; else the innermost slot_bytes, marked
 * truncated, leaving the size it needed for the sampling thread.
 * Async-signal-safe. */
static void copy_stack(snapprof__capture_pool_t *pool, snapprof__capture_slot_t *slot, uintptr_t lo,
                       size_t size)
{
    slot->buffer = pool->memory + (size_t)(slot - pool->slots) * pool->slot_bytes;
    slot->large = -1;
    slot->res.truncated = 0;
    if (size > pool->slot_bytes) {
        int i = take_large(pool, size);
        if (i >= 0) {
            slot->large = i;
            slot->buffer = pool->large[i].buf;
        } else {
            if (size > atomic_load_explicit(&pool->large_wanted, memory_order_relaxed))
                atomic_store_explicit(&pool->large_wanted, size, memory_order_relaxed);
            size = pool->slot_bytes;
            slot->res.truncated = 1;
        }
    }
    snapprof__copy_live_stack(slot->buffer, (const uint8_t *)lo, size);
    slot->res.copy_lo = lo;
    slot->res.copy_size = size;
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
    if (sp < low || sp >= base) {
        /* On a goroutine's stack, a fiber, a coroutine or a sigaltstack:
         * a window of it, as far as it can be read, into the slot's own
         * buffer (never a large one: where it ends is not known). */
        slot->buffer = pool->memory + (size_t)(slot - pool->slots) * pool->slot_bytes;
        slot->large = -1;
        if (snapprof__copy_foreign_stack(sp, slot->buffer, pool->slot_bytes, &slot->res) != 0) {
            slot->fail = SNAPPROF_FAIL_SP_OUT_OF_RANGE;
            publish(pool, slot);
            return -1;
        }
    } else {
        uintptr_t lo = sp >= low + SNAPPROF_RED_ZONE ? sp - SNAPPROF_RED_ZONE : low;
        lo &= ~(uintptr_t)(SNAPPROF_STACK_ALIGN - 1);
        if (lo < low)
            lo = low;
        copy_stack(pool, slot, lo, base - lo);
    }
    if (pool->delegate)
        pool->delegate->on_capture(pool->delegate->ctx, slot->extra);
    slot->res.pause_ns = snapprof__monotonic_ns() - entry_ns;
    /* Read before publishing: after it the slot is the drainer's. */
    int used_large = slot->large >= 0;
    publish(pool, slot);
    if (used_large)
        kick(pool); /* large buffers are few: have them drained soon */
    return 0;
}

void snapprof__capture_slot_release(snapprof__capture_pool_t *pool, snapprof__capture_slot_t *slot)
{
    if (slot->large >= 0)
        atomic_store_explicit(&pool->large[slot->large].busy, 0, memory_order_release);
    slot->large = -1;
    slot->target = NULL;
    slot->buffer = NULL;
    atomic_fetch_sub_explicit(&pool->full, 1, memory_order_relaxed);
    atomic_store_explicit(&slot->state, SNAPPROF__SLOT_FREE, memory_order_release);
}

int snapprof__capture_pool_grow(snapprof__capture_pool_t *pool, size_t max_bytes, size_t budget)
{
    size_t wanted = atomic_exchange_explicit(&pool->large_wanted, 0, memory_order_relaxed);
    if (wanted == 0)
        return 0;
    /* A quarter more than asked, so a stack that grows a little does not
     * ask again at once; never more than the copy limit. */
    size_t size = page_round(wanted + wanted / 4);
    if (size > page_round(max_bytes))
        size = page_round(max_bytes);
    for (int i = 0; i < SNAPPROF__LARGE_MAX; i++) {
        snapprof__large_buffer_t *l = &pool->large[i];
        uint32_t idle = 0;
        if (!atomic_compare_exchange_strong_explicit(&l->busy, &idle, 1, memory_order_acquire,
                                                     memory_order_relaxed))
            continue;
        int grew = 0;
        if (l->size < wanted && pool->large_bytes - l->size + size <= budget) {
            uint8_t *buf = snapprof__fault(SNAPPROF__FAULT_MMAP)
                               ? MAP_FAILED
                               : mmap(NULL, size, PROT_READ | PROT_WRITE,
                                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            if (buf == MAP_FAILED) {
                grew = -ENOMEM;
            } else {
                if (l->buf)
                    munmap(l->buf, l->size);
                pool->large_bytes = pool->large_bytes - l->size + size;
                l->buf = buf;
                l->size = size;
                grew = 1;
            }
        }
        atomic_store_explicit(&l->busy, 0, memory_order_release);
        if (grew)
            return grew;
    }
    return 0;
}
